"""The publish step of write-audit-publish: move ``main`` to exactly the audited snapshot, once per interval.

Moved out of :mod:`airflow_iceberg_provider.operators.wap` (which still exports it) for #15.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import _wap_logic as rerun
from airflow_iceberg_provider._validation import MAIN_BRANCH, validate_ref
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergPublishConflictError,
    IcebergRefNotFoundError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators.wap import (
    ON_CONFLICT,
    _cherry_picked,
    _refuse_wap_conf,
    branch_snapshots,
    iceberg_asset_uri,
    merge_base,
    optional_snapshot_id,
    refuse_unsupported_format,
    resolve_branch,
)
from airflow_iceberg_provider.operators.wap_write import stop_for_rerun
from airflow_iceberg_provider.ui.links import GovernancePublishLink

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table


class IcebergWapPublishOperator(IcebergSparkBaseOperator):
    """
    Publish an audited WAP branch: fast-forward ``main`` to exactly the audited snapshot.

    The fast-forward is an ancestry check plus a compare-and-swap of ``main`` through
    the catalog (no JVM). The operator refuses when the branch moved after the audit,
    when the snapshot has no passing audit in ``governance.audit_results``
    (``require_audit``), and, by default, when ``main`` moved since the branch was cut
    (:class:`~airflow_iceberg_provider.exceptions.IcebergPublishConflictError`). With
    ``on_conflict="cherrypick"`` the branch's *append* snapshots are replayed onto
    ``main`` with Spark's ``cherrypick_snapshot`` instead (other operations are refused).

    Re-runs (#15): a publish whose snapshot is already on ``main`` commits nothing; it
    emits the Asset event again (same snapshot id) unless ``on_rerun="skip"``, which skips
    the task (no second event) after a ``noop`` ledger row. A try that died after moving
    ``main`` but before its ledger row is completed (row marked ``recovered``, event
    emitted) in every mode. When another run published the same interval after this
    branch was cut, ``"fail"`` and ``"replace"`` refuse (clear the run to write against the
    new ``main``) and ``"skip"`` skips.

    On success it emits an Asset event on its Asset outlets (``iceberg://<catalog>/<ns>/<table>``,
    see :func:`~airflow_iceberg_provider.operators.wap.iceberg_asset`) whose ``extra``
    carries the published snapshot id.

    :param table: ``namespace.table`` (templated).
    :param branch: the audited branch (templated); default derived from the DAG run.
    :param audited_snapshot_id: the snapshot the audit passed (templated, e.g. the audit task's
        XCom); default the branch head (which then must carry a passing audit).
    :param base_snapshot_id: the branch's base (templated; default where it meets ``main``).
    :param on_conflict: ``"fail"`` (default) or ``"cherrypick"``.
    :param on_rerun: ``"fail"`` (default), ``"skip"`` or ``"replace"`` (see above).
    :param drop_branch: remove the branch after a successful publish.
    :param require_audit: refuse snapshots without a passing audit record (default ``True``).
    :param tag: optionally tag the published snapshot (templated), e.g. ``"release-{{ ds }}"``.
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "branch",
        "audited_snapshot_id",
        "base_snapshot_id",
        "tag",
    )
    ui_color = "#d4f1e3"
    operator_extra_links = (GovernancePublishLink(),)

    def __init__(
        self,
        *,
        branch: str | None = None,
        audited_snapshot_id: int | str | None = None,
        base_snapshot_id: int | str | None = None,
        on_conflict: str = "fail",
        on_rerun: str = "fail",
        drop_branch: bool = False,
        require_audit: bool = True,
        tag: str | None = None,
        branch_prefix: str = "wap",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if on_conflict not in ON_CONFLICT:
            raise IcebergValidationError(f"on_conflict={on_conflict!r} is invalid; use one of {list(ON_CONFLICT)}.")
        _refuse_wap_conf(self.spark_conf)
        self.on_rerun = rerun.validate_on_rerun(on_rerun)
        self.branch = branch
        self.audited_snapshot_id = audited_snapshot_id
        self.base_snapshot_id = base_snapshot_id
        self.on_conflict = on_conflict
        self.drop_branch = drop_branch
        self.require_audit = require_audit
        self.tag = tag
        self.branch_prefix = branch_prefix

    def execute(self, context: Context) -> dict[str, Any]:
        started = datetime.now(UTC)
        branch = resolve_branch(self.branch, context, self.branch_prefix)
        tag = validate_ref(self.tag, "tag", allow_main=False) if self.tag not in (None, "", "None") else None
        hook, table = self.catalog_hook, self.ident.dotted
        tbl = hook.load_table(table)
        refuse_unsupported_format(tbl, table)
        audited = self._audited(tbl, branch)
        main_head = hook.ref_snapshot_id(tbl, MAIN_BRANCH)
        main_chain = hook.ancestor_ids(tbl, main_head) if main_head is not None else []
        base = optional_snapshot_id(self.base_snapshot_id, "base_snapshot_id")
        if base is None:
            base = merge_base(hook, tbl, audited, main_head)
        snaps = branch_snapshots(hook, tbl, audited, base) if audited not in main_chain else []
        if self.require_audit:
            self._require_passed_audit(branch, audited)
        since_base = main_chain[: main_chain.index(base)] if base in main_chain else main_chain
        picked_already = _cherry_picked(hook, tbl, since_base)
        if audited in main_chain or (snaps and all(s.snapshot_id in picked_already for s in snaps)):
            method, published = "noop", audited if audited in main_chain else main_head
            self.log.info("Snapshot %s of %s@%s is already on main (head %s): no-op", audited, table, branch, main_head)
            self._republish(context, tbl, branch, audited, published, tag, started)
        else:
            self._refuse_interval_race(context, tbl, branch, audited)
            method, published = self._move_main(context, tbl, branch, audited, base, main_head, snaps, picked_already)
        metrics = rerun.change_metrics(snaps)
        self._verify_main(published, method)
        dropped = bool(self.drop_branch and hook.remove_ref(hook.load_table(table), branch))
        tagged = self._tag(tag, published) if tag else None
        self._record(context, branch, audited, published, main_head, method, metrics, tag, started)
        self._emit_asset_event(context, published, audited, branch)
        result = {
            "table": table,
            "branch": branch,
            "published_snapshot_id": published,
            "audited_snapshot_id": audited,
            "previous_main_snapshot_id": main_head,
            "method": method,
            "published": method != "noop",
            "branch_dropped": dropped,
            "tag": tagged,
            **metrics,
        }
        return with_string_ids(result)

    def _audited(self, tbl: Table, branch: str) -> int:
        """The snapshot to publish: the given audited id (or the branch head), checked against the branch."""
        hook, table = self.catalog_hook, self.ident.dotted
        audited = optional_snapshot_id(self.audited_snapshot_id, "audited_snapshot_id")
        existing = hook.refs(tbl).get(branch)
        if existing is not None and existing.type != "branch":
            raise IcebergRefusedError(f"{table} ref {branch!r} is a tag, not a WAP branch. Nothing was changed.")
        if audited is None:
            if existing is None:
                raise IcebergRefNotFoundError(f"{table} has no branch {branch!r} to publish.")
            audited = existing.snapshot_id
        hook.snapshot(tbl, snapshot_id=audited)  # raises IcebergRefNotFoundError when unknown
        if existing is not None and existing.snapshot_id != audited:
            raise IcebergRefusedError(
                f"Branch {branch!r} of {table} moved after its audit: it is at {existing.snapshot_id}, the audit "
                f"passed snapshot {audited}. Refusing to publish unaudited commits; re-run the audit. Nothing was "
                "changed."
            )
        return audited

    def _refuse_interval_race(self, context: Context, tbl: Table, branch: str, audited: int) -> None:
        """Another run published this interval after the branch was cut: refuse (fail/replace) or skip."""
        hook, table = self.catalog_hook, self.ident.dotted
        by_id = {s.snapshot_id: s for s in hook.list_snapshots(tbl)}
        plan = rerun.plan_publish_race(
            self.on_rerun,
            rerun.RunIdentity.from_context(context),
            hook.ref_chain(tbl, MAIN_BRANCH),
            by_id,
            set(hook.ancestor_ids(tbl, audited)),
            table=table,
        )
        if plan.action != "write":
            stop_for_rerun(self, context, tbl, branch, plan, "wap_publish")

    def _move_main(
        self,
        context: Context,
        tbl: Table,
        branch: str,
        audited: int,
        base: int | None,
        main_head: int | None,
        snaps: list[Any],
        picked_already: set[int],
    ) -> tuple[str, int]:
        """Fast-forward ``main`` (compare-and-swap), or cherry-pick when allowed; ``(method, new head)``."""
        hook, table = self.catalog_hook, self.ident.dotted
        if main_head is None or hook.is_ancestor(tbl, main_head, audited):
            hook.fast_forward(tbl, to_snapshot_id=audited, expected_snapshot_id=main_head)
            self.log.info("Fast-forwarded %s main %s -> %s", table, main_head, audited)
            return "fast_forward", audited
        if self.on_conflict == "fail":
            raise IcebergPublishConflictError(
                f"Cannot publish {table} branch {branch!r}: main moved since the branch was cut (main is at "
                f"{main_head}, the branch was cut at {base}), so main cannot be fast-forwarded to the audited snapshot "
                f"{audited} without losing the other commit(s). main and the branch are unchanged. Re-run the pipeline "
                "on a fresh branch (clear the DAG run), or publish with on_conflict='cherrypick' to replay "
                "append-only changes (the combination for backfills with several runs at once)."
            )
        return "cherrypick", self._cherrypick(context, tbl, snaps, picked_already, main_head)

    def _verify_main(self, published: int, method: str) -> None:
        hook, table = self.catalog_hook, self.ident.dotted
        head = hook.ref_snapshot_id(hook.load_table(table), MAIN_BRANCH)
        if head != published and method != "noop":
            raise IcebergCommitVerificationError(f"After publishing, main of {table} is at {head}, not {published}.")

    def _record(
        self,
        context: Context,
        branch: str,
        audited: int,
        published: int,
        main_head: int | None,
        method: str,
        metrics: dict[str, int],
        tag: str | None,
        started: datetime,
    ) -> None:
        """The ``wap_publish`` ledger row of a publish that moved ``main``."""
        hook, table = self.catalog_hook, self.ident.dotted
        if method == "noop":
            return
        interval = rerun.RunIdentity.from_context(context).interval_key
        hook.record_ledger(
            operation="wap_publish",
            table=table,
            ref=MAIN_BRANCH,
            status="succeeded",
            context=context,
            snapshot_before=main_head,
            snapshot_after=published,
            metrics={"published_added_records": metrics["net_added_records"], **metrics},
            details=with_string_ids(
                {
                    "branch": branch,
                    "method": method,
                    "audited_snapshot_id": audited,
                    "tag": tag,
                    "wap_interval": interval,
                    "on_rerun": self.on_rerun,
                }
            ),
            started_at=started,
        )

    def _republish(
        self,
        context: Context,
        tbl: Table,
        branch: str,
        audited: int,
        published: int,
        tag: str | None,
        started: datetime,
    ) -> None:
        """The audited snapshot is already on ``main``: complete a died try's ledger row, or skip (``skip``)."""
        interval = rerun.RunIdentity.from_context(context).interval_key
        if self._recover_ledger_row(context, branch, audited, published, tag, started, interval):
            return
        if self.on_rerun == "skip":
            plan = rerun.RerunPlan(
                "skip", "skip", interval, message=f"snapshot {audited} is already published on main; no second event"
            )
            stop_for_rerun(self, context, tbl, branch, plan, "wap_publish", drop_branch=False)

    def _recover_ledger_row(
        self,
        context: Context,
        branch: str,
        audited: int,
        published: int,
        tag: str | None,
        started: datetime,
        interval: str | None,
    ) -> bool:
        """Write the ``wap_publish`` ledger row an earlier try could not write after moving ``main``.

        A try that fast-forwarded ``main`` and then died (worker killed, catalog or storage
        failure while appending the ledger row) leaves the publish without its audit-trail
        row, and every retry is a no-op. The retry therefore checks the ledger and writes
        the missing row once, marked ``recovered``. Returns whether it had to.
        """
        hook, table = self.catalog_hook, self.ident.dotted
        for row in hook.read_governance_rows("ledger", operation="wap_publish", table_name=table):
            details = json.loads(row.get("details") or "{}")
            if row.get("status") == "succeeded" and str(details.get("audited_snapshot_id")) == str(audited):
                return False
        tbl = hook.load_table(table)
        base = optional_snapshot_id(self.base_snapshot_id, "base_snapshot_id")
        metrics: dict[str, Any] = {}
        if base is not None and base != audited and hook.is_ancestor(tbl, base, audited):
            change = rerun.change_metrics(branch_snapshots(hook, tbl, audited, base))
            metrics = {"published_added_records": change["net_added_records"], **change}
        self.log.warning(
            "Snapshot %s of %s is on main but the ledger has no wap_publish row for it (an earlier try died after "
            "publishing); recording it now",
            audited,
            table,
        )
        hook.record_ledger(
            operation="wap_publish",
            table=table,
            ref=MAIN_BRANCH,
            status="succeeded",
            context=context,
            snapshot_before=base,
            snapshot_after=published,
            metrics=metrics,
            details=with_string_ids(
                {
                    "branch": branch,
                    "method": "recovered",
                    "audited_snapshot_id": audited,
                    "tag": tag,
                    "wap_interval": interval,
                }
            ),
            started_at=started,
        )
        return True

    def _require_passed_audit(self, branch: str, snapshot_id: int) -> None:
        hook, table = self.catalog_hook, self.ident.dotted
        rows = hook.read_governance_rows("audit_results", table_name=table, snapshot_id=snapshot_id)
        if not rows:
            raise IcebergRefusedError(
                f"Snapshot {snapshot_id} of {table} (branch {branch!r}) has no audit record in "
                f"{hook.governance_namespace}.audit_results; refusing to publish unaudited data. Run "
                "IcebergWapAuditOperator first (or set require_audit=False deliberately). Nothing was changed."
            )
        latest = max(rows, key=lambda r: r["evaluated_at"])["event_id"]
        failed = [r["check_name"] for r in rows if r["event_id"] == latest and not r["passed"]]
        if failed:
            raise IcebergRefusedError(
                f"The latest audit of snapshot {snapshot_id} of {table} (event_id={latest}) failed checks {failed}; "
                "refusing to publish. Nothing was changed."
            )

    def _cherrypick(
        self, context: Context, tbl: Table, snaps: list[Any], picked_already: set[int], main_head: int | None
    ) -> int:
        hook, table = self.catalog_hook, self.ident.dotted
        not_append = [(s.snapshot_id, s.operation) for s in snaps if s.operation != "append"]
        if not_append:
            raise IcebergPublishConflictError(
                f"main of {table} moved since the branch was cut and the branch holds non-append snapshots "
                f"{not_append}; cherry-picking only replays appends safely (overwrites/deletes could undo the other "
                "writer's rows; an on_rerun='replace' branch starts with one). main and the branch are unchanged; "
                "clear the DAG run to re-run the pipeline on a fresh branch."
            )
        todo = [s.snapshot_id for s in snaps if s.snapshot_id not in picked_already]
        self.log.info("main of %s moved (now %s); cherry-picking %s", table, main_head, todo)
        spec = self.job_spec(context, "wap_publish_cherrypick", ref=MAIN_BRANCH, snapshot_ids=todo)
        self.run_spark_job(context, "wap_cherrypick", spec)
        tbl = hook.load_table(table)
        head = hook.ref_snapshot_id(tbl, MAIN_BRANCH)
        chain = hook.ancestor_ids(tbl, head) if head is not None else []
        done = _cherry_picked(hook, tbl, chain) | set(chain)
        missing = [sid for sid in todo if sid not in done]
        if missing or (main_head is not None and main_head not in chain):
            raise IcebergCommitVerificationError(
                f"Cherry-pick job finished but main of {table} (head {head}) does not contain snapshots {missing} "
                "descending from the previous head."
            )
        return int(head)  # type: ignore[arg-type]

    def _tag(self, tag: str, snapshot_id: int) -> str:
        hook, table = self.catalog_hook, self.ident.dotted
        tbl = hook.load_table(table)
        existing = hook.refs(tbl).get(tag)
        if existing is not None:
            if existing.type == "tag" and existing.snapshot_id == snapshot_id:
                return tag
            raise IcebergRefusedError(
                f"{table} already has a {existing.type} {tag!r} at {existing.snapshot_id}; refusing to move it to the "
                f"published snapshot {snapshot_id} (the publish itself succeeded). Choose another tag name."
            )
        hook.set_ref(tbl, tag, snapshot_id, ref_type="tag")
        return tag

    def _emit_asset_event(self, context: Context, published: int, audited: int, branch: str) -> None:
        from airflow.sdk import Asset

        assets = [o for o in (self.outlets or []) if isinstance(o, Asset)]
        events = context.get("outlet_events") if hasattr(context, "get") else None
        if not assets or events is None:
            return
        expected = iceberg_asset_uri(self.ident.dotted, self.catalog_hook.catalog_name)
        for asset in assets:
            if asset.uri.startswith("iceberg://") and asset.uri != expected:
                self.log.warning("Outlet %s does not match this table's asset URI %s", asset.uri, expected)
        self.emit_asset_events(context, snapshot_id=published, audited_snapshot_id=audited, branch=branch)


__all__ = ["IcebergWapPublishOperator"]
