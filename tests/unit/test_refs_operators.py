"""Tag / branch / rollback / commit-check operators on real SQLite catalogs (no JVM).

Every operator: happy path, idempotent retry, and refusals that leave the table's
metadata location unchanged.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pendulum
import pytest

from airflow_iceberg_provider.core.governance import LEGAL_HOLD_MAX_REF_AGE_MS
from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergCommitVerificationError,
    IcebergRefNotFoundError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.operators.refs import (
    IcebergCommitCheckOperator,
    IcebergCreateBranchOperator,
    IcebergCreateTagOperator,
    IcebergDropBranchOperator,
    IcebergDropTagOperator,
    IcebergRollbackOperator,
)
from tests.support.lake import append_batches, create_orders_table, fake_context

T = "db.orders"
DAY_MS = 86_400_000


@pytest.fixture
def table(lake):
    """db.orders with three appends; returns (hook, [s1, s2, s3])."""
    create_orders_table(lake, T)
    return lake, append_batches(lake, T, 3)


def ledger(hook, **equals):
    rows = hook.governance.read("ledger", table_name=T, **equals)
    for r in rows:
        r["details"] = json.loads(r["details"] or "{}")
    return sorted(rows, key=lambda r: r["finished_at"])


def unchanged(hook, before):
    assert hook.metadata_location(T) == before


# ----------------------------------------------------------------- create tag
def test_create_tag_on_head_with_templated_name_and_retention(table):
    hook, snaps = table
    op = IcebergCreateTagOperator(
        task_id="tag", table=T, tag="eod_{{ ds_nodash }}", max_ref_age=pendulum.duration(days=90)
    )
    ctx = fake_context(dag_id="refs", run_id="r1", task_id="tag")
    op.render_template_fields(ctx)
    assert op.tag == "eod_20260101"
    out = op.execute(ctx)
    assert out == {
        "table": T,
        "tag": "eod_20260101",
        "snapshot_id": str(snaps[-1]),
        "outcome": "created",
        "max_ref_age_ms": 90 * DAY_MS,
        "legal_hold": False,
    }
    ref = hook.refs(T)["eod_20260101"]
    assert (ref.type, ref.snapshot_id, ref.max_ref_age_ms) == ("tag", snaps[-1], 90 * DAY_MS)
    (row,) = ledger(hook, operation="create_tag")
    assert (row["status"], row["ref"], row["snapshot_after"]) == ("succeeded", "eod_20260101", snaps[-1])
    assert (row["dag_id"], row["run_id"], row["task_id"]) == ("refs", "r1", "tag")


def test_create_tag_on_given_snapshot_and_retry_is_idempotent(table):
    hook, snaps = table
    op = IcebergCreateTagOperator(task_id="t", table=T, tag="release-1.0", snapshot_id=str(snaps[0]), max_ref_age="P7D")
    assert op.execute(fake_context())["outcome"] == "created"
    loc = hook.metadata_location(T)
    retry = op.execute(fake_context(try_number=2))
    assert (retry["outcome"], retry["snapshot_id"]) == ("exists", str(snaps[0]))
    unchanged(hook, loc)  # no commit on retry
    assert [r["status"] for r in ledger(hook, operation="create_tag")] == ["succeeded", "noop"]


def test_create_tag_pointing_elsewhere_is_refused_unless_replace(table):
    hook, snaps = table
    IcebergCreateTagOperator(task_id="t", table=T, tag="v1", snapshot_id=snaps[0]).execute(fake_context())
    loc = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match=rf"'v1' .* already points at snapshot {snaps[0]}.*replace=True"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="v1").execute(fake_context())
    unchanged(hook, loc)
    assert hook.refs(T)["v1"].snapshot_id == snaps[0]
    assert ledger(hook, operation="create_tag")[-1]["status"] == "refused"
    out = IcebergCreateTagOperator(task_id="t", table=T, tag="v1", replace=True).execute(fake_context())
    assert (out["outcome"], hook.refs(T)["v1"].snapshot_id) == ("replaced", snaps[-1])


def test_create_tag_refusals_change_nothing(table):
    hook, snaps = table
    IcebergCreateBranchOperator(task_id="b", table=T, branch="exp").execute(fake_context())
    loc = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="already has a branch named 'exp'"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="exp", replace=True).execute(fake_context())
    with pytest.raises(IcebergRefNotFoundError, match="Snapshot 12345 does not exist"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="x", snapshot_id=12345).execute(fake_context())
    with pytest.raises(IcebergValidationError, match="max_ref_age=.*must be positive"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="x", max_ref_age=timedelta(seconds=-1)).execute(
            fake_context()
        )
    with pytest.raises(IcebergValidationError, match="not a valid ref name"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="bad tag; drop").execute(fake_context())
    with pytest.raises(IcebergValidationError, match="names the main branch"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="main").execute(fake_context())
    unchanged(hook, loc)


@pytest.mark.parametrize("rendered", ["None", "null", ""])
def test_snapshot_id_rendered_to_nothing_is_refused_not_taken_as_head(table, rendered):
    """One unset rule (params.is_unset), but a tag/hold/branch whose snapshot_id template rendered
    to nothing must not silently land on the head of ``ref``: refused by name, nothing changed."""
    hook, _ = table
    loc = hook.metadata_location(T)
    hold = dict(legal_hold=True, case_id="CASE-9", hold_reason="litigation")
    for op in (
        IcebergCreateTagOperator(task_id="t", table=T, tag="release-1", snapshot_id=rendered),
        IcebergCreateTagOperator(task_id="h", table=T, tag="case-9", snapshot_id=rendered, **hold),
        IcebergCreateBranchOperator(task_id="b", table=T, branch="exp", snapshot_id=rendered),
    ):
        with pytest.raises(IcebergValidationError, match=r"snapshot_id=.* rendered to nothing .*leave snapshot_id out"):
            op.execute(fake_context())
    unchanged(hook, loc)
    assert set(hook.refs(T)) == {"main"}


def test_create_tag_on_empty_table_is_refused(lake):
    create_orders_table(lake, T)
    loc = lake.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="no snapshot on 'main' yet"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="v0").execute(fake_context())
    unchanged(lake, loc)


# ------------------------------------------------------------------ legal hold
def test_legal_hold_prefixes_records_case_and_is_listed(table):
    hook, snaps = table
    op = IcebergCreateTagOperator(
        task_id="hold",
        table=T,
        tag="case-{{ ds_nodash }}",
        snapshot_id=snaps[1],
        legal_hold=True,
        case_id="LIT-2026-017",
        hold_reason="litigation hold requested by counsel",
    )
    ctx = fake_context(dag_id="legal", run_id="r9", task_id="hold")
    op.render_template_fields(ctx)
    out = op.execute(ctx)
    assert (out["tag"], out["legal_hold"]) == ("legal-hold-case-20260101", True)
    IcebergCreateTagOperator(task_id="eod", table=T, tag="eod").execute(fake_context())  # not a hold
    (hold,) = hook.governance.legal_holds(T)
    # #16: a hold carries its own never-expiring max-ref-age, so history.expire.max-ref-age-ms cannot drop it
    assert (hold["name"], hold["snapshot_id"], hold["max_ref_age_ms"], hold["never_expires"]) == (
        "legal-hold-case-20260101",
        snaps[1],
        LEGAL_HOLD_MAX_REF_AGE_MS,
        True,
    )
    assert hold["details"]["case_id"] == "LIT-2026-017"
    assert hold["details"]["reason"] == "litigation hold requested by counsel"
    assert (hold["details"]["dag_id"], hold["details"]["run_id"]) == ("legal", "r9")


def test_legal_hold_listed_without_ledger_record(table):
    hook, snaps = table
    hook.set_ref(T, "legal-hold-external", snaps[0], ref_type="tag")  # placed by another tool
    (hold,) = hook.governance.legal_holds(T)
    assert (hold["name"], hold["snapshot_id"], hold["details"]) == ("legal-hold-external", snaps[0], None)


def test_legal_hold_rules():
    with pytest.raises(IcebergValidationError, match="requires case_id"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="x", legal_hold=True)
    with pytest.raises(IcebergValidationError, match="must not expire"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="x", legal_hold=True, case_id="c", max_ref_age="P1D")
    with pytest.raises(IcebergValidationError, match="never moved"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="x", legal_hold=True, case_id="c", replace=True)


def test_hold_prefix_without_legal_hold_and_drop_of_hold_are_refused(table):
    hook, snaps = table
    with pytest.raises(IcebergValidationError, match="legal-hold prefix"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="legal-hold-sneaky").execute(fake_context())
    IcebergCreateTagOperator(task_id="h", table=T, tag="c1", legal_hold=True, case_id="C-1").execute(fake_context())
    loc = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="a legal hold changes only through its release"):
        IcebergDropTagOperator(task_id="d", table=T, tag="legal-hold-c1").execute(fake_context())
    unchanged(hook, loc)
    out = IcebergDropTagOperator(
        task_id="d", table=T, tag="legal-hold-c1", release_legal_hold=True, release_reason="case closed"
    ).execute(fake_context())
    assert out["dropped"] and hook.governance.legal_holds(T) == []
    row = ledger(hook, operation="drop_tag")[-1]
    assert (row["status"], row["details"]["legal_hold_released"], row["details"]["release_reason"]) == (
        "succeeded",
        True,
        "case closed",
    )


# ---------------------------------------------------------------- drop refs
def test_drop_tag_and_branch_idempotent(table):
    hook, snaps = table
    IcebergCreateTagOperator(task_id="t", table=T, tag="v1").execute(fake_context())
    IcebergCreateBranchOperator(task_id="b", table=T, branch="exp").execute(fake_context())
    out = IcebergDropTagOperator(task_id="d", table=T, tag="v1").execute(fake_context())
    assert out == {"table": T, "tag": "v1", "dropped": True, "snapshot_id": str(snaps[-1])}
    loc = hook.metadata_location(T)
    again = IcebergDropTagOperator(task_id="d", table=T, tag="v1").execute(fake_context())
    assert again["dropped"] is False
    unchanged(hook, loc)
    assert IcebergDropBranchOperator(task_id="d", table=T, branch="exp").execute(fake_context())["dropped"]
    assert not IcebergDropBranchOperator(task_id="d", table=T, branch="exp").execute(fake_context())["dropped"]
    assert set(hook.refs(T)) == {"main"}


def test_drop_refuses_main_and_wrong_type(table):
    hook, snaps = table
    with pytest.raises(IcebergValidationError, match="names the main branch"):
        IcebergDropBranchOperator(task_id="d", table=T, branch="main")
    op = IcebergDropBranchOperator(task_id="d", table=T, branch="{{ params.b }}")
    op.branch = "main"  # as if rendered
    with pytest.raises(IcebergValidationError, match="names the main branch"):
        op.execute(fake_context())
    IcebergCreateTagOperator(task_id="t", table=T, tag="v1").execute(fake_context())
    loc = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="branch='v1': refusing to drop tag 'v1'.*it is a tag, not a branch"):
        IcebergDropBranchOperator(task_id="d", table=T, branch="v1").execute(fake_context())
    unchanged(hook, loc)


# ------------------------------------------------------------- create branch
def test_create_branch_with_retention_and_idempotency(table):
    hook, snaps = table
    op = IcebergCreateBranchOperator(
        task_id="b",
        table=T,
        branch="ml_train_{{ ds_nodash }}",
        snapshot_id=snaps[1],
        min_snapshots_to_keep="5",
        max_snapshot_age=timedelta(days=7),
        max_ref_age="P30D",
    )
    op.render_template_fields(fake_context())
    out = op.execute(fake_context())
    assert (out["branch"], out["snapshot_id"], out["outcome"]) == ("ml_train_20260101", str(snaps[1]), "created")
    ref = hook.refs(T)["ml_train_20260101"]
    assert (ref.type, ref.min_snapshots_to_keep, ref.max_snapshot_age_ms, ref.max_ref_age_ms) == (
        "branch",
        5,
        7 * DAY_MS,
        30 * DAY_MS,
    )
    # the branch advances (a training job writes to it); a retry must not move it back
    tbl = hook.load_table(T)
    from tests.support.lake import orders_batch

    tbl.append(orders_batch(1000, 5), branch="ml_train_20260101")
    head = hook.ref_snapshot_id(T, "ml_train_20260101")
    # pyiceberg's branch append drops the ref's retention; a re-run puts it back on the head
    assert hook.refs(T)["ml_train_20260101"].min_snapshots_to_keep is None
    retry = op.execute(fake_context(try_number=2))
    assert (retry["outcome"], retry["snapshot_id"]) == ("retention_updated", str(head))
    assert hook.refs(T)["ml_train_20260101"].min_snapshots_to_keep == 5
    loc = hook.metadata_location(T)
    retry = op.execute(fake_context(try_number=3))
    assert (retry["outcome"], retry["snapshot_id"]) == ("exists", str(head))
    unchanged(hook, loc)
    # only the retention changed: committed on the current head, the branch is not moved
    op.min_snapshots_to_keep = 10
    out = op.execute(fake_context())
    assert (out["outcome"], out["snapshot_id"]) == ("retention_updated", str(head))
    assert hook.refs(T)["ml_train_20260101"].min_snapshots_to_keep == 10


def test_create_branch_refusals(table):
    hook, snaps = table
    from tests.support.lake import orders_batch

    IcebergCreateBranchOperator(task_id="b", table=T, branch="exp", snapshot_id=snaps[0]).execute(fake_context())
    hook.load_table(T).append(orders_batch(700, 2), branch="exp")  # exp diverges from main after snaps[0]
    IcebergCreateTagOperator(task_id="t", table=T, tag="v1").execute(fake_context())
    loc = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match=rf"does not descend from {snaps[2]}.*replace=True"):
        IcebergCreateBranchOperator(task_id="b", table=T, branch="exp").execute(fake_context())
    with pytest.raises(IcebergRefusedError, match="already has a tag named 'v1'"):
        IcebergCreateBranchOperator(task_id="b", table=T, branch="v1").execute(fake_context())
    with pytest.raises(IcebergValidationError, match="main"):
        IcebergCreateBranchOperator(task_id="b", table=T, branch="main").execute(fake_context())
    for bad in ({"min_snapshots_to_keep": 0}, {"max_snapshot_age": "P0D"}, {"max_ref_age": -1}):
        with pytest.raises(IcebergValidationError, match="positive"):
            IcebergCreateBranchOperator(task_id="b", table=T, branch="e2", **bad).execute(fake_context())
    unchanged(hook, loc)
    out = IcebergCreateBranchOperator(task_id="b", table=T, branch="exp", replace=True).execute(fake_context())
    assert (out["outcome"], hook.refs(T)["exp"].snapshot_id) == ("replaced", snaps[2])


# ------------------------------------------------------------------ rollback
def test_rollback_main_to_snapshot_and_retry(table):
    hook, snaps = table
    op = IcebergRollbackOperator(
        task_id="undo", table=T, to_snapshot_id="{{ params.to }}", expected_snapshot_id=snaps[2]
    )
    op.to_snapshot_id = str(snaps[0])  # as if rendered
    out = op.execute(fake_context())
    assert out == {
        "table": T,
        "ref": "main",
        "snapshot_id": str(snaps[0]),
        "previous_snapshot_id": str(snaps[2]),
        "rolled_back": True,
        "discarded": [str(snaps[1]), str(snaps[2])],
    }
    assert hook.ref_snapshot_id(T) == snaps[0]
    assert hook.load_table(T).current_snapshot().snapshot_id == snaps[0]
    assert len(hook.load_table(T).scan().to_arrow()) == 10
    loc = hook.metadata_location(T)
    retry = op.execute(fake_context(try_number=2))  # main has moved since: the expected head no longer matters
    assert (retry["rolled_back"], retry["snapshot_id"]) == (False, str(snaps[0]))
    unchanged(hook, loc)
    rows = ledger(hook, operation="rollback")
    assert [r["status"] for r in rows] == ["succeeded", "noop"]
    assert (rows[0]["snapshot_before"], rows[0]["snapshot_after"]) == (snaps[2], snaps[0])


def test_rollback_to_tag_and_to_timestamp(table):
    hook, snaps = table
    IcebergCreateTagOperator(task_id="t", table=T, tag="eod", snapshot_id=snaps[1]).execute(fake_context())
    out = IcebergRollbackOperator(task_id="u", table=T, to_tag="eod").execute(fake_context())
    assert (out["snapshot_id"], out["discarded"]) == (str(snaps[1]), [str(snaps[2])])
    # a new commit after the rollback; roll back to "the state at the time of snaps[0]"
    new = append_batches(hook, T, 1)[0]
    ts0 = hook.snapshot(T, snapshot_id=snaps[0]).timestamp_ms
    out = IcebergRollbackOperator(
        task_id="u", table=T, to_timestamp=pendulum.from_timestamp(ts0 / 1000, tz="UTC").isoformat()
    ).execute(fake_context())
    assert (out["snapshot_id"], out["discarded"]) == (str(snaps[0]), [str(snaps[1]), str(new)])


def test_rollback_branch_keeps_retention(table):
    hook, snaps = table
    create = IcebergCreateBranchOperator(task_id="b", table=T, branch="exp", min_snapshots_to_keep=3)
    create.execute(fake_context())
    from tests.support.lake import orders_batch

    hook.load_table(T).append(orders_batch(500, 5), branch="exp")
    create.execute(fake_context())  # pyiceberg's append dropped the retention: put it back
    bad = hook.ref_snapshot_id(T, "exp")
    assert hook.refs(T)["exp"].min_snapshots_to_keep == 3
    out = IcebergRollbackOperator(task_id="u", table=T, ref="exp", to_snapshot_id=snaps[2]).execute(fake_context())
    assert (out["previous_snapshot_id"], out["snapshot_id"]) == (str(bad), str(snaps[2]))
    ref = hook.refs(T)["exp"]
    assert (ref.snapshot_id, ref.min_snapshots_to_keep) == (snaps[2], 3)
    assert hook.ref_snapshot_id(T) == snaps[2]  # main untouched


def test_rollback_refuses_non_ancestor_and_changes_nothing(table):
    hook, snaps = table
    from tests.support.lake import orders_batch

    IcebergCreateBranchOperator(task_id="b", table=T, branch="exp").execute(fake_context())
    hook.load_table(T).append(orders_batch(500, 5), branch="exp")
    side = hook.ref_snapshot_id(T, "exp")  # on a branch, not in main's history
    IcebergCreateTagOperator(task_id="t", table=T, tag="side", snapshot_id=side).execute(fake_context())
    loc = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match=rf"back to snapshot {side}: it is not an ancestor"):
        IcebergRollbackOperator(task_id="u", table=T, to_snapshot_id=side).execute(fake_context())
    with pytest.raises(IcebergRefusedError, match=r"\(tag 'side'\): it is not an ancestor"):
        IcebergRollbackOperator(task_id="u", table=T, to_tag="side").execute(fake_context())
    with pytest.raises(IcebergRefusedError, match="no ancestor committed at or before"):
        IcebergRollbackOperator(task_id="u", table=T, to_timestamp=1000).execute(fake_context())
    with pytest.raises(IcebergRefNotFoundError, match="Tag 'nope' does not exist"):
        IcebergRollbackOperator(task_id="u", table=T, to_tag="nope").execute(fake_context())
    with pytest.raises(IcebergCommitConflictError, match="not the expected"):
        IcebergRollbackOperator(task_id="u", table=T, to_snapshot_id=snaps[0], expected_snapshot_id=snaps[1]).execute(
            fake_context()
        )
    unchanged(hook, loc)
    assert hook.ref_snapshot_id(T) == snaps[2]
    assert [r["status"] for r in ledger(hook, operation="rollback")] == ["refused", "refused", "refused"]


def test_rollback_needs_exactly_one_target():
    with pytest.raises(IcebergValidationError, match="exactly one rollback target"):
        IcebergRollbackOperator(task_id="u", table=T)
    with pytest.raises(IcebergValidationError, match="exactly one rollback target"):
        IcebergRollbackOperator(task_id="u", table=T, to_tag="a", to_snapshot_id=1)
    op = IcebergRollbackOperator(task_id="u", table=T, to_tag="{{ params.tag }}")
    op.to_tag = ""  # rendered empty
    with pytest.raises(IcebergValidationError, match="must render to a value"):
        op.execute(fake_context())


# --------------------------------------------------------------- commit check
def test_commit_check_finds_commit_by_summary(table):
    hook, snaps = table
    tbl = hook.load_table(T)
    from tests.support.lake import orders_batch

    tbl.append(orders_batch(900, 3), snapshot_properties={"airflow.run-id": "manual__x", "wap.id": "w1"})
    marked = hook.ref_snapshot_id(T)
    op = IcebergCommitCheckOperator(
        task_id="c", table=T, operation="append", summary={"airflow.run-id": "{{ run_id }}"}, after_snapshot_id=snaps[0]
    )
    op.render_template_fields(fake_context(run_id="manual__x"))
    out = op.execute(fake_context(run_id="manual__x"))
    assert (out["snapshot_id"], out["operation"], out["matched"]) == (str(marked), "append", 1)
    assert out["summary"]["wap.id"] == "w1"
    out = IcebergCommitCheckOperator(task_id="c", table=T, operation="append", min_commits=4).execute(fake_context())
    assert out["matched"] == 4


def test_commit_check_fails_when_missing(table):
    hook, snaps = table
    loc = hook.metadata_location(T)
    with pytest.raises(IcebergCommitVerificationError, match=r"at least 1 commit.*wap.id.*found 0"):
        IcebergCommitCheckOperator(task_id="c", table=T, summary={"wap.id": "never"}).execute(fake_context())
    with pytest.raises(IcebergCommitVerificationError, match="found 0"):
        IcebergCommitCheckOperator(task_id="c", table=T, operation="delete").execute(fake_context())
    with pytest.raises(IcebergCommitVerificationError, match="found 0"):
        IcebergCommitCheckOperator(task_id="c", table=T, after_snapshot_id=snaps[2]).execute(fake_context())
    with pytest.raises(IcebergCommitVerificationError, match="found 0"):
        IcebergCommitCheckOperator(task_id="c", table=T, since=int(time.time() * 1000) + 60_000).execute(fake_context())
    with pytest.raises(IcebergCommitVerificationError, match="has no ref 'wap_x'"):
        IcebergCommitCheckOperator(task_id="c", table=T, ref="wap_x").execute(fake_context())
    with pytest.raises(IcebergCommitVerificationError, match="not in the history"):
        IcebergCommitCheckOperator(task_id="c", table=T, after_snapshot_id=4242).execute(fake_context())
    with pytest.raises(IcebergValidationError, match="'merge' is not a snapshot operation"):
        IcebergCommitCheckOperator(task_id="c", table=T, operation="merge")
    unchanged(hook, loc)


def test_legal_hold_is_never_moved_even_through_the_hook(table):
    hook, snaps = table
    IcebergCreateTagOperator(
        task_id="h", table=T, tag="c2", snapshot_id=snaps[0], legal_hold=True, case_id="C-2"
    ).execute(fake_context())
    loc = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="is a legal hold on snapshot .* never moved"):
        IcebergCreateTagOperator(task_id="h", table=T, tag="c2", legal_hold=True, case_id="C-2").execute(fake_context())
    with pytest.raises(IcebergRefusedError, match="never moved"):
        hook.create_tag(T, "legal-hold-c2", snapshot_id=snaps[2], replace=True)
    unchanged(hook, loc)
    # a retry of the original placement is still an idempotent success
    again = IcebergCreateTagOperator(
        task_id="h", table=T, tag="c2", snapshot_id=snaps[0], legal_hold=True, case_id="C-2"
    ).execute(fake_context())
    assert again["outcome"] == "exists"
