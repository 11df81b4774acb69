"""Spark job: run an ordered list of table-maintenance actions in ONE session.

Spec (JSON file, see ``iceberg_job_runtime``)::

    {"table": "ns.tbl", "catalog_name": "...",
     "actions": [{"action": "rewrite_data_files", "args": {...}}, ...],
     "orphan_paths_limit": 10000}

Actions (names = Iceberg procedures): ``rewrite_data_files``,
``rewrite_position_delete_files``, ``rewrite_manifests``, ``expire_snapshots``,
``remove_orphan_files``. Arguments were validated on the Airflow side; the
``CALL`` statements are built by :mod:`maintenance_sql` (pure, shared with the
erasure job). Every action's procedure output, duration and ``main`` head
before/after land in the ledger row's ``metrics["actions"]``; orphan file paths
go to the ledger row's ``details`` (never to the log).

The action functions are importable by name (``from maintenance import
run_action, expire_snapshots``) for other jobs; nothing here imports pyspark at
module level.
"""

from __future__ import annotations

import time
from typing import Any

from airflow_iceberg_provider.core.governance import LEGAL_HOLD_PREFIX
from airflow_iceberg_provider.core.maintenance_actions import ERASURE_PURGE
from airflow_iceberg_provider.spark_jobs.maintenance_sql import (
    PROCEDURE_OUTPUTS,
    action_sql,
    holds_dropped_by_age,
    orphan_location_args,
    quote_table,
)

DEFAULT_ORPHAN_PATHS_LIMIT = 10_000


def run_procedure(ctx: Any, action: str, table: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Run one maintenance ``CALL`` and return its output rows as dicts."""
    sql = action_sql(ctx.catalog, table, action, args)
    print(f"[maintenance] {sql}")
    return [row.asDict() for row in ctx.spark.sql(sql).collect()]


def _counts(action: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    if not rows:
        return {k: 0 for k in PROCEDURE_OUTPUTS.get(action, ())}
    out: dict[str, Any] = {}
    for row in rows:
        for key, value in row.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
    return out


def guard_legal_holds(ctx: Any, table: str) -> None:
    """Fail before ``expire_snapshots`` if Iceberg would drop a legal hold by age (read just now)."""
    t = quote_table(ctx.catalog, table)
    props = {r["key"]: r["value"] for r in (row.asDict() for row in ctx.spark.sql(f"SHOW TBLPROPERTIES {t}").collect())}
    raw = props.get("history.expire.max-ref-age-ms")
    refs = [
        {"name": r.name, "type": r.type, "snapshot_id": r.snapshot_id, "max_ref_age_ms": r.max_reference_age_in_ms}
        for r in ctx.spark.sql(f"SELECT name, type, snapshot_id, max_reference_age_in_ms FROM {t}.refs").collect()
    ]
    if not any(str(r["name"]).startswith(LEGAL_HOLD_PREFIX) for r in refs):
        return
    ts = {
        int(r.snapshot_id): int(r.ts)
        for r in ctx.spark.sql(f"SELECT snapshot_id, unix_millis(committed_at) AS ts FROM {t}.snapshots").collect()
    }
    at_risk = holds_dropped_by_age(
        refs,
        ts,
        default_max_ref_age_ms=int(raw) if raw and raw.strip().lstrip("-").isdigit() else None,
        now_ms=int(time.time() * 1000),
    )
    if at_risk:
        raise RuntimeError(
            f"refusing expire_snapshots on {table}: it would drop the legal hold(s) {at_risk} "
            "(older than history.expire.max-ref-age-ms and without their own max-ref-age-ms). Pin each hold "
            "(place it again with IcebergCreateTagOperator(legal_hold=True) on the same snapshot). Nothing expired."
        )


def expire_snapshots(ctx: Any, table: str, args: dict[str, Any]) -> dict[str, Any]:
    guard_legal_holds(ctx, table)
    return _counts("expire_snapshots", run_procedure(ctx, "expire_snapshots", table, args))


def compute_table_stats(ctx: Any, table: str, args: dict[str, Any]) -> dict[str, Any]:
    rows = run_procedure(ctx, "compute_table_stats", table, args)
    return {"statistics_file": rows[0].get("statistics_file") if rows else None}


def rewrite_data_files(ctx: Any, table: str, args: dict[str, Any]) -> dict[str, Any]:
    """The rewrite; then, when the table declares the subject index (the spec's ``subject_index``
    entry carries the salt), the index follows ``main``'s new head in this session: the rewritten
    files' entries removed, the new files' subject columns read (a new file's rows cannot be mapped
    back to its source files)."""
    before = ctx.ref_snapshot(table) if ctx.spec.get("subject_index") else None
    out = _counts("rewrite_data_files", run_procedure(ctx, "rewrite_data_files", table, args))
    if ctx.spec.get("subject_index") and table == ctx.spec.get("table"):
        after = ctx.ref_snapshot(table)
        if after != before:
            from airflow_iceberg_provider.spark_jobs.erasure.index import follow

            out["subject_index"] = follow(ctx, after, table, base=before)
    return out


def rewrite_manifests(ctx: Any, table: str, args: dict[str, Any]) -> dict[str, Any]:
    return _counts("rewrite_manifests", run_procedure(ctx, "rewrite_manifests", table, args))


def rewrite_position_delete_files(ctx: Any, table: str, args: dict[str, Any]) -> dict[str, Any]:
    return _counts("rewrite_position_delete_files", run_procedure(ctx, "rewrite_position_delete_files", table, args))


def orphan_scheme_args(ctx: Any, table: str) -> dict[str, Any]:
    """``equal_schemes`` / ``prefix_mismatch_mode`` / ``prefix_listing`` for the table's location and the
    FileIO the catalog really uses (:func:`maintenance_sql.orphan_location_args`)."""
    t = quote_table(ctx.catalog, table)
    location, io_impl = ctx.access.location(t), ctx.access.io_impl(t)
    out = orphan_location_args(location, io_impl)
    print(f"[maintenance] orphan listing of {location.split('://', 1)[0]}:// location through {io_impl}: {out}")
    return out


def remove_orphan_files(ctx: Any, table: str, args: dict[str, Any]) -> dict[str, Any]:
    """List orphans (dry run) to size them, then delete the same set unless ``dry_run``.

    The deleting call uses the same absolute ``older_than`` instant, so it can only
    find the files the listing found (newer files are younger than the cutoff). Both calls
    get the scheme handling of :func:`orphan_scheme_args` (arguments given in the spec win).
    """
    scheme_args = orphan_scheme_args(ctx, table)
    args = {**scheme_args, **args}
    listing = run_procedure(ctx, "remove_orphan_files", table, {**args, "dry_run": True})
    paths = [r["orphan_file_location"] for r in listing]
    sizes = ctx.access.file_sizes(paths)
    if not args.get("dry_run", True) and paths:
        removed_rows = run_procedure(ctx, "remove_orphan_files", table, {**args, "dry_run": False})
        paths = [r["orphan_file_location"] for r in removed_rows]
    limit = int(ctx.spec.get("orphan_paths_limit", DEFAULT_ORPHAN_PATHS_LIMIT))
    ctx.details.setdefault("orphan_files", []).extend(paths[:limit])
    if len(paths) > limit:
        ctx.details["orphan_files_truncated"] = len(paths) - limit
    return {
        "orphan_files_count": len(paths),
        "orphan_bytes": sum(sizes.get(p, 0) for p in paths),
        "dry_run": bool(args.get("dry_run", True)),
        "scheme_handling": {k: args[k] for k in scheme_args},
    }


def erasure_purge(ctx: Any, table: str, args: dict[str, Any]) -> dict[str, Any]:
    """The erasure purge as a maintenance action, in this job's Spark session.

    Its parameters are the job spec's ``erasure`` entry (they hold the salt, so they never travel
    in an action's ``args``, which the ledger records); evidence rows carry this job's run id.
    A refusal stops the action list (nothing was changed; the job records ``refused``).
    """
    from airflow_iceberg_provider.spark_jobs.erasure.run import run_erasure

    job = {k: v for k, v in ctx.spec.items() if k not in ("actions", "erasure")}  # catalog, governance, run id
    spec = {
        **job,
        **ctx.spec["erasure"],
        "table": table,
        "job_run_id": ctx.spec["job_run_id"],
        "catalog_name": ctx.catalog,
    }
    run, metrics = run_erasure(ctx.spark, spec, ctx.access)
    if run.status == "refused":
        ctx.details["refused"] = run.details.get("refused")
    return {**metrics, "status": run.status}


ACTION_FUNCTIONS = {
    ERASURE_PURGE: erasure_purge,
    "compute_table_stats": compute_table_stats,
    "expire_snapshots": expire_snapshots,
    "rewrite_data_files": rewrite_data_files,
    "rewrite_manifests": rewrite_manifests,
    "rewrite_position_delete_files": rewrite_position_delete_files,
    "remove_orphan_files": remove_orphan_files,
}


def run_action(ctx: Any, table: str, action: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one action and return ``{action, args, output, seconds, snapshot_before, snapshot_after}``."""
    before = ctx.ref_snapshot(table)
    t0 = time.monotonic()
    output = ACTION_FUNCTIONS[action](ctx, table, dict(args))
    seconds = round(time.monotonic() - t0, 3)
    after = ctx.ref_snapshot(table)
    return {
        "action": action,
        "args": args,
        "output": output,
        "seconds": seconds,
        "snapshot_before": before,
        "snapshot_after": after,
    }


def maintenance(ctx: Any) -> dict[str, Any]:
    table = ctx.spec["table"]
    actions = ctx.spec.get("actions") or []
    unknown = [a.get("action") for a in actions if a.get("action") not in ACTION_FUNCTIONS]
    if unknown:
        raise ValueError(f"unknown maintenance actions {unknown}")
    ctx.snapshot_before = ctx.ref_snapshot(table)
    results: list[dict[str, Any]] = []
    ctx.details["actions"] = results  # partial results survive a failure (failed ledger row)
    for item in actions:
        results.append(run_action(ctx, table, item["action"], item.get("args") or {}))
        if results[-1]["output"].get("status") == "refused":
            ctx.status = "refused"
            break
    ctx.snapshot_after = ctx.ref_snapshot(table)
    ctx.details.pop("actions")
    return {"actions": results}


if __name__ == "__main__":
    from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import run_job

    run_job(maintenance)
