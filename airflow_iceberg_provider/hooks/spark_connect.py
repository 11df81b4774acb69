"""Spark Connect execution: a provider job as a short-lived Connect client of a running server.

The DAG author chooses the mode by connection: when the ``spark_conn_id`` of an operator
names a ``spark_connect`` connection (the Spark provider's type: host ``sc://host``, port,
login = user id, password = token, extra ``use_ssl``), :class:`~airflow_iceberg_provider.hooks.spark.IcebergSparkHook`
runs the *same* job file through :data:`RUNNER` instead of ``spark-submit``:

* one Python process per task, in the Spark runtime environment (``[iceberg_provider]
  pyspark_python``, or the connection's ``python`` extra), opens its own Connect session (a fresh
  session id), so no two tasks share session state;
* everything secret (the catalog's credentials, the connection's token, the job spec with an
  erasure's salt) travels in 0600 files of the task's private working directory: the runner reads
  the session file, deletes it, and sets the catalog as **session** configuration
  (``spark.conf.set``), which neither the plan text nor the server's log carries and no other
  session can read; when the job ends it unsets those keys again;
* the task's kill (``on_kill``, the task process dying, the timeout) sends SIGTERM to the runner,
  which interrupts every operation of its session on the server before it exits: the server keeps
  serving and Iceberg's atomic commits leave nothing half-committed;
* a server that does not answer fails the task at once with the connection's id and address (no
  JVM start to wait for, and retryable: the server may be back at the next try);
* the result travels through the lake, as for spark-submit: the job writes its ledger row.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from airflow_iceberg_provider.config import spark_runtime
from airflow_iceberg_provider.exceptions import IcebergConnectionError, IcebergSparkJobError
from airflow_iceberg_provider.hooks import _process
from airflow_iceberg_provider.hooks._job_package import SPARK_JOBS_DIR
from airflow_iceberg_provider.hooks.catalog_config import redaction_regex

#: Conn type of the Spark provider's Spark Connect connection.
CONNECT_CONN_TYPE = "spark_connect"
#: The client entry point, run by the Spark runtime's Python.
RUNNER = SPARK_JOBS_DIR / "connect_runner.py"
#: Default wall-clock limit of one job (seconds); the connection extra ``timeout`` overrides it.
DEFAULT_TIMEOUT_S = 6 * 3600.0
#: How long the runner gets to interrupt its session's operations after SIGTERM.
KILL_GRACE_S = 15.0
#: Exit code of the runner when the server does not answer.
EXIT_UNREACHABLE = 75

#: Session conf naming what Spark redacts in a SQL execution's recorded options and modified conf.
SESSION_REDACTION_KEY = "spark.sql.redaction.options.regex"
DEFAULT_SESSION_REDACTION = "(?i)url"

#: A connection extra the provider no longer reads: accepted, ignored, with a warning.
RETIRED_EXTRAS = {
    "warm_client": "Spark 3.5's Connect client now starts per task, and Spark 4.1's runs in the task process",
}

log = logging.getLogger(__name__)

#: Spark conf the server fixes at its start (static or core conf): a session cannot set them.
_SERVER_ONLY_PREFIXES = (
    "spark.driver.",
    "spark.executor.",
    "spark.pyspark.",
    "spark.ui.",
    "spark.jars",
    "spark.submit.",
    "spark.master",
    "spark.app.",
    "spark.sql.extensions",
    "spark.redaction.",
    "spark.eventLog.",
)


@dataclass(frozen=True)
class ConnectEndpoint:
    """Where the Connect server is, read from a ``spark_connect`` connection."""

    conn_id: str
    host: str
    port: int
    url: str = field(default="", repr=False)  # sc://host:port/;params (may carry the token: never log it)
    python: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: where the Connect client runs: ``in_process`` (Spark 4: the task process, with the Airflow
    #: environment's pyspark-client) or ``runner`` (a Python of the Spark runtime, Spark 3.5)
    client: str = "runner"

    @property
    def address(self) -> str:
        """``host:port``, safe to log."""
        return f"{self.host}:{self.port}"


def is_connect_connection(conn: Any) -> bool:
    return str(getattr(conn, "conn_type", "") or "").replace("-", "_") == CONNECT_CONN_TYPE


def endpoint_from_connection(conn: Any) -> ConnectEndpoint:
    """The server address, URL and client settings of a ``spark_connect`` connection."""
    from urllib.parse import quote, urlunparse

    conn_id = str(getattr(conn, "conn_id", "") or "")
    raw = str(conn.host or "").strip()
    if not raw:
        raise IcebergConnectionError(
            f"Spark Connect connection {conn_id!r} has no host; set it to the server, e.g. "
            f'AIRFLOW_CONN_{conn_id.upper()}=\'{{"conn_type": "spark_connect", "host": "sc://127.0.0.1", '
            '"port": 15002}\'.'
        )
    parsed = urlparse(raw if "://" in raw else f"sc://{raw}")
    if parsed.scheme != "sc" or not parsed.hostname:
        raise IcebergConnectionError(
            f"Spark Connect connection {conn_id!r}: host {raw!r} is not a Spark Connect address; use "
            "sc://<host> (the port in the connection's port field, default 15002)."
        )
    port = int(conn.port or parsed.port or 15002)
    params = []
    if conn.login:
        params.append(f"user_id={quote(conn.login, safe='')}")
    if conn.password:
        params.append(f"token={quote(conn.password, safe='')}")
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else {}
    if extra.get("use_ssl") is not None:
        params.append(f"use_ssl={quote(str(extra['use_ssl']).lower())}")
    url = urlunparse(("sc", f"{parsed.hostname}:{port}", "/", ";".join(params), "", ""))
    use_ssl = extra.get("use_ssl") is not None and _flag(conn_id, "use_ssl", extra["use_ssl"])
    if not (use_ssl or _is_loopback(parsed.hostname)) and not _flag(
        conn_id, "allow_plaintext", extra.get("allow_plaintext", False)
    ):
        raise IcebergConnectionError(
            f"Spark Connect connection {conn_id!r}: server {parsed.hostname}:{port} is on another host and "
            "use_ssl is off, so the catalog's credentials (and an erasure's spec) would cross the network in "
            'plain text. Set the extra {"use_ssl": true} (a TLS endpoint or proxy), or {"allow_plaintext": true} '
            "when the network path is private (a sidecar, a VPN). Nothing was submitted."
        )
    timeout_s = _seconds(conn_id, "timeout", extra.get("timeout"), DEFAULT_TIMEOUT_S)
    for name, why in RETIRED_EXTRAS.items():
        if name in extra:
            log.warning(
                "Spark Connect connection %r: extra %s is ignored (%s); remove it from the connection.",
                conn_id,
                name,
                why,
            )
    return ConnectEndpoint(
        conn_id,
        parsed.hostname,
        port,
        url,
        extra.get("python") or None,
        timeout_s,
        client=client_mode(conn_id, extra.get("client"), extra.get("python")),
    )


#: Where a Connect client can run (the connection extra ``client``).
CLIENT_MODES = ("in_process", "runner")


def client_mode(conn_id: str, value: Any, python: Any = None) -> str:
    """The connection's ``client`` extra, else what the Spark runtime implies.

    Spark 4 (``[iceberg_provider] spark_runtime = 4.1``): ``in_process``, the task process is the
    client (the Airflow environment's pyspark-client speaks Spark 4's protocol). Spark 3.5: ``runner``,
    a Python of the Spark runtime (pyspark-client cannot talk to a 3.5 server). A connection that names
    its own ``python`` asks for a runner.
    """
    if value in (None, ""):
        if python:
            return "runner"
        return "in_process" if spark_runtime().startswith("4.") else "runner"
    text = str(value).strip().lower()
    if text not in CLIENT_MODES:
        raise IcebergConnectionError(
            f"Spark Connect connection {conn_id!r}: extra client={value!r} is not one of {', '.join(CLIENT_MODES)}; "
            'use "in_process" for a Spark 4 server (the task process is the client) or "runner" for Spark 3.5.'
        )
    return text


def _is_loopback(host: str) -> bool:
    """Whether ``host`` names the submitting host itself (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _flag(conn_id: str, name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise IcebergConnectionError(
        f"Spark Connect connection {conn_id!r}: extra {name}={value!r} is not a boolean; use true or false."
    )


def _seconds(conn_id: str, name: str, value: Any, default: float) -> float:
    try:
        seconds = float(value) if value not in (None, "") else default
    except (TypeError, ValueError) as err:
        raise IcebergConnectionError(
            f"Spark Connect connection {conn_id!r}: extra {name}={value!r} is not a number of seconds; "
            f'use e.g. {{"{name}": {int(default)}}}.'
        ) from err
    if seconds <= 0:
        raise IcebergConnectionError(
            f"Spark Connect connection {conn_id!r}: extra {name}={value!r} must be positive (seconds)."
        )
    return seconds


def check_reachable(endpoint: ConnectEndpoint, timeout_s: float = 5.0) -> None:
    """Fail with the connection's id and address when nothing listens there."""
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout_s):
            return
    except OSError as err:
        raise IcebergSparkJobError(
            f"Spark Connect server of connection {endpoint.conn_id!r} at {endpoint.address} is not reachable "
            f"({err.strerror or err}); start it (scripts/connect_server.py start) or point the connection at a "
            "running server. Nothing was submitted."
        ) from err


def session_conf(conf: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Split spark-submit conf into what a Connect session sets and what only the server can have."""
    settable, server_only = {}, []
    for key, value in conf.items():
        if key.startswith(_SERVER_ONLY_PREFIXES):
            server_only.append(key)
        else:
            settable[key] = str(value)
    return settable, sorted(server_only)


#: Spark's prefix for Hadoop settings: spark-submit copies ``spark.hadoop.X`` into the JVM's Hadoop configuration as ``X``.
_HADOOP_PREFIX = "spark.hadoop."


def hadoop_session_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """The ``spark.hadoop.*`` entries of ``conf`` under their Hadoop names, for a Connect session.

    spark-submit copies ``spark.hadoop.X`` into the driver's Hadoop configuration as ``X`` when the
    JVM starts. A running Connect server never does that for a session's conf; it copies the
    session's conf *as is* into the Hadoop configuration of that session's file reads. So the
    session also gets ``X`` (an S3 warehouse's ``fs.s3a.*`` for raw Parquet reads).

    >>> hadoop_session_conf({"spark.hadoop.fs.s3a.endpoint": "e", "spark.sql.x": "y"})
    {'fs.s3a.endpoint': 'e'}
    """
    return {key[len(_HADOOP_PREFIX) :]: str(value) for key, value in conf.items() if key.startswith(_HADOOP_PREFIX)}


def filesystem_cache_off(hadoop_keys: Iterable[str]) -> dict[str, str]:
    """``fs.<scheme>.impl.disable.cache=true`` for each scheme the Hadoop keys name: a cached
    FileSystem would carry one Connect session's credentials into another session's reads.

    >>> filesystem_cache_off(["fs.s3a.endpoint", "fs.s3.impl", "io.file.buffer.size"])
    {'fs.s3a.impl.disable.cache': 'true', 'fs.s3.impl.disable.cache': 'true'}
    """
    schemes = dict.fromkeys(key.split(".")[1] for key in hadoop_keys if key.startswith("fs.") and key.count(".") > 1)
    return {f"fs.{scheme}.impl.disable.cache": "true" for scheme in schemes}


def session_document(
    endpoint: ConnectEndpoint,
    *,
    application: str,
    application_args: Sequence[str],
    conf: Mapping[str, str],
    secret_conf: Mapping[str, str],
    py_files: Sequence[str],
    job_name: str,
) -> dict[str, Any]:
    """What the runner reads from its 0600 session file (the only place secrets are written)."""
    settable, _ = session_conf(conf)
    hadoop_public, hadoop_secret = hadoop_session_conf(settable), hadoop_session_conf(secret_conf)
    settable = {**hadoop_public, **filesystem_cache_off([*hadoop_public, *hadoop_secret]), **settable}
    secret = {**hadoop_secret, **secret_conf}
    # A shared server's redaction regex is fixed at its start; the session's own options regex
    # (session conf) names every secret key this session sets, so the server's event log and SQL
    # tab (an execution's modified conf) show them redacted, whatever the keys are called.
    settable[SESSION_REDACTION_KEY] = redaction_regex(
        secret, settable.get(SESSION_REDACTION_KEY) or DEFAULT_SESSION_REDACTION
    )
    return {
        "url": endpoint.url,
        "address": endpoint.address,
        "conn_id": endpoint.conn_id,
        "application": application,
        "argv": list(application_args),
        "conf": settable,
        "secret_conf": secret,
        "py_files": list(py_files),
        "job_name": job_name,
    }


class ConnectJobProcess:
    """One runner process: start, stream its output to the task log, wait with a timeout, kill.

    The runner is a new process of the Spark runtime's Python (Spark 3.5's Connect client) running
    :mod:`~airflow_iceberg_provider.spark_jobs.connect_runner` on the task's session file; it dies
    with the task process (parent-death signal), and this task process is its only reader and its
    killer.
    """

    def __init__(self, endpoint: ConnectEndpoint, python: str, log: Any) -> None:
        self.endpoint = endpoint
        self.python = python
        self.log = log
        self._proc: subprocess.Popen[str] | None = None
        self._killed_by: str | None = None
        self.tail: list[str] = []

    def run(self, session_file: Path, env: Mapping[str, str], name: str) -> None:
        """Run the runner on ``session_file``; raise :class:`IcebergSparkJobError` unless it exits 0."""
        if not Path(self.python).is_file():
            raise IcebergConnectionError(
                f"Spark runtime Python {self.python!r} does not exist; set [iceberg_provider] pyspark_python "
                f"(or the extra python of connection {self.endpoint.conn_id!r}) to the Python that has pyspark "
                "with its Spark Connect client (grpcio, grpcio-status, googleapis-common-protos, pandas)."
            )
        child_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        child_env.pop("SPARK_REMOTE", None)
        argv = ["--session", str(session_file)]
        t0 = time.monotonic()
        timer = threading.Timer(self.endpoint.timeout_s, self._timeout)
        timer.daemon = True
        timer.start()
        try:
            code = self._run_process(argv, child_env)
        finally:
            timer.cancel()
        seconds = time.monotonic() - t0
        if code == 0:
            return
        if code == EXIT_UNREACHABLE:
            raise IcebergSparkJobError(
                f"Spark Connect server of connection {self.endpoint.conn_id!r} at {self.endpoint.address} did not "
                f"answer job {name!r}: {self._last_error()} Start it or point the connection at a running server."
            )
        why = self._killed_by or f"exit code {code}"
        raise IcebergSparkJobError(
            f"Spark job {name!r} through Spark Connect ({self.endpoint.conn_id!r} at {self.endpoint.address}) failed "
            f"after {seconds:.1f}s ({why}). Last client output:\n" + "\n".join(self.tail[-15:])
        )

    def _run_process(self, argv: list[str], env: dict[str, str]) -> int:
        self._proc = _process.spawn_with_parent(
            [self.python, str(RUNNER), *argv], env, sig=signal.SIGTERM, own_session=True
        )
        try:
            assert self._proc.stdout is not None
            self._stream(self._proc.stdout)
            return self._proc.wait()
        finally:
            if self._proc.poll() is None:  # the task is being torn down: do not leave the runner behind
                self.terminate()
            if self._proc.stdout is not None:
                self._proc.stdout.close()

    def _stream(self, lines: Any) -> None:
        for line in lines:
            line = line.rstrip("\n")
            self.tail = [*self.tail[-40:], line]
            self.log.info("%s", line)

    def _last_error(self) -> str:
        for line in reversed(self.tail):
            if line.strip():
                return line.strip()
        return "no output"

    def _timeout(self) -> None:
        self._killed_by = f"timed out after {self.endpoint.timeout_s:.0f}s (extra timeout of the connection)"
        self.log.error("Spark Connect job %s; interrupting its session", self._killed_by)
        self.terminate()

    def terminate(self) -> None:
        """SIGTERM (the runner interrupts its session's operations), SIGKILL after a grace period."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self._killed_by = self._killed_by or "killed with the task"
        _process.stop_child(proc, grace_s=KILL_GRACE_S)


def write_session_file(path: Path, document: Mapping[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(document, fh)
