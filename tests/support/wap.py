"""Helpers for the WAP tests (pyiceberg-only setups; no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from tests.support.lake import orders_batch


def commit_to_branch(hook: IcebergCatalogHook, table: str, branch: str, start: int, count: int) -> int:
    """Append ``count`` orders to ``branch`` through pyiceberg; returns the branch head."""
    hook.load_table(table).append(orders_batch(start, count), branch=branch)
    return hook.ref_snapshot_id(table, branch)


def record_audit(
    hook: IcebergCatalogHook, table: str, branch: str, snapshot_id: int, *, passed: bool = True, event_id: str = "e1"
) -> None:
    """Write audit rows as the audit job does (the publish gate reads them)."""
    row: dict[str, Any] = {
        "event_id": event_id,
        "table_name": table,
        "ref": branch,
        "snapshot_id": snapshot_id,
        "check_name": "amount.min",
        "check_type": "min",
        "column_name": "amount",
        "observed_value": 1.0 if passed else -1.0,
        "condition": ">= 0",
        "passed": passed,
        "evaluated_at": datetime.now(UTC),
    }
    hook.governance.append("audit_results", [row])
