"""Bench driver for bench/erasure_scale.py (#13): every measurement in ONE Spark session, with the
provider's own erasure code (``erasure.ErasureRun``, phases ``logical`` / ``purge`` / ``full``).

Spec: ``a_rows``, ``a_files``, ``a_subjects``, ``b_rows``, ``b_files``, ``c_rows``, ``c_files``,
``c_days``, ``c_batch``, ``result_path``, ``work_dir``, ``catalog_name``, ``salt``.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from airflow_iceberg_provider.spark_jobs.erasure import run as erasure
from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import build_session, load_spec

NS = "erasure_scale"
BLOOM = (
    "'write.parquet.bloom-filter-enabled.column.customer_id'='true', "
    "'write.parquet.bloom-filter-fpp.column.customer_id'='0.01', 'write.metadata.metrics.column.customer_id'='none'"
)


def t_name(cat: str, name: str) -> str:
    return f"`{cat}`.`{NS}`.`{name}`"


def generate(
    spark: Any, start: int, rows: int, customers: int, customer_offset: int = 0, partitions: int | None = None
) -> Any:
    """Orders of ``customers`` customers (hash-spread); ``partitions``: one data file each, no shuffle."""
    from pyspark.sql import functions as F

    return (
        spark.range(start, start + rows, 1, partitions)
        .withColumn(
            "customer_id",
            F.format_string("cust-%08d", F.pmod(F.xxhash64("id"), F.lit(customers)) + F.lit(customer_offset)),
        )
        .withColumn("amount", (F.col("id") % 997) / 7.0)
        .withColumn("order_ts", F.timestamp_seconds(F.lit(1767225600) + (F.col("id") % (30 * 86400))))
        .withColumnRenamed("id", "order_id")
    )


WIDE_COLUMNS = (
    "email string, full_name string, phone string, street string, city string, postal_code string, "
    "country string, ip_address string, user_agent string, sku string, product_name string, quantity int, "
    "currency string, status string, shipping_notes string, payload string"
)


def generate_wide(spark: Any, start: int, rows: int, customers: int, partitions: int | None = None) -> Any:
    """The narrow orders of :func:`generate` plus the 16 columns a customer-orders table carries
    (contact and address of the customer, device, product, free text, a JSON event payload): about
    1 KB a row before compression, about 360 bytes in zstd Parquet. Values derive from the ids
    (deterministic, no download); free text and tokens are hex of hashes, so they compress about as
    poorly as real text and identifiers do."""
    from pyspark.sql import functions as F

    cust = F.pmod(F.xxhash64("order_id"), F.lit(customers))
    agents = F.array(
        *[
            F.lit(f"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/{v}.0 Safari/537.36")
            for v in range(100, 140)
        ]
    )
    cities = F.array(
        *[F.lit(c) for c in ("Montreal", "Toronto", "Quebec", "Vancouver", "Calgary", "Ottawa", "Halifax", "Winnipeg")]
    )
    return generate(spark, start, rows, customers, partitions=partitions).select(
        "*",
        F.format_string("user%08d@example.com", cust).alias("email"),
        F.format_string("Given%05d Family%05d", cust % 50000, (cust / 7).cast("long") % 50000).alias("full_name"),
        F.format_string("+1-514-%03d-%04d", cust % 1000, (cust / 1000).cast("long") % 10000).alias("phone"),
        F.format_string("%d rue %s", cust % 9999, F.substring(F.sha2(cust.cast("string"), 256), 1, 12)).alias("street"),
        F.element_at(cities, (cust % 8 + 1).cast("int")).alias("city"),
        F.upper(F.substring(F.md5(cust.cast("string")), 1, 6)).alias("postal_code"),
        F.lit("CA").alias("country"),
        F.format_string(
            "10.%d.%d.%d", F.col("order_id") % 256, (F.col("order_id") / 256).cast("long") % 256, cust % 256
        ).alias("ip_address"),
        F.element_at(agents, (F.col("order_id") % 40 + 1).cast("int")).alias("user_agent"),
        F.format_string("SKU-%06d", F.col("order_id") % 50000).alias("sku"),
        F.format_string("Product %06d deluxe edition", F.col("order_id") % 50000).alias("product_name"),
        (F.col("order_id") % 9 + 1).cast("int").alias("quantity"),
        F.lit("CAD").alias("currency"),
        F.element_at(
            F.array(*[F.lit(x) for x in ("placed", "paid", "shipped", "delivered", "returned")]),
            (F.col("order_id") % 5 + 1).cast("int"),
        ).alias("status"),
        F.concat(F.sha2(F.col("order_id").cast("string"), 256), F.sha2(F.col("order_ts").cast("string"), 256)).alias(
            "shipping_notes"
        ),
        F.to_json(
            F.struct(
                F.sha2(F.concat(F.lit("s"), F.col("order_id").cast("string")), 256).alias("session"),
                F.sha2(F.concat(F.lit("c"), F.col("order_id").cast("string")), 224).alias("cart"),
                F.col("amount").alias("subtotal"),
                (F.col("order_id") % 3).alias("channel"),
                F.array(
                    *[F.sha2(F.concat(F.lit(f"i{j}"), F.col("order_id").cast("string")), 256) for j in range(4)]
                ).alias("item_tokens"),
            )
        ).alias("payload"),
    )


def generate_events(spark: Any, start: int, rows: int, customers: int, partitions: int | None = None) -> Any:
    """:func:`generate_wide` plus ``event_context``: the serialized client context a
    clickstream/order-event table keeps with each row (640 hex characters of tokens here), about
    twice the bytes per row of the wide shape in Parquet."""
    from pyspark.sql import functions as F

    oid = F.col("order_id").cast("string")
    blob = F.concat(*[F.sha2(F.concat(F.lit(f"e{j}"), oid), 256) for j in range(10)])
    return generate_wide(spark, start, rows, customers, partitions=partitions).withColumn("event_context", blob)


SHAPES: dict[str, tuple[Any, str]] = {
    "narrow": (generate, ""),
    "wide": (generate_wide, WIDE_COLUMNS),
    "events": (generate_events, WIDE_COLUMNS + ", event_context string"),
}


def create(spark: Any, cat: str, name: str, props: str = "", shape: str = "narrow") -> str:
    t = t_name(cat, name)
    spark.sql(f"DROP TABLE IF EXISTS {t} PURGE")
    extra = f", {SHAPES[shape][1]}" if SHAPES[shape][1] else ""
    spark.sql(
        f"CREATE TABLE {t} (order_id bigint, customer_id string, amount double, order_ts timestamp{extra}) USING iceberg "
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


def run(
    spark: Any, spec: dict[str, Any], table: str, path: str, phase: str, **extra: Any
) -> tuple[float, dict[str, Any]]:
    r = erasure.ErasureRun(
        spark,
        {
            "catalog_name": spec["catalog_name"],
            "table": f"{NS}.{table}",
            "subject_columns": ["customer_id"],
            "ref_policy": "fail",
            "salt": spec["salt"],
            "source": {"kind": "file", "path": path, "format": "parquet"},
            "write_evidence": True,  # the evidence row is part of each phase's cost
            "governance_namespace": "governance",
            "phase": phase,
            **extra,
        },
    )
    t = time.monotonic()
    m = r.run()
    spent = time.monotonic() - t
    spec.setdefault("_loads", []).append(os.getloadavg())
    if r.status not in ("succeeded", "noop"):
        raise RuntimeError(f"{phase} on {table}: {r.status} {r.details.get('error') or r.details.get('refused')}")
    return spent, m


def add_timings(acc: dict[str, float], m: dict[str, Any]) -> None:
    for k, v in (m.get("timings_s") or {}).items():
        acc[k] = round(acc.get(k, 0.0) + v, 3)


def scan_s(spark: Any, t: str) -> float:
    """A full scan of every column (deletes applied), one aggregate row out."""
    s = time.monotonic()
    spark.sql(f"SELECT count(*), sum(order_id), sum(amount), max(customer_id), max(order_ts) FROM {t}").collect()
    return time.monotonic() - s


def warm_up(spark: Any, spec: dict[str, Any]) -> None:
    """Both code paths once on a small table, so neither measured phase pays the JVM's first-use costs."""
    cat = spec["catalog_name"]
    for phase in ("logical", "full"):
        t = create(spark, cat, f"warm_{phase}")
        generate(spark, 0, 20_000, 1000).repartition(4).writeTo(t).append()
        path = subjects(spark, spec["work_dir"], [f"cust-{i:08d}" for i in range(0, 1000, 100)], f"warm_{phase}")
        run(spark, spec, f"warm_{phase}", path, phase)
        spark.sql(f"DROP TABLE IF EXISTS {t} PURGE")


def bench_a(spark: Any, spec: dict[str, Any], out: dict[str, Any]) -> None:
    cat, rows, files = spec["catalog_name"], spec["a_rows"], spec["a_files"]
    customers = max(rows // 20, 1000)
    shape = spec.get("a_shape", "wide")
    make = SHAPES[shape][0]
    t0 = time.monotonic()
    for name in ("a_logical", "a_full"):
        t = create(spark, cat, name, shape=shape)
        make(spark, 0, rows, customers, partitions=files).writeTo(t).append()
    files_row = spark.sql(f"SELECT count(*), sum(file_size_in_bytes) FROM {t_name(cat, 'a_full')}.files").collect()[0]
    out["a_files"], out["a_bytes"] = files_row[0], files_row[1]
    out["a_columns"] = len(spark.table(t_name(cat, "a_full")).columns)
    out["a_shape"] = shape
    out["a_rows"] = rows
    keys = [f"cust-{i:08d}" for i in range(0, customers, max(customers // spec["a_subjects"], 1))][: spec["a_subjects"]]
    path = subjects(spark, spec["work_dir"], keys, "a")
    out["a_generate_s"] = time.monotonic() - t0
    out["a_logical_s"], m = run(spark, spec, "a_logical", path, "logical")
    out["a_logical_verification"] = m.get("verification")
    out["a_logical_timings"] = m.get("timings_s")
    out["a_full_s"], m = run(spark, spec, "a_full", path, "full")
    out["a_full_verification"] = m.get("verification")
    out["a_full_timings"] = m.get("timings_s")
    out["a_full_files_rewritten"] = m.get("files_rewritten")
    out["a_scan_after_logical_s"] = scan_s(spark, t_name(cat, "a_logical"))
    out["a_scan_after_full_s"] = scan_s(spark, t_name(cat, "a_full"))
    out["a_purge_s"], m = run(spark, spec, "a_logical", path, "purge")
    out["a_purge_timings"] = m.get("timings_s")
    out["a_purge_verification"] = m.get("verification")
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
        out[f"{label}_timings"] = m.get("timings_s")
        for k in ("analysis", "verify"):
            for c in ("considered", "pruned_bounds", "pruned_bloom", "pruned_dictionary", "raw_read"):
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
    out.update(c_rows=rows, c_files=spark.sql(f"SELECT count(*) FROM {t_name(cat, 'c_full')}.files").collect()[0][0])
    two, full, lt, ft = 0.0, 0.0, {}, {}
    # day by day, as in production: that day's logical erasure next to that day's full erasure (both
    # sides see the same machine load); the one purge after the last day
    for p in batches:
        s, m = run(spark, spec, "c_two_phase", p, "logical")
        two += s
        add_timings(lt, m)
        s, m = run(spark, spec, "c_full", p, "full")
        full += s
        add_timings(ft, m)
    out["c_logical_total_s"], out["c_logical_timings"] = two, lt
    # the one purge takes every batch's subjects at once (in production: every logically erased request)
    allp = subjects(
        spark,
        spec["work_dir"],
        [r[0] for r in spark.read.parquet(*batches).select("subject_key").collect()],
        "call",
    )
    s, m = run(spark, spec, "c_two_phase", allp, "purge")
    out["c_purge_s"], out["c_purge_verification"], out["c_purge_timings"] = s, m.get("verification"), m.get("timings_s")
    two += s
    out["c_two_phase_total_s"], out["c_full_total_s"], out["c_full_timings"] = two, full, ft
    for name in ("c_two_phase", "c_full"):
        spark.sql(f"DROP TABLE IF EXISTS {t_name(cat, name)} PURGE")


def bench_d(spark: Any, spec: dict[str, Any], out: dict[str, Any]) -> None:
    """The logical phase on N and 10N data files: the same 1,000 subjects in the same files.

    Each table gets the same ``d_subject_files`` files holding the subjects (and other customers),
    then filler files of other customers only, up to N or 10N files; bloom filters on
    ``customer_id``, no bounds (erasure-ready). Each table is erased logically on candidate files
    (position deletes, the default), rolled back to its pre-erasure snapshot (metadata only), and
    erased again with the SQL DELETE, so both strategies run on identical files.
    """
    from pyspark.sql import functions as F

    cat, n, per_file, subject_files = (
        spec["catalog_name"],
        spec["d_files"],
        spec["d_rows_per_file"],
        spec["d_subject_files"],
    )
    n_subjects = spec["d_subjects"]
    keys = [f"cust-s{i:07d}" for i in range(n_subjects)]
    path = subjects(spark, spec["work_dir"], keys, "d")
    for label, files in (("d_n", n), ("d_10n", 10 * n)):
        t = create(spark, cat, label, BLOOM)
        # the subject files: each subject's rows in one file, next to other customers' rows
        rows = subject_files * per_file
        subj = spark.range(0, rows, 1, subject_files).withColumn(
            "customer_id",
            F.when(
                F.col("id") % 4 == 0, F.format_string("cust-s%07d", (F.col("id") / 4).cast("long") % n_subjects)
            ).otherwise(F.format_string("cust-o%08d", F.col("id"))),
        )
        subj = (
            subj.withColumn("amount", (F.col("id") % 997) / 7.0)
            .withColumn("order_ts", F.timestamp_seconds(F.lit(1767225600) + F.col("id")))
            .withColumnRenamed("id", "order_id")
        )
        subj.repartitionByRange(subject_files, "order_id").writeTo(t).append()
        filler_files = files - subject_files
        filler = generate(spark, rows, filler_files * per_file, 10_000_000, partitions=filler_files)
        filler.withColumn("customer_id", F.format_string("cust-o%08d", F.col("order_id"))).writeTo(t).append()
        holding = spark.table(t).where(F.col("customer_id").isin(keys)).select(F.input_file_name()).distinct().count()
        out[f"{label}_files"] = spark.sql(f"SELECT count(*) FROM {t}.files").collect()[0][0]
        out[f"{label}_rows"] = spark.table(t).count()
        out[f"{label}_files_holding"] = holding
        base = spark.sql(f"SELECT snapshot_id FROM {t}.refs WHERE name = 'main'").collect()[0][0]
        for variant in ("positions", "sql", "index"):
            if variant != "positions":
                spark.sql(f"CALL `{cat}`.system.rollback_to_snapshot('{NS}.{label}', {int(base)})")
            if variant == "index":
                build_index(spark, spec, label, t, out)
            s, m = run(spark, spec, label, path, "logical", logical_delete="sql" if variant == "sql" else "positions")
            key = f"{label}_{variant}"
            out[f"{key}_s"], out[f"{key}_timings"] = s, m.get("timings_s")
            out[f"{key}_verification"], out[f"{key}_rows_deleted"] = m.get("verification"), m.get("rows_deleted")
            for c in ("considered", "pruned_bounds", "pruned_bloom", "pruned_dictionary", "raw_read"):
                out[f"{key}_{c}"] = m.get(f"logical_files_{c}")
            for c in ("index_named", "unindexed", "index_excluded"):
                out[f"{key}_{c}"] = m.get(f"logical_files_{c}")
        commit_cost(spark, spec, label, t, out)
        spark.sql(f"DROP TABLE IF EXISTS {t} PURGE")


def build_index(spark: Any, spec: dict[str, Any], label: str, t: str, out: dict[str, Any]) -> None:
    """Turn the subject index on and build it: a logical erasure of a key no row holds probes every
    file (nothing to commit) and then indexes every file (``subject_index`` in its metrics)."""
    fpp = spec.get("d_index_fpp", 1e-6)
    spark.sql(
        f"ALTER TABLE {t} SET TBLPROPERTIES ('airflow-iceberg.erasure.subject-index'='true', "
        f"'airflow-iceberg.erasure.subject-index.fpp'='{float(fpp)!r}')"
    )
    none = subjects(spark, spec["work_dir"], ["cust-nobody"], f"{label}_none")
    s, m = run(spark, spec, label, none, "logical")
    ix = m.get("subject_index") or {}
    out[f"{label}_index_build_s"], out[f"{label}_index_bytes"] = ix.get("seconds"), ix.get("bytes")
    out[f"{label}_index_files"] = ix.get("files_added")


def commit_cost(spark: Any, spec: dict[str, Any], label: str, t: str, out: dict[str, Any]) -> None:
    """The index's maintenance per commit: one append of ``d_commit_files`` files, then the update
    (only the new files are read) the next erasure makes."""
    k, per_file = spec.get("d_commit_files", 10), spec["d_rows_per_file"]
    generate(spark, 50_000_000, k * per_file, 10_000_000, partitions=k).writeTo(t).append()
    none = subjects(spark, spec["work_dir"], ["cust-nobody"], f"{label}_none2")
    _s, m = run(spark, spec, label, none, "logical")
    ix = m.get("subject_index") or {}
    out[f"{label}_commit_files"], out[f"{label}_commit_index_s"] = ix.get("files_added"), ix.get("seconds")
    out[f"{label}_commit_index_bytes"] = ix.get("bytes")


def bench_w(spark: Any, spec: dict[str, Any], out: dict[str, Any]) -> None:
    """The index's upkeep by the provider's own writes, on a table of ``w_files`` indexed files:
    a WAP write of ``w_commit_files`` files on a branch, then the compaction of ``w_compact_files``
    small files on main; each followed by the same update the write and compaction jobs make
    (:func:`~airflow_iceberg_provider.spark_jobs.erasure.index.follow`), timed apart."""
    from airflow_iceberg_provider.spark_jobs.erasure.index import follow
    from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import JobContext

    cat, n, per_file = spec["catalog_name"], spec["w_files"], spec["d_rows_per_file"]
    k, small = spec["w_commit_files"], spec["w_compact_files"]
    t = create(spark, cat, "w", BLOOM)
    generate(spark, 0, n * per_file, 1_000_000, partitions=n).writeTo(t).append()
    build_index(spark, spec, "w", t, out)
    ctx = JobContext({"catalog_name": cat, "table": f"{NS}.w", "subject_index": {"salt": spec["salt"]}}, spark)
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('write.wap.enabled'='true')")
    spark.sql(f"ALTER TABLE {t} CREATE BRANCH wap_bench")
    for rep in range(spec.get("w_repeats", 3)):
        spark.conf.set("spark.wap.branch", "wap_bench")
        try:
            s0 = time.monotonic()
            batch = generate(spark, 60_000_000 + rep * k * per_file, k * per_file, 1_000_000, partitions=k)
            batch.writeTo(t).append()
            write_s = time.monotonic() - s0
        finally:
            spark.conf.unset("spark.wap.branch")
        head = ctx.ref_snapshot(ref="wap_bench")
        ix = follow(ctx, head)
        out.setdefault("w_write", []).append({"write_s": write_s, **ix})
    # compaction: small files on main (their own commits), then rewrite_data_files over them
    spark.sql(f"CALL `{cat}`.system.fast_forward('{NS}.w', 'main', 'wap_bench')")
    follow(ctx, ctx.ref_snapshot())
    tiny = max(1, per_file // 10)
    for i in range(small):
        generate(spark, 70_000_000 + i * tiny, tiny, 1_000_000, partitions=1).writeTo(t).append()
    ix = follow(ctx, ctx.ref_snapshot())
    out["w_small_files_index"] = ix
    s0 = time.monotonic()
    rows = spark.sql(
        f"CALL `{cat}`.system.rewrite_data_files(table => '{NS}.w', where => 'order_id >= 70000000', "
        "options => map('min-input-files', '2'))"
    ).collect()
    out["w_compact_s"] = time.monotonic() - s0
    out["w_compact_rewritten"] = int(rows[0]["rewritten_data_files_count"]) if rows else 0
    out["w_compact_added"] = int(rows[0]["added_data_files_count"]) if rows else 0
    out["w_compact_index"] = follow(ctx, ctx.ref_snapshot())
    out["w_files"] = spark.sql(f"SELECT count(*) FROM {t}.files").collect()[0][0]
    spark.sql(f"DROP TABLE IF EXISTS {t} PURGE")


def main() -> None:
    spark = build_session({"job": "erasure-scale-bench"})
    spec = load_spec()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS `{spec['catalog_name']}`.`{NS}`")
    out: dict[str, Any] = {}
    warm_up(spark, spec)
    for part in spec.get("parts", "abc"):
        t = time.monotonic()
        spec["_loads"] = [os.getloadavg()]
        {"a": bench_a, "b": bench_b, "c": bench_c, "d": bench_d, "w": bench_w}[part](spark, spec, out)
        out[f"{part}_load"] = spec["_loads"]
        out[f"{part}_wall_s"] = time.monotonic() - t
        with open(spec["result_path"], "w", encoding="utf-8") as fh:
            json.dump(out, fh)
    spark.stop()


if __name__ == "__main__":
    main()
