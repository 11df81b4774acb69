"""Tags, legal hold, branches, a deferrable commit sensor and the on-call rollback.

One day of the ``refs.orders`` table:

1. a Spark job loads the day; the end-of-day state is tagged ``eod_<ds_nodash>``
   (kept 90 days) and placed under a **legal hold** for a case (``legal-hold-case-…``,
   never expires, recorded in the governance ledger with case id and reason);
2. an experiment branch for ML training is cut with its own retention;
3. a *bad* Spark append lands on ``main`` (negative amounts, duplicated ids);
4. a **deferrable** sensor waits — in the triggerer, not a worker slot — for that
   commit (an ``append`` stamped with this run's id), and a commit check proves the
   job really committed;
5. the on-call "undo": ``main`` is rolled back to the end-of-day tag, only allowed
   because the tag is an ancestor of ``main`` (compare-and-swap on the head the
   sensor reported).

Everything except the two Spark jobs is metadata-only (pyiceberg, no JVM).
The second demo run shows a refusal: the same legal hold cannot be moved to the
next day's snapshot, and nothing is changed.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_provider.operators.refs import (
    IcebergCommitCheckOperator,
    IcebergCreateBranchOperator,
    IcebergCreateTagOperator,
    IcebergDropBranchOperator,
    IcebergRollbackOperator,
)
from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.sensors.snapshot import IcebergSnapshotSensor

JOBS = Path(__file__).resolve().parent / "jobs"
TABLE = "refs.orders"
ORDERS_COLUMNS = {
    "order_id": "long",
    "customer_id": "string",
    "region": "string",
    "amount": "double",
    "order_ts": "timestamptz",
}

with DAG(
    dag_id="iceberg_refs",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"case_id": "LIT-2026-017"},
    tags=["iceberg", "example", "refs"],
    doc_md=__doc__,
) as dag:
    create = IcebergCreateTableOperator(
        task_id="create_orders", table=TABLE, columns=ORDERS_COLUMNS, partition_by=["day(order_ts)"]
    )
    load_day = IcebergSparkSubmitOperator(
        task_id="load_day",
        table=TABLE,
        application=str(JOBS / "append_orders.py"),
        params_for_job={"rows": 1000, "ds": "{{ ds }}", "seed": 0},
        expected_operations=["append"],
    )
    # [START howto_tag]
    tag_eod = IcebergCreateTagOperator(
        task_id="tag_end_of_day", table=TABLE, tag="eod_{{ ds_nodash }}", max_ref_age=pendulum.duration(days=90)
    )
    # [END howto_tag]
    # [START howto_legal_hold]
    hold = IcebergCreateTagOperator(
        task_id="legal_hold",
        table=TABLE,
        tag="case-{{ params.case_id | lower }}",
        legal_hold=True,
        case_id="{{ params.case_id }}",
        hold_reason="preserve orders as of the close of {{ ds }} for discovery",
    )
    # [END howto_legal_hold]
    # [START howto_branch]
    experiment = IcebergCreateBranchOperator(
        task_id="ml_training_branch",
        table=TABLE,
        branch="ml_train_{{ ds_nodash }}",
        min_snapshots_to_keep=3,
        max_snapshot_age="P7D",
        max_ref_age="P30D",
    )
    # [END howto_branch]
    bad_append = IcebergSparkSubmitOperator(
        task_id="bad_append",
        table=TABLE,
        application=str(JOBS / "append_orders.py"),
        params_for_job={"rows": 200, "ds": "{{ ds }}", "seed": 100000, "bad_rows": True},
        expected_operations=["append"],
    )
    # Waits in the triggerer. check_before_defer=False only to show the trigger path:
    # in this demo the commit already exists when the sensor starts.
    # [START howto_snapshot_sensor]
    wait_for_commit = IcebergSnapshotSensor(
        task_id="wait_for_bad_commit",
        table=TABLE,
        after_snapshot_id="{{ ti.xcom_pull(task_ids='tag_end_of_day')['snapshot_id'] }}",
        operation="append",
        summary={"airflow.run-id": "{{ run_id }}", "airflow.task-id": "bad_append"},
        deferrable=True,
        check_before_defer=False,
        poke_interval=5,
        timeout=600,
    )
    # [END howto_snapshot_sensor]
    # [START howto_commit_check]
    did_it_commit = IcebergCommitCheckOperator(
        task_id="did_the_job_commit",
        table=TABLE,
        operation="append",
        summary={"airflow.run-id": "{{ run_id }}", "airflow.task-id": "bad_append"},
        after_snapshot_id="{{ ti.xcom_pull(task_ids='tag_end_of_day')['snapshot_id'] }}",
    )
    # [END howto_commit_check]
    # [START howto_rollback]
    rollback = IcebergRollbackOperator(
        task_id="undo_bad_publish",
        table=TABLE,
        to_tag="eod_{{ ds_nodash }}",
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='wait_for_bad_commit')['snapshot_id'] }}",
    )
    # [END howto_rollback]
    drop_experiment = IcebergDropBranchOperator(
        task_id="drop_training_branch", table=TABLE, branch="ml_train_{{ ds_nodash }}"
    )

    create >> load_day >> tag_eod >> [hold, experiment] >> bad_append
    bad_append >> wait_for_commit >> did_it_commit >> rollback >> drop_experiment


def summarize(hook) -> list[str]:
    """Demo summary: refs, legal holds (with their case) and the rollbacks in the ledger."""
    lines = []
    refs = hook.refs(TABLE)
    lines.append("refs: " + ", ".join(f"{r.name}({r.type})->{r.snapshot_id}" for r in refs.values()))
    for h in hook.governance.legal_holds(TABLE):
        case = (h["details"] or {}).get("case_id")
        lines.append(f"legal hold {h['name']} pins snapshot {h['snapshot_id']} (case {case})")
    for row in hook.governance.read("ledger", table_name=TABLE, operation="rollback"):
        lines.append(
            f"rollback {row['status']}: {row['snapshot_before']} -> {row['snapshot_after']} (run {row['run_id']})"
        )
    return lines


#: How ``scripts/demo.py`` runs this DAG.
DEMO = {
    "order": 40,
    "runs": [
        {
            "label": "load, tag EOD, legal hold, bad append, deferred sensor, commit check, rollback to the tag",
            "expect": "success",
        },
        {
            "label": "next day: the same legal hold cannot be moved to the new snapshot -> refused, nothing changed",
            "expect": "failed",
        },
    ],
    "tables": [TABLE],
}
