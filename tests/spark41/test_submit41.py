"""Provider tasks on Spark 4.1 through spark-submit (local mode), Iceberg 1.12's runtime jar.

The 4.1 runtime's ``spark-submit`` and jars as ``scripts/env.sh`` picks them for
``spark_runtime = 4.1``; ``spark_default`` is a ``spark`` connection (local[2]), no Connect server.
Covered: a WAP write, its audit and the publish on a table with the erasure-ready properties; a logical
erasure, then the purge as the first action of one maintenance plan job; every commit proven through the
catalog (engine and Iceberg versions of the snapshots), the ledger rows, the requests' statuses and a
byte scan of every file under the table's location; a job killed by ``on_kill`` leaves no commit.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_iceberg_provider.core.governance import decode_ledger_row
from airflow_iceberg_provider.exceptions import IcebergSparkJobError
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from airflow_iceberg_provider.rules.erasure import erasure_ready_properties
from tests.support.erasure import (
    add_requests,
    create_people_table,
    people_batch,
    person,
    rows_of,
    set_salt_connection,
    table_dir,
)
from tests.support.key_scan import files_holding
from tests.support.lake import create_orders_table, fake_context, orders_batch

pytestmark = [pytest.mark.spark, pytest.mark.spark41]

ROOT = Path(__file__).resolve().parents[2]
T = "db.people41"
REQUESTS = "db.requests41"
SUBJECTS = {"S41-1": person(3), "S41-2": person(707)}
CTX = {"dag_id": "submit41", "run_id": "run_41"}
INSERT = (
    "INSERT INTO {table} SELECT id AS order_id, CASE WHEN id % 10 = 0 THEN '" + person(707) + "' ELSE "
    "concat('person-', CAST(id % 7 AS STRING), '@other.example') END AS customer_id, CAST(id % 50 AS DOUBLE) "
    "AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(1000, 1060)"
)
CHECKS = {
    "column_mapping": {"order_id": {"unique_check": {"equal_to": 0}}, "amount": {"min": {"geq_to": 0}}},
    "change_checks": {"added_rows": {"min": 1, "max": 1000}},
}


def _engine(hook: Any, snapshot_id: int) -> tuple[str, str]:
    summary = hook.load_table(T).snapshot_by_id(snapshot_id).summary
    return summary["engine-version"], summary["iceberg-version"]


def _ledger(hook: Any, operation: str) -> list[dict[str, Any]]:
    return [decode_ledger_row(r) for r in hook.governance.read("ledger", table_name=T, operation=operation)]


@pytest.fixture(scope="module")
def people(module_lake: Any, runtime41: None) -> Iterator[Any]:
    """An erasure-ready, WAP-enabled table with two batches and the salt; ``spark_default`` is local spark-submit."""
    hook = module_lake
    assert "sc://" not in os.environ.get("AIRFLOW_CONN_SPARK_DEFAULT", ""), "spark_default must be spark-submit"
    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    props = {**erasure_ready_properties("customer_id"), "write.wap.enabled": "true"}
    create_people_table(hook, T, partition_by=(), **props)
    hook.load_table(T).append(people_batch(0, 40))
    hook.load_table(T).append(people_batch(40, 40))
    add_requests(hook, REQUESTS, SUBJECTS, received_days_ago=1)
    yield hook
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
    else:
        os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


@pytest.fixture(scope="module")
def published(people: Any) -> dict[str, Any]:
    hook = people
    main_before = hook.ref_snapshot_id(T)
    cut = IcebergWapCreateBranchOperator(task_id="create_branch", table=T).execute(
        fake_context(**CTX, task_id="create_branch")
    )
    branch = cut["branch"]
    written = IcebergWapWriteOperator(
        task_id="write", table=T, branch=branch, base_snapshot_id=cut["base_snapshot_id"], sql=[INSERT]
    ).execute(fake_context(**CTX, task_id="write"))
    assert hook.ref_snapshot_id(T) == main_before, "a WAP write never touches main"
    audit = IcebergWapAuditOperator(task_id="audit", table=T, branch=branch, **CHECKS).execute(
        fake_context(**CTX, task_id="audit")
    )
    out = IcebergWapPublishOperator(task_id="publish", table=T, branch=branch, audit=audit).execute(
        fake_context(**CTX, task_id="publish")
    )
    return {"main_before": main_before, "branch": branch, "written": written, "audit": audit, "out": out}


def test_wap_write_audit_publish_through_spark_submit(people, published, capfd):
    hook = people
    written, audit, out = published["written"], published["audit"], published["out"]
    head = hook.ref_snapshot_id(T)
    assert out["method"] == "fast_forward" and str(head) == written["snapshot_id"] == str(audit["snapshot_id"])
    assert hook.is_ancestor(hook.load_table(T), published["main_before"], head)
    assert written["added_records"] == 60 and audit["passed"] is True and audit["checks"] == 3
    engine, iceberg = _engine(hook, head)  # the branch's commit came from the 4.1 runtime's jars
    assert engine.startswith("4.1.") and iceberg.startswith("Apache Iceberg 1.12."), (engine, iceberg)
    assert hook.load_table(T).scan().to_arrow().num_rows == 80 + 60
    (write_row,) = _ledger(hook, "wap_write")
    assert write_row["status"] == "succeeded" and write_row["snapshot_after"] == head
    assert len(hook.governance.read("audit_results", event_id=audit["job_run_id"])) == 3
    (publish_row,) = _ledger(hook, "wap_publish")
    assert publish_row["snapshot_before"] == published["main_before"] and publish_row["snapshot_after"] == head
    logged = "".join(capfd.readouterr())
    assert "through Spark Connect" not in logged  # every job went through spark-submit


@pytest.fixture(scope="module")
def purged(people: Any, published: Any) -> dict[str, Any]:
    hook = people
    common = {"subject_columns": "customer_id", "requests_table": REQUESTS}
    before = hook.metadata_location(T)
    logical = IcebergErasureOperator(task_id="logical", phase="logical", table=T, **common).execute(
        fake_context(**CTX, task_id="logical")
    )
    logical_location = hook.metadata_location(T)
    plan = IcebergMaintenancePlanOperator(
        task_id="nightly",
        table=T,
        actions=["rewrite_manifests"],
        force=True,
        erasure_purge={**common, "redact_erased_requests": True},
    ).execute(fake_context(**CTX, task_id="nightly"))
    return {"before": before, "logical": logical, "logical_location": logical_location, "plan": plan}


def test_logical_erasure_then_purge_in_one_maintenance_job(people, purged):
    hook = people
    logical, plan = purged["logical"], purged["plan"]
    assert purged["logical_location"] != purged["before"]
    assert logical["verification"] == "verified" and logical["rows_deleted"] == 7 + 6, logical
    purge = plan["erasure_purge"]
    assert purge["purged"] is True and purge["phase"] == "purge" and purge["job_run_id"] == plan["job_run_id"]
    assert purge["evidence_rows"] == 2
    assert [a["action"] for a in plan["actions"]] == ["rewrite_manifests"]
    ops = sorted(
        r["operation"]
        for r in hook.governance.read("ledger", table_name=T)
        if str(r["event_id"]).startswith(plan["job_run_id"] + "-")
    )
    assert ops == ["maintenance.erasure_purge", "maintenance.rewrite_manifests"]
    assert {r["request_id"]: r["status"] for r in rows_of(hook, REQUESTS)} == dict.fromkeys(SUBJECTS, "redacted")
    engine, iceberg = _engine(hook, hook.ref_snapshot_id(T))
    assert engine.startswith("4.1.") and iceberg.startswith("Apache Iceberg 1.12.")
    # the erased are gone from every byte under the table's location; the others stay
    assert files_holding(Path(table_dir(hook, T)), sorted(SUBJECTS.values())) == {}
    assert person(1) in {r["customer_id"] for r in rows_of(hook, T)}
    assert hook.load_table(T).scan().to_arrow().num_rows == 140 - 13


def test_a_job_killed_by_on_kill_leaves_no_commit(people, tmp_path):
    hook = people
    table = "db.killed41"
    create_orders_table(hook, table, partition_by=()).append(orders_batch(0, 10))
    location = hook.metadata_location(table)
    marker = tmp_path / "started"
    op = IcebergSparkSubmitOperator(
        task_id="slow",
        table=table,
        application=str(ROOT / "tests" / "jobs" / "slow_insert.py"),
        params_for_job={"marker": str(marker)},
        expected_operations=["append"],
    )
    killed: dict[str, Any] = {}

    def kill_when_writing() -> None:
        deadline = time.monotonic() + 180
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)  # the INSERT's tasks are running
        killed["at"] = time.monotonic()
        op.on_kill()

    killer = threading.Thread(target=kill_when_writing, daemon=True)
    killer.start()
    with pytest.raises(IcebergSparkJobError, match=r"Spark job .* failed after"):
        op.execute(fake_context(**CTX, task_id="slow"))
    killer.join(5)
    assert marker.exists() and "at" in killed, "the job was not killed while it wrote"
    assert hook.metadata_location(table) == location, "a killed job committed"
    driver = int(marker.read_text())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{driver}").exists():
        time.sleep(0.2)
    assert not Path(f"/proc/{driver}").exists(), "the killed job's Python driver still runs"
