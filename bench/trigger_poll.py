"""Event triggers: idle poll cost on 10 vs 5,000 snapshots, and commit -> DAG run latency.

1. **Poll cost.** What each asset-watcher trigger does on every poll while nothing changed, run
   exactly as ``run()`` runs it (the blocking part, in the calling thread here):
   ``IcebergCommitEventTrigger._poll`` (``poll_commit`` with the last pointer),
   ``IcebergTableHealthEventTrigger._evaluate`` and ``IcebergErasureDeadlineEventTrigger._read``
   (pointer read, nothing else). Tables: the same cached 10- and 5,000-snapshot tables as
   ``bench/sensor_poll.py``. Goal: p50(5,000) / p50(10) <= 1.5 for every trigger. For
   comparison, one *changed* poll of each (what a commit costs the trigger) is timed too.
2. **Latency.** A real ``airflow triggerer`` + ``airflow scheduler`` on an isolated AIRFLOW_HOME
   with the demo's settings (``example_dags/example_iceberg_events.py``, poll interval 1 s):
   pyiceberg appends to ``events.orders``; measured from the commit (its Iceberg timestamp) to
   the asset event row and to the DAG run row of ``iceberg_events_consumer``.

Usage: ``source scripts/env.sh && python -m bench.trigger_poll [--polls 300] [--commits 5] [--no-latency]``
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from bench.sensor_poll import connect, ensure_table, pct  # noqa: E402


def idle_costs(hook, table: str, polls: int) -> dict[str, list[float]]:
    from airflow_iceberg_provider.triggers.commit_events import IcebergCommitEventTrigger
    from airflow_iceberg_provider.triggers.erasure_events import IcebergErasureDeadlineEventTrigger
    from airflow_iceberg_provider.triggers.health_events import IcebergTableHealthEventTrigger

    commit = IcebergCommitEventTrigger(table=table, iceberg_catalog_conn_id=hook.iceberg_catalog_conn_id)
    health = IcebergTableHealthEventTrigger(table=table, iceberg_catalog_conn_id=hook.iceberg_catalog_conn_id)
    deadline = IcebergErasureDeadlineEventTrigger(
        requests_table=table, iceberg_catalog_conn_id=hook.iceberg_catalog_conn_id
    )
    mark = commit._start_mark(hook)
    known = commit._poll(hook, mark, None)["metadata_location"]  # the first poll loads once
    polls_by_kind = {
        "commit (poll_commit)": lambda: commit._poll(hook, mark, known),
        "health (pointer read)": lambda: health._evaluate(hook, known),
        "deadline (pointer read)": lambda: deadline._read(hook, known),
    }
    gc.collect()
    out: dict[str, list[float]] = {}
    for kind, fn in polls_by_kind.items():
        times = []
        for _ in range(polls):
            t0 = time.perf_counter()
            res = fn()
            times.append(time.perf_counter() - t0)
        assert res is None or (isinstance(res, tuple) and res[1] is None) or not res.get("loaded"), res
        out[kind] = times
    return out


def changed_costs(hook, table: str) -> dict[str, float]:
    """One poll right after the pointer moved (the trigger re-reads what it needs)."""
    from airflow_iceberg_provider.triggers.commit_events import IcebergCommitEventTrigger
    from airflow_iceberg_provider.triggers.health_events import maintenance_verdict

    commit = IcebergCommitEventTrigger(table=table, iceberg_catalog_conn_id=hook.iceberg_catalog_conn_id)
    mark = commit._start_mark(hook)
    t0 = time.perf_counter()
    commit._poll(hook, mark, None)
    t1 = time.perf_counter()
    maintenance_verdict(hook, table)
    t2 = time.perf_counter()
    return {"commit (changed, no match)": t1 - t0, "health (changed: verdict)": t2 - t1}


def poll_bench(args: argparse.Namespace) -> bool:
    work = Path(os.environ.get("AIP_WORK", ROOT / ".work")) / "bench" / "sensor_poll"
    hook = connect(work)
    small, big = "poll.small", f"poll.big_{args.snapshots}"
    ensure_table(hook, small, 10, "appends")
    ensure_table(hook, big, args.snapshots, "history")
    results: dict[str, dict[str, list[float]]] = {small: {}, big: {}}
    for _ in range(5):  # alternate so machine noise hits both alike
        for table in (small, big):
            for kind, times in idle_costs(hook, table, args.polls // 5).items():
                results[table].setdefault(kind, []).extend(times)
    print(f"\n{'idle poll':28} {'10 snaps p50':>13} {f'{args.snapshots} snaps p50':>16} {'ratio':>7}  goal <= 1.5")
    ok = True
    for kind in results[small]:
        a, b = statistics.median(results[small][kind]), statistics.median(results[big][kind])
        ok &= b / a <= 1.5
        print(
            f"{kind:28} {a * 1000:10.3f}ms {b * 1000:13.3f}ms {b / a:6.2f}x  {'met' if b / a <= 1.5 else 'NOT met'}"
            f"  (p95 {pct(results[small][kind], 0.95) * 1000:.3f} / {pct(results[big][kind], 0.95) * 1000:.3f} ms)"
        )
    costs = {t: changed_costs(hook, t) for t in (small, big)}
    for kind in costs[small]:
        print(f"{kind:28} {costs[small][kind] * 1000:10.1f}ms {costs[big][kind] * 1000:13.1f}ms  (once per commit)")
    return ok


def latency_bench(commits: int) -> None:
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from scripts.events_demo import AirflowProcesses, append, create_table, wait_for
    from tests.support.lake import catalog_conn_json

    tmp = Path(tempfile.mkdtemp(prefix="trigger_latency_"))
    try:
        home, dags = tmp / "airflow", tmp / "dags"
        home.mkdir()
        dags.mkdir()
        shutil.copy(Path(os.environ["AIRFLOW_HOME"]) / "airflow.db", home / "airflow.db")
        shutil.copy(ROOT / "example_dags" / "example_iceberg_events.py", dags)
        (tmp / "wh").mkdir()
        conn = catalog_conn_json(tmp / "c.db", tmp / "wh")
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = conn
        env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
        env.update(AIP_EVENTS_POLL_SECONDS="1", AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False")
        hook = IcebergCatalogHook()
        create_table(hook, "events.orders")
        append(hook, "events.orders", 0, 5)
        af = AirflowProcesses(env, tmp / "logs")
        af.cli("dags", "reserialize")
        try:
            af.start("scheduler")
            af.start("triggerer")
            wait_for("the commit watcher", lambda: any("commit" in k for k in af.state_store()), 180)
            to_event, to_run, to_start = [], [], []
            for i in range(commits):
                n_runs = len(af.dag_runs("iceberg_events_consumer"))
                sid = append(hook, "events.orders", 100 * (i + 1), 5)
                ts = hook.snapshot("events.orders", snapshot_id=int(sid)).timestamp_ms / 1000
                event = wait_for(
                    "the asset event",
                    lambda sid=sid: [
                        e for e in af.asset_events("iceberg_commits.") if e["extra"]["payload"]["snapshot_id"] == sid
                    ],
                    60,
                )[0]
                run = wait_for(
                    "the DAG run to start",
                    lambda n=n_runs: [r for r in af.dag_runs("iceberg_events_consumer")[n:] if r["start_date"]],
                    120,
                )[0]
                to_event.append(_epoch(event["timestamp"]) - ts)
                to_run.append(_epoch(run["queued_at"]) - ts)
                to_start.append(_epoch(run["start_date"]) - ts)
                time.sleep(2)
        finally:
            af.stop_all()
        print(
            f"\ncommit -> asset event (triggerer, poll 1 s): p50 {statistics.median(to_event):.2f}s "
            f"max {max(to_event):.2f}s over {commits} commits"
        )
        print(
            f"commit -> DAG run queued (scheduler):       p50 {statistics.median(to_run):.2f}s "
            f"max {max(to_run):.2f}s  (runs: {len(af.dag_runs('iceberg_events_consumer'))})"
        )
        print(
            f"commit -> DAG run started (running):       p50 {statistics.median(to_start):.2f}s "
            f"max {max(to_start):.2f}s"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _epoch(value: object) -> float:
    ts = datetime.fromisoformat(str(value).replace(" ", "T"))
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).timestamp()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--snapshots", type=int, default=5000)
    parser.add_argument("--polls", type=int, default=300)
    parser.add_argument("--commits", type=int, default=5)
    parser.add_argument("--no-latency", action="store_true", help="skip the triggerer/scheduler part")
    args = parser.parse_args()
    ok = poll_bench(args)
    if not args.no_latency:
        latency_bench(args.commits)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
