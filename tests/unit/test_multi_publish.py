"""Multi-table publish on a real SQLite catalog with pyiceberg (no Spark, no JVM).

Two tables with audited WAP branches are published together. Asserted from the catalog and the
ledger: both ``main`` move or neither does; a concurrent writer on one table makes the whole
publish fail with no table moved; a task process killed (SIGKILL) between the two tables leaves a
``prepared`` journal that the next try repairs (finishes, or moves the moved table back when
another writer moved the other one) or refuses, naming each table's state.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_iceberg_provider.core.governance import decode_ledger_row
from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergPublishConflictError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.multi_publish import IcebergWapMultiPublishOperator
from airflow_iceberg_provider.rules import multi_publish as mp
from airflow_iceberg_provider.rules.refs import RefChange
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.task_state import child_env
from tests.support.wap import audit_of, commit_to_branch, record_audit

A, B = "db.orders", "db.customers"
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------------- pure rules
def _step(table: str, before: int, after: int) -> mp.TableStep:
    return mp.TableStep(table, "b", after, before, after, (RefChange("main", "branch", after, before),))


def test_recovery_plans():
    steps = [_step("a", 1, 2), _step("b", 10, 20)]
    assert mp.plan_recovery(steps, {"a": 1, "b": 10}).action == "restart"
    assert mp.plan_recovery(steps, {"a": 2, "b": 20}).action == "complete"
    forward = mp.plan_recovery(steps, {"a": 2, "b": 10})
    assert forward.action == "roll_forward" and [s.table for s in forward.todo] == ["b"]
    back = mp.plan_recovery(steps, {"a": 2, "b": 11})
    assert back.action == "roll_back" and [s.table for s in back.todo] == ["a"]
    assert mp.plan_recovery(steps, {"a": 3, "b": 11}, built_on={"a"}).action == "refuse"
    assert mp.plan_recovery(steps, {"a": 3, "b": 20}, built_on={"a"}).action == "complete"


def test_step_inverse_and_journal_round_trip():
    step = mp.TableStep(
        "db.t",
        "b",
        5,
        4,
        5,
        (RefChange("main", "branch", 5, 4, min_snapshots_to_keep=3), RefChange("b", "branch", None, 5)),
        tag=None,
    )
    assert step.inverse() == (
        RefChange("main", "branch", 4, 5, min_snapshots_to_keep=3),
        RefChange("b", "branch", 5, None),
    )
    assert mp.TableStep.from_journal(step.to_journal()) == step


@pytest.mark.parametrize(
    ("tables", "match"),
    [
        ("db.a", "non-empty list"),
        ([], "non-empty list"),
        ([{"branch": "x"}], "has no table"),
        (["db.a", "db.a"], "more than once"),
        ([{"table": "db.a", "snapshot": 1}], "unknown keys"),
    ],
)
def test_tables_parameter_is_checked(tables, match):
    with pytest.raises(IcebergValidationError, match=match):
        mp.check_tables(tables, "tables")


# --------------------------------------------------------------------------- on a catalog
@pytest.fixture
def two(lake):
    """db.orders and db.customers, each with 10 rows on main and an audited branch ``b`` ahead."""
    state = {}
    for i, table in enumerate((A, B)):
        create_orders_table(lake, table).append(orders_batch(1000 * i, 10))
        base = lake.ref_snapshot_id(table)
        lake.create_branch(table, "b", snapshot_id=base)
        head = commit_to_branch(lake, table, "b", 1000 * i + 100, 5)
        record_audit(lake, table, "b", head, event_id=f"ev-{table}")
        state[table] = (base, head)
    return lake, state


def audited(hook: IcebergCatalogHook, tables: tuple[str, ...] = (A, B)) -> list[dict]:
    """``tables`` as the publish takes them: each with the result of its (one) recorded audit."""
    found = {t: hook.governance.read("audit_results", table_name=t)[0] for t in tables}
    return [{"table": t, "audit": audit_of(r["snapshot_id"], r["event_id"])} for t, r in found.items()]


def publish(**kwargs) -> IcebergWapMultiPublishOperator:
    tables = kwargs.pop("tables", None) or audited(IcebergCatalogHook())
    return IcebergWapMultiPublishOperator(task_id="t", tables=tables, branch="b", **kwargs)


def mains(hook: IcebergCatalogHook) -> dict[str, int | None]:
    return {t: hook.ref_snapshot_id(t) for t in (A, B)}


def rows(hook: IcebergCatalogHook) -> list[dict]:
    found = [decode_ledger_row(r) for r in hook.governance.read("ledger", operation=mp.OPERATION)]
    return sorted(found, key=lambda r: r["finished_at"])


def test_publishes_every_table_and_records_one_publish(two):
    hook, state = two
    out = publish(tag="release-1", drop_branch=True).execute(fake_context())
    assert out["method"] == "protocol" and out["published"] is True
    assert mains(hook) == {t: state[t][1] for t in (A, B)}
    for t in (A, B):
        refs = hook.refs(t)
        assert refs["release-1"].snapshot_id == state[t][1] and "b" not in refs
    prepared, done = rows(hook)
    assert (prepared["status"], done["status"]) == ("prepared", "succeeded")
    tables = {t["table"]: t for t in done["details"]["tables"]}
    assert set(tables) == {A, B}
    assert {t: (int(v["main_before"]), int(v["main_after"])) for t, v in tables.items()} == state
    assert done["metrics"]["tables"] == 2 and done["metrics"]["published_added_records"] == 10
    again = publish(tag="release-1", drop_branch=True).execute(fake_context())
    assert again["published"] is False and len(rows(hook)) == 2, "a retry after success changes nothing"


def test_a_concurrent_writer_on_one_table_fails_the_whole_publish(two, monkeypatch):
    """The writer commits to B's main after A moved: B's compare-and-swap fails, A is moved back."""
    hook, state = two
    original = IcebergCatalogHook.apply_ref_changes
    other = IcebergCatalogHook()

    def racing(self, table, changes):
        if ".".join(table.name()[-2:]) == B and changes[0].snapshot_id == state[B][1]:
            other.load_table(B).append(orders_batch(9000, 1))
        return original(self, table, changes)

    monkeypatch.setattr(IcebergCatalogHook, "apply_ref_changes", racing)
    with pytest.raises(IcebergCommitConflictError, match="were moved back; every table's main is where it was"):
        publish().execute(fake_context())
    now = mains(hook)
    assert now[A] == state[A][0], "A was moved back"
    assert now[B] not in state[B] and hook.is_ancestor(B, state[B][0], now[B]), "the writer's commit stays"
    assert [r["status"] for r in rows(hook)] == ["prepared", "rolled_back"]
    assert hook.refs(A)["b"].snapshot_id == state[A][1], "the branches are kept"


def test_main_moved_before_the_plan_refuses_before_anything_moves(two):
    hook, state = two
    hook.load_table(B).append(orders_batch(9000, 1))
    moved = hook.ref_snapshot_id(B)
    log = len(hook.load_table(A).metadata.metadata_log)
    with pytest.raises(IcebergPublishConflictError, match="main moved since the branch was cut"):
        publish().execute(fake_context())
    assert mains(hook) == {A: state[A][0], B: moved}
    assert len(hook.load_table(A).metadata.metadata_log) == log and rows(hook) == []


def test_one_unaudited_table_refuses_all(two):
    hook, state = two
    commit_to_branch(hook, B, "b", 5000, 1)  # B's branch moved after its audit
    with pytest.raises(IcebergRefusedError, match="Branch 'b' of db.customers moved after its audit"):
        publish().execute(fake_context())
    assert mains(hook) == {t: state[t][0] for t in (A, B)} and rows(hook) == []


def test_a_table_without_an_audit_of_this_run_refuses_all(two):
    """B's verdict is a row another DAG run wrote (appended through the hook): refused, nothing moves."""
    hook, state = two
    tables = audited(hook)
    forged = record_audit(hook, B, "b", state[B][1], event_id="forged", run_id="manual__other")
    tables[1] = {"table": B, "audit": forged}
    logs = {t: hook.metadata_location(t) for t in (A, B)}
    with pytest.raises(IcebergRefusedError, match=r"tables\['db.customers'\]\['audit'\]=.* not by this run"):
        publish(tables=tables).execute(fake_context())
    tables[1] = {"table": B}  # no audit bound to B, none upstream
    with pytest.raises(IcebergRefusedError, match=r"tables\['db.customers'\]\['audit'\]=None is not set"):
        publish(tables=tables).execute(fake_context())
    assert {t: hook.metadata_location(t) for t in (A, B)} == logs and rows(hook) == []


def test_catalog_transaction_required_on_a_sql_catalog_is_refused(two):
    hook, state = two
    with pytest.raises(IcebergValidationError, match="transaction='catalog' but catalog 'lakehouse' is not a REST"):
        publish(transaction="catalog").execute(fake_context())
    assert mains(hook) == {t: state[t][0] for t in (A, B)}


# ----------------------------------------------------------------- a kill between two tables
KILLED_TRY = """
import sys, time
from pathlib import Path
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.multi_publish import IcebergWapMultiPublishOperator
from tests.support.lake import fake_context

original = IcebergCatalogHook.apply_ref_changes

def stall_after_first(self, table, changes):
    out = original(self, table, changes)
    Path({mark!r}).write_text(".".join(table.name()[-2:]))
    time.sleep(600)  # killed here: the first table moved, the second not
    return out

IcebergCatalogHook.apply_ref_changes = stall_after_first
IcebergWapMultiPublishOperator(task_id="t", tables={tables!r}, branch="b").execute(fake_context())
"""


def kill_between_tables(tmp_path: Path) -> str:
    """Run a publish in a real task process and SIGKILL it after the first table moved."""
    mark = tmp_path / "moved"
    script = tmp_path / "killed_try.py"
    script.write_text(KILLED_TRY.format(mark=str(mark), tables=audited(IcebergCatalogHook())))
    proc = subprocess.Popen([sys.executable, str(script)], env=child_env())
    try:
        deadline = time.monotonic() + 300
        while not mark.exists():
            assert proc.poll() is None, f"the task process exited early ({proc.returncode})"
            assert time.monotonic() < deadline, "the first table was not moved in time"
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    return mark.read_text()


def test_kill_between_tables_then_the_retry_finishes_the_publish(two, tmp_path):
    hook, state = two
    first = kill_between_tables(tmp_path)
    assert first == A
    assert mains(hook) == {A: state[A][1], B: state[B][0]}, "killed part-way: A moved, B not"
    assert [r["status"] for r in rows(hook)] == ["prepared"]
    out = publish().execute(fake_context(try_number=2))
    assert out["method"] == "recovered"
    assert mains(hook) == {t: state[t][1] for t in (A, B)}
    assert [r["status"] for r in rows(hook)] == ["prepared", "succeeded"]
    assert rows(hook)[-1]["details"]["method"] == "recovered"


def test_kill_then_another_writer_on_the_unmoved_table_moves_the_moved_one_back(two, tmp_path):
    hook, state = two
    kill_between_tables(tmp_path)
    hook.load_table(B).append(orders_batch(9000, 1))
    with pytest.raises(IcebergCommitConflictError, match="Every table's main is back where it was"):
        publish().execute(fake_context(try_number=2))
    assert hook.ref_snapshot_id(A) == state[A][0]
    assert [r["status"] for r in rows(hook)] == ["prepared", "rolled_back"]


def test_kill_then_commits_on_both_tables_is_refused_naming_each_state(two, tmp_path):
    hook, state = two
    kill_between_tables(tmp_path)
    hook.load_table(A).append(orders_batch(8000, 1))  # on top of the published A
    hook.load_table(B).append(orders_batch(9000, 1))  # B was never published
    heads = mains(hook)
    with pytest.raises(
        IcebergRefusedError, match=r"left part-way(.|\n)*db.orders: main at(.|\n)*IcebergRollbackOperator"
    ):
        publish().execute(fake_context(try_number=2))
    assert mains(hook) == heads, "nothing more was changed"


# ------------------------------------------------------------- REST: one catalog transaction
@pytest.fixture
def rest_two(tmp_path, monkeypatch):
    """Two audited tables on SeaweedFS's Iceberg REST catalog (fresh namespaces per test)."""
    from tests.support.lake import catalog_backend_conn

    conn, ns = catalog_backend_conn("rest", tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", conn)
    hook = IcebergCatalogHook()
    hook.ensure_namespace(ns)
    state = {}
    for i, table in enumerate((f"{ns}.orders", f"{ns}.customers")):
        create_orders_table(hook, table).append(orders_batch(1000 * i, 10))
        base = hook.ref_snapshot_id(table)
        hook.create_branch(table, "b", snapshot_id=base)
        head = commit_to_branch(hook, table, "b", 1000 * i + 100, 5)
        record_audit(hook, table, "b", head, event_id=f"ev-{table}")
        state[table] = (base, head)
    return hook, state


@pytest.mark.rest
def test_rest_catalog_publishes_every_table_in_one_transaction(rest_two):
    hook, state = rest_two
    tables = list(state)
    logs = {t: len(hook.load_table(t).metadata.metadata_log) for t in tables}
    out = IcebergWapMultiPublishOperator(
        task_id="t", tables=audited(hook, tuple(tables)), branch="b", transaction="catalog"
    ).execute(fake_context())
    assert out["method"] == "catalog_transaction"
    assert {t: hook.ref_snapshot_id(t) for t in tables} == {t: state[t][1] for t in tables}
    assert {t: len(hook.load_table(t).metadata.metadata_log) for t in tables} == {t: n + 1 for t, n in logs.items()}
    (row,) = rows(hook)
    assert row["status"] == "succeeded" and {t["table"] for t in row["details"]["tables"]} == set(tables)


@pytest.mark.rest
def test_rest_concurrent_writer_on_one_table_fails_the_whole_transaction(rest_two, monkeypatch):
    from airflow_iceberg_provider.operators import multi_publish

    hook, state = rest_two
    tables = list(state)
    original = multi_publish.commit_ref_changes_together

    def racing(h, plans):
        IcebergCatalogHook().load_table(tables[1]).append(orders_batch(9000, 1))
        return original(h, plans)

    monkeypatch.setattr(multi_publish, "commit_ref_changes_together", racing)
    with pytest.raises(IcebergCommitConflictError, match="applied none of it"):
        IcebergWapMultiPublishOperator(task_id="t", tables=audited(hook, tuple(tables)), branch="b").execute(
            fake_context()
        )
    assert hook.ref_snapshot_id(tables[0]) == state[tables[0]][0], "the other table did not move"
    assert hook.ref_snapshot_id(tables[1]) not in state[tables[1]]
    assert rows(hook) == []


def test_steward_waiver_and_partition_events_per_table(lake):
    """A warn-level failure accepted by a steward for B's snapshot; each table's event names its days."""
    from datetime import UTC, datetime

    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_iceberg_provider.assets.uris import iceberg_asset

    heads = {}
    for i, (table, day) in enumerate(((A, "2026-02-01"), (B, "2026-02-02"))):
        create_orders_table(lake, table).append(orders_batch(1000 * i, 10))
        lake.create_branch(table, "b", snapshot_id=lake.ref_snapshot_id(table))
        lake.load_table(table).append(orders_batch(1000 * i + 100, 5, day=day), branch="b")
        heads[table] = lake.ref_snapshot_id(table, "b")
        record_audit(lake, table, "b", heads[table], passed=table == A, event_id=f"ev-{table}")
    with pytest.raises(IcebergRefusedError, match=r"failed checks \['amount.min'\]"):
        publish().execute(fake_context())
    shown = [{"check": "amount.min", "observed": -1.0, "expected": ">= 0"}]
    details = {
        "gate": "wap_publish",
        "decision": "publish",
        "decided_at": datetime.now(UTC).isoformat(),
        "audit_event_id": f"ev-{B}",
        "spec_hash": audit_of(heads[B])["spec_hash"],
        "branch_head": str(heads[B]),
        "failed_checks": shown,
    }
    lake.governance.record_ledger(
        operation="approval",
        table=B,
        ref="b",
        status="succeeded",
        context=fake_context(),
        snapshot_after=heads[B],
        details={**details, "waived": ["amount.min"]},
    )
    events, assets = OutletEventAccessors(), {t: iceberg_asset(t) for t in (A, B)}
    op = IcebergWapMultiPublishOperator(
        task_id="t", tables=audited(lake), branch="b", outlets=list(assets.values()), partition_events="iceberg"
    )
    op.execute({**fake_context(), "outlet_events": events})
    assert mains(lake) == heads
    assert events[assets[A]].partition_keys == {"2026-02-01"} and events[assets[B]].partition_keys == {"2026-02-02"}
    assert events[assets[B]].extra["snapshot_id"] == str(heads[B])
