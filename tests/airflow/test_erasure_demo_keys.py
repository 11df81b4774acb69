"""After the demo's erasure example DAGs run, no requests table holds a plaintext subject key.

The erasure examples run in the demo's order (``iceberg_erasure``, ``iceberg_erasure_daily``,
``iceberg_erasure_nightly``, ``iceberg_erasure_catalog``) with the demo's ``airflow dags test``
helper (``scripts/dag_test.py``) on a fresh SQLite catalog. Then every file under every requests
table's location is byte-scanned (``tests/support/key_scan.py``): data files with their values and
footer statistics, delete files, manifests and manifest lists decompressed, metadata JSON, and
files no snapshot references any more. Positive control: after the daily (logical) run, whose
requests are not erased yet, the same scan finds its keys.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.airflow_procs import airflow_env
from tests.support.key_scan import files_holding, scanned_files

ROOT = Path(__file__).resolve().parents[2]
DAGS = ("iceberg_erasure", "iceberg_erasure_daily", "iceberg_erasure_nightly", "iceberg_erasure_catalog")
MODULES = {
    "iceberg_erasure": "example_iceberg_erasure",
    "iceberg_erasure_daily": "example_iceberg_erasure_daily",
    "iceberg_erasure_catalog": "example_iceberg_erasure_catalog",
}

pytestmark = [pytest.mark.spark, pytest.mark.airflow]


def _run(env: dict[str, str], dag_id: str, date: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dag_test.py"), dag_id, date],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    out = proc.stdout + proc.stderr
    finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
    assert proc.returncode == 0 and finished and "state=success" in finished[-1], f"{dag_id}:\n{out[-6000:]}"


def _requests_tables(cat) -> dict[str, Path]:
    """Every table of the catalog with the requests table's columns -> its directory."""
    out = {}
    for ns in cat.list_namespaces():
        for ident in cat.list_tables(ns):
            tbl = cat.load_table(ident)
            if {"request_id", "subject_key", "status"} <= set(tbl.schema().column_names):
                out[".".join(ident)] = Path(tbl.location().removeprefix("file://"))
    return out


def test_no_requests_table_holds_a_plaintext_key_after_the_erasure_examples(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    env = airflow_env(tmp_path)
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "example_dags")
    keys = {
        dag: dict(importlib.import_module(f"example_dags.{module}").DEMO_SUBJECTS) for dag, module in MODULES.items()
    }
    start = datetime.now(UTC).replace(microsecond=0)
    cat = SqlCatalog("lakehouse", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}")
    for i, dag_id in enumerate(DAGS):
        _run(env, dag_id, (start + timedelta(minutes=i)).isoformat())
        if dag_id == "iceberg_erasure_daily":  # positive control: logically erased, keys still there
            daily = _requests_tables(cat)["erasure_daily.requests"]
            assert set(files_holding(daily, keys[dag_id].values())) == set(keys[dag_id].values())

    tables = _requests_tables(cat)
    assert set(tables) == {"erasure.requests", "erasure_daily.requests", "erasure_catalog.requests"}
    every_key = {k for subjects in keys.values() for k in subjects.values()}
    for name, location in tables.items():
        kinds = scanned_files(location)
        assert kinds.get("parquet") and kinds.get("avro") and kinds.get("json"), (name, kinds)
        assert files_holding(location, every_key) == {}, name
        states = {r["status"] for r in cat.load_table(name).scan(selected_fields=("status",)).to_arrow().to_pylist()}
        assert states == {"redacted"}, (name, states)
