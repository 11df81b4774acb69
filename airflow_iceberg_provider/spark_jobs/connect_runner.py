"""Run one job file as a Spark Connect client (the Spark Connect mode's process per task).

Started by :mod:`airflow_iceberg_provider.hooks.spark_connect` with the Spark runtime's Python as
``connect_runner.py --session <0600 file>``. It

1. reads the session file (server URL with its token, the catalog conf and its secrets, the job
   file, its argv, the modules it imports) and deletes it;
2. opens a new Connect session (its own session id) and sets the catalog as session conf: the
   secrets travel in a config request, never in plan text, and only this session sees them;
3. runs the job file as ``__main__`` (the job calls ``iceberg_job_runtime.run_job``, whose
   :func:`~airflow_iceberg_provider.spark_jobs.iceberg_job_runtime.build_session` returns this
   session), then unsets the session conf it set;
4. on SIGTERM/SIGINT (task killed, timeout, the task process died) interrupts every operation of
   its session on the server and exits 143: the server keeps running and serving other sessions.

Exit codes: the job's own (0 success, 1 failure recorded in the ledger), 75 when the server does
not answer, 143 when interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import runpy
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

EXIT_UNREACHABLE = 75
EXIT_INTERRUPTED = 143


def _say(message: str) -> None:
    print(f"[spark-connect] {message}", flush=True)


def open_session(doc: dict[str, Any]) -> Any:
    """A new Connect session with the catalog conf set (secrets included), or exit 75 when unreachable.

    The session rules are :mod:`airflow_iceberg_provider.core.connect_session`'s, the same as for a
    client in the task process on Spark 4 (:func:`_session_rules`).
    """
    connect_session = _session_rules()

    host, _, port = str(doc["address"]).rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as err:
        _say(f"server {doc['address']} of connection {doc['conn_id']!r} is not reachable: {err.strerror or err}")
        sys.exit(EXIT_UNREACHABLE)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # pyspark's is_remote(): the job's DataFrame API goes remote
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    try:
        spark = RemoteSparkSession.builder.remote(doc["url"]).getOrCreate()
        connect_session.limit_retries(spark)
        connect_session.check_extensions(spark, doc["address"])
    except connect_session.ConnectSessionError:
        raise
    except Exception as err:  # noqa: BLE001 - classified below
        if connect_session.unreachable(err):
            _say(f"server {doc['address']} of connection {doc['conn_id']!r} is not reachable: {type(err).__name__}")
            sys.exit(EXIT_UNREACHABLE)
        raise
    skipped = connect_session.configure_session(spark, doc["conf"], doc["secret_conf"])
    if skipped:
        _say(f"session cannot set (server-wide conf, left as the server has it): {', '.join(skipped)}")
    return spark


def clear_session(spark: Any, doc: dict[str, Any]) -> None:
    """Unset what this task set on its session (the server keeps idle sessions for a while)."""
    _session_rules().clear_session(spark, [*doc["conf"], *doc["secret_conf"]])


def _session_rules() -> Any:
    """:mod:`airflow_iceberg_provider.core.connect_session`: from the job package zip when the job ships
    it (on ``sys.path`` by now), else from the file beside this runner (a job without the provider's
    package, such as a user's own script; the module imports only the standard library)."""
    if importlib.util.find_spec("airflow_iceberg_provider") is not None:
        return importlib.import_module("airflow_iceberg_provider.core.connect_session")
    name = "_airflow_iceberg_provider_connect_session"
    if name not in sys.modules:
        path = Path(__file__).resolve().parents[1] / "core" / "connect_session.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _install_interrupt(spark: Any) -> None:
    done = threading.Event()

    def handler(signum: int, _frame: Any) -> None:
        if done.is_set():
            os._exit(EXIT_INTERRUPTED)
        done.set()
        _say(f"signal {signum}: interrupting this session's operations on the server")

        def interrupt() -> None:
            try:
                ids = spark.interruptAll()
                _say(f"interrupted {len(ids or [])} operation(s)")
            except Exception as err:  # noqa: BLE001 - the server may be gone already
                _say(f"interrupt failed: {type(err).__name__}")

        worker = threading.Thread(target=interrupt, daemon=True)
        worker.start()
        worker.join(10.0)
        os._exit(EXIT_INTERRUPTED)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--session", required=True)
    args = parser.parse_args(argv)
    with open(args.session, encoding="utf-8") as fh:
        doc = json.load(fh)
    os.unlink(args.session)  # the secrets live in this process only from here on
    for path in reversed(doc.get("py_files") or []):
        sys.path.insert(0, path)
    spark = open_session(doc)
    _install_interrupt(spark)
    _say(f"session open on {doc['address']} for {doc['job_name']}")
    code = 0
    sys.argv = [doc["application"], *doc["argv"]]
    try:
        runpy.run_path(doc["application"], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        clear_session(spark, doc)
    return code


if __name__ == "__main__":
    sys.exit(main())
