"""The trigger a deferred durable Spark task waits on: its kwargs are the job record, its verdict is ``decide``'s.

Pure parts (serialize round-trip, the decision-to-event mapping) with real ``JobRecord`` values; the
loop itself runs with asyncio against a real SQLite catalog (its governance ledger) and a real process
of this host standing in for the job (``sleep``), so liveness, the ledger row, the timeout and a
triggerer restart are each observed, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time

import pytest
from airflow.sdk._shared.module_loading import import_string
from airflow.sdk.serde import deserialize, serialize

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.hooks import _process
from airflow_iceberg_provider.rules.durable_jobs import Decision, JobRecord, Liveness, decide
from airflow_iceberg_provider.triggers import spark_job
from airflow_iceberg_provider.triggers.spark_job import IcebergSparkJobTrigger, event_status

FAST = 0.05


def job_record(**changes) -> JobRecord:
    values = {
        "job_run_id": "7f3c0d2a9b1e4c5d8e6f0a1b2c3d4e5f",
        "job": "rewrite_data_files",
        "mode": "spark_submit",
        "pid": 4242,
        "start_ticks": 123456,
        "host": "worker-a",
        "boot_id": "0b1c2d3e-aaaa-bbbb-cccc-1234567890ab",
        "workdir": "/tmp/airflow-iceberg-job-x",
        "log_path": "/tmp/airflow-iceberg-job-x/job.log",
        "started_at": "2026-12-02T07:00:00+00:00",
        "resume": {"actions": [{"action": "rewrite_data_files", "options": {"min-input-files": "2"}}]},
        "max_tries": 2,
        "commit_ref": None,
        "commit_base": None,
    }
    return JobRecord(**{**values, **changes})


def trigger_of(record: JobRecord, **kwargs) -> IcebergSparkJobTrigger:
    return IcebergSparkJobTrigger(record=record.to_json(), table="db.orders", poll_interval=FAST, **kwargs)


# ------------------------------------------------------------------ serialize
def test_serialized_kwargs_are_the_record_and_recreate_the_same_trigger():
    record = job_record(commit_ref="audit_b", commit_base=9007199254740993)  # beyond a double's precision
    classpath, kwargs = trigger_of(record, timeout_at=1_800_000_000.5).serialize()
    assert classpath == "airflow_iceberg_provider.triggers.spark_job.IcebergSparkJobTrigger"
    assert kwargs["record"] == record.to_json()  # the trigger state IS the record: no second format
    # the path a triggerer takes: serde-encoded kwargs in the DB, decoded, the class rebuilt from them
    stored = json.loads(json.dumps(serialize(kwargs)))
    again = import_string(classpath)(**deserialize(stored))
    assert again.serialize() == (classpath, kwargs)
    assert JobRecord.from_json(again.serialize()[1]["record"]) == record


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        ({"job_run_id": "x"}, "record="),
        ({**job_record().to_json(), "version": 99}, "record="),
        (job_record(taken=True).to_json(), "record="),
    ],
)
def test_a_record_that_names_no_running_job_is_refused(record, problem):
    with pytest.raises(IcebergValidationError, match=problem) as err:
        IcebergSparkJobTrigger(record=record, table="db.orders")
    assert "task_state_store" in str(err.value)


@pytest.mark.parametrize(("kwargs", "param"), [({"timeout_at": "soon"}, "timeout_at"), ({"poll_interval": 0}, "poll")])
def test_bad_poll_arguments_are_refused_by_name(kwargs, param):
    with pytest.raises(IcebergValidationError, match=param):
        IcebergSparkJobTrigger(record=job_record().to_json(), table="db.orders", **kwargs)


# ------------------------------------------------------------------ decision -> event (pure)
@pytest.mark.parametrize(
    ("ledger", "liveness", "committed", "commit_ref", "event"),
    [
        ("succeeded", Liveness.ALIVE, False, None, spark_job.VERDICT),  # row written, process still exiting
        ("noop", Liveness.GONE, False, None, spark_job.VERDICT),
        ("refused", Liveness.OTHER_HOST, False, None, spark_job.VERDICT),
        ("failed", Liveness.GONE, False, None, spark_job.FAILED),
        (None, Liveness.ALIVE, False, None, None),  # running: keep waiting
        (None, Liveness.OTHER_HOST, False, None, None),  # another host: wait for its row
        (None, Liveness.GONE, False, None, spark_job.DIED),  # gone without a verdict
        (None, Liveness.GONE, True, "b", spark_job.VERDICT),  # an application's stamped commit
        (None, Liveness.ALIVE, True, "b", None),  # committed, still running: wait for it to exit
        (None, Liveness.OTHER_HOST, True, "b", spark_job.VERDICT),
        (None, Liveness.GONE, False, "b", spark_job.DIED),
    ],
)
def test_the_event_is_the_decision_a_retry_would_take(ledger, liveness, committed, commit_ref, event):
    record = job_record(commit_ref=commit_ref, commit_base=1 if commit_ref else None)
    decision = decide(record, ledger, liveness, committed=committed)
    assert event_status(decision, ledger) == event


def test_every_decision_maps_to_an_event_or_to_waiting():
    assert {d: event_status(d, None) for d in Decision} == {
        Decision.FRESH: spark_job.VERDICT,  # the operator re-decides in execute()
        Decision.RECONNECT: None,
        Decision.TAKE_RESULT: spark_job.VERDICT,
        Decision.RESUBMIT: spark_job.DIED,
        Decision.AWAIT_LEDGER: None,
    }


# ------------------------------------------------------------------ the loop, on a real catalog and process
@pytest.fixture
def job_process():
    """A process of this host standing in for the detached job (own session, like the real one)."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def live_record(proc: subprocess.Popen, **changes) -> JobRecord:
    return job_record(**{**_process.identity(proc.pid), **changes})


async def first_event(trigger: IcebergSparkJobTrigger, timeout: float = 20.0) -> dict:
    return (await asyncio.wait_for(anext(trigger.run()), timeout)).payload


def test_a_running_job_keeps_the_trigger_waiting_until_its_ledger_row_comes(lake, job_process):
    record = live_record(job_process)

    async def scenario() -> dict:
        task = asyncio.create_task(first_event(trigger_of(record)))
        await asyncio.sleep(0.5)
        assert not task.done(), task.result() if task.done() else None
        await asyncio.to_thread(
            lake.governance.record_ledger,
            operation="rewrite_data_files",
            table="db.orders",
            status="succeeded",
            event_id=record.job_run_id,
        )
        return await task

    event = asyncio.run(scenario())
    assert event["status"] == spark_job.VERDICT
    assert (event["job_run_id"], event["ledger_status"], event["liveness"]) == (record.job_run_id, "succeeded", "alive")


def test_a_job_killed_without_a_verdict_is_noticed_at_the_next_poll(lake, job_process):
    record = live_record(job_process)

    async def scenario() -> tuple[dict, float]:
        task = asyncio.create_task(first_event(trigger_of(record, timeout_at=time.time() + 600)))
        await asyncio.sleep(0.3)
        job_process.kill()
        await asyncio.to_thread(job_process.wait)
        t0 = time.monotonic()
        return await task, time.monotonic() - t0

    event, waited = asyncio.run(scenario())
    assert (event["status"], event["ledger_status"], event["liveness"]) == (spark_job.DIED, None, "gone")
    assert waited < 5  # not at the 600 s deadline


def test_a_job_failure_row_fails_the_wait(lake, job_process):
    record = live_record(job_process)
    lake.governance.record_ledger(operation="erasure", table="db.orders", status="failed", event_id=record.job_run_id)
    event = asyncio.run(first_event(trigger_of(record)))
    assert (event["status"], event["ledger_status"]) == (spark_job.FAILED, "failed")


def test_past_the_deadline_the_job_is_stopped_on_its_host(lake, job_process):
    record = live_record(job_process)
    event = asyncio.run(first_event(trigger_of(record, timeout_at=time.time() - 1)))
    assert (event["status"], event["killed"]) == (spark_job.TIMEOUT, True)
    assert job_process.wait(timeout=20) is not None
    assert _process.liveness(record) is Liveness.GONE


def test_a_job_on_another_host_is_waited_for_by_its_row_and_never_signalled(lake, job_process):
    record = live_record(job_process, host=f"not-{socket.gethostname()}")
    event = asyncio.run(first_event(trigger_of(record, timeout_at=time.time() + 0.3)))
    assert (event["status"], event["killed"], event["liveness"]) == (spark_job.TIMEOUT, False, "other_host")
    assert job_process.poll() is None  # the pid on this host is a stranger's: left alone


def test_a_restarted_triggerer_rebuilds_the_trigger_from_its_kwargs_and_continues(lake, job_process):
    """The triggerer dies while the job runs (its task is cancelled at an await point); a new
    triggerer builds the trigger from the stored kwargs and delivers the job's verdict."""
    record = live_record(job_process)
    classpath, kwargs = trigger_of(record).serialize()
    stored = json.loads(json.dumps(serialize(kwargs)))

    async def scenario() -> dict:
        first = asyncio.create_task(first_event(import_string(classpath)(**deserialize(stored))))
        await asyncio.sleep(0.3)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        lake.governance.record_ledger(
            operation="rewrite_data_files", table="db.orders", status="succeeded", event_id=record.job_run_id
        )
        return await first_event(import_string(classpath)(**deserialize(stored)))

    event = asyncio.run(scenario())
    assert (event["status"], event["job_run_id"]) == (spark_job.VERDICT, record.job_run_id)
    assert job_process.poll() is None  # the job was never touched by either triggerer


def test_an_application_commit_on_its_ref_is_its_verdict_once_it_exits(lake, job_process):
    """An application writes no row of its own: its snapshot on ``commit_ref`` beyond ``commit_base``
    carrying the job run id is the witness (read through the catalog hook, as a retry reads it)."""
    from airflow_iceberg_provider.rules.wap_rerun import KEY_JOB_RUN
    from tests.support.lake import create_orders_table, orders_batch

    tbl = create_orders_table(lake, "db.orders")
    tbl.append(orders_batch(0, 5))
    base = lake.ref_snapshot_id("db.orders")
    record = live_record(job_process, commit_ref="main", commit_base=base)
    tbl = lake.load_table("db.orders")
    tbl.append(orders_batch(5, 5), snapshot_properties={KEY_JOB_RUN: record.job_run_id})

    async def scenario() -> dict:
        task = asyncio.create_task(first_event(trigger_of(record)))
        await asyncio.sleep(0.3)
        assert not task.done()  # committed but still running: the retry would reconnect, so wait
        job_process.kill()
        await asyncio.to_thread(job_process.wait)
        return await task

    event = asyncio.run(scenario())
    assert (event["status"], event["committed"], event["ledger_status"]) == (spark_job.VERDICT, True, None)


def test_killing_the_deferred_task_stops_the_job_where_this_host_reaches_it(job_process):
    elsewhere = live_record(job_process, host=f"not-{socket.gethostname()}")
    asyncio.run(trigger_of(elsewhere).on_kill())
    assert job_process.poll() is None  # a pid on another host is not ours to signal
    asyncio.run(trigger_of(live_record(job_process)).on_kill())
    assert job_process.wait(timeout=20) is not None
