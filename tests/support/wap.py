"""Helpers for the WAP tests (pyiceberg-only setups; no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.core import audit_checks
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from tests.support.lake import orders_batch


def commit_to_branch(hook: IcebergCatalogHook, table: str, branch: str, start: int, count: int) -> int:
    """Append ``count`` orders to ``branch`` through pyiceberg; returns the branch head."""
    hook.load_table(table).append(orders_batch(start, count), branch=branch)
    return hook.ref_snapshot_id(table, branch)


def audit_of(snapshot_id: int, event_id: str = "e1", column_mapping: dict[str, Any] | None = None) -> dict[str, Any]:
    """The audit task's result for an audit :func:`record_audit` wrote (same defaults)."""
    checks = audit_checks.parse_checks(column_mapping or AMOUNT_MIN)
    digest = audit_checks.spec_hash(checks)
    return {"audit_event_id": event_id, "spec_hash": digest, "snapshot_id": str(snapshot_id)}


#: the check the simulated audits run (as IcebergWapAuditOperator parses ``column_mapping``)
AMOUNT_MIN = {"amount": {"min": {"geq_to": 0}}}


def record_audit(
    hook: IcebergCatalogHook,
    table: str,
    branch: str,
    snapshot_id: int,
    *,
    passed: bool = True,
    event_id: str = "e1",
    column_mapping: dict[str, Any] | None = None,
    dag_id: str | None = "test_dag",
    run_id: str | None = "manual__2026-01-01",
    evaluated_at: datetime | None = None,
    failed: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Write audit rows as the audit job does (one per check, with its check hash and the spec hash)
    and return what the audit task returns about them: ``{audit_event_id, spec_hash, snapshot_id, table}``.

    :param failed: names of the checks that fail (default: every check when ``passed`` is false, else none).
    """
    checks = audit_checks.parse_checks(column_mapping or AMOUNT_MIN)
    hashes = {c.name: audit_checks.check_hash(c) for c in checks}
    digest = audit_checks.spec_hash_of(hashes)
    failing = set(failed if failed is not None else ([] if passed else hashes))
    rows: list[dict[str, Any]] = [
        {
            "event_id": event_id,
            "table_name": table,
            "ref": branch,
            "snapshot_id": snapshot_id,
            "dag_id": dag_id,
            "run_id": run_id,
            "task_id": "audit",
            "check_name": c.name,
            "check_type": c.check_type,
            "column_name": c.column,
            "observed_value": -1.0 if c.name in failing else 1.0,
            "condition": c.describe(),
            "passed": c.name not in failing,
            "evaluated_at": evaluated_at or datetime.now(UTC),
            "check_hash": hashes[c.name],
            "spec_hash": digest,
        }
        for c in checks
    ]
    hook.governance.append("audit_results", rows)
    return {"audit_event_id": event_id, "spec_hash": digest, "snapshot_id": str(snapshot_id), "table": table}
