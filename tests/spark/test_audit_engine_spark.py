"""The audit engine's driver-side read of appended rows equals Spark, with real Spark (one job).

The job (``tests/jobs/audit_engine_equivalence.py``) builds a table whose rows hold the
edge cases of Spark SQL semantics (NULL, NaN, -0.0, huge longs, fractional decimals,
timestamps around literals in a DST-observing session zone, non-ASCII strings) and
compares, row by row, Spark's value of each expression with ``arrow_sql``'s value computed
from the appended Parquet files; then the engine's observed values three ways.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_iceberg_provider.core import audit_checks as ck
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

JOB = Path(__file__).resolve().parents[1] / "jobs" / "audit_engine_equivalence.py"
COLUMN_MAPPING = {
    "x": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}, "max": {"leq_to": 1}, "unique_check": {"equal_to": 0}},
    "d": {"min": {"geq_to": 0}, "max": {"leq_to": 1}, "unique_check": {"equal_to": 0}},
    "s": {"distinct_check": {"geq_to": 1}, "null_check": {"equal_to": 0}},
    "ts": {"min": {"geq_to": 0}, "max": {"geq_to": 0}},
    "id": {"unique_check": {"equal_to": 0}},
    "dt": {"distinct_check": {"geq_to": 1}},
    "k": {"max": {"leq_to": 10}},
}
TABLE_CHECKS = {
    "x_positive": {"check_statement": "x > 0"},
    "a_rows_big_k": {"check_statement": "k > 2.5", "partition_clause": "s = 'a'"},
    "has_rows": {"check_statement": "COUNT(*) > 0"},
    "sum_d": {"check_statement": "SUM(d) > 0"},
    "max_k": {"check_statement": "MAX(k) < 10", "partition_clause": "b"},
    "recent": {"check_statement": "ts >= TIMESTAMP '2026-01-01 00:00:00'"},
    "known_s": {"check_statement": "s IN ('a', 'b', 'é')", "partition_clause": "dt > DATE '2026-01-01'"},
}


@pytest.fixture(scope="module")
def result(module_lake, tmp_path_factory):
    path = tmp_path_factory.mktemp("equivalence") / "result.json"
    spark = IcebergSparkHook(catalog_hook=module_lake)
    spec = {
        "job": "audit_engine_equivalence",
        "table": "db.edge_cases",
        "checks": [c.to_dict() for c in ck.parse_checks(COLUMN_MAPPING, TABLE_CHECKS)],
        "outside": [c.to_dict() for c in ck.parse_checks({}, {"s_short": {"check_statement": "length(s) < 3"}})],
        "result_path": str(path),
    }
    spark.submit(spark.plan(JOB, spec=spec))
    return json.loads(path.read_text())


def test_every_expression_has_sparks_value_on_every_appended_row(result):
    differ = {expr: v for expr, v in result["rows"].items() if v["spark"] != v["driver"]}
    assert not differ, json.dumps(differ, indent=1, ensure_ascii=False)
    assert len(result["rows"]) >= 50 and all(len(v["spark"]) == 6 for v in result["rows"].values())
    # the cases are not vacuous: NaN and NULL rows are among them, and answers differ by row
    assert any("NaN" in v["spark"] for v in result["rows"].values())
    assert all(len(set(map(str, v["spark"]))) > 1 for v in result["rows"].values())


@pytest.mark.security
def test_every_form_the_sql_allowlist_accepts_is_evaluated_as_spark_does_or_left_to_spark(result):
    """The oracle of the SQL allowlist: the driver's Arrow evaluator never disagrees with Spark
    on an accepted form (``tests/unit/test_sql_allowlist.py`` checks the forms are accepted)."""
    forms = result["allowed_forms"]
    assert len(forms) >= 60
    differ = {e: v for e, v in forms.items() if "driver" in v and v["driver"] != v["spark"]}
    assert not differ, json.dumps(differ, indent=1, ensure_ascii=False)
    assert all(len(v["spark"]) == 6 for v in forms.values())
    assert sum("driver" in v for v in forms.values()) >= 10  # the driver answers the comparisons itself


def test_generated_expressions_have_sparks_value_on_every_appended_row(result):
    """300 random predicates/values (fixed seed) over every column type: the driver equals Spark or refuses."""
    generated = result["generated"]
    assert not generated["differ"], json.dumps(generated["differ"], indent=1, ensure_ascii=False)
    assert generated["compared"] >= 250, generated  # refusals are the exception
    assert all("FLOAT" not in reason for reason in generated["refused"]), generated["refused"]


def test_expressions_outside_the_subset_are_refused_not_guessed(result):
    assert result["refused"] and all(reason for reason in result["refused"].values()), result["refused"]
    assert "function length" in result["refused"]["length(s) > 0"]
    assert "FLOAT" in result["refused"]["f > 0"]
    assert "comparison of string with int" in result["refused"]["s = 1"]


def test_driver_read_spark_read_and_whole_scan_observe_the_same_values(result):
    observed, read_by = result["observed"], result["read_by"]
    assert len(observed["whole"]) == 21
    assert observed["driver"] == observed["whole"], (observed["driver"], observed["whole"])
    assert observed["spark"] == observed["whole"]
    assert read_by["driver"][0] == "driver" and set(read_by["driver"][1].values()) == {"change_set"}
    assert read_by["spark"][0] == "spark" and set(read_by["spark"][1].values()) == {"change_set"}
    assert read_by["whole"][0] is None and set(read_by["whole"][1].values()) <= {"scan", "metadata"}
    assert observed["whole"]["id.unique_check"] == 1.0  # id 4 is in the base and appended again
    assert observed["whole"]["x.max"] == "NaN"  # Spark: NaN is the largest double


def test_a_small_snapshot_is_projected_and_aggregated_on_the_driver_with_the_same_values(result):
    """A full audit of a snapshot of at most ``driver_rows`` rows: no distinct-count shuffle, same values."""
    observed, queries = result["observed"], result["queries"]
    assert observed["whole_small"] == observed["whole"]
    assert "projection" in queries["whole_small"] and "projection" not in queries["whole"]
    assert not any(q.startswith("scan") for q in queries["whole_small"]), queries["whole_small"]
    assert any(q.startswith("scan") for q in queries["whole"]), queries["whole"]


def test_a_check_outside_the_subset_lets_spark_read_the_appended_rows(result):
    how, refused, fallback = result["read_by"]["outside_subset"]
    assert how == "spark" and "length" in refused and fallback is None
    assert {k: v for k, v in result["observed"]["outside_subset"].items() if k != "table.s_short"} == result[
        "observed"
    ]["whole"]


def test_a_rewrite_after_the_base_is_never_read_as_appends(result):
    """Iceberg's incremental append scan skips non-append snapshots; the engine must not."""
    how, methods, fallback = result["read_by"]["rewritten"]
    assert how is None and "not an append" in fallback and set(methods.values()) <= {"scan", "metadata"}
    assert result["observed"]["rewritten"] == result["observed"]["rewritten_whole"]
    assert result["observed"]["rewritten"]["table.has_rows"] == result["observed"]["whole"]["table.has_rows"] - 1
