"""Pure rules of the two-phase erasure (#13): lifecycle, phases, deadlines, erasure-ready tables."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.rules import erasure as ep

V, INC, F = "verified", "incomplete", "failed"


@pytest.mark.parametrize(
    ("current", "phase", "outcome", "expected"),
    [
        ("pending", "logical", V, "logically_erased"),
        ("pending", "logical", F, "pending"),
        ("pending", "full", V, "erased"),
        ("pending", "full", INC, "blocked"),
        ("pending", "full", F, "pending"),
        ("logically_erased", "logical", V, "logically_erased"),  # re-run changes nothing
        ("logically_erased", "purge", V, "erased"),
        ("logically_erased", "purge", INC, "blocked"),
        ("logically_erased", "purge", F, "pending"),
        ("logically_erased", "full", V, "erased"),
        ("blocked", "purge", V, "erased"),
        ("blocked", "logical", V, "blocked"),  # a logical run does not lift a hold
        ("blocked", "full", INC, "blocked"),
        ("erased", "logical", V, "erased"),  # never moved back by a logical run
        ("erased", "purge", V, "erased"),
        ("erased", "full", V, "erased"),
        ("erased", "purge", F, "pending"),  # a failed physical re-verification reopens it
        ("logically_erased", "purge", None, "logically_erased"),
        ("erased", "logical", None, "erased"),
    ],
)
def test_transitions(current, phase, outcome, expected):
    assert lc.transition(current, phase, outcome) == expected


@pytest.mark.parametrize(
    ("current", "phase", "outcome", "match"),
    [
        ("pending", "purge", V, "run phase='logical' first"),
        ("pending", "compact", V, "unknown phase"),
        ("weird", "logical", V, "unknown request status"),
        ("done", "full", V, "unknown request status"),
        ("pending", "logical", "maybe", "unknown verification outcome"),
    ],
)
def test_refused_transitions(current, phase, outcome, match):
    with pytest.raises(lc.LifecycleRefusal, match=match):
        lc.transition(current, phase, outcome)


def test_combined_status_over_tables_in_scope():
    scope = ["db.a", "db.b"]
    cs = lc.combined_status
    assert cs("pending", {"db.a": ("logical", V)}, scope) == "pending"  # b not done yet
    assert cs("pending", {"db.a": ("logical", V), "db.b": ("logical", V)}, scope) == "logically_erased"
    assert cs("logically_erased", {"db.a": ("purge", V), "db.b": ("logical", V)}, scope) == "logically_erased"
    assert cs("logically_erased", {"db.a": ("purge", V), "db.b": ("full", V)}, scope) == "erased"
    assert cs("logically_erased", {"db.a": ("purge", INC), "db.b": ("purge", V)}, scope) == "blocked"
    assert cs("erased", {"db.a": ("purge", F), "db.b": ("purge", V)}, scope) == "pending"
    assert cs("logically_erased", {}, scope) == "logically_erased"
    assert cs("erased", {}, scope) == "erased"
    with pytest.raises(lc.LifecycleRefusal):
        cs("nonsense", {}, scope)


def test_evidence_phase_never_regresses():
    assert lc.merged_phase("purge", "logical") == "purge"
    assert lc.merged_phase("full", "logical") == "full"
    assert lc.merged_phase("logical", "purge") == "purge"
    assert lc.merged_phase(None, "logical") == "logical"


def test_phase_validation_and_input_statuses():
    for p in ("logical", "purge", "full"):
        assert ep.validate_phase(p) == p
    for bad in ("Logical", "physical", None, 1):
        with pytest.raises(IcebergValidationError, match="phase=.*is not an erasure phase; use 'logical'"):
            ep.validate_phase(bad)
    assert lc.PHASE_INPUT_STATUSES["purge"] == ("logically_erased", "blocked")
    assert lc.PHASE_INPUT_STATUSES["logical"] == ("pending",)


def test_purge_candidates():
    states = [
        {"request_id": "A", "status": "pending"},
        {"request_id": "B", "status": "logically_erased"},
        {"request_id": "C", "status": "erased"},
        {"request_id": "D", "status": "blocked"},
    ]
    assert ep.purge_candidates(states) == ["B", "D"]
    assert ep.purge_candidates(states, ["B", "A"]) == ["B"]
    with pytest.raises(IcebergValidationError, match="no logically erased request.*phase='logical' first"):
        ep.purge_candidates(states, ["A", "C"])
    with pytest.raises(IcebergValidationError, match="nothing to purge"):
        ep.purge_candidates([])


def test_deadlines_validation():
    lg, ph = ep.validate_deadlines(24, 30)
    assert lg == timedelta(hours=24) and ph == timedelta(days=30)
    assert ep.validate_deadlines("720", "30") == (timedelta(hours=720), timedelta(days=30))
    with pytest.raises(IcebergValidationError, match="logical_deadline_hours=721 is longer than the physical"):
        ep.validate_deadlines(721, 30)
    for bad in (0, -1, "x", float("nan"), True):
        with pytest.raises(IcebergValidationError, match="logical_deadline_hours"):
            ep.validate_deadlines(bad, 30)
        with pytest.raises(IcebergValidationError, match="deadline_days"):
            ep.validate_deadlines(1, bad)


def test_deadline_report_names_requests_at_risk_of_either_deadline():
    now = datetime(2026, 3, 1, tzinfo=UTC)
    rows = [
        {"request_id": "late-logical", "status": "pending", "received_at": now - timedelta(hours=30)},
        {"request_id": "near-logical", "status": "pending", "received_at": now - timedelta(hours=20)},
        {"request_id": "fresh", "status": "pending", "received_at": now - timedelta(hours=1)},
        {"request_id": "late-physical", "status": "logically_erased", "received_at": now - timedelta(days=31)},
        {"request_id": "near-physical", "status": "logically_erased", "received_at": now - timedelta(days=25)},
        {"request_id": "ok-physical", "status": "logically_erased", "received_at": now - timedelta(days=2)},
        {"request_id": "erased-old", "status": "erased", "received_at": now - timedelta(days=90)},
        {"request_id": "redacted-old", "status": "redacted", "received_at": now - timedelta(days=90)},
        {"request_id": "blocked-old", "status": "blocked", "received_at": now - timedelta(days=40)},
    ]
    r = ep.deadline_report(rows, now=now, logical=timedelta(hours=24), physical=timedelta(days=30))
    ids = {k: [x["request_id"] for x in v] for k, v in r.items()}
    assert ids["logical_overdue"] == ["blocked-old", "late-logical"]
    assert ids["logical_at_risk"] == ["near-logical"]
    assert ids["physical_overdue"] == ["blocked-old", "late-physical"]
    assert ids["physical_at_risk"] == ["near-physical"]


def test_erasure_ready_properties_and_bloom_warnings():
    props = ep.erasure_ready_properties(["customer_id", "email"])
    assert props["write.parquet.bloom-filter-enabled.column.customer_id"] == "true"
    assert props["write.parquet.bloom-filter-fpp.column.email"] == "0.01"
    assert props["write.metadata.metrics.column.email"] == "none"
    assert ep.erasure_ready_properties("id", keep_bounds=True)["write.metadata.metrics.column.id"] == "full"
    with pytest.raises(IcebergValidationError, match="fpp"):
        ep.erasure_ready_properties("id", fpp=2)
    assert ep.bloom_filter_warnings("db.t", ["customer_id", "email"], props) == []
    warn = ep.bloom_filter_warnings("db.t", ["customer_id", "other"], props)
    assert len(warn) == 1 and "'other' has no Parquet bloom filter" in warn[0]
