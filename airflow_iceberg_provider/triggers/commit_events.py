"""Event trigger for ``AssetWatcher``: one asset event per new commit on an Iceberg ref."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergCatalogUnavailableError, IcebergRefNotFoundError
from airflow_iceberg_provider.ids import id_str, with_string_ids
from airflow_iceberg_provider.models import SnapshotInfo
from airflow_iceberg_provider.params import MAIN_BRANCH, validate_ref, validate_table
from airflow_iceberg_provider.rules.refs import matches, validate_summary
from airflow_iceberg_provider.triggers._event_state import IcebergEventTriggerBase, validate_poll_interval


def pending_commits(
    chain: Sequence[SnapshotInfo],
    *,
    after_snapshot_id: int | None,
    after_timestamp_ms: int | None,
    operation: str | None,
    summary: Mapping[str, str],
) -> list[SnapshotInfo]:
    """Every matching commit of a ref after the watermark, oldest first.

    The baseline rule is :func:`~airflow_iceberg_provider.rules.refs.select_new_commit`'s:
    commits after ``after_snapshot_id`` in the ref's ancestry; when that snapshot is no longer
    in it (rolled back past, expired), commits newer than ``after_timestamp_ms``.
    """
    ids = [s.snapshot_id for s in chain]
    candidates: Sequence[SnapshotInfo] = chain
    if after_snapshot_id is not None and after_snapshot_id in ids:
        candidates = chain[ids.index(after_snapshot_id) + 1 :]
    elif after_timestamp_ms is not None:
        candidates = [s for s in chain if s.timestamp_ms > after_timestamp_ms]
    return [s for s in candidates if matches(s, operation, summary)]


def newest_watermark(values: Mapping[str, Any]) -> dict[str, Any] | None:
    """The most advanced of several assets' watermarks (by commit time, then snapshot id)."""
    valid: list[Mapping[str, Any]] = [
        v for v in values.values() if isinstance(v, Mapping) and v.get("timestamp_ms") is not None
    ]
    if not valid:
        return None
    newest = max(valid, key=lambda v: (int(v["timestamp_ms"]), str(v.get("snapshot_id") or "")))
    return dict(newest)


def commit_event(table: str, ref: str, snap: SnapshotInfo) -> dict[str, Any]:
    """The event payload (becomes the asset event's ``extra["payload"]``); ids as decimal strings."""
    return with_string_ids(
        {
            "kind": "iceberg_commit",
            "table": table,
            "ref": ref,
            "snapshot_id": snap.snapshot_id,
            "parent_id": snap.parent_id,
            "operation": snap.operation,
            "timestamp_ms": snap.timestamp_ms,
            "committed_at": datetime.fromtimestamp(snap.timestamp_ms / 1000, tz=UTC).isoformat(),
            "summary": dict(snap.summary),
        }
    )


class IcebergCommitEventTrigger(IcebergEventTriggerBase):
    """
    Fire once per new commit on ``ref`` of ``table`` that matches ``operation`` / ``summary``.

    Use it in an ``AssetWatcher``::

        Asset("iceberg://lakehouse/db/orders", watchers=[AssetWatcher(
            name="orders_appends", trigger=IcebergCommitEventTrigger(table="db.orders", operation="append"))])

    Each event's payload: ``kind="iceberg_commit"``, ``table``, ``ref``, ``snapshot_id`` and
    ``parent_id`` (decimal strings), ``operation``, ``timestamp_ms``, ``committed_at``, ``summary``.
    Several commits between two polls give several events, oldest first.

    Each poll is :meth:`IcebergCatalogHook.poll_commit` with the last seen metadata pointer:
    one pointer-row read while nothing changed, whatever the table's history size; the
    ref's ancestry is read only when the pointer moved AND a matching commit is there.

    The watermark (last delivered snapshot id and its commit time) is kept per watching asset
    in Airflow's asset state store (see :mod:`~airflow_iceberg_provider.triggers._event_state`),
    so a restarted triggerer resumes after the last delivered commit. Without a stored
    watermark the stream starts after ``after_snapshot_id`` if given, else at the ref's head
    when the trigger first sees the table (history is not replayed), or with the table's
    first commit when the table does not exist yet.

    :param table: ``namespace.table``.
    :param ref: branch to watch (default ``main``).
    :param operation: only ``append`` | ``overwrite`` | ``delete`` | ``replace`` commits.
    :param summary: only commits whose summary has these exact properties (e.g. ``{"wap.id": ...}``
        is not useful here; ``{"published-wap-id": ...}``-style keys or your own ``snapshot_properties``).
    :param after_snapshot_id: start after this snapshot when no watermark is stored yet.
    :param iceberg_catalog_conn_id: the ``iceberg_catalog`` connection.
    :param poll_interval: seconds between polls.
    """

    state_kind = "commit"

    def __init__(
        self,
        *,
        table: str,
        ref: str = MAIN_BRANCH,
        operation: str | None = None,
        summary: Mapping[str, Any] | None = None,
        after_snapshot_id: int | str | None = None,
        iceberg_catalog_conn_id: str = "iceberg_catalog_default",
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.table = validate_table(table).dotted
        self.ref = validate_ref(ref, "ref")
        self.operation = params.operation(operation)
        self.summary = validate_summary(summary)
        self.after_snapshot_id = id_str(params.snapshot_id(after_snapshot_id, "after_snapshot_id"))
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.poll_interval = validate_poll_interval(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "ref": self.ref,
                "operation": self.operation,
                "summary": dict(self.summary),
                "after_snapshot_id": self.after_snapshot_id,
                "iceberg_catalog_conn_id": self.iceberg_catalog_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    def state_parts(self) -> tuple[Any, ...]:
        return (self.iceberg_catalog_conn_id, self.table, self.ref, self.operation, self.summary)

    # ------------------------------------------------------------------ blocking parts (worker thread)
    def _poll(self, hook: Any, mark: dict[str, Any] | None, known: str | None) -> dict[str, Any]:
        after_id = int(mark["snapshot_id"]) if mark and mark.get("snapshot_id") else None
        after_ms = int(mark["timestamp_ms"]) if mark and mark.get("timestamp_ms") is not None else None
        res: dict[str, Any] = hook.poll_commit(
            self.table,
            ref=self.ref,
            after_snapshot_id=after_id,
            after_timestamp_ms=after_ms,
            operation=self.operation,
            summary=self.summary,
            known_metadata_location=known,
        )
        res["commits"] = []
        if res["loaded"] and res["matched"]:
            try:
                chain = hook.ref_chain(self.table, self.ref)
            except IcebergRefNotFoundError:
                chain = []
            res["commits"] = pending_commits(
                chain,
                after_snapshot_id=after_id,
                after_timestamp_ms=after_ms,
                operation=self.operation,
                summary=self.summary,
            )
        return res

    def _start_mark(self, hook: Any) -> dict[str, Any] | None:
        """The watermark to start from when none is stored: ``after_snapshot_id``, else the head."""
        if not hook.table_exists(self.table):
            return None  # the table's first commit is new
        tbl = hook.load_table(self.table)
        sid = int(self.after_snapshot_id) if self.after_snapshot_id else None
        if sid is None:
            ref = tbl.metadata.refs.get(self.ref)
            if ref is None:  # a branch created later inherits old history: only commits from now on count
                return {"snapshot_id": None, "timestamp_ms": int(datetime.now(UTC).timestamp() * 1000)}
            sid = ref.snapshot_id
        snap = tbl.metadata.snapshot_by_id(sid)
        ts = snap.timestamp_ms if snap is not None else 0
        return {"snapshot_id": id_str(sid), "timestamp_ms": ts}

    # ------------------------------------------------------------------ the loop
    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = self.resolve_store()
        hook = await asyncio.to_thread(self.hook)  # importing the hook module must not block the loop
        key = self.state_key
        stored = await store.load(key)
        mark = newest_watermark(stored)
        if mark is None:
            mark = await asyncio.to_thread(self._start_mark, hook)
            if mark is not None:
                await store.save(key, self._mark_value(mark))
        elif any(v != mark for v in stored.values()):
            await store.save(key, mark)  # assets that joined later start where the others are
        self.log.info("Watching %s@%s from %s (%d asset(s))", self.table, self.ref, mark, len(stored))
        known: str | None = None
        while True:
            try:
                res = await asyncio.to_thread(self._poll, hook, mark, known)
            except IcebergCatalogUnavailableError as err:  # transient: keep watching
                self.log.warning("Catalog unavailable while polling %s (%s); retrying", self.table, err)
                await asyncio.sleep(self.poll_interval)
                continue
            for snap in res["commits"]:
                yield TriggerEvent(commit_event(self.table, self.ref, snap))
                # only reached once the triggerer has queued the event (see _event_state)
                mark = {"snapshot_id": id_str(snap.snapshot_id), "timestamp_ms": snap.timestamp_ms}
                await self.save_delivered(store, key, self._mark_value(mark))
            known = res["metadata_location"]
            await asyncio.sleep(self.poll_interval)

    def _mark_value(self, mark: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **mark,
            "table": self.table,
            "ref": self.ref,
            "updated_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        }
