"""Partition keys on a publish's asset events, on a real SQLite catalog (pyiceberg, no Spark).

The events go into Airflow's own outlet-event accessors (``airflow.sdk.execution_time.context``),
as in a running task. That a downstream DAG on a ``PartitionedAssetTimetable`` then runs once per
key is tested with a real scheduler in ``test_approvals_airflow.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_iceberg_provider.assets.partitions import check_partition_events, partition_key
from airflow_iceberg_provider.assets.uris import iceberg_asset
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.wap import audit_of, record_audit

T = "db.orders"
DAYS = ("2026-01-01", "2026-01-02", "2026-01-03")


def test_partition_key_forms():
    assert partition_key([("order_ts_day", "2026-01-01")]) == "2026-01-01"
    assert partition_key([("d", "2026-01-01"), ("region", "eu")]) == "d=2026-01-01/region=eu"
    assert partition_key([("region", None)]) == "null" and partition_key([]) is None
    assert check_partition_events(None) is None and check_partition_events("iceberg") == "iceberg"
    with pytest.raises(IcebergValidationError, match="partition_events='daily' is invalid"):
        check_partition_events("daily")


def _events():
    from airflow.sdk.execution_time.context import OutletEventAccessors

    return OutletEventAccessors()


def _branch_with_days(hook, partition_by) -> int:
    create_orders_table(hook, T, partition_by=partition_by).append(orders_batch(0, 10, day="2025-12-31"))
    hook.create_branch(T, "b", snapshot_id=hook.ref_snapshot_id(T))
    for i, day in enumerate(DAYS):
        hook.load_table(T).append(orders_batch(100 + 10 * i, 10, day=day), branch="b")
    head = hook.ref_snapshot_id(T, "b")
    record_audit(hook, T, "b", head)
    return head


def _publish(partition_events: str) -> tuple[dict, set[str]]:
    asset = iceberg_asset(T)
    events = _events()
    ctx = {**fake_context(), "outlet_events": events, "data_interval_start": datetime(2026, 1, 3, tzinfo=UTC)}
    audit = audit_of(IcebergCatalogHook().ref_snapshot_id(T, "b"))
    op = IcebergWapPublishOperator(
        task_id="p", table=T, branch="b", outlets=[asset], partition_events=partition_events, audit=audit
    )
    out = op.execute(ctx)
    return out, events[asset].partition_keys


def test_publish_event_carries_the_day_partitions_the_branch_touched(lake):
    _branch_with_days(lake, ("day(order_ts)",))
    out, keys = _publish("iceberg")
    assert out["partition_keys"] == list(DAYS) and keys == set(DAYS), "2025-12-31 was on main already"


def test_several_partition_fields_give_hive_style_keys(lake):
    _branch_with_days(lake, ("day(order_ts)", "region"))
    out, keys = _publish("iceberg")
    assert len(keys) == 9 and "order_ts_day=2026-01-02/region=eu" in keys


def test_interval_mode_gives_the_run_interval(lake):
    _branch_with_days(lake, ("day(order_ts)",))
    out, keys = _publish("interval")
    assert keys == {"2026-01-03T00:00:00+00:00"}
