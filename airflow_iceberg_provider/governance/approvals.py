"""The approval decisions in the ledger: written by the approval gates, read by the publish and the governance view.

Each decision taken at a gate is one ``approval`` ledger row: ``table_name``, ``ref`` (the branch
or tag decided on), ``snapshot_after`` (the snapshot decided on) and in ``details`` the gate, the
decision, who decided (name and id), when, the comment, and what the steward was shown (for a WAP
gate: the audit run's ``audit_event_id`` and ``spec_hash``, the snapshot, the branch head when the
answer came, and the failed checks with observed and expected values; for a hold: its case id). Rules live in
:mod:`airflow_iceberg_provider.rules.approval`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider.core.governance import LedgerEntry, decode_ledger_row
from airflow_iceberg_provider.rules import approval as rules

if TYPE_CHECKING:
    from airflow_iceberg_provider.governance._reader import LedgerReaderHook
    from airflow_iceberg_provider.params import AuditBinding


def approval_history(hook: LedgerReaderHook, table: str | None = None) -> list[dict[str, Any]]:
    """Every decision (newest first) as ``{table, ref, snapshot_id, gate, decision, decided_by,
    decided_at, comment, dag_id, run_id, task_id, details}``, optionally of one table."""
    filters: dict[str, Any] = {"operation": rules.OPERATION}
    if table is not None:
        filters["table_name"] = table
    out = []
    for row in hook.governance.read("ledger", **filters):
        decoded = decode_ledger_row(row)
        details = decoded["details"]
        out.append(
            {
                "table": decoded.get("table_name"),
                "ref": decoded.get("ref"),
                "snapshot_id": decoded.get("snapshot_after"),
                "gate": details.get("gate"),
                "decision": details.get("decision"),
                "decided_by": details.get("decided_by"),
                "decided_at": details.get("decided_at"),
                "comment": details.get("comment"),
                "dag_id": decoded.get("dag_id"),
                "run_id": decoded.get("run_id"),
                "task_id": decoded.get("task_id"),
                "details": details,
            }
        )
    return sorted(out, key=lambda d: str(d["decided_at"] or ""), reverse=True)


def steward_waivers(
    hook: LedgerReaderHook, table: str, binding: AuditBinding, *, dag_id: str | None, run_id: str | None
) -> frozenset[str]:
    """Warn-level checks a data steward accepted at a WAP publish gate for exactly the audit run
    ``binding`` names, in DAG run ``dag_id`` / ``run_id`` (:func:`~airflow_iceberg_provider.rules.approval.waived_checks`)."""
    decisions = [
        {**d["details"], "snapshot_id": d["snapshot_id"], "dag_id": d["dag_id"], "run_id": d["run_id"]}
        for d in approval_history(hook, table)
        if d["gate"] == rules.WAP_PUBLISH
    ]
    return rules.waived_checks(decisions, binding, dag_id=dag_id, run_id=run_id)


def hold_release_decisions(entries: Sequence[LedgerEntry]) -> list[dict[str, Any]]:
    """The legal-hold release decisions among ``entries`` (ledger rows of one table and tag), each as
    ``{event_id, ref, snapshot_id, gate, decision, case_id, decided_at}``: what
    :func:`airflow_iceberg_provider.rules.refs.release_decision` binds a release to."""
    out = []
    for e in entries:
        details = e.details or {}
        if e.operation != rules.OPERATION or e.status != "succeeded" or details.get("gate") != rules.LEGAL_HOLD_RELEASE:
            continue
        out.append(
            {
                "event_id": e.event_id,
                "ref": e.ref,
                "snapshot_id": e.snapshot_after,
                "gate": details.get("gate"),
                "decision": details.get("decision"),
                "case_id": details.get("case_id"),
                "decided_at": details.get("decided_at"),
            }
        )
    return out


__all__ = ["approval_history", "hold_release_decisions", "steward_waivers"]
