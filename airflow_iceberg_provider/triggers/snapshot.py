"""Trigger that waits for a new commit on an Iceberg ref without holding a worker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iceberg_provider.exceptions import IcebergCatalogUnavailableError


class IcebergSnapshotTrigger(BaseTrigger):
    """
    Fire once when ``ref`` of ``table`` has a commit newer than the baseline (and matching the filter).

    Each poll reads only the catalog's metadata pointer; the table metadata is loaded
    and parsed only when that pointer changed, so an idle poll costs the same for a
    table with 10 or 10,000 snapshots. pyiceberg runs in a worker thread
    (``asyncio.to_thread``), never on the triggerer's event loop. A table or
    namespace that does not exist yet is "not yet", not an error.

    :param table: ``namespace.table``.
    :param ref: branch (or tag) to watch.
    :param after_snapshot_id: report only commits after this snapshot in the ref's history.
    :param after_timestamp_ms: report only commits strictly newer than this time (epoch ms).
    :param operation: only snapshots with this operation (append/overwrite/delete/replace).
    :param summary: only snapshots whose summary has these exact properties.
    :param iceberg_catalog_conn_id: the ``iceberg_catalog`` connection.
    :param poll_interval: seconds between polls.
    """

    def __init__(
        self,
        *,
        table: str,
        ref: str = "main",
        after_snapshot_id: int | None = None,
        after_timestamp_ms: int | None = None,
        operation: str | None = None,
        summary: dict[str, str] | None = None,
        iceberg_catalog_conn_id: str = "iceberg_catalog_default",
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger.__init__ is not annotated
        self.table = table
        self.ref = ref
        self.after_snapshot_id = after_snapshot_id
        self.after_timestamp_ms = after_timestamp_ms
        self.operation = operation
        self.summary = dict(summary or {})
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "ref": self.ref,
                "after_snapshot_id": self.after_snapshot_id,
                "after_timestamp_ms": self.after_timestamp_ms,
                "operation": self.operation,
                "summary": dict(self.summary),
                "iceberg_catalog_conn_id": self.iceberg_catalog_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    def _poll(self, hook: Any, known_location: str | None) -> dict[str, Any]:
        res: dict[str, Any] = hook.poll_commit(
            self.table,
            ref=self.ref,
            after_snapshot_id=self.after_snapshot_id,
            after_timestamp_ms=self.after_timestamp_ms,
            operation=self.operation,
            summary=self.summary,
            known_metadata_location=known_location,
        )
        return res

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        hook = IcebergCatalogHook(self.iceberg_catalog_conn_id)
        known: str | None = None
        polls = 0
        while True:
            polls += 1
            try:
                result = await asyncio.to_thread(self._poll, hook, known)
            except IcebergCatalogUnavailableError as err:  # transient: keep waiting
                self.log.warning("Catalog unavailable while polling %s (%s); retrying", self.table, err)
                await asyncio.sleep(self.poll_interval)
                continue
            except Exception as err:  # bad connection, invalid names: waiting cannot fix it
                yield TriggerEvent({"status": "error", "message": f"{type(err).__name__}: {err}", "table": self.table})
                return
            if result["snapshot"] is not None:
                yield TriggerEvent(
                    {
                        "status": "success",
                        "table": self.table,
                        "ref": self.ref,
                        "snapshot": result["snapshot"],
                        "matched": result["matched"],
                        "metadata_location": result["metadata_location"],
                        "polls": polls,
                    }
                )
                return
            if result["loaded"]:
                self.log.info(
                    "%s changed (head of %s: %s) but no matching new commit yet",
                    self.table,
                    self.ref,
                    result["head_snapshot_id"],
                )
            known = result["metadata_location"]
            await asyncio.sleep(self.poll_interval)
