"""Detached job processes: start one that outlives the task process, find it again, wait for it, kill it.

A durable Spark job (spark-submit's JVM in client mode, or the Spark Connect client process) runs in
a session of its own (``start_new_session``), with no parent-death signal, its output appended to a
private log file in its working directory. A process is named by pid **and** start time (``/proc``
field 22) on one boot of one host: pids are reused, so a pid alone would reconnect a retry to a
stranger.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from airflow_iceberg_provider.rules.durable_jobs import Liveness


class Identified(Protocol):
    """A process named by pid and start time on one boot of one host (a job record, a job handle)."""

    @property
    def pid(self) -> int: ...
    @property
    def start_ticks(self) -> int | None: ...
    @property
    def host(self) -> str: ...
    @property
    def boot_id(self) -> str | None: ...


#: Seconds between two looks at a detached job (its log, its process).
POLL_SECONDS = 1.0
#: SIGTERM first (a Connect runner interrupts its session's operations), SIGKILL after this.
KILL_GRACE_S = 15.0


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (Linux), or ``None`` if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may contain spaces and parentheses: split after its last ')'
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 overall


def _libc_prctl() -> Any:
    """``prctl(2)`` from libc on Linux (resolved once, before any fork), else ``None``."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - exotic libc
        return None


_PRCTL = _libc_prctl()
_PR_SET_PDEATHSIG = 1


def can_die_with_parent() -> bool:
    """Whether a child process can be made to die with its parent (``prctl(2)`` on Linux)."""
    return _PRCTL is not None


def die_with_parent_preexec(
    parent_pid: int, sig: signal.Signals = signal.SIGKILL, *, own_session: bool = False
) -> Callable[[], None]:
    """``preexec_fn`` making a child (and the program it execs) get ``sig`` when the Airflow task
    process ``parent_pid`` dies, even by SIGKILL.

    Without it, a task process killed with SIGKILL (OOM killer, lost worker) leaves spark-submit
    (or a Connect runner) running as an orphan that keeps committing to the lake while the retry
    already runs: a retried WAP write would get the dead try's rows on top of its own.
    ``PR_SET_PDEATHSIG`` survives ``exec`` (spark-submit execs the JVM). Only async-signal-safe work
    happens in the child (the libc function was resolved before the fork).

    :param parent_pid: the pid of the process the child must not outlive (``os.getpid()`` of the caller).
    :param sig: the signal the child gets: SIGKILL for spark-submit, SIGTERM for a Connect runner,
        which interrupts its session's operations on it.
    :param own_session: start the child in a session of its own first (a terminal's Ctrl-C then
        reaches it through the task, not twice).
    """
    prctl = _PRCTL

    def _preexec() -> None:
        if own_session:
            os.setsid()
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), int(sig))

    return _preexec


def launch(cmd: Sequence[str], env: Mapping[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """Start ``cmd`` in its own session, stdout and stderr appended to ``log_path`` (0600)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        return subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(fd)


def identity(pid: int) -> dict[str, Any]:
    """The fields that name process ``pid`` of this host (pid, start time, host, boot id)."""
    return {"pid": pid, "start_ticks": process_start_ticks(pid), "host": socket.gethostname(), "boot_id": _boot_id()}


@dataclass(frozen=True)
class ProcessId:
    """A process named by pid and start time on one boot of one host."""

    pid: int
    start_ticks: int | None
    host: str
    boot_id: str | None

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> ProcessId | None:
        """The identity stored in ``value`` (as :func:`identity` writes it), ``None`` when malformed."""
        try:
            ticks = value.get("start_ticks")
            boot = value.get("boot_id")
            return cls(int(value["pid"]), None if ticks is None else int(ticks), str(value["host"]), boot and str(boot))
        except (KeyError, TypeError, ValueError):
            return None


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2 :].split()[0] in ("Z", "X")


def liveness(record: Identified, *, until_reaped: bool = False) -> Liveness:
    """Whether the recorded process still runs, as seen from this host.

    :param until_reaped: count a process that exited and that its parent has not reaped yet (a
        zombie) as alive: its parent may still read what it left (a job's log).
    """
    if record.host != socket.gethostname():
        return Liveness.OTHER_HOST
    boot = _boot_id()
    if boot is not None and record.boot_id not in (None, boot):
        return Liveness.GONE
    started = process_start_ticks(record.pid)
    if started is None or (record.start_ticks is not None and started != record.start_ticks):
        return Liveness.GONE
    return Liveness.GONE if not until_reaped and _is_zombie(record.pid) else Liveness.ALIVE


class LogFollower:
    """New complete lines of a job's log file, from where the last read stopped."""

    def __init__(self, path: Path, emit: Callable[[str], None], *, keep: int = 40) -> None:
        self.path = path
        self.emit = emit
        self.offset = 0
        self.tail: list[str] = []
        self.keep = keep
        self._partial = b""

    def read(self, *, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return
        self.offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = b"" if final else lines.pop()
        for raw in lines:
            if not raw and final:
                continue
            line = raw.decode("utf-8", errors="replace").rstrip("\r")
            self.tail = [*self.tail[-(self.keep - 1) :], line]
            self.emit(line)


def read_tail(path: Path, *, lines: int = 200, max_bytes: int = 256 * 1024) -> list[str] | None:
    """The last ``lines`` complete lines of a job's log (at most its last ``max_bytes``), ``None`` when
    it cannot be read here (another host, removed)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - max_bytes))
            data = fh.read()
    except OSError:
        return None
    text = data.decode("utf-8", errors="replace").split("\n")
    if size > max_bytes:
        text = text[1:]  # the first line read is cut
    return [line.rstrip("\r") for line in text if line][-lines:]


def wait(
    record: Identified,
    follower: LogFollower,
    *,
    proc: subprocess.Popen[bytes] | None = None,
    timeout_s: float | None = None,
    on_timeout: Callable[[], object] | None = None,
) -> int | None:
    """Follow the log until the job process exits; its exit code when this process is its parent.

    :param proc: the ``Popen`` of a job this process started (reaped here); ``None`` for a job an
        earlier try started, whose exit code nobody can read any more (its ledger row is the verdict).
    """
    t0 = time.monotonic()
    while True:
        follower.read()
        if proc is not None:
            code = proc.poll()
            if code is not None:
                follower.read(final=True)
                return code
        elif liveness(record) is not Liveness.ALIVE:
            follower.read(final=True)
            return None
        if timeout_s is not None and on_timeout is not None and time.monotonic() - t0 > timeout_s:
            on_timeout()
            timeout_s = None
        time.sleep(POLL_SECONDS)


def signal_then_kill(
    pid: int, alive: Callable[[], bool], *, group: bool = False, grace_s: float = KILL_GRACE_S, poll_s: float = 0.2
) -> bool:
    """SIGTERM ``pid`` (its process group when ``group``), SIGKILL once ``grace_s`` passed with
    ``alive()`` still true; ``False`` when it was gone before the first signal.

    :param alive: whether the process still runs (a ``Popen``'s ``poll()``, which also reaps it, or
        :func:`liveness`, which names it by start time).
    """
    send = os.killpg if group else os.kill
    try:
        send(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not alive():
            return True
        time.sleep(poll_s)
    try:
        send(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def spawn_with_parent(
    cmd: Sequence[str], env: Mapping[str, str], *, sig: signal.Signals = signal.SIGKILL, own_session: bool = False
) -> subprocess.Popen[str]:
    """Start ``cmd`` tied to this process (it gets ``sig`` when this process dies, see
    :func:`die_with_parent_preexec`), its stdout and stderr on one text pipe."""
    return subprocess.Popen(
        list(cmd),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(env),
        preexec_fn=die_with_parent_preexec(os.getpid(), sig, own_session=own_session),  # noqa: PLW1509 - async-signal-safe calls only
    )


def stop_child(proc: subprocess.Popen[Any], *, grace_s: float = KILL_GRACE_S) -> bool:
    """SIGTERM a child this process started, SIGKILL after ``grace_s``, and reap it; ``False`` if it
    had exited already."""
    if proc.poll() is not None:
        return False
    return signal_then_kill(proc.pid, lambda: proc.poll() is None, grace_s=grace_s, poll_s=0.1)


def terminate(record: Identified, *, grace_s: float = KILL_GRACE_S) -> bool:
    """SIGTERM the job's process group (its own session), SIGKILL after ``grace_s``; ``True`` if it ran."""
    if liveness(record) is not Liveness.ALIVE:
        return False
    return signal_then_kill(record.pid, lambda: liveness(record) is Liveness.ALIVE, group=True, grace_s=grace_s)
