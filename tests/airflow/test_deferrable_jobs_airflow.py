"""Deferrable durable Spark jobs under a real Airflow: ``airflow dags test`` runs the trigger inline.

One isolated Airflow (its own AIRFLOW_HOME, a copy of the pristine migrated DB) and one lake. Two
DAGs, each run with ``airflow dags test`` in a child process (Airflow 3's ``dag.test()`` defers a
task, builds the trigger from its serialized kwargs and runs it inline, then resumes the task with
``execute_complete``; it gives the task a real ``task_state_store``):

* ``deferred_compaction``: the same compaction of two identical tables, once with ``deferrable=True``
  and once waiting in the worker. The deferred task starts its detached spark-submit, records it,
  defers, and resumes on the job's ledger row: one ``replace`` commit, one job ledger row, its record
  ``taken``, the job's log tail in the task log, and an XCom equal to the waiting task's.
* ``deferred_job_dies``: the test SIGKILLs the job's process group as soon as its record is stored;
  the trigger notices at its next poll (the process is gone, there is no ledger row), and the task
  fails with the retryable error naming the job run id and its log, its record not taken, the table
  unchanged.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.airflow_procs import airflow_env, restored_environ
from tests.support.lake import create_orders_table, orders_batch

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_iceberg_provider.operators.maintenance import IcebergRewriteDataFilesOperator

with DAG("deferred_compaction", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    deferred = IcebergRewriteDataFilesOperator(
        task_id="deferred", table="db.deferred", min_input_files=2, deferrable=True
    )
    waiting = IcebergRewriteDataFilesOperator(
        task_id="waiting", table="db.waiting", min_input_files=2, deferrable=False
    )
    deferred >> waiting

with DAG("deferred_job_dies", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    IcebergRewriteDataFilesOperator(task_id="dies", table="db.dies", min_input_files=2, deferrable=True)
"""


@pytest.fixture(scope="module")
def deferred_airflow(tmp_path_factory):
    """The three tables (four small files each), the DAG file and the Airflow environment."""
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    tmp = tmp_path_factory.mktemp("deferred")
    with restored_environ("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"):
        env = airflow_env(tmp)
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"]
        hook = IcebergCatalogHook()
        hook.ensure_namespace("db")
        for table in ("db.deferred", "db.waiting", "db.dies"):
            create_orders_table(hook, table)
            for i in range(4):
                hook.load_table(table).append(orders_batch(100 * i, 20))
        dags = tmp / "dags"
        dags.mkdir()
        (dags / "deferred.py").write_text(DAG_FILE)
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
        yield env, hook, Path(env["AIRFLOW_HOME"]) / "airflow.db"


def _output(env: dict[str, str], dag_id: str, out: str) -> str:
    """The run's output, also kept beside the Airflow home for a look after a failure."""
    (Path(env["AIRFLOW_HOME"]).parent / f"{dag_id}.out").write_text(out)
    return out


def _dags_test(env: dict[str, str], dag_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "airflow", "dags", "test", dag_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _query(db: Path, sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


def _record(db: Path, dag_id: str, task_id: str) -> dict | None:
    rows = _query(
        db,
        "SELECT value FROM task_state_store WHERE dag_id = ? AND task_id = ? AND key = 'iceberg_spark_job'",
        dag_id,
        task_id,
    )
    return json.loads(rows[0][0]) if rows else None


def _xcom(db: Path, dag_id: str, task_id: str) -> dict:
    (value,) = _query(
        db, "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value'", dag_id, task_id
    )[0]
    out = json.loads(value)
    return json.loads(out) if isinstance(out, str) else out


def test_a_deferred_compaction_resumes_on_its_verdict_like_a_waiting_one(deferred_airflow):
    env, hook, db = deferred_airflow
    heads = {t: hook.ref_snapshot_id(t) for t in ("db.deferred", "db.waiting")}
    proc = _dags_test(env, "deferred_compaction")
    out = _output(env, "deferred_compaction", proc.communicate(timeout=900)[0])
    assert proc.returncode == 0, out[-4000:]
    assert "state=success" in [line for line in out.splitlines() if "DagRun Finished:" in line][-1], out[-4000:]
    assert "Deferring: the triggerer waits for Spark job rewrite_data_files" in out
    assert "[DAG TEST] running trigger in line" in out

    record = _record(db, "deferred_compaction", "deferred")
    assert record["taken"] is True
    rows = [r for r in hook.governance.read("ledger", table_name="db.deferred") if r["operation"] == "maintenance"]
    assert [r["event_id"] for r in rows] == [record["job_run_id"]]  # one job row, the recorded job's
    assert rows[0]["status"] == "succeeded" and rows[0]["snapshot_before"] == heads["db.deferred"]
    head = hook.ref_snapshot_id("db.deferred")
    assert head == rows[0]["snapshot_after"] != heads["db.deferred"]  # its commit, no other
    assert hook.snapshot("db.deferred", head).operation == "replace"
    # the job's log tail reached the task log; the working directory (its secrets) is gone
    assert f"line(s) of Spark job {record['job_run_id']}'s log" in out
    assert not Path(record["workdir"]).exists()

    deferred, waiting = _xcom(db, "deferred_compaction", "deferred"), _xcom(db, "deferred_compaction", "waiting")
    volatile = ("table", "snapshot_id", "previous_snapshot_id")
    assert deferred["rewritten_data_files"] == 4 and deferred["data_files_after"] == 1
    assert {k: v for k, v in deferred.items() if k not in volatile} == {
        k: v for k, v in waiting.items() if k not in volatile
    }
    assert (deferred["snapshot_id"], deferred["previous_snapshot_id"]) == (str(head), str(heads["db.deferred"]))


def test_a_job_killed_while_deferred_fails_the_task_retryably_and_takes_nothing(deferred_airflow):
    env, hook, db = deferred_airflow
    before = hook.metadata_location("db.dies")
    proc = _dags_test(env, "deferred_job_dies")
    try:
        deadline, record = time.monotonic() + 600, None
        while record is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            record = _record(db, "deferred_job_dies", "dies")
        assert record is not None, "the job record never appeared"
        os.killpg(record["pid"], signal.SIGKILL)  # the job's own session: spark-submit's JVM and its Python
        out = _output(env, "deferred_job_dies", proc.communicate(timeout=600)[0])
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "state=failed" in [line for line in out.splitlines() if "DagRun Finished:" in line][-1], out[-4000:]
    assert f"Spark job 'rewrite_data_files' (job_run_id={record['job_run_id']}" in out, out[-4000:]
    assert "killed before its verdict); the task's retry starts a new job" in out
    assert record["log_path"] in out
    assert "IcebergSparkJobError" in out and "AirflowFailException" not in out  # retryable
    assert _record(db, "deferred_job_dies", "dies")["taken"] is False
    assert hook.governance.read("ledger", event_id=record["job_run_id"]) == []
    assert hook.metadata_location("db.dies") == before
