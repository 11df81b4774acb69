"""User SQL fragments, parsed and accepted by allowlist: audit check statements, partition
clauses, ``replace_where`` predicates and compaction ``where`` filters.

A fragment is parsed with sqlglot's Spark dialect into one expression tree, and accepted only
when every node of the tree is on the allowlist below; anything else (a subquery, a table or
path reference, ``reflect``/``java_method``, a UDF, ``input_file_name``, a nondeterministic or
set-returning function, a window) is refused with the node, where it is, and the fix. Spark
then runs the fragment as the user wrote it: the tree is only the proof of what it contains.

Before parsing, the text itself must be plain: no control or invisible format characters, no
backslash (Spark and a parser could disagree on a string's end), no ``${`` (Spark substitutes
variables into the SQL text before parsing it), no comment, no ``;``, no double-quoted name,
at most :data:`MAX_CHARS` characters, :data:`MAX_DEPTH` levels of parentheses and
:data:`MAX_NODES` nodes.

Stdlib only at import time: this module ships to the Spark runtime with :mod:`core`, where
sqlglot is not installed; sqlglot is imported inside :func:`check_fragment`, which runs on the
Airflow side before any job is submitted.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection
from typing import Any

#: Longest fragment accepted (characters).
MAX_CHARS = 4000
#: Deepest nesting of parentheses accepted.
MAX_DEPTH = 32
#: Most expression nodes accepted in one fragment.
MAX_NODES = 2000
#: Deepest expression tree accepted (a chain of 200 ``OR`` is 200 deep; use ``IN`` for long lists).
MAX_TREE_DEPTH = 256

#: A column name (unqualified; nested fields are not supported).
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")

#: Predicate and expression structure (sqlglot node types).
STRUCTURE = frozenset(
    {
        "Column",
        "Identifier",
        "Literal",
        "Boolean",
        "Null",
        "Paren",
        "Neg",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Mod",
        "IntDiv",
        "EQ",
        "NEQ",
        "GT",
        "GTE",
        "LT",
        "LTE",
        "NullSafeEQ",
        "And",
        "Or",
        "Not",
        "In",
        "Between",
        "Is",
        "Like",
        "ILike",
        "Escape",
        "Case",
        "If",
        "Cast",
        "TryCast",
        "DataType",
        "DataTypeParam",
        "Interval",
    }
)

#: Aggregate functions (only in a table check's ``check_statement``), by Spark name.
AGGREGATES = {
    "Count": "count",
    "CountIf": "count_if",
    "Sum": "sum",
    "Min": "min",
    "Max": "max",
    "Avg": "avg",
    "ApproxDistinct": "approx_count_distinct",
    "Stddev": "stddev",
    "StddevSamp": "stddev_samp",
    "StddevPop": "stddev_pop",
    "Variance": "variance",
}

#: Deterministic scalar functions, by Spark name (what users write; several names may parse to
#: one node, e.g. ``nvl``/``ifnull``/``coalesce``).
SCALARS = {
    "Coalesce": "coalesce / nvl / ifnull",
    "Nullif": "nullif",
    "Abs": "abs",
    "Round": "round",
    "Floor": "floor",
    "Ceil": "ceil",
    "Greatest": "greatest",
    "Least": "least",
    "IsNan": "isnan",
    "Lower": "lower",
    "Upper": "upper",
    "Length": "length",
    "Trim": "trim",
    "Substring": "substring / substr",
    "Concat": "concat",
    "StrPosition": "position / locate",
    "TsOrDsToDate": "to_date",
    "TimestampTrunc": "date_trunc",
    "DateTrunc": "trunc",
    "Year": "year",
    "Month": "month",
    "Day": "day",
    "DayOfMonth": "dayofmonth",
    "DayOfWeek": "dayofweek",
    "Hour": "hour",
    "Minute": "minute",
    "Second": "second",
    "DateDiff": "datediff",
    "TsOrDsAdd": "date_add / date_sub",
}

#: Types a ``CAST`` may target (sqlglot's type names).
CAST_TYPES = frozenset(
    {
        "TINYINT",
        "SMALLINT",
        "INT",
        "BIGINT",
        "FLOAT",
        "DOUBLE",
        "DECIMAL",
        "TEXT",
        "VARCHAR",
        "CHAR",
        "BOOLEAN",
        "DATE",
        "TIMESTAMP",
        "TIMESTAMPTZ",
        "TIMESTAMPNTZ",
    }
)

#: Where a user can read the list, and how to ask for an addition.
_DOCS = "see the SQL allowlist in docs/security.md (an addition is requested there)"

#: Fragment kinds: a row predicate (partition clause, replace_where, where) or a table check
#: statement (a row predicate, or an aggregate compared with a value).
PREDICATE = "predicate"
STATEMENT = "statement"


class UnsafeSqlError(ValueError):
    """A SQL fragment holds something outside the allowlist; the message names the node, where it
    is, and the fix."""


def allowed_functions(kind: str = STATEMENT) -> list[str]:
    """The Spark function names a fragment of ``kind`` may call (for messages and docs)."""
    names = [*SCALARS.values(), *(AGGREGATES.values() if kind == STATEMENT else ())]
    return sorted({part.strip() for name in names for part in name.split("/")})


def _refuse(param: str, text: str, what: str, problem: str, fix: str) -> UnsafeSqlError:
    return UnsafeSqlError(f"{param}={text[:80]!r}{'...' if len(text) > 80 else ''}: {what} {problem}; {fix}.")


def _check_text(text: str, param: str) -> None:
    """Character-level rules, before any parser sees the text."""
    if len(text) > MAX_CHARS:
        raise _refuse(param, text, "the fragment", f"is {len(text)} characters long", f"keep it under {MAX_CHARS}")
    for offset, ch in enumerate(text):
        category = unicodedata.category(ch)
        if (category in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp") and ch not in "\t\n\r") or (
            not ch.isascii() and category.startswith("Z")
        ):
            raise _refuse(
                param,
                text,
                f"U+{ord(ch):04X} at offset {offset}",
                "is a control, invisible or unusual space character",
                "type the fragment as plain text (spaces, letters, digits, quotes)",
            )
        if ch == "\\":
            raise _refuse(
                param,
                text,
                f"'\\' at offset {offset}",
                "is not accepted (escapes can hide the end of a string)",
                "write a quote inside a string as two quotes ('it''s')",
            )
    if "${" in text:  # Spark substitutes variables everywhere, inside strings too
        raise _refuse(
            param,
            text,
            f"'${{' at offset {text.index('${')}",
            "is a Spark variable substitution",
            "write the value itself (render it with Jinja if it varies)",
        )
    for token, problem, fix in (
        (";", "would end the statement", "give one expression, without ';'"),
        ("--", "starts a comment", "remove the comment"),
        ("/*", "starts a comment", "remove the comment"),
    ):
        offset = _outside_strings(text).find(token)
        if offset >= 0:
            raise _refuse(param, text, f"{token!r} at offset {offset}", problem, fix)
    depth = deepest = 0
    for ch in _outside_strings(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        deepest = max(deepest, depth)
    if deepest > MAX_DEPTH:
        raise _refuse(
            param, text, "the fragment", f"nests parentheses {deepest} deep", f"keep the nesting under {MAX_DEPTH}"
        )


def _outside_strings(text: str) -> str:
    """``text`` with the content of single-quoted strings blanked (same length, same offsets)."""
    out, inside = [], False
    for ch in text:
        if ch == "'":
            inside = not inside
            out.append(ch)
        else:
            out.append(" " if inside else ch)
    return "".join(out)


def _where(node: Any) -> str:
    """The node's SQL and, when the parser kept it, its offset in the fragment."""
    try:
        sql = node.sql(dialect="spark")
    except Exception:  # noqa: BLE001 - a node that cannot print itself is still named by its type
        sql = type(node).__name__
    if len(sql) > 60:
        sql = sql[:57] + "..."
    start = None
    for candidate in (node, *node.find_all(_exp().Identifier)):
        meta = getattr(candidate, "meta", None) or {}
        if "start" in meta:
            start = meta["start"] if start is None else min(start, meta["start"])
    return f"{sql!r}" + (f" (near offset {start})" if start is not None else "")


def _exp() -> Any:
    from sqlglot import exp

    return exp


def _function_name(node: Any) -> str:
    if type(node).__name__ == "Anonymous":
        return str(node.name).lower()
    try:
        return str(node.sql_name()).lower()
    except Exception:  # noqa: BLE001 -- sqlglot's sql_name() raises for node types without one; any failure falls back to the class name
        return type(node).__name__.lower()


def _parse(text: str, param: str) -> Any:
    import sqlglot
    from sqlglot.errors import ParseError, TokenError

    try:
        tokens = sqlglot.Dialect.get_or_raise("spark").tokenize(text)
    except (TokenError, ParseError, ValueError) as err:
        raise _refuse(
            param, text, "the fragment", f"cannot be read as SQL ({str(err)[:80]})", "check quotes and brackets"
        ) from err
    for token in tokens:
        if token.comments:
            raise _refuse(param, text, "a comment", "is not accepted", "remove the comment")
        raw = text[token.start : token.end + 1]
        if raw.startswith('"'):
            raise _refuse(
                param,
                text,
                f"{raw!r} at offset {token.start}",
                "is double-quoted (Spark reads it as a string, other parsers as a name)",
                "quote strings with single quotes and names with backticks",
            )
    try:
        trees = sqlglot.parse(text, read="spark")
    except (ParseError, TokenError) as err:
        raise _refuse(
            param,
            text,
            "the fragment",
            "is not one SQL expression",
            "give one predicate or expression, e.g. \"amount >= 0 AND region = 'ca'\" "
            "(no SELECT, LIMIT, ORDER BY, LATERAL VIEW or TABLESAMPLE clauses)",
        ) from err
    except RecursionError as err:
        raise _refuse(param, text, "the fragment", "is nested too deeply", "simplify it") from err
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise _refuse(param, text, "the fragment", f"holds {len(trees)} statements", "give exactly one expression")
    return trees[0]


def check_fragment(
    text: Any,
    param: str,
    *,
    kind: str = PREDICATE,
    columns: Collection[str] | None = None,
) -> str:
    """Parse ``text`` and accept it only when every node is on the allowlist; returns it stripped.

    :param param: the parameter's name for messages, e.g. ``"replace_where"``.
    :param kind: :data:`PREDICATE` (row predicates: no aggregates) or :data:`STATEMENT` (a table
        check statement: aggregates allowed).
    :param columns: the audited relation's column names, when known: any other column is refused.
    :raises UnsafeSqlError: naming the node, where it is, and the fix.
    """
    if not isinstance(text, str) or not text.strip():
        raise UnsafeSqlError(f"{param}={text!r:.80} must be a non-empty SQL expression string, e.g. \"region = 'ca'\".")
    _check_text(text, param)
    tree = _parse(text, param)
    exp = _exp()
    known = None if columns is None else {c.lower() for c in columns}
    depth: dict[int, int] = {id(tree): 0}
    for count, node in enumerate(tree.walk(), start=1):
        if count > MAX_NODES:
            raise _refuse(param, text, "the fragment", f"has more than {MAX_NODES} nodes", "simplify it")
        level = depth[id(node)] = depth.get(id(node.parent), -1) + 1
        if level > MAX_TREE_DEPTH:
            raise _refuse(
                param, text, "the fragment", f"is nested more than {MAX_TREE_DEPTH} levels deep", "simplify it"
            )
        _check_node(node, text, param, kind, known, exp)
    return text.strip()


def _check_node(node: Any, text: str, param: str, kind: str, known: set[str] | None, exp: Any) -> None:
    """Accept one node of the tree, or raise naming it."""
    if _check_context_node(node, text, param, kind, known, exp):
        return
    name = type(node).__name__
    if name in STRUCTURE or name in SCALARS:
        return
    if name in AGGREGATES:
        if kind == STATEMENT:
            return
        raise _refuse(
            param,
            text,
            _where(node),
            f"is an aggregate ({AGGREGATES[name]}), and this is a row predicate",
            "filter rows with column comparisons; aggregates belong in a table check's check_statement",
        )
    raise _unlisted(node, text, param, kind, exp)


def _check_context_node(node: Any, text: str, param: str, kind: str, known: set[str] | None, exp: Any) -> bool:
    """Nodes accepted only in some places (names, ``*``, ``DISTINCT``, units, types, ``IN``):
    ``True`` when accepted here, ``False`` when the node is not one of them; raises when misplaced."""
    parent = node.parent
    if isinstance(node, exp.Column):
        _check_column(node, text, param, known)
        return True
    if isinstance(node, exp.Identifier):
        if isinstance(parent, exp.Column):
            return True
        raise _refuse(param, text, _where(node), "is a name outside a column reference", _DOCS)
    if isinstance(node, exp.Star):
        if isinstance(parent, exp.Count) and kind == STATEMENT:
            return True
        raise _refuse(param, text, "'*'", "is only accepted as COUNT(*) in a check statement", "name the columns")
    if isinstance(node, exp.Distinct):
        if parent is not None and type(parent).__name__ in AGGREGATES and kind == STATEMENT and not node.args.get("on"):
            return True
        raise _refuse(param, text, _where(node), "is only accepted inside an aggregate", "e.g. COUNT(DISTINCT id)")
    if isinstance(node, exp.Var):
        if node.arg_key == "unit" and parent is not None and type(parent).__name__ in ("Interval", *SCALARS):
            return True
        raise _refuse(param, text, _where(node), "is not a column, literal or known unit", _DOCS)
    if isinstance(node, exp.DataType):
        if node.this.name in CAST_TYPES and not any(isinstance(e, exp.DataType) for e in node.expressions):
            return True
        raise _refuse(
            param,
            text,
            _where(node),
            "is not a type a CAST may target",
            "cast to a number (INT, BIGINT, DOUBLE, DECIMAL(p,s), ...), STRING, BOOLEAN, DATE or TIMESTAMP",
        )
    if isinstance(node, exp.In) and (node.args.get("query") or node.args.get("unnest") or node.args.get("field")):
        raise _refuse(param, text, _where(node), "reads another relation", "list literal values: x IN (1, 2, 3)")
    return False


def _check_column(node: Any, text: str, param: str, known: set[str] | None) -> None:
    if node.table or node.args.get("db") or node.args.get("catalog"):
        raise _refuse(
            param,
            text,
            _where(node),
            "is a qualified name (a table, path or nested field)",
            "name a column of the audited table, unqualified",
        )
    if not _NAME.match(node.name):
        raise _refuse(
            param, text, _where(node), "is not a plain column name", "use a name matching [A-Za-z_][A-Za-z0-9_]*"
        )
    if known is not None and node.name.lower() not in known:
        raise _refuse(param, text, _where(node), "is not a column of the table", f"use one of {sorted(known)[:20]}")


def _unlisted(node: Any, text: str, param: str, kind: str, exp: Any) -> UnsafeSqlError:
    """The refusal of a node that is on no list, worded by what it is."""
    if isinstance(node, exp.Subquery | exp.Select | exp.Exists | exp.Query | exp.Table | exp.From | exp.Any | exp.All):
        return _refuse(
            param,
            text,
            _where(node),
            "is a subquery or a table reference",
            "a fragment reads only the rows of the table it applies to; compare that table's columns instead",
        )
    if isinstance(node, exp.Window):
        return _refuse(param, text, _where(node), "is a window function", "use a plain aggregate or a column check")
    if isinstance(node, exp.Func):
        return _refuse(
            param,
            text,
            _where(node),
            f"calls {_function_name(node)!r}, which is not on the function allowlist "
            "(user-defined, nondeterministic, set-returning, reflective and file functions are refused)",
            f"use one of {', '.join(allowed_functions(kind))}; {_DOCS}",
        )
    return _refuse(param, text, _where(node), f"is a {type(node).__name__} node, which is not on the allowlist", _DOCS)


__all__ = [
    "AGGREGATES",
    "CAST_TYPES",
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_TREE_DEPTH",
    "PREDICATE",
    "SCALARS",
    "STATEMENT",
    "STRUCTURE",
    "UnsafeSqlError",
    "allowed_functions",
    "check_fragment",
]
