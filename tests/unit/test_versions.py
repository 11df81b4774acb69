"""Version statements in the docs agree with the pins: ``pyproject.toml`` (Airflow, pyiceberg, Python),
``spark-deps/pom.xml`` (Spark, Iceberg) and ``spark-deps/jars.lock`` (the jars installed).

Pure: reads text files only. A page that says "Airflow 3.2+" while the package requires 3.3, or
names a pyspark the runtime does not pin, fails here with the page, the line and the pin.
"""

from __future__ import annotations

import re
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Iceberg releases the provider is tested with besides its pin (the whole suite runs on them; see
#: the Spark deployment page). Anything else named in the docs is a stale figure.
ALSO_TESTED_ICEBERG = ("1.12.0",)
USER_TEXT = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
#: The package's docstrings and messages and the example DAGs make version statements too.
SHIPPED_CODE = sorted((ROOT / "airflow_iceberg_provider").rglob("*.py")) + sorted((ROOT / "example_dags").rglob("*.py"))


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirement_floor(name: str) -> str:
    """``X.Y`` of the lower bound of a dependency (``apache-airflow>=3.3.0,<3.4`` -> ``3.3``)."""
    for spec in _project()["dependencies"]:
        match = re.match(rf"{re.escape(name)}(\[[^\]]*\])?>=(\d+)\.(\d+)", spec)
        if match:
            return f"{match[2]}.{match[3]}"
    raise AssertionError(f"{name} is not a dependency in pyproject.toml")


def _pom_properties(pom: str = "pom.xml") -> dict[str, str]:
    tree = ET.parse(ROOT / "spark-deps" / pom)
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    props = tree.getroot().find("m:properties", ns)
    assert props is not None
    return {child.tag.split("}", 1)[1]: (child.text or "").strip() for child in props}


def _lock_versions() -> dict[str, str]:
    versions = {}
    for line in (ROOT / "spark-deps" / "jars.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            _, coords, _ = line.split()
            versions[coords.split(":")[1]] = coords.split(":")[2]
    return versions


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def pins() -> dict[str, str]:
    pom, pom41 = _pom_properties(), _pom_properties("spark-4.1/pom.xml")
    return {
        "airflow": _requirement_floor("apache-airflow"),
        "pyiceberg": _requirement_floor("pyiceberg"),
        "python": _project()["requires-python"].removeprefix(">="),
        "spark": pom["spark.version"],
        "iceberg": pom["iceberg.version"],
        "spark41": pom41["spark.version"],
        "iceberg41": pom41["iceberg.version"],
    }


def statements(text: str) -> list[tuple[int, str, str]]:
    """``(line, product, version)`` of every "<product> <version>" statement of a page."""
    pattern = re.compile(
        r"\b(?P<product>Apache Airflow|Airflow|pyiceberg|pyspark|Spark|Iceberg|Python)"
        r"(?: Spark runtime)? (?P<version>\d+\.\d+(?:\.\d+)?)(?![\d.]*\d)"
    )
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in pattern.finditer(line):
            found.append((number, match["product"].removeprefix("Apache ").lower(), match["version"]))
    return found


def problem(product: str, version: str, pinned: dict[str, str]) -> str | None:
    """Why ``<product> <version>`` disagrees with the pins, or ``None``."""
    if product == "airflow" and _minor(version) != pinned["airflow"]:
        return f"the package requires Airflow {pinned['airflow']} (pyproject.toml)"
    if product == "pyiceberg" and _minor(version) != pinned["pyiceberg"]:
        return f"the package requires pyiceberg {pinned['pyiceberg']} (pyproject.toml)"
    if product == "python" and tuple(map(int, version.split("."))) < tuple(map(int, pinned["python"].split("."))):
        return f"the package requires Python {pinned['python']} or later (pyproject.toml)"
    if product in {"spark", "pyspark"}:
        lines = [pinned["spark"], *([pinned["spark41"]] if "spark41" in pinned else [])]
        expected = set(lines) if version.count(".") == 2 else {_minor(v) for v in lines}
        if version not in expected:
            return f"the Spark side pins Spark {' and '.join(lines)} (spark-deps/pom.xml, spark-deps/spark-4.1/pom.xml)"
    if product == "iceberg":
        allowed = {pinned["iceberg"], *ALSO_TESTED_ICEBERG, *([pinned["iceberg41"]] if "iceberg41" in pinned else [])}
        if version not in allowed | {_minor(v) for v in allowed}:
            return f"the Spark side pins Iceberg {pinned['iceberg']} (spark-deps/pom.xml; also tested: {ALSO_TESTED_ICEBERG})"
    return None


@pytest.mark.parametrize("page", USER_TEXT, ids=lambda p: str(p.relative_to(ROOT)))
def test_version_statements_of_pages_agree_with_the_pins(page: Path) -> None:
    _check(page)


def test_version_statements_of_the_package_and_the_example_dags_agree_with_the_pins() -> None:
    for path in SHIPPED_CODE:
        _check(path)


def _check(page: Path) -> None:
    pinned = pins()
    wrong = [
        f"{page.relative_to(ROOT)}:{number}: {product} {version}: {why}"
        for number, product, version in statements(page.read_text())
        if (why := problem(product, version, pinned))
    ]
    assert not wrong, "\n".join(wrong)


def test_maven_coordinates_in_the_docs_and_the_package_are_the_locked_ones() -> None:
    locked = _lock_versions()
    texts = [*USER_TEXT, ROOT / "airflow_iceberg_provider" / "get_provider_info.py"]
    wrong = []
    for path in texts:
        for artifact, version in re.findall(
            r"(iceberg-spark-runtime-3\.5_2\.12|iceberg-aws-bundle)[:-](\d[\w.]*\d)", path.read_text()
        ):
            if version not in {locked[artifact], *ALSO_TESTED_ICEBERG}:
                wrong.append(f"{path.relative_to(ROOT)}: {artifact} {version} (locked: {locked[artifact]})")
    assert not wrong, "\n".join(wrong)


def test_the_pins_read_here_are_the_installed_ones() -> None:
    """The lock and the pom agree (the bootstrap installs what the lock lists)."""
    pinned, locked = pins(), _lock_versions()
    assert locked["iceberg-spark-runtime-3.5_2.12"] == pinned["iceberg"]
    assert locked["spark-connect_2.12"] == pinned["spark"]
    assert pinned["airflow"] == "3.3" and pinned["python"] == "3.11"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("(Airflow 3.2+ asset partitions)", ["the package requires Airflow 3.3"]),
        ("the other figures were taken with pyspark 3.5.9 and Iceberg 1.10.2", ["Spark 3.5.7", "Iceberg 1.10.1"]),
        ("Airflow 3.3, pyiceberg 0.12, Spark 3.5, Iceberg 1.10 and 1.12.0, Python 3.12", []),
    ],
)
def test_a_stale_statement_is_named(line: str, expected: list[str]) -> None:
    pinned = {"airflow": "3.3", "pyiceberg": "0.12", "python": "3.11", "spark": "3.5.7", "iceberg": "1.10.1"}
    found = [why for _, product, version in statements(line) if (why := problem(product, version, pinned))]
    assert len(found) == len(expected) and all(e in f for e, f in zip(expected, found, strict=True)), found
