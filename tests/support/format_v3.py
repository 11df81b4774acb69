"""The format-version 3 lifecycle, shared by the Spark 3.5 module and the Spark 4.1 tier.

One flow on one table, each step a function the test modules call from their fixtures, each check a
function their tests call: the table starts at format-version 2 (pyiceberg creates it), a user's Spark
job upgrades it to v3 and appends; then write-audit-publish (the WAP ref moves go through the
``ref_changes`` Spark job: pyiceberg 0.12 writes no v3 metadata behind the SQL catalog; the branch's
DELETE writes a deletion vector), one maintenance plan (compaction removes the deletion vector,
expiry, orphans listed; the position-delete rewrite skipped), the logical erasure (merge-on-read
DELETE: deletion vectors, Puffin delete files), the purge (data files rewritten, deletion vectors and
every snapshot that reached the subjects gone), then a time-travel check and a byte scan of every
file under the table's location. pyiceberg reads every state in between (refs, snapshots, the
``delete_files`` metadata table, scans with deletion vectors applied).

The Spark connection is the caller's: ``spark_default`` as the module set it (spark-submit, or a
Spark Connect server of the runtime under test).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.erasure import (
    add_requests,
    create_people_table,
    person,
    rows_of,
    set_salt_connection,
    table_dir,
    values_by_snapshot,
)
from tests.support.key_scan import files_holding
from tests.support.lake import fake_context

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


def delete_files(hook: Any, all_snapshots: bool = False) -> list[dict[str, Any]]:
    """The table's delete files (content, format, path), of the current snapshot or of every one."""
    tbl = hook.load_table(TABLE)
    found = tbl.inspect.all_delete_files() if all_snapshots else tbl.inspect.delete_files()
    rows: list[dict[str, Any]] = found.select(["content", "file_format", "file_path"]).to_pylist()
    return rows


@contextmanager
def upgraded_table(hook: Any) -> Iterator[Any]:
    """The v2 table, its erasure requests and the salt, upgraded to v3 with one append by a Spark job."""
    import os

    from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator

    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    create_people_table(hook, TABLE, partition_by=(), **{"write.wap.enabled": "true"})
    add_requests(hook, REQUESTS, SUBJECTS, received_days_ago=1)
    rows = [[i, person(703) if i % 5 == 0 else person(i % 4), float(i)] for i in range(40)]
    try:
        IcebergSparkSubmitOperator(
            task_id="upgrade",
            table=TABLE,
            application=str(ROOT / "tests" / "jobs" / "upgrade_to_v3.py"),
            params_for_job={"rows": rows},
            expected_operations=["append"],
        ).execute(fake_context(**CTX, task_id="upgrade"))
        yield hook
    finally:
        if old is None:
            os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
        else:
            os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


@dataclass(frozen=True)
class Published:
    main_before: int
    written: dict[str, Any]
    audit: dict[str, Any]
    out: dict[str, Any]
    deletion_vectors: list[dict[str, Any]]


def publish(hook: Any) -> Published:
    """Write to a branch, audit it, publish it (fast-forward through the ref_changes job)."""
    from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
    from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
    from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator

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
    return Published(main_before, written, audit, out, delete_files(hook))


def check_published(hook: Any, published: Published) -> None:
    from airflow_iceberg_provider.core.governance import decode_ledger_row

    written, audit, out = published.written, published.audit, published.out
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
    assert by_op["wap_publish"]["snapshot_before"] == published.main_before
    pinned = by_op["wap_branch_reset"]["details"]["changes"]
    assert pinned == [{"ref": BRANCH, "snapshot_id": str(published.main_before)}]
    assert tbl.scan().to_arrow().num_rows == 99
    # the branch's DELETE wrote a deletion vector; pyiceberg applies it when it reads
    assert [(d["content"], d["file_format"]) for d in published.deletion_vectors] == [(1, "PUFFIN")]
    assert 101 not in set(tbl.scan().to_arrow().column("order_id").to_pylist())


def maintain() -> dict[str, Any]:
    """One maintenance plan (one Spark job): compaction, manifests, expiry, orphans listed."""
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator

    out: dict[str, Any] = IcebergMaintenancePlanOperator(
        task_id="plan",
        table=TABLE,
        force=True,
        expire_older_than="0s",
        older_than_floor="0s",
        retain_last=1,
        remove_orphans=True,
    ).execute(fake_context(**CTX, task_id="plan"))
    return out


def check_maintained(hook: Any, out: dict[str, Any]) -> None:
    assert out["spark_job"] is True
    done = [a["action"] for a in out["actions"]]
    assert "rewrite_data_files" in done and "expire_snapshots" in done and "remove_orphan_files" in done
    assert "rewrite_position_delete_files" not in done
    assert "deletion vectors" in out["skipped"]["rewrite_position_delete_files"]
    tbl = hook.load_table(TABLE)
    assert tbl.metadata.format_version == 3 and delete_files(hook) == []
    assert tbl.scan().to_arrow().num_rows == 99


@dataclass(frozen=True)
class Erased:
    held: set[int]
    logical: dict[str, Any]
    deletion_vectors: list[dict[str, Any]]
    purge: dict[str, Any]


def erase(hook: Any) -> Erased:
    """The logical erasure (deletion vectors), then the purge, both with ``ref_policy="drop"``."""
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator

    held = {sid for sid, vals in values_by_snapshot(hook, TABLE).items() if isinstance(sid, int) and vals & ERASED}
    args = {"table": TABLE, "subject_columns": "customer_id", "requests_table": REQUESTS, "ref_policy": "drop"}
    logical = IcebergErasureOperator(task_id="erase_logical", phase="logical", **args).execute(
        fake_context(**CTX, task_id="erase_logical")
    )
    dvs = delete_files(hook)
    purge = IcebergErasureOperator(task_id="erase_purge", phase="purge", redact_erased_requests=True, **args).execute(
        fake_context(**CTX, task_id="erase_purge")
    )
    return Erased(held, logical, dvs, purge)


def check_logical_erasure(erased: Erased) -> None:
    logical, dvs = erased.logical, erased.deletion_vectors
    assert logical["verification"] == "verified" and logical["rows_deleted"] == 8 + 6
    assert dvs and {(d["content"], d["file_format"]) for d in dvs} == {(1, "PUFFIN")}, dvs
    assert all(d["file_path"].endswith(".puffin") for d in dvs)


def check_purged(hook: Any, erased: Erased) -> None:
    assert erased.purge["verification"] == "verified", erased.purge
    tbl = hook.load_table(TABLE)
    assert tbl.metadata.format_version == 3
    # the data files were rewritten: no deletion vector left, in any snapshot still reachable
    assert delete_files(hook) == [] and delete_files(hook, all_snapshots=True) == []
    # time travel: every snapshot that held a subject is expired; none left shows one
    remaining = {s.snapshot_id for s in tbl.metadata.snapshots}
    assert erased.held and not erased.held & remaining
    assert all(not vals & ERASED for vals in values_by_snapshot(hook, TABLE).values())
    assert "release-v3" not in hook.refs(TABLE)  # ref_policy="drop": the tag reached the subjects
    assert tbl.scan().to_arrow().num_rows == 99 - 14
    assert files_holding(Path(table_dir(hook, TABLE)), sorted(ERASED)) == {}
    assert person(1) in {r["customer_id"] for r in rows_of(hook, TABLE)}  # other people stay
    assert {r["request_id"]: r["status"] for r in rows_of(hook, REQUESTS)} == dict.fromkeys(SUBJECTS, "redacted")
