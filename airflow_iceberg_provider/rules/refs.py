"""Pure logic of tags, branches, rollback and commit sensors (no catalog, no Airflow I/O).

Kept apart from the operators so it is testable in milliseconds: the legal-hold
naming rule, ref plans, and the choice of "the new commit" a sensor reports.
Durations, points in time, counts and snapshot operations are converted by
:mod:`airflow_iceberg_provider.params` (one home; ``SNAPSHOT_OPERATIONS`` lives there).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_iceberg_provider.core.governance import LEGAL_HOLD_MAX_REF_AGE_MS, LEGAL_HOLD_PREFIX
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.models import RefInfo, SnapshotInfo
from airflow_iceberg_provider.params import validate_ref


@dataclass(frozen=True)
class RefChange:
    """One ref change of a plan, applied with others in one commit
    (:meth:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook.apply_ref_changes`).

    ``snapshot_id=None`` removes the ref. ``expected_snapshot_id`` is where the plan saw the ref
    (``None``: it must not exist): the commit asserts it (compare-and-swap).
    """

    ref: str
    ref_type: str  # "branch" | "tag"
    snapshot_id: int | None
    expected_snapshot_id: int | None
    max_ref_age_ms: int | None = None
    max_snapshot_age_ms: int | None = None
    min_snapshots_to_keep: int | None = None


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
        return "created", RefChange(branch, "branch", snapshot_id, None, **retention)
    if existing.type != "branch":
        raise IcebergRefusedError(
            f"{table} already has a tag named {branch!r}; choose another branch name. Nothing was changed."
        )
    if descends:
        if all(getattr(existing, k) == v for k, v in retention.items()):
            return "exists", None
        head = existing.snapshot_id
        return "retention_updated", RefChange(branch, "branch", head, head, **retention)
    if not replace:
        raise IcebergRefusedError(
            f"Branch {branch!r} of {table} already exists at snapshot {existing.snapshot_id}, which does "
            f"not descend from {snapshot_id}; refusing to re-point it (its commits would be lost). Pass "
            "replace=True to re-point it deliberately, or choose another name. Nothing was changed."
        )
    return "replaced", RefChange(branch, "branch", snapshot_id, existing.snapshot_id, **retention)


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
