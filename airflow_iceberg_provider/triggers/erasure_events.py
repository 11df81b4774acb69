"""Event trigger for ``AssetWatcher``: an erasure request comes within a margin of its deadline."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import (
    IcebergCatalogUnavailableError,
    IcebergTableNotFoundError,
    IcebergValidationError,
)
from airflow_iceberg_provider.params import validate_table
from airflow_iceberg_provider.rules.erasure import deadline_report
from airflow_iceberg_provider.triggers._event_state import IcebergEventTriggerBase, validate_poll_interval

#: ``logical``: the rows must be deleted (``logically_erased``); ``physical``: no file may hold them
#: (``erased``). Which statuses still owe which deadline is the erasure lifecycle's rule
#: (:func:`airflow_iceberg_provider.rules.erasure.deadline_report`, also used by the deadline sensor).
DEADLINE_KINDS = ("logical", "physical")
#: the deadline sensor's defaults: logical 24 h, physical 30 days (PIPEDA / Law 25; GDPR: one month)
DEFAULT_DEADLINES = {"logical": "24h", "physical": "30d"}
#: default margin: this share of each deadline
DEFAULT_MARGIN_FRACTION = 0.1
MAX_DEADLINE = timedelta(days=36500)


def to_duration(value: Any, param: str) -> timedelta:
    """A duration: seconds (number), ``"36h"``, ``"30d"``, ISO ``"P30D"`` or a ``timedelta``."""
    if isinstance(value, bool):
        raise IcebergValidationError(f"{param}={value!r} is not a duration; pass e.g. '30d', '36h' or seconds.")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise IcebergValidationError(f"{param}={value!r} is not a duration; pass e.g. '30d', '36h' or seconds.")
        return timedelta(seconds=value)
    return params.duration(value, param, required=True)


def validate_deadlines(deadlines: Any, margin: Any) -> tuple[dict[str, timedelta], dict[str, timedelta]]:
    """``({kind: deadline}, {kind: margin})``; kinds ``logical`` / ``physical``; 0 <= margin < its deadline.

    ``margin`` is one duration for every kind or a mapping ``{kind: duration}``.
    """
    if not isinstance(deadlines, Mapping) or not deadlines:
        raise IcebergValidationError(
            f"deadlines={deadlines!r} is invalid; pass a mapping of deadline kind to duration from received_at, "
            "e.g. {'logical': '48h', 'physical': '30d'}."
        )
    out = {}
    for kind, value in deadlines.items():
        if kind not in DEADLINE_KINDS:
            raise IcebergValidationError(
                f"deadlines has unknown kind {kind!r}; use {list(DEADLINE_KINDS)} (logical: rows deleted; "
                "physical: no file holds them)."
            )
        td = to_duration(value, f"deadlines[{kind!r}]")
        if not timedelta(0) < td <= MAX_DEADLINE:
            raise IcebergValidationError(
                f"deadlines[{kind!r}]={value!r} is invalid; pass a positive duration of at most 36500 days."
            )
        out[kind] = td
    if "logical" in out and "physical" in out and out["logical"] > out["physical"]:
        raise IcebergValidationError(
            f"deadlines={dict(deadlines)!r}: the logical deadline is longer than the physical one; the logical "
            "erasure comes first: lower deadlines['logical'] or raise deadlines['physical']."
        )
    if margin is None:
        margins = {k: v * DEFAULT_MARGIN_FRACTION for k, v in out.items()}
    elif isinstance(margin, Mapping):
        extra = sorted(set(margin) - set(out))
        if extra:
            raise IcebergValidationError(f"margin names kinds {extra} that deadlines does not have; drop them.")
        margins = {k: to_duration(margin.get(k, 0), f"margin[{k!r}]") for k in out}
    else:
        margins = {k: to_duration(margin, "margin") for k in out}
    for kind, m in margins.items():
        if not timedelta(0) <= m < out[kind]:
            raise IcebergValidationError(
                f"margin={margin!r} is invalid for the {kind} deadline of {_human(out[kind])}: a margin must be >= 0 "
                "and shorter than its deadline; pass one per kind, e.g. margin={'logical': '12h', 'physical': '3d'}."
            )
    return out, margins


def _human(td: timedelta) -> str:
    secs = td.total_seconds()
    return f"{secs / 86400:g}d" if secs >= 86400 else f"{secs / 3600:g}h"


def _aware(value: Any) -> Any:
    return value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value


def approaching(
    rows: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    deadlines: Mapping[str, timedelta],
    margins: Mapping[str, timedelta],
    copy_retention: timedelta = timedelta(0),
) -> list[dict[str, Any]]:
    """Requests that still owe a deadline and are within its margin (or past it), one item per request and kind.

    ``rules.erasure.deadline_report`` decides what is owed and what is late; "near" is its
    ``at_risk`` with ``warn_fraction = (deadline - margin) / deadline``. The physical deadline
    counts ``copy_retention``: a request is due to be unreachable at ``received_at + physical -
    copy_retention`` (its ``due_at``), and an erased request whose copies outlive the deadline is
    reported (``copies_late``) until they are gone.
    """
    rows = [
        {**r, "received_at": _aware(r["received_at"]), "completed_at": _aware(r.get("completed_at"))}
        for r in rows
        if r.get("received_at") is not None
    ]
    out = []
    for kind, limit in deadlines.items():
        retention = copy_retention if kind == "physical" else timedelta(0)
        fraction = (limit - retention - margins[kind]) / (limit - retention)
        report = deadline_report(
            rows, now=now, logical=limit, physical=limit, warn_fraction=fraction, copy_retention=retention
        )
        for group in (f"{kind}_overdue", f"{kind}_at_risk"):
            for item in report[group]:
                out.append(
                    {
                        "request_id": item["request_id"],
                        "deadline": kind,
                        "due_at": item["due_at"],
                        "received_at": item["received_at"],
                        "status": item["status"],
                        "overdue": group.endswith("_overdue"),
                        "copies_late": bool(item.get("copies_late")),
                    }
                )
    return sorted(out, key=lambda r: (r["due_at"], r["request_id"], r["deadline"]))


def fired_key(item: Mapping[str, Any]) -> str:
    return f"{item['request_id']}|{item['deadline']}"


class IcebergErasureDeadlineEventTrigger(IcebergEventTriggerBase):
    """
    Fire once per erasure request and deadline kind when the request gets within ``margin`` of it.

    Deadline kinds (durations from ``received_at``), as in the erasure lifecycle and
    :class:`IcebergErasureDeadlineSensor`: ``logical`` — owed until the request is
    ``logically_erased`` (rows deleted, possibly still in old files); ``physical`` — owed until it
    is ``erased``. Default ``{"logical": "24h", "physical": "30d"}``.

    Reads ``request_id``, ``received_at`` and ``status`` only (never the subject keys) through
    :meth:`GovernanceStore.erasure_request_states` (``hook.governance``), and only when the requests table's
    metadata pointer moved; between commits, time alone is re-checked against the rows in
    memory. Which (request, kind) pairs were reported is kept per asset in the asset state
    store, so a restarted triggerer does not report them again; pairs whose request met the
    deadline are forgotten.

    Event payload: ``kind="erasure_deadline"``, ``requests_table``, ``deadline`` (kind), ``due_at``,
    ``received_at`` (ISO-8601), ``status``, ``overdue`` (already past the deadline when reported),
    ``copies_late`` (erased, but copies outlive the deadline), ``margin_seconds``. No request id:
    asset events are visible to every user who can see the
    asset; the request is found by ``received_at`` in the requests table or on the governance
    view's restricted erasure page.

    :param requests_table: ``namespace.table`` of erasure requests.
    :param deadlines: ``{kind: duration}``; durations like ``"48h"``, ``"30d"``, ISO ``"P30D"`` or seconds.
    :param margin: how long before the deadline to fire: one duration, or ``{kind: duration}``
        (default 10 % of each deadline; must be shorter than it).
    :param iceberg_catalog_conn_id: the ``iceberg_catalog`` connection.
    :param poll_interval: seconds between polls.
    :param copy_retention: how long object-store versions and backups keep erased bytes (a duration);
        default ``None``: what the connection declares (``erasure.copies.versioning-retention-days``,
        ``erasure.copies.backup-retention-days``), read when the trigger starts. The physical
        deadline counts it (see :func:`approaching`); the event says ``copies_late`` for an erased
        request whose copies outlive its deadline.
    """

    state_kind = "erasure_deadline"

    def __init__(
        self,
        *,
        requests_table: str,
        deadlines: Mapping[str, Any] | None = None,
        margin: Any = None,
        iceberg_catalog_conn_id: str = "iceberg_catalog_default",
        poll_interval: float = 300.0,
        copy_retention: Any = None,
    ) -> None:
        super().__init__()
        self.requests_table = validate_table(requests_table, "requests_table").dotted
        self._deadlines, self._margins = validate_deadlines(
            DEFAULT_DEADLINES if deadlines is None else deadlines, margin
        )
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.poll_interval = validate_poll_interval(poll_interval)
        self._copy_retention: timedelta | None = None
        if copy_retention is not None:
            self._copy_retention = self._check_retention(to_duration(copy_retention, "copy_retention"))

    def _check_retention(self, retention: timedelta) -> timedelta:
        """``retention`` if it leaves time before the physical deadline and its margin, else a clear refusal."""
        if retention < timedelta(0):
            raise IcebergValidationError(
                f"copy_retention={retention} is negative; pass how long versions and backups keep bytes, e.g. '7d'."
            )
        physical = self._deadlines.get("physical")
        if physical is not None and retention + self._margins["physical"] >= physical:
            raise IcebergValidationError(
                f"copy_retention={_human(retention)} plus the margin {_human(self._margins['physical'])} is not "
                f"shorter than the physical deadline of {_human(physical)}: no erasure can be gone from every copy "
                "in time. Shorten the retention of object-store versions and backups, or the margin."
            )
        return retention

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "requests_table": self.requests_table,
                "deadlines": {k: v.total_seconds() for k, v in self._deadlines.items()},
                "margin": {k: v.total_seconds() for k, v in self._margins.items()},
                "iceberg_catalog_conn_id": self.iceberg_catalog_conn_id,
                "poll_interval": self.poll_interval,
                "copy_retention": None if self._copy_retention is None else self._copy_retention.total_seconds(),
            },
        )

    def state_parts(self) -> tuple[Any, ...]:
        return (self.iceberg_catalog_conn_id, self.requests_table, self.serialize()[1]["deadlines"])

    def _read(self, hook: Any, known: str | None) -> tuple[str | None, list[dict[str, Any]] | None]:
        location = hook.metadata_location(self.requests_table)
        if location is None or location == known:
            return location, None
        try:
            return location, hook.governance.erasure_request_states(self.requests_table)
        except IcebergTableNotFoundError:
            return None, None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = self.resolve_store()
        hook = await asyncio.to_thread(self.hook)  # importing the hook module must not block the loop
        retention = self._copy_retention
        if retention is None:  # what the connection declares, once per start
            retention = self._check_retention((await asyncio.to_thread(hook.copy_retention)).longest)
        key = self.state_key
        fired: dict[str, str] = {}
        for value in (await store.load(key)).values():  # union: never report a pair twice
            if isinstance(value, Mapping):
                fired.update(value.get("fired") or {})
        known: str | None = None
        rows: list[dict[str, Any]] = []
        while True:
            try:
                location, fresh = await asyncio.to_thread(self._read, hook, known)
            except IcebergCatalogUnavailableError as err:
                self.log.warning("Catalog unavailable while polling %s (%s); retrying", self.requests_table, err)
                location, fresh = known, None
            if fresh is not None:
                rows, known = fresh, location
                # every pair that is or will be due; copies outliving a deadline are due while they exist
                due = {
                    fired_key(i)
                    for when in (datetime.max.replace(tzinfo=UTC), datetime.now(UTC))
                    for i in self._approaching(rows, when, retention)
                }
                stale = [k for k in fired if k not in due]  # met (or gone): forget it
                if stale:
                    for k in stale:
                        fired.pop(k)
                    await store.save(key, {"fired": dict(fired)})
            now = datetime.now(UTC)
            for item in self._approaching(rows, now, retention):
                k = fired_key(item)
                if k in fired:
                    continue
                yield TriggerEvent(self._event(item))
                fired[k] = item["due_at"].isoformat()
                await self.save_delivered(store, key, {"fired": dict(fired)})
            await asyncio.sleep(self.poll_interval)

    def _approaching(self, rows: list[dict[str, Any]], now: datetime, retention: timedelta) -> list[dict[str, Any]]:
        return approaching(rows, now=now, deadlines=self._deadlines, margins=self._margins, copy_retention=retention)

    def _event(self, item: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "kind": "erasure_deadline",
            "requests_table": self.requests_table,
            "deadline": item["deadline"],
            "due_at": item["due_at"].isoformat(),
            "received_at": item["received_at"].isoformat(),
            "status": item["status"],
            "overdue": bool(item["overdue"]),
            "copies_late": bool(item.get("copies_late")),
            "margin_seconds": self._margins[item["deadline"]].total_seconds(),
        }
