"""The demo's runs that are meant to fail carry a DAG-run note saying so (#20).

A real ``airflow dags test`` of a DAG that fails on purpose, in an isolated AIRFLOW_HOME; then
``scripts/demo.py`` attaches the note and the note is read back from Airflow's metadata DB
(the row the UI shows). No Spark.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lake import pristine_airflow_db

ROOT = Path(__file__).resolve().parents[2]
from scripts import demo  # noqa: E402

pytestmark = pytest.mark.airflow

FAILING_DAG = """
import pendulum
from airflow.sdk import DAG, task

with DAG(dag_id="meant_to_fail", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:

    @task
    def refuse():
        raise RuntimeError("refused on purpose")

    refuse()
"""


def test_expected_failure_note_says_what_and_why():
    note = demo.expected_failure_note({"label": "bad rows: audit fails, main unchanged", "expect": "failed"})
    assert note.startswith("Expected to fail (demo): bad rows: audit fails, main unchanged.")
    assert "not an incident" in note
    assert "explicit reason" in demo.expected_failure_note({"note": "explicit reason", "label": "ignored"})


def test_a_failed_demo_run_gets_its_note_in_the_metadata_db(tmp_path):
    src = pristine_airflow_db()
    if not src.exists():
        pytest.skip(f"no migrated Airflow DB at {src}; run scripts/bootstrap.sh")
    home, dags = tmp_path / "airflow", tmp_path / "dags"
    home.mkdir()
    dags.mkdir()
    shutil.copy(src, home / "airflow.db")
    (dags / "meant_to_fail.py").write_text(FAILING_DAG)
    env = {**os.environ, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    proc = subprocess.run(
        ["airflow", "dags", "test", "meant_to_fail", "2026-01-02T00:00:00+00:00"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert "DagRun Finished:" in out and "state=failed" in out, out[-3000:]
    (tmp_path / "out.txt").write_text(out)
    note = demo.expected_failure_note({"label": "refused on purpose"})
    script = (
        "import json, sys; from scripts import demo\n"
        "from pathlib import Path\n"
        "run_id = demo.set_run_note('meant_to_fail', Path(sys.argv[1]).read_text(), sys.argv[2])\n"
        "from airflow.models.dagrun import DagRun\n"
        "from airflow.utils.session import create_session\n"
        "from sqlalchemy import select\n"
        "with create_session() as s:\n"
        "    dr = s.scalar(select(DagRun).where(DagRun.dag_id == 'meant_to_fail'))\n"
        "    print(json.dumps({'run_id': run_id, 'stored_run_id': dr.run_id, 'note': dr.note, 'state': dr.state}))\n"
    )
    read = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "out.txt"), note],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    stored = json.loads(read.stdout.strip().splitlines()[-1])
    assert stored["run_id"] == stored["stored_run_id"] and stored["state"] == "failed"
    assert stored["note"] == note
    assert demo.set_run_note("meant_to_fail", "no finished line", note) is None
