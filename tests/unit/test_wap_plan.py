"""Pure WAP plans (``_wap_refs``) and the tag rules (``_ref_logic``): every outcome and refusal, in milliseconds.

No catalog: snapshots and refs are plain values, as the operators' resolve step reads them.
History used by most tests::

    main:  1 <- 2                (main head 2)
    b:          2 <- 3 <- 4      (branch b cut at 2, audited head 4)
"""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.core.governance import LEGAL_HOLD_MAX_REF_AGE_MS
from airflow_iceberg_provider.exceptions import (
    IcebergPublishConflictError,
    IcebergRefNotFoundError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.models import RefInfo, SnapshotInfo
from airflow_iceberg_provider.rules import wap_rerun as rerun
from airflow_iceberg_provider.rules.refs import RefChange, check_tag_name, plan_tag
from airflow_iceberg_provider.rules.wap_refs import (
    PublishState,
    ancestry,
    audit_target,
    audited_snapshot,
    branch_snapshots,
    cherrypick_missing,
    merge_base,
    plan_audit,
    plan_branch_reset,
    plan_create_branch,
    plan_publish,
    write_base,
)

T = "db.orders"


def snap(sid: int, parent: int | None, operation: str = "append", rows: int = 5, **summary: str) -> SnapshotInfo:
    return SnapshotInfo(sid, parent, 1_000 * sid, operation, {"added-records": str(rows), **summary})


def history(*extra: SnapshotInfo) -> dict[int, SnapshotInfo]:
    snaps = [snap(1, None), snap(2, 1), snap(3, 2), snap(4, 3), *extra]
    return {s.snapshot_id: s for s in snaps}


def refs(main: int | None = 2, b: int | None = 4, **more: RefInfo) -> dict[str, RefInfo]:
    out = {"main": RefInfo("main", "branch", main, max_snapshot_age_ms=86_400_000)} if main is not None else {}
    if b is not None:
        out["b"] = RefInfo("b", "branch", b)
    return {**out, **more}


def state(by_id=None, the_refs=None, audited: int = 4, base: int | None = None) -> PublishState:
    return PublishState(T, "b", audited, the_refs if the_refs is not None else refs(), by_id or history(), base)


# ------------------------------------------------------------------ history helpers
def test_ancestry_merge_base_and_branch_snapshots():
    by_id = history(snap(5, 2))
    assert ancestry(by_id, 4) == [4, 3, 2, 1] and ancestry(by_id, None) == []
    assert merge_base(by_id, 4, 5) == 2 and merge_base(by_id, 4, None) is None
    assert [s.snapshot_id for s in branch_snapshots(by_id, 4, 2)] == [3, 4]
    with pytest.raises(IcebergRefusedError, match="does not descend from the branch base 5"):
        branch_snapshots(by_id, 4, 5)


# ------------------------------------------------------------------ publish outcomes
def test_fast_forward_moves_main_with_compare_and_swap_and_keeps_its_retention():
    plan = plan_publish(state())
    assert (plan.action, plan.published, plan.main_head, plan.base) == ("fast_forward", 4, 2, 2)
    assert plan.changes == (RefChange("main", "branch", 4, 2, max_snapshot_age_ms=86_400_000),)
    assert plan.metrics["added_records"] == 10 and plan.metrics["snapshots"] == 2
    assert plan.result()["method"] == "fast_forward" and plan.result()["published"] is True


def test_fast_forward_with_tag_and_drop_is_one_change_set():
    plan = plan_publish(state(), tag="daily-1", drop_branch=True)
    assert [(c.ref, c.ref_type, c.snapshot_id, c.expected_snapshot_id) for c in plan.changes] == [
        ("main", "branch", 4, 2),
        ("daily-1", "tag", 4, None),  # the tag must not exist yet
        ("b", "branch", None, 4),  # the branch is dropped only if it is still where it was audited
    ]
    assert (
        plan.tag_outcome == "created" and plan.result()["branch_dropped"] is True and plan.result()["tag"] == "daily-1"
    )


def test_first_publish_to_an_empty_main():
    plan = plan_publish(state(the_refs=refs(main=None)))
    assert plan.action == "fast_forward" and plan.changes == (RefChange("main", "branch", 4, None),)


def test_noop_when_the_audited_snapshot_is_on_main_still_tags_and_drops():
    plan = plan_publish(state(the_refs=refs(main=4)))
    assert (plan.action, plan.published, plan.changes) == ("noop", 4, ())
    assert plan.result()["published"] is False and not plan.moves_main
    tagged = RefInfo("daily-1", "tag", 4)
    retry = plan_publish(state(the_refs=refs(main=4, **{"daily-1": tagged})), tag="daily-1", drop_branch=True)
    assert retry.tag_outcome == "exists" and retry.changes == (RefChange("b", "branch", None, 4),)
    gone = plan_publish(state(the_refs=refs(main=4, b=None)), tag="daily-1", drop_branch=True)
    assert gone.changes == (RefChange("daily-1", "tag", 4, None),) and gone.drop_branch is False


def test_noop_when_every_branch_snapshot_was_cherry_picked():
    by_id = history(snap(5, 2, **{"source-snapshot-id": "3"}), snap(6, 5, **{"source-snapshot-id": "4"}))
    plan = plan_publish(state(by_id, refs(main=6)))
    assert (plan.action, plan.published) == ("noop", 6)


def test_main_moved_is_refused_by_default():
    with pytest.raises(IcebergPublishConflictError, match=r"main moved since the branch was cut \(main is at 5"):
        plan_publish(state(history(snap(5, 2)), refs(main=5)))


def test_cherrypick_plans_the_job_then_the_tag_and_drop_on_the_new_head():
    plan = plan_publish(state(history(snap(5, 2)), refs(main=5)), on_conflict="cherrypick", tag="t", drop_branch=True)
    assert (plan.action, plan.cherrypick_ids, plan.changes, plan.published) == ("cherrypick", (3, 4), (), None)
    after = plan.after_cherrypick(9)
    assert after.published == 9 and after.changes == (RefChange("t", "tag", 9, None), RefChange("b", "branch", None, 4))
    # only the snapshots not yet replayed are picked again
    partly = history(snap(5, 2), snap(6, 5, **{"source-snapshot-id": "3"}))
    assert plan_publish(state(partly, refs(main=6)), on_conflict="cherrypick").cherrypick_ids == (4,)


def test_cherrypick_refusals():
    by_id = history(snap(5, 2))
    by_id[4] = snap(4, 3, operation="overwrite")
    with pytest.raises(IcebergPublishConflictError, match=r"non-append snapshots \[\(4, 'overwrite'\)\]"):
        plan_publish(state(by_id, refs(main=5)), on_conflict="cherrypick")
    taken = refs(main=5, t=RefInfo("t", "tag", 1))
    with pytest.raises(IcebergRefusedError, match="already has a tag 't' at 1.*Nothing was changed"):
        plan_publish(state(history(snap(5, 2)), taken), on_conflict="cherrypick", tag="t")


def test_cherrypick_verification():
    plan = plan_publish(state(history(snap(5, 2)), refs(main=5)), on_conflict="cherrypick")
    done = history(snap(5, 2), snap(6, 5, **{"source-snapshot-id": "3"}), snap(7, 6, **{"source-snapshot-id": "4"}))
    assert cherrypick_missing(plan, done, 7) == ([], True)
    assert cherrypick_missing(plan, done, 6) == ([4], True)
    assert cherrypick_missing(plan, done, 4) == ([], False)  # main no longer descends from its old head 5


def test_another_run_published_the_interval_after_the_branch_was_cut():
    ident = rerun.RunIdentity("daily", "run2", "g.publish", 1, interval_start="a", interval_end="b", group="g")
    other = {rerun.KEY_INTERVAL: ident.interval_key, rerun.KEY_RUN: "run1", rerun.KEY_TRY: "1"}
    the_state = state(history(snap(5, 2, **other)), refs(main=5))
    refused = plan_publish(the_state, identity=ident, on_conflict="cherrypick")
    assert refused.action == "refuse" and refused.race.action == "refuse" and "run1" in refused.message
    skipped = plan_publish(the_state, identity=ident, on_rerun="skip")
    assert skipped.action == "skip" and skipped.changes == ()
    other_interval = rerun.RunIdentity("daily", "run2", "g.publish", 1, interval_start="x", interval_end="y", group="g")
    with pytest.raises(IcebergPublishConflictError):  # not a re-run: the ordinary conflict
        plan_publish(the_state, identity=other_interval)


# ------------------------------------------------------------------ tag rules
def test_publish_tag_refusals_happen_at_plan_time():
    with pytest.raises(IcebergRefusedError, match="'t' of db.orders already points at snapshot 1"):
        plan_publish(state(the_refs=refs(t=RefInfo("t", "tag", 1))), tag="t")
    with pytest.raises(IcebergRefusedError, match="already has a branch named 'b'"):
        plan_publish(state(), tag="b")


def test_tag_name_rule_is_shared_with_the_create_tag_operator():
    assert check_tag_name(" release-1 ".strip()) == "release-1"
    with pytest.raises(IcebergValidationError) as err:
        check_tag_name("legal-hold-case-1", "tag")
    text = str(err.value)
    assert "tag='legal-hold-case-1'" in text and "legal-hold prefix" in text and "case_id" in text
    assert check_tag_name("case-1", legal_hold=True, case_id="C-1") == "legal-hold-case-1"
    with pytest.raises(IcebergValidationError, match="requires case_id"):
        check_tag_name("case-1", legal_hold=True, case_id=" ")
    with pytest.raises(IcebergValidationError, match="main"):
        check_tag_name("main")


def test_plan_tag_outcomes():
    assert plan_tag(None, "t", 4, 1000, table=T) == ("created", RefChange("t", "tag", 4, None, max_ref_age_ms=1000))
    assert plan_tag(RefInfo("t", "tag", 4, 1000), "t", 4, 1000, table=T) == ("exists", None)
    assert plan_tag(RefInfo("t", "tag", 3), "t", 4, table=T, replace=True)[0] == "replaced"
    hold = "legal-hold-c"
    pinned = plan_tag(RefInfo(hold, "tag", 4), hold, 4, table=T)
    assert pinned == ("hold_pinned", RefChange(hold, "tag", 4, 4, max_ref_age_ms=LEGAL_HOLD_MAX_REF_AGE_MS))
    with pytest.raises(IcebergRefusedError, match="a hold is never moved"):
        plan_tag(RefInfo(hold, "tag", 3, LEGAL_HOLD_MAX_REF_AGE_MS), hold, 4, table=T, replace=True)
    with pytest.raises(IcebergValidationError, match="must never expire"):
        plan_tag(None, hold, 4, 1000, table=T)


# ------------------------------------------------------------------ audit gate
def test_audited_snapshot_rules():
    by_id = history()
    assert audited_snapshot(T, "b", refs()["b"], None, by_id) == 4
    assert audited_snapshot(T, "b", None, 3, by_id) == 3  # dropped branch: the given id
    with pytest.raises(IcebergRefusedError, match="is a tag, not a WAP branch"):
        audited_snapshot(T, "b", RefInfo("b", "tag", 4), None, by_id)
    with pytest.raises(IcebergRefNotFoundError, match="no branch 'b' to publish"):
        audited_snapshot(T, "b", None, None, by_id)
    with pytest.raises(IcebergRefNotFoundError, match="Snapshot 42 does not exist"):
        audited_snapshot(T, "b", refs()["b"], 42, by_id)
    with pytest.raises(IcebergRefusedError, match="moved after its audit: it is at 4, the audit passed snapshot 3"):
        audited_snapshot(T, "b", refs()["b"], 3, by_id)


# ------------------------------------------------------------------ create branch
def test_plan_create_branch():
    by_id = history()
    created = plan_create_branch(T, "new", refs(), by_id, 2)
    assert (created.action, created.base, created.changes) == ("create", 2, (RefChange("new", "branch", 2, None),))
    exists = plan_create_branch(T, "b", refs(), by_id, 2)
    assert (exists.action, exists.base, exists.changes) == ("exists", 2, ())
    assert plan_create_branch(T, "new", {}, {}, None).action == "deferred"
    with pytest.raises(IcebergRefusedError, match="tag named 't'"):
        plan_create_branch(T, "t", refs(t=RefInfo("t", "tag", 2)), by_id, 2)
    with pytest.raises(IcebergRefNotFoundError, match="Snapshot 42"):
        plan_create_branch(T, "new", refs(), by_id, 42)


# ------------------------------------------------------------------ write and audit
def test_write_base_and_branch_reset():
    by_id = history(snap(5, 2))
    assert write_base(by_id, 3, 4, 5) == 3  # given
    assert write_base(by_id, None, 4, 5) == 2  # where the branch meets main
    assert write_base(by_id, None, None, 5) == 5  # no branch yet: main's head
    assert plan_branch_reset(T, "b", None, 2, by_id) == (RefChange("b", "branch", 2, None),)  # pin before Spark
    assert plan_branch_reset(T, "b", None, None, by_id) == ()
    assert plan_branch_reset(T, "b", RefInfo("b", "branch", 2), 2, by_id) == ()
    kept = RefInfo("b", "branch", 4, max_snapshot_age_ms=86_400_000)
    assert plan_branch_reset(T, "b", kept, 2, by_id) == (
        RefChange("b", "branch", 2, 4, max_snapshot_age_ms=86_400_000),  # CAS on the old head, retention kept
    )
    assert plan_branch_reset(T, "b", kept, None, by_id) == (RefChange("b", "branch", None, 4),)
    with pytest.raises(IcebergRefusedError, match="does not descend from the base 5"):
        plan_branch_reset(T, "b", kept, 5, by_id)
    with pytest.raises(IcebergRefusedError, match="tag named 'b'"):
        plan_branch_reset(T, "b", RefInfo("b", "tag", 4), 2, by_id)


def test_audit_target_and_plan():
    by_id = history()
    assert audit_target(T, "b", refs(), None, by_id) == 4 and audit_target(T, "b", refs(), 3, by_id) == 3
    with pytest.raises(IcebergRefNotFoundError, match=r"no branch 'x' to audit.*refs: \['b', 'main'\]"):
        audit_target(T, "x", refs(), None, by_id)
    with pytest.raises(IcebergRefusedError, match="Snapshot 42 is not on branch 'b'"):
        audit_target(T, "b", refs(), 42, by_id)
    snaps = branch_snapshots(by_id, 4, 2)
    plan = plan_audit(4, 2, 2, snaps, wants_ratio=True, baseline=5)
    assert plan.change_values == {"change.added_rows": 10, "change.added_rows_ratio": 2.0} and plan.skipped == {}
    first = plan_audit(4, 2, 2, snaps, wants_ratio=True, baseline=None)
    assert "change.added_rows_ratio" in first.skipped and "change.added_rows_ratio" not in first.change_values
    assert plan_audit(4, 2, 2, snaps, wants_ratio=False, baseline=None).skipped == {}
