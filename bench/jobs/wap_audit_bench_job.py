"""Spark side of bench/wap_audit.py: one session, three ways to look at the same branch.

Writes ``rows`` synthetic orders to a WAP branch, then times (median of ``repeat``):
``SELECT count(*)`` over the branch snapshot (Iceberg's aggregate push-down on and off),
the single-pass audit query of ``audit_checks`` and the same checks as one query each.
Results go to ``spec["result_path"]`` as JSON.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from iceberg_job_runtime import JobContext, run_job


def bench(ctx: JobContext) -> dict[str, Any]:
    import audit_checks as ac
    from pyspark.sql import functions as F

    spark, spec = ctx.spark, ctx.spec
    table = ctx.table()
    rows = int(spec["rows"])
    t0 = time.monotonic()
    df = (
        spark.range(0, rows, numPartitions=8)
        .withColumn("order_id", F.col("id"))
        .withColumn("customer_id", (F.col("id") % 99_991).cast("string"))
        .withColumn(
            "region", F.element_at(F.array(F.lit("ca"), F.lit("us"), F.lit("eu")), (F.col("id") % 3 + 1).cast("int"))
        )
        .withColumn("amount", F.round((F.col("id") % 5000) / 7.0 + 1.0, 2))
        .withColumn(
            "order_ts", F.to_timestamp(F.lit("2026-01-01 00:00:00")) + F.expr("make_interval(0,0,0,0,0,0, id % 86400)")
        )
        .drop("id")
    )
    df.writeTo(table).append()  # lands on the WAP branch (spark.wap.branch)
    write_seconds = time.monotonic() - t0
    spark.conf.unset("spark.wap.branch")
    snap = ctx.ref_snapshot(ref=spec["ref"])
    source = f"{table} VERSION AS OF {snap}"
    checks = [ac.Check.from_dict(d) for d in spec["checks"]]
    modes = {}
    for c in checks:
        if c.kind == "table":
            try:
                _ = spark.sql(ac.mode_probe_sql(c, source)).schema
                modes[c.name] = ac.ROW
            except Exception:
                modes[c.name] = ac.AGGREGATE
    bucket = "pmod(hash({v}), " + f"{max(8, 4 * int(spark.sparkContext.defaultParallelism))})"
    single = ac.build_audit_queries(checks, source, modes, bucket)
    separate = ac.build_separate_queries(checks, source, modes, bucket)
    # the same checks with Spark's hash-based COUNT(DISTINCT), for comparison
    hashed = [q for q in ac.build_audit_queries(checks, source, modes) if "DISTINCT" in q.sql]

    per_query: list[list[float]] = [[] for _ in single]
    per_check: dict[str, list[float]] = {}

    def run(queries: list, record: bool = False) -> float:
        start = time.monotonic()
        for i, q in enumerate(queries):
            t = time.monotonic()
            spark.sql(q.sql).collect()
            if record:
                (per_query[i] if queries is single else per_check.setdefault(q.columns[0][1], [])).append(
                    time.monotonic() - t
                )
        return time.monotonic() - start

    def scan_columns() -> float:
        """Baseline that reads every audited column once and does trivial work per row."""
        start = time.monotonic()
        spark.sql(
            f"SELECT count(*), max(hash(order_id, customer_id, region, amount, order_ts)) FROM {source}"
        ).collect()
        return time.monotonic() - start

    def count(pushdown: bool) -> float:
        spark.conf.set("spark.sql.iceberg.aggregate-push-down.enabled", str(pushdown).lower())
        start = time.monotonic()
        spark.sql(f"SELECT count(*) FROM {source}").collect()
        return time.monotonic() - start

    repeat = int(spec.get("repeat", 3))
    run(single)  # warm-up: JIT, file listing, OS cache
    count(False)
    timings: dict[str, list[float]] = {
        "count_scan": [],
        "count_pushdown": [],
        "audit_single_pass": [],
        "audit_separate": [],
        "scan_columns": [],
        "distinct_hash_based": [],
    }
    for _ in range(repeat):
        timings["count_scan"].append(count(False))
        timings["count_pushdown"].append(count(True))
        timings["scan_columns"].append(scan_columns())
        timings["distinct_hash_based"].append(run(hashed))
        timings["audit_single_pass"].append(run(single, record=True))
    spark.conf.set("spark.sql.iceberg.aggregate-push-down.enabled", "false")
    for _ in range(max(1, repeat // 2)):
        timings["audit_separate"].append(run(separate, record=True))
    result = {
        "rows": rows,
        "checks": len(checks),
        "single_pass_queries": len(single),
        "separate_queries": len(separate),
        "write_seconds": round(write_seconds, 2),
        "median": {k: round(statistics.median(v), 3) for k, v in timings.items()},
        "all": {k: [round(x, 3) for x in v] for k, v in timings.items()},
        "single_pass_sql": single[0].sql[:400] + "...",
        "separate_shuffle_free": round(
            sum(statistics.median(v) for k, v in per_check.items() if k.split(".")[-1] not in ac.DISTINCT_CHECKS), 3
        ),
        "separate_distinct": round(
            sum(statistics.median(v) for k, v in per_check.items() if k.split(".")[-1] in ac.DISTINCT_CHECKS), 3
        ),
        "per_query": [
            {"checks": [n for _, n in q.columns], "median": round(statistics.median(t), 3)}
            for q, t in zip(single, per_query, strict=True)
        ],
    }
    with open(spec["result_path"], "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    return {"rows": rows}


if __name__ == "__main__":
    run_job(bench)
