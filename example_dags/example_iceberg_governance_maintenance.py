"""Keep the provider's own governance tables healthy: the documented default maintenance DAG.

Every provider operation appends to ``governance.ledger`` (and audits / erasures to
``governance.audit_results`` / ``governance.erasure_evidence``): one small commit per task,
hundreds a day. The tables are created with bounded-metadata properties (see
``governance.GOVERNANCE_TABLE_PROPERTIES``); this DAG heals the rest, once a day, per table:

1. ``IcebergTableHealthCheckOperator`` (``on_breach="warn"``): files, average file size,
   snapshots, metadata.json size against absolute thresholds, each breach named;
2. ``IcebergMetadataHygieneOperator``: caps the metadata log and deletes metadata files
   left by failed commits (proven unreferenced, older than 1 h);
3. ``IcebergMaintenancePlanOperator``: compacts the one-row files, merges manifests and
   expires day-old snapshots (an append-only table loses no row) in one Spark job, or
   starts no JVM when the table is healthy.

The demo lowers the expiry cutoff and floor to zero (its snapshots are seconds old).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_provider.core.governance import DEFAULT_GOVERNANCE_NAMESPACE, GOVERNANCE_TABLES
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.health import IcebergMetadataHygieneOperator, IcebergTableHealthCheckOperator
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator

TABLES = [f"{DEFAULT_GOVERNANCE_NAMESPACE}.{name}" for name in GOVERNANCE_TABLES]

with DAG(
    dag_id="iceberg_governance_maintenance",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"expire_older_than": "1d", "older_than_floor": "1h"},
    tags=["iceberg", "example", "maintenance", "governance"],
    doc_md=__doc__,
) as dag:
    # [START howto_governance_maintenance]
    @task
    def governance_tables() -> list[str]:
        """The governance tables of the catalog connection (created, with their properties, if missing)."""
        hook = IcebergCatalogHook()
        return [hook.governance.table(kind) for kind in GOVERNANCE_TABLES]

    tables = governance_tables()
    health = IcebergTableHealthCheckOperator.partial(
        task_id="health", on_breach="warn", max_snapshots=500, min_avg_file_size_bytes="off"
    ).expand(table=tables)
    hygiene = IcebergMetadataHygieneOperator.partial(task_id="metadata_hygiene", previous_versions_max=20).expand(
        table=tables
    )
    plan = IcebergMaintenancePlanOperator.partial(
        task_id="plan",
        expire_older_than="{{ params.expire_older_than }}",
        older_than_floor="{{ params.older_than_floor }}",
    ).expand(table=tables)
    health >> hygiene >> plan
    # [END howto_governance_maintenance]


def summarize(hook) -> list[str]:
    """Health of each governance table after the plan (printed by ``make demo``)."""
    lines = []
    for table in TABLES:
        if hook.table_exists(table):
            h = hook.health(table)
            lines.append(
                f"{table}: {h.records} rows in {h.data_files} files, {h.snapshots} snapshots, "
                f"metadata log {h.metadata_log_length}, metadata.json {h.metadata_bytes} bytes"
            )
    return lines


DEMO = {
    "order": 95,  # after every other example: the governance tables hold their rows
    "runs": [
        {
            "label": "health (warn), metadata hygiene and one-job plan on each governance table",
            "conf": {"expire_older_than": "0s", "older_than_floor": "0s"},
            "expect": "success",
        }
    ],
    "tables": TABLES,
}
