"""Shared plumbing of the maintenance operators: one Spark job for planned actions, verification, ledger rows.

Owns how a list of :class:`~airflow_iceberg_provider.rules.maintenance.PlannedAction` becomes
one spark-submit, how each action's outcome is proven through the catalog (``replace``
commits, expired snapshots gone, statistics present, orphans deleted or kept), and the
per-action ledger rows. It decides nothing: what to run is :mod:`~airflow_iceberg_provider.rules.maintenance`'s
(pure) job, and the operators in :mod:`.maintenance` / :mod:`.expiry` only resolve their
arguments and call :meth:`_IcebergMaintenanceOperator.run_actions`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import __version__, params
from airflow_iceberg_provider.core.governance import LedgerEntry, airflow_identity
from airflow_iceberg_provider.core.maintenance_actions import COMPUTE_STATS
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.models import snapshot_info
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators._erasure_job import DEFAULT_SALT_CONN_ID, index_upkeep
from airflow_iceberg_provider.params import MAIN_BRANCH
from airflow_iceberg_provider.rules.expiry import ExpiryPreview
from airflow_iceberg_provider.rules.maintenance import (
    DEFAULT_EXPIRY_FLOOR,
    REWRITE_OPERATION,
    PlannedAction,
    rewrite_commit_problem,
)
from airflow_iceberg_provider.ui.links import GovernanceHealthLink

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_provider.hooks.spark import JobRun
    from airflow_iceberg_provider.models import SnapshotInfo, TableHealth

JOB = "maintenance"
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
    if not params.is_unset(value):
        return params.duration(value, "older_than_floor", required=True)
    from airflow_iceberg_provider.config import setting

    configured = setting("expiry_floor")
    if configured:
        return params.duration(configured, "[iceberg_provider] expiry_floor", required=True)
    return DEFAULT_EXPIRY_FLOOR


def _parse_ids(value: Any) -> list[int]:
    """``snapshot_ids``: a list, one id, or the rendered text of a list (``"[1, 2]"``, ``"1 2"``)."""
    if params.is_unset(value):
        return []
    if isinstance(value, str):
        value = [v for v in value.strip().strip("[]").replace(",", " ").split() if v]
    if isinstance(value, (int, str)):
        value = [value]
    return [params.snapshot_id(v, "snapshot_ids", required=True) for v in value]


def _options_mapping(value: Any, param: str = "options") -> dict[str, Any]:
    """Rendered ``options``: a mapping of plain values (a malformed JSON string is refused by name)."""
    if params.is_unset(value):
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

    acts_on_governance_tables = True  # keeps every row: governance tables are maintained too

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
        extra_spec: Mapping[str, Any] | None = None,
        report: Mapping[str, Any] | None = None,
    ) -> tuple[list[dict[str, Any]], TableHealth, dict[str, Any]]:
        """Run ``actions`` in one spark-submit; verify them through the catalog; ledger one row per action.

        :param extra_spec: more job parameters (the ``erasure`` parameters of an ``erasure_purge`` action).
        :param report: JSON-safe values the operator's own result needs, kept with a durable job's
            record for a retry that takes the job's result (:meth:`resume_actions`).
        :return: the per-action results (procedure output, seconds, main before/after),
            the health after, and the job's ledger row.
        """
        extra = dict(extra_spec or {})
        if any(a.action == "rewrite_data_files" for a in actions):  # the job updates the subject index after it
            extra.update(self._index_upkeep())
        spec = self.job_spec(context, operation, ref=MAIN_BRANCH, actions=[a.spec() for a in actions], **extra)
        self.log.info(
            "Submitting one Spark job for %s: %s", self.ident, ", ".join(f"{a.action} ({a.reason})" for a in actions)
        )
        refs_before = sorted(self.catalog_hook.refs(self.ident))
        before = {
            "actions": [a.to_dict() for a in actions],
            "health_before": health_summary(health_before),
            "expiry": None if expiry is None else asdict(expiry),
            "refs_before": refs_before,
            "report": dict(report or {}),
        }
        before = json.loads(json.dumps(before, default=str))  # task_state_store keeps JSON
        run, row = self.run_spark_job(context, JOB, spec, resume=before)
        return self._after_job(context, run, row, actions, health_summary(health_before), expiry, refs_before)

    def _index_upkeep(self) -> dict[str, Any]:
        """The compaction's subject index parameters (the salt of the plan's ``erasure_purge``
        connection when it names one, else the default salt connection)."""
        purge = getattr(self, "erasure_purge", None)
        conn_id = purge.get("salt_conn_id") if isinstance(purge, Mapping) else None
        props = self.catalog_hook.load_table(self.ident).metadata.properties
        return index_upkeep(props, self.ident.dotted, self.log, conn_id or DEFAULT_SALT_CONN_ID)

    def resume_actions(
        self, context: Context
    ) -> tuple[list[dict[str, Any]], TableHealth, dict[str, Any], dict[str, Any]] | None:
        """The verified results of an earlier try's durable maintenance job (reconnected to, or finished).

        ``None`` when this try plans and runs a fresh job (:meth:`resume_spark_job`); else what
        :meth:`run_actions` returns, plus the ``report`` the first try stored.
        """
        resumed = self.resume_spark_job(context)
        if resumed is None:
            return None
        before = resumed.resume
        actions = [PlannedAction(**a) for a in before["actions"]]
        expiry = None if before.get("expiry") is None else ExpiryPreview(**before["expiry"])
        results, health_after, row = self._after_job(
            context, resumed.run, resumed.row, actions, before["health_before"], expiry, before["refs_before"]
        )
        return results, health_after, row, dict(before.get("report") or {})

    def _after_job(
        self,
        context: Context,
        run: JobRun,
        row: dict[str, Any],
        actions: Sequence[PlannedAction],
        health_before: Mapping[str, Any],
        expiry: ExpiryPreview | None,
        refs_before: Sequence[str],
    ) -> tuple[list[dict[str, Any]], TableHealth, dict[str, Any]]:
        """Check the job's reported actions against the plan and the catalog, then ledger them."""
        if row["status"] == "refused":
            raise IcebergRefusedError(
                f"Maintenance of {self.ident} refused, nothing was changed: {row['details'].get('refused')}"
            )
        results = list(row["metrics"].get("actions") or [])
        if [r.get("action") for r in results] != [a.action for a in actions]:
            raise IcebergCommitVerificationError(
                f"Maintenance job {run.job_run_id} reported actions {[r.get('action') for r in results]} but "
                f"{[a.action for a in actions]} were planned; see its ledger row."
            )
        dropped = {ref for r in results for ref in r["output"].get("refs_dropped") or []}  # by an erasure purge
        refs_before = [ref for ref in refs_before if ref not in dropped]
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
        """Check one action's outcome against the table as the catalog now shows it."""
        action, out = result["action"], result["output"]
        if action in _COMMIT_COUNTS and int(out.get(_COMMIT_COUNTS[action]) or 0) > 0:
            self._verify_rewrite(tbl, result, expired_later=expired_later)
        elif action == "expire_snapshots" and expiry is not None:
            self._verify_expiry(tbl, expiry, refs_before)
        elif action == COMPUTE_STATS:
            self._verify_stats(tbl, out)
        elif action == "remove_orphan_files":
            self._verify_orphans(tbl, out, row)

    def _verify_rewrite(self, tbl: Table, result: Mapping[str, Any], *, expired_later: bool) -> None:
        """A rewrite that reports work committed ``replace`` snapshots descending from main's head before."""
        action, out = result["action"], result["output"]
        before, after = result.get("snapshot_before"), result.get("snapshot_after")
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
        problem = rewrite_commit_problem(action, chain, out)
        if problem:
            raise IcebergCommitVerificationError(f"{self.ident}: {problem}.")
        others = [(c.snapshot_id, c.operation) for c in chain if c.operation != REWRITE_OPERATION]
        if others:
            self.log.info("%s on %s was rebased over commits of other writers: %s", action, self.ident, others)

    def _verify_expiry(self, tbl: Table, expiry: ExpiryPreview, refs_before: Sequence[str]) -> None:
        """Every previewed snapshot is gone, and no ref vanished except those the preview said would."""
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

    def _verify_stats(self, tbl: Table, out: Mapping[str, Any]) -> None:
        """The table has a statistics file for its current snapshot (the one the job reported)."""
        current = tbl.current_snapshot()
        fresh = [st for st in tbl.metadata.statistics if current and st.snapshot_id == current.snapshot_id]
        reported = out.get("statistics_file")
        if not fresh or (reported and reported not in {f.statistics_path for f in fresh}):
            raise IcebergCommitVerificationError(
                f"compute_table_stats on {self.ident} reported {out} but the table has no statistics file for "
                f"its current snapshot {current.snapshot_id if current else None}."
            )

    def _verify_orphans(self, tbl: Table, out: Mapping[str, Any], row: Mapping[str, Any]) -> None:
        """Listed orphans still exist after a dry run, and are gone after a removal (first 200 checked)."""
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
        health_before: Mapping[str, Any],
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
                        "health_before": dict(health_before),
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
        return self.catalog_hook.governance.record_ledger(
            operation=operation, table=self.ident.dotted, ref=MAIN_BRANCH, status=status, context=context, **kwargs
        )
