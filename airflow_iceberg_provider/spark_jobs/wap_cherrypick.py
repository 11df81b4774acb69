"""Spark job: replay audited append snapshots of a WAP branch onto ``main``.

Used by publish with ``on_conflict="cherrypick"`` when ``main`` moved since the
branch was cut (so a fast-forward is impossible). The Airflow side has already
checked that every snapshot to replay is an ``append`` and skipped those already
cherry-picked by an earlier try. Spec: ``table``, ``snapshot_ids`` (oldest first).
Runs without ``spark.wap.branch`` (the procedure acts on ``main``). When the table declares the
subject index (the spec's ``subject_index`` entry carries the salt), the index is then updated for
``main``'s new head in the same job (only the replayed files are read).
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg_provider.core.ref_guard import RefGuardRefusal, RefState, RefVerb, check_ref_change
from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import JobContext, run_job


def cherrypick_sql(catalog: str, table: str, snapshot_id: int, target: RefState) -> str:
    """``CALL system.cherrypick_snapshot`` of ``snapshot_id`` onto ``target`` (the procedure acts on
    ``main`` only). The ref guard refuses any other target, and always a legal hold
    (:class:`~airflow_iceberg_provider.core.ref_guard.RefGuardRefusal`)."""
    check_ref_change(
        RefVerb.CHERRY_PICK, target, table=table, param="ref", result_type="branch", snapshot_id=int(snapshot_id)
    )
    if target.name != "main":
        raise RefGuardRefusal(
            f"ref={target.name!r}: cherrypick_snapshot acts on main only; publish to main. Nothing was changed."
        )
    ns, name = table.split(".")  # validated on the Airflow side ([A-Za-z0-9_] only)
    return f"CALL `{catalog}`.system.cherrypick_snapshot(table => '{ns}.{name}', snapshot_id => {int(snapshot_id)})"


def cherrypick(ctx: JobContext) -> dict[str, Any]:
    spec = ctx.spec
    spark = ctx.spark
    if spark.conf.get("spark.wap.branch", None) or spark.conf.get("spark.wap.id", None):
        raise RuntimeError("cherry-pick must run without spark.wap.branch / spark.wap.id")
    ctx.snapshot_before = ctx.ref_snapshot(ref="main")
    picked = []
    target = RefState.of("main", "branch", ctx.snapshot_before)
    for sid in spec["snapshot_ids"]:
        row = spark.sql(cherrypick_sql(ctx.catalog, spec["table"], int(sid), target)).collect()[0]
        # ids as decimal strings: the ledger's details are read as JSON by browsers (float64)
        picked.append({"source": str(int(sid)), "current": str(int(row["current_snapshot_id"]))})
    ctx.snapshot_after = ctx.ref_snapshot(ref="main")
    ctx.details = {"picked": picked}
    out: dict[str, Any] = {"cherry_picked": len(picked)}
    if spec.get("subject_index") and ctx.snapshot_after != ctx.snapshot_before:
        from airflow_iceberg_provider.spark_jobs.erasure.index import follow

        out["subject_index"] = follow(ctx, ctx.snapshot_after, base=ctx.snapshot_before)
    return out


if __name__ == "__main__":
    run_job(cherrypick)
