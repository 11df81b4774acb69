"""The warm Spark Connect client without a Spark server: the fork server's start, sharing, isolation,
kill and idle exit. Real processes: the server runs in the Spark runtime's Python (pyspark's Connect
client imported) and forks the real runner, which meets closed or silent ports here."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from airflow_iceberg_provider.exceptions import IcebergConnectionError, IcebergSparkJobError
from airflow_iceberg_provider.hooks import _connect_warm
from airflow_iceberg_provider.hooks.spark_connect import (
    ConnectEndpoint,
    ConnectJobProcess,
    session_document,
    write_session_file,
)
from scripts.events_demo import wait_for

RUNTIME_PYTHON = os.environ.get("AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON", "")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def short_tmp(monkeypatch):
    """A private temporary root (Unix socket paths must stay short); its servers are stopped afterwards."""
    if not Path(RUNTIME_PYTHON).is_file():
        pytest.skip("Spark runtime Python not found (source scripts/env.sh)")
    root = tempfile.mkdtemp(prefix="aipw-", dir="/tmp")
    monkeypatch.setattr(tempfile, "tempdir", root)
    yield Path(root)
    for pid in _server_pids(Path(root)):
        os.kill(pid, signal.SIGTERM)


def _server_pids(root: Path) -> list[int]:
    pids = []
    for log in root.glob("aip-connect-*/*.log"):
        for line in log.read_text().splitlines():
            if line.startswith("[connect-forkserver] pid "):
                pid = int(line.split()[2])
                if _alive(pid):
                    pids.append(pid)
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _silent_port() -> tuple[socket.socket, int]:
    """A port that accepts connections and never answers (a hung server)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    return listener, listener.getsockname()[1]


def _session(tmp: Path, port: int, name: str = "probe") -> tuple[ConnectEndpoint, Path]:
    ep = ConnectEndpoint("c_warm", "127.0.0.1", port, f"sc://127.0.0.1:{port}/", None, 120.0)
    job = tmp / "job.py"
    job.write_text("raise SystemExit(0)\n")
    doc = session_document(
        ep, application=str(job), application_args=[], conf={}, secret_conf={}, py_files=[], job_name=name
    )
    session = tmp / f"{name}.json"
    write_session_file(session, doc)
    return ep, session


def test_one_server_per_python_started_once_for_concurrent_tasks_with_no_secret_in_its_environment(
    short_tmp, monkeypatch
):
    monkeypatch.setenv("AIRFLOW_CONN_SECRET_PROBE", "postgresql://u:warm-secret-value@h/db")
    conns: list[socket.socket] = []
    errors: list[BaseException] = []

    def task() -> None:
        try:
            conns.append(_connect_warm.connect(RUNTIME_PYTHON))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=task) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors and len(conns) == 4, errors
    for c in conns:
        c.close()
    pids = _server_pids(short_tmp)
    assert len(pids) == 1, f"four concurrent tasks started {len(pids)} servers"
    environ = Path(f"/proc/{pids[0]}/environ").read_bytes()
    assert b"warm-secret-value" not in environ and b"AIRFLOW_CONN" not in environ
    directory = next(short_tmp.glob("aip-connect-*"))
    assert oct(directory.stat().st_mode & 0o777) == "0o700"
    assert oct(_connect_warm.socket_path(RUNTIME_PYTHON).stat().st_mode & 0o777) == "0o600"


def test_two_virtualenvs_of_one_interpreter_get_their_own_warm_client(tmp_path, monkeypatch):
    """A virtualenv's python links to the base interpreter: the key is the path as configured."""
    monkeypatch.setattr(tempfile, "tempdir", tempfile.mkdtemp(prefix="aipw-", dir="/tmp"))
    venvs = []
    for name in ("venv-a", "venv-b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "python").symlink_to(sys.executable)
        venvs.append(str(tmp_path / name / "python"))
    assert _connect_warm.socket_path(venvs[0]) != _connect_warm.socket_path(venvs[1])
    assert _connect_warm.socket_path(venvs[0]) == _connect_warm.socket_path(venvs[0])


def test_a_directory_others_can_enter_is_refused(short_tmp):
    shared = short_tmp / f"aip-connect-{os.getuid()}"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    with pytest.raises(IcebergConnectionError, match=r"not a private directory.*warm_client\": false"):
        _connect_warm.connect(RUNTIME_PYTHON)
    assert not list(shared.iterdir()), "nothing was started or written there"


def test_a_missing_python_names_the_option(short_tmp):
    with pytest.raises(IcebergConnectionError, match="pyspark_python"):
        _connect_warm.connect(str(short_tmp / "no-python"))


def test_a_long_tmpdir_is_refused_with_the_fix(monkeypatch):
    root = Path(tempfile.mkdtemp(prefix="aipw-long-", dir="/tmp")) / ("d" * 90)
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    with pytest.raises(IcebergConnectionError, match="longer than a Unix socket allows.*TMPDIR"):
        _connect_warm.socket_path(sys.executable)


@pytest.mark.parametrize("warm", [True, False], ids=["warm-client", "process-per-task"])
def test_unreachable_server_fails_the_task_naming_the_connection_in_both_client_modes(short_tmp, warm):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    ep, session = _session(short_tmp, port)
    ep = ConnectEndpoint(**{**ep.__dict__, "warm_client": warm})
    with pytest.raises(IcebergSparkJobError, match=rf"connection 'c_warm' at 127.0.0.1:{port} did not answer"):
        ConnectJobProcess(ep, RUNTIME_PYTHON, logging.getLogger("test")).run(session, {}, "probe")
    assert not session.exists(), "the runner deletes its session file"
    assert bool(_server_pids(short_tmp)) == warm


def test_a_task_killed_by_sigkill_leaves_no_runner_and_the_server_serves_the_next(short_tmp):
    """The task process dies without a word: its socket closes, the server stops the child."""
    listener, port = _silent_port()
    try:
        ep, session = _session(short_tmp, port, "hung")
        task = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import logging, sys, tempfile, json; tempfile.tempdir = sys.argv[1]\n"
                "from airflow_iceberg_provider.hooks.spark_connect import ConnectEndpoint, ConnectJobProcess\n"
                "ep = ConnectEndpoint(**json.loads(sys.argv[2]))\n"
                "ConnectJobProcess(ep, sys.argv[3], logging.getLogger('t')).run(sys.argv[4], {}, 'hung')\n",
                str(short_tmp),
                json.dumps(ep.__dict__),
                RUNTIME_PYTHON,
                str(session),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        server = wait_for("the warm client", lambda: (_server_pids(short_tmp) or [None])[0], 120, every=0.1)
        child = wait_for(
            "the task's runner", lambda: _children(server)[0] if _children(server) else None, 60, every=0.1
        )
        time.sleep(2)  # the runner is inside its session open, waiting on the silent server
        task.kill()
        task.wait(10)
        wait_for("the runner to stop after its task died", lambda: not _alive(child) or None, 40, every=0.1)
        assert _alive(server), "the server keeps serving"
    finally:
        listener.close()
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    closed = probe.getsockname()[1]
    probe.close()
    ep2, session2 = _session(short_tmp, closed, "next")
    with pytest.raises(IcebergSparkJobError, match="did not answer job 'next'"):
        ConnectJobProcess(ep2, RUNTIME_PYTHON, logging.getLogger("test")).run(session2, {}, "next")
    assert _server_pids(short_tmp) == [server], "the next task used the same server"


def test_on_kill_stops_the_forked_runner(short_tmp):
    listener, port = _silent_port()
    try:
        ep, session = _session(short_tmp, port, "killed")
        proc = ConnectJobProcess(ep, RUNTIME_PYTHON, logging.getLogger("test"))
        killer = threading.Timer(8.0, proc.terminate)
        killer.start()
        t0 = time.monotonic()
        with pytest.raises(IcebergSparkJobError, match="killed with the task"):
            proc.run(session, {}, "killed")
        killer.cancel()
        assert time.monotonic() - t0 < 8.0 + 30
        server = _server_pids(short_tmp)[0]
        wait_for("the runner to be reaped", lambda: not _children(server) or None, 10, every=0.1)
    finally:
        listener.close()


def test_an_idle_server_exits_and_removes_its_socket(short_tmp):
    conn = _connect_warm.connect(RUNTIME_PYTHON, idle_s=1.0)
    conn.close()
    path = _connect_warm.socket_path(RUNTIME_PYTHON)
    server = _server_pids(short_tmp)[0]
    wait_for("the idle server to exit", lambda: not _alive(server) or None, 30, every=0.1)
    assert not path.exists()


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(c) for c in text.split() if _alive(int(c))]
