"""Spark on object storage, end to end: SeaweedFS S3 (``weed mini``) + a SQL catalog (3 spark-submits).

One module lake: a SQLite ``JdbcCatalog`` whose warehouse is ``s3://<fresh bucket>/wh`` on
SeaweedFS's S3 API. Spark uses Iceberg's own ``S3FileIO`` (what production uses) with the
AWS SDK v2 jars that ``scripts/bootstrap.sh`` puts in ``.spark-runtime/jars/s3``
(``AIP_S3_SPARK_JARS``); pyiceberg uses its pyarrow FileIO with the same connection properties.

* WAP: branch -> Spark SQL write on the branch -> Spark audit -> publish (fast-forward); every
  commit is verified through the catalog and the data read back through pyiceberg from S3;
* erasure (full phase) with verification; afterwards every object in the bucket is read
  through the S3 API (not through the catalog): no Parquet file holds a subject value;
* the S3 secret key is nowhere: not in any spark-submit argv (a shim records them), the
  driver/task output (capfd + caplog), XCom or the ledger.

Timings of each step are printed (``-s`` shows them) for the README's local-vs-S3 figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest
from _erasure_helpers import SALT, add_requests, append_people, create_people_table, person, rows_of
from _servers import seaweed, skip_or_fail
from conftest import create_orders_table, fake_context, orders_batch

from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.wap import (
    IcebergWapAuditOperator,
    IcebergWapCreateBranchOperator,
    IcebergWapPublishOperator,
    IcebergWapWriteOperator,
)

pytestmark = [pytest.mark.rest, pytest.mark.spark]

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
STATE: dict = {"logs": [], "xcom": [], "timings": {}}


def s3fs(server):
    from pyarrow import fs

    return fs.S3FileSystem(
        access_key=server.access_key,
        secret_key=server.secret_key,
        endpoint_override=server.s3_endpoint,
        scheme="http",
        region="us-east-1",
        allow_bucket_creation=True,
    )


def timed(name: str, fn):
    t0 = time.monotonic()
    out = fn()
    STATE["timings"][name] = time.monotonic() - t0
    return out


@pytest.fixture(scope="module")
def s3lake(tmp_path_factory):
    """SQLite catalog + ``s3://`` warehouse on SeaweedFS, S3FileIO jars, a spark-submit argv shim."""
    s3_jars = os.environ.get("AIP_S3_SPARK_JARS", "")
    if not s3_jars:
        skip_or_fail("AWS SDK v2 jars for S3FileIO missing (AIP_S3_SPARK_JARS empty): run scripts/bootstrap.sh")
    server = seaweed()
    bucket = f"lake{uuid.uuid4().hex[:10]}"
    s3fs(server).create_dir(bucket)  # a plain bucket: the -tableBucket one refuses plain object writes
    tmp = tmp_path_factory.mktemp("s3lake")
    conn = {
        "conn_type": "iceberg_catalog",
        "host": f"sqlite:///{tmp / 'catalog.db'}",
        "extra": {
            "catalog_type": "sql",
            "catalog_name": "lakehouse",
            "warehouse": f"s3://{bucket}/wh",
            "properties": server.file_io_properties(),
        },
    }
    real = subprocess.run(["bash", "-c", "command -v spark-submit"], capture_output=True, text=True).stdout.strip()
    assert real, "spark-submit must be on PATH (source scripts/env.sh)"
    shim, argv_log = tmp / "shim", tmp / "argv.log"
    shim.mkdir()
    (shim / "spark-submit").write_text(
        f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" >> {argv_log}\necho "----" >> {argv_log}\nexec {real} "$@"\n'
    )
    (shim / "spark-submit").chmod(0o755)
    jars = os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
        mp.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": SALT}))
        mp.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", f"{jars},{s3_jars}")
        mp.setenv("PATH", f"{shim}:{os.environ['PATH']}")
        hook = IcebergCatalogHook()
        hook.ensure_namespace("db")
        create_orders_table(hook, T).append(orders_batch(0, 50))
        create_people_table(hook, PEOPLE, mode="merge-on-read")
        append_people(hook, PEOPLE, 2)
        add_requests(hook, REQUESTS, SUBJECTS)
        STATE.update(server=server, bucket=bucket, argv_log=argv_log)
        yield hook
    timings = ", ".join(f"{k} {v:.1f}s" for k, v in STATE["timings"].items())
    print(f"\n[spark-s3] S3FileIO on SeaweedFS timings: {timings}")


@pytest.fixture(autouse=True)
def _collect_logs(capfd, caplog):
    caplog.set_level("DEBUG")
    yield
    out, err = capfd.readouterr()
    STATE["logs"].append(out + err + caplog.text)


def bucket_objects() -> list[str]:
    from pyarrow import fs

    sel = fs.FileSelector(STATE["bucket"], recursive=True)
    return [i.path for i in s3fs(STATE["server"]).get_file_info(sel) if i.type == fs.FileType.File]


def test_wap_write_audit_publish_on_s3(s3lake):
    hook = s3lake
    ctx = fake_context(dag_id="wap_s3", run_id="run_s3")
    main_before = hook.ref_snapshot_id(T)
    created = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)
    branch, base = created["branch"], created["base_snapshot_id"]
    write = IcebergWapWriteOperator(task_id="write", table=T, branch=branch, base_snapshot_id=base, sql=[INSERT])
    written = timed("wap_write", lambda: write.execute(ctx))
    assert written["net_added_records"] == 100 and hook.ref_snapshot_id(T) == main_before
    assert str(hook.ref_snapshot_id(T, branch)) == written["snapshot_id"]  # the commit, through the catalog
    audit_op = IcebergWapAuditOperator(
        task_id="audit", table=T, branch=branch, snapshot_id=written["snapshot_id"], base_snapshot_id=base, **CHECKS
    )
    audit = timed("wap_audit", lambda: audit_op.execute(ctx))
    assert audit["passed"] is True and audit["checks"] == 3
    observed = {r["check"]: r["observed"] for r in audit["results"]}
    assert observed["table.has_rows"] == 150.0 and observed["order_id.unique_check"] == 0.0
    publish = IcebergWapPublishOperator(
        task_id="publish", table=T, branch=branch, audited_snapshot_id=audit["snapshot_id"], drop_branch=True
    )
    published = timed("wap_publish", lambda: publish.execute(ctx))
    assert published["method"] == "fast_forward" and str(hook.ref_snapshot_id(T)) == written["snapshot_id"]
    # the data files Spark wrote are S3 objects, read back through pyiceberg's FileIO
    tbl = hook.load_table(T)
    paths = [t.file.file_path for t in tbl.scan().plan_files()]
    assert paths and all(p.startswith(f"s3://{STATE['bucket']}/wh/db/orders/") for p in paths)
    ids = tbl.scan().to_arrow().column("order_id").to_pylist()
    assert sorted(ids) == [*range(50), *range(1000, 1100)]
    STATE["xcom"] += [created, written, audit, published]


def test_erasure_on_s3_leaves_no_subject_in_any_object(s3lake):
    import pyarrow.parquet as pq

    hook = s3lake
    before = rows_of(hook, PEOPLE)
    assert ERASED <= {r["customer_id"] for r in before}  # control: the subjects are there
    op = IcebergErasureOperator(
        task_id="erase", table=PEOPLE, subject_columns="customer_id", requests_table=REQUESTS, ref_policy="drop"
    )
    result = timed("erasure", lambda: op.execute(fake_context(dag_id="erase_s3")))
    STATE["xcom"].append(result)
    assert result["verification"] == "verified" and result["rows_deleted"] > 0
    after = rows_of(hook, PEOPLE)
    assert len(after) == len([r for r in before if r["customer_id"] not in ERASED])
    assert {r["status"] for r in rows_of(hook, REQUESTS)} == {"erased"}
    # every object in the bucket, through the S3 API: no Parquet file holds a subject (the erased
    # table, the governance tables: evidence, ledger) except the user's requests table, the input
    fs_ = s3fs(STATE["server"])
    parquet = [p for p in bucket_objects() if p.endswith(".parquet")]
    assert any("/wh/db/people/data/" in p for p in parquet) and any("/wh/governance/" in p for p in parquet)
    holding = set()
    for path in parquet:
        table = pq.read_table(path, filesystem=fs_)
        for column in table.column_names:
            if table.schema.field(column).type == "string" and set(table.column(column).to_pylist()) & ERASED:
                holding.add(path.split("/wh/", 1)[1].split("/data/", 1)[0] + f".{column}")
    assert holding == {"db/requests.subject_key"}, holding
    # and no object of the erased table (parquet, manifests, metadata) holds a subject's raw bytes
    for path in [p for p in bucket_objects() if "/wh/db/people/" in p]:
        with fs_.open_input_file(path) as f:
            data = f.read()
        assert not [s for s in ERASED if s.encode() in data], path
    ledger = hook.read_governance_rows("ledger", event_id=result["job_run_id"])
    assert ledger
    STATE["ledger"] = ledger


def test_s3_secret_key_is_nowhere(s3lake):
    secret = STATE["server"].secret_key
    argv = STATE["argv_log"].read_text()
    assert argv.count("----") == 3, "expected 3 spark-submits (WAP write, audit, erasure)"
    assert "--properties-file" in argv and secret not in argv
    assert "AKIA" not in argv and STATE["server"].access_key not in argv  # the key id is secret conf too
    logs = "\n".join(STATE["logs"])
    assert "spark-submit" in logs or "Spark" in logs  # control: the task output was captured
    assert secret not in logs
    assert secret not in json.dumps(STATE["xcom"], default=str)
    ledger = STATE.get("ledger") or []
    assert secret not in json.dumps(ledger, default=str)
    all_ledger = s3lake.read_governance_rows("ledger")
    assert all_ledger and secret not in json.dumps(all_ledger, default=str)
    assert not [s for s in ERASED if s in logs]
