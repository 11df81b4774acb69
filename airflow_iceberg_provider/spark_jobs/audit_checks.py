"""Audit check specs for write-audit-publish: parsing, validation, SQL building, verdicts.

Pure Python (no pyspark, no Airflow, no provider imports): the Airflow side
imports it as ``airflow_iceberg_provider.spark_jobs.audit_checks`` to validate a
spec before any Spark job starts, and the ``wap_audit`` Spark job receives the
same file with ``--py-files`` and imports it as ``audit_checks``.

Check format (the one the common-sql provider's ``SQLColumnCheckOperator`` and
``SQLTableCheckOperator`` use):

``column_mapping``
    ``{"amount": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}}}`` with
    check types ``null_check``, ``distinct_check``, ``unique_check``, ``min``,
    ``max`` and comparison keys ``equal_to``, ``greater_than``, ``geq_to``,
    ``less_than``, ``leq_to``; optional ``tolerance`` (fraction, widens the
    bounds by ``|expected| * tolerance``) and ``partition_clause`` (a SQL
    predicate restricting the rows the check sees).
``table_checks``
    ``{"has_rows": {"check_statement": "COUNT(*) > 0"}}`` with optional
    ``partition_clause``. A statement is either an aggregate predicate
    (``COUNT(*) > 0``, evaluated once) or a row predicate (``amount >= 0``,
    which must hold for every row), as in common-sql.
``change_checks`` (WAP only: the change set of the branch relative to its base)
    ``{"added_rows": {"min": 1, "max": 10_000_000}, "added_rows_ratio": {"max": 3}}``:
    ``added_rows`` is the net number of rows the branch added since its base (from
    the snapshot summaries: appended minus removed rows, so copy-on-write rewrites
    cancel out; negative when the change removed rows); ``added_rows_ratio`` divides
    it by the net rows of the previous published change. ``min``/``max`` mean
    ``geq_to``/``leq_to``; the comparison keys above work too.

The data checks of one audit are folded into one aggregate ``SELECT`` over the
audited snapshot (partition clauses become conditional aggregates), plus one query
for the exact distinct counts (``distinct_check`` / ``unique_check``), which need a
shuffle, and one filtered query per partition clause of aggregate table checks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")

COLUMN_CHECKS = ("null_check", "distinct_check", "unique_check", "min", "max")
DISTINCT_CHECKS = ("distinct_check", "unique_check")
CHANGE_CHECKS = ("added_rows", "added_rows_ratio")
COMPARISONS = ("equal_to", "greater_than", "geq_to", "less_than", "leq_to")
_CHANGE_ALIASES = {"min": "geq_to", "max": "leq_to"}
_COLUMN_EXTRA = ("tolerance", "partition_clause")
_TABLE_KEYS = ("check_statement", "partition_clause")
#: Keywords refused in user SQL fragments: audits read, they never change anything.
_FORBIDDEN_SQL = re.compile(
    r";|--|/\*|\b(insert|update|delete|merge|drop|alter|create|truncate|call|grant|revoke)\b",
    re.IGNORECASE,
)

#: Table check statement modes (decided by the Spark job's analyser).
ROW = "row"
AGGREGATE = "aggregate"


class CheckSpecError(ValueError):
    """A check spec is invalid; the message names the check, the problem and the fix."""


@dataclass(frozen=True)
class Check:
    """One validated check."""

    name: str  # unique within an audit, e.g. "amount.null_check", "table.has_rows", "change.added_rows"
    kind: str  # "column" | "table" | "change"
    check_type: str  # null_check ... max | check_statement | added_rows ...
    column: str | None = None
    condition: dict[str, float] = field(default_factory=dict)
    tolerance: float | None = None
    partition_clause: str | None = None
    statement: str | None = None
    accept_none: bool = True
    #: for a table check whose statement is one aggregate compared with a number
    #: (``COUNT(*) > 0``, ``SUM(amount) >= 1``): ``count`` / ``sum`` / ``min`` / ``max``; its
    #: observed value is then the aggregate itself and ``condition`` holds the comparison.
    aggregate: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def describe(self) -> str:
        """Human-readable condition, e.g. ``>= 0`` or ``>= 90.0, <= 110.0`` (tolerance expanded)."""
        if self.kind == "table":
            where = f" WHERE {self.partition_clause}" if self.partition_clause else ""
            return f"{self.statement}{where}"
        parts = []
        symbols = {"greater_than": ">", "geq_to": ">=", "less_than": "<", "leq_to": "<="}
        for key in ("greater_than", "geq_to", "less_than", "leq_to"):
            if key in self.condition:
                parts.append(f"{symbols[key]} {_fmt(self._bound(key))}")
        if "equal_to" in self.condition:
            if self.tolerance is None:
                parts.append(f"== {_fmt(self.condition['equal_to'])}")
            else:
                parts.append(f">= {_fmt(self._bound('equal_to', -1))}, <= {_fmt(self._bound('equal_to', 1))}")
        text = ", ".join(parts)
        if self.partition_clause:
            text += f" WHERE {self.partition_clause}"
        return text

    def _bound(self, key: str, sign: int = 0) -> float:
        expected = float(self.condition[key])
        if self.tolerance is None:
            return expected
        if sign == 0:
            sign = -1 if key in ("greater_than", "geq_to") else 1
        return expected + sign * abs(expected) * self.tolerance

    def evaluate(self, observed: float | None) -> bool:
        """Verdict for an observed value (common-sql semantics; ``None`` counts as 0 if accepted)."""
        if observed is None or (isinstance(observed, float) and math.isnan(observed)):
            if not self.accept_none:
                return False
            observed = 0.0
        value = float(observed)
        ok = True
        if "geq_to" in self.condition:
            ok = value >= self._bound("geq_to")
        elif "greater_than" in self.condition:
            ok = value > self._bound("greater_than")
        if "leq_to" in self.condition:
            ok = ok and value <= self._bound("leq_to")
        elif "less_than" in self.condition:
            ok = ok and value < self._bound("less_than")
        if "equal_to" in self.condition:
            if self.tolerance is None:
                ok = ok and value == float(self.condition["equal_to"])
            else:
                ok = ok and self._bound("equal_to", -1) <= value <= self._bound("equal_to", 1)
        return ok


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                value = None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise CheckSpecError(f"{where} is not a number; thresholds must be numbers, e.g. 0 or 0.5.")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise CheckSpecError(f"{where}={value} is not a finite number.")
    return value


def _sql_fragment(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CheckSpecError(f"{where} must be a non-empty SQL predicate string, e.g. \"region = 'ca'\".")
    found = _FORBIDDEN_SQL.search(value) or re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]", value)
    if found:
        raise CheckSpecError(
            f"{where}={value!r} contains {found.group(0)!r}; check statements and partition clauses are "
            "single read-only predicates (no ';', comments, control characters or DDL/DML keywords)."
        )
    if len(value) > 4000:
        raise CheckSpecError(f"{where} is longer than 4000 characters.")
    return value.strip()


def _condition(values: Mapping[str, Any], where: str, aliases: Mapping[str, str] | None = None) -> dict[str, float]:
    cond: dict[str, float] = {}
    for key, raw in values.items():
        target = (aliases or {}).get(key, key)
        if target in COMPARISONS:
            if target in cond:
                raise CheckSpecError(f"{where} gives {target!r} twice (through {key!r}); give it once.")
            cond[target] = _number(raw, f"{where}[{key!r}]")
    if not cond:
        accepted = [*COMPARISONS, *((aliases or {}).keys())]
        raise CheckSpecError(f"{where} has no comparison; give one or more of {accepted}.")
    lower = [k for k in ("greater_than", "geq_to") if k in cond]
    upper = [k for k in ("less_than", "leq_to") if k in cond]
    if len(lower) > 1 or len(upper) > 1:
        raise CheckSpecError(f"{where} gives both {lower or upper}; use one lower and one upper bound.")
    if lower and upper:
        lo, hi = cond[lower[0]], cond[upper[0]]
        strict = lower[0] == "greater_than" or upper[0] == "less_than"
        if lo > hi or (strict and lo >= hi):
            raise CheckSpecError(
                f"{where}: lower bound {lower[0]}={_fmt(lo)} is not below upper bound "
                f"{upper[0]}={_fmt(hi)}; no value could pass."
            )
    if "equal_to" in cond and (lower or upper):
        raise CheckSpecError(f"{where} combines equal_to with a range; use either equal_to or bounds.")
    return cond


_SIMPLE_AGGREGATE = re.compile(
    r"^\s*(count|sum|min|max)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]{0,127}|`[A-Za-z_][A-Za-z0-9_]{0,127}`)\s*\)\s*(>=|<=|==|=|>|<)\s*"
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*\Z",
    re.IGNORECASE,
)
_AGGREGATE_OPS = {">": "greater_than", ">=": "geq_to", "<": "less_than", "<=": "leq_to", "=": "equal_to"}


def simple_aggregate(statement: str) -> tuple[str, str | None, str, float] | None:
    """``(function, column or None for *, comparison key, number)`` when a table check
    statement is one aggregate compared with a number, e.g. ``SUM(amount) > 0``; else ``None``.

    Such checks record the aggregate as their observed value (more useful than 1/0), share
    the single pass even with a partition clause (as a conditional aggregate), can be
    answered from Iceberg metadata (``COUNT``/``MIN``/``MAX``) and combine incrementally.
    """
    found = _SIMPLE_AGGREGATE.match(statement)
    if not found:
        return None
    func, column, op, number = found.groups()
    column = column.strip("`")
    if column == "*" and func.lower() != "count":
        return None
    value = float(number)
    if math.isinf(value):
        return None
    return func.lower(), None if column == "*" else column, _AGGREGATE_OPS[op.replace("==", "=")], value


def as_general_statement(check: Check) -> Check:
    """The same table check evaluated as a general predicate (observed 1/0), e.g. when the
    aggregated column turns out not to be numeric, so ``MIN(ts) > 0`` keeps SQL's own semantics."""
    return replace(check, aggregate=None, column=None, condition={"equal_to": 1.0})


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise CheckSpecError(f"{where} must be a mapping (dict), got {type(value).__name__}.")
    return value


def parse_checks(
    column_mapping: Mapping[str, Any] | None = None,
    table_checks: Mapping[str, Any] | None = None,
    change_checks: Mapping[str, Any] | None = None,
    *,
    partition_clause: str | None = None,
    accept_none: bool = True,
) -> list[Check]:
    """Validate the three check families and return the flat list of checks.

    :param partition_clause: predicate applied to every column and table check
        (combined with a check's own ``partition_clause`` by ``AND``), as in common-sql.
    :raises CheckSpecError: on unknown check types or keys, non-numeric or
        contradictory thresholds, invalid column names or unsafe SQL fragments.
    """
    checks: list[Check] = []
    base_clause = _sql_fragment(partition_clause, "partition_clause") if partition_clause else None

    def clause(own: Any, where: str) -> str | None:
        own_clause = _sql_fragment(own, where) if own is not None else None
        if base_clause and own_clause:
            return f"({base_clause}) AND ({own_clause})"
        return own_clause or base_clause

    checks.extend(_column_checks(column_mapping, clause, accept_none))
    for name, values in _mapping(table_checks or {}, "table_checks").items():
        where = f"table_checks[{name!r}]"
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise CheckSpecError(f"{where}: check name must match [A-Za-z_][A-Za-z0-9_]*.")
        values = _mapping(values, where)
        unknown = [k for k in values if k not in _TABLE_KEYS]
        if unknown or "check_statement" not in values:
            raise CheckSpecError(
                f"{where}: expected keys 'check_statement' (required) and 'partition_clause' (optional), "
                f"got {sorted(values)}."
            )
        statement = _sql_fragment(values["check_statement"], f"{where}['check_statement']")
        simple = simple_aggregate(statement)
        checks.append(
            Check(
                name=f"table.{name}",
                kind="table",
                check_type="check_statement",
                column=simple[1] if simple else None,
                condition={simple[2]: simple[3]} if simple else {"equal_to": 1.0},
                statement=statement,
                partition_clause=clause(values.get("partition_clause"), f"{where}['partition_clause']"),
                accept_none=False,
                aggregate=simple[0] if simple else None,
            )
        )
    for check_type, values in _mapping(change_checks or {}, "change_checks").items():
        where = f"change_checks[{check_type!r}]"
        if check_type not in CHANGE_CHECKS:
            raise CheckSpecError(f"{where}: unknown change check {check_type!r}; use one of {list(CHANGE_CHECKS)}.")
        values = _mapping(values, where)
        unknown = [k for k in values if k not in COMPARISONS and k not in _CHANGE_ALIASES]
        if unknown:
            raise CheckSpecError(f"{where}: unknown key(s) {unknown}; use 'min'/'max' or {list(COMPARISONS)}.")
        checks.append(
            Check(
                name=f"change.{check_type}",
                kind="change",
                check_type=check_type,
                condition=_condition(values, where, _CHANGE_ALIASES),
                accept_none=True,
            )
        )
    if not checks:
        raise CheckSpecError(
            "No audit checks given; pass column_mapping, table_checks and/or change_checks (an audit that "
            "checks nothing would let any data through)."
        )
    return checks


def _column_checks(column_mapping: Any, clause: Callable[[Any, str], str | None], accept_none: bool) -> Iterator[Check]:
    """The ``column_mapping`` family of :func:`parse_checks`."""
    for column, col_checks in _mapping(column_mapping or {}, "column_mapping").items():
        if not isinstance(column, str) or not NAME_RE.match(column):
            raise CheckSpecError(
                f"column_mapping key {column!r} is not a valid column name; expected [A-Za-z_][A-Za-z0-9_]* "
                "(nested fields and quoted names are not supported)."
            )
        col_checks = _mapping(col_checks, f"column_mapping[{column!r}]")
        if not col_checks:
            raise CheckSpecError(
                f"column_mapping[{column!r}] has no checks; give e.g. {{'null_check': {{'equal_to': 0}}}}."
            )
        for check_type, values in col_checks.items():
            where = f"column_mapping[{column!r}][{check_type!r}]"
            if check_type not in COLUMN_CHECKS:
                raise CheckSpecError(f"{where}: unknown column check {check_type!r}; use one of {list(COLUMN_CHECKS)}.")
            values = _mapping(values, where)
            unknown = [k for k in values if k not in COMPARISONS and k not in _COLUMN_EXTRA]
            if unknown:
                raise CheckSpecError(
                    f"{where}: unknown key(s) {unknown}; use comparison keys {list(COMPARISONS)} plus optional "
                    f"{list(_COLUMN_EXTRA)}."
                )
            tolerance = values.get("tolerance")
            if tolerance is not None:
                tolerance = _number(tolerance, f"{where}['tolerance']")
                if tolerance < 0:
                    raise CheckSpecError(f"{where}['tolerance']={tolerance} must be >= 0 (a fraction, e.g. 0.1).")
            yield Check(
                name=f"{column}.{check_type}",
                kind="column",
                check_type=check_type,
                column=column,
                condition=_condition(values, where),
                tolerance=tolerance,
                partition_clause=clause(values.get("partition_clause"), f"{where}['partition_clause']"),
                accept_none=accept_none,
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


def reusable_base_values(checks: Sequence[Check], rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Observed values an earlier audit recorded for the base snapshot, for checks defined the same way.

    :param rows: ``audit_results`` rows of the base snapshot (any ref, any run). A row is
        reused when its check name, type, column and condition text equal this check's (so
        a changed threshold, clause or statement means a full evaluation once) and it was
        really evaluated (not skipped); the newest such row wins.
    """
    out: dict[str, float | None] = {}
    newest: dict[str, Any] = {}
    wanted = {c.name: c for c in checks if c.kind in ("column", "table")}
    for row in rows:
        check = wanted.get(str(row.get("check_name")))
        if check is None or "(skipped" in (row.get("condition") or ""):
            continue
        if (row.get("check_type"), row.get("column_name"), row.get("condition")) != (
            check.check_type,
            check.column,
            check.describe(),
        ):
            continue
        stamp = row.get("evaluated_at")
        if check.name not in newest or (stamp is not None and stamp > newest[check.name]):
            newest[check.name] = stamp
            value = row.get("observed_value")
            out[check.name] = None if value is None else float(value)
    return out


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
