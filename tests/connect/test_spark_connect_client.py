"""The Spark Connect client side without a Spark server: connection parsing, the reachability
check, and the runner process (its exit when nothing answers, its timeout, its end with a task
killed by SIGKILL, its command line). Real processes: the runner runs in the Spark runtime's
Python against closed or silent ports."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_iceberg_provider.exceptions import IcebergConnectionError, IcebergSparkJobError
from airflow_iceberg_provider.hooks.spark_connect import (
    ConnectEndpoint,
    ConnectJobProcess,
    check_reachable,
    endpoint_from_connection,
    session_conf,
    session_document,
    write_session_file,
)
from scripts.events_demo import wait_for

RUNTIME_PYTHON = os.environ.get("AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON", "")
ROOT = Path(__file__).resolve().parents[2]


class Conn:
    def __init__(self, host: str, port: int | None = None, password: str | None = None, **extra: object) -> None:
        self.conn_id, self.host, self.port = "sc_test", host, port
        self.login, self.password = None, password
        self.extra_dejson = extra


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_endpoint_from_connection_and_refusals():
    with pytest.raises(IcebergConnectionError, match="not a Spark Connect address"):
        endpoint_from_connection(Conn("http://x"))
    with pytest.raises(IcebergConnectionError, match="has no host"):
        endpoint_from_connection(Conn(""))
    with pytest.raises(IcebergConnectionError, match="timeout='soon' is not a number"):
        endpoint_from_connection(Conn("sc://h", timeout="soon", allow_plaintext=True))
    with pytest.raises(IcebergConnectionError, match="must be positive"):
        endpoint_from_connection(Conn("sc://h", timeout=0, allow_plaintext=True))
    ep = endpoint_from_connection(Conn("sc://h", password="tok/en", use_ssl=True, timeout="90"))
    assert (ep.address, ep.timeout_s) == ("h:15002", 90.0)
    assert ep.url == "sc://h:15002/;token=tok%2Fen;use_ssl=true"
    assert "tok" not in repr(ep), "the token must never reach a log line through repr"
    assert endpoint_from_connection(Conn("h", port=19850, use_ssl=True)).address == "h:19850"
    assert endpoint_from_connection(Conn("sc://127.0.0.1")) == ConnectEndpoint(
        "sc_test", "127.0.0.1", 15002, "sc://127.0.0.1:15002/"
    )


@pytest.mark.parametrize("value", [True, "false", "maybe"])
def test_a_retired_warm_client_extra_is_accepted_ignored_and_named_in_one_warning(caplog, value):
    with caplog.at_level(logging.WARNING):
        ep = endpoint_from_connection(Conn("sc://127.0.0.1", warm_client=value))
    assert ep == endpoint_from_connection(Conn("sc://127.0.0.1"))
    (record,) = [r for r in caplog.records if "warm_client" in r.getMessage()]
    assert record.levelno == logging.WARNING
    assert "Spark 3.5's Connect client now starts per task" in record.getMessage()
    assert "Spark 4.1's runs in the task process" in record.getMessage()


def test_session_conf_keeps_server_conf_off_the_session():
    settable, server_only = session_conf(
        {
            "spark.sql.catalog.x.uri": "u",
            "spark.sql.extensions": "e",
            "spark.pyspark.python": "p",
            "spark.redaction.regex": "r",
            "spark.wap.branch": "b",
        }
    )
    assert settable == {"spark.sql.catalog.x.uri": "u", "spark.wap.branch": "b"}
    assert server_only == ["spark.pyspark.python", "spark.redaction.regex", "spark.sql.extensions"]


def test_hadoop_settings_reach_the_session_under_their_hadoop_names_with_secrets_kept_secret():
    """A Connect session's ``spark.hadoop.X`` never reaches Hadoop: the session also gets ``X``
    (raw Parquet reads on S3), secrets stay in the secret part, and the FileSystem cache is off."""
    ep = ConnectEndpoint("c", "127.0.0.1", 1, "sc://127.0.0.1:1/")
    doc = session_document(
        ep,
        application="a.py",
        application_args=[],
        conf={"spark.hadoop.fs.s3.impl": "S3A", "spark.hadoop.fs.s3a.endpoint": "http://s3", "spark.sql.x": "y"},
        secret_conf={"spark.hadoop.fs.s3a.secret.key": "sk", "spark.sql.catalog.c.s3.secret-access-key": "sk"},
        py_files=[],
        job_name="j",
    )
    assert doc["conf"] == {
        "spark.hadoop.fs.s3.impl": "S3A",
        "spark.hadoop.fs.s3a.endpoint": "http://s3",
        "spark.sql.x": "y",
        "fs.s3.impl": "S3A",
        "fs.s3a.endpoint": "http://s3",
        "fs.s3.impl.disable.cache": "true",
        "fs.s3a.impl.disable.cache": "true",
        "spark.sql.redaction.options.regex": (
            r"(?i)url|fs\.s3a\.secret\.key|spark\.hadoop\.fs\.s3a\.secret\.key"
            r"|spark\.sql\.catalog\.c\.s3\.secret\-access\-key"
        ),
    }
    assert doc["secret_conf"] == {
        "spark.hadoop.fs.s3a.secret.key": "sk",
        "spark.sql.catalog.c.s3.secret-access-key": "sk",
        "fs.s3a.secret.key": "sk",
    }
    assert "sk" not in json.dumps(doc["conf"])


def test_session_file_is_private(tmp_path):
    ep = ConnectEndpoint("c", "127.0.0.1", 1, "sc://127.0.0.1:1/;token=t")
    doc = session_document(
        ep, application="a.py", application_args=[], conf={}, secret_conf={"k": "secret"}, py_files=[], job_name="j"
    )
    path = tmp_path / "session.json"
    write_session_file(path, doc)
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["secret_conf"] == {"k": "secret"}


def test_unreachable_server_names_the_connection_before_anything_runs():
    port = _closed_port()
    with pytest.raises(IcebergSparkJobError, match=rf"connection 'c1' at 127.0.0.1:{port} is not reachable"):
        check_reachable(ConnectEndpoint("c1", "127.0.0.1", port))


def _session(
    tmp_path: Path, port: int, timeout_s: float, secret_conf: dict[str, str] | None = None
) -> tuple[ConnectEndpoint, Path]:
    if not Path(RUNTIME_PYTHON).is_file():
        pytest.skip("Spark runtime Python not found (source scripts/env.sh)")
    ep = ConnectEndpoint("c2", "127.0.0.1", port, f"sc://127.0.0.1:{port}/", None, timeout_s)
    job = tmp_path / "job.py"
    job.write_text("raise SystemExit(0)\n")
    doc = session_document(
        ep,
        application=str(job),
        application_args=[],
        conf={},
        secret_conf=secret_conf or {},
        py_files=[],
        job_name="probe",
    )
    session = tmp_path / "session.json"
    write_session_file(session, doc)
    return ep, session


def _run(tmp_path: Path, port: int, timeout_s: float) -> tuple[float, IcebergSparkJobError]:
    ep, session = _session(tmp_path, port, timeout_s)
    t0 = time.monotonic()
    with pytest.raises(IcebergSparkJobError) as err:
        ConnectJobProcess(ep, RUNTIME_PYTHON, logging.getLogger("test")).run(session, {}, "probe")
    assert not session.exists(), "the runner deletes its session file"
    return time.monotonic() - t0, err.value


def test_runner_exits_with_a_named_error_when_the_server_vanished(tmp_path):
    seconds, err = _run(tmp_path, _closed_port(), 120)
    assert "connection 'c2'" in str(err) and "did not answer job 'probe'" in str(err), err
    assert seconds < 120


def test_runner_is_stopped_at_the_connection_timeout(tmp_path):
    """A server that accepts but never answers: the connection's timeout ends the task."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.5)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        seconds, err = _run(tmp_path, listener.getsockname()[1], 20)
    finally:
        stop.set()
        thread.join(2)
        for s in accepted:
            s.close()
        listener.close()
    assert "timed out after 20s" in str(err) or "did not answer" in str(err), err
    assert seconds < 20 + 60


def test_a_task_killed_by_sigkill_leaves_no_runner_and_no_secret_on_its_command_line(tmp_path):
    """The task process dies without a word (OOM, lost worker): its runner gets the parent-death
    signal and stops. The runner's command line and environment name
    only its session file: the secrets are in that 0600 file, which it deletes before it connects."""
    secret = "runner-secret-VALUE-41f2"
    listener = socket.socket()  # a server that accepts and never answers: the runner hangs in its session open
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        ep, session = _session(
            tmp_path,
            listener.getsockname()[1],
            600,
            secret_conf={"spark.sql.catalog.c.jdbc.password": secret},
        )
        task = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import json, logging, sys\n"
                "from airflow_iceberg_provider.hooks.spark_connect import ConnectEndpoint, ConnectJobProcess\n"
                "ep = ConnectEndpoint(**json.loads(sys.argv[1]))\n"
                "ConnectJobProcess(ep, sys.argv[2], logging.getLogger('t')).run(sys.argv[3], {}, 'hung')\n",
                json.dumps(ep.__dict__),
                RUNTIME_PYTHON,
                str(session),
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            runner = wait_for("the task's runner", lambda: _runner_of(task.pid), 120, every=0.1)
            wait_for("the runner to delete its session file", lambda: not session.exists() or None, 120, every=0.1)
            argv = Path(f"/proc/{runner}/cmdline").read_bytes().split(b"\0")
            assert argv[-3:] == [b"--session", str(session).encode(), b""], argv
            assert secret.encode() not in Path(f"/proc/{runner}/cmdline").read_bytes()
            assert secret.encode() not in Path(f"/proc/{runner}/environ").read_bytes()
            assert _alive(runner), "the runner still waits on the silent server when its task dies"
        finally:
            task.kill()
            task.wait(10)
        wait_for("the runner to stop after its task died", lambda: not _alive(runner) or None, 40, every=0.1)
    finally:
        listener.close()


def _runner_of(pid: int) -> int | None:
    """The child of ``pid`` that runs ``connect_runner.py``, if any."""
    for child in _children(pid):
        try:
            if b"connect_runner.py" in Path(f"/proc/{child}/cmdline").read_bytes():
                return child
        except FileNotFoundError:
            continue
    return None


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except FileNotFoundError:
        return []
    return [int(c) for c in text.split() if _alive(int(c))]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("jars", "packages", "version"),
    [
        ("/j/spark-connect_2.12-3.5.6.jar,/j/iceberg-spark-runtime-3.5_2.12-1.10.1.jar", "", "Apache Iceberg 1.10.1"),
        ("", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0,org.x:y:1", "Apache Iceberg 1.12.0"),
        ("/j/iceberg-aws-bundle-1.10.1.jar", "", None),
        ("", "", None),
    ],
)
def test_evidence_names_the_iceberg_version_of_a_connect_server_from_its_runtime_jar(jars, packages, version):
    # under Spark Connect there is no driver JVM to ask IcebergBuild: the erasure's evidence reads the
    # server's runtime jar instead
    from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import iceberg_version_of

    assert iceberg_version_of(jars, packages) == version
