"""Table maintenance: create the pathology, then heal it with ONE policy-driven Spark job.

1. ``maint.orders`` is created (format v2, merge-on-read deletes, manifest merging off);
2. one Spark job makes it sick: ~200 tiny appends (hundreds of small files, snapshots
   and manifests), merge-on-read DELETEs (position delete files) and a legal-hold tag
   half-way;
3. an expiry **dry run** (catalog only, no JVM) lists what would expire and which old
   snapshots the legal hold keeps;
4. the **maintenance plan** reads health through the catalog hook, decides, and runs
   compaction (deletes applied), delete-file and manifest rewrites, snapshot expiry
   and an orphan-file dry run in **one** spark-submit, each verified and ledgered
   with health before/after;
5. the same plan again: the table is healthy now, so it starts no JVM and says so.

The demo lowers the expiry floor to zero (``older_than_floor="0s"``) because its
snapshots are seconds old; production keeps the default floor (1 h) or more.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator

JOBS = Path(__file__).resolve().parent / "jobs"
TABLE = "maint.orders"
# [START howto_maintenance_policy]
#: The policy of both plan runs. Orphan removal (dry run) is added to the first one only.
POLICY = {
    "expire_older_than": "0s",
    "older_than_floor": "0s",  # demo only: its snapshots are seconds old; keep the 1 h default in production
    "retain_last": 2,
    "min_snapshots_to_expire": 10,  # do not start a JVM to expire a handful of snapshots
}
# [END howto_maintenance_policy]
ORDERS_COLUMNS = {
    "order_id": "long",
    "customer_id": "string",
    "region": "string",
    "amount": "double",
    "order_ts": "timestamptz",
}

with DAG(
    dag_id="iceberg_maintenance",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"commits": 200, "deletes": 20},
    tags=["iceberg", "example", "maintenance"],
    doc_md=__doc__,
) as dag:
    create = IcebergCreateTableOperator(
        task_id="create_orders",
        table=TABLE,
        columns=ORDERS_COLUMNS,
        partition_by=["day(order_ts)"],
        properties={
            "format-version": "2",
            "write.delete.mode": "merge-on-read",
            "write.update.mode": "merge-on-read",
            "commit.manifest-merge.enabled": "false",
            "write.target-file-size-bytes": str(64 * 1024 * 1024),
        },
    )
    sicken = IcebergSparkSubmitOperator(
        task_id="create_pathology",
        table=TABLE,
        application=str(JOBS / "maintenance_pathology.py"),
        params_for_job={"commits": "{{ params.commits }}", "deletes": "{{ params.deletes }}", "days": 4},
        expected_operations=["append", "overwrite", "delete"],
    )
    # [START howto_expiry_dry_run]
    preview = IcebergExpireSnapshotsOperator(
        task_id="expiry_dry_run",
        table=TABLE,
        older_than="0s",
        older_than_floor="0s",
        retain_last=2,
        dry_run=True,
    )
    # [END howto_expiry_dry_run]
    # [START howto_maintenance_plan]
    heal = IcebergMaintenancePlanOperator(
        task_id="maintenance_plan",
        table=TABLE,
        remove_orphans=True,
        durable=True,  # the default: the job outlives a killed worker; the retry reconnects to it or takes its result
        **POLICY,
    )
    # [END howto_maintenance_plan]
    check = IcebergMaintenancePlanOperator(
        task_id="plan_again_is_noop",
        table=TABLE,
        spark_conn_id="spark_not_needed",  # proves the point: a healthy table never reaches Spark
        **POLICY,
    )
    create >> sicken >> preview >> heal >> check


def summarize(hook) -> list[str]:
    """Demo summary: health before/after the plan, what each action did, what the hold kept."""
    import json

    lines = []
    rows = [r for r in hook.governance.read("ledger", table_name=TABLE) if r["operation"].startswith("maintenance")]
    rows.sort(key=lambda r: (r["finished_at"], r["event_id"]))
    actions = [r for r in rows if r["operation"].startswith("maintenance.") and r["status"] != "dry_run"]
    if actions:
        m = json.loads(actions[0]["metrics"])
        keys = ("data_files", "small_files", "delete_files", "manifests", "snapshots", "records")
        lines.append("health before: " + ", ".join(f"{k}={m['health_before'][k]}" for k in keys))
        lines.append("health after:  " + ", ".join(f"{k}={m['health_after'][k]}" for k in keys))
    for r in rows:
        metrics = json.loads(r["metrics"] or "{}")
        if r["operation"] == "maintenance_plan":  # the job's own row (or a noop plan): one line
            acts = [a["action"] for a in metrics.get("actions", [])]
            lines.append(
                f"maintenance_plan: {r['status']} " + (f"one Spark job ran {acts}" if acts else "no Spark job")
            )
            continue
        shown = {k: v for k, v in metrics.items() if not k.startswith("health") and v not in (0, None)}
        lines.append(f"{r['operation']}: {r['status']} {shown}")
        details = json.loads(r["details"] or "{}")
        if details.get("held_snapshots"):
            lines.append(f"  kept by refs: {details['held_snapshots']}")
    return lines


#: How ``scripts/demo.py`` runs this DAG.
DEMO = {
    "order": 50,
    "runs": [
        {
            "label": "~200 small commits + merge-on-read deletes, expiry dry run, one-job plan, healthy re-plan",
            "expect": "success",
        }
    ],
    "tables": [TABLE],
}
