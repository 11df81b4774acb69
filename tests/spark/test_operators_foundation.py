"""Create-table and Spark-submit operators: happy paths and refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergConnectionError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from tests.support.lake import ORDERS_COLUMNS, create_orders_table, fake_context

JOBS = Path(__file__).parents[1] / "jobs"
APPEND = Path(__file__).parents[2] / "example_dags" / "jobs" / "append_orders.py"


def test_create_table_is_idempotent_and_partitioned(lake, context):
    op = IcebergCreateTableOperator(
        task_id="c", table="db.t", columns=ORDERS_COLUMNS, partition_by=["day(order_ts)", "bucket[4](order_id)"]
    )
    assert op.execute(context) == {"table": "db.t", "created": True}
    tbl = lake.load_table("db.t")
    assert [f.name for f in tbl.spec().fields] == ["order_ts_day", "order_id_bucket"]
    assert tbl.metadata.format_version == 2
    location = lake.metadata_location("db.t")
    assert op.execute(context) == {"table": "db.t", "created": False}
    assert lake.metadata_location("db.t") == location


def test_create_table_refuses_different_schema_and_changes_nothing(lake, context):
    IcebergCreateTableOperator(task_id="c", table="db.t", columns=ORDERS_COLUMNS).execute(context)
    location = lake.metadata_location("db.t")
    other = IcebergCreateTableOperator(task_id="c2", table="db.t", columns={"x": "string"})
    with pytest.raises(IcebergRefusedError, match="already exists with a different schema"):
        other.execute(context)
    assert lake.metadata_location("db.t") == location


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"columns": {"a": "varchar"}}, "is not a supported type"),
        ({"columns": {"a;b": "string"}}, "is not a valid name"),
        ({"columns": {}}, "non-empty mapping"),
        ({"columns": {"a": "string"}, "partition_by": ["day(b)"]}, "column 'b' is not in columns"),
        ({"columns": {"a": "string"}, "partition_by": ["explode(a)"]}, "is not a partition transform"),
        ({"columns": {"a": "string"}, "table": "no_namespace"}, "namespace.table"),
    ],
)
def test_create_table_bad_arguments_fail_at_parse_time(kwargs, message):
    kwargs = {"table": "db.t", **kwargs}
    with pytest.raises(IcebergValidationError, match=message):
        IcebergCreateTableOperator(task_id="c", **kwargs)


def test_create_table_templated_table_validated_at_execute(lake, context):
    op = IcebergCreateTableOperator(task_id="c", table="{{ params.t }}", columns={"a": "string"})
    op.table = "db.bad name"
    with pytest.raises(IcebergValidationError, match="table='db.bad name'"):
        op.execute(context)


def test_spark_submit_operator_template_fields():
    fields = set(IcebergSparkSubmitOperator.template_fields)
    assert {"table", "application", "ref", "params_for_job", "spark_conn_id", "iceberg_catalog_conn_id"} <= fields


def test_spark_submit_rejects_bad_arguments_before_submitting(lake, context):
    create_orders_table(lake)
    location = lake.metadata_location("db.orders")
    with pytest.raises(IcebergValidationError, match="expected_operations"):
        IcebergSparkSubmitOperator(task_id="s", table="db.orders", application=str(APPEND), expected_operations=["x"])
    op = IcebergSparkSubmitOperator(task_id="s", table="db.orders", application=str(APPEND), ref="bad ref")
    with pytest.raises(IcebergValidationError, match="ref='bad ref'"):
        op.execute(context)
    op = IcebergSparkSubmitOperator(
        task_id="s", table="db.orders", application=str(APPEND), params_for_job={"x": object()}
    )
    with pytest.raises(IcebergValidationError, match="not JSON-serialisable"):
        op.execute(context)
    op = IcebergSparkSubmitOperator(task_id="s", table="db.orders", application="/nope.py")
    with pytest.raises(IcebergConnectionError, match="does not exist"):
        op.execute(context)
    op = IcebergSparkSubmitOperator(
        task_id="s", table="db.orders", application=str(APPEND), spark_conn_id="missing_spark_conn"
    )
    with pytest.raises(IcebergConnectionError, match="Spark connection 'missing_spark_conn' does not exist"):
        op.execute(context)
    assert lake.metadata_location("db.orders") == location


@pytest.mark.spark
def test_job_that_exits_zero_without_commit_fails_the_task(lake, context):
    create_orders_table(lake)
    location = lake.metadata_location("db.orders")
    op = IcebergSparkSubmitOperator(task_id="s", table="db.orders", application=str(JOBS / "no_commit.py"))
    with pytest.raises(IcebergCommitVerificationError, match="did not advance"):
        op.execute(context)
    assert lake.metadata_location("db.orders") == location
    ledger = lake.governance.read("ledger", operation="spark_submit")
    assert len(ledger) == 1 and ledger[0]["status"] == "succeeded"  # the job's own row; the task still failed


def test_application_write_ledger_row_once_unless_the_job_wrote_its_own(lake):
    """``record_application_write``: one row per job run id; none when the job's runtime wrote one."""
    from datetime import UTC, datetime

    from airflow_iceberg_provider.hooks.spark import JobRun

    create_orders_table(lake, "db.orders")
    op = IcebergSparkSubmitOperator(task_id="s", table="db.orders", application=str(APPEND))
    run = JobRun("run-123", "app", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    kw = dict(operation="spark_submit", ref="main", before=None, after=42, metrics={"added_records": 3}, details={})
    assert op.record_application_write(fake_context(), run, **kw) is True
    assert op.record_application_write(fake_context(), run, **kw) is False  # a retry: no second row
    (row,) = lake.governance.read("ledger", event_id="run-123")
    assert (row["operation"], row["status"], row["snapshot_after"]) == ("spark_submit", "succeeded", 42)
    assert json.loads(row["details"])["application"] == str(APPEND)
