"""Private working directories of spark-submissions, and the sweep of those left behind.

Each submission writes its job spec and its 0600 ``spark.properties`` (the catalog's
secret keys) into a fresh private directory, removed in a ``finally`` when the job ends.
A task process killed with SIGKILL (OOM killer, node drain) never reaches that
``finally``, so every directory records who owns it (``owner.json``: pid, the process's
start time, host, boot id) *before* any secret is written, and every submission first
removes the directories whose owner is gone. A pid alone is not enough: pids are reused,
so an owner counts as alive only when a process with that pid exists **and** started at
the recorded time (``/proc/<pid>/stat`` field 22) on the same boot.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from airflow_iceberg_provider.hooks._process import ProcessId, identity, liveness
from airflow_iceberg_provider.rules.durable_jobs import Liveness

#: Prefix of the provider's working directories under the system temp directory.
WORKDIR_PREFIX = "airflow-iceberg-"
OWNER_FILE = "owner.json"
#: A directory without an owner record (written by a provider version before this one, or
#: caught in the instant between its creation and the record) is removed after this long.
UNOWNED_GRACE_SECONDS = 600.0


def owner_record(pid: int | None = None) -> dict[str, object]:
    """Who owns a directory: process ``pid`` (default this one) as :func:`._process.identity` names it."""
    return {**identity(os.getpid() if pid is None else pid), "created": time.time()}


def create_workdir(base: str | Path | None = None) -> Path:
    """A fresh 0700 directory owned by this process, its owner recorded before anything else."""
    workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=base))
    fd = os.open(workdir / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(owner_record(), fh)
    return workdir


def owner_alive(owner: dict[str, object]) -> bool:
    """Whether the recorded owner process still runs (same host, same boot, same process); another
    host's owner counts as running (a shared temp directory: its processes cannot be checked from here)."""
    who = ProcessId.of(owner)
    return who is not None and liveness(who, until_reaped=True) is not Liveness.GONE


def sweep_stale_workdirs(base: str | Path | None = None, *, now: float | None = None) -> list[Path]:
    """Remove this user's provider working directories whose owning process is gone.

    Directories without a readable owner record are removed once older than
    :data:`UNOWNED_GRACE_SECONDS`. Returns the directories removed (their names hold no secret).
    """
    root = Path(base or tempfile.gettempdir())
    now = time.time() if now is None else now
    uid = os.getuid()
    removed = []
    try:
        candidates = [p for p in root.iterdir() if p.name.startswith(WORKDIR_PREFIX)]
    except OSError:
        return []
    for path in candidates:
        try:
            st = path.lstat()
            if not path.is_dir() or path.is_symlink() or st.st_uid != uid:
                continue
            try:
                owner = json.loads((path / OWNER_FILE).read_text(encoding="utf-8"))
                stale = not isinstance(owner, dict) or not owner_alive(owner)
            except (OSError, ValueError):
                stale = now - st.st_mtime > UNOWNED_GRACE_SECONDS
        except OSError:
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            if not path.exists():
                removed.append(path)
    return removed


def hand_workdir_to(workdir: Path, pid: int) -> None:
    """The job process owns its working directory from now on: the sweep keeps it while the job runs."""
    import json

    tmp = workdir / (OWNER_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(owner_record(pid), fh)
    os.replace(tmp, workdir / OWNER_FILE)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
