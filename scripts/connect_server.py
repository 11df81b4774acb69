#!/usr/bin/env python3
"""Start, stop and check a local Spark Connect server for the provider's Connect mode.

    python scripts/connect_server.py start [--port 15002] [--master local[2]] [--dir DIR] [--jars J1,J2]
                                           [--bind 127.0.0.1] [--guarded-by-proxy]
    python scripts/connect_server.py status|stop [--dir DIR]

The server is private to its host by default. It binds to ``--bind`` (default 127.0.0.1) where the
Spark version supports it (``spark.connect.grpc.binding.address``, Spark 4); Spark 3.5's server
always listens on every interface and has no authentication, so on a loopback binding it also
runs :data:`INTERCEPTOR_CLASS`, which closes every call from another host with PERMISSION_DENIED.
A non-loopback ``--bind`` is refused unless ``--guarded-by-proxy`` says that a TLS-terminating,
authenticating proxy (or a firewall to one client host) stands in front of the port: anyone who
reaches an unguarded Connect server runs code on it and reads what its sessions read.

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
#: The interceptor that serves calls from the server's own host only (Spark 3.5: no binding address).
INTERCEPTOR_CLASS = "airflow_iceberg_provider.connect.LoopbackOnlyInterceptor"
INTERCEPTOR_SOURCE = Path(__file__).resolve().parent / "connect" / "LoopbackOnlyInterceptor.java"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
#: Added to the provider's redaction regex on a shared server: all catalog conf and Hadoop file-system conf.
SHARED_SERVER_REDACTION = r"|^spark\.sql\.catalog\.|^spark\.hadoop\.|^fs\."
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


def bundled_connect_jar(spark_home: str | None = None) -> str | None:
    """The Spark Connect server jar inside the Spark distribution (pyspark 4 ships ``spark-connect_2.13``)."""
    home = spark_home or os.environ.get("SPARK_HOME")
    found = sorted(glob.glob(str(Path(home) / "jars" / "spark-connect_*.jar"))) if home else []
    return found[-1] if found else None


def connect_jars() -> list[str]:
    """The Spark Connect plugin jar(s): none when Spark has its own (Spark 4), else ``AIP_SPARK_CONNECT_JARS``
    (``scripts/env.sh``), else the bootstrap's folder."""
    if bundled_connect_jar():
        return []
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


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this host only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    if host in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(bind: str, guarded_by_proxy: bool) -> None:
    """Refuse a non-loopback binding that nothing guards (``ValueError`` naming the fix)."""
    if not is_loopback(bind) and not guarded_by_proxy:
        raise ValueError(
            f"bind={bind!r} would expose the Spark Connect server to the network, and Spark 3.5's server has "
            "no authentication: whoever reaches the port runs code on it and reads what every session reads. "
            "Keep the default 127.0.0.1, or put a TLS-terminating proxy that authenticates clients in front of "
            "the port (or a firewall that admits the Airflow workers only) and pass --guarded-by-proxy "
            "(guarded_by_proxy=True)."
        )


def interceptor_jar(connect_jar: str, cache_dir: Path) -> Path:
    """The loopback-only interceptor compiled against ``connect_jar`` (cached by content), as a jar.

    It goes on ``--jars`` with the spark-connect jar: the interceptor must be loaded by the same class
    loader as the relocated gRPC classes it uses.
    """
    import hashlib
    import zipfile

    source = INTERCEPTOR_SOURCE.read_bytes()
    digest = hashlib.sha256(source + Path(connect_jar).name.encode()).hexdigest()[:16]
    jar = cache_dir / f"loopback-interceptor-{digest}.jar"
    if jar.is_file():
        return jar
    cache_dir.mkdir(parents=True, exist_ok=True)
    classes = cache_dir / f"classes-{digest}-{os.getpid()}"
    javac = str(Path(os.environ["JAVA_HOME"]) / "bin" / "javac") if os.environ.get("JAVA_HOME") else "javac"
    subprocess.run(
        [javac, "-nowarn", "-cp", connect_jar, "-d", str(classes), str(INTERCEPTOR_SOURCE)],
        check=True,
        capture_output=True,
    )
    partial = jar.with_suffix(f".{os.getpid()}.tmp")
    with zipfile.ZipFile(partial, "w") as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    os.replace(partial, jar)  # atomic: concurrent starts may compile it twice, never read half a jar
    import shutil

    shutil.rmtree(classes, ignore_errors=True)
    return jar


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


def _provider_conf(conf: dict[str, str]) -> None:
    """The provider's redaction of catalog secrets (event logs, UI) and its driver JVM options, in ``conf``."""
    log4j = Path(__file__).resolve().parent.parent / "airflow_iceberg_provider" / "spark_jobs" / "log4j2.properties"
    log4j_option = f"file:{log4j}" if log4j.is_file() else None
    server_options = os.environ.get("AIP_CONNECT_SERVER_JAVA_OPTIONS")
    try:  # the provider's redaction of catalog secrets (event logs, UI) and its driver JVM options
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from airflow_iceberg_provider.hooks.spark import SPARK_REDACTION_REGEX, driver_java_options, java_options

        # every session's catalog and Hadoop conf, whatever the key: a shared server knows no session's keys
        conf.setdefault("spark.redaction.regex", SPARK_REDACTION_REGEX + SHARED_SERVER_REDACTION)
        user = conf.get("spark.driver.extraJavaOptions")
        if server_options is None:
            conf["spark.driver.extraJavaOptions"] = driver_java_options(user, log4j=log4j_option)
        else:  # a long-running server: its own JVM options instead of those for short drivers
            log4j_flag = f"-Dlog4j2.configurationFile={log4j_option}" if log4j_option else None
            conf["spark.driver.extraJavaOptions"] = java_options(log4j_flag, server_options, user)
    except ImportError:  # outside the Airflow environment: Spark's defaults and the log4j file only
        if log4j_option:
            conf.setdefault("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j_option}")


def _loopback_only(conf: dict[str, str], jars: list[str]) -> None:
    """Add the loopback-only interceptor (first) to the server's interceptors and its jar to ``jars``."""
    cache = Path(os.environ.get("AIP_WORK", ".work")) / "connect-interceptor"
    jars.append(str(interceptor_jar(connect_jars()[0], cache)))
    listed = [c for c in conf.get("spark.connect.grpc.interceptor.classes", "").split(",") if c]
    conf["spark.connect.grpc.interceptor.classes"] = ",".join([INTERCEPTOR_CLASS, *listed])


def start(
    port: int = 15002,
    *,
    workdir: str | Path | None = None,
    master: str = "local[2]",
    extra_conf: dict[str, str] | None = None,
    extra_jars: list[str] | None = None,
    timeout: float = 240.0,
    die_with_parent: bool = False,
    bind: str = "127.0.0.1",
    guarded_by_proxy: bool = False,
    token: str | None = None,
) -> ConnectServer:
    """Start a server on ``port`` and wait until it answers; ``RuntimeError`` with its log tail otherwise.

    ``bind``: the address to serve (default loopback: this host only); a non-loopback one needs
    ``guarded_by_proxy=True`` (:func:`check_binding`).

    ``extra_jars``: jars beyond the provider's (for example ``AIP_S3_SPARK_JARS``, S3FileIO and S3A for
    catalogs whose warehouse is on object storage): a session cannot add jars to a running server.

    ``token``: the shared token every client must present (Spark 4's ``spark.connect.authenticate.token``),
    handed to the server in its environment (``SPARK_CONNECT_AUTHENTICATE_TOKEN``), never on its command line.
    """
    check_binding(bind, guarded_by_proxy)
    workdir = Path(workdir or Path(os.environ.get("AIP_WORK", ".work")) / "connect")
    workdir.mkdir(parents=True, exist_ok=True)
    if _listening(port):
        raise RuntimeError(f"port {port} is already in use; choose another with --port")
    spark_home = os.environ.get("SPARK_HOME")
    submit = str(Path(spark_home) / "bin" / "spark-submit") if spark_home else "spark-submit"
    jars = _jars(extra_jars)
    conf = {
        "spark.connect.grpc.binding.port": str(port),
        "spark.connect.grpc.binding.address": bind,  # Spark 4; Spark 3.5 listens everywhere (see below)
        "spark.sql.extensions": ICEBERG_EXTENSIONS,
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        # a client that vanished without interrupting: its operations are interrupted after 30 s
        "spark.connect.execute.manager.detachedTimeout": "30s",
        "spark.connect.execute.manager.maintenanceInterval": "5s",
        **(extra_conf or {}),
    }
    if is_loopback(bind) and not bundled_connect_jar():  # Spark 3.5 has no binding address: calls
        _loopback_only(conf, jars)  # from other hosts are refused instead
    _provider_conf(conf)
    cmd = [submit, "--class", SERVER_CLASS, "--master", master, "--name", f"spark-connect-{port}"]
    cmd += ["--jars", ",".join(jars)]
    for key, value in conf.items():
        cmd += ["--conf", f"{key}={value}"]
    cmd.append("spark-internal")
    log = workdir / "server.log"
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)
    if token:
        if not bundled_connect_jar(spark_home):
            raise ValueError("token: Spark 3.5's Connect server has no token authentication; use a Spark 4 runtime")
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
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
    parser.add_argument("--bind", default=os.environ.get("AIP_CONNECT_BIND", "127.0.0.1"), help="address to serve")
    parser.add_argument(
        "--guarded-by-proxy",
        action="store_true",
        help="allow a non-loopback --bind: a TLS-terminating, authenticating proxy or a firewall guards the port",
    )
    args = parser.parse_args(argv)
    current = recorded(args.dir)
    if args.action == "start":
        if current is not None and _alive(current.pid):
            print(f"already running: pid {current.pid}, {current.url}")
            return 0
        t0 = time.monotonic()
        extra = [j for j in args.jars.split(",") if j.strip()]
        try:
            check_binding(args.bind, args.guarded_by_proxy)
        except ValueError as err:
            print(f"refused: {err}", file=sys.stderr)
            return 2
        server = start(
            args.port,
            workdir=args.dir,
            master=args.master,
            extra_jars=extra,
            bind=args.bind,
            guarded_by_proxy=args.guarded_by_proxy,
        )
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
