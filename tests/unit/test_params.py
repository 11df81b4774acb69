"""The parameter converters (airflow_iceberg_provider.params): accepts, refuses, and what the message says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pendulum
import pytest

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergValidationError

DAY_MS = 86_400_000
NOW = 1_800_000_000_000
T = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
T_MS = int(T.timestamp() * 1000)


# ------------------------------------------------------------------- the two rules
@pytest.mark.parametrize("value", [None, "", "  ", "None", " None\n", "null"])
def test_unset_rule_is_the_same_for_every_converter(value):
    assert params.is_unset(value)
    assert params.duration(value, "d") is None
    assert params.retention_ms(value, "d") is None
    assert params.instant_ms(value, "t") is None
    assert params.positive_int(value, "n") is None
    assert params.snapshot_id(value, "s") is None
    assert params.ref_name(value, "r", required=False) is None
    assert params.operation(value) is None


@pytest.mark.parametrize("value", [0, "none", "NONE", "nil", "0"])
def test_not_unset(value):
    assert not params.is_unset(value)


@pytest.mark.parametrize(
    "convert",
    [
        lambda v: params.duration(v, "the_param", required=True),
        lambda v: params.instant_ms(v, "the_param", required=True),
        lambda v: params.positive_int(v, "the_param", required=True),
        lambda v: params.snapshot_id(v, "the_param", required=True),
        lambda v: params.ref_name(v, "the_param"),
        lambda v: params.cutoff_ms(v, "the_param", now=NOW),
    ],
)
def test_required_unset_is_refused_by_name(convert):
    for value in (None, "None", ""):
        with pytest.raises(
            IcebergValidationError, match=r"^the_param=.* is not set, and this parameter is required; pass e\.g\. "
        ):
            convert(value)


@pytest.mark.parametrize(
    "convert",
    [
        lambda v: params.duration(v, "the_param"),
        lambda v: params.retention_ms(v, "the_param"),
        lambda v: params.instant_ms(v, "the_param"),
        lambda v: params.cutoff_ms(v, "the_param", now=NOW),
        lambda v: params.positive_int(v, "the_param"),
        lambda v: params.snapshot_id(v, "the_param"),
        lambda v: params.ref_name(v, "the_param"),
        lambda v: params.operation(v, "the_param"),
    ],
)
def test_unrendered_template_is_refused_by_name(convert):
    with pytest.raises(IcebergValidationError) as err:
        convert("{{ ti.xcom_pull(task_ids='x') }}")
    msg = str(err.value)
    assert msg.startswith('the_param="{{ ti.xcom_pull')
    assert "not rendered" in msg and "template_fields" in msg


def test_is_templated():
    assert params.is_templated("{{ ds }}") and not params.is_templated("P3D") and not params.is_templated(3)


# ------------------------------------------------------------------------ durations
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(hours=36), timedelta(hours=36)),
        (pendulum.duration(days=3), timedelta(days=3)),
        ("36h", timedelta(hours=36)),
        ("3d", timedelta(days=3)),
        ("3D", timedelta(days=3)),
        (" 90m ", timedelta(minutes=90)),
        ("1.5h", timedelta(minutes=90)),
        ("2w", timedelta(weeks=2)),
        ("500ms", timedelta(milliseconds=500)),
        ("0s", timedelta(0)),
        ("P3D", timedelta(days=3)),
        ("PT36H", timedelta(hours=36)),
        ("P1M", timedelta(days=30)),
        ("P1Y", timedelta(days=365)),
    ],
)
def test_duration_accepts_the_one_grammar(value, expected):
    assert params.duration(value, "x") == expected


def test_duration_bare_numbers_are_milliseconds_only_where_documented():
    assert params.duration(5000, "max_ref_age", bare_ms=True) == timedelta(seconds=5)
    assert params.duration("5000", "max_ref_age", bare_ms=True) == timedelta(seconds=5)
    for value in (5000, "5000", 1.5):
        with pytest.raises(
            IcebergValidationError, match=r"older_than_floor=.*is a number without a unit; give the unit"
        ):
            params.duration(value, "older_than_floor")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("3M", r"is ambiguous \('M': minutes or months\?\); write '3m' for minutes or 'P3M' for months"),
        ("soon", "is not a duration; pass a timedelta"),
        ("P", "is not a duration"),
        ("P99999999999999999999Y", "is not a duration"),  # pendulum overflows: refused, not a crash
        ("3 days ago", "is not a duration"),
        ("2026-01-01", "is a point in time, not a duration"),
        (True, "is not a duration"),
        ([1], "is not a duration"),
        (float("nan"), "is not a finite duration"),
    ],
)
def test_duration_refusals_name_param_problem_and_fix(value, problem):
    with pytest.raises(IcebergValidationError, match=rf"^older_than_floor=.* {problem}"):
        params.duration(value, "older_than_floor", bare_ms=isinstance(value, float))


def test_duration_overflow_is_refused_by_name():
    with pytest.raises(IcebergValidationError, match="older_than_floor=.*longer than a timedelta can hold"):
        params.duration("99999999999d", "older_than_floor")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(days=1), DAY_MS),
        ("P30D", 30 * DAY_MS),
        ("PT12H", DAY_MS // 2),
        (5000, 5000),
        ("5000", 5000),
        ("30d", 30 * DAY_MS),
    ],
)
def test_retention_ms_accepts(value, expected):
    assert params.retention_ms(value, "max_ref_age") == expected


@pytest.mark.parametrize("value", [timedelta(0), timedelta(days=-1), 0, -5, "-5", "P0D", "0s"])
def test_retention_ms_refuses_zero_and_negative(value):
    with pytest.raises(IcebergValidationError, match="max_ref_age=.*a retention must be positive; leave it unset"):
        params.retention_ms(value, "max_ref_age")


def test_retention_ms_refuses_beyond_java_long():
    with pytest.raises(IcebergValidationError, match=r"max_ref_age=.*more than Iceberg can store \(2\^63-1 ms\)"):
        params.retention_ms(10**30, "max_ref_age")


# ------------------------------------------------------------------------- instants
@pytest.mark.parametrize(
    "value",
    [
        T,
        T.replace(tzinfo=None),
        pendulum.datetime(2026, 1, 2, 3, 4, 5),
        "2026-01-02T03:04:05Z",
        "2026-01-02T04:04:05+01:00",
        "2026-01-02 03:04:05",
        T_MS,
        str(T_MS),
        float(T_MS),
    ],
)
def test_instant_ms_forms(value):
    assert params.instant_ms(value, "t") == T_MS


def test_instant_ms_date_only_is_midnight_utc():
    assert params.instant_ms("2026-01-02", "t") == int(datetime(2026, 1, 2, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("yesterday", "is not a timestamp; pass a datetime, an ISO-8601 timestamp"),
        ("2026-13-45T00:00:00Z", "is not a timestamp"),
        ("20260102", r"is too short for epoch milliseconds \(a count or a compact date\?\)"),
        ("7", "is too short for epoch milliseconds"),
        (-1, "before 1970; pass a real commit time"),
        (10**20, "after the year 9999"),
        (True, "is not a timestamp"),
        (float("inf"), "is not a timestamp"),
        ("2026-01-01'; DROP TABLE db.orders; --", "is not a timestamp"),
    ],
)
def test_instant_ms_refusals(value, problem):
    with pytest.raises(IcebergValidationError, match=rf"^to_timestamp=.* {problem}"):
        params.instant_ms(value, "to_timestamp")


def test_cutoff_durations_are_relative_and_instants_absolute():
    assert params.cutoff_ms(timedelta(days=1), "o", now=NOW) == NOW - DAY_MS
    assert params.cutoff_ms("7d", "o", now=NOW) == NOW - 7 * DAY_MS
    assert params.cutoff_ms("P7D", "o", now=NOW) == NOW - 7 * DAY_MS
    assert params.cutoff_ms(NOW - 5, "o", now=NOW) == NOW - 5
    assert params.cutoff_ms(str(NOW - 5), "o", now=NOW) == NOW - 5
    assert params.cutoff_ms(T, "o", now=NOW) == T_MS
    assert params.cutoff_ms("2026-01-02T03:04:05Z", "o", now=NOW) == T_MS
    with pytest.raises(IcebergValidationError, match="older_than=.*outside 1970..9999; pass a duration"):
        params.cutoff_ms("P100000D", "older_than", now=NOW)
    with pytest.raises(IcebergValidationError, match="older_than='yesterday-ish' is not a timestamp"):
        params.cutoff_ms("yesterday-ish", "older_than", now=NOW)


# ---------------------------------------------------------------- counts and ids
def test_positive_int():
    assert params.positive_int("3", "n") == 3 and params.positive_int(7, "n") == 7
    assert params.positive_int(2**40, "n", maximum=params.JAVA_LONG_MAX) == 2**40
    assert params.positive_int(0, "n", minimum=0) == 0
    for bad in (0, -1, "x", True, 1.5, "1.5", 2**31, "0"):
        with pytest.raises(
            IcebergValidationError,
            match=r"^min_snapshots_to_keep=.* is invalid: it must be a positive integer from 1 to 2\^31-1; pass e\.g\. 1",
        ):
            params.positive_int(bad, "min_snapshots_to_keep")
    with pytest.raises(IcebergValidationError, match="retain_last=0 .* Keep at least one."):
        params.positive_int(0, "retain_last", required=True, hint="Keep at least one.")


def test_snapshot_id():
    big = 3742192974030064337
    assert params.snapshot_id(big) == big and params.snapshot_id(str(big)) == big
    assert params.snapshot_id(f" {big}\n", "s") == big and params.snapshot_id(-5, "s") == -5
    with pytest.raises(
        IcebergValidationError, match="base_snapshot_id=3.74.* is a float, which has lost the id's low digits"
    ):
        params.snapshot_id(float(big), "base_snapshot_id")
    for bad in ("abc", True, [1], "12x"):
        with pytest.raises(IcebergValidationError, match="to_snapshot_id=.* is not a snapshot id; pass the integer id"):
            params.snapshot_id(bad, "to_snapshot_id")


def test_ref_name():
    assert params.ref_name("release-1.2", "tag") == "release-1.2"
    assert params.ref_name("main", "ref") == "main"
    with pytest.raises(IcebergValidationError, match="branch='main' names the main branch"):
        params.ref_name("main", "branch", allow_main=False)
    for bad in ("main\n", "x y", "-x", 7, "x'; DROP"):
        with pytest.raises(IcebergValidationError, match="tag=.* is not a valid ref name"):
            params.ref_name(bad, "tag")


def test_operations():
    assert params.SNAPSHOT_OPERATIONS == ("append", "overwrite", "delete", "replace")
    assert params.operation("append") == "append"
    with pytest.raises(IcebergValidationError, match="operation='merge' is not a snapshot operation; use one of"):
        params.operation("merge")
    assert params.operations(("append", "overwrite")) == ["append", "overwrite"]
    for bad in ((), ("merge",)):
        with pytest.raises(IcebergValidationError, match="expected_operations="):
            params.operations(bad)
