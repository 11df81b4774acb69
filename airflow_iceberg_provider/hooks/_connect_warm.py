"""Find or start the warm Spark Connect client of this host (:mod:`~airflow_iceberg_provider.spark_jobs.connect_forkserver`).

One fork server per Spark runtime Python, user and runner version listens on a Unix socket in
``<tmp>/aip-connect-<uid>/`` (mode 0700, checked: a directory another user owns or can enter is
refused). The first task that finds no server starts one, under a file lock so that concurrent
tasks start it once; it exits by itself after ``[iceberg_provider]
spark_connect_warm_client_idle_seconds`` (default :data:`IDLE_S`) without a task. The server
starts with a minimal environment (no connection, no secret): each task's environment reaches only
its own forked child.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import stat
import struct
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from airflow_iceberg_provider.config import int_setting
from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.hooks._job_package import SPARK_JOBS_DIR

FORKSERVER = SPARK_JOBS_DIR / "connect_forkserver.py"
RUNNER = SPARK_JOBS_DIR / "connect_runner.py"
#: A warm client without a task for this long exits (seconds), unless the option says otherwise.
IDLE_S = 900
IDLE_OPTION = "spark_connect_warm_client_idle_seconds"
#: How long a task waits for a server it started to listen (its import of the Connect client).
START_TIMEOUT_S = 120.0
#: The environment a fork server starts with: where Python and Spark are, nothing else.
_STARTED: dict[str, subprocess.Popen[bytes]] = {}
#: Linux's limit for a Unix socket path (sun_path), less its terminating NUL.
_MAX_SOCKET_PATH = 107
_SERVER_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TZ", "PYTHONPATH", "SPARK_HOME", "JAVA_HOME")


def private_dir() -> Path:
    """``<tmp>/aip-connect-<uid>``, created 0700; refused when another user owns it or can enter it."""
    base = Path(tempfile.gettempdir()) / f"aip-connect-{os.getuid()}"
    try:
        base.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise IcebergConnectionError(
            f"The warm Spark Connect client's directory {base} is not a private directory of this user "
            f"(owner uid {info.st_uid}, mode {stat.filemode(info.st_mode)}); remove it, or set "
            '"warm_client": false in the spark_connect connection\'s extra.'
        )
    return base


def socket_path(python: str) -> Path:
    """The socket of the warm client for ``python`` (as configured) and this installation's runner files."""
    digest = hashlib.sha256()
    # the interpreter's path as configured, not resolved: a virtualenv's python is a link to the base
    # interpreter, and two virtualenvs (two pyspark versions) must not share a warm client
    parts = (os.path.abspath(python).encode(), str(FORKSERVER).encode(), RUNNER.read_bytes(), FORKSERVER.read_bytes())
    for part in parts:
        digest.update(part)
        digest.update(b"\0")
    path = private_dir() / f"{digest.hexdigest()[:16]}.sock"
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        raise IcebergConnectionError(
            f"The warm Spark Connect client's socket path {path} is longer than a Unix socket allows "
            f'({_MAX_SOCKET_PATH} bytes); point TMPDIR at a shorter directory, or set "warm_client": false '
            "in the spark_connect connection's extra."
        )
    return path


def connect(python: str, idle_s: float | None = None) -> socket.socket:
    """A connection to the warm client for ``python``; the server is started first when none listens.

    :param idle_s: how long a server started here stays up without a task; default
        ``[iceberg_provider] spark_connect_warm_client_idle_seconds``.
    """
    path = socket_path(python)
    conn = _try_connect(path)
    if conn is not None:
        return conn
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _try_connect(path)  # another task started it while this one waited for the lock
        if conn is not None:
            return conn
        log_path = path.with_suffix(".log")
        proc = _start(python, path, log_path, idle_s or int_setting(IDLE_OPTION, IDLE_S, minimum=1))
        _STARTED[str(path)] = proc  # it outlives this task; kept so that it is not reported as leaked
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            conn = _try_connect(path)
            if conn is not None:
                return conn
            if proc.poll() is not None:
                break
            time.sleep(0.05)
    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    raise IcebergConnectionError(
        f"The warm Spark Connect client ({python} {FORKSERVER.name}) did not start: {tail.strip() or 'no output'}. "
        'Check [iceberg_provider] pyspark_python, or set "warm_client": false in the connection\'s extra.'
    )


def _try_connect(path: Path) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(str(path))
    except OSError:  # absent, or a server that exited (its socket file may remain after a kill)
        conn.close()
        return None
    return conn


def _start(python: str, path: Path, log_path: Path, idle_s: float) -> subprocess.Popen[bytes]:
    if not Path(python).is_file():
        raise IcebergConnectionError(
            f"Spark runtime Python {python!r} does not exist; set [iceberg_provider] pyspark_python "
            "(or the extra python of the spark_connect connection)."
        )
    path.unlink(missing_ok=True)  # left by a server that was killed
    env = {key: os.environ[key] for key in _SERVER_ENV if key in os.environ}
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        return subprocess.Popen(
            [python, str(FORKSERVER), "--socket", str(path), "--idle", str(idle_s)],
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            env=env,
            cwd="/",
            start_new_session=True,  # outlives the task that started it
        )
    finally:
        os.close(fd)


def send_request(conn: socket.socket, request: dict[str, Any], out_fd: int) -> None:
    """One task's request: 4-byte big-endian length, then JSON, with ``out_fd`` (its output pipe) attached.

    The server's side is ``read_request`` in ``spark_jobs/connect_forkserver.py``.
    """
    body = json.dumps(request).encode()
    payload = struct.pack("!I", len(body)) + body
    sent = socket.send_fds(conn, [payload[:65536]], [out_fd])
    conn.sendall(payload[sent:])
