"""A private Spark Connect server: loopback only unless guarded, TLS to remote servers, per-session secrets."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess

import pytest

from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.hooks.spark_connect import (
    SESSION_REDACTION_KEY,
    ConnectEndpoint,
    endpoint_from_connection,
    session_document,
)
from scripts import connect_server

pytestmark = pytest.mark.security


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.0.2.10", "spark-connect.internal", "::"])
def test_a_non_loopback_binding_is_refused_unless_guarded(bind):
    with pytest.raises(ValueError, match=rf"bind='{re.escape(bind)}' would expose.*--guarded-by-proxy"):
        connect_server.start(1, bind=bind)  # refused before anything starts
    connect_server.check_binding(bind, guarded_by_proxy=True)  # the explicit flag allows it
    for loopback in ("127.0.0.1", "127.0.0.2", "localhost", "::1"):
        connect_server.check_binding(loopback, guarded_by_proxy=False)


def test_the_cli_refuses_an_unguarded_binding(tmp_path, capsys):
    assert connect_server.main(["start", "--bind", "0.0.0.0", "--dir", str(tmp_path)]) == 2
    assert "refused: bind='0.0.0.0'" in capsys.readouterr().err
    assert not (tmp_path / "server.pid").exists()


class Conn:
    conn_id = "sc"

    def __init__(self, host: str, **extra: object) -> None:
        self.host, self.port, self.login, self.password = host, 15002, None, None
        self.extra_dejson = extra


def test_a_remote_server_needs_tls_or_an_explicit_private_network():
    with pytest.raises(IcebergConnectionError, match="would cross the network in plain text") as err:
        endpoint_from_connection(Conn("sc://spark.example.com"))
    assert '{"use_ssl": true}' in str(err.value) and '{"allow_plaintext": true}' in str(err.value)
    assert endpoint_from_connection(Conn("sc://spark.example.com", use_ssl=True)).url.endswith("use_ssl=true")
    assert endpoint_from_connection(Conn("sc://spark.example.com", allow_plaintext="true")).host == "spark.example.com"
    assert endpoint_from_connection(Conn("sc://127.0.0.1")).host == "127.0.0.1"


def test_each_session_redacts_its_own_secret_keys():
    doc = session_document(
        ConnectEndpoint("c", "127.0.0.1", 1, "sc://127.0.0.1:1/"),
        application="a.py",
        application_args=[],
        conf={"spark.sql.catalog.a.uri": "http://rest"},
        secret_conf={"spark.sql.catalog.a.header.Authorization": "Bearer A", "spark.sql.catalog.a.vendor.k": "v"},
        py_files=[],
        job_name="j",
    )
    regex = re.compile(doc["conf"][SESSION_REDACTION_KEY])
    assert regex.search("spark.sql.catalog.a.header.Authorization") and regex.search("spark.sql.catalog.a.vendor.k")
    assert regex.search("jdbc-url") and not regex.search("spark.sql.catalog.a.uri")
    assert "Bearer A" not in json.dumps(doc["conf"])
    server = re.compile(connect_server.SHARED_SERVER_REDACTION.lstrip("|"))
    assert server.search("spark.sql.catalog.b.anything") and server.search("fs.s3a.secret.key")


# ------------------------------------------------------------------ on the shared test server


def _other_address() -> str | None:
    """An address of this host that is not loopback (the one its default route uses)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("203.0.113.1", 9))  # no packet is sent: this only picks the route's source address
            address = s.getsockname()[0]
    except OSError:
        return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def _probe(host: str, port: int) -> tuple[str, str]:
    import grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        call = channel.unary_unary(
            "/spark.connect.SparkConnectService/Config",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            call(b"", timeout=60)
        except grpc.RpcError as err:
            return err.code().name, err.details() or ""
    return "OK", ""


@pytest.mark.connect
def test_the_server_serves_its_own_host_only(connect_server_session):
    other = _other_address()
    if other is None:
        pytest.skip("this host has no non-loopback address to connect from")
    port = connect_server_session.port
    assert _probe("127.0.0.1", port)[0] != "PERMISSION_DENIED"  # reaches Spark (which rejects the empty call)
    code, details = _probe(other, port)
    assert code == "PERMISSION_DENIED" and "serves its own host only" in details


TWO_SESSIONS = r"""
import json, sys
from pyspark.sql.connect.session import SparkSession
url = sys.argv[1]
a = SparkSession.builder.remote(url).create()
b = SparkSession.builder.remote(url).create()
a.conf.set("spark.sql.catalog.conn_a.token", "TOKEN-OF-A-7f3e")
a.conf.set("spark.sql.catalog.conn_a.vendor.key", "VENDOR-OF-A-91c2")
seen_by_b = {
    "get": b.conf.get("spark.sql.catalog.conn_a.token", None),
    "set": [r[1] for r in b.sql("SET").collect() if "conn_a" in r[0]],
    "set_key": [r[1] for r in b.sql("SET spark.sql.catalog.conn_a.token").collect()],
}
seen_by_a = a.conf.get("spark.sql.catalog.conn_a.token", None)
a.conf.unset("spark.sql.catalog.conn_a.token")
print(json.dumps({"a": seen_by_a, "b": seen_by_b}))
"""


@pytest.mark.connect
def test_a_session_never_sees_another_sessions_catalog_credentials(connect_server_session, tmp_path):
    script = tmp_path / "two_sessions.py"
    script.write_text(TWO_SESSIONS)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    out = subprocess.run(
        [os.environ["AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON"], str(script), connect_server_session.url],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["a"] == "TOKEN-OF-A-7f3e"  # the session that set it reads it
    assert seen["b"]["get"] is None and seen["b"]["set"] == []  # another session of the same server does not
    assert "TOKEN-OF-A" not in json.dumps(seen["b"])
