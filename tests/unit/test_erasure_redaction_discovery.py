"""Pure rules of the requests-table redaction and of catalog-wide erasure (declared subject
columns, discovery, the map of tables x subject columns), plus the discovery operator on a real
pyiceberg SQLite catalog (no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.rules import erasure as ep
from tests.support.lake import fake_context

H1, H2 = "a" * 64, "b" * 64
WHEN = datetime(2026, 11, 1, tzinfo=UTC)


# ------------------------------------------------------------------ redaction
def _ev(rid, table, h=H1, phase="purge", verification="verified"):
    return {"request_id": rid, "table_name": table, "subject_hash": h, "phase": phase, "verification": verification}


def test_redaction_takes_erased_requests_with_one_hash_only():
    requests = [
        {"request_id": "R-1", "status": "erased"},
        {"request_id": "R-2", "status": "erased"},
        {"request_id": "R-3", "status": "logically_erased"},
        {"request_id": "R-4", "status": "erased"},  # two hashes: the salt changed between runs
        {"request_id": "R-5", "status": "erased"},  # no evidence at all
        {"request_id": "R-6", "status": "redacted"},
    ]
    evidence = [_ev("R-1", "db.a"), _ev("R-1", "db.b"), _ev("R-2", "db.a", H2), _ev("R-3", "db.a", phase="logical")]
    evidence += [_ev("R-4", "db.a"), _ev("R-4", "db.b", H2), _ev("R-6", "db.a")]
    plan = lc.redaction_plan(requests, evidence)
    assert plan == {"redact": {"R-1": H1, "R-2": H2}, "unresolved": ["R-4", "R-5"], "waiting": []}


def test_redaction_with_a_scope_needs_physical_verified_evidence_on_every_table():
    requests = [{"request_id": "R-1", "status": "erased"}, {"request_id": "R-2", "status": "erased"}]
    evidence = [_ev("R-1", "db.a"), _ev("R-1", "db.b"), _ev("R-2", "db.a"), _ev("R-2", "db.b", phase="logical")]
    plan = lc.redaction_plan(requests, evidence, scope=["db.a", "db.b"])
    assert plan == {"redact": {"R-1": H1}, "unresolved": ["R-2"], "waiting": []}


def test_redacted_key_is_the_prefixed_evidence_hash():
    assert lc.REDACTED_PREFIX == "hmac-sha256:"
    h = ep.subject_hash("x" * 16, "person@example")
    from airflow_iceberg_provider.core.erasure_lifecycle import redacted_key

    assert redacted_key(h) == "hmac-sha256:" + h
    for bad in ("", "person@example", "A" * 64, "a" * 63):
        with pytest.raises(ValueError, match="64-hex-digit"):
            redacted_key(bad)


def test_redacted_is_final_and_never_moves():
    assert "redacted" in lc.FINAL_STATUSES and "redacted" in lc.STATUSES
    for phase in lc.PHASES:
        for outcome in (lc.VERIFIED, lc.FAILED, lc.INCOMPLETE, None):
            assert lc.transition("redacted", phase, outcome) == "redacted"
    assert lc.combined_status("redacted", {"db.a": ("purge", lc.FAILED)}, ["db.a"]) == "redacted"
    # the deadline rules treat it as closed
    rows = [{"request_id": "R-1", "status": "redacted", "received_at": WHEN - timedelta(days=90)}]
    report = ep.deadline_report(rows, now=WHEN, logical=timedelta(hours=24), physical=timedelta(days=30))
    assert not any(report.values())
    assert ep.overdue_requests(rows, now=WHEN, deadline=timedelta(days=30)) == []


def test_resubmitting_a_redacted_request_is_refused_naming_the_id_not_the_key():
    with pytest.raises(IcebergValidationError) as err:
        ep.new_request_rows(
            {"R-1": "alice@example.com", "R-2": "bob@example.com"}, received_at=WHEN, known=["R-1"], redacted=["R-1"]
        )
    text = str(err.value)
    assert "['R-1']" in text and "never reopened" in text and "new request id" in text
    assert "alice" not in text and "bob" not in text
    # a known, not redacted id is still skipped silently (an idempotent re-run)
    assert [
        r["request_id"] for r in ep.new_request_rows({"R-1": "a", "R-2": "b"}, received_at=WHEN, known=["R-1"])
    ] == ["R-2"]


def test_resubmission_through_the_hook_is_refused_and_adds_nothing(lake):
    lake.governance.submit_erasure_requests("db.req", {"R-1": "alice@example.com"}, received_at=WHEN)
    tbl = lake.load_table("db.req")
    import pyarrow as pa

    # what the purge leaves: the key replaced by its hash, status redacted
    tbl.overwrite(
        pa.Table.from_pylist(
            [
                {
                    "request_id": "R-1",
                    "subject_key": "hmac-sha256:" + H1,
                    "received_at": WHEN,
                    "status": "redacted",
                    "updated_at": None,
                    "completed_at": None,
                }
            ],
            schema=tbl.schema().as_arrow(),
        )
    )
    before = lake.metadata_location("db.req")
    with pytest.raises(IcebergValidationError, match=r"\['R-1'\] were erased .*never reopened"):
        lake.governance.submit_erasure_requests("db.req", {"R-1": "alice@example.com", "R-2": "carol@example.com"})
    assert lake.metadata_location("db.req") == before
    assert [r["status"] for r in lake.governance.erasure_request_states("db.req")] == ["redacted"]


# ------------------------------------------------------- declared subject columns
def test_erasure_ready_properties_declare_the_kind():
    props = ep.erasure_ready_properties(["customer_id", "referrer_id"], kind="customer_id")
    assert props["erasure.subject-columns.customer_id"] == "customer_id,referrer_id"
    assert props["write.parquet.bloom-filter-enabled.column.referrer_id"] == "true"
    assert "erasure.subject-columns.customer_id" not in ep.erasure_ready_properties("customer_id")
    with pytest.raises(IcebergValidationError, match="subject_kind='Customer ID' is not a key kind"):
        ep.erasure_ready_properties("customer_id", kind="Customer ID")


def test_declared_subject_columns_parse_and_refuse_malformed_declarations():
    props = {
        "erasure.subject-columns.email": " email , contact_email ",
        "erasure.subject-columns.customer_id": "customer_id",
        "write.format.default": "parquet",
    }
    assert ep.declared_subject_columns(props) == {
        "customer_id": ["customer_id"],
        "email": ["email", "contact_email"],
    }
    for key, value, fragment in [
        ("erasure.subject-columns.email", "", "is malformed"),
        ("erasure.subject-columns.email", "a,a", "lists a column twice"),
        ("erasure.subject-columns.E Mail", "email", "not a key kind"),
        ("erasure.subject-columns.email", "bad column", "is malformed"),
    ]:
        with pytest.raises(IcebergValidationError, match=fragment) as err:
            ep.declared_subject_columns({key: value})
        assert key in str(err.value)


def _facts(props, fields=None, **kw):
    return {
        "properties": props,
        "schema_fields": fields or {"customer_id": "string", "email": "string", "amount": "double"},
        "partition_fields": kw.get("partition_fields", []),
        "format_version": kw.get("format_version", 2),
        "equality_delete_files": kw.get("equality_delete_files", 0),
    }


def test_discovery_maps_every_declaring_table_with_the_whole_scope():
    tables = {
        "sales.orders": _facts(ep.erasure_ready_properties("customer_id", kind="customer_id")),
        "crm.tickets": _facts({"erasure.subject-columns.customer_id": "customer_id,email"}),
        "crm.newsletter": _facts({"erasure.subject-columns.email": "email"}),
        "ops.metrics": _facts({}),
    }
    found = ep.discover_subject_tables(tables, "customer_id")
    assert [(d["table"], d["subject_columns"], d["problems"]) for d in found] == [
        ("crm.tickets", ["customer_id", "email"], []),
        ("sales.orders", ["customer_id"], []),
    ]
    mapping = ep.erasure_mapping(found, "customer_id")
    assert mapping == [
        {
            "table": "crm.tickets",
            "subject_columns": ["customer_id", "email"],
            "tables_in_scope": ["crm.tickets", "sales.orders"],
        },
        {
            "table": "sales.orders",
            "subject_columns": ["customer_id"],
            "tables_in_scope": ["crm.tickets", "sales.orders"],
        },
    ]
    assert [d["table"] for d in ep.discover_subject_tables(tables, "email")] == ["crm.newsletter"]


def test_discovery_refuses_nothing_found_and_tables_that_cannot_be_erased():
    with pytest.raises(IcebergValidationError, match="no table declares subject columns of kind 'phone'"):
        ep.erasure_mapping(ep.discover_subject_tables({"a.b": _facts({})}, "phone"), "phone")
    tables = {
        "a.ok": _facts({"erasure.subject-columns.customer_id": "customer_id"}),
        "a.typo": _facts({"erasure.subject-columns.customer_id": "customer"}),
        "a.by_key": _facts(
            {"erasure.subject-columns.customer_id": "customer_id"},
            partition_fields=[("customer_id", "identity")],
        ),
    }
    with pytest.raises(IcebergValidationError) as err:
        ep.erasure_mapping(ep.discover_subject_tables(tables, "customer_id"), "customer_id")
    text = str(err.value)
    assert "nothing was changed" in text and "['customer'] do not exist in a.typo" in text
    assert "a.by_key is partitioned by identity(customer_id)" in text


def test_subject_column_map_rows_and_readiness():
    tables = {
        "sales.orders": _facts(ep.erasure_ready_properties("customer_id", kind="customer_id")),
        "crm.tickets": _facts({"erasure.subject-columns.customer_id": "customer_id,ghost"}),
        "crm.bad": _facts({"erasure.subject-columns.x": ""}),
        "ops.metrics": _facts({}),
    }
    rows = {(r["table"], r["column"]): r for r in ep.subject_column_map(tables)}
    expected = {("sales.orders", "customer_id"), ("crm.tickets", "customer_id"), ("crm.tickets", "ghost")}
    assert set(rows) == expected | {("crm.bad", None)}
    ready = rows[("sales.orders", "customer_id")]
    assert ready["kind"] == "customer_id" and ready["erasure_ready"] and ready["bloom_filter"]
    assert ready["bounds"] == "none" and ready["type"] == "string" and ready["problems"] == []
    plain = rows[("crm.tickets", "customer_id")]
    assert plain["exists"] and not plain["bloom_filter"] and plain["bounds"] == "truncate(16)"
    assert not plain["erasure_ready"] and "['ghost'] do not exist" in plain["problems"][0]
    assert rows[("crm.tickets", "ghost")]["exists"] is False
    assert rows[("crm.bad", None)]["kind"] is None and "is malformed" in rows[("crm.bad", None)]["problems"][0]


# ------------------------------------------------------------ discovery operator
def test_discovery_operator_lists_declaring_tables_from_the_catalog(lake):
    from airflow_iceberg_provider.operators.erasure_discovery import (
        IcebergErasureDiscoveryOperator,
        catalog_subject_column_map,
    )
    from tests.support.erasure import create_people_table

    create_people_table(lake, "sales.orders", **ep.erasure_ready_properties("customer_id", kind="customer_id"))
    create_people_table(lake, "crm.tickets", **{"erasure.subject-columns.customer_id": "customer_id"})
    create_people_table(lake, "crm.other")
    lake.governance.table("erasure_evidence")
    out = IcebergErasureDiscoveryOperator(task_id="d", subject_kind="customer_id").execute(fake_context())
    scope = ["crm.tickets", "sales.orders"]
    assert out == [
        {"table": "crm.tickets", "subject_columns": ["customer_id"], "tables_in_scope": scope},
        {"table": "sales.orders", "subject_columns": ["customer_id"], "tables_in_scope": scope},
    ]
    only_crm = IcebergErasureDiscoveryOperator(task_id="d", subject_kind="customer_id", namespaces=["crm"])
    assert [m["table"] for m in only_crm.execute(fake_context())] == ["crm.tickets"]
    with pytest.raises(IcebergValidationError, match=r"namespaces \['nope'\] do not exist"):
        IcebergErasureDiscoveryOperator(task_id="d", subject_kind="customer_id", namespaces=["nope"]).execute(
            fake_context()
        )
    with pytest.raises(IcebergValidationError, match="no table declares subject columns of kind 'email'"):
        IcebergErasureDiscoveryOperator(task_id="d", subject_kind="email").execute(fake_context())
    with pytest.raises(IcebergValidationError, match="subject_kind='Email' is not a key kind"):
        IcebergErasureDiscoveryOperator(task_id="d", subject_kind="Email").execute(fake_context())
    rows = catalog_subject_column_map(lake)
    assert [(r["table"], r["column"], r["erasure_ready"]) for r in rows] == [
        ("crm.tickets", "customer_id", False),
        ("sales.orders", "customer_id", True),
    ]
