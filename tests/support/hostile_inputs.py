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

#: SQL fragments where one allowlisted expression belongs (check statements, partition clauses,
#: ``replace_where``, ``where``): every one must be refused by every SQL entry point
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
    # file reads through a data-source "table" name, in every quoting
    ("text_file_subquery", "(SELECT count(*) FROM text.`file:///etc/hostname`) > 0"),
    ("parquet_path_subquery", "(SELECT count(*) FROM parquet.`/tmp/warehouse/db/orders/data`) > 0"),
    ("csv_path_subquery", "(SELECT max(_c0) FROM csv.`file:///etc/passwd`) = 'root'"),
    ("json_path_subquery", "(SELECT count(*) FROM json.`/etc/hosts`) >= 0"),
    ("orc_path_subquery", "(SELECT count(*) FROM orc.`hdfs:///x`) >= 0"),
    ("path_as_backtick_column", "`file:///etc/hostname` IS NOT NULL"),
    ("path_as_qualified_column", "text.`file:///etc/hostname` IS NOT NULL"),
    ("path_quoted_double", 'text."file:///etc/hostname" IS NOT NULL'),
    ("path_in_string_subquery", "(SELECT count(*) FROM text.`file:///etc/hostname` WHERE value = 'x') > 0"),
    # subqueries in every position
    ("scalar_subquery_other_table", "amount > (SELECT max(amount) FROM db.requests)"),
    ("subquery_in_select_list_form", "(SELECT 1) = 1"),
    ("subquery_in_where", "(SELECT count(*) FROM db.orders WHERE amount > 0) > 0"),
    ("in_subquery", "customer_id IN (SELECT customer_id FROM db.requests)"),
    ("not_in_subquery", "customer_id NOT IN (SELECT customer_id FROM db.requests)"),
    ("exists_subquery", "EXISTS (SELECT 1 FROM db.requests)"),
    ("not_exists_subquery", "NOT EXISTS (SELECT 1 FROM db.requests WHERE 1 = 1)"),
    ("any_subquery", "amount > ANY (SELECT amount FROM db.orders)"),
    ("all_subquery", "amount > ALL (SELECT amount FROM db.orders)"),
    ("subquery_in_case", "CASE WHEN (SELECT 1) = 1 THEN true ELSE false END"),
    ("subquery_in_function", "coalesce((SELECT max(amount) FROM db.orders), 0) > 0"),
    ("cte", "WITH x AS (SELECT 1) SELECT * FROM x"),
    ("bare_select", "SELECT * FROM db.orders"),
    ("union", "amount > 0 UNION SELECT 1"),
    ("values_clause", "amount IN (VALUES (1), (2))"),
    ("qualified_other_table", "db.requests.customer_id IS NOT NULL"),
    ("qualified_column", "orders.amount > 0"),
    # reflection, UDFs, file and environment functions
    ("reflect", "reflect('java.lang.Runtime', 'getRuntime') IS NOT NULL"),
    ("java_method", "java_method('java.lang.System', 'getenv', 'HOME') IS NOT NULL"),
    ("reflect_backticked", "`reflect`('java.lang.System', 'getenv', 'HOME') IS NOT NULL"),
    ("reflect_upper", "REFLECT('java.lang.System', 'getenv', 'HOME') IS NOT NULL"),
    ("try_reflect", "try_reflect('java.lang.System', 'getenv', 'HOME') IS NOT NULL"),
    ("udf_looking", "my_udf(amount) > 0"),
    ("qualified_udf", "db.my_udf(amount) > 0"),
    ("input_file_name", "input_file_name() LIKE '%'"),
    ("input_file_block_start", "input_file_block_start() >= 0"),
    ("current_user", "current_user() = 'admin'"),
    ("session_user", "session_user() = 'admin'"),
    ("current_catalog", "current_catalog() = 'lakehouse'"),
    ("uuid", "uuid() IS NOT NULL"),
    ("rand", "rand() < 0.5"),
    ("randn", "randn(1) < 0.5"),
    ("shuffle", "size(shuffle(array(1, 2))) = 2"),
    ("monotonically_increasing_id", "monotonically_increasing_id() >= 0"),
    ("current_timestamp", "order_ts < current_timestamp()"),
    ("now", "order_ts < now()"),
    ("secret_function", "secret('scope', 'key') IS NOT NULL"),
    ("spark_conf_variable", "'${spark.hadoop.fs.s3a.secret.key}' <> ''"),
    ("hivevar_substitution", "region = '${hivevar:x}'"),
    ("assert_true", "assert_true(amount > 0) IS NULL"),
    ("raise_error", "raise_error('x') IS NULL"),
    # set-returning, lambdas, windows, clauses
    ("explode", "explode(array(1, 2)) = 1"),
    ("posexplode", "posexplode(array(1)) IS NOT NULL"),
    ("inline", "inline(array(struct(1))) IS NOT NULL"),
    ("lateral_view", "amount > 0 LATERAL VIEW explode(array(1)) t AS c"),
    ("tablesample", "amount > 0 TABLESAMPLE (10 PERCENT)"),
    ("limit_clause", "amount > 0 LIMIT 1"),
    ("order_by_clause", "amount > 0 ORDER BY amount"),
    ("window_function", "row_number() OVER (ORDER BY amount) = 1"),
    ("window_aggregate", "sum(amount) OVER (PARTITION BY region) > 0"),
    ("lambda_transform", "size(transform(array(amount), x -> x + 1)) = 1"),
    ("filter_clause", "count(*) FILTER (WHERE amount > 0) > 0"),
    ("alias", "amount > 0 AS ok"),
    # statements, stacking and comments
    ("stacked_select", "amount > 0; SELECT * FROM db.requests"),
    ("stacked_trailing_semicolon", "amount > 0;"),
    ("semicolon_in_backticks", "`a;b` > 0"),
    ("nested_block_comment", "amount > 0 /* /* */ OR true */"),
    ("hash_free_comment_end", "amount > 0 --\nOR true"),
    ("comment_hides_subquery", "amount > 0 /*x*/ OR (SELECT 1) = 1"),
    ("set_command", "SET spark.sql.ansi.enabled = false"),
    ("cache_table", "CACHE TABLE x AS SELECT 1"),
    # quoting and unicode tricks
    ("backslash_quote_escape", "region = 'ca\\' OR (SELECT 1) = 1 OR \\'x'"),
    ("unicode_escape_in_string", "region = '\\u0027) OR (1=1'"),
    ("raw_string", "region = r'ca'"),
    ("zero_width_space", "amount\u200b > 0"),
    ("rtl_override", "region = 'ac\u202e'"),
    ("bom", "\ufeffamount > 0"),
    ("nbsp", "amount\u00a0> 0"),
    ("fullwidth_semicolon", "amount > 0\uff1b DROP TABLE x"),
    ("cyrillic_select", "(\u0405ELECT 1) = 1"),
    ("line_separator", "amount > 0\u2028OR true"),
    ("hex_literal", "X'41' = region"),
    ("unicode_string_literal", "region = U&'ca'"),
    # bounded size and depth
    ("deep_parentheses", "(" * 200 + "amount > 0" + ")" * 200),
    ("deep_not", "NOT " * 3000 + "true"),
    ("many_nodes", " OR ".join(f"a{i} = {i}" for i in range(400))),
    ("huge", "amount > 0 AND region = '" + "x" * 10_000 + "'"),
    # types and casts off the list
    ("cast_to_binary", "CAST(region AS BINARY) IS NOT NULL"),
    ("cast_to_array", "CAST(region AS ARRAY<STRING>) IS NULL"),
    ("struct_field", "named_struct('a', 1).a = 1"),
    ("array_index", "array(1, 2)[0] = 1"),
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
