"""Beyond one machine: a Spark standalone master + worker on 127.0.0.1 runs a provider job."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from tests.conftest import create_orders_table

APPEND = Path(__file__).parent.parent / "example_dags" / "jobs" / "append_orders.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    fh = log.open("w")
    return subprocess.Popen(
        ["spark-class", *args], stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def _wait_for(log: Path, needle: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} not seen in {log}:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture
def standalone_cluster(tmp_path):
    port = _free_port()
    master = _start(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(_free_port()),
        ],
        tmp_path / "master.log",
    )
    worker = None
    try:
        _wait_for(tmp_path / "master.log", "I have been elected leader", master)
        worker = _start(
            [
                "org.apache.spark.deploy.worker.Worker",
                f"spark://127.0.0.1:{port}",
                "--host",
                "127.0.0.1",
                "--cores",
                "2",
                "--memory",
                "2g",
                "--webui-port",
                str(_free_port()),
                "--work-dir",
                str(tmp_path / "work"),
            ],
            tmp_path / "worker.log",
        )
        _wait_for(tmp_path / "worker.log", "Successfully registered with master", worker)
        yield port, master, worker
    finally:
        for proc in (worker, master):
            if proc is not None:
                _stop(proc)


@pytest.mark.spark
@pytest.mark.cluster
def test_provider_job_runs_on_standalone_cluster(lake, context, standalone_cluster, monkeypatch, tmp_path):
    port, master, worker = standalone_cluster
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_STANDALONE",
        json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": port}),
    )
    create_orders_table(lake)
    op = IcebergSparkSubmitOperator(
        task_id="append_on_cluster",
        table="db.orders",
        application=str(APPEND),
        spark_conn_id="spark_standalone",
        params_for_job={"rows": 20000, "ds": "2026-02-01"},
        spark_conf={"spark.executor.memory": "1g", "spark.cores.max": "2"},
        expected_operations=["append"],
    )
    result = op.execute(context)
    assert result["added_records"] == 20000
    snap = lake.snapshot("db.orders", snapshot_id=int(result["snapshot_id"]))
    assert snap.summary["spark.app.id"].startswith("app-")  # a standalone application, not local-*
    assert snap.summary["airflow.dag-id"] == "test_dag"
    # the executors really ran on the worker
    assert list((tmp_path / "work").glob("app-*/*/stderr"))
    _stop(worker)
    _stop(master)
    assert master.poll() is not None and worker.poll() is not None
