"""The WAP re-run check (#15): one catalog read + the pure plan, as the write task runs it.

On a fresh SQLite catalog, a table gets ``--days`` daily publishes (pyiceberg appends stamped
with the Airflow identity a WAP write stamps, plus unrelated commits in between), then the
check of ``_wap_rerun.plan_rerun`` (``operators.wap_write.plan_rerun_from_catalog``: load the
table once, walk ``main``'s history) is timed for an interval published long ago, the latest
one and one never published, in a warm process (what a running task pays). Prints p50/p95 in
milliseconds, with the table load alone beside it (the catalog read the check is made of), and
the one thing a replace adds to a first run besides the same Spark write and audit: the
metadata-only commit removing the earlier publish's files from the branch.

Usage: ``source scripts/env.sh && python -m bench.rerun_check [--days 200] [--reps 30]``
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
TABLE = "bench.orders"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def context(day: datetime) -> dict:
    ti = SimpleNamespace(dag_id="daily", run_id=f"scheduled__{day.date()}", task_id="load.write", try_number=1)
    return {"ti": ti, "logical_date": day, "data_interval_start": day, "data_interval_end": day + timedelta(days=1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=200)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.wap_write import plan_rerun_from_catalog
    from airflow_iceberg_provider.rules import wap_rerun as rl
    from tests.support.lake import catalog_conn_json, create_orders_table, orders_batch

    tmp = Path(tempfile.mkdtemp(prefix="bench_rerun_"))
    (tmp / "wh").mkdir()
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp / "c.db", tmp / "wh")
    hook = IcebergCatalogHook()
    create_orders_table(hook, TABLE)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(args.days):
        day = start + timedelta(days=i)
        props = rl.summary_properties(rl.RunIdentity.from_context(context(day)))
        hook.load_table(TABLE).append(orders_batch(i * 10, 10, day.date().isoformat()), snapshot_properties=props)
        if i % 4 == 0:  # someone else's commit in between
            hook.load_table(TABLE).append(orders_batch(1_000_000 + i, 1, day.date().isoformat()))
    snapshots = len(hook.list_snapshots(TABLE))
    cases = {
        "oldest day (walks the whole history)": start,
        "latest day": start + timedelta(days=args.days - 1),
        "never published (first run)": start + timedelta(days=args.days + 5),
    }
    print(f"table with {snapshots} snapshots ({args.days} published days), {args.reps} reps, warm process")
    loads = []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        hook.load_table(TABLE)
        loads.append((time.perf_counter() - t0) * 1000)
    print(f"  catalog read alone (load_table):      p50 {pct(loads, 0.5):6.1f} ms  p95 {pct(loads, 0.95):6.1f} ms")
    for label, day in cases.items():
        ident = rl.RunIdentity.from_context(context(day))
        times, action = [], None
        for _ in range(args.reps):
            _, plan, ms = plan_rerun_from_catalog(hook, TABLE, ident, "replace")
            times.append(ms)
            action = plan.action
        print(f"  check, {label:<38} p50 {pct(times, 0.5):6.1f} ms  p95 {pct(times, 0.95):6.1f} ms  -> {action}")
    # what a replace adds to a first run (besides the same Spark write and audit): the removal commit

    ident = rl.RunIdentity.from_context(context(start + timedelta(days=args.days // 2)))
    removals = []
    for i in range(min(args.reps, 10)):
        tbl, plan, _ = plan_rerun_from_catalog(hook, TABLE, ident, "replace")
        hook.set_ref(tbl, f"redo{i}", hook.ref_snapshot_id(tbl))
        t0 = time.perf_counter()
        hook.remove_files_on_branch(hook.load_table(TABLE), f"redo{i}", plan.remove_snapshot_ids, {})
        removals.append((time.perf_counter() - t0) * 1000)
    print(
        f"  replace by files: removal commit on the branch  p50 {pct(removals, 0.5):6.1f} ms  p95 {pct(removals, 0.95):6.1f} ms"
    )


if __name__ == "__main__":
    main()
