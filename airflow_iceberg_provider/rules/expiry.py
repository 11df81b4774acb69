"""Snapshot-expiry rules: which snapshots ``expire_snapshots`` would remove, and why others stay.

Pure logic (plain values in, plain values out; no catalog, no Spark). The preview
mirrors Iceberg's ``RemoveSnapshots`` (1.10) retention rules exactly, so a dry run
lists what ``expire_snapshots`` would remove and which refs (branches, tags, legal
holds) keep which old snapshots; an expiry that would drop a legal hold is refused.
:func:`airflow_iceberg_provider.rules.maintenance.preview_table_expiry` feeds it a
loaded table with the table's own defaults.

It must not read the catalog or parse operator parameters beyond ``retain_last``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.core.governance import is_legal_hold
from airflow_iceberg_provider.core.ref_guard import claims_hold
from airflow_iceberg_provider.exceptions import (
    IcebergRefNotFoundError,
    IcebergRefusedError,
)
from airflow_iceberg_provider.models import RefInfo, SnapshotInfo
from airflow_iceberg_provider.params import positive_int


def iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


#: why ``retain_last`` is at least 1 (appended to its refusal)
RETAIN_HINT = "expire_snapshots always keeps at least the current snapshot of main; pass retain_last=1 or more."


def validate_retain_last(value: object, param: str = "retain_last") -> int:
    """A required ``retain_last`` (1 .. 2^31-1), through :func:`airflow_iceberg_provider.params.positive_int`."""
    return positive_int(value, param, required=True, hint=RETAIN_HINT)  # type: ignore[return-value]


@dataclass(frozen=True)
class ExpiryPreview:
    """What ``expire_snapshots`` would do, computed from metadata alone."""

    older_than_ms: int
    retain_last: int
    expire: list[int]
    retain: list[int]
    #: old snapshots (older than the cutoff) kept, by snapshot id (as str), with the refs keeping them,
    #: described as ``branch:<name>``, ``tag:<name>`` or ``legal_hold:<name>``.
    kept_by_refs: dict[str, list[str]] = field(default_factory=dict)
    #: refs Iceberg would drop because they are older than their max-ref-age.
    refs_expired: list[str] = field(default_factory=list)
    explicit_ids: list[int] = field(default_factory=list)

    @property
    def held_snapshots(self) -> dict[str, list[str]]:
        """Old snapshots kept by a ref other than main's own retention (tags, branches, holds)."""
        return {sid: refs for sid, refs in self.kept_by_refs.items() if any(r != "branch:main" for r in refs)}

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["older_than"] = iso(self.older_than_ms)
        out["expire_count"] = len(self.expire)
        out["held_snapshots"] = self.held_snapshots
        return out


def describe_ref(ref: RefInfo) -> str:
    if is_legal_hold(ref.name, ref.type):
        return f"legal_hold:{ref.name}"
    return f"{ref.type}:{ref.name}"


def refuse_dropping_holds(
    refs: Mapping[str, RefInfo],
    refs_expired: Sequence[str],
    snapshots_by_id: Mapping[int, SnapshotInfo],
    *,
    default_max_ref_age_ms: int | None,
    now: int,
    table: str = "table",
) -> None:
    """Refuse an expiry that would drop a legal hold (Iceberg drops refs older than their max-ref-age).

    Holds placed by this provider carry a never-expiring ``max-ref-age-ms``; a hold without
    one (placed by hand or by an older version) inherits ``history.expire.max-ref-age-ms``.
    """
    at_risk = [n for n in refs_expired if claims_hold(n)]  # a hold turned into a branch is still a hold
    if not at_risk:
        return
    parts = []
    for name in at_risk:
        ref = refs[name]
        snap = snapshots_by_id.get(ref.snapshot_id)
        age = f"{(now - snap.timestamp_ms) / 86_400_000:.1f} days old" if snap else "its snapshot is gone"
        limit = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else default_max_ref_age_ms
        source = "its own max-ref-age-ms" if ref.max_ref_age_ms is not None else "history.expire.max-ref-age-ms"
        parts.append(f"{name} (snapshot {ref.snapshot_id}, {age}; {source}={limit})")
    raise IcebergRefusedError(
        f"Refusing to expire snapshots of {table}: Iceberg would drop the legal hold(s) "
        + "; ".join(parts)
        + ". Pin each hold by placing it again on the same snapshot (IcebergCreateTagOperator(legal_hold=True, "
        "tag=..., snapshot_id=..., case_id=...) sets max-ref-age-ms to never), or release it deliberately. "
        "Nothing was changed."
    )


def _split_refs(
    refs: Mapping[str, RefInfo], by_id: Mapping[int, SnapshotInfo], *, now: int, default_max_ref_age_ms: int | None
) -> tuple[dict[str, RefInfo], list[str]]:
    """Refs Iceberg keeps, and those it drops for being older than their max-ref-age (never ``main``)."""
    retained: dict[str, RefInfo] = {}
    expired: list[str] = []
    for name, ref in refs.items():
        if name == "main":
            retained[name] = ref
            continue
        max_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else default_max_ref_age_ms
        snap = by_id.get(ref.snapshot_id)
        if snap is None or (max_age is not None and now - snap.timestamp_ms > max_age):
            expired.append(name)
        else:
            retained[name] = ref
    return retained, expired


def _check_explicit(
    explicit: Sequence[int], by_id: Mapping[int, SnapshotInfo], retained: Mapping[str, RefInfo], table: str
) -> None:
    """Refuse explicit ids that do not exist, or that a kept ref points at."""
    missing = [i for i in explicit if i not in by_id]
    if missing:
        raise IcebergRefNotFoundError(
            f"snapshot_ids {missing} do not exist on {table} (already expired or never created); "
            "list snapshots with IcebergCatalogHook.list_snapshots."
        )
    heads: dict[int, list[str]] = {}
    for ref in retained.values():
        heads.setdefault(ref.snapshot_id, []).append(describe_ref(ref))
    pinned = {i: heads[i] for i in explicit if i in heads}
    if pinned:
        raise IcebergRefusedError(
            f"Cannot expire snapshots of {table} that refs point at: "
            + "; ".join(f"{sid} (held by {', '.join(r)})" for sid, r in pinned.items())
            + ". Remove or move those refs first (legal holds must be released). Nothing was changed."
        )


def _keepers(
    retained: Mapping[str, RefInfo],
    ancestors: Callable[[int], list[SnapshotInfo]],
    *,
    older_than_ms: int,
    retain_last: int,
    now: int,
) -> dict[int, list[str]]:
    """Snapshot id -> the refs whose retention keeps it (a tag its snapshot, a branch its recent ancestry)."""
    keepers: dict[int, list[str]] = {}
    for ref in retained.values():
        label = describe_ref(ref)
        if ref.type == "tag":
            keepers.setdefault(ref.snapshot_id, []).append(label)
            continue
        cutoff = now - ref.max_snapshot_age_ms if ref.max_snapshot_age_ms is not None else older_than_ms
        min_keep = ref.min_snapshots_to_keep if ref.min_snapshots_to_keep is not None else retain_last
        kept = 0
        for snap in ancestors(ref.snapshot_id):
            if kept < min_keep or snap.timestamp_ms >= cutoff:
                keepers.setdefault(snap.snapshot_id, []).append(label)
                kept += 1
            else:
                break
    return keepers


def preview_expiry(
    snapshots: Sequence[SnapshotInfo],
    refs: Mapping[str, RefInfo],
    *,
    older_than_ms: int,
    retain_last: int,
    now: int,
    snapshot_ids: Iterable[int] = (),
    default_max_ref_age_ms: int | None = None,
    table: str = "table",
) -> ExpiryPreview:
    """Mirror of Iceberg's ``RemoveSnapshots`` retention (1.10).

    * ``main`` is always kept; another ref is dropped when its head is older than
      its ``max-ref-age`` (ref-level, else the table default; default forever);
    * a tag keeps its snapshot; a branch keeps ancestors of its head while fewer than
      ``min-snapshots-to-keep`` (ref-level, else ``retain_last``) are kept or while they
      are newer than its ``max-snapshot-age`` (ref-level, else ``older_than``);
    * snapshots in no ref's ancestry are kept only if newer than ``older_than``;
    * explicit ``snapshot_ids`` are removed too, and refused when a kept ref points at them.
    """
    retain_last = validate_retain_last(retain_last)
    by_id = {s.snapshot_id: s for s in snapshots}

    def ancestors(head: int) -> list[SnapshotInfo]:
        out: list[SnapshotInfo] = []
        cur: int | None = head
        while cur is not None and cur in by_id:
            out.append(by_id[cur])
            cur = by_id[cur].parent_id
        return out

    retained_refs, refs_expired = _split_refs(refs, by_id, now=now, default_max_ref_age_ms=default_max_ref_age_ms)
    refuse_dropping_holds(
        refs, refs_expired, by_id, default_max_ref_age_ms=default_max_ref_age_ms, now=now, table=table
    )
    explicit = [int(i) for i in snapshot_ids]
    _check_explicit(explicit, by_id, retained_refs, table)
    keepers = _keepers(retained_refs, ancestors, older_than_ms=older_than_ms, retain_last=retain_last, now=now)
    referenced: set[int] = set()
    for ref in retained_refs.values():
        if ref.type == "branch":
            referenced.update(s.snapshot_id for s in ancestors(ref.snapshot_id))
        else:
            referenced.add(ref.snapshot_id)
    retain = set(keepers)
    retain.update(
        s.snapshot_id for s in snapshots if s.snapshot_id not in referenced and s.timestamp_ms >= older_than_ms
    )
    retain.difference_update(explicit)
    ordered = sorted(snapshots, key=lambda s: (s.timestamp_ms, s.snapshot_id))
    kept_by = {
        str(s.snapshot_id): sorted(keepers[s.snapshot_id])
        for s in ordered
        if s.snapshot_id in retain and s.timestamp_ms < older_than_ms and s.snapshot_id in keepers
    }
    return ExpiryPreview(
        older_than_ms=older_than_ms,
        retain_last=retain_last,
        expire=[s.snapshot_id for s in ordered if s.snapshot_id not in retain],
        retain=[s.snapshot_id for s in ordered if s.snapshot_id in retain],
        kept_by_refs=kept_by,
        refs_expired=sorted(refs_expired),
        explicit_ids=explicit,
    )
