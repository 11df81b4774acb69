"""Approval gates: a data steward decides in Airflow's own human-in-the-loop form, the ledger records it.

Built on ``airflow.providers.standard.operators.hitl`` (Airflow 3.3: the task waits in the
``awaiting_input`` state, answered in the UI's *Required actions* or through the REST API
``PATCH /api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/{map_index}/hitlDetails``).

* :class:`IcebergWapApprovalOperator`: between a WAP audit whose failed checks are all warn-level
  and the publish. Options: publish, drop the branch, keep it for later.
* :class:`IcebergRefApprovalOperator`: before an erasure that drops a named tag
  (``ref_policy="drop"``) or before releasing a legal hold. Options: approve, reject.

Every answer is one ``approval`` ledger row (:mod:`airflow_iceberg_provider.governance.approvals`):
who, when, what, the comment, and what the steward was shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLBranchOperator, HITLOperator
from airflow.sdk import Param

from airflow_iceberg_provider import params as param_rules
from airflow_iceberg_provider.exceptions import (
    IcebergAuditFailedError,
    IcebergRefNotFoundError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._wap_common import audit_binding_for, bound_verdict, resolve_branch
from airflow_iceberg_provider.params import MAIN_BRANCH, validate_ref, validate_table
from airflow_iceberg_provider.rules import approval as rules

if TYPE_CHECKING:
    from airflow.sdk import Context

COMMENT = "comment"
WAP_SUBJECT = "Publish despite warn-level audit findings?"
REF_SUBJECT = "Approve removing a protected tag?"


def _comment_param() -> dict[str, Param]:
    return {
        COMMENT: Param(
            "",
            type=["null", "string"],
            title="Comment",
            description="Why you decide this way; recorded in the governance ledger with your name and the time.",
        )
    }


class _GateMixin:
    """Catalog access and the ledger row of a decision (shared by both gates).

    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection id (templated).
    :param governance_namespace: namespace of the governance tables (default from the connection).
    """

    iceberg_catalog_conn_id: str
    governance_namespace: str | None

    @cached_property
    def catalog_hook(self) -> IcebergCatalogHook:
        return IcebergCatalogHook(self.iceberg_catalog_conn_id, governance_namespace=self.governance_namespace)

    def record_decision(
        self,
        context: Context,
        *,
        table: str,
        ref: str,
        snapshot_before: int | None,
        snapshot_id: int | None,
        details: dict[str, Any],
    ) -> None:
        self.catalog_hook.governance.record_ledger(
            operation=rules.OPERATION,
            table=table,
            ref=ref,
            status="succeeded",
            context=context,
            snapshot_before=snapshot_before,
            snapshot_after=snapshot_id,
            details=with_string_ids(details),
        )


class IcebergWapApprovalOperator(_GateMixin, HITLBranchOperator):
    """
    Wait for a data steward's decision on a WAP branch whose audit failed warn-level checks only.

    Reads the verdict of exactly this run's audit (``audit``: its rows in ``governance.audit_results``,
    by event id, checked as the publish checks them: this table and snapshot, this DAG run, the spec
    hash the audit reported, no future date):

    * every check passed: no question is asked, the publish task runs;
    * a failed check is not in ``warn_checks``: the task fails
      (:class:`~airflow_iceberg_provider.exceptions.IcebergAuditFailedError`), nothing is asked;
    * only warn-level checks failed: the task waits for an answer in Airflow's form, which shows
      every failed check with its observed and expected value. **Publish** runs ``publish_task_id``
      (the publish then accepts exactly these checks for exactly this snapshot), **Drop branch**
      runs ``drop_task_id``, **Keep for later** skips both and keeps the branch.

    The answer (who, when, which option, the comment) is one ``approval`` ledger row bound to what
    the steward was shown: the audit run (``audit_event_id``, ``spec_hash``), the snapshot and the
    failed checks with their observed and expected values. The branch must still be at that snapshot
    when the question is asked and when the answer comes (else the gate refuses and records no
    waiver); the publish uses the decision only for the same audit run, snapshot and DAG run.

    :param table: ``namespace.table`` (templated).
    :param branch: the WAP branch (templated); default derived from the DAG run.
    :param snapshot_id: the audited snapshot (templated, e.g. the audit task's XCom); default the
        snapshot ``audit`` names.
    :param audit: the result of this run's audit task (templated; e.g. ``audit_task.output``) with
        ``audit_event_id``, ``spec_hash`` and ``snapshot_id``; default the result of the one direct
        upstream task that audited this table.
    :param warn_checks: names of the warn-level checks (those the audit was given as ``warn_checks``).
    :param publish_task_id: the task that publishes (a direct downstream task).
    :param drop_task_id: the task that drops the branch (a direct downstream task), optional.
    :param subject: the form's headline (templated).
    :param branch_prefix: prefix of the branch name derived from the DAG run when ``branch`` is not
        given (default ``wap``); the same prefix as the create-branch task's.
    """

    template_fields: Sequence[str] = (
        *HITLOperator.template_fields,
        "table",
        "branch",
        "snapshot_id",
        "audit",
        "iceberg_catalog_conn_id",
    )
    ui_color = "#fde2c4"

    def __init__(
        self,
        *,
        table: str,
        publish_task_id: str,
        audit: Any = None,
        drop_task_id: str | None = None,
        branch: str | None = None,
        snapshot_id: int | str | None = None,
        warn_checks: Sequence[str] = (),
        branch_prefix: str = "wap",
        subject: str | None = None,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        governance_namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        mapping = {rules.PUBLISH: publish_task_id}
        if drop_task_id:
            mapping[rules.DROP] = drop_task_id
        super().__init__(
            subject=subject or WAP_SUBJECT,
            options=list(rules.WAP_OPTIONS),
            options_mapping=mapping,
            params=_comment_param(),
            **kwargs,
        )
        self.table = table
        self.audit = audit
        self.branch = branch
        self.snapshot_id = snapshot_id
        self.warn_checks = warn_checks
        self.branch_prefix = branch_prefix
        self.publish_task_id = publish_task_id
        self.drop_task_id = drop_task_id
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.governance_namespace = governance_namespace
        self.check_arguments()

    def check_arguments(self) -> None:
        if not param_rules.is_templated(self.table):
            validate_table(self.table)
        rules.check_warn_checks(self.warn_checks)
        if not param_rules.is_templated(self.audit):
            param_rules.audit_binding(self.audit)

    def _look(self, context: Context) -> tuple[str, str, int, int | None, rules.Findings]:
        """(table, branch, snapshot, main head, the findings of this run's audit), with the branch still
        at the audited snapshot (else refused: the steward would decide on something else)."""
        self.check_arguments()
        hook, table = self.catalog_hook, validate_table(self.table).dotted
        branch = resolve_branch(self.branch, context, self.branch_prefix)
        binding = audit_binding_for(self, context, self.audit, table)
        tbl = hook.load_table(table)
        head = hook.ref_snapshot_id(tbl, branch)
        snapshot = param_rules.snapshot_id(self.snapshot_id, "snapshot_id")
        if snapshot is None:
            snapshot = binding.snapshot_id if binding is not None else head
        if snapshot is None:
            raise IcebergRefNotFoundError(f"{table} has no snapshot on branch {branch!r} to decide on.")
        verdict = bound_verdict(hook, binding, table=table, snapshot_id=snapshot, context=context)
        if head != snapshot:
            raise IcebergRefusedError(
                f"branch={branch!r} of {table} is at {head}, not at the audited snapshot {snapshot}: it moved after "
                f"the audit (event_id={verdict.event_id}), so the question is about data nobody audited. No decision "
                "is recorded; re-run the audit and ask again. Nothing was changed."
            )
        findings = rules.audit_findings(verdict, rules.check_warn_checks(self.warn_checks))
        return table, branch, snapshot, hook.ref_snapshot_id(tbl, MAIN_BRANCH), findings

    def execute(self, context: Context) -> Any:
        table, branch, snapshot, main, findings = self._look(context)
        if findings.blocking:
            raise IcebergAuditFailedError(
                f"The audit of {table} snapshot {snapshot} failed checks that are not warn-level: "
                f"{list(findings.blocking)}; a steward cannot accept them (warn_checks={list(self.warn_checks)}). "
                "main is unchanged; fix the data and re-run."
            )
        if not findings.failed:
            self.log.info("Every check of %s snapshot %s passed: no decision needed", table, snapshot)
            return self.do_branch(context, self.publish_task_id)
        self.log.warning("%s snapshot %s: warn-level checks failed %s; asking", table, snapshot, findings.warned)
        self.body = rules.wap_gate_body(table, branch, snapshot, main, findings)
        if self.subject == WAP_SUBJECT:
            self.subject = f"Publish {table} despite warn-level audit findings?"
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        answer = HITLOperator.execute_complete(self, context, event)
        option = answer["chosen_options"][0]
        table, branch, snapshot, main, findings = self._look(context)
        details = rules.decision_details(
            gate=rules.WAP_PUBLISH,
            option=option,
            decisions=rules.WAP_DECISIONS,
            event=answer,
            comment=(answer.get("params_input") or {}).get(COMMENT),
            branch=branch,
            snapshot_id=snapshot,
            branch_head=snapshot,
            audit_event_id=findings.event_id,
            spec_hash=findings.spec_hash,
            failed_checks=list(findings.failed),
            waived=list(findings.warned) if option == rules.PUBLISH else [],
        )
        self.record_decision(
            context, table=table, ref=branch, snapshot_before=main, snapshot_id=snapshot, details=details
        )
        self.log.info("%s decided %r on %s@%s (snapshot %s)", details["decided_by"], option, table, branch, snapshot)
        return self.do_branch(context, self.options_mapping.get(option))


class IcebergRefApprovalOperator(_GateMixin, ApprovalOperator):
    """
    Wait for a steward's approval before a step that removes a named tag: an erasure with
    ``ref_policy="drop"`` of that tag, or the release of a legal hold.

    The form names the table, the tag, the snapshot it pins and (for a hold) the case recorded when
    it was placed. **Approve** lets the downstream task run; **Reject** skips it. Either answer is
    an ``approval`` ledger row (who, when, what, comment).

    :param table: ``namespace.table`` (templated).
    :param ref: the tag (templated); for ``gate="legal_hold_release"`` the hold's tag name.
    :param gate: ``"erasure_drop_tag"`` or ``"legal_hold_release"``.
    :param subject: the form's headline (templated); default "Approve removing a protected tag?".
    """

    template_fields: Sequence[str] = (*HITLOperator.template_fields, "table", "ref", "iceberg_catalog_conn_id")
    ui_color = "#fde2c4"

    def __init__(
        self,
        *,
        table: str,
        ref: str,
        gate: str,
        subject: str | None = None,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        governance_namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(subject=subject or REF_SUBJECT, params=_comment_param(), **kwargs)
        self.table = table
        self.ref = ref
        self.gate = gate
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.governance_namespace = governance_namespace
        self.check_arguments()

    def check_arguments(self) -> None:
        if self.gate not in (rules.ERASURE_DROP_TAG, rules.LEGAL_HOLD_RELEASE):
            raise IcebergValidationError(
                f"gate={self.gate!r} is invalid; use {rules.ERASURE_DROP_TAG!r} or {rules.LEGAL_HOLD_RELEASE!r} "
                "(IcebergWapApprovalOperator gates a WAP publish)."
            )
        if not param_rules.is_templated(self.table):
            validate_table(self.table)
        if not param_rules.is_templated(self.ref):
            validate_ref(self.ref, "ref", allow_main=False)

    def _look(self) -> rules.RefGate:
        self.check_arguments()
        hook, table = self.catalog_hook, validate_table(self.table).dotted
        tbl = hook.load_table(table)
        found = hook.refs(tbl).get(self.ref)
        if found is None or found.type != "tag":
            raise IcebergRefNotFoundError(
                f"{table} has no tag {self.ref!r} to decide on (refs: {sorted(hook.refs(tbl))}). Nothing was changed."
            )
        facts: dict[str, Any] = {"snapshot": found.snapshot_id}
        if self.gate == rules.LEGAL_HOLD_RELEASE:
            hold = next((h for h in hook.governance.legal_holds(tbl) if h["name"] == self.ref), None)
            if hold is None:
                raise IcebergValidationError(f"Tag {self.ref!r} of {table} is not a legal hold; nothing to release.")
            recorded = hold.get("details") or {}
            facts.update(
                case_id=recorded.get("case_id"), reason=recorded.get("reason"), placed_by=recorded.get("dag_id")
            )
        return rules.RefGate(self.gate, table, self.ref, found.snapshot_id, facts)

    def execute(self, context: Context) -> Any:
        gate = self._look()
        if self.subject == REF_SUBJECT:
            self.subject = gate.subject()
        self.body = gate.body()
        return super().execute(context)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        if "error" not in event:
            option = event["chosen_options"][0]
            self.validate_chosen_options(event["chosen_options"])
            gate = self._look()
            details = rules.decision_details(
                gate=gate.gate,
                option=option,
                decisions=rules.YES_NO_DECISIONS,
                event=event,
                comment=(event.get("params_input") or {}).get(COMMENT),
                **gate.facts,
            )
            self.record_decision(
                context,
                table=gate.table,
                ref=gate.ref,
                snapshot_before=None,
                snapshot_id=gate.snapshot_id,
                details=details,
            )
        return super().execute_complete(context, event)


__all__ = ["IcebergRefApprovalOperator", "IcebergWapApprovalOperator"]
