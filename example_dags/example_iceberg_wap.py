"""Write-audit-publish: a daily orders load that reaches ``main`` only if it passes its audit.

Each run cuts a branch named after the DAG run, appends one day of orders to it with a
PySpark application (``jobs/append_orders.py``, submitted with ``spark.wap.branch``), audits
exactly the snapshot the write produced (common-sql style column and table checks plus
change-set checks, one Spark pass, every verdict recorded in ``governance.audit_results``),
then fast-forwards ``main`` to it with a compare-and-swap, tags it and emits the Asset
``iceberg://lakehouse/wap/orders``.

Trigger with ``{"bad_rows": true}`` to load negative amounts and duplicate order ids: the
audit fails, ``main`` keeps its snapshot and the branch stays for inspection.
The ``iceberg_wap_consumer`` DAG is scheduled on the Asset, i.e. on published data only.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_provider.assets.uris import iceberg_asset
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.task_groups import wap_task_group

JOBS = Path(__file__).resolve().parent / "jobs"
TABLE = "wap.orders"
ORDERS_COLUMNS = {
    "order_id": "long",
    "customer_id": "string",
    "region": "string",
    "amount": "double",
    "order_ts": "timestamptz",
}

with DAG(
    dag_id="iceberg_wap",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "wap"],
    doc_md=__doc__,
) as dag:
    create = IcebergCreateTableOperator(
        task_id="create_orders",
        table=TABLE,
        columns=ORDERS_COLUMNS,
        partition_by=["day(order_ts)"],
        properties={"format-version": "2"},
    )
    # [START howto_wap]
    wap = wap_task_group(
        group_id="orders_wap",
        table=TABLE,
        application=str(JOBS / "append_orders.py"),
        params_for_job={
            "rows": "{{ dag_run.conf.get('rows', 2000) }}",
            "seed": "{{ dag_run.conf.get('seed', 0) }}",
            # templates render to strings and the job tests truthiness: "" means no bad rows
            "bad_rows": "{{ 'yes' if dag_run.conf.get('bad_rows') else '' }}",
            "ds": "{{ ds }}",
        },
        column_mapping={
            "order_id": {"null_check": {"equal_to": 0}, "unique_check": {"equal_to": 0}},
            "amount": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}, "max": {"leq_to": 10_000}},
            "region": {"null_check": {"equal_to": 0}, "distinct_check": {"leq_to": 3}},
        },
        table_checks={
            "has_rows": {"check_statement": "COUNT(*) > 0"},
            "today_loaded": {
                "check_statement": "COUNT(*) > 0",
                "partition_clause": "order_ts >= TIMESTAMP '{{ ds }} 00:00:00'",
            },
        },
        change_checks={"added_rows": {"min": 1, "max": 1_000_000}, "added_rows_ratio": {"max": 10}},
        # Once main's head was audited and published, the next audit reads only the rows the
        # branch appended (docs: "How the audit reads as little as possible"). Real tables
        # keep the default threshold (1M rows in the base); 0 lets this small demo show it.
        audit_kwargs={"incremental_min_rows": 0},
        tag="daily-{{ ds_nodash }}",
        drop_branch=True,
    )
    # [END howto_wap]
    create >> wap


# [START howto_wap_consumer]
with DAG(
    dag_id="iceberg_wap_consumer",
    schedule=[iceberg_asset(TABLE)],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example", "wap"],
) as consumer_dag:

    @task
    def report_published_snapshot(triggering_asset_events=None) -> list[str]:
        """Runs only after a publish: the event carries the snapshot id that passed the audit.

        Snapshot ids travel as decimal strings (a browser would round a 64-bit number); every
        operator accepts them as they are, and ``int(...)`` gives the number.
        """
        return [e.extra.get("snapshot_id") for events in (triggering_asset_events or {}).values() for e in events]

    report_published_snapshot()
# [END howto_wap_consumer]


#: ``scripts/demo.py``: a clean day that publishes, then a day with bad rows that fails its audit.
DEMO = {
    "order": 20,
    "runs": [
        {"conf": {"rows": 2000, "seed": 0}, "expect": "success", "label": "clean day: audited and published"},
        {
            "conf": {"rows": 2000, "seed": 100_000, "bad_rows": True},
            "expect": "failed",
            "label": "bad rows: audit fails, main unchanged",
        },
    ],
    "tables": [TABLE],
}


def summarize(hook) -> list[str]:
    """What ``main``, the branches and the audit trail look like after the demo runs."""
    if not hook.table_exists(TABLE):
        return [f"{TABLE}: missing"]
    tbl = hook.load_table(TABLE)
    main = hook.ref_snapshot_id(tbl)
    lines = [f"{TABLE} main -> {main} ({len(tbl.scan(snapshot_id=main).to_arrow()) if main else 0} rows)"]
    for ref in hook.refs(tbl).values():
        if ref.name != "main":
            rows = len(tbl.scan(snapshot_id=ref.snapshot_id).to_arrow())
            lines.append(f"  {ref.type} {ref.name} -> {ref.snapshot_id} ({rows} rows)")
    audits = hook.governance.read("audit_results", table_name=TABLE)
    for event in sorted({r["event_id"] for r in audits}):
        rows = [r for r in audits if r["event_id"] == event]
        failed = [f"{r['check_name']}={r['observed_value']:g}" for r in rows if not r["passed"]]
        verdict = "PASSED" if not failed else "FAILED " + ", ".join(failed)
        lines.append(f"  audit of {rows[0]['ref']} @ {rows[0]['snapshot_id']}: {len(rows)} checks {verdict}")
    publishes = [r for r in hook.governance.read("ledger", operation="wap_publish", table_name=TABLE)]
    lines.append(f"  publishes: {[(r['snapshot_before'], r['snapshot_after']) for r in publishes]}")
    return lines
