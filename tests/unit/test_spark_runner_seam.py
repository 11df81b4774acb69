"""The runner seam: the plan's conf rules as pure functions, the handle a durable record stores,
the runners' refusals before anything is written, and the one process module's identity rules.

No Spark: the processes here are small Python children of the test.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_iceberg_provider import ICEBERG_SPARK_RUNTIME
from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.hooks import _process
from airflow_iceberg_provider.hooks._workdir import create_workdir, owner_alive, sweep_stale_workdirs
from airflow_iceberg_provider.hooks.spark_plan import (
    LOG4J_CONFIG,
    SubmitPlan,
    properties_text,
    runtime_jars,
    submit_conf,
)
from airflow_iceberg_provider.hooks.spark_runner import (
    MODE_SUBMIT,
    JobHandle,
    SparkSubmitRunner,
    SubmitTarget,
    reattached_runner,
)
from airflow_iceberg_provider.rules.durable_jobs import JobRecord, Liveness

SECRET_KEY = "spark.sql.catalog.lake.s3.secret-access-key"


def _conf(**over: object) -> dict[str, str]:
    args: dict = {
        "catalog_public": {"spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog"},
        "catalog_secret": {SECRET_KEY: "s3cr3t-value"},
        "hook_conf": {},
        "extra_conf": None,
        "cluster": False,
        "pyspark_python": None,
        **over,
    }
    return submit_conf(**args)


# ------------------------------------------------------------------------------------ the plan
def test_conf_merges_catalog_then_hook_then_job_and_never_keeps_a_secret_key():
    conf = _conf(
        hook_conf={"spark.sql.shuffle.partitions": "8", SECRET_KEY: "typed-by-a-user"},
        extra_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "true"},
    )

    assert conf["spark.sql.catalog.lake"] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf["spark.sql.shuffle.partitions"] == "2"  # the job's extra conf wins over the hook's
    assert conf["spark.ui.enabled"] == "true" and conf["spark.sql.session.timeZone"] == "UTC"
    assert SECRET_KEY not in conf  # a secret travels in the properties file only
    assert "s3cr3t-value" not in json.dumps(conf) and "typed-by-a-user" not in json.dumps(conf)
    redacted = re.compile(conf["spark.redaction.regex"])
    assert redacted.search(SECRET_KEY) and redacted.search("spark.airflow_iceberg.spec-secret.salt")
    assert not redacted.search("spark.sql.shuffle.partitions")


def test_conf_points_the_driver_at_the_log4j_file_in_place_or_by_name_in_cluster_mode():
    client = _conf()["spark.driver.extraJavaOptions"]
    cluster = _conf(cluster=True, hook_conf={"spark.driver.extraJavaOptions": "-Xss4m"})[
        "spark.driver.extraJavaOptions"
    ]

    assert f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}" in client
    assert f"-Dlog4j2.configurationFile={LOG4J_CONFIG.name}" in cluster and cluster.endswith("-Xss4m")


def test_conf_sets_the_runtime_python_unless_the_task_chose_one():
    assert _conf(pyspark_python="/opt/py")["spark.pyspark.python"] == "/opt/py"
    own = _conf(pyspark_python="/opt/py", hook_conf={"spark.pyspark.python": "/mine"})
    assert own["spark.pyspark.python"] == "/mine" and own["spark.pyspark.driver.python"] == "/opt/py"
    assert "spark.pyspark.python" not in _conf()


def test_runtime_jars_default_to_the_iceberg_runtime_package_and_add_a_jobs_own_once():
    assert runtime_jars([], []) == ([], [ICEBERG_SPARK_RUNTIME])
    assert runtime_jars(["/a.jar"], [], ["/a.jar", "/b.jar"]) == (["/a.jar", "/b.jar"], [])
    assert runtime_jars([], ["g:a:1"], ["/b.jar"]) == (["/b.jar"], ["g:a:1"])


def test_properties_text_escapes_the_secret_conf(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    (tmp_path / "spark-defaults.conf").write_text("spark.eventLog.enabled true\n")

    text = properties_text({"spark.k": "a=b:c\nd"})

    assert "spark.eventLog.enabled true" in text
    assert "spark.k=a\\=b\\:c\\nd" in text.splitlines()


# --------------------------------------------------------------------------------- the handle
def test_a_handle_round_trips_through_the_durable_record():
    handle = JobHandle(
        mode=MODE_SUBMIT,
        job_run_id="run-1",
        **_process.identity(os.getpid()),
        workdir="/tmp/airflow-iceberg-x",
        log_path="/tmp/airflow-iceberg-x/job.log",
        started_at="2026-01-01T00:00:00+00:00",
    )
    record = JobRecord(**handle.record_fields(), job="wap_write", resume={"base": 1})

    stored = JobRecord.from_json(json.loads(json.dumps(record.to_json())))

    assert stored is not None and JobHandle.of_record(stored) == handle
    assert reattached_runner(stored.mode).reattach(JobHandle.of_record(stored)) is Liveness.ALIVE  # this process


def test_reattach_and_kill_find_a_detached_job_by_pid_and_start_time(tmp_path):
    log = tmp_path / "job.log"
    proc = _process.launch([sys.executable, "-c", "print('up', flush=True); import time; time.sleep(60)"], {}, log)
    handle = JobHandle(
        MODE_SUBMIT, "run-2", **_process.identity(proc.pid), workdir=str(tmp_path), log_path=str(log), started_at=""
    )
    runner = reattached_runner(MODE_SUBMIT)
    try:
        assert runner.reattach(handle) is Liveness.ALIVE
        stranger = JobHandle.of_record(
            JobRecord(**{**handle.record_fields(), "start_ticks": (handle.start_ticks or 0) + 1}, job="j")
        )
        assert runner.reattach(stranger) is Liveness.GONE  # a reused pid is not the job
        assert runner.kill(stranger) is False and proc.poll() is None  # and is never signalled
        assert runner.kill(handle) is True
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert runner.reattach(handle) is Liveness.GONE
    assert runner.kill(handle) is False


def test_wait_follows_the_log_and_returns_the_exit_code_of_its_own_child(tmp_path):
    log = tmp_path / "job.log"
    proc = _process.launch([sys.executable, "-c", "print('one'); print('two'); raise SystemExit(3)"], {}, log)
    handle = JobHandle(
        MODE_SUBMIT,
        "run-3",
        **_process.identity(proc.pid),
        workdir=str(tmp_path),
        log_path=str(log),
        started_at="",
        process=proc,
    )
    seen: list[str] = []

    end = reattached_runner(MODE_SUBMIT).wait(handle, seen.append)

    assert end.code == 3 and seen == ["one", "two"] and end.tail == ["one", "two"]


# ------------------------------------------------------------------------------- the runners
def _plan(tmp_path: Path, **over: object) -> SubmitPlan:
    app = tmp_path / "app.py"
    app.write_text("print('hi')\n")
    values: dict = {
        "application": str(app),
        "name": "t",
        "conf": {},
        "secret_conf": {},
        "jars": [],
        "packages": [],
        "py_files": [],
        "env_vars": {},
        **over,
    }
    return SubmitPlan(**values)


def test_spark_submit_refuses_a_missing_connection_naming_how_to_create_it(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_CONN_NO_SUCH_SPARK", raising=False)
    runner = SparkSubmitRunner(SubmitTarget(conn_id="no_such_spark", deploy_mode="client"), log=None)

    with pytest.raises(IcebergConnectionError, match=r"'no_such_spark' does not exist; create it, e.g. AIRFLOW_CONN_"):
        runner.check(_plan(tmp_path), detached=False)


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"jars": ["/nowhere/iceberg.jar"]}, r"Spark jars not found: \['/nowhere/iceberg.jar'\]; fix"),
        ({"application": "/nowhere/app.py"}, r"Spark application '/nowhere/app.py' does not exist"),
    ],
)
def test_spark_submit_refuses_missing_files_before_anything_runs(tmp_path, monkeypatch, over, message):
    monkeypatch.setenv("AIRFLOW_CONN_SEAM_SPARK", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    runner = SparkSubmitRunner(SubmitTarget(conn_id="seam_spark", deploy_mode="client"), log=None)

    with pytest.raises(IcebergConnectionError, match=message):
        runner.check(_plan(tmp_path, **over), detached=False)


def test_a_cluster_mode_job_cannot_be_durable_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SEAM_YARN", json.dumps({"conn_type": "spark", "host": "yarn"}))
    runner = SparkSubmitRunner(SubmitTarget(conn_id="seam_yarn", deploy_mode="cluster"), log=None)

    runner.check(_plan(tmp_path), detached=False)  # attached: the provider's hook tracks the driver
    assert not runner.can_detach()
    with pytest.raises(IcebergConnectionError, match=r"asks for cluster mode. Use client mode or durable=False"):
        runner.check(_plan(tmp_path), detached=True)


# ------------------------------------------------------------------------ the process module
def test_an_unreaped_child_is_gone_for_a_job_but_still_owns_its_directory(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    who = _process.ProcessId(**_process.identity(proc.pid))
    deadline = time.monotonic() + 10
    while _process.liveness(who) is Liveness.ALIVE and time.monotonic() < deadline:  # exits, not reaped
        time.sleep(0.05)
    try:
        assert _process.liveness(who) is Liveness.GONE  # a job that exited has ended
        assert _process.liveness(who, until_reaped=True) is Liveness.ALIVE  # its parent may still read its log
        assert owner_alive({**_process.identity(proc.pid), "created": 0.0})
    finally:
        proc.wait()
    assert not owner_alive({**who.__dict__})
    assert _process.ProcessId.of({"pid": "x", "host": "h"}) is None


def test_the_sweep_keeps_a_running_owners_directory_and_removes_a_dead_ones(tmp_path):
    mine = create_workdir(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_owner = {**_process.identity(proc.pid), "created": 0.0}
    proc.wait()
    theirs = tmp_path / "airflow-iceberg-dead"
    theirs.mkdir(mode=0o700)
    (theirs / "owner.json").write_text(json.dumps(dead_owner))

    assert sweep_stale_workdirs(tmp_path) == [theirs]
    assert mine.exists() and not theirs.exists()


def test_stop_child_terminates_then_kills_a_child_that_ignores_sigterm():
    polite = _process.spawn_with_parent([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ))
    stubborn = _process.spawn_with_parent(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
            "time.sleep(60)",
        ],
        dict(os.environ),
    )
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline().strip() == "ready"
        assert _process.stop_child(polite, grace_s=10) and polite.returncode == -signal.SIGTERM
        t0 = time.monotonic()
        assert _process.stop_child(stubborn, grace_s=0.5)
        stubborn.wait(timeout=10)
        assert stubborn.returncode == -signal.SIGKILL and time.monotonic() - t0 >= 0.5
        assert _process.stop_child(polite) is False  # already gone: nothing signalled
    finally:
        for proc in (polite, stubborn):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
