"""How an audit's outcome reads (pure, #20): completion line, failed checks, the readable table."""

from __future__ import annotations

from airflow_iceberg_provider.core.audit_report import (
    completion_line,
    failed_checks,
    failure_table,
    results_in_order,
)

ROWS = [
    {"check_name": "table.has_rows", "observed_value": 155.0, "condition": "COUNT(*) > 0", "passed": True},
    {"check_name": "amount.min", "observed_value": -31.0, "condition": ">= 0", "passed": False},
    {"check_name": "order_id.unique_check", "observed_value": 5.0, "condition": "== 0", "passed": False},
    {"check_name": "amount.null_check", "observed_value": None, "condition": "== 0", "passed": 0},
]


def test_completion_line_never_says_succeeded():
    assert completion_line(11, 2) == "audit completed: 2 of 11 checks failed"
    assert completion_line(11, 0) == "audit completed: all 11 checks passed"
    assert completion_line(1, 1) == "audit completed: 1 of 1 check failed"


def test_results_follow_the_given_check_order_and_failed_checks_name_observed_and_expected():
    results = results_in_order(ROWS, ["amount.null_check", "amount.min", "order_id.unique_check", "table.has_rows"])
    assert [r["check"] for r in results] == [
        "amount.null_check",
        "amount.min",
        "order_id.unique_check",
        "table.has_rows",
    ]
    assert results[0] == {"check": "amount.null_check", "observed": None, "condition": "== 0", "passed": False}
    assert failed_checks(results) == [
        {"check": "amount.null_check", "observed": None, "expected": "== 0"},
        {"check": "amount.min", "observed": -31.0, "expected": ">= 0"},
        {"check": "order_id.unique_check", "observed": 5.0, "expected": "== 0"},
    ]


def test_failure_table_is_aligned_and_lists_only_failed_checks():
    table = failure_table(results_in_order(ROWS, []))
    lines = table.splitlines()
    assert lines[0].split(" | ") == ["check                ", "observed", "expected"]
    assert set(lines[1]) == {"-", "+"} and len(lines) == 5
    assert "order_id.unique_check | 5        | == 0" in lines
    assert "amount.min            | -31      | >= 0" in lines
    assert "amount.null_check     | NULL     | == 0" in lines
    assert "table.has_rows" not in table
    assert len({line.index("|") for line in lines if "|" in line}) == 1, "columns line up"
    assert failure_table(results_in_order(ROWS[:1], [])) == ""
    # a value beyond float64's exact integers is printed as it is, not as a rounded integer
    big = results_in_order([{**ROWS[1], "observed_value": 2.0**60}], [])
    assert str(2.0**60) in failure_table(big)
