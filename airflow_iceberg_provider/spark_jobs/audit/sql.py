"""SQL of the audit checks: the queries of one audit, incremental combination, driver-side aggregation.

The checks themselves (:class:`~airflow_iceberg_provider.core.audit_checks.Check`, parsed and
validated on the Airflow side) come from :mod:`airflow_iceberg_provider.core.audit_checks`; this
module is the ``wap_audit`` job's half. The data checks of one audit are folded into one
aggregate ``SELECT`` over the audited snapshot (partition clauses become conditional
aggregates), plus one query for the exact distinct counts (``distinct_check`` /
``unique_check``), which need a shuffle, and one filtered query per partition clause of
aggregate table checks. No pyspark import (pyarrow inside :func:`aggregate_columns` only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_iceberg_provider.core.audit_checks import (
    AGGREGATE,
    DISTINCT_CHECKS,
    NAME_RE,
    ROW,
    Check,
    CheckSpecError,
)


# ----------------------------------------------------------------- SQL building
def _q(column: str) -> str:
    if not NAME_RE.match(column):
        raise CheckSpecError(f"invalid column name {column!r}")
    return f"`{column}`"


#: How each per-row value (:func:`row_value`) is aggregated in SQL.
_SQL_AGGREGATES = {
    "nulls": "CAST(COALESCE(SUM({v}), 0) AS DOUBLE)",
    "count": "CAST(COUNT({v}) AS DOUBLE)",
    "sum": "CAST(SUM({v}) AS DOUBLE)",
    "min": "CAST(MIN({v}) AS DOUBLE)",
    "max": "CAST(MAX({v}) AS DOUBLE)",
    "row": "CAST(COALESCE(MIN({v}), 1) AS DOUBLE)",
    "distinct": "CAST(COUNT(DISTINCT {v}) AS DOUBLE)",
    "dups": "CAST(COUNT({v}) - COUNT(DISTINCT {v}) AS DOUBLE)",
}


def row_value(check: Check, mode: str = AGGREGATE) -> tuple[str, str] | None:
    """``(per-row SQL value, aggregation)``: the one definition of what a check measures.

    The aggregation is one of :data:`_SQL_AGGREGATES` (in SQL) or the same done on
    Arrow columns (:func:`aggregate_columns`). Partition clauses become conditional
    values (NULL outside the clause), so every such check shares one pass. Min/max
    compare the values as numbers (``CAST(... AS DOUBLE)``; timestamps become seconds).
    ``None`` for a general aggregate predicate (``COUNT(*) > 0 AND SUM(x) < 5``), which is
    evaluated as a whole (:func:`check_expression`).
    """
    pc = check.partition_clause
    if check.kind == "column":
        col = _q(check.column or "")
        value = f"CASE WHEN ({pc}) THEN {col} END" if pc else col
        if check.check_type == "null_check":
            cond = f"({pc}) AND {col} IS NULL" if pc else f"{col} IS NULL"
            return f"CASE WHEN {cond} THEN 1 ELSE 0 END", "nulls"
        if check.check_type in ("min", "max"):
            return f"CAST({value} AS DOUBLE)", check.check_type
        return value, "dups" if check.check_type == "unique_check" else "distinct"
    if check.kind == "table" and check.aggregate:
        if check.column is None:  # COUNT(*)
            return (f"CASE WHEN ({pc}) THEN 1 END" if pc else "1"), "count"
        col = _q(check.column)
        value = f"CASE WHEN ({pc}) THEN {col} END" if pc else col
        return (f"CAST({value} AS DOUBLE)" if check.aggregate in ("min", "max") else value), check.aggregate
    if check.kind == "table" and mode == ROW:
        guard = f"WHEN NOT COALESCE(({pc}), FALSE) THEN NULL " if pc else ""
        return f"CASE {guard}WHEN ({check.statement}) THEN 1 ELSE 0 END", "row"
    return None


def check_expression(check: Check, mode: str = AGGREGATE) -> str:
    """The aggregate SQL expression whose value is the check's observed value.

    :func:`row_value` aggregated in SQL; a general aggregate predicate becomes
    ``CASE WHEN stmt THEN 1 ELSE 0 END`` (its partition clause, if any, must then be
    applied as the query's ``WHERE``).
    """
    if check.kind not in ("column", "table"):
        raise CheckSpecError(f"check {check.name!r} ({check.kind}) is not evaluated in SQL")
    measured = row_value(check, mode)
    if measured is None:
        return f"CAST(CASE WHEN ({check.statement}) THEN 1 ELSE 0 END AS DOUBLE)"
    value, how = measured
    return _SQL_AGGREGATES[how].format(v=value)


@dataclass(frozen=True)
class AuditQuery:
    """One SQL query and which check each output column belongs to."""

    sql: str
    columns: list[tuple[str, str]]  # (alias, check name)


def distinct_value(check: Check) -> str:
    """The value a distinct/unique check counts (NULL outside its partition clause)."""
    col = _q(check.column or "")
    return f"CASE WHEN ({check.partition_clause}) THEN {col} END" if check.partition_clause else col


def _sorted_distinct_query(items: Sequence[tuple[str, Check]], source: str, bucket_expr: str) -> AuditQuery:
    """Exact distinct / duplicate counts by sorting instead of hashing every key.

    Each counted value is hash-bucketed (``bucket_expr``, e.g. ``pmod(hash({v}), 64)``),
    sorted within its bucket, and compared with its predecessor (``LAG``): equal values
    are adjacent, so the rows equal to their predecessor are exactly the duplicates
    (``COUNT(v) - COUNT(DISTINCT v)``; NULLs never count). Spark runs this as a sort
    within shuffle partitions, which is markedly cheaper than its hash-based
    ``COUNT(DISTINCT)`` for many distinct keys (bench/wap_audit.py).
    """
    slots: dict[str, int] = {}
    for _, check in items:
        slots.setdefault(distinct_value(check), len(slots))
    inner = ", ".join(f"{v} AS v{j}" for v, j in slots.items())
    windows = ", ".join(
        f"v{j}, LAG(v{j}) OVER (PARTITION BY {bucket_expr.format(v=f'v{j}')} ORDER BY v{j}) AS p{j}"
        for j in slots.values()
    )
    exprs = []
    for alias, check in items:
        j = slots[distinct_value(check)]
        dups = f"COALESCE(SUM(CASE WHEN v{j} = p{j} THEN 1 ELSE 0 END), 0)"
        value = dups if check.check_type == "unique_check" else f"COUNT(v{j}) - {dups}"
        exprs.append(f"CAST({value} AS DOUBLE) AS {alias}")
    sql = f"SELECT {', '.join(exprs)} FROM (SELECT {windows} FROM (SELECT {inner} FROM {source}) AS s) AS w"
    return AuditQuery(sql, [(alias, check.name) for alias, check in items])


def build_audit_queries(
    checks: Sequence[Check],
    source: str,
    modes: Mapping[str, str] | None = None,
    bucket_expr: str | None = None,
) -> list[AuditQuery]:
    """Fold the data checks into as few scans as possible.

    * one aggregate query holds every check that needs no shuffle (null counts, min/max,
      row predicates, aggregate predicates; partition clauses as conditional aggregates);
    * the exact ``distinct_check`` / ``unique_check`` counts go into one more query of their
      own: they need every key shuffled, and carrying the other aggregates through that
      keyed step costs far more than a second scan (measured: bench/wap_audit.py). With
      ``bucket_expr`` they are counted by sorting (:func:`_sorted_distinct_query`), else
      with ``COUNT(DISTINCT ...)``;
    * an aggregate table check with a partition clause needs that clause as a ``WHERE``:
      one filtered query per distinct clause.

    :param source: the relation to read, e.g. ```cat`.`ns`.`t` VERSION AS OF 123``.
    :param modes: table check name -> ``row`` | ``aggregate`` (default ``aggregate``).
    :param bucket_expr: SQL bucketing a value ``{v}`` for the sort-based distinct counts,
        e.g. ``pmod(hash({v}), 64)`` in Spark.
    """
    modes = modes or {}
    groups: dict[str, list[tuple[str, str, str]]] = {"main": [], "distinct": []}
    sorted_distinct: list[tuple[str, Check]] = []
    filtered: dict[str, list[tuple[str, str, str]]] = {}
    for i, check in enumerate(c for c in checks if c.kind in ("column", "table")):
        alias = f"c{i}"
        mode = modes.get(check.name, AGGREGATE)
        if check.check_type in DISTINCT_CHECKS and bucket_expr:
            sorted_distinct.append((alias, check))
            continue
        item = (alias, check.name, check_expression(check, mode))
        if check.kind == "table" and not check.aggregate and mode == AGGREGATE and check.partition_clause:
            filtered.setdefault(check.partition_clause, []).append(item)
        elif check.check_type in DISTINCT_CHECKS:
            groups["distinct"].append(item)
        else:
            groups["main"].append(item)
    queries = []
    for where, items in [*((None, g) for g in groups.values()), *filtered.items()]:
        if not items:
            continue
        exprs = ", ".join(f"{expr} AS {alias}" for alias, _, expr in items)
        sql = f"SELECT {exprs} FROM {source}" + (f" WHERE {where}" if where else "")
        queries.append(AuditQuery(sql, [(a, n) for a, n, _ in items]))
    if sorted_distinct:
        queries.insert(1 if groups["main"] else 0, _sorted_distinct_query(sorted_distinct, source, bucket_expr or ""))
    return queries


def mode_probe_sql(checks: Check | Sequence[Check], source: str) -> str:
    """SQL whose *analysis* succeeds iff every given table check's statement is a row predicate."""
    if isinstance(checks, Check):
        checks = [checks]
    exprs = ", ".join(f"MIN(CASE WHEN ({c.statement}) THEN 1 ELSE 0 END) AS m{i}" for i, c in enumerate(checks))
    return f"SELECT {exprs} FROM {source}"


def result_rows(
    checks: Sequence[Check],
    observed: Mapping[str, float | None],
    skipped: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``(check, observed value, condition, verdict)`` rows, in check order.

    :param skipped: check name -> reason, for checks that cannot be evaluated
        (e.g. ``added_rows_ratio`` before anything was ever published); they pass
        and say why in ``condition``.
    """
    rows = []
    for check in checks:
        value = observed.get(check.name)
        value = None if value is None else float(value)
        reason = (skipped or {}).get(check.name)
        rows.append(
            {
                "check_name": check.name,
                "check_type": check.check_type,
                "column_name": check.column,
                "observed_value": value,
                "condition": check.describe() + (f" (skipped: {reason})" if reason else ""),
                "passed": True if reason else check.evaluate(value),
            }
        )
    return rows


# ------------------------------------------------------- metadata and incremental audits
def metadata_expression(check: Check) -> str | None:
    """An expression Iceberg can answer from file metrics alone (Spark's aggregate push-down), or ``None``.

    Only ``COUNT(*)``, ``COUNT(col)``, ``MIN(col)`` and ``MAX(col)`` without a partition
    clause qualify: a null count is ``COUNT(*) - COUNT(col)``. Iceberg answers them from the
    manifests only when every file carries exact metrics and the snapshot has no delete files;
    otherwise Spark plans a normal scan, which the audit job detects before running it.
    """
    if check.partition_clause:
        return None
    if check.kind == "column":
        col = _q(check.column or "")
        if check.check_type == "null_check":
            return f"CAST(COUNT(*) - COUNT({col}) AS DOUBLE)"
        if check.check_type in ("min", "max"):
            return f"CAST({check.check_type.upper()}({col}) AS DOUBLE)"
        return None
    if check.kind == "table" and check.aggregate == "count" and check.column is None:
        return "CAST(COUNT(*) AS DOUBLE)"
    if check.kind == "table" and check.aggregate in ("count", "min", "max"):
        return check_expression(check)
    return None


def build_metadata_query(checks: Sequence[Check], source: str) -> AuditQuery | None:
    """One query over the checks that :func:`metadata_expression` can express (``None`` if none can)."""
    items = [(f"m{i}", c.name, expr) for i, c in enumerate(checks) if (expr := metadata_expression(c)) is not None]
    if not items:
        return None
    exprs = ", ".join(f"{expr} AS {alias}" for alias, _, expr in items)
    return AuditQuery(f"SELECT {exprs} FROM {source}", [(a, n) for a, n, _ in items])


def decomposable(check: Check, mode: str | None = None) -> bool:
    """Whether the check's value over ``base + appended rows`` follows from the two parts (:func:`combine`).

    Every check with a per-row value (:func:`row_value`) combines: column checks,
    single-aggregate table checks and row predicates. A general aggregate predicate
    (``COUNT(*) > 0 AND SUM(x) < 5``) does not and is always evaluated over the whole snapshot.
    """
    return check.kind in ("column", "table") and row_value(check, mode or AGGREGATE) is not None


def combine(check: Check, base: float | None, change: float | None, overlap: float = 0.0) -> float | None:
    """The check's value over base rows plus appended rows, from its value over each part.

    :param overlap: for ``unique_check`` / ``distinct_check``: how many distinct non-null
        values of the appended rows also occur in the base (duplicates across the parts).
        With ``d`` duplicates, ``n`` non-null values and ``k`` distinct ones,
        ``d(B+C) = d(B) + d(C) + overlap`` and ``k(B+C) = k(B) + k(C) - overlap``.
    """
    measured = row_value(check, ROW) if check.kind in ("column", "table") else None
    if measured is None:
        raise CheckSpecError(f"check {check.name!r} does not combine incrementally")
    how = measured[1]
    if how == "row":  # 1 when every row passes
        return min(_or(base, 1.0), _or(change, 1.0))
    if how in ("min", "max"):
        present = [v for v in (base, change) if v is not None]
        if not present:
            return None
        spark_order = lambda v: (math.isnan(v), v)  # noqa: E731 - NaN is larger than every number in Spark
        return min(present, key=spark_order) if how == "min" else max(present, key=spark_order)
    if how == "sum" and base is None and change is None:
        return None
    total = _or(base, 0.0) + _or(change, 0.0)  # nulls, count, sum, dups, distinct
    if how == "dups":
        return total + overlap
    if how == "distinct":
        return total - overlap
    return total


def _or(value: float | None, default: float) -> float:
    return default if value is None else float(value)


def overlap_query(
    check: Check,
    change_source: str,
    base_source: str,
    bounds: tuple[str, str] | None = None,
    alias: str = "overlap",
) -> str:
    """How many distinct non-null values of the check's value in the appended rows occur in the base.

    :param bounds: SQL for the lowest and highest value the appended rows can hold (e.g.
        named parameters ``(":lo", ":hi")`` set from the appended files' column metrics).
        The base side is then restricted to that range, a filter Iceberg evaluates against
        each base data file's column bounds, so base files that cannot hold an appended
        value are never read (for monotonic keys: none is).
    """
    col = _q(check.column or "")
    where = [f"{col} IS NOT NULL"]
    if check.partition_clause:
        where.append(f"({check.partition_clause})")
    if bounds:
        where.append(f"{col} >= {bounds[0]} AND {col} <= {bounds[1]}")
    return (
        f"SELECT CAST(COUNT(*) AS DOUBLE) AS {alias} FROM (SELECT DISTINCT {distinct_value(check)} AS v "
        f"FROM {change_source}) AS c WHERE c.v IN (SELECT {col} FROM {base_source} WHERE {' AND '.join(where)})"
    )


# ------------------------------------------------------- small inputs: aggregate on the driver
def driver_projection(checks: Sequence[Check], modes: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """``(check name, per-row SQL value, aggregation)`` for evaluating decomposable checks on the driver.

    For a small input (the rows a branch appended) one shuffle-free projection collected
    as Arrow and aggregated by :func:`aggregate_columns` is several times cheaper than a
    Spark aggregation with exact distinct counts (two shuffles). The per-row values are
    the very expressions :func:`check_expression` aggregates, so the results are the same.
    """
    modes = modes or {}
    out = []
    for check in checks:
        measured = row_value(check, modes.get(check.name, AGGREGATE))
        if measured is None:
            raise CheckSpecError(f"check {check.name!r} cannot be evaluated row by row")
        out.append((check.name, *measured))
    return out


def driver_projection_sql(projection: Sequence[tuple[str, str, str]], source: str) -> str:
    """The projection as one ``SELECT`` (columns ``p0``, ``p1``, ... in order)."""
    return f"SELECT {', '.join(f'{expr} AS p{i}' for i, (_, expr, _) in enumerate(projection))} FROM {source}"


def aggregate_columns(projection: Sequence[tuple[str, str, str]], columns: Sequence[Any]) -> dict[str, float | None]:
    """Aggregate the projected Arrow columns like Spark SQL would (see :func:`driver_projection`).

    Spark semantics kept: NULLs are skipped, ``SUM``/``MIN``/``MAX`` of no value is NULL, a
    null count of no rows is 0, NaN is larger than every number and equal to itself, and
    ``-0.0`` equals ``0.0`` in distinct counts.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    out: dict[str, float | None] = {}
    for (name, _, how), arr in zip(projection, columns, strict=True):
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        floating = pa.types.is_floating(arr.type)
        if how in ("nulls", "count"):
            out[name] = float(pc.sum(arr).as_py() or 0) if how == "nulls" else float(pc.count(arr).as_py())
        elif how == "sum":
            if pa.types.is_decimal(arr.type) and arr.type.precision > 28:
                # Arrow's 128-bit sum would wrap silently and Spark's result past 38 digits depends on ANSI mode
                raise CheckSpecError(f"SUM of {arr.type} for {name!r} is left to Spark (may exceed 38 digits)")
            if pa.types.is_integer(arr.type):
                arr = pc.cast(arr, pa.decimal128(38, 0))  # exact, like Spark's long sum before the cast
            total = pc.sum(arr, min_count=1).as_py()
            out[name] = None if total is None else float(total)
        elif how in ("min", "max"):
            valid = arr.drop_null()
            nan = pc.is_nan(valid) if floating else None
            has_nan = bool(nan is not None and pc.any(nan).as_py())
            numbers = pc.filter(valid, pc.invert(nan)) if has_nan else valid
            if how == "max" and has_nan:
                out[name] = math.nan
            elif len(numbers) == 0:
                out[name] = math.nan if has_nan else None
            else:
                value = pc.min_max(numbers)[how].as_py()
                out[name] = None if value is None else float(value)
        elif how == "row":
            value = pc.min(arr).as_py()
            out[name] = 1.0 if value is None else float(value)
        elif how in ("dups", "distinct"):
            if floating:
                arr = pc.add(arr, pa.scalar(0.0, arr.type))  # -0.0 + 0.0 == +0.0: one group, as in Spark
            distinct = pc.count_distinct(arr, mode="only_valid").as_py()
            out[name] = float(pc.count(arr).as_py() - distinct) if how == "dups" else float(distinct)
        else:
            raise CheckSpecError(f"unknown aggregation {how!r} for {name!r}")
    return out
