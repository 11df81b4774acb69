"""A governed lake for the governance-view tests, filled by the provider's own operators and writers.

* ``db.orders``: created by ``IcebergCreateTableOperator``; appends through pyiceberg; a WAP branch
  created by ``IcebergWapCreateBranchOperator``, audited (rows written with the governance writer
  ``governance.append`` in the audit job's schema) and published by ``IcebergWapPublishOperator``
  (ledger row); a second branch whose audit failed (``min_rows``: observed 3, expected ``>= 100``);
  a release tag and a legal hold by ``IcebergCreateTagOperator``; a maintenance ledger row in the
  maintenance operator's shape with the hook's real health as "before".
* ``db.requests``: erasure requests (``governance.ensure_erasure_requests_table``) whose subject values must never
  appear in any page; evidence rows (salted hash only) of one erasure batch of two requests, R-100
  (4 rows found and removed) and R-400 (matched nothing), written by a logical run and a purge whose
  ledger rows name their Airflow tasks; a refused erasure run; an approval decision.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.lake import ORDERS_COLUMNS, fake_context, orders_batch

SALT = "ui-test-salt-0123456789abcdef"
SUBJECTS = {
    "R-100": "alice.subject@leak.example",
    "R-200": "bob.subject@leak.example",
    "R-300": "carol@leak.example",
    "R-400": "dave.nomatch@leak.example",
}
FAILED_CHECK = ("min_rows", "row_count", None, 3.0, ">= 100", False)
PASSED_CHECK = ("no_null_customer", "not_null", "customer_id", 0.0, "== 0", True)


def audit_rows(table: str, ref: str, snapshot_id: int, base: int | None, checks, *, task: str, when=None):
    """Audit-result rows in the audit job's schema (one audit = one event id, each row with its check's
    hash and the spec's hash)."""
    import hashlib

    from airflow_iceberg_provider.core.audit_checks import spec_hash_of

    event = uuid.uuid4().hex
    when = when or datetime.now(UTC)
    hashes = {
        name: hashlib.sha256(f"{name}|{kind}|{cond}".encode()).hexdigest() for name, kind, _, _, cond, _ in checks
    }
    digest = spec_hash_of(hashes)
    return [
        {
            "event_id": event,
            "table_name": table,
            "ref": ref,
            "snapshot_id": snapshot_id,
            "base_snapshot_id": base,
            "dag_id": "orders_wap",
            "run_id": "manual__ui",
            "task_id": task,
            "try_number": 1,
            "check_name": name,
            "check_type": kind,
            "column_name": col,
            "observed_value": observed,
            "condition": cond,
            "passed": passed,
            "evaluated_at": when,
            "check_hash": hashes[name],
            "spec_hash": digest,
        }
        for name, kind, col, observed, cond, passed in checks
    ]


def maintenance_row(hook, table: str, *, action: str = "rewrite_data_files", after_files: int = 1) -> dict[str, Any]:
    """A ledger row in ``_IcebergMaintenanceOperator._ledger``'s shape; "before" is the table's real health."""
    from airflow_iceberg_provider.operators._maintenance_base import health_summary

    before = health_summary(hook.health(table))
    after = {**before, "data_files": after_files, "small_files": 0, "delete_files": 0}
    now = datetime.now(UTC)
    head = hook.ref_snapshot_id(table)
    return {
        "event_id": f"{uuid.uuid4().hex}-0",
        "operation": f"maintenance.{action}",
        "table_name": table,
        "ref": "main",
        "dag_id": "orders_maintenance",
        "run_id": "manual__ui",
        "task_id": "compact",
        "try_number": 1,
        "started_at": now - timedelta(seconds=5),
        "finished_at": now,
        "status": "succeeded",
        "snapshot_before": head,
        "snapshot_after": head,
        "metrics": json.dumps(
            {
                "rewritten_data_files_count": 3,
                "added_data_files_count": 1,
                "health_before": before,
                "health_after": after,
                "seconds": 4.2,
            }
        ),
        "details": json.dumps({"reason": "small files", "args": {}}),
        "provider_version": "test",
    }


def evidence_table(hook):
    """The evidence table with the columns the erasure job adds to it (phase, rows found, lifecycle times)."""
    from pyiceberg.types import LongType, StringType, TimestamptzType

    name = hook.governance.table("erasure_evidence")
    tbl = hook.load_table(name)
    added = {
        "phase": StringType(),
        "rows_found": LongType(),
        "logical_erased_at": TimestamptzType(),
        "purged_at": TimestamptzType(),
        "leftovers_removed": LongType(),
    }
    missing = {k: v for k, v in added.items() if k not in tbl.schema().column_names}
    if missing:
        with tbl.update_schema() as update:
            for column, kind in missing.items():
                update.add_column(column, kind)
    return hook.load_table(name)


def erasure_ledger_row(
    event_id: str,
    table: str,
    dag_id: str,
    run_id: str,
    task_id: str,
    finished: datetime,
    phase: str,
    requests: int,
    *,
    status: str = "succeeded",
) -> dict[str, Any]:
    """A ledger row in the erasure job's shape (``iceberg_job_runtime.write_ledger``)."""
    details = {"refused": "tag release-1 keeps rows of the subjects (ref_policy=fail)"} if status == "refused" else {}
    return {
        "event_id": event_id,
        "operation": "erasure",
        "table_name": table,
        "ref": "main",
        "dag_id": dag_id,
        "run_id": run_id,
        "task_id": task_id,
        "try_number": 1,
        "started_at": finished - timedelta(minutes=2),
        "finished_at": finished + timedelta(seconds=5),
        "status": status,
        "metrics": json.dumps({"phase": phase, "requests": requests, "rows_deleted": 4, "files_rewritten": 2}),
        "details": json.dumps(details),
        "provider_version": "test",
    }


def fill_lake(hook) -> dict[str, Any]:
    """Fill the lake of ``hook`` (connection ``iceberg_catalog_default``); return the ids to look for."""
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator
    from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
    from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
    from airflow_iceberg_provider.rules.erasure import subject_hash

    table = "db.orders"
    IcebergCreateTableOperator(task_id="create", table=table, columns=ORDERS_COLUMNS).execute(fake_context())
    for i in range(3):
        hook.load_table(table).append(orders_batch(i * 10, 10))
    base = hook.ref_snapshot_id(table)
    ctx = fake_context("orders_wap", "manual__ui", "branch")
    IcebergWapCreateBranchOperator(task_id="branch", table=table, branch="wap_ok").execute(ctx)
    hook.load_table(table).append(orders_batch(100, 150), branch="wap_ok")
    audited = hook.ref_snapshot_id(table, "wap_ok")
    rows = audit_rows(
        table,
        "wap_ok",
        audited,
        base,
        [PASSED_CHECK, ("min_rows", "row_count", None, 150.0, ">= 100", True)],
        task="audit",
    )
    hook.governance.append("audit_results", rows)
    audit = {"audit_event_id": rows[0]["event_id"], "spec_hash": rows[0]["spec_hash"], "snapshot_id": audited}
    IcebergWapPublishOperator(task_id="publish", table=table, branch="wap_ok", audit=audit).execute(
        fake_context("orders_wap", "manual__ui", "publish")
    )
    published = hook.ref_snapshot_id(table)
    IcebergWapCreateBranchOperator(task_id="branch", table=table, branch="wap_bad").execute(ctx)
    hook.load_table(table).append(orders_batch(900, 3), branch="wap_bad")
    bad = hook.ref_snapshot_id(table, "wap_bad")
    hook.governance.append(
        "audit_results",
        audit_rows(
            table,
            "wap_bad",
            bad,
            published,
            [FAILED_CHECK, PASSED_CHECK],
            task="audit_bad",
            when=datetime.now(UTC) + timedelta(seconds=1),
        ),
    )
    IcebergCreateTagOperator(task_id="tag", table=table, tag="release-1").execute(fake_context())
    IcebergCreateTagOperator(
        task_id="hold", table=table, tag="case-7", legal_hold=True, case_id="CASE-7", hold_reason="litigation"
    ).execute(fake_context())
    hook.governance.append("ledger", [maintenance_row(hook, table)])

    requests = "db.requests"
    hook.governance.ensure_erasure_requests_table(requests)
    import pyarrow as pa

    now = datetime.now(UTC)
    received = {
        "R-100": now - timedelta(days=3),
        "R-200": now - timedelta(days=2),
        "R-300": now - timedelta(days=40),
        "R-400": now - timedelta(days=3),
    }
    erased = ("R-100", "R-400")
    rows = [
        {
            "request_id": rid,
            "subject_key": key,
            "received_at": received[rid],
            "status": "erased" if rid in erased else "pending",
            "updated_at": None,
            "completed_at": now - timedelta(days=1) if rid in erased else None,
        }
        for rid, key in SUBJECTS.items()
    ]
    tbl = hook.load_table(requests)
    tbl.append(pa.Table.from_pylist(rows, schema=tbl.schema().as_arrow()))
    logical_at, purged_at = now - timedelta(days=2), now - timedelta(days=1)
    batch = {"R-100": 4, "R-400": 0}
    evidence_table(hook).append(
        pa.Table.from_pylist(
            [
                {
                    "evidence_id": uuid.uuid4().hex[:32],
                    "request_id": rid,
                    "table_name": table,
                    "subject_hash": subject_hash(SALT, SUBJECTS[rid]),
                    "rows_deleted": n,
                    "rows_found": n,
                    "snapshot_before": base,
                    "snapshot_after": published,
                    "files_rewritten": 2,
                    "files_removed": 5,
                    "snapshots_expired": 3,
                    "refs_dropped": "[]",
                    "refs_blocking": "[]",
                    "verification": "verified",
                    "verified_rows_remaining": 0,
                    "started_at": logical_at - timedelta(minutes=2),
                    "finished_at": purged_at,
                    "dag_id": "erasure_nightly",
                    "run_id": "scheduled__night",
                    "task_id": "purge_orders",
                    "try_number": 1,
                    "provider_version": "0.1.0",
                    "iceberg_version": "Apache Iceberg 1.10.2",
                    "rows_held": 0,
                    "subject_columns": '["customer_id"]',
                    "ref_policy": "fail",
                    "job_run_id": "job-ui-purge",
                    "runs": 2,
                    "phase": "purge",
                    "logical_erased_at": logical_at,
                    "purged_at": purged_at,
                    "last_verified_at": purged_at,
                }
                for rid, n in batch.items()
            ],
            schema=evidence_table(hook).schema().as_arrow(),
        )
    )
    hook.governance.append(
        "ledger",
        [
            erasure_ledger_row(
                "job-ui-logical", table, "erasure_daily", "scheduled__day", "erase_orders", logical_at, "logical", 2
            ),
            erasure_ledger_row(
                "job-ui-purge", table, "erasure_nightly", "scheduled__night", "purge_orders", purged_at, "purge", 2
            ),
            erasure_ledger_row(
                "job-ui-refused", table, "erasure", "manual__refused", "erase_orders", now, "full", 0, status="refused"
            ),
            {
                "event_id": "approval-ui-1",
                "operation": "approval",
                "table_name": table,
                "ref": "wap_ok",
                "dag_id": "orders_wap",
                "run_id": "manual__ui",
                "task_id": "approve_publish",
                "try_number": 1,
                "started_at": now - timedelta(minutes=3),
                "finished_at": now - timedelta(minutes=3),
                "status": "succeeded",
                "metrics": "{}",
                "details": json.dumps(
                    {"decision": "approved", "decided_by": "officer", "comment": "numbers look right"}
                ),
                "provider_version": "test",
            },
        ],
    )
    return {"table": table, "base": base, "published": published, "audited": audited, "bad": bad}


#: The view's users: ``admin`` sees everything; ``auditor`` (op: may read connections and every DAG)
#: lacks the erasure permission; ``limited`` (op) may read only the DAGs of :data:`DAG_LIMITS`;
#: ``viewer`` may read no connection, so the view has nothing to show it.
USERS = {
    "admin": "admin-pw-1234",
    "auditor": "auditor-pw-1234",
    "limited": "limited-pw-1234",
    "viewer": "viewer-pw-1234",
}
ROLES = {"admin": "admin", "auditor": "op", "limited": "op", "viewer": "viewer"}
DAG_LIMITS = "limited=orders_wap"


def auth_env() -> dict[str, str]:
    """The auth-manager settings of the view's tests: :data:`USERS` with :data:`ROLES`, per-DAG limits."""
    from tests.support.dag_limited_auth import CLASS_PATH, LIMITS_ENV
    from tests.support.task_state import child_env

    return {
        # the auth manager's class lives in tests.support: the servers import it from the repository root
        "PYTHONPATH": child_env()["PYTHONPATH"],
        "AIRFLOW__CORE__AUTH_MANAGER": CLASS_PATH,
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in ROLES.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        LIMITS_ENV: DAG_LIMITS,
    }


@contextlib.contextmanager
def airflow_api_client(tmp, **conns: str):
    """Airflow's own API app (``create_app("core")``, plugin mounted, the SimpleAuthManager with per-DAG
    limits of ``tests.support.dag_limited_auth``) and one token per user of :data:`USERS`.

    :param conns: connection id -> connection JSON, set as ``AIRFLOW_CONN_*`` for the duration.
    """
    from fastapi.testclient import TestClient

    from airflow_iceberg_provider.ui.reader import clear_caches

    (tmp / "pw.json").write_text(json.dumps(USERS))
    env = {
        **auth_env(),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(tmp / "pw.json"),
        "AIRFLOW__API_AUTH__JWT_SECRET": "ui-test-jwt-secret-" + "x" * 48,
        **{f"AIRFLOW_CONN_{k.upper()}": v for k, v in conns.items()},
    }
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    clear_caches()
    try:
        from airflow.api_fastapi.app import create_app

        client = TestClient(create_app("core"))
        tokens = {}
        for user, pw in USERS.items():
            resp = client.post("/auth/token", json={"username": user, "password": pw})
            assert resp.status_code == 201, resp.text
            tokens[user] = resp.json()["access_token"]
        yield client, tokens
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        clear_caches()
