"""A real Airflow for the ``airflow`` tests: its own AIRFLOW_HOME (SQLite metadata DB) and processes.

* :func:`airflow_env` / :func:`fresh_airflow_home`: an isolated AIRFLOW_HOME holding a copy of the
  pristine migrated DB (``scripts/bootstrap.sh``), and the environment of a fresh lake beside it.
* :func:`api_server_and_scheduler`: the settings a scheduler with its own API server needs on one
  SQLite DB, ``airflow dags reserialize``, then an API server and a scheduler
  (``scripts/events_demo.AirflowProcesses``), stopped when the block ends.
* :func:`start_group` / :func:`stop_group`: an ``airflow`` command in a process group of its own with
  a log file; stopped with SIGTERM to the group, then SIGKILL.
* :func:`airflow_cli`: an ``airflow`` command retried while the scheduler holds the DB.
* :func:`restored_environ`: ``os.environ`` keys a fixture sets for this process, put back at exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.lake import catalog_conn_json, pristine_airflow_db

if TYPE_CHECKING:
    from scripts.events_demo import AirflowProcesses


def fresh_airflow_home(home: Path) -> Path:
    """``home`` created with a copy of the pristine migrated Airflow DB; returns ``home``."""
    home.mkdir()
    shutil.copy(pristine_airflow_db(), home / "airflow.db")
    return home


def airflow_env(tmp_path: Path) -> dict[str, str]:
    """An isolated AIRFLOW_HOME (copy of the migrated DB) and a fresh lake."""
    home = fresh_airflow_home(tmp_path / "airflow")
    (tmp_path / "wh").mkdir()
    env = {**os.environ, "AIRFLOW_HOME": str(home)}
    env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp_path / "c.db", tmp_path / "wh")
    return env


@contextlib.contextmanager
def restored_environ(*keys: str) -> Iterator[None]:
    """Each of ``keys`` back in ``os.environ`` as it was (or absent) when the block ends."""
    saved = {key: os.environ.get(key) for key in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def api_healthy(port: int) -> bool:
    """The API server on ``port`` answers its health endpoint."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/monitor/health", timeout=5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def api_server_and_scheduler(
    env: dict[str, str],
    dags: Path,
    log_dir: Path,
    name: str,
    ready: Callable[[int], Any] = api_healthy,
    **settings: str,
) -> Iterator[tuple[AirflowProcesses, Any]]:
    """An API server and a scheduler on ``env``'s AIRFLOW_HOME running the DAGs of ``dags`` (created
    unpaused), their logs in ``log_dir``; yields the processes and the first true value of
    ``ready(port)`` (polled up to 600 s). ``settings``: the test's own Airflow settings on top."""
    from scripts.events_demo import AirflowProcesses, free_port, wait_for

    port = free_port()
    env = {
        **env,
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": f"{name}-test-jwt-secret-" + "x" * 48,
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        # one SQLite metadata DB: start one task at a time (a deferred task, such as a waiting approval
        # gate, frees its slot) and give the task processes' Execution API calls time on a loaded machine
        "AIRFLOW__CORE__PARALLELISM": "1",
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
        **settings,
    }
    af = AirflowProcesses(env, log_dir)
    try:
        af.cli("dags", "reserialize")  # the DAGs of this folder are created unpaused
        af.start("api-server", "--port", str(port), "--host", "127.0.0.1")
        af.start("scheduler")
        yield af, wait_for("the API server", lambda: ready(port), 600, every=0.5)
    finally:
        af.stop_all()


def start_group(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """``cmd`` in a session (process group) of its own, its output in ``log``."""
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group we started (scheduler/api-server and their workers), then SIGKILL."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def airflow_cli(env: dict[str, str], *args: str) -> str:
    """Run an ``airflow`` command; retried while the scheduler holds Airflow's SQLite DB ("database is locked")."""
    for _ in range(10):
        proc = subprocess.run(["airflow", *args], capture_output=True, text=True, env=env, timeout=300)
        if proc.returncode == 0 or "database is locked" not in proc.stdout + proc.stderr:
            break
        time.sleep(2)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout
