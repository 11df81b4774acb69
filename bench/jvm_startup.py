"""Spark driver start-up: the JVM's defaults vs the start-up options the demo and tests use.

The same task, side by side in one run (alternating order, so drift on a noisy machine hits both
sides), ``--pairs`` pairs (default 3): ``IcebergSparkSubmitOperator.execute`` of a small append
application through spark-submit in local mode. One side runs the driver with the JVM's defaults;
the other with ``[iceberg_provider] spark_driver_java_options`` as ``scripts/env.sh`` sets it: the
class-data-sharing archive ``scripts/bootstrap.sh`` builds, C1-only JIT and the serial collector.
Prints the wall time and the CPU seconds (user + system, of spark-submit and its children) per task,
and the ratios.

Run: ``source scripts/env.sh && python -m bench.jvm_startup [--pairs 3] [--rows 1000]``

Last results against the goal (the figures are on the Performance page): wall time 49.7 -> 25.9 s
(1.92x) and CPU 43.3 -> 16.1 s (2.69x) per task, earlier-generation EPYC, 2 vCPU. The test suite,
mostly short Spark jobs, from a clean clone on that machine, otherwise idle: 62.6 min of pytest and
104.5 min of user CPU with the JVM's defaults; 36.4 and 39.9 min of pytest, 59.1 and 64.3 min of
user CPU in two runs with the start-up options.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

APPEND = ROOT / "example_dags" / "jobs" / "append_orders.py"
OPTION = "AIRFLOW__ICEBERG_PROVIDER__SPARK_DRIVER_JAVA_OPTIONS"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1000)
    args = parser.parse_args()
    tuned = os.environ.get(OPTION, "").strip()
    if not tuned:
        print(f"{OPTION} is not set: source scripts/env.sh first (after scripts/bootstrap.sh)")
        return 2

    from bench._lake import orders_lake
    from tests.support.lake import fake_context

    orders_lake("bench-jvm-")

    from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator

    def run(side: str, i: int) -> tuple[float, float]:
        os.environ[OPTION] = tuned if side == "tuned" else " "  # " ": set, and adds no option
        op = IcebergSparkSubmitOperator(
            task_id=f"{side}_{i}",
            table="db.orders",
            application=str(APPEND),
            params_for_job={"rows": args.rows},
            expected_operations=["append"],
        )
        cpu0, t0 = _children_cpu(), time.perf_counter()
        op.execute(fake_context(task_id=f"{side}_{i}"))
        return time.perf_counter() - t0, _children_cpu() - cpu0

    import logging

    logging.disable(logging.INFO)
    print(f"load average at start: {os.getloadavg()[0]:.1f}; tuned options: {tuned}", flush=True)
    run("tuned", -1)  # warm the OS page cache for the JVM, the jars and the archive once
    results: dict[str, list[tuple[float, float]]] = {"default": [], "tuned": []}
    for i in range(args.pairs):
        order = ("default", "tuned") if i % 2 == 0 else ("tuned", "default")
        for side in order:
            results[side].append(run(side, i))
        d, t = results["default"][-1], results["tuned"][-1]
        print(f"pair {i + 1}: default {d[0]:.1f}s wall {d[1]:.1f}s cpu | tuned {t[0]:.1f}s wall {t[1]:.1f}s cpu")
    med = {side: [statistics.median(x[k] for x in rows) for k in (0, 1)] for side, rows in results.items()}
    print(
        f"median per task: wall {med['default'][0]:.1f}s -> {med['tuned'][0]:.1f}s "
        f"(ratio {med['default'][0] / med['tuned'][0]:.2f}x); CPU {med['default'][1]:.1f}s -> "
        f"{med['tuned'][1]:.1f}s (ratio {med['default'][1] / med['tuned'][1]:.2f}x)"
    )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
