"""Deadline alerts tied to the statutory erasure deadline (``airflow_iceberg_provider.deadlines``).

The alert's arithmetic and refusals, that the erasure example DAGs declare one that survives
Airflow's DAG serialization (what the scheduler stores and evaluates), and that its default
callback (run by the triggerer when a deadline is missed) logs and writes a ledger row.
"""

from __future__ import annotations

import asyncio
import importlib
from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.core.governance import decode_ledger_row
from airflow_iceberg_provider.deadlines import (
    MISSED_OPERATION,
    erasure_deadline_alert,
    erasure_deadline_missed,
    erasure_run_budget,
)
from airflow_iceberg_provider.exceptions import IcebergValidationError


def test_run_budget_is_deadline_minus_cadence_minus_margin():
    assert erasure_run_budget(timedelta(days=30), timedelta(days=1), timedelta(days=28)) == timedelta(days=1)
    assert erasure_run_budget(timedelta(hours=72), timedelta(0)) == timedelta(hours=72)
    with pytest.raises(IcebergValidationError, match="leaves no time for a run that starts every cadence=1 day"):
        erasure_run_budget(timedelta(hours=24), timedelta(days=1))
    with pytest.raises(IcebergValidationError, match="margin=.* must be a non-negative"):
        erasure_run_budget(timedelta(days=1), timedelta(0), timedelta(hours=-1))


def test_alert_watches_the_queued_run_with_the_provider_callback():
    from airflow.sdk.definitions.deadline import DeadlineReference

    alert = erasure_deadline_alert(deadline=timedelta(days=30), cadence=timedelta(days=1), margin=timedelta(days=28))
    assert alert.reference == DeadlineReference.DAGRUN_QUEUED_AT and alert.interval == timedelta(days=1)
    assert alert.callback.path == "airflow_iceberg_provider.deadlines.erasure_deadline_missed"
    assert alert.callback.kwargs["statutory_deadline_hours"] == 720


@pytest.mark.parametrize(
    ("module", "interval"),
    [("example_iceberg_erasure_nightly", timedelta(days=1)), ("example_iceberg_erasure", timedelta(hours=24))],
)
def test_erasure_example_dags_declare_the_alert_and_it_serializes(module, interval):
    from airflow.serialization.serialized_objects import DagSerialization

    dag = importlib.import_module(f"example_dags.{module}").dag
    (alert,) = dag.deadline
    assert alert.interval == interval
    data = DagSerialization.to_dict(dag)
    assert "erasure_deadline_missed" in str(data["dag"]["deadline"])


def test_missed_deadline_callback_logs_and_records_it(lake, caplog):
    context = {
        "dag_run": {"dag_id": "iceberg_erasure_nightly", "dag_run_id": "scheduled__2026-01-02", "queued_at": "x"},
        "deadline": {"id": "d1", "deadline_time": datetime(2026, 1, 3, 2, tzinfo=UTC)},
    }
    with caplog.at_level("ERROR"):
        out = asyncio.run(erasure_deadline_missed(context, statutory_deadline_hours=720.0, run_budget_hours=24.0))
    assert "did not finish within 24.0 h" in caplog.text and out["run_id"] == "scheduled__2026-01-02"
    (row,) = [decode_ledger_row(r) for r in lake.governance.read("ledger", operation=MISSED_OPERATION)]
    assert row["status"] == "warned" and row["details"]["deadline_time"] == "2026-01-03T02:00:00+00:00"
    assert row["details"]["dag_id"] == "iceberg_erasure_nightly"


DEADLINE_DAG = """
from datetime import timedelta
import pendulum
from airflow.sdk import DAG, task
from airflow_iceberg_provider.deadlines import erasure_deadline_alert

with DAG(dag_id="with_deadline", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
         deadline=erasure_deadline_alert(deadline=timedelta(hours=72), cadence=timedelta(0),
                                         margin=timedelta(hours=48))):
    @task
    def done():
        return 1

    done()
"""


@pytest.mark.airflow
def test_demo_dag_test_runs_a_dag_with_a_deadline_to_success(tmp_path):
    """``scripts/dag_test.py`` (what ``make demo`` runs): a successful run of a DAG with the erasure
    alert ends ``success``; plain ``airflow dags test`` 3.3.2 raises on the alert lookup there."""
    import os
    import shutil
    import sqlite3
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.lake import pristine_airflow_db

    root = Path(__file__).resolve().parents[2]
    home, dags = tmp_path / "airflow", tmp_path / "dags"
    home.mkdir()
    dags.mkdir()
    shutil.copy(pristine_airflow_db(), home / "airflow.db")
    (dags / "with_deadline.py").write_text(DEADLINE_DAG)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    proc = subprocess.run(
        [sys.executable, str(root / "scripts" / "dag_test.py"), "with_deadline", "2026-01-02T00:00:00+00:00"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "state=success" in [line for line in out.splitlines() if "DagRun Finished:" in line][-1]
    with sqlite3.connect(home / "airflow.db") as db:
        (alerts,) = db.execute("SELECT count(*) FROM deadline_alert").fetchone()
    assert alerts == 1  # the DAG's alert was stored with its serialized DAG, and the run still succeeded
