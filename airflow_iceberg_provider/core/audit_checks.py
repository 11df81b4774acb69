"""The audit check-spec grammar of write-audit-publish: parsing, validation, verdicts.

Pure Python (stdlib only): the Airflow side validates a spec with :func:`parse_checks` before
any Spark job starts and reuses recorded values (:func:`reusable_base_values`); the
``wap_audit`` Spark job decodes the same :class:`Check` values (shipped in the job zip) and
builds its SQL with :mod:`airflow_iceberg_provider.spark_jobs.audit.sql`.

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

"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from airflow_iceberg_provider.core import sql_allowlist

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")

COLUMN_CHECKS = ("null_check", "distinct_check", "unique_check", "min", "max")
DISTINCT_CHECKS = ("distinct_check", "unique_check")
CHANGE_CHECKS = ("added_rows", "added_rows_ratio")
COMPARISONS = ("equal_to", "greater_than", "geq_to", "less_than", "leq_to")
_CHANGE_ALIASES = {"min": "geq_to", "max": "leq_to"}
_COLUMN_EXTRA = ("tolerance", "partition_clause")
_TABLE_KEYS = ("check_statement", "partition_clause")

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
                parts.append(f"{symbols[key]} {fmt(self._bound(key))}")
        if "equal_to" in self.condition:
            if self.tolerance is None:
                parts.append(f"== {fmt(self.condition['equal_to'])}")
            else:
                parts.append(f">= {fmt(self._bound('equal_to', -1))}, <= {fmt(self._bound('equal_to', 1))}")
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


def fmt(value: float) -> str:
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
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise CheckSpecError(f"{where}={number} is not a finite number.")
    return number


def sql_fragment(
    value: Any, where: str, *, kind: str = sql_allowlist.PREDICATE, columns: Collection[str] | None = None
) -> str:
    """One user SQL fragment, parsed and accepted by allowlist (:mod:`.sql_allowlist`); returned stripped.

    :param kind: ``sql_allowlist.PREDICATE`` (partition clauses, ``replace_where``) or
        ``sql_allowlist.STATEMENT`` (a table check statement: aggregates allowed).
    :param columns: the table's column names when known (any other column is refused).
    :raises CheckSpecError: naming the node, where it is, and the fix.
    """
    if not isinstance(value, str) or not value.strip():
        raise CheckSpecError(f"{where} must be a non-empty SQL predicate string, e.g. \"region = 'ca'\".")
    try:
        return sql_allowlist.check_fragment(value, where, kind=kind, columns=columns)
    except sql_allowlist.UnsafeSqlError as err:
        raise CheckSpecError(str(err)) from err


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
                f"{where}: lower bound {lower[0]}={fmt(lo)} is not below upper bound "
                f"{upper[0]}={fmt(hi)}; no value could pass."
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
    columns: Collection[str] | None = None,
) -> list[Check]:
    """Validate the three check families and return the flat list of checks.

    :param partition_clause: predicate applied to every column and table check
        (combined with a check's own ``partition_clause`` by ``AND``), as in common-sql.
    :param columns: the audited table's column names, when known: the SQL fragments may name
        only these (:mod:`.sql_allowlist`); without them any plain column name is accepted and
        Spark resolves it.
    :raises CheckSpecError: on unknown check types or keys, non-numeric or
        contradictory thresholds, invalid column names or unsafe SQL fragments.
    """
    checks: list[Check] = []
    base_clause = sql_fragment(partition_clause, "partition_clause", columns=columns) if partition_clause else None

    def clause(own: Any, where: str) -> str | None:
        own_clause = sql_fragment(own, where, columns=columns) if own is not None else None
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
        statement = sql_fragment(
            values["check_statement"], f"{where}['check_statement']", kind=sql_allowlist.STATEMENT, columns=columns
        )
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


# ------------------------------------------------------------------ the identity of a check spec
#: the keys of a check spec given as one mapping (a publish's ``required_checks``)
SPEC_KEYS = ("column_mapping", "table_checks", "change_checks", "partition_clause", "accept_none")


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value``: keys sorted, no whitespace, UTF-8 characters as they are,
    no NaN or infinity (the bytes every check hash is computed over)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def check_hash(check: Check) -> str:
    """SHA-256 (hex) of one validated check's canonical JSON (:meth:`Check.to_dict`).

    Two checks hash alike only if everything that decides their verdict is alike: name, type,
    column, bounds, tolerance, partition clause, statement and ``accept_none``.
    """
    return hashlib.sha256(canonical_json(check.to_dict()).encode("utf-8")).hexdigest()


def spec_hash_of(check_hashes: Mapping[str, str]) -> str:
    """SHA-256 (hex) of a spec given as ``{check name: check hash}`` (canonical JSON of that mapping).

    An audit's rows carry each check's name and hash, so the hash of the spec an audit ran can be
    recomputed from its rows alone.
    """
    return hashlib.sha256(canonical_json(dict(check_hashes)).encode("utf-8")).hexdigest()


def spec_hash(checks: Sequence[Check]) -> str:
    """SHA-256 (hex) of the check spec ``checks`` form: :func:`spec_hash_of` their :func:`check_hash` values."""
    return spec_hash_of({c.name: check_hash(c) for c in checks})


def parse_check_spec(spec: Mapping[str, Any]) -> list[Check]:
    """Validate a check spec given as one mapping (keys :data:`SPEC_KEYS`, as the audit operator takes them).

    :raises CheckSpecError: an unknown key, or any error :func:`parse_checks` finds.
    """
    if not isinstance(spec, Mapping):
        raise CheckSpecError(
            f"the check spec must be a mapping with keys among {list(SPEC_KEYS)}, not {type(spec).__name__}."
        )
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        raise CheckSpecError(f"unknown keys {unknown} in the check spec; allowed: {list(SPEC_KEYS)}.")
    accept_none = spec.get("accept_none", True)
    if not isinstance(accept_none, bool):
        raise CheckSpecError(f"accept_none={accept_none!r} must be true or false.")
    return parse_checks(
        spec.get("column_mapping"),
        spec.get("table_checks"),
        spec.get("change_checks"),
        partition_clause=spec.get("partition_clause"),
        accept_none=accept_none,
    )
