"""Test job: the driver's evaluation of the appended rows equals Spark's, value by value.

Builds a table whose base and appended rows hold the edge cases (NULL, NaN, -0.0, huge
longs, fractional decimals, timestamps around a literal in a non-UTC session zone, strings
with non-ASCII text, booleans) and writes to ``spec["result_path"]``:

* ``rows``: per expression, Spark's value for every appended row and the value
  ``arrow_sql.Evaluator`` computes from the appended Parquet files (ordered by ``id``);
* ``generated``: the same for 300 random expressions (one Spark query): how many were
  compared, which differ, which were refused and why;
* ``refused``: per expression outside the subset, the ``Unsupported`` message (or null);
* ``observed``: the audit engine's observed values four ways (whole snapshot scan, the
  whole snapshot projected and aggregated on the driver as a small snapshot is,
  incremental with the driver reading the files, incremental with Spark reading them)
  plus how the appended rows were read (``read_by``) and the queries each way ran;
* the same after a ``DELETE`` (not an append): the incremental evaluation must refuse and
  scan the whole snapshot.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from iceberg_job_runtime import JobContext, run_job

BASE = """
INSERT INTO {t} VALUES
 (1, 1, 1.5, 1.5, 1.25, 'a', TIMESTAMP '2026-01-01 00:00:00', DATE '2026-01-01', true),
 (2, 2, -0.0, 0.0, -2.50, 'b', TIMESTAMP '2026-01-01 04:59:59', DATE '2026-01-02', false),
 (3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
 (4, 3, 2.0, 2.0, 3.00, 'é', TIMESTAMP '2026-01-01 05:00:00', DATE '2026-01-03', true),
 (9223372036854775000, 7, 1e300, -1.0, 9999999999.99, 'B', TIMESTAMP '1969-12-31 23:59:59.999999',
  DATE '1969-12-31', false)
"""
APPENDED = """
INSERT INTO {t} VALUES
 (4, 2, CAST('NaN' AS DOUBLE), CAST('NaN' AS FLOAT), 2.50, 'a', TIMESTAMP '2026-01-01 05:00:00.5',
  DATE '2026-01-02', true),
 (10, 3, 0.0, -0.0, 0.00, '', TIMESTAMP '2026-01-01 05:30:00.5', DATE '2026-01-01', NULL),
 (11, NULL, -0.0, 1.0, -0.01, NULL, NULL, NULL, false),
 (12, -3, 2.5, 2.5, 1.25, 'é', TIMESTAMP '2026-03-08 02:30:00', DATE '2026-03-08', true),
 (13, 2147483647, NULL, NULL, NULL, 'b', TIMESTAMP '2026-01-01 00:00:00', DATE '2026-01-01', true),
 (14, 3, CAST('NaN' AS DOUBLE), 1.0, 3.00, 'é', TIMESTAMP '2026-01-01 04:59:59', DATE '2026-01-03', false)
"""
EXPRESSIONS = [
    "x > 0",
    "x >= 1.5",
    "x < 1.5",
    "x = 0",
    "x <> 0",
    "x <= -0.0",
    "0 < x",
    "x > 1e300",
    "2.5 >= x",
    "x BETWEEN -1 AND 2.5",
    "x NOT BETWEEN -1 AND 2.5",
    "x IN (0, 2.5)",
    "x IS NULL",
    "x IS NOT NULL",
    "k > 2.5",
    "k = 2.5",
    "k <> 2.5",
    "k <= 2.5",
    "k < -2.5",
    "k >= 3",
    "k NOT IN (1, 2)",
    "k = 2147483647",
    "id > 12",
    "d > 0",
    "d >= 1.25",
    "d = 3",
    "d < 2.5",
    "d <> -0.01",
    "d > -1",
    "s = 'a'",
    "s > 'B'",
    "s IN ('a', 'é')",
    "s NOT IN ('a')",
    "s IS NOT NULL AND s <> ''",
    "`s` < 'b'",
    "ts >= TIMESTAMP '2026-01-01 00:00:00'",
    "ts < TIMESTAMP '2026-01-01 05:30:00.5'",
    "ts = TIMESTAMP '2026-03-08 02:30:00'",
    "ts > TIMESTAMP '2026-03-08T01:59'",
    "dt = DATE '2026-01-02'",
    "dt > DATE '2026-01-01'",
    "b",
    "NOT b",
    "b = TRUE",
    "b OR x > 0",
    "b AND k > 1",
    "NOT (k > 1 OR s = 'a')",
    "CASE WHEN x > 0 THEN 1 WHEN x IS NULL THEN NULL ELSE 0 END",
    "CASE WHEN NOT COALESCE((s = 'a'), FALSE) THEN NULL WHEN (x > 0) THEN 1 ELSE 0 END",
    "CAST(ts AS DOUBLE)",
    "CAST(k AS DOUBLE)",
    "CAST(CASE WHEN (s = 'é') THEN x END AS DOUBLE)",
    "COALESCE(k, 0)",
    "CASE WHEN (k > 0) AND x IS NULL THEN 1 ELSE 0 END",
    "CASE WHEN (b) THEN s END",
]
#: Literal pools per column for generated expressions (the same type family, so Spark accepts them).
LITERALS = {
    "x": ["0", "-0.0", "1.5", "2.5", "1e300", "-1", "2"],
    "k": ["2.5", "3", "-3", "0", "2147483647", "2.0", "-2.5"],
    "d": ["0", "1.25", "2.5", "-0.01", "3", "-1"],
    "s": ["'a'", "'B'", "''", "'é'", "'b'"],
    "ts": ["TIMESTAMP '2026-01-01 00:00:00'", "TIMESTAMP '2026-01-01 05:00:00.5'", "TIMESTAMP '2026-03-08 02:30:00'"],
    "dt": ["DATE '2026-01-02'", "DATE '2026-01-01'", "DATE '2026-03-08'"],
}
#: One expression per form the SQL allowlist accepts in a row predicate (every node type and
#: scalar function of ``core.sql_allowlist``): the driver evaluates it exactly as Spark does,
#: or refuses it and lets Spark evaluate it. Checked to pass the allowlist on the Airflow side.
ALLOWED_FORMS = [
    "x + 1 > 0",
    "x - k >= 0",
    "x * 2 < 5",
    "x / 2 <= 1",
    "k % 2 = 0",
    "k div 2 = 1",
    "-x < 0",
    "x <=> 0",
    "k != 1",
    "(x > 0) AND b",
    "s LIKE 'a%'",
    "s ILIKE 'A%'",
    "s LIKE 'a!%' ESCAPE '!'",
    "NOT b",
    "b OR k < 0",
    "k BETWEEN 1 AND 2",
    "k IN (1, 2)",
    "s IS NOT NULL",
    "b = TRUE",
    "s = NULL",
    "x = 1.5BD",
    "k = 10L",
    "CASE WHEN k > 1 THEN 'hi' ELSE 'lo' END = 'hi'",
    "CASE k WHEN 1 THEN 1 ELSE 0 END = 1",
    "IF(x > 0, 1, 0) = 1",
    "CAST(k AS DOUBLE) > 1.5",
    "CAST(x AS BIGINT) = 1",
    "CAST(d AS STRING) = '1.25'",
    "CAST(s AS INT) IS NULL",
    "CAST(ts AS DATE) = DATE '2026-01-02'",
    "CAST(dt AS TIMESTAMP) < TIMESTAMP '2026-03-01 00:00:00'",
    "CAST(k AS DECIMAL(10,2)) > 1",
    "coalesce(x, 0) >= 0",
    "nvl(k, 0) = 0",
    "nullif(k, 1) IS NULL",
    "abs(x) > 1",
    "round(x, 1) = 1.5",
    "floor(x) = 1",
    "ceil(x) = 2",
    "greatest(x, k) > 1",
    "least(x, k) < 1",
    "isnan(x)",
    "lower(s) = 'a'",
    "upper(s) = 'A'",
    "length(s) > 1",
    "trim(s) = s",
    "substring(s, 1, 1) = 'a'",
    "substr(s, 2) = ''",
    "concat(s, 'x') = 'ax'",
    "position('a' IN s) > 0",
    "to_date(ts) = DATE '2026-01-02'",
    "date_trunc('DAY', ts) = TIMESTAMP '2026-01-02 00:00:00'",
    "trunc(dt, 'MM') = DATE '2026-03-01'",
    "year(dt) = 2026",
    "month(ts) = 3",
    "day(dt) = 8",
    "dayofmonth(ts) > 1",
    "dayofweek(dt) = 1",
    "hour(ts) = 2",
    "minute(ts) = 30",
    "second(ts) = 0",
    "datediff(dt, DATE '2026-01-01') > 30",
    "date_add(dt, 1) > DATE '2026-01-02'",
    "date_sub(dt, 1) < DATE '2026-03-08'",
    "ts >= TIMESTAMP '2026-01-01 00:00:00' - INTERVAL 1 DAY",
]

REFUSED = ["length(s) > 0", "x + 1 > 0", "s LIKE 'a%'", "f > 0", "s = 1", "ts > '2026-01-01'", "x = k", "k <=> 2"]


def generated_expressions(count: int, seed: int) -> list[str]:
    """Random predicates and values over the table's columns (fixed seed: the same list every run)."""
    import random

    rng = random.Random(seed)

    def atom() -> str:
        col = rng.choice([*LITERALS, "b"])
        if col == "b":
            return rng.choice(["b", "NOT b", "b = TRUE", "b <> FALSE", "b IS NULL"])
        lit = lambda: rng.choice(LITERALS[col])  # noqa: E731
        kind = rng.randrange(6)
        if kind == 0:
            return f"{col} {rng.choice(['=', '<>', '<', '<=', '>', '>=', '!=', '=='])} {lit()}"
        if kind == 1:
            return f"{lit()} {rng.choice(['<', '>=', '='])} {col}"
        if kind == 2:
            return f"{col} IS {rng.choice(['', 'NOT '])}NULL"
        if kind == 3:
            return f"{col} {rng.choice(['', 'NOT '])}IN ({lit()}, {lit()})"
        if kind == 4:
            return f"{col} {rng.choice(['', 'NOT '])}BETWEEN {lit()} AND {lit()}"
        return f"({col} {rng.choice(['>', '<='])} {lit()})"

    def predicate(depth: int = 0) -> str:
        if depth >= 2 or rng.random() < 0.4:
            return atom()
        kind = rng.randrange(4)
        if kind == 0:
            return f"({predicate(depth + 1)}) AND ({predicate(depth + 1)})"
        if kind == 1:
            return f"({predicate(depth + 1)}) OR ({predicate(depth + 1)})"
        if kind == 2:
            return f"NOT ({predicate(depth + 1)})"
        return f"COALESCE(({predicate(depth + 1)}), {rng.choice(['TRUE', 'FALSE'])})"

    out = []
    for _ in range(count):
        kind = rng.randrange(4)
        if kind == 0:
            out.append(predicate())
        elif kind == 1:  # the shape of a row check's value
            out.append(f"CASE WHEN ({predicate()}) THEN 1 ELSE 0 END")
        elif kind == 2:  # a partition clause around a measured column
            out.append(f"CASE WHEN ({predicate()}) THEN {rng.choice(['x', 'k', 'd', 's', 'ts', 'dt'])} END")
        else:
            col = rng.choice(["x", "k", "ts", "d"])
            out.append(f"CAST(CASE WHEN ({predicate()}) THEN {col} END AS DOUBLE)")
    return out


def equivalence(ctx: JobContext) -> dict[str, Any]:
    from airflow_iceberg_provider.core import audit_checks as ck
    from airflow_iceberg_provider.spark_jobs import arrow_sql
    from airflow_iceberg_provider.spark_jobs.audit.engine import AuditEngine, read_parquet_columns

    spark, spec = ctx.spark, ctx.spec
    spark.conf.set("spark.sql.session.timeZone", "America/Toronto")  # literals are local: DST gap on 03-08
    t = ctx.table()
    spark.sql(
        f"CREATE TABLE {t} (id BIGINT, k INT, x DOUBLE, f FLOAT, d DECIMAL(12, 2), s STRING, ts TIMESTAMP, "
        "dt DATE, b BOOLEAN) USING iceberg"
    )
    spark.sql(BASE.format(t=t))
    base = ctx.ref_snapshot()
    spark.sql(APPENDED.format(t=t))
    head = ctx.ref_snapshot()

    engine = AuditEngine(spark, t)
    engine.evaluate([], head)  # loads the table for the helpers below
    appended = engine.appended_files(base, head, [], metrics=False)
    fields = engine._snapshot_fields(head)
    columns = read_parquet_columns(appended.locations, fields, appended.records)
    order = sorted(range(appended.records), key=lambda i: columns["id"][0][i].as_py())
    evaluator = arrow_sql.Evaluator(columns, appended.records, "America/Toronto")
    view = "appended_rows"
    spark.read.format("iceberg").option("start-snapshot-id", str(base)).option("end-snapshot-id", str(head)).load(
        t
    ).createOrReplaceTempView(view)
    rows = {}
    for expr in EXPRESSIONS:
        spark_values = [r["v"] for r in spark.sql(f"SELECT id, {expr} AS v FROM {view} ORDER BY id").collect()]
        driver = evaluator.value(expr).to_pylist()
        rows[expr] = {"spark": [_plain(v) for v in spark_values], "driver": [_plain(driver[i]) for i in order]}
    generated = generated_expressions(int(spec.get("generated", 300)), seed=20261122)
    select = ", ".join(f"{e} AS g{i}" for i, e in enumerate(generated))
    spark_rows = spark.sql(f"SELECT id, {select} FROM {view} ORDER BY id").collect()  # one Spark job for all
    compared, differ, refusals = 0, {}, {}
    for i, expr in enumerate(generated):
        try:
            driver = evaluator.value(expr).to_pylist()
        except arrow_sql.Unsupported as err:
            refusals[str(err)] = refusals.get(str(err), 0) + 1
            continue
        want = [_plain(r[f"g{i}"]) for r in spark_rows]
        got = [_plain(driver[j]) for j in order]
        compared += 1
        if want != got:
            differ[expr] = {"spark": want, "driver": got}
    rows_generated = {"compared": compared, "differ": differ, "refused": refusals}
    refused = {}
    for expr in REFUSED:
        try:
            evaluator.value(expr)
            refused[expr] = None
        except arrow_sql.Unsupported as err:
            refused[expr] = str(err)

    select = ", ".join(f"{e} AS a{i}" for i, e in enumerate(ALLOWED_FORMS))
    spark_rows = spark.sql(f"SELECT id, {select} FROM {view} ORDER BY id").collect()  # one Spark job for all
    allowed = {}
    for i, expr in enumerate(ALLOWED_FORMS):
        want = [_plain(r[f"a{i}"]) for r in spark_rows]
        try:
            driver = evaluator.value(expr).to_pylist()
        except arrow_sql.Unsupported as err:
            allowed[expr] = {"spark": want, "refused": str(err)}
            continue
        allowed[expr] = {"spark": want, "driver": [_plain(driver[j]) for j in order]}

    # the checks were parsed (and their SQL allowlisted) on the Airflow side, as the audit operator does
    checks = [ck.Check.from_dict(c) for c in spec["checks"]]
    outside = [ck.Check.from_dict(c) for c in spec["outside"]]
    base_values = engine.evaluate(checks + outside, base)[0].observed
    observed, read_by, queries = {}, {}, {}
    small = {"snapshot_records": 1000}  # an upper bound of the head's rows, as its summary gives one
    for label, kwargs, eng in (
        ("whole", {}, engine),
        ("whole_small", small, engine),
        ("driver", {"base_snapshot_id": base, "base_values": base_values}, engine),
        ("spark", {"base_snapshot_id": base, "base_values": base_values}, AuditEngine(spark, t, driver_read=False)),
    ):
        ev = eng.evaluate(checks, head, **kwargs)[0]
        observed[label] = {k: _plain(v) for k, v in ev.observed.items()}
        read_by[label] = [ev.appended_read_by, ev.methods, ev.fallback]
        queries[label] = [q for q, _ in ev.queries]
    ev = engine.evaluate(checks + outside, head, base_snapshot_id=base, base_values=base_values)[0]
    observed["outside_subset"] = {k: _plain(v) for k, v in ev.observed.items()}
    read_by["outside_subset"] = [ev.appended_read_by, ev.driver_refused, ev.fallback]
    spark.sql(f"DELETE FROM {t} WHERE id = 10")  # a row-level rewrite after the appends
    rewritten = ctx.ref_snapshot()
    ev = engine.evaluate(checks, rewritten, base_snapshot_id=base, base_values=base_values)[0]
    observed["rewritten"] = {k: _plain(v) for k, v in ev.observed.items()}
    read_by["rewritten"] = [ev.appended_read_by, ev.methods, ev.fallback]
    ev = engine.evaluate(checks, rewritten)[0]
    observed["rewritten_whole"] = {k: _plain(v) for k, v in ev.observed.items()}
    result = {
        "rows": rows,
        "generated": rows_generated,
        "allowed_forms": allowed,
        "refused": refused,
        "observed": observed,
        "read_by": read_by,
        "queries": queries,
    }
    with open(spec["result_path"], "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    return {"expressions": len(rows)}


def _plain(value: Any) -> Any:
    """JSON-safe and comparable: NaN as the string 'NaN', decimals as floats, instants as UTC text."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, dt.datetime):  # PySpark: naive, in the Python process's zone; Arrow: aware UTC
        return value.astimezone(dt.UTC).isoformat()
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


if __name__ == "__main__":
    run_job(equivalence)
