"""IcebergCatalogHook against real SQLite catalogs (no mocks)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergConnectionError,
    IcebergRefNotFoundError,
    IcebergTableNotFoundError,
    IcebergValidationError,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from tests.support.lake import append_batches, create_orders_table


def test_test_connection_and_catalog_is_cached(lake):
    ok, message = lake.test_connection()
    assert ok, message
    assert "sql catalog 'lakehouse'" in message
    assert lake.catalog is lake.catalog
    assert lake.get_conn() is lake.catalog


def test_missing_connection_is_explained(monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NOPE", raising=False)
    hook = IcebergCatalogHook("nope")
    with pytest.raises(IcebergConnectionError, match="'nope' is not defined"):
        _ = hook.catalog


def test_bad_connection_fails_test_connection(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_BADCAT", json.dumps({"conn_type": "iceberg_catalog", "host": "x", "extra": {"catalog_type": "?"}})
    )
    with pytest.raises(IcebergConnectionError, match="catalog_type='\\?' is not supported"):
        _ = IcebergCatalogHook("badcat").catalog


def test_missing_table_and_bad_identifier(lake):
    with pytest.raises(IcebergTableNotFoundError, match="db.missing does not exist"):
        lake.load_table("db.missing")
    with pytest.raises(IcebergValidationError, match="table='db.x;drop'"):
        lake.load_table("db.x;drop")
    assert lake.metadata_location("db.missing") is None
    assert lake.metadata_location("nonamespace.missing") is None
    assert not lake.table_exists("db.missing")


def test_snapshots_refs_and_ancestry(lake):
    create_orders_table(lake)
    s1, s2, s3 = append_batches(lake, "db.orders", 3)
    tbl = lake.load_table("db.orders")
    assert [s.snapshot_id for s in lake.list_snapshots(tbl)] == [s1, s2, s3]
    assert lake.ref_snapshot_id(tbl) == s3
    assert lake.snapshot(tbl, ref="main").snapshot_id == s3
    assert lake.snapshot(tbl, snapshot_id=str(s1)).parent_id is None
    info = lake.snapshot(tbl, snapshot_id=s2)
    assert info.operation == "append" and info.summary["added-records"] == "10"
    assert lake.snapshot(tbl, as_of=info.timestamp_ms).snapshot_id == s2
    assert lake.ancestor_ids(tbl, s3) == [s3, s2, s1]
    assert lake.is_ancestor(tbl, s1, s3)
    assert not lake.is_ancestor(tbl, s3, s1)
    with pytest.raises(IcebergRefNotFoundError, match="Snapshot 1 does not exist"):
        lake.snapshot(tbl, snapshot_id=1)
    with pytest.raises(IcebergRefNotFoundError, match="Ref 'nobranch' does not exist"):
        lake.ref_snapshot_id(tbl, "nobranch")
    with pytest.raises(IcebergRefNotFoundError, match="no snapshot on main at or before"):
        lake.snapshot(tbl, as_of=datetime(2000, 1, 1, tzinfo=UTC))


def test_find_snapshots_by_summary_and_ancestry(lake):
    create_orders_table(lake)
    s1, s2, s3 = append_batches(lake, "db.orders", 3)
    tbl = lake.load_table("db.orders")
    assert [s.snapshot_id for s in lake.find_snapshots(tbl, ref="main", after_snapshot_id=s1)] == [s2, s3]
    assert [s.snapshot_id for s in lake.find_snapshots(tbl, summary={"total-records": "20"})] == [s2]
    assert lake.find_snapshots(tbl, operation="delete") == []


def test_set_ref_fast_forward_and_remove(lake):
    create_orders_table(lake)
    s1, s2, s3 = append_batches(lake, "db.orders", 3)
    lake.set_ref("db.orders", "exp", s1)
    assert lake.refs("db.orders")["exp"].snapshot_id == s1
    # CAS: a stale expectation changes nothing
    before = lake.metadata_location("db.orders")
    with pytest.raises(IcebergCommitConflictError, match="not the expected"):
        lake.set_ref("db.orders", "exp", s2, expected_snapshot_id=s3)
    assert lake.metadata_location("db.orders") == before
    # fast-forward refuses a non-descendant and is a no-op when already there
    lake.set_ref("db.orders", "main", s1)
    assert lake.fast_forward("db.orders", to_snapshot_id=s3) is True
    assert lake.fast_forward("db.orders", to_snapshot_id=s3) is False
    before = lake.metadata_location("db.orders")
    with pytest.raises(IcebergCommitConflictError, match="is not an ancestor"):
        lake.fast_forward("db.orders", to_snapshot_id=s1)
    assert lake.metadata_location("db.orders") == before
    assert lake.remove_ref("db.orders", "exp") is True
    assert lake.remove_ref("db.orders", "exp") is False
    with pytest.raises(IcebergValidationError, match="main branch"):
        lake.remove_ref("db.orders", "main")


def test_stale_table_object_loses_cas(lake):
    """Two writers: the one committing from stale metadata is refused."""
    create_orders_table(lake)
    s1, s2 = append_batches(lake, "db.orders", 2)
    stale = lake.load_table("db.orders")
    lake.set_ref("db.orders", "main", s1)  # another writer rolls main back
    with pytest.raises(IcebergCommitConflictError):
        lake.set_ref(stale, "main", s2)
    assert lake.ref_snapshot_id(lake.load_table("db.orders")) == s1


def test_health_counts(lake):
    create_orders_table(lake)
    append_batches(lake, "db.orders", 4, rows=25)
    health = lake.health("db.orders", target_file_size=1024 * 1024)
    assert health.data_files == 4
    assert health.records == 100
    assert health.snapshots == 4
    assert health.manifests == 4
    assert health.small_files == 4
    assert health.small_file_ratio == 1.0
    assert health.delete_files == 0
    empty = create_orders_table(lake, "db.empty")
    assert lake.health(empty).data_files == 0


def test_governance_ledger_roundtrip(lake, context):
    event = lake.governance.record_ledger(
        operation="unit", table="db.orders", status="succeeded", context=context, metrics={"n": 1}
    )
    rows = lake.governance.read("ledger", event_id=event)
    assert len(rows) == 1
    assert rows[0]["dag_id"] == "test_dag" and rows[0]["try_number"] == 1
    assert json.loads(rows[0]["metrics"]) == {"n": 1}
    assert lake.table_exists("governance.ledger")


def test_metadata_location_tracks_commits(lake):
    create_orders_table(lake)
    first = lake.metadata_location("db.orders")
    append_batches(lake, "db.orders", 1)
    second = lake.metadata_location("db.orders")
    assert first != second
    assert second == lake.load_table("db.orders").metadata_location
