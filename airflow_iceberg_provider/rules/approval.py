"""Pure rules of the approval gates (no catalog, no Airflow I/O; tested in milliseconds).

A WAP audit check can be *warn-level*: its failure does not refuse the publish by itself but asks a
data steward. :func:`audit_findings` sorts the checks of this run's audit (read by its event id)
into passed, warned and blocking checks; :func:`wap_gate_body` writes what the steward reads (every failed check with its
observed and expected value); :func:`decision_details` is the ledger's record of the answer (who,
when, what, comment, and the audit run, snapshot and failed checks the steward was shown);
:func:`waived_checks` is what the publish reads back: the warn-level checks a steward accepted for
exactly that audit run and snapshot, in the same DAG run.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.params import AuditBinding
from airflow_iceberg_provider.rules.wap_refs import Verdict

#: the ledger operation of every decision taken at a gate
OPERATION = "approval"

#: gates (``details.gate`` of a decision)
WAP_PUBLISH, ERASURE_DROP_TAG, LEGAL_HOLD_RELEASE = "wap_publish", "erasure_drop_tag", "legal_hold_release"
GATES = (WAP_PUBLISH, ERASURE_DROP_TAG, LEGAL_HOLD_RELEASE)

#: the options of a WAP publish gate and the decision each records
PUBLISH, DROP, KEEP = "Publish", "Drop branch", "Keep for later"
WAP_OPTIONS = (PUBLISH, DROP, KEEP)
WAP_DECISIONS = {PUBLISH: "publish", DROP: "drop_branch", KEEP: "keep"}

#: the options of the erasure and legal-hold gates
APPROVE, REJECT = "Approve", "Reject"
YES_NO_DECISIONS = {APPROVE: "approved", REJECT: "rejected"}


@dataclass(frozen=True)
class Findings:
    """One audit run's checks, sorted: ``failed`` rows (``check``, ``observed``, ``expected``), of
    which ``blocking`` are not warn-level."""

    event_id: str | None
    checks: int
    failed: tuple[dict[str, Any], ...] = ()
    blocking: tuple[str, ...] = ()
    spec_hash: str | None = None

    @property
    def warned(self) -> tuple[str, ...]:
        return tuple(f["check"] for f in self.failed if f["check"] not in self.blocking)


def check_warn_checks(value: object, param: str = "warn_checks") -> tuple[str, ...]:
    """``warn_checks`` as a tuple of check names (a string is one name)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Collection) or not all(isinstance(v, str) and v.strip() for v in value):
        raise IcebergValidationError(
            f"{param}={value!r} must be a list of audit check names (as given to IcebergWapAuditOperator)."
        )
    return tuple(v.strip() for v in value)


def audit_findings(verdict: Verdict, warn_checks: Collection[str]) -> Findings:
    """Sort the checks of one bound audit run (:func:`~airflow_iceberg_provider.rules.wap_refs.read_verdict`)."""
    failed = verdict.failed
    blocking = tuple(f["check"] for f in failed if f["check"] not in set(warn_checks))
    return Findings(verdict.event_id, len(verdict.rows), failed, blocking, verdict.spec_hash)


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def wap_gate_body(table: str, branch: str, snapshot_id: int, main_head: int | None, findings: Findings) -> str:
    """The steward's form text (Markdown): what is waiting, every failed check, the three choices."""
    lines = [
        f"**{table}**: branch `{branch}` holds snapshot `{snapshot_id}`, audited "
        f"(event `{findings.event_id}`, {findings.checks} checks). `main` is at `{main_head}`.",
        "",
        "Warn-level checks failed:",
        "",
        "| check | observed | expected |",
        "|---|---|---|",
        *(f"| {_cell(f['check'])} | {_cell(f['observed'])} | {_cell(f['expected'])} |" for f in findings.failed),
        "",
        f"* **{PUBLISH}**: move `main` to this snapshot (the failed warn-level checks are accepted, and recorded).",
        f"* **{DROP}**: drop the branch; `main` is unchanged.",
        f"* **{KEEP}**: change nothing; the branch stays for a later decision.",
        "",
        "Add a comment: it is recorded in the governance ledger with your name and the time.",
    ]
    return "\n".join(lines)


def decision_details(
    *,
    gate: str,
    option: str,
    decisions: Mapping[str, str],
    event: Mapping[str, Any],
    comment: str | None,
    **facts: Any,
) -> dict[str, Any]:
    """The ledger ``details`` of one decision: the gate, the decision, who, when, the comment, the facts."""
    user = event.get("responded_by_user") or event.get("responded_by") or {}
    when = event.get("responded_at")
    return {
        "gate": gate,
        "decision": decisions[option],
        "option": option,
        "decided_by": user.get("name") if isinstance(user, Mapping) else str(user),
        "decided_by_id": user.get("id") if isinstance(user, Mapping) else None,
        "decided_at": when.isoformat() if isinstance(when, datetime) else when,
        "comment": (comment or "").strip() or None,
        **facts,
    }


def waived_checks(
    decisions: Sequence[Mapping[str, Any]], binding: AuditBinding, *, dag_id: str | None, run_id: str | None
) -> frozenset[str]:
    """Warn-level checks a steward accepted for exactly one audit run (``details`` of decoded ``approval``
    rows, with the row's ``snapshot_id``, ``dag_id`` and ``run_id``).

    A decision counts only if it was taken in this DAG run (``dag_id``, ``run_id``) about this audit
    run (``audit_event_id`` and ``spec_hash`` of ``binding``) and its snapshot (``snapshot_id``), with
    the branch still at that snapshot when the steward answered (``branch_head``). Of those, only the
    latest counts, and only a ``publish``; it waives only checks the steward was shown as failed.
    """
    mine = [
        d
        for d in decisions
        if d.get("gate") == WAP_PUBLISH
        and d.get("decided_at")
        and d.get("audit_event_id") == binding.event_id
        and d.get("spec_hash") == binding.spec_hash
        and str(d.get("snapshot_id")) == str(binding.snapshot_id)
        and str(d.get("branch_head")) == str(binding.snapshot_id)
        and (d.get("dag_id"), d.get("run_id")) == (dag_id, run_id)
    ]
    if not mine:
        return frozenset()
    latest = max(mine, key=lambda d: str(d["decided_at"]))
    if latest.get("decision") != "publish":
        return frozenset()
    shown = {f.get("check") if isinstance(f, Mapping) else f for f in latest.get("failed_checks") or ()}
    return frozenset(c for c in latest.get("waived", ()) if c in shown)


@dataclass(frozen=True)
class RefGate:
    """What an erasure or legal-hold gate asks about: one named ref of a table."""

    gate: str
    table: str
    ref: str
    snapshot_id: int | None
    facts: dict[str, Any] = field(default_factory=dict)

    def subject(self) -> str:
        if self.gate == LEGAL_HOLD_RELEASE:
            return f"Release legal hold {self.ref} on {self.table}?"
        return f"Erase through tag {self.ref} of {self.table}?"

    def body(self) -> str:
        facts = "\n".join(f"* {k}: `{_cell(v)}`" for k, v in sorted(self.facts.items()) if v is not None)
        if self.gate == LEGAL_HOLD_RELEASE:
            what = (
                f"Releasing legal hold **{self.ref}** removes the tag that pins snapshot `{self.snapshot_id}` of "
                f"**{self.table}**: the next snapshot expiry may delete the data it keeps."
            )
        else:
            what = (
                f"The erasure drops tag **{self.ref}** of **{self.table}** (snapshot `{self.snapshot_id}`) so that "
                "the data it pins can be purged. A dropped tag cannot be restored once its snapshot expires."
            )
        return "\n".join(
            [what, "", facts, "", f"**{APPROVE}** lets the task go ahead; **{REJECT}** skips it (nothing changes)."]
        )


__all__ = [
    "APPROVE",
    "DROP",
    "ERASURE_DROP_TAG",
    "GATES",
    "KEEP",
    "LEGAL_HOLD_RELEASE",
    "OPERATION",
    "PUBLISH",
    "REJECT",
    "WAP_DECISIONS",
    "WAP_OPTIONS",
    "WAP_PUBLISH",
    "YES_NO_DECISIONS",
    "Findings",
    "RefGate",
    "audit_findings",
    "check_warn_checks",
    "decision_details",
    "wap_gate_body",
    "waived_checks",
]
