"""IcebergSnapshotTrigger on real SQLite catalogs: serialize round trip, firing, late tables."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest
from airflow.sdk._shared.module_loading import import_string

from airflow_iceberg_provider.triggers.snapshot import IcebergSnapshotTrigger
from tests.support.lake import append_batches, create_orders_table, orders_batch

T = "db.orders"


def make(**kw):
    return IcebergSnapshotTrigger(**{"table": T, "poll_interval": 0.05, **kw})


async def first_event(trigger, timeout: float):
    """The trigger's first event, or None if it did not fire within ``timeout`` seconds."""
    gen = trigger.run()
    try:
        return await asyncio.wait_for(anext(gen), timeout)
    except TimeoutError:
        return None
    finally:
        await gen.aclose()


def later(seconds: float, fn):
    t = threading.Timer(seconds, fn)
    t.start()
    return t


def test_serialize_round_trip_with_primitive_kwargs():
    trig = IcebergSnapshotTrigger(
        table="db.orders",
        ref="exp",
        after_snapshot_id=123,
        after_timestamp_ms=456,
        operation="append",
        summary={"wap.id": "w1"},
        iceberg_catalog_conn_id="cat",
        poll_interval=5,
    )
    path, kwargs = trig.serialize()
    assert path == "airflow_iceberg_provider.triggers.snapshot.IcebergSnapshotTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs  # primitives only
    again = import_string(path)(**kwargs)
    assert again.serialize() == (path, kwargs)
    with pytest.raises(TypeError):
        IcebergSnapshotTrigger("db.orders")  # keyword-only


def test_fires_once_per_new_snapshot(lake):
    create_orders_table(lake, T)
    (s1,) = append_batches(lake, T, 1)
    assert asyncio.run(first_event(make(after_snapshot_id=s1), 0.6)) is None  # nothing newer yet
    later(0.3, lambda: lake.load_table(T).append(orders_batch(100, 5)))
    event = asyncio.run(first_event(make(after_snapshot_id=s1), 10))
    s2 = lake.ref_snapshot_id(T)
    assert event.payload["status"] == "success"
    assert (event.payload["snapshot"]["snapshot_id"], event.payload["snapshot"]["parent_id"]) == (s2, s1)
    assert event.payload["snapshot"]["summary"]["added-records"] == "5"
    assert event.payload["polls"] > 1  # it really waited
    # with the reported snapshot as the new baseline it does not fire again
    assert asyncio.run(first_event(make(after_snapshot_id=s2), 0.6)) is None


def test_filters_operation_and_summary(lake):
    create_orders_table(lake, T)
    (s1,) = append_batches(lake, T, 1)

    def commits():
        lake.load_table(T).append(orders_batch(100, 2), snapshot_properties={"wap.id": "other"})
        time.sleep(0.2)
        lake.load_table(T).append(orders_batch(200, 2), snapshot_properties={"wap.id": "mine"})

    later(0.2, commits)
    event = asyncio.run(first_event(make(after_snapshot_id=s1, summary={"wap.id": "mine"}), 10))
    assert event.payload["snapshot"]["summary"]["wap.id"] == "mine"
    assert asyncio.run(first_event(make(after_snapshot_id=s1, operation="delete"), 0.5)) is None


def test_tolerates_a_table_that_appears_later(lake):
    table = "late_ns.events"  # neither the namespace nor the table exist yet

    def create():
        create_orders_table(lake, table)
        lake.load_table(table).append(orders_batch(0, 3))

    later(0.5, create)
    event = asyncio.run(first_event(make(table=table, operation="append"), 15))
    assert event.payload["status"] == "success"
    assert event.payload["snapshot"]["snapshot_id"] == lake.ref_snapshot_id(table)


def test_after_timestamp_and_branch(lake):
    create_orders_table(lake, T)
    (s1,) = append_batches(lake, T, 1)
    lake.set_ref(T, "exp", s1)
    ts = lake.snapshot(T, snapshot_id=s1).timestamp_ms
    assert asyncio.run(first_event(make(ref="exp", after_timestamp_ms=ts), 0.5)) is None
    later(0.2, lambda: lake.load_table(T).append(orders_batch(9, 1), branch="exp"))
    event = asyncio.run(first_event(make(ref="exp", after_timestamp_ms=ts), 10))
    assert event.payload["snapshot"]["snapshot_id"] == lake.ref_snapshot_id(T, "exp")
    assert lake.ref_snapshot_id(T) == s1  # main unchanged: the commit was on the branch


def test_error_event_for_a_missing_connection(lake):
    event = asyncio.run(first_event(make(iceberg_catalog_conn_id="no_such_conn"), 10))
    assert event.payload["status"] == "error"
    assert "no_such_conn" in event.payload["message"]
