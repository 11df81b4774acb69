from __future__ import annotations

import pytest

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.params import (
    branch_name_for_run,
    validate_name,
    validate_ref,
    validate_snapshot_id,
    validate_table,
)


@pytest.mark.parametrize("value", ["db.orders", "_a.b_1", "A1.Z9"])
def test_valid_tables(value):
    ident = validate_table(value)
    assert ident.dotted == value
    assert ident.quoted("cat") == "`cat`." + ".".join(f"`{p}`" for p in value.split("."))


@pytest.mark.parametrize(
    "value",
    [
        "orders",
        "a.b.c",
        "db.`orders`",
        "db.orders;drop",
        "db.or ders",
        "db.orders--",
        "db.ordеrs",  # Cyrillic e
        "",
        ".x",
        "1db.x",
        "db." + "x" * 200,
        None,
        42,
    ],
)
def test_invalid_tables_name_param_and_form(value):
    with pytest.raises(IcebergValidationError) as err:
        validate_table(value, "table")
    text = str(err.value)
    assert "table=" in text
    assert "namespace.table" in text


@pytest.mark.parametrize("value", ["main", "wap_x", "release-1.2", "eod_20260101"])
def test_valid_refs(value):
    assert validate_ref(value) == value


@pytest.mark.parametrize("value", ["", "-x", "a b", "x;y", "x'y", "x`", "ü", "x" * 200])
def test_invalid_refs(value):
    with pytest.raises(IcebergValidationError, match="ref="):
        validate_ref(value)


@pytest.mark.parametrize("value", ["main", "MAIN"])
def test_main_refused_when_asked(value):
    with pytest.raises(IcebergValidationError, match="main branch"):
        validate_ref(value, "branch", allow_main=False)


def test_snapshot_ids():
    assert validate_snapshot_id("123") == 123
    assert validate_snapshot_id(5) == 5
    for bad in ("abc", 1.5, True, None, "1; drop"):
        with pytest.raises(IcebergValidationError, match="snapshot_id="):
            validate_snapshot_id(bad)


def test_names():
    assert validate_name("amount", "column") == "amount"
    with pytest.raises(IcebergValidationError, match="column="):
        validate_name("amount) OR 1=1 --", "column")


def test_branch_name_for_run_is_deterministic_and_valid():
    a = branch_name_for_run("my-dag", "manual__2026-01-01T00:00:00+00:00")
    b = branch_name_for_run("my-dag", "manual__2026-01-01T00:00:00+00:00")
    c = branch_name_for_run("my-dag", "manual__2026-01-02T00:00:00+00:00")
    assert a == b != c
    assert validate_ref(a) == a
    assert len(a) <= 128
