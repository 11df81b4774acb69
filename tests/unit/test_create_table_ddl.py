"""IcebergCreateTableOperator takes Spark DDL's spelling of partition transforms (the schema module's one parser)."""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from tests.support.lake import ORDERS_COLUMNS, fake_context


def _spec(lake, table):
    return [(f.name, str(f.transform)) for f in lake.load_table(table).spec().fields]


def test_create_table_with_spark_ddl_transforms(lake):
    op = IcebergCreateTableOperator(
        task_id="c",
        table="db.ddl",
        columns=ORDERS_COLUMNS,
        partition_by=["days(order_ts)", "bucket(16, order_id)", "truncate(4, region)"],
    )
    assert op.execute(fake_context()) == {"table": "db.ddl", "created": True}
    assert _spec(lake, "db.ddl") == [
        ("order_ts_day", "day"),
        ("order_id_bucket", "bucket[16]"),
        ("region_truncate", "truncate[4]"),
    ]


def test_provider_and_spark_spellings_build_the_same_spec(lake):
    for table, spelling in (
        ("db.p", ["day(order_ts)", "bucket[16](order_id)"]),
        ("db.s", ["days(order_ts)", "bucket(16, order_id)"]),
    ):
        IcebergCreateTableOperator(task_id="c", table=table, columns=ORDERS_COLUMNS, partition_by=spelling).execute(
            fake_context()
        )
    assert _spec(lake, "db.p") == _spec(lake, "db.s")


@pytest.mark.parametrize(
    ("partition_by", "message"),
    [
        (["bucket(0, order_id)"], r"partition_by\[0\]='bucket\(0, order_id\)'"),
        (["days(amount)"], r"partition_by\[0\]='days\(amount\)': day does not apply to 'amount'"),
        (["bucket(16, nope)"], r"partition_by\[0\]='bucket\(16, nope\)': column 'nope' is not in columns"),
        (["hours(order_ts", "x"], r"partition_by\[0\]="),
    ],
)
def test_bad_ddl_transforms_are_refused_at_parse_time_by_name(partition_by, message):
    with pytest.raises(IcebergValidationError, match=message):
        IcebergCreateTableOperator(task_id="c", table="db.bad", columns=ORDERS_COLUMNS, partition_by=partition_by)
