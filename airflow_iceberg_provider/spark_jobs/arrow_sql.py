"""Evaluate a small subset of Spark SQL row expressions on Arrow columns, with Spark's semantics.

Used by the audit engine to evaluate the per-row values of data checks
(:func:`audit_checks.row_value`: generated ``CASE``/``CAST``/``COALESCE`` around the user's
``check_statement`` and ``partition_clause``) over the rows a branch appended, read straight
from their Parquet files on the driver: no Spark job. Anything outside the subset raises
:class:`Unsupported` and the caller lets Spark evaluate the expression instead, so the subset
only has to be *exact* where it answers, never complete.

The subset (keywords case-insensitive)::

    expr     := or
    or       := and (OR and)*
    and      := not (AND not)*
    not      := NOT not | pred
    pred     := operand [ cmp operand | IS [NOT] NULL | [NOT] IN (lit, ...)
                        | [NOT] BETWEEN operand AND operand ]
    cmp      := = | == | <> | != | < | <= | > | >=
    operand  := literal | column | ( expr ) | CASE WHEN expr THEN expr ... [ELSE expr] END
              | CAST ( expr AS DOUBLE ) | COALESCE ( expr, expr, ... )
    literal  := [-]number | 'text' | TRUE | FALSE | NULL | DATE 'yyyy-mm-dd'
              | TIMESTAMP 'yyyy-mm-dd[ hh:mm[:ss[.ffffff]]]'   (in the session time zone)
    column   := name | `name`

Spark semantics kept: three-valued logic (``NULL`` propagates, ``AND``/``OR`` are Kleene),
``NaN`` equals itself and is larger than every number, ``-0.0 = 0.0``, integer columns
compared exactly with fractional literals, strings compared by bytes, ``CASE`` treats a
``NULL`` condition as false, ``CAST(timestamp AS DOUBLE)`` is seconds since the epoch.
Refused (``Unsupported``): arithmetic, functions, ``LIKE``, comparisons across type families
(Spark would cast a string to a number, for instance), float-to-float column comparisons,
timestamps without zone, string escapes, comments.
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import re
from dataclasses import dataclass
from typing import Any


class Unsupported(ValueError):
    """The expression is outside the subset evaluated here: let Spark evaluate it."""


# ----------------------------------------------------------------------------- tokens
_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
      | (?P<str>'[^'\\]*')
      | (?P<quoted>`[^`]+`)
      | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
      | (?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,|-)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {
    "and",
    "or",
    "not",
    "is",
    "null",
    "in",
    "between",
    "case",
    "when",
    "then",
    "else",
    "end",
    "cast",
    "as",
    "coalesce",
    "true",
    "false",
    "like",
    "rlike",
    "ilike",
    "exists",
    "distinct",
}


@dataclass(frozen=True)
class _Tok:
    kind: str  # num, str, name, kw, op
    text: str


def tokenize(sql: str) -> list[_Tok]:
    out, pos = [], 0
    while pos < len(sql):
        if sql[pos:].strip() == "":
            break
        m = _TOKEN.match(sql, pos)
        if m is None:
            raise Unsupported(f"cannot read {sql[pos : pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        text = m.group(kind)
        if kind == "str" and sql[pos : pos + 1] == "'":
            raise Unsupported("adjacent string literals")
        if kind == "op" and text == "-" and sql[pos : pos + 1] == "-":
            raise Unsupported("comments")
        if kind == "name" and text.lower() in _KEYWORDS:
            kind, text = "kw", text.lower()
        elif kind == "quoted":
            kind, text = "name", text[1:-1]
        if kind == "num" and pos < len(sql) and (sql[pos].isalpha() or sql[pos] == "_"):
            raise Unsupported(f"typed number literal {text}{sql[pos]}")  # 5L, 1.0D, 2BD, ...
        out.append(_Tok(kind, text))
    return out


# ----------------------------------------------------------------------------- syntax tree
@dataclass(frozen=True)
class Lit:
    value: Any  # None, bool, int, decimal.Decimal, float, str, datetime.date, ("ts", local datetime)


@dataclass(frozen=True)
class Col:
    name: str


@dataclass(frozen=True)
class Cmp:
    op: str
    left: Any
    right: Any


@dataclass(frozen=True)
class Logic:
    op: str  # and, or
    left: Any
    right: Any


@dataclass(frozen=True)
class Not:
    arg: Any


@dataclass(frozen=True)
class IsNull:
    arg: Any
    negated: bool


@dataclass(frozen=True)
class Case:
    branches: tuple  # ((condition, value), ...)
    default: Any


@dataclass(frozen=True)
class CastDouble:
    arg: Any


@dataclass(frozen=True)
class Coalesce:
    args: tuple


_TS_LITERAL = re.compile(r"^(\d{4})-(\d{2})-(\d{2})(?:[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,6}))?)?)?$")
_DATE_LITERAL = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")


class _Parser:
    def __init__(self, sql: str) -> None:
        self.toks = tokenize(sql)
        self.i = 0

    def peek(self, offset: int = 0) -> _Tok | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def accept(self, kind: str, text: str | None = None) -> _Tok | None:
        tok = self.peek()
        if tok is not None and tok.kind == kind and (text is None or tok.text == text):
            self.i += 1
            return tok
        return None

    def expect(self, kind: str, text: str | None = None) -> _Tok:
        tok = self.accept(kind, text)
        if tok is None:
            raise Unsupported(f"expected {text or kind} at token {self.i}")
        return tok

    def parse(self) -> Any:
        node = self.or_()
        extra = self.peek()
        if extra is not None:
            raise Unsupported(f"unexpected {extra.text!r}")
        return node

    def or_(self) -> Any:
        node = self.and_()
        while self.accept("kw", "or"):
            node = Logic("or", node, self.and_())
        return node

    def and_(self) -> Any:
        node = self.not_()
        while self.accept("kw", "and"):
            node = Logic("and", node, self.not_())
        return node

    def not_(self) -> Any:
        if self.accept("kw", "not"):
            return Not(self.not_())
        return self.pred()

    def pred(self) -> Any:
        left = self.operand()
        tok = self.peek()
        if tok is None:
            return left
        if tok.kind == "op" and tok.text in ("=", "==", "<>", "!=", "<", "<=", ">", ">="):
            self.i += 1
            op = {"==": "=", "!=": "<>"}.get(tok.text, tok.text)
            return Cmp(op, left, self.operand())
        if self.accept("kw", "is"):
            negated = bool(self.accept("kw", "not"))
            self.expect("kw", "null")
            return IsNull(left, negated)
        negated = bool(self.accept("kw", "not"))
        if self.accept("kw", "in"):
            self.expect("op", "(")
            items = [self.literal()]
            while self.accept("op", ","):
                items.append(self.literal())
            self.expect("op", ")")
            if any(item.value is None for item in items):
                raise Unsupported("NULL in an IN list")
            node: Any = None
            for item in items:  # Spark: x IN (a, b) is x = a OR x = b (same NULL semantics)
                eq = Cmp("=", left, item)
                node = eq if node is None else Logic("or", node, eq)
            return Not(node) if negated else node
        if self.accept("kw", "between"):
            lo = self.operand()
            self.expect("kw", "and")
            hi = self.operand()
            node = Logic("and", Cmp(">=", left, lo), Cmp("<=", left, hi))
            return Not(node) if negated else node
        if negated:
            raise Unsupported("NOT here")
        return left

    def literal(self) -> Lit:
        node = self.operand()
        if not isinstance(node, Lit):
            raise Unsupported("IN list of non-literals")
        return node

    def operand(self) -> Any:
        tok = self.peek()
        if tok is None:
            raise Unsupported("unexpected end")
        if tok.kind == "op" and tok.text == "(":
            self.i += 1
            node = self.or_()
            self.expect("op", ")")
            return node
        if tok.kind == "op" and tok.text == "-":
            self.i += 1
            num = self.expect("num")
            return Lit(-_number(num.text))
        if tok.kind == "num":
            self.i += 1
            return Lit(_number(tok.text))
        if tok.kind == "str":
            self.i += 1
            return Lit(tok.text[1:-1])
        if tok.kind == "kw":
            self.i += 1
            return self.keyword_operand(tok.text)
        if tok.kind == "name":
            self.i += 1
            return self.name_operand(tok.text)
        raise Unsupported(f"unexpected {tok.text!r}")

    def keyword_operand(self, word: str) -> Any:
        """The operand after keyword ``word`` (already consumed): TRUE/FALSE/NULL, CASE, CAST, COALESCE."""
        if word in ("true", "false"):
            return Lit(word == "true")
        if word == "null":
            return Lit(None)
        if word == "case":
            return self.case()
        if word == "cast":
            self.expect("op", "(")
            arg = self.or_()
            self.expect("kw", "as")
            target = self.expect("name")
            self.expect("op", ")")
            if target.text.lower() != "double":
                raise Unsupported(f"CAST AS {target.text}")
            return CastDouble(arg)
        if word == "coalesce":
            self.expect("op", "(")
            args = [self.or_()]
            while self.accept("op", ","):
                args.append(self.or_())
            self.expect("op", ")")
            return Coalesce(tuple(args))
        raise Unsupported(f"keyword {word.upper()}")

    def name_operand(self, name: str) -> Any:
        """The operand after name ``name`` (already consumed): a typed literal or a column."""
        nxt = self.peek()
        if name.lower() in ("timestamp", "date") and nxt is not None and nxt.kind == "str":
            self.i += 1
            return Lit(_typed_literal(name.lower(), nxt.text[1:-1]))
        if nxt is not None and nxt.kind == "op" and nxt.text == "(":
            raise Unsupported(f"function {name}")
        return Col(name)

    def case(self) -> Case:
        branches = []
        first = self.peek()
        if first is not None and first.text != "when":
            raise Unsupported("CASE <value> WHEN")
        while self.accept("kw", "when"):
            cond = self.or_()
            self.expect("kw", "then")
            branches.append((cond, self.or_()))
        default = self.or_() if self.accept("kw", "else") else Lit(None)
        self.expect("kw", "end")
        if not branches:
            raise Unsupported("CASE without WHEN")
        return Case(tuple(branches), default)


def _number(text: str) -> int | decimal.Decimal | float:
    """Spark's literal types: digits are integral, with a point exact decimals, with an exponent doubles."""
    if "e" in text.lower():
        double = float(text)
        if math.isinf(double):
            raise Unsupported(f"literal {text} overflows a double (Spark refuses it)")
        return double
    if "." in text:
        value = decimal.Decimal(text)
        if len(value.as_tuple().digits) > 38:
            raise Unsupported(f"literal {text} has more than 38 digits")
        return value
    integral = int(text)
    if integral > 2**63 - 1:  # Spark reads it as a DECIMAL(38, 0)
        raise Unsupported(f"literal {text} is beyond BIGINT")
    return integral


def _typed_literal(kind: str, text: str) -> Any:
    if kind == "date":
        m = _DATE_LITERAL.match(text)
        if not m:
            raise Unsupported(f"DATE literal {text!r}")
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    m = _TS_LITERAL.match(text)
    if not m:
        raise Unsupported(f"TIMESTAMP literal {text!r}")
    frac = (m[7] or "").ljust(6, "0")
    local = dt.datetime(int(m[1]), int(m[2]), int(m[3]), int(m[4] or 0), int(m[5] or 0), int(m[6] or 0), int(frac or 0))
    return ("ts", local)


@functools.lru_cache(maxsize=512)
def parse(sql: str) -> Any:
    """The syntax tree of ``sql``; :class:`Unsupported` if it is outside the subset."""
    return _Parser(sql).parse()


# ----------------------------------------------------------------------------- evaluation
#: Iceberg primitive type -> family used for comparisons (others are refused).
_FAMILIES = {
    "boolean": "bool",
    "int": "int",
    "long": "int",
    "float": "float",
    "double": "float",
    "string": "string",
    "date": "date",
    "timestamptz": "ts",
}


def family(iceberg_type: str) -> str | None:
    """The comparison family of an Iceberg type name (``decimal(p, s)`` is ``decimal``), or ``None``."""
    if iceberg_type.startswith("decimal"):
        return "decimal"
    return _FAMILIES.get(iceberg_type)


@dataclass
class _Val:
    data: Any  # pa.Array (len n) or pa.Scalar
    fam: str  # bool, int, float, decimal, string, date, ts, null, double-of-decimal
    column: bool = False  # a (possibly wrapped) column, as opposed to a literal


class Evaluator:
    """Evaluates parsed expressions over one Arrow table of the audited columns.

    :param columns: lower-case column name -> (Arrow array, Iceberg type name).
    :param time_zone: Spark's session time zone (``TIMESTAMP '...'`` literals are local to it).
    """

    def __init__(self, columns: dict[str, tuple[Any, str]], rows: int, time_zone: str) -> None:
        self.columns = columns
        self.rows = rows
        self.time_zone = time_zone

    # public ---------------------------------------------------------------------
    def value(self, sql: str) -> Any:
        """The per-row value of ``sql`` as an Arrow array of ``rows`` values.

        A top-level ``CAST(decimal AS DOUBLE)`` returns the decimals themselves: callers
        only take their minimum/maximum (then converted exactly, as Spark's cast would).
        """
        node = parse(sql)
        if isinstance(node, CastDouble):
            inner = self.eval(node.arg)
            if inner.fam == "decimal":
                return self._array(inner)
        return self._array(self.eval(node))

    # internals ------------------------------------------------------------------
    def _array(self, val: _Val) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(val.data, pa.Array):
            return val.data
        scalar = val.data if val.fam != "null" else pa.scalar(None, pa.int32())
        return pc.fill_null(pa.nulls(self.rows, scalar.type), scalar)

    def eval(self, node: Any) -> _Val:
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(node, Lit):
            return self._literal(node.value)
        if isinstance(node, Col):
            found = self.columns.get(node.name.lower())
            if found is None:
                raise Unsupported(f"column {node.name!r} not loaded")
            arr, iceberg_type = found
            fam = family(iceberg_type)
            if fam is None:
                raise Unsupported(f"column {node.name!r} of type {iceberg_type}")
            return _Val(arr, fam, column=True)
        if isinstance(node, Logic):
            left, right = self._bool(node.left), self._bool(node.right)
            fn = pc.and_kleene if node.op == "and" else pc.or_kleene
            return _Val(fn(left.data, right.data), "bool", left.column or right.column)
        if isinstance(node, Not):
            arg = self._bool(node.arg)
            return _Val(pc.invert(arg.data), "bool", arg.column)
        if isinstance(node, IsNull):
            arg = self.eval(node.arg)
            if isinstance(arg.data, pa.Array):
                out = pc.is_valid(arg.data) if node.negated else pc.is_null(arg.data)
            else:
                out = pa.scalar(arg.data.is_valid == node.negated)
            return _Val(out, "bool", arg.column)
        if isinstance(node, Cmp):
            return self._compare(node)
        if isinstance(node, Case):
            return self._case(node)
        if isinstance(node, CastDouble):
            return self._cast_double(self.eval(node.arg))
        if isinstance(node, Coalesce):
            vals = [self.eval(a) for a in node.args]
            fam = _common_family(vals)
            typ = _arrow_type(vals, fam)
            return _Val(pc.coalesce(*(self._as(v, typ) for v in vals)), fam, any(v.column for v in vals))
        raise Unsupported(f"node {type(node).__name__}")

    def _bool(self, node: Any) -> _Val:
        val = self.eval(node)
        if val.fam == "null":
            import pyarrow as pa

            return _Val(pa.scalar(None, pa.bool_()), "bool")
        if val.fam != "bool":
            raise Unsupported("a non-boolean operand of AND/OR/NOT/WHEN")
        return val

    def _literal(self, value: Any) -> _Val:
        import pyarrow as pa

        if value is None:
            return _Val(pa.scalar(None, pa.null()), "null")
        if isinstance(value, bool):
            return _Val(pa.scalar(value), "bool")
        if isinstance(value, int):
            return _Val(pa.scalar(value, pa.int64()), "int")
        if isinstance(value, decimal.Decimal):
            return _Val(pa.scalar(value), "decimal")
        if isinstance(value, float):
            return _Val(pa.scalar(value, pa.float64()), "float")
        if isinstance(value, str):
            return _Val(pa.scalar(value), "string")
        if isinstance(value, tuple) and value[0] == "ts":
            return _Val(pa.scalar(_instant(value[1], self.time_zone), pa.timestamp("us", tz="UTC")), "ts")
        if isinstance(value, dt.date):
            return _Val(pa.scalar(value, pa.date32()), "date")
        raise Unsupported(f"literal {value!r}")

    def _compare(self, node: Cmp) -> _Val:
        import pyarrow as pa
        import pyarrow.compute as pc

        left, right, op = self.eval(node.left), self.eval(node.right), node.op
        if left.fam == "null" or right.fam == "null":
            return _Val(pa.scalar(None, pa.bool_()), "bool")
        if not left.column and right.column:  # literal <op> column -> column <flipped op> literal
            left, right, op = right, left, {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
        _check_comparable(left, right)
        fns = {
            "=": pc.equal,
            "<>": pc.not_equal,
            "<": pc.less,
            "<=": pc.less_equal,
            ">": pc.greater,
            ">=": pc.greater_equal,
        }
        lhs, rhs = left.data, right.data
        if left.fam == "int" and right.fam == "decimal" and not right.column:
            # Spark compares exactly (as decimals): x > 2.5 is x >= 3, x = 2.5 is never true
            lit = right.data.as_py()
            if lit != lit.to_integral_value():
                op, lit = {
                    "<": ("<=", math.floor(lit)),
                    "<=": ("<=", math.floor(lit)),
                    ">": (">=", math.ceil(lit)),
                    ">=": (">=", math.ceil(lit)),
                    "=": ("never", 0),
                    "<>": ("always", 0),
                }[op]
            rhs = pa.scalar(int(lit), pa.int64())
            if op in ("never", "always"):  # NULL stays NULL
                out = pc.if_else(pc.is_valid(lhs), pa.scalar(op == "always"), pa.scalar(None, pa.bool_()))
                return _Val(out, "bool", True)
        elif left.fam == "decimal" and right.fam == "float" or left.fam == "float" and right.fam == "decimal":
            if left.column and right.column:
                raise Unsupported("decimal column compared with a float column")
            if left.fam == "decimal":
                raise Unsupported("decimal column compared with a double literal")
            rhs = pa.scalar(float(right.data.as_py()), pa.float64())  # Spark casts the decimal to double
        elif left.fam == "decimal" and right.fam == "int" and not right.column:
            rhs = pa.scalar(decimal.Decimal(right.data.as_py()))
        elif left.fam != right.fam and left.column and right.column:
            raise Unsupported(f"{left.fam} column compared with a {right.fam} column")
        if isinstance(lhs, pa.Array) and pa.types.is_float32(lhs.type):
            raise Unsupported("FLOAT column comparison (Spark compares in single precision)")
        out = fns[op](lhs, rhs)
        if left.fam == "float" and left.column and not right.column and op in (">", ">="):
            # NaN is larger than every number in Spark (IEEE says the comparison is false)
            rv = right.data.as_py()
            if rv is not None and not (isinstance(rv, float) and math.isnan(rv)):
                out = pc.or_kleene(out, pc.is_nan(lhs))
        return _Val(out, "bool", left.column or right.column)

    def _case(self, node: Case) -> _Val:
        import pyarrow as pa
        import pyarrow.compute as pc

        conds = [self._bool(c) for c, _ in node.branches]
        vals = [self.eval(v) for _, v in node.branches] + [self.eval(node.default)]
        fam = _common_family(vals)
        typ = _arrow_type(vals, fam)
        out = self._as(vals[-1], typ)
        for cond, val in zip(reversed(conds), reversed(vals[:-1]), strict=True):
            test = cond.data
            if isinstance(test, pa.Array):
                test = pc.fill_null(test, False)  # a NULL condition is not true
            elif not test.is_valid:
                continue
            out = pc.if_else(test, self._as(val, typ), out)
        return _Val(out, fam, True)

    def _as(self, val: _Val, typ: Any) -> Any:
        import pyarrow as pa

        if val.fam == "null":
            return pa.scalar(None, typ)
        if val.data.type != typ:
            return val.data.cast(typ)
        return val.data

    def _cast_double(self, val: _Val) -> _Val:
        import pyarrow as pa
        import pyarrow.compute as pc

        if val.fam == "null":
            return _Val(pa.scalar(None, pa.float64()), "float")
        if val.fam in ("int", "float", "bool"):
            data = val.data
            if val.fam == "bool":
                data = data.cast(pa.int8())
            return _Val(pc.cast(data, pa.float64(), safe=False), "float", val.column)
        if val.fam == "ts":  # seconds since the epoch: micros converted, then divided (Spark's order of operations)
            micros = pc.cast(val.data.cast(pa.int64()), pa.float64(), safe=False)
            return _Val(pc.divide(micros, pa.scalar(1_000_000.0)), "float", val.column)
        raise Unsupported(f"CAST({val.fam} AS DOUBLE)")


def _check_comparable(left: _Val, right: _Val) -> None:
    """Refuse comparisons whose Spark semantics the evaluator does not reproduce."""
    numeric = ("int", "float", "decimal")
    if left.fam != right.fam and not (left.fam in numeric and right.fam in numeric):
        raise Unsupported(f"comparison of {left.fam} with {right.fam}")
    if left.column and right.column and "float" in (left.fam, right.fam):
        raise Unsupported("float column compared with a column (NaN ordering)")


def _common_family(vals: list[_Val]) -> str:
    fams = {v.fam for v in vals} - {"null"}
    if not fams:
        return "null"
    if len(fams) == 1:
        return fams.pop()
    if fams == {"int", "float"}:
        return "float"
    raise Unsupported(f"values of mixed types {sorted(fams)}")


def _arrow_type(vals: list[_Val], fam: str) -> Any:
    import pyarrow as pa

    if fam == "null":
        return pa.int32()
    if fam == "float":
        return pa.float64()
    if fam == "int":
        return pa.int64()
    types = {v.data.type for v in vals if v.fam != "null"}
    if len(types) != 1:
        raise Unsupported(f"values of types {sorted(map(str, types))}")
    return types.pop()


def _instant(local: dt.datetime, time_zone: str) -> dt.datetime:
    """A ``TIMESTAMP '...'`` literal as an instant: the wall time read in Spark's session time zone."""
    from zoneinfo import ZoneInfo

    try:
        zone = ZoneInfo(time_zone)
    except Exception as err:  # noqa: BLE001 - offsets like '+02:00': let Spark do it
        raise Unsupported(f"session time zone {time_zone!r}") from err
    return local.replace(tzinfo=zone).astimezone(dt.UTC)


def parse_columns(sql: str) -> set[str]:
    """Lower-case names of the columns ``sql`` reads (:class:`Unsupported` outside the subset)."""
    return _columns(parse(sql))


def _columns(node: Any) -> set[str]:
    if isinstance(node, Col):
        return {node.name.lower()}
    if isinstance(node, tuple):
        return set().union(*(_columns(item) for item in node)) if node else set()
    if hasattr(node, "__dataclass_fields__"):
        return set().union(*(_columns(getattr(node, f)) for f in node.__dataclass_fields__))
    return set()
