"""Partition keys on the asset events of a publish (Airflow 3.3's asset partitions).

A publish can say *which partitions* it changed: its asset event then carries partition keys
(``outlet_events[asset].add_partitions(keys)``; Airflow stores one asset event per key), and a
downstream DAG scheduled on ``PartitionedAssetTimetable(assets=...)`` runs once per partition.

Two sources of keys (``partition_events=``):

``"iceberg"``
    The Iceberg partition values of the data files the published snapshots added or removed, read
    from their manifests (no data file is opened). A table partitioned by one field gives the
    field's value as Iceberg writes it in paths (``2026-01-01`` for ``day(order_ts)``,
    ``2026-01-01-10`` for ``hour``, ``eu`` for ``identity(region)``); several fields give a
    Hive-style path (``order_ts_day=2026-01-01/region=eu``). An unpartitioned table gives no key.
``"interval"``
    The DAG run's own partition key if it has one, else the start of its data interval (ISO 8601),
    else its logical date: one key per publish.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider.assets.uris import asset_names_table
from airflow_iceberg_provider.exceptions import IcebergValidationError

if TYPE_CHECKING:
    from pyiceberg.table import Table

PARTITION_EVENTS = ("iceberg", "interval")

#: Airflow's limit on one partition key (the metadata DB column width)
MAX_KEY_LENGTH = 250


def check_partition_events(value: object, param: str = "partition_events") -> str | None:
    """``None`` (no partition keys), ``"iceberg"`` or ``"interval"``."""
    if value in (None, "", False):
        return None
    if value not in PARTITION_EVENTS:
        raise IcebergValidationError(
            f"{param}={value!r} is invalid; use 'iceberg' (the partition values the published snapshots touched), "
            "'interval' (the DAG run's interval) or None."
        )
    return str(value)


def partition_key(parts: Sequence[tuple[str, str | None]]) -> str | None:
    """One partition as an event key: the value for one field, ``name=value/...`` for several."""
    if not parts:
        return None
    if len(parts) == 1:
        value = parts[0][1]
        return "null" if value is None else value
    return "/".join(f"{name}={'null' if value is None else value}" for name, value in parts)


def touched_partition_keys(tbl: Table, snapshot_ids: Iterable[int]) -> list[str]:
    """Sorted keys of the partitions whose data files the given snapshots added or removed."""
    from pyiceberg.manifest import ManifestEntryStatus

    schema, specs, io = tbl.schema(), tbl.metadata.specs(), tbl.io
    keys: set[str] = set()
    for sid in snapshot_ids:
        snap = tbl.metadata.snapshot_by_id(sid)
        if snap is None:
            continue
        for manifest in snap.manifests(io):
            if manifest.added_snapshot_id != sid:
                continue
            spec = specs[manifest.partition_spec_id]
            if not spec.fields:
                continue
            for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
                if entry.status == ManifestEntryStatus.EXISTING or entry.snapshot_id != sid:
                    continue
                record = entry.data_file.partition
                parts = []
                for i, field in enumerate(spec.fields):
                    source = schema.find_field(field.source_id).field_type
                    value = record[i]
                    human = None if value is None else field.transform.to_human_string(source, value)
                    parts.append((field.name, human))
                key = partition_key(parts)
                if key is not None:
                    keys.add(key[:MAX_KEY_LENGTH])
    return sorted(keys)


def interval_partition_key(context: Mapping[str, Any] | None) -> str | None:
    """The DAG run's partition key, else its data interval start, else its logical date (ISO 8601)."""
    if not context:
        return None
    dag_run = context.get("dag_run")
    own = getattr(dag_run, "partition_key", None)
    if own:
        return str(own)
    for value in (context.get("data_interval_start"), context.get("logical_date")):
        if value is not None:
            return value.isoformat() if hasattr(value, "isoformat") else str(value)
    return None


def add_partition_keys(
    outlets: Any, context: Mapping[str, Any] | None, *, table: str, catalog: str, keys: Sequence[str]
) -> list[str]:
    """Add ``keys`` to the event of every Asset outlet naming ``table``; returns the URIs."""
    from airflow.sdk import Asset

    events = context.get("outlet_events") if context is not None and hasattr(context, "get") else None
    if events is None or not keys:
        return []
    done = []
    for asset in [o for o in (outlets or []) if isinstance(o, Asset)]:
        if asset_names_table(asset.uri, table, catalog):
            events[asset].add_partitions(list(keys))
            done.append(asset.uri)
    return done


__all__ = [
    "PARTITION_EVENTS",
    "add_partition_keys",
    "check_partition_events",
    "interval_partition_key",
    "partition_key",
    "touched_partition_keys",
]
