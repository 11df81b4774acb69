"""Write-audit-publish, step 4: move ``main`` to exactly the audited snapshot, once per interval.

``execute()`` is resolve (one table load) -> plan (:func:`airflow_iceberg_provider.rules.wap_refs.plan_publish`,
pure) -> apply (one catalog commit) -> verify -> record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.assets.partitions import (
    add_partition_keys,
    check_partition_events,
    interval_partition_key,
    touched_partition_keys,
)
from airflow_iceberg_provider.assets.uris import iceberg_asset_uri
from airflow_iceberg_provider.core.governance import airflow_identity, decode_ledger_row
from airflow_iceberg_provider.core.ref_guard import RefVerb
from airflow_iceberg_provider.exceptions import IcebergCommitVerificationError, IcebergValidationError
from airflow_iceberg_provider.governance.approvals import steward_waivers
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators._erasure_job import index_upkeep
from airflow_iceberg_provider.operators._wap_common import (
    audit_binding_for,
    bound_verdict,
    branch_snapshots,
    commit_ref_changes,
    refuse_wap_conf,
    required_check_hashes,
    resolve_branch,
    stop_for_rerun,
)
from airflow_iceberg_provider.params import MAIN_BRANCH
from airflow_iceberg_provider.rules import wap_rerun as rerun
from airflow_iceberg_provider.rules.refs import check_tag_name, guard_ref_change
from airflow_iceberg_provider.rules.wap_refs import (
    ON_CONFLICT,
    PublishPlan,
    PublishState,
    audited_snapshot,
    cherrypick_missing,
    plan_publish,
    publish_verdict,
)
from airflow_iceberg_provider.ui.links import GovernancePublishLink

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table


class IcebergWapPublishOperator(IcebergSparkBaseOperator):
    """
    Publish an audited WAP branch: fast-forward ``main`` to exactly the audited snapshot.

    The fast-forward is an ancestry check plus a compare-and-swap of ``main`` through
    the catalog (no JVM). The operator refuses when the branch moved after the audit,
    when this run's audit did not pass (``require_audit``), and, by default, when ``main`` moved since the branch was cut
    (:class:`~airflow_iceberg_provider.exceptions.IcebergPublishConflictError`). With
    ``on_conflict="cherrypick"`` the branch's *append* snapshots are replayed onto
    ``main`` with Spark's ``cherrypick_snapshot`` instead (other operations are refused).

    The verdict is bound to its own run: the publish reads the ``governance.audit_results`` rows of
    exactly the audit run it is given (``audit``: the audit task's result, which carries
    ``audit_event_id``, ``spec_hash`` and ``snapshot_id``) and refuses any other. Every row of that
    run must be of this table and snapshot, written in this DAG run, not dated in the future, and
    of the spec hash the audit reported (recomputed from the rows' check hashes), so a row appended
    by another task, another DAG's audit, an older or later audit, or a changed spec does not open the
    gate. ``required_checks`` makes a weaker audit refuse: each required check must have been run
    with exactly that definition. Warn-level checks are waived only by a steward's decision taken in
    this DAG run on this audit run and snapshot
    (:class:`~airflow_iceberg_provider.operators.approval.IcebergWapApprovalOperator`).

    ``main``, the tag and the dropped branch change in ONE catalog commit that asserts where
    each ref was when the publish planned it (:meth:`IcebergCatalogHook.apply_ref_changes`):
    a concurrent change to any of them fails the whole commit and nothing changes. After a
    cherry-pick (a Spark commit of its own) the tag and the branch drop follow in one commit.

    Re-runs: a publish whose snapshot is already on ``main`` commits nothing; it
    emits the Asset event again (same snapshot id) unless ``on_rerun="skip"``, which skips
    the task (no second event) after a ``noop`` ledger row. A try that died after moving
    ``main`` but before its ledger row is completed (row marked ``recovered``, event
    emitted) in every mode. When another run published the same interval after this
    branch was cut, ``"fail"`` and ``"replace"`` refuse (clear the run to write against the
    new ``main``) and ``"skip"`` skips.

    On success it emits an Asset event on its Asset outlets (``iceberg://<catalog>/<ns>/<table>``,
    see :func:`~airflow_iceberg_provider.assets.uris.iceberg_asset`) whose ``extra``
    carries the published snapshot id.

    :param table: ``namespace.table`` (templated).
    :param branch: the audited branch (templated); default derived from the DAG run.
    :param audited_snapshot_id: the snapshot the audit passed (templated, e.g. the audit task's
        XCom); default the snapshot ``audit`` names, else the branch head.
    :param audit: the result of this run's audit task (templated; e.g. ``audit_task.output``), a
        mapping (or its JSON text) holding ``audit_event_id``, ``spec_hash`` and ``snapshot_id``.
        Default: the result of the one direct upstream task that audited this table. With
        ``require_audit`` and no audit run to bind to, the publish refuses.
    :param required_checks: the checks the publish requires (templated), as one mapping of the audit
        operator's check arguments (``column_mapping``, ``table_checks``, ``change_checks``,
        ``partition_clause``, ``accept_none``). The bound audit must have run each of them with
        exactly this definition (extra checks are fine); a missing or changed check refuses.
        ``wap_task_group`` passes the audit's own checks. Default: no requirement beyond the audit's
        own spec hash.
    :param base_snapshot_id: the branch's base (templated; default where it meets ``main``).
    :param on_conflict: ``"fail"`` (default) or ``"cherrypick"``.
    :param on_rerun: ``"fail"`` (default), ``"skip"`` or ``"replace"`` (see above).
    :param drop_branch: remove the branch after a successful publish.
    :param require_audit: refuse unless this run's audit (``audit``) passed (default ``True``).
    :param partition_events: put partition keys on the Asset events (Airflow asset partitions, one
        downstream run per partition under ``PartitionedAssetTimetable``): ``"iceberg"`` (the partition
        values of the files the published snapshots added or removed) or ``"interval"`` (the DAG run's
        partition key or interval start); see :mod:`airflow_iceberg_provider.assets.partitions`.
    :param tag: optionally tag the published snapshot (templated), e.g. ``"release-{{ ds }}"``; the
        rules of :class:`~airflow_iceberg_provider.operators.refs.IcebergCreateTagOperator` apply
        (a ``legal-hold-`` name is refused: a hold needs a case id; a name taken by a branch or by a
        tag on another snapshot is refused before ``main`` moves).
    :param branch_prefix: prefix of the branch name derived from the DAG run when ``branch`` is not
        given (default ``wap``); the same prefix as the create-branch task's.
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "branch",
        "audited_snapshot_id",
        "base_snapshot_id",
        "tag",
        "audit",
        "required_checks",
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
        partition_events: str | None = None,
        audit: Any = None,
        required_checks: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.audit = audit
        self.required_checks = required_checks
        self.on_rerun = rerun.validate_on_rerun(on_rerun)
        self.partition_events = partition_events
        self.branch = branch
        self.audited_snapshot_id = audited_snapshot_id
        self.base_snapshot_id = base_snapshot_id
        self.on_conflict = on_conflict
        self.drop_branch = drop_branch
        self.require_audit = require_audit
        self.tag = tag
        self.branch_prefix = branch_prefix
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if self.on_conflict not in ON_CONFLICT:
            raise IcebergValidationError(
                f"on_conflict={self.on_conflict!r} is invalid; use one of {list(ON_CONFLICT)}."
            )
        if not params.is_templated(self.spark_conf):
            refuse_wap_conf(self.spark_conf)
        check_partition_events(self.partition_events)
        if not params.is_templated(self.required_checks):
            required_check_hashes(self.required_checks)
        if not params.is_templated(self.audit):
            params.audit_binding(self.audit)

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        started = datetime.now(UTC)
        tag = self._tag_name()
        tbl, state, bound = self._resolve(context)
        plan = plan_publish(
            state,
            on_conflict=self.on_conflict,
            on_rerun=self.on_rerun,
            identity=rerun.RunIdentity.from_context(context),
            tag=tag,
            drop_branch=self.drop_branch,
        )
        self.log.info("Publish of %s@%s: %s (%s)", state.table, state.branch, plan.action, plan.message)
        if plan.race is not None:
            stop_for_rerun(self, context, tbl, state.branch, plan.race, "wap_publish")
        if plan.action == "noop":
            self._republish(context, tbl, plan, started)
        plan = self._apply(context, tbl, plan)
        published = self._verify(plan)
        self._record(context, plan, started, bound)
        self._emit_asset_event(context, plan.published, plan.audited, plan.branch)  # type: ignore[arg-type]
        if self.partition_events:
            keys = self._emit_partitions(context, plan, published)
            return with_string_ids({**plan.result(), "partition_keys": keys})
        return with_string_ids(plan.result())

    def _emit_partitions(self, context: Context, plan: PublishPlan, tbl: Table) -> list[str]:
        """Partition keys on the asset events (:mod:`airflow_iceberg_provider.assets.partitions`).

        :param tbl: the table as :meth:`_verify` loaded it after the publish (read only).
        """
        hook, table = self.catalog_hook, plan.table
        if self.partition_events == "interval":
            key = interval_partition_key(context)
            keys = [key] if key else []
        else:
            chain = hook.ancestor_ids(tbl, plan.published)  # type: ignore[arg-type]
            if plan.main_head in chain:
                chain = chain[: chain.index(plan.main_head)]
            keys = touched_partition_keys(tbl, chain or [plan.published])  # type: ignore[list-item]
        add_partition_keys(self.outlets, context, table=table, catalog=hook.catalog_name, keys=keys)
        self.log.info("Asset events of %s carry partition keys %s", table, keys)
        return keys

    def _tag_name(self) -> str | None:
        """The tag under ``IcebergCreateTagOperator``'s rules (a legal hold needs a case id: refused here)."""
        return None if params.is_unset(self.tag) else check_tag_name(str(self.tag).strip(), "tag")

    def _resolve(self, context: Context) -> tuple[Table, PublishState, dict[str, Any]]:
        """One table load: refs and snapshots as values; the audited snapshot, gated by this run's audit.

        :return: the table, the state, and the audit run the publish is bound to (for the ledger row).
        """
        branch = resolve_branch(self.branch, context, self.branch_prefix)
        hook, table = self.catalog_hook, self.ident.dotted
        tbl = hook.load_table(table)
        refs, by_id = hook.refs(tbl), {s.snapshot_id: s for s in hook.list_snapshots(tbl)}
        binding = audit_binding_for(self, context, self.audit, table) if self.require_audit else None
        requested = params.snapshot_id(self.audited_snapshot_id, "audited_snapshot_id")
        if requested is None and binding is not None:
            requested = binding.snapshot_id
        audited = audited_snapshot(table, branch, refs.get(branch), requested, by_id)
        base = params.snapshot_id(self.base_snapshot_id, "base_snapshot_id")
        if self.require_audit:
            verdict = bound_verdict(hook, binding, table=table, snapshot_id=audited, context=context)
            ident = airflow_identity(context)
            waived = steward_waivers(hook, table, verdict.binding, dag_id=ident["dag_id"], run_id=ident["run_id"])
            required = required_check_hashes(self.required_checks)
            publish_verdict(verdict, table=table, branch=branch, required=required, waived=waived)
            bound = {
                "audit_event_id": verdict.event_id,
                "spec_hash": verdict.spec_hash,
                "waived_checks": sorted(waived),
            }
        else:
            bound = {}
        return tbl, PublishState(table, branch, audited, refs, by_id, base), bound

    def _apply(self, context: Context, tbl: Table, plan: PublishPlan) -> PublishPlan:
        """``main``, the tag and the dropped branch in ONE commit (compare-and-swap on each ref).

        A cherry-pick's Spark job moves ``main`` first; its tag and branch drop follow in one commit.
        """
        hook = self.catalog_hook
        if plan.action == "cherrypick":
            plan = plan.after_cherrypick(self._cherrypick(context, plan))
            tbl = hook.load_table(plan.table)
        if commit_ref_changes(self, context, tbl, plan.changes, "wap_publish_refs"):
            self.log.info("Committed %s in one commit: %s", plan.table, [(c.ref, c.snapshot_id) for c in plan.changes])
        return plan

    def _verify(self, plan: PublishPlan) -> Table:
        """Through the catalog: ``main`` at the published snapshot, the tag on it, the branch gone.

        :return: the table as loaded after the publish (the partition keys are read from it).
        """
        hook, table = self.catalog_hook, plan.table
        tbl = hook.load_table(table)
        refs = hook.refs(tbl)
        head = refs[MAIN_BRANCH].snapshot_id if MAIN_BRANCH in refs else None
        if plan.moves_main and head != plan.published:
            raise IcebergCommitVerificationError(
                f"After publishing, main of {table} is at {head}, not {plan.published}."
            )
        tag = refs.get(plan.tag) if plan.tag else None
        if plan.tag and (tag is None or tag.snapshot_id != plan.published):
            raise IcebergCommitVerificationError(
                f"After publishing, tag {plan.tag!r} of {table} is {tag}, not on the published snapshot {plan.published}."
            )
        if plan.drop_branch and plan.branch in refs:
            raise IcebergCommitVerificationError(f"After publishing, branch {plan.branch!r} of {table} still exists.")
        return tbl

    def _record(self, context: Context, plan: PublishPlan, started: datetime, bound: Mapping[str, Any]) -> None:
        """The ``wap_publish`` ledger row of a publish that moved ``main`` (naming the audit run it took)."""
        if not plan.moves_main:
            return
        interval = rerun.RunIdentity.from_context(context).interval_key
        details = {
            "branch": plan.branch,
            "method": plan.action,
            "audited_snapshot_id": plan.audited,
            "tag": plan.tag,
            "wap_interval": interval,
            "on_rerun": self.on_rerun,
            **bound,
        }
        self.catalog_hook.governance.record_ledger(
            operation="wap_publish",
            table=plan.table,
            ref=MAIN_BRANCH,
            status="succeeded",
            context=context,
            snapshot_before=plan.main_head,
            snapshot_after=plan.published,
            metrics={"published_added_records": plan.metrics["net_added_records"], **plan.metrics},
            details=with_string_ids(details),
            started_at=started,
        )

    def _republish(self, context: Context, tbl: Table, plan: PublishPlan, started: datetime) -> None:
        """The audited snapshot is already on ``main``: complete a died try's ledger row, or skip (``skip``)."""
        interval = rerun.RunIdentity.from_context(context).interval_key
        if self._recover_ledger_row(context, tbl, plan, started, interval):
            return
        if self.on_rerun == "skip":
            message = f"snapshot {plan.audited} is already published on main; no second event"
            skip = rerun.RerunPlan("skip", "skip", interval, message=message)
            stop_for_rerun(self, context, tbl, plan.branch, skip, "wap_publish", drop_branch=False)

    def _recover_ledger_row(
        self, context: Context, tbl: Table, plan: PublishPlan, started: datetime, interval: str | None
    ) -> bool:
        """Write the ``wap_publish`` ledger row an earlier try could not write after moving ``main``.

        A try that fast-forwarded ``main`` and then died (worker killed, catalog or storage
        failure while appending the ledger row) leaves the publish without its audit-trail
        row, and every retry is a no-op. The retry therefore checks the ledger and writes
        the missing row once, marked ``recovered``. Returns whether it had to. ``tbl`` is the
        table as the publish resolved it (nothing was committed since; only read here).
        """
        hook, table, audited = self.catalog_hook, plan.table, plan.audited
        for row in hook.governance.read("ledger", operation="wap_publish", table_name=table):
            details = decode_ledger_row(row)["details"]
            if row.get("status") == "succeeded" and str(details.get("audited_snapshot_id")) == str(audited):
                return False
        base = params.snapshot_id(self.base_snapshot_id, "base_snapshot_id")
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
        details = {
            "branch": plan.branch,
            "method": "recovered",
            "audited_snapshot_id": audited,
            "tag": plan.tag,
            "wap_interval": interval,
        }
        hook.governance.record_ledger(
            operation="wap_publish",
            table=table,
            ref=MAIN_BRANCH,
            status="succeeded",
            context=context,
            snapshot_before=base,
            snapshot_after=plan.published,
            metrics=metrics,
            details=with_string_ids(details),
            started_at=started,
        )
        return True

    def _cherrypick(self, context: Context, plan: PublishPlan) -> int:
        """Replay the branch's appends onto ``main`` with one Spark job; returns ``main``'s new head."""
        hook, table = self.catalog_hook, plan.table
        todo = list(plan.cherrypick_ids)
        # the ref guard before the Spark job (its builder refuses too): main must be a branch
        meta = hook.load_table(table).metadata
        guard_ref_change(RefVerb.CHERRY_PICK, meta.refs, MAIN_BRANCH, table=table, result_type="branch")
        self.log.info("main of %s moved (now %s); cherry-picking %s", table, plan.main_head, todo)
        index = index_upkeep(meta.properties, table, self.log)  # the job updates the index for main's new head
        spec = self.job_spec(context, "wap_publish_cherrypick", ref=MAIN_BRANCH, snapshot_ids=todo, **index)
        _, row = self.run_spark_job(context, "wap_cherrypick", spec)
        if index:
            self.log.info("Subject index of %s after the cherry-pick: %s", table, row["metrics"].get("subject_index"))
        tbl = hook.load_table(table)
        head = hook.ref_snapshot_id(tbl, MAIN_BRANCH)
        missing, descends = cherrypick_missing(plan, {s.snapshot_id: s for s in hook.list_snapshots(tbl)}, head)
        if missing or not descends:
            raise IcebergCommitVerificationError(
                f"Cherry-pick job finished but main of {table} (head {head}) does not contain snapshots {missing} "
                "descending from the previous head."
            )
        return int(head)  # type: ignore[arg-type]

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
