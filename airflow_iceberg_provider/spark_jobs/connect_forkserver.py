"""A warm Spark Connect client: one process with pyspark's Connect client imported, forking one child per task.

A Connect task's own cost is mostly its client process: importing pyspark's Connect client
(pandas, pyarrow, grpc) takes about two seconds of CPU, every task. This server pays that once.
:mod:`airflow_iceberg_provider.hooks.spark_connect` starts it on first use (one per Spark runtime
Python, user and runner version, listening on a Unix socket in a 0700 directory) and asks it for
one child per task; it exits after ``--idle`` seconds without a task.

Per task (one connection on the socket):

1. the task process sends a JSON request (the runner's argv, the task's environment and working
   directory) with the write end of its output pipe attached (``SCM_RIGHTS``);
2. the server forks; the child starts a new session (``setsid``), takes that pipe as its stdout and
   stderr, takes the task's environment and working directory, and runs
   :func:`connect_runner.main` exactly as the per-task process would (so the session file, the
   secrets and the interrupt on SIGTERM work the same way);
3. the server answers ``pid <n>`` at once and ``exit <code>`` when the child ends;
4. if the task process goes away first (killed, even by SIGKILL: its end of the socket closes),
   the server sends the child SIGTERM (the runner interrupts its session's operations on the
   Connect server) and SIGKILL after the grace period.

No provider module is imported before the fork: every child imports the job code of its own task
(its ``py_files``), so tasks of different provider versions or DAG files do not share modules.
The server holds no secret: it starts with a minimal environment, and a task's environment and
session file reach only that task's child.

Usage (by the hook): ``python connect_forkserver.py --socket <path> [--idle 900]``
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from typing import Any

#: Modules every Connect job imports (pyspark's Connect client, pandas, pyarrow, grpc), imported once.
PRELOAD = (
    "pyspark.sql.connect.session",
    "pyspark.sql.connect.functions",
    "pyspark.sql.functions",
    "pyspark.sql.types",
    "pyarrow.fs",
    "pyarrow.parquet",
    "pyarrow.compute",
)
#: Seconds between SIGTERM and SIGKILL of a child whose task went away.
KILL_GRACE_S = 15.0
#: Largest request accepted (the task's environment included).
MAX_REQUEST = 4 * 1024 * 1024
_HEADER = struct.Struct("!I")
#: The per-task client, beside this file.
RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "connect_runner.py")


def preload() -> None:
    """Import the Connect client's heavy modules; leave no thread running (a fork copies only the caller)."""
    for name in PRELOAD:
        __import__(name)
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator

    # pyspark 3.5 creates a thread pool at import for its release calls; the first session of a child
    # creates it again (ExecutePlanResponseReattachableIterator._initialize_pool_if_necessary)
    shutdown = getattr(ExecutePlanResponseReattachableIterator, "shutdown", None)
    if shutdown is not None:
        shutdown()
    if threading.active_count() > 1:
        names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
        raise RuntimeError(f"threads running after the preload ({names}): forking would copy their locks")


def read_request(conn: socket.socket) -> tuple[dict[str, Any], int]:
    """One request: 4-byte big-endian length, then JSON; the output pipe's fd arrives with the first
    bytes (the task's side: :func:`airflow_iceberg_provider.hooks._connect_warm.send_request`)."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 1)
    if not fds:
        raise ValueError("request without an output descriptor")
    while len(data) < _HEADER.size:
        more = conn.recv(65536)
        if not more:
            raise ValueError("truncated request")
        data += more
    (size,) = _HEADER.unpack_from(data)
    if size > MAX_REQUEST:
        raise ValueError(f"request of {size} bytes")
    body = data[_HEADER.size :]
    while len(body) < size:
        more = conn.recv(65536)
        if not more:
            raise ValueError("truncated request")
        body += more
    return json.loads(body[:size]), fds[0]


def _child(request: dict[str, Any], out_fd: int) -> None:
    """In the forked child: become the task's runner process, then exit with its code."""
    code = 1
    try:
        os.setsid()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(devnull)
        os.close(out_fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request.get("cwd") or "/")
        # what a fresh interpreter would put on sys.path from the task's PYTHONPATH
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[1:1] = [p for p in extra if p not in sys.path]
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = sys.stdout
        runner = runpy.run_path(RUNNER, run_name="connect_runner")  # the job code is the task's own, not preloaded
        code = runner["main"](list(request["argv"]))
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported on the task's output, then the exit code
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


class ForkServer:
    """The accept loop: one forked child per connection, its exit code written back."""

    def __init__(self, path: str, idle_s: float) -> None:
        self.path = path
        self.idle_s = idle_s
        self.sel = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}  # pid -> the task's connection
        self.doomed: dict[int, float] = {}  # pid -> when SIGKILL is due (its task went away)
        self.last_activity = time.monotonic()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.inode = -1

    def serve(self) -> None:
        tmp = f"{self.path}.{os.getpid()}"
        self.listener.bind(tmp)
        os.chmod(tmp, 0o600)
        self.listener.listen(64)
        os.replace(tmp, self.path)  # appears only when it accepts
        self.inode = os.stat(self.path).st_ino
        self.sel.register(self.listener, selectors.EVENT_READ)
        print(f"[connect-forkserver] pid {os.getpid()} serving on {self.path}", flush=True)
        try:
            while True:
                for key, _ in self.sel.select(timeout=0.2):
                    if key.fileobj is self.listener:
                        self._accept()
                    else:
                        self._task_went_away(key.fileobj)  # type: ignore[arg-type]
                self._reap()
                if not self.children and time.monotonic() - self.last_activity > self.idle_s:
                    break
                if self._replaced() and not self.children:
                    break
        finally:
            self.listener.close()
            for pid in self.children:  # stopped with tasks running: each runner interrupts its session
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            if not self._replaced():
                try:
                    os.unlink(self.path)
                except FileNotFoundError:
                    pass

    def _replaced(self) -> bool:
        """Whether the socket path no longer names this server (removed, or taken by a newer one)."""
        try:
            return os.stat(self.path).st_ino != self.inode
        except OSError:
            return True

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        self.last_activity = time.monotonic()
        try:
            conn.settimeout(10)
            request, out_fd = read_request(conn)
        except (OSError, ValueError) as err:
            print(f"[connect-forkserver] refused a request: {err}", flush=True)
            conn.close()
            return
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            self.listener.close()
            for other in self.children.values():
                other.close()
            conn.close()
            _child(request, out_fd)
        os.close(out_fd)
        conn.settimeout(None)
        conn.sendall(f"pid {pid}\n".encode())
        self.children[pid] = conn
        self.sel.register(conn, selectors.EVENT_READ, pid)

    def _task_went_away(self, conn: socket.socket) -> None:
        pid = next((p for p, c in self.children.items() if c is conn), None)
        try:
            data = conn.recv(64)
        except OSError:
            data = b""
        if data or pid is None:
            return
        self.sel.unregister(conn)
        if pid not in self.doomed:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            self.doomed[pid] = time.monotonic() + KILL_GRACE_S

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                break
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code  # killed by a signal: 128 + its number, as a shell says
            conn = self.children.pop(pid, None)
            self.doomed.pop(pid, None)
            self.last_activity = time.monotonic()
            if conn is not None:
                try:
                    self.sel.unregister(conn)
                except (KeyError, ValueError):
                    pass
                try:
                    conn.sendall(f"exit {code}\n".encode())
                except OSError:
                    pass
                conn.close()
        now = time.monotonic()
        for pid, due in list(self.doomed.items()):
            if now >= due:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.doomed[pid] = now + 3600


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--socket", required=True)
    parser.add_argument("--idle", type=float, default=900.0)
    args = parser.parse_args(argv)
    preload()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    ForkServer(args.socket, args.idle).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
