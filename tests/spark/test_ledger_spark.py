"""The governance chain with real Spark jobs: rows the jobs write (their ledger rows, the audit's
results) are sealed when each job ends, and the whole ledger verifies; editing a row a job
wrote is then named by the verifier."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_iceberg_provider import verify
from airflow_iceberg_provider.core import ledger_verify as lv
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from tests.support.erasure import add_requests, append_people, create_people_table, person, set_salt_connection
from tests.support.lake import create_orders_table, fake_context, orders_batch

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

T = "db.orders"
INSERT = (
    "INSERT INTO {table} SELECT id AS order_id, CAST(id % 97 AS STRING) AS customer_id, 'ca' AS region, "
    "CAST(id % 50 AS DOUBLE) + 1.0 AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(1000, 1010)"
)


def _verify(hook):
    tables, checkpoints = verify.read_catalog(hook.catalog, hook.governance_namespace)
    return verify.verify_tables(tables, checkpoints, catalog_name=hook.catalog_name, key=None)


def test_rows_spark_jobs_write_are_sealed_and_the_ledger_verifies(module_lake):
    hook = module_lake
    create_orders_table(hook, T).append(orders_batch(0, 20))
    ctx = fake_context(dag_id="chain", run_id="r1")
    branch = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)["branch"]
    write = IcebergWapWriteOperator(task_id="write", table=T, branch=branch, sql=[INSERT])
    written = write.execute(ctx)
    write.post_execute(ctx)
    audit = IcebergWapAuditOperator(
        task_id="audit",
        table=T,
        branch=branch,
        snapshot_id=written["snapshot_id"],
        column_mapping={"amount": {"null_check": {"equal_to": 0}}},
    )
    result = audit.execute(ctx)
    audit.post_execute(ctx)
    sealed = hook.governance.sealed_hashes()
    audit_table = f"{hook.governance_namespace}.audit_results"
    assert {k.split("/")[0] for k in sealed[audit_table]} == {result["job_run_id"]}
    assert result["job_run_id"] in sealed[f"{hook.governance_namespace}.ledger"]  # the job's own ledger row
    findings = _verify(hook)
    assert [f for f in findings if f.severity == "error"] == []

    tbl = hook.load_table(audit_table)  # an outside writer flips the verdict
    rows = tbl.scan().to_arrow().to_pylist()
    tbl.overwrite(
        pa.Table.from_pylist([{**r, "passed": not r["passed"]} for r in rows], schema=tbl.schema().as_arrow())
    )
    edited = [f for f in _verify(hook) if f.kind == "edited"]
    assert edited and edited[0].table == audit_table
    assert edited[0].row_id == lv.row_key("audit_results", rows[0])


def test_erasure_evidence_updated_by_a_second_run_is_resealed_and_its_report_verifies(
    module_lake, tmp_path, monkeypatch
):
    import json

    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
    from airflow_iceberg_provider.ui.app import report_data
    from airflow_iceberg_provider.ui.reader import GovernanceReader

    hook = module_lake
    monkeypatch.delenv("AIRFLOW_CONN_ERASURE_SALT", raising=False)
    set_salt_connection()
    create_people_table(hook, "db.people")
    append_people(hook, "db.people", 1)
    add_requests(hook, "db.requests", {"R-1": person(3)})
    ctx = fake_context(dag_id="erase", run_id="r1", task_id="erase")
    for _ in range(2):  # the second run MERGEs into the same evidence row (runs = 2)
        op = IcebergErasureOperator(
            task_id="erase",
            table="db.people",
            subject_columns="customer_id",
            requests_table="db.requests",
            request_statuses=["pending", "erased"],
            redact_erased_requests=False,  # a redacted request is closed: no second run would take it
        )
        op.execute(ctx)
        op.post_execute(ctx)
    evidence = hook.governance.read("erasure_evidence", request_id="R-1")
    assert [e["runs"] for e in evidence] == [2]
    name = f"{hook.governance_namespace}.erasure_evidence"
    seal_rows = sorted(hook.governance.read("ledger", operation=lv.SEAL_OPERATION), key=lambda r: r["chain_seq"])
    seals = [e for r in seal_rows for e in json.loads(r["details"])["tables"].get(name, [])]
    assert [("replaces" in e) for e in seals] == [False, True]  # the update says what it replaced
    errors = [f for f in _verify(hook) if f.severity == "error"]
    # the only error is the audit verdict the test above flipped in this module's lake
    assert [f for f in errors if f.table != f"{hook.governance_namespace}.audit_results"] == []

    report = report_data(GovernanceReader("iceberg_catalog_default"), "R-1")
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report, default=str))
    assert verify.main(["--evidence", str(path)]) == 0
