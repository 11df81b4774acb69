"""Redaction of the requests table: the last step of a purge.

Once a request is erased on every table in scope (status ``erased``), the requests table is
the last place holding its subject key in clear. This step, run by the purge (``purge`` and
``full`` phases) right after the request statuses are written:

1. picks every erased, not yet redacted request of the requests table whose evidence rows
   carry one salted hash (:func:`core.erasure_lifecycle.redaction_plan`; no key is read for that)
   and whose grace period (``redact_after``) is over;
2. MERGEs ``subject_key = 'hmac-sha256:<hash>'``, ``status = 'redacted'`` into it (requests
   not yet erased keep their keys, so later phases still find their subjects);
3. purges the requests table's own history as the purge does for a data table: rewrite of
   every data file carrying a delete file, ``expire_snapshots`` of everything older than the
   new head, ``rewrite_manifests``, expiry again;
4. verifies independently: a raw read (delete files not applied) of every data file still
   reachable, of the files that held the keys before (gone from storage) and of every manifest
   entry's bounds of ``subject_key``: none may hold a redacted key;
5. records ``subject_redacted_at`` and the outcome on every evidence row of the redacted requests.

The keys being redacted are held in the driver's memory only (as the subjects already are)
and never printed; errors go through the job's redaction of secrets.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.spark_jobs.erasure import record as er
from airflow_iceberg_provider.spark_jobs.erasure import scan as esc
from airflow_iceberg_provider.spark_jobs.erasure import sql as es

KEYS_VIEW = "erasure_redacted_keys"
#: The verification counts (``redaction_<name>``); each must be 0.
CHECKS = ("files_with_keys", "old_files_reachable", "old_files_on_storage", "bound_hits", "equality_delete_files")


def wanted(run: Any) -> bool:
    """Whether this run redacts: a physical phase over a requests table, not switched off."""
    src = run.spec.get("source") or {}
    return (
        run.phase_name in lc.PHYSICAL_PHASES
        and src.get("kind") == "requests_table"
        and bool(run.spec.get("redact_requests", True))
    )


def redact_requests(run: Any) -> dict[str, Any]:
    """Redact every erased request of the run's requests table; metrics (``redaction_*``)."""
    req_dotted = run.spec["source"]["table"]
    req = es.table_sql(run.catalog, req_dotted)
    ev_name = er.evidence_name(run)
    run.sql(f"REFRESH TABLE {req}")
    run.sql(f"REFRESH TABLE {ev_name}")
    completed = ", completed_at" if "completed_at" in {f.name for f in run.spark.table(req).schema.fields} else ""
    statuses = run.sql(
        f"SELECT request_id, status{completed} FROM {req} WHERE status IN ({_in_list(lc.REDACTABLE_STATUSES)})"
    ).collect()
    if not statuses:
        return {"requests_redacted": 0, "redaction_verification": None}
    ids = run.spark.createDataFrame([(r.request_id,) for r in statuses], "request_id string")
    evidence = (
        run.spark.table(ev_name)
        .join(ids, "request_id", "left_semi")
        .select("request_id", "table_name", "subject_hash", "phase", "verification", "purged_at", "finished_at")
        .collect()
    )
    plan = lc.redaction_plan(
        [_aware(r.asDict()) for r in statuses],
        [_aware(e.asDict()) for e in evidence],
        erased_before=grace_end(run.spec),
    )
    out: dict[str, Any] = {
        "requests_redaction_unresolved": plan["unresolved"],
        "requests_redaction_waiting": plan["waiting"],
    }
    if not plan["redact"]:
        out.update(requests_redacted=0, redaction_verification=None)
        return out
    new = [(rid, lc.redacted_key(h)) for rid, h in sorted(plan["redact"].items())]
    run.spark.createDataFrame(new, "request_id string, redacted_key string").createOrReplaceTempView(
        "erasure_redactions"
    )
    # the clear keys, for the verification only (driver memory; never printed)
    keys = [
        r.subject_key
        for r in run.sql(
            f"SELECT r.subject_key FROM {req} r JOIN erasure_redactions n ON r.request_id = n.request_id "
            "WHERE r.subject_key IS NOT NULL"
        ).collect()
    ]
    run.extra_secrets.extend(keys)
    key_df = run.spark.createDataFrame([(k,) for k in dict.fromkeys(keys)], "k string").cache()
    key_df.count()
    key_df.createOrReplaceTempView(KEYS_VIEW)
    try:
        with run.timed("redact"):
            files_before = _raw_key_files(run, req, _data_files(run, req))
            _merge_redactions(run, req)
        with run.timed("redact_purge"):
            expired = _purge_history(run, req, req_dotted)
        with run.timed("redact_verify"):
            verify = _verify(run, req, files_before)
        outcome = lc.VERIFIED if not any(verify.values()) else lc.FAILED
        _record(run, ev_name, sorted(plan["redact"]), outcome)
    finally:
        key_df.unpersist()
    out.update(
        requests_redacted=len(new),
        redaction_verification=outcome,
        redaction_files_with_keys_before=len(files_before),
        redaction_snapshots_expired=expired["snapshots"],
        redaction_files_removed=expired["files"],
        **{f"redaction_{k}": v for k, v in verify.items()},
    )
    return out


def grace_end(spec: dict[str, Any]) -> datetime | None:
    """Requests erased after this moment keep their keys for now (``redact_after``); ``None``: no grace."""
    seconds = spec.get("redact_after_seconds")
    if not seconds:
        return None
    return datetime.now(UTC) - timedelta(seconds=float(seconds))


def _aware(row: dict[str, Any]) -> dict[str, Any]:
    """Spark hands timestamps back as naive datetimes in the driver's local time: make them aware (UTC)."""
    return {k: v.astimezone(UTC) if isinstance(v, datetime) and v.tzinfo is None else v for k, v in row.items()}


def _in_list(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)  # constants of erasure_sql, never input


def _data_files(run: Any, req: str) -> dict[str, str]:
    rows = run.sql(f"SELECT DISTINCT file_path FROM {req}.all_data_files").collect()
    return {esc.norm_path(r[0]): r[0] for r in rows}


def _raw_key_files(run: Any, req: str, files: dict[str, str]) -> set[str]:
    """Data files (raw: delete files not applied) holding a key being redacted."""
    from pyspark.sql import functions as F

    if not files:
        return set()
    raw = run.spark.read.parquet(*files.values()).select("subject_key", F.input_file_name().alias("f"))
    raw.createOrReplaceTempView("erasure_requests_raw")
    rows = run.sql(
        f"SELECT DISTINCT f FROM erasure_requests_raw WHERE subject_key IN (SELECT k FROM {es.q(KEYS_VIEW)})"
    ).collect()
    return {esc.norm_path(r.f) for r in rows}


def _merge_redactions(run: Any, req: str) -> None:
    cols = {f.name for f in run.spark.table(req).schema.fields}
    sets = [
        "r.subject_key = n.redacted_key",
        f"r.status = '{lc.STATUS_REDACTED}'",
    ]
    if "updated_at" in cols:
        sets.append("r.updated_at = current_timestamp()")
    merge = (
        f"MERGE INTO {req} r USING erasure_redactions n ON r.request_id = n.request_id "
        f"WHEN MATCHED AND r.status IN ({_in_list(lc.REDACTABLE_STATUSES)}) THEN UPDATE SET {', '.join(sets)}"
    )
    er.retry(lambda: run.sql(merge).collect(), run.spark, req)


def _purge_history(run: Any, req: str, req_dotted: str) -> dict[str, int]:
    """Rewrite files carrying deletes, expire every older snapshot, rewrite manifests, expire."""
    run.sql(f"REFRESH TABLE {req}")
    out = {"snapshots": 0, "files": 0}
    if run.sql(f"SELECT count(*) FROM {req}.delete_files").collect()[0][0]:
        run.sql(es.rewrite_data_files_sql(run.catalog, req_dotted)).collect()
    before = {int(r[0]) for r in run.sql(f"SELECT snapshot_id FROM {req}.snapshots").collect()}
    for step in ("expire", "manifests", "expire"):
        run.sql(f"REFRESH TABLE {req}")
        if step == "manifests":
            run.sql(es.rewrite_manifests_sql(run.catalog, req_dotted)).collect()
            continue
        latest = run.sql(f"SELECT max(unix_millis(committed_at)) FROM {req}.snapshots").collect()[0][0] or 0
        older_than = max(int(time.time() * 1000), int(latest) + 1)
        for r in run.sql(es.expire_sql(run.catalog, req_dotted, older_than)).collect():
            d = r.asDict()
            out["files"] += sum(
                int(d.get(k) or 0)
                for k in (
                    "deleted_data_files_count",
                    "deleted_position_delete_files_count",
                    "deleted_equality_delete_files_count",
                    "deleted_manifest_files_count",
                    "deleted_manifest_lists_count",
                )
            )
    run.sql(f"REFRESH TABLE {req}")
    after = {int(r[0]) for r in run.sql(f"SELECT snapshot_id FROM {req}.snapshots").collect()}
    out["snapshots"] = len(before - after)
    return out


def _verify(run: Any, req: str, files_before: set[str]) -> dict[str, int]:
    """Counts that must all be 0: keys in reachable files (raw), old key files still reachable or on
    storage, manifest entries bounding a key, equality-delete files (they would store keys)."""
    reachable = _data_files(run, req)
    still = _raw_key_files(run, req, reachable)
    lb, ub = "e.readable_metrics.subject_key.lower_bound", "e.readable_metrics.subject_key.upper_bound"
    bound_hits = run.sql(
        f"SELECT count(*) FROM {req}.all_entries e JOIN {es.q(KEYS_VIEW)} k "
        f"ON ({lb} = k.k OR {ub} = k.k OR (length({lb}) >= 8 AND startswith(k.k, {lb})))"
    ).collect()[0][0]
    eq = run.sql(f"SELECT count(*) FROM {req}.all_files WHERE content = 2").collect()[0][0]
    return {
        "files_with_keys": len(still),
        "old_files_reachable": len(files_before & set(reachable)),
        "old_files_on_storage": sum(1 for f in files_before if run.exists(f)),
        "bound_hits": int(bound_hits),
        "equality_delete_files": int(eq),
    }


def _record(run: Any, ev_name: str, request_ids: list[str], outcome: str) -> None:
    """``subject_redacted_at`` and ``redaction_verification`` on every evidence row of the requests."""
    run.spark.createDataFrame([(r,) for r in request_ids], "request_id string").createOrReplaceTempView(
        "erasure_redacted_ids"
    )
    stamp = "current_timestamp()" if outcome == lc.VERIFIED else "NULL"
    merge = (
        f"MERGE INTO {ev_name} e USING erasure_redacted_ids n ON e.request_id = n.request_id "
        f"WHEN MATCHED THEN UPDATE SET e.subject_redacted_at = {stamp}, e.redaction_verification = '{outcome}'"
    )
    er.retry(lambda: run.sql(merge).collect(), run.spark, ev_name)
