"""``arrow_sql``: the Spark SQL subset the audit engine evaluates on the driver (pure, no Spark).

Semantics are checked against SQLite (same three-valued logic, ``IN``/``BETWEEN``/``CASE``/
``COALESCE`` rules, binary string order) on generated expressions, and against Spark's
documented behaviour where SQLite differs (NaN, typed literals, time zones). The Spark
oracle itself is ``tests/spark/test_audit_engine_spark.py``.
"""

from __future__ import annotations

import datetime as dt
import math
import random
import sqlite3
from decimal import Decimal

import pyarrow as pa
import pytest

from airflow_iceberg_provider.spark_jobs import arrow_sql
from airflow_iceberg_provider.spark_jobs.arrow_sql import Unsupported


@pytest.mark.parametrize(
    "sql, columns",
    [
        ("amount > 0", {"amount"}),
        ("region IN ('ca', 'us', 'eu')", {"region"}),
        ("order_ts >= TIMESTAMP '2026-01-01 00:00:00'", {"order_ts"}),
        ("`Weird_Name` IS NOT NULL AND NOT (a <> -1.5 OR b BETWEEN 1 AND 2)", {"weird_name", "a", "b"}),
        ("CASE WHEN NOT COALESCE((r = 'ca'), FALSE) THEN NULL WHEN (x < 5e3) THEN 1 ELSE 0 END", {"r", "x"}),
        ("CAST(CASE WHEN (p) THEN `v` END AS DOUBLE)", {"p", "v"}),
        ("d NOT IN (DATE '2026-01-01') AND t = TIMESTAMP '2026-01-01T10:30'", {"d", "t"}),
        ("1", set()),
    ],
)
def test_the_subset_parses_and_names_its_columns(sql, columns):
    assert arrow_sql.parse_columns(sql) == columns


@pytest.mark.parametrize(
    "sql, reason",
    [
        ("SUM(x) > 0", "function SUM"),
        ("length(s) > 0", "function length"),
        ("x + 1 > 0", "cannot read"),
        ("s LIKE 'a%'", "like"),
        ("x <=> 1", "unexpected"),
        ("s = 'it''s'", "adjacent string literals"),
        ("s = 'a\\'b'", "cannot read"),
        ('s = "text"', "cannot read"),
        ("x > 1 -- comment", "comments"),
        ("x > 5L", "typed number literal"),
        ("x IN (1, NULL)", "NULL in an IN list"),
        ("x IN (y)", "non-literals"),
        ("t > TIMESTAMP '2026-01-01 00:00:00+02:00'", "TIMESTAMP literal"),
        ("CAST(x AS INT) > 1", "CAST AS INT"),
        ("CASE x WHEN 1 THEN 2 END", "CASE <value> WHEN"),
        ("t.x > 1", "cannot read"),
        ("x > 1 x", "unexpected"),
        ("EXISTS (1)", "keyword EXISTS"),
        ("x > 1e400", "overflows a double"),
        ("x > 9223372036854775808", "beyond BIGINT"),
        ("x > 0." + "1" * 40, "more than 38 digits"),
    ],
)
def test_outside_the_subset_is_refused_with_the_reason(sql, reason):
    with pytest.raises(Unsupported, match=reason):
        arrow_sql.parse(sql)


# ------------------------------------------------------------------ semantics vs SQLite
ROWS = [(k, s) for k in (None, -3, 0, 1, 2, 3, 7) for s in (None, "", "B", "a", "b", "é")]


def _random_expression(rng: random.Random, depth: int = 0) -> str:
    leaf = depth >= 3 or rng.random() < 0.3
    if leaf:
        kind = rng.randrange(7)
        if kind == 0:
            return f"k {rng.choice(['=', '<>', '<', '<=', '>', '>=', '!=', '=='])} {rng.choice(['-3', '0', '2', '2.5', '-0.5', '7'])}"
        if kind == 1:
            return f"s {rng.choice(['=', '<>', '<', '>='])} '{rng.choice(['', 'B', 'a', 'é', 'ab'])}'"
        if kind == 2:
            return f"{rng.choice(['k', 's'])} IS {rng.choice(['', 'NOT '])}NULL"
        if kind == 3:
            return f"k {rng.choice(['', 'NOT '])}IN ({', '.join(rng.sample(['-3', '0', '1', '2', '9'], 2))})"
        if kind == 4:
            return f"k {rng.choice(['', 'NOT '])}BETWEEN {rng.choice(['-1', '0', '2'])} AND {rng.choice(['1', '3'])}"
        if kind == 5:
            return f"{rng.choice(['2', '2.5', '0'])} < k"
        return rng.choice(["TRUE", "FALSE", "NULL", "s IN ('a', 'b')"])
    kind = rng.randrange(4)
    a, b = _random_expression(rng, depth + 1), _random_expression(rng, depth + 1)
    if kind == 0:
        return f"({a}) AND ({b})"
    if kind == 1:
        return f"({a}) OR ({b})"
    if kind == 2:
        return f"NOT ({a})"
    return f"COALESCE(({a}), ({b}))"


def _value(sql: str) -> str:
    """A CASE around the predicate: exercises CASE and keeps NULL distinguishable."""
    return f"CASE WHEN ({sql}) THEN 1 WHEN NOT ({sql}) THEN 0 ELSE NULL END"


def test_generated_predicates_match_sqlite_row_by_row():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (k INTEGER, s TEXT)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", ROWS)
    columns = {
        "k": (pa.array([r[0] for r in ROWS], pa.int64()), "long"),
        "s": (pa.array([r[1] for r in ROWS], pa.string()), "string"),
    }
    evaluator = arrow_sql.Evaluator(columns, len(ROWS), "UTC")
    rng = random.Random(20261122)
    compared = 0
    for _ in range(400):
        sql = _value(_random_expression(rng))
        want = [r[0] for r in conn.execute(f"SELECT {sql} FROM t ORDER BY rowid")]
        got = evaluator.value(sql).to_pylist()
        assert got == want, sql
        compared += 1
    assert compared == 400
    conn.close()


# ------------------------------------------------------------------ where Spark is not SQLite
def _eval(sql: str, **cols):
    n = len(next(iter(cols.values()))[0])
    columns = {k: (pa.array(v, t_arrow), t) for k, (v, t_arrow, t) in cols.items()}
    return arrow_sql.Evaluator(columns, n, "America/Toronto").value(sql).to_pylist()


DOUBLES = ([1.0, None, math.nan, -0.0, 5.5], pa.float64(), "double")


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("x > 0", [True, None, True, False, True]),  # NaN > 0 in Spark
        ("x >= 5.5", [False, None, True, False, True]),
        ("x < 1e300", [True, None, False, True, True]),
        ("x = 0", [False, None, False, True, False]),  # -0.0 = 0
        ("x <> 1", [False, None, True, True, True]),
        ("1 <= x", [True, None, True, False, True]),  # flipped: x >= 1
        ("x IN (0, 5.5)", [False, None, False, True, True]),
        ("CAST(x AS DOUBLE)", [1.0, None, math.nan, -0.0, 5.5]),
    ],
)
def test_nan_is_the_largest_double_and_equal_to_itself(sql, expected):
    got = _eval(sql, x=DOUBLES)
    assert [("nan" if isinstance(v, float) and math.isnan(v) else v) for v in got] == [
        ("nan" if isinstance(v, float) and math.isnan(v) else v) for v in expected
    ]


@pytest.mark.parametrize(
    "sql, expected",
    [
        ("k > 2.5", [False, False, None, True]),
        ("k >= 2.5", [False, False, None, True]),
        ("k < 2.5", [True, True, None, False]),
        ("k = 2.5", [False, False, None, False]),
        ("k <> 2.5", [True, True, None, True]),
        ("k > 2.0", [False, False, None, True]),
        ("k > 2.0000000000000001", [False, False, None, True]),  # exact, where doubles would round to 2
        ("k >= 2.0000000000000001", [False, False, None, True]),
    ],
)
def test_integer_columns_compare_exactly_with_fractional_literals(sql, expected):
    assert _eval(sql, k=([1, 2, None, 3], pa.int64(), "long")) == expected


def test_decimal_columns_compare_exactly_and_cast_to_double_keeps_decimals_for_min_max():
    d = ([Decimal("1.50"), None, Decimal("-2.00"), Decimal("0.10")], pa.decimal128(10, 2), "decimal(10, 2)")
    assert _eval("d > 0.1", d=d) == [True, None, False, False]
    assert _eval("d = 1.5", d=d) == [True, None, False, False]
    assert _eval("d >= 0", d=d) == [True, None, False, True]
    assert _eval("CAST(d AS DOUBLE)", d=d) == d[0]  # min/max of the decimals, converted once, exactly
    with pytest.raises(Unsupported, match="double literal"):
        _eval("d > 1e0", d=d)


def test_timestamp_literals_are_wall_times_of_the_session_zone():
    utc = pa.timestamp("us", tz="UTC")
    noon_toronto = dt.datetime(2026, 7, 1, 16, 0, tzinfo=dt.UTC)  # EDT = UTC-4
    ts = ([noon_toronto, noon_toronto + dt.timedelta(microseconds=1), None], utc, "timestamptz")
    assert _eval("t = TIMESTAMP '2026-07-01 12:00:00'", t=ts) == [True, False, None]
    assert _eval("t > TIMESTAMP '2026-07-01 12:00:00.000000'", t=ts) == [False, True, None]
    gap = dt.datetime(2026, 3, 8, 7, 30, tzinfo=dt.UTC)  # 02:30 does not exist in Toronto: 03:30 EDT
    assert _eval("t = TIMESTAMP '2026-03-08 02:30'", t=([gap], utc, "timestamptz")) == [True]
    assert _eval("CAST(t AS DOUBLE)", t=ts)[:1] == [noon_toronto.timestamp()]
    columns = {"t": (pa.array([noon_toronto], utc), "timestamptz")}
    with pytest.raises(Unsupported, match="time zone"):
        arrow_sql.Evaluator(columns, 1, "+02:00").value("t > TIMESTAMP '2026-01-01'")


@pytest.mark.parametrize(
    "sql, message",
    [
        ("s = 1", "comparison of string with int"),
        ("t > '2026-01-01'", "comparison of ts with string"),
        ("x = k", "NaN ordering"),
        ("f > 0", "FLOAT column"),
        ("k = k2", "int column compared"),
        ("u IS NULL", "column 'u' of type uuid"),
        ("missing > 1", "not loaded"),
        ("CASE WHEN k > 1 THEN s ELSE 1 END", "mixed types"),
        ("k AND TRUE", "non-boolean"),
        ("CAST(s AS DOUBLE)", r"CAST\(string AS DOUBLE\)"),
    ],
)
def test_cross_type_and_unknown_columns_are_refused(sql, message):
    columns = {
        "s": (pa.array(["a"]), "string"),
        "t": (pa.array([0], pa.timestamp("us", tz="UTC")), "timestamptz"),
        "x": (pa.array([1.0]), "double"),
        "k": (pa.array([1], pa.int64()), "long"),
        "k2": (pa.array([Decimal("1")], pa.decimal128(5, 0)), "decimal(5, 0)"),
        "f": (pa.array([1.0], pa.float32()), "float"),
        "u": (pa.array([b"0" * 16], pa.binary(16)), "uuid"),
    }
    with pytest.raises(Unsupported, match=message):
        arrow_sql.Evaluator(columns, 1, "UTC").value(sql)


def test_literals_alone_broadcast_to_every_row():
    columns = {"k": (pa.array([1, 2, 3], pa.int64()), "long")}
    evaluator = arrow_sql.Evaluator(columns, 3, "UTC")
    assert evaluator.value("1").to_pylist() == [1, 1, 1]
    assert evaluator.value("NULL").to_pylist() == [None, None, None]
    assert evaluator.value("CASE WHEN NULL THEN 1 ELSE 0 END").to_pylist() == [0, 0, 0]
    assert evaluator.value("CASE WHEN k > 1 THEN 1 END").to_pylist() == [None, 1, 1]
