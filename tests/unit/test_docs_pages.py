"""Facts of the compatibility and troubleshooting pages, checked against their sources.

* Compatibility: every pin the page states is the one ``pyproject.toml``, ``spark-deps/pom.xml``
  and ``spark-deps/jars.lock`` hold (the generic version statements are checked by
  ``test_versions.py`` for every page).
* Troubleshooting: every message the page quotes is a message the package raises (its fixed
  parts, between the ``…`` that stand for values, appear in the package's source).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from tests.unit.test_versions import _lock_versions, _pom_properties

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _source_text() -> str:
    """The package's Python source with implicitly concatenated string literals joined."""
    text = "\n".join(p.read_text() for p in sorted((ROOT / "airflow_iceberg_provider").rglob("*.py")))
    return re.sub(r"""["']\s*\n\s*(?:rf|fr|f|r)?["']""", "", text)


def quoted_messages() -> list[str]:
    return re.findall(r"```text\n(.*?)\n```", (DOCS / "troubleshooting.md").read_text(), re.S)


def test_the_troubleshooting_page_quotes_at_least_the_common_errors() -> None:
    assert len(quoted_messages()) >= 15


@pytest.mark.parametrize("message", quoted_messages(), ids=lambda m: m[:40])
def test_every_quoted_message_is_raised_by_the_package(message: str) -> None:
    source = _source_text()
    pieces = [piece.strip() for piece in message.split("…") if len(piece.strip()) >= 12]
    assert pieces, f"quote a real part of the message: {message!r}"
    missing = [piece for piece in pieces if piece not in source]
    assert not missing, f"troubleshooting.md quotes text the package does not raise: {missing}"


def _row(page: str, first_cell: str) -> list[str]:
    for line in (DOCS / page).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"{page} has no row {first_cell!r}")


def test_the_compatibility_pins_are_the_project_pins() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = " ".join(project["dependencies"])
    pom, lock = _pom_properties(), _lock_versions()
    assert "apache-airflow>=3.3.0,<3.4" in deps and "`>=3.3.0,<3.4`" in _row("compatibility.md", "Apache Airflow")[2]
    assert "pyiceberg[sql-sqlite,pyarrow]>=0.12.0,<0.13" in deps
    assert "`>=0.12.0,<0.13`" in _row("compatibility.md", "pyiceberg")[2]
    assert "apache-airflow-providers-apache-spark>=6.3.0,<7" in deps
    assert _row("compatibility.md", "`apache-airflow-providers-apache-spark`")[2] == "6.3 or later, below 7"
    assert _row("compatibility.md", "Python")[1] == project["requires-python"].removeprefix(">=")
    assert _row("compatibility.md", "Spark")[1].startswith(f"{pom['spark.version']} (pyspark {pom['spark.version']})")
    assert _row("compatibility.md", "Iceberg Spark runtime")[1].startswith(f"{pom['iceberg.version']} (the pin)")
    assert _row("compatibility.md", "`iceberg-aws-bundle` (S3FileIO)")[1] == lock["iceberg-aws-bundle"]
    assert _row("compatibility.md", "`hadoop-aws` (S3A)")[1] == lock["hadoop-aws"] == pom["hadoop.version"]
    assert _row("compatibility.md", "Spark Connect server")[1] == f"`spark-connect_2.12` {lock['spark-connect_2.12']}"


def test_the_new_pages_are_in_the_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (
        "compatibility.md",
        "choosing-a-catalog.md",
        "troubleshooting.md",
        "upgrading.md",
        "official-provider.md",
    ):
        assert f": {page}" in nav, page
