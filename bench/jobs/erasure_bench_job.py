"""Bench driver for bench/erasure.py: every measurement in ONE Spark session.

Spec (``--spec``): ``rows``, ``customers``, ``days``, ``per_subject_sample``, ``result_path``,
``work_dir``, ``catalog_name``, ``salt``. Uses the provider's own erasure job code
(``erasure.ErasureRun``), shipped with ``--py-files``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from airflow_iceberg_provider.spark_jobs.erasure import run as erasure
from airflow_iceberg_provider.spark_jobs.erasure import sql as es
from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import build_session, load_spec

NS = "erasure_bench"


def build_base(spark: Any, cat: str, rows: int, customers: int, days: int) -> str:
    from pyspark.sql import functions as F

    base = f"`{cat}`.`{NS}`.`base`"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{cat}`.`{NS}`")
    spark.sql(f"DROP TABLE IF EXISTS {base} PURGE")
    spark.sql(
        f"CREATE TABLE {base} (order_id bigint, customer_id string, amount double, order_ts timestamp) "
        "USING iceberg PARTITIONED BY (days(order_ts)) TBLPROPERTIES ('format-version'='2')"
    )
    # customer ids hashed over the rows, so each customer's rows are spread over days and files
    df = (
        spark.range(0, rows)
        .withColumn("customer_id", F.format_string("cust-%07d", F.pmod(F.xxhash64("id"), F.lit(customers))))
        .withColumn("amount", (F.col("id") % 997) / 7.0)
        .withColumn(
            "order_ts",
            F.timestamp_seconds(F.lit(1767225600) + (F.col("id") % days) * 86400 + (F.col("id") % 86400)),
        )
        .withColumnRenamed("id", "order_id")
    )
    df.writeTo(base).append()
    return base


def clone(spark: Any, cat: str, base: str, name: str, mode: str) -> str:
    t = f"`{cat}`.`{NS}`.`{name}`"
    spark.sql(f"DROP TABLE IF EXISTS {t} PURGE")
    spark.sql(
        f"CREATE TABLE {t} USING iceberg PARTITIONED BY (days(order_ts)) TBLPROPERTIES ('format-version'='2', "
        f"'write.delete.mode'='{mode}', 'write.update.mode'='{mode}', 'write.merge.mode'='{mode}') "
        f"AS SELECT * FROM {base}"
    )
    return t


def subjects_file(spark: Any, cat: str, base: str, work_dir: str, n: int, seed: int) -> str:
    from pyspark.sql import functions as F

    path = f"{work_dir}/subjects_{n}_{seed}.parquet"
    keys = (
        spark.table(base)
        .select("customer_id")
        .distinct()
        .orderBy(F.xxhash64("customer_id", F.lit(seed)))
        .limit(n)
        .withColumn("request_id", F.format_string(f"B{seed}-%06d", F.monotonically_increasing_id()))
        .withColumnRenamed("customer_id", "subject_key")
    )
    keys.coalesce(1).write.mode("overwrite").parquet(path)
    return path


def make_run(spark: Any, spec: dict[str, Any], table: str, path: str) -> Any:
    return erasure.ErasureRun(
        spark,
        {
            "catalog_name": spec["catalog_name"],
            "table": f"{NS}.{table}",
            "subject_columns": ["customer_id"],
            "ref_policy": "fail",
            "salt": spec["salt"],
            "source": {"kind": "file", "path": path, "format": "parquet"},
            "write_evidence": False,
            "governance_namespace": "governance",
        },
    )


def delete_phase(spark: Any, spec: dict[str, Any], table: str, path: str) -> tuple[float, int]:
    run = make_run(spark, spec, table, path)
    run.refresh()
    assert run.preflight() is None
    n = run.load_subjects()
    t0 = time.monotonic()
    spark.sql(es.delete_sql(spec["catalog_name"], f"{NS}.{table}", ["customer_id"]))
    return time.monotonic() - t0, n


def main() -> None:
    spark = build_session({"job": "erasure-bench"})
    spec = load_spec()
    cat, out = spec["catalog_name"], {}
    t0 = time.monotonic()
    base = build_base(spark, cat, spec["rows"], spec["customers"], spec["days"])
    out["rows"] = spark.table(base).count()
    out["data_files"] = spark.sql(f"SELECT count(*) FROM {base}.files").collect()[0][0]
    out["build_s"] = time.monotonic() - t0
    s1000 = subjects_file(spark, cat, base, spec["work_dir"], 1000, 1)

    # (1) + (2): delete phase, batched, copy-on-write and merge-on-read; per-subject sample on the COW clone
    clone(spark, cat, base, "cow", "copy-on-write")
    out["batched_cow_s"], _ = delete_phase(spark, spec, "cow", s1000)
    clone(spark, cat, base, "mor", "merge-on-read")
    out["batched_mor_s"], _ = delete_phase(spark, spec, "mor", s1000)
    sample = [
        r[0]
        for r in spark.read.parquet(subjects_file(spark, cat, base, spec["work_dir"], spec["per_subject_sample"], 2))
        .select("subject_key")
        .collect()
    ]
    cow = f"`{cat}`.`{NS}`.`cow`"
    per = []
    for key in sample:  # same session, same table: one DELETE per subject, value as a parameter
        t = time.monotonic()
        spark.sql(f"DELETE FROM {cow} WHERE customer_id = :k", args={"k": key})
        per.append(time.monotonic() - t)
    out["per_subject_sample_s"] = per

    # (3) end to end (delete + rewrite + expire + manifests + verify), merge-on-read clones.
    # A warm-up run on a small clone first (not reported): the procedures' code paths are
    # JIT-compiled before any measured run; then 10,000 before 10 (the conservative order).
    small = f"`{cat}`.`{NS}`.`warmup`"
    spark.sql(f"DROP TABLE IF EXISTS {small} PURGE")
    spark.sql(
        f"CREATE TABLE {small} USING iceberg PARTITIONED BY (days(order_ts)) TBLPROPERTIES ('format-version'='2', "
        f"'write.delete.mode'='merge-on-read') AS SELECT * FROM {base} LIMIT 100000"
    )
    make_run(spark, spec, "warmup", subjects_file(spark, cat, base, spec["work_dir"], 10, 4)).run()
    spark.sql(f"DROP TABLE IF EXISTS {small} PURGE")
    for n in (10_000, 10, 1000):
        name = f"e2e_{n}"
        clone(spark, cat, base, name, "merge-on-read")
        path = s1000 if n == 1000 else subjects_file(spark, cat, base, spec["work_dir"], n, 3)
        run = make_run(spark, spec, name, path)
        t = time.monotonic()
        metrics = run.run()
        out[f"e2e_{n}_s"] = time.monotonic() - t
        out[f"e2e_{n}_verification"] = metrics.get("verification")
        out[f"e2e_{n}_rows_deleted"] = metrics.get("rows_deleted")
        out[f"e2e_{n}_timings"] = metrics.get("timings_s")
        spark.sql(f"DROP TABLE IF EXISTS `{cat}`.`{NS}`.`{name}` PURGE")
    with open(spec["result_path"], "w", encoding="utf-8") as fh:
        json.dump(out, fh)
    spark.stop()


if __name__ == "__main__":
    main()
