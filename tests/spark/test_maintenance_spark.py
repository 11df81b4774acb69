"""Maintenance operators end to end with real Spark jobs (four jobs in this module).

One module-scoped lake; tables are built with pyiceberg (milliseconds), the
maintenance runs as real Iceberg Spark procedures, and every assertion checks the
catalog or the files on disk — never the job's own claims.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from urllib.parse import urlparse

import pyarrow.compute as pc
import pytest

from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_provider.operators.maintenance import (
    IcebergMaintenancePlanOperator,
    IcebergRemoveOrphanFilesOperator,
)
from tests.support.lake import append_batches, create_orders_table, fake_context, orders_batch

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]


def local(path: str) -> Path:
    return Path(urlparse(path).path)


def files_of(hook, table: str, snapshot_id: int) -> set[str]:
    return {t.file.file_path for t in hook.load_table(table).scan(snapshot_id=snapshot_id).plan_files()}


def fingerprint(hook, table: str) -> tuple[int, int, float]:
    data = hook.load_table(table).scan().to_arrow()
    return data.num_rows, pc.sum(data["order_id"]).as_py(), round(pc.sum(data["amount"]).as_py(), 6)


def ledger(hook, prefix: str) -> list[dict]:
    return [r for r in hook.governance.read("ledger") if r["operation"].startswith(prefix)]


@pytest.fixture(scope="module")
def plan_table(module_lake):
    """db.small: 24 one-file appends (24 manifests) and two orphan files, one 4 days old, one fresh."""
    hook = module_lake
    create_orders_table(hook, "db.small", partition_by=())
    append_batches(hook, "db.small", 24, rows=50)
    data_dir = local(hook.load_table("db.small").location()) / "data"
    old, young = data_dir / "orphan-old.parquet", data_dir / "orphan-young.parquet"
    old.write_bytes(b"x" * 1234)
    young.write_bytes(b"y" * 10)
    four_days_ago = time.time() - 4 * 86400
    os.utime(old, (four_days_ago, four_days_ago))
    return hook, old, young


def test_expire_keeps_ref_reachable_snapshots_and_deletes_other_files(module_lake):
    hook = module_lake
    create_orders_table(hook, "db.expiry", partition_by=())
    ids = append_batches(hook, "db.expiry", 6)
    hook.set_ref("db.expiry", "release-1", ids[1], ref_type="tag")
    hook.set_ref("db.expiry", "legal-hold-case-9", ids[3], ref_type="tag")
    hook.set_ref("db.expiry", "audit", ids[4], ref_type="branch")  # a branch keeps its head (retain_last=1)
    hook.load_table("db.expiry").overwrite(orders_batch(1000, 10))  # old files now reachable only from history
    head = hook.ref_snapshot_id("db.expiry")
    held = files_of(hook, "db.expiry", ids[4])  # the branch head; release-1's and the hold's files are subsets
    only_expired = files_of(hook, "db.expiry", ids[5]) - held
    current = files_of(hook, "db.expiry", head)
    assert len(only_expired) == 1 and all(local(p).exists() for p in held | only_expired | current)

    op = IcebergExpireSnapshotsOperator(
        task_id="expire", table="db.expiry", older_than="0s", older_than_floor="0s", retain_last=1
    )
    out = op.execute(fake_context())

    remaining = {s.snapshot_id for s in hook.list_snapshots("db.expiry")}
    assert remaining == {ids[1], ids[3], ids[4], head}
    assert set(hook.refs("db.expiry")) == {"main", "release-1", "legal-hold-case-9", "audit"}
    assert out["held_snapshots"] == {
        str(ids[1]): ["tag:release-1"],
        str(ids[3]): ["legal_hold:legal-hold-case-9"],
        str(ids[4]): ["branch:audit"],
    }
    assert out["removed"]["deleted_data_files_count"] == 1
    assert all(local(p).exists() for p in held | current), "files reachable from a tag or hold were deleted"
    assert not any(local(p).exists() for p in only_expired), "files of expired snapshots are still on disk"
    row = ledger(hook, "maintenance.expire_snapshots")[-1]
    assert row["status"] == "succeeded" and json.loads(row["metrics"])["deleted_data_files_count"] == 1


def test_plan_compacts_rewrites_expires_and_lists_orphans_in_one_job(plan_table):
    hook, old_orphan, young_orphan = plan_table
    before = hook.health("db.small")
    rows_before = fingerprint(hook, "db.small")
    assert before.data_files == 24 and before.manifests == 24 and before.snapshots == 24

    op = IcebergMaintenancePlanOperator(
        task_id="plan",
        table="db.small",
        min_input_files=2,
        max_manifests=5,
        expire_older_than="0s",
        older_than_floor="0s",
        retain_last=1,
        remove_orphans=True,  # dry run by default
    )
    out = op.execute(fake_context())

    assert out["spark_job"] is True
    assert [a["action"] for a in out["actions"]] == [
        "rewrite_data_files",
        "rewrite_manifests",
        "expire_snapshots",
        "remove_orphan_files",
    ]
    after = hook.health("db.small")
    assert fingerprint(hook, "db.small") == rows_before, "compaction changed the rows"
    assert after.data_files == 1 and after.manifests == 1
    assert after.snapshots <= 2
    main = hook.snapshot("db.small", ref="main")
    assert main.operation == "replace"
    # orphan dry run: the old orphan is listed (in the ledger, not deleted); the young one is not a candidate
    assert old_orphan.exists() and young_orphan.exists()
    job_row = hook.governance.read("ledger", event_id=out["job_run_id"])[0]
    listed = json.loads(job_row["details"])["orphan_files"]
    assert [local(p).name for p in listed] == ["orphan-old.parquet"]
    orphan_action = out["actions"][-1]
    assert orphan_action["orphan_files_count"] == 1 and orphan_action["orphan_bytes"] == 1234
    per_action = [r for r in ledger(hook, "maintenance.") if out["job_run_id"] in r["event_id"]]
    assert len(per_action) == 4
    metrics = json.loads(per_action[0]["metrics"])
    assert metrics["health_before"]["data_files"] == 24 and metrics["health_after"]["data_files"] == 1

    # the table is healthy now: the same plan starts no JVM
    again = IcebergMaintenancePlanOperator(
        task_id="plan2", table="db.small", min_input_files=2, max_manifests=5, spark_conn_id="no_such_conn"
    ).execute(fake_context())
    assert again["healthy"] is True and again["spark_job"] is False


def test_orphan_removal_deletes_only_files_older_than_the_floor(plan_table):
    hook, old_orphan, young_orphan = plan_table
    rows = fingerprint(hook, "db.small")
    head = hook.ref_snapshot_id("db.small")
    out = IcebergRemoveOrphanFilesOperator(task_id="orphans", table="db.small", dry_run=False).execute(fake_context())
    assert out["orphan_files"] == 1 and out["orphan_bytes"] == 1234 and out["dry_run"] is False
    assert not old_orphan.exists()
    assert young_orphan.exists(), "a file younger than the 24 h floor was removed"
    assert hook.ref_snapshot_id("db.small") == head and fingerprint(hook, "db.small") == rows


def test_zorder_compaction_with_where_rewrites_only_selected_partition(module_lake):
    from airflow_iceberg_provider.operators.maintenance import IcebergRewriteDataFilesOperator

    hook = module_lake
    create_orders_table(hook, "db.zorder")  # partitioned by day(order_ts)
    append_batches(hook, "db.zorder", 4, rows=20, day="2026-01-01")
    append_batches(hook, "db.zorder", 3, rows=20, day="2026-01-02")
    rows = fingerprint(hook, "db.zorder")
    before = hook.health("db.zorder")
    out = IcebergRewriteDataFilesOperator(
        task_id="zorder",
        table="db.zorder",
        strategy="sort",
        sort_order="zorder(region, customer_id)",
        where="order_ts < TIMESTAMP '2026-01-02 00:00:00+00:00' AND region != 'it''s not a region'",
        min_input_files=2,
    ).execute(fake_context())
    assert fingerprint(hook, "db.zorder") == rows
    assert out["rewritten_data_files"] == 4 and out["added_data_files"] == 1
    assert (before.data_files, hook.health("db.zorder").data_files) == (7, 4)  # day 2 untouched
    assert hook.snapshot("db.zorder", ref="main").operation == "replace"


def test_pinned_hold_survives_a_real_expiry_under_a_table_ref_age(module_lake):
    """#16: with history.expire.max-ref-age-ms set, Iceberg drops aged refs; a provider-placed hold survives."""
    from airflow_iceberg_provider.core.governance import LEGAL_HOLD_MAX_REF_AGE_MS
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator

    hook = module_lake
    create_orders_table(hook, "db.holdage", partition_by=())
    ids = append_batches(hook, "db.holdage", 4)
    IcebergCreateTagOperator(
        task_id="hold", table="db.holdage", tag="case-42", snapshot_id=ids[1], legal_hold=True, case_id="C-42"
    ).execute(fake_context())
    hook.set_ref("db.holdage", "eod-1", ids[1], ref_type="tag")  # a plain tag: the table default applies
    hook.load_table("db.holdage").overwrite(orders_batch(1000, 10))
    held_files = files_of(hook, "db.holdage", ids[1])
    hook.ensure_table_properties("db.holdage", {"history.expire.max-ref-age-ms": "1"})

    IcebergExpireSnapshotsOperator(
        task_id="expire", table="db.holdage", older_than="0s", older_than_floor="0s", retain_last=1
    ).execute(fake_context())

    refs = hook.refs("db.holdage")
    assert "eod-1" not in refs  # Iceberg really applied the table's max-ref-age ...
    hold = refs["legal-hold-case-42"]  # ... and the hold survived it
    assert (hold.snapshot_id, hold.max_ref_age_ms) == (ids[1], LEGAL_HOLD_MAX_REF_AGE_MS)
    assert ids[1] in {s.snapshot_id for s in hook.list_snapshots("db.holdage")}
    assert all(local(p).exists() for p in held_files)


def test_plan_regenerates_statistics_only_when_stale(module_lake):
    """#16: compute_table_stats runs when the Puffin statistics do not describe the current snapshot."""
    hook = module_lake
    create_orders_table(hook, "db.stats", partition_by=())
    append_batches(hook, "db.stats", 2)
    assert hook.health("db.stats").statistics_fresh is False

    out = IcebergMaintenancePlanOperator(
        task_id="plan", table="db.stats", compute_stats=True, actions=["rewrite_manifests"]
    ).execute(fake_context())

    assert [a["action"] for a in out["actions"]] == ["compute_table_stats"] and out["spark_job"] is True
    tbl = hook.load_table("db.stats")
    (stats,) = tbl.metadata.statistics
    assert stats.snapshot_id == tbl.current_snapshot().snapshot_id and local(stats.statistics_path).exists()
    assert {b.properties.get("ndv") is not None for b in stats.blob_metadata} == {True}
    again = IcebergMaintenancePlanOperator(
        task_id="plan", table="db.stats", compute_stats=True, actions=["rewrite_manifests"]
    ).execute(fake_context())
    assert again["healthy"] is True and again["spark_job"] is False  # fresh: no JVM
