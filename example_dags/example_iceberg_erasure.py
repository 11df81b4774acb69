"""Compliance DAG: GDPR / PIPEDA (LPRPDE) / Law 25 erasure over two tables, with evidence.

1. ``erasure.orders`` (merge-on-read, partitioned by day, a monthly *release tag*) and
   ``erasure.profiles`` (copy-on-write) are created and loaded (pyiceberg, no JVM);
2. erasure requests land in ``erasure.requests`` (request id, subject key, received at,
   status ``pending``); a deadline check (30 days) passes;
3. one Spark job per table erases the subjects: one batched DELETE (semi-join, no value
   in SQL), branch deletes, ``rewrite_data_files`` (delete-file-threshold=1),
   ``expire_snapshots``, ``rewrite_manifests``, expire again, then an independent
   verification that reads the raw data files of every retained snapshot. The release
   tag would keep the subjects reachable, so ``ref_policy="drop"`` removes it (and says
   so in the evidence);
4. the evidence is printed — salted HMAC hashes only, never a subject — and the demo
   time-travels: the pre-erasure snapshot is gone and no retained snapshot or ref
   returns the subjects; the deadline check passes.
5. the last erasure of the scope also redacts the requests table (the default): each erased
   request's key becomes its salted hash (status ``redacted``) and the requests table's history
   is purged, so no file of it still holds a key.

The second demo run names a subject column that does not exist: the erasure is
refused before any Spark job and nothing is changed.

The salt is the password of the ``erasure_salt_demo`` connection; this file sets a
demo value only when the connection is not defined. In production keep the salt in a
secrets backend, stable over time, and never next to the evidence.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_provider.deadlines import erasure_deadline_alert
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineSensor

ORDERS, PROFILES, REQUESTS = "erasure.orders", "erasure.profiles", "erasure.requests"
SALT_CONN = "erasure_salt_demo"
os.environ.setdefault(  # demo only (see module docstring)
    f"AIRFLOW_CONN_{SALT_CONN.upper()}", json.dumps({"conn_type": "generic", "password": "demo-salt-5b0c1f9e7a2d4c38"})
)
#: Demo data subjects (in production they arrive through the requests table, never in code).
DEMO_SUBJECTS = {"DSR-2026-0001": "cust-0003", "DSR-2026-0002": "cust-0017", "DSR-2026-0003": "cust-0042"}
CUSTOMERS = 50

with DAG(
    dag_id="iceberg_erasure",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"profiles_subject_column": "customer_id"},
    tags=["iceberg", "example", "erasure", "gdpr"],
    doc_md=__doc__,
    # the logical deadline is 72 h; a triggered run keeps 48 h back for a retry or a person to act
    deadline=erasure_deadline_alert(deadline=timedelta(hours=72), cadence=timedelta(0), margin=timedelta(hours=48)),
) as dag:
    create_orders = IcebergCreateTableOperator(
        task_id="create_orders",
        table=ORDERS,
        columns={"order_id": "long", "customer_id": "string", "amount": "double", "order_ts": "timestamptz"},
        partition_by=["day(order_ts)"],
        properties={"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read"},
    )
    create_profiles = IcebergCreateTableOperator(
        task_id="create_profiles",
        table=PROFILES,
        columns={"customer_id": "string", "email_domain": "string", "segment": "string"},
        properties={"write.delete.mode": "copy-on-write"},
    )

    @task
    def load_tables() -> dict:
        """Three days of orders (three commits, the first tagged) and one profiles load; idempotent."""
        import pyarrow as pa

        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        hook = IcebergCatalogHook()
        orders = hook.load_table(ORDERS)
        if orders.current_snapshot() is None:
            for day in range(3):
                base = datetime(2026, 1, 1 + day, tzinfo=UTC)
                ids = range(day * 400, day * 400 + 400)
                batch = {
                    "order_id": pa.array(list(ids), pa.int64()),
                    "customer_id": pa.array([f"cust-{i % CUSTOMERS:04d}" for i in ids]),
                    "amount": pa.array([float(i % 90) + 0.5 for i in ids]),
                    "order_ts": pa.array([base + timedelta(minutes=i % 1440) for i in ids], pa.timestamp("us", "UTC")),
                }
                hook.load_table(ORDERS).append(pa.table(batch))
                if day == 0:
                    tbl = hook.load_table(ORDERS)
                    hook.set_ref(tbl, "release-2026-01", tbl.current_snapshot().snapshot_id, ref_type="tag")
            profiles = pa.table(
                {
                    "customer_id": pa.array([f"cust-{i:04d}" for i in range(CUSTOMERS)]),
                    "email_domain": pa.array(["example.org"] * CUSTOMERS),
                    "segment": pa.array([("retail", "b2b")[i % 2] for i in range(CUSTOMERS)]),
                }
            )
            hook.load_table(PROFILES).append(profiles)
        first = hook.list_snapshots(ORDERS)[0]
        return {"pre_erasure_snapshot": first.snapshot_id, "orders_snapshots": len(hook.list_snapshots(ORDERS))}

    # [START howto_erasure_requests]
    @task
    def receive_requests() -> int:
        """Requests land in the requests table (a web form or ticketing system would do this)."""
        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        governance = IcebergCatalogHook().governance
        governance.ensure_erasure_requests_table(REQUESTS)
        # A re-run submits only the ids the table does not hold yet: an erased request's key is
        # redacted, and a redacted request id is never reopened (submitting it again is refused).
        known = {row["request_id"] for row in governance.erasure_request_states(REQUESTS)}
        new = {rid: key for rid, key in DEMO_SUBJECTS.items() if rid not in known}
        received = datetime.now(UTC) - timedelta(days=2)
        return len(governance.submit_erasure_requests(REQUESTS, new, received_at=received)) if new else 0

    # [END howto_erasure_requests]
    deadline_before = IcebergErasureDeadlineSensor(
        task_id="deadline_check_before",
        requests_table=REQUESTS,
        deadline_days=30,
        logical_deadline_hours=72,
        poke_interval=5,
        timeout=60,
    )
    # [START howto_erasure_full]
    erase_orders = IcebergErasureOperator(
        task_id="erase_orders",
        table=ORDERS,
        subject_columns="customer_id",
        requests_table=REQUESTS,
        ref_policy="drop",  # the monthly release tag pins pre-erasure files: drop it, recorded in the evidence
        tables_in_scope=[ORDERS, PROFILES],
        salt_conn_id=SALT_CONN,
    )
    erase_profiles = IcebergErasureOperator(
        task_id="erase_profiles",
        table=PROFILES,
        subject_columns="{{ params.profiles_subject_column }}",
        requests_table=REQUESTS,
        ref_policy="fail",
        tables_in_scope=[ORDERS, PROFILES],
        salt_conn_id=SALT_CONN,
    )
    # [END howto_erasure_full]

    @task
    def show_evidence_and_time_travel(loaded: dict) -> dict:
        """Print the (hashed) evidence, then prove time travel no longer returns the subjects."""
        from pyiceberg.expressions import In

        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        hook = IcebergCatalogHook()
        for row in hook.governance.read("erasure_evidence"):
            print(
                f"evidence {row['request_id']} {row['table_name']}: subject_hash={row['subject_hash'][:16]}… "
                f"rows_deleted={row['rows_deleted']} verification={row['verification']} "
                f"snapshots {row['snapshot_before']}->{row['snapshot_after']} refs_dropped={row['refs_dropped']}"
            )
        subjects = list(DEMO_SUBJECTS.values())  # demo only: a real DAG never holds the subjects
        found = {}
        for table in (ORDERS, PROFILES):
            tbl = hook.load_table(table)
            for snap in tbl.metadata.snapshots:
                n = tbl.scan(row_filter=In("customer_id", subjects), snapshot_id=snap.snapshot_id).to_arrow().num_rows
                found[f"{table}@{snap.snapshot_id}"] = n
                print(f"time travel {table} snapshot {snap.snapshot_id}: {n} subject rows")
        old = loaded["pre_erasure_snapshot"]
        gone = hook.load_table(ORDERS).metadata.snapshot_by_id(old) is None
        print(f"pre-erasure snapshot {old} of {ORDERS}: {'expired, no longer reachable' if gone else 'STILL THERE'}")
        if any(found.values()) or not gone:
            raise RuntimeError("time travel still reaches erased subjects")
        return {"retained_snapshots_checked": len(found), "pre_erasure_snapshot_gone": gone}

    deadline_after = IcebergErasureDeadlineSensor(
        task_id="deadline_check_after",
        requests_table=REQUESTS,
        deadline_days=30,
        logical_deadline_hours=72,
        wait_for_completion=True,
        poke_interval=5,
        timeout=60,
    )

    loaded = load_tables()
    [create_orders, create_profiles] >> loaded
    received = receive_requests()
    loaded >> received >> deadline_before >> erase_orders >> erase_profiles
    shown = show_evidence_and_time_travel(loaded)
    erase_profiles >> shown >> deadline_after


def summarize(hook) -> list[str]:
    """Demo summary: evidence per request (hashes only) and request statuses."""
    lines = []
    for row in sorted(hook.governance.read("erasure_evidence"), key=lambda r: (r["request_id"], r["table_name"])):
        lines.append(
            f"evidence {row['request_id']} {row['table_name']}: hash {row['subject_hash'][:12]}… "
            f"deleted {row['rows_deleted']} {row['verification']} runs={row['runs']}"
        )
    states = hook.governance.erasure_request_states(REQUESTS) if hook.table_exists(REQUESTS) else []
    lines.append("requests: " + ", ".join(f"{r['request_id']}={r['status']}" for r in states))
    return lines


#: How ``scripts/demo.py`` runs this DAG.
DEMO = {
    "order": 60,
    "runs": [
        {
            "label": "requests land; erase 2 tables (tag dropped); hashed evidence; time travel finds nothing; "
            "requests redacted",
            "expect": "success",
        },
        {
            "conf": {"profiles_subject_column": "email"},
            "label": "subject column 'email' does not exist in profiles -> refused before Spark, nothing changed",
            "expect": "failed",
        },
    ],
    "tables": [ORDERS, PROFILES, REQUESTS],
}
