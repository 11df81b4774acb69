"""IcebergAlterTableOperator and the create-table comparison on real SQLite catalogs (no JVM).

Every change is applied once and is a no-op on re-run (metadata location unchanged);
every refusal leaves the metadata location unchanged and records a ``refused`` ledger row.
"""

from __future__ import annotations

import decimal
from datetime import UTC, datetime

import pyarrow as pa
import pytest

from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.operators.table_changes import IcebergAlterTableOperator
from tests.support.lake import ORDERS_COLUMNS, create_orders_table, fake_context

COLUMNS = {"id": "int", "qty": "float", "price": "decimal(10,2)", "sku": "string", "ts": "timestamptz"}


def rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int32()),
            "qty": pa.array([float(i) + 0.5 for i in range(n)], pa.float32()),
            "price": pa.array([decimal.Decimal(f"{i}.25") for i in range(n)], pa.decimal128(10, 2)),
            "sku": pa.array([f"s{i % 3}" for i in range(n)], pa.string()),
            "ts": pa.array([datetime(2026, 1, 1 + i % 3, tzinfo=UTC) for i in range(n)], pa.timestamp("us", "UTC")),
        }
    )


@pytest.fixture
def items(lake, context):
    """db.items: day(ts)-partitioned, one append, ``write.metadata.metrics.column.sku=counts``."""
    IcebergCreateTableOperator(
        task_id="c",
        table="db.items",
        columns=COLUMNS,
        partition_by=["day(ts)"],
        properties={"write.metadata.metrics.column.sku": "counts"},
    ).execute(context)
    lake.load_table("db.items").append(rows(0, 6))
    return lake


def alter(**kwargs):
    return IcebergAlterTableOperator(task_id="alter", table="db.items", **kwargs)


def ledger(hook, status=None):
    out = [r for r in hook.governance.read("ledger", table_name="db.items") if r["operation"] == "alter_table"]
    return [r for r in out if status is None or r["status"] == status]


SINGLE_CHANGES = {
    "add": (
        {"add_columns": {"note": "string"}},
        lambda t: t.schema().find_field("note").field_type.__str__() == "string",
    ),
    "rename": (
        {"rename_columns": {"sku": "item"}},
        lambda t: "item" in t.schema().column_names and "sku" not in t.schema().column_names,
    ),
    "int_to_long": ({"widen_columns": {"id": "long"}}, lambda t: str(t.schema().find_field("id").field_type) == "long"),
    "float_to_double": (
        {"widen_columns": {"qty": "double"}},
        lambda t: str(t.schema().find_field("qty").field_type) == "double",
    ),
    "decimal_precision": (
        {"widen_columns": {"price": "decimal(16,2)"}},
        lambda t: str(t.schema().find_field("price").field_type) == "decimal(16, 2)",
    ),
    "add_partition_spark_spelling": (
        {"add_partition_fields": ["bucket(4, id)"]},
        lambda t: [str(f.transform) for f in t.spec().fields] == ["day", "bucket[4]"],
    ),
    "add_partition_provider_spelling": (
        {"add_partition_fields": ["truncate[2](sku)"]},
        lambda t: "truncate[2]" in [str(f.transform) for f in t.spec().fields],
    ),
    "drop_partition": ({"drop_partition_fields": ["days(ts)"]}, lambda t: t.spec().fields == ()),
    "partition_by": (
        {"partition_by": ["hours(ts)"]},
        lambda t: [str(f.transform) for f in t.spec().fields] == ["hour"],
    ),
    "sort_order": (
        {"sort_order": "WRITE ORDERED BY days(ts), sku DESC"},
        lambda t: len(t.sort_order().fields) == 2 and t.sort_order().fields[1].direction.value == "desc",
    ),
    "bloom_filter": (
        {"bloom_filter_columns": ["sku"]},
        lambda t: t.properties["write.parquet.bloom-filter-enabled.column.sku"] == "true",
    ),
    "metrics_mode": (
        {"metrics_modes": {"sku": "truncate(8)"}},
        lambda t: t.properties["write.metadata.metrics.column.sku"] == "truncate(8)",
    ),
    "property": (
        {"properties": {"write.target-file-size-bytes": "1048576"}},
        lambda t: t.properties["write.target-file-size-bytes"] == "1048576",
    ),
}


@pytest.mark.parametrize("name", list(SINGLE_CHANGES))
def test_each_change_is_applied_once_and_is_a_noop_on_rerun(items, context, name):
    kwargs, check = SINGLE_CHANGES[name]
    before = items.metadata_location("db.items")
    first = alter(**kwargs).execute(context)
    assert first["outcome"] == "changed" and first["changes"]
    tbl = items.load_table("db.items")
    assert check(tbl), name
    assert tbl.metadata.format_version == 2
    assert items.metadata_location("db.items") != before
    assert len(tbl.scan().to_arrow()) == 6  # old files still read
    after = items.metadata_location("db.items")
    again = alter(**kwargs).execute(context)
    assert again == {"table": "db.items", "outcome": "noop", "changes": []}
    assert items.metadata_location("db.items") == after
    assert sorted(r["status"] for r in ledger(items)) == ["noop", "succeeded"]


def test_everything_at_once_is_one_commit_and_data_stays_readable(items, context):
    tbl0 = items.load_table("db.items")
    history = len(tbl0.metadata.metadata_log)
    out = alter(
        rename_columns={"sku": "item"},
        add_columns={"note": "string"},
        widen_columns={"id": "long", "qty": "double", "price": "decimal(14,2)"},
        add_partition_fields=["bucket(4, id)"],
        sort_order="days(ts), item DESC NULLS LAST",
        bloom_filter_columns=["item"],
        metrics_modes={"note": "none"},
    ).execute(context)
    tbl = items.load_table("db.items")
    assert len(tbl.metadata.metadata_log) == history + 1  # one commit for all of it
    assert [c["kind"] for c in out["changes"]].count("widen_column") == 3
    assert [(f.name, str(f.field_type)) for f in tbl.schema().fields] == [
        ("id", "long"),
        ("qty", "double"),
        ("price", "decimal(14, 2)"),
        ("item", "string"),
        ("ts", "timestamptz"),
        ("note", "string"),
    ]
    assert tbl.properties["write.metadata.metrics.column.item"] == "counts"  # followed the rename
    assert "write.metadata.metrics.column.sku" not in tbl.properties
    assert tbl.properties["write.metadata.metrics.column.note"] == "none"
    assert tbl.properties["write.parquet.bloom-filter-enabled.column.item"] == "true"
    data = tbl.scan().to_arrow()
    assert data.num_rows == 6 and data.schema.field("id").type == pa.int64()
    assert sorted(data["id"].to_pylist()) == list(range(6)) and set(data["item"].to_pylist()) == {"s0", "s1", "s2"}
    # new writes land in the evolved spec
    new = rows(100, 4).rename_columns(["id", "qty", "price", "item", "ts"])
    new = new.cast(tbl.schema().as_arrow().remove(5))  # without 'note'
    tbl.append(new)
    tbl = items.load_table("db.items")
    assert tbl.scan().to_arrow().num_rows == 10
    assert {t.file.spec_id for t in tbl.scan().plan_files()} == {0, tbl.spec().spec_id}
    row = ledger(items, "succeeded")[0]
    assert '"rename_column"' in row["details"] and row["task_id"] == "t"


REFUSALS = {
    "narrowing": (
        {"widen_columns": {"qty": "double"}},
        {"widen_columns": {"qty": "float"}},
        r"widen_columns\['qty'\]='float' refused: 'qty' is double and it is a narrowing",
    ),
    "incompatible": (
        {},
        {"widen_columns": {"sku": "long"}},
        r"widen_columns\['sku'\]='long' refused: .*not a safe promotion",
    ),
    "decimal_scale": ({}, {"widen_columns": {"price": "decimal(12,4)"}}, r"decimal scale"),
    "rename_onto_existing": ({}, {"rename_columns": {"sku": "id"}}, r"rename onto existing column 'id'"),
    "unknown_column": (
        {},
        {"widen_columns": {"nope": "long"}},
        r"widen_columns\['nope'\] names column 'nope', which db\.items does not have",
    ),
    "transform_for_type": (
        {},
        {"add_partition_fields": ["days(sku)"]},
        r"transform day does not apply to 'sku' \(string\)",
    ),
    "unknown_sort_column": ({}, {"sort_order": "nope"}, r"sort_order\[0\] names column 'nope'"),
    "unknown_bloom_column": (
        {},
        {"bloom_filter_columns": ["nope"]},
        r"bloom_filter_columns\['nope'\] names column 'nope'",
    ),
    "add_existing_other_type": (
        {},
        {"add_columns": {"id": "string"}},
        r"already has 'id' as int; to widen it use widen_columns",
    ),
    "atomic_mix": (
        {},
        {"add_columns": {"note": "string"}, "widen_columns": {"id": "string"}},
        r"widen_columns\['id'\]",
    ),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_unsafe_changes_are_refused_and_leave_metadata_unchanged(items, context, name):
    setup, kwargs, message = REFUSALS[name]
    if setup:
        alter(**setup).execute(context)
    location = items.metadata_location("db.items")
    with pytest.raises(IcebergRefusedError, match=message):
        alter(**kwargs).execute(context)
    assert items.metadata_location("db.items") == location
    assert "note" not in items.load_table("db.items").schema().column_names  # nothing of a mixed request applied
    refused = ledger(items, "refused")
    assert len(refused) == 1 and "Nothing was changed" in refused[0]["details"]


def test_a_change_pyiceberg_refuses_is_refused_cleanly(lake, context):
    IcebergCreateTableOperator(
        task_id="c", table="db.plain", columns={"ts": "timestamptz", "ts_day": "string"}
    ).execute(context)
    location = lake.metadata_location("db.plain")
    op = IcebergAlterTableOperator(task_id="a", table="db.plain", add_partition_fields=["days(ts)"])
    with pytest.raises(IcebergRefusedError, match=r"pyiceberg refused .*name that exists in schema: ts_day"):
        op.execute(context)  # pyiceberg would name the field ts_day, which is a column
    assert lake.metadata_location("db.plain") == location


@pytest.mark.parametrize(
    ("attr", "value", "message"),
    [
        (
            "add_partition_fields",
            ["explode(id)"],
            r"add_partition_fields\[0\]='explode\(id\)' is not a partition transform",
        ),
        ("metrics_modes", {"sku": "most"}, r"metrics_modes\['sku'\]='most' is not a metrics mode"),
        ("sort_order", "id SIDEWAYS", r"sort_order\[0\]='id SIDEWAYS' is not a sort term"),
    ],
)
def test_bad_rendered_values_fail_in_execute_and_change_nothing(items, context, attr, value, message):
    with pytest.raises(IcebergValidationError, match=message):  # static values fail at parse time...
        alter(**{attr: value})
    op = alter(**{attr: "{{ params.x }}"})  # ...templated ones when rendered
    setattr(op, attr, value)
    location = items.metadata_location("db.items")
    with pytest.raises(IcebergValidationError, match=message):
        op.execute(context)
    assert items.metadata_location("db.items") == location


def test_templated_arguments_render(items):
    op = alter(add_columns={"note": "{{ params.type }}"}, sort_order="{{ params.order }}", params={})
    ctx = {**fake_context(), "params": {"type": "string", "order": "id DESC"}}
    op.render_template_fields(ctx)
    assert op.add_columns == {"note": "string"} and op.sort_order == "id DESC"
    assert op.execute(ctx)["outcome"] == "changed"


def test_sort_order_can_be_cleared(items, context):
    alter(sort_order=["id"]).execute(context)
    assert items.load_table("db.items").sort_order().order_id == 1
    assert alter(sort_order=[]).execute(context)["changes"][0]["after"] == "unsorted"
    assert items.load_table("db.items").sort_order().is_unsorted
    assert alter(sort_order="id ASC NULLS FIRST").execute(context)["outcome"] == "changed"
    assert items.load_table("db.items").sort_order().order_id == 1  # the old order is reused


# ------------------------------------------------------------- create-table comparison
def create(**kwargs):
    return IcebergCreateTableOperator(task_id="c", table="db.orders", columns=ORDERS_COLUMNS, **kwargs)


def test_create_existing_same_spec_in_spark_spelling_is_a_noop(lake, context):
    create(partition_by=["day(order_ts)"], properties={"owner": "a"}).execute(context)
    location = lake.metadata_location("db.orders")
    out = create(partition_by=["days(order_ts)"], properties={"owner": "a"}).execute(context)
    assert out == {"table": "db.orders", "created": False}
    assert lake.metadata_location("db.orders") == location


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"partition_by": ["bucket(4, order_id)"]},
            r"remove_partition_field order_ts_day.*add_partition_field bucket\[4\]\(order_id\)",
        ),
        ({"partition_by": ["day(order_ts)"], "properties": {"owner": "b"}}, r"set_property owner: a -> b"),
        ({"partition_by": [], "properties": {"owner": "a"}}, r"remove_partition_field order_ts_day"),
    ],
)
def test_create_existing_with_other_spec_or_properties_is_refused_unchanged(lake, context, kwargs, message):
    create_orders_table(lake, properties={"owner": "a"})
    location = lake.metadata_location("db.orders")
    with pytest.raises(
        IcebergRefusedError, match=rf"db\.orders already exists but differs.*{message}.*on_mismatch='update'"
    ):
        create(**kwargs).execute(context)
    assert lake.metadata_location("db.orders") == location


def test_create_existing_with_update_applies_then_is_a_noop(lake, context):
    create_orders_table(lake, properties={"owner": "a"})
    op = create(
        partition_by=["day(order_ts)", "bucket(8, customer_id)"], properties={"owner": "b"}, on_mismatch="update"
    )
    out = op.execute(context)
    assert out["created"] is False and len(out["changes"]) == 2
    tbl = lake.load_table("db.orders")
    assert [str(f.transform) for f in tbl.spec().fields] == ["day", "bucket[8]"] and tbl.properties["owner"] == "b"
    location = lake.metadata_location("db.orders")
    assert op.execute(context) == {"table": "db.orders", "created": False}
    assert lake.metadata_location("db.orders") == location
    rows_ = [r for r in lake.governance.read("ledger", table_name="db.orders") if r["operation"] == "alter_table"]
    assert len(rows_) == 1 and '"via": "create_table"' in rows_[0]["details"]


def test_create_refuses_other_format_version_and_bad_on_mismatch(lake, context):
    create_orders_table(lake)
    location = lake.metadata_location("db.orders")
    with pytest.raises(IcebergRefusedError, match="format-version 2, not 1"):
        create(partition_by=["day(order_ts)"], properties={"format-version": "1"}, on_mismatch="update").execute(
            context
        )
    assert lake.metadata_location("db.orders") == location
    with pytest.raises(
        IcebergValidationError,
        match=r"on_mismatch='replace' is not one of the accepted values; use one of \['fail', 'update'\]",
    ):
        create(on_mismatch="replace")


def test_concurrent_changes_replan_after_a_lost_commit(items):
    """Four operators add different columns at once: compare-and-swap losers re-plan and all land."""
    from concurrent.futures import ThreadPoolExecutor

    def run(i: int) -> dict:
        return alter(add_columns={f"c{i}": "string"}).execute(fake_context(task_id=f"t{i}"))

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(run, range(4)))
    assert [o["outcome"] for o in outs] == ["changed"] * 4
    assert {"c0", "c1", "c2", "c3"} <= set(items.load_table("db.items").schema().column_names)


def test_missing_table_is_named(lake, context):
    from airflow_iceberg_provider.exceptions import IcebergTableNotFoundError

    with pytest.raises(IcebergTableNotFoundError, match=r"Table db\.items does not exist"):
        alter(add_columns={"x": "string"}).execute(context)
