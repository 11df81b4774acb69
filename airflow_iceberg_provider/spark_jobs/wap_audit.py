"""Spark job: audit one snapshot of a WAP branch with as few scans as possible; record every verdict.

Spec: ``table``, ``ref`` (the branch), ``snapshot_id`` (the exact snapshot audited),
``base_snapshot_id``, ``checks`` (serialised :class:`audit_checks.Check` dicts, validated
on the Airflow side), ``change_values`` / ``skipped`` (change-set metrics the Airflow
side computed from snapshot summaries), ``audit_table`` (``namespace.audit_results``).

The audited relation is ``<table> VERSION AS OF <snapshot_id>``, so a concurrent
write to the branch cannot change what is being audited. The shuffle-free checks go
into one aggregate query (one scan), the exact distinct counts into a second, and
aggregate table checks with a partition clause into one filtered query per clause
(see ``audit_checks.build_audit_queries``). One row per check is
appended to the audit-results table; the job itself succeeds whatever the verdicts
(the Airflow side reads the rows and fails the task if any check failed).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from iceberg_job_runtime import JobContext, run_job


def detect_modes(spark: Any, checks: list, source: str) -> dict[str, str]:
    """Row or aggregate predicate, per table check, decided by Spark's analyser (no data read)."""
    import audit_checks as ac

    modes = {}
    for check in checks:
        if check.kind != "table":
            continue
        try:
            _ = spark.sql(ac.mode_probe_sql(check, source)).schema  # analysis only (eager), no data read
            modes[check.name] = ac.ROW
        except Exception:  # nested aggregate -> the statement is an aggregate predicate
            modes[check.name] = ac.AGGREGATE
    return modes


def audit(ctx: JobContext) -> dict[str, Any]:
    import audit_checks as ac

    spec = ctx.spec
    spark = ctx.spark
    snapshot_id = int(spec["snapshot_id"])
    checks = [ac.Check.from_dict(d) for d in spec["checks"]]
    source = f"{ctx.table()} VERSION AS OF {snapshot_id}"
    spark.sql(f"REFRESH TABLE {ctx.table()}")
    data_checks = [c for c in checks if c.kind != "change"]
    modes = detect_modes(spark, data_checks, source)
    observed: dict[str, float | None] = {k: v for k, v in (spec.get("change_values") or {}).items()}
    t0 = time.monotonic()
    buckets = max(8, 4 * int(spark.sparkContext.defaultParallelism))
    queries = ac.build_audit_queries(data_checks, source, modes, bucket_expr="pmod(hash({v}), " + f"{buckets})")
    for query in queries:
        row = spark.sql(query.sql).collect()[0]
        for alias, name in query.columns:
            observed[name] = row[alias]
    seconds = time.monotonic() - t0
    results = ac.result_rows(checks, observed, spec.get("skipped") or {})
    airflow = spec.get("airflow") or {}
    now = datetime.now(UTC)
    rows = [
        {
            "event_id": spec["job_run_id"],
            "table_name": spec["table"],
            "ref": spec["ref"],
            "snapshot_id": snapshot_id,
            "base_snapshot_id": spec.get("base_snapshot_id"),
            "dag_id": airflow.get("dag_id"),
            "run_id": airflow.get("run_id"),
            "task_id": airflow.get("task_id"),
            "try_number": airflow.get("try_number"),
            "evaluated_at": now,
            **r,
        }
        for r in results
    ]
    audit_table = ctx.table(spec["audit_table"])
    schema = spark.table(audit_table).schema
    spark.createDataFrame([tuple(r.get(f.name) for f in schema.fields) for r in rows], schema=schema).writeTo(
        audit_table
    ).append()
    failed = [r["check_name"] for r in results if not r["passed"]]
    ctx.snapshot_before = spec.get("base_snapshot_id")
    ctx.snapshot_after = snapshot_id
    ctx.details = {"failed_checks": failed, "queries": len(queries), "modes": modes}
    return {"checks": len(results), "failed": len(failed), "queries": len(queries), "scan_seconds": round(seconds, 3)}


if __name__ == "__main__":
    run_job(audit)
