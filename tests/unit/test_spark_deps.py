"""The Spark-side jars: pinned Maven coordinates, a lock with sha256, nothing taken from PyPI packages.

Pure checks of ``spark-deps/`` and ``scripts/bootstrap.sh`` (milliseconds), plus, when the
bootstrap has run, a check that every installed jar is the one the lock names.
"""

from __future__ import annotations

import hashlib
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from airflow_iceberg_provider import ICEBERG_SPARK_RUNTIME

ROOT = Path(__file__).resolve().parents[2]
DEPS = ROOT / "spark-deps"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def lock_lines(lock: Path = DEPS / "jars.lock") -> list[tuple[str, str, str]]:
    lines = lock.read_text().splitlines()
    out = [tuple(line.split()) for line in lines if line and not line.startswith("#")]
    assert all(len(t) == 3 for t in out)
    return out  # type: ignore[return-value]


def pom_coordinates(pom: Path) -> set[str]:
    root = ET.parse(pom).getroot()
    props = {p.tag.split("}")[1]: p.text or "" for p in root.find("m:properties", NS) or []}

    def value(dep: ET.Element, tag: str) -> str:
        el = dep.find(f"m:{tag}", NS)
        text = "" if el is None or el.text is None else el.text
        return re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], text)

    out = set()
    for dep in root.iterfind("m:dependencies/m:dependency", NS):
        classifier = value(dep, "classifier")
        coords = f"{value(dep, 'groupId')}:{value(dep, 'artifactId')}:{value(dep, 'version')}"
        out.add(coords + (f":{classifier}" if classifier else ""))
    return out


def test_every_pinned_coordinate_is_locked_with_a_sha256():
    spark = pom_coordinates(DEPS / "pom.xml")
    fixture = pom_coordinates(DEPS / "rest-fixture" / "pom.xml")
    assert spark == {c for f, c, _ in lock_lines() if f.startswith("jars")}
    assert fixture <= {c for f, c, _ in lock_lines() if f == "rest-fixture"}
    assert all(re.fullmatch(r"[0-9a-f]{64}", sha) for _, _, sha in lock_lines())
    # the Spark-side set: runtime, S3FileIO, S3A (+ its SDK), the JDBC drivers, Spark Connect
    names = {c.split(":")[1] for c in spark}
    assert names == {
        "iceberg-spark-runtime-3.5_2.12",
        "iceberg-aws-bundle",
        "hadoop-aws",
        "aws-java-sdk-bundle",
        "sqlite-jdbc",
        "postgresql",
        "spark-connect_2.12",
    }


def test_versions_agree_across_the_pom_the_lock_and_the_package():
    spark = {c.split(":")[1]: c.split(":")[2] for c in pom_coordinates(DEPS / "pom.xml")}
    fixture = {c.split(":")[1]: c.split(":")[2] for c in pom_coordinates(DEPS / "rest-fixture" / "pom.xml")}
    assert (
        ICEBERG_SPARK_RUNTIME
        == f"org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:{spark['iceberg-spark-runtime-3.5_2.12']}"
    )
    assert spark["iceberg-aws-bundle"] == spark["iceberg-spark-runtime-3.5_2.12"] == fixture["iceberg-core"]
    assert spark["hadoop-aws"] == "3.3.4"  # the Hadoop client inside pyspark 3.5
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert f'"pyspark[connect]=={spark["spark-connect_2.12"]}"' in bootstrap  # Spark Connect jar = Spark version


def test_the_spark_41_side_is_pinned_locked_and_agrees_with_the_client_pin():
    """spark-deps/spark-4.1: Iceberg's 4.1 runtime, S3 jars for Hadoop 3.4 (SDK v2), no Connect jar (pyspark 4
    ships it); the bootstrap's pyspark and the Airflow side's pyspark-client pin share the pom's Spark minor."""
    deps41 = DEPS / "spark-4.1"
    spark = pom_coordinates(deps41 / "pom.xml")
    lines = lock_lines(deps41 / "jars.lock")
    assert spark == {c for _, c, _ in lines}
    assert all(re.fullmatch(r"[0-9a-f]{64}", sha) for _, _, sha in lines)
    versions = {c.split(":")[1]: c.split(":")[2] for c in spark}
    assert set(versions) == {
        "iceberg-spark-runtime-4.1_2.13",
        "iceberg-aws-bundle",
        "hadoop-aws",
        "bundle",
        "sqlite-jdbc",
        "postgresql",
    }
    assert versions["iceberg-spark-runtime-4.1_2.13"] == versions["iceberg-aws-bundle"] == "1.12.0"
    assert versions["hadoop-aws"] == "3.4.2"  # the Hadoop client inside pyspark 4.1
    props = {p.tag.split("}")[1]: p.text for p in ET.parse(deps41 / "pom.xml").getroot().find("m:properties", NS) or []}
    spark_version = str(props["spark.version"])
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert f'"pyspark[connect]=={spark_version}"' in bootstrap
    minor = ".".join(spark_version.split(".")[:2])
    major, low = minor.split(".")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'"pyspark-client>={spark_version},<{major}.{int(low) + 1}"' in pyproject


def test_bootstrap_takes_no_jar_from_a_pypi_package_and_relocates_nothing():
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    resolve = (DEPS / "resolve.sh").read_text()
    for word in ("jarjar", "bodo", "sagemaker", "pip download", "unzip -q -o -j", "site-packages"):
        assert word not in bootstrap + resolve, word
    assert "install_locked_jars" in bootstrap and "resolve_spark_deps" in resolve and "sha256sum" in resolve


@pytest.mark.parametrize(
    ("runtime", "lock"),
    [(".spark-runtime", DEPS / "jars.lock"), (".spark-runtime-4.1", DEPS / "spark-4.1" / "jars.lock")],
)
def test_installed_jars_are_the_locked_ones(runtime: str, lock: Path):
    rt = ROOT / runtime
    if not (rt / "jars").is_dir():
        pytest.skip("bootstrap not run")
    for folder, coords, sha in lock_lines(lock):
        _, artifact, version, *classifier = coords.split(":")
        jar = rt / folder / f"{artifact}-{version}{'-' + classifier[0] if classifier else ''}.jar"
        assert jar.is_file(), f"{jar} missing: run scripts/bootstrap.sh"
        if jar.stat().st_size < 50_000_000:  # the large bundles are checked by the bootstrap itself
            assert hashlib.sha256(jar.read_bytes()).hexdigest() == sha, jar
    listed = {(f, c.split(":")[1]) for f, c, _ in lock_lines(lock)}
    for folder in {f for f, _ in listed}:
        for jar in (rt / folder).glob("*.jar"):
            assert any(jar.name.startswith(a + "-") for f, a in listed if f == folder), f"{jar} is not in the lock"
