"""Spark on object storage, end to end: a PostgreSQL catalog + an ``s3://`` warehouse on SeaweedFS (7 jobs).

Every job family on a PostgreSQL catalog whose tables live in object storage: WAP write, audit,
cherry-pick, maintenance plan with orphan removal, erasure in two phases.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py),
started with the object-storage jars; ``AIP_TEST_SPARK_MODE=spark_submit`` runs them through
spark-submit instead (the REST tier, ``tests/catalogs/test_spark_rest.py``, and the cluster tier cover
spark-submit on S3 in every run).

One module lake: Spark's ``JdbcCatalog`` and pyiceberg's ``SqlCatalog`` on one PostgreSQL
database (``tests/support/servers.py`` starts the server), warehouse ``s3://<fresh bucket>/wh`` on
SeaweedFS's S3 API (``weed mini``). Spark uses Iceberg's own ``S3FileIO`` (what production
uses) from ``iceberg-aws-bundle``, which ``scripts/bootstrap.sh`` resolves with Maven into
``.spark-runtime/jars/s3`` (``AIP_S3_SPARK_JARS``); raw-file reads go through S3A (``hadoop-aws``)
under spark-submit and pyarrow's S3 filesystem under Spark Connect; pyiceberg uses its pyarrow
FileIO with the same connection properties. Every commit is verified through the catalog.

* maintenance plan: compaction + manifest rewrite + expiry + orphan listing (dry run) in one
  job, then orphan removal for real. Every object of the table is first made 4 days old (S3
  has no ``touch``; see ``tests.support.s3.backdate``) so every live file is an orphan *candidate*;
  one live file is referenced as ``s3a://`` (the scheme Hadoop users write) while the listing
  says ``s3://``. The listing must name exactly the planted orphan, never a live file; the real
  run deletes it, and the table still reads fully (pyiceberg here, Spark in the audit below);
* WAP: branch -> Spark SQL write -> Spark audit (incremental: the appended rows are read on the
  driver from S3 through pyarrow, the unique check by a full Spark scan) -> publish;
* cherry-pick: ``main`` moved, publish with ``on_conflict="cherrypick"`` (a Spark job);
* erasure in two phases (logical, then purge) with the purge's raw-file verification;
  afterwards every object in the bucket is read through the S3 API (not through the
  catalog): no Parquet file holds a subject value;
* the S3 secret key and the PostgreSQL password are nowhere: not in any spark-submit argv (a
  shim records them) or Spark event log (spark-submit), not in the Connect server's log
  (Connect), and in either mode not in the task output (capfd + caplog), XCom or the ledger.

Timings of each step are printed (``-s`` shows them).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.maintenance import (
    IcebergMaintenancePlanOperator,
    IcebergRemoveOrphanFilesOperator,
)
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from tests.support.erasure import SALT, add_requests, append_people, create_people_table, person, rows_of
from tests.support.lake import append_batches, create_orders_table, fake_context, orders_batch
from tests.support.s3 import backdate, bucket_objects, s3fs
from tests.support.servers import postgres, seaweed, skip_or_fail
from tests.support.wap import audit_of, commit_to_branch, record_audit

pytestmark = [pytest.mark.postgres, pytest.mark.rest, pytest.mark.spark]
JOBS = 7  # plan, orphans, WAP write, audit, cherry-pick, erasure logical, erasure purge

T, PEOPLE, REQUESTS = "db.orders", "db.people", "db.requests"
SUBJECTS = {"R-1": person(0), "R-2": person(7)}
ERASED = set(SUBJECTS.values())
INSERT = (
    "INSERT INTO {table} SELECT id AS order_id, CAST(id % 97 AS STRING) AS customer_id, 'ca' AS region, "
    "CAST(id % 50 AS DOUBLE) + 1.0 AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(1000, 1100)"
)
CHECKS = {
    "column_mapping": {"amount": {"null_check": {"equal_to": 0}}, "order_id": {"unique_check": {"equal_to": 0}}},
    "table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
}
STATE: dict = {"logs": [], "xcom": [], "timings": {}, "rows": 0}


def timed(name: str, fn):
    t0 = time.monotonic()
    out = fn()
    STATE["timings"][name] = time.monotonic() - t0
    return out


@pytest.fixture(scope="module")
def s3lake(tmp_path_factory, request, spark_on_connect):
    """PostgreSQL catalog + ``s3://`` warehouse on SeaweedFS, S3FileIO jars, event log on, a spark-submit argv shim."""
    s3_jars = os.environ.get("AIP_S3_SPARK_JARS", "")
    if not s3_jars:
        skip_or_fail("S3 jars missing (AIP_S3_SPARK_JARS empty): run scripts/bootstrap.sh")
    server, pg = seaweed(), postgres()
    bucket = f"lake{uuid.uuid4().hex[:10]}"
    s3fs(server).create_dir(bucket)  # a plain bucket: the -tableBucket one refuses plain object writes
    tmp = tmp_path_factory.mktemp("s3lake")
    conn = {
        "conn_type": "iceberg_catalog",
        "host": pg.url(pg.create_database("s3lake")),
        "login": pg.user,
        "password": pg.password,
        "extra": {
            "catalog_type": "sql",
            "catalog_name": "lakehouse",
            "warehouse": f"s3://{bucket}/wh",
            "properties": server.file_io_properties(),
        },
    }
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
    jars = os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
        mp.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": SALT}))
        mp.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", f"{jars},{s3_jars}")
        mp.setenv("PATH", f"{shim}:{os.environ['PATH']}")
        mp.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS", json.dumps(defaults))
        hook = IcebergCatalogHook()
        hook.ensure_namespace("db")
        create_orders_table(hook, T, partition_by=())
        append_batches(hook, T, 6, rows=10)  # 60 rows in 6 small files: work for compaction
        create_people_table(hook, PEOPLE, mode="merge-on-read")
        append_people(hook, PEOPLE, 2)
        add_requests(hook, REQUESTS, SUBJECTS)
        STATE.update(server=server, pg=pg, bucket=bucket, argv_log=argv_log, events=events, rows=60)
        STATE["mode"] = spark_on_connect
        if spark_on_connect == "spark_connect":
            STATE["server_log"] = request.getfixturevalue("connect_server_session").log
        yield hook
        hook.catalog.engine.dispose()
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in STATE["timings"].items())
    print(f"\n[spark-s3] PostgreSQL catalog + S3FileIO on SeaweedFS timings: {timings}")


@pytest.fixture(autouse=True)
def _collect_logs(capfd, caplog):
    caplog.set_level("DEBUG")
    yield
    out, err = capfd.readouterr()
    STATE["logs"].append(out + err + caplog.text)


def objects(prefix: str = "") -> dict:
    return bucket_objects(STATE["server"], f"{STATE['bucket']}/wh/{prefix}")


def live_files(hook, table: str) -> set[str]:
    """Every file the table's metadata reaches: data files of every ref, manifests, manifest lists, metadata."""
    tbl = hook.load_table(table)
    out = {tbl.metadata_location, *(e.metadata_file for e in tbl.metadata.metadata_log)}
    for snap in tbl.metadata.snapshots:
        out.add(snap.manifest_list)
        for manifest in snap.manifests(tbl.io):
            out.add(manifest.manifest_path)
    for ref in tbl.metadata.refs.values():
        out |= {t.file.file_path for t in tbl.scan(snapshot_id=ref.snapshot_id).plan_files()}
    return out


def as_key(path: str) -> str:
    return path.split("://", 1)[1]  # bucket/key, whatever the scheme


def test_maintenance_plan_and_orphan_removal_on_s3_never_list_a_live_file(s3lake):
    import pyarrow.parquet as pq

    hook = s3lake
    fs_, bucket = s3fs(STATE["server"]), STATE["bucket"]
    data_dir = f"{bucket}/wh/db/orders/data"
    # a live file referenced with the s3a:// scheme (as a Hadoop-side writer names it)
    pq.write_table(orders_batch(500, 5), f"{data_dir}/imported-by-s3a.parquet", filesystem=fs_)
    hook.load_table(T).add_files([f"s3a://{data_dir}/imported-by-s3a.parquet"])
    STATE["rows"] += 5
    tagged = hook.ref_snapshot_id(T)
    hook.set_ref(T, "release-1", tagged, ref_type="tag")  # keeps the pre-compaction files live
    pq.write_table(orders_batch(900, 3), f"{data_dir}/orphan-old.parquet", filesystem=fs_)  # a failed job's file
    orphan_bytes = fs_.get_file_info(f"{data_dir}/orphan-old.parquet").size
    backdate(STATE["server"], f"{bucket}/wh/db/orders", days=4)  # every object is an orphan candidate now
    pq.write_table(orders_batch(950, 3), f"{data_dir}/orphan-young.parquet", filesystem=fs_)  # in flight
    live_before, snapshots_before = live_files(hook, T), {s.snapshot_id for s in hook.list_snapshots(T)}
    assert f"s3a://{data_dir}/imported-by-s3a.parquet" in live_before
    assert {as_key(p) for p in live_before} <= set(objects("db/orders"))

    plan = IcebergMaintenancePlanOperator(
        task_id="plan",
        table=T,
        min_input_files=2,
        max_manifests=3,
        expire_older_than="0s",
        older_than_floor="0s",
        retain_last=1,
        remove_orphans=True,  # dry run by default
    )
    out = timed("maintenance plan (compact, manifests, expire, orphan dry run)", lambda: plan.execute(fake_context()))
    STATE["xcom"].append(out)
    assert [a["action"] for a in out["actions"]] == [
        "rewrite_data_files",
        "rewrite_manifests",
        "expire_snapshots",
        "remove_orphan_files",
    ]
    main = hook.snapshot(T, ref="main")
    assert main.operation == "replace" and hook.health(T).data_files == 1  # compacted, verified via the catalog
    kept = {s.snapshot_id for s in hook.list_snapshots(T)}
    assert kept & snapshots_before == {tagged} and main.snapshot_id in kept  # older ones expired, the tag's kept
    listed = json.loads(hook.governance.read("ledger", event_id=out["job_run_id"])[0]["details"])["orphan_files"]
    assert listed == [f"s3://{data_dir}/orphan-old.parquet"], listed  # exactly the orphan: no live file
    orphan = out["actions"][-1]
    assert orphan["orphan_files_count"] == 1 and orphan["orphan_bytes"] == orphan_bytes
    assert orphan["scheme_handling"] == {
        "prefix_mismatch_mode": "ERROR",
        "equal_schemes": {"s3a,s3n": "s3"},
        "prefix_listing": True,
    }
    assert f"{data_dir}/orphan-old.parquet" in objects("db/orders")  # a dry run deletes nothing

    # now the compacted file and the new metadata are old too: the real run sees every live file
    backdate(STATE["server"], f"{bucket}/wh/db/orders", days=4, keep=lambda name: name == "orphan-young.parquet")
    live = live_files(hook, T)
    remove = IcebergRemoveOrphanFilesOperator(task_id="orphans", table=T, dry_run=False)
    removed = timed("orphan removal (real)", lambda: remove.execute(fake_context()))
    STATE["xcom"].append(removed)
    assert removed["orphan_files"] == 1 and removed["dry_run"] is False
    left = set(objects("db/orders"))
    assert f"{data_dir}/orphan-old.parquet" not in left and f"{data_dir}/orphan-young.parquet" in left
    assert {as_key(p) for p in live} <= left, "a live file was deleted"
    assert hook.load_table(T).scan().to_arrow().num_rows == STATE["rows"]  # reads fully (pyiceberg)
    assert hook.load_table(T).scan(snapshot_id=tagged).to_arrow().num_rows == STATE["rows"]  # incl. s3a file


def _record_base_values(hook, audit_op, base: int) -> None:
    """Audit rows for the base snapshot (as an earlier audit writes them) for the null and row-count checks only."""
    from datetime import UTC, datetime

    values = {"amount.null_check": 0.0, "table.has_rows": float(STATE["rows"])}
    rows = [
        {
            "event_id": "base-audit",
            "table_name": T,
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
    assert len(rows) == 2
    hook.governance.append("audit_results", rows)


def test_wap_write_audit_publish_on_s3(s3lake):
    hook = s3lake
    ctx = fake_context(dag_id="wap_s3", run_id="run_s3")
    main_before = hook.ref_snapshot_id(T)
    created = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)
    branch, base = created["branch"], created["base_snapshot_id"]
    write = IcebergWapWriteOperator(task_id="write", table=T, branch=branch, base_snapshot_id=base, sql=[INSERT])
    written = timed("WAP write", lambda: write.execute(ctx))
    assert written["net_added_records"] == 100 and hook.ref_snapshot_id(T) == main_before
    assert str(hook.ref_snapshot_id(T, branch)) == written["snapshot_id"]  # the commit, through the catalog
    audit_op = IcebergWapAuditOperator(
        task_id="audit",
        table=T,
        branch=branch,
        snapshot_id=written["snapshot_id"],
        base_snapshot_id=base,
        incremental_min_rows=0,
        **CHECKS,
    )
    _record_base_values(hook, audit_op, int(base))
    audit = timed("WAP audit", lambda: audit_op.execute(ctx))
    assert audit["passed"] is True and audit["checks"] == 3
    # the two recorded checks: appended rows read on the driver from S3; the unique check: a Spark scan of all rows
    assert audit["incremental_checks"] == 2 and audit["appended_read_by"] == "driver", audit
    observed = {r["check"]: r["observed"] for r in audit["results"]}
    STATE["rows"] += 100
    assert observed["table.has_rows"] == STATE["rows"] and observed["order_id.unique_check"] == 0.0
    publish = IcebergWapPublishOperator(task_id="publish", table=T, branch=branch, audit=audit, drop_branch=True)
    published = timed("WAP publish", lambda: publish.execute(ctx))
    assert published["method"] == "fast_forward" and str(hook.ref_snapshot_id(T)) == written["snapshot_id"]
    # the data files Spark wrote are S3 objects, read back through pyiceberg's FileIO
    tbl = hook.load_table(T)
    paths = [t.file.file_path for t in tbl.scan().plan_files()]
    assert paths and all(p.startswith(f"s3://{STATE['bucket']}/wh/db/orders/") for p in paths)
    assert {as_key(p) for p in paths} <= set(objects("db/orders"))
    ids = tbl.scan().to_arrow().column("order_id").to_pylist()
    assert len(ids) == STATE["rows"] and len(set(ids)) == len(ids) and set(range(1000, 1100)) <= set(ids)
    STATE["xcom"] += [created, written, audit, published]


def test_cherry_pick_on_s3_when_main_moved(s3lake):
    hook = s3lake
    for name in ("c1", "c2"):
        IcebergWapCreateBranchOperator(task_id="create", table=T, branch=name).execute(fake_context())
    head1 = commit_to_branch(hook, T, "c1", 7000, 4)
    head2 = commit_to_branch(hook, T, "c2", 8000, 6)
    record_audit(hook, T, "c1", head1, event_id="c1")
    record_audit(hook, T, "c2", head2, event_id="c2")
    IcebergWapPublishOperator(task_id="p1", table=T, branch="c1", audit=audit_of(head1, "c1")).execute(fake_context())
    pick = IcebergWapPublishOperator(
        task_id="p2", table=T, branch="c2", audit=audit_of(head2, "c2"), on_conflict="cherrypick"
    )
    out = timed("cherry-pick", lambda: pick.execute(fake_context()))
    STATE["xcom"].append(out)
    assert out["method"] == "cherrypick"
    main = hook.ref_snapshot_id(T)
    assert hook.is_ancestor(T, head1, main)
    assert hook.snapshot(T, snapshot_id=main).summary.get("source-snapshot-id") == str(head2)
    STATE["rows"] += 10
    ids = hook.load_table(T).scan().to_arrow().column("order_id").to_pylist()
    assert len(ids) == STATE["rows"] and set(range(8000, 8006)) <= set(ids)


def test_erasure_on_s3_leaves_no_subject_in_any_object(s3lake):
    import pyarrow.parquet as pq

    hook = s3lake
    before = rows_of(hook, PEOPLE)
    assert ERASED <= {r["customer_id"] for r in before}  # control: the subjects are there
    args = {"table": PEOPLE, "subject_columns": "customer_id", "requests_table": REQUESTS, "ref_policy": "drop"}
    # two phases: hidden from readers now (merge-on-read deletes), physically gone at the purge
    logical = IcebergErasureOperator(task_id="erase_logical", phase="logical", **args)
    hidden = timed("erasure, logical", lambda: logical.execute(fake_context(dag_id="erase_s3")))
    STATE["xcom"].append(hidden)
    assert hidden["verification"] == "verified" and hidden["rows_deleted"] > 0
    kept = [r for r in before if r["customer_id"] not in ERASED]
    assert len(rows_of(hook, PEOPLE)) == len(kept)
    assert {r["status"] for r in rows_of(hook, REQUESTS)} == {"logically_erased"}
    purge = IcebergErasureOperator(task_id="erase_purge", phase="purge", **args)
    result = timed("erasure, purge", lambda: purge.execute(fake_context(dag_id="erase_s3")))
    STATE["xcom"].append(result)
    assert result["verification"] == "verified"
    assert len(rows_of(hook, PEOPLE)) == len(kept)
    assert {r["status"] for r in rows_of(hook, REQUESTS)} == {"redacted"}  # erased, then redacted (the default)
    # every object in the bucket, through the S3 API: no Parquet file holds a subject (the erased
    # table, the governance tables: evidence, ledger, and the requests table, redacted)
    fs_ = s3fs(STATE["server"])
    parquet = [p for p in objects() if p.endswith(".parquet")]
    assert any("/wh/db/people/data/" in p for p in parquet) and any("/wh/governance/" in p for p in parquet)
    holding = set()
    for path in parquet:
        table = pq.read_table(path, filesystem=fs_)
        for column in table.column_names:
            if table.schema.field(column).type == "string" and set(table.column(column).to_pylist()) & ERASED:
                holding.add(path.split("/wh/", 1)[1].split("/data/", 1)[0] + f".{column}")
    assert holding == set(), holding
    # and no object of the erased table (parquet, manifests, metadata) holds a subject's raw bytes
    for path in objects("db/people"):
        with fs_.open_input_file(path) as f:
            data = f.read()
        assert not [s for s in ERASED if s.encode() in data], path
    ledger = hook.governance.read("ledger", event_id=result["job_run_id"])
    assert ledger
    STATE["ledger"] = ledger


def test_s3_secret_and_database_password_are_nowhere(s3lake):
    secrets = {"S3 secret key": STATE["server"].secret_key, "PostgreSQL password": STATE["pg"].password}
    argv = STATE["argv_log"].read_text() if STATE["argv_log"].exists() else ""
    logs = "\n".join(STATE["logs"])
    if STATE["mode"] == "spark_connect":
        assert argv.count("----") == 0, "a job ran through spark-submit instead of the Connect server"
        assert logs.count("through Spark Connect") >= JOBS  # control: the jobs ran as Connect clients
        assert STATE["server_log"].is_file()  # control: the shared server's own log (WARN and above)
        where = {"Connect server log": STATE["server_log"].read_text(errors="replace")}
    else:
        assert argv.count("----") == JOBS, f"expected {JOBS} spark-submits"
        assert "--properties-file" in argv
        events = "\n".join(p.read_text(errors="replace") for p in STATE["events"].rglob("*") if p.is_file())
        assert events.count("SparkListenerApplicationStart") == JOBS  # control: one event log per job
        assert "spark.sql.catalog.lakehouse.s3.secret-access-key" in events  # control: the conf was logged, redacted
        where = {"argv": argv, "event log": events}
    assert STATE["server"].access_key not in argv  # the key id is secret conf too
    assert "spark-submit" in logs or "Spark" in logs  # control: the task output was captured
    xcom = json.dumps(STATE["xcom"], default=str)
    ledger = json.dumps(s3lake.governance.read("ledger"), default=str)
    assert STATE.get("ledger") and '"maintenance.remove_orphan_files"' in ledger  # control: every family wrote
    for what, secret in secrets.items():
        for place, text in {**where, "logs": logs, "XCom": xcom, "ledger": ledger}.items():
            assert secret not in text, f"the {what} leaked into the {place}"
    assert not [s for s in ERASED if s in logs]
