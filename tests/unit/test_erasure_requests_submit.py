"""Submitting erasure requests: ``GovernanceStore.submit_erasure_requests`` (``hook.governance``) and
``erasure_policy.new_request_rows`` (the pure rule). Pyiceberg + SQLite catalog, no Spark."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.rules.erasure import new_request_rows

WHEN = datetime(2026, 11, 1, tzinfo=UTC)


def test_rows_are_pending_and_keys_exact():
    rows = new_request_rows({"REQ-1": " Alice@Example.com ", "REQ-2": "zoë"}, received_at=WHEN)
    assert [(r["request_id"], r["subject_key"], r["status"]) for r in rows] == [
        ("REQ-1", " Alice@Example.com ", "pending"),  # taken exactly: matching is exact
        ("REQ-2", "zoë", "pending"),
    ]
    assert {r["received_at"] for r in rows} == {WHEN}
    assert all(r["updated_at"] is None and r["completed_at"] is None for r in rows)


def test_known_ids_are_skipped():
    rows = new_request_rows({"REQ-1": "a", "REQ-2": "b"}, received_at=WHEN, known=["REQ-1"])
    assert [r["request_id"] for r in rows] == ["REQ-2"]


@pytest.mark.parametrize(
    ("requests", "fragment"),
    [
        ({}, "non-empty mapping"),
        (["REQ-1"], "non-empty mapping"),
        ({"alice@example.com": "x"}, "not a valid request id"),
        ({"REQ-1": ""}, "requests['REQ-1'] has no subject key"),
        ({"REQ-1": None}, "requests['REQ-1'] has no subject key"),
        ({"REQ-1": 42}, "got int"),
    ],
)
def test_bad_requests_are_refused_without_the_key(requests, fragment):
    with pytest.raises(IcebergValidationError) as err:
        new_request_rows(requests, received_at=WHEN)
    assert fragment in str(err.value)
    assert "alice@example.com" not in str(err.value)  # not even an id that looks like personal data is echoed


def test_naive_received_at_is_refused():
    with pytest.raises(IcebergValidationError, match="received_at has no time zone"):
        new_request_rows({"REQ-1": "a"}, received_at=datetime(2026, 11, 1))


def test_submit_is_idempotent_and_never_logs_keys(lake, caplog):
    caplog.set_level(logging.DEBUG)
    secret = "subject-" + "x" * 20 + "@example.org"
    added = lake.governance.submit_erasure_requests("gov.requests", {"REQ-1": secret, "REQ-2": "bob"})
    assert added == ["REQ-1", "REQ-2"]
    before = lake.load_table("gov.requests").metadata_location
    assert lake.governance.submit_erasure_requests("gov.requests", {"REQ-1": secret}) == []  # re-run adds nothing
    assert lake.load_table("gov.requests").metadata_location == before
    states = {r["request_id"]: r["status"] for r in lake.governance.erasure_request_states("gov.requests")}
    assert states == {"REQ-1": "pending", "REQ-2": "pending"}
    rows = lake.load_table("gov.requests").scan().to_arrow().to_pylist()
    assert {r["request_id"]: r["subject_key"] for r in rows} == {"REQ-1": secret, "REQ-2": "bob"}
    assert all(r["received_at"] > datetime.now(UTC) - timedelta(minutes=5) for r in rows)
    assert secret not in caplog.text


def test_bad_submit_changes_nothing(lake):
    lake.governance.submit_erasure_requests("gov.requests", {"REQ-1": "a"})
    before = lake.load_table("gov.requests").metadata_location
    with pytest.raises(IcebergValidationError, match="has no subject key"):
        lake.governance.submit_erasure_requests("gov.requests", {"REQ-2": "b", "REQ-3": ""})
    assert lake.load_table("gov.requests").metadata_location == before
