"""Table access in the Spark jobs: the Java forms vs the SQL/pyarrow forms, side by side in one run.

Every operation of ``spark_jobs.table_access.TableAccess`` is timed in ONE spark-submit (a
classic session, so both implementations run there: ``JvmTableAccess`` through py4j and
``ConnectTableAccess`` through metadata tables and pyarrow) on a table of ``--snapshots``
appends of ``--files`` data files each, median of ``--repeat`` after one warm-up; the two
answers of each operation are compared. The numbers say which forks the JVM implementation
keeps for speed (a SQL form much slower on a hot path) and which could go.

Run: ``source scripts/env.sh && python -m bench.table_access [--snapshots 40] [--files 4] [--repeat 5]``
(about 1-2 minutes on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "bench" / "jobs" / "table_access_bench_job.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=40)
    parser.add_argument("--files", type=int, default=4, help="data files per append")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    from bench._lake import orders_lake

    tmp, _hook = orders_lake("bench-table-access-")
    try:
        from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

        spark = IcebergSparkHook()
        result_path = tmp / "result.json"
        spec = {
            "job": "table_access_bench",
            "snapshots": args.snapshots,
            "files": args.files,
            "repeat": args.repeat,
            "result_path": str(result_path),
        }
        run = spark.submit(spark.plan(JOB, spec=spec, name="table-access-bench"))
        res = json.loads(result_path.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"table access bench: {res['snapshots']} snapshots, {res['data_files']} live data files, "
        f"medians of {args.repeat} (spark-submit {run.seconds:.0f}s)"
    )
    print(f"  {'operation':<28} {'Java/Hadoop':>12} {'SQL/pyarrow':>12} {'SQL / Java':>11}")
    for name, m in res["median"].items():
        ratio = m["sql"] / m["jvm"] if m["jvm"] else float("inf")
        print(f"  {name:<28} {m['jvm'] * 1000:10.1f}ms {m['sql'] * 1000:10.1f}ms {ratio:10.1f}x")
    differ = res["answers_differ"]
    print(f"  answers identical in both forms: {'yes' if not differ else 'no: ' + ', '.join(differ)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
