"""Deferrable durable Spark operators without Spark: when they defer, what they defer with, how they resume.

A real SQLite catalog holds the table and the governance ledger; a real process of this host (``sleep``)
stands in for the detached job; ``task_state_store`` is the file-backed store the durable-job tests
share. The end-to-end run with a real Spark job and a real Airflow is ``tests/airflow/test_deferrable_jobs_airflow.py``.
"""

from __future__ import annotations

import json
import socket
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_iceberg_provider.exceptions import IcebergSparkJobError, IcebergValidationError
from airflow_iceberg_provider.hooks import _process
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook
from airflow_iceberg_provider.operators.maintenance import IcebergRewriteDataFilesOperator
from airflow_iceberg_provider.rules.durable_jobs import STATE_KEY, JobRecord, Liveness
from airflow_iceberg_provider.triggers.spark_job import IcebergSparkJobTrigger
from tests.support.lake import append_batches, create_orders_table
from tests.support.task_state import FileStore, file_store_context

NO_SPARK = {"spark_conn_id": "no_such_spark_conn"}


@pytest.fixture
def job_process():
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def stored_record(store: Path, proc: subprocess.Popen, tmp_path: Path, **changes) -> JobRecord:
    """A job record as ``start_detached`` writes it, for ``proc``, stored in the task's state."""
    workdir = tmp_path / "airflow-iceberg-job-test"
    workdir.mkdir(exist_ok=True)
    (workdir / "job.log").write_text("".join(f"job line {i}\n" for i in range(300)) + "[iceberg-job] done\n")
    record = JobRecord(
        **_process.identity(proc.pid),
        job_run_id="0123456789abcdef0123456789abcdef",
        job="rewrite_data_files",
        mode="spark_submit",
        workdir=str(workdir),
        log_path=str(workdir / "job.log"),
        started_at="2026-12-02T07:00:00+00:00",
        resume={"actions": []},
        max_tries=1,
    )
    record = JobRecord(**{**record.to_json(), **changes})
    FileStore(store).set(STATE_KEY, record.to_json())
    return record


def compaction(**kwargs) -> IcebergRewriteDataFilesOperator:
    return IcebergRewriteDataFilesOperator(task_id="compact", table="db.orders", **NO_SPARK, **kwargs)


@pytest.mark.parametrize("value", ["yes", "1", 1, ""])
def test_a_deferrable_that_is_not_a_flag_changes_nothing(lake, tmp_path, value):
    create_orders_table(lake, "db.orders", partition_by=())
    append_batches(lake, "db.orders", 3)
    before = lake.metadata_location("db.orders")
    store = tmp_path / "state.json"
    with pytest.raises(IcebergValidationError, match=r"^deferrable=.* is not a boolean flag; pass True or False"):
        compaction(deferrable=value).execute(file_store_context(store, "compact"))
    assert lake.metadata_location("db.orders") == before
    assert not store.exists()  # no job started, none recorded
    assert [r for r in lake.governance.read("ledger") if r["operation"].startswith("maintenance")] == []


def test_a_retry_finding_its_job_running_defers_on_the_stored_record(lake, tmp_path, job_process):
    store = tmp_path / "state.json"
    record = stored_record(store, job_process, tmp_path)
    op = compaction(deferrable=True, execution_timeout=timedelta(minutes=30))
    with pytest.raises(TaskDeferred) as deferred:
        op.resume_spark_job(file_store_context(store, "compact", try_number=2))
    trigger = deferred.value.trigger
    assert isinstance(trigger, IcebergSparkJobTrigger)
    assert deferred.value.method_name == "execute_complete"
    kwargs = trigger.serialize()[1]
    assert kwargs["record"] == FileStore(store).get(STATE_KEY) == record.to_json()  # the state is the record
    assert kwargs["table"] == "db.orders" and kwargs["timeout_at"] is not None
    assert job_process.poll() is None  # the job runs on


def test_a_retry_whose_job_runs_on_another_host_defers_with_the_remote_wait_deadline(
    lake, tmp_path, job_process, monkeypatch
):
    import time

    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__DURABLE_REMOTE_WAIT_SECONDS", "120")
    store = tmp_path / "state.json"
    stored_record(store, job_process, tmp_path, host=f"not-{socket.gethostname()}")
    with pytest.raises(TaskDeferred) as deferred:
        compaction(deferrable=True).resume_spark_job(file_store_context(store, "compact", try_number=2))
    assert 100 < deferred.value.trigger.serialize()[1]["timeout_at"] - time.time() <= 120


def test_deferrable_without_a_task_state_store_waits_in_the_worker(lake):
    """No record, no deferral: the run is not durable, so the operator takes the attached path."""
    op = compaction(deferrable=True)
    assert op._durable_store({"ti": None}) is None
    assert op._defers(None) is False


def test_a_died_event_fails_retryably_naming_the_job_and_its_log_and_takes_nothing(lake, tmp_path, job_process):
    store = tmp_path / "state.json"
    record = stored_record(store, job_process, tmp_path)
    job_process.kill()
    job_process.wait()
    context = file_store_context(store, "compact")
    with pytest.raises(IcebergSparkJobError) as err:
        compaction(deferrable=True).execute_complete(context, {"status": "died", "job_run_id": record.job_run_id})
    message = str(err.value)
    assert record.job_run_id in message and record.log_path in message and "retry starts a new job" in message
    assert JobRecord.from_json(FileStore(store).get(STATE_KEY)) == record  # not taken
    # ... and the retry then starts a new job (a fresh plan), as for a job killed under a waiting task
    retry = file_store_context(store, "compact", try_number=2)
    assert compaction(deferrable=True).resume_spark_job(retry) is None
    assert not Path(record.workdir).exists()  # the dead job's directory (its secrets) is gone


def test_a_timeout_event_stops_the_job_and_fails_the_task(lake, tmp_path, job_process):
    store = tmp_path / "state.json"
    record = stored_record(store, job_process, tmp_path)
    event = {"status": "timeout", "job_run_id": record.job_run_id, "killed": False}  # a triggerer on another host
    with pytest.raises(IcebergSparkJobError, match="had no verdict by the deadline.*it was stopped"):
        compaction(deferrable=True).execute_complete(file_store_context(store, "compact"), event)
    assert job_process.wait(timeout=20) is not None
    assert _process.liveness(record) is Liveness.GONE
    assert not JobRecord.from_json(FileStore(store).get(STATE_KEY)).taken


def test_an_event_for_another_job_than_the_recorded_one_is_refused(lake, tmp_path, job_process):
    store = tmp_path / "state.json"
    stored_record(store, job_process, tmp_path)
    with pytest.raises(IcebergSparkJobError, match="no longer this task's recorded job"):
        compaction(deferrable=True).execute_complete(
            file_store_context(store, "compact"), {"status": "verdict", "job_run_id": "f" * 32}
        )
    assert job_process.poll() is None


def test_the_log_tail_is_copied_when_readable_here(lake, tmp_path, job_process):
    record = stored_record(tmp_path / "state.json", job_process, tmp_path)
    lines: list[str] = []
    assert IcebergSparkHook(spark_conn_id="no_such_spark_conn").job_log_tail(record, lines.append, lines=50)
    assert lines[-1] == "[iceberg-job] done" and lines[0] == "job line 251" and len(lines) == 50
    elsewhere = JobRecord(**{**record.to_json(), "host": f"not-{socket.gethostname()}"})
    assert not IcebergSparkHook(spark_conn_id="no_such_spark_conn").job_log_tail(elsewhere, lines.append)


def test_a_connect_job_defers_with_its_connection_timeout_as_the_deadline(monkeypatch, tmp_path, job_process):
    """A durable Spark Connect job is a detached client process too (the runtime's Python on 3.5, the
    Airflow environment's own on 4.1): it defers like spark-submit, its connection's timeout a limit."""
    conn = {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002, "extra": {"timeout": 120}}
    monkeypatch.setenv("AIRFLOW_CONN_CONNECT_TEST", json.dumps(conn))
    record = stored_record(tmp_path / "state.json", job_process, tmp_path, mode="spark_connect")
    assert IcebergSparkHook(spark_conn_id="connect_test").detached_time_limit(record) == 120
    assert IcebergSparkHook(spark_conn_id="no_such_spark_conn").detached_time_limit(record) is None
