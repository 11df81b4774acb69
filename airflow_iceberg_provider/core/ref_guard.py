"""The ref guard: which verb may change which kind of ref (stdlib only, no I/O).

One decision for every path that creates, moves, replaces, rolls back, fast-forwards,
cherry-picks onto, drops or releases a ref: the catalog hook's verbs, the operators, the WAP
and multi-table publishes, the erasure's ref policies and the Spark jobs' plan builders all
ask :func:`ref_change_refusal` before they commit. The Airflow side raises the answer as
:class:`~airflow_iceberg_provider.exceptions.IcebergRefusedError`
(:func:`airflow_iceberg_provider.rules.refs.guard_ref_change`); the Spark side as
:class:`RefGuardRefusal`. The module imports only the standard library, so the Spark job
runtime ships it.

A ref is a small typed value, :class:`RefState`, built in one place from the table metadata
(:func:`ref_state`): absent, a branch, a tag, or a legal hold. A name under the legal-hold
prefix is a hold whatever its stored type: a hold that an outside writer turned into a branch
is still a hold (a broken one, :attr:`RefState.broken_hold`), so no verb treats it as an
ordinary branch. A legal hold changes only through the release path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from airflow_iceberg_provider.core.governance import LEGAL_HOLD_PREFIX

MAIN = "main"


class RefKind(StrEnum):
    """What a ref is, as far as the guard is concerned."""

    ABSENT = "absent"
    BRANCH = "branch"
    TAG = "tag"
    LEGAL_HOLD = "legal hold"


class RefVerb(StrEnum):
    """Every way a ref can be changed."""

    CREATE = "create"
    MOVE = "move"  # replace / re-point / set
    ROLLBACK = "rollback"
    FAST_FORWARD = "fast-forward"
    CHERRY_PICK = "cherry-pick onto"
    DROP = "drop"
    SET_RETENTION = "set retention"
    RELEASE = "release"


#: Verbs that move a branch along its history (never a tag: a tag is a fixed point).
BRANCH_ONLY_VERBS = frozenset({RefVerb.ROLLBACK, RefVerb.FAST_FORWARD, RefVerb.CHERRY_PICK})

#: How a release is asked for, for the messages.
RELEASE_HOW = (
    "release it with IcebergDropTagOperator(tag=..., release_legal_hold=True, release_reason=...) "
    "(with an approved IcebergRefApprovalOperator(gate='legal_hold_release') decision where the hold's "
    "release policy requires one)"
)


class RefGuardRefusal(ValueError):
    """The guard refused a ref change (the Spark side's error; the Airflow side raises
    :class:`~airflow_iceberg_provider.exceptions.IcebergRefusedError` with the same message)."""


def claims_hold(name: str) -> bool:
    """Whether a ref *name* is under the legal-hold convention (whatever its stored type)."""
    return str(name).startswith(LEGAL_HOLD_PREFIX)


@dataclass(frozen=True)
class RefState:
    """One ref as the guard sees it.

    :param name: the ref's name.
    :param kind: absent, branch, tag or legal hold.
    :param snapshot_id: the snapshot it points at (``None`` when absent).
    :param stored_type: the type the table metadata stores (``"branch"``/``"tag"``; ``None`` when absent).
    """

    name: str
    kind: RefKind
    snapshot_id: int | None = None
    stored_type: str | None = None

    @property
    def is_hold(self) -> bool:
        return self.kind is RefKind.LEGAL_HOLD

    @property
    def broken_hold(self) -> bool:
        """A hold whose ref is no longer a tag (an outside writer turned it into a branch)."""
        return self.is_hold and self.stored_type != "tag"

    def describe(self) -> str:
        if self.kind is RefKind.ABSENT:
            return f"ref {self.name!r} (absent)"
        if self.broken_hold:
            return f"legal hold {self.name!r} (stored as a {self.stored_type}, at snapshot {self.snapshot_id})"
        return f"{self.kind.value} {self.name!r} (at snapshot {self.snapshot_id})"

    @classmethod
    def of(cls, name: str, stored_type: str | None, snapshot_id: int | None) -> RefState:
        """The state of a ref named ``name`` stored as ``stored_type`` (``None``: absent)."""
        if stored_type is None:
            return cls(name, RefKind.ABSENT)
        stored = str(stored_type).lower()
        if stored not in ("branch", "tag"):
            raise ValueError(f"unknown ref type {stored_type!r} for {name!r}")
        if claims_hold(name):
            kind = RefKind.LEGAL_HOLD
        else:
            kind = RefKind.TAG if stored == "tag" else RefKind.BRANCH
        return cls(name, kind, None if snapshot_id is None else int(snapshot_id), stored)


def _type_and_id(ref: Any) -> tuple[str, int]:
    """A ref's stored type and snapshot id from pyiceberg's ``SnapshotRef``, a ``RefInfo`` or a dict."""
    if isinstance(ref, Mapping):
        return str(ref["type"]).lower(), int(ref["snapshot_id"])
    kind = getattr(ref, "snapshot_ref_type", None)
    if kind is not None:
        return str(getattr(kind, "value", kind)).lower(), int(ref.snapshot_id)
    return str(ref.type).lower(), int(ref.snapshot_id)


def ref_state(refs: Mapping[str, Any], name: str) -> RefState:
    """The one builder of :class:`RefState`: ``name`` looked up in a table's refs.

    :param refs: ``metadata.refs`` (pyiceberg ``SnapshotRef`` values), ``RefInfo`` values, or
        dicts with ``type`` and ``snapshot_id`` (the Spark side's ``refs`` metadata table).
    """
    found = refs.get(name)
    if found is None:
        return RefState.of(name, None, None)
    stored, sid = _type_and_id(found)
    return RefState.of(name, stored, sid)


def _refuse(param: str, table: str, state: RefState, verb: RefVerb, problem: str, fix: str) -> str:
    return (
        f"{param}={state.name!r}: refusing to {verb.value} {state.describe()} of {table}: {problem}. "
        f"{fix[0].upper()}{fix[1:]}. Nothing was changed."
    )


def ref_change_refusal(
    verb: RefVerb | str,
    state: RefState,
    *,
    table: str,
    param: str = "ref",
    result_type: str | None = None,
    snapshot_id: int | None = None,
    expected_type: str | None = None,
) -> str | None:
    """Why ``verb`` may not change ``state`` (a message naming the parameter, the ref and its kind,
    the problem and the fix), or ``None`` when it may.

    :param verb: the change (:class:`RefVerb`).
    :param state: the ref as the table metadata has it now (:func:`ref_state`).
    :param table: the table, for the message.
    :param param: the parameter that named the ref, for the message.
    :param result_type: the stored type the change leaves (``"branch"``/``"tag"``; ``None`` for a drop
        or release).
    :param snapshot_id: where the change points the ref (``None`` for a drop or release).
    :param expected_type: the kind of ref the caller means to drop (``"branch"``/``"tag"``), when it says.
    """
    verb = RefVerb(verb)
    hold_fix = RELEASE_HOW
    if verb is RefVerb.RELEASE:
        if state.kind is RefKind.ABSENT or state.is_hold:
            return None
        return _refuse(
            param,
            table,
            state,
            verb,
            "only a legal hold is released",
            f"drop it with IcebergDrop{state.kind.value.capitalize()}Operator",
        )
    if state.is_hold:
        same_tag = result_type == "tag" and state.stored_type == "tag" and snapshot_id == state.snapshot_id
        if verb in (RefVerb.CREATE, RefVerb.SET_RETENTION) and same_tag:
            return None  # placing the same hold again (pins a hold placed without its never-expiring age)
        problem = "a legal hold changes only through its release"
        if state.broken_hold:
            problem = (
                "a legal hold changes only through its release, and this one was already turned into a "
                f"{state.stored_type} by a writer outside the provider (a hold violation)"
            )
        return _refuse(param, table, state, verb, problem, hold_fix)
    if verb is RefVerb.DROP:
        if state.kind is RefKind.ABSENT:
            return None
        if state.name == MAIN:
            return _refuse(param, table, state, verb, "main is never dropped", "drop another branch")
        if expected_type is not None and state.stored_type != expected_type:
            return _refuse(
                param,
                table,
                state,
                verb,
                f"it is a {state.stored_type}, not a {expected_type}",
                f"use IcebergDrop{str(state.stored_type).capitalize()}Operator if you mean it",
            )
        return None
    if claims_hold(state.name) and result_type != "tag":
        return _refuse(
            param,
            table,
            state,
            verb,
            f"the name {state.name!r} is reserved for legal holds, which are tags",
            "choose a name without the legal-hold prefix",
        )
    if state.kind is RefKind.TAG and verb in BRANCH_ONLY_VERBS:
        return _refuse(
            param,
            table,
            state,
            verb,
            f"a tag is a fixed point; only a branch can {verb.value.split()[0]}",
            "create a branch from the tag's snapshot and change that, or replace the tag deliberately "
            "with IcebergCreateTagOperator(replace=True)",
        )
    if state.kind is RefKind.TAG and result_type == "branch":
        return _refuse(
            param, table, state, verb, "a branch cannot replace a tag", "choose another branch name, or drop the tag"
        )
    if state.kind is RefKind.BRANCH and result_type == "tag":
        return _refuse(
            param, table, state, verb, "a tag cannot replace a branch", "choose another tag name, or drop the branch"
        )
    if state.name == MAIN and result_type not in (None, "branch"):
        return _refuse(param, table, state, verb, "main is always a branch", "choose another name")
    return None


def check_ref_change(verb: RefVerb | str, state: RefState, **kwargs: Any) -> None:
    """:func:`ref_change_refusal`, raising :class:`RefGuardRefusal` (the Spark side's plan builders)."""
    reason = ref_change_refusal(verb, state, **kwargs)
    if reason is not None:
        raise RefGuardRefusal(reason)


__all__ = [
    "BRANCH_ONLY_VERBS",
    "RELEASE_HOW",
    "RefGuardRefusal",
    "RefKind",
    "RefState",
    "RefVerb",
    "check_ref_change",
    "claims_hold",
    "ref_change_refusal",
    "ref_state",
]
