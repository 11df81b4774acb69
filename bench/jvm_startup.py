"""Spark driver start-up: the JVM's defaults vs the start-up options the demo and tests use.

The same task, side by side in one run (alternating order, so drift on a noisy machine hits both
sides), ``--pairs`` pairs (default 3): ``IcebergSparkSubmitOperator.execute`` of a small append
application through spark-submit in local mode, on the Spark runtime ``scripts/env.sh`` picked
(``[iceberg_provider] spark_runtime``). ``--compare defaults`` (default): one side runs the driver with
the JVM's defaults; the other with ``[iceberg_provider] spark_driver_java_options`` as ``scripts/env.sh``
sets it: the class-data-sharing archive ``scripts/bootstrap.sh`` builds, C1-only JIT and the serial
collector. ``--compare archive``: the start-up options without the archive vs with it (``--archive``,
default the one in the options). Prints the wall time and the CPU seconds (user + system, of
spark-submit and its children) per task, and the ratios.

Run: ``source scripts/env.sh && python -m bench.jvm_startup [--pairs 3] [--rows 1000] [--compare archive]``;
on Spark 4.1: ``AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME=4.1`` before ``source scripts/env.sh``.

Last results against the goal (the figures are on the Performance page): wall time 49.7 -> 25.9 s
(1.92x) and CPU 43.3 -> 16.1 s (2.69x) per task, earlier-generation EPYC, 2 vCPU. The test suite,
mostly short Spark jobs, from a clean clone on that machine, otherwise idle: 62.6 min of pytest and
104.5 min of user CPU with the JVM's defaults; 36.4 and 39.9 min of pytest, 59.1 and 64.3 min of
user CPU in two runs with the start-up options. ``--compare archive`` on Spark 4.1.1 / Iceberg 1.12.0,
3 pairs on a 2-vCPU host at load average 32-46: CPU 21.5 -> 11.8 s (1.83x), wall 355 -> 118 s (3.0x)
per task.
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


ARCHIVE = "-XX:SharedArchiveFile="


def sides(tuned: str, compare: str, archive: str | None) -> dict[str, str] | str:
    """The two sides' driver options (``" "``: set, and adds no option), or why they cannot be compared."""
    if compare == "defaults":
        return {"default": " ", "tuned": tuned}
    plain = " ".join(o for o in tuned.split() if not o.startswith(ARCHIVE))
    archive = archive or next((o.removeprefix(ARCHIVE) for o in tuned.split() if o.startswith(ARCHIVE)), None)
    if not archive or not Path(archive).is_file():
        return f"no class-data-sharing archive ({archive or 'none in ' + OPTION}): scripts/bootstrap.sh builds it"
    return {"no archive": plain or " ", "archive": f"{ARCHIVE}{archive} {plain}"}


def spark_version() -> str:
    home = Path(os.environ.get("SPARK_HOME", ""))
    for line in (home / "version.py").read_text().splitlines() if (home / "version.py").is_file() else ():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    return f"unknown (SPARK_HOME={home})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--compare", choices=("defaults", "archive"), default="defaults")
    parser.add_argument("--archive", help="the class-data-sharing archive of --compare archive")
    args = parser.parse_args()
    tuned = os.environ.get(OPTION, "").strip()
    if not tuned:
        print(f"{OPTION} is not set: source scripts/env.sh first (after scripts/bootstrap.sh)")
        return 2
    options = sides(tuned, args.compare, args.archive)
    if isinstance(options, str):
        print(options)
        return 2
    first, second = options

    from bench._lake import orders_lake
    from tests.support.lake import fake_context

    orders_lake("bench-jvm-")

    from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator

    def run(side: str, i: int) -> tuple[float, float]:
        os.environ[OPTION] = options[side]
        op = IcebergSparkSubmitOperator(
            task_id=f"{side.replace(' ', '_')}_{i}",
            table="db.orders",
            application=str(APPEND),
            params_for_job={"rows": args.rows},
            expected_operations=["append"],
        )
        cpu0, t0 = _children_cpu(), time.perf_counter()
        op.execute(fake_context(task_id=f"{side.replace(' ', '_')}_{i}"))
        return time.perf_counter() - t0, _children_cpu() - cpu0

    import logging

    logging.disable(logging.INFO)
    print(f"load average at start: {os.getloadavg()[0]:.1f}; Spark {spark_version()}", flush=True)
    for side, value in options.items():
        print(f"{side}: {value.strip() or '(no options)'}", flush=True)
    run(second, -1)  # warm the OS page cache for the JVM, the jars and the archive once
    results: dict[str, list[tuple[float, float]]] = {first: [], second: []}
    for i in range(args.pairs):
        order = (first, second) if i % 2 == 0 else (second, first)
        for side in order:
            results[side].append(run(side, i))
        d, t = results[first][-1], results[second][-1]
        print(
            f"pair {i + 1}: {first} {d[0]:.1f}s wall {d[1]:.1f}s cpu | {second} {t[0]:.1f}s wall {t[1]:.1f}s cpu",
            flush=True,
        )
    med = {side: [statistics.median(x[k] for x in rows) for k in (0, 1)] for side, rows in results.items()}
    print(
        f"median per task ({first} -> {second}): wall {med[first][0]:.1f}s -> {med[second][0]:.1f}s "
        f"(ratio {med[first][0] / med[second][0]:.2f}x); CPU {med[first][1]:.1f}s -> "
        f"{med[second][1]:.1f}s (ratio {med[first][1] / med[second][1]:.2f}x)"
    )
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
