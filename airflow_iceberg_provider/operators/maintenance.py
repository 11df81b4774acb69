"""Table maintenance: compaction, manifest / delete-file rewrites, orphan removal, the maintenance plan.

Decisions, previews and verification go through :class:`IcebergCatalogHook`
(pyiceberg, no JVM); the heavy work runs as Iceberg's Spark procedures in the
``maintenance`` Spark job, **one spark-submit per task** whatever the number of
actions. Safety is built in: every parameter is validated and every floor checked
before a job is submitted, so a refused task changes nothing.

Snapshot expiry (``IcebergExpireSnapshotsOperator``) lives in :mod:`.expiry`, the shared
job/verify/ledger plumbing (``health_summary``, ``expiry_floor``) in :mod:`._maintenance_base`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.core.erasure_lifecycle import PHASE_PURGE
from airflow_iceberg_provider.core.maintenance_actions import ERASURE_PURGE
from airflow_iceberg_provider.exceptions import IcebergCommitVerificationError, IcebergValidationError
from airflow_iceberg_provider.governance.maintenance_state import read_maintenance_state
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators._erasure_job import (
    ErasureArgs,
    erasure_summary,
    nothing_to_purge,
    prepare_erasure,
    prepare_index_refresh,
    verify_evidence,
)
from airflow_iceberg_provider.operators._maintenance_base import (
    _check_sort_columns,
    _IcebergMaintenanceOperator,
    _options_mapping,
    expiry_floor,
    health_summary,
)
from airflow_iceberg_provider.params import MAIN_BRANCH
from airflow_iceberg_provider.rules.erasure import subject_index_lag
from airflow_iceberg_provider.rules.expiry import ExpiryPreview, iso, validate_retain_last
from airflow_iceberg_provider.rules.format_version import position_delete_rewrite_skip
from airflow_iceberg_provider.rules.maintenance import (
    ORPHAN_DEFAULT_AGE,
    MaintenanceDecision,
    PlannedAction,
    check_gc_enabled,
    check_main_branch,
    check_orphan_cutoff,
    decide,
    now_ms,
    resolve_policy,
    rewrite_options,
    validate_strategy,
    validate_where,
)

#: The keys ``erasure_purge`` accepts (:class:`IcebergErasureOperator` arguments of the purge).
_ERASURE_ARGS = {f.name for f in fields(ErasureArgs)} - {"table"}

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_iceberg_provider.models import TableHealth

__all__ = [
    "IcebergMaintenancePlanOperator",
    "IcebergRemoveOrphanFilesOperator",
    "IcebergRewriteDataFilesOperator",
    "IcebergRewriteManifestsOperator",
    "IcebergRewritePositionDeleteFilesOperator",
]


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
    supports_durable_jobs = True

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
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        resumed = self.resume_actions(context)  # an earlier try's durable job: reconnect or take its result
        if resumed is not None:
            results, after, _, report = resumed
            return self._result(report["args"], report["data_files_before"], results, after)
        check_main_branch(self.branch, "rewrite_data_files")
        where, options = validate_where(self.where), _options_mapping(self.options)
        tbl = self.catalog_hook.load_table(self.ident)
        validate_where(where, columns=tbl.schema().column_names)  # the filter names only the table's columns
        args = self._plan_args(tbl, where, options)
        before = self.catalog_hook.health(tbl)
        if before.snapshot_id is None:
            self.log.info("%s has no snapshot on main: nothing to compact, no Spark job started", self.ident)
            return {"table": self.ident.dotted, "rewritten_data_files": 0, "spark_job": False}
        action = PlannedAction("rewrite_data_files", args, f"{args['strategy']} compaction requested")
        report = {"args": args, "data_files_before": before.data_files}
        results, after, _ = self.run_actions(context, [action], health_before=before, report=report)
        return self._result(args, before.data_files, results, after)

    def _result(
        self, args: Mapping[str, Any], data_files_before: int, results: list[dict[str, Any]], after: TableHealth
    ) -> dict[str, Any]:
        out, res = results[0]["output"], results[0]
        result = {
            "table": self.ident.dotted,
            "strategy": args["strategy"],
            "sort_order": args.get("sort_order"),
            "rewritten_data_files": out.get("rewritten_data_files_count", 0),
            "added_data_files": out.get("added_data_files_count", 0),
            "rewritten_bytes": out.get("rewritten_bytes_count", 0),
            "removed_delete_files": out.get("removed_delete_files_count", 0),
            "data_files_before": data_files_before,
            "data_files_after": after.data_files,
            "snapshot_id": res.get("snapshot_after"),
            "previous_snapshot_id": res.get("snapshot_before"),
            "spark_job": True,
        }
        if out.get("subject_index") is not None:  # the table declares the index: the job updated it
            result["subject_index"] = out["subject_index"]
        return with_string_ids(result)

    def _plan_args(self, tbl: Any, where: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
        """The procedure's arguments: strategy and sort order (checked against the table), options, filter."""
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
        return args


class IcebergRewriteManifestsOperator(_IcebergMaintenanceOperator):
    """
    Rewrite manifests (Spark ``rewrite_manifests``) so planning reads few, well-clustered manifests.

    :param use_caching: let Spark cache the manifest entries while rewriting (procedure default true).
    """

    def __init__(self, *, use_caching: bool | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.use_caching = use_caching
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        hook = self.catalog_hook
        before = hook.health(self.ident)
        if before.snapshot_id is None:
            return {"table": self.ident.dotted, "rewritten_manifests": 0, "spark_job": False}
        use_caching = params.flag(self.use_caching, "use_caching", optional=True)
        args = {} if use_caching is None else {"use_caching": use_caching}
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
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        where, options = validate_where(self.where), _options_mapping(self.options)
        before = self.catalog_hook.health(self.ident)
        args = self._plan_args(before, where, options)
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

    def _plan_args(self, before: TableHealth, where: str | None, options: Mapping[str, Any]) -> dict[str, Any]:
        """The procedure's arguments; a table it has nothing to do on (format-version 1 or 3) is refused."""
        skip = position_delete_rewrite_skip(before.format_version)
        if skip:
            raise IcebergValidationError(
                f"table={self.ident.dotted!r}: {skip}, so rewrite_position_delete_files has nothing to do. Remove "
                "this task (or compact with IcebergRewriteDataFilesOperator). Nothing was changed."
            )
        rewrite_all = params.flag(self.rewrite_all, "rewrite_all")
        opts = rewrite_options(options={**options, **({"rewrite-all": "true"} if rewrite_all else {})})
        args: dict[str, Any] = {"options": opts} if opts else {}
        if where:
            args["where"] = where
        return args


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
        self.dry_run = dry_run  # type: ignore[method-assign,assignment]  # shadows BaseOperator.dry_run()
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        cutoff, dry_run = self._resolve()
        tbl = self.catalog_hook.load_table(self.ident)
        if not dry_run:
            check_gc_enabled(tbl.metadata.properties, self.ident.dotted, "remove_orphan_files")
        before = self.catalog_hook.health(tbl)
        action = PlannedAction(
            "remove_orphan_files",
            {"older_than_ms": cutoff, "dry_run": dry_run},
            f"orphan files older than {iso(cutoff)}" + (" (dry run)" if dry_run else ""),
        )
        results, _, row = self.run_actions(context, [action], health_before=before)
        out = results[0]["output"]
        self._verify_main_unmoved(before, results[0])
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

    def _resolve(self) -> tuple[int, bool]:
        """The cutoff (at least 24 h ago: Iceberg's floor) and the dry-run flag (strict: True/False only)."""
        now = now_ms()
        cutoff = params.cutoff_ms(self.older_than, "older_than", now=now)
        check_orphan_cutoff(cutoff, now=now)
        return cutoff, params.flag(self.dry_run, "dry_run")

    def _verify_main_unmoved(self, before: TableHealth, result: Mapping[str, Any]) -> None:
        """Orphan removal commits nothing: main must be where it was."""
        if result.get("snapshot_after") != before.snapshot_id:
            raise IcebergCommitVerificationError(
                f"main of {self.ident} moved during orphan removal ({before.snapshot_id} -> "
                f"{result.get('snapshot_after')}); check for concurrent writers."
            )


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
    :param partial_progress: with compaction, commit file groups as they finish (several ``replace``
        commits) instead of one commit at the end (default: Iceberg's, off).
    :param actions: the actions the plan may choose from (default all).
    :param compute_stats: regenerate Puffin table statistics (``compute_table_stats``) when they do not
        describe the current snapshot, or when a rewrite in this plan will make them stale (default
        property ``airflow-iceberg.maintenance.compute-stats``, else off).
    :param force: run every allowed, applicable action regardless of thresholds (templated).
    :param erasure_purge: run the erasure purge first: ``IcebergErasureOperator`` arguments, e.g.
        ``{"requests_table": "ns.requests", "subject_columns": "customer_id"}``; skipped when nothing is
        logically erased. The purge is the first action of the plan's one Spark job (same session).
    :param metadata_hygiene: bound the metadata log and delete leftover metadata files first:
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
    supports_durable_jobs = True

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
        self.policy_args: dict[str, Any] = {
            "target_file_size_bytes": target_file_size_bytes,
            "min_input_files": min_input_files,
            "max_small_file_ratio": max_small_file_ratio,
            "max_deletes_per_data_file": max_deletes_per_data_file,
            "delete_file_threshold": delete_file_threshold,
            "max_manifests": max_manifests,
            "min_snapshots_to_expire": min_snapshots_to_expire,
            "older_than_floor": None,  # templated attribute, resolved in plan()
            "orphan_older_than": orphan_older_than,
            "actions": actions,
        }
        self.remove_orphans = remove_orphans
        self.orphan_dry_run = orphan_dry_run
        self.partial_progress = partial_progress
        self.compute_stats = compute_stats
        self.expire_older_than = expire_older_than
        self.older_than_floor = older_than_floor
        self.retain_last = retain_last
        self.force = force
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if isinstance(self.retain_last, int):
            validate_retain_last(self.retain_last)
        if not params.is_templated(self.older_than_floor):
            params.duration(self.older_than_floor, "older_than_floor")

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
            expire_older_than=None if params.is_unset(self.expire_older_than) else self.expire_older_than,
            retain_last=None if params.is_unset(self.retain_last) else self.retain_last,
            **{
                **self.policy_args,
                "older_than_floor": expiry_floor(self.older_than_floor),
                "remove_orphans": self.remove_orphans,
                "orphan_dry_run": self.orphan_dry_run,
                "partial_progress": self.partial_progress,
                "compute_stats": self.compute_stats,
            },
        )
        state = read_maintenance_state(hook, tbl, policy, now=now)
        health, expiry = state.health, state.expiry
        force = params.flag(self.force, "force")
        decision = decide(
            health,
            policy,
            properties=props,
            layout=state.layout,
            expiry=expiry,
            force=force,
            hold_violations=state.hold_violations,
        )
        for v in state.hold_violations:
            self.log.error("%s legal hold violation: %s", self.ident, v.describe(self.ident.dotted))
        self.log.info(
            "Health of %s read in %.2fs: %s; policy %s", self.ident, time.monotonic() - t0, health.to_dict(), policy
        )
        return decision, health, expiry

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        resumed = self.resume_actions(context)  # an earlier try's durable job: reconnect or take its result
        if resumed is not None:
            results, after, row, report = resumed
            return self._report(report, results, after, row)
        hygiene = self._metadata_hygiene(context)
        purge, erasure_spec = self._erasure_purge(context)
        decision, health, expiry = self.plan()
        actions = ([purge] if purge else []) + list(decision.actions)
        base = {
            "erasure_purge": None if self.erasure_purge is None else {"purged": False},
            "metadata_hygiene": hygiene,
            "table": self.ident.dotted,
            "health_before": health_summary(health),
            "skipped": decision.skipped,
            "findings": {k: v for k, v in decision.findings.items() if k != "held_snapshots"},
        }
        if not actions:
            self._record_healthy(context, decision, health)
            return {**base, "healthy": decision.healthy, "spark_job": False, "actions": []}
        for a in actions:
            self.log.info("Plan for %s: %s because %s", self.ident, a.action, a.reason)
        extra = {"erasure": erasure_spec} if purge else None
        report = {
            "base": base,
            "healthy": decision.healthy,
            "purge": bool(purge),
            "reasons": [a.reason for a in decision.actions],
        }
        results, after, row = self.run_actions(
            context,
            actions,
            health_before=health,
            expiry=expiry,
            operation="maintenance_plan",
            extra_spec=extra,
            report=report,
        )
        return self._report(report, results, after, row)

    def _report(
        self, report: Mapping[str, Any], results: list[dict[str, Any]], after: TableHealth, row: dict[str, Any]
    ) -> dict[str, Any]:
        """The task's result: the planned ``report`` (as stored for a durable retry) and the verified results."""
        base = dict(report["base"])
        if report["purge"]:
            base["erasure_purge"] = self._purge_summary(row, results.pop(0))
        return {
            **base,
            "healthy": report["healthy"],
            "spark_job": True,
            "job_run_id": row["event_id"],
            "actions": [
                {"action": r["action"], "reason": reason, "seconds": r["seconds"], **r["output"]}
                for reason, r in zip(report["reasons"], results, strict=True)
            ],
            "health_after": health_summary(after),
        }

    def _metadata_hygiene(self, context: Context) -> dict[str, Any] | None:
        """Bound the metadata log and delete leftover metadata files first (catalog only)."""
        from airflow_iceberg_provider.operators.health import run_metadata_hygiene

        hygiene = self.metadata_hygiene
        if isinstance(hygiene, dict):
            return run_metadata_hygiene(self.catalog_hook, self.ident.dotted, hygiene, context)
        if not params.flag(hygiene, "metadata_hygiene", optional=True):
            return None
        return run_metadata_hygiene(self.catalog_hook, self.ident.dotted, self.metadata_hygiene, context)

    def _erasure_purge(self, context: Context) -> tuple[PlannedAction | None, dict[str, Any] | None]:
        """The purge as the first action of this job, with its parameters; ``(None, None)`` when there is none.

        ``erasure_purge`` holds :class:`IcebergErasureOperator` arguments; nothing logically erased
        means no purge action (a nightly run with nothing to purge is not an error).
        """
        if self.erasure_purge is None:
            return None, None
        opts = dict(self.erasure_purge)
        if "phase" in opts and opts.pop("phase") != PHASE_PURGE:
            raise IcebergValidationError("erasure_purge runs phase='purge' only; drop the 'phase' key.")
        if not opts.get("requests_table") or not opts.get("subject_columns"):
            raise IcebergValidationError(
                "erasure_purge needs at least {'requests_table': 'ns.requests', 'subject_columns': 'customer_id'}."
            )
        unknown = sorted(set(opts) - _ERASURE_ARGS)
        if unknown:
            raise IcebergValidationError(f"erasure_purge has unknown keys {unknown}; use {sorted(_ERASURE_ARGS)}.")
        args = ErasureArgs(table=self.ident, **opts)
        if nothing_to_purge(self.catalog_hook, args):
            self.log.info("erasure_purge: no logically erased request in %s, nothing to purge", args.requests_table)
            lag = subject_index_lag(self.catalog_hook.load_table(self.ident))
            if lag == 0:
                return None, None
            spec = self.job_spec(context, "erasure", **prepare_index_refresh(self.catalog_hook, args, self.log))
            reason = (
                "the subject index is missing"
                if lag is None
                else f"the subject index does not cover {lag} data file(s) committed since it was updated"
            )
            return PlannedAction(ERASURE_PURGE, {}, reason), spec
        spec = self.job_spec(context, "erasure", **prepare_erasure(self.catalog_hook, args, PHASE_PURGE, self.log))
        reason = f"logically erased requests in {args.requests_table} wait for their purge"
        return PlannedAction(ERASURE_PURGE, {}, reason), spec

    def _purge_summary(self, row: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        """The purge's result as the erasure operator returns it, its evidence verified."""
        out = result["output"]
        purge_row = {"status": out.get("status"), **{k: result.get(k) for k in ("snapshot_before", "snapshot_after")}}
        summary = erasure_summary(self.ident.dotted, row["event_id"], purge_row, out, result["seconds"], PHASE_PURGE)
        verify_evidence(
            self.catalog_hook,
            self.ident,
            row["event_id"],
            out,
            summary,
            log=self.log,
        )
        return {"purged": summary["requests"] > 0, **summary}

    def _record_healthy(self, context: Context, decision: MaintenanceDecision, health: TableHealth) -> None:
        """A healthy table: a ``noop`` ledger row, no Spark job."""
        self.log.info("%s is healthy: no maintenance needed, no Spark job started (%s)", self.ident, decision.skipped)
        self._record(
            context,
            "maintenance_plan",
            "noop",
            snapshot_before=health.snapshot_id,
            snapshot_after=health.snapshot_id,
            metrics={"health": health_summary(health)},
            details=decision.to_dict(),
        )
