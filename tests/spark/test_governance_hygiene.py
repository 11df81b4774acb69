"""#16: governance tables that stay healthy: properties, filtered reads, maintenance by the plan."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.core.governance import GOVERNANCE_TABLE_PROPERTIES, LEDGER, pyiceberg_schema
from airflow_iceberg_provider.rules.health import HealthThresholds, breaches
from tests.support.lake import fake_context


def test_governance_tables_get_bounded_metadata_properties(lake):
    name = lake.governance.table("ledger")
    props = lake.load_table(name).metadata.properties
    assert {k: props.get(k) for k in GOVERNANCE_TABLE_PROPERTIES if k != "format-version"} == {
        k: v for k, v in GOVERNANCE_TABLE_PROPERTIES.items() if k != "format-version"
    }
    for _ in range(30):  # one commit per operation, as in production
        lake.governance.record_ledger(operation="op", table="db.t", status="succeeded")
    tbl = lake.load_table(name)
    assert len(tbl.metadata.metadata_log) <= 20  # write.metadata.previous-versions-max
    assert len(tbl.inspect.manifests()) < 30  # manifests merge as they accumulate


def test_an_existing_governance_table_gets_what_it_lacks_and_keeps_what_a_user_set(lake):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    lake.ensure_namespace("governance")
    lake.catalog.create_table(
        "governance.ledger",
        schema=pyiceberg_schema(LEDGER),
        properties={"format-version": "2", "write.metadata.previous-versions-max": "7"},
    )
    hook = IcebergCatalogHook()  # a fresh process: the governance tables are checked on first use
    hook.governance.record_ledger(operation="op", table="db.t", status="succeeded")
    props = hook.load_table("governance.ledger").metadata.properties
    assert props["write.metadata.previous-versions-max"] == "7"
    assert props["write.metadata.delete-after-commit.enabled"] == "true"
    assert (
        props["history.expire.max-snapshot-age-ms"] == GOVERNANCE_TABLE_PROPERTIES["history.expire.max-snapshot-age-ms"]
    )


def test_reads_filter_by_table_operation_and_time(lake):
    old = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {
            "event_id": uuid.uuid4().hex,
            "operation": op,
            "table_name": t,
            "status": "succeeded",
            "started_at": old + timedelta(days=d),
            "finished_at": old + timedelta(days=d),
        }
        for d, (op, t) in enumerate([("a", "db.x"), ("b", "db.x"), ("a", "db.y"), ("a", "db.x")])
    ]
    lake.governance.append("ledger", rows)  # one commit for many rows
    got = lake.governance.read("ledger", operation="a", table_name="db.x")
    assert sorted(r["finished_at"].day for r in got) == [1, 4]
    got = lake.governance.read("ledger", table_name="db.x", since=old + timedelta(days=1))
    assert sorted(r["operation"] for r in got) == ["a", "b"]
    got = lake.governance.read("ledger", since=old + timedelta(days=1), until=old + timedelta(days=2))
    assert sorted((r["operation"], r["table_name"]) for r in got) == [("a", "db.y"), ("b", "db.x")]


@pytest.mark.spark
def test_ledger_stays_under_thresholds_after_2000_operations_and_one_plan_run(lake):
    """2,000 ledger rows in 50 commits (40-row batches), then the maintenance plan on the ledger itself."""
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator

    name = lake.governance.table("ledger")
    for batch in range(50):
        now = datetime.now(UTC)
        lake.governance.append(
            "ledger",
            [
                {
                    "event_id": f"{batch}-{i}",
                    "operation": "op",
                    "table_name": f"db.t{i % 7}",
                    "status": "succeeded",
                    "started_at": now,
                    "finished_at": now,
                }
                for i in range(40)
            ],
        )
    policy = HealthThresholds(
        max_files=20,
        min_avg_file_size_bytes=None,
        max_snapshots=20,
        max_metadata_bytes=1024 * 1024,
        max_metadata_log=20,
    )
    before = lake.health(name)
    assert {b.threshold for b in breaches(before, policy)} == {"max_files", "max_snapshots"}
    assert before.metadata_log_length <= 20  # bounded by the table's own properties already

    out = IcebergMaintenancePlanOperator(
        task_id="plan", table=name, expire_older_than="0s", older_than_floor="0s"
    ).execute(fake_context())

    assert {a["action"] for a in out["actions"]} >= {"rewrite_data_files", "expire_snapshots"}
    after = lake.health(name)
    assert breaches(after, policy) == [], after
    rows = lake.governance.read("ledger", operation="op")
    assert len(rows) == 2000 and len({r["event_id"] for r in rows}) == 2000  # maintenance lost no row
    assert lake.governance.read("ledger", operation="maintenance_plan")  # the plan's own row is there
