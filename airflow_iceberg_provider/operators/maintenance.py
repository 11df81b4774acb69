"""Table maintenance: snapshot expiry, compaction, manifest / delete-file rewrites, orphan removal.

Decisions, previews and verification go through :class:`IcebergCatalogHook`
(pyiceberg, no JVM); the heavy work runs as Iceberg's Spark procedures in the
``maintenance`` Spark job, **one spark-submit per task** whatever the number of
actions. Safety is built in: every parameter is validated and every floor checked
before a job is submitted, so a refused task changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import __version__
from airflow_iceberg_provider._validation import MAIN_BRANCH, validate_snapshot_id
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergValidationError,
)
from airflow_iceberg_provider.governance import LedgerEntry, airflow_identity
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.maintenance_policy import (
    COMPUTE_STATS,
    DEFAULT_EXPIRY_FLOOR,
    ORPHAN_DEFAULT_AGE,
    ExpiryPreview,
    MaintenanceDecision,
    PlannedAction,
    TableDefaults,
    check_expiry_cutoff,
    check_gc_enabled,
    check_main_branch,
    check_orphan_cutoff,
    decide,
    iso,
    now_ms,
    parse_duration,
    preview_table_expiry,
    resolve_cutoff,
    resolve_policy,
    rewrite_options,
    validate_retain_last,
    validate_strategy,
    validate_where,
)
from airflow_iceberg_provider.maintenance_state import read_maintenance_state
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.ui.links import GovernanceHealthLink

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_provider.models import SnapshotInfo, TableHealth

JOB = "maintenance"
#: Pure CALL builders the job imports; shipped with --py-files so cluster deploy mode works too.
MAINTENANCE_SQL_MODULE = Path(__file__).resolve().parent.parent / "spark_jobs" / "maintenance_sql.py"
#: the procedure output count that says "this action committed something"
_COMMIT_COUNTS = {
    "rewrite_data_files": "rewritten_data_files_count",
    "rewrite_manifests": "rewritten_manifests_count",
    "rewrite_position_delete_files": "rewritten_delete_files_count",
}
_HEALTH_KEYS = (
    "data_files",
    "data_bytes",
    "records",
    "small_files",
    "delete_files",
    "manifests",
    "snapshots",
    "small_file_ratio",
    "deletes_per_data_file",
)


def health_summary(health: TableHealth) -> dict[str, Any]:
    """The health figures reported in XCom and ledger rows."""
    d = health.to_dict()
    return {k: d[k] for k in _HEALTH_KEYS}


def expiry_floor(value: timedelta | str | None) -> timedelta:
    """The expiry floor: the argument, else ``[iceberg_provider] expiry_floor``, else 1 hour."""
    if value is not None:
        return parse_duration(value, "older_than_floor")
    from airflow_iceberg_provider.hooks.spark import _config

    configured = _config("expiry_floor")
    if configured:
        return parse_duration(configured, "[iceberg_provider] expiry_floor")
    return DEFAULT_EXPIRY_FLOOR


def _parse_ids(value: Any) -> list[int]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = [v for v in value.strip().strip("[]").replace(",", " ").split() if v]
    if isinstance(value, (int, str)):
        value = [value]
    return [validate_snapshot_id(v, "snapshot_ids") for v in value]


def _options_mapping(value: Any, param: str = "options") -> dict[str, Any]:
    """Rendered ``options``: a mapping of plain values (a malformed JSON string is refused by name)."""
    if value in (None, ""):
        return {}
    if not isinstance(value, Mapping):
        raise IcebergValidationError(f"{param}={value!r:.80} is not a mapping; pass e.g. {{'min-input-files': '5'}}.")
    return dict(value)


def _check_sort_columns(sort_order: str | None, columns: Sequence[str], table: str) -> None:
    """Every column of a ``sort_order`` (or ``zorder(...)``) must exist in the table."""
    if not sort_order:
        return
    text = sort_order.strip()
    if text.lower().startswith("zorder("):
        names = [n.strip() for n in text[len("zorder(") : -1].split(",")]
    else:
        names = [term.split()[0] for term in text.split(",") if term.split()]
    missing = [n for n in names if n not in columns]
    if missing:
        raise IcebergValidationError(
            f"sort_order={sort_order!r} names {missing}, which are not columns of {table} (columns: "
            f"{sorted(columns)}); fix sort_order."
        )


def _commits_between(tbl: Table, before: int | None, after: int) -> list[SnapshotInfo] | None:
    """Snapshots from ``before`` (exclusive) to ``after`` (inclusive), oldest first.

    ``None`` when ``after`` does not descend from ``before``. ``before`` itself may
    have been expired since (its id survives as the parent id of its child).
    """
    from airflow_iceberg_provider.hooks.catalog import snapshot_info

    by_id = {s.snapshot_id: s for s in tbl.metadata.snapshots}
    out: list[SnapshotInfo] = []
    current: int | None = after
    while current is not None and current != before:
        snap = by_id.get(current)
        if snap is None:
            return None
        out.append(snapshot_info(snap))
        current = snap.parent_snapshot_id
    if current != before:
        return None
    return list(reversed(out))


class _IcebergMaintenanceOperator(IcebergSparkBaseOperator):
    """Shared plumbing: submit planned actions as one job, verify each, write ledger rows."""

    ui_color = "#e3f2d9"
    operator_extra_links = (GovernanceHealthLink(),)

    def run_actions(
        self,
        context: Context,
        actions: Sequence[PlannedAction],
        *,
        health_before: TableHealth,
        expiry: ExpiryPreview | None = None,
        operation: str = JOB,
    ) -> tuple[list[dict[str, Any]], TableHealth, dict[str, Any]]:
        """Run ``actions`` in one spark-submit; verify them through the catalog; ledger one row per action.

        :return: the per-action results (procedure output, seconds, main before/after),
            the health after, and the job's ledger row.
        """
        spec = self.job_spec(context, operation, ref=MAIN_BRANCH, actions=[a.spec() for a in actions])
        self.log.info(
            "Submitting one Spark job for %s: %s", self.ident, ", ".join(f"{a.action} ({a.reason})" for a in actions)
        )
        refs_before = sorted(self.catalog_hook.refs(self.ident))
        run, row = self.run_spark_job(context, JOB, spec, extra_py_files=[str(MAINTENANCE_SQL_MODULE)])
        results = list(row["metrics"].get("actions") or [])
        if [r.get("action") for r in results] != [a.action for a in actions]:
            raise IcebergCommitVerificationError(
                f"Maintenance job {run.job_run_id} reported actions {[r.get('action') for r in results]} but "
                f"{[a.action for a in actions]} were planned; see its ledger row."
            )
        hook = self.catalog_hook
        tbl = hook.load_table(self.ident)
        ran = {a.action for a in actions}
        for result in results:
            self._verify(tbl, result, expiry, row, expired_later="expire_snapshots" in ran, refs_before=refs_before)
        health_after = hook.health(tbl)
        self._ledger(context, run.job_run_id, actions, results, health_before, health_after, expiry, row)
        for r in results:
            self.log.info("%s on %s: %s in %.1fs", r["action"], self.ident, r["output"], r["seconds"])
        return results, health_after, row

    # ----------------------------------------------------------- verification
    def _verify(
        self,
        tbl: Table,
        result: Mapping[str, Any],
        expiry: ExpiryPreview | None,
        row: Mapping[str, Any],
        *,
        expired_later: bool,
        refs_before: Sequence[str] = (),
    ) -> None:
        action, out = result["action"], result["output"]
        before, after = result.get("snapshot_before"), result.get("snapshot_after")
        if action in _COMMIT_COUNTS and int(out.get(_COMMIT_COUNTS[action]) or 0) > 0:
            if after is None or after == before:
                raise IcebergCommitVerificationError(
                    f"{action} on {self.ident} reports {out} but main did not advance from {before}."
                )
            if tbl.metadata.snapshot_by_id(after) is None:
                if expired_later:  # an intermediate snapshot may legitimately be expired in the same run
                    return
                raise IcebergCommitVerificationError(f"{action} commit {after} is not in {self.ident}'s metadata.")
            chain = _commits_between(tbl, before, after)
            if chain is None:
                raise IcebergCommitVerificationError(
                    f"{action} commit {after} on {self.ident} does not descend from {before} (concurrent writer?)."
                )
            wrong = [(c.snapshot_id, c.operation) for c in chain if c.operation != "replace"]
            if wrong:
                raise IcebergCommitVerificationError(
                    f"{action} on {self.ident} committed {wrong}; every maintenance commit must be a 'replace'."
                )
            if action == "rewrite_data_files":  # one commit, or several (partial progress, dangling deletes)
                added = sum(int(c.summary.get("added-data-files", 0)) for c in chain)
                removed = sum(int(c.summary.get("deleted-data-files", 0)) for c in chain)
                if (added, removed) != (out.get("added_data_files_count"), out.get("rewritten_data_files_count")):
                    raise IcebergCommitVerificationError(
                        f"rewrite_data_files on {self.ident}: commits {[c.snapshot_id for c in chain]} add {added} / "
                        f"remove {removed} data files but the procedure reported {out}."
                    )
        elif action == "expire_snapshots" and expiry is not None:
            present = {s.snapshot_id for s in tbl.metadata.snapshots}
            left = [sid for sid in expiry.expire if sid in present]
            if left:
                raise IcebergCommitVerificationError(
                    f"expire_snapshots on {self.ident} finished but {len(left)} snapshots it should have removed "
                    f"are still there (e.g. {left[:5]})."
                )
            missing_refs = sorted(set(refs_before) - set(tbl.metadata.refs) - set(expiry.refs_expired))
            if missing_refs:
                raise IcebergCommitVerificationError(f"refs {missing_refs} of {self.ident} vanished during expiry.")
        elif action == COMPUTE_STATS:
            current = tbl.current_snapshot()
            fresh = [st for st in tbl.metadata.statistics if current and st.snapshot_id == current.snapshot_id]
            reported = out.get("statistics_file")
            if not fresh or (reported and reported not in {f.statistics_path for f in fresh}):
                raise IcebergCommitVerificationError(
                    f"compute_table_stats on {self.ident} reported {out} but the table has no statistics file for "
                    f"its current snapshot {current.snapshot_id if current else None}."
                )
        elif action == "remove_orphan_files":
            paths = list((row.get("details") or {}).get("orphan_files") or [])[:200]
            dry = bool(out.get("dry_run"))
            wrong = [p for p in paths if tbl.io.new_input(p).exists() != dry]
            if wrong:
                state = "were deleted during a dry run" if dry else "still exist after removal"
                raise IcebergCommitVerificationError(f"{len(wrong)} orphan files of {self.ident} {state}: {wrong[:3]}")

    # ------------------------------------------------------------------ ledger
    def _ledger(
        self,
        context: Context | None,
        job_run_id: str,
        actions: Sequence[PlannedAction],
        results: Sequence[Mapping[str, Any]],
        health_before: TableHealth,
        health_after: TableHealth,
        expiry: ExpiryPreview | None,
        job_row: Mapping[str, Any],
    ) -> None:
        """One ledger row per action (one commit), with before/after health and the procedure output."""
        now = datetime.now(UTC)
        rows: list[LedgerEntry] = []
        for i, (planned, result) in enumerate(zip(actions, results, strict=True)):
            details: dict[str, Any] = {"reason": planned.reason, "args": planned.args, "job_run_id": job_run_id}
            if planned.action == "expire_snapshots" and expiry is not None:
                details["held_snapshots"] = expiry.held_snapshots
                details["refs_expired"] = expiry.refs_expired
            if planned.action == "remove_orphan_files":
                details["orphan_files_in"] = f"ledger event {job_run_id} (details.orphan_files)"
            dry = bool(result["output"].get("dry_run"))
            rows.append(
                LedgerEntry(
                    event_id=f"{job_run_id}-{i}",
                    operation=f"maintenance.{planned.action}",
                    table_name=self.ident.dotted,
                    ref=MAIN_BRANCH,
                    **airflow_identity(context),
                    started_at=job_row.get("started_at") or now,
                    finished_at=job_row.get("finished_at") or now,
                    status="dry_run" if dry else "succeeded",
                    snapshot_before=result.get("snapshot_before"),
                    snapshot_after=result.get("snapshot_after"),
                    metrics={
                        **result["output"],
                        "seconds": result.get("seconds"),
                        "health_before": health_summary(health_before),
                        "health_after": health_summary(health_after),
                    },
                    details=with_string_ids(details),
                    provider_version=__version__,
                )
            )
        self.catalog_hook.governance.record(*rows)

    def _record(self, context: Context | None, operation: str, status: str, **kwargs: Any) -> str:
        if kwargs.get("details") is not None:  # ids as strings: a UI parses details as JSON (float64)
            kwargs["details"] = with_string_ids(kwargs["details"])
        return self.catalog_hook.record_ledger(
            operation=operation, table=self.ident.dotted, ref=MAIN_BRANCH, status=status, context=context, **kwargs
        )


class IcebergExpireSnapshotsOperator(_IcebergMaintenanceOperator):
    """
    Expire old snapshots and physically delete the files only they reference (Spark ``expire_snapshots``).

    Snapshots reachable from a branch or tag (legal holds included) are kept;
    the result lists which old snapshots were kept and by which ref. With
    ``dry_run=True`` the preview is computed through the catalog hook and no JVM starts.
    When nothing would expire, no Spark job is started either.

    :param older_than: expire snapshots older than this — a duration (``pendulum.duration(days=7)``,
        ``'7d'``, ``'P7D'``) or an instant (datetime, ISO-8601, epoch ms); default
        ``now - history.expire.max-snapshot-age-ms`` (templated).
    :param retain_last: keep at least this many snapshots of main (>= 1); default
        ``history.expire.min-snapshots-to-keep`` (templated).
    :param snapshot_ids: expire these snapshots too (refused if a ref points at one) (templated).
    :param older_than_floor: refuse an ``older_than`` newer than ``now - floor``; default
        ``[iceberg_provider] expiry_floor`` (e.g. ``6h``), else 1 h.
    :param dry_run: only report what would expire (no JVM, nothing deleted) (templated).
    :param stream_results: stream file deletions in the procedure (less driver memory).
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "older_than",
        "retain_last",
        "snapshot_ids",
        "dry_run",
    )

    def __init__(
        self,
        *,
        older_than: Any = None,
        retain_last: int | str | None = None,
        snapshot_ids: Sequence[int | str] | str | None = None,
        older_than_floor: timedelta | str | None = None,
        dry_run: bool | str = False,
        stream_results: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(retain_last, int):
            validate_retain_last(retain_last)
        self.older_than = older_than
        self.retain_last = retain_last
        self.snapshot_ids = snapshot_ids
        self.older_than_floor = older_than_floor
        if older_than_floor is not None:
            parse_duration(older_than_floor, "older_than_floor")
        self.dry_run = dry_run
        self.stream_results = stream_results

    def execute(self, context: Context) -> dict[str, Any]:
        hook = self.catalog_hook
        tbl = hook.load_table(self.ident)
        props = tbl.metadata.properties
        defaults = TableDefaults.from_properties(props)
        now = now_ms()
        cutoff = (
            resolve_cutoff(self.older_than, "older_than", now=now)
            if self.older_than not in (None, "")
            else now - defaults.max_snapshot_age_ms
        )
        check_expiry_cutoff(cutoff, now=now, floor=expiry_floor(self.older_than_floor))
        retain = validate_retain_last(
            self.retain_last if self.retain_last not in (None, "") else defaults.min_snapshots_to_keep
        )
        ids = _parse_ids(self.snapshot_ids)
        dry_run = str(self.dry_run).strip().lower() == "true"
        if not dry_run:
            check_gc_enabled(props, self.ident.dotted, "expire_snapshots")
        preview = preview_table_expiry(tbl, older_than=cutoff, retain_last=retain, snapshot_ids=ids, now_ms=now)
        result: dict[str, Any] = {
            "table": self.ident.dotted,
            "older_than": iso(cutoff),
            "retain_last": retain,
            "dry_run": dry_run,
            "held_snapshots": preview.held_snapshots,
            "refs_expired": preview.refs_expired,
        }
        if preview.held_snapshots:
            self.log.info("Old snapshots kept by refs on %s: %s", self.ident, preview.held_snapshots)
        if dry_run or not preview.expire:
            status = "dry_run" if dry_run else "noop"
            self._record(
                context,
                "maintenance.expire_snapshots",
                status,
                snapshot_before=hook.ref_snapshot_id(tbl),
                snapshot_after=hook.ref_snapshot_id(tbl),
                metrics={"would_expire": len(preview.expire), "snapshots": len(preview.expire) + len(preview.retain)},
                details=preview.to_dict(),
            )
            self.log.info(
                "%s: %d snapshots %s expire (no Spark job started)",
                self.ident,
                len(preview.expire),
                "would" if dry_run else "need to",
            )
            return with_string_ids(
                {**result, "would_expire": preview.expire, "expired_snapshots": 0, "spark_job": False}
            )
        action = PlannedAction(
            "expire_snapshots",
            {
                "older_than_ms": cutoff,
                "retain_last": retain,
                "snapshot_ids": ids,
                "stream_results": bool(self.stream_results),
            },
            f"{len(preview.expire)} snapshots to expire",
        )
        results, after, _ = self.run_actions(context, [action], health_before=hook.health(tbl), expiry=preview)
        result = {
            **result,
            "expired_snapshots": len(preview.expire),
            "removed": results[0]["output"],
            "snapshots_after": after.snapshots,
            "spark_job": True,
        }
        return with_string_ids(result)


class IcebergRewriteDataFilesOperator(_IcebergMaintenanceOperator):
    """
    Compact data files (Spark ``rewrite_data_files``) and verify the ``replace`` commit.

    :param strategy: ``binpack`` or ``sort`` (templated).
    :param sort_order: for ``sort``: ``'col ASC NULLS LAST, ...'`` or ``'zorder(a,b)'`` (z-order);
        default the table's sort order (templated).
    :param where: filter selecting the files to rewrite, e.g. ``"order_ts < '2026-01-01'"`` (templated).
    :param target_file_size_bytes: output file size (default the table's ``write.target-file-size-bytes``).
    :param min_input_files: rewrite a group once it has this many files (Iceberg default 5).
    :param delete_file_threshold: rewrite any data file with at least this many delete files applied.
    :param partial_progress: commit file groups as they finish (several ``replace`` commits).
    :param options: further Iceberg rewrite options (plain tokens), e.g. ``{"max-concurrent-file-group-rewrites": "4"}``.
    :param branch: must be ``main``: the procedure compacts main only (templated).
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "strategy",
        "sort_order",
        "where",
        "options",
        "branch",
    )

    def __init__(
        self,
        *,
        strategy: str = "binpack",
        sort_order: str | None = None,
        where: str | None = None,
        target_file_size_bytes: int | None = None,
        min_input_files: int | None = None,
        delete_file_threshold: int | None = None,
        partial_progress: bool | None = None,
        options: Mapping[str, Any] | None = None,
        branch: str = MAIN_BRANCH,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.strategy = strategy
        self.sort_order = sort_order
        self.where = where
        self.target_file_size_bytes = target_file_size_bytes
        self.min_input_files = min_input_files
        self.delete_file_threshold = delete_file_threshold
        self.partial_progress = partial_progress
        self.options = options
        self.branch = branch

    def execute(self, context: Context) -> dict[str, Any]:
        check_main_branch(self.branch, "rewrite_data_files")
        where = validate_where(self.where)
        options = _options_mapping(self.options)
        hook = self.catalog_hook
        tbl = hook.load_table(self.ident)
        strategy, sort_order = validate_strategy(self.strategy, self.sort_order, len(tbl.sort_order().fields))
        _check_sort_columns(sort_order, tbl.schema().column_names, self.ident.dotted)
        opts = rewrite_options(
            target_file_size_bytes=self.target_file_size_bytes,
            min_input_files=self.min_input_files,
            delete_file_threshold=self.delete_file_threshold,
            partial_progress=self.partial_progress,
            options=options,
        )
        args: dict[str, Any] = {"strategy": strategy, "options": opts}
        if sort_order:
            args["sort_order"] = sort_order
        if where:
            args["where"] = where
        before = hook.health(tbl)
        if before.snapshot_id is None:
            self.log.info("%s has no snapshot on main: nothing to compact, no Spark job started", self.ident)
            return {"table": self.ident.dotted, "rewritten_data_files": 0, "spark_job": False}
        action = PlannedAction("rewrite_data_files", args, f"{strategy} compaction requested")
        results, after, _ = self.run_actions(context, [action], health_before=before)
        out, res = results[0]["output"], results[0]
        result = {
            "table": self.ident.dotted,
            "strategy": strategy,
            "sort_order": sort_order,
            "rewritten_data_files": out.get("rewritten_data_files_count", 0),
            "added_data_files": out.get("added_data_files_count", 0),
            "rewritten_bytes": out.get("rewritten_bytes_count", 0),
            "removed_delete_files": out.get("removed_delete_files_count", 0),
            "data_files_before": before.data_files,
            "data_files_after": after.data_files,
            "snapshot_id": res.get("snapshot_after"),
            "previous_snapshot_id": res.get("snapshot_before"),
            "spark_job": True,
        }
        return with_string_ids(result)


class IcebergRewriteManifestsOperator(_IcebergMaintenanceOperator):
    """
    Rewrite manifests (Spark ``rewrite_manifests``) so planning reads few, well-clustered manifests.

    :param use_caching: let Spark cache the manifest entries while rewriting (procedure default true).
    """

    def __init__(self, *, use_caching: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.use_caching = use_caching

    def execute(self, context: Context) -> dict[str, Any]:
        hook = self.catalog_hook
        before = hook.health(self.ident)
        if before.snapshot_id is None:
            return {"table": self.ident.dotted, "rewritten_manifests": 0, "spark_job": False}
        args = {} if self.use_caching is None else {"use_caching": bool(self.use_caching)}
        action = PlannedAction("rewrite_manifests", args, f"{before.manifests} manifests")
        results, after, _ = self.run_actions(context, [action], health_before=before)
        out = results[0]["output"]
        result = {
            "table": self.ident.dotted,
            "rewritten_manifests": out.get("rewritten_manifests_count", 0),
            "added_manifests": out.get("added_manifests_count", 0),
            "manifests_before": before.manifests,
            "manifests_after": after.manifests,
            "snapshot_id": results[0].get("snapshot_after"),
            "spark_job": True,
        }
        return with_string_ids(result)


class IcebergRewritePositionDeleteFilesOperator(_IcebergMaintenanceOperator):
    """
    Compact position delete files and drop dangling ones (Spark ``rewrite_position_delete_files``).

    :param where: partition filter (templated).
    :param rewrite_all: rewrite every delete file regardless of size thresholds.
    :param options: further Iceberg options (plain tokens).
    """

    template_fields: Sequence[str] = (*IcebergSparkBaseOperator.template_fields, "where", "options")

    def __init__(
        self,
        *,
        where: str | None = None,
        rewrite_all: bool = False,
        options: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.where = where
        self.rewrite_all = rewrite_all
        self.options = options

    def execute(self, context: Context) -> dict[str, Any]:
        where = validate_where(self.where)
        options = _options_mapping(self.options)
        hook = self.catalog_hook
        before = hook.health(self.ident)
        if before.format_version < 2:
            raise IcebergValidationError(
                f"{self.ident} is format-version {before.format_version}; position delete files exist only in "
                "format-version 2+ tables, so there is nothing to rewrite. Remove this task or upgrade the table."
            )
        opts = rewrite_options(options={**options, **({"rewrite-all": "true"} if self.rewrite_all else {})})
        args: dict[str, Any] = {"options": opts} if opts else {}
        if where:
            args["where"] = where
        if before.position_delete_files == 0:
            self.log.info("%s has no position delete files; no Spark job started", self.ident)
            return {"table": self.ident.dotted, "rewritten_delete_files": 0, "spark_job": False}
        action = PlannedAction(
            "rewrite_position_delete_files", args, f"{before.position_delete_files} position delete files"
        )
        results, after, _ = self.run_actions(context, [action], health_before=before)
        out = results[0]["output"]
        return {
            "table": self.ident.dotted,
            "rewritten_delete_files": out.get("rewritten_delete_files_count", 0),
            "added_delete_files": out.get("added_delete_files_count", 0),
            "delete_files_before": before.delete_files,
            "delete_files_after": after.delete_files,
            "spark_job": True,
        }


class IcebergRemoveOrphanFilesOperator(_IcebergMaintenanceOperator):
    """
    Find (and optionally delete) files under the table location that no snapshot references.

    **Dry run by default.** ``older_than`` must be at least 24 hours (Iceberg's own
    floor; default 3 days): younger files may belong to writes still in flight,
    and deleting them would corrupt those commits. The count and bytes are returned;
    the paths go to the governance ledger (``details.orphan_files``), not to the log.

    :param older_than: minimum file age, as a duration or an instant (templated).
    :param dry_run: only list the orphans (templated).
    """

    template_fields: Sequence[str] = (*IcebergSparkBaseOperator.template_fields, "older_than", "dry_run")

    def __init__(self, *, older_than: Any = ORPHAN_DEFAULT_AGE, dry_run: bool | str = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.older_than = older_than
        self.dry_run = dry_run

    def execute(self, context: Context) -> dict[str, Any]:
        now = now_ms()
        cutoff = resolve_cutoff(self.older_than, "older_than", now=now)
        check_orphan_cutoff(cutoff, now=now)
        dry_run = str(self.dry_run).strip().lower() != "false"
        hook = self.catalog_hook
        tbl = hook.load_table(self.ident)
        if not dry_run:
            check_gc_enabled(tbl.metadata.properties, self.ident.dotted, "remove_orphan_files")
        before = hook.health(tbl)
        action = PlannedAction(
            "remove_orphan_files",
            {"older_than_ms": cutoff, "dry_run": dry_run},
            f"orphan files older than {iso(cutoff)}" + (" (dry run)" if dry_run else ""),
        )
        results, _, row = self.run_actions(context, [action], health_before=before)
        out = results[0]["output"]
        if results[0].get("snapshot_after") != before.snapshot_id:
            raise IcebergCommitVerificationError(
                f"main of {self.ident} moved during orphan removal ({before.snapshot_id} -> "
                f"{results[0].get('snapshot_after')}); check for concurrent writers."
            )
        self.log.info(
            "%s: %d orphan files (%d bytes) %s; paths in ledger event %s",
            self.ident,
            out["orphan_files_count"],
            out["orphan_bytes"],
            "found (dry run, nothing deleted)" if dry_run else "removed",
            row["event_id"],
        )
        return {
            "table": self.ident.dotted,
            "dry_run": dry_run,
            "older_than": iso(cutoff),
            "orphan_files": out["orphan_files_count"],
            "orphan_bytes": out["orphan_bytes"],
            "ledger_event_id": row["event_id"],
            "spark_job": True,
        }


class IcebergMaintenancePlanOperator(_IcebergMaintenanceOperator):
    """
    Read table health through the catalog, decide what maintenance the policy calls for, run it all in ONE job.

    When the table is healthy no JVM is started at all (the task says so and
    writes a ``noop`` ledger row). Otherwise the chosen actions run in this order
    in one spark-submit: ``rewrite_data_files`` → ``rewrite_position_delete_files`` →
    ``rewrite_manifests`` → ``expire_snapshots`` → ``remove_orphan_files``; each is
    verified through the catalog and recorded in the ledger with health before/after.

    Every threshold defaults to a table property, then to a built-in default:
    ``write.target-file-size-bytes``, ``history.expire.max-snapshot-age-ms``,
    ``history.expire.min-snapshots-to-keep``, ``commit.manifest.min-count-to-merge``, and
    ``airflow-iceberg.maintenance.<name>`` for ``min-input-files``, ``max-small-file-ratio``,
    ``max-deletes-per-data-file``, ``delete-file-threshold``, ``max-manifests``,
    ``min-snapshots-to-expire``, ``remove-orphans``, ``partial-progress``.

    :param target_file_size_bytes: compaction target; files under 75 % of it are "small".
    :param min_input_files: binpack group size that triggers a rewrite (default 5).
    :param max_small_file_ratio: compact when this share of data files is compactable (default 0.2).
    :param max_deletes_per_data_file: apply deletes when delete files per data file reach this (default 0.1).
    :param delete_file_threshold: rewrite data files with at least this many deletes (default 1).
    :param max_manifests: rewrite manifests above this count (default ``commit.manifest.min-count-to-merge``, 100).
    :param expire_older_than: expiry cutoff, duration or instant (default the table's max snapshot age) (templated).
    :param retain_last: snapshots of main always kept (>= 1) (templated).
    :param min_snapshots_to_expire: expire only when at least this many snapshots would go (default 1).
    :param older_than_floor: refuse an expiry cutoff newer than ``now - floor``; default
        ``[iceberg_provider] expiry_floor``, else 1 h (templated).
    :param remove_orphans: also remove orphan files (only alongside other actions, or with ``force``).
    :param orphan_older_than: orphan minimum age (>= 24 h, default 3 days).
    :param orphan_dry_run: list orphans only (default ``True``).
    :param actions: the actions the plan may choose from (default all).
    :param compute_stats: regenerate Puffin table statistics (``compute_table_stats``) when they do not
        describe the current snapshot, or when a rewrite in this plan will make them stale (default
        property ``airflow-iceberg.maintenance.compute-stats``, else off).
    :param force: run every allowed, applicable action regardless of thresholds (templated).
    :param erasure_purge: run the erasure purge first (#13): ``IcebergErasureOperator`` arguments, e.g.
        ``{"requests_table": "ns.requests", "subject_columns": "customer_id"}``; skipped when nothing is
        logically erased (see ``operators.erasure.run_erasure_purge``).
    :param metadata_hygiene: bound the metadata log and delete leftover metadata files first (#16):
        ``True`` or ``{"previous_versions_max": 20, "older_than": "1h", "dry_run": False}`` (see
        ``operators.health.IcebergMetadataHygieneOperator``; catalog only, no JVM).
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "expire_older_than",
        "older_than_floor",
        "retain_last",
        "force",
    )

    def __init__(
        self,
        *,
        target_file_size_bytes: int | None = None,
        min_input_files: int | None = None,
        max_small_file_ratio: float | None = None,
        max_deletes_per_data_file: float | None = None,
        delete_file_threshold: int | None = None,
        max_manifests: int | None = None,
        expire_older_than: Any = None,
        retain_last: int | str | None = None,
        min_snapshots_to_expire: int | None = None,
        older_than_floor: timedelta | str | None = None,
        remove_orphans: bool | None = None,
        orphan_older_than: Any = ORPHAN_DEFAULT_AGE,
        orphan_dry_run: bool = True,
        partial_progress: bool | None = None,
        actions: Sequence[str] | None = None,
        compute_stats: bool | None = None,
        force: bool | str = False,
        erasure_purge: dict[str, Any] | None = None,
        metadata_hygiene: bool | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.erasure_purge = erasure_purge
        self.metadata_hygiene = metadata_hygiene
        if isinstance(retain_last, int):
            validate_retain_last(retain_last)
        if older_than_floor is not None and "{{" not in str(older_than_floor):
            parse_duration(older_than_floor, "older_than_floor")
        self.policy_args: dict[str, Any] = {
            "target_file_size_bytes": target_file_size_bytes,
            "min_input_files": min_input_files,
            "max_small_file_ratio": max_small_file_ratio,
            "max_deletes_per_data_file": max_deletes_per_data_file,
            "delete_file_threshold": delete_file_threshold,
            "max_manifests": max_manifests,
            "min_snapshots_to_expire": min_snapshots_to_expire,
            "older_than_floor": None,  # templated attribute, resolved in plan()
            "remove_orphans": remove_orphans,
            "orphan_older_than": orphan_older_than,
            "orphan_dry_run": orphan_dry_run,
            "partial_progress": partial_progress,
            "actions": actions,
            "compute_stats": compute_stats,
        }
        self.expire_older_than = expire_older_than
        self.older_than_floor = older_than_floor
        self.retain_last = retain_last
        self.force = force

    def plan(self) -> tuple[MaintenanceDecision, TableHealth, ExpiryPreview | None]:
        """Health, policy and decision through the catalog hook only (no JVM)."""
        hook = self.catalog_hook
        t0 = time.monotonic()
        tbl = hook.load_table(self.ident)
        props = tbl.metadata.properties
        now = now_ms()
        policy = resolve_policy(
            props,
            now=now,
            expire_older_than=self.expire_older_than if self.expire_older_than not in (None, "") else None,
            retain_last=self.retain_last if self.retain_last not in (None, "") else None,
            **{**self.policy_args, "older_than_floor": expiry_floor(self.older_than_floor)},
        )
        state = read_maintenance_state(hook, tbl, policy, now=now)
        health, expiry = state.health, state.expiry
        force = str(self.force).strip().lower() == "true"
        decision = decide(health, policy, properties=props, layout=state.layout, expiry=expiry, force=force)
        self.log.info(
            "Health of %s read in %.2fs: %s; policy %s", self.ident, time.monotonic() - t0, health.to_dict(), policy
        )
        return decision, health, expiry

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_iceberg_provider.operators.erasure import run_erasure_purge
        from airflow_iceberg_provider.operators.health import run_metadata_hygiene

        erasure = run_erasure_purge(self, context, self.erasure_purge) if self.erasure_purge else None
        hygiene = (
            run_metadata_hygiene(self.catalog_hook, self.ident.dotted, self.metadata_hygiene, context)
            if self.metadata_hygiene
            else None
        )
        decision, health, expiry = self.plan()
        base = {
            "erasure_purge": erasure,
            "metadata_hygiene": hygiene,
            "table": self.ident.dotted,
            "health_before": health_summary(health),
            "skipped": decision.skipped,
            "findings": {k: v for k, v in decision.findings.items() if k != "held_snapshots"},
        }
        if decision.healthy:
            self.log.info(
                "%s is healthy: no maintenance needed, no Spark job started (%s)", self.ident, decision.skipped
            )
            self._record(
                context,
                "maintenance_plan",
                "noop",
                snapshot_before=health.snapshot_id,
                snapshot_after=health.snapshot_id,
                metrics={"health": health_summary(health)},
                details=decision.to_dict(),
            )
            return {**base, "healthy": True, "spark_job": False, "actions": []}
        for a in decision.actions:
            self.log.info("Plan for %s: %s because %s", self.ident, a.action, a.reason)
        results, after, row = self.run_actions(
            context, decision.actions, health_before=health, expiry=expiry, operation="maintenance_plan"
        )
        return {
            **base,
            "healthy": False,
            "spark_job": True,
            "job_run_id": row["event_id"],
            "actions": [
                {"action": r["action"], "reason": a.reason, "seconds": r["seconds"], **r["output"]}
                for a, r in zip(decision.actions, results, strict=True)
            ],
            "health_after": health_summary(after),
        }
