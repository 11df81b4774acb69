"""Per-task wall time: spark-submit vs Spark Connect, for the same operators on the same data.

One run, one lake, one local Spark Connect server (``scripts/connect_server.py``, started
before the timed tasks: a long-running server is the point of the mode). Each task is the
operator's ``execute()`` as a worker runs it (plan, job, commit verification), timed end to end:

* **audit**: ``IcebergWapAuditOperator`` of a branch that appended a 1,000-row change set
  (``--audit-rows``) to ``--base-rows`` published rows (goal: Connect >= 10x faster);
* **cherry-pick publish**: ``IcebergWapPublishOperator(on_conflict="cherrypick")`` after ``main``
  moved (goal: Connect >= 10x faster);
* **logical erasure** of 10 subjects (``--subjects``) on a 1,000,000-row table (``--erasure-rows``);
* with ``--demo``: ``make demo``'s wall time (``scripts/demo.sh``) with ``AIP_DEMO_MODE=submit``
  and ``=connect`` (goal: Connect at most a third); the demo starts its own server, included.

  Results: ``docs/performance.md``, *Per-task overhead*.

Three sides run each task: when ``.spark-runtime-4.1`` exists, **Connect on Spark 4.1 with the
client inside the task process** (a second server, started from the 4.1 runtime; the bench process
itself is the client, through the Airflow environment's pyspark-client, or the one in
``--pyspark-client DIR`` on a machine whose environment is not yet pinned to 4.1); Connect on Spark
3.5 with a new client process (the Spark runtime's Python) per task; and spark-submit with the JVM
start-up options of ``scripts/env.sh``.

Each side gets fresh, identical tables, so every side does the same work. The sides run
round-robin: each ``--repeat`` runs every task once per side, the sides' order rotated by one per
repeat, so load that drifts during the run (a shared host) lands on every side alike. Printed per
task and side: the median and the min over the repeats, and the median's ratio to the in-task 4.1
client's; the load averages before and after each repeat.

Usage: ``source scripts/env.sh && python -m bench.spark_connect [--repeat 5] [--skip-erasure] [--demo]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SUBMIT_CONN = "bench_submit"
CONNECT_CONN = "bench_connect"
CONNECT41_CONN = "bench_connect41"
RUNTIME41 = ROOT / ".spark-runtime-4.1"
#: side -> the Spark connection its tasks use
SIDES = {
    "connect 4.1, in the task": CONNECT41_CONN,
    "connect 3.5, process per task": CONNECT_CONN,
    "spark-submit 3.5": SUBMIT_CONN,
}
#: the side every other side's ratio is taken against (the first one present when it is absent)
REFERENCE = "connect 4.1, in the task"
PORT = 19821
PORT41 = 19822


def load_pyspark_from(folder: Path) -> None:
    """Import the ``pyspark`` package of ``folder`` (e.g. ``pip install --target DIR pyspark-client==4.1.1``)
    as this process's ``pyspark``; its submodules follow the package's own path. The environment and
    ``sys.path`` stay as they are, so child processes (the 3.5 runners) keep their own pyspark."""
    import importlib.util

    init = folder / "pyspark" / "__init__.py"
    spec = importlib.util.spec_from_file_location("pyspark", init, submodule_search_locations=[str(init.parent)])
    if spec is None or spec.loader is None:
        raise SystemExit(f"--pyspark-client {folder}: no pyspark package there")
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyspark"] = module
    spec.loader.exec_module(module)


def start_server41(workdir: Path) -> object | None:
    """A Spark 4.1 Connect server from ``.spark-runtime-4.1`` (``None`` when that runtime is absent)."""
    from scripts import connect_server

    homes = sorted(RUNTIME41.glob("lib/python3*/site-packages/pyspark"))
    if not homes:
        return None
    jars = ",".join(str(j) for j in sorted((RUNTIME41 / "jars").glob("*.jar")))
    saved = {
        k: os.environ.get(k)
        for k in ("SPARK_HOME", "AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", "AIP_CONNECT_SERVER_JAVA_OPTIONS")
    }
    os.environ.update(
        SPARK_HOME=str(homes[0]),
        AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS=jars,
        AIP_CONNECT_SERVER_JAVA_OPTIONS="-XX:+UseSerialGC",  # the 3.5 runtime's archive does not fit 4.1's jars
    )
    try:
        return connect_server.start(PORT41, workdir=workdir, die_with_parent=True)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


CHECKS = {
    "column_mapping": {
        "amount": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}},
        "order_id": {"unique_check": {"equal_to": 0}},
    },
    "table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
}


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f}"


def timed(fn) -> tuple[float, object]:
    t0 = time.monotonic()
    out = fn()
    return time.monotonic() - t0, out


def audit_task(hook, table: str, rows: int, base_rows: int, conn: str) -> float:
    from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
    from tests.support.lake import create_orders_table, fake_context, orders_batch

    create_orders_table(hook, table, partition_by=()).append(orders_batch(0, base_rows))
    hook.set_ref(hook.load_table(table), "audit_branch", hook.ref_snapshot_id(table), ref_type="branch")
    hook.load_table(table).append(orders_batch(base_rows, rows), branch="audit_branch")
    op = IcebergWapAuditOperator(
        task_id=f"audit_{conn}", table=table, branch="audit_branch", spark_conn_id=conn, **CHECKS
    )
    seconds, out = timed(lambda: op.execute(fake_context(task_id=f"audit_{conn}")))
    assert out["passed"], out
    return seconds


def cherrypick_task(hook, table: str, conn: str) -> float:
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
    from tests.support.lake import create_orders_table, fake_context, orders_batch

    create_orders_table(hook, table, partition_by=()).append(orders_batch(0, 1000))
    hook.set_ref(hook.load_table(table), "cp_branch", hook.ref_snapshot_id(table), ref_type="branch")
    hook.load_table(table).append(orders_batch(1000, 100), branch="cp_branch")
    audited = hook.ref_snapshot_id(table, "cp_branch")
    hook.load_table(table).append(orders_batch(5000, 10))  # main moved: a fast-forward is impossible
    op = IcebergWapPublishOperator(
        task_id=f"publish_{conn}",
        table=table,
        branch="cp_branch",
        audit=_record_pass(hook, table, "cp_branch", audited),
        on_conflict="cherrypick",
        spark_conn_id=conn,
    )
    seconds, out = timed(lambda: op.execute(fake_context(task_id=f"publish_{conn}")))
    assert out["method"] == "cherrypick", out
    return seconds


def _record_pass(hook, table: str, branch: str, snapshot_id: int) -> dict:
    from tests.support.wap import record_audit

    return record_audit(hook, table, branch, snapshot_id, passed=True, event_id=f"bench-{table}")


def erasure_task(hook, table: str, rows: int, subjects: int, conn: str) -> float:
    import pyarrow as pa

    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
    from tests.support.erasure import add_requests, create_people_table, person
    from tests.support.lake import fake_context

    create_people_table(hook, table, partition_by=())
    step = 250_000
    for start in range(0, rows, step):
        n = min(step, rows - start)
        ids = list(range(start, start + n))
        hook.load_table(table).append(
            pa.table(
                {
                    "order_id": pa.array(ids, pa.int64()),
                    "customer_id": pa.array([person(i % 5000) for i in ids], pa.string()),
                    "amount": pa.array([1.0] * n, pa.float64()),
                    "order_ts": pa.array([1767225600_000000] * n, pa.timestamp("us", tz="UTC")),
                }
            )
        )
    requests = f"{table}_requests"
    add_requests(hook, requests, {f"B-{i}": person(i) for i in range(subjects)}, received_days_ago=1)
    op = IcebergErasureOperator(
        task_id=f"erase_{conn}",
        phase="logical",
        table=table,
        subject_columns="customer_id",
        requests_table=requests,
        spark_conn_id=conn,
    )
    seconds, out = timed(lambda: op.execute(fake_context(task_id=f"erase_{conn}")))
    assert out["verification"] == "verified", out
    return seconds


def demo_wall(mode: str) -> float:
    env = {**os.environ, "AIP_DEMO_MODE": mode, "AIP_WORK": str(ROOT / ".work" / f"bench-demo-{mode}")}
    env.pop("AIRFLOW_CONN_SPARK_DEFAULT", None)
    env.pop("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", None)
    env.pop("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", None)
    t0 = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["(no output)"]
    print(f"  demo ({mode}): rc={proc.returncode} in {seconds:.1f}s: {tail[0]}", flush=True)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audit-rows", type=int, default=1000)
    parser.add_argument("--base-rows", type=int, default=10_000)
    parser.add_argument("--erasure-rows", type=int, default=1_000_000)
    parser.add_argument("--subjects", type=int, default=10)
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds; each runs every task once per side, round-robin (median, min)"
    )
    parser.add_argument("--demo", action="store_true", help="also time make demo in both modes")
    parser.add_argument("--skip-erasure", action="store_true")
    parser.add_argument("--demo-only", action="store_true", help="time make demo in both modes, no small tasks")
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed rounds (an audit and a cherry-pick) on the fresh server first"
    )
    parser.add_argument(
        "--pyspark-client",
        default="",
        help="a folder holding pyspark-client 4.1 (pip install --target DIR), used by this process only",
    )
    args = parser.parse_args()
    if args.pyspark_client:  # this process only: the 3.5 runners and spark-submit keep their own pyspark
        load_pyspark_from(Path(args.pyspark_client))

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from scripts import connect_server
    from tests.support.erasure import set_salt_connection
    from tests.support.lake import catalog_conn_json

    print(f"load averages before: {load()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-connect-"))
    (tmp / "wh").mkdir()
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp / "catalog.db", tmp / "wh")
    os.environ[f"AIRFLOW_CONN_{SUBMIT_CONN.upper()}"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    set_salt_connection()
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    t0 = time.monotonic()
    server = connect_server.start(PORT, workdir=tmp / "connect", die_with_parent=True)
    print(f"Connect server ready in {time.monotonic() - t0:.1f}s (not counted per task)", flush=True)
    os.environ[f"AIRFLOW_CONN_{CONNECT_CONN.upper()}"] = server.conn_json(CONNECT_CONN)
    t0 = time.monotonic()
    server41 = start_server41(tmp / "connect41")
    if server41 is not None:
        print(f"Spark 4.1 Connect server ready in {time.monotonic() - t0:.1f}s (not counted per task)", flush=True)
        os.environ[f"AIRFLOW_CONN_{CONNECT41_CONN.upper()}"] = json.dumps(
            {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": PORT41, "extra": {"client": "in_process"}}
        )
    sides = [side for side, conn in SIDES.items() if conn != CONNECT41_CONN or server41 is not None]
    results: dict[str, dict[str, list[float]]] = {}
    loads: list[tuple[int, str, str]] = []
    try:
        # a long-running server has loaded Iceberg's classes and compiled its hot code already (the
        # JVM's second JIT tier needs more than one task): untimed tasks of every kind on the server first
        for w in range(0 if args.demo_only else args.warmup):
            seconds = audit_task(hook, f"db.warmup_{w}", 100, 100, CONNECT_CONN)
            seconds += cherrypick_task(hook, f"db.warmup_cp_{w}", CONNECT_CONN)
            if server41 is not None:
                seconds += audit_task(hook, f"db.warmup41_{w}", 100, 100, CONNECT41_CONN)
                seconds += cherrypick_task(hook, f"db.warmup41_cp_{w}", CONNECT41_CONN)
            print(f"  warm-up round {w + 1} on the servers (not counted): {seconds:.1f}s", flush=True)
        runs: list[tuple[str, object, object]] = [
            (
                "audit 1k-row change set",
                audit_task,
                lambda n, i: (f"db.audit_{n}_{i}", args.audit_rows, args.base_rows),
            ),
            ("publish with cherry-pick", cherrypick_task, lambda n, i: (f"db.cp_{n}_{i}",)),
        ]
        if not args.skip_erasure:
            name = f"logical erasure {args.subjects} subjects / {args.erasure_rows:,} rows"
            runs.append((name, erasure_task, lambda n, i: (f"db.erase_{n}_{i}", args.erasure_rows, args.subjects)))
        for i in range(0 if args.demo_only else args.repeat):
            # round-robin: every repeat runs every side once per task, each repeat in a rotated order,
            # so load that drifts during the run lands on all sides alike
            order = sides[i % len(sides) :] + sides[: i % len(sides)]
            before = load()
            print(f"repeat {i + 1}: load {before}; order: {', '.join(order)}", flush=True)
            for name, fn, fn_args in runs:
                for side in order:
                    conn = SIDES[side]
                    seconds = fn(hook, *fn_args(list(SIDES).index(side), i), conn)
                    results.setdefault(name, {}).setdefault(side, []).append(seconds)
                    print(f"  {name} via {side}: {seconds:.1f}s (load {load()})", flush=True)
            loads.append((i + 1, before, load()))
    finally:
        connect_server.stop(server)
        if server41 is not None:
            connect_server.stop(server41)
    if args.demo or args.demo_only:
        for side, mode in (("connect 3.5, process per task", "connect"), ("spark-submit 3.5", "submit")):
            results.setdefault("make demo (wall)", {}).setdefault(side, []).append(demo_wall(mode))
    print(f"load averages after: {load()}")
    for repeat, before, after in loads:
        print(f"  repeat {repeat}: load averages (1 / 5 / 15 min) before {before}, after {after}")
    report(results)
    return 0


def report(results: dict[str, dict[str, list[float]]]) -> None:
    """Each task's median and min per side, and each side's median over the reference side's."""
    print("\nseconds per side (n runs, round-robin); ratio = that side's median / the reference's median")
    for name, sides in results.items():
        reference = REFERENCE if REFERENCE in sides else next(iter(sides))
        ref = statistics.median(sides[reference])
        print(f"{name}  (reference: {reference})")
        print(f"  {'side':32} {'median':>8} {'min':>8} {'n':>3} {'ratio':>7}")
        for side in SIDES:
            times = sides.get(side)
            if not times:
                continue
            median = statistics.median(times)
            print(f"  {side:32} {median:7.1f}s {min(times):7.1f}s {len(times):3d} {median / ref:6.2f}x")


if __name__ == "__main__":
    sys.exit(main())
