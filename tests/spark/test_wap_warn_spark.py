"""Warn-level audit checks with the real audit job (one Spark job per audit).

Only warn-level checks failed: the task succeeds with ``passed: False`` and ``needs_approval``,
the verdicts are in ``audit_results``, and the publish refuses until a steward's decision is
recorded. A failed check that is not warn-level still fails the task.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from airflow_iceberg_provider.exceptions import IcebergAuditFailedError, IcebergRefusedError
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.wap import commit_to_branch

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]
T = "db.orders"
CHECKS = {
    "column_mapping": {"amount": {"min": {"geq_to": 0}}},
    "table_checks": {"enough_rows": {"check_statement": "COUNT(*) >= 100"}},
}


def test_warn_level_failures_wait_for_a_steward_and_others_still_fail(lake):
    create_orders_table(lake, T).append(orders_batch(0, 10))
    lake.create_branch(T, "b", snapshot_id=lake.ref_snapshot_id(T))
    head = commit_to_branch(lake, T, "b", 100, 5)
    out = IcebergWapAuditOperator(
        task_id="audit", table=T, branch="b", warn_checks=["table.enough_rows"], **CHECKS
    ).execute(fake_context())
    assert (out["passed"], out["needs_approval"], out["failed"]) == (False, True, 1)
    assert out["failed_checks"][0]["check"] == "table.enough_rows"
    publish = IcebergWapPublishOperator(task_id="p", table=T, branch="b", audit=out)
    with pytest.raises(IcebergRefusedError, match=r"failed checks \['table.enough_rows'\]"):
        publish.execute(fake_context())
    details = {
        "gate": "wap_publish",
        "decision": "publish",
        "decided_at": datetime.now(UTC).isoformat(),
        "audit_event_id": out["audit_event_id"],
        "spec_hash": out["spec_hash"],
        "branch_head": str(head),
        "failed_checks": out["failed_checks"],
    }
    lake.governance.record_ledger(
        operation="approval",
        table=T,
        ref="b",
        status="succeeded",
        context=fake_context(task_id="gate"),
        snapshot_after=head,
        details={**details, "waived": ["table.enough_rows"]},
    )
    assert publish.execute(fake_context())["published_snapshot_id"] == str(head)
    # the same failure without warn_checks fails the audit task
    lake.create_branch(T, "c", snapshot_id=head)
    commit_to_branch(lake, T, "c", 200, 5)
    with pytest.raises(IcebergAuditFailedError, match="table.enough_rows"):
        IcebergWapAuditOperator(task_id="audit2", table=T, branch="c", **CHECKS).execute(fake_context())
