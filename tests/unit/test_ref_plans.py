"""_ref_logic.plan_branch / rollback_target: the branch and rollback rules the catalog hook applies (pure, ms)."""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.exceptions import IcebergRefNotFoundError, IcebergRefusedError
from airflow_iceberg_provider.models import RefInfo, SnapshotInfo
from airflow_iceberg_provider.rules.refs import RefChange, plan_branch, rollback_target

KEEP = {"max_ref_age_ms": None, "max_snapshot_age_ms": None, "min_snapshots_to_keep": 3}
CHAIN = [SnapshotInfo(i, i - 1 if i > 1 else None, 1000 * i, "append") for i in (1, 2, 3)]
REFS = {"main": RefInfo("main", "branch", 3), "v1": RefInfo("v1", "tag", 2), "side": RefInfo("side", "branch", 9)}


def test_plan_branch_outcomes():
    assert plan_branch(None, "dev", 1, KEEP, table="db.t", descends=False) == (
        "created",
        RefChange("dev", "branch", 1, None, None, None, 3),
    )
    same = RefInfo("dev", "branch", 3, min_snapshots_to_keep=3)
    assert plan_branch(same, "dev", 1, KEEP, table="db.t", descends=True) == ("exists", None)
    other = RefInfo("dev", "branch", 3, min_snapshots_to_keep=5)
    outcome, change = plan_branch(other, "dev", 1, KEEP, table="db.t", descends=True)
    assert outcome == "retention_updated" and (change.snapshot_id, change.expected_snapshot_id) == (3, 3)
    outcome, change = plan_branch(other, "dev", 1, KEEP, table="db.t", descends=False, replace=True)
    assert outcome == "replaced" and (change.snapshot_id, change.expected_snapshot_id) == (1, 3)


def test_plan_branch_refusals_name_the_fix():
    with pytest.raises(IcebergRefusedError, match="already has a tag named 'v1'"):
        plan_branch(RefInfo("v1", "tag", 2), "v1", 1, KEEP, table="db.t", descends=True)
    with pytest.raises(IcebergRefusedError, match="does not descend from 1.*Pass replace=True"):
        plan_branch(RefInfo("dev", "branch", 9), "dev", 1, KEEP, table="db.t", descends=False)


def _target(**kw):
    return rollback_target(CHAIN, REFS, table="db.t", ref="main", known_ids={1, 2, 3, 9}, **kw)


def test_rollback_target_by_id_tag_and_time():
    assert _target(snapshot_id="1").snapshot_id == 1
    assert _target(tag="v1").snapshot_id == 2
    assert _target(as_of_ms=2500).snapshot_id == 2


def test_rollback_target_refusals():
    with pytest.raises(ValueError, match="exactly one"):
        _target(snapshot_id=1, tag="v1")
    with pytest.raises(IcebergRefusedError, match="not an ancestor of the head 3"):
        _target(snapshot_id=9)
    with pytest.raises(IcebergRefNotFoundError, match="Snapshot 7 does not exist"):
        _target(snapshot_id=7)
    with pytest.raises(IcebergRefNotFoundError, match="existing tags: \\['v1'\\]"):
        _target(tag="nope")
    with pytest.raises(IcebergRefusedError, match="no ancestor committed at or before 10 ms"):
        _target(as_of_ms=10)
    with pytest.raises(IcebergRefNotFoundError, match="no 'main' with snapshots"):
        rollback_target([], REFS, table="db.t", ref="main", known_ids=set(), snapshot_id=1)
