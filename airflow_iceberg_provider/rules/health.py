"""Absolute health thresholds and metadata hygiene rules (pure: no catalog, no Spark, no Airflow).

The maintenance plan (:mod:`~airflow_iceberg_provider.rules.maintenance`) reasons in ratios (share of small files,
delete files per data file). Platform teams also alert on absolute numbers; these are the
ones practitioners use, each overridable by an operator argument or a table property
``airflow-iceberg.health.<key>`` (argument wins; ``off`` in either disables the threshold):

============================  ==============================  ===================
threshold                     property key                    default
============================  ==============================  ===================
``max_files``                 ``max-files``                   10,000 data files
``min_avg_file_size_bytes``   ``min-avg-file-size-bytes``     10 MiB
``max_snapshots``             ``max-snapshots``               1,000
``max_metadata_bytes``        ``max-metadata-bytes``          50 MiB metadata.json
``max_metadata_log``          ``max-metadata-log``            off (entries in the metadata log)
============================  ==============================  ===================

Metadata hygiene: which ``*.metadata.json`` files are proven leftovers (unreferenced by
the catalog's current pointer and the metadata log, and older than a floor so an
in-flight commit's new file is never touched), and which table properties bound the
metadata log (``write.metadata.delete-after-commit.enabled`` /
``write.metadata.previous-versions-max``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.models import TableHealth

HEALTH_PROPERTY_PREFIX = "airflow-iceberg.health."
MIB = 1024 * 1024

#: name -> (property key, default, unit for messages)
THRESHOLDS: dict[str, tuple[str, int | None, str]] = {
    "max_files": ("max-files", 10_000, "data files"),
    "min_avg_file_size_bytes": ("min-avg-file-size-bytes", 10 * MIB, "bytes"),
    "max_snapshots": ("max-snapshots", 1_000, "snapshots"),
    "max_metadata_bytes": ("max-metadata-bytes", 50 * MIB, "bytes"),
    "max_metadata_log": ("max-metadata-log", None, "metadata log entries"),
}
_OFF = ("off", "none", "disabled")

#: A metadata file younger than this may belong to a commit in flight: never a leftover.
METADATA_LEFTOVER_MIN_AGE = timedelta(minutes=15)
METADATA_LEFTOVER_DEFAULT_AGE = timedelta(hours=1)
_METADATA_FILE = re.compile(r"(^|/)[^/]+\.metadata\.json(\.gz)?$")


@dataclass(frozen=True)
class HealthThresholds:
    max_files: int | None = 10_000
    min_avg_file_size_bytes: int | None = 10 * MIB
    max_snapshots: int | None = 1_000
    max_metadata_bytes: int | None = 50 * MIB
    max_metadata_log: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Breach:
    """One crossed threshold, with the value that crossed it."""

    threshold: str
    limit: int
    value: float

    @property
    def message(self) -> str:
        unit = THRESHOLDS[self.threshold][2]
        relation = "below the minimum" if self.threshold.startswith("min_") else "above the maximum"
        return f"{self.threshold}: {_fmt(self.value)} {unit}, {relation} of {_fmt(self.limit)}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "message": self.message}


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() or value >= 100 else f"{value:,.2f}"


def _threshold_value(raw: object, name: str, source: str) -> int | None:
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in _OFF):
        return None
    if isinstance(raw, bool):
        raise IcebergValidationError(f"{source}={raw!r} is not a number; pass a positive integer or 'off'.")
    try:
        value = int(str(raw).strip().replace("_", ""))
    except ValueError as err:
        raise IcebergValidationError(
            f"{source}={raw!r} is not a whole number; pass a positive integer (e.g. "
            f"{THRESHOLDS[name][1] or 100}) or 'off'."
        ) from err
    if value < 1:
        raise IcebergValidationError(f"{source}={raw!r} must be at least 1; pass a positive integer or 'off'.")
    return value


def resolve_thresholds(properties: Mapping[str, str], **args: Any) -> HealthThresholds:
    """Arguments (``None`` = not given) over ``airflow-iceberg.health.*`` properties over defaults."""
    unknown = sorted(set(args) - set(THRESHOLDS))
    if unknown:
        raise IcebergValidationError(f"unknown health thresholds {unknown}; choose from {sorted(THRESHOLDS)}.")
    values: dict[str, int | None] = {}
    for name, (key, default, _unit) in THRESHOLDS.items():
        arg = args.get(name)
        if arg is not None:
            values[name] = _threshold_value(arg, name, name)
        elif HEALTH_PROPERTY_PREFIX + key in properties:
            prop = HEALTH_PROPERTY_PREFIX + key
            values[name] = _threshold_value(properties[prop], name, f"table property {prop}")
        else:
            values[name] = default
    return HealthThresholds(**values)


def breaches(health: TableHealth, thresholds: HealthThresholds) -> list[Breach]:
    """Every crossed threshold, in a fixed order; empty when the table is within all of them."""
    out = []
    t = thresholds
    if t.max_files is not None and health.data_files > t.max_files:
        out.append(Breach("max_files", t.max_files, health.data_files))
    if t.min_avg_file_size_bytes is not None and health.data_files:
        avg = health.data_bytes / health.data_files
        if avg < t.min_avg_file_size_bytes:
            out.append(Breach("min_avg_file_size_bytes", t.min_avg_file_size_bytes, round(avg, 1)))
    if t.max_snapshots is not None and health.snapshots > t.max_snapshots:
        out.append(Breach("max_snapshots", t.max_snapshots, health.snapshots))
    if t.max_metadata_bytes is not None and (health.metadata_bytes or 0) > t.max_metadata_bytes:
        out.append(Breach("max_metadata_bytes", t.max_metadata_bytes, health.metadata_bytes or 0))
    if t.max_metadata_log is not None and health.metadata_log_length > t.max_metadata_log:
        out.append(Breach("max_metadata_log", t.max_metadata_log, health.metadata_log_length))
    return out


# ------------------------------------------------------------------------- metadata hygiene
def metadata_leftovers(
    files: Iterable[tuple[str, int]],
    *,
    current: str | None,
    metadata_log: Iterable[str],
    now_ms: int,
    min_age: timedelta = METADATA_LEFTOVER_DEFAULT_AGE,
) -> list[str]:
    """Metadata files proven unreferenced: not the current pointer, not in the metadata log, old enough.

    A failed compare-and-swap (two writers, one loses) leaves the loser's
    ``NNNNN-<uuid>.metadata.json`` behind; a reader that picks the highest version number
    instead of asking the catalog (ClickHouse's default lookup) can read that state.

    :param files: ``(location, modified epoch ms)`` of the files in the metadata directory.
    :param min_age: floor below which a file may be a commit in flight (at least 15 minutes).
    """
    if min_age < METADATA_LEFTOVER_MIN_AGE:
        raise IcebergValidationError(
            f"min_age={min_age} is below the {METADATA_LEFTOVER_MIN_AGE} floor: a younger metadata file may "
            "belong to a commit in flight, and deleting it would break that commit. Use at least 15 minutes."
        )
    if current is None:
        return []  # no proof of what is referenced
    referenced = {_norm(current), *(_norm(p) for p in metadata_log)}
    cutoff = now_ms - int(min_age.total_seconds() * 1000)
    return sorted(
        path
        for path, mtime in files
        if _METADATA_FILE.search(path) and _norm(path) not in referenced and int(mtime) < cutoff
    )


def _norm(location: str) -> str:
    """Compare locations without scheme spelling differences.

    ``file:/x``, ``file:///x`` and ``/x`` are one local file; ``s3://b/k`` and ``s3a://b/k``
    are one object.
    """
    m = re.match(r"^([a-z][a-z0-9+.-]*):(.*)$", location)
    if m is None:
        return "/" + location.lstrip("/")
    scheme, rest = m.groups()
    return "/" + rest.lstrip("/") if scheme == "file" else rest.lstrip("/")


def metadata_property_changes(properties: Mapping[str, str], previous_versions_max: int | None) -> dict[str, str]:
    """Properties to set so the metadata log stays bounded (empty when already so, or not asked)."""
    if previous_versions_max is None:
        return {}
    if isinstance(previous_versions_max, bool) or int(previous_versions_max) < 1:
        raise IcebergValidationError(
            f"metadata_previous_versions_max={previous_versions_max!r} must be a positive integer "
            "(Iceberg's default is 100)."
        )
    wanted = {
        "write.metadata.delete-after-commit.enabled": "true",
        "write.metadata.previous-versions-max": str(int(previous_versions_max)),
    }
    return {k: v for k, v in wanted.items() if properties.get(k) != v}


def hold_violation_report(table: str, violations: Sequence[Any]) -> list[dict[str, Any]]:
    """The health check's entries for legal holds changed outside the provider
    (:class:`~airflow_iceberg_provider.rules.refs.HoldViolation` values): each a dict with ``tag``,
    ``problem``, the placed and found snapshots, the case and a ``message`` naming the fix. A hold
    violation makes a table unhealthy whatever its thresholds."""
    return [{**v.to_dict(), "message": v.describe(table)} for v in violations]
