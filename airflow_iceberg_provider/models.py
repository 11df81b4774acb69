"""Plain, XCom-safe domain values returned by the hooks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot of a table, as plain values."""

    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int
    operation: str | None
    summary: dict[str, str] = field(default_factory=dict)
    schema_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot_info(snap: Any) -> SnapshotInfo:
    """Convert a pyiceberg snapshot into a plain value."""
    summary = dict(snap.summary.additional_properties) if snap.summary else {}
    op = snap.summary.operation.value if snap.summary else None
    return SnapshotInfo(
        snapshot_id=snap.snapshot_id,
        parent_id=snap.parent_snapshot_id,
        timestamp_ms=snap.timestamp_ms,
        operation=op,
        summary=summary,
        schema_id=snap.schema_id,
    )


@dataclass(frozen=True)
class RefInfo:
    """A branch or tag."""

    name: str
    type: str  # "branch" | "tag"
    snapshot_id: int
    max_ref_age_ms: int | None = None
    max_snapshot_age_ms: int | None = None
    min_snapshots_to_keep: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def ref_infos(refs: Mapping[str, Any]) -> dict[str, RefInfo]:
    """Convert pyiceberg's ``metadata.refs`` into plain values, by name."""
    return {
        name: RefInfo(
            name=name,
            type=ref.snapshot_ref_type.value,
            snapshot_id=ref.snapshot_id,
            max_ref_age_ms=ref.max_ref_age_ms,
            max_snapshot_age_ms=ref.max_snapshot_age_ms,
            min_snapshots_to_keep=ref.min_snapshots_to_keep,
        )
        for name, ref in refs.items()
    }


@dataclass(frozen=True)
class DataFileFacts:
    """One live file of a snapshot's manifests (data or delete file), as plain values."""

    spec_id: int
    partition: str
    content: str  # "data" | "position_deletes" | "equality_deletes"
    file_size_in_bytes: int
    record_count: int


@dataclass(frozen=True)
class TableHealth:
    """Physical shape of a table's current state (``main``) plus its history size."""

    table: str
    snapshot_id: int | None
    format_version: int
    data_files: int
    data_bytes: int
    records: int
    delete_files: int
    position_delete_files: int
    equality_delete_files: int
    delete_bytes: int
    manifests: int
    snapshots: int
    refs: int
    oldest_snapshot_ms: int | None
    target_file_size_bytes: int
    small_files: int
    #: size of the current metadata.json (None when it could not be read)
    metadata_bytes: int | None = None
    #: entries in the metadata log (previous metadata files the table still lists)
    metadata_log_length: int = 0
    #: whether a Puffin statistics file exists for the current snapshot (None: empty table)
    statistics_fresh: bool | None = None

    @property
    def small_file_ratio(self) -> float:
        return self.small_files / self.data_files if self.data_files else 0.0

    @property
    def deletes_per_data_file(self) -> float:
        return self.delete_files / self.data_files if self.data_files else 0.0

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["small_file_ratio"] = round(self.small_file_ratio, 4)
        out["deletes_per_data_file"] = round(self.deletes_per_data_file, 4)
        out["avg_file_size_bytes"] = self.data_bytes // self.data_files if self.data_files else 0
        return out
