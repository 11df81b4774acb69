"""The verdict bound to its own run, as pure rules (no catalog): which audit rows a publish may take.

:func:`~airflow_iceberg_provider.rules.wap_refs.read_verdict` reads exactly the audit run a publish is
bound to; :func:`~airflow_iceberg_provider.rules.wap_refs.publish_verdict` decides whether it lets the
publish through; :func:`~airflow_iceberg_provider.rules.approval.waived_checks` which steward decision
counts. Every refusal names the parameter, the problem and the fix.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from airflow_iceberg_provider.core import audit_checks
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.params import AuditBinding, audit_binding
from airflow_iceberg_provider.rules import approval
from airflow_iceberg_provider.rules.wap_refs import CLOCK_SKEW, Verdict, publish_verdict, read_verdict

T, SNAP, DAG, RUN = "db.orders", 7, "daily", "scheduled__2026-12-01"
NOW = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)
SPEC = {"amount": {"min": {"geq_to": 0}, "null_check": {"equal_to": 0}}}
CHECKS = audit_checks.parse_checks(SPEC)
HASHES = {c.name: audit_checks.check_hash(c) for c in CHECKS}
DIGEST = audit_checks.spec_hash_of(HASHES)
BINDING = AuditBinding("ev1", DIGEST, SNAP)


def rows(**change: Any) -> list[dict[str, Any]]:
    """The rows the audit job writes for BINDING (one per check), with ``change`` applied to each."""
    out = []
    for c in CHECKS:
        row = {
            "event_id": "ev1",
            "table_name": T,
            "snapshot_id": SNAP,
            "dag_id": DAG,
            "run_id": RUN,
            "check_name": c.name,
            "check_hash": HASHES[c.name],
            "spec_hash": DIGEST,
            "observed_value": 0.0,
            "condition": c.describe(),
            "passed": True,
            "evaluated_at": NOW - timedelta(minutes=1),
        }
        out.append({**row, **change})
    return out


def read(found: list[dict[str, Any]], binding: AuditBinding | None = BINDING, **kw: Any) -> Verdict:
    args: dict[str, Any] = {"table": T, "snapshot_id": SNAP, "dag_id": DAG, "run_id": RUN, "now": NOW}
    return read_verdict(found, binding, where="governance.audit_results", **{**args, **kw})


# ---------------------------------------------------------------- the spec's identity
def test_check_and_spec_hashes_are_canonical_and_survive_the_job_spec():
    # the audit job gets the checks as JSON: the hash it computes equals the operator's
    shipped = [audit_checks.Check.from_dict(json.loads(json.dumps(c.to_dict()))) for c in CHECKS]
    assert audit_checks.spec_hash(shipped) == audit_checks.spec_hash(CHECKS) == DIGEST
    # the order the checks are given in does not matter; any change of a bound does
    assert audit_checks.spec_hash(list(reversed(CHECKS))) == DIGEST
    looser = audit_checks.parse_checks({"amount": {"min": {"geq_to": -1}, "null_check": {"equal_to": 0}}})
    assert audit_checks.spec_hash(looser) != DIGEST
    changed = {c.name for c in looser if audit_checks.check_hash(c) != HASHES[c.name]}
    assert changed == {"amount.min"}
    assert audit_checks.canonical_json({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert len(DIGEST) == 64 and int(DIGEST, 16) >= 0


def test_parse_check_spec_is_an_allowlist():
    assert [c.name for c in audit_checks.parse_check_spec({"column_mapping": SPEC})] == [c.name for c in CHECKS]
    with pytest.raises(audit_checks.CheckSpecError, match=r"unknown keys \['column_mappings'\]"):
        audit_checks.parse_check_spec({"column_mappings": SPEC})
    with pytest.raises(audit_checks.CheckSpecError, match="accept_none='yes' must be true or false"):
        audit_checks.parse_check_spec({"column_mapping": SPEC, "accept_none": "yes"})
    with pytest.raises(audit_checks.CheckSpecError, match="must be a mapping"):
        audit_checks.parse_check_spec(["amount"])  # type: ignore[arg-type]


# ---------------------------------------------------------------- the binding (XCom) converter
def test_audit_binding_reads_the_audit_result_or_its_json():
    result = {"audit_event_id": "ev1", "spec_hash": DIGEST, "snapshot_id": str(SNAP), "passed": True}
    assert audit_binding(result) == BINDING
    assert audit_binding(json.dumps(result)) == BINDING
    assert audit_binding(None) is None and audit_binding("None") is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"spec_hash": DIGEST, "snapshot_id": "7"}, "has no valid audit_event_id"),
        ({"audit_event_id": "ev 1; drop", "spec_hash": DIGEST, "snapshot_id": "7"}, "has no valid audit_event_id"),
        ({"audit_event_id": "ev1", "spec_hash": "abc", "snapshot_id": "7"}, "has no valid spec_hash"),
        ({"audit_event_id": "ev1", "spec_hash": DIGEST.upper(), "snapshot_id": "7"}, "has no valid spec_hash"),
        ({"audit_event_id": "ev1", "spec_hash": DIGEST}, r"audit\['snapshot_id'\]=None is not set"),
        ({"audit_event_id": "ev1", "spec_hash": DIGEST, "snapshot_id": 7.0}, "is a float"),
        ("{not json", "is not an audit task's result"),
        ([1, 2], "is not an audit task's result"),
        ("{{ ti.xcom_pull('audit') }}", "still holds a Jinja template"),
    ],
)
def test_audit_binding_refusals_name_the_parameter_and_the_fix(value, problem):
    with pytest.raises(IcebergValidationError, match=problem) as err:
        audit_binding(value)
    assert "audit" in str(err.value)


# ---------------------------------------------------------------- read_verdict
def test_the_bound_run_is_read():
    verdict = read(rows())
    assert verdict.binding == BINDING and verdict.check_hashes == HASHES and verdict.failed == ()
    publish_verdict(verdict, table=T, branch="b", required=HASHES)


def test_no_binding_refuses_whatever_rows_exist():
    with pytest.raises(IcebergRefusedError, match=r"audit=None is not set, so no audit run is bound") as err:
        read(rows(), None)
    assert "pass audit=<the audit task>.output" in str(err.value) and "Nothing was changed" in str(err.value)


def test_a_binding_to_another_snapshot_refuses():
    with pytest.raises(IcebergRefusedError, match="names snapshot 8, but the publish is of snapshot 7"):
        read(rows(snapshot_id=8), AuditBinding("ev1", DIGEST, 8))


def test_a_binding_without_rows_refuses():
    with pytest.raises(IcebergRefusedError, match="names an audit run with no rows in governance.audit_results"):
        read([])


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"dag_id": "other_dag"}, "was written by DAG 'other_dag' run 'scheduled__2026-12-01', not by this run"),
        ({"run_id": "manual__x"}, "run 'manual__x', not by this run"),
        ({"dag_id": None, "run_id": None}, "was written by DAG None run None"),
        ({"table_name": "db.other"}, "is of table 'db.other'"),
        ({"snapshot_id": 8}, "is of snapshot 8, not 7"),
        ({"spec_hash": "0" * 64}, "carries spec hash"),
        ({"check_hash": None}, "carries spec hash"),
        ({"evaluated_at": NOW + CLOCK_SKEW + timedelta(seconds=1)}, "in the future"),
        ({"evaluated_at": datetime(2999, 1, 1, tzinfo=UTC)}, "dated 2999-01-01"),
        ({"evaluated_at": None}, "no time zone aware evaluated_at"),
    ],
)
def test_a_row_that_is_not_the_bound_runs_refuses(change, problem):
    with pytest.raises(IcebergRefusedError, match=problem) as err:
        read(rows(**change))
    assert str(err.value).startswith("audit={audit_event_id: ev1, snapshot_id: 7} is contradicted by a row")
    assert "re-run the audit" in str(err.value)


def test_a_clock_a_little_ahead_is_tolerated():
    read(rows(evaluated_at=NOW + CLOCK_SKEW))


def test_a_forged_row_under_the_bound_event_id_refuses():
    # the forger knows the event id and the spec hash (both are in XCom) and appends a passing copy
    forged = rows()
    forged.append({**forged[0], "passed": True, "observed_value": 5.0})
    with pytest.raises(IcebergRefusedError, match=r"more than one row for checks \['amount.min'\]"):
        read(forged)


def test_rows_of_another_spec_under_the_reported_hash_refuse():
    # a row claiming the reported spec hash but with a check of another definition
    other = audit_checks.parse_checks({"amount": {"min": {"geq_to": -100}}})[0]
    forged = [r for r in rows() if r["check_name"] != other.name]
    forged.append({**rows()[0], "check_name": other.name, "check_hash": audit_checks.check_hash(other)})
    with pytest.raises(IcebergRefusedError, match="checks were added, removed or changed"):
        read(forged)
    # a check removed from the run's rows (only the passing one kept)
    with pytest.raises(IcebergRefusedError, match="checks were added, removed or changed"):
        read(rows()[:1])


# ---------------------------------------------------------------- publish_verdict
def test_a_weaker_audit_refuses():
    weaker_checks = audit_checks.parse_checks({"amount": {"null_check": {"equal_to": 0}}})
    weaker = {c.name: audit_checks.check_hash(c) for c in weaker_checks}
    digest = audit_checks.spec_hash_of(weaker)
    found = [r for r in rows(spec_hash=digest) if r["check_name"] in weaker]
    verdict = read(found, AuditBinding("ev1", digest, SNAP))
    with pytest.raises(IcebergRefusedError, match=r"weaker than the publish requires: missing checks \['amount.min'\]"):
        publish_verdict(verdict, table=T, branch="b", required=HASHES)
    # the same names with a looser bound: "changed"
    looser = audit_checks.parse_checks({"amount": {"min": {"geq_to": -1}, "null_check": {"equal_to": 0}}})
    hashes = {c.name: audit_checks.check_hash(c) for c in looser}
    found = [{**r, "check_hash": hashes[r["check_name"]]} for r in rows(spec_hash=audit_checks.spec_hash_of(hashes))]
    verdict = read(found, AuditBinding("ev1", audit_checks.spec_hash_of(hashes), SNAP))
    with pytest.raises(IcebergRefusedError, match=r"another definition \['amount.min'\]") as err:
        publish_verdict(verdict, table=T, branch="b", required=HASHES)
    assert str(err.value).startswith("required_checks:") and "Nothing was changed" in str(err.value)
    # a stronger audit (the required checks and more) is fine
    publish_verdict(read(rows()), table=T, branch="b", required={"amount.min": HASHES["amount.min"]})


def test_failed_checks_refuse_unless_waived():
    found = rows()
    found[0] = {**found[0], "passed": False}
    verdict = read(found)
    name = found[0]["check_name"]
    with pytest.raises(IcebergRefusedError, match=rf"failed checks \['{name}'\], and no data steward accepted"):
        publish_verdict(verdict, table=T, branch="b")
    publish_verdict(verdict, table=T, branch="b", waived={name})


# ---------------------------------------------------------------- steward waivers
def decision(**change: Any) -> dict[str, Any]:
    base = {
        "gate": approval.WAP_PUBLISH,
        "decision": "publish",
        "decided_at": "2026-12-02T00:30:00+00:00",
        "audit_event_id": "ev1",
        "spec_hash": DIGEST,
        "snapshot_id": str(SNAP),
        "branch_head": str(SNAP),
        "dag_id": DAG,
        "run_id": RUN,
        "failed_checks": [{"check": "amount.min", "observed": -1.0, "expected": ">= 0"}],
        "waived": ["amount.min"],
    }
    return {**base, **change}


def waived(*decisions: dict[str, Any]) -> frozenset[str]:
    return approval.waived_checks(list(decisions), BINDING, dag_id=DAG, run_id=RUN)


def test_a_waiver_counts_only_for_the_same_audit_run_snapshot_and_dag_run():
    assert waived(decision()) == {"amount.min"}
    assert waived(decision(audit_event_id="ev0")) == set()  # an earlier audit's decision
    assert waived(decision(spec_hash="0" * 64)) == set()
    assert waived(decision(snapshot_id="8")) == set()  # another snapshot
    assert waived(decision(branch_head="9")) == set()  # the branch had moved when the steward answered
    assert waived(decision(run_id="manual__other")) == set()  # another DAG run
    assert waived(decision(dag_id="other")) == set()
    assert waived(decision(gate=approval.LEGAL_HOLD_RELEASE)) == set()
    assert waived(decision(decided_at=None)) == set()


def test_only_the_latest_decision_counts_and_only_what_was_shown():
    later_keep = decision(decision="keep", decided_at="2026-12-02T00:40:00+00:00", waived=[])
    assert waived(decision(), later_keep) == set()
    # a waiver naming a check the steward was not shown as failed waives nothing for it
    assert waived(decision(waived=["amount.min", "amount.null_check"])) == {"amount.min"}


def test_findings_are_those_of_the_bound_run():
    found = rows()
    found[0] = {**found[0], "passed": False, "observed_value": -1.0}
    findings = approval.audit_findings(read(found), ["amount.min"])
    assert findings.event_id == "ev1" and findings.spec_hash == DIGEST and findings.checks == 2
    assert findings.warned == ("amount.min",) and findings.blocking == ()
    assert approval.audit_findings(read(found), []).blocking == ("amount.min",)
