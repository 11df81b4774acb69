"""Benchmark: WAP publish through the catalog hook vs a spark-submit calling ``fast_forward``.

Both publish the same kind of change (``main`` fast-forwarded to a branch head that
descends from it) on the same SQLite catalog, side by side in one run:

* ``IcebergCatalogHook.fast_forward`` (what ``IcebergWapPublishOperator`` does): load the
  table, check ancestry, compare-and-swap ``main`` — ``--publishes`` times, p50/p95 printed;
* ``spark-submit`` of a job running ``CALL <catalog>.system.fast_forward(...)`` — ``--spark-runs``
  times (each pays JVM start-up, as a task that publishes with Spark would).

Target (issue #3): Spark / hook >= 20x. Usage:
``source scripts/env.sh && python -m bench.publish [--publishes N] [--spark-runs K]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
T = "bench.orders"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--publishes", type=int, default=30)
    parser.add_argument("--spark-runs", type=int, default=2)
    args = parser.parse_args()

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook
    from tests.support.lake import catalog_conn_json, create_orders_table, orders_batch

    tmp = Path(tempfile.mkdtemp(prefix="bench-publish-"))
    try:
        (tmp / "warehouse").mkdir()
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp / "catalog.db", tmp / "warehouse")
        hook = IcebergCatalogHook()
        create_orders_table(hook, T).append(orders_batch(0, 100))
        hook.set_ref(hook.load_table(T), "staging", hook.ref_snapshot_id(T))
        # a chain of audited-looking branch commits: publish i fast-forwards main to the i-th one
        heads = []
        for i in range(args.publishes + args.spark_runs):
            hook.load_table(T).append(orders_batch(1000 + i * 10, 10), branch="staging")
            heads.append(hook.ref_snapshot_id(T, "staging"))
        hook_times = []
        fresh = IcebergCatalogHook()  # a task's hook: connection + catalog created once, like in execute()
        for target in heads[: args.publishes]:
            t0 = time.perf_counter()
            assert fresh.fast_forward(T, to_snapshot_id=target) is True
            hook_times.append(time.perf_counter() - t0)
        assert hook.ref_snapshot_id(T) == heads[args.publishes - 1]
        spark = IcebergSparkHook(catalog_hook=hook)
        spark_times = []
        for i in range(args.spark_runs):
            target = heads[args.publishes + i]
            hook.set_ref(hook.load_table(T), f"ff{i}", target)
            t0 = time.perf_counter()
            spark.submit(
                spark.plan(
                    ROOT / "bench" / "jobs" / "fast_forward_job.py", spec={"job": "ff", "table": T, "ref": f"ff{i}"}
                )
            )
            spark_times.append(time.perf_counter() - t0)
            assert hook.ref_snapshot_id(T) == target, "spark fast_forward did not publish"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    p50 = statistics.median(hook_times)
    p95 = sorted(hook_times)[max(0, int(round(0.95 * len(hook_times))) - 1)]
    spark_p50 = statistics.median(spark_times)
    ratio = spark_p50 / p50
    print(f"publish bench: {len(hook_times)} hook publishes, {len(spark_times)} spark-submit publishes")
    print(
        f"  catalog hook fast_forward: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, max {max(hook_times) * 1000:.1f} ms"
    )
    print(f"  spark-submit fast_forward: p50 {spark_p50:.2f} s  (all: {[round(s, 2) for s in spark_times]})")
    print(f"  ratio spark-submit / hook (p50) = {ratio:.0f}x  (target >= 20x: {'met' if ratio >= 20 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
