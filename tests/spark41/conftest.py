"""The Spark 4.1 tier: spark-submit with the 4.1 runtime (``runtime41``), and one token-protected Spark 4.1
Connect server per Connect module (``server41``), the task process as its client.

Runs where the environment is the 4.1 runtime (``AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME=4.1`` before
``source scripts/env.sh``, as ``scripts/test.sh`` does for this tier) and the Airflow environment's
``pyspark-client`` shares the server's minor; elsewhere the modules are skipped with the reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

#: The Connect server's shared token in these tests (a stand-in: the tests check it is never logged).
TOKEN = "tok-41-Connect-7d3f9a2b"


def spark41_ready() -> str | None:
    """Why this environment cannot run the 4.1 tier, or ``None``."""
    from scripts import connect_server

    if os.environ.get("AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME") != "4.1":
        return "the Spark 4.1 tier runs with AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME=4.1 (scripts/test.sh)"
    if not connect_server.bundled_connect_jar():
        return "SPARK_HOME is not a Spark 4 distribution (scripts/bootstrap.sh builds .spark-runtime-4.1)"
    try:
        from pyspark.version import __version__
    except ImportError:
        return "no pyspark-client in this environment"
    if not __version__.startswith("4.1."):
        return f"pyspark-client {__version__} is not the server's minor 4.1 (pyproject.toml pins it)"
    return None


class Server41:
    """The module's server: its address, its log, and connections for it."""

    def __init__(self, server: Any) -> None:
        self.server = server

    def conn_json(self, conn_id: str, *, token: str | None = TOKEN, **extra: Any) -> str:
        doc: dict[str, Any] = {
            "conn_type": "spark_connect",
            "host": "sc://localhost",  # a token over plain text: gRPC's local credentials (this host only)
            "port": self.server.port,
            "extra": {"timeout": 600, **extra},
        }
        if token is not None:
            doc["password"] = token
        return json.dumps(doc)

    def calls(self, procedure_class: str) -> int:
        """How many times the server ran ``procedure_class.call`` (Iceberg's procedure, by its stack frame).

        Spark 4 runs a stored procedure while it analyzes the ``CALL`` (its ``InvokeProcedures`` rule),
        so no SQL execution records it; each run resolves its ``table`` argument, and a name without
        the catalog (``db.t``) makes Iceberg log one warning whose stack names the procedure's ``call``.
        """
        frame = f"at org.apache.iceberg.spark.procedures.{procedure_class}.call("
        return self.server.log.read_text(errors="replace").count(frame)


@pytest.fixture(scope="module")
def server41(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server41]:
    why = spark41_ready()
    if why:
        pytest.skip(why)
    from scripts import connect_server
    from tests.support.servers import free_ports

    workdir = tmp_path_factory.mktemp("connect41")
    srv = connect_server.start(free_ports(1)[0], workdir=workdir, die_with_parent=True, token=TOKEN)
    yield Server41(srv)
    connect_server.stop(srv)


@pytest.fixture(scope="module")
def runtime41() -> None:
    """The 4.1 runtime under ``scripts/env.sh``, for modules that submit with spark-submit (no server)."""
    why = spark41_ready()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def spark_default41(request: pytest.FixtureRequest) -> Iterator[str]:
    """``spark_default`` on the module's 4.1 Connect server (the task process as its client), as
    ``spark_on_connect`` does on 3.5; ``AIP_TEST_SPARK_MODE=spark_submit`` keeps spark-submit. Yields the mode."""
    from tests.conftest import SPARK_MODE

    if SPARK_MODE == "spark_submit":
        request.getfixturevalue("runtime41")
        yield "spark_submit"
        return
    server = request.getfixturevalue("server41")
    key = "AIRFLOW_CONN_SPARK_DEFAULT"
    old = os.environ.get(key)
    os.environ[key] = server.conn_json("spark_default")
    yield "spark_connect"
    if old is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = old


@pytest.fixture(scope="module")
def connect41(server41: Server41) -> Iterator[str]:
    """``spark_connect41``: the module's server with the right token, the task process as the client."""
    conn_id = "spark_connect41"
    key = f"AIRFLOW_CONN_{conn_id.upper()}"
    old = os.environ.get(key)
    os.environ[key] = server41.conn_json(conn_id)
    yield conn_id
    if old is None:
        os.environ.pop(key, None)
    else:
        os.environ[key] = old
