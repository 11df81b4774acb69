"""Re-run handling of the WAP write/publish operators on real SQLite catalogs, without Spark (#15).

The earlier publish is made with pyiceberg commits stamped exactly as a WAP write stamps
them; refusals and skips happen before any Spark job (nothing here submits one), and
leave the table's metadata location unchanged.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowSkipException

from airflow_iceberg_provider.assets.uris import iceberg_asset
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator, plan_rerun_from_catalog
from airflow_iceberg_provider.rules import wap_rerun as rl
from tests.support.lake import create_orders_table, orders_batch
from tests.support.wap import record_audit

T = "db.orders"
DAY = datetime(2026, 1, 1, tzinfo=UTC)


def ctx(run_id: str, task_id: str = "load.write", try_number: int = 1, day: datetime = DAY) -> dict:
    from datetime import timedelta

    ti = SimpleNamespace(dag_id="daily", run_id=run_id, task_id=task_id, try_number=try_number, map_index=-1)
    return {
        "ti": ti,
        "task_instance": ti,
        "run_id": run_id,
        "logical_date": day,
        "data_interval_start": day,
        "data_interval_end": day + timedelta(days=1),
    }


def publish_day(hook, run_id: str, start: int, count: int, day: datetime = DAY) -> int:
    """What a WAP write + fast-forward leaves on main: an append stamped with the run's identity."""
    props = rl.summary_properties(rl.RunIdentity.from_context(ctx(run_id, day=day)))
    hook.load_table(T).append(orders_batch(start, count, day.date().isoformat()), snapshot_properties=props)
    return hook.ref_snapshot_id(T)


@pytest.fixture
def orders(lake):
    create_orders_table(lake, T).append(orders_batch(0, 10, "2025-12-31"))
    return lake


def write_op(**kw):
    return IcebergWapWriteOperator(task_id="write", table=T, sql="INSERT INTO {table} SELECT 1", **kw)


def test_fail_refuses_before_any_spark_job_naming_the_earlier_publish(orders, monkeypatch):
    earlier = publish_day(orders, "scheduled__2026-01-01", 100, 5)
    before = orders.metadata_location(T)
    op = write_op(branch="wap_b")
    monkeypatch.setattr(type(op), "run_spark_job", lambda *a, **k: pytest.fail("no Spark job may start"))
    with pytest.raises(IcebergRefusedError) as err:
        op.execute(ctx("manual__again"))
    assert f"snapshot {earlier}" in str(err.value) and "scheduled__2026-01-01" in str(err.value)
    assert "nothing was changed" in str(err.value)
    assert orders.metadata_location(T) == before
    row = [r for r in orders.governance.read("ledger", operation="wap_write") if r["status"] == "refused"]
    assert len(row) == 1 and json.loads(row[0]["details"])["rerun"]["earlier"]["published_snapshot_id"] == str(earlier)


def test_skip_records_a_noop_and_skips_dropping_the_empty_branch(orders, monkeypatch):
    publish_day(orders, "scheduled__2026-01-01", 100, 5)
    orders.set_ref(orders.load_table(T), "wap_b", orders.ref_snapshot_id(T))  # what create_branch made
    op = write_op(branch="wap_b", on_rerun="skip")
    monkeypatch.setattr(type(op), "run_spark_job", lambda *a, **k: pytest.fail("no Spark job may start"))
    with pytest.raises(AirflowSkipException, match="already published"):
        op.execute(ctx("scheduled__2026-01-01", try_number=2))
    assert "wap_b" not in orders.refs(T)
    noop = [r for r in orders.governance.read("ledger", operation="wap_write") if r["status"] == "noop"]
    assert len(noop) == 1 and noop[0]["run_id"] == "scheduled__2026-01-01"


def test_another_interval_or_group_is_not_a_rerun(orders):
    publish_day(orders, "scheduled__2026-01-01", 100, 5)
    hook, ident = (
        orders,
        rl.RunIdentity.from_context(ctx("scheduled__2026-01-02", day=datetime(2026, 1, 2, tzinfo=UTC))),
    )
    _, plan, ms = plan_rerun_from_catalog(hook, T, ident, "fail")
    assert plan.action == "write" and ms < 5000
    other_group = rl.RunIdentity.from_context(ctx("scheduled__2026-01-01", task_id="other.write"))
    assert plan_rerun_from_catalog(hook, T, other_group, "fail")[1].action == "write"


def test_replace_by_files_removes_exactly_the_earlier_rows_on_the_branch(orders):
    publish_day(orders, "scheduled__2026-01-01", 100, 5)
    publish_day(orders, "scheduled__2026-01-02", 200, 7, day=datetime(2026, 1, 2, tzinfo=UTC))
    ident = rl.RunIdentity.from_context(ctx("manual__redo"))
    tbl, plan, _ = plan_rerun_from_catalog(orders, T, ident, "replace")
    assert plan.method == "files" and plan.expected_rows == 5
    main = orders.ref_snapshot_id(T)
    orders.set_ref(tbl, "wap_redo", main)
    props = rl.summary_properties(ident, replaces=plan.earlier.published_snapshot_id)
    out = orders.remove_files_on_branch(orders.load_table(T), "wap_redo", plan.remove_snapshot_ids, props)
    assert out["rows"] == 5 and out["files"] >= 1
    tbl = orders.load_table(T)
    ids = sorted(tbl.scan(snapshot_id=tbl.metadata.refs["wap_redo"].snapshot_id).to_arrow()["order_id"].to_pylist())
    assert ids == list(range(10)) + list(range(200, 207))  # day 1 gone, the rest intact
    assert orders.ref_snapshot_id(T) == main  # main untouched
    removal = orders.snapshot(tbl, ref="wap_redo")
    assert removal.summary["airflow.wap-replaces"] == str(plan.earlier.published_snapshot_id)
    assert rl.change_metrics([removal])["replaced_records"] == 5
    # the same files again: no longer live on the branch, refused without a commit
    before = orders.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="no longer live"):
        orders.remove_files_on_branch(tbl, "wap_redo", plan.remove_snapshot_ids, props)
    assert orders.metadata_location(T) == before


def test_publish_rerun_of_a_published_snapshot_emits_again_unless_skip(orders):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    orders.set_ref(orders.load_table(T), "wap_b", orders.ref_snapshot_id(T))
    orders.load_table(T).append(
        orders_batch(300, 3),
        branch="wap_b",
        snapshot_properties=rl.summary_properties(rl.RunIdentity.from_context(ctx("r1"))),
    )
    head = orders.ref_snapshot_id(T, "wap_b")
    audit = record_audit(orders, T, "wap_b", head, dag_id="daily", run_id="r1")
    asset = iceberg_asset(T)
    first = IcebergWapPublishOperator(task_id="load.publish", table=T, branch="wap_b", outlets=[asset], audit=audit)
    events = OutletEventAccessors()
    assert first.execute({**ctx("r1", "load.publish"), "outlet_events": events})["method"] == "fast_forward"
    assert events[asset].extra["snapshot_id"] == str(head)
    # cleared publish task, on_rerun="fail": main unchanged, the same event again
    events = OutletEventAccessors()
    again = IcebergWapPublishOperator(
        task_id="load.publish", table=T, branch="wap_b", audited_snapshot_id=str(head), outlets=[asset], audit=audit
    )
    assert again.execute({**ctx("r1", "load.publish", 2), "outlet_events": events})["method"] == "noop"
    assert events[asset].extra["snapshot_id"] == str(head)
    # on_rerun="skip": skipped, no event, a noop row
    before = orders.metadata_location(T)
    skip = IcebergWapPublishOperator(
        task_id="load.publish",
        table=T,
        branch="wap_b",
        audited_snapshot_id=str(head),
        outlets=[asset],
        on_rerun="skip",
        audit=audit,
    )
    events = OutletEventAccessors()
    with pytest.raises(AirflowSkipException):
        skip.execute({**ctx("r1", "load.publish", 3), "outlet_events": events})
    assert not events[asset].extra and orders.metadata_location(T) == before
    assert [r["status"] for r in orders.governance.read("ledger", operation="wap_publish")].count("noop") == 1


def test_publish_refuses_a_branch_whose_interval_another_run_published_meanwhile(orders):
    base = orders.ref_snapshot_id(T)
    orders.set_ref(orders.load_table(T), "wap_late", base)
    orders.load_table(T).append(
        orders_batch(400, 3),
        branch="wap_late",
        snapshot_properties=rl.summary_properties(rl.RunIdentity.from_context(ctx("manual__late"))),
    )
    head = orders.ref_snapshot_id(T, "wap_late")
    audit = record_audit(orders, T, "wap_late", head, dag_id="daily", run_id="manual__late")
    publish_day(orders, "scheduled__2026-01-01", 100, 5)  # the other run's publish, after the branch was cut
    before = orders.metadata_location(T)
    for mode in ("fail", "replace"):
        op = IcebergWapPublishOperator(
            task_id="load.publish", table=T, branch="wap_late", on_conflict="cherrypick", on_rerun=mode, audit=audit
        )
        with pytest.raises(IcebergRefusedError, match="after this run's branch was cut"):
            op.execute(ctx("manual__late", "load.publish"))
    assert orders.metadata_location(T) == before


def test_operator_arguments_are_validated():
    with pytest.raises(IcebergValidationError, match="on_rerun='twice'"):
        write_op(on_rerun="twice")
    with pytest.raises(IcebergValidationError, match="replace_where"):
        write_op(on_rerun="replace", replace_where="1 = 1; DROP TABLE x")
    with pytest.raises(IcebergValidationError, match="replace_where applies to sql"):
        IcebergWapWriteOperator(task_id="w", table=T, application="/x.py", replace_where="a = 1")
    with pytest.raises(IcebergValidationError, match="on_rerun"):
        IcebergWapPublishOperator(task_id="p", table=T, on_rerun="")
    assert write_op(on_rerun="replace", replace_where="d = '{{ ds }}'").replace_where == "d = '{{ ds }}'"
