"""``die_with_parent_preexec``: a child started with it does not outlive the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from airflow_iceberg_provider.hooks._process import can_die_with_parent

pytestmark = pytest.mark.skipif(not can_die_with_parent(), reason="prctl(2) is Linux-only")

PARENT = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from airflow_iceberg_provider.hooks._process import die_with_parent_preexec
    sig = signal.Signals[sys.argv[1]]
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        preexec_fn=die_with_parent_preexec(os.getpid(), sig, own_session=sys.argv[2] == "1"),
    )
    print(child.pid, os.getsid(child.pid) == child.pid, flush=True)
    time.sleep(60)
    """
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(("sig", "own_session"), [("SIGKILL", False), ("SIGTERM", True)])
def test_child_dies_when_its_parent_is_killed(sig: str, own_session: bool) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, sig, "1" if own_session else "0"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pid_text, in_own_session = parent.stdout.readline().split()
        child = int(pid_text)
        assert in_own_session == str(own_session)
        assert _alive(child)
        os.kill(parent.pid, signal.SIGKILL)  # no clean-up code runs in the parent
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), f"the child {child} outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()
