"""Audit check specs: validation, verdicts and the single-pass SQL (pure; no Spark).

The SQL builder's output is executed against a real SQLite table (SQLite accepts the
same backtick quoting, CASE, COUNT(DISTINCT ...) and CAST(... AS DOUBLE)), so the
single-pass query is checked to give the same values as one query per check.
"""

from __future__ import annotations

import sqlite3

import pytest

from airflow_iceberg_provider.spark_jobs import audit_checks as ac

COLUMN_MAPPING = {
    "amount": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}, "max": {"less_than": 1000, "tolerance": 0.1}},
    "order_id": {"unique_check": {"equal_to": 0}, "distinct_check": {"geq_to": 1}},
    "region": {"null_check": {"equal_to": 0, "partition_clause": "amount > 2"}},
}
TABLE_CHECKS = {
    "has_rows": {"check_statement": "COUNT(*) > 0"},
    "positive_ca": {"check_statement": "amount >= 0", "partition_clause": "region = 'ca'"},
    "ca_rows": {"check_statement": "COUNT(*) >= 2", "partition_clause": "region = 'ca'"},
}


def test_parse_valid_spec_names_every_check():
    checks = ac.parse_checks(COLUMN_MAPPING, TABLE_CHECKS, {"added_rows": {"min": 1, "max": 10}})
    names = [c.name for c in checks]
    assert names == [
        "amount.null_check",
        "amount.min",
        "amount.max",
        "order_id.unique_check",
        "order_id.distinct_check",
        "region.null_check",
        "table.has_rows",
        "table.positive_ca",
        "table.ca_rows",
        "change.added_rows",
    ]
    change = checks[-1]
    assert change.condition == {"geq_to": 1.0, "leq_to": 10.0}
    assert ac.Check.from_dict(change.to_dict()) == change


@pytest.mark.parametrize(
    ("column_mapping", "table_checks", "change_checks", "message"),
    [
        ({"amount": {"nul_check": {"equal_to": 0}}}, None, None, "unknown column check 'nul_check'"),
        ({"amount": {"min": {"greater_or_equal": 0}}}, None, None, "unknown key(s) ['greater_or_equal']"),
        ({"amount": {"min": {"geq_to": "zero"}}}, None, None, "is not a number"),
        ({"amount": {"min": {"geq_to": True}}}, None, None, "is not a number"),
        ({"amount": {"min": {"geq_to": float("nan")}}}, None, None, "not a finite number"),
        ({"amount": {"min": {"tolerance": 0.1}}}, None, None, "has no comparison"),
        ({"amount": {"min": {"geq_to": 5, "leq_to": 1}}}, None, None, "no value could pass"),
        ({"amount": {"min": {"greater_than": 1, "less_than": 1}}}, None, None, "no value could pass"),
        ({"amount": {"min": {"geq_to": 1, "equal_to": 2}}}, None, None, "combines equal_to"),
        ({"amount": {"min": {"geq_to": 1, "tolerance": -1}}}, None, None, "must be >= 0"),
        ({"amount) FROM x; --": {"min": {"geq_to": 0}}}, None, None, "not a valid column name"),
        ({"amount": []}, None, None, "must be a mapping"),
        (None, {"t": {"statement": "COUNT(*) > 0"}}, None, "expected keys 'check_statement'"),
        (None, {"t": {"check_statement": "1=1; DROP TABLE x"}}, None, "contains ';'"),
        (None, {"t": {"check_statement": "COUNT(*) > 0", "partition_clause": "1=1 -- x"}}, None, "contains '--'"),
        (None, {"t": {"check_statement": "(DELETE FROM x) IS NULL"}}, None, "contains 'DELETE'"),
        (None, {"bad name": {"check_statement": "COUNT(*) > 0"}}, None, "check name must match"),
        (None, None, {"added_cols": {"min": 1}}, "unknown change check 'added_cols'"),
        (None, None, {"added_rows": {"minimum": 1}}, "unknown key(s) ['minimum']"),
        (None, None, {"added_rows": {"min": 1, "geq_to": 2}}, "gives 'geq_to' twice"),
        (None, None, None, "No audit checks given"),
    ],
)
def test_invalid_specs_are_refused_with_a_clear_message(column_mapping, table_checks, change_checks, message):
    with pytest.raises(ac.CheckSpecError) as err:
        ac.parse_checks(column_mapping, table_checks, change_checks)
    assert message in str(err.value)


def test_numeric_strings_are_accepted_as_thresholds():
    (check,) = ac.parse_checks({"amount": {"min": {"geq_to": "0.5"}}})
    assert check.condition == {"geq_to": 0.5}


@pytest.mark.parametrize(
    ("condition", "tolerance", "observed", "passed"),
    [
        ({"equal_to": 0}, None, 0, True),
        ({"equal_to": 0}, None, 1, False),
        ({"geq_to": 0}, None, -0.01, False),
        ({"greater_than": 0}, None, 0, False),
        ({"less_than": 10, "geq_to": 5}, None, 10, False),
        ({"leq_to": 10, "geq_to": 5}, None, 10, True),
        ({"equal_to": 100}, 0.1, 109, True),
        ({"equal_to": 100}, 0.1, 111, False),
        ({"equal_to": -100}, 0.1, -109, True),  # tolerance widens outward for negatives too
        ({"geq_to": 100}, 0.1, 91, True),
        ({"less_than": 100}, 0.1, 109, True),
    ],
)
def test_verdicts_follow_common_sql_semantics(condition, tolerance, observed, passed):
    check = ac.Check(name="x", kind="column", check_type="min", column="a", condition=condition, tolerance=tolerance)
    assert check.evaluate(observed) is passed


def test_none_counts_as_zero_only_when_accepted():
    accepted = ac.Check(name="x", kind="column", check_type="min", column="a", condition={"equal_to": 0})
    assert accepted.evaluate(None) is True
    strict = ac.Check(
        name="x", kind="column", check_type="min", column="a", condition={"equal_to": 0}, accept_none=False
    )
    assert strict.evaluate(None) is False


def test_describe_expands_tolerance_and_partition():
    (check,) = ac.parse_checks({"amount": {"max": {"equal_to": 50, "tolerance": 0.1, "partition_clause": "x = 1"}}})
    assert check.describe() == ">= 45, <= 55 WHERE x = 1"


def test_operator_level_partition_clause_is_combined():
    checks = ac.parse_checks(
        {"amount": {"min": {"geq_to": 0, "partition_clause": "region = 'ca'"}, "max": {"leq_to": 9}}},
        partition_clause="amount IS NOT NULL",
    )
    assert checks[0].partition_clause == "(amount IS NOT NULL) AND (region = 'ca')"
    assert checks[1].partition_clause == "amount IS NOT NULL"


def test_result_rows_mark_skipped_checks_as_passed_and_say_why():
    checks = ac.parse_checks(change_checks={"added_rows_ratio": {"max": 3}, "added_rows": {"min": 5}})
    rows = ac.result_rows(checks, {"change.added_rows": 4}, {"change.added_rows_ratio": "no baseline"})
    assert rows[0]["passed"] is True and "skipped: no baseline" in rows[0]["condition"]
    assert rows[1] == {
        "check_name": "change.added_rows",
        "check_type": "added_rows",
        "column_name": None,
        "observed_value": 4.0,
        "condition": ">= 5",
        "passed": False,
    }


# --------------------------------------------------------------- SQL on a real engine
ROWS = [
    (1, "ca", 1.0),
    (2, "ca", 5.0),
    (2, "us", -3.0),  # duplicate id, negative amount outside 'ca'
    (3, None, 7.0),
    (4, "eu", None),
]


@pytest.fixture
def db():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (order_id INTEGER, region TEXT, amount REAL)")
    conn.executemany("INSERT INTO t VALUES (?, ?, ?)", ROWS)
    yield conn
    conn.close()


def _modes(checks):
    # what the Spark job's analyser decides: aggregate statements contain an aggregate call
    return {c.name: ac.AGGREGATE if "COUNT(" in (c.statement or "") else ac.ROW for c in checks if c.kind == "table"}


def _run(conn, queries):
    out = {}
    for q in queries:
        row = conn.execute(q.sql).fetchone()
        out.update({name: row[i] for i, (_, name) in enumerate(q.columns)})
    return out


def test_single_pass_query_matches_one_query_per_check(db):
    checks = ac.parse_checks(COLUMN_MAPPING, TABLE_CHECKS)
    modes = _modes(checks)
    single = ac.build_audit_queries(checks, "t", modes)
    # one scan for the shuffle-free checks, one for the exact distinct counts, one filtered
    assert [[n for _, n in q.columns] for q in single] == [
        [
            "amount.null_check",
            "amount.min",
            "amount.max",
            "region.null_check",
            "table.has_rows",
            "table.positive_ca",
        ],
        ["order_id.unique_check", "order_id.distinct_check"],
        ["table.ca_rows"],
    ]
    assert "DISTINCT" not in single[0].sql and single[2].sql.endswith("WHERE region = 'ca'")
    separate = ac.build_separate_queries(checks, "t", modes)
    assert len(separate) == len(checks)
    assert _run(db, single) == _run(db, separate)
    values = _run(db, single)
    assert values == {
        "amount.null_check": 1.0,
        "amount.min": -3.0,
        "amount.max": 7.0,
        "order_id.unique_check": 1.0,
        "order_id.distinct_check": 4.0,
        "region.null_check": 1.0,  # the NULL region row has amount 7 > 2
        "table.has_rows": 1.0,
        "table.positive_ca": 1.0,  # the negative amount is in 'us'
        "table.ca_rows": 1.0,
    }
    verdicts = {r["check_name"]: r["passed"] for r in ac.result_rows(checks, values)}
    assert [k for k, ok in verdicts.items() if not ok] == [
        "amount.null_check",
        "amount.min",
        "order_id.unique_check",
        "region.null_check",
    ]


def test_row_predicate_fails_when_any_row_fails(db):
    checks = ac.parse_checks(table_checks={"all_positive": {"check_statement": "amount >= 0"}})
    values = _run(db, ac.build_audit_queries(checks, "t", {"table.all_positive": ac.ROW}))
    assert values == {"table.all_positive": 0.0}


def test_sort_based_distinct_counts_equal_count_distinct(db):
    db.executemany(
        "INSERT INTO t VALUES (?, ?, ?)", [(5, "ca", 1.0), (5, "ca", 2.0), (5, "us", 3.0), (None, "ca", 1.0)]
    )
    checks = ac.parse_checks(
        {
            "order_id": {
                "unique_check": {"equal_to": 0},
                "distinct_check": {"geq_to": 1},
                "max": {"leq_to": 9},
            },
            "region": {
                "distinct_check": {"equal_to": 3},
                "unique_check": {"equal_to": 0, "partition_clause": "amount > 2"},
            },
            "amount": {"unique_check": {"equal_to": 0, "partition_clause": "region = 'ca'"}},
        }
    )
    hashed = ac.build_audit_queries(checks, "t")
    sorted_ = ac.build_audit_queries(checks, "t", bucket_expr="abs(length(CAST({v} AS TEXT))) % 3")
    assert len(sorted_) == 2 and "LAG(v0) OVER (PARTITION BY" in sorted_[1].sql and "DISTINCT" not in sorted_[1].sql
    values = _run(db, sorted_)
    assert values == _run(db, hashed)
    assert values["order_id.unique_check"] == 3.0  # 2 twice, 5 three times; NULLs never count
    assert values["order_id.distinct_check"] == 5.0
    assert values["amount.unique_check"] == 2.0  # 1.0 three times in 'ca'
