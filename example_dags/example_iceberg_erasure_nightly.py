"""Nightly purge: the maintenance plan that runs anyway also purges erased subjects.

``IcebergMaintenancePlanOperator(erasure_purge={...})`` first runs the erasure purge for
every ``logically_erased`` request of the table in ONE job (skipped when there is none):
it rewrites only the data files that carry deletes or hold the subjects, expires only the
snapshots that reach such a file (history without subjects stays: the evidence records
how much was kept), rewrites manifests, verifies by reading the raw files that bloom
filters and exact bounds could not exclude, moves the requests to ``erased`` and redacts them
in the requests table (the default: keys replaced by their salted hashes, its history purged).
Then the usual health-driven maintenance plan runs. The deadline sensor, waiting for completion,
passes once every request is erased.

Run ``iceberg_erasure_daily`` first (it creates the table and the logical erasure).
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_provider.deadlines import erasure_deadline_alert
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineSensor

ORDERS, REQUESTS = "erasure_daily.orders", "erasure_daily.requests"
SALT_CONN = "erasure_salt_demo"  # defined by example_iceberg_erasure_daily for the demo

with DAG(
    dag_id="iceberg_erasure_nightly",
    schedule="0 2 * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "erasure", "maintenance"],
    doc_md=__doc__,
    # [START howto_erasure_deadline_alert]
    # A request has 30 days; the purge runs nightly and 28 days are kept back for escalation, so a
    # run still unfinished a day after it was queued raises the alert (logged, and in the ledger).
    deadline=erasure_deadline_alert(deadline=timedelta(days=30), cadence=timedelta(days=1), margin=timedelta(days=28)),
    # [END howto_erasure_deadline_alert]
) as dag:
    # [START howto_erasure_nightly]
    nightly = IcebergMaintenancePlanOperator(
        task_id="nightly_maintenance",
        table=ORDERS,
        erasure_purge={"requests_table": REQUESTS, "subject_columns": "customer_id", "salt_conn_id": SALT_CONN},
    )
    deadlines = IcebergErasureDeadlineSensor(
        task_id="deadline_check",
        requests_table=REQUESTS,
        logical_deadline_hours=24,
        deadline_days=30,
        wait_for_completion=True,
        poke_interval=5,
        timeout=60,
    )
    # [END howto_erasure_nightly]
    nightly >> deadlines


def summarize(hook) -> list[str]:
    """Each request's lifecycle: received -> logically erased -> purged (request ids and hashes only)."""
    from airflow_iceberg_provider.rules.erasure import lifecycle_lines

    return lifecycle_lines(hook, REQUESTS, ORDERS)


#: How ``scripts/demo.py`` runs this DAG.
DEMO = {
    "order": 62,
    "runs": [
        {"label": "nightly: maintenance plan purges every logically erased request in one job; all erased and redacted"}
    ],
    "tables": [ORDERS, REQUESTS],
}
