"""Where the event triggers keep their watermarks, and the base class they share.

Why Airflow's asset state store
-------------------------------
Airflow 3.3 (``airflow.triggers.base.BaseEventTrigger``) injects
``self.asset_state_store`` into every trigger it runs as an ``AssetWatcher``: one
accessor per asset watching the trigger (``workload.watched_assets``), backed by the
``asset_state_store`` table of the metadata database (primary key ``asset_id, key``,
written with ``last_updated_by_kind='watcher'``). That is the only durable state a
watcher has:

* the trigger's kwargs are immutable (``BaseEventTrigger.hash(classpath, kwargs)`` is the
  trigger's identity: two assets whose watchers serialize to the same kwargs share ONE
  trigger row, and every event it yields becomes an asset event of every one of them —
  ``Trigger.submit_event``);
* the trigger instance lives only as long as the triggerer process; after a restart it is
  rebuilt from the kwargs, so an in-memory watermark restarts from scratch (re-firing or
  skipping commits).

A Variable would work too but is global, not tied to the asset (it outlives a deleted
asset and is invisible from the asset's page); a file is local to one triggerer host, and
a triggerer HA pair or a moved trigger would not see it; a governance table in the lake
would make every poll a catalog commit. The asset state store is per asset, in the same
database that records the asset events, cleaned up with the asset, and written by the
triggerer without a task instance. It is reached through the triggerer's supervisor
(``SetAssetStateStoreByName``), so a write never blocks the event loop.

Several assets on one trigger: each asset keeps its own copy under the trigger's key.
On start the trigger reads all of them and resumes after the NEWEST one (an asset that
joined later, or was re-attached, would otherwise make the trigger deliver again what
the other assets already received — an event always goes to every watching asset);
an asset without a value is written at the next save, so every asset shows where the
stream is. (The official Iceberg provider's watcher calls ``asset_state_store.get()``,
which raises as soon as two assets share the trigger.)

Delivery order: a trigger yields the event, then saves the watermark. The triggerer
appends the yielded event to its outbound queue before it resumes the generator, so
the save happens only after the event is in Airflow's hands; a cancellation while the
event is being logged leaves the watermark behind it (the event is delivered again
after the restart instead of being lost). What no trigger can close from the inside:
a triggerer killed in the ~1 s between queueing an event and the supervisor writing it
to the database loses that event (Airflow persists trigger events in batches once per
loop and gives ``run()`` no confirmation; only the shared-stream "ack mode" has one,
and it re-delivers after a restart instead).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from airflow.triggers.base import BaseEventTrigger

from airflow_iceberg_provider.exceptions import IcebergValidationError

#: prefix of every key this provider writes into an asset's state store
STATE_KEY_PREFIX = "airflow_iceberg"
#: the asset name the stand-alone stores use when no asset is known
NO_ASSET = "_"


def state_key(kind: str, *parts: Any) -> str:
    """Stable key of one trigger's state (``airflow_iceberg.<kind>.<short hash of the parts>``)."""
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return f"{STATE_KEY_PREFIX}.{kind}.{digest}"


def validate_poll_interval(value: Any, param: str = "poll_interval") -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        out = -1.0
    if isinstance(value, bool) or not math.isfinite(out) or not 0.01 <= out <= 86400:
        raise IcebergValidationError(
            f"{param}={value!r} is invalid; pass a number of seconds between 0.01 and 86400 (e.g. 30)."
        )
    return out


class WatermarkStore(Protocol):
    """Per-asset JSON values under one key."""

    async def load(self, key: str) -> dict[str, Any]:
        """``{asset name: value or None}`` for every asset the store serves."""

    async def save(self, key: str, value: Any) -> None:
        """Write ``value`` for every asset."""


class AssetStateWatermarks:
    """Airflow's asset state store, one accessor per watching asset (see the module docstring)."""

    def __init__(self, accessors: Mapping[str, Any]) -> None:
        self.accessors = dict(accessors)

    @classmethod
    def from_injected(cls, injected: Any) -> AssetStateWatermarks | None:
        """From ``BaseEventTrigger.asset_state_store`` (``AssetStateStoreAccessors``), if injected."""
        if injected is None:
            return None
        # AssetStateStoreAccessors keeps its per-asset accessors by name and by uri; it has no public
        # iterator, and its get()/set() refuse to guess when several assets share the trigger.
        found = {**getattr(injected, "_by_uri", {}), **getattr(injected, "_by_name", {})}
        return cls(found) if found else None

    async def load(self, key: str) -> dict[str, Any]:
        names = list(self.accessors)
        values = await asyncio.gather(*(self.accessors[n].aget(key, None) for n in names))
        return dict(zip(names, values, strict=True))

    async def save(self, key: str, value: Any) -> None:
        await asyncio.gather(*(a.aset(key, value) for a in self.accessors.values()))


class JsonFileWatermarks:
    """A JSON file (atomic replace) holding ``{asset: {key: value}}``.

    For a trigger run outside the triggerer's watcher path (tests, ``asyncio`` drivers, a
    single-host setup without an asset): it survives a restart of the process, but not a
    move to another host.
    """

    def __init__(self, path: str | os.PathLike[str], assets: tuple[str, ...] = (NO_ASSET,)) -> None:
        self.path = Path(path)
        self.assets = tuple(assets)

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            state: dict[str, dict[str, Any]] = json.loads(self.path.read_text())
            return state
        except FileNotFoundError:
            return {}

    async def load(self, key: str) -> dict[str, Any]:
        data = await asyncio.to_thread(self._read)
        return {a: data.get(a, {}).get(key) for a in self.assets}

    def _write(self, key: str, value: Any) -> None:
        data = self._read()
        for a in self.assets:
            data.setdefault(a, {})[key] = value
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".wm-")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    async def save(self, key: str, value: Any) -> None:
        await asyncio.to_thread(self._write, key, value)


class MemoryWatermarks:
    """Process memory only: used (with a warning) when nothing durable was provided."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def load(self, key: str) -> dict[str, Any]:
        return {NO_ASSET: self.values.get(key)}

    async def save(self, key: str, value: Any) -> None:
        self.values[key] = value


class IcebergEventTriggerBase(BaseEventTrigger):
    """Shared plumbing: the watermark store and the catalog hook, built lazily in ``run()``.

    ``watermark_store`` may be set on an instance before ``run()`` (as Airflow sets
    ``asset_state_store``); otherwise the injected asset state store is used, else memory.
    """

    #: the kind of state (part of the state key)
    state_kind = "event"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger.__init__ is not annotated
        self.watermark_store: WatermarkStore | None = None

    def state_parts(self) -> tuple[Any, ...]:
        """What identifies this trigger's stream (hashed into the state key)."""
        raise NotImplementedError

    @property
    def state_key(self) -> str:
        return state_key(self.state_kind, *self.state_parts())

    def resolve_store(self) -> WatermarkStore:
        if self.watermark_store is not None:
            return self.watermark_store
        store: WatermarkStore | None = AssetStateWatermarks.from_injected(getattr(self, "asset_state_store", None))
        if store is None:
            self.log.warning(
                "%s runs without an asset state store (not started by an AssetWatcher): its watermark lives in "
                "memory only and a restart starts over.",
                type(self).__name__,
            )
            store = MemoryWatermarks()
        self.watermark_store = store
        return store

    async def save_delivered(self, store: WatermarkStore, key: str, value: Any) -> None:
        """Record what was just delivered; a shutdown (cancellation) arriving meanwhile does not skip it.

        The event is already in the triggerer's queue, so dropping this write would deliver it
        again after the restart: on cancellation the write is completed (bounded to 5 s), then
        the cancellation goes on.
        """
        try:
            await store.save(key, value)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            try:
                await asyncio.wait_for(store.save(key, value), 5)
            except Exception as err:  # comms already closed: the event may be delivered again
                self.log.warning("Could not record the delivered event while shutting down: %s", err)
            raise

    def hook(self) -> Any:
        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        return IcebergCatalogHook(self.iceberg_catalog_conn_id)  # type: ignore[attr-defined]
