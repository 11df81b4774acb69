"""A verdict bound to its own run, through the operators on a real SQLite catalog (no Spark).

The audit job's rows are written as the job writes them (:func:`_wap_helpers.record_audit`); an
attacker's rows go through the same public verb every task has, ``hook.governance.append``. After
every refusal the table's metadata location is unchanged.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pendulum
import pytest

from airflow_iceberg_provider.core import audit_checks
from airflow_iceberg_provider.core.governance import AUDIT_RESULTS, pyiceberg_schema
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.governance.approvals import approval_history
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.approval import IcebergWapApprovalOperator
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.wap import AMOUNT_MIN, audit_of, commit_to_branch, record_audit

T = "db.orders"
#: the audit the pipeline runs: both checks; the weaker one leaves the bound out
STRONG = {"amount": {"min": {"geq_to": 0}, "null_check": {"equal_to": 0}}}
WEAK = {"amount": {"null_check": {"equal_to": 0}}}
REQUIRED = {"column_mapping": STRONG}


@pytest.fixture
def branch(lake: IcebergCatalogHook) -> tuple[IcebergCatalogHook, int, int]:
    """db.orders with 10 rows on main and a branch ``b`` 5 rows ahead; returns (hook, main, head)."""
    create_orders_table(lake, T).append(orders_batch(0, 10))
    main = lake.ref_snapshot_id(T)
    lake.create_branch(T, "b", snapshot_id=main)
    return lake, main, commit_to_branch(lake, T, "b", 100, 5)


def publish(**kwargs: Any) -> IcebergWapPublishOperator:
    return IcebergWapPublishOperator(task_id="publish", table=T, branch="b", **kwargs)


def refused(hook: IcebergCatalogHook, op: Any, match: str, context: dict | None = None) -> None:
    """``op`` refuses with ``match`` and changes nothing (metadata location and ``main`` unchanged)."""
    before, main = hook.metadata_location(T), hook.ref_snapshot_id(T)
    with pytest.raises(IcebergRefusedError, match=match):
        op.execute(context or fake_context())
    assert hook.metadata_location(T) == before and hook.ref_snapshot_id(T) == main


def forge(hook: IcebergCatalogHook, head: int, **change: Any) -> None:
    """A passing row of the real audit's check, appended by some other task through the public verb."""
    real = hook.governance.read("audit_results", event_id="ev-real")[0]
    hook.governance.append("audit_results", [{**real, "passed": True, "observed_value": 1.0, **change}])


# ---------------------------------------------------------------------------- the happy path
def test_a_publish_takes_the_verdict_of_its_own_audit(branch):
    hook, _, head = branch
    audit = record_audit(hook, T, "b", head, event_id="ev-real", column_mapping=STRONG)
    out = publish(audit=audit, required_checks=REQUIRED).execute(fake_context())
    assert out["published_snapshot_id"] == str(head) and hook.ref_snapshot_id(T) == head
    (row,) = hook.governance.read("ledger", operation="wap_publish")
    details = json.loads(row["details"])
    assert details["audit_event_id"] == "ev-real" and details["spec_hash"] == audit["spec_hash"]
    assert details["waived_checks"] == []


def test_the_audit_result_as_json_text_binds_too(branch):
    hook, _, head = branch
    audit = record_audit(hook, T, "b", head, event_id="ev-real")
    assert publish(audit=json.dumps(audit)).execute(fake_context())["published_snapshot_id"] == str(head)


# ---------------------------------------------------------------------------- forged rows
def test_a_forged_passing_row_does_not_open_the_gate(branch):
    hook, _, head = branch
    audit = record_audit(hook, T, "b", head, event_id="ev-real", passed=False)
    forge(hook, head, event_id="forged")  # another event: never read
    refused(hook, publish(audit=audit), r"failed checks \['amount.min'\], and no data steward accepted")
    forge(hook, head)  # the bound event id itself: a second row of the same check
    refused(hook, publish(audit=audit), r"more than one row for checks \['amount.min'\]")


def test_a_publish_bound_to_nothing_refuses_whatever_rows_exist(branch):
    hook, _, head = branch
    record_audit(hook, T, "b", head, event_id="ev-real")  # a passing audit of exactly this snapshot
    refused(hook, publish(), r"audit=None is not set, so no audit run is bound to snapshot")
    refused(hook, publish(audited_snapshot_id=head), r"audit=None is not set")


def test_a_future_dated_row_does_not_open_the_gate(branch):
    hook, _, head = branch
    audit = record_audit(hook, T, "b", head, event_id="ev-real", passed=False)
    future = datetime(2999, 1, 1, tzinfo=UTC)
    forge(hook, head, event_id="ev-future", evaluated_at=future)  # would stay "latest" for good
    refused(hook, publish(audit=audit), r"failed checks \['amount.min'\]")
    bound_to_it = {**audit, "audit_event_id": "ev-future"}
    refused(hook, publish(audit=bound_to_it), r"is dated 2999-01-01T00:00:00\+00:00, in the future")
    # an audit of its own, dated an hour ahead
    ahead = record_audit(hook, T, "b", head, event_id="ev-ahead", evaluated_at=datetime.now(UTC) + timedelta(hours=1))
    refused(hook, publish(audit=ahead), "in the future")


def test_another_dags_audit_is_refused(branch):
    hook, _, head = branch
    theirs = record_audit(hook, T, "b", head, event_id="ev-theirs", dag_id="other_dag")
    refused(hook, publish(audit=theirs), r"written by DAG 'other_dag' run 'manual__2026-01-01', not by this run")
    earlier_run = record_audit(hook, T, "b", head, event_id="ev-earlier", run_id="scheduled__2025-12-31")
    refused(hook, publish(audit=earlier_run), "run 'scheduled__2025-12-31', not by this run")


def test_an_audit_of_another_snapshot_or_table_is_refused(branch):
    hook, main, head = branch
    older = record_audit(hook, T, "b", main, event_id="ev-older")  # an older audit, of main's head
    refused(hook, publish(audit=older), "Branch 'b' of db.orders moved after its audit")
    refused(hook, publish(audit=older, audited_snapshot_id=head), f"names snapshot {main}, but the publish is of")
    create_orders_table(hook, "db.other").append(orders_batch(0, 1))
    other = record_audit(hook, "db.other", "b", head, event_id="ev-other")
    refused(hook, publish(audit=other), "is of table 'db.other', not 'db.orders'")


# ---------------------------------------------------------------------------- weaker audits
def test_a_weaker_second_audit_is_refused(branch):
    hook, _, head = branch
    strong = record_audit(hook, T, "b", head, event_id="ev-strong", column_mapping=STRONG, failed=("amount.min",))
    weak = record_audit(hook, T, "b", head, event_id="ev-weak", column_mapping=WEAK)  # later, and it passed
    refused(
        hook,
        publish(audit=weak, required_checks=REQUIRED),
        r"required_checks: .* weaker than the publish requires: missing checks \['amount.min'\]",
    )
    refused(hook, publish(audit=strong, required_checks=REQUIRED), r"failed checks \['amount.min'\]")
    # the weak audit's rows under the strong audit's reported spec hash
    refused(hook, publish(audit={**weak, "spec_hash": strong["spec_hash"]}), "not the one the audit reported")


def test_an_audit_with_a_loosened_check_is_refused(branch):
    hook, _, head = branch
    loose = {"amount": {"min": {"geq_to": -1000}, "null_check": {"equal_to": 0}}}
    audit = record_audit(hook, T, "b", head, event_id="ev-loose", column_mapping=loose)
    refused(
        hook,
        publish(audit=audit, required_checks=REQUIRED),
        r"checks with another definition \['amount.min'\]",
    )
    # a stronger audit (every required check, unchanged, and one more) publishes
    more = {"amount": {**STRONG["amount"], "max": {"leq_to": 10**9}}}
    audit = record_audit(hook, T, "b", head, event_id="ev-more", column_mapping=more)
    assert publish(audit=audit, required_checks=REQUIRED).execute(fake_context())["published"] is True


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"column_mapping": {"amount": {"avg": {"geq_to": 0}}}}, "is not a valid check spec"),
        ({"colum_mapping": STRONG}, r"unknown keys \['colum_mapping'\]"),
        ({"column_mapping": {}}, "No audit checks given"),
    ],
)
def test_required_checks_are_validated_before_anything_runs(value, problem):
    with pytest.raises(IcebergValidationError, match=problem) as err:
        publish(required_checks=value)
    assert str(err.value).startswith("required_checks=")


def test_a_malformed_audit_binding_is_refused_at_construction():
    with pytest.raises(IcebergValidationError, match="audit=.* has no valid spec_hash"):
        publish(audit={"audit_event_id": "ev", "spec_hash": "x", "snapshot_id": "1"})


# ---------------------------------------------------------------------------- the audit side
def test_the_audit_refuses_rows_whose_check_hashes_are_not_its_checks(branch):
    hook, _, head = branch
    op = IcebergWapAuditOperator(task_id="audit", table=T, branch="b", column_mapping=STRONG)
    checks = op.parse_checks()
    record_audit(hook, T, "b", head, event_id="job-1", column_mapping=STRONG)
    assert [r["check"] for r in op._recorded_results(checks, "job-1", "b")] == [c.name for c in checks]
    assert op._identity(fake_context(), checks) == {
        "spec_hash": audit_checks.spec_hash(checks),
        "dag_id": "test_dag",
        "run_id": "manual__2026-01-01",
        "task_id": "t",
    }
    loose = {"amount": {"min": {"geq_to": -1}, "null_check": {"equal_to": 0}}}
    record_audit(hook, T, "b", head, event_id="job-2", column_mapping=loose)  # same names, other checks
    with pytest.raises(IcebergCommitVerificationError, match="check hashes differ from the checks asked for"):
        op._recorded_results(checks, "job-2", "b")


def test_an_existing_audit_results_table_gains_the_hash_columns(lake):
    """A lake whose audit_results table predates the hash columns: they are added on first use."""
    old = AUDIT_RESULTS.__class__(
        AUDIT_RESULTS.name, [c for c in AUDIT_RESULTS.columns if not c.name.endswith("_hash")], AUDIT_RESULTS.doc
    )
    lake.ensure_namespace("governance")
    lake.catalog.create_table("governance.audit_results", schema=pyiceberg_schema(old))
    fresh = IcebergCatalogHook()
    assert fresh.governance.read("audit_results") == []
    names = fresh.load_table("governance.audit_results").schema().column_names
    assert {"check_hash", "spec_hash"} <= set(names)


# ---------------------------------------------------------------------------- upstream audits
def _dag_with(*upstream: str) -> IcebergWapPublishOperator:
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("verdicts", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        op = publish()
        for task_id in upstream:
            EmptyOperator(task_id=task_id) >> op
    return op


def _context_with(results: dict[str, Any]) -> dict[str, Any]:
    """A task context whose ``ti`` pulls the given upstream return values (as XCom would)."""
    ctx = fake_context()
    ti = SimpleNamespace(**vars(ctx["ti"]), xcom_pull=lambda task_ids: results.get(task_ids))
    return {**ctx, "ti": ti, "task_instance": ti}


def test_the_one_upstream_audit_is_bound_by_default(branch):
    hook, _, head = branch
    audit = {**record_audit(hook, T, "b", head, event_id="ev-real"), "passed": True}
    op = _dag_with("audit", "write")
    out = op.execute(_context_with({"audit": audit, "write": {"snapshot_id": str(head)}}))
    assert out["published_snapshot_id"] == str(head)


def test_two_upstream_audits_of_the_table_must_be_chosen_between(branch):
    hook, _, head = branch
    strong = record_audit(hook, T, "b", head, event_id="ev-strong", column_mapping=STRONG)
    weak = record_audit(hook, T, "b", head, event_id="ev-weak", column_mapping=WEAK)
    op = _dag_with("audit", "audit_again")
    before = hook.metadata_location(T)
    with pytest.raises(
        IcebergValidationError, match=r"several upstream tasks audited db.orders \(\['audit', 'audit_again'\]\)"
    ):
        op.execute(_context_with({"audit": strong, "audit_again": weak}))
    assert hook.metadata_location(T) == before


# ---------------------------------------------------------------------------- steward waivers
def decide(hook: IcebergCatalogHook, head: int, audit: dict[str, Any], context: dict | None = None, **change: Any):
    """An ``approval`` ledger row as the WAP gate writes it (``change`` overrides details)."""
    details = {
        "gate": "wap_publish",
        "decision": "publish",
        "decided_at": datetime.now(UTC).isoformat(),
        "audit_event_id": audit["audit_event_id"],
        "spec_hash": audit["spec_hash"],
        "snapshot_id": str(head),
        "branch_head": str(head),
        "failed_checks": [{"check": "amount.min", "observed": -1.0, "expected": ">= 0"}],
        "waived": ["amount.min"],
        **change,
    }
    hook.governance.record_ledger(
        operation="approval",
        table=T,
        ref="b",
        status="succeeded",
        context=context or fake_context(task_id="gate"),
        snapshot_after=int(details["snapshot_id"]),
        details=details,
    )


def test_a_waiver_counts_only_when_bound_to_this_audit_snapshot_and_run(branch):
    hook, main, head = branch
    audit = record_audit(hook, T, "b", head, event_id="ev-real", passed=False)
    op = publish(audit=audit)
    decide(hook, main, audit, snapshot_id=str(main))  # decided on another snapshot
    decide(hook, head, {**audit, "audit_event_id": "ev-earlier"})  # on an earlier audit of it
    decide(hook, head, audit, context=fake_context(run_id="manual__other", task_id="gate"))  # in another run
    decide(hook, head, audit, branch_head=str(main))  # the branch was elsewhere when the steward answered
    refused(hook, op, r"failed checks \['amount.min'\], and no data steward accepted")
    decide(hook, head, audit)
    out = op.execute(fake_context())
    assert out["published_snapshot_id"] == str(head)
    details = json.loads(hook.governance.read("ledger", operation="wap_publish")[0]["details"])
    assert details["waived_checks"] == ["amount.min"]


def _gate(**kwargs: Any) -> IcebergWapApprovalOperator:
    return IcebergWapApprovalOperator(
        task_id="gate", table=T, branch="b", warn_checks=["amount.min"], publish_task_id="publish", **kwargs
    )


def _answer(option: str = "Publish") -> dict[str, Any]:
    return {
        "chosen_options": [option],
        "params_input": {"comment": "late rows are expected"},
        "responded_at": datetime.now(UTC),
        "responded_by_user": {"id": "u1", "name": "steward"},
    }


def test_the_gate_refuses_when_the_branch_moved_after_the_question(branch):
    hook, _, head = branch
    audit = record_audit(hook, T, "b", head, event_id="ev-real", passed=False)
    gate = _gate(audit=audit)
    gate._look(fake_context())  # what execute() checks before asking: the branch is at the audited snapshot
    commit_to_branch(hook, T, "b", 500, 1)  # someone writes to the branch while the question waits
    refused(
        hook, SimpleNamespace(execute=lambda ctx: gate.execute_complete(ctx, _answer())), "it moved after the audit"
    )
    assert approval_history(hook, T) == []  # no decision recorded
    refused(hook, publish(audit=audit), "Branch 'b' of db.orders moved after its audit")


def test_the_gate_needs_this_runs_audit(branch):
    hook, _, head = branch
    record_audit(hook, T, "b", head, event_id="ev-real", passed=False)
    refused(hook, _gate(), r"audit=None is not set, so no audit run is bound")
    theirs = record_audit(hook, T, "b", head, event_id="ev-theirs", dag_id="other_dag", passed=False)
    refused(hook, _gate(audit=theirs), "not by this run")
    forge(hook, head, event_id="ev-real")  # a second row for the bound run
    refused(hook, _gate(audit=audit_of(head, "ev-real")), "more than one row")


def test_the_gate_records_what_the_steward_was_shown(branch):
    hook, _, head = branch
    audit = record_audit(hook, T, "b", head, event_id="ev-real", passed=False)
    table, branch_name, snapshot, main, findings = _gate(audit=audit)._look(fake_context())
    assert (table, branch_name, snapshot) == (T, "b", head)
    assert findings.event_id == "ev-real" and findings.spec_hash == audit["spec_hash"]
    assert findings.warned == ("amount.min",) and findings.blocking == ()
    assert audit["spec_hash"] == audit_checks.spec_hash(audit_checks.parse_checks(AMOUNT_MIN))
