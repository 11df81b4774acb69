"""Durable Spark jobs: the retry's decision (pure), the detached process it names, and the WAP write's retry.

The decision is a table of (the job's ledger row, an application's commit, its process) -> reconnect /
take the result / start a new job; the process helpers start a real detached child (``sleep``), find
it again by pid and start time, follow its log and kill its group. The WAP write's retry is checked on
a real ledger without Spark (a job on another host, an application taken from its stamped commit or
started again) and, ``spark``-marked, end to end: the task process is SIGKILLed while its SQL or
application job runs, and the retry takes that job's one commit. The test under a real scheduler is
``tests/airflow/test_durable_jobs_airflow.py``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from airflow_iceberg_provider.hooks import _process
from airflow_iceberg_provider.rules.durable_jobs import STATE_KEY, Decision, JobRecord, Liveness, decide
from tests.support.task_state import child_env


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


@pytest.mark.parametrize(
    ("status", "committed", "liveness", "expected"),
    [
        (None, True, Liveness.GONE, Decision.TAKE_RESULT),  # its commit is its result; the retry writes its row
        (None, True, Liveness.OTHER_HOST, Decision.TAKE_RESULT),
        (None, True, Liveness.ALIVE, Decision.RECONNECT),  # still running: wait for it to exit
        (None, False, Liveness.GONE, Decision.RESUBMIT),  # died before committing: reset the branch, run again
        (None, False, Liveness.ALIVE, Decision.RECONNECT),
        (None, False, Liveness.OTHER_HOST, Decision.AWAIT_LEDGER),  # its row or its commit may still come
        ("succeeded", False, Liveness.GONE, Decision.TAKE_RESULT),  # an application under run_job wrote its row
        ("failed", True, Liveness.GONE, Decision.RESUBMIT),  # a commit then a failure: the branch reset drops it
    ],
)
def test_an_application_job_is_witnessed_by_its_commit_when_it_wrote_no_ledger_row(
    status, committed, liveness, expected
):
    app = record(commit_ref="wap_b", commit_base=7)
    assert decide(app, status, liveness, max_tries=1, committed=committed) is expected


def test_a_built_in_jobs_decision_ignores_commits():
    # only its own ledger row witnesses a built-in job (its commits may precede a failure it records)
    assert decide(record(), None, Liveness.GONE, committed=True) is Decision.RESUBMIT
    assert decide(record(), None, Liveness.OTHER_HOST, committed=True) is Decision.AWAIT_LEDGER


def test_no_record_a_taken_result_or_a_cleared_task_start_fresh():
    assert decide(None, None, Liveness.GONE) is Decision.FRESH
    assert decide(record().as_taken(), "succeeded", Liveness.GONE, max_tries=1) is Decision.FRESH
    # a clear gives the task instance a new try budget; a retry does not
    assert decide(record(max_tries=1), "succeeded", Liveness.GONE, max_tries=3) is Decision.FRESH
    assert decide(record(max_tries=None), "succeeded", Liveness.GONE, max_tries=3) is Decision.TAKE_RESULT
    assert decide(record(), "succeeded", Liveness.GONE, max_tries=None) is Decision.TAKE_RESULT


def test_record_round_trips_through_json_and_refuses_foreign_values():
    rec = record()
    back = JobRecord.from_json(json.loads(json.dumps(rec.to_json())))
    assert back == rec and STATE_KEY == "iceberg_spark_job"
    app = record(commit_ref="wap_b", commit_base=2**62)
    assert JobRecord.from_json(json.loads(json.dumps(app.to_json()))) == app
    older = {k: v for k, v in rec.to_json().items() if k not in ("commit_ref", "commit_base")}
    assert JobRecord.from_json(older) == rec  # a record written before applications were durable
    assert back.as_taken().taken and not back.taken
    for foreign in (None, "job-123", 42, {}, {**rec.to_json(), "version": 99}, {**rec.to_json(), "pid": "x"}):
        assert JobRecord.from_json(foreign) is None


# ------------------------------------------------------------------------------ detached processes
def _record_of(pid: int, workdir: Path) -> JobRecord:
    return record(**_process.identity(pid), workdir=str(workdir), log_path=str(workdir / "job.log"))


def test_a_detached_job_has_its_own_session_and_is_found_by_pid_and_start_time(tmp_path):
    script = "import sys, time; print('line one', flush=True); print('line two', flush=True); time.sleep(30)"
    proc = _process.launch([sys.executable, "-c", script], dict(os.environ), tmp_path / "job.log")
    try:
        rec = _record_of(proc.pid, tmp_path)
        assert os.getsid(proc.pid) == proc.pid != os.getsid(0)  # not in the task's session or group
        assert _process.liveness(rec) is Liveness.ALIVE
        # a reused pid (another start time), another boot, another host: not this job
        assert _process.liveness(record(pid=proc.pid, start_ticks=(rec.start_ticks or 0) + 1, host=rec.host)) is (
            Liveness.GONE
        )
        assert _process.liveness(record(pid=proc.pid, start_ticks=rec.start_ticks, host=rec.host, boot_id="other")) is (
            Liveness.GONE
        )
        assert _process.liveness(record(pid=proc.pid, host=socket.gethostname() + "-x")) is Liveness.OTHER_HOST
        lines: list[str] = []
        follower = _process.LogFollower(tmp_path / "job.log", lines.append)
        deadline = time.monotonic() + 20
        while len(lines) < 2 and time.monotonic() < deadline:
            follower.read()
            time.sleep(0.05)
        assert lines == ["line one", "line two"]
        t0 = time.monotonic()
        assert _process.terminate(rec, grace_s=5)
        proc.wait(timeout=10)
        assert time.monotonic() - t0 < 5 and proc.returncode == -signal.SIGTERM
        assert _process.liveness(rec) is Liveness.GONE
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_waiting_returns_the_exit_code_of_an_own_child_and_none_for_an_earlier_tries_job(tmp_path):
    proc = _process.launch(
        [sys.executable, "-c", "print('done'); raise SystemExit(3)"], dict(os.environ), tmp_path / "job.log"
    )
    rec = _record_of(proc.pid, tmp_path)
    seen: list[str] = []
    assert _process.wait(rec, _process.LogFollower(tmp_path / "job.log", seen.append), proc=proc) == 3
    assert seen == ["done"]
    # a job this process did not start (a reconnect): polled through /proc, its exit code unknown
    other = _process.launch(
        [sys.executable, "-c", "import time; time.sleep(1.5)"], dict(os.environ), tmp_path / "b.log"
    )
    rec = _record_of(other.pid, tmp_path)
    import threading

    reaper = threading.Thread(target=other.wait)  # init would reap an orphan; here the test is the parent
    reaper.start()
    t0 = time.monotonic()
    assert _process.wait(rec, _process.LogFollower(tmp_path / "b.log", seen.append)) is None
    reaper.join()
    assert 1.0 < time.monotonic() - t0 < 10


def test_the_job_owns_its_working_directory_so_the_sweep_keeps_it_while_it_runs(tmp_path):
    from airflow_iceberg_provider.hooks._workdir import create_workdir, hand_workdir_to, sweep_stale_workdirs

    workdir = create_workdir(tmp_path)
    proc = _process.launch([sys.executable, "-c", "import time; time.sleep(30)"], dict(os.environ), workdir / "job.log")
    try:
        hand_workdir_to(workdir, proc.pid)
        assert workdir not in sweep_stale_workdirs(tmp_path)
        assert workdir.is_dir()
    finally:
        proc.kill()
        proc.wait()
    assert workdir in sweep_stale_workdirs(tmp_path)


# ------------------------------------------------- the WAP write's retry, without Spark (real ledger)
T = "db.orders"
ONE_HOST_TO_ANOTHER = socket.gethostname() + "-elsewhere"


class DictStore:
    """The ``task_state_store`` contract (get / set of JSON values)."""

    def __init__(self, value: dict | None = None) -> None:
        self.data = {STATE_KEY: value} if value is not None else {}

    def get(self, key, default=None):
        return self.data.get(key, default)

    def set(self, key, value, **_):
        self.data[key] = value


def retry_context(store: DictStore) -> dict:
    from tests.support.lake import fake_context

    ctx = fake_context(run_id="manual__durable", task_id="write", try_number=2)
    ctx["ti"].max_tries = 1
    return {**ctx, "task_state_store": store}


@pytest.fixture
def branch_lake(lake, monkeypatch):
    """``db.orders`` with ``main`` at a base snapshot and branch ``b`` cut there; no Spark job may start."""
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook
    from tests.support.lake import create_orders_table, orders_batch

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", '{"conn_type": "spark", "host": "local[2]"}')
    for verb in ("start_detached", "submit"):
        monkeypatch.setattr(IcebergSparkHook, verb, lambda *a, **k: pytest.fail("a second Spark job was started"))
    create_orders_table(lake, T).append(orders_batch(0, 10))
    base = lake.ref_snapshot_id(T)
    lake.create_branch(T, "b", snapshot_id=base)
    return lake, base


def earlier_try(base: int, **over) -> dict:
    """The record of the killed try's job: its before-state as the WAP write stores it."""
    resume = {"branch": "b", "base": base, "main_before": base, "reset_from": None, "rerun": {"action": "write"}}
    values = dict(job_run_id=uuid.uuid4().hex, resume={**resume, "interval": "d/g/2026-01-01"}, max_tries=1)
    return record(**{**values, **over}).to_json()


def job_commit(hook, job_run_id: str | None, start: int = 100) -> int:
    """What the killed try's job committed on the branch (stamped with its job run id, if given)."""
    from airflow_iceberg_provider.rules import wap_rerun as rerun
    from tests.support.lake import orders_batch

    props = {rerun.KEY_INTERVAL: "d/g/2026-01-01", **({rerun.KEY_JOB_RUN: job_run_id} if job_run_id else {})}
    hook.load_table(T).append(orders_batch(start, 5), snapshot_properties=props, branch="b")
    return hook.ref_snapshot_id(T, "b")


def write_op(**kw):
    from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator

    return IcebergWapWriteOperator(task_id="write", table=T, branch="b", **kw)


def gone_pid() -> dict:
    """The identity of a process of this host that has exited."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    who = _process.identity(proc.pid)
    proc.kill()
    proc.wait()
    return who


def test_a_job_on_another_host_is_awaited_through_its_ledger_row_never_started_twice(branch_lake):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    hook, base = branch_lake
    rec = earlier_try(base, host=ONE_HOST_TO_ANOTHER)
    head = job_commit(hook, rec["job_run_id"])

    def the_job_finishes():  # its row arrives while the retry waits (another hook: another process's view)
        time.sleep(1.5)
        IcebergCatalogHook().governance.record_ledger(
            operation="wap_write",
            table=T,
            ref="b",
            status="succeeded",
            snapshot_before=base,
            snapshot_after=head,
            event_id=rec["job_run_id"],
        )

    writer = threading.Thread(target=the_job_finishes)
    writer.start()
    t0 = time.monotonic()
    try:
        out = write_op(sql="INSERT INTO {table} SELECT 1").execute(retry_context(DictStore(rec)))
    finally:
        writer.join()
    assert 1.0 < time.monotonic() - t0 < 30
    assert out["job_run_id"] == rec["job_run_id"] and out["snapshot_id"] == str(head) and out["added_records"] == 5
    rows = hook.governance.read("ledger", table_name=T)
    assert [r["event_id"] for r in rows] == [rec["job_run_id"]]  # the job's row, no other
    assert hook.ref_snapshot_id(T, "b") == head


def test_a_job_on_another_host_that_never_reports_fails_naming_the_wait_option(branch_lake, monkeypatch):
    from airflow_iceberg_provider.exceptions import IcebergSparkJobError

    hook, base = branch_lake
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__DURABLE_REMOTE_WAIT_SECONDS", "1")
    rec = earlier_try(base, host=ONE_HOST_TO_ANOTHER)
    before = hook.metadata_location(T)
    t0 = time.monotonic()
    with pytest.raises(IcebergSparkJobError) as err:
        write_op(sql="INSERT INTO {table} SELECT 1").execute(retry_context(DictStore(rec)))
    assert time.monotonic() - t0 < 10
    message = str(err.value)
    assert rec["job_run_id"] in message and ONE_HOST_TO_ANOTHER in message
    assert "durable_remote_wait_seconds" in message and "after waiting 1s" in message
    assert hook.metadata_location(T) == before and hook.governance.read("ledger", table_name=T) == []


def test_an_application_killed_after_its_commit_is_taken_from_the_catalog_and_recorded_once(branch_lake):
    hook, base = branch_lake
    rec = earlier_try(base, **gone_pid(), commit_ref="b", commit_base=base)
    head = job_commit(hook, rec["job_run_id"])
    store = DictStore(rec)
    for _ in range(2):  # a second retry (the record was not marked taken) takes the same result
        out = write_op(application="/nonexistent/app.py").execute(retry_context(store))
        assert out["job_run_id"] == rec["job_run_id"] and out["snapshot_id"] == str(head)
        assert out["added_records"] == 5 and out["rerun"] == {"action": "write"}
    (row,) = hook.governance.read("ledger", table_name=T)  # the row the killed task never wrote, once
    assert (row["event_id"], row["status"], row["operation"]) == (rec["job_run_id"], "succeeded", "wap_write")
    assert (row["snapshot_before"], row["snapshot_after"]) == (base, head)
    assert json.loads(row["details"])["wap_interval"] == "d/g/2026-01-01"
    assert hook.ref_snapshot_id(T, "b") == head


def test_an_application_gone_without_its_stamped_commit_is_started_again_on_the_reset_branch(branch_lake, monkeypatch):
    from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator

    hook, base = branch_lake
    rec = earlier_try(base, **gone_pid(), commit_ref="b", commit_base=base)
    job_commit(hook, None)  # a commit without this job's id (an application that ignores the properties)
    seen: dict = {}

    def fresh_job(self, context, application, spec, **kw):
        seen.update(branch_head=hook.ref_snapshot_id(T, "b"), spec=spec, **kw)
        raise RuntimeError("stop before Spark")

    monkeypatch.setattr(IcebergWapWriteOperator, "run_application", fresh_job)
    with pytest.raises(RuntimeError, match="stop before Spark"):
        write_op(application="/nonexistent/app.py").execute(retry_context(DictStore(rec)))
    assert seen["branch_head"] == base  # reset first: the retry's job cannot duplicate rows
    job_run_id = seen["spec"]["job_run_id"]
    assert job_run_id != rec["job_run_id"] and (seen["ref"], seen["base"]) == ("b", base)
    assert seen["spec"]["snapshot_properties"]["airflow.job-run-id"] == job_run_id
    assert seen["resume"]["base"] == base and seen["resume"]["interval"] == "test_dag//run:manual__durable"


# ------------------------------------------------------------- the application write, with Spark
_APP_TASK = """
import json, sys

from tests.support.task_state import file_store_context

from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator

SQL = (
    "INSERT INTO {table} SELECT id, CAST(id AS STRING), 'ca', 1.0, TIMESTAMP '2026-01-05 00:00:00' "
    "FROM range(5000, 5100)"
)


def context(store, try_number=1):
    return file_store_context(store, "app_write", try_number)


def operator(table, application, gate, events):
    write = dict(application=application, params_for_job={"gate": gate, "start": 5000, "rows": 100})
    if application is None:
        write = dict(sql=SQL)
    return IcebergWapWriteOperator(
        task_id="app_write",
        table=table,
        branch="b",
        spark_conf={"spark.eventLog.enabled": "true", "spark.eventLog.dir": "file://" + events},
        **write,
    )


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    operator(**args["operator"]).execute(context(args["store"]))
"""


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["application", "sql"])
def test_a_wap_write_outlives_its_killed_task_and_the_retry_takes_its_one_commit(kind, branch_lake, tmp_path):
    """The task process is SIGKILLed while its job runs; the retry reconnects to it (or, for SQL, may find
    it finished) and takes its result: one Spark application, one commit, one ledger row.

    The application writes no ledger row and waits for a gate the test opens while the retry follows
    it: the retry sees its stamped commit, takes it and writes its row. The SQL job writes its own row.
    """
    import importlib.util

    hook, base = branch_lake  # in this process (the retry) no Spark job may start; the first try's may
    script, store, gate, events = (tmp_path / n for n in ("app_task.py", "state.json", "gate", "events"))
    events.mkdir()
    script.write_text(_APP_TASK)
    app = Path(__file__).parents[1] / "jobs" / "stamped_append.py" if kind == "application" else None
    args = {
        "store": str(store),
        "operator": {"table": T, "application": app and str(app), "gate": str(gate), "events": str(events)},
    }
    task = subprocess.Popen([sys.executable, str(script), json.dumps(args)], env=child_env())
    deadline = time.monotonic() + 180
    while not store.exists() and time.monotonic() < deadline and task.poll() is None:
        time.sleep(0.1)
    assert store.exists(), "the task recorded no job"
    task.send_signal(signal.SIGKILL)  # the task process only, as the OOM killer would
    task.wait()
    rec = JobRecord.from_json(json.loads(store.read_text())[STATE_KEY])
    assert rec is not None
    if kind == "application":
        assert (rec.commit_ref, rec.commit_base) == ("b", base)
        assert _process.liveness(rec) is Liveness.ALIVE  # it waits for the gate: it did not die with its task
        assert hook.ref_snapshot_id(T, "b") == base
    else:  # the SQL job did not die with its task either (it may have finished already)
        assert rec.commit_ref is None
        assert _process.liveness(rec) is Liveness.ALIVE or hook.governance.read("ledger", event_id=rec.job_run_id)

    spec = importlib.util.spec_from_file_location("app_task", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    opener = threading.Timer(2.0, gate.touch)  # the job commits while the retry follows it
    opener.start()
    try:
        out = module.operator(**args["operator"]).execute(module.context(str(store), try_number=2))  # the retry
    finally:
        opener.cancel()

    assert out["job_run_id"] == rec.job_run_id and out["added_records"] == 100  # its result, no second job
    assert len(list(events.iterdir())) == 1  # one Spark application
    snaps = [s for s in hook.load_table(T).snapshots() if s.snapshot_id != base]
    assert [str(s.snapshot_id) for s in snaps] == [out["snapshot_id"]]  # exactly one commit, on the branch
    assert str(hook.ref_snapshot_id(T, "b")) == out["snapshot_id"]
    assert snaps[0].summary["airflow.job-run-id"] == rec.job_run_id
    (row,) = hook.governance.read("ledger", table_name=T)  # the application's: written by the retry, once
    assert (row["event_id"], row["status"], row["snapshot_after"]) == (
        rec.job_run_id,
        "succeeded",
        int(out["snapshot_id"]),
    )
    assert not Path(rec.workdir).exists()  # the finished job's directory (secrets, log) is gone
