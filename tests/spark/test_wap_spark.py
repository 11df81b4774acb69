"""WAP with real Spark jobs (one module lake, few jobs).

* happy path: branch -> SQL write (INSERT + DELETE + MERGE on the branch) -> retried write
  (reset, no duplicates) -> audit (one pass, rows recorded) -> publish -> retried publish no-op;
* bad data through a user application: the audit fails, ``main`` keeps its snapshot id,
  the failing verdicts are recorded and publish refuses;
* ``main`` moved: publish with ``on_conflict="cherrypick"`` replays the branch's appends.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_iceberg_provider.core import audit_checks
from airflow_iceberg_provider.exceptions import IcebergAuditFailedError, IcebergRefusedError
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.wap import audit_of, commit_to_branch, record_audit

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

ROOT = Path(__file__).resolve().parents[2]
T = "db.orders"
CHECKS = {
    "column_mapping": {
        "amount": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}},
        "order_id": {"unique_check": {"equal_to": 0}},
    },
    "table_checks": {
        "has_rows": {"check_statement": "COUNT(*) > 0"},
        "ca_positive": {"check_statement": "amount > 0", "partition_clause": "region = 'ca'"},
    },
    "change_checks": {"added_rows": {"min": 1, "max": 1000}},
}
INSERT = (
    "INSERT INTO {table} SELECT id AS order_id, CAST(id % 97 AS STRING) AS customer_id, 'ca' AS region, "
    "CAST(id % 50 AS DOUBLE) + 1.0 AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(1000, 1100)"
)
DELETE = "DELETE FROM {table} WHERE order_id = 1000"
MERGE = (
    "MERGE INTO {table} t USING (SELECT CAST(1001 AS BIGINT) AS order_id, 99.0 AS amount) s "
    "ON t.order_id = s.order_id WHEN MATCHED THEN UPDATE SET t.amount = s.amount"
)


def rows_at(hook, snapshot_id):
    return hook.load_table(T).scan(snapshot_id=snapshot_id).to_arrow()


@pytest.fixture(scope="module")
def orders(module_lake):
    create_orders_table(module_lake, T).append(orders_batch(0, 50))
    return module_lake


def test_happy_path_retried_write_audit_publish(orders):
    hook = orders
    ctx = fake_context(dag_id="wap_test", run_id="run_ok")
    main_before = hook.ref_snapshot_id(T)
    created = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)
    branch, base = created["branch"], created["base_snapshot_id"]
    assert base == str(main_before)  # ids reach XCom as decimal strings
    write = IcebergWapWriteOperator(
        task_id="write", table=T, branch=branch, base_snapshot_id=str(base), sql=[INSERT, DELETE, MERGE]
    )
    first = write.execute(ctx)
    assert hook.ref_snapshot_id(T) == main_before, "a WAP write must never touch main"
    assert first["net_added_records"] == 99 and first["snapshots"] == 3
    # the retry finds the earlier try's commits, resets the branch and writes once more
    second = write.execute(fake_context(dag_id="wap_test", run_id="run_ok", try_number=2))
    assert second["reset_from_snapshot_id"] == first["snapshot_id"]
    data = rows_at(hook, int(second["snapshot_id"]))
    ids = data.column("order_id").to_pylist()
    assert len(ids) == 50 + 99 and len(set(ids)) == len(ids), "retried write duplicated rows"
    assert 1000 not in ids
    amounts = dict(zip(ids, data.column("amount").to_pylist(), strict=True))
    assert amounts[1001] == 99.0  # the MERGE landed on the branch
    assert hook.ref_snapshot_id(T) == main_before

    audit = IcebergWapAuditOperator(
        task_id="audit", table=T, branch=branch, snapshot_id=second["snapshot_id"], base_snapshot_id=base, **CHECKS
    ).execute(ctx)
    assert audit["passed"] is True and audit["checks"] == 6
    # main's head was never audited: a full audit; 149 rows (<= driver_rows), so one shuffle-free projection
    # aggregated on the driver instead of a pass plus a shuffled one for the exact distinct count
    assert audit["queries"] == 1 and audit["incremental_checks"] == 0 and audit["metadata_checks"] == 0
    observed = {r["check"]: r["observed"] for r in audit["results"]}
    assert observed["amount.min"] == 1.0 and observed["order_id.unique_check"] == 0.0
    assert observed["change.added_rows"] == 99 == second["net_added_records"]  # 100 inserted, 1 deleted
    recorded = hook.governance.read("audit_results", event_id=audit["job_run_id"])
    assert len(recorded) == 6 and all(r["passed"] for r in recorded)
    assert {str(r["snapshot_id"]) for r in recorded} == {second["snapshot_id"]} and recorded[0]["ref"] == branch

    publish = IcebergWapPublishOperator(task_id="publish", table=T, branch=branch, audit=audit, drop_branch=True)
    out = publish.execute(ctx)
    assert out["method"] == "fast_forward" and str(hook.ref_snapshot_id(T)) == second["snapshot_id"]
    assert branch not in hook.refs(T)
    assert publish.execute(ctx)["method"] == "noop"


def test_incremental_audit_reads_only_appended_rows_and_equals_a_full_audit(orders):
    """The branch appended rows that repeat ids of main: the incremental audit finds the
    cross-part duplicates, and every observed value equals the full audit's and the truth."""
    hook = orders
    ctx = fake_context(dag_id="wap_test", run_id="run_incremental")
    base = hook.ref_snapshot_id(T)
    recorded = audit_checks.reusable_base_values(
        audit_checks.parse_checks(**CHECKS), hook.governance.read("audit_results", snapshot_id=base)
    )
    if len(recorded) < 5:  # run alone: audit main's head first, as its publish would have
        branch0 = IcebergWapCreateBranchOperator(task_id="create0", table=T, branch="wap_base_audit").execute(ctx)
        data_checks = {k: v for k, v in CHECKS.items() if k != "change_checks"}  # the branch adds nothing
        IcebergWapAuditOperator(task_id="audit0", table=T, branch=branch0["branch"], **data_checks).execute(ctx)
    created = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)
    branch = created["branch"]
    base_ids = set(rows_at(hook, base).column("order_id").to_pylist())
    head = commit_to_branch(hook, T, branch, max(base_ids) - 9, 20)  # 10 ids main already has, 10 new
    head = commit_to_branch(hook, T, branch, max(base_ids) + 11, 5)  # a second append
    truth = rows_at(hook, head)
    ids, amounts = truth.column("order_id").to_pylist(), truth.column("amount").to_pylist()
    expected = {
        "amount.null_check": 0.0,
        "amount.min": min(amounts),
        "order_id.unique_check": float(len(ids) - len(set(ids))),
        "table.has_rows": float(len(ids)),  # COUNT(*) > 0 records the count itself
        "table.ca_positive": 1.0,
        "change.added_rows": 25.0,
    }
    assert expected["order_id.unique_check"] == 10.0

    observed, methods = {}, {}
    ways = {"driver": {}, "spark": {"driver_read": False}, "whole": {"incremental": False}}
    for way, kwargs in ways.items():
        with pytest.raises(IcebergAuditFailedError, match=r"order_id.unique_check: observed 10.0"):
            IcebergWapAuditOperator(
                task_id=f"audit_{way}",
                table=T,
                branch=branch,
                incremental_min_rows=0,  # a small table: incremental only because we ask
                **kwargs,
                **CHECKS,
            ).execute(fake_context(dag_id="wap_test", run_id="run_incremental", task_id=f"audit_{way}"))
        rows = [r for r in hook.governance.read("audit_results", ref=branch) if r["task_id"] == f"audit_{way}"]
        observed[way] = {r["check_name"]: r["observed_value"] for r in rows}
        (ledger,) = hook.governance.read("ledger", event_id=rows[0]["event_id"])
        methods[way] = json.loads(ledger["metrics"])
    for way in ways:
        assert observed[way] == pytest.approx(expected), way
    for way in ("driver", "spark"):
        assert methods[way]["from_change_set"] == 5 and not methods[way]["incremental_fallback"]
        assert methods[way]["appended_read_by"] == way
    assert methods["whole"]["from_change_set"] == 0 and methods["whole"]["appended_read_by"] is None
    assert hook.ref_snapshot_id(T) == base, "a failed audit never touches main"


def test_bad_data_fails_the_audit_and_main_keeps_its_snapshot(orders, caplog, capfd):
    hook = orders
    ctx = fake_context(dag_id="wap_test", run_id="run_bad")
    pushed: dict[str, object] = {}
    ctx["ti"].xcom_push = lambda key, value: pushed.__setitem__(key, json.loads(json.dumps(value)))
    main_before = hook.ref_snapshot_id(T)
    created = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)
    branch = created["branch"]
    written = IcebergWapWriteOperator(
        task_id="write",
        table=T,
        branch=branch,
        application=str(ROOT / "example_dags" / "jobs" / "append_orders.py"),
        params_for_job={"rows": 100, "seed": 5000, "ds": "2026-01-03", "bad_rows": True},
        expected_operations=["append"],
    ).execute(ctx)
    assert written["added_records"] == 105 and hook.ref_snapshot_id(T) == main_before
    audit = IcebergWapAuditOperator(task_id="audit", table=T, branch=branch, **CHECKS)
    caplog.set_level("INFO")
    with pytest.raises(IcebergAuditFailedError) as err:
        audit.execute(ctx)
    message = str(err.value)
    assert "amount.min: observed -" in message and "order_id.unique_check: observed 5.0" in message
    assert "table.ca_positive" in message and "main was not touched" in message
    assert "audit completed: 3 of 6 checks failed" in message
    # the result reached XCom before the task failed: every check's observed value and condition
    result = pushed["return_value"]
    assert (result["passed"], result["checks"], result["failed"]) == (False, 6, 3)
    assert result["outcome"] == "audit completed: 3 of 6 checks failed"
    assert result["snapshot_id"] == written["snapshot_id"]  # a decimal string, exact in a browser
    assert len(result["results"]) == 6 and all(
        {"check", "observed", "condition", "passed"} <= set(r) for r in result["results"]
    )
    failed_checks = {f["check"]: f for f in result["failed_checks"]}
    assert sorted(failed_checks) == ["amount.min", "order_id.unique_check", "table.ca_positive"]
    assert failed_checks["order_id.unique_check"]["observed"] == 5.0
    assert failed_checks["amount.min"]["observed"] < 0 and failed_checks["amount.min"]["expected"] == ">= 0"
    # log levels (the task log's "[level] message" lines): each failed check at ERROR, PASS at INFO,
    # the table of failed checks (observed vs expected) and the outcome at WARNING
    printed = capfd.readouterr()
    text = caplog.text + printed.out + printed.err
    lines = text.splitlines()
    failed_lines = sorted(line.split("] ", 1)[1].split(":")[0] for line in lines if "] FAIL " in line)
    assert failed_lines == ["FAIL amount.min", "FAIL order_id.unique_check", "FAIL table.ca_positive"], failed_lines
    assert all("[error" in line for line in lines if "] FAIL " in line)
    assert all("[info" in line for line in lines if "] PASS " in line) and sum("] PASS " in x for x in lines) == 3
    start = next(i for i, line in enumerate(lines) if "] Failed checks of" in line)
    assert "[warning" in lines[start]
    table = "\n".join(lines[start + 1 : start + 6])
    assert [c.strip() for c in table.splitlines()[0].split("|")] == ["check", "observed", "expected"]
    rows = {r.split("|")[0].strip(): [c.strip() for c in r.split("|")[1:]] for r in table.splitlines()[2:5]}
    assert rows["order_id.unique_check"] == ["5", "== 0"] and rows["amount.min"][1] == ">= 0"
    assert "audit completed: 3 of 6 checks failed" in lines[start + 6]
    job_lines = [line for line in lines if "[iceberg-job] wap_audit" in line]
    assert job_lines and all("audit completed: 3 of 6 checks failed" in line for line in job_lines), job_lines
    assert not [line for line in job_lines if "succeeded" in line]
    assert hook.ref_snapshot_id(T) == main_before
    assert str(hook.ref_snapshot_id(T, branch)) == written["snapshot_id"], "the branch is kept for inspection"
    rows = hook.governance.read("audit_results", ref=branch)
    failed = sorted(r["check_name"] for r in rows if not r["passed"])
    assert failed == ["amount.min", "order_id.unique_check", "table.ca_positive"]
    with pytest.raises(IcebergRefusedError, match="failed checks"):
        bound = {
            "audit_event_id": rows[0]["event_id"],
            "spec_hash": rows[0]["spec_hash"],
            "snapshot_id": rows[0]["snapshot_id"],
        }
        IcebergWapPublishOperator(task_id="publish", table=T, branch=branch, audit=bound).execute(ctx)
    assert hook.ref_snapshot_id(T) == main_before


def test_cherrypick_when_main_moved(orders):
    hook = orders
    for name in ("c1", "c2"):
        IcebergWapCreateBranchOperator(task_id="create", table=T, branch=name).execute(fake_context())
    head1 = commit_to_branch(hook, T, "c1", 7000, 4)
    head2 = commit_to_branch(hook, T, "c2", 8000, 6)
    record_audit(hook, T, "c1", head1, event_id="c1")
    record_audit(hook, T, "c2", head2, event_id="c2")
    IcebergWapPublishOperator(task_id="p1", table=T, branch="c1", audit=audit_of(head1, "c1")).execute(fake_context())
    records_before = len(rows_at(hook, head1))
    pick = IcebergWapPublishOperator(
        task_id="p2", table=T, branch="c2", audit=audit_of(head2, "c2"), on_conflict="cherrypick"
    )
    out = pick.execute(fake_context())
    assert out["method"] == "cherrypick"
    main = hook.ref_snapshot_id(T)
    assert hook.is_ancestor(T, head1, main)
    assert hook.snapshot(T, snapshot_id=main).summary.get("source-snapshot-id") == str(head2)
    ids = rows_at(hook, main).column("order_id").to_pylist()
    assert len(ids) == records_before + 6 and len(set(ids)) == len(ids)
    again = pick.execute(fake_context())  # retried: already replayed -> no-op
    assert again["method"] == "noop" and hook.ref_snapshot_id(T) == main


def test_metadata_answers_when_every_shuffle_free_check_allows(orders):
    """Null counts, min/max and COUNT(*) only: Iceberg answers from the manifests, no data scan."""
    hook = orders
    ctx = fake_context(dag_id="wap_test", run_id="run_metadata")
    branch = IcebergWapCreateBranchOperator(task_id="create", table=T).execute(ctx)["branch"]
    head = commit_to_branch(hook, T, branch, 5000, 7)
    out = IcebergWapAuditOperator(
        task_id="audit",
        table=T,
        branch=branch,
        incremental=False,
        column_mapping={
            "amount": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}, "max": {"leq_to": 1000}},
            "order_id": {"max": {"geq_to": 0}},
        },
        table_checks={"has_rows": {"check_statement": "COUNT(*) > 0"}},
    ).execute(ctx)
    truth = rows_at(hook, head)
    amounts = truth.column("amount").to_pylist()
    observed = {r["check"]: r["observed"] for r in out["results"]}
    assert observed == {
        "amount.null_check": 0.0,
        "amount.min": min(amounts),
        "amount.max": max(amounts),
        "order_id.max": float(max(truth.column("order_id").to_pylist())),
        "table.has_rows": float(truth.num_rows),
    }
    assert out["metadata_checks"] == 5 and out["queries"] == 1 and out["passed"]
