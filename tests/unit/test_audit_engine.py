"""Pure parts of the audit engine's driver read (no Spark): schemas, Parquet by field id, bounds."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_iceberg_provider.core import audit_checks as ck
from airflow_iceberg_provider.spark_jobs.arrow_sql import Unsupported
from airflow_iceberg_provider.spark_jobs.audit import sql as ac
from airflow_iceberg_provider.spark_jobs.audit.files import (
    Field,
    column_bounds,
    local_path,
    read_parquet_columns,
    schema_fields,
)

SCHEMA = {
    "type": "struct",
    "schema-id": 1,
    "fields": [
        {"id": 1, "name": "order_id", "required": True, "type": "long"},
        {"id": 2, "name": "Amount", "required": False, "type": "decimal(10, 2)"},
        {"id": 3, "name": "ts", "required": False, "type": "timestamptz"},
        {"id": 4, "name": "tags", "required": False, "type": {"type": "list", "element-id": 9, "element": "string"}},
        {"id": 5, "name": "qty", "required": False, "type": "long"},
        {"id": 6, "name": "Dup", "required": False, "type": "int"},
        {"id": 7, "name": "dup", "required": False, "type": "int"},
    ],
}


def test_schema_fields_by_lower_case_name_without_ambiguous_ones():
    fields = schema_fields(json.dumps(SCHEMA))
    assert fields["amount"] == Field("Amount", 2, "decimal(10, 2)")
    assert fields["tags"].type == "list"
    assert "dup" not in fields  # Spark would call `dup` ambiguous


def _write(path, columns: dict[str, tuple[list, pa.DataType, int | None]]):
    """A Parquet file like Iceberg writes: every column carries its field id (unless None)."""
    arrays, fields = [], []
    for name, (values, typ, fid) in columns.items():
        arrays.append(pa.array(values, typ))
        meta = {b"PARQUET:field_id": str(fid).encode()} if fid is not None else None
        fields.append(pa.field(name, typ, metadata=meta))
    pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), path)
    return f"file:{path}"


def test_parquet_columns_are_matched_by_field_id_and_promoted(tmp_path):
    fields = schema_fields(json.dumps(SCHEMA))
    old = _write(
        tmp_path / "old.parquet", {"qty_before_rename": ([1, None], pa.int32(), 5), "x": ([0, 0], pa.int8(), 99)}
    )
    new = _write(tmp_path / "new.parquet", {"qty": ([3], pa.int64(), 5)})
    columns = read_parquet_columns([old, new], {"qty": fields["qty"]}, 3)
    values, iceberg_type = columns["qty"]
    assert values.type == pa.int64() and values.to_pylist() == [1, None, 3] and iceberg_type == "long"


def test_a_file_without_the_field_or_a_row_count_mismatch_is_refused(tmp_path):
    fields = schema_fields(json.dumps(SCHEMA))
    no_id = _write(tmp_path / "a.parquet", {"qty": ([1], pa.int64(), None)})
    with pytest.raises(Unsupported, match=r"field ids \[5\] not in"):
        read_parquet_columns([no_id], {"qty": fields["qty"]}, 1)
    ok = _write(tmp_path / "b.parquet", {"qty": ([1], pa.int64(), 5)})
    with pytest.raises(Unsupported, match="1 rows in the files, 2 in the manifests"):
        read_parquet_columns([ok], {"qty": fields["qty"]}, 2)
    with pytest.raises(Unsupported, match="column type list"):
        read_parquet_columns([ok], {"tags": fields["tags"]}, 1)


@pytest.mark.parametrize(
    "location, path",
    [("file:/w/a.parquet", "/w/a.parquet"), ("file:///w/a%20b.parquet", "/w/a b.parquet"), ("/w/x", "/w/x")],
)
def test_local_locations(location, path):
    assert local_path(location) == path


@pytest.mark.parametrize("location", ["s3://bucket/a.parquet", "hdfs://nn/a.parquet", "file://otherhost/a"])
def test_remote_locations_are_left_to_spark(location):
    with pytest.raises(Unsupported):
        local_path(location)


def test_bounds_in_the_units_the_base_file_filter_and_sql_literals_take():
    ts = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    b = column_bounds(Field("ts", 3, "timestamptz"), pa.array([ts, None], pa.timestamp("us", tz="UTC")))
    assert (b.lo, b.hi, b.sql) == (int(ts.timestamp()) * 1_000_000,) * 2 + ("timestamp_micros({p})",)
    d = column_bounds(Field("d", 8, "date"), pa.array([dt.date(1970, 1, 3), dt.date(1969, 12, 31)], pa.date32()))
    assert (d.lo, d.hi) == (-1, 2)
    dec = column_bounds(
        Field("a", 2, "decimal(10, 2)"), pa.array([Decimal("1.50"), Decimal("-0.01")], pa.decimal128(10, 2))
    )
    assert (dec.jlo, dec.jhi, dec.field) == (Decimal("-0.01"), Decimal("1.50"), "a")
    assert column_bounds(Field("q", 5, "long"), pa.array([None, None], pa.int64())) is None  # nothing shared
    assert column_bounds(Field("x", 9, "double"), pa.array([1.0])) is False  # NaN: no exact bound


def test_driver_sums_of_wide_decimals_are_left_to_spark():
    (check,) = ck.parse_checks(table_checks={"total": {"check_statement": "SUM(a) > 0"}})
    projection = ac.driver_projection([check])
    narrow = pa.array([Decimal("99999999.99")] * 3, pa.decimal128(10, 2))
    assert ac.aggregate_columns(projection, [narrow]) == {check.name: 299999999.97}
    wide = pa.array([Decimal("1")] * 3, pa.decimal128(38, 0))
    with pytest.raises(ck.CheckSpecError, match="left to Spark"):
        ac.aggregate_columns(projection, [wide])
