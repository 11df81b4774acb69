"""Beyond one machine: the provider's jobs on a Spark standalone cluster (one master, two workers).

The cluster runs on 127.0.0.1 from the runtime venv's ``spark-class``; the lake is Apache
Iceberg's REST catalog server with an ``s3://`` warehouse on SeaweedFS, so executors reach the
tables only through the catalog and object storage. Jobs are submitted in client deploy mode
(the driver is the Airflow worker's spark-submit; executors on the two workers):

* a user application, WAP write, WAP audit, fast-forward publish and a cherry-pick publish;
* a compaction during which the worker running its tasks is killed (SIGKILL, with its
  executor): Spark reschedules the tasks on the other worker; the commit is checked through
  the catalog (a ``replace`` snapshot with every row, or, had the job failed, ``main`` unchanged);
* an erasure (logical phase, then purge) with a worker killed during the purge, checked the
  same way: the purge is either verified, or it failed and ``main`` is the logical phase's.

Cluster deploy mode: Spark standalone refuses Python applications in cluster deploy mode
(``SparkException: Cluster deploy mode is currently not supported for python applications on
standalone clusters``). The provider refuses that combination before starting spark-submit,
with the reason and the fix (unmarked tests at the end, no JVM), and ships everything a
cluster-mode driver on YARN or Kubernetes needs with the submission (spec, log4j config).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.hooks.spark import LOG4J_CONFIG, IcebergSparkHook
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.maintenance import IcebergRewriteDataFilesOperator
from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from tests.support.erasure import SALT, add_requests, append_people, create_people_table, person, rows_of
from tests.support.lake import append_batches, create_orders_table, fake_context
from tests.support.servers import (
    REST_FIXTURE_PORTS,
    iceberg_rest_fixture,
    rest_fixture_conn_json,
    seaweed,
)
from tests.support.wap import commit_to_branch, record_audit

ROOT = Path(__file__).resolve().parents[2]
APPEND = ROOT / "example_dags" / "jobs" / "append_orders.py"
#: Cluster ports (master, master UI, two worker UIs, two worker RPC ports): after the REST fixture's.
CLUSTER_PORTS = range(REST_FIXTURE_PORTS.stop, REST_FIXTURE_PORTS.stop + 100)
ON_CLUSTER = {
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.executor.memory": "512m",
    "spark.task.maxFailures": "4",
    "spark.sql.shuffle.partitions": "4",  # small tables on two one-core workers
}
SUBJECTS = {"C-1": person(3), "C-2": person(11)}


# ------------------------------------------------------------------ the cluster
def _ports(count: int) -> list[int]:
    import socket

    out = []
    for port in CLUSTER_PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        out.append(port)
        if len(out) == count:
            return out
    raise RuntimeError(f"not enough free ports in {CLUSTER_PORTS}")


def _start(args: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
    with log.open("w") as fh:
        return subprocess.Popen(
            ["spark-class", *args], stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def _wait_for(log: Path, needle: str, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if needle in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{needle!r} not seen in {log}:\n{log.read_text(errors='replace')[-3000:]}")


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Stop a master or worker and everything in its process group (a worker's executors)."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    else:  # the worker is gone; its executors may still run in its group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@dataclass
class Cluster:
    root: Path
    master_port: int
    ui_ports: list[int]
    master: subprocess.Popen
    workers: dict[str, subprocess.Popen] = field(default_factory=dict)
    kills: list[dict[str, Any]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def work_dir(self, name: str) -> Path:
        return self.root / f"work-{name}"

    def start_worker(self, name: str, ui_port: int) -> None:
        log = self.root / f"{name}-{len(self.kills)}.log"
        proc = _start(
            [
                "org.apache.spark.deploy.worker.Worker",
                self.url,
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "1g",
                "--webui-port",
                str(ui_port),
                "--work-dir",
                str(self.work_dir(name)),
            ],
            log,
        )
        self.workers[name] = proc
        _wait_for(log, "Successfully registered with master", proc)

    def executor_logs(self, name: str) -> list[Path]:
        return sorted(self.work_dir(name).glob("app-*/*/stderr"))

    def apps(self) -> set[str]:
        return {p.name for name in self.workers for p in self.work_dir(name).glob("app-*")}

    def kill_when_running_tasks(self, apps_before: set[str], stop: threading.Event, what: str) -> None:
        """SIGKILL the first worker whose executor of a new application runs a task (with the executor)."""
        while not stop.is_set():
            for name, proc in self.workers.items():
                for log in self.executor_logs(name):
                    if log.parent.parent.name in apps_before:
                        continue
                    if "Running task" in log.read_text(errors="replace"):
                        _stop(proc, signal.SIGKILL)
                        self.kills.append({"what": what, "worker": name, "app": log.parent.parent.name})
                        return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    master_port, master_ui, ui_a, ui_b = _ports(4)
    master = _start(
        [
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(master_port),
            "--webui-port",
            str(master_ui),
        ],
        root / "master.log",
    )
    c = Cluster(root, master_port, [ui_a, ui_b], master)
    try:
        _wait_for(root / "master.log", "I have been elected leader", master)
        c.start_worker("a", ui_a)
        c.start_worker("b", ui_b)
        yield c
    finally:
        for proc in [*c.workers.values(), master]:
            _stop(proc)


@dataclass
class ClusterLake:
    hook: IcebergCatalogHook
    ns: str
    rows: int = 0

    @property
    def orders(self) -> str:
        return f"{self.ns}.orders"


@pytest.fixture(scope="module")
def lake_on_cluster(cluster):
    """REST catalog (Iceberg's RESTCatalogServer) + s3:// warehouse; ``spark_cluster`` connection."""
    import uuid

    # the default configuration: spark_jars lists the runtime jars only; the provider adds the S3 jars
    # (S3FileIO's AWS bundle, S3A) from beside the Iceberg runtime jar and ships them with --jars
    seaweed()
    conn = json.loads(rest_fixture_conn_json(iceberg_rest_fixture()))
    suffix = uuid.uuid4().hex[:8]
    conn["extra"]["governance_namespace"] = f"gov{suffix}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
        mp.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps({"conn_type": "spark", "host": cluster.url}))
        mp.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": SALT}))
        hook = IcebergCatalogHook()
        lake = ClusterLake(hook, f"c{suffix}")
        hook.ensure_namespace(lake.ns)
        create_orders_table(hook, lake.orders, partition_by=())
        append_batches(hook, lake.orders, 8, rows=500)  # 8 small files: compaction work
        lake.rows = 4000
        yield lake


def on_cluster(**kwargs: Any) -> dict[str, Any]:
    return {"spark_conn_id": "spark_cluster", "spark_conf": ON_CLUSTER, **kwargs}


def _run_with_worker_kill(cluster: Cluster, what: str, fn: Any) -> tuple[Any, BaseException | None]:
    apps_before, stop = cluster.apps(), threading.Event()
    killer = threading.Thread(target=cluster.kill_when_running_tasks, args=(apps_before, stop, what), daemon=True)
    killer.start()
    try:
        return fn(), None
    except Exception as err:  # judged by the caller through the catalog
        return None, err
    finally:
        stop.set()
        killer.join(timeout=10)


def _restart_killed(cluster: Cluster) -> None:
    for name, proc in list(cluster.workers.items()):
        if proc.poll() is not None:
            _stop(proc)
            cluster.start_worker(name, cluster.ui_ports[0 if name == "a" else 1])


# ------------------------------------------------------------------ client deploy mode
@pytest.mark.spark
@pytest.mark.cluster
@pytest.mark.rest
def test_user_app_and_wap_on_the_cluster_in_client_mode(cluster, lake_on_cluster):
    hook, t = lake_on_cluster.hook, lake_on_cluster.orders
    ctx = fake_context(dag_id="cluster_dag", run_id="cluster_run")
    apps_before = cluster.apps()
    app = IcebergSparkSubmitOperator(
        **on_cluster(
            task_id="user_app",
            table=t,
            application=str(APPEND),
            params_for_job={"rows": 2000, "ds": "2026-02-01", "seed": 50000},
            expected_operations=["append"],
        )
    ).execute(ctx)
    assert app["added_records"] == 2000
    lake_on_cluster.rows += 2000
    snap = hook.snapshot(t, snapshot_id=int(app["snapshot_id"]))
    assert snap.summary["spark.app.id"].startswith("app-")  # a standalone application, not local-*
    created = IcebergWapCreateBranchOperator(task_id="create", table=t).execute(ctx)
    branch, base = created["branch"], created["base_snapshot_id"]
    insert = (
        "INSERT INTO {table} SELECT id AS order_id, CAST(id % 97 AS STRING) AS customer_id, 'ca' AS region, "
        "CAST(id % 50 AS DOUBLE) + 1.0 AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts "
        "FROM range(90000, 90300)"
    )
    written = IcebergWapWriteOperator(
        **on_cluster(task_id="write", table=t, branch=branch, base_snapshot_id=base, sql=[insert])
    ).execute(ctx)
    assert written["net_added_records"] == 300
    audit = IcebergWapAuditOperator(
        **on_cluster(
            task_id="audit",
            table=t,
            branch=branch,
            snapshot_id=written["snapshot_id"],
            base_snapshot_id=base,
            column_mapping={"order_id": {"unique_check": {"equal_to": 0}}},
        )
    ).execute(ctx)
    assert audit["passed"] is True
    published = IcebergWapPublishOperator(
        task_id="publish", table=t, branch=branch, audit=audit, drop_branch=True
    ).execute(ctx)
    assert published["method"] == "fast_forward" and str(hook.ref_snapshot_id(t)) == written["snapshot_id"]
    lake_on_cluster.rows += 300
    # cherry-pick: main moved after the branch was cut
    for name in ("k1", "k2"):
        IcebergWapCreateBranchOperator(task_id="create", table=t, branch=name).execute(ctx)
    head1 = commit_to_branch(hook, t, "k1", 70000, 4)
    head2 = commit_to_branch(hook, t, "k2", 80000, 6)
    k1 = record_audit(hook, t, "k1", head1, event_id="k1", dag_id="cluster_dag", run_id="cluster_run")
    k2 = record_audit(hook, t, "k2", head2, event_id="k2", dag_id="cluster_dag", run_id="cluster_run")
    IcebergWapPublishOperator(task_id="p1", table=t, branch="k1", audit=k1).execute(ctx)
    picked = IcebergWapPublishOperator(
        **on_cluster(task_id="p2", table=t, branch="k2", audit=k2, on_conflict="cherrypick")
    ).execute(ctx)
    assert picked["method"] == "cherrypick"
    lake_on_cluster.rows += 10
    assert hook.load_table(t).scan().to_arrow().num_rows == lake_on_cluster.rows
    # four applications, each with executors on both workers
    new_apps = cluster.apps() - apps_before
    assert len(new_apps) == 4, new_apps
    for name in ("a", "b"):
        assert {p.parent.parent.name for p in cluster.executor_logs(name)} >= new_apps, name


@pytest.mark.spark
@pytest.mark.cluster
@pytest.mark.rest
def test_worker_killed_mid_compaction_commits_all_or_nothing(cluster, lake_on_cluster):
    hook, t = lake_on_cluster.hook, lake_on_cluster.orders
    before = hook.snapshot(t, ref="main")
    files_before = hook.health(t).data_files
    assert files_before > 1
    op = IcebergRewriteDataFilesOperator(**on_cluster(task_id="compact", table=t, min_input_files=2))
    result, err = _run_with_worker_kill(cluster, "compaction", lambda: op.execute(fake_context()))
    assert cluster.kills and cluster.kills[-1]["what"] == "compaction", "no worker was killed during the job"
    main = hook.snapshot(t, ref="main")
    if err is None:  # Spark rescheduled the lost tasks on the other worker
        assert main.operation == "replace" and main.snapshot_id != before.snapshot_id, result
        assert hook.health(t).data_files < files_before
    else:  # failed cleanly: nothing committed
        assert main.snapshot_id == before.snapshot_id, err
    assert hook.load_table(t).scan().to_arrow().num_rows == lake_on_cluster.rows
    cluster.kills[-1]["outcome"] = "retried, committed" if err is None else f"failed cleanly: {err}"
    print(f"\n[cluster] {cluster.kills[-1]}")
    _restart_killed(cluster)


@pytest.mark.spark
@pytest.mark.cluster
@pytest.mark.rest
def test_worker_killed_mid_erasure_purge_leaves_no_half_commit(cluster, lake_on_cluster):
    hook, ns = lake_on_cluster.hook, lake_on_cluster.ns
    people, requests = f"{ns}.people", f"{ns}.requests"
    create_people_table(hook, people, mode="merge-on-read")
    append_people(hook, people, 3)
    add_requests(hook, requests, SUBJECTS)
    erased = set(SUBJECTS.values())
    args = {"table": people, "subject_columns": "customer_id", "requests_table": requests}
    logical = IcebergErasureOperator(**on_cluster(task_id="logical", phase="logical", **args)).execute(fake_context())
    assert logical["verification"] == "verified" and logical["rows_deleted"] > 0
    after_logical = hook.snapshot(people, ref="main")
    visible = rows_of(hook, people)
    assert not erased & {r["customer_id"] for r in visible}
    op = IcebergErasureOperator(**on_cluster(task_id="purge", phase="purge", **args))
    result, err = _run_with_worker_kill(cluster, "erasure purge", lambda: op.execute(fake_context()))
    assert cluster.kills and cluster.kills[-1]["what"] == "erasure purge", "no worker was killed during the job"
    statuses = {r["status"] for r in rows_of(hook, requests)}
    if err is None:  # retried: verified and recorded
        assert result["verification"] == "verified", result
        assert statuses == {"redacted"}  # erased, then redacted (the default)
    else:  # failed: the requests stay logically erased, the table reads as after the logical phase
        assert statuses == {"logically_erased"}, err
        assert hook.snapshot(people, ref="main").snapshot_id in {
            after_logical.snapshot_id,
            *(s.snapshot_id for s in hook.list_snapshots(people)),
        }
    assert sorted(map(str, rows_of(hook, people))) == sorted(map(str, visible))  # no row lost or resurrected
    cluster.kills[-1]["outcome"] = "retried, verified" if err is None else f"failed cleanly: {err}"
    print(f"\n[cluster] {cluster.kills[-1]}")
    _restart_killed(cluster)


# ------------------------------------------------------------------ cluster deploy mode (no JVM)
def _standalone(monkeypatch: pytest.MonkeyPatch, deploy_mode: str | None) -> None:
    extra = {"deploy-mode": deploy_mode} if deploy_mode else {}
    conn = {"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_STANDALONE", json.dumps(conn))


def test_standalone_cluster_mode_python_job_is_refused_before_spark_submit(lake, monkeypatch):
    _standalone(monkeypatch, "cluster")
    create_orders_table(lake)
    location = lake.load_table("db.orders").metadata_location
    op = IcebergSparkSubmitOperator(
        task_id="app", table="db.orders", application=str(APPEND), spark_conn_id="spark_standalone"
    )
    with pytest.raises(IcebergConnectionError) as info:
        op.execute(fake_context())
    message = str(info.value)
    for part in ("deploy_mode='cluster'", "spark://127.0.0.1:7077", "Python applications", "deploy_mode='client'"):
        assert part in message, message
    assert "YARN or Kubernetes" in message
    assert lake.load_table("db.orders").metadata_location == location  # nothing ran


def test_log4j_config_travels_by_name_in_cluster_mode_and_by_path_in_client_mode(lake, monkeypatch):
    _standalone(monkeypatch, None)
    client = IcebergSparkHook(catalog_hook=lake, spark_conn_id="spark_standalone").plan(APPEND, spec={"x": 1})
    assert client.conf["spark.driver.extraJavaOptions"].split()[0] == f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    cluster_mode = IcebergSparkHook(catalog_hook=lake, spark_conn_id="spark_standalone", deploy_mode="cluster")
    plan = cluster_mode.plan(APPEND, spec={"x": 1})
    assert plan.conf["spark.driver.extraJavaOptions"].split()[0] == f"-Dlog4j2.configurationFile={LOG4J_CONFIG.name}"
    assert LOG4J_CONFIG.is_file()
    # the connection's deploy-mode extra counts as much as the argument
    _standalone(monkeypatch, "cluster")
    from_conn = IcebergSparkHook(catalog_hook=lake, spark_conn_id="spark_standalone").plan(APPEND, spec={"x": 1})
    assert from_conn.conf["spark.driver.extraJavaOptions"].split()[0].endswith(f"={LOG4J_CONFIG.name}")


def test_redaction_covers_rest_credentials_and_s3_key_ids(lake):
    import re

    plan = IcebergSparkHook(catalog_hook=lake).plan(APPEND, spec={"x": 1})
    regex = re.compile(plan.conf["spark.redaction.regex"])
    for key in (
        "spark.sql.catalog.prod.credential",
        "spark.sql.catalog.prod.token",
        "spark.sql.catalog.prod.s3.access-key-id",
        "spark.sql.catalog.prod.s3.secret-access-key",
        "spark.sql.catalog.prod.jdbc.password",
        "spark.hadoop.fs.s3a.access.key",
    ):
        assert regex.search(key), key
    assert not regex.search("spark.sql.catalog.prod.uri")
