"""Pure re-run rules (#15): identity, the earlier publish found in main's history, plans per mode (milliseconds)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.models import SnapshotInfo
from airflow_iceberg_provider.rules import wap_rerun as rl

DAY1 = rl.RunIdentity(
    "daily",
    "scheduled__2026-01-01",
    "load.write",
    1,
    "2026-01-01T00:00:00+00:00",
    "2026-01-01T00:00:00+00:00",
    "2026-01-02T00:00:00+00:00",
    "load",
)
DAY2 = rl.RunIdentity(
    "daily",
    "scheduled__2026-01-02",
    "load.write",
    1,
    "2026-01-02T00:00:00+00:00",
    "2026-01-02T00:00:00+00:00",
    "2026-01-03T00:00:00+00:00",
    "load",
)


def snap(sid, parent, op="append", ident=None, rows=10, deleted=0, replaces=None, **summary):
    props = rl.summary_properties(ident, replaces=replaces) if ident else {}
    props.update({"added-records": str(rows), "deleted-records": str(deleted)}, **summary)
    return SnapshotInfo(snapshot_id=sid, parent_id=parent, timestamp_ms=sid, operation=op, summary=props)


def chain_of(*snaps):
    return list(snaps), {s.snapshot_id: s for s in snaps}


def test_identity_from_an_airflow_context_and_its_summary_properties():
    ti = SimpleNamespace(dag_id="daily", run_id="backfill__2026-01-01", task_id="load.write", try_number=2)
    from datetime import UTC, datetime

    start, end = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    ident = rl.RunIdentity.from_context(
        {"ti": ti, "logical_date": start, "data_interval_start": start, "data_interval_end": end}
    )
    assert ident.group == "load" and ident.try_number == 2
    assert ident.interval_key == "daily/load/2026-01-01T00:00:00+00:00/2026-01-02T00:00:00+00:00"
    props = rl.summary_properties(ident)
    assert props["airflow.run-id"] == "backfill__2026-01-01" and props["airflow.try-number"] == "2"
    assert props["airflow.wap-interval"] == ident.interval_key and all(isinstance(v, str) for v in props.values())
    assert "airflow.wap-replaces" not in props
    assert rl.summary_properties(ident, replaces=123)["airflow.wap-replaces"] == "123"
    assert rl.KEY_JOB_RUN not in props and rl.summary_properties(ident, job_run_id="j1")[rl.KEY_JOB_RUN] == "j1"
    # no logical date (a manual run in Airflow 3): the run itself is the interval, so a cleared run is still caught
    manual = rl.RunIdentity.from_context({"ti": ti})
    assert manual.interval_key == "daily/load/run:backfill__2026-01-01"
    assert rl.RunIdentity.from_context(None).interval_key is None


def test_first_run_writes_and_other_intervals_do_not_count():
    chain, by_id = chain_of(snap(1, None), snap(2, 1, ident=DAY2))
    for mode in rl.ON_RERUN:
        assert rl.plan_rerun(mode, DAY1, chain, by_id, table="db.t").action == "write"


@pytest.mark.parametrize(("mode", "action"), [("fail", "refuse"), ("skip", "skip"), ("replace", "replace")])
def test_an_interval_on_main_is_refused_skipped_or_replaced(mode, action):
    chain, by_id = chain_of(snap(1, None), snap(2, 1, ident=DAY1, rows=7), snap(3, 2, ident=DAY2))
    plan = rl.plan_rerun(mode, DAY1, chain, by_id, table="db.t")
    assert plan.action == action and plan.earlier.published_snapshot_id == 2
    assert plan.earlier.run_id == "scheduled__2026-01-01" and plan.earlier.added_rows == 7
    if mode == "fail":  # names the earlier publish: snapshot and run
        assert "snapshot 2" in plan.message and "scheduled__2026-01-01" in plan.message
        assert "nothing was changed" in plan.message
    if mode == "replace":
        assert plan.method == "files" and plan.remove_snapshot_ids == (2,) and plan.expected_rows == 7
    json.dumps(plan.to_dict())  # XCom/ledger safe, ids as strings
    assert plan.to_dict()["earlier"]["published_snapshot_id"] == "2"


def test_a_cherry_picked_publish_is_found_through_its_source_snapshot():
    branch_snap = snap(5, 1, ident=DAY1, rows=4)  # on a dropped branch, still in the metadata
    picked = snap(6, 3, rows=4, **{"source-snapshot-id": "5"})
    chain, by_id = chain_of(snap(1, None), snap(3, 1, ident=DAY2), picked)
    by_id[5] = branch_snap
    plan = rl.plan_rerun("replace", DAY1, chain, by_id, table="db.t")
    assert plan.action == "replace" and plan.remove_snapshot_ids == (6,)  # main's copy holds the files


def test_the_latest_publish_is_the_one_to_replace():
    redo = rl.RunIdentity(**{**DAY1.__dict__, "run_id": "manual__x", "try_number": 3})
    chain, by_id = chain_of(
        snap(1, None),
        snap(2, 1, ident=DAY1, rows=10),
        snap(3, 2, op="overwrite", ident=redo, rows=0, deleted=10, replaces=2),  # removed 2's files
        snap(4, 3, ident=redo, rows=12),
    )
    plan = rl.plan_rerun("replace", DAY1, chain, by_id, table="db.t")
    assert plan.earlier.run_id == "manual__x" and plan.earlier.snapshot_ids == (3, 4)
    assert plan.method == "files" and plan.remove_snapshot_ids == (4,) and plan.expected_rows == 12


def test_replace_refuses_when_the_publish_rewrote_rows_unless_a_predicate_is_declared():
    chain, by_id = chain_of(snap(1, None), snap(2, 1, op="overwrite", ident=DAY1, rows=5, deleted=2))
    plan = rl.plan_rerun("replace", DAY1, chain, by_id, table="db.t")
    assert plan.action == "refuse" and "cannot prove which rows to remove" in plan.message
    assert "replace_where" in plan.message and "Nothing was changed" in plan.message
    plan = rl.plan_rerun("replace", DAY1, chain, by_id, table="db.t", replace_where="d = '2026-01-01'")
    assert plan.action == "replace" and plan.method == "predicate" and plan.expected_rows == 3
    assert plan.remove_snapshot_ids == ()  # its files are not proof (the overwrite re-added other rows)


def test_expired_history_asks_for_the_ledger_then_decides_from_it():
    chain, by_id = chain_of(snap(7, 6), snap(8, 7, ident=DAY2))  # snapshot 6 and older were expired
    assert not rl.history_complete(chain)
    plan = rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t")
    assert plan.action == "read_ledger"
    row = {
        "status": "succeeded",
        "run_id": "scheduled__2026-01-01",
        "try_number": 1,
        "snapshot_after": 5,
        "finished_at": "2026-01-02",
        "details": json.dumps({"wap_interval": DAY1.interval_key}),
        "metrics": json.dumps({"published_added_records": 9}),
    }
    plan = rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t", ledger_rows=[row])
    assert plan.action == "refuse" and plan.earlier.from_ledger and "snapshot 5" in plan.message
    plan = rl.plan_rerun("replace", DAY1, chain, by_id, table="db.t", ledger_rows=[row])
    assert plan.action == "refuse" and "expired" in plan.message  # no files, no predicate: cannot prove
    plan = rl.plan_rerun("replace", DAY1, chain, by_id, table="db.t", ledger_rows=[row], replace_where="x = 1")
    assert plan.action == "replace" and plan.expected_rows == 9
    assert rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t", ledger_rows=[]).action == "write"


def _publish_row(snapshot_after, finished_at, ident=DAY1, status="succeeded"):
    return {
        "status": status,
        "run_id": ident.run_id,
        "try_number": 1,
        "snapshot_after": snapshot_after,
        "finished_at": finished_at,
        "details": json.dumps({"wap_interval": ident.interval_key}),
        "metrics": json.dumps({"published_added_records": 5}),
    }


def test_unstamped_writes_are_decided_by_the_ledger_and_only_publishes_still_on_main_count():
    # SQL statements through Spark Connect: main holds the publish, but no snapshot carries the interval
    chain, by_id = chain_of(snap(1, None), snap(2, 1), snap(3, 2))
    assert rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t").action == "write"  # stamps alone miss it
    plan = rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t", stamped=False)
    assert plan.action == "read_ledger" and "carry no stamps" in plan.message
    published = _publish_row(2, "2026-01-02")
    plan = rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t", ledger_rows=[published], stamped=False)
    assert plan.action == "refuse" and plan.earlier.published_snapshot_id == 2 and "from ledger" in plan.message
    plan = rl.plan_rerun("skip", DAY1, chain, by_id, table="db.t", ledger_rows=[published], stamped=False)
    assert plan.action == "skip"
    # rolled back: the publish's snapshot is no longer on main, so the interval is not published
    gone = _publish_row(99, "2026-01-03")
    assert rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t", ledger_rows=[gone], stamped=False).action == "write"
    # a failed publish, or another interval's, does not count
    others = [_publish_row(2, "2026-01-02", status="failed"), _publish_row(3, "2026-01-03", ident=DAY2)]
    assert rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t", ledger_rows=others, stamped=False).action == "write"
    # replace: the ledger does not say which files hold the rows, so only a predicate can replace them
    plan = rl.plan_rerun("replace", DAY1, chain, by_id, table="db.t", ledger_rows=[published], stamped=False)
    assert plan.action == "refuse" and "replace_where" in plan.message and "no stamps" in plan.message
    plan = rl.plan_rerun(
        "replace", DAY1, chain, by_id, table="db.t", ledger_rows=[published], stamped=False, replace_where="x = 1"
    )
    assert plan.action == "replace" and plan.method == "predicate" and plan.expected_rows == 5


def test_a_stamped_publish_and_a_later_unstamped_one_the_later_wins():
    # day 1 published through spark-submit (stamped, snapshot 2), then replaced through Spark Connect (snapshot 4)
    chain, by_id = chain_of(snap(1, None), snap(2, 1, ident=DAY1), snap(3, 2), snap(4, 3))
    later = _publish_row(4, "2026-01-05")
    plan = rl.plan_rerun("fail", DAY1, chain, by_id, table="db.t", ledger_rows=[later], stamped=False)
    assert plan.earlier.published_snapshot_id == 4 and plan.earlier.from_ledger
    earlier_row = _publish_row(
        2, "2026-01-02"
    )  # the ledger row of the stamped publish itself: stamps win (files known)
    plan = rl.plan_rerun("replace", DAY1, chain, by_id, table="db.t", ledger_rows=[earlier_row], stamped=False)
    assert plan.earlier.published_snapshot_id == 2 and not plan.earlier.from_ledger and plan.method == "files"


def test_publish_race_ignores_what_the_branch_saw_and_its_own_cherry_picks():
    chain, by_id = chain_of(snap(1, None), snap(2, 1, ident=DAY1), snap(3, 2, ident=DAY2))
    # the branch was cut after 2 (a replace branch): 2 is in its ancestry, no race
    assert rl.plan_publish_race("fail", DAY1, chain, by_id, {1, 2, 10}, table="db.t").action == "write"
    # cut at 1, and another run published DAY1 since: refuse (fail/replace) or skip
    race = rl.plan_publish_race("replace", DAY1, chain, by_id, {1, 10}, table="db.t")
    assert race.action == "refuse" and "after this run's branch was cut" in race.message
    assert rl.plan_publish_race("skip", DAY1, chain, by_id, {1, 10}, table="db.t").action == "skip"
    own = snap(4, 3, rows=1, **{"source-snapshot-id": "10"})
    by_id[10] = snap(10, 1, ident=DAY1)
    chain2, _ = chain_of(snap(1, None), snap(3, 1, ident=DAY2), own)
    assert rl.plan_publish_race("fail", DAY1, chain2, by_id, {1, 10}, table="db.t").action == "write"


def test_change_metrics_count_a_replacement_once():
    removal = snap(3, 2, op="overwrite", ident=DAY1, rows=0, deleted=100, replaces=2)
    reload = snap(4, 3, ident=DAY1, rows=90)
    out = rl.change_metrics([removal, reload])
    assert out["net_added_records"] == 90 and out["replaced_records"] == 100 and out["interval_net_change"] == -10
    # a copy-on-write DELETE as the replacement (re-adds the rows it keeps from rewritten files)
    cow = snap(5, 2, op="overwrite", ident=DAY1, rows=40, deleted=140, replaces=2)
    assert rl.change_metrics([cow, reload])["replaced_records"] == 100
    plain = rl.change_metrics([snap(6, 1, rows=5), snap(7, 6, op="overwrite", rows=3, deleted=3)])
    assert plain["net_added_records"] == 5 and plain["replaced_records"] == 0


def test_invalid_modes_and_predicates_are_refused_naming_the_parameter():
    with pytest.raises(IcebergValidationError, match="on_rerun='again' is invalid"):
        rl.validate_on_rerun("again")
    for bad in ("d = 1; DROP TABLE x", "d = 1 -- x", "DELETE FROM t"):
        with pytest.raises(IcebergValidationError, match="replace_where"):
            rl.validate_replace_where(bad)
    assert rl.validate_replace_where(" d = '2026-01-01' ") == "d = '2026-01-01'"
    assert rl.validate_replace_where("None") is None and rl.validate_replace_where(None) is None
