"""The README's first DAG runs as shown: its two code blocks, saved as written, in a fresh Airflow.

The DAG block and the application block are extracted from README.md, written to a DAGs folder
(``orders_daily.py`` and ``append_orders.py`` beside it, as the README says) and run with the
project's ``airflow dags test`` helper (``scripts/dag_test.py``) on a fresh SQLite catalog.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.airflow_procs import airflow_env

ROOT = Path(__file__).resolve().parents[2]


def readme_blocks() -> tuple[str, str]:
    """``(dag, application)``: the README's python blocks holding ``with DAG(`` and ``run_job(``."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    dag = [b for b in blocks if "with DAG(" in b]
    app = [b for b in blocks if "run_job(" in b]
    assert len(dag) == 1 and len(app) == 1, "the README shows one DAG and one application"
    return dag[0], app[0]


def test_the_readme_shows_the_table_creation_and_the_applications_contract() -> None:
    dag, app = readme_blocks()
    assert "IcebergCreateTableOperator(" in dag and "create >> wap" in dag
    assert 'ctx.spec["snapshot_properties"]' in app and "snapshot-property." in app
    assert 'Path(__file__).parent / "append_orders.py"' in dag and app.startswith("# append_orders.py\n")


@pytest.mark.spark
@pytest.mark.airflow
def test_the_readme_dag_runs_as_shown(tmp_path: Path) -> None:
    dag, app = readme_blocks()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "orders_daily.py").write_text(dag)
    (dags / "append_orders.py").write_text(app)
    # the application is not a DAG file: keep the DAG processor from parsing it
    (dags / ".airflowignore").write_text("append_orders\\.py\n")
    env = airflow_env(tmp_path)
    env["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    env["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dag_test.py"), "orders_daily", "2026-01-01T00:00:00+00:00"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
    assert proc.returncode == 0 and finished and "state=success" in finished[-1], out[-4000:]

    from pyiceberg.catalog.sql import SqlCatalog

    cat = SqlCatalog("lakehouse", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=f"file://{tmp_path / 'wh'}")
    table = cat.load_table("sales.orders")
    assert table.scan().to_arrow().num_rows == 100
    head = table.current_snapshot()
    assert head is not None and head.summary is not None
    # the application applied spec["snapshot_properties"]: the Airflow run is stamped on the published commit
    assert head.summary["airflow.dag-id"] == "orders_daily"
    assert table.metadata.refs["daily-20260101"].snapshot_id == head.snapshot_id
