"""The pure table-change planner: parsing, safe promotions, diffs and refusals (no catalog, milliseconds)."""

from __future__ import annotations

import pytest
from pyiceberg import transforms as tr
from pyiceberg import types as t
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder

from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.rules.table_evolution import (
    TransformSpec,
    build_request,
    metrics_mode_problem,
    parse_sort_order,
    parse_transform,
    parse_type,
    plan_changes,
    promotion_problem,
)

SCHEMA = Schema(
    t.NestedField(1, "id", t.IntegerType()),
    t.NestedField(2, "qty", t.FloatType()),
    t.NestedField(3, "price", t.DecimalType(10, 2)),
    t.NestedField(4, "sku", t.StringType()),
    t.NestedField(5, "ts", t.TimestamptzType()),
    t.NestedField(6, "total", t.LongType()),
)
SPEC = PartitionSpec(PartitionField(source_id=5, field_id=1000, transform=tr.DayTransform(), name="ts_day"))
UNSORTED = SortOrder(order_id=0)
PROPS = {"write.metadata.metrics.column.sku": "counts", "owner": "team-a"}


def plan(current_order=UNSORTED, *, current_props=PROPS, **request):
    """Plan ``request`` against SCHEMA / SPEC (day(ts)) / ``current_order`` / ``current_props``."""
    return plan_changes("db.t", SCHEMA, SPEC, current_order, current_props, build_request(**request))


def kinds(changes):
    return [(c.kind, c.target, c.before, c.after) for c in changes]


# ------------------------------------------------------------------ parsing
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("id", TransformSpec("identity", "id")),
        ("identity(id)", TransformSpec("identity", "id")),
        ("day(ts)", TransformSpec("day", "ts")),
        ("days(ts)", TransformSpec("day", "ts")),
        ("date(ts)", TransformSpec("day", "ts")),
        ("HOURS( ts )", TransformSpec("hour", "ts")),
        ("date_hour(ts)", TransformSpec("hour", "ts")),
        ("years(ts)", TransformSpec("year", "ts")),
        ("months(ts)", TransformSpec("month", "ts")),
        ("bucket[16](id)", TransformSpec("bucket", "id", 16)),
        ("bucket(16, id)", TransformSpec("bucket", "id", 16)),
        ("bucket(id, 16)", TransformSpec("bucket", "id", 16)),
        ("truncate[4](sku)", TransformSpec("truncate", "sku", 4)),
        ("truncate(4, sku)", TransformSpec("truncate", "sku", 4)),
        ("TRUNCATE(4,sku)", TransformSpec("truncate", "sku", 4)),
    ],
)
def test_both_transform_spellings_parse_to_the_same_spec(text, expected):
    assert parse_transform(text, "p") == expected


@pytest.mark.parametrize("text", ["explode(a)", "bucket(a, b)", "bucket[x](id)", "days()", "bucket(16)", "a b", "a;b"])
def test_bad_transforms_name_the_parameter_and_the_fix(text):
    with pytest.raises(
        IcebergValidationError, match=r"add_partition_fields\[0\]=.* is not a partition transform; use col"
    ):
        build_request(add_partition_fields=[text])


def test_zero_width_is_refused():
    with pytest.raises(IcebergValidationError, match=r"width must be at least 1"):
        parse_transform("bucket(0, id)", "add_partition_fields[0]")


def test_sort_order_parses_spark_ddl_with_iceberg_null_defaults():
    terms = parse_sort_order("WRITE ORDERED BY days(ts), bucket(16, id) DESC, sku ASC NULLS LAST")
    assert [x.text() for x in terms] == [
        "day(ts) ASC NULLS FIRST",
        "bucket[16](id) DESC NULLS LAST",
        "sku ASC NULLS LAST",
    ]
    assert parse_sort_order(["id desc nulls first"])[0].text() == "id DESC NULLS FIRST"
    assert parse_sort_order([]) == [] and parse_sort_order("unsorted") == []


@pytest.mark.parametrize("value", ["id SIDEWAYS", "explode(id)", "void(id)", "id, , ts"])
def test_bad_sort_terms_are_refused(value):
    with pytest.raises(IcebergValidationError, match=r"sort_order\[\d\]"):
        build_request(sort_order=value)


def test_types_and_promotions():
    assert parse_type("decimal(12, 2) not null", "p") == (t.DecimalType(12, 2), True)
    with pytest.raises(IcebergValidationError, match=r"widen_columns\['id'\]='varchar' is not a supported type"):
        build_request(widen_columns={"id": "varchar"})
    with pytest.raises(IcebergValidationError, match="is not a supported type"):
        parse_type("decimal(39,2)", "p")
    assert promotion_problem(t.IntegerType(), t.LongType()) is None
    assert promotion_problem(t.FloatType(), t.DoubleType()) is None
    assert promotion_problem(t.DecimalType(10, 2), t.DecimalType(14, 2)) is None
    assert "narrowing" in promotion_problem(t.LongType(), t.IntegerType())
    assert "narrowing" in promotion_problem(t.DoubleType(), t.FloatType())
    assert "narrows the decimal precision" in promotion_problem(t.DecimalType(12, 2), t.DecimalType(10, 2))
    assert "scale" in promotion_problem(t.DecimalType(10, 2), t.DecimalType(12, 4))
    assert "not a safe promotion" in promotion_problem(t.IntegerType(), t.DoubleType())
    assert "not a safe promotion" in promotion_problem(t.StringType(), t.LongType())


@pytest.mark.parametrize("mode", ["none", "counts", "full", "truncate(16)", "TRUNCATE(8)"])
def test_metrics_modes_accepted(mode):
    assert metrics_mode_problem(mode) is None


@pytest.mark.parametrize("mode", ["truncate(0)", "truncated(4)", "all", ""])
def test_bad_metrics_modes_refused(mode):
    with pytest.raises(IcebergValidationError, match=r"metrics_modes\['sku'\]=.*(metrics mode|truncate)"):
        build_request(metrics_modes={"sku": mode})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"add_columns": {"x": "string not null"}}, r"add_columns\['x'\].*required column.*drop 'not null'"),
        ({"add_columns": ["x"]}, r"add_columns=.* is not a mapping"),
        ({"rename_columns": {"a": "a"}}, r"renames a column onto itself"),
        ({"rename_columns": {"a": "c", "b": "c"}}, r"two columns to the same name"),
        ({"rename_columns": {"a": "b c"}}, r"rename_columns\['a'\]='b c' is not a valid name"),
        ({"partition_by": ["id"], "add_partition_fields": ["ts"]}, r"cannot be combined"),
        ({"add_partition_fields": ["void(id)"]}, r"use drop_partition_fields"),
        ({"add_partition_fields": "days(ts)"}, r"is not a list"),
        ({"bloom_filter_columns": {"sku": "yes"}}, r"bloom_filter_columns\['sku'\]='yes' is not a boolean"),
        ({"properties": {"write.parquet.bloom-filter-fpp.column.sku": "2"}}, r"is not a probability"),
        (
            {"properties": {"write.metadata.metrics.default": "most"}},
            r"properties\['write\.metadata\.metrics\.default'\]='most' is not a metrics mode",
        ),
        (
            {"properties": {"write.distribution-mode": "sorted"}},
            r"properties\['write\.distribution-mode'\]='sorted' is not a distribution mode",
        ),
    ],
)
def test_malformed_requests_are_refused_without_the_table(kwargs, message):
    with pytest.raises(IcebergValidationError, match=message):
        build_request(**kwargs)


# ------------------------------------------------------------------ plans
def test_full_plan_in_apply_order():
    changes = plan(
        rename_columns={"sku": "item"},
        add_columns={"note": "string"},
        widen_columns={"id": "long", "qty": "double", "price": "decimal(14,2)"},
        add_partition_fields=["bucket(4, id)"],
        drop_partition_fields=["days(ts)"],
        sort_order="days(ts), item DESC",
        bloom_filter_columns=["item"],
        metrics_modes={"note": "none"},
    )
    assert kinds(changes) == [
        ("rename_column", "sku", "sku", "item"),
        ("add_column", "note", None, "string"),
        ("widen_column", "id", "int", "long"),
        ("widen_column", "qty", "float", "double"),
        ("widen_column", "price", "decimal(10, 2)", "decimal(14, 2)"),
        ("remove_partition_field", "ts_day", "day(ts)", None),
        ("add_partition_field", "bucket[4](id)", None, "bucket[4](id)"),
        ("set_sort_order", "sort_order", "unsorted", "day(ts) ASC NULLS FIRST, item DESC NULLS LAST"),
        ("set_property", "write.parquet.bloom-filter-enabled.column.item", None, "true"),
        ("set_property", "write.metadata.metrics.column.note", None, "none"),
        ("set_property", "write.metadata.metrics.column.item", None, "counts"),  # follows the rename
        ("remove_property", "write.metadata.metrics.column.sku", "counts", None),
    ]
    assert changes[0].field_id == 4 and changes[2].field_id == 1


def test_requests_already_satisfied_plan_nothing():
    renamed = Schema(*[f if f.name != "sku" else t.NestedField(4, "item", t.StringType()) for f in SCHEMA.fields])
    assert plan_changes("db.t", renamed, SPEC, UNSORTED, {}, build_request(rename_columns={"sku": "item"})) == []
    sorted_ = SortOrder(
        SortField(
            source_id=1, transform=tr.BucketTransform(16), direction=SortDirection.DESC, null_order=NullOrder.NULLS_LAST
        ),
        order_id=1,
    )
    assert plan(sorted_, sort_order=["bucket[16](id) DESC"]) == []
    assert plan(add_columns={"sku": "string"}, widen_columns={"total": "long"}) == []
    assert plan(add_partition_fields=["day(ts)"], drop_partition_fields=["bucket(8, id)", "id"]) == []
    assert plan(partition_by=["days(ts)"]) == []
    assert plan(properties={"owner": "team-a"}, metrics_modes={"sku": "counts"}) == []
    assert plan(sort_order=[]) == []


def test_boolean_property_values_are_spelled_like_iceberg():
    assert build_request(properties={"write.wap.enabled": True}).properties == {"write.wap.enabled": "true"}


def test_partition_by_diffs_the_whole_spec_and_drop_by_field_name():
    assert kinds(plan(partition_by=["bucket(4, id)", "day(ts)"])) == [
        ("add_partition_field", "bucket[4](id)", None, "bucket[4](id)")
    ]
    assert kinds(plan(partition_by=[])) == [("remove_partition_field", "ts_day", "day(ts)", None)]
    assert kinds(plan(drop_partition_fields=["ts_day"])) == [("remove_partition_field", "ts_day", "day(ts)", None)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"widen_columns": {"total": "int"}},
            r"widen_columns\['total'\]='int' refused: 'total' is long and it is a narrowing",
        ),
        (
            {"widen_columns": {"sku": "long"}},
            r"widen_columns\['sku'\]='long' refused: .*not a safe promotion.*add a new column",
        ),
        ({"widen_columns": {"price": "decimal(8,2)"}}, r"narrows the decimal precision"),
        (
            {"widen_columns": {"nope": "long"}},
            r"widen_columns\['nope'\] names column 'nope', which db\.t does not have",
        ),
        ({"rename_columns": {"sku": "id"}}, r"rename_columns\['sku'\]='id' would rename onto existing column 'id'"),
        ({"rename_columns": {"nope": "x"}}, r"rename_columns\['nope'\] names column 'nope'"),
        ({"add_columns": {"sku": "long"}}, r"already has 'sku' as string; to widen it use widen_columns"),
        (
            {"add_partition_fields": ["days(sku)"]},
            r"add_partition_fields\[0\]='day\(sku\)': transform day does not apply to 'sku' \(string\)",
        ),
        ({"add_partition_fields": ["bucket(4, nope)"]}, r"names column 'nope'"),
        ({"drop_partition_fields": ["days(nope)"]}, r"drop_partition_fields\[0\] names column 'nope'"),
        ({"sort_order": "nope DESC"}, r"sort_order\[0\] names column 'nope'"),
        (
            {"metrics_modes": {"nope": "none"}},
            r"metrics_modes\['nope'\] names column 'nope'",
        ),
        ({"bloom_filter_columns": ["nope"]}, r"bloom_filter_columns\['nope'\] names column 'nope'"),
        ({"properties": {"format-version": "3"}}, r"format-version.*remove it"),
        ({"add_partition_fields": ["day(ts)"], "drop_partition_fields": ["ts_day"]}, r"also dropped"),
    ],
)
def test_unsafe_changes_are_refused_naming_parameter_problem_and_fix(kwargs, message):
    with pytest.raises((IcebergRefusedError, IcebergValidationError), match=message):
        plan(**kwargs)


def test_names_after_renames_and_adds_are_what_later_arguments_see():
    changes = plan(
        rename_columns={"sku": "item"}, add_columns={"region": "string"}, add_partition_fields=["item", "region"]
    )
    assert [c.target for c in changes if c.kind == "add_partition_field"] == ["item", "region"]
    with pytest.raises(IcebergRefusedError, match="names column 'sku'"):
        plan(rename_columns={"sku": "item"}, sort_order="sku")
    with pytest.raises(IcebergRefusedError, match="is added by this change; add it with type"):
        plan(add_columns={"n": "int"}, widen_columns={"n": "long"})


# ------------------------------------------------------------------ hostile inputs
def _hostile():
    from tests.support.hostile_inputs import COLUMNS, SQL_FRAGMENTS

    return [pytest.param(v, id=label) for label, v in [*COLUMNS, *SQL_FRAGMENTS]]


@pytest.mark.parametrize("value", _hostile())
@pytest.mark.parametrize(
    "argument",
    [
        lambda v: {"add_columns": {v: "string"}},
        lambda v: {"rename_columns": {"sku": v}},
        lambda v: {"widen_columns": {v: "long"}},
        lambda v: {"add_partition_fields": [f"days({v})"]},
        lambda v: {"add_partition_fields": [v]},
        lambda v: {"drop_partition_fields": [f"bucket(4, {v})"]},
        lambda v: {"sort_order": f"{v} DESC"},
        lambda v: {"metrics_modes": {v: "none"}},
        lambda v: {"metrics_modes": {"sku": v}},
        lambda v: {"bloom_filter_columns": [v]},
    ],
)
def test_hostile_values_are_refused_or_only_plain_names_get_through(argument, value):
    import re

    try:
        req = build_request(**argument(value))
    except IcebergValidationError:
        return
    names = [
        *req.add_columns,
        *req.rename_columns.values(),
        *req.widen_columns,
        *(tf.column for tf in req.add_partition_fields),
        *(s.transform.column for s in req.sort_order or ()),
        *(k.rsplit(".", 1)[-1] for k in req.properties),
    ]
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", n) for n in names), names
    assert all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", d.strip()) or "(" in d for d in req.drop_partition_fields)
