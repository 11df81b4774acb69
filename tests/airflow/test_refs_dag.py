"""The deferrable snapshot sensor under ``airflow dags test`` (Airflow 3 runs triggers inline there).

The DAG (tests/airflow/_refs_dags/refs_sensor_wait.py) defers; while its trigger is polling inline,
this test commits from outside; the trigger fires, the task resumes and stores the commit in
its last-seen Variable. A second run with the same marker must wait again (the remembered
commit does not count) and fires on the next commit only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pytest

from tests.support.lake import catalog_conn_json, pristine_airflow_db

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = Path(__file__).resolve().parent / "_refs_dags" / "refs_sensor_wait.py"
TABLE = "wait.events"
STATE_KEY = "iceberg_snapshot_sensor.refs_sensor_wait.wait.wait.events.main"

pytestmark = pytest.mark.airflow


@pytest.fixture
def airflow_env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "airflow"
    home.mkdir()
    src = pristine_airflow_db()
    if not src.exists():
        pytest.skip(f"no migrated Airflow DB at {src}; run scripts/bootstrap.sh")
    shutil.copy(src, home / "airflow.db")
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / DAG_FILE.name).symlink_to(DAG_FILE)
    (tmp_path / "wh").mkdir()
    return {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": catalog_conn_json(tmp_path / "c.db", tmp_path / "wh"),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }


def _hook(env):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"]
    return IcebergCatalogHook()


def _commit(hook, marker: str, n: int) -> int:
    tbl = hook.load_table(TABLE)
    tbl.append(
        pa.table({"order_id": pa.array([n], pa.int64()), "note": pa.array([marker], pa.string())}),
        snapshot_properties={"test.marker": marker},
    )
    return hook.ref_snapshot_id(TABLE)


def _run_until_deferred_then_commit(env, tmp_path: Path, marker: str, n: int, run_date: str):
    """Start the DAG; once the trigger polls inline, commit; return (state, log, committed id)."""
    log_path = tmp_path / f"run-{n}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["airflow", "dags", "test", "refs_sensor_wait", run_date, "-c", json.dumps({"marker": marker})],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        deadline = time.monotonic() + 240
        while "running trigger in line" not in log_path.read_text():
            assert proc.poll() is None, log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, "the sensor never deferred"
            time.sleep(0.5)
        time.sleep(2)  # let the trigger poll a few times with nothing to find
        committed = _commit(_hook(env), marker, n)
        proc.wait(timeout=240)
    out = log_path.read_text()
    finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
    state = "success" if proc.returncode == 0 and finished and "state=success" in finished[-1] else "failed"
    return state, out, committed


def _variable(env) -> dict:
    proc = subprocess.run(
        ["airflow", "variables", "get", STATE_KEY], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_deferrable_sensor_waits_in_dags_test_and_remembers(airflow_env, tmp_path):
    state, out, first = _run_until_deferred_then_commit(airflow_env, tmp_path, "m1", 1, "2026-01-01T00:00:00+00:00")
    assert state == "success", out[-6000:]
    assert "Deferring: waiting for a commit" in out
    polls = [line for line in out.splitlines() if "Trigger reported a commit after" in line]
    assert polls and int(polls[-1].split("after ")[1].split(" ")[0]) > 1, polls  # it really waited
    assert _variable(airflow_env)["snapshot_id"] == first

    # same marker again: the remembered commit does not satisfy the sensor; only the next one does
    state, out, second = _run_until_deferred_then_commit(airflow_env, tmp_path, "m1", 2, "2026-01-02T00:00:00+00:00")
    assert state == "success", out[-6000:]
    assert second != first
    assert _variable(airflow_env)["snapshot_id"] == second
