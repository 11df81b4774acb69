#!/usr/bin/env python3
"""Start, stop and check a local Spark Connect server for the provider's Connect mode.

    python scripts/connect_server.py start [--port 15002] [--master local[2]] [--dir DIR] [--jars J1,J2]
    python scripts/connect_server.py status|stop [--dir DIR]

The server is ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``
from the Spark runtime (``SPARK_HOME``, as ``scripts/env.sh`` sets it), with the Spark Connect
jar and the provider's Iceberg jars (``[iceberg_provider] spark_jars``), the Iceberg SQL
extensions and UTC session time zone. Its JVM options are ``AIP_CONNECT_SERVER_JAVA_OPTIONS`` when
set (``scripts/env.sh``: the class-data-sharing archive for a quick start, the full JIT for a
process that runs many jobs), else ``[iceberg_provider] spark_driver_java_options``. No catalog is configured on the server: each task sets
its own catalog on its own session. ``start`` returns when the server answers on its port and
writes ``server.pid`` and ``server.log`` under ``--dir`` (default ``$AIP_WORK/connect``).

Importable: :func:`start` / :func:`stop` (tests, the demo and the bench use them).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONNECT_JAR_GLOB = "spark-connect_2.12-*.jar"
#: Servers started by this process, by pid (kept referenced until stopped and reaped).
_PROCS: dict[int, subprocess.Popen[bytes]] = {}


@dataclass
class ConnectServer:
    port: int
    pid: int
    log: Path
    workdir: Path

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def conn_json(self, conn_id: str = "spark_connect_default", **extra: object) -> str:
        """An ``AIRFLOW_CONN_<ID>`` value for this server."""
        import json

        doc: dict[str, object] = {"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": self.port}
        if extra:
            doc["extra"] = extra
        return json.dumps(doc)


def connect_jars() -> list[str]:
    """The Spark Connect plugin jar(s): ``AIP_SPARK_CONNECT_JARS`` (``scripts/env.sh``), else the bootstrap's folder."""
    listed = [j for j in os.environ.get("AIP_SPARK_CONNECT_JARS", "").split(",") if j.strip()]
    if listed:
        return listed
    root = Path(__file__).resolve().parent.parent
    found = sorted(glob.glob(str(root / ".spark-runtime" / "jars" / "connect" / CONNECT_JAR_GLOB)))
    if found:
        return found[-1:]
    raise FileNotFoundError(
        "no spark-connect_2.12 jar: run scripts/bootstrap.sh, or set AIP_SPARK_CONNECT_JARS (e.g. mvn dependency:copy "
        "-Dartifact=org.apache.spark:spark-connect_2.12:<pyspark version> -DoutputDirectory=DIR)"
    )


def _jars(extra: list[str] | None = None) -> list[str]:
    jars = [j for j in os.environ.get("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", "").split(",") if j.strip()]
    return [*connect_jars(), *jars, *(j for j in extra or [] if j not in jars)]


def _listening(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return True
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start(
    port: int = 15002,
    *,
    workdir: str | Path | None = None,
    master: str = "local[2]",
    extra_conf: dict[str, str] | None = None,
    extra_jars: list[str] | None = None,
    timeout: float = 240.0,
    die_with_parent: bool = False,
) -> ConnectServer:
    """Start a server on ``port`` and wait until it answers; ``RuntimeError`` with its log tail otherwise.

    ``extra_jars``: jars beyond the provider's (for example ``AIP_S3_SPARK_JARS``, S3FileIO and S3A for
    catalogs whose warehouse is on object storage): a session cannot add jars to a running server.
    """
    workdir = Path(workdir or Path(os.environ.get("AIP_WORK", ".work")) / "connect")
    workdir.mkdir(parents=True, exist_ok=True)
    if _listening(port):
        raise RuntimeError(f"port {port} is already in use; choose another with --port")
    spark_home = os.environ.get("SPARK_HOME")
    submit = str(Path(spark_home) / "bin" / "spark-submit") if spark_home else "spark-submit"
    conf = {
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        # a client that vanished without interrupting: its operations are interrupted after 30 s
        "spark.connect.execute.manager.detachedTimeout": "30s",
        "spark.connect.execute.manager.maintenanceInterval": "5s",
        **(extra_conf or {}),
    }
    log4j = Path(__file__).resolve().parent.parent / "airflow_iceberg_provider" / "spark_jobs" / "log4j2.properties"
    log4j_option = f"file:{log4j}" if log4j.is_file() else None
    server_options = os.environ.get("AIP_CONNECT_SERVER_JAVA_OPTIONS")
    try:  # the provider's redaction of catalog secrets (event logs, UI) and its driver JVM options
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from airflow_iceberg_provider.hooks.spark import SPARK_REDACTION_REGEX, driver_java_options, java_options

        conf.setdefault("spark.redaction.regex", SPARK_REDACTION_REGEX)
        user = conf.get("spark.driver.extraJavaOptions")
        if server_options is None:
            conf["spark.driver.extraJavaOptions"] = driver_java_options(user, log4j=log4j_option)
        else:  # a long-running server: its own JVM options instead of those for short drivers
            log4j_flag = f"-Dlog4j2.configurationFile={log4j_option}" if log4j_option else None
            conf["spark.driver.extraJavaOptions"] = java_options(log4j_flag, server_options, user)
    except ImportError:  # outside the Airflow environment: Spark's defaults and the log4j file only
        if log4j_option:
            conf.setdefault("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j_option}")
    cmd = [submit, "--class", SERVER_CLASS, "--master", master, "--name", f"spark-connect-{port}"]
    cmd += ["--jars", ",".join(_jars(extra_jars))]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd.append("spark-internal")
    log = workdir / "server.log"
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    env.pop("SPARK_REMOTE", None)
    preexec = None
    if die_with_parent and sys.platform.startswith("linux"):
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl

        def preexec() -> None:
            prctl(1, int(signal.SIGTERM))

    with open(log, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env, start_new_session=True, preexec_fn=preexec
        )
    _PROCS[proc.pid] = proc
    (workdir / "server.pid").write_text(f"{proc.pid}\n{port}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Spark Connect server exited with {proc.returncode}:\n{_tail(log)}")
        if _listening(port):
            return ConnectServer(port, proc.pid, log, workdir)
        time.sleep(0.5)
    stop(ConnectServer(port, proc.pid, log, workdir))
    raise RuntimeError(f"Spark Connect server did not answer on port {port} within {timeout:.0f}s:\n{_tail(log)}")


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def stop(server: ConnectServer, grace: float = 30.0) -> None:
    """Stop the server (SIGTERM to its process group, SIGKILL after ``grace``)."""
    if _alive(server.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and _alive(server.pid):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(server.pid, os.WNOHANG)
            time.sleep(0.2)
        if _alive(server.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
    proc = _PROCS.pop(server.pid, None)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    with contextlib.suppress(FileNotFoundError):
        (server.workdir / "server.pid").unlink()


def recorded(workdir: str | Path | None = None) -> ConnectServer | None:
    """The server recorded in ``workdir/server.pid`` (``None`` when there is none)."""
    workdir = Path(workdir or Path(os.environ.get("AIP_WORK", ".work")) / "connect")
    try:
        pid, port = (int(x) for x in (workdir / "server.pid").read_text().split()[:2])
    except (OSError, ValueError):
        return None
    return ConnectServer(port, pid, workdir / "server.log", workdir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Local Spark Connect server for the provider's Connect mode.")
    parser.add_argument("action", choices=("start", "stop", "status"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("AIP_CONNECT_PORT", "15002")))
    parser.add_argument("--master", default=os.environ.get("AIP_CONNECT_MASTER", "local[2]"))
    parser.add_argument("--dir", default=None, help="pid and log directory (default $AIP_WORK/connect)")
    parser.add_argument(
        "--jars", default="", help='comma-separated jars beyond the provider\'s, e.g. "$AIP_S3_SPARK_JARS" for S3'
    )
    args = parser.parse_args(argv)
    current = recorded(args.dir)
    if args.action == "start":
        if current is not None and _alive(current.pid):
            print(f"already running: pid {current.pid}, {current.url}")
            return 0
        t0 = time.monotonic()
        extra = [j for j in args.jars.split(",") if j.strip()]
        server = start(args.port, workdir=args.dir, master=args.master, extra_jars=extra)
        print(f"Spark Connect server on {server.url} (pid {server.pid}, ready in {time.monotonic() - t0:.1f}s)")
        print(f"log: {server.log}")
        return 0
    if current is None or not _alive(current.pid):
        print("no Spark Connect server running")
        return 0 if args.action == "stop" else 1
    if args.action == "stop":
        stop(current)
        print(f"stopped pid {current.pid}")
        return 0
    state = "answering" if _listening(current.port) else "starting"
    print(f"pid {current.pid}, {current.url}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
