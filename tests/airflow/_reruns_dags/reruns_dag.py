"""The DAG of tests/airflow/test_reruns_dag.py (#15): one WAP group loading one day of orders per run.

The test runs it several times with ``airflow dags test`` (same logical date, a new run id:
a re-triggered date), ``airflow backfill create`` and ``airflow tasks clear`` (a cleared run);
the re-run mode and the replace predicate are read at parse time (a worker parses the file when
a task starts), so one DAG and one lake serve every case:

* ``on_rerun``: ``fail`` | ``skip`` | ``replace``; ``replace_where``: a predicate; ``on_conflict``:
  ``fail`` | ``cherrypick`` (file ``$RERUNS_TMP/<name>``, else env ``RERUNS_<NAME>``);
* ``RERUNS_AUDIT=0``: no audit (the backfill case builds create -> write -> publish from the
  operators, publish with ``require_audit=False``).

``dag_run.conf``: ``rows`` (default 5), ``version`` (written into ``amount``), ``fail`` (``"yes"``:
the write's last statement raises after the rows were written to the branch).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from airflow_iceberg_provider.task_groups import wap_task_group

TABLE = "rr.orders"


def _setting(name: str, default: str) -> str:
    """``$RERUNS_TMP/<name>`` (the test switches modes between clears), else ``$RERUNS_<NAME>``."""
    path = Path(os.environ.get("RERUNS_TMP", "/nonexistent")) / name
    if path.exists():
        return path.read_text().strip()
    return os.environ.get(f"RERUNS_{name.upper()}", default)


AUDIT = os.environ.get("RERUNS_AUDIT", "1") == "1"
ON_RERUN = _setting("on_rerun", "fail")
ON_CONFLICT = _setting("on_conflict", "fail")
REPLACE_WHERE = _setting("replace_where", "") or None
#: order ids: day number of the year * 1000 + row; amount = version
SQL = [
    "INSERT INTO {table} "
    "SELECT CAST(dayofyear(DATE '{{ ds }}') * 1000 + id AS BIGINT) AS order_id, concat('c', id % 7) AS customer_id, "
    "'ca' AS region, CAST({{ dag_run.conf.get('version', 1) }} AS DOUBLE) AS amount, "
    "CAST(TIMESTAMP '{{ ds }} 12:00:00' AS TIMESTAMP) AS order_ts "
    "FROM range({{ dag_run.conf.get('rows', 5) }})",
    "SELECT CASE WHEN '{{ dag_run.conf.get('fail', '') }}' = 'yes' "
    "THEN raise_error('injected failure inside the write') END",
]

with DAG(
    dag_id="reruns",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    end_date=pendulum.datetime(2026, 1, 31, tz="UTC"),  # a scheduler (backfill test) creates no run of its own
    catchup=False,
    max_active_runs=3,
    # the backfill's concurrent Spark commits on the SQLite catalog can fail with SQLITE_BUSY_SNAPSHOT
    # (transient: IcebergSparkJobError is retried); the dags-test sequence must see its injected failure
    default_args={"retries": 0 if AUDIT else 6, "retry_delay": timedelta(seconds=2)},
) as dag:
    if AUDIT:
        wap_task_group(
            group_id="load",
            table=TABLE,
            sql=SQL,
            column_mapping={"order_id": {"unique_check": {"equal_to": 0}}},
            # judged on the interval: a re-load of 5 rows adds 5 rows, not 0 (and not 10)
            change_checks={"added_rows": {"min": 1, "max": 5}},
            on_rerun=ON_RERUN,
            replace_where=REPLACE_WHERE,
            on_conflict=ON_CONFLICT,
        )
    else:
        create = IcebergWapCreateBranchOperator(task_id="create_branch", table=TABLE)
        branch_x = "{{ ti.xcom_pull(task_ids='create_branch')['branch'] }}"
        base_x = "{{ ti.xcom_pull(task_ids='create_branch')['base_snapshot_id'] }}"
        write = IcebergWapWriteOperator(
            task_id="write",
            table=TABLE,
            branch=branch_x,
            base_snapshot_id=base_x,
            sql=SQL,
            on_rerun=ON_RERUN,
            replace_where=REPLACE_WHERE,
        )
        publish = IcebergWapPublishOperator(
            task_id="publish",
            table=TABLE,
            branch=branch_x,
            base_snapshot_id=base_x,
            on_rerun=ON_RERUN,
            audited_snapshot_id="{{ ti.xcom_pull(task_ids='write')['snapshot_id'] }}",
            on_conflict=ON_CONFLICT,
            require_audit=False,
            drop_branch=True,
        )
        create >> write >> publish
