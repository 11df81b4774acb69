"""Pure logic of refs and commit sensors: durations, timestamps, legal-hold names, commit selection."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pendulum
import pytest

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.models import SnapshotInfo
from airflow_iceberg_provider.params import instant_ms as timestamp_ms
from airflow_iceberg_provider.params import operation as validate_operation
from airflow_iceberg_provider.params import positive_int
from airflow_iceberg_provider.params import retention_ms as duration_ms
from airflow_iceberg_provider.rules.refs import legal_hold_tag_name, select_new_commit, validate_summary

DAY_MS = 86_400_000


@pytest.mark.parametrize(
    "value, expected",
    [
        (timedelta(days=1), DAY_MS),
        (pendulum.duration(days=30), 30 * DAY_MS),
        ("P30D", 30 * DAY_MS),
        ("PT12H", DAY_MS // 2),
        ("P1M", 30 * DAY_MS),
        (5000, 5000),
        ("5000", 5000),
        (None, None),
        ("", None),
    ],
)
def test_duration_ms_accepts_durations(value, expected):
    assert duration_ms(value, "max_ref_age") == expected


@pytest.mark.parametrize("value", [timedelta(0), timedelta(days=-1), 0, -5, "-5", "P0D", pendulum.duration(seconds=-3)])
def test_duration_ms_refuses_zero_and_negative(value):
    with pytest.raises(IcebergValidationError, match="max_ref_age=.*must be positive"):
        duration_ms(value, "max_ref_age")


@pytest.mark.parametrize("value", ["thirty days", "2026-01-01", True, [1], 1.5j])
def test_duration_ms_refuses_non_durations(value):
    with pytest.raises(IcebergValidationError, match="max_ref_age"):
        duration_ms(value, "max_ref_age")


def test_timestamp_ms_forms():
    dt = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    ms = int(dt.timestamp() * 1000)
    assert timestamp_ms(dt, "t") == ms
    assert timestamp_ms(dt.replace(tzinfo=None), "t") == ms  # naive = UTC
    assert timestamp_ms(pendulum.datetime(2026, 1, 2, 3, 4, 5), "t") == ms
    assert timestamp_ms("2026-01-02T03:04:05Z", "t") == ms
    assert timestamp_ms("2026-01-02T04:04:05+01:00", "t") == ms
    assert timestamp_ms(str(ms), "t") == ms
    assert timestamp_ms(ms, "t") == ms
    assert timestamp_ms(None, "t") is None
    with pytest.raises(IcebergValidationError, match="to_timestamp='yesterday'"):
        timestamp_ms("yesterday", "to_timestamp")
    with pytest.raises(IcebergValidationError, match="before 1970"):
        timestamp_ms(-1, "t")


def test_positive_int_and_operation_and_summary():
    assert positive_int("3", "n") == 3 and positive_int(None, "n") is None
    for bad in (0, -1, "x", True, 1.5):
        with pytest.raises(IcebergValidationError, match="min_snapshots_to_keep"):
            positive_int(bad, "min_snapshots_to_keep")
    assert validate_operation("append") == "append" and validate_operation(None) is None
    with pytest.raises(IcebergValidationError, match="'merge' is not a snapshot operation"):
        validate_operation("merge")
    assert validate_summary({"wap.id": 42}) == {"wap.id": "42"}
    with pytest.raises(IcebergValidationError, match="not a mapping"):
        validate_summary("wap.id=1")


def test_legal_hold_tag_name_prefixes_once():
    assert legal_hold_tag_name("case-17") == "legal-hold-case-17"
    assert legal_hold_tag_name("legal-hold-case-17") == "legal-hold-case-17"


def _chain(*specs):
    """specs: (id, ts, op, summary)"""
    out, parent = [], None
    for sid, ts, op, summary in specs:
        out.append(SnapshotInfo(snapshot_id=sid, parent_id=parent, timestamp_ms=ts, operation=op, summary=summary))
        parent = sid
    return out


CHAIN = _chain(
    (1, 100, "append", {}),
    (2, 200, "append", {"wap.id": "a"}),
    (3, 300, "delete", {}),
    (4, 400, "append", {"wap.id": "b"}),
)


def test_select_new_commit_after_snapshot():
    snap, n = select_new_commit(CHAIN, after_snapshot_id=2)
    assert (snap.snapshot_id, n) == (4, 2)
    assert select_new_commit(CHAIN, after_snapshot_id=4) == (None, 0)  # head: nothing newer


def test_select_new_commit_filters():
    snap, n = select_new_commit(CHAIN, after_snapshot_id=1, operation="delete")
    assert (snap.snapshot_id, n) == (3, 1)
    snap, n = select_new_commit(CHAIN, summary={"wap.id": "a"})
    assert (snap.snapshot_id, n) == (2, 1)
    assert select_new_commit(CHAIN, after_snapshot_id=2, summary={"wap.id": "a"}) == (None, 0)


def test_select_new_commit_after_timestamp():
    snap, n = select_new_commit(CHAIN, after_timestamp_ms=300)  # strictly newer
    assert (snap.snapshot_id, n) == (4, 1)
    assert select_new_commit(CHAIN, after_timestamp_ms=400) == (None, 0)


def test_select_new_commit_baseline_not_in_history_falls_back_to_time():
    # the ref was rolled back past snapshot 99 (committed at 250): only later commits count
    snap, n = select_new_commit(CHAIN, after_snapshot_id=99, after_timestamp_ms=250)
    assert (snap.snapshot_id, n) == (4, 2)


def test_select_new_commit_without_baseline_takes_newest_matching():
    snap, n = select_new_commit(CHAIN, operation="append")
    assert (snap.snapshot_id, n) == (4, 3)
    assert select_new_commit([], operation="append") == (None, 0)


def test_tag_retention_pins_holds_and_refuses_an_age_for_them():
    from airflow_iceberg_provider.core.governance import LEGAL_HOLD_MAX_REF_AGE_MS
    from airflow_iceberg_provider.rules.refs import tag_retention

    assert tag_retention("eod-1", None) is None
    assert tag_retention("eod-1", 5000) == 5000
    assert tag_retention("legal-hold-c1", None) == LEGAL_HOLD_MAX_REF_AGE_MS == 2**63 - 1  # Java Long.MAX_VALUE
    assert tag_retention("legal-hold-c1", LEGAL_HOLD_MAX_REF_AGE_MS) == LEGAL_HOLD_MAX_REF_AGE_MS
    with pytest.raises(IcebergValidationError, match="max_ref_age_ms=5000 for legal hold 'legal-hold-c1'"):
        tag_retention("legal-hold-c1", 5000)


def test_holds_dropped_by_age_mirrors_iceberg_ref_expiry():
    from airflow_iceberg_provider.spark_jobs.maintenance_sql import holds_dropped_by_age

    refs = [
        {"name": "main", "type": "branch", "snapshot_id": 1, "max_ref_age_ms": None},
        {"name": "legal-hold-old", "type": "tag", "snapshot_id": 1, "max_ref_age_ms": None},
        {"name": "legal-hold-pinned", "type": "TAG", "snapshot_id": 1, "max_ref_age_ms": 2**63 - 1},
        {"name": "legal-hold-own-age", "type": "tag", "snapshot_id": 2, "max_ref_age_ms": 10},
        {"name": "legal-hold-gone", "type": "tag", "snapshot_id": 99, "max_ref_age_ms": 2**63 - 1},
        {"name": "eod", "type": "tag", "snapshot_id": 1, "max_ref_age_ms": None},
    ]
    ts = {1: 1_000, 2: 5_000}
    assert holds_dropped_by_age(refs, ts, default_max_ref_age_ms=None, now_ms=5_005) == ["legal-hold-gone"]
    assert holds_dropped_by_age(refs, ts, default_max_ref_age_ms=100, now_ms=5_005) == [
        "legal-hold-gone",
        "legal-hold-old",
    ]
    assert holds_dropped_by_age(refs, ts, default_max_ref_age_ms=None, now_ms=5_011) == [
        "legal-hold-gone",
        "legal-hold-own-age",
    ]
