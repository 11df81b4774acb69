"""A maintenance plan with ``erasure_purge`` runs ONE Spark application: the purge, then the plan's actions.

The submissions are counted from Spark's own event logs (one file per application), not from
the provider: a logical erasure first (its own job, not counted), then the maintenance task.
"""

from __future__ import annotations

import os

import pytest

from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from tests.support.erasure import add_requests, append_people, create_people_table, person, rows_of, set_salt_connection
from tests.support.erasure import values_on_disk as subjects_on_disk
from tests.support.lake import fake_context

pytestmark = pytest.mark.spark

TABLE = "db.people_mp"
REQUESTS = "db.requests_mp"
ERASED = {person(3), person(7)}


@pytest.fixture(scope="module")
def logically_erased(module_lake):
    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    hook = module_lake
    create_people_table(hook, TABLE)
    append_people(hook, TABLE, 3)
    add_requests(hook, REQUESTS, {"R-1": person(3), "R-2": person(7)})
    common = {"table": TABLE, "subject_columns": "customer_id", "requests_table": REQUESTS}
    IcebergErasureOperator(task_id="logical", phase="logical", **common).execute(fake_context())
    yield hook
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
    else:
        os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


def test_maintenance_with_erasure_purge_is_one_spark_application(logically_erased, tmp_path):
    hook = logically_erased
    assert {r["status"] for r in rows_of(hook, REQUESTS)} == {"logically_erased"}
    events = tmp_path / "spark-events"
    events.mkdir()
    plan = IcebergMaintenancePlanOperator(
        task_id="nightly",
        table=TABLE,
        actions=["rewrite_manifests"],
        force=True,
        erasure_purge={"requests_table": REQUESTS, "subject_columns": "customer_id"},
        spark_conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{events}"},
    )
    out = plan.execute(fake_context(task_id="nightly"))

    assert len(list(events.iterdir())) == 1, sorted(p.name for p in events.iterdir())  # one application
    purge = out["erasure_purge"]
    assert purge["purged"] is True and purge["phase"] == "purge"
    assert purge["job_run_id"] == out["job_run_id"] and purge["evidence_rows"] == 2
    assert [a["action"] for a in out["actions"]] == ["rewrite_manifests"]
    assert {r["status"] for r in rows_of(hook, REQUESTS)} <= {"erased", "redacted"}
    on_disk = set().union(*subjects_on_disk(hook, TABLE).values())
    assert not on_disk & ERASED
    ledger = hook.governance.read("ledger", table_name=TABLE)
    ops = sorted(r["operation"] for r in ledger if str(r["event_id"]).startswith(out["job_run_id"] + "-"))
    assert ops == ["maintenance.erasure_purge", "maintenance.rewrite_manifests"]

    # nothing logically erased any more: the next run plans no purge action and starts no JVM for it
    again = IcebergMaintenancePlanOperator(
        task_id="nightly2",
        table=TABLE,
        actions=["rewrite_manifests"],
        max_manifests=10_000,
        erasure_purge={"requests_table": REQUESTS, "subject_columns": "customer_id"},
    ).execute(fake_context(task_id="nightly2"))
    assert again["erasure_purge"] == {"purged": False} and again["spark_job"] is False
