"""WAP operators on real SQLite catalogs, without Spark: branch, reset, publish gate, refusals.

Everything here is metadata-only (pyiceberg); the Spark paths are in test_wap_spark.py.
Refusals are checked to change nothing (the table's metadata location is unchanged).
"""

from __future__ import annotations

import json

import pendulum
import pyarrow as pa
import pytest

from airflow_iceberg_provider import params
from airflow_iceberg_provider.assets.uris import iceberg_asset, iceberg_asset_uri
from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergPublishConflictError,
    IcebergRefNotFoundError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.operators._wap_common import (
    branch_snapshots,
    merge_base,
    snapshot_shape,
)
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
from airflow_iceberg_provider.params import branch_name_for_run
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.wap import commit_to_branch, record_audit

T = "db.orders"


@pytest.fixture
def orders(lake):
    tbl = create_orders_table(lake, T)
    tbl.append(orders_batch(0, 10))
    return lake


def main_of(hook):
    return hook.ref_snapshot_id(T, "main")


# ------------------------------------------------------------------ create branch
def test_create_branch_is_deterministic_enables_wap_and_is_idempotent(orders):
    ctx = fake_context(dag_id="daily", run_id="scheduled__2026-01-01")
    out = IcebergWapCreateBranchOperator(task_id="c", table=T).execute(ctx)
    expected = branch_name_for_run("daily", "scheduled__2026-01-01")
    assert out == {
        "table": T,
        "branch": expected,
        "base_snapshot_id": str(main_of(orders)),
        "created": True,
        "wap_enabled_now": True,
    }
    tbl = orders.load_table(T)
    assert tbl.metadata.properties["write.wap.enabled"] == "true"
    assert orders.refs(tbl)[expected].snapshot_id == main_of(orders)
    # a retry after the branch got a commit reports the same base and changes nothing
    commit_to_branch(orders, T, expected, 100, 5)
    before = orders.metadata_location(T)
    again = IcebergWapCreateBranchOperator(task_id="c", table=T).execute(ctx)
    assert again["base_snapshot_id"] == out["base_snapshot_id"] and again["created"] is False
    assert orders.metadata_location(T) == before


def test_create_branch_from_snapshot_and_on_empty_table(lake):
    create_orders_table(lake, T)
    out = IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b1").execute(fake_context())
    assert out["base_snapshot_id"] is None and out["created"] is False  # the first WAP write creates it
    lake.load_table(T).append(orders_batch(0, 3))
    first = main_of(lake)
    lake.load_table(T).append(orders_batch(3, 3))
    out = IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b2", from_snapshot_id=str(first)).execute(
        fake_context()
    )
    assert out["base_snapshot_id"] == str(first) and lake.ref_snapshot_id(T, "b2") == first


def test_create_branch_refusals_change_nothing(orders):
    tbl = orders.load_table(T)
    with orders.translate_errors(T), tbl.manage_snapshots() as ms:
        ms.create_tag(main_of(orders), "taken")
    before = orders.metadata_location(T)
    with pytest.raises(IcebergValidationError, match="names the main branch"):
        IcebergWapCreateBranchOperator(task_id="c", table=T, branch="main").execute(fake_context())
    with pytest.raises(IcebergValidationError, match="not a valid ref name"):
        IcebergWapCreateBranchOperator(task_id="c", table=T, branch="x'; DROP").execute(fake_context())
    with pytest.raises(IcebergRefNotFoundError):
        IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b", from_snapshot_id=42).execute(fake_context())
    assert orders.metadata_location(T) == before
    with pytest.raises(IcebergRefusedError, match="tag named 'taken'"):
        IcebergWapCreateBranchOperator(task_id="c", table=T, branch="taken").execute(fake_context())


def test_helpers():
    assert params.snapshot_id("None", "x") is None and params.snapshot_id(" 12 ", "x") == 12
    with pytest.raises(IcebergValidationError, match="not a snapshot id"):
        params.snapshot_id("abc", "base_snapshot_id")
    assert iceberg_asset_uri("wap.orders", "lakehouse") == "iceberg://lakehouse/wap/orders"
    assert iceberg_asset("wap.orders").uri == "iceberg://lakehouse/wap/orders"
    with pytest.raises(IcebergValidationError):
        iceberg_asset_uri("orders")


def test_merge_base_finds_the_branch_point(orders):
    base = main_of(orders)
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    head = commit_to_branch(orders, T, "b", 100, 2)
    orders.load_table(T).append(orders_batch(200, 2))  # main moves on
    tbl = orders.load_table(T)
    assert merge_base(orders, tbl, head, main_of(orders)) == base


# ------------------------------------------------------------------ write (no Spark)
def test_write_validation_happens_before_any_spark_job(orders):
    with pytest.raises(IcebergValidationError, match="exactly one of application"):
        IcebergWapWriteOperator(task_id="w", table=T)
    with pytest.raises(IcebergValidationError, match="exactly one of application"):
        IcebergWapWriteOperator(task_id="w", table=T, sql="SELECT 1", application="/x.py")
    with pytest.raises(IcebergValidationError, match="spark.wap.id"):
        IcebergWapWriteOperator(task_id="w", table=T, sql="SELECT 1", spark_conf={"spark.wap.id": "x"})
    before = orders.metadata_location(T)
    op = IcebergWapWriteOperator(task_id="w", table=T, sql=["  ;"], spark_conn_id="no_such_spark")
    with pytest.raises(IcebergValidationError, match="non-empty statement"):
        op.execute(fake_context())
    op = IcebergWapWriteOperator(task_id="w", table=T, sql="INSERT ...", branch="main", spark_conn_id="no_such_spark")
    with pytest.raises(IcebergValidationError, match="main branch"):
        op.execute(fake_context())
    assert orders.metadata_location(T) == before


def test_reset_discards_an_earlier_try_and_keeps_retention(orders):
    base = main_of(orders)
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    head = commit_to_branch(orders, T, "b", 100, 5)
    # retention set by the user (pyiceberg's own append above dropped it; Spark commits keep it)
    orders.set_ref(orders.load_table(T), "b", head, max_snapshot_age_ms=86_400_000)
    op = IcebergWapWriteOperator(task_id="w", table=T, sql="INSERT ...")
    tbl = orders.load_table(T)
    assert op._reset_to_base(tbl, "b", orders.refs(tbl)["b"], base) == head
    ref = orders.refs(T)["b"]
    assert ref.snapshot_id == base and ref.max_snapshot_age_ms == 86_400_000
    # already at base: nothing to do
    tbl = orders.load_table(T)
    assert op._reset_to_base(tbl, "b", orders.refs(tbl)["b"], base) is None


def test_reset_refuses_a_branch_that_does_not_descend_from_base(orders):
    other = main_of(orders)
    orders.load_table(T).append(orders_batch(50, 1))
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    commit_to_branch(orders, T, "b", 100, 1)
    op = IcebergWapWriteOperator(task_id="w", table=T, sql="INSERT ...")
    tbl = orders.load_table(T)
    head = orders.refs(tbl)["b"].snapshot_id
    # a base that is not an ancestor of the branch head (a snapshot only on another branch)
    orders.set_ref(tbl, "side", other)
    side_head = commit_to_branch(orders, T, "side", 400, 1)
    before = orders.metadata_location(T)
    tbl = orders.load_table(T)
    with pytest.raises(IcebergRefusedError, match="does not descend from the base"):
        op._reset_to_base(tbl, "b", orders.refs(tbl)["b"], side_head)
    assert orders.metadata_location(T) == before and orders.ref_snapshot_id(T, "b") == head


# ------------------------------------------------------------------ audit (no Spark)
def test_audit_spec_errors_happen_before_any_spark_job(orders):
    with pytest.raises(IcebergValidationError, match="unknown column check 'nul_check'"):
        IcebergWapAuditOperator(task_id="a", table=T, column_mapping={"amount": {"nul_check": {"equal_to": 0}}})
    templated = IcebergWapAuditOperator(
        task_id="a",
        table=T,
        branch="b",
        column_mapping={"amount": {"min": {"geq_to": "{{ params.floor }}"}}},
        spark_conn_id="no_such_spark",  # reaching Spark would fail differently
    )
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    before = orders.metadata_location(T)
    templated.column_mapping = {"amount": {"min": {"geq_to": "zero"}}}  # as rendered
    with pytest.raises(IcebergValidationError, match="is not a number"):
        templated.execute(fake_context())
    assert orders.metadata_location(T) == before
    with pytest.raises(IcebergRefNotFoundError, match="no branch 'nope'"):
        IcebergWapAuditOperator(task_id="a", table=T, branch="nope", change_checks={"added_rows": {"min": 1}}).execute(
            fake_context()
        )


def test_audit_templates_render(orders):
    op = IcebergWapAuditOperator(
        task_id="a",
        table="{{ params.t }}",
        branch="wap_{{ ds_nodash }}",
        column_mapping={"amount": {"min": {"geq_to": "{{ params.floor }}"}}},
        partition_clause="order_ts >= '{{ ds }}'",
        params={"t": T, "floor": 0},
    )
    ctx = {**fake_context(), "params": {"t": T, "floor": 0}}
    op.render_template_fields(ctx)
    assert op.table == T and op.branch == "wap_20260101" and op.partition_clause == "order_ts >= '2026-01-01'"
    assert op.parse_checks()[0].condition == {"geq_to": 0.0}


# ------------------------------------------------------------------ publish (no Spark)
def _audited_branch(hook, branch="b", start=100):
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch=branch).execute(fake_context())
    head = commit_to_branch(hook, T, branch, start, 5)
    return head, record_audit(hook, T, branch, head, event_id=f"ev-{branch}")


def test_publish_fast_forwards_emits_asset_event_and_retry_is_noop(orders):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    base = main_of(orders)
    head, audit = _audited_branch(orders)
    asset = iceberg_asset(T)
    op = IcebergWapPublishOperator(
        task_id="p", table=T, branch="b", audited_snapshot_id=str(head), tag="daily-1", outlets=[asset], audit=audit
    )
    events = OutletEventAccessors()
    out = op.execute({**fake_context(), "outlet_events": events})
    assert out["method"] == "fast_forward" and out["published_snapshot_id"] == str(head)
    assert out["previous_main_snapshot_id"] == str(base) and out["added_records"] == 5
    assert main_of(orders) == head and orders.refs(T)["daily-1"].snapshot_id == head
    assert events[asset].extra["snapshot_id"] == str(head) and events[asset].extra["table"] == T
    ledger = [r for r in orders.governance.read("ledger", operation="wap_publish") if r["status"] == "succeeded"]
    assert len(ledger) == 1 and ledger[0]["snapshot_after"] == head
    assert json.loads(ledger[0]["details"])["audit_event_id"] == "ev-b"  # the row names the audit it took
    # a retried publish is a no-op, still emits the event, and writes no second ledger row
    before = orders.metadata_location(T)
    events = OutletEventAccessors()
    again = op.execute({**fake_context(), "outlet_events": events})
    assert again["method"] == "noop" and again["published_snapshot_id"] == str(head)
    assert events[asset].extra["snapshot_id"] == str(head)
    assert orders.metadata_location(T) == before
    assert len(orders.governance.read("ledger", operation="wap_publish")) == 1


def test_publish_can_drop_the_branch_and_retry_stays_noop(orders):
    head, audit = _audited_branch(orders)
    op = IcebergWapPublishOperator(
        task_id="p", table=T, branch="b", audited_snapshot_id=head, drop_branch=True, audit=audit
    )
    assert op.execute(fake_context())["branch_dropped"] is True
    assert "b" not in orders.refs(T)
    assert op.execute(fake_context())["method"] == "noop"


def test_publish_refuses_a_branch_that_moved_after_its_audit(orders):
    head, audit = _audited_branch(orders)
    commit_to_branch(orders, T, "b", 500, 1)  # unaudited commit after the audit
    before, main = orders.metadata_location(T), main_of(orders)
    with pytest.raises(IcebergRefusedError, match="moved after its audit"):
        IcebergWapPublishOperator(task_id="p", table=T, branch="b", audit=audit).execute(fake_context())
    assert orders.metadata_location(T) == before and main_of(orders) == main


def test_publish_refuses_unaudited_and_failed_audits(orders):
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    head = commit_to_branch(orders, T, "b", 100, 5)
    before, main = orders.metadata_location(T), main_of(orders)
    op = IcebergWapPublishOperator(task_id="p", table=T, branch="b")  # no audit bound to it
    with pytest.raises(IcebergRefusedError, match="audit=None is not set, so no audit run is bound"):
        op.execute(fake_context())
    failed = record_audit(orders, T, "b", head, passed=False)
    op = IcebergWapPublishOperator(task_id="p", table=T, branch="b", audit=failed)
    with pytest.raises(IcebergRefusedError, match=r"failed checks \['amount.min'\]"):
        op.execute(fake_context())
    assert main_of(orders) == main and orders.metadata_location(T) == before
    passed = record_audit(orders, T, "b", head, passed=True, event_id="later")  # a new audit passed
    op = IcebergWapPublishOperator(task_id="p", table=T, branch="b", audit=passed)
    assert op.execute(fake_context())["published_snapshot_id"] == str(head)
    assert before != orders.metadata_location(T)


def test_concurrent_publish_exactly_one_fast_forwards(orders):
    head_a, audit_a = _audited_branch(orders, "a", 100)
    head_b, audit_b = _audited_branch(orders, "b", 200)
    pub_a = IcebergWapPublishOperator(task_id="pa", table=T, branch="a", audit=audit_a)
    pub_b = IcebergWapPublishOperator(task_id="pb", table=T, branch="b", audit=audit_b)
    # both load the table before either commits: the loser's compare-and-swap fails
    stale = orders.load_table(T)
    assert pub_a.execute(fake_context())["method"] == "fast_forward"
    with pytest.raises(IcebergCommitConflictError):
        orders.fast_forward(stale, to_snapshot_id=head_b, expected_snapshot_id=stale.current_snapshot().snapshot_id)
    # the operator (reloading) sees main moved and fails with the conflict error, changing nothing
    before = orders.metadata_location(T)
    with pytest.raises(IcebergPublishConflictError, match="main moved since the branch was cut"):
        pub_b.execute(fake_context())
    assert main_of(orders) == head_a and orders.metadata_location(T) == before
    assert orders.ref_snapshot_id(T, "b") == head_b  # branch kept


def test_publish_validation(orders):
    with pytest.raises(IcebergValidationError, match="on_conflict='merge'"):
        IcebergWapPublishOperator(task_id="p", table=T, on_conflict="merge")
    with pytest.raises(IcebergRefNotFoundError):
        IcebergWapPublishOperator(task_id="p", table=T, branch="nope").execute(fake_context())


# ------------------------------------------------------------------ task group factory
def test_task_group_wires_the_four_steps_with_templates_and_asset():
    from airflow.sdk import DAG

    from airflow_iceberg_provider.task_groups import wap_task_group

    with DAG("wap_factory", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        group = wap_task_group(
            group_id="orders_wap",
            table="wap.orders",
            sql="INSERT INTO {table} SELECT * FROM staging WHERE ds = '{{ ds }}'",
            column_mapping={"amount": {"min": {"geq_to": 0}}},
            tag="daily-{{ ds_nodash }}",
        )
    ids = sorted(dag.task_dict)
    assert ids == ["orders_wap.audit", "orders_wap.create_branch", "orders_wap.publish", "orders_wap.write"]
    publish = dag.task_dict["orders_wap.publish"]
    assert [a.uri for a in publish.outlets] == ["iceberg://lakehouse/wap/orders"]
    assert publish.upstream_task_ids == {"orders_wap.audit"}
    assert dag.task_dict["orders_wap.audit"].upstream_task_ids == {"orders_wap.write"}
    assert "orders_wap.audit" in publish.audited_snapshot_id and "snapshot_id" in publish.audited_snapshot_id
    # the publish is bound to this audit's result and requires the audit's own checks
    assert publish.audit.operator is dag.task_dict["orders_wap.audit"]
    assert publish.required_checks == {"column_mapping": {"amount": {"min": {"geq_to": 0}}}, "accept_none": True}
    assert group.group_id == "orders_wap"
    with pytest.raises(IcebergValidationError):
        with DAG("bad", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
            wap_task_group(table="wap.orders", sql="x", column_mapping={"amount": {"avg": {"geq_to": 0}}})


def test_cherrypick_refuses_non_append_snapshots_before_any_spark_job(orders):
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    commit_to_branch(orders, T, "b", 100, 3)
    orders.load_table(T).delete("order_id = 100", branch="b")  # a non-append change on the branch
    head = orders.ref_snapshot_id(T, "b")
    audit = record_audit(orders, T, "b", head)
    orders.load_table(T).append(orders_batch(900, 1))  # main moves on
    before, main = orders.metadata_location(T), main_of(orders)
    op = IcebergWapPublishOperator(
        task_id="p", table=T, branch="b", audit=audit, on_conflict="cherrypick", spark_conn_id="nope"
    )
    with pytest.raises(IcebergPublishConflictError, match="non-append snapshots"):
        op.execute(fake_context())
    assert orders.metadata_location(T) == before and main_of(orders) == main


def test_two_publishes_racing_in_threads_exactly_one_wins(orders):
    import threading

    from airflow_iceberg_provider.exceptions import IcebergCommitConflictError as CAS

    heads = {name: _audited_branch(orders, name, start) for name, start in (("r1", 100), ("r2", 200))}
    barrier = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def publish(name: str) -> None:
        head, audit = heads[name]
        op = IcebergWapPublishOperator(task_id=f"p_{name}", table=T, branch=name, audited_snapshot_id=head, audit=audit)
        barrier.wait()
        try:
            outcomes[name] = op.execute(fake_context())["method"]
        except (IcebergPublishConflictError, CAS) as err:  # lost before loading / lost the compare-and-swap
            outcomes[name] = type(err).__name__

    threads = [threading.Thread(target=publish, args=(n,)) for n in heads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [n for n, o in outcomes.items() if o == "fast_forward"]
    assert len(winners) == 1, outcomes
    assert main_of(orders) == heads[winners[0]][0]


def test_wap_write_conf_sets_the_branch_and_keeps_user_excluded_rules():
    from airflow_iceberg_provider.operators._wap_common import METADATA_DELETE_RULE, wap_write_conf

    conf = wap_write_conf("b1", {"spark.sql.optimizer.excludedRules": "a.B, c.D"})
    assert conf == {"spark.wap.branch": "b1", "spark.sql.optimizer.excludedRules": f"a.B,c.D,{METADATA_DELETE_RULE}"}
    assert "spark.wap.id" not in wap_write_conf("b1")


# ------------------------------------------------------------ incremental audit eligibility
def _record_base_values(hook, snapshot_id, checks):
    from datetime import UTC, datetime

    rows = [
        {
            "event_id": "earlier-audit",
            "table_name": T,
            "ref": "wap_earlier",
            "snapshot_id": snapshot_id,
            "check_name": c.name,
            "check_type": c.check_type,
            "column_name": c.column,
            "observed_value": 1.0,
            "condition": c.describe(),
            "passed": True,
            "evaluated_at": datetime.now(UTC),
        }
        for c in checks
    ]
    hook.governance.append("audit_results", rows)


AUDIT_SPEC = {
    "column_mapping": {"amount": {"min": {"geq_to": 0}}, "order_id": {"unique_check": {"equal_to": 0}}},
    "table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
    "change_checks": {"added_rows": {"min": 1}},
}


def test_incremental_audit_reuses_base_values_only_after_appends(orders):
    hook = orders
    base = main_of(hook)
    audit = IcebergWapAuditOperator(task_id="audit", table=T, branch="wap_x", incremental_min_rows=10, **AUDIT_SPEC)
    checks = audit.parse_checks()
    _record_base_values(hook, base, checks)
    hook.create_branch(T, "wap_x", snapshot_id=base)
    commit_to_branch(hook, T, "wap_x", 100, 5)
    head = commit_to_branch(hook, T, "wap_x", 105, 5)
    tbl = hook.load_table(T)
    appends = branch_snapshots(hook, tbl, head, base)
    assert [s.operation for s in appends] == ["append", "append"]
    values = audit._reusable_base_values(checks, T, base, appends)
    assert values == {"amount.min": 1.0, "order_id.unique_check": 1.0, "table.has_rows": 1.0}

    # nothing to reuse: incremental off, no base, or a recorded definition that differs
    assert (
        IcebergWapAuditOperator(task_id="a", table=T, incremental=False, **AUDIT_SPEC)._reusable_base_values(
            checks, T, base, appends
        )
        == {}
    )
    assert audit._reusable_base_values(checks, T, None, appends) == {}
    small = IcebergWapAuditOperator(task_id="s", table=T, incremental_min_rows=11, **AUDIT_SPEC)
    assert small._reusable_base_values(checks, T, base, appends) == {}  # 10 base rows: one pass is cheaper
    other = IcebergWapAuditOperator(
        task_id="b", table=T, column_mapping={"amount": {"min": {"geq_to": 5}}}
    ).parse_checks()
    assert audit._reusable_base_values(other, T, base, appends) == {}

    # a delete on the branch: rows left, so the audit must read the whole snapshot
    hook.load_table(T).delete("order_id = 101", branch="wap_x")
    tbl = hook.load_table(T)
    changed = branch_snapshots(hook, tbl, hook.ref_snapshot_id(T, "wap_x"), base)
    assert changed[-1].operation != "append"
    assert audit._reusable_base_values(checks, T, base, changed) == {}


def test_the_audit_job_learns_the_snapshots_size_and_the_schema_it_was_written_with(orders):
    """The audited snapshot's ``total-records`` and schema travel in the spec (no metadata read in the job)."""
    from pyiceberg.types import StringType

    from airflow_iceberg_provider.spark_jobs.audit.files import schema_fields

    first = main_of(orders)
    with orders.load_table(T).update_schema() as update:
        update.add_column("note", StringType())
    orders.load_table(T).append(orders_batch(10, 5).append_column("note", pa.array(["n"] * 5, pa.string())))
    tbl = orders.load_table(T)
    old_records, old_schema = snapshot_shape(tbl, orders.snapshot(tbl, snapshot_id=first))
    new_records, new_schema = snapshot_shape(tbl, orders.snapshot(tbl, snapshot_id=main_of(orders)))
    assert (old_records, new_records) == (10, 15)
    assert "note" not in schema_fields(old_schema) and schema_fields(new_schema)["note"].type == "string"
    assert schema_fields(old_schema)["order_id"].type == "long"


@pytest.mark.parametrize(
    ("value", "problem"), [(-1, "is negative"), ("1000", "is not an integer"), (True, "not an integer")]
)
def test_incremental_min_rows_is_validated(value, problem):
    with pytest.raises(IcebergValidationError, match=f"incremental_min_rows=.*{problem}"):
        IcebergWapAuditOperator(task_id="a", table=T, incremental_min_rows=value, **AUDIT_SPEC)


@pytest.mark.parametrize("value", ["yes", 0, None])
def test_driver_read_must_be_a_boolean(value):
    with pytest.raises(IcebergValidationError, match=r"driver_read=.* is not .*; pass True or False"):
        IcebergWapAuditOperator(task_id="a", table=T, driver_read=value, **AUDIT_SPEC)
