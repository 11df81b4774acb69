"""Event-driven scheduling, for real: a triggerer runs the asset watchers, a scheduler starts DAG runs.

Used by ``make demo`` (``DEMO["driver"]`` of ``example_dags/example_iceberg_events.py``), by
``bench/trigger_poll.py`` (commit -> DAG run latency) and by the ``airflow`` tests of the event
triggers. :class:`AirflowProcesses` wraps one ``AIRFLOW_HOME``: ``airflow dags reserialize``
(registers the watchers of unpaused DAGs), ``airflow triggerer`` / ``airflow scheduler`` /
``airflow api-server`` as child processes stopped by pid, and read-only queries of its metadata
database (asset events, DAG runs, the asset state store).

The demo: the watcher DAGs are unpaused and registered, a triggerer + scheduler + API server
start (poll interval 1 s, ``AIP_EVENTS_POLL_SECONDS``), then

1. one pyiceberg append to ``events.orders`` -> a commit event -> ``iceberg_events_consumer`` runs;
2. small appends until the table crosses its policy (``airflow-iceberg.maintenance.min-input-files=4``)
   -> one health event -> ``iceberg_events_maintenance`` runs the plan (one Spark job compacts);
3. the healed table stays quiet.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


class AirflowProcesses:
    """Airflow CLI processes on one AIRFLOW_HOME (SQLite metadata DB), started and stopped by pid."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.home = Path(env["AIRFLOW_HOME"])
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}

    def cli(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run(["airflow", *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def start(self, name: str, *args: str) -> subprocess.Popen:
        with open(self.log_dir / f"{name}.log", "a") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(["airflow", name, *args], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs[name] = proc
        return proc

    def stop(self, name: str, timeout: float = 60) -> int | None:
        """SIGTERM (graceful: the triggerer finishes its loop), then SIGKILL after ``timeout``."""
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait(10)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    # ------------------------------------------------------------------ metadata DB (read only)
    def query(self, sql: str, *params: Any) -> list[tuple]:
        with sqlite3.connect(f"file:{self.home / 'airflow.db'}?mode=ro", uri=True, timeout=30) as db:
            return db.execute(sql, params).fetchall()

    def asset_events(self, asset_prefix: str = "") -> list[dict[str, Any]]:
        rows = self.query(
            "SELECT a.name, e.extra, e.timestamp FROM asset_event e JOIN asset a ON a.id = e.asset_id "
            "WHERE a.name LIKE ? ORDER BY e.id",
            asset_prefix + "%",
        )
        return [{"asset": n, "extra": json.loads(x or "{}"), "timestamp": t} for n, x, t in rows]

    def dag_runs(self, dag_id: str) -> list[dict[str, Any]]:
        rows = self.query(
            "SELECT run_id, state, run_type, queued_at, start_date, end_date FROM dag_run WHERE dag_id = ? ORDER BY id",
            dag_id,
        )
        keys = ("run_id", "state", "run_type", "queued_at", "start_date", "end_date")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def state_store(self) -> dict[str, dict[str, Any]]:
        rows = self.query(
            "SELECT a.name, s.key, s.value, s.last_updated_by_kind FROM asset_state_store s "
            "JOIN asset a ON a.id = s.asset_id ORDER BY a.name"
        )
        return {f"{n} {k}": {"value": json.loads(v), "by": by} for n, k, v, by in rows}

    def running_watchers(self) -> int:
        return self.query("SELECT count(*) FROM trigger WHERE triggerer_id IS NOT NULL")[0][0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, check: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def create_table(hook: Any, table: str, properties: dict[str, str] | None = None) -> None:
    """A small unpartitioned format-v2 table (``id``, ``amount``) for the demo and the bench."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, LongType, NestedField

    hook.ensure_namespace(table.split(".")[0])
    schema = Schema(
        NestedField(1, "id", LongType(), required=False), NestedField(2, "amount", DoubleType(), required=False)
    )
    hook.catalog.create_table(table, schema=schema, properties={"format-version": "2", **(properties or {})})


def append(hook: Any, table: str, start: int, rows: int) -> str:
    """One pyiceberg append (one small data file); returns the new snapshot id as a decimal string."""
    import pyarrow as pa

    ids = list(range(start, start + rows))
    hook.load_table(table).append(
        pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array([i * 1.5 for i in ids], pa.float64())})
    )
    return str(hook.ref_snapshot_id(table))


def payloads(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["extra"].get("payload", {}) for e in events]


# ---------------------------------------------------------------------------------- the demo
EVENT_DAGS = ("iceberg_events_consumer", "iceberg_events_maintenance", "iceberg_events_erasure_escalation")


def demo() -> int:
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from example_dags.example_iceberg_events import TABLE

    port = free_port()
    env = {**os.environ, "AIP_EVENTS_POLL_SECONDS": os.environ.get("AIP_EVENTS_POLL_SECONDS", "1")}
    env.update(  # the scheduler's task processes reach this demo's own API server, with a shared JWT secret
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/",
        AIRFLOW__API_AUTH__JWT_SECRET=env.get("AIRFLOW__API_AUTH__JWT_SECRET") or secrets.token_hex(32),
        AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK="False",
    )
    work = Path(os.environ.get("AIP_WORK", ROOT / ".work"))
    af = AirflowProcesses(env, work / "demo-logs" / "events")
    hook = IcebergCatalogHook()
    if hook.table_exists(TABLE):
        hook.catalog.drop_table(TABLE)
    create_table(hook, TABLE, {"airflow-iceberg.maintenance.min-input-files": "4"})
    append(hook, TABLE, 0, 50)
    t0 = time.monotonic()
    # Watchers are registered at parse time for unpaused DAGs only. Unpause just the event DAGs (other
    # example DAGs stay paused: the scheduler started below must not run their schedules), then parse again.
    af.cli("dags", "reserialize")
    for dag_id in EVENT_DAGS:
        af.cli("dags", "unpause", dag_id)
    af.cli("dags", "reserialize")
    before = {d: len(af.dag_runs(d)) for d in EVENT_DAGS}
    # the shared AIRFLOW_HOME keeps the events of earlier demos: count only this run's
    health_before = len(af.asset_events("iceberg_health."))
    commits_before = len(af.asset_events("iceberg_commits."))
    try:
        af.start("api-server", "--port", str(port), "--host", "127.0.0.1")
        af.start("scheduler")
        af.start("triggerer")
        wait_for("the watchers to run", lambda: af.running_watchers() >= 3, 300)
        wait_for("the commit watcher's start mark", lambda: any("commit" in k for k in af.state_store()), 60)
        print(f"    triggerer, scheduler and API server up in {time.monotonic() - t0:.0f}s", flush=True)

        sid = append(hook, TABLE, 1000, 50)
        committed = time.monotonic()
        run = wait_for(
            "the consumer DAG run",
            lambda: af.dag_runs("iceberg_events_consumer")[before["iceberg_events_consumer"] :],
            120,
        )[0]
        print(
            f"OK  commit {sid} -> commit event -> DAG run {run['run_id']} ({run['run_type']}) in "
            f"{time.monotonic() - committed:.1f}s",
            flush=True,
        )

        for i in range(2):  # 3 data files + 2 = the table's min-input-files=4 crossed
            append(hook, TABLE, 2000 + 100 * i, 20)
        crossed = time.monotonic()
        health = wait_for(
            "the health event", lambda: payloads(af.asset_events("iceberg_health.")[health_before:]), 120
        )[0]
        print(
            f"OK  table crossed its policy -> health event ({health['actions']}: "
            f"{health['reasons'].get('rewrite_data_files')}) in {time.monotonic() - crossed:.1f}s",
            flush=True,
        )
        plan = wait_for(
            "the maintenance plan to finish",
            lambda: [
                r
                for r in af.dag_runs("iceberg_events_maintenance")[before["iceberg_events_maintenance"] :]
                if r["state"] in ("success", "failed")
            ],
            600,
            every=2,
        )[0]
        print(
            f"{'OK ' if plan['state'] == 'success' else 'BAD'} maintenance plan DAG run {plan['run_id']}: "
            f"{plan['state']}; data files now {hook.health(TABLE).data_files}",
            flush=True,
        )
        time.sleep(5)
        quiet = len(af.asset_events("iceberg_health.")) - health_before
        print(f"{'OK ' if quiet == 1 else 'BAD'} healed table: {quiet} health event in total (quiet after the plan)")
        consumer = af.dag_runs("iceberg_events_consumer")[before["iceberg_events_consumer"] :]
        print(
            f"    consumer runs: {[r['state'] for r in consumer]}; "
            f"commit events: {[p['snapshot_id'] for p in payloads(af.asset_events('iceberg_commits.')[commits_before:])]}"
        )
        return 0 if plan["state"] == "success" and quiet == 1 else 1
    finally:
        af.stop_all()
        for dag_id in EVENT_DAGS:  # do not leave watchers registered in the shared AIRFLOW_HOME
            af.cli("dags", "pause", dag_id)


if __name__ == "__main__":
    sys.exit(demo())
