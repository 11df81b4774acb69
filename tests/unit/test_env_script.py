"""scripts/env.sh can be sourced any number of times (README: `source scripts/env.sh`, then `make demo`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _conns(times: int, env: dict[str, str]) -> dict[str, str]:
    script = " ; ".join([f"source '{ROOT}/scripts/env.sh'"] * times)
    out = subprocess.run(
        ["bash", "-c", f"{script} ; env | grep '^AIRFLOW_CONN_'"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def test_connections_stay_valid_json_when_sourced_again(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "AIP_WORK": str(tmp_path / "work")}
    once, thrice = _conns(1, env), _conns(3, env)
    assert set(once) == {"AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"}
    assert once == thrice  # a second source once appended "}}" to the JSON: "connection not defined"
    catalog = json.loads(once["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"])
    assert catalog["host"] == f"sqlite:///{tmp_path}/work/lake/catalog.db"
    assert json.loads(once["AIRFLOW_CONN_SPARK_DEFAULT"]) == {"conn_type": "spark", "host": "local[2]"}


def test_callers_values_win(tmp_path):
    mine = '{"conn_type": "iceberg_catalog", "host": "postgresql+psycopg2://u@db/c", "extra": {"a": {"b": 1}}}'
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AIP_WORK": str(tmp_path),
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": mine,
    }
    assert _conns(2, env)["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] == mine
