"""How often a WAP task loads its table from the catalog (real SQLite catalog, pyiceberg, no Spark).

A task loads the table once and passes it down; it loads again only after a commit whose result a
later step needs (the write's job commit, the publish's ref commit). The counter wraps
``IcebergCatalogHook.load_table``, through which every load of the hook goes (``hook.refs(name)``
and the other name-taking methods too); loads of the governance tables (ledger, audit results)
and the catalog's own read inside a commit (the SQL catalog's ``commit_table``) are not counted. The write's Spark job is replaced by a pyiceberg commit on the
branch, made with the counter paused.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_iceberg_provider.assets.uris import iceberg_asset
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from airflow_iceberg_provider.params import validate_table
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.wap import audit_of, commit_to_branch, record_audit

T = "db.orders"


class LoadCounter:
    """Counts ``IcebergCatalogHook.load_table`` calls for ``T`` (every hook instance)."""

    def __init__(self) -> None:
        self.count = 0
        self.paused = False

    @contextmanager
    def pause(self) -> Iterator[None]:
        self.paused = True
        try:
            yield
        finally:
            self.paused = False

    def reset(self) -> None:
        self.count = 0


@pytest.fixture
def loads(lake, monkeypatch: pytest.MonkeyPatch) -> LoadCounter:
    counter = LoadCounter()
    original = IcebergCatalogHook.load_table

    def counting(self: IcebergCatalogHook, table: Any) -> Any:
        if validate_table(table).dotted == T and not counter.paused:
            counter.count += 1
        return original(self, table)

    monkeypatch.setattr(IcebergCatalogHook, "load_table", counting)
    return counter


@pytest.fixture
def orders(lake):
    create_orders_table(lake, T).append(orders_batch(0, 10))
    return lake


def _audited_branch(hook, loads: LoadCounter, branch: str = "b") -> int:
    with loads.pause():
        IcebergWapCreateBranchOperator(task_id="c", table=T, branch=branch).execute(fake_context())
        head = commit_to_branch(hook, T, branch, 100, 5)
        record_audit(hook, T, branch, head, event_id=f"ev-{branch}")
    return head


def test_write_loads_the_table_once_before_and_once_after_the_job(orders, loads):
    with loads.pause():
        IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    op = IcebergWapWriteOperator(task_id="w", table=T, branch="b", sql="INSERT INTO {table} VALUES (1)")

    def fake_job(*args: Any, **kwargs: Any) -> Any:  # the job's commit on the branch, not counted
        with loads.pause():
            commit_to_branch(orders, T, "b", 100, 5)
        return SimpleNamespace(job_run_id="job-1", seconds=0.1), None  # (the run, its ledger row)

    op._submit = fake_job  # type: ignore[method-assign]
    loads.reset()
    out = op.execute(fake_context())
    assert out["added_records"] == 5
    # the re-run check's load serves plan, base and reset; one load after the job serves the check
    # of main, the commit verification and the metrics (was 3: the verification loaded again)
    assert loads.count == 2


def test_publish_fast_forward_with_partition_keys_loads_twice(lake, loads):
    create_orders_table(lake, T, partition_by=("day(order_ts)",)).append(orders_batch(0, 10, day="2025-12-31"))
    with loads.pause():
        lake.create_branch(T, "b", snapshot_id=lake.ref_snapshot_id(T))
        lake.load_table(T).append(orders_batch(100, 10, day="2026-01-01"), branch="b")
        head = lake.ref_snapshot_id(T, "b")
        record_audit(lake, T, "b", head)
    from airflow.sdk.execution_time.context import OutletEventAccessors

    asset = iceberg_asset(T)
    ctx = {
        **fake_context(),
        "outlet_events": OutletEventAccessors(),
        "data_interval_start": datetime(2026, 1, 1, tzinfo=UTC),
    }
    op = IcebergWapPublishOperator(
        task_id="p", table=T, branch="b", outlets=[asset], partition_events="iceberg", audit=audit_of(head)
    )
    loads.reset()
    out = op.execute(ctx)
    assert out["method"] == "fast_forward" and out["partition_keys"] == ["2026-01-01"]
    # resolve (plan + compare-and-swap commit), then one load after the commit for the verification
    # and the partition keys (was 3: the partition keys loaded again)
    assert loads.count == 2


def test_publish_fast_forward_loads_once_before_and_once_after_the_commit(orders, loads):
    head = _audited_branch(orders, loads)
    op = IcebergWapPublishOperator(task_id="p", table=T, branch="b", audit=audit_of(head, "ev-b"), tag="daily-1")
    loads.reset()
    assert op.execute(fake_context())["method"] == "fast_forward"
    assert loads.count == 2
    # a retry is a no-op: the resolve's load and the verification's
    loads.reset()
    assert op.execute(fake_context())["method"] == "noop"
    assert loads.count == 2


def test_publish_recovering_a_lost_ledger_row_reuses_the_resolved_table(orders, loads):
    head = _audited_branch(orders, loads)
    base = orders.ref_snapshot_id(T)
    with loads.pause():  # an earlier try moved main, then died before its ledger row
        orders.fast_forward(T, to_snapshot_id=head)
    op = IcebergWapPublishOperator(
        task_id="p", table=T, branch="b", audit=audit_of(head, "ev-b"), base_snapshot_id=base
    )
    loads.reset()
    assert op.execute(fake_context())["method"] == "noop"
    rows = orders.governance.read("ledger", operation="wap_publish")
    assert len(rows) == 1 and rows[0]["status"] == "succeeded"
    # the recovery reads the metrics from the resolve's load (was 3: it loaded again)
    assert loads.count == 2


def test_create_branch_loads_once_and_verifies_after_its_commit(orders, loads):
    with loads.pause():
        orders.ensure_table_properties(T, {"write.wap.enabled": "true"})
    loads.reset()
    out = IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    assert out["created"] is True
    assert loads.count == 2
    loads.reset()
    assert IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())["created"] is False
    assert loads.count == 1
