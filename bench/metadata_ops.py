"""Metadata operations through the catalog hook vs the same operation as a spark-submit.

Measured side by side in one run on one fresh SQLite catalog:

* create tag, create branch, rollback, commit check through ``IcebergCatalogHook``
  (pyiceberg, warm process: what an Airflow task does after it started), plus the
  full ``IcebergCreateTagOperator.execute`` (load, CAS commit, verification re-read,
  governance-ledger append);
* the same operation as one spark-submit running Iceberg SQL
  (``ALTER TABLE … CREATE TAG/BRANCH``, ``CALL system.rollback_to_snapshot``, a
  ``.snapshots`` metadata query), submitted through ``IcebergSparkHook`` exactly as
  the provider submits its jobs.

Prints p50/p95 per operation and the ratio of the p50s (goal: ≥ 20×).

Usage: ``source scripts/env.sh && python -m bench.metadata_ops [--hook-reps 50] [--spark-reps 3] [--no-spark]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
CONN_ID = "bench_refs"
TABLE = "bench.orders"
JOB = Path(__file__).resolve().parent / "jobs" / "refs_sql.py"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if len(values) == 1:
        return values[0]
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def setup_lake(work: Path) -> None:
    (work / "wh").mkdir(parents=True, exist_ok=True)
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "host": f"sqlite:///{work / 'catalog.db'}",
            "extra": {"catalog_type": "sql", "catalog_name": "lakehouse", "warehouse": f"file://{work / 'wh'}"},
        }
    )


def make_table(hook) -> list[int]:
    from tests.support.lake import create_orders_table, orders_batch

    create_orders_table(hook, TABLE)
    ids = []
    for i in range(5):
        props = {"bench.marker": "x"} if i == 3 else {}
        hook.load_table(TABLE).append(orders_batch(i * 100, 100), snapshot_properties=props)
        ids.append(hook.ref_snapshot_id(TABLE))
    return ids


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def hook_side(hook, snaps: list[int], reps: int) -> dict[str, list[float]]:
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator

    head, prev = snaps[-1], snaps[-2]
    out: dict[str, list[float]] = {k: [] for k in ("create tag", "create branch", "rollback", "commit check")}
    out["create tag (operator + ledger)"] = []
    ti = SimpleNamespace(dag_id="bench", run_id="r", task_id="tag", try_number=1, map_index=-1)
    ctx = {"ti": ti, "task_instance": ti, "run_id": "r"}
    hook.governance.table("ledger")
    for i in range(reps):
        out["create tag"].append(timed(lambda i=i: hook.create_tag(TABLE, f"h_tag_{i}", snapshot_id=head)))
        out["create branch"].append(
            timed(lambda i=i: hook.create_branch(TABLE, f"h_br_{i}", snapshot_id=head, min_snapshots_to_keep=3))
        )
        out["rollback"].append(timed(lambda: hook.rollback(TABLE, to_snapshot_id=prev)))
        hook.set_ref(TABLE, "main", head)  # untimed: put main back for the next rollback
        out["commit check"].append(
            timed(lambda: hook.find_snapshots(TABLE, ref="main", operation="append", summary={"bench.marker": "x"}))
        )
        op = IcebergCreateTagOperator(
            task_id="tag", table=TABLE, tag=f"op_tag_{i}", iceberg_catalog_conn_id=CONN_ID, max_ref_age="P30D"
        )
        out["create tag (operator + ledger)"].append(timed(lambda op=op: op.execute(ctx)))
    # correctness of what was timed
    refs = hook.refs(TABLE)
    assert refs[f"h_tag_{reps - 1}"].snapshot_id == head and refs[f"h_br_{reps - 1}"].type == "branch"
    assert hook.ref_snapshot_id(TABLE) == head
    return out


def spark_side(hook, snaps: list[int], reps: int) -> dict[str, list[float]]:
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

    spark = IcebergSparkHook(CONN_ID, catalog_hook=hook)
    head, prev = snaps[-1], snaps[-2]
    t = f"lakehouse.{TABLE}"
    ops = {
        "create tag": lambda i: [{"sql": f"ALTER TABLE {t} CREATE TAG `s_tag_{i}` AS OF VERSION {head}"}],
        "create branch": lambda i: [
            {
                "sql": f"ALTER TABLE {t} CREATE BRANCH `s_br_{i}` AS OF VERSION {head} "
                "WITH SNAPSHOT RETENTION 3 SNAPSHOTS"
            }
        ],
        "rollback": lambda i: [
            {
                # the Iceberg procedure parser takes no parameter markers: constants only (int + fixed name)
                "sql": f"CALL lakehouse.system.rollback_to_snapshot(table => '{TABLE}', snapshot_id => {int(prev)})",
            }
        ],
        "commit check": lambda i: [
            {
                "sql": f"SELECT snapshot_id FROM {t}.snapshots WHERE operation = :op AND summary[:k] = :v",
                "args": {"op": "append", "k": "bench.marker", "v": "x"},
            }
        ],
    }
    out: dict[str, list[float]] = {k: [] for k in ops}
    for i in range(reps):
        for name, build in ops.items():
            plan = spark.plan(JOB, spec={"job": "bench_refs_sql", "statements": build(i)}, name=f"bench-{name}")
            t0 = time.perf_counter()
            spark.submit(plan)
            out[name].append(time.perf_counter() - t0)
            print(f"  spark {name} #{i + 1}: {out[name][-1]:.1f}s", flush=True)
            if name == "rollback":
                assert hook.ref_snapshot_id(TABLE) == prev, "Spark rollback did not land"
                hook.set_ref(TABLE, "main", head)
    refs = hook.refs(TABLE)
    assert refs[f"s_tag_{reps - 1}"].snapshot_id == head and refs[f"s_br_{reps - 1}"].min_snapshots_to_keep == 3
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hook-reps", type=int, default=50)
    parser.add_argument("--spark-reps", type=int, default=3)
    parser.add_argument("--no-spark", action="store_true")
    args = parser.parse_args()
    base = Path(os.environ.get("AIP_WORK", ROOT / ".work")) / "bench"
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="metadata_ops-", dir=base))
    setup_lake(work)
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook(CONN_ID)
    snaps = make_table(hook)
    print(f"lake: {work}; table {TABLE} with {len(snaps)} snapshots", flush=True)
    hook_times = hook_side(hook, snaps, args.hook_reps)
    spark_times = {} if args.no_spark else spark_side(hook, snaps, args.spark_reps)
    print()
    print(f"{'operation':32} {'hook p50':>10} {'hook p95':>10} {'spark p50':>10} {'spark p95':>10} {'ratio p50':>10}")
    worst = None
    for name, values in hook_times.items():
        h50, h95 = pct(values, 0.5), pct(values, 0.95)
        sv = spark_times.get(name.replace(" (operator + ledger)", ""))
        if sv:
            s50, s95 = pct(sv, 0.5), pct(sv, 0.95)
            ratio = s50 / h50
            worst = ratio if worst is None else min(worst, ratio)
            print(f"{name:32} {h50 * 1000:8.1f}ms {h95 * 1000:8.1f}ms {s50:9.2f}s {s95:9.2f}s {ratio:9.0f}x")
        else:
            print(f"{name:32} {h50 * 1000:8.1f}ms {h95 * 1000:8.1f}ms")
    print(f"(hook: {args.hook_reps} reps each in a warm process; spark: {args.spark_reps} spark-submits each)")
    if worst is not None:
        print(
            f"smallest speed-up (p50, incl. operator+ledger): {worst:.0f}x  -> goal >= 20x: {'met' if worst >= 20 else 'NOT met'}"
        )
        return 0 if worst >= 20 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
