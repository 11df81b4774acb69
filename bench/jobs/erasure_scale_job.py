"""Bench driver for bench/erasure_scale.py (#13): every measurement in ONE Spark session, with the
provider's own erasure code (``erasure.ErasureRun``, phases ``logical`` / ``purge`` / ``full``).

Spec: ``a_rows``, ``a_files``, ``a_subjects``, ``b_rows``, ``b_files``, ``c_rows``, ``c_files``,
``c_days``, ``c_batch``, ``result_path``, ``work_dir``, ``catalog_name``, ``salt``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from airflow_iceberg_provider.spark_jobs import erasure
from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import build_session, load_spec

NS = "erasure_scale"
BLOOM = (
    "'write.parquet.bloom-filter-enabled.column.customer_id'='true', "
    "'write.parquet.bloom-filter-fpp.column.customer_id'='0.01', 'write.metadata.metrics.column.customer_id'='none'"
)


def t_name(cat: str, name: str) -> str:
    return f"`{cat}`.`{NS}`.`{name}`"


def generate(spark: Any, start: int, rows: int, customers: int, customer_offset: int = 0) -> Any:
    from pyspark.sql import functions as F

    return (
        spark.range(start, start + rows)
        .withColumn(
            "customer_id",
            F.format_string("cust-%08d", F.pmod(F.xxhash64("id"), F.lit(customers)) + F.lit(customer_offset)),
        )
        .withColumn("amount", (F.col("id") % 997) / 7.0)
        .withColumn("order_ts", F.timestamp_seconds(F.lit(1767225600) + (F.col("id") % (30 * 86400))))
        .withColumnRenamed("id", "order_id")
    )


def create(spark: Any, cat: str, name: str, props: str = "") -> str:
    t = t_name(cat, name)
    spark.sql(f"DROP TABLE IF EXISTS {t} PURGE")
    spark.sql(
        f"CREATE TABLE {t} (order_id bigint, customer_id string, amount double, order_ts timestamp) USING iceberg "
        f"TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
        f"'write.distribution-mode'='none'{', ' + props if props else ''})"
    )
    return t


def subjects(spark: Any, work_dir: str, keys: list[str], tag: str) -> str:
    path = f"{work_dir}/subjects_{tag}.parquet"
    rows = [(f"{tag}-{i:06d}", k) for i, k in enumerate(keys)]
    spark.createDataFrame(rows, "request_id string, subject_key string").coalesce(1).write.mode("overwrite").parquet(
        path
    )
    return path


def run(spark: Any, spec: dict[str, Any], table: str, path: str, phase: str) -> tuple[float, dict[str, Any]]:
    r = erasure.ErasureRun(
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
            "phase": phase,
        },
    )
    t = time.monotonic()
    m = r.run()
    return time.monotonic() - t, m


def scan_s(spark: Any, t: str) -> float:
    s = time.monotonic()
    spark.sql(f"SELECT sum(amount), count(DISTINCT customer_id) FROM {t}").collect()
    return time.monotonic() - s


def bench_a(spark: Any, spec: dict[str, Any], out: dict[str, Any]) -> None:
    cat, rows, files = spec["catalog_name"], spec["a_rows"], spec["a_files"]
    customers = max(rows // 20, 1000)
    for name in ("a_logical", "a_full"):
        t = create(spark, cat, name)
        generate(spark, 0, rows, customers).repartition(files).writeTo(t).append()
    out["a_files"] = spark.sql(f"SELECT count(*) FROM {t_name(cat, 'a_full')}.files").collect()[0][0]
    out["a_rows"] = rows
    keys = [f"cust-{i:08d}" for i in range(0, customers, max(customers // spec["a_subjects"], 1))][: spec["a_subjects"]]
    path = subjects(spark, spec["work_dir"], keys, "a")
    out["a_logical_s"], m = run(spark, spec, "a_logical", path, "logical")
    out["a_logical_verification"] = m.get("verification")
    out["a_full_s"], m = run(spark, spec, "a_full", path, "full")
    out["a_full_verification"] = m.get("verification")
    out["a_full_files_rewritten"] = m.get("files_rewritten")
    out["a_scan_after_logical_s"] = scan_s(spark, t_name(cat, "a_logical"))
    out["a_scan_after_full_s"] = scan_s(spark, t_name(cat, "a_full"))
    out["a_purge_s"], m = run(spark, spec, "a_logical", path, "purge")
    out["a_scan_after_purge_s"] = scan_s(spark, t_name(cat, "a_logical"))
    for name in ("a_logical", "a_full"):
        spark.sql(f"DROP TABLE IF EXISTS {t_name(cat, name)} PURGE")


def bench_b(spark: Any, spec: dict[str, Any], out: dict[str, Any]) -> None:
    """10 subjects in few files (range-partitioned by customer, bloom filters); N vs 10N rows."""
    from pyspark.sql import functions as F

    cat, n, files = spec["catalog_name"], spec["b_rows"], spec["b_files"]
    customers = max(n // 20, 100)
    keys = [f"cust-{i:08d}" for i in range(10)]  # neighbours in the range order: a few files
    path = subjects(spark, spec["work_dir"], keys, "b")
    for label, size in (("b_n", n), ("b_10n", 10 * n)):
        t = create(spark, cat, label, BLOOM)
        base = generate(spark, 0, n, customers)
        base.repartitionByRange(files, "customer_id").sortWithinPartitions("customer_id").writeTo(t).append()
        if size > n:  # the growth: other customers only, so the affected files stay the same
            more = generate(spark, n, size - n, customers * 9, customer_offset=customers)
            more.repartitionByRange(files * 9, "customer_id").sortWithinPartitions("customer_id").writeTo(t).append()
        affected = spark.table(t).where(F.col("customer_id").isin(keys)).select(F.input_file_name()).distinct().count()
        out[f"{label}_rows"] = spark.table(t).count()
        out[f"{label}_files"] = spark.sql(f"SELECT count(*) FROM {t}.files").collect()[0][0]
        out[f"{label}_affected_files"] = affected
        out[f"{label}_s"], m = run(spark, spec, label, path, "full")
        out[f"{label}_verification"] = m.get("verification")
        for k in ("analysis", "verify"):
            for c in ("considered", "pruned_bounds", "pruned_bloom", "raw_read"):
                out[f"{label}_{k}_{c}"] = m.get(f"{k}_files_{c}")
        spark.sql(f"DROP TABLE IF EXISTS {t} PURGE")


def bench_c(spark: Any, spec: dict[str, Any], out: dict[str, Any]) -> None:
    """30 days of request batches: 30 logical + ONE purge vs 30 full purges."""
    cat = spec["catalog_name"]
    rows, files, days, batch = (spec[k] for k in ("c_rows", "c_files", "c_days", "c_batch"))
    customers = max(rows // 20, days * batch * 2)
    for name in ("c_two_phase", "c_full"):
        t = create(spark, cat, name)
        generate(spark, 0, rows, customers).repartition(files).writeTo(t).append()
    step = max(customers // (days * batch), 1)
    batches = [
        subjects(spark, spec["work_dir"], [f"cust-{(d * batch + i) * step:08d}" for i in range(batch)], f"c{d}")
        for d in range(days)
    ]
    two, full = 0.0, 0.0
    for p in batches:
        s, _ = run(spark, spec, "c_two_phase", p, "logical")
        two += s
    out["c_logical_total_s"] = two
    # the one purge takes every batch's subjects at once (in production: every logically erased request)
    allp = subjects(
        spark,
        spec["work_dir"],
        [r[0] for r in spark.read.parquet(*batches).select("subject_key").collect()],
        "call",
    )
    s, m = run(spark, spec, "c_two_phase", allp, "purge")
    out["c_purge_s"], out["c_purge_verification"] = s, m.get("verification")
    two += s
    for p in batches:
        s, m = run(spark, spec, "c_full", p, "full")
        full += s
    out["c_two_phase_total_s"], out["c_full_total_s"] = two, full
    for name in ("c_two_phase", "c_full"):
        spark.sql(f"DROP TABLE IF EXISTS {t_name(cat, name)} PURGE")


def main() -> None:
    spark = build_session({"job": "erasure-scale-bench"})
    spec = load_spec()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{spec['catalog_name']}`.`{NS}`")
    out: dict[str, Any] = {}
    for part in spec.get("parts", "abc"):
        t = time.monotonic()
        {"a": bench_a, "b": bench_b, "c": bench_c}[part](spark, spec, out)
        out[f"{part}_wall_s"] = time.monotonic() - t
        with open(spec["result_path"], "w", encoding="utf-8") as fh:
            json.dump(out, fh)
    spark.stop()


if __name__ == "__main__":
    main()
