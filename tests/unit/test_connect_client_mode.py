"""Where a Spark Connect job's client runs: the runtime setting, the connection's ``client`` extra, refusals.

Pure: a connection object and environment variables, no server.
"""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.config import spark_runtime
from airflow_iceberg_provider.core.connect_session import refused, unreachable
from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.hooks.spark_connect import endpoint_from_connection


class Conn:
    def __init__(self, extra: dict | None = None, password: str | None = None, host: str = "sc://localhost") -> None:
        self.conn_id = "sc_test"
        self.conn_type = "spark_connect"
        self.host = host
        self.port = 15002
        self.login = None
        self.password = password
        self.extra_dejson = extra or {}


@pytest.mark.parametrize(
    ("runtime", "extra", "client"),
    [
        ("3.5", {}, "runner"),
        ("4.1", {}, "in_process"),
        ("4.1", {"client": "runner"}, "runner"),
        ("3.5", {"client": "IN_PROCESS"}, "in_process"),
        ("4.1", {"python": "/opt/spark/bin/python"}, "runner"),
    ],
)
def test_the_runtime_chooses_the_client_unless_the_connection_says(monkeypatch, runtime, extra, client):
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME", runtime)
    assert endpoint_from_connection(Conn(extra)).client == client


def test_an_unknown_client_or_runtime_is_refused_with_the_fix(monkeypatch):
    with pytest.raises(IcebergConnectionError, match=r"extra client='forked' is not one of in_process, runner"):
        endpoint_from_connection(Conn({"client": "forked"}))
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME", "4.0")
    with pytest.raises(ValueError, match=r"spark_runtime='4.0' .* use one of 3.5, 4.1"):
        spark_runtime()


def test_the_token_travels_in_the_url_only_and_never_in_the_endpoints_repr(monkeypatch):
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME", "4.1")
    endpoint = endpoint_from_connection(
        Conn({"use_ssl": True}, password="tok/with;chars", host="sc://spark.example.com")
    )
    assert endpoint.url == "sc://spark.example.com:15002/;token=tok%2Fwith%3Bchars;use_ssl=true"
    assert "tok" not in repr(endpoint) and endpoint.address == "spark.example.com:15002"


def test_refused_and_unreachable_errors_are_told_apart():
    assert refused(RuntimeError("StatusCode.UNAUTHENTICATED: Invalid authentication token"))
    assert not refused(RuntimeError("StatusCode.UNAVAILABLE: failed to connect to all addresses"))
    assert unreachable(RuntimeError("StatusCode.UNAVAILABLE: failed to connect to all addresses"))
