"""Daily logical erasure: requests hidden within hours, with the two-deadline check.

1. ``erasure_daily.orders`` is created *erasure-ready* (``erasure_policy.erasure_ready_properties``:
   a Parquet bloom filter on ``customer_id``, no column bounds in manifests) and copy-on-write
   — the logical phase deletes merge-on-read whatever the table says, and restores its
   properties exactly;
2. requests land in ``erasure_daily.requests`` (status ``pending``);
3. the deadline sensor checks both deadlines: logical (24 h here) and physical (30 days);
4. ``IcebergErasureOperator(phase="logical")``: one batched merge-on-read DELETE on every
   branch showing the subjects, an independent count on every ref head (must be 0),
   evidence with phase / time / snapshot; no rewrite, no expiry. Requests become
   ``logically_erased``. ``DSR-D-0003`` names a customer with no order: it is flagged
   (``rows_found = 0``) and warned about, by request id only.

The nightly DAG ``iceberg_erasure_nightly`` purges them physically through the maintenance plan.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.rules.erasure import erasure_ready_properties
from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineSensor

ORDERS, REQUESTS = "erasure_daily.orders", "erasure_daily.requests"
SALT_CONN = "erasure_salt_demo"
os.environ.setdefault(  # demo only: in production the salt lives in a secrets backend
    f"AIRFLOW_CONN_{SALT_CONN.upper()}", json.dumps({"conn_type": "generic", "password": "demo-salt-5b0c1f9e7a2d4c38"})
)
#: Demo data subjects (in production they arrive through the requests table, never in code).
DEMO_SUBJECTS = {"DSR-D-0001": "cust-0007", "DSR-D-0002": "cust-0031", "DSR-D-0003": "cust-9999"}
DAYS, CUSTOMERS = 10, 60

with DAG(
    dag_id="iceberg_erasure_daily",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "erasure", "gdpr"],
    doc_md=__doc__,
) as dag:
    # [START howto_erasure_ready_table]
    create_orders = IcebergCreateTableOperator(
        task_id="create_orders",
        table=ORDERS,
        columns={"order_id": "long", "customer_id": "string", "amount": "double", "order_ts": "timestamptz"},
        partition_by=["day(order_ts)"],
        properties={"write.delete.mode": "copy-on-write", **erasure_ready_properties("customer_id")},
    )
    # [END howto_erasure_ready_table]

    @task
    def load_and_receive() -> int:
        """Ten daily appends (the subjects' orders from day 6 on) and the requests; idempotent."""
        import pyarrow as pa

        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        hook = IcebergCatalogHook()
        if hook.load_table(ORDERS).current_snapshot() is None:
            for day in range(DAYS):
                base = datetime(2026, 1, 1 + day, tzinfo=UTC)
                ids = list(range(day * 300, day * 300 + 300))
                keys = [f"cust-{i % CUSTOMERS:04d}" for i in ids]
                keys = [k if day >= 5 or k not in ("cust-0007", "cust-0031") else "cust-0000" for k in keys]
                batch = {
                    "order_id": pa.array(ids, pa.int64()),
                    "customer_id": pa.array(keys),
                    "amount": pa.array([float(i % 90) + 0.5 for i in ids]),
                    "order_ts": pa.array([base + timedelta(minutes=i % 1440) for i in ids], pa.timestamp("us", "UTC")),
                }
                hook.load_table(ORDERS).append(pa.table(batch))
        received = datetime.now(UTC) - timedelta(hours=3)
        return len(hook.governance.submit_erasure_requests(REQUESTS, DEMO_SUBJECTS, received_at=received))

    # [START howto_erasure_logical]
    deadlines = IcebergErasureDeadlineSensor(
        task_id="deadline_check",
        requests_table=REQUESTS,
        logical_deadline_hours=24,
        deadline_days=30,
        poke_interval=5,
        timeout=60,
    )
    erase_logically = IcebergErasureOperator(
        task_id="erase_logically",
        phase="logical",
        table=ORDERS,
        subject_columns="customer_id",
        requests_table=REQUESTS,
        salt_conn_id=SALT_CONN,
    )
    # [END howto_erasure_logical]
    create_orders >> load_and_receive() >> deadlines >> erase_logically


def summarize(hook) -> list[str]:
    """Each request's lifecycle so far (request ids and hashes only)."""
    from airflow_iceberg_provider.rules.erasure import lifecycle_lines

    return lifecycle_lines(hook, REQUESTS, ORDERS)


#: How ``scripts/demo.py`` runs this DAG.
DEMO = {
    "order": 61,
    "runs": [{"label": "daily: requests land; logical erasure (merge-on-read, minutes); requests logically_erased"}],
    "tables": [ORDERS, REQUESTS],
}
