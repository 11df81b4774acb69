"""The SQL allowlist (``core/sql_allowlist.py``): user SQL fragments parsed with sqlglot's Spark
dialect and accepted only when every node is on the list (pure; milliseconds).

The hostile corpus (``tests/support/hostile_inputs.py``) runs every escape through every operator entry
point; these tests pin the rule itself: what is accepted, the message of a refusal, the column
check, the size bounds, and that ``core`` still imports without sqlglot (the Spark runtime has none).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
import sqlglot

from airflow_iceberg_provider.core import audit_checks as ck
from airflow_iceberg_provider.core import sql_allowlist as sa
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.rules.maintenance import validate_where
from airflow_iceberg_provider.rules.wap_rerun import validate_replace_where
from tests.support.lake import ROOT

pytestmark = pytest.mark.security

EQUIVALENCE_JOB = Path(__file__).resolve().parents[1] / "jobs" / "audit_engine_equivalence.py"
EDGE_COLUMNS = ["id", "k", "x", "f", "d", "s", "ts", "dt", "b"]


def _job_list(name: str) -> list[str]:
    """A list literal of the Spark oracle job (read as data: the job imports the Spark runtime)."""
    tree = ast.parse(EQUIVALENCE_JOB.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return list(ast.literal_eval(node.value))
    raise AssertionError(f"{name} not found in {EQUIVALENCE_JOB}")


ALLOWED_FORMS = _job_list("ALLOWED_FORMS")
ORACLE_EXPRESSIONS = _job_list("EXPRESSIONS")

AGGREGATE_STATEMENTS = [
    "COUNT(*) > 0",
    "count(amount) = count(*)",
    "COUNT(DISTINCT customer_id) >= 1",
    "count_if(amount < 0) = 0",
    "SUM(amount) >= 1",
    "min(amount) >= 0 AND max(amount) < 1000000",
    "avg(amount) BETWEEN 1 AND 100",
    "approx_count_distinct(customer_id) > 10",
    "stddev(amount) < 100",
    "stddev_samp(amount) < 100",
    "stddev_pop(amount) < 100",
    "variance(amount) < 100",
    "SUM(CASE WHEN region = 'ca' THEN 1 ELSE 0 END) > 0",
]


@pytest.mark.parametrize("fragment", ALLOWED_FORMS)
def test_every_form_of_the_spark_oracle_is_accepted_with_its_columns(fragment):
    assert sa.check_fragment(fragment, "where", columns=EDGE_COLUMNS) == fragment


def test_the_oracle_covers_every_listed_node_and_scalar_function():
    seen = {type(n).__name__ for form in ALLOWED_FORMS for n in sqlglot.parse_one(form, read="spark").walk()}
    assert (sa.STRUCTURE | set(sa.SCALARS)) - seen == set()
    seen |= {type(n).__name__ for s in AGGREGATE_STATEMENTS for n in sqlglot.parse_one(s, read="spark").walk()}
    assert set(sa.AGGREGATES) - seen == set()


def test_the_driver_evaluators_subset_is_inside_the_allowlist():
    """Every expression the Arrow evaluator is checked on passes the allowlist: the evaluator never
    answers for a fragment the provider would refuse."""
    for expression in ORACLE_EXPRESSIONS:
        sa.check_fragment(expression, "check_statement", kind=sa.STATEMENT, columns=EDGE_COLUMNS)


@pytest.mark.parametrize("statement", AGGREGATE_STATEMENTS)
def test_aggregates_belong_to_check_statements_not_row_predicates(statement):
    assert sa.check_fragment(statement, "check_statement", kind=sa.STATEMENT) == statement
    with pytest.raises(sa.UnsafeSqlError, match=r"is an aggregate \(\w+\), and this is a row predicate"):
        sa.check_fragment(statement, "partition_clause")


@pytest.mark.parametrize(
    ("fragment", "node", "problem", "fix"),
    [
        (
            "(SELECT count(*) FROM text.`file:///etc/hostname`) > 0",
            "'(SELECT COUNT(*) FROM text.`file:///etc/hostname`)' (near offset",
            "is a subquery or a table reference",
            "compare that table's columns instead",
        ),
        (
            "amount > 0 OR reflect('java.lang.System', 'getenv', 'HOME') = 'x'",
            "\"REFLECT('java.lang.System', 'getenv', 'HOME')\" (near offset 14)",
            "calls 'reflect', which is not on the function allowlist",
            "use one of abs, approx_count_distinct",
        ),
        ("my_udf(amount) > 0", "'MY_UDF(amount)'", "calls 'my_udf'", "docs/security.md"),
        ("amount > 0 --x", "'--' at offset 11", "starts a comment", "remove the comment"),
        ("amount > 0; SELECT 1", "';' at offset 10", "would end the statement", "give one expression"),
        ("amount\u200b > 0", "U+200B at offset 6", "invisible", "plain text"),
        ("orders.amount > 0", "'orders.amount'", "is a qualified name", "unqualified"),
        ("CAST(amount AS BINARY) > 0", "'BINARY'", "is not a type a CAST may target", "DECIMAL(p,s)"),
        ("sum(amount) OVER () > 0", "'SUM(amount) OVER ()'", "is a window function", "plain aggregate"),
    ],
)
def test_a_refusal_names_the_node_where_it_is_and_the_fix(fragment, node, problem, fix):
    with pytest.raises(sa.UnsafeSqlError) as err:
        sa.check_fragment(fragment, "check_statement", kind=sa.STATEMENT)
    message = str(err.value)
    assert message.startswith(f"check_statement={fragment[:80]!r}"), message
    assert node in message and problem in message and fix in message, message


def test_columns_when_known_are_the_only_names_accepted():
    assert sa.check_fragment("AMOUNT > 0 AND `region` = 'ca'", "p", columns=["amount", "region"])
    with pytest.raises(sa.UnsafeSqlError, match=r"'customer_id' \(near offset 15\) is not a column of the table"):
        sa.check_fragment("amount > 0 AND customer_id = 1", "p", columns=["amount", "region"])


@pytest.mark.parametrize(
    ("fragment", "problem"),
    [
        ("a > 0 AND " * 500 + "true", "characters long"),
        ("(" * (sa.MAX_DEPTH + 1) + "a" + ")" * (sa.MAX_DEPTH + 1) + " > 0", "nests parentheses"),
        (
            "coalesce(" + ",".join("a" for _ in range(sa.MAX_NODES // 2 + 1)) + ") > 0",
            f"more than {sa.MAX_NODES} nodes",
        ),
        ("NOT " * 900 + "true", "nested too deeply|more than"),
        ("b OR " * 300 + "b", f"nested more than {sa.MAX_TREE_DEPTH} levels deep"),
    ],
)
def test_size_depth_and_node_count_are_bounded(fragment, problem):
    with pytest.raises(sa.UnsafeSqlError, match=problem):
        sa.check_fragment(fragment, "where")


def test_strings_may_hold_any_printable_text():
    for fragment in ("region = 'Québec; -- /* not a comment */'", "s = 'it''s'", "s LIKE '%(SELECT%'"):
        assert sa.check_fragment(fragment, "where") == fragment


def test_every_caller_uses_the_allowlist():
    """The audit specs, the compaction filter and replace_where refuse the same escape."""
    escape = "(SELECT count(*) FROM text.`file:///etc/hostname`) > 0"
    with pytest.raises(ck.CheckSpecError, match="subquery"):
        ck.parse_checks(table_checks={"c": {"check_statement": escape}})
    with pytest.raises(ck.CheckSpecError, match="subquery"):
        ck.parse_checks(table_checks={"c": {"check_statement": "COUNT(*) > 0"}}, partition_clause=escape)
    with pytest.raises(IcebergValidationError, match=r"^where=.*subquery.*Nothing was changed"):
        validate_where(escape)
    with pytest.raises(IcebergValidationError, match=r"^replace_where=.*subquery"):
        validate_replace_where(escape)


def test_core_imports_without_sqlglot():
    """``core`` ships to the Spark runtime, which has no sqlglot: importing it must not need it."""
    code = (
        "import sys; sys.modules['sqlglot'] = None\n"
        "from airflow_iceberg_provider.core import audit_checks, sql_allowlist\n"
        "c = audit_checks.Check.from_dict({'name': 't.c', 'kind': 'table', 'check_type': 'check_statement'})\n"
        "print(c.name, sql_allowlist.MAX_CHARS)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["t.c", str(sa.MAX_CHARS)]


def test_the_docs_list_every_allowed_function():
    text = (ROOT / "docs" / "security.md").read_text()
    missing = [name for name in sa.allowed_functions() if f"`{name}`" not in text]
    assert not missing, f"docs/security.md does not list {missing}"
