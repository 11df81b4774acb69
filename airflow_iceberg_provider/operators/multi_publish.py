"""Publish several tables' audited WAP branches together: every table's ``main`` moves, or none.

See :mod:`airflow_iceberg_provider.rules.multi_publish` for the rules (plan per table, journal,
repair of a try that died part-way) and :mod:`airflow_iceberg_provider.hooks._multi_table` for
the one-commit REST transaction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_iceberg_provider import params
from airflow_iceberg_provider.assets.partitions import (
    add_partition_keys,
    check_partition_events,
    interval_partition_key,
    touched_partition_keys,
)
from airflow_iceberg_provider.core.governance import airflow_identity, decode_ledger_row
from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergCommitVerificationError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.governance.approvals import steward_waivers
from airflow_iceberg_provider.hooks._multi_table import MultiTableCommitUnsupported, commit_ref_changes_together
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._wap_common import (
    audit_binding_for,
    bound_verdict,
    refuse_unsupported_format,
    resolve_branch,
)
from airflow_iceberg_provider.params import MAIN_BRANCH, validate_table
from airflow_iceberg_provider.rules import multi_publish as mp
from airflow_iceberg_provider.rules.refs import check_tag_name
from airflow_iceberg_provider.rules.wap_refs import PublishState, audited_snapshot, plan_publish, publish_verdict

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

TRANSACTION_MODES = ("auto", "catalog", "protocol")


class IcebergWapMultiPublishOperator(BaseOperator):
    """
    Publish the audited WAP branches of several tables together: all tables' ``main`` move, or none.

    Every table is checked first, with the rules of
    :class:`~airflow_iceberg_provider.operators.wap_publish.IcebergWapPublishOperator`: the
    snapshot to publish is its branch head (or the given ``audited_snapshot_id``), whose verdict
    is that of this run's own audit of the table (``audit`` in the table's mapping, else the result
    of the one direct upstream task that audited the table; read by its event id and checked as the
    single-table publish checks it), and ``main`` must fast-forward to it. One refusal refuses the
    whole publish, before anything moves.

    Then, on a REST catalog, one ``POST /v1/{prefix}/transactions/commit`` carries every table's
    ref changes, each with an ``assert-ref-snapshot-id`` requirement: the catalog applies all or
    none. On other catalogs (or a REST server without the endpoint, with ``transaction="auto"``)
    an explicit protocol runs: a ``prepared`` ledger row names every table with ``main`` before
    and after, each table then moves in one compare-and-swap commit, and a failure part-way moves
    the tables already moved back (compare-and-swap again). A try that died part-way leaves the
    ``prepared`` row; the next try finishes the publish, moves the moved tables back when another
    writer moved a table not yet moved, or refuses (naming each table's state) when a moved table
    was committed on top of since.

    The ledger gets one ``wap_multi_publish`` row for the publish, listing every table with its
    ``main`` before and after. Asset outlets naming one of the tables get an event carrying that
    table's published snapshot id.

    :param tables: the tables (templated): ``"ns.table"`` strings or mappings with ``table`` and
        optionally ``branch``, ``audited_snapshot_id``, ``base_snapshot_id`` and ``audit`` (the
        table's audit task result: ``audit_event_id``, ``spec_hash``, ``snapshot_id``).
    :param branch: the WAP branch of every table without its own (templated); default derived from
        the DAG run (``branch_prefix``), as the other WAP operators derive it.
    :param tag: optionally tag each published snapshot (templated); a ``legal-hold-`` name is refused.
    :param drop_branch: remove each branch with the publish.
    :param require_audit: refuse unless each table's audit of this run passed (default ``True``).
    :param partition_events: put partition keys on each table's Asset events, as
        :class:`~airflow_iceberg_provider.operators.wap_publish.IcebergWapPublishOperator` does
        (``"iceberg"`` or ``"interval"``).
    :param transaction: ``"auto"`` (default: one catalog commit where the catalog offers it, else the
        protocol), ``"catalog"`` (one catalog commit or fail) or ``"protocol"``.
    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection id (templated).
    :param governance_namespace: namespace of the governance tables (default from the connection).
    :param branch_prefix: prefix of the branch name derived from the DAG run when ``branch`` is not
        given (default ``wap``); the same prefix as the create-branch task's.
    """

    template_fields: Sequence[str] = ("tables", "branch", "tag", "iceberg_catalog_conn_id")
    ui_color = "#c5ecd9"

    def __init__(
        self,
        *,
        tables: Sequence[str | Mapping[str, Any]] | str,
        branch: str | None = None,
        tag: str | None = None,
        drop_branch: bool = False,
        require_audit: bool = True,
        transaction: str = "auto",
        branch_prefix: str = "wap",
        partition_events: str | None = None,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        governance_namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tables = tables
        self.branch = branch
        self.tag = tag
        self.drop_branch = drop_branch
        self.require_audit = require_audit
        self.transaction = transaction
        self.branch_prefix = branch_prefix
        self.partition_events = partition_events
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.governance_namespace = governance_namespace

    @cached_property
    def catalog_hook(self) -> IcebergCatalogHook:
        return IcebergCatalogHook(self.iceberg_catalog_conn_id, governance_namespace=self.governance_namespace)

    # ------------------------------------------------------------------ execute
    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        started = datetime.now(UTC)
        params.choice(self.transaction, "transaction", TRANSACTION_MODES)
        specs = mp.check_tables(self.tables)
        check_partition_events(self.partition_events)
        tag = None if self.tag in (None, "") else check_tag_name(str(self.tag).strip(), "tag")
        pid = self._publish_id(context)
        done = self._repair(context, pid, started)
        if done is not None:
            return done
        loaded, steps = self._plan(context, specs, tag)
        todo = [s for s in steps if s.changes]
        if not todo:
            self.log.info("Every table is already published: %s", [s.table for s in steps])
            return self._result(steps, "noop", pid)
        mp.check_steps(todo)
        method = self._apply(context, pid, loaded, todo, started)
        self._verify(todo)
        self._record(context, pid, todo, mp.SUCCEEDED, method, started)
        self._emit(context, todo, method)
        return self._result(steps, method, pid)

    def _publish_id(self, context: Context) -> str:
        ti = context.get("ti") if hasattr(context, "get") else None
        return mp.publish_id(
            getattr(ti, "dag_id", None),
            getattr(ti, "run_id", None) or context.get("run_id"),
            getattr(ti, "task_id", self.task_id),
            getattr(ti, "map_index", None),
        )

    # --------------------------------------------------------------------- plan
    def _plan(
        self, context: Context, specs: list[dict[str, Any]], tag: str | None
    ) -> tuple[dict[str, Table], list[mp.TableStep]]:
        """Each table planned with the single-table rules; any refusal refuses all (nothing moved)."""
        hook = self.catalog_hook
        loaded: dict[str, Table] = {}
        steps: list[mp.TableStep] = []
        for spec in specs:
            table = validate_table(spec["table"], "tables").dotted
            branch = resolve_branch(spec.get("branch") or self.branch, context, self.branch_prefix)
            tbl = hook.load_table(table)
            refuse_unsupported_format(hook, tbl, table, change="multi-table publish")
            refs, by_id = hook.refs(tbl), {s.snapshot_id: s for s in hook.list_snapshots(tbl)}
            param = f"tables[{table!r}]['audit']"
            binding = audit_binding_for(self, context, spec.get("audit"), table, param) if self.require_audit else None
            requested = params.snapshot_id(spec.get("audited_snapshot_id"), "audited_snapshot_id")
            if requested is None and binding is not None:
                requested = binding.snapshot_id
            audited = audited_snapshot(table, branch, refs.get(branch), requested, by_id)
            if self.require_audit:
                verdict = bound_verdict(hook, binding, table=table, snapshot_id=audited, context=context, param=param)
                ident = airflow_identity(context)
                waived = steward_waivers(hook, table, verdict.binding, dag_id=ident["dag_id"], run_id=ident["run_id"])
                publish_verdict(verdict, table=table, branch=branch, waived=waived)
            base = params.snapshot_id(spec.get("base_snapshot_id"), "base_snapshot_id")
            state = PublishState(table, branch, audited, refs, by_id, base)
            plan = plan_publish(state, on_conflict="fail", tag=tag, drop_branch=self.drop_branch)
            if plan.action not in ("noop", "fast_forward"):
                raise IcebergRefusedError(f"Cannot publish {table} with the others: {plan.message}")
            self.log.info("%s@%s: %s (%s)", table, branch, plan.action, plan.message)
            changes = plan.changes if plan.action == "fast_forward" else ()
            loaded[table] = tbl
            steps.append(
                mp.TableStep(
                    table, branch, audited, plan.main_head, plan.published or audited, changes, plan.metrics, tag
                )
            )
        return loaded, steps

    # -------------------------------------------------------------------- apply
    def _apply(
        self, context: Context, pid: str, loaded: dict[str, Table], steps: list[mp.TableStep], started: datetime
    ) -> str:
        """One catalog commit where possible, else the prepare/apply/undo protocol; returns the method."""
        if self.transaction in ("auto", "catalog"):
            try:
                commit_ref_changes_together(self.catalog_hook, {s.table: (loaded[s.table], s.changes) for s in steps})
                self.log.info("Published %s in one catalog transaction", [s.table for s in steps])
                return "catalog_transaction"
            except MultiTableCommitUnsupported as err:
                if self.transaction == "catalog":
                    raise IcebergValidationError(
                        f"transaction='catalog' but {err}. Use transaction='auto' to fall back to the "
                        "prepare/apply protocol. Nothing was changed."
                    ) from err
                self.log.info("No multi-table commit (%s); using the prepare/apply protocol", err)
        self._record(context, pid, steps, mp.PREPARED, "protocol", started)
        self._apply_steps(context, pid, steps, started)
        return "protocol"

    def _apply_steps(self, context: Context, pid: str, steps: Sequence[mp.TableStep], started: datetime) -> None:
        """Move each table (compare-and-swap); on a failure move the moved ones back, then raise."""
        hook = self.catalog_hook
        moved: list[mp.TableStep] = []
        for step in steps:
            try:
                hook.apply_ref_changes(hook.load_table(step.table), step.changes)
            except Exception as err:  # whatever stopped this table, the moved ones go back
                self.log.error("Publishing %s failed (%s); moving %s back", step.table, err, [s.table for s in moved])
                self._undo(context, pid, moved, steps, started, cause=err)
                raise IcebergCommitConflictError(
                    f"The multi-table publish failed at {step.table}: {err}. The tables already moved "
                    f"({[s.table for s in moved]}) were moved back; every table's main is where it was. "
                    "Nothing was published."
                ) from err
            moved.append(step)
            self.log.info("Moved main of %s: %s -> %s", step.table, step.before, step.after)

    def _undo(
        self,
        context: Context,
        pid: str,
        moved: Sequence[mp.TableStep],
        steps: Sequence[mp.TableStep],
        started: datetime,
        *,
        cause: BaseException | None = None,
    ) -> None:
        hook = self.catalog_hook
        for step in reversed(moved):
            try:
                hook.apply_ref_changes(hook.load_table(step.table), step.inverse())
            except Exception as err:  # whatever failed, the partial state is refused with every head named
                heads = self._heads(steps)
                raise mp.refuse_partial(
                    steps, heads, f"moving {step.table} back failed ({err}); its main was changed by another writer"
                ) from cause or err
        self._record(context, pid, steps, mp.ROLLED_BACK, "protocol", started, error=str(cause) if cause else None)

    # ------------------------------------------------------------------- repair
    def _journal(self, pid: str) -> tuple[str, dict[str, Any]] | None:
        """The latest ledger row of this publish: (status, details), or ``None``."""
        rows = self.catalog_hook.governance.read("ledger", operation=mp.OPERATION)
        mine = [decode_ledger_row(r) for r in rows]
        mine = [r for r in mine if r["details"].get("publish_id") == pid]
        if not mine:
            return None
        latest = max(mine, key=lambda r: (r["finished_at"], r["status"] != mp.PREPARED))
        return latest["status"], latest["details"]

    def _repair(self, context: Context, pid: str, started: datetime) -> dict[str, Any] | None:
        """Handle an earlier try of this task: done already, or died part-way (repair or refuse)."""
        found = self._journal(pid)
        if found is None:
            return None
        status, details = found
        steps = [mp.TableStep.from_journal(t) for t in details.get("tables", [])]
        if status == mp.SUCCEEDED:
            self.log.info("An earlier try published %s already; nothing to do", [s.table for s in steps])
            self._emit(context, steps, details.get("method", "protocol"))
            return self._result(steps, "noop", pid)
        if status != mp.PREPARED:
            return None  # rolled back or failed: publish afresh
        heads = self._heads(steps)
        built_on = {
            s.table
            for s in steps
            if heads.get(s.table) not in (None, s.after, s.before)
            and self.catalog_hook.is_ancestor(s.table, s.after, heads[s.table])  # type: ignore[arg-type]
        }
        recovery = mp.plan_recovery(steps, heads, built_on)
        self.log.warning("Repairing an earlier try of this publish: %s (%s)", recovery.action, recovery.message)
        if recovery.action == "restart":
            self._record(context, pid, steps, mp.FAILED, "protocol", started, error=recovery.message)
            return None
        if recovery.action == "refuse":
            raise mp.refuse_partial(steps, heads, recovery.message)
        if recovery.action == "roll_back":
            self._undo(context, pid, recovery.todo, steps, started)
            raise IcebergCommitConflictError(
                f"An earlier try of this publish died part-way and {recovery.message}. Every table's main is back "
                "where it was before the publish; re-run the pipeline against the new main."
            )
        if recovery.action == "roll_forward":
            self._apply_steps(context, pid, recovery.todo, started)
        self._verify(steps)
        self._record(context, pid, steps, mp.SUCCEEDED, "recovered", started)
        self._emit(context, steps, "recovered")
        return self._result(steps, "recovered", pid)

    def _heads(self, steps: Sequence[mp.TableStep]) -> dict[str, int | None]:
        hook = self.catalog_hook
        return {s.table: hook.ref_snapshot_id(hook.load_table(s.table)) for s in steps}

    # ------------------------------------------------------------ verify/record
    def _verify(self, steps: Sequence[mp.TableStep]) -> None:
        heads = self._heads(steps)
        wrong = {s.table: heads[s.table] for s in steps if heads[s.table] != s.after}
        if wrong:
            raise IcebergCommitVerificationError(
                f"After the multi-table publish, main of {sorted(wrong)} is at {wrong}, not at the published snapshots "
                f"{ {s.table: s.after for s in steps if s.table in wrong} }."
            )

    def _record(
        self,
        context: Context,
        pid: str,
        steps: Sequence[mp.TableStep],
        status: str,
        method: str,
        started: datetime,
        *,
        error: str | None = None,
    ) -> None:
        details: dict[str, Any] = {
            "publish_id": pid,
            "method": method,
            "tables": [s.to_journal() for s in steps],
        }
        if error:
            details["error"] = error[:500]
        metrics = {
            "tables": len(steps),
            "published_added_records": sum(s.metrics.get("net_added_records", 0) for s in steps),
        }
        self.catalog_hook.governance.record_ledger(
            operation=mp.OPERATION,
            table=None,
            ref=MAIN_BRANCH,
            status=status,
            context=context,
            metrics=metrics,
            details=with_string_ids(details),
            started_at=started,
        )

    def _emit(self, context: Context, steps: Sequence[mp.TableStep], method: str) -> None:
        from airflow_iceberg_provider.assets.uris import emit_table_asset_events

        hook = self.catalog_hook
        for s in steps:
            emit_table_asset_events(
                self.outlets,
                context,
                table=s.table,
                catalog=hook.catalog_name,
                snapshot_id=s.after,
                audited_snapshot_id=s.audited,
                branch=s.branch,
                method=method,
            )
            if self.partition_events == "interval":
                key = interval_partition_key(context)
                keys = [key] if key else []
            elif self.partition_events == "iceberg":
                tbl = hook.load_table(s.table)
                chain = hook.ancestor_ids(tbl, s.after)
                chain = chain[: chain.index(s.before)] if s.before in chain else chain
                keys = touched_partition_keys(tbl, chain)
            else:
                continue
            add_partition_keys(self.outlets, context, table=s.table, catalog=hook.catalog_name, keys=keys)

    def _result(self, steps: Sequence[mp.TableStep], method: str, pid: str) -> dict[str, Any]:
        return with_string_ids(
            {
                "publish_id": pid,
                "method": method,
                "published": method != "noop",
                "tables": {
                    s.table: {
                        "branch": s.branch,
                        "published_snapshot_id": s.after,
                        "previous_main_snapshot_id": s.before,
                        "audited_snapshot_id": s.audited,
                    }
                    for s in steps
                },
            }
        )


__all__ = ["TRANSACTION_MODES", "IcebergWapMultiPublishOperator"]
