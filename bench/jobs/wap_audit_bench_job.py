"""Spark side of bench/wap_audit.py: one session, every way to audit the same branch snapshot.

Writes ``rows`` synthetic orders to ``main`` and audits that snapshot once (recording its
values, as a published audit does), then appends ``batch`` new orders to a WAP branch and
times, median of ``repeat``, over the branch snapshot (``rows + batch`` rows):

* ``SELECT count(*)``, as Spark runs it (answered from manifests) and forced to scan;
* the audit as ``IcebergWapAuditOperator`` runs it (``audit_engine``: appended rows +
  the base's recorded values, metadata, scan), and the same with the appended rows read
  by a Spark projection instead of the driver (``driver_read=False``);
* the same audit of the whole snapshot (no base values: what a first audit costs), with
  and without Iceberg metadata answers;
* the same checks as one query each (the common-sql way).

It also checks that every way yields the same observed values. Results go to
``spec["result_path"]`` as JSON.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from iceberg_job_runtime import JobContext, run_job


def separate_queries(ac: Any, checks: list[Any], source: str, modes: Any, bucket_expr: str | None) -> list[Any]:
    """One query per data check (the common-sql way), to compare with the audit's batched queries."""
    return [
        q
        for c in checks
        if c.kind in ("column", "table")
        for q in ac.build_audit_queries([c], source, modes, bucket_expr)
    ]


def orders(spark: Any, start: int, count: int) -> Any:
    from pyspark.sql import functions as F

    return (
        spark.range(start, start + count, numPartitions=8 if count >= 1_000_000 else 2)
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


def bench(ctx: JobContext) -> dict[str, Any]:
    from airflow_iceberg_provider.core import audit_checks as ck
    from airflow_iceberg_provider.spark_jobs.audit import sql as ac
    from airflow_iceberg_provider.spark_jobs.audit.engine import AuditEngine

    spark, spec = ctx.spark, ctx.spec
    table = ctx.table()
    rows, batch = int(spec["rows"]), int(spec["batch"])
    checks = [ck.Check.from_dict(d) for d in spec["checks"]]
    engine = AuditEngine(spark, table)
    spark_reads = AuditEngine(spark, table, driver_read=False)  # the appended rows read by a Spark projection

    t0 = time.monotonic()
    spark.conf.unset("spark.wap.branch")
    orders(spark, 0, rows).writeTo(table).append()  # the published history, on main
    base = ctx.ref_snapshot()
    write_seconds = time.monotonic() - t0
    t0 = time.monotonic()
    first, _, _ = engine.evaluate(checks, base)  # the audit that published it
    first_audit_seconds = time.monotonic() - t0
    base_values = dict(first.observed)

    spark.conf.set("spark.wap.branch", spec["ref"])
    orders(spark, rows, batch).writeTo(table).append()  # today's batch, on the WAP branch
    spark.conf.unset("spark.wap.branch")
    snap = ctx.ref_snapshot(ref=spec["ref"])
    source = engine.source(snap)

    def count(pushdown: bool) -> float:
        spark.conf.set("spark.sql.iceberg.aggregate-push-down.enabled", str(pushdown).lower())
        start = time.monotonic()
        spark.sql(f"SELECT count(*) FROM {source}").collect()
        spark.conf.unset("spark.sql.iceberg.aggregate-push-down.enabled")
        return time.monotonic() - start

    results: dict[str, Any] = {}

    def audit(label: str, eng: Any = engine, **kwargs: Any) -> float:
        start = time.monotonic()
        ev, _, _ = eng.evaluate(checks, snap, **kwargs)
        seconds = time.monotonic() - start
        results[label] = ev
        return seconds

    modes: dict[str, str] = {}
    separate: list = []

    def one_query_per_check() -> float:
        start = time.monotonic()
        for q in separate:
            spark.sql(q.sql).collect()
        return time.monotonic() - start

    def incremental() -> float:
        return audit("incremental", base_snapshot_id=base, base_values=base_values)

    def incremental_spark_read() -> float:
        return audit("incremental_spark_read", spark_reads, base_snapshot_id=base, base_values=base_values)

    def whole() -> float:
        return audit("whole")

    def whole_no_metadata() -> float:
        return audit("whole_no_metadata", use_metadata=False)

    # warm-up (JIT, file listing, OS cache) of every timed way, ``warmup`` rounds, and the plan of the common-sql baseline
    for _ in range(int(spec.get("warmup", 5))):
        _, evaluated, modes = engine.evaluate(checks, snap, base_snapshot_id=base, base_values=base_values)
        count(False)
        count(True)
        incremental_spark_read()
    whole()
    separate = separate_queries(ac, evaluated, source, modes, engine.bucket_expr)
    timings: dict[str, list[float]] = {
        k: []
        for k in (
            "count_pushdown",
            "count_scan",
            "audit_incremental",
            "audit_incremental_spark_read",
            "audit_whole",
            "audit_whole_no_metadata",
        )
    }
    repeat = int(spec.get("repeat", 3))
    for _ in range(repeat):
        timings["count_pushdown"].append(count(True))
        timings["count_scan"].append(count(False))
        timings["audit_incremental"].append(incremental())
        timings["audit_incremental_spark_read"].append(incremental_spark_read())
        timings["audit_whole"].append(whole())
        timings["audit_whole_no_metadata"].append(whole_no_metadata())
    timings["audit_separate"] = [one_query_per_check() for _ in range(max(1, repeat // 2))]

    reference = results["whole_no_metadata"].observed
    mismatches = {
        label: {k: (v, reference.get(k)) for k, v in ev.observed.items() if not _same(v, reference.get(k))}
        for label, ev in results.items()
    }
    result = {
        "rows": rows,
        "batch": batch,
        "checks": len(checks),
        "separate_queries": len(separate),
        "write_seconds": round(write_seconds, 2),
        "first_audit_seconds": round(first_audit_seconds, 3),
        "median": {k: round(statistics.median(v), 3) for k, v in timings.items()},
        "all": {k: [round(x, 3) for x in v] for k, v in timings.items()},
        "methods": {label: dict(ev.methods) for label, ev in results.items()},
        "queries": {label: [[q, round(s, 3)] for q, s in ev.planning + ev.queries] for label, ev in results.items()},
        "fallback": {label: ev.fallback for label, ev in results.items() if ev.fallback},
        "mismatches": {k: v for k, v in mismatches.items() if v},
    }
    with open(spec["result_path"], "w", encoding="utf-8") as fh:
        json.dump(result, fh, default=str)
    return {"rows": rows}


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(b)))


if __name__ == "__main__":
    run_job(bench)
