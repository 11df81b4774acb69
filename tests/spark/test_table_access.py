"""The Spark jobs' two table-access implementations answer alike, with real Spark (one spark-submit).

A job chooses its :class:`~airflow_iceberg_provider.spark_jobs.table_access.TableAccess` once,
from the session: Iceberg's Java API under spark-submit, metadata tables and pyarrow under Spark
Connect. Both run in a classic session, so one job (``tests/jobs/table_access_equivalence.py``)
asks both every question on one table (three appends, a renamed column, a branch, a delete) and
about a missing file, and this module compares the answers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

pytestmark = [pytest.mark.spark]

JOB = Path(__file__).resolve().parents[1] / "jobs" / "table_access_equivalence.py"


@pytest.fixture(scope="module")
def result(module_lake, tmp_path_factory):
    path = tmp_path_factory.mktemp("table-access") / "result.json"
    spark = IcebergSparkHook(catalog_hook=module_lake)
    spark.submit(spark.plan(JOB, spec={"job": "table_access_equivalence", "result_path": str(path)}))
    return json.loads(path.read_text())


def test_both_implementations_give_the_same_answer_to_every_question(result):
    jvm, sql = result["jvm"], result["sql"]
    assert jvm.keys() == sql.keys()
    differ = {k: (jvm[k], sql[k]) for k in jvm if k not in ("java_table", "properties") and jvm[k] != sql[k]}
    assert not differ
    # Spark's SHOW TBLPROPERTIES hides the one reserved key Spark itself stores (``owner``)
    assert {k: v for k, v in jvm["properties"].items() if k != "owner"} == sql["properties"]


def test_the_answers_are_the_tables_facts(result):
    sql = result["sql"]
    assert sql["properties"]["owner.team"] == "lake"
    assert sql["field_ids"] == {"id": 1, "label": 2}  # the renamed column keeps its id
    assert sql["field_ids_first"] == {"id": 1, "name": 2}  # the first snapshot read the old name
    assert sql["snapshot_files"][result["head"]] == result["live_files"]
    assert all(set(sql["snapshot_files"][s]) <= set(sql["reachable"][s]) for s in sql["snapshot_files"])
    assert set(result["live_files"]) <= set(sql["listed"])
    assert sql["footer"] == "PAR1"
    # from the head back through its parents: the delete, then the three appends; nothing for a missing id
    assert [sid for sid, _, _ in sql["lineage"]] == result["snapshots"][::-1]
    assert [op for _, op, _ in sql["lineage"]][1:] == ["append"] * 3
    assert sql["lineage"][-1][2] is None
    assert sql["lineage_missing"] == []


def test_a_missing_file_or_directory_is_an_answer_not_a_crash(result):
    for side in ("jvm", "sql"):
        answers = result[side]
        assert answers["exists"] == [True, False]
        assert sorted(answers["sizes"].values())[0] == 0
        assert answers["listed_missing"] == []
        assert answers["missing_read"] == "OSError"


def test_only_the_java_implementation_offers_the_java_table(result):
    assert result["jvm"]["java_table"] is True
    assert result["sql"]["java_table"] is False


def test_an_empty_append_commits_one_snapshot_with_its_summary_property(result):
    assert result["append_empty"] == {
        "jvm": {"new_snapshots": 1, "summary": "jvm"},
        "sql": {"new_snapshots": 1, "summary": "sql"},
    }
