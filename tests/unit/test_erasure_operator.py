"""Erasure operator refusals and deadline sensor on real SQLite catalogs (no Spark).

Every refusal here must happen before any Spark job: the Spark connection is removed,
so reaching the submission would raise a *connection* error instead of the expected one,
and the table's metadata pointer must not move.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.rules.erasure import erasure_table_facts
from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineExceededError, IcebergErasureDeadlineSensor
from tests.support.erasure import SALT, add_requests, append_people, create_people_table, person
from tests.support.lake import fake_context


@pytest.fixture
def erasure_lake(lake, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": SALT}))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    create_people_table(lake, "db.people")
    append_people(lake, "db.people", 2)
    add_requests(lake, "db.requests", {"R-1": person(3)})
    return lake


def _op(**kw):
    args = {"task_id": "erase", "table": "db.people", "subject_columns": "customer_id", "requests_table": "db.requests"}
    return IcebergErasureOperator(**{**args, **kw})


def _refused(hook, op, exc, match, table="db.people"):
    before = hook.metadata_location(table)
    req_before = hook.metadata_location("db.requests")
    with pytest.raises(exc, match=match):
        op.execute(fake_context())
    assert hook.metadata_location(table) == before
    assert hook.metadata_location("db.requests") == req_before


def test_missing_subject_column_refused(erasure_lake):
    _refused(erasure_lake, _op(subject_columns=["customer_id", "email"]), IcebergRefusedError, "email.*do not exist")


def test_identity_partition_on_subject_refused(erasure_lake):
    create_people_table(erasure_lake, "db.by_person", partition_by=("customer_id",))
    append_people(erasure_lake, "db.by_person", 1)
    _refused(
        erasure_lake, _op(table="db.by_person"), IcebergRefusedError, "identity\\(customer_id\\).*paths", "db.by_person"
    )


def test_unsupported_format_and_gc_disabled_refused(erasure_lake):
    create_people_table(erasure_lake, "db.orc", **{"write.format.default": "orc", "gc.enabled": "false"})
    _refused(erasure_lake, _op(table="db.orc"), IcebergRefusedError, "orc data files.*gc.enabled=false", "db.orc")


def test_bad_arguments_refused(erasure_lake, tmp_path):
    _refused(erasure_lake, _op(ref_policy="ignore"), IcebergValidationError, "ref_policy")
    _refused(erasure_lake, _op(subject_columns="customer id"), IcebergValidationError, "subject_columns")
    _refused(erasure_lake, _op(request_ids=["alice@example.com"]), IcebergValidationError, "never pass subject")
    _refused(erasure_lake, _op(tables_in_scope=["db.other"]), IcebergValidationError, "must include")
    _refused(erasure_lake, _op(salt_conn_id="no_such_salt"), IcebergValidationError, "no_such_salt")
    with pytest.raises(IcebergValidationError, match="exactly one subject source"):
        _op(subjects_file="/tmp/x.jsonl")
    with pytest.raises(IcebergValidationError, match="exactly one subject source"):
        _op(requests_table=None)


def test_short_salt_refused(erasure_lake, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": "short"}))
    _refused(erasure_lake, _op(), IcebergValidationError, "16 characters")


def test_requests_table_without_required_columns_refused(erasure_lake):
    erasure_lake.catalog.create_table("db.bad_requests", schema=_schema({"request_id": "string"}))
    _refused(erasure_lake, _op(requests_table="db.bad_requests"), IcebergValidationError, "subject_key")


def test_subjects_file_must_be_private(erasure_lake, tmp_path):
    f = tmp_path / "subjects.jsonl"
    f.write_text(json.dumps({"request_id": "R-9", "subject_key": person(1)}) + "\n")
    os.chmod(f, 0o644)
    _refused(erasure_lake, _op(requests_table=None, subjects_file=str(f)), IcebergValidationError, "chmod 600")


def test_templated_fields_render(erasure_lake):
    op = _op(
        table="{{ params.t }}",
        subject_columns="{{ params.c }}",
        requests_table="{{ params.r }}",
        ref_policy="{{ params.p }}",
        tables_in_scope=["{{ params.t }}", "db.other"],
    )
    ctx = {**fake_context(), "params": {"t": "db.people", "c": "customer_id", "r": "db.requests", "p": "keep"}}
    op.render_template_fields(ctx)
    assert (op.table, op.subject_columns, op.requests_table, op.ref_policy) == (
        "db.people",
        "customer_id",
        "db.requests",
        "keep",
    )
    assert op.tables_in_scope == ["db.people", "db.other"]


def test_hook_facts_and_request_states_never_expose_subjects(erasure_lake):
    tbl = erasure_lake.load_table("db.people")
    facts = erasure_table_facts(tbl, erasure_lake.data_files(tbl, all_snapshots=True, deletes_only=True))
    assert facts["schema_fields"]["customer_id"] == "string"
    assert ("order_ts", "day") in facts["partition_fields"]
    assert facts["equality_delete_files"] == 0 and facts["format_version"] == 2
    states = erasure_lake.governance.erasure_request_states("db.requests")
    assert states and set(states[0]) == {"request_id", "received_at", "status", "completed_at"}
    assert person(3) not in json.dumps(states, default=str)


# --------------------------------------------------------------------------- sensor
def _sensor(**kw):
    kw.setdefault("logical_deadline_hours", 72)  # the fixture's requests arrived a day ago
    return IcebergErasureDeadlineSensor(task_id="deadline", requests_table="db.requests", poke_interval=1, **kw)


@pytest.mark.security
def test_deadline_sensor_logical_deadline_and_refusal(erasure_lake, capfd):
    with pytest.raises(IcebergErasureDeadlineExceededError, match=r"1 past the logical deadline \(12 hours\)") as err:
        _sensor(logical_deadline_hours=12).poke(fake_context())
    assert "R-1" not in str(err.value)  # counts, never request ids
    capfd.readouterr()
    assert _sensor(logical_deadline_hours=26).poke(fake_context()) is True
    out = capfd.readouterr()
    assert "1 erasure request(s) at risk of missing the logical deadline" in out.out + out.err
    assert "R-1" not in out.out + out.err
    before = {t: erasure_lake.metadata_location(t) for t in ("db.people", "db.requests")}
    with pytest.raises(IcebergValidationError, match="logical_deadline_hours=800 is longer than the physical"):
        _sensor(logical_deadline_hours=800, deadline_days=30).poke(fake_context())
    assert {t: erasure_lake.metadata_location(t) for t in before} == before  # bad input changed nothing


def test_deadline_sensor_passes_when_nothing_overdue(erasure_lake):
    assert _sensor().poke(fake_context()) is True
    assert _sensor(wait_for_completion=True).poke(fake_context()) is False  # R-1 still open


@pytest.mark.security
def test_deadline_sensor_fails_on_overdue_request(erasure_lake):
    add_requests(erasure_lake, "db.requests", {"R-OLD": person(5)}, received_days_ago=31)
    with pytest.raises(IcebergErasureDeadlineExceededError, match=r"1 past the physical deadline \(30 days\)") as err:
        _sensor(deadline_days=30).poke(fake_context())
    assert person(5) not in str(err.value) and "R-OLD" not in str(err.value)
    assert _sensor(deadline_days="45", logical_deadline_hours=24 * 40).poke(fake_context()) is True
    with pytest.raises(IcebergValidationError):
        _sensor(deadline_days="soon").poke(fake_context())


def test_deadline_sensor_ignores_erased_requests(erasure_lake):
    import pyarrow as pa

    tbl = erasure_lake.load_table("db.requests")
    old = datetime.now(UTC) - timedelta(days=90)
    row = {
        "request_id": "R-ERASED",
        "subject_key": person(6),
        "received_at": old,
        "status": "erased",
        "updated_at": None,
        "completed_at": old,
    }
    tbl.append(pa.Table.from_pylist([row], schema=tbl.schema().as_arrow()))
    assert _sensor().poke(fake_context()) is True


def _schema(columns):
    from airflow_iceberg_provider.rules.schema import parse_columns

    return parse_columns(columns)


# ----------------------------------------------------------------- phases (#13)
def test_phase_refusals_leave_metadata_unchanged(erasure_lake, tmp_path):
    _refused(erasure_lake, _op(phase="compact"), IcebergValidationError, "phase='compact' is not an erasure phase")
    # R-1 is pending: nothing logically erased, nothing to purge (no JVM started)
    _refused(erasure_lake, _op(phase="purge"), IcebergValidationError, "phase='logical' first")
    _refused(erasure_lake, _op(phase="purge", request_ids=["R-9"]), IcebergValidationError, "nothing to purge")
    path = tmp_path / "s.jsonl"
    path.write_text('{"request_id": "R-1", "subject_key": "x"}\n')
    os.chmod(path, 0o600)
    op = _op(phase="purge", requests_table=None, subjects_file=str(path))
    _refused(erasure_lake, op, IcebergValidationError, "phase='purge' needs requests_table")


def test_maintenance_plan_erasure_purge_option_skips_when_nothing_is_logically_erased(erasure_lake):
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator

    opts = {"requests_table": "db.requests", "subject_columns": "customer_id"}
    plan = IcebergMaintenancePlanOperator(task_id="nightly", table="db.people", erasure_purge=opts)
    before = erasure_lake.metadata_location("db.people")
    assert plan._erasure_purge(fake_context()) == (None, None)  # no purge action, no job for it
    assert erasure_lake.metadata_location("db.people") == before
    for bad, match in [
        ({**opts, "phase": "full"}, "runs phase='purge' only"),
        ({"requests_table": "db.requests"}, "erasure_purge needs at least"),
        ({**opts, "salt": "x"}, "unknown keys \\['salt'\\]"),
    ]:
        with pytest.raises(IcebergValidationError, match=match):
            IcebergMaintenancePlanOperator(task_id="n", table="db.people", erasure_purge=bad)._erasure_purge(
                fake_context()
            )


def test_maintenance_plan_erasure_purge_is_the_first_action_of_the_plans_job(erasure_lake):
    """A logically erased request: the purge becomes the job's first action; its parameters (salt included)
    travel in the job spec's ``erasure`` entry, never in the action's ledger-recorded args."""
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
    from tests.support.erasure import SALT, add_requests

    add_requests(erasure_lake, "db.requests", {"R-1": "someone"})
    tbl = erasure_lake.load_table("db.requests")
    rows = tbl.scan().to_arrow()
    i = rows.schema.get_field_index("status")
    field = rows.schema.field(i)
    tbl.overwrite(rows.set_column(i, field, pa_strings(["logically_erased"]).cast(field.type)))
    plan = IcebergMaintenancePlanOperator(
        task_id="nightly",
        table="db.people",
        governance_namespace="gov_x",
        erasure_purge={"requests_table": "db.requests", "subject_columns": "customer_id", "ref_policy": "drop"},
    )
    action, spec = plan._erasure_purge(fake_context())
    assert action is not None and spec is not None
    assert (action.action, action.args) == ("erasure_purge", {})
    assert spec["phase"] == "purge" and spec["salt"] == SALT and spec["ref_policy"] == "drop"
    assert spec["source"] == {
        "kind": "requests_table",
        "table": "db.requests",
        "request_ids": ["R-1"],
        "statuses": ["logically_erased", "blocked"],
    }


def pa_strings(values):
    import pyarrow as pa

    return pa.array(values, pa.string())


def test_erasure_refuses_when_its_expiry_would_drop_an_unpinned_legal_hold(erasure_lake):
    """#16: full and purge phases expire snapshots; Iceberg would drop a hold that inherits a table ref age."""
    hook = erasure_lake
    first = hook.list_snapshots("db.people")[0].snapshot_id
    hook.set_ref("db.people", "legal-hold-case-3", first, ref_type="tag")  # placed by hand: no own max-ref-age
    hook.ensure_table_properties("db.people", {"history.expire.max-ref-age-ms": "1"})
    _refused(hook, _op(phase="full"), IcebergRefusedError, "would drop the legal hold.*legal-hold-case-3")


def test_a_refusal_before_spark_is_recorded_with_its_reason_for_the_governance_link(erasure_lake):
    """The erasure task's extra link shows why it was refused (a ledger row), and nothing else changed."""
    from airflow_iceberg_provider.ui import views

    ctx = fake_context("erasure", "manual__refused", "erase")
    before = {t: erasure_lake.metadata_location(t) for t in ("db.people", "db.requests")}
    with pytest.raises(IcebergRefusedError, match="email.*do not exist"):
        _op(subject_columns=["customer_id", "email"]).execute(ctx)
    assert {t: erasure_lake.metadata_location(t) for t in before} == before
    rows = [r for r in erasure_lake.governance.read("ledger") if r["operation"] == "erasure"]
    assert [(r["status"], r["table_name"], r["task_id"]) for r in rows] == [("refused", "db.people", "erase")]
    done = views.task_erasure([], views.ledger_views(rows), {"dag_id": "erasure", "run_id": "manual__refused"})
    (refusal,) = done["refusals"]
    assert "email" in refusal["reason"] and "do not exist" in refusal["reason"]
    assert refusal["table"] == "db.people" and done["request_ids"] == []
    assert views.public_ledger(views.ledger_views(rows)) == []  # erasure rows stay on the restricted side


# ------------------------------------------------ grace period and retention of copies
def test_bad_grace_period_is_refused_naming_the_parameter_and_changes_nothing(erasure_lake):
    for bad, match in (("soon", "redact_after='soon' is not a duration"), ("400d", "longer than 365 days")):
        _refused(erasure_lake, _op(redact_after=bad), IcebergValidationError, match)


def test_malformed_retention_of_copies_is_refused_before_spark_and_changes_nothing(erasure_lake):
    key = "erasure.copies.backup-retention-days"
    erasure_lake.update_table_properties("db.people", updates={key: "two weeks"})
    _refused(erasure_lake, _op(), IcebergValidationError, rf"table db.people property: {key}='two weeks' is not")
