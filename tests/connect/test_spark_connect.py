"""The Spark Connect execution mode end to end: one shared Connect server for the module.

The operators are the same as in the spark-submit tests; only the ``spark_conn_id`` connection is
a ``spark_connect`` one. Covered: WAP write / audit / publish with cherry-pick, a user
application, maintenance (expire, orphan listing), an erasure (logical phase), the secret
channel (catalog password and salt in no plan, no server log, no other session), a killed task
(server keeps serving, nothing half-committed), a server restart (the next task reconnects) and
a server that is down (clear error naming the connection).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_iceberg_provider.exceptions import IcebergSparkJobError
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook
from airflow_iceberg_provider.hooks.spark_connect import session_conf
from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.servers import free_ports
from tests.support.task_state import child_env

pytestmark = [pytest.mark.spark, pytest.mark.connect]

ROOT = Path(__file__).resolve().parents[2]
from scripts import connect_server  # noqa: E402

PORT = 19811
CONN = "spark_connect_test"
T = "db.orders"
CHECKS = {
    "column_mapping": {"amount": {"min": {"geq_to": 0}}, "order_id": {"unique_check": {"equal_to": 0}}},
    "table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    if not os.environ.get("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS"):
        pytest.skip("source scripts/env.sh first (Spark jars)")
    workdir = tmp_path_factory.mktemp("connect")
    srv = connect_server.start(PORT, workdir=workdir, die_with_parent=True)
    old = os.environ.get(f"AIRFLOW_CONN_{CONN.upper()}")
    os.environ[f"AIRFLOW_CONN_{CONN.upper()}"] = srv.conn_json(CONN, timeout=600)
    holder = {"server": srv}
    yield holder
    connect_server.stop(holder["server"])
    if old is None:
        os.environ.pop(f"AIRFLOW_CONN_{CONN.upper()}", None)
    else:
        os.environ[f"AIRFLOW_CONN_{CONN.upper()}"] = old


@pytest.fixture(scope="module")
def orders(module_lake, server):
    create_orders_table(module_lake, T, properties={"write.wap.enabled": "true"}).append(orders_batch(0, 50))
    return module_lake


def test_connection_decides_the_mode_and_keeps_server_conf_off_the_session(server):
    hook = IcebergSparkHook(spark_conn_id=CONN)
    assert hook.execution_mode == "spark_connect"
    assert IcebergSparkHook(spark_conn_id="spark_default").execution_mode == "spark_submit"
    settable, server_only = session_conf(
        {
            "spark.sql.catalog.x.uri": "u",
            "spark.sql.extensions": "e",
            "spark.pyspark.python": "p",
            "spark.wap.branch": "b",
        }
    )
    assert settable == {"spark.sql.catalog.x.uri": "u", "spark.wap.branch": "b"}
    assert server_only == ["spark.pyspark.python", "spark.sql.extensions"]


def test_wap_write_audit_publish_and_cherry_pick_through_connect(orders):
    hook = orders
    ctx = fake_context(dag_id="connect_wap", run_id="run_1")
    main_before = hook.ref_snapshot_id(T)
    branch = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)["branch"]
    t0 = time.monotonic()
    written = IcebergWapWriteOperator(
        task_id="write",
        table=T,
        branch=branch,
        spark_conn_id=CONN,
        application=str(ROOT / "example_dags" / "jobs" / "append_orders.py"),
        params_for_job={"rows": 100, "seed": 5000, "ds": "2026-01-03"},
        expected_operations=["append"],
    ).execute(ctx)
    write_s = time.monotonic() - t0
    assert written["added_records"] == 100 and hook.ref_snapshot_id(T) == main_before
    audit = IcebergWapAuditOperator(
        task_id="audit", table=T, branch=branch, spark_conn_id=CONN, incremental_min_rows=0, **CHECKS
    ).execute(ctx)
    assert audit["passed"] is True and audit["checks"] == 3
    # incremental under Connect too: a branch that appended to the audited snapshot reuses its
    # recorded values and reads the appended rows only (the appended files from the entries table)
    hook.set_ref(hook.load_table(T), "inc", audit["snapshot_id"], ref_type="branch")
    hook.load_table(T).append(orders_batch(7000, 5), branch="inc")
    inc = IcebergWapAuditOperator(
        task_id="audit_inc",
        table=T,
        branch="inc",
        base_snapshot_id=audit["snapshot_id"],
        spark_conn_id=CONN,
        incremental_min_rows=0,
        **CHECKS,
    ).execute(ctx)
    assert inc["passed"] is True and inc["base_snapshot_id"] == audit["snapshot_id"]
    assert inc["incremental_checks"] == 3 and inc["appended_read_by"] in ("driver", "spark"), inc
    recorded = hook.governance.read("audit_results", event_id=audit["job_run_id"])
    assert len(recorded) == 3 and all(r["passed"] for r in recorded)
    # main moves meanwhile: the publish replays the branch's append on top (cherry-pick job)
    hook.load_table(T).append(orders_batch(9000, 5))
    moved = hook.ref_snapshot_id(T)
    out = IcebergWapPublishOperator(
        task_id="publish",
        table=T,
        branch=branch,
        audit=audit,
        on_conflict="cherrypick",
        spark_conn_id=CONN,
    ).execute(ctx)
    assert out["method"] == "cherrypick"
    head = hook.ref_snapshot_id(T)
    assert head != moved and hook.is_ancestor(hook.load_table(T), moved, head)
    ids = hook.load_table(T).scan().to_arrow().column("order_id").to_pylist()
    assert len(ids) == 50 + 100 + 5 and len(set(ids)) == len(ids)
    print(f"connect wap write {write_s:.1f}s")


def test_maintenance_expire_through_connect(orders):
    hook = orders
    create_orders_table(hook, "db.exp", partition_by=())
    for i in range(4):
        hook.load_table("db.exp").append(orders_batch(i * 10, 10))
    hook.load_table("db.exp").overwrite(orders_batch(1000, 10))
    before = len(hook.list_snapshots("db.exp"))
    out = IcebergExpireSnapshotsOperator(
        task_id="expire", table="db.exp", older_than="0s", older_than_floor="0s", retain_last=1, spark_conn_id=CONN
    ).execute(fake_context())
    assert len(hook.list_snapshots("db.exp")) == 1 < before
    assert '"deleted_data_files_count": 4' in json.dumps(out, default=str, sort_keys=True)


def _expire_small(hook, table: str, task_id: str) -> dict:
    """A small maintenance task on a fresh table (two appends, one expired snapshot)."""
    create_orders_table(hook, table, partition_by=())
    for i in range(2):
        hook.load_table(table).append(orders_batch(i * 10, 10))
    out = IcebergExpireSnapshotsOperator(
        task_id=task_id, table=table, older_than="0s", older_than_floor="0s", retain_last=1, spark_conn_id=CONN
    ).execute(fake_context(task_id=task_id))
    assert len(hook.list_snapshots(table)) == 1
    return out


def _server_log(server) -> str:
    return server["server"].log.read_text(errors="replace")


def test_secrets_reach_no_plan_no_server_log_and_no_other_session(orders, server, tmp_path):
    """The catalog conf (a secret stand-in) and the salt: the job works, the server log has neither,
    and a second Connect session on the same server sees none of the first one's conf."""
    secret = "s3cr3t-Connect-VALUE-8c1e"
    hook = IcebergSparkHook(spark_conn_id=CONN, catalog_hook=orders)
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from iceberg_job_runtime import run_job\n"
        "def fn(ctx):\n"
        "    ctx.spark.conf.get('spark.sql.catalog.' + ctx.catalog + '.secret-probe')\n"
        "    return {'rows': ctx.spark.sql('SELECT count(*) FROM ' + ctx.table()).collect()[0][0]}\n"
        "run_job(fn)\n"
    )
    plan = hook.plan(probe, spec={"job": "probe", "operation": "probe", "table": T, "job_run_id": "probe-1"})
    plan.secret_conf[f"spark.sql.catalog.{orders.catalog_name}.secret-probe"] = secret
    hook.submit(plan)
    (row,) = orders.governance.read("ledger", event_id="probe-1")
    assert json.loads(row["metrics"])["rows"] > 0
    assert secret not in _server_log(server)
    other = subprocess.run(
        [
            os.environ["AIRFLOW__ICEBERG_PROVIDER__PYSPARK_PYTHON"],
            "-c",
            "import os; os.environ['SPARK_CONNECT_MODE_ENABLED']='1'\n"
            "from pyspark.sql.connect.session import SparkSession\n"
            f"s = SparkSession.builder.remote('sc://127.0.0.1:{PORT}').getOrCreate()\n"
            "print(sorted(k for k in s.sql('SET').toPandas()['key'] if 'catalog' in k))\n",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert other.returncode == 0, other.stderr[-2000:]
    assert secret not in other.stdout and "secret-probe" not in other.stdout


def test_killed_task_interrupts_its_session_and_the_server_keeps_serving(orders, server, tmp_path):
    hook = IcebergSparkHook(spark_conn_id=CONN, catalog_hook=orders)
    slow = tmp_path / "slow.py"
    slow.write_text(
        "from iceberg_job_runtime import run_job\n"
        "def fn(ctx):\n"
        "    ctx.spark.sql('INSERT INTO ' + ctx.table() + ' SELECT id, CAST(id AS STRING), \"ca\", 1.0, "
        'TIMESTAMP "2026-01-05 00:00:00" FROM range(0, 2000000000)\').collect()\n'
        "run_job(fn)\n"
    )
    before = orders.ref_snapshot_id(T)
    plan = hook.plan(slow, spec={"job": "slow", "operation": "slow", "table": T})
    killer = threading.Timer(25.0, hook.on_kill)
    killer.start()
    t0 = time.monotonic()
    with pytest.raises(IcebergSparkJobError, match="killed with the task"):
        hook.submit(plan)
    killer.cancel()
    assert time.monotonic() - t0 < 120
    assert orders.ref_snapshot_id(T) == before, "a killed job committed"
    # the same server answers the next task at once
    _expire_small(orders, "db.after_kill", "expire_after_kill")


def test_server_down_names_the_connection_then_restart_reconnects(orders, server):
    connect_server.stop(server["server"])
    hook = IcebergSparkHook(spark_conn_id=CONN, catalog_hook=orders)
    with pytest.raises(IcebergSparkJobError, match=rf"connection '{CONN}' at 127.0.0.1:{PORT} is not reachable"):
        hook.run_job("maintenance", {"job": "maintenance", "table": "db.exp", "actions": []})
    workdir = server["server"].workdir
    server["server"] = connect_server.start(PORT, workdir=workdir, die_with_parent=True)
    _expire_small(orders, "db.after_restart", "expire_after_restart")


def test_erasure_logical_then_purge_through_connect(orders, server):
    """Both phases of an erasure as Connect clients; the salt is in no server log line."""
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
    from tests.support.erasure import SALT, add_requests, create_people_table, people_batch, person, strings_on_disk

    hook = orders
    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    os.environ["AIRFLOW_CONN_ERASURE_SALT"] = json.dumps({"conn_type": "generic", "password": SALT})
    try:
        table, requests = "db.people", "db.requests_connect"
        create_people_table(hook, table, partition_by=())
        hook.load_table(table).append(people_batch(0, 40))
        hook.load_table(table).append(people_batch(40, 40))
        subject = person(7)
        add_requests(hook, requests, {"C-1": subject}, received_days_ago=1)
        args = {"table": table, "subject_columns": "customer_id", "requests_table": requests, "spark_conn_id": CONN}
        logical = IcebergErasureOperator(task_id="c_logical", phase="logical", **args).execute(fake_context())
        assert logical["verification"] == "verified" and logical["rows_deleted"] > 0, logical
        assert subject not in {r["customer_id"] for r in hook.load_table(table).scan().to_arrow().to_pylist()}
        purge = IcebergErasureOperator(task_id="c_purge", phase="purge", **args).execute(fake_context())
        assert purge["verification"] == "verified", purge
        assert subject not in strings_on_disk(hook, table)
        assert person(1) in strings_on_disk(hook, table)
        log = _server_log(server)
        assert SALT not in log and subject not in log
    finally:
        if old is None:
            os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
        else:
            os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


@pytest.mark.cluster
def test_connect_server_on_a_standalone_cluster_runs_a_job(orders, tmp_path):
    """A second Connect server whose executors run on a standalone master + worker (127.0.0.1)."""
    spark_class = Path(os.environ["SPARK_HOME"]) / "bin" / "spark-class"
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    logs, procs, files = tmp_path / "logs", [], []
    logs.mkdir()

    def start(args: list[str], name: str) -> subprocess.Popen:
        out = open(logs / f"{name}.log", "wb")  # noqa: SIM115 - closed in the finally below
        files.append(out)
        proc = subprocess.Popen([str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env)
        procs.append(proc)
        return proc

    def wait_for(name: str, needle: str, timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in (logs / f"{name}.log").read_text(errors="replace"):
                return
            time.sleep(1)
        raise AssertionError(f"{name} not ready: {(logs / f'{name}.log').read_text(errors='replace')[-2000:]}")

    master_port, master_ui, worker_ui, connect_port = free_ports(4)
    srv = None
    try:
        start(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(master_port),
                "--webui-port",
                str(master_ui),
            ],
            "master",
        )
        wait_for("master", "I have been elected leader")
        start(
            [
                "org.apache.spark.deploy.worker.Worker",
                f"spark://127.0.0.1:{master_port}",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(worker_ui),
                "--work-dir",
                str(tmp_path / "work"),
            ],
            "worker",
        )
        wait_for("worker", "Successfully registered with master")
        srv = connect_server.start(
            connect_port,
            workdir=tmp_path / "connect",
            master=f"spark://127.0.0.1:{master_port}",
            extra_conf={"spark.executor.memory": "512m", "spark.cores.max": "1"},
            die_with_parent=True,
        )
        os.environ["AIRFLOW_CONN_SPARK_CONNECT_CLUSTER"] = srv.conn_json("spark_connect_cluster")
        create_orders_table(orders, "db.on_cluster", partition_by=())
        for i in range(3):
            orders.load_table("db.on_cluster").append(orders_batch(i * 10, 10))
        out = IcebergExpireSnapshotsOperator(
            task_id="expire_cluster",
            table="db.on_cluster",
            older_than="0s",
            older_than_floor="0s",
            retain_last=1,
            spark_conn_id="spark_connect_cluster",
        ).execute(fake_context(task_id="expire_cluster"))
        assert len(orders.list_snapshots("db.on_cluster")) == 1
        assert '"deleted_manifest_lists_count": 2' in json.dumps(out, default=str, sort_keys=True)
        assert list((tmp_path / "work").glob("app-*")), "no executor ran on the worker"
    finally:
        os.environ.pop("AIRFLOW_CONN_SPARK_CONNECT_CLUSTER", None)
        if srv is not None:
            connect_server.stop(srv)
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        for f in files:
            f.close()


_DURABLE_TASK = """
import sys

from tests.support.task_state import file_store_context

from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator


def context(store):
    return file_store_context(store, "durable_write")


def operator(conn):
    return IcebergWapWriteOperator(
        task_id="durable_write",
        table="db.durable_c",
        branch="b",
        spark_conn_id=conn,
        sql="INSERT INTO {table} SELECT id, CAST(id AS STRING), 'ca', 1.0, TIMESTAMP '2026-01-05 00:00:00' "
        "FROM range(5000, 5100)",
    )


if __name__ == "__main__":
    operator(sys.argv[2]).execute(context(sys.argv[1]))
"""


def test_durable_write_outlives_its_killed_task_process_and_the_retry_takes_its_one_commit(orders, server, tmp_path):
    """The durable path in Connect mode: the runner is the detached job; the task process is SIGKILLed."""
    import importlib.util
    import signal

    from airflow_iceberg_provider.hooks import _process
    from airflow_iceberg_provider.rules.durable_jobs import JobRecord, Liveness

    hook, table = orders, "db.durable_c"
    create_orders_table(hook, table).append(orders_batch(0, 10))
    base = hook.ref_snapshot_id(table)
    hook.create_branch(table, "b", snapshot_id=base)
    script, store = tmp_path / "durable_task.py", tmp_path / "state.json"
    script.write_text(_DURABLE_TASK)
    task = subprocess.Popen([sys.executable, str(script), str(store), CONN], env=child_env())
    deadline = time.monotonic() + 120
    while not store.exists() and time.monotonic() < deadline and task.poll() is None:
        time.sleep(0.1)
    assert store.exists(), "the task recorded no job"
    task.send_signal(signal.SIGKILL)  # the task process only, as the OOM killer would
    task.wait()
    record = JobRecord.from_json(json.loads(store.read_text())["iceberg_spark_job"])
    assert record is not None and record.mode == "spark_connect"
    seen = _process.liveness(record)  # the runner did not die with its task (it may have finished already)
    assert seen is Liveness.ALIVE or hook.governance.read("ledger", event_id=record.job_run_id)
    # the retry comes after the job finished: it must take the committed result, not start a job
    deadline = time.monotonic() + 300
    while _process.liveness(record) is Liveness.ALIVE and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _process.liveness(record) is Liveness.GONE
    assert [r["status"] for r in hook.governance.read("ledger", event_id=record.job_run_id)] == ["succeeded"]

    spec = importlib.util.spec_from_file_location("durable_task", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = module.operator(CONN).execute(module.context(store))  # the retry, in this process

    assert out["job_run_id"] == record.job_run_id  # its result, no second job
    snaps = [s for s in hook.load_table(table).snapshots() if s.snapshot_id != base]
    assert [str(s.snapshot_id) for s in snaps] == [out["snapshot_id"]], snaps  # exactly one commit
    rows = [r for r in hook.governance.read("ledger", table_name=table) if r["operation"] == "wap_write"]
    assert [r["event_id"] for r in rows] == [record.job_run_id]
    assert not Path(record.workdir).exists()  # the finished job's directory (secrets, log) is gone
