"""Durable Spark jobs, without Spark: the retry's decision (pure) and the detached process it names.

The decision is a table of (the job's ledger row, its process) -> reconnect / take the result /
start a new job; the process helpers start a real detached child (``sleep``), find it again by pid
and start time, follow its log and kill its group. The end-to-end test (a real scheduler, a
SIGKILLed task process, a retry) is ``tests/test_durable_jobs_airflow.py``.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from airflow_iceberg_provider.durable_jobs import STATE_KEY, Decision, JobRecord, Liveness, decide
from airflow_iceberg_provider.hooks import _detached


def record(**over) -> JobRecord:
    base = dict(
        job_run_id="j1",
        job="wap_write",
        mode="spark_submit",
        pid=123,
        start_ticks=456,
        host="h",
        boot_id="b",
        workdir="/tmp/airflow-iceberg-x",
        log_path="/tmp/airflow-iceberg-x/job.log",
        started_at="2026-01-01T00:00:00+00:00",
        resume={"base": 1},
        max_tries=1,
    )
    return JobRecord(**{**base, **over})


# ---------------------------------------------------------------------------------------- decision
@pytest.mark.parametrize(
    ("status", "liveness", "expected"),
    [
        ("succeeded", Liveness.ALIVE, Decision.TAKE_RESULT),  # the row is written before the exit
        ("succeeded", Liveness.GONE, Decision.TAKE_RESULT),
        ("succeeded", Liveness.OTHER_HOST, Decision.TAKE_RESULT),
        ("refused", Liveness.GONE, Decision.TAKE_RESULT),  # a verdict: the operator reports it
        ("noop", Liveness.GONE, Decision.TAKE_RESULT),
        ("failed", Liveness.GONE, Decision.RESUBMIT),
        ("failed", Liveness.ALIVE, Decision.RESUBMIT),
        (None, Liveness.ALIVE, Decision.RECONNECT),
        (None, Liveness.GONE, Decision.RESUBMIT),  # died without a verdict
        (None, Liveness.OTHER_HOST, Decision.AWAIT_LEDGER),  # never a second job beside an unseen one
    ],
)
def test_decision_follows_the_ledger_row_then_the_process(status, liveness, expected):
    assert decide(record(), status, liveness, max_tries=1) is expected


def test_no_record_a_taken_result_or_a_cleared_task_start_fresh():
    assert decide(None, None, Liveness.GONE) is Decision.FRESH
    assert decide(record().as_taken(), "succeeded", Liveness.GONE, max_tries=1) is Decision.FRESH
    # a clear gives the task instance a new try budget; a retry does not
    assert decide(record(max_tries=1), "succeeded", Liveness.GONE, max_tries=3) is Decision.FRESH
    assert decide(record(max_tries=None), "succeeded", Liveness.GONE, max_tries=3) is Decision.TAKE_RESULT
    assert decide(record(), "succeeded", Liveness.GONE, max_tries=None) is Decision.TAKE_RESULT


def test_record_round_trips_through_json_and_refuses_foreign_values():
    import json

    rec = record()
    back = JobRecord.from_json(json.loads(json.dumps(rec.to_json())))
    assert back == rec and STATE_KEY == "iceberg_spark_job"
    assert back.as_taken().taken and not back.taken
    for foreign in (None, "job-123", 42, {}, {**rec.to_json(), "version": 99}, {**rec.to_json(), "pid": "x"}):
        assert JobRecord.from_json(foreign) is None


# ------------------------------------------------------------------------------ detached processes
def _record_of(pid: int, workdir: Path) -> JobRecord:
    return record(**_detached.identity(pid), workdir=str(workdir), log_path=str(workdir / "job.log"))


def test_a_detached_job_has_its_own_session_and_is_found_by_pid_and_start_time(tmp_path):
    script = "import sys, time; print('line one', flush=True); print('line two', flush=True); time.sleep(30)"
    proc = _detached.launch([sys.executable, "-c", script], dict(os.environ), tmp_path / "job.log")
    try:
        rec = _record_of(proc.pid, tmp_path)
        assert os.getsid(proc.pid) == proc.pid != os.getsid(0)  # not in the task's session or group
        assert _detached.liveness(rec) is Liveness.ALIVE
        # a reused pid (another start time), another boot, another host: not this job
        assert _detached.liveness(record(pid=proc.pid, start_ticks=(rec.start_ticks or 0) + 1, host=rec.host)) is (
            Liveness.GONE
        )
        assert _detached.liveness(
            record(pid=proc.pid, start_ticks=rec.start_ticks, host=rec.host, boot_id="other")
        ) is (Liveness.GONE)
        assert _detached.liveness(record(pid=proc.pid, host=socket.gethostname() + "-x")) is Liveness.OTHER_HOST
        lines: list[str] = []
        follower = _detached.LogFollower(tmp_path / "job.log", lines.append)
        deadline = time.monotonic() + 20
        while len(lines) < 2 and time.monotonic() < deadline:
            follower.read()
            time.sleep(0.05)
        assert lines == ["line one", "line two"]
        t0 = time.monotonic()
        assert _detached.terminate(rec, grace_s=5)
        proc.wait(timeout=10)
        assert time.monotonic() - t0 < 5 and proc.returncode == -signal.SIGTERM
        assert _detached.liveness(rec) is Liveness.GONE
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_waiting_returns_the_exit_code_of_an_own_child_and_none_for_an_earlier_tries_job(tmp_path):
    proc = _detached.launch(
        [sys.executable, "-c", "print('done'); raise SystemExit(3)"], dict(os.environ), tmp_path / "job.log"
    )
    rec = _record_of(proc.pid, tmp_path)
    seen: list[str] = []
    assert _detached.wait(rec, _detached.LogFollower(tmp_path / "job.log", seen.append), proc=proc) == 3
    assert seen == ["done"]
    # a job this process did not start (a reconnect): polled through /proc, its exit code unknown
    other = _detached.launch(
        [sys.executable, "-c", "import time; time.sleep(1.5)"], dict(os.environ), tmp_path / "b.log"
    )
    rec = _record_of(other.pid, tmp_path)
    import threading

    reaper = threading.Thread(target=other.wait)  # init would reap an orphan; here the test is the parent
    reaper.start()
    t0 = time.monotonic()
    assert _detached.wait(rec, _detached.LogFollower(tmp_path / "b.log", seen.append)) is None
    reaper.join()
    assert 1.0 < time.monotonic() - t0 < 10


def test_the_job_owns_its_working_directory_so_the_sweep_keeps_it_while_it_runs(tmp_path):
    from airflow_iceberg_provider.hooks._workdir import create_workdir, sweep_stale_workdirs

    workdir = create_workdir(tmp_path)
    proc = _detached.launch(
        [sys.executable, "-c", "import time; time.sleep(30)"], dict(os.environ), workdir / "job.log"
    )
    try:
        _detached.hand_workdir_to(workdir, proc.pid)
        assert workdir not in sweep_stale_workdirs(tmp_path)
        assert workdir.is_dir()
    finally:
        proc.kill()
        proc.wait()
    assert workdir in sweep_stale_workdirs(tmp_path)
