"""Erasure: what its result, log and events say (counts, not ids), and how keys are converted."""

from __future__ import annotations

import json
import logging
import uuid

import pyarrow as pa
import pytest

from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.operators._erasure_job import (
    erasure_summary,
    restore_switched_properties,
    verify_evidence,
)
from airflow_iceberg_provider.params import validate_table
from airflow_iceberg_provider.rules.erasure import evidence_counts
from airflow_iceberg_provider.spark_jobs.erasure import sql as es
from tests.support.erasure import SALT, add_requests, append_people, create_people_table, person
from tests.support.lake import fake_context
from tests.support.ui import evidence_table

pytestmark = pytest.mark.security

RIDS = ["REQ-alpha-1", "REQ-beta-2", "REQ-gamma-3"]


@pytest.fixture
def erasure_lake(lake, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": SALT}))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    create_people_table(lake, "db.people")
    append_people(lake, "db.people", 1)
    add_requests(lake, "db.requests", {"R-1": person(3)})
    return lake


def _evidence(hook, job_run_id: str, found: dict[str, int]) -> None:
    tbl = evidence_table(hook)
    rows = [
        {
            "evidence_id": uuid.uuid4().hex,
            "request_id": rid,
            "table_name": "db.people",
            "subject_hash": f"{i:064x}",
            "rows_found": n,
            "rows_deleted": n,
            "verification": "verified",
            "job_run_id": job_run_id,
        }
        for i, (rid, n) in enumerate(found.items())
    ]
    tbl.append(pa.Table.from_pylist(rows, schema=tbl.schema().as_arrow()))


def test_result_and_log_carry_counts_not_request_ids_or_hashes(lake, caplog):
    lake.catalog.create_table("db.people", schema=pa.schema([pa.field("id", pa.int64())]))
    lake.governance.table("erasure_evidence")
    _evidence(lake, "job-1", {RIDS[0]: 3, RIDS[1]: 0, RIDS[2]: 0})
    summary: dict = {}
    log = logging.getLogger("test.erasure")
    with caplog.at_level(logging.INFO, logger="test.erasure"):
        verify_evidence(lake, validate_table("db.people"), "job-1", {"requests": 3}, summary, log=log)
    assert summary == {
        "evidence_rows": 3,
        "evidence_verification": {"verified": 3},
        "requests_matching_nothing": 2,
    }
    text = json.dumps(summary) + caplog.text
    assert "2 erasure request(s) matched no row of db.people" in caplog.text
    assert not any(rid in text for rid in RIDS)
    assert f"{1:064x}" not in text  # no subject hash either


def test_evidence_counts_is_pure_counting():
    rows = [{"request_id": "a", "rows_found": None, "verification": "failed"}, {"rows_found": 2, "verification": None}]
    assert evidence_counts(rows) == {
        "evidence_rows": 2,
        "evidence_verification": {"None": 1, "failed": 1},
        "requests_matching_nothing": 1,
    }


# ------------------------------------------------------------------ key conversion


@pytest.mark.parametrize("type_sql", ["string", "bigint", "int"])
def test_keys_are_converted_with_try_cast(type_sql):
    sql = es.key_cast_sql(type_sql)
    assert sql == f"try_cast(`subject_key` AS {type_sql})"
    assert not sql.upper().startswith("CAST")


@pytest.mark.parametrize(
    "bad", ["bigint) OR (1=1", "map<string,string>", "decimal(10,2)", "smallint", "", "BIGINT; DROP"]
)
def test_key_conversion_refuses_other_types(bad):
    with pytest.raises(ValueError, match="unsupported subject column type"):
        es.key_cast_sql(bad)


# ------------------------------------------------------------------ killed runs' table properties


def _kill_mid_switch(hook, table: str) -> dict[str, str]:
    """What a run killed between its switch and its restore leaves: the switch and its record, one commit."""
    tbl = hook.load_table(table)
    before = dict(tbl.metadata.properties)
    first = lc.switch_plan(before, {"write.delete.mode": "copy-on-write", "commit.manifest-merge.enabled": "false"})
    second = lc.switch_plan({**before, **first}, {"commit.manifest.min-count-to-merge": "2"})
    with tbl.transaction() as tx:
        tx.set_properties({**first, **second})
    return before


def test_the_next_erasure_restores_properties_a_killed_run_left_switched(erasure_lake):
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator

    hook = erasure_lake
    with hook.load_table("db.people").transaction() as tx:
        tx.set_properties({"write.delete.mode": "merge-on-read"})  # the table's own choice
    before = _kill_mid_switch(hook, "db.people")
    assert hook.load_table("db.people").metadata.properties["write.delete.mode"] == "copy-on-write"
    op = IcebergErasureOperator(
        task_id="erase", table="db.people", subject_columns="customer_id", requests_table="db.requests"
    )
    spec = op._plan_job(fake_context(), "full")
    props = dict(hook.load_table("db.people").metadata.properties)
    assert props == before  # the table's own values back, the record gone
    assert spec["properties_restored"] == {
        "commit.manifest-merge.enabled": None,
        "commit.manifest.min-count-to-merge": None,
        "write.delete.mode": "merge-on-read",
    }
    # reported in the task's result as the job's ledger metrics carry it
    row = {"status": "succeeded", "snapshot_before": None, "snapshot_after": None}
    metrics = {"properties_restored_after_kill": spec["properties_restored"], "properties_restored": True}
    summary = erasure_summary("db.people", "j", row, metrics, 1.0, "full")
    assert summary["properties_restored_after_kill"]["write.delete.mode"] == "merge-on-read"
    # idempotent: nothing left to restore, no commit
    location = hook.metadata_location("db.people")
    assert restore_switched_properties(hook, validate_table("db.people"), logging.getLogger("t")) == {}
    assert hook.metadata_location("db.people") == location


def test_restore_plan_is_idempotent_and_keeps_the_first_originals():
    table = {"write.delete.mode": "merge-on-read"}
    first = lc.switch_plan(table, {"write.delete.mode": "copy-on-write"})
    table = {**table, **first}
    second = lc.switch_plan(table, {"write.delete.mode": "copy-on-write", "write.delete.granularity": "partition"})
    table = {**table, **second}
    assert lc.recorded_originals(table) == {"write.delete.mode": "merge-on-read", "write.delete.granularity": None}
    to_set, to_remove = lc.restore_plan(table)
    assert to_set == {"write.delete.mode": "merge-on-read"}  # the first originals, not the first switch
    assert to_remove == ["write.delete.granularity", lc.SWITCHED_PROPERTIES]
    restored = {k: v for k, v in {**table, **to_set}.items() if k not in to_remove}
    assert restored == {"write.delete.mode": "merge-on-read"}
    assert lc.restore_plan(restored) == ({}, [])
    assert lc.restore_plan({lc.SWITCHED_PROPERTIES: "not json"}) == ({}, [lc.SWITCHED_PROPERTIES])
