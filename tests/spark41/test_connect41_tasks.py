"""Provider tasks on Spark 4.1 over Spark Connect, the task process itself as the client.

One Spark 4.1 Connect server with token authentication for the module. The operators are the same
as on Spark 3.5; the connection's token is the server's. Covered: WAP write, audit and a cherry-pick
publish; a logical erasure and a snapshot expiry; no second Python anywhere (the Spark runtime Python
the 3.5 runner would use does not exist here); a wrong or missing token refused with a clear error;
the token in no log line and no XCom value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from tests.spark41.conftest import TOKEN, Server41
from tests.support.erasure import SALT, add_requests, create_people_table, people_batch, person
from tests.support.lake import create_orders_table, fake_context, orders_batch

pytestmark = [pytest.mark.spark, pytest.mark.connect, pytest.mark.spark41]

ROOT = Path(__file__).resolve().parents[2]
T = "db.orders"
CHECKS = {
    "column_mapping": {"amount": {"min": {"geq_to": 0}}, "order_id": {"unique_check": {"equal_to": 0}}},
    "table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
}


@pytest.fixture(scope="module")
def no_second_python() -> Iterator[None]:
    """The 3.5 runner's Python (``pyspark_python``) points nowhere: a task that needed it would fail."""
    key = "AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON"
    old = os.environ.get(key)
    os.environ[key] = "/nonexistent/spark-runtime/bin/python"
    yield
    if old is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = old


@pytest.fixture(scope="module")
def orders(module_lake, connect41, no_second_python):
    create_orders_table(module_lake, T, properties={"write.wap.enabled": "true"}).append(orders_batch(0, 50))
    return module_lake


def test_wap_write_audit_and_cherry_pick_publish_in_the_task_process(orders, connect41, capfd):
    hook = orders
    ctx = fake_context(dag_id="connect41_wap", run_id="run_1")
    main_before = hook.ref_snapshot_id(T)
    branch = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)["branch"]
    written = IcebergWapWriteOperator(
        task_id="write",
        table=T,
        branch=branch,
        spark_conn_id=connect41,
        application=str(ROOT / "example_dags" / "jobs" / "append_orders.py"),
        params_for_job={"rows": 100, "seed": 5000, "ds": "2026-01-03"},
        expected_operations=["append"],
    ).execute(ctx)
    assert written["added_records"] == 100 and hook.ref_snapshot_id(T) == main_before
    audit = IcebergWapAuditOperator(
        task_id="audit", table=T, branch=branch, spark_conn_id=connect41, incremental_min_rows=0, **CHECKS
    ).execute(ctx)
    assert audit["passed"] is True and audit["checks"] == 3
    assert len(hook.governance.read("audit_results", event_id=audit["job_run_id"])) == 3
    hook.load_table(T).append(orders_batch(9000, 5))  # main moved: the publish replays the branch's append
    moved = hook.ref_snapshot_id(T)
    out = IcebergWapPublishOperator(
        task_id="publish", table=T, branch=branch, audit=audit, on_conflict="cherrypick", spark_conn_id=connect41
    ).execute(ctx)
    assert out["method"] == "cherrypick"
    head = hook.ref_snapshot_id(T)
    assert head != moved and hook.is_ancestor(hook.load_table(T), moved, head)
    ids = hook.load_table(T).scan().to_arrow().column("order_id").to_pylist()
    assert len(ids) == 50 + 100 + 5 and len(set(ids)) == len(ids), "one cherry-pick, not two"
    logged = "".join(capfd.readouterr())
    assert "client in_process" in logged  # the task process was the client
    assert "[iceberg-job] wap_audit audit completed" in logged  # the job's own output, in the task log
    for result in (written, audit, out):
        assert TOKEN not in json.dumps(result, default=str)
    assert TOKEN not in logged


def test_logical_erasure_and_expiry_in_the_task_process(orders, connect41):
    hook = orders
    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    os.environ["AIRFLOW_CONN_ERASURE_SALT"] = json.dumps({"conn_type": "generic", "password": SALT})
    try:
        table, requests = "db.people", "db.requests41"
        create_people_table(hook, table, partition_by=())
        hook.load_table(table).append(people_batch(0, 40))
        hook.load_table(table).append(people_batch(40, 40))
        subject = person(7)
        add_requests(hook, requests, {"C-1": subject}, received_days_ago=1)
        logical = IcebergErasureOperator(
            task_id="logical41",
            phase="logical",
            table=table,
            subject_columns="customer_id",
            requests_table=requests,
            spark_conn_id=connect41,
        ).execute(fake_context())
        assert logical["verification"] == "verified" and logical["rows_deleted"] > 0, logical
        assert subject not in {r["customer_id"] for r in hook.load_table(table).scan().to_arrow().to_pylist()}
    finally:
        if old is None:
            os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
        else:
            os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old
    create_orders_table(hook, "db.exp", partition_by=())
    for i in range(3):
        hook.load_table("db.exp").append(orders_batch(i * 10, 10))
    IcebergExpireSnapshotsOperator(
        task_id="expire41",
        table="db.exp",
        older_than="0s",
        older_than_floor="0s",
        retain_last=1,
        spark_conn_id=connect41,
    ).execute(fake_context())
    assert len(hook.list_snapshots("db.exp")) == 1


@pytest.mark.parametrize("token", ["wrong-token-4f2a", None], ids=["wrong", "missing"])
def test_a_wrong_or_missing_token_is_refused_before_anything_runs(orders, server41: Server41, token, capfd):
    conn_id = "spark_connect41_bad"
    key = f"AIRFLOW_CONN_{conn_id.upper()}"
    os.environ[key] = server41.conn_json(conn_id, token=token)
    try:
        create_orders_table(orders, f"db.refused_{token is None}", partition_by=()).append(orders_batch(0, 10))
        orders.load_table(f"db.refused_{token is None}").append(orders_batch(10, 10))  # one snapshot to expire
        location = orders.load_table(f"db.refused_{token is None}").metadata_location
        with pytest.raises(
            IcebergConnectionError, match=r"refused the client's token .* Set the connection's password"
        ):
            IcebergExpireSnapshotsOperator(
                task_id="expire_refused",
                table=f"db.refused_{token is None}",
                older_than="0s",
                older_than_floor="0s",
                retain_last=1,
                spark_conn_id=conn_id,
            ).execute(fake_context())
        assert orders.load_table(f"db.refused_{token is None}").metadata_location == location
        logged = "".join(capfd.readouterr())
        assert "wrong-token-4f2a" not in logged and TOKEN not in logged
    finally:
        os.environ.pop(key, None)
