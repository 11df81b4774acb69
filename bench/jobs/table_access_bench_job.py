"""Spark side of bench/table_access.py: both table-access implementations in ONE classic session.

Builds ``db.access`` with ``snapshots`` appends of ``files`` data files each, then times every
operation of :class:`~airflow_iceberg_provider.spark_jobs.table_access.TableAccess` through
:class:`JvmTableAccess` (Iceberg's Java API, Hadoop's FileSystem) and through
:class:`ConnectTableAccess` (metadata tables, the metadata file, pyarrow), which also runs in a
classic session, medians of ``repeat`` after one warm-up, and compares their answers. Results
go to ``spec["result_path"]`` as JSON.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from iceberg_job_runtime import JobContext, run_job


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float]:
    fn()  # warm-up
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times)


def bench(ctx: JobContext) -> dict[str, Any]:
    from airflow_iceberg_provider.spark_jobs import _fs
    from airflow_iceberg_provider.spark_jobs.erasure.scan import norm_path
    from airflow_iceberg_provider.spark_jobs.table_access import ConnectTableAccess, JvmTableAccess

    spec, spark = ctx.spec, ctx.spark
    snapshots, files, repeat = int(spec["snapshots"]), int(spec["files"]), int(spec["repeat"])
    t = ctx.table("db.access")
    spark.sql(f"CREATE TABLE {t} (id BIGINT, name STRING) USING iceberg")
    for i in range(snapshots):
        spark.range(i * 1000, (i + 1) * 1000, numPartitions=files).selectExpr(
            "id", "CAST(id AS STRING) AS name"
        ).writeTo(t).append()
    spark.sql(f"REFRESH TABLE {t}")
    sids = [int(r[0]) for r in spark.sql(f"SELECT snapshot_id FROM {t}.snapshots ORDER BY committed_at").collect()]
    head, base, middle = sids[-1], sids[0], sids[len(sids) // 2]
    some = [str(r[0]) for r in spark.sql(f"SELECT file_path FROM {t}.data_files LIMIT 20").collect()]
    one = some[0]
    size = int(spark.sql(f"SELECT file_size_in_bytes FROM {t}.data_files LIMIT 1").collect()[0][0])

    def footer(access: Any) -> bytes:
        with access.open_ranged(one) as read:
            return read(size - 8, 8)

    def field_ids(access: Any, sid: int | None) -> dict[str, int]:
        return _fs.top_level_field_ids(access.schema_json(t, sid))

    def index(access: Any) -> dict[int, set[str]]:
        snaps, manifests = access.manifest_index(t)
        return {s: {norm_path(p) for m in ms for p in manifests.get(m, ())} for s, ms in snaps.items()}

    def lineage(access: Any) -> list[int]:  # what the audit's append-chain check reads
        chain = []
        for sid, _operation, parent in access.lineage(t, head):
            chain.append(sid)
            if parent == base:
                break
        return chain

    def listing(access: Any) -> set[str]:
        root = access.location(t).rstrip("/") + "/data"
        # the Parquet files (a local file system also holds Hadoop's .crc files, which pyarrow lists)
        return {p for loc, _ in access.list_files(t, root) if (p := norm_path(loc)).endswith(".parquet")}

    operations: dict[str, Callable[[Any], Any]] = {
        "location": lambda a: a.location(t),
        # Spark's SHOW TBLPROPERTIES hides the one reserved key Spark itself stores (owner)
        "properties": lambda a: {k: v for k, v in a.properties(t).items() if k != "owner"},
        "schema_json (current)": lambda a: field_ids(a, None),
        "schema_json (a snapshot)": lambda a: field_ids(a, middle),
        "snapshot_files (head)": lambda a: sorted(norm_path(p) for p in a.snapshot_files(t, head)),
        "manifest_index": index,
        "lineage (head to first)": lineage,
        "exists": lambda a: a.exists(t, one),
        "file_sizes (20 files)": lambda a: a.file_sizes(some),
        "list_files (data dir)": listing,
        "open_ranged (footer)": footer,
    }
    accesses = {"jvm": JvmTableAccess(spark), "sql": ConnectTableAccess(spark)}
    results: dict[str, dict[str, float]] = {}
    differ = []
    for name, op in operations.items():
        answers = {}
        results[name] = {}
        for label, access in accesses.items():
            answers[label], results[name][label] = timed(lambda op=op, access=access: op(access), repeat)
        if answers["jvm"] != answers["sql"]:
            differ.append(name)
    for label, access in accesses.items():  # one empty append each, on its own branch
        branch = f"bench_{label}"
        spark.sql(f"ALTER TABLE {t} CREATE BRANCH {branch}")
        start = time.perf_counter()
        access.append_empty(t, branch, {"bench.append": label})
        results.setdefault("append_empty (once)", {})[label] = time.perf_counter() - start
    out = {
        "snapshots": len(sids),
        "data_files": len(spark.sql(f"SELECT 1 FROM {t}.data_files").collect()),
        "median": results,
        "answers_differ": differ,
    }
    with open(spec["result_path"], "w", encoding="utf-8") as fh:
        json.dump(out, fh)
    return {"snapshots": len(sids)}


if __name__ == "__main__":
    run_job(bench)
