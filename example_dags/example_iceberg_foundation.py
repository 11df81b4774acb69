"""Foundation example: create a partitioned format-v2 table, append a batch with a
PySpark job submitted through the provider, verify the commit through the catalog, then
evolve the table (a new column, a sort order, a bloom filter) in one metadata-only commit.

Runs on the embedded default (local Spark, SQLite catalog, local warehouse):
``make demo`` executes it with ``airflow dags test``.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.operators.table_changes import IcebergAlterTableOperator

JOBS = Path(__file__).resolve().parent / "jobs"
ORDERS_COLUMNS = {
    "order_id": "long",
    "customer_id": "string",
    "region": "string",
    "amount": "double",
    "order_ts": "timestamptz",
}

with DAG(
    dag_id="iceberg_foundation",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example"],
    doc_md=__doc__,
) as dag:
    # [START howto_create_and_append]
    create = IcebergCreateTableOperator(
        task_id="create_orders",
        table="demo.orders",
        columns=ORDERS_COLUMNS,
        partition_by=["day(order_ts)"],
        properties={"format-version": "2"},
    )
    append = IcebergSparkSubmitOperator(
        task_id="append_batch",
        table="demo.orders",
        application=str(JOBS / "append_orders.py"),
        params_for_job={"rows": 1000, "ds": "{{ ds }}", "seed": 0},
        expected_operations=["append"],
    )
    create >> append
    # [END howto_create_and_append]
    # [START howto_alter_table]
    evolve = IcebergAlterTableOperator(
        task_id="evolve_orders",
        table="demo.orders",
        add_columns={"discount": "decimal(12,2)"},  # optional top-level column
        sort_order="customer_id, order_ts DESC",  # what sort compaction uses
        bloom_filter_columns=["customer_id"],  # write.parquet.bloom-filter-enabled.column.<col>
        metrics_modes={"customer_id": "truncate(16)"},  # write.metadata.metrics.column.<col>
    )
    # [END howto_alter_table]
    append >> evolve

#: How ``scripts/demo.py`` runs this DAG: one run per entry, with its expected outcome.
DEMO = {"order": 10, "runs": [{"expect": "success"}], "tables": ["demo.orders"]}
