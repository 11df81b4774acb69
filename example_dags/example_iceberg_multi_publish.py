"""Two tables published together, a steward gate for warn-level findings, one downstream run per day.

``gates.orders_eu`` and ``gates.orders_us`` (partitioned by ``day(order_ts)``) each get a WAP branch,
one day of orders per table is written to it, and each branch is audited with one Spark job. The
audit of the US table has a warn-level check (``table.enough_rows``): when only such checks fail,
the audit succeeds and the ``steward`` gate waits for a data steward (Airflow's *Required actions*
or the REST API) to publish, drop the branch or keep it. When every check passes the gate asks
nothing.

``publish_together`` then moves both tables' ``main`` at once (one catalog transaction on a REST
catalog; on others a journal in the ledger plus a compare-and-swap per table, undone if a table
fails). Its asset events carry the days the publish touched, so ``iceberg_orders_per_day`` (on a
``PartitionedAssetTimetable`` of the EU table) runs once per day the publish touched.

Trigger with ``{"us_rows": 3}`` to make the warn-level check fail and see the gate wait.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pendulum
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, PartitionedAssetTimetable, task

from airflow_iceberg_provider.assets.uris import iceberg_asset
from airflow_iceberg_provider.operators.approval import IcebergWapApprovalOperator
from airflow_iceberg_provider.operators.multi_publish import IcebergWapMultiPublishOperator
from airflow_iceberg_provider.operators.refs import IcebergDropBranchOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator

EU, US = "gates.orders_eu", "gates.orders_us"
BRANCH = "wap_{{ run_id | replace(':', '_') | replace('+', '_') | replace('.', '_') | replace('-', '_') }}"
COLUMNS = {"order_id": "long", "customer_id": "string", "amount": "double", "order_ts": "timestamptz"}
WARN = ["table.enough_rows"]
ASSETS = [iceberg_asset(EU), iceberg_asset(US)]

with DAG(
    dag_id="iceberg_multi_publish",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "wap", "governance"],
    doc_md=__doc__,
) as dag:
    creates = [
        IcebergCreateTableOperator(
            task_id=f"create_{t.split('_')[-1]}", table=t, columns=COLUMNS, partition_by=["day(order_ts)"]
        )
        for t in (EU, US)
    ]

    @task
    def seed(table: str) -> None:
        """A first snapshot on ``main`` (a multi-table publish needs one to return to)."""
        import pyarrow as pa

        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        hook = IcebergCatalogHook()
        tbl = hook.load_table(table)
        if tbl.current_snapshot() is None:
            ts = datetime(2026, 1, 1, tzinfo=UTC)
            tbl.append(
                pa.Table.from_pylist(
                    [{"order_id": 0, "customer_id": "c0", "amount": 1.0, "order_ts": ts}],
                    schema=tbl.schema().as_arrow(),
                )
            )

    @task
    def load(table: str, branch: str, rows: int, day_offset: int) -> None:
        """One day of orders written to the WAP branch (pyiceberg: small demo data)."""
        import pyarrow as pa

        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        tbl = IcebergCatalogHook().load_table(table)
        day = datetime(2026, 1, 2, tzinfo=UTC) + timedelta(days=day_offset)
        data = [
            {
                "order_id": i,
                "customer_id": f"c{i % 7}",
                "amount": float(i % 50) + 1.0,
                "order_ts": day + timedelta(minutes=i),
            }
            for i in range(1, int(rows) + 1)
        ]
        tbl.append(pa.Table.from_pylist(data, schema=tbl.schema().as_arrow()), branch=branch)

    # [START howto_multi_publish]
    audits = []
    for table, rows, offset in ((EU, 20, 0), (US, "{{ dag_run.conf.get('us_rows', 20) }}", 1)):
        name = table.split("_")[-1]
        branch = IcebergWapCreateBranchOperator(task_id=f"branch_{name}", table=table, branch=BRANCH)
        audit = IcebergWapAuditOperator(
            task_id=f"audit_{name}",
            table=table,
            branch=BRANCH,
            column_mapping={"amount": {"min": {"geq_to": 0}}, "order_id": {"null_check": {"equal_to": 0}}},
            table_checks={"enough_rows": {"check_statement": "COUNT(*) >= 10"}},
            warn_checks=WARN,
        )
        creates[len(audits)] >> seed(table) >> branch >> load(table, BRANCH, rows, offset) >> audit
        audits.append(audit)

    steward = IcebergWapApprovalOperator(
        task_id="steward",
        table=US,
        branch=BRANCH,
        snapshot_id="{{ ti.xcom_pull(task_ids='audit_us')['snapshot_id'] }}",
        warn_checks=WARN,
        publish_task_id="publish_together",
        drop_task_id="drop_us_branch",
    )
    publish = IcebergWapMultiPublishOperator(
        task_id="publish_together",
        # each table's publish takes exactly its own audit's verdict
        tables=[{"table": t, "audit": a.output} for t, a in zip((EU, US), audits, strict=True)],
        branch=BRANCH,
        drop_branch=True,
        partition_events="iceberg",
        outlets=ASSETS,
    )
    drop = IcebergDropBranchOperator(task_id="drop_us_branch", table=US, branch=BRANCH)
    audits >> steward >> [publish, drop]
    # [END howto_multi_publish]


# [START howto_partitioned_consumer]
with DAG(
    dag_id="iceberg_orders_per_day",
    schedule=PartitionedAssetTimetable(assets=ASSETS[0]),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "governance"],
):
    EmptyOperator(task_id="rollup_one_day")  # reads dag_run.partition_key, e.g. "2026-01-02"
# [END howto_partitioned_consumer]


#: How ``scripts/demo.py`` runs this DAG: first a day with too few US rows, whose steward gate is left
#: waiting (its form stays under Required actions after the demo), then a clean day that publishes.
DEMO = {
    "order": 25,
    "runs": [
        {
            "conf": {"us_rows": 3},
            "expect": "awaiting_input",
            "task_id": "steward",
            "label": "3 US rows: the warn-level check table.enough_rows fails, the steward gate waits for a decision",
        },
        {"expect": "success", "label": "both audits pass: no question asked, both tables published at once"},
    ],
    "tables": [EU, US],
}
