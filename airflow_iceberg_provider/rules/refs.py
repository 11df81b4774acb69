"""Pure logic of tags, branches, rollback and commit sensors (no catalog, no Airflow I/O).

Kept apart from the operators so it is testable in milliseconds: the legal-hold
naming rule, the ref guard every ref change passes (:func:`guard_ref_change`, over the
stdlib decision of :mod:`airflow_iceberg_provider.core.ref_guard` that the Spark jobs share),
ref plans, and the choice of "the new commit" a sensor reports.
Durations, points in time, counts and snapshot operations are converted by
:mod:`airflow_iceberg_provider.params` (one home; ``SNAPSHOT_OPERATIONS`` lives there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_iceberg_provider.core.governance import LEGAL_HOLD_MAX_REF_AGE_MS, LEGAL_HOLD_PREFIX
from airflow_iceberg_provider.core.ref_guard import (
    RefKind,
    RefState,
    RefVerb,
    ref_change_refusal,
    ref_state,
)
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.models import RefInfo, SnapshotInfo
from airflow_iceberg_provider.params import validate_ref


@dataclass(frozen=True)
class RefChange:
    """One ref change of a plan, applied with others in one commit
    (:meth:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook.apply_ref_changes`).

    ``snapshot_id=None`` removes the ref. ``expected_snapshot_id`` is where the plan saw the ref
    (``None``: it must not exist): the commit asserts it (compare-and-swap). ``verb`` is how the
    ref guard reads the change (:class:`~airflow_iceberg_provider.core.ref_guard.RefVerb` value;
    empty: ``create``, ``move`` or ``drop`` from the change itself).
    """

    ref: str
    ref_type: str  # "branch" | "tag"
    snapshot_id: int | None
    expected_snapshot_id: int | None
    max_ref_age_ms: int | None = None
    max_snapshot_age_ms: int | None = None
    min_snapshots_to_keep: int | None = None
    verb: str = ""


def change_verb(change: RefChange, state: RefState) -> RefVerb:
    """The verb a :class:`RefChange` performs on a ref in ``state``."""
    if change.verb:
        return RefVerb(change.verb)
    if change.snapshot_id is None:
        return RefVerb.DROP
    if state.kind is RefKind.ABSENT:
        return RefVerb.CREATE
    if change.snapshot_id == state.snapshot_id:
        return RefVerb.SET_RETENTION
    return RefVerb.MOVE


def guard_ref_change(
    verb: RefVerb | str,
    refs: Mapping[str, Any],
    name: str,
    *,
    table: str,
    param: str = "ref",
    result_type: str | None = None,
    snapshot_id: int | None = None,
    expected_type: str | None = None,
) -> RefState:
    """The ref guard: refuse ``verb`` on ref ``name`` of ``refs`` (the table's metadata refs) before
    any commit, or return the ref's :class:`~airflow_iceberg_provider.core.ref_guard.RefState`.

    The decision is :func:`~airflow_iceberg_provider.core.ref_guard.ref_change_refusal` (shared with
    the Spark jobs): a legal hold changes only through its release, a tag never moves along history,
    a branch never becomes a tag nor a tag a branch, ``main`` is never dropped.

    :raises IcebergRefusedError: the message names ``param``, the ref, its kind, the problem and the fix.
    """
    state = ref_state(refs, name)
    reason = ref_change_refusal(
        verb,
        state,
        table=table,
        param=param,
        result_type=result_type,
        snapshot_id=snapshot_id,
        expected_type=expected_type,
    )
    if reason is not None:
        raise IcebergRefusedError(reason)
    return state


def guard_ref_changes(refs: Mapping[str, Any], changes: Sequence[RefChange], *, table: str) -> None:
    """:func:`guard_ref_change` for every change of a plan (all refused before any is committed)."""
    for c in changes:
        state = ref_state(refs, c.ref)
        guard_ref_change(
            change_verb(c, state),
            refs,
            c.ref,
            table=table,
            result_type=None if c.snapshot_id is None else c.ref_type,
            snapshot_id=c.snapshot_id,
            expected_type=c.ref_type if c.snapshot_id is None else None,
        )


def expectation_problems(refs: Mapping[str, Any], changes: Sequence[RefChange]) -> list[str]:
    """Before a commit: the refs of ``changes`` that are not where the plan saw them."""
    problems = []
    for c in changes:
        found = ref_state(refs, c.ref).snapshot_id
        if found != c.expected_snapshot_id:
            problems.append(
                f"ref {c.ref!r} points at {found if found is not None else 'nothing'}, not "
                f"{c.expected_snapshot_id if c.expected_snapshot_id is not None else 'nothing'} as planned"
            )
    return problems


def landed_problems(refs: Mapping[str, Any], changes: Sequence[RefChange]) -> list[str]:
    """After changes committed one by one (a Spark job's statements): what did not land as planned,
    by type (:func:`kept_types_problems`) and by snapshot."""
    problems = kept_types_problems(refs, changes)
    for c in changes:
        found = ref_state(refs, c.ref).snapshot_id
        if c.snapshot_id is not None and found is not None and found != c.snapshot_id:
            problems.append(f"{c.ref!r} points at {found}, not {c.snapshot_id}")
    return problems


def kept_types_problems(refs: Mapping[str, Any], changes: Sequence[RefChange]) -> list[str]:
    """After a commit: what of ``changes`` did not land as planned, by type (a tag stays a tag)."""
    problems = []
    for c in changes:
        state = ref_state(refs, c.ref)
        if c.snapshot_id is None:
            if state.kind is not RefKind.ABSENT:
                problems.append(f"{c.ref!r} still exists")
        elif state.stored_type != c.ref_type:
            problems.append(f"{c.ref!r} is a {state.stored_type or 'missing ref'}, not a {c.ref_type}")
    return problems


def legal_hold_tag_name(tag: str) -> str:
    """The tag name under the legal-hold convention (prefixed once)."""
    return tag if tag.startswith(LEGAL_HOLD_PREFIX) else f"{LEGAL_HOLD_PREFIX}{tag}"


def tag_retention(tag: str, max_ref_age_ms: int | None) -> int | None:
    """The ``max-ref-age-ms`` a tag is created with.

    A legal hold always gets :data:`~airflow_iceberg_provider.core.governance.LEGAL_HOLD_MAX_REF_AGE_MS`
    (never), whatever was asked: without an explicit value Iceberg would apply the table's
    ``history.expire.max-ref-age-ms`` to it. Any other age for a hold is refused.
    """
    if not tag.startswith(LEGAL_HOLD_PREFIX):
        return max_ref_age_ms
    if max_ref_age_ms not in (None, LEGAL_HOLD_MAX_REF_AGE_MS):
        raise IcebergValidationError(
            f"max_ref_age_ms={max_ref_age_ms!r} for legal hold {tag!r}: a legal hold must never expire on its own. "
            "Leave max_ref_age unset and release the hold explicitly when the case closes."
        )
    return LEGAL_HOLD_MAX_REF_AGE_MS


def check_tag_name(tag: object, param: str = "tag", *, legal_hold: bool = False, case_id: Any = None) -> str:
    """The one rule for a tag's name (``IcebergCreateTagOperator`` and the WAP publish's ``tag``).

    A valid ref name that is not ``main``. The ``legal-hold-`` prefix makes a tag a legal hold,
    which needs a case id: with ``legal_hold=True`` (and a ``case_id``) the name gets the
    prefix; without it a prefixed name is refused.
    """
    name = validate_ref(tag, param, allow_main=False)
    if legal_hold:
        if case_id is None or not str(case_id).strip():
            raise IcebergValidationError(
                f"{param}={name!r} with legal_hold=True requires case_id (the legal case or matter reference)."
            )
        return validate_ref(legal_hold_tag_name(name), param, allow_main=False)
    if name.startswith(LEGAL_HOLD_PREFIX):
        raise IcebergValidationError(
            f"{param}={name!r} uses the legal-hold prefix {LEGAL_HOLD_PREFIX!r}, and a legal hold needs a case id: "
            "pass legal_hold=True with a case_id to place a hold (IcebergCreateTagOperator; a WAP publish places "
            "none), or choose a name without the prefix. Nothing was changed."
        )
    return name


def plan_tag(
    existing: RefInfo | None,
    tag: str,
    snapshot_id: int,
    max_ref_age_ms: int | None = None,
    *,
    table: str,
    replace: bool = False,
) -> tuple[str, RefChange | None]:
    """``(outcome, change)`` for tagging ``snapshot_id``: ``created`` / ``replaced`` / ``hold_pinned``
    with the :class:`RefChange` to commit, or ``exists`` with ``None`` (nothing to commit).

    A branch of that name is refused; so is a tag elsewhere (or with another retention) unless
    ``replace``, and a legal hold is never moved. Retention per :func:`tag_retention`.

    :raises IcebergRefusedError: the name is taken (nothing was changed).
    """
    retention = tag_retention(tag, max_ref_age_ms)
    if existing is None:
        return "created", RefChange(tag, "tag", snapshot_id, None, max_ref_age_ms=retention)
    change = RefChange(tag, "tag", snapshot_id, existing.snapshot_id, max_ref_age_ms=retention)
    if existing.type != "tag":
        raise IcebergRefusedError(
            f"{table} already has a branch named {tag!r}; a tag cannot replace a branch. Choose another tag name. "
            "Nothing was changed."
        )
    if existing.snapshot_id == snapshot_id and existing.max_ref_age_ms == retention:
        return "exists", None
    hold = tag.startswith(LEGAL_HOLD_PREFIX)
    if hold and existing.snapshot_id == snapshot_id:  # a hold placed before holds carried their own max-ref-age
        return "hold_pinned", change
    if hold:
        raise IcebergRefusedError(
            f"Tag {tag!r} of {table} is a legal hold on snapshot {existing.snapshot_id}; a hold is never moved "
            f"(requested: {snapshot_id}, max_ref_age_ms={retention}). Release it explicitly (drop the tag with "
            "release_legal_hold=True) or place a hold under another name. Nothing was changed."
        )
    if not replace:
        raise IcebergRefusedError(
            f"Tag {tag!r} of {table} already points at snapshot {existing.snapshot_id} (max_ref_age_ms="
            f"{existing.max_ref_age_ms}); refusing to move it to {snapshot_id} (max_ref_age_ms={retention}): tags are "
            "immutable audit points. Pass replace=True to move it deliberately, or choose another name. Nothing was "
            "changed."
        )
    return "replaced", change


def validate_summary(value: object, param: str = "summary") -> dict[str, str]:
    """Summary properties to match: a mapping of string keys to (stringified) values."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise IcebergValidationError(
            f"{param}={value!r} is not a mapping; pass e.g. {{'wap.id': 'run-42'}} or "
            "{'airflow.run-id': '{{ run_id }}'}."
        )
    out = {}
    for key, val in value.items():
        if not isinstance(key, str) or not key:
            raise IcebergValidationError(f"{param} key {key!r} must be a non-empty string.")
        out[key] = str(val)
    return out


def matches(info: SnapshotInfo, operation: str | None, summary: Mapping[str, str]) -> bool:
    if operation is not None and info.operation != operation:
        return False
    return all(info.summary.get(k) == v for k, v in summary.items())


def select_new_commit(
    chain: Sequence[SnapshotInfo],
    *,
    after_snapshot_id: int | None = None,
    after_timestamp_ms: int | None = None,
    operation: str | None = None,
    summary: Mapping[str, str] | None = None,
) -> tuple[SnapshotInfo | None, int]:
    """The newest matching commit of a ref that is newer than the baseline, and how many matched.

    :param chain: the ref's ancestry, **oldest first** (head last).
    :param after_snapshot_id: only commits after this snapshot. When it is not in the
        ref's ancestry any more (the ref was rolled back past it or replaced), commits
        newer than ``after_timestamp_ms`` count instead; without a timestamp every
        commit on the rewritten ref counts.
    :param after_timestamp_ms: only commits strictly newer than this time.
    """
    ids = [s.snapshot_id for s in chain]
    candidates: Sequence[SnapshotInfo] = chain
    if after_snapshot_id is not None and after_snapshot_id in ids:
        candidates = chain[ids.index(after_snapshot_id) + 1 :]
    if after_timestamp_ms is not None and (after_snapshot_id is None or after_snapshot_id not in ids):
        candidates = [s for s in candidates if s.timestamp_ms > after_timestamp_ms]
    found = [s for s in candidates if matches(s, operation, summary or {})]
    return (found[-1] if found else None), len(found)


def plan_branch(
    existing: RefInfo | None,
    branch: str,
    snapshot_id: int,
    retention: Mapping[str, int | None],
    *,
    table: str,
    descends: bool,
    replace: bool = False,
) -> tuple[str, RefChange | None]:
    """``(outcome, change)`` for a branch starting at ``snapshot_id`` with ``retention``
    (``max_ref_age_ms``, ``max_snapshot_age_ms``, ``min_snapshots_to_keep``).

    ``created``; ``exists`` (no change) when the branch already starts at (or has since
    advanced from) ``snapshot_id`` -- ``descends`` says whether its head descends from it --
    with the same retention; ``retention_updated`` (same head, new retention);
    ``replaced`` when ``replace`` re-points a diverged branch.

    :raises IcebergRefusedError: a tag of that name, or a diverged branch without
        ``replace`` (nothing was changed).
    """
    if existing is None:
        return "created", _branch_change(branch, snapshot_id, None, retention)
    if existing.type != "branch":
        raise IcebergRefusedError(
            f"{table} already has a tag named {branch!r}; choose another branch name. Nothing was changed."
        )
    if descends:
        if all(getattr(existing, k) == v for k, v in retention.items()):
            return "exists", None
        head = existing.snapshot_id
        return "retention_updated", _branch_change(branch, head, head, retention)
    if not replace:
        raise IcebergRefusedError(
            f"Branch {branch!r} of {table} already exists at snapshot {existing.snapshot_id}, which does "
            f"not descend from {snapshot_id}; refusing to re-point it (its commits would be lost). Pass "
            "replace=True to re-point it deliberately, or choose another name. Nothing was changed."
        )
    return "replaced", _branch_change(branch, snapshot_id, existing.snapshot_id, retention)


def _branch_change(
    branch: str, snapshot_id: int, expected: int | None, retention: Mapping[str, int | None]
) -> RefChange:
    return RefChange(
        branch,
        "branch",
        snapshot_id,
        expected,
        max_ref_age_ms=retention.get("max_ref_age_ms"),
        max_snapshot_age_ms=retention.get("max_snapshot_age_ms"),
        min_snapshots_to_keep=retention.get("min_snapshots_to_keep"),
    )


def rollback_target(
    chain: Sequence[SnapshotInfo],
    refs: Mapping[str, RefInfo],
    *,
    table: str,
    ref: str,
    known_ids: set[int] | frozenset[int],
    snapshot_id: int | str | None = None,
    tag: str | None = None,
    as_of_ms: int | None = None,
) -> SnapshotInfo:
    """The snapshot to roll ``ref`` back to (exactly one of id, tag or time), checked to be an ancestor.

    :param chain: the ref's ancestry, oldest first (head last).
    :param known_ids: ids of every snapshot still in the table's metadata.
    :param as_of_ms: picks the newest snapshot of the ref's ancestry committed at or before that time.
    :raises IcebergRefusedError: the target is not an ancestor of the ref's head.
    """
    from airflow_iceberg_provider.exceptions import IcebergRefNotFoundError
    from airflow_iceberg_provider.params import validate_snapshot_id

    if sum(x is not None for x in (snapshot_id, tag, as_of_ms)) != 1:
        raise ValueError("resolve_rollback_target() takes exactly one of snapshot_id, tag or as_of_ms.")
    if not chain:
        raise IcebergRefNotFoundError(
            f"{table} has no {ref!r} with snapshots to roll back; existing refs: {sorted(refs) or 'none'}."
        )
    head = chain[-1].snapshot_id
    if as_of_ms is not None:
        older = [s for s in chain if s.timestamp_ms <= as_of_ms]
        if not older:
            raise IcebergRefusedError(
                f"{table} {ref!r} has no ancestor committed at or before {as_of_ms} ms (its oldest "
                f"ancestor is {chain[0].snapshot_id} at {chain[0].timestamp_ms} ms). Nothing was changed."
            )
        return older[-1]
    if tag is not None:
        validate_ref(tag, "tag")
        found = refs.get(tag)
        if found is None or found.type != "tag":
            raise IcebergRefNotFoundError(
                f"Tag {tag!r} does not exist on {table}; existing tags: "
                f"{sorted(n for n, r in refs.items() if r.type == 'tag') or 'none'}."
            )
        snapshot_id = found.snapshot_id
    sid = validate_snapshot_id(snapshot_id)
    if sid not in known_ids:
        raise IcebergRefNotFoundError(f"Snapshot {sid} does not exist on {table} (expired or never created).")
    by_id = {s.snapshot_id: s for s in chain}
    if sid not in by_id:
        raise IcebergRefusedError(
            f"Cannot roll {table} {ref!r} back to snapshot {sid}"
            + (f" (tag {tag!r})" if tag else "")
            + f": it is not an ancestor of the head {head}. Rollback only moves a ref back along its own "
            "history; to publish another line of history use a branch and fast-forward. Nothing was changed."
        )
    return by_id[sid]


# ------------------------------------------------------------ legal holds: placements, releases, violations
#: The gate of a hold-release decision (``IcebergRefApprovalOperator(gate=...)``).
HOLD_RELEASE_GATE = "legal_hold_release"


@dataclass(frozen=True)
class HoldPlacement:
    """A legal hold as the ledger recorded it: placed and not released since.

    :param tag: the hold's tag name.
    :param snapshot_id: the snapshot it was placed on.
    :param case_id: the case recorded with it.
    :param requires_approval: the hold's own release policy (``requires_approval=True`` when placed).
    :param event_id: the placing ledger row.
    """

    tag: str
    snapshot_id: int
    case_id: str | None
    requires_approval: bool
    event_id: str


def placed_holds(entries: Sequence[Any]) -> dict[str, HoldPlacement]:
    """The holds of one table that the ledger recorded as placed and not released, by tag.

    :param entries: the table's ``create_tag`` and ``drop_tag`` ledger entries
        (:class:`~airflow_iceberg_provider.core.governance.LedgerEntry`), any order. A placement is a
        succeeded/noop ``create_tag`` with ``legal_hold`` in its details; a release is a succeeded
        ``drop_tag`` with ``legal_hold_released``. The later of the two wins.
    """
    out: dict[str, HoldPlacement] = {}
    done = [e for e in entries if e.status in ("succeeded", "noop") and e.ref]
    for e in sorted(done, key=lambda e: (e.finished_at is None, e.finished_at)):
        details = e.details or {}
        if e.operation == "create_tag" and details.get("legal_hold") and e.snapshot_after is not None:
            case = details.get("case_id")
            out[e.ref] = HoldPlacement(
                e.ref,
                int(e.snapshot_after),
                None if case is None else str(case),
                bool(details.get("requires_approval")),
                e.event_id,
            )
        elif e.operation == "drop_tag" and details.get("legal_hold_released"):
            out.pop(e.ref, None)
    return out


@dataclass(frozen=True)
class HoldViolation:
    """A hold the ledger records as placed that the table no longer has as placed.

    ``problem``: ``dropped`` (the tag is gone without a release), ``turned into a branch`` or
    ``moved`` (it pins another snapshot).
    """

    tag: str
    problem: str
    placed_snapshot_id: int
    found_snapshot_id: int | None
    case_id: str | None

    def describe(self, table: str) -> str:
        where = "" if self.found_snapshot_id is None else f" (now at snapshot {self.found_snapshot_id})"
        return (
            f"legal hold {self.tag!r} of {table} (case {self.case_id or 'unrecorded'}, placed on snapshot "
            f"{self.placed_snapshot_id}) was {self.problem}{where} without a release: a writer outside the "
            "provider changed it. Restore it with IcebergCreateTagOperator(legal_hold=True, ...) on snapshot "
            f"{self.placed_snapshot_id} if that snapshot still exists, and investigate the writer"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "problem": self.problem,
            "placed_snapshot_id": str(self.placed_snapshot_id),
            "found_snapshot_id": None if self.found_snapshot_id is None else str(self.found_snapshot_id),
            "case_id": self.case_id,
        }


def hold_violations(placed: Mapping[str, HoldPlacement], refs: Mapping[str, Any]) -> list[HoldViolation]:
    """Compare the table's refs with the holds the ledger recorded as placed and not released."""
    out = []
    for tag, hold in sorted(placed.items()):
        state = ref_state(refs, tag)
        if state.kind is RefKind.ABSENT:
            problem = "dropped"
        elif state.stored_type != "tag":
            problem = f"turned into a {state.stored_type}"
        elif state.snapshot_id != hold.snapshot_id:
            problem = "moved"
        else:
            continue
        out.append(HoldViolation(tag, problem, hold.snapshot_id, state.snapshot_id, hold.case_id))
    return out


@dataclass(frozen=True)
class ReleaseDecision:
    """Whether a hold may be released now, and on what authority.

    :param required: the release policy asks for an approval (``policy`` says whose).
    :param approval_id: the ledger event id of the approval used (``None`` when none was required).
    """

    required: bool
    policy: str  # "hold" | "connection" | "none"
    approval_id: str | None


@dataclass(frozen=True)
class HoldRelease:
    """A hold released: which, on which snapshot and case, under which policy, with which approval."""

    tag: str
    snapshot_id: int
    case_id: str | None
    policy: str
    approval_id: str | None


def release_decision(
    *,
    table: str,
    tag: str,
    snapshot_id: int,
    case_id: str | None,
    hold_requires: bool,
    connection_requires: bool,
    decisions: Sequence[Mapping[str, Any]],
) -> ReleaseDecision:
    """The release policy of one hold: may ``tag`` (pinning ``snapshot_id``, case ``case_id``) be released?

    Where the hold's own policy or the connection's asks for an approval, only the latest
    ``legal_hold_release`` decision bound to this hold's name, case id and snapshot counts, and
    only an ``approved`` one. A mark-success on the gate (no row), no gate at all, a rejection, or an
    approval for another hold, case or snapshot cannot release.

    :param decisions: ``approval`` ledger rows decoded as ``{"event_id", "ref", "snapshot_id",
        "gate", "decision", "case_id", "decided_at"}``.
    :raises IcebergRefusedError: an approval is required and none bound to this hold is approved.
    """
    policy = "hold" if hold_requires else ("connection" if connection_requires else "none")
    if policy == "none":
        return ReleaseDecision(False, policy, None)
    bound = [
        d
        for d in decisions
        if d.get("gate") == HOLD_RELEASE_GATE
        and d.get("ref") == tag
        and str(d.get("snapshot_id")) == str(snapshot_id)
        and (None if d.get("case_id") is None else str(d.get("case_id"))) == case_id
        and d.get("event_id")
    ]
    why = (
        "the hold was placed with requires_approval=True"
        if policy == "hold"
        else "the connection sets hold_release_requires_approval"
    )
    fix = (
        f"run IcebergRefApprovalOperator(table={table!r}, ref={tag!r}, gate={HOLD_RELEASE_GATE!r}) upstream and "
        "have a steward approve it"
    )
    if not bound:
        others = sum(1 for d in decisions if d.get("gate") == HOLD_RELEASE_GATE and d.get("ref") == tag)
        seen = (
            f" ({others} decision(s) on {tag!r} are bound to another case or snapshot)" if others else " (none found)"
        )
        raise IcebergRefusedError(
            f"release_legal_hold=True for tag={tag!r} of {table}: a release needs an approval bound to this hold "
            f"(case {case_id or 'unrecorded'}, snapshot {snapshot_id}) because {why}, and there is none{seen}. "
            f"{fix[0].upper()}{fix[1:]}. Nothing was changed."
        )
    latest = max(bound, key=lambda d: str(d.get("decided_at") or ""))
    if latest.get("decision") != "approved":
        raise IcebergRefusedError(
            f"release_legal_hold=True for tag={tag!r} of {table}: the latest decision bound to this hold (case "
            f"{case_id or 'unrecorded'}, snapshot {snapshot_id}) is {latest.get('decision')!r}, not 'approved' "
            f"({why}). Ask again: {fix}. Nothing was changed."
        )
    return ReleaseDecision(True, policy, str(latest["event_id"]))
