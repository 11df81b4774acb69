"""One subject-column rule on both sides of the seam: the operator's pre-flight (a pyiceberg table's
schema) and the Spark job's (the same table's metadata JSON file, as the job reads it) give the
same answer for every column type, ``decimal`` included, because both call
``core.erasure_columns.subject_column_problems`` over Iceberg's type names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from airflow_iceberg_provider.core.erasure_columns import (
    SUBJECT_COLUMN_TYPES,
    iceberg_column_types,
    subject_column_problems,
)
from airflow_iceberg_provider.rules.erasure import erasure_table_facts, table_problems
from airflow_iceberg_provider.spark_jobs.erasure.run import subject_problems

COLUMNS = {
    "s": StringType(),
    "l": LongType(),
    "i": IntegerType(),
    "d": DecimalType(10, 2),
    "d0": DecimalType(18, 0),
    "u": UUIDType(),
    "f": FloatType(),
    "db": DoubleType(),
    "b": BooleanType(),
    "dt": DateType(),
    "t": TimeType(),
    "ts": TimestampType(),
    "tz": TimestamptzType(),
    "bin": BinaryType(),
    "fx": FixedType(16),
    "st": StructType(NestedField(100, "x", StringType(), required=False)),
    "ls": ListType(101, LongType(), element_required=False),
    "mp": MapType(102, StringType(), 103, StringType(), value_required=False),
}
ACCEPTED = {"s", "l", "i"}


@pytest.fixture
def every_type(lake: Any) -> tuple[Any, dict[str, Any]]:
    """A real table with a column of every type, and its current metadata JSON (read from the file)."""
    schema = Schema(
        *(NestedField(n, name, kind, required=False) for n, (name, kind) in enumerate(COLUMNS.items(), start=1))
    )
    tbl = lake.catalog.create_table("db.every_type", schema=schema)
    tbl = lake.load_table("db.every_type")
    with tbl.io.new_input(tbl.metadata_location).open() as fh:
        metadata = json.loads(fh.read())
    return tbl, metadata


def _operator_side(tbl: Any, column: str) -> list[str]:
    facts = erasure_table_facts(tbl, [])
    return [p for p in table_problems(table="db.every_type", columns=[column], **facts) if "subject column" in p]


@pytest.mark.parametrize("column", sorted(COLUMNS))
def test_operator_and_job_give_the_same_answer(every_type: tuple[Any, dict[str, Any]], column: str) -> None:
    tbl, metadata = every_type
    operator = _operator_side(tbl, column)
    job = subject_problems("db.every_type", [column], metadata)

    assert operator == job
    assert (operator == []) is (column in ACCEPTED)


def test_decimal_is_refused_on_both_sides_with_the_reason_and_the_fix(every_type: tuple[Any, dict[str, Any]]) -> None:
    tbl, metadata = every_type
    for column in ("d", "d0"):
        (operator,) = _operator_side(tbl, column)
        assert subject_problems("db.every_type", [column], metadata) == [operator]
        assert f"subject column {column!r} of db.every_type has type decimal(" in operator
        assert "only these casts are exact" in operator and "Erase by a string, long or int column" in operator


def test_missing_columns_are_named_the_same_on_both_sides(every_type: tuple[Any, dict[str, Any]]) -> None:
    tbl, metadata = every_type
    facts = erasure_table_facts(tbl, [])
    operator = table_problems(table="db.every_type", columns=["customer", "s"], **facts)
    job = subject_problems("db.every_type", ["customer", "s"], metadata)
    assert job == [p for p in operator if "subject column" in p]
    assert job[0].startswith("subject column(s) ['customer'] do not exist in db.every_type (columns: [")


def test_the_metadata_json_and_pyiceberg_spell_every_type_alike(every_type: tuple[Any, dict[str, Any]]) -> None:
    tbl, metadata = every_type
    (schema,) = [s for s in metadata["schemas"] if s["schema-id"] == metadata["current-schema-id"]]
    from_json = iceberg_column_types(schema)
    from_pyiceberg = erasure_table_facts(tbl, [])["schema_fields"]
    nested = {"st": "struct", "ls": "list", "mp": "map"}
    assert {c: nested.get(c, t) for c, t in from_pyiceberg.items()} == from_json


def test_the_allowlist_is_exactly_the_exact_casts() -> None:
    assert SUBJECT_COLUMN_TYPES == ("string", "long", "int")
    assert subject_column_problems("t", [], {"a": "decimal(10, 2)"}) == []
    assert subject_column_problems("t", ["a"], {"a": "long"}) == []
