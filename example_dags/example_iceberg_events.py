"""Event-driven scheduling: DAGs that run when an Iceberg table changes, gets sick, or a deadline nears.

Three assets are fed by **asset watchers** (Airflow 3 ``AssetWatcher``: a trigger running in the
triggerer; each event it yields becomes an asset event, and DAGs scheduled on the asset run):

* ``iceberg_commits.events.orders`` — :class:`IcebergCommitEventTrigger`: one event per new
  ``append`` on ``events.orders@main`` (snapshot id, parent, operation, summary). The DAG
  ``iceberg_events_consumer`` reads them from ``triggering_asset_events``.
* ``iceberg_health.events.orders`` — :class:`IcebergTableHealthEventTrigger`: one event when the
  table crosses the thresholds of its own maintenance policy (table properties); the DAG
  ``iceberg_events_maintenance`` runs :class:`IcebergMaintenancePlanOperator`, i.e. maintenance
  runs exactly when the plan has work, instead of on a clock. Quiet until the table healed and
  crossed again.
* ``erasure_deadlines.governance.erasure_requests`` — :class:`IcebergErasureDeadlineEventTrigger`:
  one event per request and deadline kind (``logical`` 24 h, ``physical`` 30 days) 6 hours /
  3 days before it is due; ``iceberg_events_erasure_escalation`` escalates.

The watcher assets have their own names, distinct from the table asset
``iceberg://lakehouse/events/orders`` that operators emit to on publish: a watcher on that same
asset would produce a second event for every publish.

Watchers are registered when the DAG is parsed and only while a DAG scheduled on the asset is
unpaused. ``make demo`` (``scripts/events_demo.py``) starts a triggerer and a scheduler, commits
to the table and shows the consumer and the maintenance plan starting. Poll interval:
``AIP_EVENTS_POLL_SECONDS`` (default 30 s; the demo uses 1 s).
"""

from __future__ import annotations

import os

import pendulum
from airflow.sdk import DAG, Asset, AssetWatcher, task

from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from airflow_iceberg_provider.triggers.commit_events import IcebergCommitEventTrigger
from airflow_iceberg_provider.triggers.erasure_events import IcebergErasureDeadlineEventTrigger
from airflow_iceberg_provider.triggers.health_events import IcebergTableHealthEventTrigger

TABLE = "events.orders"
REQUESTS = "governance.erasure_requests"
POLL = float(os.environ.get("AIP_EVENTS_POLL_SECONDS", "30"))

# [START howto_commit_watcher]
COMMITS = Asset(
    name=f"iceberg_commits.{TABLE}",
    watchers=[
        AssetWatcher(
            name="orders_appends",
            trigger=IcebergCommitEventTrigger(table=TABLE, operation="append", poll_interval=POLL),
        )
    ],
)
# [END howto_commit_watcher]
# [START howto_health_watcher]
HEALTH = Asset(
    name=f"iceberg_health.{TABLE}",
    watchers=[
        AssetWatcher(
            name="orders_health",
            # recheck hourly without commits too: snapshots age past the expiry cutoff on their own
            trigger=IcebergTableHealthEventTrigger(table=TABLE, poll_interval=POLL, recheck_interval=3600),
        )
    ],
)
# [END howto_health_watcher]
# [START howto_deadline_watcher]
DEADLINES = Asset(
    name=f"erasure_deadlines.{REQUESTS}",
    watchers=[
        AssetWatcher(
            name="erasure_deadlines",
            trigger=IcebergErasureDeadlineEventTrigger(
                requests_table=REQUESTS,
                deadlines={"logical": "24h", "physical": "30d"},
                margin={"logical": "6h", "physical": "3d"},
                poll_interval=max(POLL, 60.0),
            ),
        )
    ],
)
# [END howto_deadline_watcher]
START = pendulum.datetime(2026, 1, 1, tz="UTC")

# [START howto_commit_consumer]
with DAG(
    dag_id="iceberg_events_consumer",
    schedule=[COMMITS],
    start_date=START,
    catchup=False,
    tags=["iceberg", "example", "events"],
    doc_md=__doc__,
) as dag:

    @task
    def process_new_commits(triggering_asset_events=None) -> list[str]:
        """One asset event per commit; ids are decimal strings (pass them to any operator as-is)."""
        seen = []
        for events in (triggering_asset_events or {}).values():
            for event in events:
                payload = event.extra.get("payload", {})
                print(f"commit {payload.get('snapshot_id')} ({payload.get('operation')}) on {payload.get('table')}")
                seen.append(payload.get("snapshot_id"))
        return seen

    process_new_commits()
# [END howto_commit_consumer]

# [START howto_health_consumer]
with DAG(
    dag_id="iceberg_events_maintenance",
    schedule=[HEALTH],
    start_date=START,
    catchup=False,
    max_active_runs=1,
    tags=["iceberg", "example", "events", "maintenance"],
) as maintenance_dag:
    # Same thresholds as the trigger: both read the table's properties.
    IcebergMaintenancePlanOperator(task_id="maintenance_plan", table=TABLE)
# [END howto_health_consumer]

# [START howto_deadline_consumer]
with DAG(
    dag_id="iceberg_events_erasure_escalation",
    schedule=[DEADLINES],
    start_date=START,
    catchup=False,
    tags=["iceberg", "example", "events", "erasure"],
) as escalation_dag:

    @task
    def escalate(triggering_asset_events=None) -> list[dict]:
        """Events carry no request id and no subject key: the request received at ``received_at`` is
        looked up in the requests table or on the governance view's restricted erasure page."""
        due = []
        for events in (triggering_asset_events or {}).values():
            for event in events:
                p = event.extra.get("payload", {})
                print(
                    f"ESCALATE request received {p.get('received_at')}: {p.get('deadline')} deadline {p.get('due_at')}"
                )
                due.append({k: p.get(k) for k in ("received_at", "deadline", "due_at", "overdue")})
        return due

    escalate()
# [END howto_deadline_consumer]

#: ``make demo``: no ``airflow dags test`` runs (watchers need a triggerer); the driver starts one.
DEMO = {
    "order": 90,
    "runs": [],
    "tables": [TABLE],
    "driver": "scripts/events_demo.py",
}
