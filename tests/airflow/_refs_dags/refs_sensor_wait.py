"""Test-only DAG (no Spark): a deferrable snapshot sensor that really waits for an outside commit.

``tests/airflow/test_refs_dag.py`` runs it with ``airflow dags test -c '{"marker": ...}'`` and, once the
trigger is running inline, appends a commit stamped ``test.marker=<marker>`` from the test process.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.sensors.snapshot import IcebergSnapshotSensor

TABLE = "wait.events"

with DAG(
    dag_id="refs_sensor_wait",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
) as dag:
    create = IcebergCreateTableOperator(
        task_id="create", table=TABLE, columns={"order_id": "long", "note": "string"}, partition_by=[]
    )
    wait = IcebergSnapshotSensor(
        task_id="wait",
        table=TABLE,
        operation="append",
        summary={"test.marker": "{{ dag_run.conf['marker'] }}"},
        since_last_seen=True,
        deferrable=True,
        poke_interval=0.5,
        timeout=180,
    )

    @task
    def check(found: dict, dag_run=None) -> int:
        assert found["summary"]["test.marker"] == dag_run.conf["marker"], found
        assert found["operation"] == "append"
        return found["snapshot_id"]

    create >> wait
    check(wait.output)
