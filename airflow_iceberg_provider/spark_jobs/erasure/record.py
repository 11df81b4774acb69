"""Spark side of the erasure records: evidence rows (MERGE) and request statuses (lifecycle).

Split from ``erasure.py`` (one module per concern, each under 800 lines). Evidence rows
carry salted hashes only; statuses are computed on the driver with the pure
:func:`erasure_sql.combined_status` from the evidence (request ids, phases, outcomes:
no subject value).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.spark_jobs.erasure import sql as es


def ts(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, UTC) if ms else None


def retry(fn: Any, spark: Any, table: str, attempts: int = 5) -> Any:
    """Retry a governance MERGE that lost against a concurrent commit."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as err:  # CommitFailed / ValidationException from a concurrent writer
            text = str(err)
            if attempt == attempts or not any(s in text for s in ("CommitFailed", "ValidationException", "conflict")):
                raise
            spark.sql(f"REFRESH TABLE {table}")
            time.sleep(0.2 * attempt)
    return None


def evidence_name(run: Any) -> str:
    return es.table_sql(run.catalog, f"{run.spec['governance_namespace']}.erasure_evidence")


def write_evidence(
    run: Any,
    per_request: Any,
    started: datetime,
    outcome: str,
    dropped: list[dict[str, Any]],
    held: list[dict[str, Any]],
    verify: dict[str, Any],
) -> None:
    """One row per (request, table), MERGEd: re-runs update it; the phase never regresses."""
    from pyspark.sql import functions as F

    ev_name = evidence_name(run)
    ev_schema = run.spark.table(ev_name).schema
    consts = evidence_constants(run, started, outcome, dropped, held, verify)
    subjects = run.spark.table(es.SUBJECTS_VIEW).select("request_id", "subject_hash")
    df = subjects.join(per_request, "request_id", "left").withColumn(
        "rows_deleted", F.coalesce(F.col("n"), F.lit(0)).cast("long")
    )
    df = df.withColumn("rows_found", F.col("rows_deleted"))
    df = df.withColumn(
        "evidence_id",
        F.substring(F.sha2(F.concat(F.col("request_id"), F.lit("\x00"), F.lit(run.evidence_table)), 256), 1, 32),
    )
    # one schema lookup: under Spark Connect each ``df.columns`` is a round trip to the server
    computed = set(df.columns) - {"n"}
    cols = []
    for f in ev_schema.fields:
        if f.name in computed:
            cols.append(F.col(f.name).cast(f.dataType).alias(f.name))
        else:
            cols.append(F.lit(consts.get(f.name)).cast(f.dataType).alias(f.name))
    df.select(*cols).createOrReplaceTempView("erasure_new_evidence")
    merge = evidence_merge_sql(ev_name, [f.name for f in ev_schema.fields])
    retry(lambda: run.sql(merge).collect(), run.spark, ev_name)


def evidence_constants(
    run: Any,
    started: datetime,
    outcome: str,
    dropped: list[dict[str, Any]],
    held: list[dict[str, Any]],
    verify: dict[str, Any],
) -> dict[str, Any]:
    """The evidence columns that are the same for every request of this run (no subject value)."""
    airflow = run.spec.get("airflow") or {}
    now = datetime.now(UTC)
    m = run.metrics
    physical = run.phase_name in lc.PHYSICAL_PHASES
    return {
        "table_name": run.evidence_table,
        "snapshot_before": run.snapshot_before,
        "snapshot_after": run.snapshot_after,
        "files_rewritten": m.get("files_rewritten", 0),
        "files_removed": m.get("files_removed", 0),
        "snapshots_expired": m.get("snapshots_expired", 0),
        "refs_dropped": json.dumps([d["name"] for d in dropped]),
        "refs_blocking": json.dumps([h["name"] for h in held]),
        "verification": outcome,
        "verified_rows_remaining": int(verify.get("rows_outside_holds", 0)) + int(verify.get("held_rows", 0)),
        "rows_held": int(verify.get("held_rows", 0)),
        "started_at": started,
        "finished_at": now,
        "last_verified_at": now,
        "runs": 1,
        "dag_id": airflow.get("dag_id"),
        "run_id": airflow.get("run_id"),
        "task_id": airflow.get("task_id"),
        "try_number": airflow.get("try_number"),
        "job_run_id": run.spec.get("job_run_id"),
        "subject_columns": json.dumps(run.columns),
        "ref_policy": run.policy,
        "time_travel_floor_before": ts(m.get("time_travel_floor_before_ms")),
        "time_travel_floor_after": ts(m.get("time_travel_floor_after_ms")),
        "provider_version": run.spec.get("provider_version"),
        "iceberg_version": run.iceberg_version(),
        "phase": run.phase_name,
        "logical_erased_at": now if outcome == lc.VERIFIED else None,
        "purged_at": now if physical and outcome == lc.VERIFIED else None,
        "files_considered": m.get("files_considered", 0),
        "files_pruned_bounds": m.get("files_pruned_bounds", 0),
        "files_pruned_bloom": m.get("files_pruned_bloom", 0),
        "files_pruned_dictionary": m.get("files_pruned_dictionary", 0),
        "files_raw_read": m.get("files_raw_read", 0),
        "snapshots_kept": m.get("snapshots_retained", 0),
        "leftovers_removed": m.get("leftovers_removed", 0),
    }


def evidence_merge_sql(ev_name: str, columns: list[str]) -> str:
    """MERGE of ``erasure_new_evidence`` into the evidence table: first-run columns kept, counters
    added, the phase never regressing (``lc.merged_phase``), the rest replaced."""
    keep_first = {"evidence_id", "request_id", "table_name", "subject_hash", "started_at", "snapshot_before"}
    physical_list = ", ".join(f"'{p}'" for p in lc.PHYSICAL_PHASES)
    special = {
        "runs": "coalesce(e.`runs`, 0) + 1",
        "refs_dropped": "CASE WHEN n.`refs_dropped` = '[]' THEN e.`refs_dropped` ELSE n.`refs_dropped` END",
        # lc.merged_phase: a logical re-run never hides an earlier purge
        "phase": f"CASE WHEN e.`phase` IN ({physical_list}) AND n.`phase` = '{lc.PHASE_LOGICAL}' "
        "THEN e.`phase` ELSE n.`phase` END",
        "rows_found": "greatest(coalesce(e.`rows_found`, 0), coalesce(n.`rows_found`, 0))",
        "logical_erased_at": "coalesce(e.`logical_erased_at`, n.`logical_erased_at`)",
        "purged_at": "coalesce(n.`purged_at`, e.`purged_at`)",
    }
    updates = []
    for n in columns:
        if n in keep_first:
            continue
        if n in special:
            updates.append(f"e.{es.q(n)} = {special[n]}")
        elif n in ("rows_deleted", "files_rewritten", "files_removed", "snapshots_expired", "leftovers_removed"):
            updates.append(f"e.{es.q(n)} = coalesce(e.{es.q(n)}, 0) + n.{es.q(n)}")
        else:
            updates.append(f"e.{es.q(n)} = n.{es.q(n)}")
    return (
        f"MERGE INTO {ev_name} e USING erasure_new_evidence n ON e.evidence_id = n.evidence_id "
        f"WHEN MATCHED THEN UPDATE SET {', '.join(updates)} WHEN NOT MATCHED THEN INSERT *"
    )


def update_requests(run: Any) -> dict[str, int]:
    """New status of every request of this run (pure ``combined_status`` over its evidence), MERGEd."""
    src = run.spec["source"]
    req = es.table_sql(run.catalog, src["table"])
    ev_name = evidence_name(run)
    scope = list(run.spec.get("tables_in_scope") or [run.evidence_table])
    run.sql(f"REFRESH TABLE {ev_name}")
    run.sql(f"REFRESH TABLE {req}")
    ids = run.spark.table(es.SUBJECTS_VIEW).select("request_id")
    current = {
        r.request_id: r.status
        for r in run.spark.table(req).join(ids, "request_id", "left_semi").select("request_id", "status").collect()
    }
    per: dict[str, dict[str, tuple[str | None, str | None]]] = {}
    ev = run.spark.table(ev_name).join(ids, "request_id", "left_semi")
    for r in ev.select("request_id", "table_name", "phase", "verification").collect():
        if r.table_name in scope:
            per.setdefault(r.request_id, {})[r.table_name] = (r.phase or lc.PHASE_FULL, r.verification)
    new = []
    for rid, status in current.items():
        cur = status if status in lc.STATUSES else lc.STATUS_PENDING
        new.append((rid, lc.combined_status(cur, per.get(rid, {}), scope)))
    counts: dict[str, int] = {}
    for _, s in new:
        counts[s] = counts.get(s, 0) + 1
    if not new:
        return counts
    # compare-and-set: a status another run changed since it was read here is left alone (mapped
    # erasures of several tables finish together; the last to read the evidence sees every row)
    rows = [(rid, current[rid], s) for rid, s in new]
    run.spark.createDataFrame(rows, "request_id string, old_status string, new_status string").createOrReplaceTempView(
        "erasure_new_status"
    )
    req_cols = {f.name for f in run.spark.table(req).schema.fields}
    sets = ["r.status = n.new_status"]
    if "updated_at" in req_cols:
        sets.append("r.updated_at = current_timestamp()")
    if "completed_at" in req_cols:
        sets.append(
            f"r.completed_at = CASE WHEN n.new_status = '{lc.STATUS_ERASED}' THEN current_timestamp() "
            "ELSE r.completed_at END"
        )
    merge = (
        f"MERGE INTO {req} r USING erasure_new_status n ON r.request_id = n.request_id "
        f"WHEN MATCHED AND r.status <> n.new_status AND r.status <=> n.old_status THEN UPDATE SET {', '.join(sets)}"
    )
    retry(lambda: run.sql(merge).collect(), run.spark, req)
    return counts
