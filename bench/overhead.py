"""Provider overhead: a job submitted through the provider vs a bare spark-submit command line.

Side by side in one run (alternating order, so drift on this noisy machine hits both),
``--pairs`` pairs (default 3). The provider side is the whole operator ``execute``:
connection parsing, ledger table check, plan, spec + properties file, spark-submit via
the Spark provider's hook, log streaming, and commit verification through the catalog.
The bare side is the equivalent ``spark-submit`` argv run with ``subprocess``.

Also: commit-verification latency through the catalog hook (p50 over 50 calls) on a
table with 200 snapshots.

Run: ``source scripts/env.sh && python -m bench.overhead [--pairs 3] [--rows 200000]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

APPEND = ROOT / "example_dags" / "jobs" / "append_orders.py"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--snapshots", type=int, default=200)
    args = parser.parse_args()

    from bench._lake import orders_lake
    from tests.support.lake import append_batches, create_orders_table, fake_context

    tmp, hook = orders_lake("bench-overhead-")

    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook
    from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator

    # The bare command: what an engineer would type, with the same conf, jars and spec.
    plan = IcebergSparkHook().plan(
        APPEND, spec={"job": "append_orders", "table": "db.orders", "params": {"rows": args.rows}}
    )
    spec_path = tmp / "spec.json"
    spec_path.write_text(json.dumps({**plan.spec, "job_run_id": "bare"}))
    bare = ["spark-submit", "--master", "local[2]"]
    for key, value in plan.conf.items():
        bare += ["--conf", f"{key}={value}"]
    bare += [
        "--jars",
        ",".join(plan.jars),
        "--py-files",
        ",".join(plan.py_files),
        "--files",
        str(spec_path),
        str(APPEND),
        "--spec",
        str(spec_path),
    ]
    env = {**os.environ, **plan.env_vars}

    def run_bare() -> float:
        t0 = time.perf_counter()
        subprocess.run(bare, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - t0

    def run_provider(i: int) -> float:
        op = IcebergSparkSubmitOperator(
            task_id=f"bench_{i}",
            table="db.orders",
            application=str(APPEND),
            params_for_job={"rows": args.rows},
            expected_operations=["append"],
        )
        t0 = time.perf_counter()
        op.execute(fake_context(task_id=f"bench_{i}"))
        return time.perf_counter() - t0

    import logging

    logging.disable(logging.INFO)
    run_bare()  # warm the OS page cache for the JVM and jars once, for both sides
    provider_times, bare_times = [], []
    for i in range(args.pairs):
        if i % 2 == 0:
            provider_times.append(run_provider(i))
            bare_times.append(run_bare())
        else:
            bare_times.append(run_bare())
            provider_times.append(run_provider(i))
        print(f"pair {i + 1}: provider {provider_times[-1]:.2f}s  bare {bare_times[-1]:.2f}s", flush=True)
    ratio = statistics.median(provider_times) / statistics.median(bare_times)
    print(
        f"submit overhead: provider median {statistics.median(provider_times):.2f}s vs bare median "
        f"{statistics.median(bare_times):.2f}s -> ratio {ratio:.3f} (target <= 1.10)"
    )

    # Commit verification latency on a table with many snapshots.
    create_orders_table(hook, "db.history")
    ids = append_batches(hook, "db.history", args.snapshots, rows=2)
    op = IcebergSparkSubmitOperator(task_id="verify", table="db.history", application=str(APPEND))
    lat = []
    for _ in range(50):
        t0 = time.perf_counter()
        op.verify_new_commit(ref="main", before_snapshot_id=ids[-2], operations=["append"])
        lat.append(time.perf_counter() - t0)
    lat.sort()
    print(
        f"commit verification on {args.snapshots} snapshots: p50 {lat[24] * 1000:.1f} ms, "
        f"p95 {lat[47] * 1000:.1f} ms (target p50 < 500 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
