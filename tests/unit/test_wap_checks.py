"""Audit check specs: validation, verdicts and the single-pass SQL (pure; no Spark).

The SQL builder's output is executed against a real SQLite table (SQLite accepts the
same backtick quoting, CASE, COUNT(DISTINCT ...) and CAST(... AS DOUBLE)), so the
single-pass query is checked to give the same values as one query per check.
"""

from __future__ import annotations

import math
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.core import audit_checks as ck
from airflow_iceberg_provider.spark_jobs.audit import sql as ac

COLUMN_MAPPING = {
    "amount": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}, "max": {"less_than": 1000, "tolerance": 0.1}},
    "order_id": {"unique_check": {"equal_to": 0}, "distinct_check": {"geq_to": 1}},
    "region": {"null_check": {"equal_to": 0, "partition_clause": "amount > 2"}},
}
TABLE_CHECKS = {
    "has_rows": {"check_statement": "COUNT(*) > 0"},
    "positive_ca": {"check_statement": "amount >= 0", "partition_clause": "region = 'ca'"},
    "ca_rows": {"check_statement": "COUNT(*) >= 2", "partition_clause": "region = 'ca'"},
    "ca_mix": {"check_statement": "COUNT(*) >= 2 AND MAX(amount) < 100", "partition_clause": "region = 'ca'"},
}


def test_parse_valid_spec_names_every_check():
    checks = ck.parse_checks(COLUMN_MAPPING, TABLE_CHECKS, {"added_rows": {"min": 1, "max": 10}})
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
        "table.ca_mix",
        "change.added_rows",
    ]
    change = checks[-1]
    assert change.condition == {"geq_to": 1.0, "leq_to": 10.0}
    assert ck.Check.from_dict(change.to_dict()) == change


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
        (None, {"t": {"check_statement": "1=1; DROP TABLE x"}}, None, "';' at offset 3 would end the statement"),
        (
            None,
            {"t": {"check_statement": "COUNT(*) > 0", "partition_clause": "1=1 -- x"}},
            None,
            "'--' at offset 4 starts a comment",
        ),
        (None, {"t": {"check_statement": "(DELETE FROM x) IS NULL"}}, None, "is not one SQL expression"),
        (None, {"bad name": {"check_statement": "COUNT(*) > 0"}}, None, "check name must match"),
        (None, None, {"added_cols": {"min": 1}}, "unknown change check 'added_cols'"),
        (None, None, {"added_rows": {"minimum": 1}}, "unknown key(s) ['minimum']"),
        (None, None, {"added_rows": {"min": 1, "geq_to": 2}}, "gives 'geq_to' twice"),
        (None, None, None, "No audit checks given"),
    ],
)
def test_invalid_specs_are_refused_with_a_clear_message(column_mapping, table_checks, change_checks, message):
    with pytest.raises(ck.CheckSpecError) as err:
        ck.parse_checks(column_mapping, table_checks, change_checks)
    assert message in str(err.value)


def test_numeric_strings_are_accepted_as_thresholds():
    (check,) = ck.parse_checks({"amount": {"min": {"geq_to": "0.5"}}})
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
    check = ck.Check(name="x", kind="column", check_type="min", column="a", condition=condition, tolerance=tolerance)
    assert check.evaluate(observed) is passed


def test_none_counts_as_zero_only_when_accepted():
    accepted = ck.Check(name="x", kind="column", check_type="min", column="a", condition={"equal_to": 0})
    assert accepted.evaluate(None) is True
    strict = ck.Check(
        name="x", kind="column", check_type="min", column="a", condition={"equal_to": 0}, accept_none=False
    )
    assert strict.evaluate(None) is False


def test_describe_expands_tolerance_and_partition():
    (check,) = ck.parse_checks({"amount": {"max": {"equal_to": 50, "tolerance": 0.1, "partition_clause": "x = 1"}}})
    assert check.describe() == ">= 45, <= 55 WHERE x = 1"


def test_operator_level_partition_clause_is_combined():
    checks = ck.parse_checks(
        {"amount": {"min": {"geq_to": 0, "partition_clause": "region = 'ca'"}, "max": {"leq_to": 9}}},
        partition_clause="amount IS NOT NULL",
    )
    assert checks[0].partition_clause == "(amount IS NOT NULL) AND (region = 'ca')"
    assert checks[1].partition_clause == "amount IS NOT NULL"


def test_result_rows_mark_skipped_checks_as_passed_and_say_why():
    checks = ck.parse_checks(change_checks={"added_rows_ratio": {"max": 3}, "added_rows": {"min": 5}})
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
    return {c.name: ck.AGGREGATE if "COUNT(" in (c.statement or "") else ck.ROW for c in checks if c.kind == "table"}


def _run(conn, queries):
    out = {}
    for q in queries:
        row = conn.execute(q.sql).fetchone()
        out.update({name: row[i] for i, (_, name) in enumerate(q.columns)})
    return out


def test_single_pass_query_matches_one_query_per_check(db):
    checks = ck.parse_checks(COLUMN_MAPPING, TABLE_CHECKS)
    modes = _modes(checks)
    single = ac.build_audit_queries(checks, "t", modes)
    # one scan for the shuffle-free checks (single aggregates with a clause as conditional
    # aggregates), one for the exact distinct counts, one filtered for the general aggregate predicate
    assert [[n for _, n in q.columns] for q in single] == [
        [
            "amount.null_check",
            "amount.min",
            "amount.max",
            "region.null_check",
            "table.has_rows",
            "table.positive_ca",
            "table.ca_rows",
        ],
        ["order_id.unique_check", "order_id.distinct_check"],
        ["table.ca_mix"],
    ]
    assert "DISTINCT" not in single[0].sql and single[2].sql.endswith("WHERE region = 'ca'")
    separate = [q for c in checks if c.kind in ("column", "table") for q in ac.build_audit_queries([c], "t", modes)]
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
        "table.has_rows": 5.0,  # a single aggregate records its value: COUNT(*)
        "table.positive_ca": 1.0,  # the negative amount is in 'us'
        "table.ca_rows": 2.0,
        "table.ca_mix": 1.0,  # a general predicate records 1 (true) / 0
    }
    verdicts = {r["check_name"]: r["passed"] for r in ac.result_rows(checks, values)}
    assert [k for k, ok in verdicts.items() if not ok] == [
        "amount.null_check",
        "amount.min",
        "order_id.unique_check",
        "region.null_check",
    ]


def test_row_predicate_fails_when_any_row_fails(db):
    checks = ck.parse_checks(table_checks={"all_positive": {"check_statement": "amount >= 0"}})
    values = _run(db, ac.build_audit_queries(checks, "t", {"table.all_positive": ck.ROW}))
    assert values == {"table.all_positive": 0.0}


def test_sort_based_distinct_counts_equal_count_distinct(db):
    db.executemany(
        "INSERT INTO t VALUES (?, ?, ?)", [(5, "ca", 1.0), (5, "ca", 2.0), (5, "us", 3.0), (None, "ca", 1.0)]
    )
    checks = ck.parse_checks(
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


# --------------------------------------------------------------- incremental audits
MORE_ROWS = [
    (2, "ca", 4.0),  # duplicates an id of the base rows
    (6, "us", None),
    (7, "ca", -1.0),
    (None, "eu", 2.0),
    (7, "eu", 9.0),  # duplicate within the appended rows
    (8, None, 0.5),
]
INCREMENTAL_CHECKS = {
    "column_mapping": {
        **COLUMN_MAPPING,
        "region": {
            "null_check": {"equal_to": 0, "partition_clause": "amount > 2"},
            "distinct_check": {"geq_to": 1},
            "unique_check": {"equal_to": 0, "partition_clause": "amount > 0"},
        },
    },
    "table_checks": {
        **TABLE_CHECKS,
        "total": {"check_statement": "SUM(amount) > 0"},
        "ca_max": {"check_statement": "MAX(amount) < 100", "partition_clause": "region = 'ca'"},
        "ids_present": {"check_statement": "COUNT(order_id) >= 1"},
    },
}


def _load(conn, name, rows):
    conn.execute(f"CREATE TABLE {name} (order_id INTEGER, region TEXT, amount REAL)")
    conn.executemany(f"INSERT INTO {name} VALUES (?, ?, ?)", rows)


@pytest.mark.parametrize("split", [0, 1, 3, 5, 8, 11])
def test_incremental_combination_equals_evaluating_the_whole_table(split):
    """value(base) (+) value(appended) (+) overlap == value(base + appended), for every decomposable check."""
    rows = ROWS + MORE_ROWS
    conn = sqlite3.connect(":memory:")
    _load(conn, "base", rows[:split])
    _load(conn, "appended", rows[split:])
    conn.execute("CREATE VIEW whole AS SELECT * FROM base UNION ALL SELECT * FROM appended")
    checks = ck.parse_checks(INCREMENTAL_CHECKS["column_mapping"], INCREMENTAL_CHECKS["table_checks"])
    modes = _modes(checks)
    parts = [c for c in checks if ac.decomposable(c, modes.get(c.name))]
    assert {c.name for c in checks} - {c.name for c in parts} == {"table.ca_mix"}  # general aggregate predicate
    whole = _run(conn, ac.build_audit_queries(parts, "whole", modes))
    base = _run(conn, ac.build_audit_queries(parts, "base", modes))
    appended = _run(conn, ac.build_audit_queries(parts, "appended", modes))
    combined = {}
    for check in parts:
        overlap = 0.0
        if check.check_type in ck.DISTINCT_CHECKS:
            col = check.column
            lo, hi = conn.execute(f"SELECT MIN({col}), MAX({col}) FROM appended").fetchone()  # the files' bounds
            overlap = conn.execute(ac.overlap_query(check, "appended", "base", (":lo", ":hi")), {"lo": lo, "hi": hi})
            overlap = overlap.fetchone()[0]
            unbounded = conn.execute(ac.overlap_query(check, "appended", "base")).fetchone()[0]
            assert overlap == unbounded  # the bounds only skip base rows that cannot match
        combined[check.name] = ac.combine(check, base[check.name], appended[check.name], overlap)
    assert combined == pytest.approx(whole)
    conn.close()


def test_cross_part_duplicates_are_found():
    conn = sqlite3.connect(":memory:")
    _load(conn, "base", ROWS)  # ids 1, 2, 2, 3, 4
    _load(conn, "appended", [(4, "ca", 1.0), (9, "ca", 1.0)])
    (check,) = ck.parse_checks({"order_id": {"unique_check": {"equal_to": 0}}})
    sql = ac.overlap_query(check, "appended", "base", (":lo", ":hi"), alias="o1")
    assert sql.startswith("SELECT CAST(COUNT(*) AS DOUBLE) AS o1 ")
    overlap = conn.execute(sql, {"lo": 4, "hi": 9}).fetchone()[0]
    assert overlap == 1.0
    assert ac.combine(check, 1.0, 0.0, overlap) == 2.0  # the base's own duplicate (2) plus 4 again
    conn.close()


@pytest.mark.parametrize(
    "base, change, low", [(1e300, math.nan, 1e300), (math.nan, 1e300, 1e300), (math.nan, math.nan, math.nan)]
)
def test_combined_min_max_order_nan_above_every_number_as_spark_does(base, change, low):
    """Python's min/max depend on argument order with NaN; Spark's MAX is NaN, its MIN the number."""
    lo, hi = ck.parse_checks({"x": {"min": {"geq_to": 0}, "max": {"leq_to": 1}}})
    assert math.isnan(ac.combine(hi, base, change))
    got = ac.combine(lo, base, change)
    assert (math.isnan(got) and math.isnan(low)) or got == low


def test_single_aggregate_statements_record_their_value():
    checks = {c.name: c for c in ck.parse_checks(table_checks=INCREMENTAL_CHECKS["table_checks"])}
    assert (checks["table.total"].aggregate, checks["table.total"].column) == ("sum", "amount")
    assert checks["table.total"].condition == {"greater_than": 0.0}
    assert checks["table.has_rows"].aggregate == "count" and checks["table.has_rows"].column is None
    assert checks["table.ca_mix"].aggregate is None and checks["table.ca_mix"].condition == {"equal_to": 1.0}
    assert checks["table.total"].evaluate(12.5) and not checks["table.total"].evaluate(None)  # SUM of no rows
    general = ck.as_general_statement(checks["table.ca_max"])
    assert (general.aggregate, general.column, general.condition) == (None, None, {"equal_to": 1.0})
    assert general.describe() == checks["table.ca_max"].describe()


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        ("COUNT(*) > 0", ("count", None, "greater_than", 0.0)),
        ("sum(amount)>=1.5", ("sum", "amount", "geq_to", 1.5)),
        ("MIN(`amount`) = 3", ("min", "amount", "equal_to", 3.0)),
        ("max(x) == -1e3", ("max", "x", "equal_to", -1000.0)),
        ("SUM(*) > 0", None),
        ("COUNT(*) > 0 AND MAX(x) < 1", None),
        ("COUNT(DISTINCT x) > 1", None),
        ("count(`a) > 1", None),
        ("MAX(x) <> 1", None),
        ("0 < COUNT(*)", None),
    ],
)
def test_simple_aggregate_recognition(statement, expected):
    assert ck.simple_aggregate(statement) == expected


def test_metadata_query_takes_only_what_file_metrics_answer():
    checks = ck.parse_checks(INCREMENTAL_CHECKS["column_mapping"], INCREMENTAL_CHECKS["table_checks"])
    query = ac.build_metadata_query(checks, "t")
    assert [name for _, name in query.columns] == [
        "amount.null_check",
        "amount.min",
        "amount.max",
        "table.has_rows",
        "table.ids_present",
    ]
    assert "COUNT(*) - COUNT(`amount`)" in query.sql and "CASE" not in query.sql and "SUM" not in query.sql
    conn = sqlite3.connect(":memory:")
    _load(conn, "t", ROWS)
    assert _run(conn, [query]) == _run(
        conn, ac.build_audit_queries([c for c in checks if c.name in dict(query.columns).values()], "t")
    )
    conn.close()
    assert ac.build_metadata_query([c for c in checks if c.check_type == "unique_check"], "t") is None


def _row(check, value, *, condition=None, at=1):
    return {
        "check_name": check.name,
        "check_type": check.check_type,
        "column_name": check.column,
        "condition": check.describe() if condition is None else condition,
        "observed_value": value,
        "evaluated_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=at),
    }


def test_reusable_base_values_need_the_same_definition_and_take_the_newest():
    amount_min, unique, has_rows, change = ck.parse_checks(
        {"amount": {"min": {"geq_to": 0}}, "order_id": {"unique_check": {"equal_to": 0}}},
        {"has_rows": {"check_statement": "COUNT(*) > 0"}},
        {"added_rows": {"min": 1}},
    )
    rows = [
        _row(amount_min, 3.0, at=1),
        _row(amount_min, 2.0, at=5),  # a later audit of the same snapshot wins
        _row(unique, 0.0, condition="== 1"),  # recorded with another threshold: not reused
        _row(has_rows, 7.0, condition="COUNT(*) > 0 (skipped: no data)"),  # skipped: not reused
        {**_row(change, 5.0), "check_name": "change.added_rows"},  # change checks never combine
    ]
    assert ck.reusable_base_values([amount_min, unique, has_rows, change], rows) == {"amount.min": 2.0}
    assert ck.reusable_base_values([amount_min], []) == {}


@pytest.mark.parametrize("extra", [[], [(float("nan"), "ca", None)], [(None, None, None)]])
def test_driver_aggregation_equals_sql_aggregation(extra):
    """The projection + Arrow aggregation used for appended rows gives what the SQL aggregates give."""
    import pyarrow as pa

    conn = sqlite3.connect(":memory:")
    _load(conn, "t", ROWS + MORE_ROWS)
    checks = ck.parse_checks(INCREMENTAL_CHECKS["column_mapping"], INCREMENTAL_CHECKS["table_checks"])
    modes = _modes(checks)
    parts = [c for c in checks if ac.decomposable(c, modes.get(c.name))]
    projection = ac.driver_projection(parts, modes)
    rows = conn.execute(ac.driver_projection_sql(projection, "t")).fetchall()
    columns = [pa.array([r[i] for r in rows]) for i in range(len(projection))]
    assert ac.aggregate_columns(projection, columns) == pytest.approx(
        _run(conn, ac.build_audit_queries(parts, "t", modes))
    )
    empty = ac.aggregate_columns(projection, [pa.array([], type=c.type) for c in columns])
    assert empty["amount.null_check"] == 0.0 and empty["amount.min"] is None and empty["table.total"] is None
    assert empty["table.has_rows"] == 0.0 and empty["table.positive_ca"] == 1.0 and empty["order_id.unique_check"] == 0
    conn.close()


def test_driver_aggregation_follows_spark_for_nan_and_signed_zero():
    import pyarrow as pa

    (mn, mx, uq, dc) = ck.parse_checks(
        {
            "x": {
                "min": {"geq_to": 0},
                "max": {"leq_to": 1},
                "unique_check": {"equal_to": 0},
                "distinct_check": {"geq_to": 0},
            }
        }
    )
    projection = ac.driver_projection([mn, mx, uq, dc])
    values = pa.array([1.0, float("nan"), -0.0, 0.0, None, float("nan")])
    out = ac.aggregate_columns(projection, [values] * 4)
    assert out["x.min"] == -0.0 and math.isnan(out["x.max"])  # NaN sorts above every number in Spark
    assert out["x.distinct_check"] == 3.0 and out["x.unique_check"] == 2.0  # {1, nan, 0}; 0/-0 and nan/nan pair up
    only_nan = ac.aggregate_columns(projection, [pa.array([float("nan"), None])] * 4)
    assert math.isnan(only_nan["x.min"]) and math.isnan(only_nan["x.max"])


# --------------------------------------------------------------- appended files' metrics
def _field(type_id, utc=True):
    from types import SimpleNamespace

    kind = SimpleNamespace(typeId=lambda: SimpleNamespace(toString=lambda: type_id), shouldAdjustToUTC=lambda: utc)
    return SimpleNamespace(type=lambda: kind)


def _stats(**kw):
    from airflow_iceberg_provider.spark_jobs.audit.engine import _ColumnStats

    return _ColumnStats(**kw)


def test_metrics_answer_only_what_they_state_exactly():
    from airflow_iceberg_provider.spark_jobs.audit.engine import _metric_value

    by_name = {
        c.name: c
        for c in ck.parse_checks(
            {
                "id": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}, "max": {"geq_to": 0}},
                "ts": {"max": {"geq_to": 0}},
                "x": {"min": {"geq_to": 0}, "max": {"leq_to": 0, "partition_clause": "id > 1"}},
                "name": {"max": {"geq_to": 0}, "unique_check": {"equal_to": 0}},
            },
            {
                "rows": {"check_statement": "COUNT(*) > 0"},
                "ids": {"check_statement": "COUNT(id) > 0"},
                "total": {"check_statement": "SUM(id) > 0"},
                "positive": {"check_statement": "id > 0"},
            },
        )
    }
    full = _stats(nulls=2, non_null=8, nans=0, lo=("j", -5), hi=("j", 40))

    def value(name, field, st, records=10):
        return _metric_value(by_name[name], records, field, st)

    assert value("table.rows", None, None) == (True, 10.0)  # COUNT(*): the files' record counts
    assert value("id.null_check", _field("LONG"), full) == (True, 2.0)
    assert value("table.ids", _field("LONG"), full) == (True, 8.0)
    assert value("id.min", _field("LONG"), full) == (True, -5.0)
    assert value("id.max", _field("DECIMAL"), full) == (True, 40.0)
    assert value("ts.max", _field("TIMESTAMP"), _stats(non_null=2, lo=("j", 0), hi=("j", 1_500_000))) == (
        True,
        1.5,
    )  # seconds
    assert value("id.max", _field("LONG"), _stats(nulls=3, non_null=0, lo=None, hi=None)) == (True, None)  # no values
    # not stated exactly by the metrics: a scan of the appended rows answers these
    assert value("ts.max", _field("TIMESTAMP", utc=False), full) == (False, None)  # zone-less: session time zone
    assert value("x.min", _field("DOUBLE"), _stats(nans=1, non_null=3, lo=("j", 1.0), hi=("j", 2.0)))[0] is False
    assert value("x.min", _field("DOUBLE"), _stats(nans=None, non_null=3, lo=("j", 1.0), hi=("j", 2.0)))[0] is False
    assert value("x.max", _field("DOUBLE"), full)[0] is False  # partition clause
    assert value("name.max", _field("STRING"), full)[0] is False  # truncated, and compared as text
    assert value("id.min", _field("LONG"), _stats(complete=False))[0] is False
    assert value("id.min", _field("LONG"), _stats(bounded=False, non_null=1, lo=("j", 1), hi=("j", 1)))[0] is False
    for name in ("name.unique_check", "table.total", "table.positive"):
        assert value(name, _field("LONG"), full)[0] is False
