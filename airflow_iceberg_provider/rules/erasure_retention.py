"""How long erased data lingers, as pure rules: the grace period before an erased request's key is
redacted, and the retention of the copies that live outside the table.

Two dates describe a physical erasure:

* **unreachable from the table at T**: the purge's moment. From T on, no snapshot, ref or manifest
  of the table reaches a file holding the subject, and the files are deleted from the table's
  storage.
* **gone from every copy by T + retention**: object-store versioning keeps a deleted object as a
  noncurrent version for its retention, and backups taken before T keep the bytes until they
  expire. The later of the two retentions bounds when the last copy disappears.

The connection (``iceberg_catalog`` extras) declares the retentions of the whole catalog; a table
property with the same name declares them for one table and takes precedence:

* ``erasure.copies.versioning-retention-days``: days a noncurrent object version is kept;
* ``erasure.copies.backup-retention-days``: days a backup is kept.

A legal deadline applies to every copy: a request received at R with a physical deadline D must
be unreachable by ``R + D - retention``; a request that was not (erased late, or its copies outlived
the deadline) missed it, and :func:`deadline_outcome` says so for good. Nothing here reads a catalog, a connection or a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergValidationError

__all__ = [
    "BACKUP_RETENTION",
    "COPY_RETENTION_KEYS",
    "CopyRetention",
    "DEADLINE_STATES",
    "MISSED_STATES",
    "VERSIONING_RETENTION",
    "completion_dates",
    "copy_retention",
    "copy_retention_problem",
    "deadline_outcome",
    "longest",
    "redact_after",
    "retention_fits",
]

#: Days a noncurrent object version (S3 / GCS / ADLS versioning) is kept after the object is deleted.
VERSIONING_RETENTION = "erasure.copies.versioning-retention-days"
#: Days a backup of the table's storage is kept.
BACKUP_RETENTION = "erasure.copies.backup-retention-days"
COPY_RETENTION_KEYS = (VERSIONING_RETENTION, BACKUP_RETENTION)
MAX_RETENTION_DAYS = 36500
#: The longest grace period before an erased request's key is redacted.
MAX_REDACT_AFTER = timedelta(days=365)


# ------------------------------------------------------------------ redaction grace period
def redact_after(value: object, param: str = "redact_after") -> timedelta | None:
    """The grace period before an erased request's key is redacted; ``None``: redact at once.

    Accepts a ``timedelta``, a duration text (``'36h'``, ``'7d'``, ``'P7D'``) or a number of hours.
    Zero means no grace period. Negative values and more than 365 days are refused.
    """
    if isinstance(value, bool):
        params.refuse(param, value, "is not a duration", "pass hours (e.g. 72), '7d' or a datetime.timedelta")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            params.refuse(param, value, "is not a finite number of hours", "pass hours (e.g. 72) or '7d'")
        grace: timedelta | None = timedelta(hours=value)
    else:
        grace = params.duration(value, param)
    if grace is None or grace == timedelta(0):
        return None
    if grace < timedelta(0):
        params.refuse(
            param,
            value,
            "is negative; a grace period is how long an erased request's key stays readable",
            "pass 0 (or None) to redact at once, or a positive duration such as '7d'",
        )
    if grace > MAX_REDACT_AFTER:
        params.refuse(
            param,
            value,
            f"is longer than {MAX_REDACT_AFTER.days} days; the key of an erased request is personal data too",
            "reconcile with the ticketing system within days (e.g. '14d'), then let the redaction run",
        )
    return grace


# ------------------------------------------------------------------ retention of copies
@dataclass(frozen=True)
class CopyRetention:
    """How long copies outside the table keep erased bytes, and who declared it."""

    versioning: timedelta = timedelta(0)
    backup: timedelta = timedelta(0)
    #: where each retention comes from: ``{property: "table property" | "connection"}`` (declared ones only)
    declared_by: tuple[tuple[str, str], ...] = ()

    @property
    def longest(self) -> timedelta:
        """The later of the two: when the last copy is gone, counted from the purge."""
        return max(self.versioning, self.backup)

    @property
    def declared(self) -> bool:
        return bool(self.declared_by)

    def to_dict(self) -> dict[str, Any]:
        return {
            "versioning_retention_days": self.versioning.total_seconds() / 86400,
            "backup_retention_days": self.backup.total_seconds() / 86400,
            "retention_days": self.longest.total_seconds() / 86400,
            "declared_by": dict(self.declared_by),
        }


def copy_retention_problem(key: str, value: object) -> str | None:
    """Why ``value`` is not a retention in days for ``key`` (``None``: it is one)."""
    if isinstance(value, bool) or value is None:
        return "is not a number of days"
    try:
        days = float(str(value).strip())
    except ValueError:
        return "is not a number of days"
    if not math.isfinite(days) or not 0 <= days <= MAX_RETENTION_DAYS:
        return f"must be a number of days between 0 and {MAX_RETENTION_DAYS}"
    return None


def _days(key: str, value: object, where: str) -> timedelta:
    problem = copy_retention_problem(key, value)
    if problem is not None:
        raise IcebergValidationError(
            f"{where}: {key}={value!r} {problem}; set it to the days {_WHAT[key]} are kept, e.g. '30' "
            "(0 when there are none), or remove it."
        )
    return timedelta(days=float(str(value).strip()))


_WHAT = {VERSIONING_RETENTION: "noncurrent object versions", BACKUP_RETENTION: "backups"}


def copy_retention(
    connection: Mapping[str, Any] | None = None,
    table_properties: Mapping[str, str] | None = None,
    *,
    table: str | None = None,
    conn_id: str | None = None,
) -> CopyRetention:
    """The retention of copies for one table: its own properties first, then the connection's extras.

    :param connection: the connection's extras (only the two retention keys are read).
    :param table_properties: the table's properties (``None``: catalog-wide, the connection only).
    :param table: the table's name, for error messages.
    :param conn_id: the connection's id, for error messages.
    :raises IcebergValidationError: a declared value is not a number of days between 0 and 36500.
    """
    got: dict[str, timedelta] = {}
    by: list[tuple[str, str]] = []
    for key in COPY_RETENTION_KEYS:
        if table_properties is not None and key in table_properties:
            got[key] = _days(key, table_properties[key], f"table {table or '?'} property")
            by.append((key, "table property"))
        elif connection is not None and connection.get(key) not in (None, ""):
            got[key] = _days(key, connection[key], f"connection {conn_id or '?'} extra")
            by.append((key, "connection"))
    return CopyRetention(
        versioning=got.get(VERSIONING_RETENTION, timedelta(0)),
        backup=got.get(BACKUP_RETENTION, timedelta(0)),
        declared_by=tuple(by),
    )


def longest(retentions: Iterable[CopyRetention]) -> CopyRetention:
    """The retention that bounds every table of a request: the longest of each kind."""
    items = list(retentions)
    by: dict[str, str] = {}
    for r in items:
        by.update(dict(r.declared_by))
    return CopyRetention(
        versioning=max((r.versioning for r in items), default=timedelta(0)),
        backup=max((r.backup for r in items), default=timedelta(0)),
        declared_by=tuple(sorted(by.items())),
    )


def retention_fits(retention: CopyRetention, physical: timedelta, *, where: str = "the copy retention") -> timedelta:
    """The time left to make a request unreachable: ``physical - retention`` (refuses when none is left)."""
    left = physical - retention.longest
    if left <= timedelta(0):
        raise IcebergValidationError(
            f"{where} ({_human(retention.longest)}: versioning {_human(retention.versioning)}, backups "
            f"{_human(retention.backup)}) is not shorter than the physical deadline of {_human(physical)}: no "
            f"erasure can be gone from every copy in time. Shorten the retention ({VERSIONING_RETENTION}, "
            f"{BACKUP_RETENTION}) or purge the copies by other means and declare what remains."
        )
    return left


def completion_dates(
    unreachable_at: datetime | None, retention: CopyRetention, *, received_at: datetime | None, physical: timedelta
) -> dict[str, Any]:
    """The two dates of a physical erasure and whether the later one meets the legal deadline.

    :return: ``unreachable_at`` (T), ``gone_from_copies_by`` (T + retention), ``legal_deadline``
        (received + physical), ``copies_late`` (the second date passes the deadline), and the retention.
    """
    gone = unreachable_at + retention.longest if unreachable_at is not None else None
    due = received_at + physical if received_at is not None else None
    return {
        "unreachable_at": unreachable_at,
        "gone_from_copies_by": gone,
        "legal_deadline": due,
        "copies_late": bool(gone is not None and due is not None and gone > due),
        "retention": retention.to_dict(),
    }


# ------------------------------------------------------------------ one deadline, one request
#: What a statutory deadline says about one request: still ``open`` (time left) or ``overdue``;
#: once the request is closed, ``met``, ``late`` (erased from its tables after the deadline),
#: ``copies_late`` (unreachable in time, but versions or backups outlived the deadline) or
#: ``closed`` (no erasure moment known).
DEADLINE_STATES = ("open", "overdue", "met", "late", "copies_late", "closed")
#: The states of a missed deadline: a data-protection officer reports each of them.
MISSED_STATES = ("overdue", "late", "copies_late")


def deadline_outcome(
    due: datetime,
    *,
    now: datetime,
    is_open: bool,
    erased_at: datetime | None = None,
    gone_from_copies_by: datetime | None = None,
) -> dict[str, Any]:
    """Whether one request kept one statutory deadline, and by how much it missed it.

    An open request is ``overdue`` once ``now`` passes ``due``. A closed request missed its
    deadline when it was erased from its tables after ``due`` (``late``), or when it was erased in
    time but the last copy outside the table (``gone_from_copies_by``: the purge plus the retention
    of object-store versions and backups) outlived ``due`` (``copies_late``). A miss stays a miss:
    a request erased late is reported late for good, unlike the deadline sensor, which stops
    failing once nothing is left to do.

    :param due: the legal deadline (received + the law's period).
    :param erased_at: when the request was erased from its tables (``None``: not known).
    :param gone_from_copies_by: when its last copy is gone (``None``: no retention known).
    :return: ``state`` (one of :data:`DEADLINE_STATES`), ``missed`` (the state is one of
        :data:`MISSED_STATES`), ``left_s`` (seconds left while open, negative when overdue) and
        ``late_s`` (seconds past ``due``: now while overdue, the erasure or the last copy once
        closed; ``None`` when the deadline was not missed).
    """
    if is_open:
        left = (due - now).total_seconds()
        state = "overdue" if left < 0 else "open"
        return {"state": state, "missed": left < 0, "left_s": left, "late_s": -left if left < 0 else None}
    if erased_at is None:
        return {"state": "closed", "missed": False, "left_s": None, "late_s": None}
    if erased_at > due:
        return {"state": "late", "missed": True, "left_s": None, "late_s": (erased_at - due).total_seconds()}
    if gone_from_copies_by is not None and gone_from_copies_by > due:
        late = (gone_from_copies_by - due).total_seconds()
        return {"state": "copies_late", "missed": True, "left_s": None, "late_s": late}
    return {"state": "met", "missed": False, "left_s": None, "late_s": None}


def _human(td: timedelta) -> str:
    secs = td.total_seconds()
    return f"{secs / 86400:g} days" if secs >= 86400 or secs == 0 else f"{secs / 3600:g} hours"
