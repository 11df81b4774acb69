"""The compatibility shims over private APIs: pinned to the library versions they were written for,
and exercised on the real libraries (a SQLite catalog, a REST catalog over HTTP, the Spark
provider's hook, and one spark-submit run that calls every pyspark shim)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_iceberg_provider.hooks import _compat
from airflow_iceberg_provider.spark_jobs import _compat as spark_compat

ROOT = Path(__file__).resolve().parents[2]
UPGRADE = "a library upgrade: re-check every function of {module} against the new release, then update the pin"


def _runtime_pyspark_version() -> str:
    spark_home = os.environ.get("SPARK_HOME", "")
    found = sorted(Path(spark_home).parent.glob("pyspark-*.dist-info")) if spark_home else []
    if not found:
        pytest.skip("no Spark runtime (SPARK_HOME): source scripts/env.sh")
    return importlib.metadata.PathDistribution(found[0]).version


def test_pyiceberg_is_the_release_the_shims_were_written_for() -> None:
    assert importlib.metadata.version("pyiceberg") == _compat.PYICEBERG_VERSION, UPGRADE.format(
        module="airflow_iceberg_provider.hooks._compat"
    )


def test_spark_provider_is_the_release_the_shims_were_written_for() -> None:
    assert importlib.metadata.version("apache-airflow-providers-apache-spark") == _compat.SPARK_PROVIDER_VERSION, (
        UPGRADE.format(module="airflow_iceberg_provider.hooks._compat")
    )


def test_runtime_pyspark_is_the_release_the_shims_were_written_for() -> None:
    assert _runtime_pyspark_version() == spark_compat.PYSPARK_VERSION, UPGRADE.format(
        module="airflow_iceberg_provider.spark_jobs._compat"
    )


# ---------------------------------------------------------------------------------------- pyiceberg
def test_staged_changes_are_what_a_tag_commit_would_send_and_nothing_is_committed(lake: Any) -> None:
    from pyiceberg.table.update import AssertRefSnapshotId, SetSnapshotRefUpdate
    from pyiceberg.table.update.snapshot import ManageSnapshots

    tbl = lake.catalog.create_table("db.compat", schema=pa.schema([("id", pa.int64())]))
    tbl.append(pa.table({"id": [1, 2]}))
    tbl = lake.load_table("db.compat")
    before = tbl.metadata_location
    snapshot_id = tbl.current_snapshot().snapshot_id

    tx = tbl.transaction()
    ms = ManageSnapshots(tx)
    ms.create_tag(snapshot_id, "audited")
    ms.commit()  # onto the transaction only
    requirements, updates = _compat.staged_changes(tx)

    assert [type(r) for r in requirements] == [AssertRefSnapshotId]
    assert requirements[0].ref == "audited" and requirements[0].snapshot_id is None
    assert [type(u) for u in updates] == [SetSnapshotRefUpdate]
    assert (updates[0].ref_name, updates[0].snapshot_id, updates[0].type) == ("audited", snapshot_id, "tag")
    assert lake.load_table("db.compat").metadata_location == before
    assert "audited" not in lake.load_table("db.compat").metadata.refs


@pytest.fixture
def rest_server() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A minimal HTTP server that speaks enough of the REST catalog protocol to build a RestCatalog
    (``GET /v1/config``) and records every other request it gets."""
    seen: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._answer({"defaults": {}, "overrides": {}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            seen.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(self.rfile.read(length))})
            self._answer({})

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_rest_session_carries_the_catalogs_credentials(rest_server: tuple[str, list[dict[str, Any]]]) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    url, seen = rest_server
    catalog = RestCatalog("compat", uri=url, token="t0ken")
    response = _compat.rest_session(catalog).post(
        catalog.url("transactions/commit", prefixed=True), data=json.dumps({"table-changes": []}).encode()
    )

    assert response.status_code == 200
    assert [s["path"] for s in seen] == ["/v1/transactions/commit"]
    assert seen[0]["headers"]["Authorization"] == "Bearer t0ken"
    assert seen[0]["body"] == {"table-changes": []}


# --------------------------------------------------------------------------------- Spark provider
def _submit_hook(monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> Any:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    monkeypatch.setenv("AIRFLOW_CONN_COMPAT_SPARK", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    return SparkSubmitHook(conn_id="compat_spark", name="compat", **kwargs)


def test_spark_submit_command_and_env_are_the_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = _submit_hook(monkeypatch, env_vars={"PYSPARK_PYTHON": "/opt/python"}, conf={"spark.ui.enabled": "false"})

    private = _compat.spark_submit_private(hook)
    command = private.command("/jobs/app.py")

    assert Path(command[0]).name == "spark-submit"
    assert command[-1] == "/jobs/app.py"
    assert command[command.index("--master") + 1] == "local[1]"
    assert "spark.ui.enabled=false" in command
    assert private.env() == {"PYSPARK_PYTHON": "/opt/python"}
    assert _compat.spark_submit_private(_submit_hook(monkeypatch)).env() == {}


def test_closing_the_output_of_a_hook_that_never_submitted_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    _compat.spark_submit_private(_submit_hook(monkeypatch)).close_output()


PYSPARK_PROBE = """
import json, sys
from pyspark.sql import SparkSession
from airflow_iceberg_provider.spark_jobs import _compat

spark = SparkSession.builder.getOrCreate()
df = spark.range(3).selectExpr("id", "id * 2 AS twice")
batches = _compat.collect_arrow_batches(df)
jvm = _compat.driver_jvm(spark)
out = {
    "has_jvm": _compat.has_jvm(spark),
    "classic_df": _compat.is_classic_dataframe(df),
    "spark_version": str(jvm.org.apache.spark.SparkContext.getOrCreate().version()),
    "java_session": str(_compat.java_spark_session(spark).getClass().getName()),
    "hadoop_fs": str(_compat.hadoop_configuration(spark).get("fs.file.impl.disable.cache", "unset")),
    "plan_has_range": "Range" in _compat.physical_plan(df),
    "rows": [row for b in batches for row in b.to_pylist()],
}
with open(sys.argv[1], "w") as fh:
    json.dump(out, fh)
spark.stop()
"""


@pytest.mark.spark
def test_every_pyspark_shim_and_the_submit_output_on_one_real_spark_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime_python = os.environ.get("AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON", "")
    if not Path(runtime_python).is_file():
        pytest.skip("no Spark runtime python: source scripts/env.sh")
    app = tmp_path / "probe.py"
    app.write_text(PYSPARK_PROBE)
    out = tmp_path / "out.json"
    hook = _submit_hook(
        monkeypatch,
        application_args=[str(out)],
        conf={"spark.ui.enabled": "false"},
        driver_memory="512m",
        env_vars={
            "PYSPARK_PYTHON": runtime_python,
            "PYSPARK_DRIVER_PYTHON": runtime_python,
            "PYTHONPATH": str(ROOT),
            "PATH": os.environ["PATH"],
            "SPARK_HOME": os.environ.get("SPARK_HOME", ""),
        },
    )
    hook.submit(application=str(app))
    _compat.spark_submit_private(hook).close_output()

    assert hook._submit_sp.stdout.closed
    result = json.loads(out.read_text())
    assert result == {
        "has_jvm": True,
        "classic_df": True,
        "spark_version": spark_compat.PYSPARK_VERSION,
        "java_session": "org.apache.spark.sql.SparkSession",
        "hadoop_fs": result["hadoop_fs"],
        "plan_has_range": True,
        "rows": [{"id": 0, "twice": 0}, {"id": 1, "twice": 2}, {"id": 2, "twice": 4}],
    }
    assert sys.executable != runtime_python  # the probe ran in the Spark runtime, not in this process
