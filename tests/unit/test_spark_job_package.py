"""The ``spark_jobs`` package zip (``--py-files``) and the hook's job registry (#14 item 5).

The zip is built once per content in a private cache directory, holds every job module,
and every job module imports from it in the Spark runtime's Python, which has no Airflow.
"""

from __future__ import annotations

import ast
import os
import shutil
import stat
import subprocess
import threading
import zipfile
from pathlib import Path

import pytest

from airflow_iceberg_provider.hooks import _job_package
from airflow_iceberg_provider.hooks._job_package import (
    CORE_DIR,
    PACKAGE_DIR,
    SPARK_JOBS_DIR,
    cache_dir,
    job_package_zip,
)
from airflow_iceberg_provider.hooks.spark import SPARK_JOBS, IcebergSparkHook, SparkJob, spark_job
from tests.support.lake import ROOT, catalog_conn_json
from tests.support.servers import skip_or_fail

#: every job module as its path under spark_jobs/ without ``.py`` (``erasure/run`` in the sub-packages)
JOB_MODULES = sorted(p.relative_to(SPARK_JOBS_DIR).with_suffix("").as_posix() for p in SPARK_JOBS_DIR.rglob("*.py"))
CORE_MODULES = sorted(p.stem for p in CORE_DIR.glob("*.py"))
#: every module the zip ships, by dotted name
SHIPPED = [f"airflow_iceberg_provider.core.{m}" for m in CORE_MODULES] + [
    f"airflow_iceberg_provider.spark_jobs.{m.removesuffix('/__init__').replace('/', '.')}" for m in JOB_MODULES
]
RUNTIME_PYTHON = ROOT / ".spark-runtime" / "bin" / "python"


def test_zip_is_built_once_per_content_and_holds_every_job_module(tmp_path):
    first = job_package_zip(tmp_path)
    before = first.stat()
    second = job_package_zip(tmp_path)
    assert second == first
    after = second.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns), "the second call rebuilt it"
    assert stat.S_IMODE(first.parent.stat().st_mode) == 0o700
    assert [p.name for p in first.parent.iterdir()] == [first.name], "no temporary file left behind"
    with zipfile.ZipFile(first) as zf:
        names = set(zf.namelist())
        for module in JOB_MODULES:
            member = f"airflow_iceberg_provider/spark_jobs/{module}.py"
            assert member in names
            assert zf.read(member) == (SPARK_JOBS_DIR / f"{module}.py").read_bytes()
        for module in CORE_MODULES:
            assert zf.read(f"airflow_iceberg_provider/core/{module}.py") == (CORE_DIR / f"{module}.py").read_bytes()
        stub = zf.read("airflow_iceberg_provider/__init__.py").decode()
    assert "import" not in stub and "__version__" in stub, "the shipped __init__ is a stub, not the Airflow-side one"
    assert "iceberg_job_runtime.py" in names


def test_a_content_change_builds_a_new_zip(tmp_path, monkeypatch):
    jobs = tmp_path / "spark_jobs"
    shutil.copytree(SPARK_JOBS_DIR, jobs)
    monkeypatch.setattr(_job_package, "SPARK_JOBS_DIR", jobs)
    old = job_package_zip(tmp_path)
    with (jobs / "maintenance_sql.py").open("a") as fh:
        fh.write("\n# edited\n")
    new = job_package_zip(tmp_path)
    assert new != old and new.is_file() and old.is_file()
    assert zipfile.ZipFile(new).read("airflow_iceberg_provider/spark_jobs/maintenance_sql.py").endswith(b"# edited\n")


def test_concurrent_builders_leave_one_complete_zip(tmp_path):
    results: list[Path] = []
    errors: list[BaseException] = []

    def build() -> None:
        try:
            results.append(job_package_zip(tmp_path))
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1
    (cache,) = tmp_path.iterdir()
    assert [p.name for p in cache.iterdir()] == [results[0].name]
    assert zipfile.ZipFile(results[0]).testzip() is None


def test_cache_dir_refuses_a_directory_others_can_write(tmp_path):
    unsafe = tmp_path / f"{_job_package.CACHE_PREFIX}{os.getuid()}"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    with pytest.raises(PermissionError, match="not a private directory"):
        cache_dir(tmp_path)
    unsafe.rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    unsafe.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PermissionError, match="remove it"):
        job_package_zip(tmp_path)
    assert not list((tmp_path / "elsewhere").iterdir()), "nothing written through the symlink"


def test_old_zips_are_removed_but_not_the_current_one(tmp_path):
    current = job_package_zip(tmp_path)
    old = current.parent / "spark_jobs-0000.zip"
    old.write_bytes(b"x")
    os.utime(old, (0, 0))
    recent = current.parent / "spark_jobs-1111.zip"
    recent.write_bytes(b"y")
    _job_package._remove_stale(current.parent, keep=current)
    assert current.is_file() and recent.is_file() and not old.exists()


def test_job_modules_import_from_the_zip_in_the_spark_runtime_without_airflow(tmp_path):
    if not RUNTIME_PYTHON.is_file():
        skip_or_fail("Spark runtime python missing: run scripts/bootstrap.sh")
    zip_path = job_package_zip(tmp_path)
    code = f"""
import importlib, sys
for name in {SHIPPED!r}:
    mod = importlib.import_module(name)
    assert mod.__file__.startswith({str(zip_path)!r}), (name, mod.__file__)
import iceberg_job_runtime
from airflow_iceberg_provider.spark_jobs import iceberg_job_runtime as packaged
assert iceberg_job_runtime is packaged, "two identities of the job runtime"
leaked = sorted(m for m in sys.modules if m == "airflow" or m.startswith("airflow."))
assert not leaked, leaked
print("ok", len({SHIPPED!r}))
"""
    # the zip alone on PYTHONPATH (as --py-files puts it on the driver's path), no user site, and a current
    # directory that holds only the zip: the package can only come from the zip
    out = subprocess.run(
        [str(RUNTIME_PYTHON), "-s", "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(zip_path), "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"ok {len(SHIPPED)}"


def test_job_modules_use_absolute_imports_only():
    """No sibling imported by its bare name, no relative import, no ImportError fallback."""
    siblings = {m.split("/")[0] for m in JOB_MODULES}
    for module in JOB_MODULES:
        tree = ast.parse((SPARK_JOBS_DIR / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bare = [a.name for a in node.names if a.name.split(".")[0] in siblings]
                assert not bare, f"{module}.py line {node.lineno} imports {bare} by bare name"
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{module}.py line {node.lineno}: relative import"
                assert (node.module or "").split(".")[0] not in siblings, f"{module}.py line {node.lineno}"
                if (node.module or "").startswith("airflow_iceberg_provider"):
                    targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                    assert any(t in SHIPPED for t in targets), (
                        f"{module}.py line {node.lineno} imports {node.module}, which the job package does not "
                        "ship: move the pure part into airflow_iceberg_provider/core (stdlib-only) or into spark_jobs"
                    )
            elif isinstance(node, ast.Try):  # an optional third-party import (pyarrow) may be tried
                caught = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
                tried = {
                    (n.module or "") if isinstance(n, ast.ImportFrom) else a.name
                    for n in node.body
                    if isinstance(n, ast.Import | ast.ImportFrom)
                    for a in n.names
                }
                own = {m for m in tried if m.split(".")[0] in siblings | {"airflow_iceberg_provider"}}
                assert "ImportError" not in caught or not own, f"{module}.py line {node.lineno}: fallback for {own}"


def test_job_modules_import_no_engine_or_airflow_at_module_level():
    """pyspark/pyarrow/sqlglot only inside functions, Airflow and pyiceberg never: pure logic stays testable anywhere."""
    banned = {"pyspark", "pyarrow", "airflow", "pyiceberg", "sqlglot"}  # sqlglot: not in the Spark runtime
    for path in [SPARK_JOBS_DIR / f"{m}.py" for m in JOB_MODULES] + [CORE_DIR / f"{m}.py" for m in CORE_MODULES]:
        module = path.name
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not {n.split(".")[0] for n in names} & banned, f"{module} line {node.lineno} imports {names}"
    for module in SPARK_JOBS_DIR.rglob("*.py"):
        assert "import airflow\n" not in module.read_text() and "from airflow." not in module.read_text()


def test_core_imports_only_core_and_the_airflow_side_never_imports_spark_jobs():
    """``core`` is the shared layer: it imports nothing else of the provider, and outside
    ``spark_jobs`` only the job packager (which zips the directory) refers to the jobs."""
    for path in CORE_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow_iceberg_provider"):
                assert (node.module or "").startswith("airflow_iceberg_provider.core"), f"{path.name}: {node.module}"
    for path in PACKAGE_DIR.rglob("*.py"):
        if SPARK_JOBS_DIR in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in modules:
                assert not name.startswith("airflow_iceberg_provider.spark_jobs"), (
                    f"{path.relative_to(PACKAGE_DIR)} line {node.lineno} imports {name}: move the shared part into core"
                )


def test_registry_names_every_entry_script_and_refuses_others():
    entry_scripts = {
        p.relative_to(SPARK_JOBS_DIR).as_posix()
        for p in SPARK_JOBS_DIR.rglob("*.py")
        if 'if __name__ == "__main__"' in p.read_text(encoding="utf-8") and p.name != "connect_runner.py"
    }  # the Spark 3.5 Connect client that runs a job file: not a job
    assert {job.script for job in SPARK_JOBS.values()} == entry_scripts
    for job in SPARK_JOBS.values():
        assert job.path.is_file() and job.needs_package
    with pytest.raises(
        ValueError, match="Unknown Spark job 'erasure_sql'; built-in jobs are: crypto_shred_write, erasure, "
    ):
        spark_job("erasure_sql")  # a module, not a job


def test_run_job_ships_the_package_and_the_registered_jars(tmp_path, monkeypatch):
    (tmp_path / "wh").mkdir()
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", catalog_conn_json(tmp_path / "c.db", tmp_path / "wh"))
    monkeypatch.setitem(
        SPARK_JOBS, "maintenance", SparkJob("maintenance", "maintenance.py", extra_jars=("/x/extra.jar",))
    )
    seen = {}
    monkeypatch.setattr(IcebergSparkHook, "submit", lambda self, plan: seen.setdefault("plan", plan))
    IcebergSparkHook(jars=["/rt.jar"]).run_job("maintenance", {"table": "db.t"})
    plan = seen["plan"]
    assert plan.application == str(SPARK_JOBS_DIR / "maintenance.py")
    assert plan.py_files == [str(job_package_zip())]
    assert plan.jars == ["/rt.jar", "/x/extra.jar"]
