"""Spark job: audit one snapshot of a WAP branch with as few scans as possible; record every verdict.

Spec: ``table``, ``ref`` (the branch), ``snapshot_id`` (the exact snapshot audited),
``base_snapshot_id``, ``snapshot_records`` / ``snapshot_schema`` (the audited snapshot's
``total-records`` and schema JSON, when known), ``checks`` (serialised :class:`~airflow_iceberg_provider.core.audit_checks.Check` dicts, validated
on the Airflow side), ``change_values`` / ``skipped`` (change-set metrics the Airflow
side computed from snapshot summaries), ``audit_table`` (``namespace.audit_results``),
and for an incremental audit ``incremental_base`` (the base snapshot, when the branch only
appended since it) with ``base_values`` (what an earlier audit recorded for that base).

The audited relation is ``<table> VERSION AS OF <snapshot_id>``, so a concurrent
write to the branch cannot change what is being audited. How each check's value is
obtained (appended rows only, Iceberg metadata, or a scan folded with the other checks)
is decided by ``audit_engine``. One row per check is appended to the audit-results
table; the job itself completes whatever the verdicts (the Airflow side reads the rows
and fails the task if any check failed), and its completion line says so:
``audit completed: 2 of 11 checks failed`` (:mod:`audit_report`), never "succeeded".
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import JobContext, run_job


def audit(ctx: JobContext) -> dict[str, Any]:
    from airflow_iceberg_provider.core import audit_checks as ck
    from airflow_iceberg_provider.core.audit_report import completion_line
    from airflow_iceberg_provider.spark_jobs.audit import sql as ac
    from airflow_iceberg_provider.spark_jobs.audit.engine import CHANGE_SET, METADATA, AuditEngine

    spec = ctx.spec
    spark = ctx.spark
    snapshot_id = int(spec["snapshot_id"])
    checks = [ck.Check.from_dict(d) for d in spec["checks"]]
    # the identity of the spec as given (the engine may rewrite checks for evaluation)
    check_hashes = {c.name: ck.check_hash(c) for c in checks}
    spec_hash = ck.spec_hash_of(check_hashes)
    spark.sql(f"REFRESH TABLE {ctx.table()}")
    observed: dict[str, float | None] = {k: v for k, v in (spec.get("change_values") or {}).items()}
    t0 = time.monotonic()
    engine = AuditEngine(spark, ctx.table(), driver_read=bool(spec.get("driver_read", True)), access=ctx.access)
    ev, checks, modes = engine.evaluate(
        checks,
        snapshot_id,
        base_snapshot_id=spec.get("incremental_base"),
        base_values=spec.get("base_values") or {},
        snapshot_records=spec.get("snapshot_records"),
        snapshot_schema=spec.get("snapshot_schema"),
    )
    observed.update(ev.observed)
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
            "check_hash": check_hashes[r["check_name"]],
            "spec_hash": spec_hash,
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
    ctx.outcome = completion_line(len(results), len(failed))  # not "succeeded": the data may have failed
    ctx.snapshot_before = spec.get("base_snapshot_id")
    ctx.snapshot_after = snapshot_id
    ctx.details = {
        "spec_hash": spec_hash,
        "failed_checks": failed,
        "modes": modes,
        "methods": ev.methods,
        "queries": [[label, round(sec, 3)] for label, sec in ev.queries],
        "planning": [[label, round(sec, 3)] for label, sec in ev.planning],
        "incremental_fallback": ev.fallback,
        "driver_read_refused": ev.driver_refused,
    }
    return {
        "checks": len(results),
        "failed": len(failed),
        "queries": len(ev.queries),
        "from_metadata": ev.count(METADATA),
        "from_change_set": ev.count(CHANGE_SET),
        "incremental_fallback": ev.fallback,
        "appended_read_by": ev.appended_read_by,
        "scan_seconds": round(seconds, 3),
    }


if __name__ == "__main__":
    run_job(audit)
