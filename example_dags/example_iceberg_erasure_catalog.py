"""One request, every table: a catalog-wide erasure found from the tables' own declarations.

1. Three tables of ``erasure_catalog`` are created erasure-ready, and each declares which of its
   columns holds which kind of subject key (``erasure_ready_properties(columns, kind=...)`` sets
   ``erasure.subject-columns.<kind>``): ``orders.customer_id`` and ``tickets.requester`` hold
   customer ids, ``newsletter.email`` holds e-mail addresses (another kind, another request
   table). An existing table declares its columns with ``IcebergAlterTableOperator(properties=...)``.
2. Requests land in ``erasure_catalog.requests`` (status ``pending``).
3. ``IcebergErasureDiscoveryOperator`` lists every table declaring ``customer_id`` columns
   (metadata only, no JVM) and returns one set of erasure arguments per table, each with the
   whole list as ``tables_in_scope``.
4. The logical and the purge phases run as dynamically mapped tasks, one per table
   (``.expand_kwargs``). A request becomes ``logically_erased`` when every table is verified
   logically, ``erased`` when every table is purged and verified physically; the purge then
   replaces its ``subject_key`` in the requests table by its salted hash and purges the requests
   table's own history (status ``redacted``). The evidence has one row per request and table.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.erasure_discovery import IcebergErasureDiscoveryOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.rules.erasure import erasure_ready_properties
from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineSensor

NS = "erasure_catalog"
ORDERS, TICKETS, NEWSLETTER, REQUESTS = (f"{NS}.{t}" for t in ("orders", "tickets", "newsletter", "requests"))
SALT_CONN = "erasure_salt_catalog_demo"
os.environ.setdefault(  # demo only: in production the salt lives in a secrets backend
    f"AIRFLOW_CONN_{SALT_CONN.upper()}", json.dumps({"conn_type": "generic", "password": "demo-salt-0e5d9c2b7f1a4386"})
)
#: Demo data subjects (in production they arrive through the requests table, never in code).
DEMO_SUBJECTS = {"DSR-C-0001": "cust-0007", "DSR-C-0002": "cust-0031"}

with DAG(
    dag_id="iceberg_erasure_catalog",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "erasure", "gdpr"],
    doc_md=__doc__,
) as dag:
    # [START howto_erasure_declare_subject_columns]
    create_orders = IcebergCreateTableOperator(
        task_id="create_orders",
        table=ORDERS,
        columns={"order_id": "long", "customer_id": "string", "amount": "double"},
        properties=erasure_ready_properties("customer_id", kind="customer_id"),
    )
    create_tickets = IcebergCreateTableOperator(
        task_id="create_tickets",
        table=TICKETS,
        columns={"ticket_id": "long", "requester": "string", "body": "string"},
        properties=erasure_ready_properties("requester", kind="customer_id"),
    )
    create_newsletter = IcebergCreateTableOperator(
        task_id="create_newsletter",
        table=NEWSLETTER,
        columns={"email": "string", "subscribed_at": "timestamptz"},
        properties=erasure_ready_properties("email", kind="email"),
    )
    # [END howto_erasure_declare_subject_columns]

    @task
    def load_and_receive() -> int:
        """Orders and tickets of 60 customers, and the requests; idempotent."""
        import pyarrow as pa

        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        hook = IcebergCatalogHook()
        if hook.load_table(ORDERS).current_snapshot() is None:
            ids = list(range(600))
            hook.load_table(ORDERS).append(
                pa.table(
                    {
                        "order_id": pa.array(ids, pa.int64()),
                        "customer_id": pa.array([f"cust-{i % 60:04d}" for i in ids]),
                        "amount": pa.array([float(i % 90) + 0.5 for i in ids]),
                    }
                )
            )
            hook.load_table(TICKETS).append(
                pa.table(
                    {
                        "ticket_id": pa.array(ids[:120], pa.int64()),
                        "requester": pa.array([f"cust-{i % 40:04d}" for i in ids[:120]]),
                        "body": pa.array(["where is my order?"] * 120),
                    }
                )
            )
        received = datetime.now(UTC) - timedelta(hours=2)
        return len(hook.governance.submit_erasure_requests(REQUESTS, DEMO_SUBJECTS, received_at=received))

    # [START howto_erasure_catalog_wide]
    discover = IcebergErasureDiscoveryOperator(task_id="discover_tables", subject_kind="customer_id", namespaces=[NS])
    erase_logically = IcebergErasureOperator.partial(
        task_id="erase_logically", phase="logical", requests_table=REQUESTS, salt_conn_id=SALT_CONN
    ).expand_kwargs(discover.output)
    purge = IcebergErasureOperator.partial(
        task_id="purge",
        phase="purge",
        requests_table=REQUESTS,
        salt_conn_id=SALT_CONN,
        redact_erased_requests=True,
    ).expand_kwargs(discover.output)
    deadlines = IcebergErasureDeadlineSensor(
        task_id="deadline_check",
        requests_table=REQUESTS,
        logical_deadline_hours=24,
        deadline_days=30,
        wait_for_completion=True,
        poke_interval=5,
        timeout=60,
    )
    # [END howto_erasure_catalog_wide]
    [create_orders, create_tickets, create_newsletter] >> load_and_receive() >> discover
    discover >> erase_logically >> purge >> deadlines


def summarize(hook) -> list[str]:
    """Each request's lifecycle per table (request ids and hashes only)."""
    from airflow_iceberg_provider.rules.erasure import lifecycle_lines

    return [line for table in (ORDERS, TICKETS) for line in lifecycle_lines(hook, REQUESTS, table)]


#: How ``scripts/demo.py`` runs this DAG.
DEMO = {
    "order": 63,
    "runs": [{"label": "catalog-wide: discovery finds 2 tables; logical + purge mapped per table; requests redacted"}],
    "tables": [ORDERS, TICKETS, NEWSLETTER, REQUESTS],
}
