"""A format-version 3 table (deletion vectors) through the whole governed lifecycle, with real Spark.

The table starts at format-version 2 (pyiceberg creates it), a user's Spark job upgrades it to v3
and appends; then write-audit-publish (the WAP ref moves go through the ``ref_changes`` Spark job:
pyiceberg 0.12 writes no v3 metadata behind the SQL catalog; the branch's DELETE writes a deletion
vector), one maintenance plan (compaction removes the deletion vector, expiry, orphans listed; the
position-delete rewrite skipped), the logical erasure (merge-on-read
DELETE: deletion vectors, Puffin delete files), the purge (data files rewritten, deletion vectors and
every snapshot that reached the subjects gone), then a time-travel check and a byte scan of every
file under the table's location. pyiceberg reads every state in between (refs, snapshots, the
``delete_files`` metadata table, scans with deletion vectors applied).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_iceberg_provider.core.governance import decode_ledger_row
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from tests.support.erasure import (
    add_requests,
    create_people_table,
    person,
    rows_of,
    set_salt_connection,
    subject_bytes_in_files,
    values_by_snapshot,
)
from tests.support.lake import fake_context

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

ROOT = Path(__file__).resolve().parents[2]
TABLE = "db.people_v3"
REQUESTS = "db.requests_v3"
SUBJECTS = {"V3-1": person(703), "V3-2": person(707)}
ERASED = set(SUBJECTS.values())
BRANCH = "wap_v3"
CTX = {"dag_id": "v3_test", "run_id": "run_v3"}
INSERT = (
    "INSERT INTO {table} SELECT id AS order_id, CASE WHEN id % 10 = 0 THEN '" + person(707) + "' ELSE "
    "concat('person-', CAST(id % 7 AS STRING), '@other.example') END AS customer_id, CAST(id % 50 AS DOUBLE) + 1.0 "
    "AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(100, 160)"
)
DELETE = "DELETE FROM {table} WHERE order_id = 101"
CHECKS = {
    "column_mapping": {"order_id": {"unique_check": {"equal_to": 0}}},
    "change_checks": {"added_rows": {"min": 1, "max": 1000}},
}


def _delete_files(hook, all_snapshots: bool = False) -> list[dict]:
    tbl = hook.load_table(TABLE)
    found = tbl.inspect.all_delete_files() if all_snapshots else tbl.inspect.delete_files()
    return found.select(["content", "file_format", "file_path"]).to_pylist()


@pytest.fixture(scope="module")
def v3(module_lake):
    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    hook = module_lake
    create_people_table(hook, TABLE, partition_by=(), **{"write.wap.enabled": "true"})
    add_requests(hook, REQUESTS, SUBJECTS, received_days_ago=1)
    rows = [[i, person(703) if i % 5 == 0 else person(i % 4), float(i)] for i in range(40)]
    IcebergSparkSubmitOperator(
        task_id="upgrade",
        table=TABLE,
        application=str(ROOT / "tests" / "jobs" / "upgrade_to_v3.py"),
        params_for_job={"rows": rows},
        expected_operations=["append"],
    ).execute(fake_context(**CTX, task_id="upgrade"))
    yield hook
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
    else:
        os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


@pytest.fixture(scope="module")
def published(v3):
    """Write to a branch, audit it, publish it (fast-forward through the ref_changes job)."""
    hook = v3
    assert hook.load_table(TABLE).metadata.format_version == 3
    main_before = hook.ref_snapshot_id(TABLE)
    # as wap_task_group wires them: the branch step commits nothing on v3 (no JVM); the write pins the branch
    cut = IcebergWapCreateBranchOperator(task_id="create_branch", table=TABLE, branch=BRANCH).execute(
        fake_context(**CTX, task_id="create_branch")
    )
    assert cut["created"] is False and cut["base_snapshot_id"] == str(main_before) and BRANCH not in hook.refs(TABLE)
    written = IcebergWapWriteOperator(
        task_id="write", table=TABLE, branch=BRANCH, base_snapshot_id=cut["base_snapshot_id"], sql=[INSERT, DELETE]
    ).execute(fake_context(**CTX, task_id="write"))
    assert hook.ref_snapshot_id(TABLE) == main_before, "a WAP write never touches main"
    audit = IcebergWapAuditOperator(task_id="audit", table=TABLE, branch=BRANCH, **CHECKS).execute(
        fake_context(**CTX, task_id="audit")
    )
    assert audit["passed"] is True
    out = IcebergWapPublishOperator(
        task_id="publish", table=TABLE, branch=BRANCH, audit=audit, drop_branch=True, tag="release-v3"
    ).execute(fake_context(**CTX, task_id="publish"))
    return main_before, written, audit, out, _delete_files(hook)


def test_write_audit_publish_on_a_v3_table(v3, published):
    hook = v3
    main_before, written, audit, out, dvs = published
    tbl = hook.load_table(TABLE)
    assert tbl.metadata.format_version == 3
    assert out["method"] == "fast_forward" and str(hook.ref_snapshot_id(TABLE)) == written["snapshot_id"]
    refs = hook.refs(TABLE)
    assert BRANCH not in refs and refs["release-v3"].type == "tag"
    assert str(refs["release-v3"].snapshot_id) == written["snapshot_id"]
    assert str(audit["snapshot_id"]) == written["snapshot_id"]
    # the ref moves were committed by the Spark job (its ledger row), the publish recorded as always
    jobs = [decode_ledger_row(r) for r in hook.governance.read("ledger", table_name=TABLE)]
    by_op = {r["operation"]: r for r in jobs}
    assert by_op["wap_publish_refs"]["status"] == "succeeded"
    assert [c["ref"] for c in by_op["wap_publish_refs"]["details"]["changes"]] == ["main", "release-v3", BRANCH]
    assert by_op["wap_publish"]["snapshot_before"] == main_before
    pinned = by_op["wap_branch_reset"]["details"]["changes"]
    assert pinned == [{"ref": BRANCH, "snapshot_id": str(main_before)}]
    assert tbl.scan().to_arrow().num_rows == 99
    # the branch's DELETE wrote a deletion vector; pyiceberg applies it when it reads
    assert [(d["content"], d["file_format"]) for d in dvs] == [(1, "PUFFIN")]
    assert 101 not in set(tbl.scan().to_arrow().column("order_id").to_pylist())


@pytest.fixture(scope="module")
def maintained(published):
    """One maintenance plan (one Spark job): compaction, manifests, expiry, orphans listed."""
    out = IcebergMaintenancePlanOperator(
        task_id="plan",
        table=TABLE,
        force=True,
        expire_older_than="0s",
        older_than_floor="0s",
        retain_last=1,
        remove_orphans=True,
    ).execute(fake_context(**CTX, task_id="plan"))
    return out


def test_maintenance_compacts_away_the_deletion_vectors(v3, maintained):
    hook, out = v3, maintained
    assert out["spark_job"] is True
    done = [a["action"] for a in out["actions"]]
    assert "rewrite_data_files" in done and "expire_snapshots" in done and "remove_orphan_files" in done
    assert "rewrite_position_delete_files" not in done
    assert "deletion vectors" in out["skipped"]["rewrite_position_delete_files"]
    tbl = hook.load_table(TABLE)
    assert tbl.metadata.format_version == 3 and _delete_files(hook) == []
    assert tbl.scan().to_arrow().num_rows == 99


@pytest.fixture(scope="module")
def erased(v3, maintained):
    hook = v3
    held = {sid for sid, vals in values_by_snapshot(hook, TABLE).items() if isinstance(sid, int) and vals & ERASED}
    args = {"table": TABLE, "subject_columns": "customer_id", "requests_table": REQUESTS, "ref_policy": "drop"}
    logical = IcebergErasureOperator(task_id="erase_logical", phase="logical", **args).execute(
        fake_context(**CTX, task_id="erase_logical")
    )
    dvs = _delete_files(hook)
    purge = IcebergErasureOperator(task_id="erase_purge", phase="purge", redact_erased_requests=True, **args).execute(
        fake_context(**CTX, task_id="erase_purge")
    )
    return held, logical, dvs, purge


def test_logical_erasure_writes_deletion_vectors(v3, erased):
    _, logical, dvs, _ = erased
    assert logical["verification"] == "verified" and logical["rows_deleted"] == 8 + 6
    assert dvs and {(d["content"], d["file_format"]) for d in dvs} == {(1, "PUFFIN")}, dvs
    assert all(d["file_path"].endswith(".puffin") for d in dvs)


def test_purge_leaves_no_subject_byte_and_no_snapshot_that_held_one(v3, erased):
    hook = v3
    held, _, _, purge = erased
    assert purge["verification"] == "verified", purge
    tbl = hook.load_table(TABLE)
    assert tbl.metadata.format_version == 3
    # the data files were rewritten: no deletion vector left, in any snapshot still reachable
    assert _delete_files(hook) == [] and _delete_files(hook, all_snapshots=True) == []
    # time travel: every snapshot that held a subject is expired; none left shows one
    remaining = {s.snapshot_id for s in tbl.metadata.snapshots}
    assert held and not held & remaining
    assert all(not vals & ERASED for vals in values_by_snapshot(hook, TABLE).values())
    assert "release-v3" not in hook.refs(TABLE)  # ref_policy="drop": the tag reached the subjects
    assert tbl.scan().to_arrow().num_rows == 99 - 14
    assert subject_bytes_in_files(hook, TABLE, sorted(ERASED)) == []
    assert person(1) in {r["customer_id"] for r in rows_of(hook, TABLE)}  # other people stay
    assert {r["request_id"]: r["status"] for r in rows_of(hook, REQUESTS)} == dict.fromkeys(SUBJECTS, "redacted")
