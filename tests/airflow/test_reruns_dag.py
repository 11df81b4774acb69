"""Re-runs under real Airflow (#15): one DAG (tests/airflow/_reruns_dags/reruns_dag.py), one lake.

``airflow dags test`` with the same logical date deletes the earlier run and starts a new one
(a new run id and branch name for the same interval: a re-triggered logical date). The
sequence, on one table seeded with 10 rows of another day (so a predicate can overreach):

1. first run publishes day 1 (5 rows), every commit stamped with the Airflow identity;
2. ``fail``: refused before writing, naming the earlier publish; main unchanged;
3. ``skip``: the run succeeds, writes nothing, no Asset event, a ``noop`` ledger row;
4. ``replace`` with a failure injected after the replacement and the write: the run fails,
   main is untouched (the branch holds the half-done replacement);
5. ``replace`` again: converges, main holds exactly the new 5 rows of day 1 (audit: 5 added rows);
6. ``replace`` with a predicate that also matches the seeded day: refused before any write.

Spark jobs: 2 (first run) + 1 (injected failure) + 2 (replace) + 1 (refused predicate).

The second test runs a scheduler + API server: ``airflow backfill create`` over 5 days with 3
runs at once, then ``airflow tasks clear`` of a published backfill run per mode (a cleared run:
same run id, same branch name) and of its publish task only. Its Spark jobs run on the suite's
Spark Connect server (``spark_on_connect``), where SQL statements commit without the run's
snapshot summary properties: there the re-runs are found through the ledger, and the first
test (spark-submit) covers the stamps.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.airflow_procs import airflow_cli, airflow_env, fresh_airflow_home, start_group, stop_group
from tests.support.lake import create_orders_table, orders_batch

ROOT = Path(__file__).resolve().parents[2]
DAG_FILE = Path(__file__).resolve().parent / "_reruns_dags" / "reruns_dag.py"
TABLE = "rr.orders"
DAY1 = "2026-01-01T00:00:00+00:00"
#: Airflow 3 cron schedules have zero-length data intervals at the logical date
KEY1 = "reruns/load/2026-01-01T00:00:00+00:00/2026-01-01T00:00:00+00:00"

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("reruns")
    dags = tmp / "dags"
    dags.mkdir()
    (dags / DAG_FILE.name).symlink_to(DAG_FILE)
    out = {
        **airflow_env(tmp),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "RERUNS_TMP": str(tmp),
    }
    hook = _hook(out)
    create_orders_table(hook, TABLE).append(orders_batch(0, 10, "2025-12-31"))  # another day, not from this DAG
    return out


def _hook(env):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"]
    return IcebergCatalogHook()


def dags_test(env, mode: str, conf: str = "{}", **extra_env: str) -> tuple[str, str, float]:
    started = time.monotonic()
    proc = subprocess.run(
        ["airflow", "dags", "test", "reruns", DAY1, "-c", conf],
        capture_output=True,
        text=True,
        timeout=900,
        env={**env, "RERUNS_ON_RERUN": mode, **extra_env},
    )
    out = proc.stdout + proc.stderr
    finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
    state = "success" if proc.returncode == 0 and finished and "state=success" in finished[-1] else "failed"
    return state, out, time.monotonic() - started


def main_rows(hook) -> dict[int, float]:
    tbl = hook.load_table(TABLE)
    data = tbl.scan().to_arrow().select(["order_id", "amount"]).to_pylist()
    ids = [r["order_id"] for r in data]
    assert len(ids) == len(set(ids)), f"duplicate keys on main: {sorted(i for i in ids if ids.count(i) > 1)}"
    return {r["order_id"]: r["amount"] for r in data}


def day1(rows: dict[int, float]) -> dict[int, float]:
    return {k: v for k, v in rows.items() if 1000 <= k < 2000}


def check_ms(out: str) -> list[float]:
    return [float(m) for m in re.findall(r"Re-run check \(one catalog read \+ plan\): ([0-9.]+) ms", out)]


def asset_events(env) -> int:
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db") as db:
        return db.execute("SELECT count(*) FROM asset_event").fetchone()[0]


def test_cleared_published_run_per_mode_ends_with_each_key_once(env):
    hook = _hook(env)
    timings: dict[str, float] = {}
    # 1. first run
    state, out, timings["first run"] = dags_test(env, "fail")
    assert state == "success", out[-6000:]
    rows = main_rows(hook)
    assert len(rows) == 15 and day1(rows) == {1000 + i: 1.0 for i in range(5)}
    tbl = hook.load_table(TABLE)
    stamped = hook.snapshot(tbl, ref="main").summary
    assert stamped["airflow.wap-interval"] == KEY1 and stamped["airflow.dag-id"] == "reruns"
    assert stamped["airflow.run-id"].startswith("manual__") and stamped["airflow.try-number"] == "1"
    assert stamped["airflow.data-interval-start"] == DAY1 and stamped["airflow.task-id"] == "load.write"
    published, events = hook.ref_snapshot_id(tbl), asset_events(env)
    assert events >= 1

    # 2. fail: refused before writing, naming the earlier publish; main unchanged
    state, out, timings["fail re-run"] = dags_test(env, "fail")
    assert state == "failed"
    assert f"already published to main by snapshot {published}" in out and "on_rerun='fail' refuses" in out
    assert hook.ref_snapshot_id(TABLE) == published and set(hook.refs(TABLE)) == {"main"}
    assert main_rows(hook) == rows

    # 3. skip: success, nothing written, no second Asset event, a noop ledger row
    state, out, timings["skip re-run"] = dags_test(env, "skip")
    assert state == "success", out[-6000:]
    assert hook.ref_snapshot_id(TABLE) == published and main_rows(hook) == rows
    assert asset_events(env) == events
    noop = [r for r in hook.governance.read("ledger", operation="wap_write") if r["status"] == "noop"]
    assert len(noop) == 1 and noop[0]["table_name"] == TABLE
    ms = check_ms(out)

    # 4. replace, failing after the replacement and the write: main untouched
    state, out, _ = dags_test(env, "replace", '{"version": 2, "fail": "yes"}')
    assert state == "failed" and "injected failure inside the write" in out
    assert hook.ref_snapshot_id(TABLE) == published and main_rows(hook) == rows
    branch = next(name for name in hook.refs(TABLE) if name != "main")  # kept: the half-done replacement
    removal = [s for s in hook.ref_chain(TABLE, branch) if s.summary.get("airflow.wap-replaces")]
    assert [s.summary["airflow.wap-replaces"] for s in removal] == [str(published)]

    # 5. replace again (the retry): converges, exactly the new rows of day 1
    state, out, timings["replace re-run"] = dags_test(env, "replace", '{"version": 2}')
    assert state == "success", out[-6000:]
    rows2 = main_rows(hook)
    assert len(rows2) == 15 and day1(rows2) == {1000 + i: 2.0 for i in range(5)}
    audits = hook.governance.read("audit_results", table_name=TABLE, check_name="change.added_rows")
    assert sorted(r["observed_value"] for r in audits) == [5.0, 5.0]  # the re-load is judged as 5 rows, not 0
    ms += check_ms(out)
    replaced = hook.ref_snapshot_id(TABLE)

    # 6. a predicate that also matches the other day's rows: refused before any write
    branches = set(hook.refs(TABLE))
    state, out, _ = dags_test(env, "replace", '{"version": 3}', RERUNS_REPLACE_WHERE="amount > 0")
    assert state == "failed" and "also matches 10 rows" in out and "Nothing was written" in out
    assert hook.ref_snapshot_id(TABLE) == replaced and main_rows(hook) == rows2
    new = [r.snapshot_id for n, r in hook.refs(TABLE).items() if n not in branches]
    assert new and all(hook.is_ancestor(TABLE, h, replaced) for h in new)  # nothing written on the new branch

    print(f"\n[reruns] re-run check (one catalog read + plan), ms: {ms}")
    print("[reruns] airflow dags test wall time, s: " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items()))


# ---------------------------------------------------------------------------------- backfill
def run_states(env, run_type: str = "backfill") -> dict[str, str]:
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db", timeout=30) as db:
        rows = db.execute(
            "SELECT run_id, state FROM dag_run WHERE dag_id = 'reruns' AND run_type = ? ORDER BY run_id", (run_type,)
        ).fetchall()
    return dict(rows)


def task_states(env, run_id: str) -> dict[str, str]:
    with sqlite3.connect(Path(env["AIRFLOW_HOME"]) / "airflow.db", timeout=30) as db:
        return dict(db.execute("SELECT task_id, state FROM task_instance WHERE run_id = ?", (run_id,)).fetchall())


def task_log(env, run_id: str, task_id: str) -> str:
    """The last attempt's log of a task (for failure messages)."""
    logs = sorted((Path(env["AIRFLOW_HOME"]) / "logs").glob(f"dag_id=reruns/run_id={run_id}/task_id={task_id}/*.log"))
    return logs[-1].read_text()[-3000:] if logs else "(no log)"


def wait_runs(env, count: int, log: Path, timeout: float = 900) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        states = run_states(env)
        if len(states) == count and all(s in ("success", "failed") for s in states.values()):
            return states
        assert time.monotonic() < deadline, (states, log.read_text()[-4000:])
        time.sleep(0.5)  # two SQLite reads: cheap beside the scheduler


@pytest.mark.postgres
def test_backfill_three_at_once_then_cleared_runs_per_mode(env, spark_on_connect):
    """``airflow backfill create`` over 5 days, ``max_active_runs=3``: every day on main exactly once.

    On a PostgreSQL catalog: three Spark jobs committing at once to the embedded SQLite catalog
    fail with ``SQLITE_BUSY_SNAPSHOT`` (docs/reliability.md; there such tasks need retries, which
    the DAG gives them), and the issue asks for the backfill on PostgreSQL.

    Each run writes on its own branch (``wap_reruns__backfill__<date>_<hash>``); the runs that
    find ``main`` moved when they publish cherry-pick their append (``on_conflict="cherrypick"``).
    Then day 2's published run is cleared with ``airflow tasks clear`` (same run id), once per
    mode, and its publish task alone with ``skip``. The DAG variant without the audit
    (``RERUNS_AUDIT=0``) keeps this to 5 writes + the cherry-picks + 1 replace write.
    """
    from tests.support.servers import free_ports, pg_conn_json, postgres

    tmp = Path(env["RERUNS_TMP"])
    server = postgres()
    (tmp / "pgwh").mkdir()
    pg = {**env, "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT": pg_conn_json(server, server.create_database(), tmp / "pgwh")}
    hook = _hook(pg)
    create_orders_table(hook, TABLE).append(orders_batch(0, 10, "2025-12-31"))
    before = main_rows(hook)
    port = free_ports(1)[0]
    # its own Airflow DB: the dags-test sequence serialized the audit variant of the DAG (load.* tasks) into
    # the module's DB, and a scheduler there would queue tasks the workers' AUDIT=0 parse does not have
    home = fresh_airflow_home(tmp / "airflow_backfill")
    benv = {
        **pg,
        "AIRFLOW_CONN_SPARK_DEFAULT": os.environ["AIRFLOW_CONN_SPARK_DEFAULT"],  # as spark_on_connect chose
        "AIRFLOW_HOME": str(home),
        "RERUNS_AUDIT": "0",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "6",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
    }
    (tmp / "on_conflict").write_text("cherrypick")
    (tmp / "on_rerun").write_text("fail")
    airflow_cli(benv, "dags", "reserialize")
    airflow_cli(benv, "dags", "unpause", "reruns")
    airflow_cli(
        benv,
        "backfill",
        "create",
        "--dag-id",
        "reruns",
        "--from-date",
        "2026-01-02",
        "--to-date",
        "2026-01-06",
        "--max-active-runs",
        "3",
    )
    api = start_group(["airflow", "api-server", "--port", str(port)], benv, tmp / "api.log")
    scheduler = start_group(["airflow", "scheduler"], benv, tmp / "scheduler.log")
    log = tmp / "scheduler.log"
    started = time.monotonic()
    try:
        states = wait_runs(benv, 5, log)
        seconds = time.monotonic() - started
        assert list(states.values()) == ["success"] * 5, (states, log.read_text()[-6000:])
        rows = main_rows(hook)  # asserts no key twice
        for day in range(2, 7):
            assert sorted(k for k in rows if day * 1000 <= k < day * 1000 + 1000) == [day * 1000 + i for i in range(5)]
        assert len(rows) == len(before) + 25
        publishes = [r for r in hook.governance.read("ledger", operation="wap_publish") if r["run_id"] in states]
        methods = sorted(json.loads(r["details"])["method"] for r in publishes)
        assert len(publishes) == 5 and set(methods) <= {"fast_forward", "cherrypick", "recovered"}
        # a "recovered" row is a retry's: an earlier try moved main, then died on a transient catalog error
        # (SQLITE_BUSY under three concurrent runs) before its ledger row; the retry writes the row once
        for r in publishes:
            if json.loads(r["details"])["method"] == "recovered":
                assert int(r["try_number"]) > 1, r
        print(f"\n[reruns] backfill of 5 days, 3 at once: {seconds:.1f} s; publish methods {methods}")

        day2 = next(r for r in states if "2026-01-02" in r)
        head, events = hook.ref_snapshot_id(TABLE), asset_events(benv)

        def clear(mode: str, *task: str) -> dict[str, str]:
            (tmp / "on_rerun").write_text(mode)
            # the clear sets the finished run back to queued before the command returns
            airflow_cli(benv, "tasks", "clear", "reruns", "-s", "2026-01-02", "-e", "2026-01-02", "-y", *task)
            return wait_runs(benv, 5, log)

        # fail: the cleared run refuses at the write; main unchanged
        assert clear("fail")[day2] == "failed"
        assert task_states(benv, day2)["write"] == "failed" and task_states(benv, day2)["publish"] == "upstream_failed"
        assert hook.ref_snapshot_id(TABLE) == head and main_rows(hook) == rows
        # skip: the cleared run succeeds, write and publish skipped, no Asset event
        assert clear("skip")[day2] == "success"
        assert task_states(benv, day2)["write"] == "skipped", (task_states(benv, day2), task_log(benv, day2, "write"))
        assert task_states(benv, day2)["publish"] == "skipped", (
            task_states(benv, day2),
            task_log(benv, day2, "publish"),
        )
        assert hook.ref_snapshot_id(TABLE) == head and main_rows(hook) == rows and asset_events(benv) == events
        # replace: the day's rows are replaced; still each key once. Through Spark Connect the earlier
        # publish is known from the ledger, which does not say which files hold its rows: a predicate
        if spark_on_connect == "spark_connect":
            (tmp / "replace_where").write_text("order_id BETWEEN 2000 AND 2999")
        assert clear("replace")[day2] == "success", (log.read_text()[-6000:], task_log(benv, day2, "write"))
        assert main_rows(hook) == rows and hook.ref_snapshot_id(TABLE) != head
        if spark_on_connect == "spark_connect":  # the replacement is the cleared run's write, in the ledger
            writes = [r for r in hook.governance.read("ledger", operation="wap_write") if r["run_id"] == day2]
            replaced = [json.loads(r["metrics"]).get("replaced_rows") for r in writes if r["status"] == "succeeded"]
            assert 5 in replaced, writes
        else:  # stamped on the removal's snapshot
            removal = [s for s in hook.ref_chain(TABLE) if s.summary.get("airflow.wap-replaces")]
            assert removal and removal[-1].summary["airflow.run-id"] == day2
        events = asset_events(benv)
        # the publish task alone, skip: skipped, no second event
        assert clear("skip", "-t", "publish")[day2] == "success"
        assert task_states(benv, day2)["publish"] == "skipped" and asset_events(benv) == events
    finally:
        stop_group(scheduler)
        stop_group(api)
        for name in ("on_rerun", "on_conflict", "replace_where"):
            (tmp / name).unlink(missing_ok=True)
        hook.catalog.engine.dispose()
        _hook(env)  # the module's SQLite lake again
