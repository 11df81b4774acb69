"""A provider job as a Spark Connect client inside the task process (Spark 4).

On Spark 4 the Airflow environment's ``pyspark-client`` (pinned to the server's minor) is the Connect
client: the task process opens its own session with ``SparkSession.builder.remote(url).create()``
and runs the job file's ``__main__`` with it. No second Python, no runner process.
What the session carries is what the runner's carries (:mod:`airflow_iceberg_provider.core.connect_session`):
the catalog as session conf, secrets only in config requests, all of it unset when the job ends.

:class:`InProcessConnectJob` has the runner's shape (``run``, ``terminate``): a kill or a timeout
interrupts the session's operations on the server (``interruptAll``); the server keeps serving, and
Iceberg's atomic commits leave nothing half-committed.
"""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from airflow_iceberg_provider.core.connect_session import (
    ConnectSessionError,
    check_extensions,
    clear_session,
    configure_session,
    limit_retries,
    refused,
    unreachable,
)
from airflow_iceberg_provider.exceptions import IcebergConnectionError, IcebergSparkJobError

#: The environment variable pyspark's ``is_remote()`` and the jobs' ``is_connect()`` read.
CONNECT_MODE_ENV = "SPARK_CONNECT_MODE_ENABLED"
#: How long ``terminate`` waits for the server to acknowledge the interruption.
INTERRUPT_WAIT_S = 10.0


def client_version() -> str:
    """The Airflow environment's Spark Connect client version (``pyspark-client``), or a clear error."""
    try:
        from pyspark.version import __version__
    except ImportError as err:
        raise IcebergConnectionError(
            "The Spark Connect client runs in the task process on Spark 4, and this Airflow environment has no "
            "pyspark-client: install the provider's dependencies (pyspark-client, pinned to the server's Spark "
            'minor), or set the connection\'s extra {"client": "runner"} with {"python": <a Spark runtime Python>}.'
        ) from err
    return str(__version__)


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


class _LogLines(io.TextIOBase):
    """A text stream that sends each complete line to the task log and keeps the last ones.

    While it logs a line, whatever the logging machinery itself writes to ``sys.stdout`` or
    ``sys.stderr`` (this stream, during the job) goes to ``through``, the stream it replaced: a
    handler that writes to the console under a lock must not come back here and wait for itself.
    """

    def __init__(self, log: Any, tail: list[str], through: Any) -> None:
        self._log = log
        self._tail = tail
        self._through = through
        self._partial = ""
        self._busy = threading.local()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if getattr(self._busy, "on", False):
            return int(self._through.write(text) or 0)
        self._busy.on = True
        try:
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
            for line in lines:
                self._tail[:] = [*self._tail[-40:], line]
                self._log.info("%s", line)
        finally:
            self._busy.on = False
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self.write("\n")


#: The job runtime module, and the top-level name user job scripts import it by
#: (``from iceberg_job_runtime import run_job``; the job package zip's alias on the Spark side).
JOB_RUNTIME_MODULE = "airflow_iceberg_provider.spark_jobs.iceberg_job_runtime"
JOB_RUNTIME_ALIAS = "iceberg_job_runtime"


@contextlib.contextmanager
def _job_globals(application: str, argv: Sequence[str], py_files: Sequence[str], out: _LogLines) -> Iterator[None]:
    """The process state a job file expects as ``__main__``, restored afterwards: its argv, its own
    modules on ``sys.path``, ``iceberg_job_runtime`` as the installed package's module (one identity,
    as the job zip's alias gives it on the Spark side), the Connect mode flag, and its output in the
    task log. The job modules are imported here by name only: the task process runs the job, the
    Airflow side's code does not call into it."""
    import importlib

    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_flag = os.environ.get(CONNECT_MODE_ENV)
    saved_alias = sys.modules.get(JOB_RUNTIME_ALIAS)
    sys.argv = [application, *argv]
    sys.path[:0] = list(py_files)
    sys.modules[JOB_RUNTIME_ALIAS] = importlib.import_module(JOB_RUNTIME_MODULE)
    os.environ[CONNECT_MODE_ENV] = "1"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            yield
    finally:
        out.flush()
        sys.argv = saved_argv
        sys.path[:] = saved_path
        if saved_alias is None:
            sys.modules.pop(JOB_RUNTIME_ALIAS, None)
        else:
            sys.modules[JOB_RUNTIME_ALIAS] = saved_alias
        if saved_flag is None:
            os.environ.pop(CONNECT_MODE_ENV, None)
        else:
            os.environ[CONNECT_MODE_ENV] = saved_flag


class InProcessConnectJob:
    """One job file run as a Spark Connect client by this (the task's) process."""

    def __init__(self, conn_id: str, address: str, timeout_s: float, log: Any) -> None:
        self.conn_id = conn_id
        self.address = address
        self.timeout_s = timeout_s
        self.log = log
        self.tail: list[str] = []
        self._spark: Any = None
        self._killed_by: str | None = None

    def open(self, url: str) -> Any:
        """A new Connect session (its own session id); clear errors for a refused or absent server."""
        version = client_version()
        from pyspark.sql.connect.session import SparkSession

        try:
            spark = SparkSession.builder.remote(url).create()
            limit_retries(spark)
            server = str(spark.version)
        except Exception as err:  # noqa: BLE001 - classified into the provider's errors below
            if refused(err):
                raise IcebergConnectionError(
                    f"Spark Connect server of connection {self.conn_id!r} at {self.address} refused the client's "
                    "token (UNAUTHENTICATED). Set the connection's password to the server's "
                    "spark.connect.authenticate.token (SPARK_CONNECT_AUTHENTICATE_TOKEN). Nothing was submitted."
                ) from None
            if unreachable(err):
                raise IcebergSparkJobError(
                    f"Spark Connect server of connection {self.conn_id!r} at {self.address} did not answer "
                    f"({type(err).__name__}). Start it or point the connection at a running server. Nothing was "
                    "submitted."
                ) from None
            raise
        if _minor(server) != _minor(version):
            spark.stop()
            raise IcebergConnectionError(
                f"Spark Connect server of connection {self.conn_id!r} at {self.address} runs Spark {server}, and the "
                f"task's client is pyspark-client {version}: client and server must share the minor version. Pin "
                f"pyspark-client=={_minor(server)}.* in the Airflow environment, or use a server of Spark "
                f"{_minor(version)}. Nothing was submitted."
            )
        return spark

    def run(self, document: Mapping[str, Any], name: str) -> None:
        """Run the session document's job file; raise :class:`IcebergSparkJobError` unless it exits 0."""
        spark = self.open(str(document["url"]))
        self._spark = spark
        t0 = time.monotonic()
        timer = threading.Timer(self.timeout_s, self._timeout)
        timer.daemon = True
        keys = [*document["conf"], *document["secret_conf"]]
        code: int = 0
        try:
            check_extensions(spark, self.address)
            skipped = configure_session(spark, document["conf"], document["secret_conf"])
            if skipped:
                self.log.info(
                    "Session cannot set (server-wide conf, left as the server has it): %s", ", ".join(skipped)
                )
            timer.start()
            code = self._run_main(str(document["application"]), document["argv"], document.get("py_files") or ())
        except ConnectSessionError as err:
            raise IcebergSparkJobError(
                f"Spark job {name!r} through Spark Connect ({self.conn_id!r} at {self.address}): {err}"
            ) from None
        finally:
            timer.cancel()
            clear_session(spark, keys)
            self._spark = None
            spark.stop()
        if code == 0 and self._killed_by is None:
            return
        why = self._killed_by or f"exit code {code}"
        raise IcebergSparkJobError(
            f"Spark job {name!r} through Spark Connect ({self.conn_id!r} at {self.address}) failed after "
            f"{time.monotonic() - t0:.1f}s ({why}). Last job output:\n" + "\n".join(self.tail[-15:])
        )

    def _run_main(self, application: str, argv: Sequence[str], py_files: Sequence[str]) -> int:
        out = _LogLines(self.log, self.tail, sys.__stderr__)
        with _job_globals(application, argv, py_files, out):
            try:
                runpy.run_path(application, run_name="__main__")
            except SystemExit as stop:
                return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        return 0

    def _timeout(self) -> None:
        self._killed_by = f"timed out after {self.timeout_s:.0f}s (extra timeout of the connection)"
        self.log.error("Spark Connect job %s; interrupting its session", self._killed_by)
        self._interrupt()

    def terminate(self) -> None:
        """Interrupt every operation of this job's session on the server (the task is being killed)."""
        if self._spark is None:
            return
        self._killed_by = self._killed_by or "killed with the task"
        self._interrupt()

    def _interrupt(self) -> None:
        spark = self._spark
        if spark is None:
            return

        def interrupt() -> None:
            try:
                ids = spark.interruptAll()
                self.log.info("Interrupted %d Spark Connect operation(s)", len(ids or []))
            except Exception as err:  # noqa: BLE001 - the server may be gone already
                self.log.warning("Interrupting the Spark Connect session failed: %s", type(err).__name__)

        worker = threading.Thread(target=interrupt, daemon=True)
        worker.start()
        worker.join(INTERRUPT_WAIT_S)
