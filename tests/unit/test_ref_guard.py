"""The ref guard as pure rules (milliseconds): the typed ref value, the decision per verb and kind,
the Spark-side plan builders, the release policy and hold violations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.core.governance import LedgerEntry
from airflow_iceberg_provider.core.ref_guard import (
    RefGuardRefusal,
    RefKind,
    RefState,
    RefVerb,
    ref_change_refusal,
    ref_state,
)
from airflow_iceberg_provider.exceptions import IcebergRefusedError
from airflow_iceberg_provider.models import RefInfo
from airflow_iceberg_provider.rules.refs import (
    RefChange,
    guard_ref_change,
    guard_ref_changes,
    hold_violations,
    kept_types_problems,
    placed_holds,
    release_decision,
)
from airflow_iceberg_provider.spark_jobs.erasure.sql import drop_ref_sql
from airflow_iceberg_provider.spark_jobs.wap_cherrypick import cherrypick_sql

T = "db.orders"
HOLD = "legal-hold-c1"
REFS = {
    "main": RefInfo("main", "branch", 3),
    "dev": RefInfo("dev", "branch", 2),
    "v1": RefInfo("v1", "tag", 2),
    HOLD: RefInfo(HOLD, "tag", 2),
    "legal-hold-broken": RefInfo("legal-hold-broken", "branch", 1),
}


# ------------------------------------------------------------------ the typed value
def test_ref_state_is_built_from_metadata_refs_dicts_and_plain_values():
    assert ref_state(REFS, "main") == RefState("main", RefKind.BRANCH, 3, "branch")
    assert ref_state(REFS, "v1").kind is RefKind.TAG
    assert ref_state(REFS, HOLD) == RefState(HOLD, RefKind.LEGAL_HOLD, 2, "tag")
    assert ref_state(REFS, "nope") == RefState("nope", RefKind.ABSENT)
    # the Spark side's refs metadata table rows
    assert ref_state({"x": {"type": "TAG", "snapshot_id": "7"}}, "x") == RefState("x", RefKind.TAG, 7, "tag")


def test_a_hold_turned_into_a_branch_is_still_a_hold():
    state = ref_state(REFS, "legal-hold-broken")
    assert state.is_hold and state.broken_hold
    assert "stored as a branch" in state.describe()
    assert not ref_state(REFS, HOLD).broken_hold


def test_an_unknown_stored_type_is_refused():
    with pytest.raises(ValueError, match="unknown ref type"):
        RefState.of("x", "view", 1)


# ------------------------------------------------------------------ the decision
EVERY_VERB = list(RefVerb)


@pytest.mark.parametrize("verb", [v for v in EVERY_VERB if v is not RefVerb.RELEASE])
@pytest.mark.parametrize("name", [HOLD, "legal-hold-broken"])
@pytest.mark.parametrize("result_type", ["branch", "tag", None])
def test_a_hold_changes_only_through_its_release(verb, name, result_type):
    state = ref_state(REFS, name)
    reason = ref_change_refusal(verb, state, table=T, param="p", result_type=result_type, snapshot_id=1)
    assert reason is not None
    assert reason.startswith(f"p={name!r}: refusing to {verb.value} legal hold {name!r}")
    assert "release_legal_hold=True" in reason and reason.endswith("Nothing was changed.")


def test_placing_the_same_hold_again_is_allowed_and_nothing_else():
    state = ref_state(REFS, HOLD)
    assert ref_change_refusal("set retention", state, table=T, result_type="tag", snapshot_id=2) is None
    assert ref_change_refusal("create", state, table=T, result_type="tag", snapshot_id=2) is None
    assert ref_change_refusal("create", state, table=T, result_type="tag", snapshot_id=1) is not None
    broken = ref_state(REFS, "legal-hold-broken")
    assert ref_change_refusal("set retention", broken, table=T, result_type="tag", snapshot_id=1) is not None


def test_release_is_for_holds_only():
    assert ref_change_refusal("release", ref_state(REFS, HOLD), table=T) is None
    assert ref_change_refusal("release", ref_state(REFS, "legal-hold-broken"), table=T) is None
    assert ref_change_refusal("release", ref_state(REFS, "gone"), table=T) is None
    reason = ref_change_refusal("release", ref_state(REFS, "v1"), table=T, param="tag")
    assert reason is not None and "only a legal hold is released" in reason and "IcebergDropTagOperator" in reason


@pytest.mark.parametrize("verb", [RefVerb.ROLLBACK, RefVerb.FAST_FORWARD, RefVerb.CHERRY_PICK])
def test_a_tag_never_moves_along_history(verb):
    reason = ref_change_refusal(verb, ref_state(REFS, "v1"), table=T, result_type="branch", snapshot_id=1)
    assert reason is not None and "a tag is a fixed point" in reason and "replace=True" in reason


def test_types_never_swap_and_main_is_never_dropped_or_tagged():
    assert "a branch cannot replace a tag" in ref_change_refusal(
        "move", ref_state(REFS, "v1"), table=T, result_type="branch", snapshot_id=1
    )
    assert "a tag cannot replace a branch" in ref_change_refusal(
        "move", ref_state(REFS, "dev"), table=T, result_type="tag", snapshot_id=1
    )
    assert "main is never dropped" in ref_change_refusal("drop", ref_state(REFS, "main"), table=T)
    assert "a tag cannot replace a branch" in ref_change_refusal(
        "create", ref_state(REFS, "main"), table=T, result_type="tag", snapshot_id=1
    )
    assert "main is always a branch" in ref_change_refusal(
        "create", ref_state({}, "main"), table=T, result_type="tag", snapshot_id=1
    )
    assert "it is a tag, not a branch" in ref_change_refusal(
        "drop", ref_state(REFS, "v1"), table=T, expected_type="branch"
    )


def test_the_hold_prefix_is_reserved_for_tags():
    reason = ref_change_refusal("create", ref_state({}, "legal-hold-new"), table=T, result_type="branch", snapshot_id=1)
    assert reason is not None and "reserved for legal holds" in reason
    assert (
        ref_change_refusal("create", ref_state({}, "legal-hold-new"), table=T, result_type="tag", snapshot_id=1) is None
    )


@pytest.mark.parametrize(
    ("verb", "name", "result_type"),
    [
        ("move", "dev", "branch"),
        ("rollback", "main", "branch"),
        ("fast-forward", "dev", "branch"),
        ("cherry-pick onto", "main", "branch"),
        ("move", "v1", "tag"),
        ("drop", "v1", None),
        ("drop", "dev", None),
        ("drop", "gone", None),
        ("create", "new", "branch"),
        ("set retention", "dev", "branch"),
    ],
)
def test_ordinary_changes_are_allowed(verb, name, result_type):
    assert ref_change_refusal(verb, ref_state(REFS, name), table=T, result_type=result_type, snapshot_id=1) is None


def test_guard_raises_the_providers_refusal_and_returns_the_state():
    with pytest.raises(IcebergRefusedError, match=r"branch='legal-hold-c1': refusing to rollback legal hold"):
        guard_ref_change("rollback", REFS, HOLD, table=T, param="branch", result_type="branch", snapshot_id=1)
    assert (
        guard_ref_change("rollback", REFS, "main", table=T, result_type="branch", snapshot_id=1).kind is RefKind.BRANCH
    )


def test_a_plan_is_refused_whole_when_one_change_is_refused():
    plan = [RefChange("main", "branch", 2, 3), RefChange(HOLD, "tag", None, 2)]
    with pytest.raises(IcebergRefusedError, match="refusing to drop legal hold"):
        guard_ref_changes(REFS, plan, table=T)
    guard_ref_changes(REFS, plan[:1], table=T)
    # an explicit verb is read as such: a release through a plan is refused for a plain tag
    with pytest.raises(IcebergRefusedError, match="only a legal hold is released"):
        guard_ref_changes(REFS, [RefChange("v1", "tag", None, 2, verb="release")], table=T)


def test_kept_types_after_a_commit():
    assert kept_types_problems(REFS, [RefChange("v1", "tag", 5, 2), RefChange("gone", "tag", None, 1)]) == []
    problems = kept_types_problems(REFS, [RefChange(HOLD, "branch", 1, 2), RefChange("dev", "branch", None, 2)])
    assert problems == [f"{HOLD!r} is a tag, not a branch", "'dev' still exists"]


# ------------------------------------------------------------------ the Spark side's plan builders
def test_erasure_drop_builder_refuses_holds_of_any_type_and_main():
    assert drop_ref_sql("lake", T, "v1", "tag").endswith("DROP TAG IF EXISTS `v1`")
    for name, kind in ((HOLD, "tag"), ("legal-hold-x", "branch"), ("main", "branch")):
        with pytest.raises(RefGuardRefusal, match=f"ref_policy={name!r}: refusing to drop"):
            drop_ref_sql("lake", T, name, kind)


def test_cherry_pick_builder_targets_main_and_never_a_hold():
    sql = cherrypick_sql("lake", T, 42, RefState.of("main", "branch", 3))
    assert sql == "CALL `lake`.system.cherrypick_snapshot(table => 'db.orders', snapshot_id => 42)"
    with pytest.raises(RefGuardRefusal, match="refusing to cherry-pick onto legal hold"):
        cherrypick_sql("lake", T, 42, RefState.of(HOLD, "tag", 3))
    with pytest.raises(RefGuardRefusal, match="refusing to cherry-pick onto tag"):
        cherrypick_sql("lake", T, 42, RefState.of("v1", "tag", 3))
    with pytest.raises(RefGuardRefusal, match="acts on main only"):
        cherrypick_sql("lake", T, 42, RefState.of("dev", "branch", 3))


# ------------------------------------------------------------------ placements and violations
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _entry(op, ref, at, *, snapshot=None, status="succeeded", **details):
    return LedgerEntry(
        event_id=f"{op}-{ref}-{at}",
        operation=op,
        status=status,
        table_name=T,
        ref=ref,
        finished_at=NOW + timedelta(minutes=at),
        snapshot_after=snapshot,
        details=details,
    )


def test_placed_holds_follow_placements_and_releases_in_time_order():
    entries = [
        _entry("drop_tag", HOLD, 5, legal_hold_released=True),
        _entry("create_tag", HOLD, 1, snapshot=2, legal_hold=True, case_id="C-1", requires_approval=True),
        _entry("create_tag", "legal-hold-c2", 2, snapshot=2, legal_hold=True, case_id="C-2"),
        _entry("create_tag", "legal-hold-c3", 3, snapshot=2, status="refused", legal_hold=True, case_id="C-3"),
        _entry("create_tag", "v1", 3, snapshot=2, legal_hold=False),
        _entry("drop_tag", "legal-hold-c2", 4),  # a drop that is not a release: the hold stays recorded
    ]
    placed = placed_holds(entries)
    assert list(placed) == ["legal-hold-c2"]
    hold = placed["legal-hold-c2"]
    assert (hold.snapshot_id, hold.case_id, hold.requires_approval) == (2, "C-2", False)
    assert placed_holds(entries[1:2])[HOLD].requires_approval is True


def test_hold_violations_name_dropped_retyped_and_moved_holds():
    placed = placed_holds(
        [
            _entry("create_tag", HOLD, 1, snapshot=2, legal_hold=True, case_id="C-1"),
            _entry("create_tag", "legal-hold-broken", 1, snapshot=2, legal_hold=True, case_id="C-2"),
            _entry("create_tag", "legal-hold-gone", 1, snapshot=2, legal_hold=True, case_id="C-3"),
            _entry("create_tag", "legal-hold-moved", 1, snapshot=2, legal_hold=True, case_id="C-4"),
        ]
    )
    refs = {**REFS, "legal-hold-moved": RefInfo("legal-hold-moved", "tag", 3)}
    found = {v.tag: v for v in hold_violations(placed, refs)}
    assert {t: v.problem for t, v in found.items()} == {
        "legal-hold-broken": "turned into a branch",
        "legal-hold-gone": "dropped",
        "legal-hold-moved": "moved",
    }
    text = found["legal-hold-gone"].describe(T)
    assert "case C-3" in text and "without a release" in text and "IcebergCreateTagOperator(legal_hold=True" in text


# ------------------------------------------------------------------ the release policy
def _decision(event_id, *, decision="approved", ref=HOLD, snapshot=2, case="C-1", at="2026-12-01T10:00:00+00:00"):
    return {
        "event_id": event_id,
        "ref": ref,
        "snapshot_id": snapshot,
        "gate": "legal_hold_release",
        "decision": decision,
        "case_id": case,
        "decided_at": at,
    }


def _release(decisions, *, hold_requires=True, connection_requires=False):
    return release_decision(
        table=T,
        tag=HOLD,
        snapshot_id=2,
        case_id="C-1",
        hold_requires=hold_requires,
        connection_requires=connection_requires,
        decisions=decisions,
    )


def test_no_policy_needs_no_approval():
    out = _release([], hold_requires=False)
    assert (out.required, out.policy, out.approval_id) == (False, "none", None)


def test_a_bound_approval_releases_and_is_named():
    out = _release([_decision("a1")])
    assert (out.required, out.policy, out.approval_id) == (True, "hold", "a1")
    assert _release([_decision("a2")], hold_requires=False, connection_requires=True).policy == "connection"


@pytest.mark.parametrize(
    "decisions",
    [
        [],  # no gate, or a gate marked success by hand: no row
        [_decision("r1", decision="rejected")],
        [_decision("o1", case="C-9")],
        [_decision("o2", snapshot=1)],
        [_decision("o3", ref="legal-hold-other")],
        [_decision("a1"), _decision("r2", decision="rejected", at="2026-12-01T11:00:00+00:00")],
    ],
    ids=["none", "rejected", "other-case", "other-snapshot", "other-hold", "approved-then-rejected"],
)
def test_without_a_bound_approval_the_release_is_refused(decisions):
    with pytest.raises(IcebergRefusedError, match=r"release_legal_hold=True for tag='legal-hold-c1'") as err:
        _release(decisions)
    assert "IcebergRefApprovalOperator" in str(err.value) and str(err.value).endswith("Nothing was changed.")


def test_a_retyped_hold_is_still_protected_from_expiry_by_age_and_from_the_erasure_drop():
    from airflow_iceberg_provider.core.erasure_lifecycle import analyze_refs, decide_policy
    from airflow_iceberg_provider.spark_jobs.maintenance_sql import holds_dropped_by_age

    refs = [
        {"name": "main", "type": "branch", "snapshot_id": 2, "max_ref_age_ms": None},
        {"name": "legal-hold-x", "type": "branch", "snapshot_id": 1, "max_ref_age_ms": None},
    ]
    assert holds_dropped_by_age(refs, {1: 1_000, 2: 2_000}, default_max_ref_age_ms=100, now_ms=5_000) == [
        "legal-hold-x"
    ]
    snapshots = [{"snapshot_id": 1, "parent_id": None, "timestamp_ms": 1_000}, {"snapshot_id": 2, "parent_id": 1}]
    analysis = analyze_refs(
        refs,
        snapshots,
        holds={"legal-hold-x": True},
        live_rows={"legal-hold-x": 0},
        table_had_subjects=True,
        now_ms=5_000,
    )
    held = next(a for a in analysis if a["name"] == "legal-hold-x")
    assert held["legal_hold"] is True and held["droppable"] is False and held["blocking"] is True
    decision = decide_policy(analysis, "drop")
    assert decision["drop"] == [] and "legal-hold-x" in decision["refuse"]
