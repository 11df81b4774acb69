"""Spark job: commit a plan's ref changes where pyiceberg cannot (format-version 3 tables).

The write-audit-publish operators plan their ref moves on the Airflow side (create, reset,
publish, tag, drop) and commit them through the catalog in one compare-and-swap. pyiceberg 0.12
writes no format-version 3 metadata, so behind a catalog whose client writes it (``sql``,
``glue``, ``hive``) the same plan comes here: one ``ALTER TABLE`` per change, in the plan's order,
each checked against the ref read fresh just before (the state the plan expected and the ref
guard). A ref that moved stops the job before its statement; the operator then reads the refs
back through the catalog and verifies every change. Spec: ``table``, ``changes``.
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg_provider.core.ref_guard import ref_state
from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import JobContext, run_job
from airflow_iceberg_provider.spark_jobs.ref_sql import ref_change_sql


def _refs(ctx: JobContext) -> dict[str, dict[str, Any]]:
    """The table's refs, read fresh from the catalog."""
    t = ctx.table()
    ctx.spark.sql(f"REFRESH TABLE {t}")
    rows = ctx.spark.sql(f"SELECT name, type, snapshot_id FROM {t}.refs").collect()
    return {r["name"]: {"type": r["type"], "snapshot_id": r["snapshot_id"]} for r in rows}


def apply_changes(ctx: JobContext) -> dict[str, Any]:
    spark, table = ctx.spark, ctx.spec["table"]
    if spark.conf.get("spark.wap.branch", None) or spark.conf.get("spark.wap.id", None):
        raise RuntimeError("ref changes must run without spark.wap.branch / spark.wap.id")
    ctx.snapshot_before = ctx.ref_snapshot(ref="main")
    applied = []
    for change in ctx.spec["changes"]:
        state = ref_state(_refs(ctx), str(change["ref"]))
        spark.sql(ref_change_sql(ctx.table(), table, change, state))
        target = change.get("snapshot_id")
        # ids as decimal strings: the ledger's details are read as JSON by browsers (float64)
        applied.append({"ref": change["ref"], "snapshot_id": str(target) if target is not None else None})
    ctx.snapshot_after = ctx.ref_snapshot(ref="main")
    ctx.details = {"changes": applied}
    return {"ref_changes": len(applied)}


if __name__ == "__main__":
    run_job(apply_changes)
