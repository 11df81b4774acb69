"""Example DAGs: they parse, and the foundation DAG runs end to end under `airflow dags test`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.airflow_procs import airflow_env

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "example_dags"


def test_example_dags_import_cleanly():
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(DAGS))
    assert bag.import_errors == {}
    assert "iceberg_foundation" in bag.dag_ids
    for path in DAGS.glob("example_*.py"):
        text = path.read_text()
        assert "DEMO = " in text, f"{path.name} must declare DEMO for scripts/demo.py"


def dags_test(env: dict[str, str], dag_id: str, *extra: str) -> tuple[str, str]:
    proc = subprocess.run(
        ["airflow", "dags", "test", dag_id, "2026-01-01T00:00:00+00:00", *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
    state = "success" if proc.returncode == 0 and finished and "state=success" in finished[-1] else "failed"
    return state, out


@pytest.mark.spark
@pytest.mark.airflow
def test_foundation_dag_end_to_end(tmp_path):
    env = airflow_env(tmp_path)
    state, out = dags_test(env, "iceberg_foundation")
    assert state == "success", out[-4000:]
    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("lakehouse", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}")
    tbl = cat.load_table("demo.orders")
    snap = tbl.current_snapshot()
    assert snap.summary["added-records"] == "1000"
    assert snap.summary["airflow.dag-id"] == "iceberg_foundation"
    assert [f.name for f in tbl.spec().fields] == ["order_ts_day"]
    ledger = cat.load_table("governance.ledger").scan().to_arrow().to_pylist()
    assert {r["operation"] for r in ledger} >= {"create_table", "spark_submit"}
