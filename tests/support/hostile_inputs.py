"""A corpus of hostile and malformed inputs (data only; used by ``test_hostile_inputs.py``).

Each entry is ``(label, value)``. The groups follow the kinds of parameters the
provider's operators and hooks accept; a test feeds every value of a group to
every entry point taking that kind of parameter. The rule under test: each value
is either refused *before* anything is committed or any Spark job starts, with a
validation error naming the parameter, or it is handled safely as data.
"""

from __future__ import annotations

from datetime import timedelta

LONG = "a" * 129  # one over the 128-character identifier limit
HUGE = "x" * 100_000

#: ``namespace.table`` identifiers
TABLES: list[tuple[str, object]] = [
    ("semicolon_drop", "db.orders; DROP TABLE db.orders"),
    ("backticks", "db.`orders`"),
    ("backtick_breakout", "db.orders`; DROP TABLE x; --"),
    ("double_quotes", 'db."orders"'),
    ("single_quote_comment", "db.orders'--"),
    ("block_comment", "db.orders/*x*/"),
    ("line_comment", "db.orders -- x"),
    ("or_true", "db.orders OR 1=1"),
    ("cyrillic_o", "db.\u043erders"),
    ("zero_width_space", "db.orders\u200b"),
    ("fullwidth_letters", "\uff44\uff42.orders"),
    ("rtl_override", "db.\u202esredro"),
    ("empty", ""),
    ("only_dot", "."),
    ("no_table", "db."),
    ("no_namespace", ".orders"),
    ("over_long", f"db.{LONG}"),
    ("catalog_prefix", "lakehouse.db.orders"),
    ("nul", "db.orders\x00"),
    ("trailing_newline", "db.orders\n"),
    ("path_traversal", "../../etc.passwd"),
    ("not_a_string", 42),
    ("none", None),
]

#: branch / tag names
REFS: list[tuple[str, object]] = [
    ("main", "main"),
    ("main_upper", "MAIN"),
    ("main_newline", "main\n"),
    ("main_space", "main "),
    ("quote", "x'; DROP TABLE db.orders; --"),
    ("backtick", "x`y"),
    ("semicolon", "x;y"),
    ("block_comment", "x/*y*/"),
    ("slash", "refs/heads/main"),
    ("leading_dash", "-x"),
    ("leading_dot", ".x"),
    ("space", "x y"),
    ("cyrillic_a", "t\u0430g"),
    ("zero_width_joiner", "tag\u200d"),
    ("over_long", LONG),
    ("nul", "tag\x00"),
    ("newline", "tag\nmain"),
    ("not_a_string", 7),
]

#: column names where only a column name belongs (check specs, subject columns)
COLUMNS: list[tuple[str, object]] = [
    ("semicolon_drop", "amount; DROP TABLE db.orders"),
    ("backtick", "amount`"),
    ("paren_breakout", "amount) OR (1=1"),
    ("comment", "amount --"),
    ("leading_digit", "1amount"),
    ("cyrillic_o", "am\u043eunt"),
    ("empty", ""),
    ("over_long", LONG),
    ("nested", "amount.nested"),
    ("trailing_newline", "amount\n"),
]

#: SQL fragments where a read-only predicate belongs (check statements, partition clauses, ``where``)
SQL_FRAGMENTS: list[tuple[str, object]] = [
    ("stacked_drop", "1=1; DROP TABLE db.orders"),
    ("line_comment", "amount > 0 -- and more"),
    ("block_comment", "amount > 0 /* x */"),
    ("delete", "DELETE FROM db.orders"),
    ("breakout", "amount > 0); DROP TABLE x; --"),
    ("call", "CALL lakehouse.system.expire_snapshots('db.orders')"),
    ("insert_keyword", "region = 'ca' OR EXISTS (INSERT INTO x VALUES (1))"),
    ("nul", "region = 'ca'\x00"),
    ("over_long", "amount > 0 AND " * 400 + "true"),
]

#: erasure request ids (opaque ticket ids; subject values must never be passed as arguments)
REQUEST_IDS: list[tuple[str, object]] = [
    ("email_as_id", ["alice@example.com"]),
    ("quote_sql", ["R-1'; DROP TABLE db.requests; --"]),
    ("nul", ["R-1\x00"]),
    ("newline", ["R-1\nR-2"]),
    ("trailing_newline", ["R-1\n"]),
    ("or_true", ["R-1 OR 1=1"]),
    ("rtl_override", ["R-\u202e1"]),
    ("empty_item", [""]),
    ("over_long", ["R" * 129]),
    ("not_a_list", {"R-1": 1}),
    ("huge_list_one_bad", [f"R-{i}" for i in range(100_000)] + ["bad'id"]),
]

#: retention durations (``max_ref_age``, ``max_snapshot_age``)
DURATIONS: list[tuple[str, object]] = [
    ("zero", 0),
    ("negative", -1),
    ("negative_string", "-86400000"),
    ("zero_iso", "PT0S"),
    ("negative_iso", "-P1D"),
    ("word", "forever"),
    ("bool", True),
    ("nan", float("nan")),
    ("overflows_java_long", 10**30),
    ("negative_timedelta", timedelta(days=-1)),
]

#: counts that must be positive (``retain_last``, ``min_snapshots_to_keep``)
COUNTS: list[tuple[str, object]] = [
    ("zero", 0),
    ("negative", -5),
    ("zero_string", "0"),
    ("word", "all"),
    ("bool", True),
    ("float", 1.5),
    ("overflows_int", 10**30),
]

#: points in time (``to_timestamp``, ``since``, ``after_timestamp``, ``older_than``)
TIMESTAMPS: list[tuple[str, object]] = [
    ("far_future", "2999-01-01T00:00:00Z"),
    ("year_9999", "9999-12-31T23:59:59Z"),
    ("negative_epoch", -1),
    ("word", "yesterday"),
    ("bad_month", "2026-13-45T00:00:00Z"),
    ("sql", "2026-01-01'; DROP TABLE db.orders; --"),
    ("overflowing_epoch_ms", 10**20),
]

#: malformed check specs / JSON mappings (rendered templates arrive as strings)
MALFORMED_SPECS: list[tuple[str, object]] = [
    ("truncated_json", '{"amount": {"min": {"geq_to": 0}'),
    ("json_list", "[1, 2, 3]"),
    ("threshold_sql", {"amount": {"min": {"geq_to": "0; DROP TABLE x"}}}),
    ("threshold_nan", {"amount": {"min": {"geq_to": float("nan")}}}),
    ("unknown_check", {"amount": {"drop_table": {"equal_to": 0}}}),
    ("contradiction", {"amount": {"min": {"geq_to": 10, "leq_to": 1}}}),
    ("not_a_mapping", {"amount": ["min"]}),
    ("empty_checks", {"amount": {}}),
]
