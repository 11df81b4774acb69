"""Durable Spark jobs under a real scheduler: the task process dies mid-job, the retry does not start a second job.

One API server and one LocalExecutor scheduler (own AIRFLOW_HOME) run one DAG of three durable Spark
tasks, each with ``retries=1``: a WAP write (SQL), a compaction (``rewrite_data_files``) and a
maintenance plan whose first action is the erasure purge. For each task the test waits until the
task has started its Spark job (spark-submit's JVM is running and its record is in
``task_state_store``), then SIGKILLs the *task process* (the JVM's parent, as the OOM killer would),
never the JVM. Every retry comes back 1 s later (``retry_delay``). The WAP write's and the purge's
find their job still running: they reconnect to it and follow its log. The compaction's task process
is first frozen (SIGSTOP) until its job has written its ledger row, then killed: its retry finds the
job finished and takes the result. Either way no second job starts. The take-the-result path is
also covered by the durable tests in ``tests/spark/test_durable_jobs.py`` (spark-submit) and
``tests/connect/test_spark_connect.py`` (Connect).

Per task: exactly one Spark application (counted from Spark's own event log directory, one file per
application, so a second JVM would show), one job ledger row whose ``event_id`` is the recorded job
run id, the table's ref at that row's ``snapshot_after`` (no commit by another job), the second try's
log naming its decision and never a new start, and the record marked ``taken`` (a cleared task would
start afresh).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.airflow_procs import airflow_env, api_server_and_scheduler, restored_environ
from tests.support.erasure import add_requests, append_people, create_people_table, person, set_salt_connection
from tests.support.lake import create_orders_table, fake_context, orders_batch

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

DAG_ID = "durable_spark"
TASKS = ("wap_write", "compact", "purge")
DAG_FILE = """
from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator, IcebergRewriteDataFilesOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator

EVENTS = {events!r}
INSERT = (
    "INSERT INTO {{table}} SELECT id AS order_id, CAST(id % 97 AS STRING) AS customer_id, 'ca' AS region, "
    "CAST(id % 50 AS DOUBLE) + 1.0 AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(1000, 1100)"
)


def conf(task):
    return {{"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{{EVENTS}}/{{task}}"}}


with DAG(DAG_ID := "durable_spark", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    write = IcebergWapWriteOperator(
        task_id="wap_write", table="db.wap", branch="b", sql=INSERT, spark_conf=conf("wap_write"),
        retries=1, retry_delay=timedelta(seconds=1),
    )
    compact = IcebergRewriteDataFilesOperator(
        task_id="compact", table="db.compact", min_input_files=2, spark_conf=conf("compact"),
        retries=1, retry_delay=timedelta(seconds=1),
    )
    purge = IcebergMaintenancePlanOperator(
        task_id="purge", table="db.people", actions=["rewrite_manifests"], force=True,
        erasure_purge={{"requests_table": "db.requests", "subject_columns": "customer_id"}},
        spark_conf=conf("purge"), retries=1, retry_delay=timedelta(seconds=1),
    )
    write >> compact >> purge
"""


@pytest.fixture(scope="module")
def durable_airflow(tmp_path_factory):
    """The three tables (the people table already logically erased), then API server + scheduler."""
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator

    tmp = tmp_path_factory.mktemp("durable")
    with restored_environ("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", "AIRFLOW_CONN_ERASURE_SALT"):
        env = airflow_env(tmp)
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"]
        set_salt_connection()
        env["AIRFLOW_CONN_ERASURE_SALT"] = os.environ["AIRFLOW_CONN_ERASURE_SALT"]
        hook = IcebergCatalogHook()
        create_orders_table(hook, "db.wap").append(orders_batch(0, 10))
        hook.create_branch("db.wap", "b", snapshot_id=hook.ref_snapshot_id("db.wap"))
        create_orders_table(hook, "db.compact")
        for i in range(4):  # small files to compact
            hook.load_table("db.compact").append(orders_batch(100 * i, 20))
        create_people_table(hook, "db.people")
        append_people(hook, "db.people", 2)
        add_requests(hook, "db.requests", {"R-1": person(3)})
        IcebergErasureOperator(
            task_id="logical",
            phase="logical",
            table="db.people",
            subject_columns="customer_id",
            requests_table="db.requests",
        ).execute(fake_context())
        heads = {t: hook.ref_snapshot_id(t) for t in ("db.compact", "db.people")} | {
            "db.wap": hook.ref_snapshot_id("db.wap", "b")
        }
        events = tmp / "spark-events"
        for task in TASKS:
            (events / task).mkdir(parents=True)
        dags = tmp / "dags"
        dags.mkdir()
        (dags / "durable.py").write_text(DAG_FILE.format(events=str(events)))
        with api_server_and_scheduler(
            env, dags, tmp / "logs", "durable", AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="True"
        ) as (af, _):
            yield af, hook, heads, events, tmp


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _spark_submits(marker: str) -> list[int]:
    """Pids of the job processes (spark-submit, then its JVM) whose command line carries ``marker``;
    their launcher helpers (children carrying the same arguments) are left out."""
    found = {int(p) for p in os.listdir("/proc") if p.isdigit() and marker in _cmdline(int(p))}
    return sorted(p for p in found if _ppid(p) not in found)


def _ledger_row(hook, table: str, operation: str) -> dict | None:
    """The ledger row a job of ``operation`` on ``table`` wrote, once it is written."""
    rows = [r for r in hook.governance.read("ledger", table_name=table) if r["operation"] == operation]
    return rows[0] if rows else None


def _record(af, run_id: str, task_id: str) -> dict | None:
    rows = af.query(
        "SELECT value FROM task_state_store WHERE dag_id = ? AND run_id = ? AND task_id = ? AND key = ?",
        DAG_ID,
        run_id,
        task_id,
        "iceberg_spark_job",
    )
    return json.loads(rows[0][0]) if rows else None


def _attempt_log(af, task_id: str, attempt: int) -> str:
    found = list((af.home / "logs").glob(f"dag_id={DAG_ID}/run_id=*/task_id={task_id}/attempt={attempt}.log"))
    return "\n".join(p.read_text(errors="replace") for p in found)


def test_a_killed_task_process_is_retried_into_its_running_or_finished_job(durable_airflow):
    from scripts.events_demo import wait_for

    af, hook, heads, events, tmp = durable_airflow
    t0 = time.monotonic()
    af.cli("dags", "trigger", DAG_ID)
    run_id = wait_for("the DAG run", lambda: (af.dag_runs(DAG_ID) or [{}])[-1].get("run_id"), 120)
    killed = {}
    for task in TASKS:
        marker = f"file://{events}/{task}"
        jobs = wait_for(f"the Spark job of {task}", lambda m=marker: _spark_submits(m), 600, every=0.5)
        wait_for(f"the job record of {task}", lambda t=task: _record(af, run_id, t), 60, every=0.2)
        task_pid = _ppid(jobs[0])
        assert task_pid and "spark" not in _cmdline(task_pid).lower(), _cmdline(task_pid)
        if task == "compact":  # frozen until its job committed: the retry finds a finished job
            os.kill(task_pid, signal.SIGSTOP)
            wait_for(
                "the compaction's ledger row", lambda: _ledger_row(hook, "db.compact", "maintenance"), 600, every=0.5
            )
        os.kill(task_pid, signal.SIGKILL)  # the task process only: its Spark job keeps running
        killed[task] = (jobs[0], task_pid)
    final = wait_for(
        "the DAG run to finish",
        lambda: next((r["state"] for r in af.dag_runs(DAG_ID) if r["state"] in ("success", "failed")), None),
        900,
        every=2,
    )
    logs = {t: (_attempt_log(af, t, 1), _attempt_log(af, t, 2)) for t in TASKS}
    assert final == "success", {t: second[-3000:] for t, (_, second) in logs.items()}

    tables = {"wap_write": ("db.wap", "b", "wap_write"), "compact": ("db.compact", "main", "maintenance")}
    tables["purge"] = ("db.people", "main", "maintenance_plan")
    decisions = {}
    for task, (table, ref, operation) in tables.items():
        tries = af.query("SELECT try_number, state FROM task_instance WHERE dag_id = ? AND task_id = ?", DAG_ID, task)
        assert tries == [(2, "success")], (task, tries)
        apps = sorted(p.name for p in (events / task).iterdir())
        assert len(apps) == 1, (task, apps)  # one Spark application: no second JVM
        record = _record(af, run_id, task)
        assert record["taken"] is True and record["pid"] == killed[task][0]
        rows = [r for r in hook.governance.read("ledger", table_name=table) if r["operation"] == operation]
        assert [r["event_id"] for r in rows] == [record["job_run_id"]], (task, rows)
        assert rows[0]["status"] == "succeeded" and rows[0]["snapshot_before"] == heads[table]
        assert hook.ref_snapshot_id(table, ref) == rows[0]["snapshot_after"] != heads[table]  # its commit, no other
        first, second = logs[task]
        assert "Started durable Spark job" in first
        assert "Started durable Spark job" not in second, second[-3000:]
        decision = next((d for d in ("-> reconnect", "-> take_result") if d in second), None)
        assert decision is not None, second[-3000:]
        decisions[task] = decision.removeprefix("-> ")
    # killed after its job's ledger row: the retry takes the result
    assert decisions["compact"] == "take_result", decisions
    assert "reconnect" in decisions.values(), decisions  # a retry 1 s later finds the job still running
    assert "Reconnected to running Spark job" in "".join(logs[t][1] for t in TASKS)
    # the reconnected job's output reached the retry's log
    print(f"durable DAG: {decisions} in {time.monotonic() - t0:.0f}s")
