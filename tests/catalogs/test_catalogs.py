"""The provider's metadata-only capabilities on every catalog backend (``catalog`` fixture).

Each scenario runs on the embedded SQLite catalog, on a PostgreSQL-backed SQL catalog and on
SeaweedFS's Iceberg REST catalog with S3 storage (``tests/conftest.py::catalog``, servers from
``tests/support/servers.py``): the foundation and ref verbs of ``IcebergCatalogHook``, compare-and-swap,
WAP publish (gate, fast-forward, conflict), tags, branches and rollback, the commit check,
sensor and trigger, maintenance dry runs and erasure's pre-flight refusal. Deselect a backend
with ``-m "not postgres"`` or ``-m "not rest"``. What only one backend has (connection mapping,
credentials, the Spark tier) stays in ``test_catalog_postgres.py`` / ``test_catalog_rest.py``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergCommitVerificationError,
    IcebergPublishConflictError,
    IcebergRefusedError,
)
from airflow_iceberg_provider.rules.maintenance import preview_table_expiry
from tests.support.lake import append_batches, create_orders_table, fake_context, orders_batch
from tests.support.wap import commit_to_branch, record_audit


@pytest.fixture
def orders(catalog):
    """``catalog`` with its ``orders`` table holding one 10-row append."""
    create_orders_table(catalog.hook, catalog.table).append(orders_batch(0, 10))
    return catalog


# ------------------------------------------------------------------ hook: foundation + refs verbs
def test_foundation_and_ref_verbs(catalog):
    hook, T = catalog.hook, catalog.table
    tbl = create_orders_table(hook, T)
    assert hook.metadata_location(T) == tbl.metadata_location
    assert hook.metadata_location(catalog.name("missing")) is None
    ids = append_batches(hook, T, 3)
    loaded = hook.load_table(T)
    assert hook.metadata_location(T) == loaded.metadata_location  # the SQL fast path agrees with load_table
    assert [s.snapshot_id for s in hook.ref_chain(T)] == ids
    assert hook.snapshot(T, ref="main").snapshot_id == ids[-1]
    assert hook.snapshot(T, as_of=hook.snapshot(T, snapshot_id=ids[1]).timestamp_ms).snapshot_id == ids[1]
    assert len(hook.find_snapshots(T, ref="main", after_snapshot_id=ids[0], operation="append")) == 2
    health = hook.health(T)
    assert (health.records, health.snapshots, health.data_files) == (30, 3, 3)

    assert hook.create_tag(T, "t1", snapshot_id=ids[0]) == "created"
    assert hook.create_tag(T, "t1", snapshot_id=ids[0]) == "exists"
    with pytest.raises(IcebergRefusedError, match="immutable"):
        hook.create_tag(T, "t1", snapshot_id=ids[1])
    assert hook.create_branch(T, "exp", snapshot_id=ids[1], max_ref_age_ms=86_400_000) == "created"
    head = commit_to_branch(hook, T, "exp", 100, 5)
    assert hook.ref_snapshot_id(T, "main") == ids[-1]
    # main (ids[-1]) is not an ancestor of exp's head: refused, nothing changed
    before = hook.metadata_location(T)
    with pytest.raises(IcebergCommitConflictError, match="not an ancestor"):
        hook.fast_forward(T, to_snapshot_id=head)
    assert hook.metadata_location(T) == before
    assert hook.rollback(T, to_snapshot_id=ids[1], expected_snapshot_id=ids[-1]) is True
    assert hook.fast_forward(T, to_snapshot_id=head, expected_snapshot_id=ids[1]) is True
    assert hook.ref_snapshot_id(T) == head and hook.load_table(T).scan().to_arrow().num_rows == 25
    poll = hook.poll_commit(T, after_snapshot_id=ids[1])
    assert poll["loaded"] and poll["snapshot"]["snapshot_id"] == head
    assert hook.poll_commit(T, known_metadata_location=poll["metadata_location"])["loaded"] is False
    assert hook.remove_ref(T, "t1") and hook.remove_ref(T, "exp") and not hook.remove_ref(T, "exp")
    assert set(hook.refs(T)) == {"main"}
    event = hook.governance.record_ledger(operation="test", table=T, status="succeeded", context=fake_context())
    assert hook.governance.read("ledger", event_id=event)[0]["dag_id"] == "test_dag"


def test_metadata_location_matches_load_table(orders):
    hook, table = orders.hook, orders.table
    assert hook.metadata_location(table) == hook.load_table(table).metadata_location
    assert hook.metadata_location(orders.name("missing")) is None
    assert hook.metadata_location("nosuchns.orders") is None
    before = hook.metadata_location(table)
    hook.load_table(table).append(orders_batch(10, 3))
    assert hook.metadata_location(table) not in (None, before)


def test_health_metrics_and_history(orders):
    hook, table = orders.hook, orders.table
    ids = append_batches(hook, table, 2)
    health = hook.health(table)
    assert (health.records, health.data_files, health.snapshots, health.delete_files) == (30, 3, 3, 0)
    assert health.data_bytes > 0 and health.manifests >= 1
    assert [s.snapshot_id for s in hook.ref_chain(table)][-2:] == ids
    assert hook.snapshot(table, ref="main").snapshot_id == ids[-1]


def test_compare_and_swap_rejects_a_stale_writer(orders):
    hook, T = orders.hook, orders.table
    stale = hook.load_table(T)
    hook.load_table(T).append(orders_batch(100, 5))  # another writer wins
    moved = hook.metadata_location(T)
    with pytest.raises(IcebergCommitConflictError):
        hook.set_ref(stale, "main", stale.current_snapshot().snapshot_id)
    assert hook.metadata_location(T) == moved
    # an append from the stale object loses the swap, refreshes and re-applies (no lost update)
    hook.retry_commit(lambda: stale.append(orders_batch(200, 5)), what=T)
    assert hook.metadata_location(T) != moved
    assert sorted(hook.load_table(T).scan().to_arrow()["order_id"].to_pylist()) == [
        *range(10),
        *range(100, 105),
        *range(200, 205),
    ]


# ------------------------------------------------------------------ operators: a subset per capability
def test_wap_publish_gate_fast_forward_compare_and_swap_and_asset_event(orders):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_iceberg_provider.assets.uris import iceberg_asset
    from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator

    hook, table = orders.hook, orders.table
    for name in ("a", "b"):
        IcebergWapCreateBranchOperator(task_id=f"c{name}", table=table, branch=name).execute(fake_context())
    head_a = commit_to_branch(hook, table, "a", 100, 5)
    head_b = commit_to_branch(hook, table, "b", 200, 5)
    pub_a = IcebergWapPublishOperator(task_id="pa", table=table, branch="a", audited_snapshot_id=head_a)
    pub_b = IcebergWapPublishOperator(task_id="pb", table=table, branch="b", audited_snapshot_id=head_b)
    before = hook.metadata_location(table)
    for unaudited in (pub_a, pub_b):
        with pytest.raises(IcebergRefusedError, match="no audit run is bound"):
            unaudited.execute(fake_context())
    assert hook.metadata_location(table) == before
    pub_a.audit = record_audit(hook, table, "a", head_a, event_id="ea")
    pub_b.audit = record_audit(hook, table, "b", head_b, event_id="eb")
    # compare-and-swap in the catalog: a ref move from stale metadata is rejected
    stale = hook.load_table(table)
    asset = iceberg_asset(table)
    pub_a.outlets = [asset]
    events = OutletEventAccessors()
    out = pub_a.execute({**fake_context(), "outlet_events": events})
    assert out["method"] == "fast_forward" and hook.ref_snapshot_id(table) == head_a
    assert events[asset].extra["snapshot_id"] == str(head_a)
    moved = hook.metadata_location(table)
    with pytest.raises(IcebergCommitConflictError):
        hook.set_ref(stale, "main", head_b)
    assert hook.metadata_location(table) == moved
    with pytest.raises(IcebergPublishConflictError, match="main moved"):
        pub_b.execute(fake_context())
    assert hook.metadata_location(table) == moved and hook.ref_snapshot_id(table) == head_a
    assert hook.load_table(table).scan().to_arrow().num_rows == 15


def test_tag_branch_create_drop_and_rollback(orders):
    from airflow_iceberg_provider.operators.refs import (
        IcebergCreateBranchOperator,
        IcebergCreateTagOperator,
        IcebergDropBranchOperator,
        IcebergDropTagOperator,
        IcebergRollbackOperator,
    )

    hook, table = orders.hook, orders.table
    first = hook.ref_snapshot_id(table)
    out = IcebergCreateTagOperator(task_id="t", table=table, tag="eod", max_ref_age=timedelta(days=30)).execute(
        fake_context()
    )
    assert out["outcome"] == "created"
    refs = hook.refs(table)
    assert refs["eod"].type == "tag" and refs["eod"].max_ref_age_ms == 30 * 86_400_000
    again = IcebergCreateTagOperator(task_id="t", table=table, tag="eod", max_ref_age=timedelta(days=30))
    assert again.execute(fake_context())["outcome"] == "exists"
    hook.load_table(table).append(orders_batch(10, 5))
    before = hook.metadata_location(table)
    with pytest.raises(IcebergRefusedError, match="immutable"):  # a tag is immutable without replace=True
        IcebergCreateTagOperator(task_id="t2", table=table, tag="eod").execute(fake_context())
    assert hook.metadata_location(table) == before
    out = IcebergCreateBranchOperator(task_id="b", table=table, branch="exp", min_snapshots_to_keep=2).execute(
        fake_context()
    )
    assert out["outcome"] == "created" and hook.refs(table)["exp"].min_snapshots_to_keep == 2
    IcebergRollbackOperator(task_id="rb", table=table, to_tag="eod").execute(fake_context())
    assert hook.ref_snapshot_id(table) == first
    IcebergDropTagOperator(task_id="dt", table=table, tag="eod").execute(fake_context())
    assert "eod" not in hook.refs(table)
    IcebergDropBranchOperator(task_id="db", table=table, branch="exp").execute(fake_context())
    assert set(hook.refs(table)) == {"main"}
    ledger = hook.governance.read("ledger", table_name=table)
    assert {"create_tag", "create_branch", "rollback", "drop_tag", "drop_branch"} <= {r["operation"] for r in ledger}


def test_commit_check_sensor_and_trigger(orders):
    from airflow_iceberg_provider.operators.refs import IcebergCommitCheckOperator
    from airflow_iceberg_provider.sensors.snapshot import IcebergSnapshotSensor
    from airflow_iceberg_provider.triggers.snapshot import IcebergSnapshotTrigger

    hook, table = orders.hook, orders.table
    first = hook.ref_snapshot_id(table)
    sensor = IcebergSnapshotSensor(task_id="s", table=table, after_snapshot_id=first, deferrable=False)
    assert sensor.poke(fake_context()) is False
    check = IcebergCommitCheckOperator(task_id="c", table=table, operation="append", after_snapshot_id=first)
    with pytest.raises(IcebergCommitVerificationError):
        check.execute(fake_context())
    hook.load_table(table).append(orders_batch(10, 5), snapshot_properties={"batch": "b2"})
    second = hook.ref_snapshot_id(table)
    assert sensor.poke(fake_context()) is not False
    after = IcebergCommitCheckOperator(task_id="chk", table=table, operation="append", after_snapshot_id=first)
    assert after.execute(fake_context())["matched"] == 1
    out = IcebergCommitCheckOperator(
        task_id="c2", table=table, operation="append", summary={"batch": "b2"}, after_snapshot_id=first
    ).execute(fake_context())
    assert out["matched"] == 1

    async def first_event():
        gen = IcebergSnapshotTrigger(table=table, after_snapshot_id=first, poll_interval=0.05).run()
        try:
            return await asyncio.wait_for(anext(gen), 30)
        finally:
            await gen.aclose()

    event = asyncio.run(first_event())
    assert event.payload["snapshot"]["snapshot_id"] == second


def test_maintenance_dry_runs_start_no_jvm_and_change_nothing(orders):
    from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator

    hook, table = orders.hook, orders.table
    append_batches(hook, table, 3)
    before = hook.metadata_location(table)
    time.sleep(0.01)
    preview = preview_table_expiry(hook.load_table(table), older_than=datetime.now(UTC), retain_last=1)
    assert len(preview.expire) == 3
    now_plus = {"older_than": datetime.now(UTC).isoformat(), "older_than_floor": timedelta(0)}
    out = IcebergExpireSnapshotsOperator(task_id="x", table=table, retain_last=1, dry_run=True, **now_plus).execute(
        fake_context()
    )
    assert out["spark_job"] is False and len(out["would_expire"]) == 3
    assert sorted(out["would_expire"]) == sorted(str(i) for i in preview.expire)
    plan = IcebergMaintenancePlanOperator(task_id="p", table=table, actions=["rewrite_manifests"]).execute(
        fake_context()
    )
    assert plan["healthy"] is True and plan["spark_job"] is False
    assert hook.metadata_location(table) == before
    assert len(hook.load_table(table).metadata.snapshots) == 4


def test_erasure_refuses_before_any_spark_job(orders, monkeypatch, tmp_path):
    erasure = pytest.importorskip("airflow_iceberg_provider.operators.erasure")
    from airflow_iceberg_provider.exceptions import IcebergValidationError

    hook = orders.hook
    by_customer = orders.name("by_customer")
    # a table identity-partitioned on the personal column cannot be erased safely: refused up front
    create_orders_table(hook, by_customer, partition_by=("customer_id",)).append(orders_batch(0, 5))
    before = hook.metadata_location(by_customer)
    submitted = []
    monkeypatch.setattr(
        "airflow_iceberg_provider.hooks.spark.IcebergSparkHook.submit", lambda self, plan: submitted.append(plan)
    )
    subjects = tmp_path / "subjects.jsonl"
    subjects.write_text('{"request_id": "r1", "subject_key": "c1"}\n')
    subjects.chmod(0o600)
    monkeypatch.setenv("AIRFLOW_CONN_ERASURE_SALT", '{"conn_type": "generic", "password": "%s"}' % ("s" * 32))
    op = erasure.IcebergErasureOperator(
        task_id="e", table=by_customer, subject_columns=["customer_id"], subjects_file=str(subjects)
    )
    with pytest.raises((IcebergRefusedError, IcebergValidationError), match=r"identity\(customer_id\)"):
        op.execute(fake_context())
    assert submitted == [] and hook.metadata_location(by_customer) == before
