"""Maintenance operators on real SQLite catalogs, without Spark.

Covers everything decided before a job would be submitted: dry-run previews,
refusals (metadata unchanged afterwards), and the plan on a healthy table, which
must not start a JVM. Submissions in these tests point at a Spark connection that
does not exist, so any attempt to start a job would fail the test loudly.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_provider.operators.maintenance import (
    IcebergMaintenancePlanOperator,
    IcebergRemoveOrphanFilesOperator,
    IcebergRewriteDataFilesOperator,
    IcebergRewriteManifestsOperator,
    IcebergRewritePositionDeleteFilesOperator,
)
from tests.support.lake import append_batches, create_orders_table, fake_context

NO_SPARK = {"spark_conn_id": "no_such_spark_conn"}


@pytest.fixture
def orders(lake):
    """db.orders with 6 small appends; a release tag and a legal hold on early snapshots."""
    create_orders_table(lake, "db.orders", partition_by=())
    ids = append_batches(lake, "db.orders", 6)
    lake.set_ref("db.orders", "release-1", ids[1], ref_type="tag")
    lake.set_ref("db.orders", "legal-hold-case-7", ids[2], ref_type="tag")
    return lake, ids


def _ledger(hook, operation):
    return [r for r in hook.governance.read("ledger") if r["operation"] == operation]


def test_expire_dry_run_lists_snapshots_and_holds_without_a_jvm(orders):
    hook, ids = orders
    before = hook.metadata_location("db.orders")
    op = IcebergExpireSnapshotsOperator(
        task_id="expire", table="db.orders", older_than="0s", older_than_floor="0s", dry_run=True, **NO_SPARK
    )
    out = op.execute(fake_context())
    assert out["spark_job"] is False and out["dry_run"] is True
    assert out["would_expire"] == [str(ids[0]), str(ids[3]), str(ids[4])]  # main keeps its head; tags keep theirs
    assert out["held_snapshots"] == {
        str(ids[1]): ["tag:release-1"],
        str(ids[2]): ["legal_hold:legal-hold-case-7"],
    }
    assert hook.metadata_location("db.orders") == before
    row = _ledger(hook, "maintenance.expire_snapshots")[-1]
    assert row["status"] == "dry_run"
    assert json.loads(row["details"])["expire"] == out["would_expire"]
    assert "spark_hook" not in op.__dict__


def test_expire_with_nothing_to_expire_starts_no_job(orders):
    hook, _ = orders
    op = IcebergExpireSnapshotsOperator(task_id="expire", table="db.orders", older_than="7d", **NO_SPARK)
    out = op.execute(fake_context())
    assert out["spark_job"] is False and out["expired_snapshots"] == 0
    assert _ledger(hook, "maintenance.expire_snapshots")[-1]["status"] == "noop"


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (
            lambda: IcebergExpireSnapshotsOperator(task_id="e", table="db.orders", retain_last="0"),
            IcebergValidationError,
            "retain_last",
        ),
        (
            lambda: IcebergExpireSnapshotsOperator(task_id="e", table="db.orders", older_than="10m"),
            IcebergRefusedError,
            "floor",
        ),
        (
            lambda: IcebergExpireSnapshotsOperator(
                task_id="e", table="db.orders", older_than="0s", older_than_floor="0s", snapshot_ids="{{ ids }}"
            ),
            IcebergValidationError,
            "snapshot_ids",
        ),
        (
            lambda: IcebergRemoveOrphanFilesOperator(task_id="o", table="db.orders", older_than="12h"),
            IcebergValidationError,
            "in flight",
        ),
        (
            lambda: IcebergRewriteDataFilesOperator(task_id="r", table="db.orders", branch="audit"),
            IcebergValidationError,
            "main branch only",
        ),
        (
            lambda: IcebergRewriteDataFilesOperator(task_id="r", table="db.orders", strategy="zorder"),
            IcebergValidationError,
            "zorder",
        ),
        (
            lambda: IcebergRewriteDataFilesOperator(task_id="r", table="db.orders", strategy="sort"),
            IcebergValidationError,
            "sort order",
        ),
        (
            lambda: IcebergRewriteDataFilesOperator(
                task_id="r", table="db.orders", options={"min-input-files": "2'); --"}
            ),
            IcebergValidationError,
            "options",
        ),
        (
            lambda: IcebergMaintenancePlanOperator(task_id="p", table="db.orders", expire_older_than="1m"),
            IcebergRefusedError,
            "floor",
        ),
    ],
)
def test_bad_parameters_are_refused_before_any_job_and_change_nothing(orders, make, error, match):
    hook, _ = orders
    before = hook.metadata_location("db.orders")
    op = make()
    op.spark_conn_id = NO_SPARK["spark_conn_id"]
    with pytest.raises(error, match=match):
        op.execute(fake_context())
    assert hook.metadata_location("db.orders") == before


def test_static_bad_values_fail_at_parse_time():
    with pytest.raises(IcebergValidationError, match="retain_last"):
        IcebergExpireSnapshotsOperator(task_id="e", table="db.orders", retain_last=0)
    with pytest.raises(IcebergValidationError, match="older_than_floor"):
        IcebergExpireSnapshotsOperator(task_id="e", table="db.orders", older_than_floor="later")
    with pytest.raises(IcebergValidationError, match="retain_last"):
        IcebergMaintenancePlanOperator(task_id="p", table="db.orders", retain_last=0)


def test_gc_disabled_refuses_expiry_and_orphan_removal(orders):
    hook, _ = orders
    hook.ensure_table_properties("db.orders", {"gc.enabled": "false"})
    before = hook.metadata_location("db.orders")
    for op in (
        IcebergExpireSnapshotsOperator(
            task_id="e", table="db.orders", older_than="0s", older_than_floor="0s", **NO_SPARK
        ),
        IcebergRemoveOrphanFilesOperator(task_id="o", table="db.orders", dry_run=False, **NO_SPARK),
    ):
        with pytest.raises(IcebergRefusedError, match=r"gc\.enabled=false"):
            op.execute(fake_context())
    assert hook.metadata_location("db.orders") == before


def test_position_delete_rewrite_refused_on_format_v1(lake):
    create_orders_table(lake, "db.v1", partition_by=(), properties={"format-version": "1"})
    op = IcebergRewritePositionDeleteFilesOperator(task_id="r", table="db.v1", **NO_SPARK)
    with pytest.raises(IcebergValidationError, match="format-version 1"):
        op.execute(fake_context())


def test_rewrites_on_empty_or_delete_free_tables_start_no_job(lake):
    create_orders_table(lake, "db.empty", partition_by=())
    assert (
        IcebergRewriteDataFilesOperator(task_id="r", table="db.empty", **NO_SPARK).execute(fake_context())["spark_job"]
        is False
    )
    assert (
        IcebergRewriteManifestsOperator(task_id="m", table="db.empty", **NO_SPARK).execute(fake_context())["spark_job"]
        is False
    )
    append_batches(lake, "db.empty", 2)
    out = IcebergRewritePositionDeleteFilesOperator(task_id="d", table="db.empty", **NO_SPARK).execute(fake_context())
    assert out["spark_job"] is False


def test_preview_and_layout_through_the_hook(orders):
    from airflow_iceberg_provider.rules.maintenance import file_layout, preview_table_expiry

    hook, ids = orders
    tbl = hook.load_table("db.orders")
    preview = preview_table_expiry(tbl, older_than=timedelta(0), retain_last=2)
    assert preview.expire == [ids[0], ids[3]]
    assert preview.retain == [ids[1], ids[2], ids[4], ids[5]]
    default = preview_table_expiry(tbl)  # table default: 5 days -> nothing old enough
    assert default.expire == []
    layout = file_layout(hook.data_files(tbl), target_file_size=512 * 1024 * 1024)  # the table's (default) target
    assert len(layout) == 1 and layout[0].data_files == 6 and layout[0].small_files == 6
    assert file_layout(hook.data_files(tbl), target_file_size=1024)[0].small_files == 0


def test_plan_on_a_healthy_table_starts_no_spark_job(lake):
    create_orders_table(lake, "db.healthy", partition_by=())
    append_batches(lake, "db.healthy", 3)  # 3 files: fewer than min-input-files, nothing old to expire
    before = lake.metadata_location("db.healthy")
    op = IcebergMaintenancePlanOperator(task_id="plan", table="db.healthy", remove_orphans=True, **NO_SPARK)
    out = op.execute(fake_context())
    assert out["healthy"] is True and out["spark_job"] is False and out["actions"] == []
    assert "spark_hook" not in op.__dict__
    assert lake.metadata_location("db.healthy") == before
    row = _ledger(lake, "maintenance_plan")[-1]
    assert row["status"] == "noop" and json.loads(row["metrics"])["health"]["data_files"] == 3


def test_plan_decides_from_health_and_policy_without_running(orders):
    hook, ids = orders
    op = IcebergMaintenancePlanOperator(
        task_id="plan",
        table="db.orders",
        min_input_files=2,
        max_manifests=3,
        expire_older_than="0s",
        older_than_floor="0s",
        **NO_SPARK,
    )
    decision, health, expiry = op.plan()
    assert [a.action for a in decision.actions] == ["rewrite_data_files", "rewrite_manifests", "expire_snapshots"]
    assert health.data_files == 6 and expiry is not None
    assert set(expiry.held_snapshots) == {str(ids[1]), str(ids[2])}


def test_templated_fields_render(orders):
    op = IcebergExpireSnapshotsOperator(
        task_id="e",
        table="{{ params.tbl }}",
        older_than="{{ params.age }}",
        retain_last="{{ params.keep }}",
        dry_run="{{ params.dry }}",
        older_than_floor="0s",
        **NO_SPARK,
    )
    ctx = {**fake_context(), "params": {"tbl": "db.orders", "age": "0s", "keep": "2", "dry": "true"}}
    op.render_template_fields(ctx)
    assert (op.table, op.older_than, op.retain_last, op.dry_run) == ("db.orders", "0s", "2", "true")
    out = op.execute(ctx)
    assert out["dry_run"] is True and out["retain_last"] == 2


def test_expiry_floor_is_configurable_in_airflow_config(orders, monkeypatch):
    op = IcebergExpireSnapshotsOperator(task_id="e", table="db.orders", older_than="1d", dry_run=True, **NO_SPARK)
    assert op.execute(fake_context())["dry_run"] is True  # default floor 1 h
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__EXPIRY_FLOOR", "2d")
    with pytest.raises(IcebergRefusedError, match="floor of 2d"):
        op.execute(fake_context())
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__EXPIRY_FLOOR", "soonish")
    with pytest.raises(IcebergValidationError, match=r"\[iceberg_provider\] expiry_floor"):
        op.execute(fake_context())


# ------------------------------------------------------------------ #16: holds that expiry cannot drop
def test_expiry_refuses_when_the_table_default_ref_age_would_drop_an_unpinned_hold(orders):
    """A hold placed without its own max-ref-age inherits history.expire.max-ref-age-ms: refuse, change nothing."""
    hook, ids = orders  # legal-hold-case-7 was placed by hand, without a max-ref-age
    hook.ensure_table_properties("db.orders", {"history.expire.max-ref-age-ms": "1"})
    before = hook.metadata_location("db.orders")
    for op in (
        IcebergExpireSnapshotsOperator(
            task_id="expire", table="db.orders", older_than="0s", older_than_floor="0s", **NO_SPARK
        ),
        IcebergExpireSnapshotsOperator(
            task_id="expire_dry", table="db.orders", older_than="0s", older_than_floor="0s", dry_run=True, **NO_SPARK
        ),
        IcebergMaintenancePlanOperator(
            task_id="plan", table="db.orders", expire_older_than="0s", older_than_floor="0s", force=True, **NO_SPARK
        ),
    ):
        with pytest.raises(IcebergRefusedError) as err:
            op.execute(fake_context())
        msg = str(err.value)
        assert "legal-hold-case-7" in msg and str(ids[2]) in msg, msg
        assert "history.expire.max-ref-age-ms=1" in msg and "Nothing was changed" in msg, msg
        assert hook.metadata_location("db.orders") == before


def test_placing_the_hold_again_pins_it_and_expiry_then_keeps_it(orders):
    from airflow_iceberg_provider.core.governance import LEGAL_HOLD_MAX_REF_AGE_MS
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator

    hook, ids = orders
    hook.ensure_table_properties("db.orders", {"history.expire.max-ref-age-ms": "1"})
    out = IcebergCreateTagOperator(
        task_id="pin", table="db.orders", tag="case-7", snapshot_id=ids[2], legal_hold=True, case_id="C-7"
    ).execute(fake_context())
    assert out["outcome"] == "hold_pinned"
    assert hook.refs("db.orders")["legal-hold-case-7"].max_ref_age_ms == LEGAL_HOLD_MAX_REF_AGE_MS
    again = IcebergCreateTagOperator(
        task_id="pin2", table="db.orders", tag="case-7", snapshot_id=ids[2], legal_hold=True, case_id="C-7"
    ).execute(fake_context())
    assert again["outcome"] == "exists"
    preview = IcebergExpireSnapshotsOperator(
        task_id="expire", table="db.orders", older_than="0s", older_than_floor="0s", dry_run=True, **NO_SPARK
    ).execute(fake_context())
    # the plain tag release-1 (no own age) is what the table default drops; the pinned hold stays
    assert preview["refs_expired"] == ["release-1"]
    assert preview["held_snapshots"][str(ids[2])] == ["legal_hold:legal-hold-case-7"]
