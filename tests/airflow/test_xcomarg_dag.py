"""Every templated argument of every operator may come from an upstream task (XComArg or Jinja).

Airflow renders template fields and resolves ``XComArg``s after ``__init__``; a constructor that
validates them sees an ``XComArg`` object or raw Jinja. The parse tests build every operator and
sensor of the provider with each template field as an ``XComArg`` and then as Jinja; the DAG in
``tests/airflow/_xcomarg_dags`` (catalog-only operators: no Spark) is parsed both ways and run once with
``airflow dags test``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pendulum
import pytest

from tests.support.lake import catalog_conn_json, pristine_airflow_db

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = Path(__file__).resolve().parent / "_xcomarg_dags" / "xcomarg_all_operators.py"
MODULES = [
    "operators.erasure",
    "operators.expiry",
    "operators.health",
    "operators.maintenance",
    "operators.refs",
    "operators.spark",
    "operators.table",
    "operators.table_changes",
    "operators.wap_audit",
    "operators.wap_branch",
    "operators.wap_publish",
    "operators.wap_write",
    "sensors.erasure",
    "sensors.snapshot",
]
# arguments without a default that are not template fields
REQUIRED = {
    "IcebergCreateTableOperator": {"columns": {"a": "string"}},
    "IcebergWapWriteOperator": {"sql": "INSERT INTO t VALUES (1)"},
}


def _operator_classes() -> list[type]:
    from airflow.sdk import BaseOperator

    found = []
    for name in MODULES:
        module = importlib.import_module(f"airflow_iceberg_provider.{name}")
        for cls_name, cls in vars(module).items():
            if (
                inspect.isclass(cls)
                and issubclass(cls, BaseOperator)
                and cls.__module__ == module.__name__
                and not cls_name.startswith("_")
                and "Base" not in cls_name
            ):
                found.append(cls)
    return found


def _templated_kwargs(cls: type, form: str, upstream: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = dict(REQUIRED.get(cls.__name__, {}))
    for field in cls.template_fields:
        if field in kwargs:
            continue
        if form == "xcomarg":
            kwargs[field] = upstream[field]
        else:
            kwargs[field] = "{{ ti.xcom_pull(task_ids='upstream')['" + field + "'] }}"
    if cls.__name__ == "IcebergErasureOperator":  # exactly one subject source; the other stays unset
        kwargs.pop("subjects_file")
    if cls.__name__ == "IcebergWapWriteOperator":
        kwargs.pop("application")
    return kwargs


def test_every_operator_is_found():
    names = {c.__name__ for c in _operator_classes()}
    assert len(names) >= 20, names
    assert {"IcebergWapWriteOperator", "IcebergErasureOperator", "IcebergSnapshotSensor"} <= names


@pytest.mark.parametrize("form", ["xcomarg", "jinja"])
def test_every_template_field_accepts_an_upstream_value_at_parse_time(form):
    from airflow.sdk import DAG, task

    with DAG(dag_id=f"parse_{form}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:

        @task
        def upstream() -> dict[str, Any]:
            return {}

        source = upstream()
        for cls in _operator_classes():
            kwargs = _templated_kwargs(cls, form, source)
            op = cls(task_id=cls.__name__, **kwargs)
            for field in cls.template_fields:
                if field in kwargs:
                    assert getattr(op, field) is kwargs[field], (cls.__name__, field)  # assigned verbatim
            if form == "xcomarg":
                assert "upstream" in op.upstream_task_ids, cls.__name__
    assert len(dag.task_ids) == len(_operator_classes()) + 1


@pytest.mark.parametrize("flip", ["0", "1"])
def test_the_dag_parses_with_either_form_of_every_argument(flip):
    env = {**os.environ, "XCOMARG_DAG_FLIP": flip, "PYTHONPATH": str(ROOT)}
    code = (
        "import runpy, sys; g = runpy.run_path(sys.argv[1]); dag = g['dag'];"
        "print(len(dag.task_ids)); from airflow.serialization.serialized_objects import DagSerialization;"
        "DagSerialization.to_dict(dag)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(DAG_FILE)], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert int(proc.stdout.strip().splitlines()[-1]) == 20


@pytest.mark.airflow
@pytest.mark.spark
@pytest.mark.usefixtures("spark_on_connect")
def test_the_dag_runs_with_every_argument_from_upstream(tmp_path: Path):
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
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": catalog_conn_json(tmp_path / "c.db", tmp_path / "wh"),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    proc = subprocess.run(
        ["airflow", "dags", "test", "xcomarg_all_operators", "2026-01-01T00:00:00+00:00"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    out = proc.stdout + proc.stderr
    finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
    assert proc.returncode == 0 and finished and "state=success" in finished[-1], out[-8000:]
    assert "execute cannot be called outside" not in out
