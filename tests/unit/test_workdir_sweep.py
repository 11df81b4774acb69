"""#20: working directories holding secrets are removed even when their task process was SIGKILLed."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

from airflow_iceberg_provider.hooks import _workdir as wd
from airflow_iceberg_provider.hooks._process import process_start_ticks


def _owned_by(base: Path, owner: dict) -> Path:
    path = base / f"{wd.WORKDIR_PREFIX}{owner['pid']}-{len(list(base.iterdir()))}"
    path.mkdir(mode=0o700)
    (path / wd.OWNER_FILE).write_text(json.dumps(owner))
    (path / "spark.properties").write_text("spark.sql.catalog.lakehouse.s3.secret-access-key=TOPSECRET\n")
    return path


def _dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = multiprocessing.get_context("fork").Process(target=time.sleep, args=(0,))
    proc.start()
    proc.join()
    return proc.pid


def test_create_workdir_records_its_owner_first_and_is_private(tmp_path):
    path = wd.create_workdir(tmp_path)
    assert path.name.startswith(wd.WORKDIR_PREFIX)
    assert (path.stat().st_mode & 0o777) == 0o700
    owner = json.loads((path / wd.OWNER_FILE).read_text())
    assert owner["pid"] == os.getpid() and owner["start_ticks"] == process_start_ticks(os.getpid())
    assert wd.owner_alive(owner)
    assert wd.sweep_stale_workdirs(tmp_path) == [] and path.exists()  # its owner runs: kept


def test_sweep_removes_directories_of_dead_owners_reused_pids_and_other_boots(tmp_path):
    me = wd.owner_record()
    alive = _owned_by(tmp_path, me)
    dead = _owned_by(tmp_path, wd.owner_record(_dead_pid()))
    reused = _owned_by(tmp_path, {**me, "start_ticks": me["start_ticks"] + 1})  # same pid, another process
    rebooted = _owned_by(tmp_path, {**me, "boot_id": "another-boot"})
    other_host = _owned_by(tmp_path, {**me, "pid": _dead_pid(), "host": "another-host"})
    unrelated = tmp_path / "not-ours"
    unrelated.mkdir()

    removed = wd.sweep_stale_workdirs(tmp_path)

    assert sorted(removed) == sorted([dead, reused, rebooted])
    assert alive.exists() and other_host.exists() and unrelated.exists()
    assert not any(p.exists() for p in (dead, reused, rebooted))


def test_unowned_directories_are_removed_only_after_the_grace_period(tmp_path):
    legacy = tmp_path / f"{wd.WORKDIR_PREFIX}legacy"
    legacy.mkdir()
    (legacy / "spark.properties").write_text("x=secret\n")
    assert wd.sweep_stale_workdirs(tmp_path) == []  # maybe a directory being created right now
    later = time.time() + wd.UNOWNED_GRACE_SECONDS + 1
    assert wd.sweep_stale_workdirs(tmp_path, now=later) == [legacy] and not legacy.exists()


def test_a_sigkilled_owner_leaves_its_directory_and_the_next_sweep_removes_it(tmp_path):
    """The real sequence: a process creates its directory, writes a secret and is SIGKILLed."""
    ready = multiprocessing.get_context("fork").Event()

    def child() -> None:
        path = wd.create_workdir(tmp_path)
        (path / "spark.properties").write_text("k=TOPSECRET\n")
        ready.set()
        time.sleep(60)

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    assert ready.wait(10)
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(wd.WORKDIR_PREFIX)]
    assert wd.sweep_stale_workdirs(tmp_path) == []  # owner still running
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(10)
    assert (left / "spark.properties").exists()  # SIGKILL skipped every cleanup
    assert wd.sweep_stale_workdirs(tmp_path) == [left] and not left.exists()
