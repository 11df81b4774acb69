"""Privacy by default and completion dates that count every copy (no Spark).

The redaction's grace period, the declared retention of copies outside the table (connection
extras and table properties), the deadline rules that count it (report, trigger, run budget), the
deadline sensor on a real SQLite catalog firing on the retention date, and the evidence report's
two dates.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.deadlines import erasure_deadline_alert, erasure_run_budget
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.rules import erasure as ep
from airflow_iceberg_provider.rules import erasure_retention as er
from airflow_iceberg_provider.triggers.erasure_events import IcebergErasureDeadlineEventTrigger, approaching
from airflow_iceberg_provider.ui import views
from tests.support.lake import catalog_conn_json, fake_context

R = datetime(2026, 3, 1, tzinfo=UTC)
H = "c" * 64
DAY = timedelta(days=1)
VERSIONS, BACKUPS = er.VERSIONING_RETENTION, er.BACKUP_RETENTION


# ------------------------------------------------------------------ grace period
def test_redact_after_accepts_durations_and_hours_and_refuses_the_rest():
    assert er.redact_after(None) is None and er.redact_after(0) is None and er.redact_after("0h") is None
    assert er.redact_after(72) == timedelta(hours=72)
    assert er.redact_after("7d") == er.redact_after("P7D") == er.redact_after(timedelta(days=7)) == timedelta(days=7)
    for bad, match in (
        (-1, "is negative"),
        ("-2d", "is not a duration"),
        (-timedelta(hours=1), "is negative"),
        ("400d", "longer than 365 days"),
        (True, "is not a duration"),
        (float("nan"), "finite number of hours"),
        ("soon", "redact_after"),
    ):
        with pytest.raises(IcebergValidationError, match=match):
            er.redact_after(bad)


def test_redaction_waits_for_the_grace_period_of_each_request():
    evidence = [
        {"request_id": rid, "table_name": "db.a", "subject_hash": H, "phase": "purge", "verification": "verified"}
        for rid in ("R-old", "R-new", "R-unknown")
    ]
    evidence[2]["purged_at"] = R - timedelta(hours=1)  # no completed_at: the purge's moment counts
    requests = [
        {"request_id": "R-old", "status": "erased", "completed_at": R - 3 * DAY},
        {"request_id": "R-new", "status": "erased", "completed_at": R - timedelta(hours=2)},
        {"request_id": "R-unknown", "status": "erased"},
    ]
    plan = lc.redaction_plan(requests, evidence, erased_before=R - DAY)
    assert plan == {"redact": {"R-old": H}, "unresolved": [], "waiting": ["R-new", "R-unknown"]}
    assert set(lc.redaction_plan(requests, evidence)["redact"]) == {"R-old", "R-new", "R-unknown"}


def test_erasure_operator_redacts_by_default_and_templates_the_grace_period():
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator

    op = IcebergErasureOperator(task_id="e", table="db.t", subject_columns="c", requests_table="db.r")
    assert op.redact_erased_requests is True and op.redact_after is None
    assert op.erasure_args().redact_erased_requests is True
    assert "redact_after" in op.template_fields


# ------------------------------------------------------------------ declared retention
def test_table_properties_override_the_connection_per_kind():
    conn = {VERSIONS: "30", BACKUPS: 14}
    got = er.copy_retention(conn, {BACKUPS: "35"}, table="db.t", conn_id="c")
    assert (got.versioning, got.backup, got.longest) == (30 * DAY, 35 * DAY, 35 * DAY)
    assert dict(got.declared_by) == {VERSIONS: "connection", BACKUPS: "table property"}
    assert er.copy_retention(None, {}).longest == timedelta(0) and not er.copy_retention().declared
    both = er.longest([got, er.copy_retention({VERSIONS: "40"})])
    assert (both.versioning, both.backup) == (40 * DAY, 35 * DAY)


@pytest.mark.parametrize("bad", ["-1", "thirty", "nan", "inf", "36501", True])
def test_malformed_retention_names_the_property_where_it_is_and_the_fix(bad):
    with pytest.raises(IcebergValidationError, match=rf"table db.t property: {VERSIONS}=.* days .* e.g. '30'"):
        er.copy_retention({}, {VERSIONS: bad}, table="db.t")
    with pytest.raises(IcebergValidationError, match=rf"connection lake extra: {BACKUPS}=.*remove it"):
        er.copy_retention({BACKUPS: bad}, conn_id="lake")


def test_a_retention_as_long_as_the_deadline_is_refused():
    assert er.retention_fits(er.copy_retention({BACKUPS: "7"}), 30 * DAY) == 23 * DAY
    with pytest.raises(IcebergValidationError, match="not shorter than the physical deadline of 30 days"):
        er.retention_fits(er.copy_retention({BACKUPS: "30"}), 30 * DAY)


def test_completion_dates_state_both_dates_and_whether_copies_are_late():
    ret = er.copy_retention({VERSIONS: "7"})
    on_time = er.completion_dates(R + 20 * DAY, ret, received_at=R, physical=30 * DAY)
    assert on_time["unreachable_at"] == R + 20 * DAY and on_time["gone_from_copies_by"] == R + 27 * DAY
    assert on_time["legal_deadline"] == R + 30 * DAY and not on_time["copies_late"]
    assert er.completion_dates(R + 25 * DAY, ret, received_at=R, physical=30 * DAY)["copies_late"]


# ------------------------------------------------------------------ deadline rules
def _report(rows, now, retention):
    return ep.deadline_report(rows, now=now, logical=DAY, physical=30 * DAY, copy_retention=retention)


def test_deadline_report_fires_on_the_retention_date():
    """Received at R, 30 days, copies kept 7 days: the table must be unreachable by R + 23 days."""
    rows = [{"request_id": "R-1", "status": "logically_erased", "received_at": R}]
    before = _report(rows, R + 23 * DAY - timedelta(seconds=1), 7 * DAY)
    assert before["physical_overdue"] == [] and [r["request_id"] for r in before["physical_at_risk"]] == ["R-1"]
    (late,) = _report(rows, R + 23 * DAY + timedelta(seconds=1), 7 * DAY)["physical_overdue"]
    assert late["due_at"] == R + 23 * DAY
    assert _report(rows, R + 23 * DAY + timedelta(seconds=1), timedelta(0))["physical_overdue"] == []


def test_an_erased_request_whose_copies_outlive_the_deadline_is_overdue_until_they_are_gone():
    rows = [{"request_id": "R-1", "status": "redacted", "received_at": R, "completed_at": R + 25 * DAY}]
    (late,) = _report(rows, R + 26 * DAY, 7 * DAY)["physical_overdue"]
    assert late["copies_late"] and late["gone_from_copies_by"] == R + 32 * DAY and late["due_at"] == R + 30 * DAY
    assert _report(rows, R + 32 * DAY, 7 * DAY)["physical_overdue"] == []  # the copies are gone
    assert _report(rows, R + 26 * DAY, 5 * DAY)["physical_overdue"] == []  # gone by R + 30 days: met


def test_trigger_fires_on_the_retention_date_and_round_trips():
    trigger = IcebergErasureDeadlineEventTrigger(
        requests_table="db.requests", deadlines={"physical": "30d"}, margin=0, copy_retention="7d"
    )
    path, kwargs = trigger.serialize()
    assert kwargs["copy_retention"] == 7 * 86400
    assert IcebergErasureDeadlineEventTrigger(**kwargs).serialize() == (path, kwargs)
    rows = [{"request_id": "R-1", "status": "pending", "received_at": R}]
    kw = {"deadlines": {"physical": 30 * DAY}, "margins": {"physical": timedelta(0)}, "copy_retention": 7 * DAY}
    assert approaching(rows, now=R + 23 * DAY - timedelta(seconds=1), **kw) == []
    (item,) = approaching(rows, now=R + 23 * DAY + timedelta(seconds=1), **kw)
    assert item["due_at"] == R + 23 * DAY and item["deadline"] == "physical" and not item["copies_late"]
    erased = [{"request_id": "R-2", "status": "erased", "received_at": R, "completed_at": R + 24 * DAY}]
    (copies,) = approaching(erased, now=R + 24 * DAY, **kw)
    assert copies["copies_late"] and copies["overdue"]
    assert trigger._event(copies)["copies_late"] is True


def test_trigger_refuses_a_retention_that_leaves_no_time():
    for retention, margin in (("30d", 0), ("20d", "10d")):
        with pytest.raises(IcebergValidationError, match="no erasure can be gone from every copy"):
            IcebergErasureDeadlineEventTrigger(
                requests_table="db.r", deadlines={"physical": "30d"}, margin=margin, copy_retention=retention
            )


def test_run_budget_and_alert_count_the_retention():
    assert erasure_run_budget(30 * DAY, DAY, 20 * DAY, 7 * DAY) == 2 * DAY
    with pytest.raises(IcebergValidationError, match="shorten the retention of object-store versions"):
        erasure_run_budget(30 * DAY, DAY, 20 * DAY, 9 * DAY)
    with pytest.raises(IcebergValidationError, match="copy_retention=.*non-negative"):
        erasure_run_budget(30 * DAY, DAY, copy_retention=-DAY)
    alert = erasure_deadline_alert(deadline=30 * DAY, cadence=DAY, margin=20 * DAY, copy_retention=7 * DAY)
    assert alert.interval == 2 * DAY and alert.callback.kwargs["copy_retention_hours"] == 7 * 24


# ------------------------------------------------------------------ sensor on a real catalog
def _declare_on_connection(monkeypatch, lake, **extra):
    base = lake.config.warehouse.removeprefix("file://")
    db = lake.config.uri.removeprefix("sqlite:///")
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", catalog_conn_json(db, base, **extra))


def _requests(lake, received_days_ago):
    from tests.support.erasure import add_requests, person

    add_requests(lake, "db.requests", {"R-1": person(1)}, received_days_ago=received_days_ago)


def test_deadline_sensor_fires_on_the_retention_date(lake, monkeypatch):
    """30 days, backups kept 7: a request received 23 days and 1 hour ago is overdue; 22 days is not."""
    from airflow_iceberg_provider.sensors.erasure import (
        IcebergErasureDeadlineExceededError,
        IcebergErasureDeadlineSensor,
    )

    _requests(lake, 22)

    def sensor():
        return IcebergErasureDeadlineSensor(task_id="d", requests_table="db.requests", logical_deadline_hours=24 * 30)

    _declare_on_connection(monkeypatch, lake, **{BACKUPS: "7"})
    logically = lake.load_table("db.requests")
    import pyarrow as pa

    rows = logically.scan().to_arrow().to_pylist()
    for r in rows:
        r["status"] = "logically_erased"
    logically.overwrite(pa.Table.from_pylist(rows, schema=logically.schema().as_arrow()))
    assert sensor().poke(fake_context()) is True
    from tests.support.erasure import add_requests, person

    add_requests(lake, "db.requests", {"R-2": person(2)}, received_days_ago=23 + 1 / 24)
    with pytest.raises(IcebergErasureDeadlineExceededError, match=r"1 past the physical deadline \(30 days, every"):
        sensor().poke(fake_context())
    _declare_on_connection(monkeypatch, lake)  # nothing declared: not late yet
    assert sensor().poke(fake_context()) is True


def test_deadline_sensor_refuses_a_malformed_declaration_and_changes_nothing(lake, monkeypatch):
    from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineSensor

    _requests(lake, 1)
    before = lake.metadata_location("db.requests")
    _declare_on_connection(monkeypatch, lake, **{VERSIONS: "a month"})
    sensor = IcebergErasureDeadlineSensor(task_id="d", requests_table="db.requests", logical_deadline_hours=48)
    with pytest.raises(IcebergValidationError, match=rf"connection iceberg_catalog_default extra: {VERSIONS}"):
        sensor.poke(fake_context())
    _declare_on_connection(monkeypatch, lake, **{VERSIONS: "30"})
    with pytest.raises(IcebergValidationError, match="not shorter than the physical deadline of 30 days"):
        IcebergErasureDeadlineSensor(task_id="d", requests_table="db.requests").poke(fake_context())
    assert lake.metadata_location("db.requests") == before


def test_create_table_refuses_a_malformed_retention_property_and_creates_nothing(lake):
    from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator

    match = rf"properties\['{BACKUPS}'\]='-3' must be a number of days"
    with pytest.raises(IcebergValidationError, match=match):  # at parse time when not templated
        IcebergCreateTableOperator(task_id="c", table="db.kept", columns={"id": "long"}, properties={BACKUPS: "-3"})
    op = IcebergCreateTableOperator(task_id="c", table="db.kept", columns={"id": "long"}, properties="{{ params.p }}")
    op.properties = {BACKUPS: "-3"}  # as rendered with render_template_as_native_obj
    with pytest.raises(IcebergValidationError, match=match):
        op.execute(fake_context())
    assert not lake.table_exists("db.kept")


# ------------------------------------------------------------------ evidence report
def _evidence(purged_at):
    return {
        "request_id": "Q-1",
        "table_name": "db.orders",
        "subject_hash": H,
        "phase": "purge",
        "verification": "verified",
        "purged_at": purged_at,
        "finished_at": purged_at,
    }


def test_evidence_report_states_both_dates_and_the_deadlines_the_second_misses():
    request = {"request_id": "Q-1", "status": "redacted", "received_at": R, "completed_at": R + 25 * DAY}
    declared = {"db.orders": er.copy_retention({VERSIONS: "7", BACKUPS: "3"}).to_dict()}
    report = views.evidence_report("Q-1", [request], [_evidence(R + 25 * DAY)], now=R + 26 * DAY, retentions=declared)
    (t,) = report["tables"]
    assert t["completion"]["unreachable_at"] == R + 25 * DAY
    assert t["completion"]["gone_from_copies_by"] == R + 32 * DAY
    assert t["completion"]["retention_days"] == 7 and t["completion"]["retention_source"] == "declared now"
    assert report["completion"]["gone_from_copies_by"] == R + 32 * DAY
    assert report["completion"]["copies_late_for"] == ["PIPEDA / Law 25 (30 days)", "GDPR art. 12(3) (1 month)"]
    # the purge run recorded its retention: that one counts, not what is declared now
    run = {
        "operation": "erasure",
        "table": "db.orders",
        "event_id": "ev-1",
        "status": "success",
        "started_at": R + 25 * DAY - timedelta(minutes=1),
        "finished_at": R + 25 * DAY + timedelta(minutes=1),
        "metrics": {"phase": "purge", "copy_retention": er.copy_retention({BACKUPS: "1"}).to_dict()},
    }
    again = views.evidence_report(
        "Q-1", [request], [_evidence(R + 25 * DAY)], [run], now=R + 26 * DAY, retentions=declared
    )
    assert again["tables"][0]["completion"]["gone_from_copies_by"] == R + 26 * DAY
    assert again["tables"][0]["completion"]["retention_source"] == "recorded by the purge run"
    assert again["completion"]["copies_late_for"] == []
    # a malformed declaration is shown as such, never as a date
    bad = views.evidence_report("Q-1", [request], [_evidence(R)], now=R, retentions={"db.orders": {"error": "x"}})
    assert bad["tables"][0]["completion"]["gone_from_copies_by"] is None
    assert bad["completion"]["gone_from_copies_by"] is None


# ------------------------------------------------------------------ one deadline, one request
def test_deadline_outcome_keeps_a_miss_on_the_record():
    due = R + 30 * DAY
    outcome = er.deadline_outcome
    assert outcome(due, now=R + 29 * DAY, is_open=True)["state"] == "open"
    overdue = outcome(due, now=R + 31 * DAY, is_open=True)
    assert overdue["state"] == "overdue" and overdue["missed"] and overdue["late_s"] == DAY.total_seconds()
    # erased after the deadline: late, by how much, for good (long after the erasure too)
    late = outcome(due, now=R + 400 * DAY, is_open=False, erased_at=R + 35 * DAY)
    assert late == {"state": "late", "missed": True, "left_s": None, "late_s": 5 * DAY.total_seconds()}
    # erased in time, but a backup kept the bytes past the deadline
    copies = outcome(due, now=R + 400 * DAY, is_open=False, erased_at=R + 25 * DAY, gone_from_copies_by=R + 32 * DAY)
    assert copies["state"] == "copies_late" and copies["late_s"] == 2 * DAY.total_seconds()
    met = outcome(due, now=R + 26 * DAY, is_open=False, erased_at=R + 25 * DAY, gone_from_copies_by=due)
    assert met["state"] == "met" and not met["missed"] and met["late_s"] is None
    assert outcome(due, now=R, is_open=False)["state"] == "closed"  # no erasure moment known
    assert {s for s in er.DEADLINE_STATES if s in er.MISSED_STATES} == {"overdue", "late", "copies_late"}


def test_the_erasure_page_and_the_report_show_a_late_erasure_in_red():
    """A request erased 35 days after receipt misses both deadlines on the list; one erased on day 25
    whose backups are kept 7 days misses them on its evidence report (the list knows no retention)."""
    late = {"request_id": "L", "status": "redacted", "received_at": R, "completed_at": R + 35 * DAY}
    copies = {"request_id": "Q-1", "status": "redacted", "received_at": R, "completed_at": R + 25 * DAY}
    rows = {r["request_id"]: r for r in views.erasure_requests([late, copies], [], now=R + 36 * DAY)}
    assert rows["L"]["late"] and not rows["L"]["overdue"] and not rows["L"]["open"]
    assert [d["state"] for d in rows["L"]["deadlines"]] == ["late", "late"]
    assert rows["L"]["deadlines"][0]["left_text"] == "erased 5 d 0 h late"
    assert not rows["Q-1"]["late"] and [d["left_text"] for d in rows["Q-1"]["deadlines"]] == ["met", "met"]
    declared = {"db.orders": er.copy_retention({BACKUPS: "7"}).to_dict()}
    report = views.evidence_report("Q-1", [copies], [_evidence(R + 25 * DAY)], now=R + 36 * DAY, retentions=declared)
    assert [d["state"] for d in report["deadlines"]] == ["copies_late", "copies_late"] and report["late"]
    assert report["deadlines"][0]["left_text"] == "copies gone 2 d 0 h late" and not report["overdue"]
