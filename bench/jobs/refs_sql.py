"""Bench job: run the Spark SQL statements of the spec (Iceberg DDL / procedures / metadata queries).

Used by ``bench/metadata_ops.py`` to time the Spark way of doing a metadata operation
(one spark-submit per operation, as a Spark-only pipeline would). Statements and
their named parameters come from the spec file, never argv.
"""

from __future__ import annotations

import json
import time


def main() -> None:
    from iceberg_job_runtime import build_session, load_spec

    t0 = time.monotonic()
    spark = build_session({"job": "bench_refs_sql"})
    spec = load_spec()
    results = []
    for stmt in spec["statements"]:
        rows = spark.sql(stmt["sql"], args=stmt.get("args") or None).collect()
        results.append([list(r) for r in rows][:5])
    print(f"[bench-refs-sql] {json.dumps(results, default=str)} in {time.monotonic() - t0:.2f}s")
    spark.stop()


if __name__ == "__main__":
    main()
