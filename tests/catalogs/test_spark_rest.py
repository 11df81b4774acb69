"""Spark + REST catalogs + an ``s3://`` warehouse, end to end, on two independent REST servers.

Every provider job family runs through a REST catalog whose tables live in object storage
(SeaweedFS's S3 API). The families are shared between two independent REST servers (each job
costs a JVM start; running every family on both doubled the tier's time for no new path):

* ``seaweedfs``: SeaweedFS's own Iceberg REST catalog (``weed mini``), OAuth2 client
  credentials checked against its S3 key pair, which vends the S3 credentials to S3FileIO:
  the maintenance plan (compaction + manifest rewrite + expiry + orphan removal, for real, in
  one job: the planted orphan goes, no live file does, objects listed through the S3 API); the
  erasure of the table catalog-wide discovery finds (its declared subject column), logical
  phase then purge with the requests redacted (afterwards no object of the table or of the
  requests table holds a subject);
  a user application through ``IcebergSparkSubmitOperator``, read back through pyiceberg;
* ``iceberg-fixture``: Apache Iceberg's ``RESTCatalogServer`` (``iceberg-open-api``
  test-fixtures, JDBC-backed), OAuth2 client-credentials flow, S3FileIO to the same SeaweedFS:
  WAP (branch -> Spark write -> Spark audit -> fast-forward publish -> rollback) and a
  cherry-pick publish when ``main`` moved (a Spark job); ``tests/spark/test_cluster.py`` runs the
  user application, WAP, compaction and erasure over this server on a standalone cluster.

Spark (the official ``iceberg-spark-runtime`` with its shaded HttpClient, ``iceberg-aws-bundle``
for S3FileIO, ``hadoop-aws`` for raw reads) and pyiceberg name the same tables through one
Airflow connection. On each server, no credential (S3 secret key, OAuth2 client secret) is in
any spark-submit argv, the Spark event log, the task output, XCom or the ledger.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.erasure_discovery import IcebergErasureDiscoveryOperator
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from airflow_iceberg_provider.operators.refs import IcebergRollbackOperator
from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from tests.support.erasure import SALT, add_requests, append_people, create_people_table, person, rows_of
from tests.support.lake import append_batches, create_orders_table, fake_context, orders_batch
from tests.support.s3 import backdate, bucket_objects, s3fs
from tests.support.servers import iceberg_rest_fixture, rest_conn_json, rest_fixture_conn_json, seaweed
from tests.support.wap import audit_of, commit_to_branch, record_audit

pytestmark = [pytest.mark.rest, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
APPEND = ROOT / "example_dags" / "jobs" / "append_orders.py"
SUBJECTS = {"R-1": person(0), "R-2": person(7)}
ERASED = set(SUBJECTS.values())
CHECKS = {
    "column_mapping": {"amount": {"null_check": {"equal_to": 0}}, "order_id": {"unique_check": {"equal_to": 0}}},
    "table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
}
#: spark-submits per server (seaweedfs: maintenance, erasure logical + purge, user application;
#: iceberg-fixture: WAP write + audit, cherry-pick) and a ledger operation each server's jobs write
SPARK_SUBMITS = {"seaweedfs": 4, "iceberg-fixture": 3}
LEDGER_CONTROL = {"seaweedfs": "remove_orphan_files", "iceberg-fixture": "wap_publish"}
ON_SEAWEEDFS = pytest.mark.server("seaweedfs")
ON_FIXTURE = pytest.mark.server("iceberg-fixture")


@dataclass
class RestLake:
    """One REST server's lake: the hook, its tables, where its objects are, what it collected."""

    server: str
    hook: IcebergCatalogHook
    ns: str
    s3: Any
    secrets: dict[str, str]
    argv_log: Path
    events: Path
    rows: int = 60
    logs: list[str] = field(default_factory=list)
    xcom: list[Any] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def orders(self) -> str:
        return f"{self.ns}.orders"

    @property
    def people(self) -> str:
        return f"{self.ns}.people"

    @property
    def requests(self) -> str:
        return f"{self.ns}.requests"

    def timed(self, name: str, fn: Any) -> Any:
        t0 = time.monotonic()
        out = fn()
        self.timings[name] = time.monotonic() - t0
        return out

    def location(self, table: str) -> str:
        """``bucket/key`` prefix of a table's objects."""
        return self.hook.load_table(table).location().split("://", 1)[1]

    def objects(self, table: str) -> dict[str, Any]:
        return bucket_objects(self.s3, self.location(table) + "/")


@pytest.fixture(scope="module", params=["seaweedfs", "iceberg-fixture"])
def lake(request, tmp_path_factory):
    """A REST catalog + ``s3://`` warehouse, event log on, a spark-submit argv shim."""
    # the default configuration: spark_jars lists the runtime jars only; the provider adds the S3 jars
    # (S3FileIO's AWS bundle, S3A) from beside the Iceberg runtime jar, as a deployment would get them
    s3 = seaweed()
    if request.param == "seaweedfs":
        conn = json.loads(rest_conn_json(s3))
        secrets = {"S3 secret key (also the OAuth2 client secret)": s3.secret_key}
    else:
        fixture = iceberg_rest_fixture()
        conn = json.loads(rest_fixture_conn_json(fixture))
        secrets = {"S3 secret key": s3.secret_key, "OAuth2 client secret": fixture.client_secret}
    suffix = uuid.uuid4().hex[:8]
    conn["extra"]["governance_namespace"] = f"gov{suffix}"
    tmp = tmp_path_factory.mktemp(f"rest-{request.param}")
    real = subprocess.run(["bash", "-c", "command -v spark-submit"], capture_output=True, text=True).stdout.strip()
    assert real, "spark-submit must be on PATH (source scripts/env.sh)"
    shim, argv_log, events = tmp / "shim", tmp / "argv.log", tmp / "events"
    for d in (shim, events):
        d.mkdir()
    (shim / "spark-submit").write_text(
        f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" >> {argv_log}\necho "----" >> {argv_log}\nexec {real} "$@"\n'
    )
    (shim / "spark-submit").chmod(0o755)
    # the event log through the provider's Spark conf defaults, not a spark-defaults.conf: a non-empty Spark
    # conf directory is on the JVM's class path and would make the drivers refuse the class-data-sharing archive
    defaults = json.loads(os.environ.get("AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS") or "{}")
    defaults.update({"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{events}"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
        mp.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": SALT}))
        mp.setenv("PATH", f"{shim}:{os.environ['PATH']}")
        mp.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS", json.dumps(defaults))
        hook = IcebergCatalogHook()
        state = RestLake(request.param, hook, f"r{suffix}", s3, secrets, argv_log, events)
        hook.ensure_namespace(state.ns)
        create_orders_table(hook, state.orders, partition_by=())
        append_batches(hook, state.orders, 6, rows=10)  # 60 rows in 6 small files: work for compaction
        create_people_table(hook, state.people, mode="merge-on-read")
        append_people(hook, state.people, 2)
        add_requests(hook, state.requests, SUBJECTS)
        yield state
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in state.timings.items())
    print(f"\n[spark-rest {request.param}] timings: {timings}")


@pytest.fixture(autouse=True)
def _collect_logs(request, lake, capfd, caplog):
    only = request.node.get_closest_marker("server")
    if only is not None and lake.server not in only.args:
        pytest.skip(f"this job family runs on the {only.args[0]} REST server of the module")
    caplog.set_level("DEBUG")
    yield
    out, err = capfd.readouterr()
    lake.logs.append(out + err + caplog.text)


def live_files(hook: IcebergCatalogHook, table: str) -> set[str]:
    """``bucket/key`` of every file the table's metadata reaches (all refs, manifests, metadata)."""
    tbl = hook.load_table(table)
    out = {tbl.metadata_location, *(e.metadata_file for e in tbl.metadata.metadata_log)}
    for snap in tbl.metadata.snapshots:
        out.add(snap.manifest_list)
        out |= {m.manifest_path for m in snap.manifests(tbl.io)}
    for ref in tbl.metadata.refs.values():
        out |= {t.file.file_path for t in tbl.scan(snapshot_id=ref.snapshot_id).plan_files()}
    return {p.split("://", 1)[1] for p in out}


@ON_SEAWEEDFS
def test_maintenance_plan_removes_the_orphan_and_no_live_file(lake):
    import pyarrow.parquet as pq

    hook, fs_, t = lake.hook, s3fs(lake.s3), lake.orders
    data_dir = f"{lake.location(t)}/data"
    pq.write_table(orders_batch(900, 3), f"{data_dir}/orphan-old.parquet", filesystem=fs_)  # a failed job's file
    backdate(lake.s3, lake.location(t), days=4)  # every object, live or not, is an orphan candidate now
    snapshots_before = {s.snapshot_id for s in hook.list_snapshots(t)}
    plan = IcebergMaintenancePlanOperator(
        task_id="plan",
        table=t,
        min_input_files=2,
        max_manifests=3,
        expire_older_than="0s",
        older_than_floor="0s",
        retain_last=1,
        remove_orphans=True,
        orphan_dry_run=False,
    )
    out = lake.timed("maintenance plan", lambda: plan.execute(fake_context()))
    lake.xcom.append(out)
    assert [a["action"] for a in out["actions"]] == [
        "rewrite_data_files",
        "rewrite_manifests",
        "expire_snapshots",
        "remove_orphan_files",
    ]
    main = hook.snapshot(t, ref="main")  # verified through the REST catalog
    assert main.operation == "replace" and hook.health(t).data_files == 1
    assert not {s.snapshot_id for s in hook.list_snapshots(t)} & snapshots_before  # expired
    assert out["actions"][-1]["orphan_files_count"] == 1
    left = set(lake.objects(t))
    assert f"{data_dir}/orphan-old.parquet" not in left
    assert live_files(hook, t) <= left, "a live file was deleted"
    assert hook.load_table(t).scan().to_arrow().num_rows == lake.rows


def _record_base_values(lake: RestLake, audit_op: IcebergWapAuditOperator, base: int) -> None:
    from datetime import UTC, datetime

    values = {"amount.null_check": 0.0, "table.has_rows": float(lake.rows)}
    rows = [
        {
            "event_id": "base-audit",
            "table_name": lake.orders,
            "ref": "main",
            "snapshot_id": base,
            "check_name": c.name,
            "check_type": c.check_type,
            "column_name": c.column,
            "observed_value": values[c.name],
            "condition": c.describe(),
            "passed": True,
            "evaluated_at": datetime.now(UTC),
        }
        for c in audit_op.parse_checks()
        if c.name in values
    ]
    lake.hook.governance.append("audit_results", rows)


@ON_FIXTURE
def test_wap_write_audit_fast_forward_then_rollback(lake):
    hook, t = lake.hook, lake.orders
    ctx = fake_context(dag_id="wap_rest", run_id=f"run_{lake.server}")
    main_before = hook.ref_snapshot_id(t)
    created = IcebergWapCreateBranchOperator(task_id="create", table=t).execute(ctx)
    branch, base = created["branch"], created["base_snapshot_id"]
    insert = (
        "INSERT INTO {table} SELECT id AS order_id, CAST(id % 97 AS STRING) AS customer_id, 'ca' AS region, "
        "CAST(id % 50 AS DOUBLE) + 1.0 AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(1000, 1100)"
    )
    write = IcebergWapWriteOperator(task_id="write", table=t, branch=branch, base_snapshot_id=base, sql=[insert])
    written = lake.timed("WAP write", lambda: write.execute(ctx))
    assert written["net_added_records"] == 100 and hook.ref_snapshot_id(t) == main_before
    assert str(hook.ref_snapshot_id(t, branch)) == written["snapshot_id"]
    audit_op = IcebergWapAuditOperator(
        task_id="audit",
        table=t,
        branch=branch,
        snapshot_id=written["snapshot_id"],
        base_snapshot_id=base,
        incremental_min_rows=0,
        **CHECKS,
    )
    _record_base_values(lake, audit_op, int(base))
    audit = lake.timed("WAP audit", lambda: audit_op.execute(ctx))
    assert audit["passed"] is True and audit["checks"] == 3
    publish = IcebergWapPublishOperator(task_id="publish", table=t, branch=branch, audit=audit, drop_branch=True)
    published = lake.timed("WAP publish", lambda: publish.execute(ctx))
    assert published["method"] == "fast_forward" and str(hook.ref_snapshot_id(t)) == written["snapshot_id"]
    tbl = hook.load_table(t)
    assert tbl.scan().to_arrow().num_rows == lake.rows + 100  # Spark's files, read by pyiceberg
    assert all(p.file.file_path.startswith("s3://") for p in tbl.scan().plan_files())
    # rollback (metadata only): main back to the snapshot before the publish, compare-and-swap
    rollback = IcebergRollbackOperator(task_id="rollback", table=t, to_snapshot_id=main_before)
    rolled = lake.timed("rollback", lambda: rollback.execute(ctx))
    assert hook.ref_snapshot_id(t) == main_before
    assert hook.load_table(t).scan().to_arrow().num_rows == lake.rows
    lake.xcom += [created, written, audit, published, rolled]


@ON_FIXTURE
def test_cherry_pick_when_main_moved(lake):
    hook, t = lake.hook, lake.orders
    for name in ("c1", "c2"):
        IcebergWapCreateBranchOperator(task_id="create", table=t, branch=name).execute(fake_context())
    head1 = commit_to_branch(hook, t, "c1", 7000, 4)
    head2 = commit_to_branch(hook, t, "c2", 8000, 6)
    record_audit(hook, t, "c1", head1, event_id=f"c1-{lake.server}")
    record_audit(hook, t, "c2", head2, event_id=f"c2-{lake.server}")
    c1 = audit_of(head1, f"c1-{lake.server}")
    IcebergWapPublishOperator(task_id="p1", table=t, branch="c1", audit=c1).execute(fake_context())
    pick = IcebergWapPublishOperator(
        task_id="p2", table=t, branch="c2", audit=audit_of(head2, f"c2-{lake.server}"), on_conflict="cherrypick"
    )
    out = lake.timed("cherry-pick", lambda: pick.execute(fake_context()))
    lake.xcom.append(out)
    assert out["method"] == "cherrypick"
    main = hook.ref_snapshot_id(t)
    assert hook.is_ancestor(t, head1, main)
    assert hook.snapshot(t, snapshot_id=main).summary.get("source-snapshot-id") == str(head2)
    lake.rows += 10
    ids = hook.load_table(t).scan().to_arrow().column("order_id").to_pylist()
    assert len(ids) == lake.rows and set(range(8000, 8006)) <= set(ids)


@ON_SEAWEEDFS
def test_erasure_logical_then_purge_leaves_no_subject_in_any_object(lake):
    hook = lake.hook
    before = rows_of(hook, lake.people)
    assert ERASED <= {r["customer_id"] for r in before}  # control
    # catalog-wide: the table declares its subject column; discovery through the REST catalog finds it
    with hook.load_table(lake.people).transaction() as tx:
        tx.set_properties({"erasure.subject-columns.customer_id": "customer_id"})
    (found,) = IcebergErasureDiscoveryOperator(
        task_id="discover", subject_kind="customer_id", namespaces=[lake.ns]
    ).execute(fake_context())
    assert found == {"table": lake.people, "subject_columns": ["customer_id"], "tables_in_scope": [lake.people]}
    args = {**found, "requests_table": lake.requests}
    logical = lake.timed(
        "erasure logical",
        lambda: IcebergErasureOperator(task_id="logical", phase="logical", **args).execute(fake_context()),
    )
    assert logical["verification"] == "verified" and logical["rows_deleted"] > 0, logical
    assert {r["status"] for r in rows_of(hook, lake.requests)} == {"logically_erased"}
    purge = lake.timed(
        "erasure purge",
        lambda: IcebergErasureOperator(task_id="purge", phase="purge", redact_erased_requests=True, **args).execute(
            fake_context()
        ),
    )
    assert purge["verification"] == "verified", purge
    # the erased requests' keys are replaced by their evidence hash, and the requests table's history purged
    assert purge["redaction_verification"] == "verified", purge
    assert {r["status"] for r in rows_of(hook, lake.requests)} == {"redacted"}
    assert not {r["subject_key"] for r in rows_of(hook, lake.requests)} & ERASED
    after = rows_of(hook, lake.people)
    assert len(after) == len([r for r in before if r["customer_id"] not in ERASED])
    fs_ = s3fs(lake.s3)
    objects = lake.objects(lake.people)
    assert any(p.endswith(".parquet") for p in objects)  # control
    requests_objects = lake.objects(lake.requests)
    assert any(p.endswith(".parquet") for p in requests_objects)  # control
    for path in [*objects, *requests_objects]:  # data, delete files, manifests, metadata: through the S3 API
        with fs_.open_input_file(path) as f:
            data = f.read()
        assert not [s for s in ERASED if s.encode() in data], path
    lake.xcom += [logical, purge]


@ON_SEAWEEDFS
def test_user_application_through_spark_submit_operator(lake):
    hook, t = lake.hook, lake.orders
    op = IcebergSparkSubmitOperator(
        task_id="user_app",
        table=t,
        application=str(APPEND),
        params_for_job={"rows": 500, "ds": "2026-02-01", "seed": 20000},
        expected_operations=["append"],
    )
    result = lake.timed("user application", lambda: op.execute(fake_context()))
    lake.xcom.append(result)
    assert result["added_records"] == 500
    lake.rows += 500
    assert hook.ref_snapshot_id(t) == int(result["snapshot_id"])
    assert hook.load_table(t).scan().to_arrow().num_rows == lake.rows  # Spark's commit, read by pyiceberg


def test_no_credential_in_argv_event_log_logs_xcom_or_ledger(lake):
    argv = lake.argv_log.read_text()
    assert argv.count("----") == SPARK_SUBMITS[lake.server], argv.count("----")
    assert "--properties-file" in argv
    events = "\n".join(p.read_text(errors="replace") for p in lake.events.rglob("*") if p.is_file())
    assert events.count("SparkListenerApplicationStart") == SPARK_SUBMITS[lake.server]  # control: one event log per job
    assert "spark.sql.catalog.lakehouse.credential" in events  # control: the conf was logged, redacted
    assert "spark.sql.catalog.lakehouse.s3.secret-access-key" in events
    logs = "\n".join(lake.logs)
    assert "Spark" in logs  # control: the task output was captured
    xcom = json.dumps(lake.xcom, default=str)
    ledger = json.dumps(lake.hook.governance.read("ledger"), default=str)
    assert LEDGER_CONTROL[lake.server] in ledger  # control
    for what, secret in lake.secrets.items():
        for where, text in {"argv": argv, "event log": events, "logs": logs, "XCom": xcom, "ledger": ledger}.items():
            assert secret not in text, f"the {what} leaked into the {where} ({lake.server})"
    assert not [s for s in ERASED if s in logs]
