"""Deferrable durable Spark jobs under a real Airflow: ``airflow dags test`` runs the trigger inline.

One isolated Airflow (its own AIRFLOW_HOME, a copy of the pristine migrated DB), one lake and one
run of one DAG with ``airflow dags test`` in a child process (Airflow 3's ``dag.test()`` defers a
task, builds the trigger from its serialized kwargs and runs it inline, then resumes the task with
``execute_complete``; it gives the task a real ``task_state_store``). Three compactions:

* ``deferred`` and ``waiting``: the same compaction of two identical tables, once with
  ``deferrable=True`` and once waiting in the worker. The deferred task starts its detached
  spark-submit, records it, defers, and resumes on the job's ledger row: one ``replace`` commit, one
  job ledger row, its record ``taken``, the job's log tail in the task log, and an XCom equal to the
  waiting task's.
* ``dies``: the test SIGKILLs the job's process group as soon as its record is stored; the trigger
  notices at its next poll (the process is gone, there is no ledger row), and the task fails with the
  retryable error naming the job run id and its log, its record not taken, the table unchanged.
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
DAG_ID = "deferred_jobs"
DAG_FILE = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_iceberg_provider.operators.maintenance import IcebergRewriteDataFilesOperator

with DAG("deferred_jobs", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    dies = IcebergRewriteDataFilesOperator(task_id="dies", table="db.dies", min_input_files=2, deferrable=True)
    deferred = IcebergRewriteDataFilesOperator(
        task_id="deferred", table="db.deferred", min_input_files=2, deferrable=True
    )
    waiting = IcebergRewriteDataFilesOperator(
        task_id="waiting", table="db.waiting", min_input_files=2, deferrable=False
    )
    deferred >> waiting
"""


def _query(db: Path, sql: str, *args: object) -> list[tuple]:
    with sqlite3.connect(db, timeout=30) as conn:
        return conn.execute(sql, args).fetchall()


def _record(db: Path, task_id: str) -> dict | None:
    rows = _query(
        db,
        "SELECT value FROM task_state_store WHERE dag_id = ? AND task_id = ? AND key = 'iceberg_spark_job'",
        DAG_ID,
        task_id,
    )
    return json.loads(rows[0][0]) if rows else None


def _xcom(db: Path, task_id: str) -> dict:
    sql = "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = 'return_value'"
    out = json.loads(_query(db, sql, DAG_ID, task_id)[0][0])
    return json.loads(out) if isinstance(out, str) else out


@pytest.fixture(scope="module")
def deferred_run(tmp_path_factory):
    """The three tables (four small files each), then one ``airflow dags test`` of the DAG, with the
    ``dies`` task's job SIGKILLed as soon as its record is stored. Yields what the tests read."""
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
        before = {t: (hook.ref_snapshot_id(t), hook.metadata_location(t)) for t in ("db.deferred", "db.dies")}
        dags = tmp / "dags"
        dags.mkdir()
        (dags / "deferred.py").write_text(DAG_FILE)
        env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
        db = Path(env["AIRFLOW_HOME"]) / "airflow.db"
        proc = subprocess.Popen(
            [sys.executable, "-m", "airflow", "dags", "test", DAG_ID],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=ROOT,
        )
        try:
            deadline, killed = time.monotonic() + 600, None
            while killed is None and time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.2)
                killed = _record(db, "dies")
            if killed is not None:
                os.killpg(killed["pid"], signal.SIGKILL)  # the job's own session: spark-submit's JVM and its Python
            out = proc.communicate(timeout=900)[0]
        finally:
            if proc.poll() is None:
                proc.kill()
        (tmp / f"{DAG_ID}.out").write_text(out)  # for a look after a failure
        assert killed is not None, out[-4000:]
        states = dict(_query(db, "SELECT task_id, state FROM task_instance WHERE dag_id = ?", DAG_ID))
        yield hook, db, out, states, before, killed


def test_a_deferred_compaction_resumes_on_its_verdict_like_a_waiting_one(deferred_run):
    hook, db, out, states, before, _ = deferred_run
    assert (states["deferred"], states["waiting"]) == ("success", "success"), out[-4000:]
    assert "Deferring: the triggerer waits for Spark job maintenance" in out
    assert "[DAG TEST] running trigger in line" in out
    assert "Recorded Spark job" in out and "taking its result, no new job" in out  # a retry's TAKE_RESULT path

    record = _record(db, "deferred")
    assert record["taken"] is True
    rows = [r for r in hook.governance.read("ledger", table_name="db.deferred") if r["operation"] == "maintenance"]
    assert [r["event_id"] for r in rows] == [record["job_run_id"]]  # one job row, the recorded job's
    base = before["db.deferred"][0]
    assert rows[0]["status"] == "succeeded" and rows[0]["snapshot_before"] == base
    head = hook.ref_snapshot_id("db.deferred")
    assert head == rows[0]["snapshot_after"] != base  # its commit, no other
    assert [s.operation for s in hook.list_snapshots("db.deferred") if s.snapshot_id == head] == ["replace"]
    # the job's log tail reached the task log; the working directory (its secrets) is gone
    assert f"line(s) of Spark job {record['job_run_id']}'s log" in out
    assert "[iceberg-job] maintenance succeeded" in out
    assert not Path(record["workdir"]).exists()

    deferred, waiting = _xcom(db, "deferred"), _xcom(db, "waiting")
    volatile = ("table", "snapshot_id", "previous_snapshot_id")
    assert deferred["rewritten_data_files"] == 4 and deferred["data_files_after"] == 1
    assert {k: v for k, v in deferred.items() if k not in volatile} == {
        k: v for k, v in waiting.items() if k not in volatile
    }
    assert (deferred["snapshot_id"], deferred["previous_snapshot_id"]) == (str(head), str(base))


def test_a_job_killed_while_deferred_fails_the_task_retryably_and_takes_nothing(deferred_run):
    hook, db, out, states, before, killed = deferred_run
    assert states["dies"] == "failed", out[-4000:]
    assert f"Spark job 'maintenance' (job_run_id={killed['job_run_id']}" in out, out[-4000:]
    assert "killed before its verdict); the task's retry starts a new job" in out
    assert killed["log_path"] in out
    assert "IcebergSparkJobError" in out and "AirflowFailException" not in out  # retryable
    assert _record(db, "dies")["taken"] is False
    assert hook.governance.read("ledger", event_id=killed["job_run_id"]) == []
    assert hook.metadata_location("db.dies") == before["db.dies"][1]
