"""The built wheel installs into a fresh virtualenv, and Airflow finds the provider and its plugin there.

``scripts/build_dist.py`` (``make dist``) builds the sdist and, from it, the wheel. The fresh
virtualenv gets the wheel without dependencies (``pip --python <venv> install --no-deps``) and sees
the project's ``.venv`` site-packages through a ``.pth`` file, so Airflow and pyiceberg come from
there while ``airflow_iceberg_provider`` comes from the wheel (its own site-packages is first on
``sys.path``; the ``.venv``'s editable-install hook is not loaded, since a ``.pth`` entry's own
``.pth`` files are not processed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from scripts import build_dist
from tests.support.airflow_procs import fresh_airflow_home

pytestmark = pytest.mark.airflow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build_dist.build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="module")
def fresh_venv(built: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # without PYTHONPATH: a repository root on it (with the editable install's egg-info) would make pip
    # think the package is installed already and skip the wheel
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(built[1])],
        check=True,
        capture_output=True,
        env=clean,
    )
    installed = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('airflow_iceberg_provider').origin)"],
        check=True,
        capture_output=True,
        text=True,
        env=clean,
        cwd=venv,
    ).stdout.strip()
    assert installed.startswith(str(venv)), f"the wheel was not installed into the fresh venv: {installed}"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site) / "shared_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _run(venv: Path, tmp_path: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "AIRFLOW_HOME"}}
    env["AIRFLOW_HOME"] = str(fresh_airflow_home(tmp_path / f"airflow-{len(list(tmp_path.iterdir()))}"))
    result = subprocess.run(
        [str(venv / "bin" / "python"), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_sdist_and_the_wheel_hold_the_package_its_data_and_its_metadata(built: tuple[Path, Path]) -> None:
    sdist, wheel = built
    assert sdist.name == "airflow_iceberg_provider-0.1.0.tar.gz" and wheel.name.endswith("-py3-none-any.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "airflow_iceberg_provider/py.typed",
        "airflow_iceberg_provider/get_provider_info.py",
        "airflow_iceberg_provider/spark_jobs/log4j2.properties",
        "airflow_iceberg_provider/ui/templates/base.html",
        "airflow_iceberg_provider-0.1.0.dist-info/licenses/LICENSE",
    ):
        assert needed in names, f"{needed} missing from the wheel"
    assert not any(n.startswith(("tests/", "example_dags/", "docs/")) for n in names)
    metadata = zipfile.ZipFile(wheel).read("airflow_iceberg_provider-0.1.0.dist-info/METADATA").decode()
    assert "Classifier: Framework :: Apache Airflow :: Provider" in metadata
    assert "github.io" not in metadata
    entry_points = zipfile.ZipFile(wheel).read("airflow_iceberg_provider-0.1.0.dist-info/entry_points.txt").decode()
    assert "[apache_airflow_provider]" in entry_points and "[airflow.plugins]" in entry_points
    with tarfile.open(sdist) as archive:
        assert "airflow_iceberg_provider-0.1.0/pyproject.toml" in archive.getnames()


def test_airflow_lists_the_provider_installed_from_the_wheel(fresh_venv: Path, tmp_path: Path) -> None:
    where = _run(fresh_venv, tmp_path, "-c", "import airflow_iceberg_provider as p; print(p.__file__)")
    assert where.strip().startswith(str(fresh_venv)), f"imported from {where!r}, not from the wheel"
    out = _run(fresh_venv, tmp_path, "-m", "airflow", "providers", "list", "-o", "json")
    providers = {p["package_name"]: p for p in json.loads(out[out.index("[") :])}
    assert providers["airflow-iceberg-provider"]["version"] == "0.1.0"


def test_airflow_loads_the_governance_plugin_from_the_wheel(fresh_venv: Path, tmp_path: Path) -> None:
    out = _run(fresh_venv, tmp_path, "-m", "airflow", "plugins", "-o", "json")
    plugins = {p["name"]: p for p in json.loads(out[out.index("[") :])}
    assert "iceberg_governance" in plugins, sorted(plugins)
    assert plugins["iceberg_governance"]["source"].startswith("airflow-iceberg-provider")
