"""The publish's two behaviour fixes (#14), on a real SQLite catalog with pyiceberg (no Spark).

1. ``main``, the tag and the dropped branch change in ONE commit with a compare-and-swap
   requirement per ref: the metadata log grows by exactly one entry, and a concurrent change
   between plan and apply fails the whole commit (nothing changed).
2. The publish's tag follows ``IcebergCreateTagOperator``'s rules: a ``legal-hold-`` tag needs a
   case id and is refused by name, and a taken tag name is refused before ``main`` moves.
"""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.rules.refs import RefChange
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.wap import audit_of, commit_to_branch, record_audit

T = "db.orders"


@pytest.fixture
def audited(lake):
    """db.orders with 10 rows on main and an audited branch ``b`` 5 rows ahead; returns (hook, base, head)."""
    create_orders_table(lake, T).append(orders_batch(0, 10))
    base = lake.ref_snapshot_id(T)
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    head = commit_to_branch(lake, T, "b", 100, 5)
    record_audit(lake, T, "b", head)
    return lake, base, head


def metadata_log(hook: IcebergCatalogHook) -> int:
    return len(hook.load_table(T).metadata.metadata_log)


def publish(**kwargs) -> IcebergWapPublishOperator:
    hook = IcebergCatalogHook()
    audit = audit_of(hook.ref_snapshot_id(T, "b"))  # the audit the fixture recorded, of the branch head
    return IcebergWapPublishOperator(task_id="p", table=T, branch="b", audit=audit, **kwargs)


# ------------------------------------------------------------------ fix 1: one commit
def test_publish_with_tag_and_drop_is_exactly_one_commit(audited):
    hook, base, head = audited
    before = metadata_log(hook)
    out = publish(tag="release-1", drop_branch=True).execute(fake_context())
    assert metadata_log(hook) == before + 1, "fast-forward, tag and branch drop must be one metadata commit"
    assert out["method"] == "fast_forward" and out["tag"] == "release-1" and out["branch_dropped"] is True
    refs = hook.refs(T)
    assert refs["main"].snapshot_id == head and refs["release-1"].snapshot_id == head and "b" not in refs
    assert hook.load_table(T).current_snapshot().snapshot_id == head  # moving main moved the current snapshot
    (row,) = hook.governance.read("ledger", operation="wap_publish")
    assert (row["snapshot_before"], row["snapshot_after"]) == (base, head)


def _move_before_apply(monkeypatch, move) -> None:
    """A concurrent writer acts between the publish's plan and its commit (the real commit still runs)."""
    original = IcebergCatalogHook.apply_ref_changes

    def racing(self, table, changes):
        move()
        return original(self, table, changes)

    monkeypatch.setattr(IcebergCatalogHook, "apply_ref_changes", racing)


def test_a_concurrent_move_of_main_fails_the_whole_commit(audited, monkeypatch):
    hook, base, head = audited
    other = IcebergCatalogHook()  # another process's connection
    _move_before_apply(monkeypatch, lambda: other.load_table(T).append(orders_batch(900, 1)))
    with pytest.raises(IcebergCommitConflictError, match="lost against a concurrent change"):
        publish(tag="release-1", drop_branch=True).execute(fake_context())
    refs = hook.refs(T)
    assert refs["main"].snapshot_id not in (base, head), "the other writer's commit stays"
    assert "release-1" not in refs, "no tag without the publish"
    assert refs["b"].snapshot_id == head, "the branch is still there"
    assert not hook.governance.read("ledger", operation="wap_publish")


def test_a_concurrent_move_of_the_dropped_branch_fails_the_whole_commit(audited, monkeypatch):
    """The branch's assertion is not the commit's first one (pyiceberg's Transaction would drop it)."""
    hook, base, head = audited
    other = IcebergCatalogHook()
    _move_before_apply(monkeypatch, lambda: commit_to_branch(other, T, "b", 500, 1))
    with pytest.raises(IcebergCommitConflictError):
        publish(audited_snapshot_id=str(head), tag="release-1", drop_branch=True).execute(fake_context())
    refs = hook.refs(T)
    assert refs["main"].snapshot_id == base and "release-1" not in refs and refs["b"].snapshot_id != head


def test_apply_ref_changes_checks_every_ref_at_the_catalog(audited):
    """Directly on the hook: a stale table object whose plan looks right locally is refused by the catalog."""
    hook, base, head = audited
    stale = hook.load_table(T)
    hook.load_table(T).append(orders_batch(900, 1))  # main moves after the plan's load
    moved = hook.metadata_location(T)
    changes = [RefChange("t", "tag", head, None), RefChange("main", "branch", head, base)]
    with pytest.raises(IcebergCommitConflictError):
        hook.apply_ref_changes(stale, changes)
    assert hook.metadata_location(T) == moved and "t" not in hook.refs(T)
    assert hook.apply_ref_changes(stale, []) is False


# ------------------------------------------------------------------ fix 2: the tag rules
def test_a_legal_hold_tag_is_refused_by_name_and_nothing_changes(audited):
    hook, base, head = audited
    before = hook.metadata_location(T)
    with pytest.raises(IcebergValidationError) as err:
        publish(tag="legal-hold-case-7").execute(fake_context())
    text = str(err.value)
    assert "tag='legal-hold-case-7'" in text, "names the parameter and the value"
    assert "legal-hold prefix" in text and "case id" in text, "says the problem"
    assert "IcebergCreateTagOperator" in text and "without the prefix" in text, "says the fix"
    assert hook.metadata_location(T) == before
    assert hook.ref_snapshot_id(T) == base and hook.ref_snapshot_id(T, "b") == head


def test_a_taken_tag_is_refused_before_main_moves(audited):
    hook, base, head = audited
    hook.create_tag(T, "release-1", snapshot_id=base)
    before = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match=f"'release-1' of {T} already points at snapshot {base}"):
        publish(tag="release-1", drop_branch=True).execute(fake_context())
    assert hook.metadata_location(T) == before and hook.ref_snapshot_id(T) == base
    assert hook.ref_snapshot_id(T, "b") == head
