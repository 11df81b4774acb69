"""Spark job: replay audited append snapshots of a WAP branch onto ``main``.

Used by publish with ``on_conflict="cherrypick"`` when ``main`` moved since the
branch was cut (so a fast-forward is impossible). The Airflow side has already
checked that every snapshot to replay is an ``append`` and skipped those already
cherry-picked by an earlier try. Spec: ``table``, ``snapshot_ids`` (oldest first).
Runs without ``spark.wap.branch`` (the procedure acts on ``main``).
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import JobContext, run_job


def cherrypick(ctx: JobContext) -> dict[str, Any]:
    spec = ctx.spec
    spark = ctx.spark
    if spark.conf.get("spark.wap.branch", None) or spark.conf.get("spark.wap.id", None):
        raise RuntimeError("cherry-pick must run without spark.wap.branch / spark.wap.id")
    ctx.snapshot_before = ctx.ref_snapshot(ref="main")
    picked = []
    ns, name = spec["table"].split(".")  # validated on the Airflow side ([A-Za-z0-9_] only)
    for sid in spec["snapshot_ids"]:
        row = spark.sql(
            f"CALL `{ctx.catalog}`.system.cherrypick_snapshot(table => '{ns}.{name}', snapshot_id => {int(sid)})"
        ).collect()[0]
        # ids as decimal strings: the ledger's details are read as JSON by browsers (float64)
        picked.append({"source": str(int(sid)), "current": str(int(row["current_snapshot_id"]))})
    ctx.snapshot_after = ctx.ref_snapshot(ref="main")
    ctx.details = {"picked": picked}
    return {"cherry_picked": len(picked)}


if __name__ == "__main__":
    run_job(cherrypick)
