"""The demo's execution mode: one local Spark Connect server for every example DAG run.

``AIP_DEMO_MODE`` chooses: ``connect`` (default) starts one Connect server on 127.0.0.1
(port ``AIP_DEMO_CONNECT_PORT``, default 15002) from the bootstrap's jars and points the
``spark_default`` connection at it, so the example DAGs run through it unchanged; the
foundation DAG's run (``AIP_DEMO_SUBMIT_DAG``) keeps ``spark-submit`` to show that mode too.
``submit`` runs everything through spark-submit. The server is stopped when the demo ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import connect_server  # noqa: E402

MODE = os.environ.get("AIP_DEMO_MODE", "connect").strip().lower()
SUBMIT_DAG = os.environ.get("AIP_DEMO_SUBMIT_DAG", "iceberg_foundation")
_SUBMIT_CONN = os.environ.get("AIRFLOW_CONN_SPARK_DEFAULT") or json.dumps({"conn_type": "spark", "host": "local[2]"})


@contextlib.contextmanager
def execution_mode() -> Iterator[None]:
    """Start the demo's Connect server (``connect`` mode) and stop it at the end."""
    if MODE != "connect":
        print("demo mode: spark-submit for every Spark task", flush=True)
        yield
        return
    port = int(os.environ.get("AIP_DEMO_CONNECT_PORT", "15002"))
    workdir = Path(os.environ.get("AIP_WORK", ".work")) / "connect"
    t0 = time.monotonic()
    server = connect_server.start(port, workdir=workdir, die_with_parent=True)
    print(
        f"demo mode: Spark Connect server on {server.url} (pid {server.pid}, ready in {time.monotonic() - t0:.1f}s, "
        f"log {server.log}); {SUBMIT_DAG} runs through spark-submit",
        flush=True,
    )
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = server.conn_json("spark_default")
    try:
        yield
    finally:
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = _SUBMIT_CONN
        connect_server.stop(server)
        print(f"demo: Spark Connect server stopped (pid {server.pid})", flush=True)


@contextlib.contextmanager
def dag_mode(dag_id: str) -> Iterator[str]:
    """The mode one DAG's runs use (``spark-submit`` for :data:`SUBMIT_DAG` in ``connect`` mode)."""
    connect_conn = os.environ.get("AIRFLOW_CONN_SPARK_DEFAULT", "")
    if MODE != "connect" or dag_id != SUBMIT_DAG:
        yield "spark_connect" if MODE == "connect" else "spark-submit"
        return
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = _SUBMIT_CONN
    try:
        yield "spark-submit"
    finally:
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = connect_conn
