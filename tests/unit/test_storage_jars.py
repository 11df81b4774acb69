"""An S3 warehouse brings its own jars to the submit plan, or is refused before spark-submit, naming the fix.

Pure: the submit plan is built as data (``IcebergSparkHook.plan``) from a real connection (a SQLite
catalog whose warehouse is ``s3://``); the jars are real files laid out as the bootstrap installs them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_iceberg_provider import ICEBERG_SPARK_RUNTIME
from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.hooks._storage_jars import STORAGE_ARTIFACTS, needed_artifacts, with_storage_jars
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

ROOT = Path(__file__).resolve().parents[2]
VERSION = ICEBERG_SPARK_RUNTIME.rsplit(":", 1)[1]
S3_PROPS = {"s3.endpoint": "http://127.0.0.1:8333", "s3.path-style-access": "true", "s3.region": "us-east-1"}


def _conn(tmp_path: Path, warehouse: str, **extra: object) -> str:
    return json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "host": f"sqlite:///{tmp_path / 'c.db'}",
            "extra": {"catalog_type": "sql", "catalog_name": "lakehouse", "warehouse": warehouse, **extra},
        }
    )


def _runtime(tmp_path: Path, *, with_s3: bool) -> Path:
    """A runtime folder as ``scripts/bootstrap.sh`` lays it out (``jars/`` and ``jars/s3/``)."""
    jars = tmp_path / "rt" / "jars"
    (jars / "s3").mkdir(parents=True)
    runtime = jars / f"iceberg-spark-runtime-3.5_2.12-{VERSION}.jar"
    runtime.write_bytes(b"jar")
    if with_s3:
        for artifact, (_, pinned) in STORAGE_ARTIFACTS.items():
            (jars / "s3" / f"{artifact}-{pinned or VERSION}.jar").write_bytes(b"jar")
    return runtime


@pytest.fixture
def s3_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", _conn(tmp_path, "s3://bucket/wh", properties=S3_PROPS))
    monkeypatch.delenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_PACKAGES", raising=False)
    return tmp_path


def test_the_pins_are_the_locked_jars() -> None:
    locked = {}
    for line in (ROOT / "spark-deps" / "jars.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            group, artifact, version = line.split()[1].split(":")[:3]
            locked[artifact] = (group, version)
    for artifact, (group, pinned) in STORAGE_ARTIFACTS.items():
        assert locked[artifact] == (group, pinned or VERSION), artifact


def test_an_s3_connection_with_the_default_jars_gets_the_pinned_s3_jars_from_beside_the_runtime(
    s3_lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = _runtime(s3_lake, with_s3=True)
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", str(runtime))
    plan = IcebergSparkHook().plan("/app.py", spec={"table": "db.t"})
    assert plan.conf["spark.sql.catalog.lakehouse.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    names = [Path(j).name for j in plan.jars]
    assert names == [
        runtime.name,
        f"iceberg-aws-bundle-{VERSION}.jar",
        "hadoop-aws-3.3.4.jar",
        "aws-java-sdk-bundle-1.12.262.jar",
    ]
    assert plan.packages == []


def test_jars_given_by_the_user_are_kept_and_not_added_twice(s3_lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = _runtime(s3_lake, with_s3=True)
    own = s3_lake / "own" / f"iceberg-aws-bundle-{VERSION}.jar"
    own.parent.mkdir()
    own.write_bytes(b"jar")
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", f"{runtime},{own}")
    plan = IcebergSparkHook().plan("/app.py")
    assert [j for j in plan.jars if "iceberg-aws-bundle" in j] == [str(own)]


def test_with_maven_packages_the_pinned_coordinates_are_added(s3_lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", raising=False)
    plan = IcebergSparkHook().plan("/app.py")
    assert plan.packages == [
        ICEBERG_SPARK_RUNTIME,
        f"org.apache.iceberg:iceberg-aws-bundle:{VERSION}",
        "org.apache.hadoop:hadoop-aws:3.3.4",
        "com.amazonaws:aws-java-sdk-bundle:1.12.262",
    ]


def test_local_jars_without_the_s3_jars_are_refused_before_submitting_naming_the_fix(
    s3_lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = _runtime(s3_lake, with_s3=False)
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", str(runtime))
    with pytest.raises(IcebergConnectionError) as err:
        IcebergSparkHook().plan("/app.py")
    message = str(err.value)
    assert f"iceberg-aws-bundle-{VERSION}.jar" in message and "hadoop-aws-3.3.4.jar" in message
    assert "[iceberg_provider] spark_jars" in message and "[iceberg_provider] spark_packages" in message
    assert f"org.apache.iceberg:iceberg-aws-bundle:{VERSION}" in message and "nothing was submitted" in message


def test_a_local_warehouse_needs_no_storage_jar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "wh").mkdir()
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", _conn(tmp_path, f"file://{tmp_path / 'wh'}"))
    runtime = _runtime(tmp_path, with_s3=False)
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", str(runtime))
    plan = IcebergSparkHook().plan("/app.py")
    assert plan.jars == [str(runtime)] and not needed_artifacts(plan.conf)


def test_hadoop_file_io_needs_only_s3a() -> None:
    conf = {
        "spark.sql.catalog.c.io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
        "spark.hadoop.fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }
    assert needed_artifacts(conf) == ["hadoop-aws", "aws-java-sdk-bundle"]
    jars, packages = with_storage_jars(conf, [], ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0"])
    assert packages[1:] == ["org.apache.hadoop:hadoop-aws:3.3.4", "com.amazonaws:aws-java-sdk-bundle:1.12.262"]
    bundle_conf = {"spark.sql.catalog.c.io-impl": "org.apache.iceberg.aws.s3.S3FileIO"}
    _, packages = with_storage_jars(bundle_conf, [], ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0"])
    assert packages[-1] == "org.apache.iceberg:iceberg-aws-bundle:1.12.0", "the bundle follows the runtime's version"


def test_a_spark_connect_connection_takes_no_storage_jar(s3_lake: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Connect server has its jars already: the plan neither adds nor refuses (its session cannot add jars)."""
    runtime = _runtime(s3_lake, with_s3=False)
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", str(runtime))
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_CONNECT_TEST",
        json.dumps({"conn_type": "spark_connect", "host": "sc://127.0.0.1", "port": 15002}),
    )
    plan = IcebergSparkHook(spark_conn_id="spark_connect_test").plan("/app.py")
    assert plan.jars == [str(runtime)] and plan.packages == []
