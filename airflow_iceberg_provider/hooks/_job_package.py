"""The ``spark_jobs`` and ``core`` packages as one zip for ``--py-files``, built once per content.

Every Spark job imports its siblings and the shared rules absolutely
(``from airflow_iceberg_provider.spark_jobs.x import ...``,
``from airflow_iceberg_provider.core.y import ...``), so the driver and the
executors need the packages themselves, not loose files. :func:`job_package_zip` zips

* ``airflow_iceberg_provider/__init__.py``: a **stub** (docstring and ``__version__``), not
  the Airflow-side ``__init__``: the Spark runtime has no Airflow and must not need it;
* ``airflow_iceberg_provider/spark_jobs/**/*.py``: every job module, with its sub-packages;
* ``airflow_iceberg_provider/core/*.py``: the pure rules the Airflow side and the jobs share
  (governance schemas and the ledger-entry type, check grammar, erasure lifecycle, maintenance
  action names): stdlib-only at import time, like the jobs themselves;
* ``iceberg_job_runtime.py`` at the top level: an alias that makes the documented
  ``from iceberg_job_runtime import run_job`` of user job scripts resolve to the *same*
  module object as ``airflow_iceberg_provider.spark_jobs.iceberg_job_runtime`` (one identity).

The zip's name carries a hash of its content, so it is built once per provider version
(and per edit during development) and then reused by every submission. It lives in a
private cache directory (0700, owned by this user, not a symlink; *not* under the
``airflow-iceberg-`` prefix that :func:`~airflow_iceberg_provider.hooks._workdir.sweep_stale_workdirs`
removes) and is written to a temporary file first, then moved into place with
:func:`os.replace`: tasks that build it at the same time each write their own temporary
file and the last rename wins with identical bytes, and no reader ever sees half a zip.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import time
import zipfile
from pathlib import Path

from airflow_iceberg_provider import __version__

PACKAGE_DIR = Path(__file__).resolve().parent.parent
SPARK_JOBS_DIR = PACKAGE_DIR / "spark_jobs"
#: The shared pure rules the job modules import (they must import without Airflow, pyiceberg or
#: pyspark; ``tests/unit/test_spark_job_package.py`` imports them in the Spark runtime).
CORE_DIR = PACKAGE_DIR / "core"
PACKAGE = "airflow_iceberg_provider"
#: Cache directory name under the system temp directory (suffixed with the uid).
CACHE_PREFIX = "aip-spark-jobs-"
#: Zips of other contents (older provider versions) are removed once older than this.
STALE_SECONDS = 7 * 24 * 3600.0
_ZIP_DATE = (2020, 1, 1, 0, 0, 0)  # fixed timestamps: the same content gives the same bytes

STUB_INIT = f'''"""Spark-side stub of {PACKAGE}: only ``core`` and ``spark_jobs`` are shipped (no Airflow here)."""

__version__ = "{__version__}"
'''

RUNTIME_ALIAS = '''"""``from iceberg_job_runtime import run_job`` for user job scripts: the package module itself."""

import sys

from airflow_iceberg_provider.spark_jobs import iceberg_job_runtime as _runtime

sys.modules[__name__] = _runtime
'''


def package_members() -> dict[str, bytes]:
    """Archive name -> bytes of everything the zip holds (sorted, deterministic)."""
    members = {
        f"{PACKAGE}/__init__.py": STUB_INIT.encode(),
        "iceberg_job_runtime.py": RUNTIME_ALIAS.encode(),
    }
    for sub, directory in (("core", CORE_DIR), ("spark_jobs", SPARK_JOBS_DIR)):
        for path in sorted(directory.rglob("*.py")):  # with the sub-packages (spark_jobs/erasure, /audit)
            members[f"{PACKAGE}/{sub}/{path.relative_to(directory).as_posix()}"] = path.read_bytes()
    return members


def content_hash(members: dict[str, bytes]) -> str:
    digest = hashlib.sha256()
    for name in sorted(members):
        digest.update(name.encode() + b"\0" + hashlib.sha256(members[name]).digest())
    return digest.hexdigest()[:20]


def cache_dir(base: str | Path | None = None) -> Path:
    """The private cache directory, created 0700; refused if another user could write to it."""
    root = Path(base or tempfile.gettempdir()) / f"{CACHE_PREFIX}{os.getuid()}"
    try:
        root.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(
            f"{root} is not a private directory of this user (a symlink, another owner, or group/other "
            "permissions); remove it so the provider can create its Spark job package cache there."
        )
    return root


def job_package_zip(base: str | Path | None = None) -> Path:
    """Path of the zip of the current ``spark_jobs`` and ``core`` content; built only if not there yet."""
    members = package_members()
    root = cache_dir(base)
    target = root / f"spark_jobs-{content_hash(members)}.zip"
    if target.is_file():
        return target
    fd, tmp = tempfile.mkstemp(prefix=".building-", suffix=".zip", dir=root)
    try:
        with os.fdopen(fd, "wb") as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED) as zf:
            for name, data in members.items():
                info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
                info.external_attr = 0o644 << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
        os.replace(tmp, target)
    except BaseException:  # any exit, even KeyboardInterrupt: no half-written zip left behind; re-raised
        Path(tmp).unlink(missing_ok=True)
        raise
    _remove_stale(root, keep=target)
    return target


def _remove_stale(root: Path, *, keep: Path, now: float | None = None) -> None:
    """Remove zips of other contents (and abandoned temporary files) older than :data:`STALE_SECONDS`."""
    now = time.time() if now is None else now
    for path in root.iterdir():
        if path == keep or not path.name.endswith(".zip"):
            continue
        try:
            if now - path.lstat().st_mtime > STALE_SECONDS:
                path.unlink()
        except OSError:
            continue
