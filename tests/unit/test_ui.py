"""Governance view (#17): pages and JSON API of the real Airflow API app, against a SQLite catalog.

The app under test is Airflow's own ``create_app("core")`` with the plugin mounted by the plugins
manager and the SimpleAuthManager; tokens come from its ``/auth/token`` route. The lake is filled by
the provider's operators and governance writers (``tests.support.ui.fill_lake``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest

from airflow_iceberg_provider.ui import views
from tests.support.lake import catalog_conn_json
from tests.support.ui import SALT, SUBJECTS, airflow_api_client, fill_lake


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    tmp = tmp_path_factory.mktemp("ui")
    (tmp / "wh").mkdir()
    (tmp / "wh2").mkdir()
    conns = {
        "iceberg_catalog_default": catalog_conn_json(tmp / "catalog.db", tmp / "wh"),
        "empty_catalog": catalog_conn_json(tmp / "empty.db", tmp / "wh2"),
    }
    with airflow_api_client(tmp, **conns) as (client, tokens):
        hook = IcebergCatalogHook()
        ids = fill_lake(hook)
        yield SimpleNamespace(client=client, hook=hook, ids=ids, tokens=tokens, tmp=tmp)


def get(ui, url, user="auditor", **kw):
    return ui.client.get(url, headers={"Authorization": f"Bearer {ui.tokens[user]}"}, **kw)


PAGES = [
    "/governance/",
    "/governance/tables/db.orders",
    "/governance/erasure",
    "/governance/erasure/R-100/report",
    "/governance/api/tables",
    "/governance/api/tables/db.orders",
    "/governance/api/erasure",
    "/governance/api/erasure/R-100",
    "/governance/api/connections",
    "/governance/link/erasure?table=db.orders&dag_id=erasure&run_id=manual__ui&task_id=erase_orders",
    "/governance/erasure-map",
    "/governance/api/erasure-map",
]


# ---------------------------------------------------------------- access
def test_no_session_means_no_data(ui):
    for url in PAGES:
        anon = ui.client.get(url, follow_redirects=False)
        if "/api/" in url:
            assert anon.status_code == 401, url
        else:  # a page (a bookmarked report) goes to Airflow's login and comes back after it
            assert anon.status_code == 303, url
            assert anon.headers["location"].startswith("/auth/login?next=%2Fgovernance"), url
        assert "db.orders" not in anon.text and "R-100" not in anon.text
        bad = ui.client.get(url, headers={"Authorization": "Bearer not-a-jwt"}, follow_redirects=False)
        assert bad.status_code == 403, url
        forged = ui.client.get(url, cookies={"_token": "eyJhbGciOiJIUzUxMiJ9.e30.x"}, follow_redirects=False)
        assert forged.status_code == 403 and "db.orders" not in forged.text, url


def test_session_cookie_and_bearer_token_both_work(ui):
    assert get(ui, "/governance/api/tables").status_code == 200
    resp = ui.client.get("/governance/api/tables", cookies={"_token": ui.tokens["admin"]})
    assert resp.status_code == 200 and resp.json()["tables"][0]["table"] == "db.orders"


RESTRICTED = [
    "/governance/erasure",
    "/governance/erasure/R-100/report",
    "/governance/approvals",
    "/governance/api/erasure",
    "/governance/api/erasure/R-100",
    "/governance/api/approvals",
    "/governance/link/erasure?table=db.orders&dag_id=erasure&run_id=manual__ui&task_id=erase_orders",
    "/governance/erasure-map",
    "/governance/api/erasure-map",
]


def test_erasure_and_approvals_need_the_second_permission(ui):
    """A viewer reads health, audits and the timeline; erasure and approvals are refused, and nothing of
    them leaks into the pages a viewer may open (nor their JSON)."""
    for url in RESTRICTED:
        refused = get(ui, url, follow_redirects=False)
        assert refused.status_code == 403, url
        assert "R-100" not in refused.text and "db.requests" not in refused.text, url
        assert get(ui, url, user="admin", follow_redirects=False).status_code in (200, 307), url
    viewer_blob = "".join(
        get(ui, url).text
        for url in (
            "/governance/",
            "/governance/api/tables",
            "/governance/tables/db.orders",
            "/governance/api/tables/db.orders",
            "/governance/tables/db.requests",
            "/governance/api/tables/db.requests",
        )
    )
    assert "db.orders" in viewer_blob and "min_rows" in viewer_blob  # control: health and audits are there
    for erasure_data in ("R-100", "R-400", "job-ui-purge", "open_requests", "Erasure</a>", "approval-ui-1", "officer"):
        assert erasure_data not in viewer_blob, erasure_data
    admin = get(ui, "/governance/api/tables/db.orders", user="admin").json()
    assert {r["request_id"] for r in admin["erasure"]["requests"]} == {"R-100", "R-400"}
    assert [a["decision"] for a in admin["approvals"]] == ["approved"]


def test_the_second_permission_maps_to_a_configurable_role(ui, monkeypatch):
    from airflow_iceberg_provider.ui.app import RESTRICTED_ROLE_OPTION

    monkeypatch.setenv(f"AIRFLOW__ICEBERG_PROVIDER__{RESTRICTED_ROLE_OPTION.upper()}", "viewer")
    assert get(ui, "/governance/api/erasure").status_code == 200
    monkeypatch.setenv(f"AIRFLOW__ICEBERG_PROVIDER__{RESTRICTED_ROLE_OPTION.upper()}", "admin")
    assert get(ui, "/governance/api/erasure").status_code == 403
    assert get(ui, "/governance/api/erasure", user="admin").status_code == 200


# ------------------------------------------------ Airflow's own permissions
def test_rows_of_unreadable_dags_are_hidden_by_one_rule():
    from airflow_iceberg_provider.ui.access import NO_DAG, hidden_dag_ids, without_dags

    rows = [{"dag_id": "a", "n": 1}, {"dag_id": "b", "n": 2}, {"dag_id": None, "n": 3}, {"n": 4}]
    everything = hidden_dag_ids(rows, lambda d: True)
    assert everything == frozenset() and without_dags(rows, everything) == rows
    only_a = hidden_dag_ids(rows, lambda d: d == "a")
    assert only_a == {"b", NO_DAG}  # rows written outside Airflow need the right to read every DAG
    assert [r["n"] for r in without_dags(rows, only_a)] == [1]


def test_access_asks_the_real_auth_manager_per_dag_and_per_connection(monkeypatch):
    """The SimpleAuthManager (viewer: no connection) and the per-DAG subclass, asked as the view asks."""
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    from airflow_iceberg_provider.ui.access import NO_DAG, Access
    from tests.support.dag_limited_auth import DagLimitedAuthManager

    manager = DagLimitedAuthManager()
    conns = {"iceberg_catalog_default": None, "other": None}
    limited = Access(SimpleAuthManagerUser(username="limited", role="op"), manager, restricted=False)
    viewer = Access(SimpleAuthManagerUser(username="viewer", role="viewer"), manager, restricted=False)
    admin = Access(SimpleAuthManagerUser(username="admin", role="admin"), manager, restricted=True)
    monkeypatch.setenv("AIP_DAG_LIMITS", "limited=orders_wap")
    assert limited.readable_connections(conns) == ["iceberg_catalog_default", "other"]
    assert viewer.readable_connections(conns) == []  # Airflow's viewers read no connection
    assert limited.may_read_dag("orders_wap") and not limited.may_read_dag("erasure_nightly")
    assert not limited.may_read_dag(NO_DAG) and admin.may_read_dag(NO_DAG) and viewer.may_read_dag("x")


def test_a_user_without_connection_permission_sees_no_connection_and_no_data(ui):
    assert get(ui, "/governance/api/connections", user="viewer").json() == {"connections": []}
    assert set(get(ui, "/governance/api/connections").json()["connections"]) == {
        "iceberg_catalog_default",
        "empty_catalog",
    }
    for url in ("/governance/", "/governance/api/tables", "/governance/tables/db.orders"):
        resp = get(ui, url, user="viewer", follow_redirects=False)
        assert resp.status_code == 403, url
        assert "may not read any iceberg_catalog connection" in resp.text and "db.orders" not in resp.text, url
    # naming a connection answers as for one that does not exist: its existence is not confirmed
    named = get(ui, "/governance/api/tables?conn=iceberg_catalog_default", user="viewer")
    missing = get(ui, "/governance/api/tables?conn=no_such_conn", user="viewer")
    assert named.status_code == missing.status_code == 404
    assert named.json()["detail"].replace("iceberg_catalog_default", "X") == missing.json()["detail"].replace(
        "no_such_conn", "X"
    )
    assert "empty_catalog" not in named.text and "min_rows" not in named.text


def test_a_user_limited_to_some_dags_sees_only_their_rows(ui):
    limited = get(ui, "/governance/api/tables/db.orders", user="limited").json()
    auditor = get(ui, "/governance/api/tables/db.orders").json()
    seen = {r["dag_id"] for r in limited["ledger"]} | {a["dag_id"] for a in limited["audits"]}
    assert seen == {"orders_wap"}
    assert limited["maintenance"] == [] and auditor["maintenance"]  # orders_maintenance is not theirs
    assert {r["dag_id"] for r in auditor["ledger"]} > {"orders_wap", "orders_maintenance"}
    assert limited["ledger_options"]["operations"] == ["wap_create_branch", "wap_publish"]
    assert "orders_maintenance" not in get(ui, "/governance/tables/db.orders", user="limited").text
    tables = get(ui, "/governance/api/tables", user="limited").json()["tables"]
    assert [t["table"] for t in tables] == ["db.orders"]
    assert tables[0]["last_audit"]["failed"] == 1  # the audits of their DAG are all there


def test_public_ledger_rows_carry_no_erasure_facts():
    ledger = [
        {"operation": "maintenance.erasure_purge", "metrics": {"requests": 2}, "details": {}},
        {"operation": "erasure", "metrics": {}, "details": {}},
        {"operation": "approval", "metrics": {}, "details": {}},
        {
            "operation": "maintenance_plan",
            "metrics": {"rewritten_data_files_count": 3, "erasure_purge": {"request_ids": ["R-1"]}},
            "details": {"args": {"subject_hash": "ab", "where": "x"}, "actions": [{"request_ids": ["R-2"], "n": 1}]},
        },
    ]
    (kept,) = views.public_ledger(ledger)
    assert kept["operation"] == "maintenance_plan"
    assert kept["metrics"] == {"rewritten_data_files_count": 3}
    assert kept["details"] == {"args": {"where": "x"}, "actions": [{"n": 1}]}
    assert "R-1" not in json.dumps(kept) and "R-2" not in json.dumps(kept)


def test_every_route_is_read_only(ui):
    for url in ("/governance/", "/governance/api/tables", "/governance/erasure"):
        assert ui.client.post(url, headers={"Authorization": f"Bearer {ui.tokens['admin']}"}).status_code == 405
    # a connection whose SQLite file does not exist is reported, and no catalog file is created
    resp = get(ui, "/governance/api/tables?conn=empty_catalog")
    assert resp.status_code == 200 and resp.json()["tables"] == []
    status = resp.json()["catalog"]
    assert status["state"] == "unreadable" and "does not exist" in status["message"]
    assert "cannot be read" in get(ui, "/governance/?conn=empty_catalog").text
    assert not (ui.tmp / "empty.db").exists()


def test_a_catalog_without_tables_says_so_and_stays_unwritten(ui):
    import sqlite3

    from airflow_iceberg_provider.ui.reader import clear_caches

    path = ui.tmp / "empty.db"
    # an Iceberg SQL catalog with its catalog tables but no table in it (what pyiceberg creates)
    from pyiceberg.catalog.sql import SqlCatalog

    SqlCatalog("lakehouse", uri=f"sqlite:///{path}", warehouse=f"file://{ui.tmp / 'wh2'}").engine.dispose()
    before = path.read_bytes()
    clear_caches()
    try:
        data = get(ui, "/governance/api/tables?conn=empty_catalog").json()
        assert data["catalog"]["state"] == "empty" and data["tables"] == []
        assert "has no tables" in get(ui, "/governance/?conn=empty_catalog").text
        assert get(ui, "/governance/api/erasure-map?conn=empty_catalog", user="admin").json()["tables"] == []
        assert 'id="no-declared-tables"' in get(ui, "/governance/erasure-map?conn=empty_catalog", user="admin").text
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT count(*) FROM iceberg_tables").fetchone() == (0,)
        assert path.read_bytes() == before
    finally:
        path.unlink()
        clear_caches()


# ----------------------------------------------------------------- pages
def test_tables_page_answers_which_tables_are_unhealthy(ui):
    data = get(ui, "/governance/api/tables").json()
    assert [t["table"] for t in data["tables"]] == ["db.orders"]
    row = data["tables"][0]
    health = ui.hook.health("db.orders")
    assert row["health"]["data_files"] == health.data_files and row["health"]["snapshots"] == health.snapshots
    assert row["health"]["small_file_ratio"] == round(health.small_file_ratio, 4)
    assert row["health"]["snapshot_id"] == str(ui.ids["published"])
    assert row["last_publish"]["snapshot_after"] == str(ui.ids["published"])
    assert row["last_audit"]["passed"] is False and row["last_audit"]["failed"] == 1
    # the verdict is the maintenance planner's: what IcebergMaintenancePlanOperator would do right now
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator

    decision, _, _ = IcebergMaintenancePlanOperator(task_id="plan", table="db.orders").plan()
    verdict = row["health"]["verdict"]
    assert verdict["verdict"] == ("healthy" if decision.healthy else "needs maintenance")
    assert len(verdict["reasons"]) == len(decision.actions)
    assert not any(
        "_" in word for text in verdict["reasons"] + verdict["notes"] for word in text.split() if "=" not in word
    )
    assert "open_requests" not in row and "open_requests_without_evidence" not in data  # a viewer
    admin = get(ui, "/governance/api/tables", user="admin").json()
    assert admin["tables"][0]["open_requests"] == 0 and admin["open_requests_without_evidence"] == 2
    html = get(ui, "/governance/").text
    assert "db.orders" in html and "failed 1" in html and str(ui.ids["published"]) in html
    assert 'option value="empty_catalog"' in html  # the connection picker lists both catalogs


def test_table_detail_shows_failed_check_observed_vs_expected(ui):
    data = get(ui, "/governance/api/tables/db.orders").json()
    latest = data["audits"][0]
    assert latest["passed"] is False and latest["ref"] == "wap_bad" and latest["snapshot_id"] == str(ui.ids["bad"])
    failed = [c for c in latest["checks"] if not c["passed"]]
    assert failed == [
        {
            "name": "min_rows",
            "type": "row_count",
            "column": None,
            "observed": 3.0,
            "observed_text": "3",
            "condition": ">= 100",
            "passed": False,
        }
    ]
    assert data["audits"][1]["passed"] is True and data["audits"][1]["snapshot_id"] == str(ui.ids["audited"])
    refs = {r["name"]: r for r in data["timeline"]["refs"]}
    assert refs["legal-hold-case-7"]["legal_hold"] is True and refs["release-1"]["legal_hold"] is False
    assert refs["main"]["snapshot_id"] == str(ui.ids["published"]) and refs["wap_bad"]["type"] == "branch"
    assert all(isinstance(s["snapshot_id"], str) for s in data["timeline"]["snapshots"])
    assert data["publishes"][0]["snapshot_after"] == str(ui.ids["published"])
    assert data["publishes"][0]["method"] == "fast_forward"
    m = data["maintenance"][0]
    assert m["action"] == "rewrite_data_files" and m["before"]["data_files"] > m["after"]["data_files"] == 1
    assert m["output"] == {"rewritten_data_files_count": 3, "added_data_files_count": 1}
    html = get(ui, "/governance/tables/db.orders").text
    assert '<td class="check-name">min_rows</td>' in html and '<td class="n observed">3</td>' in html
    assert '<tr class="fail"><td class="check-name">min_rows' in html  # highlighted
    assert "legal-hold-case-7" in html and 'aria-label="snapshot timeline"' in html
    assert 'aria-label="what each maintenance action did"' in html and "rewritten data files" in html


def test_ledger_filter_by_operation_and_status(ui):
    every = get(ui, "/governance/api/tables/db.orders").json()["ledger"]
    ops = {r["operation"] for r in every}
    assert {"create_table", "wap_publish", "create_tag", "maintenance.rewrite_data_files"} <= ops
    pub = get(ui, "/governance/api/tables/db.orders?operation=wap_publish").json()["ledger"]
    assert pub and {r["operation"] for r in pub} == {"wap_publish"}
    assert get(ui, "/governance/api/tables/db.orders?operation=wap_publish&status=failed").json()["ledger"] == []
    html = get(ui, "/governance/tables/db.orders?operation=create_tag").text
    assert "create_tag" in html and "maintenance.rewrite_data_files</td>" not in html


def test_bad_table_and_connection_are_refused_clearly(ui):
    resp = get(ui, "/governance/api/tables/db.orders;drop")
    assert resp.status_code == 400 and "table" in resp.json()["detail"]
    resp = get(ui, "/governance/api/tables?conn=spark_default")
    assert resp.status_code == 404 and "iceberg_catalog" in resp.json()["detail"]
    assert get(ui, "/governance/api/erasure/NOPE", user="admin").status_code == 404


def test_erasure_page_deadlines_and_evidence_report(ui):
    data = get(ui, "/governance/api/erasure", user="admin").json()
    by_id = {r["request_id"]: r for r in data["requests"]}
    assert data["open"] == 2 and data["overdue"] == 1 and data["requests_tables"] == ["db.requests"]
    assert by_id["R-300"]["overdue"] is True and by_id["R-300"]["deadlines"][0]["left_text"].startswith("overdue")
    assert by_id["R-200"]["overdue"] is False and by_id["R-100"]["status"] == "erased"
    assert by_id["R-100"]["tables"] == [{"table": "db.orders", "verification": "verified"}]
    # erased: "erased at" is set and the age stops there (received 3 days ago, erased 1 day ago)
    assert by_id["R-100"]["erased_at"] is not None and by_id["R-200"]["erased_at"] is None
    assert by_id["R-100"]["age_text"].startswith("2 d")
    report = get(ui, "/governance/api/erasure/R-100", user="admin").json()
    from airflow_iceberg_provider.rules.erasure import subject_hash

    assert report["subject_hashes"] == [subject_hash(SALT, SUBJECTS["R-100"])]
    t = report["tables"][0]
    assert (t["request"]["rows_found"], t["request"]["rows_deleted"]) == (4, 4)
    assert (t["batch"]["files_rewritten"], t["batch"]["files_removed"]) == (2, 5)
    assert t["batch"]["snapshot_before"] == str(ui.ids["base"]) and report["verification"] == "verified"
    html = get(ui, "/governance/erasure/R-100/report", user="admin").text
    for field in ("Rows of this subject removed", "Snapshot before", "Files rewritten (batch)", "Iceberg version"):
        assert field in html
    assert subject_hash(SALT, SUBJECTS["R-100"]) in html and "Apache Iceberg 1.10.2" in html
    assert "Ref policy" not in html and "refuse when a tag or branch keeps the subject" in html


def test_evidence_report_states_when_the_subject_is_unreachable_and_gone_from_every_copy(ui):
    """The connection declares no retention of copies: both dates are the purge's moment, and the page
    says where the retention comes from."""
    report = get(ui, "/governance/api/erasure/R-100", user="admin").json()
    (t,) = report["tables"]
    assert t["completion"]["unreachable_at"] is not None
    assert t["completion"]["gone_from_copies_by"] == t["completion"]["unreachable_at"]
    assert t["completion"]["retention_source"] == "declared now: none declared (0 days)"
    assert report["completion"]["copies_late_for"] == []
    html = get(ui, "/governance/erasure/R-100/report", user="admin").text
    assert 'id="unreachable-at"' in html and 'id="gone-from-copies"' in html and 'data-late="false"' in html
    assert "Gone from every copy (object-store versions, backups) by" in html and "none declared (0 days)" in html


def test_evidence_report_is_true_per_request_and_names_every_task(ui):
    """R-400 matched nothing: its report says 0 rows, and the batch figures are labelled as the batch's,
    naming the logical run's task and the purge's task."""
    report = get(ui, "/governance/api/erasure/R-400", user="admin").json()
    (t,) = report["tables"]
    assert t["request"]["rows_found"] == 0 and t["request"]["rows_deleted"] == 0 and report["matched_nothing"]
    assert t["request"]["verification"] == "verified"
    runs = [(r["role"], r["dag_id"], r["task_id"]) for r in t["batch"]["runs"]]
    assert runs == [("logical", "erasure_daily", "erase_orders"), ("purge", "erasure_nightly", "purge_orders")]
    html = get(ui, "/governance/erasure/R-400/report", user="admin").text
    assert 'id="matched-nothing"' in html
    assert '<td class="n rows-found">0</td>' in html and '<td class="n rows-removed">0</td>' in html
    assert "Files rewritten (batch)" in html and "2 request(s) in the batch" in html
    # each contributing task links back to its Airflow task instance (kept in the top frame)
    assert 'href="/dags/erasure_daily/runs/scheduled__day/tasks/erase_orders" target="_top"' in html
    assert 'href="/dags/erasure_nightly/runs/scheduled__night/tasks/purge_orders" target="_top"' in html


def test_no_subject_value_or_secret_in_any_response(ui):
    blob = "".join(get(ui, url, user="admin").text for url in PAGES)
    blob += get(ui, "/governance/tables/db.requests", user="admin").text
    assert "R-100" in blob  # control: the responses do carry the requests
    for secret in [*SUBJECTS.values(), SALT, "subject_key"]:
        assert secret not in blob


# ------------------------------------------------------------ erasure map
#: Values written to the declared tables: the map must never show them.
MAP_VALUES = ("C-MAP-SECRET-1", "map.person@example.org")


@pytest.fixture(scope="module")
def declared(ui):
    """``crm.customers`` erasure-ready for ``customer_id``; ``crm.contacts`` declaring ``email`` and
    ``customer_id`` without bloom filters or with bounds; ``crm.plain`` declaring nothing."""
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from airflow_iceberg_provider.rules.erasure import erasure_ready_properties

    catalog = ui.hook.catalog
    for ns in ("crm", "crm_empty"):
        ui.hook.ensure_namespace(ns)
    schema = Schema(
        NestedField(1, "customer_id", StringType(), required=False),
        NestedField(2, "email", StringType(), required=False),
        NestedField(3, "amount", LongType(), required=False),
    )
    ready = catalog.create_table(
        "crm.customers", schema, properties=erasure_ready_properties(["customer_id"], kind="customer_id")
    )
    catalog.create_table(
        "crm.contacts",
        schema,
        properties={
            "erasure.subject-columns.email": "email",
            "erasure.subject-columns.customer_id": "customer_id",
            "write.parquet.bloom-filter-enabled.column.customer_id": "true",  # bloom filter, but bounds kept
            "write.metadata.metrics.column.email": "none",  # no bounds, but no bloom filter
        },
    )
    catalog.create_table("crm.plain", schema)
    ready.append(
        pa.table(
            {"customer_id": [MAP_VALUES[0]], "email": [MAP_VALUES[1]], "amount": [1]},
            schema=pa.schema([("customer_id", pa.string()), ("email", pa.string()), ("amount", pa.int64())]),
        )
    )
    return ui


def test_erasure_map_lists_declared_tables_and_their_readiness(declared):
    ui = declared
    data = get(ui, "/governance/api/erasure-map", user="admin").json()
    by_table = {t["table"]: t for t in data["tables"]}
    assert list(by_table) == ["crm.contacts", "crm.customers"]  # crm.plain declares nothing
    assert data["kinds"] == ["customer_id", "email"] and (data["ready_tables"], data["not_ready_tables"]) == (1, 1)
    (col,) = by_table["crm.customers"]["columns"]
    assert (col["kind"], col["column"], col["type"]) == ("customer_id", "customer_id", "string")
    assert col["bloom_filter"] and col["bounds"] == "none" and col["erasure_ready"] and col["not_ready"] == []
    assert by_table["crm.customers"]["ready"] and by_table["crm.customers"]["open_requests"] == 0
    contacts = {c["column"]: c for c in by_table["crm.contacts"]["columns"]}
    assert {c["kind"] for c in contacts.values()} == {"customer_id", "email"} and not by_table["crm.contacts"]["ready"]
    assert contacts["customer_id"]["bloom_filter"] and contacts["customer_id"]["bounds"] == "truncate(16)"
    assert not contacts["customer_id"]["erasure_ready"]
    assert "write.metadata.metrics.column.customer_id=none" in contacts["customer_id"]["not_ready"][0]
    assert not contacts["email"]["bloom_filter"] and contacts["email"]["bounds"] == "none"
    assert "write.parquet.bloom-filter-enabled.column.email=true" in contacts["email"]["not_ready"][0]
    html = get(ui, "/governance/erasure-map", user="admin").text
    assert 'data-table="crm.customers" data-column="customer_id"' in html and "crm.plain" not in html
    assert '<span class="badge ok table-ready">ready</span>' in html
    assert '<span class="badge fail table-ready">not ready</span>' in html
    assert 'id="erasure-map-link"' in get(ui, "/governance/erasure", user="admin").text
    # the map is metadata only: no value of a subject column, nor any requests' subject, appears
    for value in (*MAP_VALUES, *SUBJECTS.values(), SALT):
        assert value not in html and value not in json.dumps(data)


def test_erasure_map_flags_tables_with_evidence_but_no_declared_subject_columns(declared):
    ui = declared
    data = get(ui, "/governance/api/erasure-map", user="admin").json()
    (flag,) = data["undeclared"]  # db.orders was erased but declares no subject columns
    assert flag["table"] == "db.orders" and flag["requests_with_evidence"] == 2
    assert "declares no subject columns" in flag["problem"] and "erasure.subject-columns." in flag["problem"]
    html = get(ui, "/governance/erasure-map", user="admin").text
    assert 'data-undeclared="db.orders"' in html and "R-100" not in html
    assert get(ui, "/governance/api/erasure-map?namespace=crm", user="admin").json()["undeclared"] == []
    assert views.undeclared_evidence_tables(
        [{"table_name": "db.a", "request_id": "Q"}, {"table_name": "db.b", "request_id": "Q"}], ["db.a"]
    ) == [
        {
            "table": "db.b",
            "requests_with_evidence": 1,
            "problem": "holds erasure evidence of 1 request(s) but declares no subject columns: a catalog-wide "
            "erasure would skip it (set erasure.subject-columns.<kind>=<column> on db.b)",
        }
    ]


def test_erasure_map_is_restricted_and_filters_by_namespace(declared):
    ui = declared
    for url in ("/governance/erasure-map", "/governance/api/erasure-map"):
        refused = get(ui, url, user="auditor", follow_redirects=False)
        assert refused.status_code == 403 and "crm." not in refused.text, url
    assert "erasure-map" not in get(ui, "/governance/", user="auditor").text
    only = get(ui, "/governance/api/erasure-map?namespace=crm&namespace=db", user="admin").json()
    assert only["namespaces"] == ["crm", "db"] and [t["table"] for t in only["tables"]] == [
        "crm.contacts",
        "crm.customers",
    ]
    empty = get(ui, "/governance/erasure-map?namespace=crm_empty", user="admin").text
    assert 'id="no-declared-tables"' in empty and "No table of these namespaces declares subject columns" in empty
    resp = get(ui, "/governance/api/erasure-map?namespace=nowhere", user="admin")
    assert resp.status_code == 404 and "nowhere" in resp.json()["detail"]
    assert get(ui, "/governance/api/erasure-map?namespace=a;b", user="admin").status_code == 400


def test_erasure_map_shaping_counts_open_requests_and_malformed_declarations():
    rows = [
        {
            "table": "s.t",
            "kind": "email",
            "column": "mail",
            "exists": True,
            "type": "string",
            "bloom_filter": True,
            "bounds": "none",
            "erasure_ready": True,
            "problems": [],
        },
        {
            "table": "s.t",
            "kind": "customer_id",
            "column": "cid",
            "exists": False,
            "type": None,
            "bloom_filter": False,
            "bounds": "full",
            "erasure_ready": False,
            "problems": ["cid is missing"],
        },
        {
            "table": "s.bad",
            "kind": None,
            "column": None,
            "exists": False,
            "type": None,
            "bloom_filter": False,
            "bounds": None,
            "erasure_ready": False,
            "problems": ["malformed"],
        },
    ]
    out = views.erasure_map(rows, {"s.t": 2})
    bad, t = out["tables"]
    assert (bad["table"], bad["columns"], bad["problems"], bad["ready"]) == ("s.bad", [], ["malformed"], False)
    assert t["open_requests"] == 2 and bad["open_requests"] == 0 and t["problems"] == ["cid is missing"]
    assert [len(c["not_ready"]) for c in t["columns"]] == [0, 3] and not t["ready"]
    assert out["kinds"] == ["customer_id", "email"] and (out["ready_tables"], out["not_ready_tables"]) == (0, 2)
    assert "open_requests" not in views.erasure_map(rows)["tables"][0]


# ----------------------------------------------------------- extra links
def _follow(ui, url, user="admin"):
    parts = urlsplit(url)
    assert parts.path.startswith("/plugin/iceberg-governance/governance/"), url  # inside Airflow's navigation
    path = parts.path[len("/plugin/iceberg-governance") :]
    return get(ui, f"{path}?{parts.query}", user=user, follow_redirects=True)


def test_operator_extra_links_open_this_tasks_records(ui):
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
    from airflow_iceberg_provider.operators.maintenance import IcebergRewriteDataFilesOperator
    from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator

    def link(op, task_id, run_id="manual__ui", dag_id="orders_wap"):
        (lnk,) = op.operator_extra_links
        return lnk.get_link(op, ti_key=SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id))

    audit = IcebergWapAuditOperator(
        task_id="audit_bad", table="db.orders", table_checks={"min_rows": {"check_statement": "COUNT(*) >= 100"}}
    )
    resp = _follow(ui, link(audit, "audit_bad"))
    assert resp.status_code == 200 and "(1 of 1, run by task orders_wap.audit_bad)" in resp.text
    assert '<td class="n observed">3</td>' in resp.text and '<td class="n observed">150</td>' not in resp.text
    # the publish task's link: the published snapshot highlighted and the audit that gated it
    publish = IcebergWapPublishOperator(task_id="publish", table="db.orders", branch="wap_ok")
    resp = _follow(ui, link(publish, "publish"))
    assert f'<span class="id" id="highlighted">{ui.ids["published"]}</span>' in resp.text
    assert 'id="gating-audit"' in resp.text and '<td class="n observed">150</td>' in resp.text
    assert '<td class="n observed">3</td>' not in resp.text  # not the failed audit of another branch
    # the erasure task's link: only the requests that task processed
    erase = IcebergErasureOperator(
        task_id="purge_orders", table="db.orders", subject_columns="customer_id", requests_table="db.requests"
    )
    resp = _follow(ui, link(erase, "purge_orders", run_id="scheduled__night", dag_id="erasure_nightly"))
    assert resp.url.path == "/governance/erasure" and 'id="task-filter"' in resp.text
    shown = {r for r in ("R-100", "R-200", "R-300", "R-400") if f'data-request="{r}"' in resp.text}
    assert shown == {"R-100", "R-400"}
    # a refused run: the refusal, and no request
    resp = _follow(ui, link(erase, "erase_orders", run_id="manual__refused", dag_id="erasure"))
    assert 'class="fail refusal"' in resp.text and "tag release-1 keeps rows" in resp.text
    assert 'data-request="' not in resp.text
    # the maintenance task's link carries its context: the page shows that task's runs
    compact = IcebergRewriteDataFilesOperator(task_id="compact", table="db.orders")
    url = link(compact, "compact", dag_id="orders_maintenance")
    assert url.endswith("#maintenance") and "dag_id=orders_maintenance" in url and "task_id=compact" in url
    page = _follow(ui, url, user="auditor").text
    assert 'aria-label="what each maintenance action did"' in page and 'id="maintenance-task"' in page
    assert "run by task orders_maintenance.compact" in page
    other = _follow(ui, link(compact, "compact", dag_id="someone_else"), user="auditor").text
    assert 'id="maintenance-task"' not in other  # no run of that task: every run is shown
    for op in (audit, publish, erase, compact):  # every extra link names its task
        url = link(op, "t", run_id="r", dag_id="d")
        assert "dag_id=d" in url and "run_id=r" in url and "task_id=t" in url, op


def test_ledger_shows_verdicts_and_links_to_airflow(ui):
    rows = get(ui, "/governance/api/tables/db.orders").json()["ledger"]
    publish = next(r for r in rows if r["operation"] == "wap_publish")
    assert publish["snapshot_after"] == str(ui.ids["published"])
    assert publish["created_snapshots"] == []  # a fast-forward moves main, it commits no snapshot
    html = get(ui, "/governance/tables/db.orders").text
    assert 'href="/dags/orders_wap/runs/manual__ui/tasks/publish" target="_top"' in html
    assert 'id="health-verdict"' in html


# ------------------------------------------------------------- pure rules
def test_deadlines_and_open_requests_rules():
    now = datetime(2026, 3, 31, tzinfo=UTC)
    reqs = [
        {"request_id": "a", "received_at": now - timedelta(days=29, hours=23), "status": "pending"},
        {"request_id": "b", "received_at": datetime(2026, 2, 28, tzinfo=UTC), "status": "blocked"},
        {
            "request_id": "c",
            "received_at": now - timedelta(days=90),
            "status": "erased",
            "completed_at": now - timedelta(days=80),
        },
    ]
    ev = [{"request_id": "b", "table_name": "db.t", "verification": "incomplete"}]
    out = {r["request_id"]: r for r in views.erasure_requests(reqs, ev, now=now)}
    assert out["a"]["deadlines"][0]["left_text"] == "1 h 0 min" and not out["a"]["overdue"]
    # 30 days from Feb 28 is Mar 30 (overdue); one calendar month is Mar 28 (overdue too)
    assert [d["overdue"] for d in out["b"]["deadlines"]] == [True, True]
    assert out["c"]["deadlines"][0]["left_text"] == "met" and not out["c"]["open"] and not out["c"]["late"]
    assert views.open_requests_by_table(out.values()) == ({"db.t": 1}, 1)
    assert [r["request_id"] for r in views.erasure_requests(reqs, ev, now=now)] == ["b", "a", "c"]


def test_ids_inside_ledger_json_become_strings():
    row = {
        "event_id": "e",
        "operation": "maintenance.expire_snapshots",
        "table_name": "db.t",
        "status": "succeeded",
        "snapshot_before": 2**63 - 2,
        "metrics": json.dumps({"expired_snapshot_ids": [2**62 + 1], "files": 3}),
        "details": json.dumps({"audited_snapshot_id": 2**62 + 3}),
    }
    (v,) = views.ledger_views([row])
    assert v["snapshot_before"] == "9223372036854775806" and v["metrics"]["files"] == 3
    assert v["metrics"]["expired_snapshot_ids"] == ["4611686018427387905"]
    assert v["details"]["audited_snapshot_id"] == "4611686018427387907"


def test_numbers_and_ids_render_exactly():
    assert views.sid(2**63 - 1) == "9223372036854775807" and views.sid(None) is None
    assert (views.num(3.0), views.num(0.123456789), views.num(None), views.num(float("nan"))) == (
        "3",
        "0.123457",
        "—",
        "NaN",
    )
    assert views.duration_text(-90000) == "overdue 1 d 1 h"


def test_airflow_lists_the_plugin_with_its_app_and_nav_entry(ui):
    plugins = get(ui, "/api/v2/plugins", user="admin").json()["plugins"]
    (ours,) = [p for p in plugins if p["name"] == "iceberg_governance"]
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/governance"]
    assert [(v["name"], v["href"], v["destination"]) for v in ours["external_views"]] == [
        ("Governance", "/governance/", "nav")
    ]


# ------------------------------------------------------------ pure rules (#31)
def _snap(sid, ts, **summary):
    return SimpleNamespace(snapshot_id=sid, timestamp_ms=ts, summary=summary, parent_id=None, operation="append")


def test_user_spark_job_rows_show_the_snapshots_their_task_stamped():
    snaps = [
        _snap(11, 1, **{"airflow.dag-id": "d", "airflow.run-id": "r", "airflow.task-id": "load"}),
        _snap(12, 2, **{"airflow.dag-id": "d", "airflow.run-id": "r", "airflow.task-id": "load"}),
        _snap(13, 3),
    ]
    stamped = views.stamped_snapshots(snaps)
    assert stamped == {("d", "r", "load"): ["11", "12"]}
    rows = [
        {"operation": "spark_submit", "dag_id": "d", "run_id": "r", "task_id": "load", "snapshot_after": None},
        {"operation": "wap_audit", "event_id": "e1", "snapshot_before": "1", "snapshot_after": "12"},
        {"operation": "maintenance.rewrite_data_files", "snapshot_before": "12", "snapshot_after": "13"},
    ]
    verdicts = {"e1": {"passed": False, "text": "failed 2 of 11 checks"}}
    out = views.with_verdicts(rows, verdicts, stamped)
    assert [r["created_snapshots"] for r in out] == [["11", "12"], [], ["13"]]
    assert out[1]["verdict"] == {"text": "failed 2 of 11 checks", "ok": False}  # not "succeeded"
    assert out[0]["verdict"] is None
    # without audit rows: the job's own metrics give the verdict
    (row,) = views.with_verdicts([{"operation": "wap_audit", "metrics": {"checks": 11, "failed": 2}}], {})
    assert row["verdict"] == {"text": "failed 2 of 11 checks", "ok": False}


def _health(files, small, deletes=0, avg=1024, snapshots=5, manifests=2):
    from airflow_iceberg_provider.models import TableHealth

    return TableHealth(
        table="db.t",
        snapshot_id=1,
        format_version=2,
        data_files=files,
        data_bytes=files * avg,
        records=10,
        delete_files=deletes,
        position_delete_files=deletes,
        equality_delete_files=0,
        delete_bytes=0,
        manifests=manifests,
        snapshots=snapshots,
        refs=1,
        oldest_snapshot_ms=None,
        target_file_size_bytes=512 * 2**20,
        small_files=small,
    )


def _planner_verdict(health, props=None, *, files_per_partition=None, expiry_refused=None):
    """The verdict exactly as the view computes it: the planner's decision, then ``health_verdict``."""
    from airflow_iceberg_provider.models import DataFileFacts
    from airflow_iceberg_provider.rules.health import breaches, resolve_thresholds
    from airflow_iceberg_provider.rules.maintenance import decide, file_layout, health_verdict, resolve_policy

    props = props or {}
    now = int(datetime(2026, 3, 1, tzinfo=UTC).timestamp() * 1000)
    policy = resolve_policy(props, now=now)
    size = health.data_bytes // max(health.data_files, 1)
    per = files_per_partition or health.data_files
    files = [
        DataFileFacts(spec_id=0, partition=f"p{i // per}", content="data", file_size_in_bytes=size, record_count=1)
        for i in range(health.data_files)
    ]
    layout = file_layout(files, target_file_size=policy.target_file_size_bytes)
    decision = decide(health, policy, properties=props, layout=layout)
    breached = [(b.threshold, b.value, b.limit) for b in breaches(health, resolve_thresholds(props))]
    return health_verdict(decision, breached, expiry_refused=expiry_refused).to_dict()


def test_health_verdict_is_the_maintenance_planners_decision_in_words():
    one_file = _planner_verdict(_health(1, 1))
    assert one_file["verdict"] == "healthy" and one_file["level"] == "ok"
    assert one_file["notes"] == [
        "average data file 1.0 KiB, below the 10.0 MiB minimum, but there is nothing to "
        "compact (0 compactable files (0% < 20%) and 0.00 delete files per data file (< 0.1))"
    ]
    # tiny files, one per partition (the demo after its maintenance): nothing to compact, so not red
    spread = _planner_verdict(_health(8, 8), files_per_partition=1)
    assert spread["verdict"] == "healthy" and "nothing to compact" in spread["notes"][0]
    # many small files in one partition: the planner compacts; amber, its reason in words
    many_small = _planner_verdict(_health(200, 200))
    assert many_small["verdict"] == "needs maintenance" and many_small["level"] == "warn"
    assert many_small["reasons"][0].startswith("compact data files: 200 of 200 data files (100%) are compactable")
    assert "addresses it" in many_small["notes"][0]
    assert not any("min_avg_file_size_bytes" in t for t in many_small["reasons"] + many_small["notes"])
    assert _planner_verdict(_health(200, 0, avg=600 * 2**20))["verdict"] == "healthy"
    # red is an incident: a threshold maintenance will not fix, or an expiry the refs refuse
    crowded = _planner_verdict(_health(3, 0, avg=600 * 2**20, snapshots=5000))
    assert crowded["verdict"] == "unhealthy" and crowded["level"] == "fail"
    assert crowded["reasons"][0].startswith("5,000 snapshots, above the 1,000 maximum, and maintenance will not fix")
    held = _planner_verdict(_health(3, 0, avg=600 * 2**20), expiry_refused="tag legal-hold-x would be dropped")
    assert held["verdict"] == "unhealthy" and "legal-hold-x" in held["reasons"][0]
    # the table's own properties move the thresholds
    props = {"airflow-iceberg.maintenance.min-input-files": "500"}
    assert _planner_verdict(_health(200, 200), props)["verdict"] == "healthy"


def test_evidence_runs_and_task_erasure_from_ledger_spans():
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    ledger = [
        {
            "event_id": "L",
            "operation": "erasure",
            "table": "db.t",
            "status": "succeeded",
            "dag_id": "daily",
            "run_id": "r1",
            "task_id": "erase",
            "started_at": t0,
            "finished_at": t0 + timedelta(minutes=5),
            "metrics": {"phase": "logical", "requests": 3},
            "details": {},
        },
        {
            "event_id": "X",
            "operation": "erasure",
            "table": "db.t",
            "status": "succeeded",
            "dag_id": "other",
            "run_id": "r9",
            "task_id": "erase",
            "started_at": t0 + timedelta(hours=1),
            "finished_at": t0 + timedelta(hours=1, minutes=5),
            "metrics": {"phase": "logical", "requests": 1},
            "details": {},
        },
        {
            "event_id": "P",
            "operation": "erasure",
            "table": "db.t",
            "status": "succeeded",
            "dag_id": "nightly",
            "run_id": "r2",
            "task_id": "purge",
            "started_at": t0 + timedelta(hours=8),
            "finished_at": t0 + timedelta(hours=8, minutes=9),
            "metrics": {"phase": "purge", "requests": 7},
            "details": {},
        },
        {
            "event_id": "F",
            "operation": "erasure",
            "table": "db.u",
            "status": "refused",
            "dag_id": "nightly",
            "run_id": "r2",
            "task_id": "purge",
            "started_at": t0,
            "finished_at": t0,
            "metrics": {},
            "details": {"refused": "legal-hold-7 keeps rows"},
        },
    ]
    ev = {
        "request_id": "A",
        "table_name": "db.t",
        "logical_erased_at": t0 + timedelta(minutes=3),
        "purged_at": t0 + timedelta(hours=8, minutes=8),
        "finished_at": t0 + timedelta(hours=8, minutes=8),
        "job_run_id": "P",
        "dag_id": "nightly",
        "run_id": "r2",
        "task_id": "purge",
        "rows_found": 0,
        "rows_deleted": 0,
    }
    runs = views.evidence_runs(ev, ledger)
    assert [(r["role"], r["event_id"], r["requests"]) for r in runs] == [("logical", "L", 3), ("purge", "P", 7)]
    report = views.evidence_report("A", [], [ev], ledger)
    assert report["matched_nothing"] and report["tables"][0]["request"]["rows_found"] == 0
    assert report["tables"][0]["batch"]["largest_batch"] == 7
    daily = views.task_erasure([ev], ledger, {"dag_id": "daily", "run_id": "r1", "task_id": "erase"})
    assert daily["request_ids"] == ["A"] and daily["refusals"] == []
    assert (
        views.task_erasure([ev], ledger, {"dag_id": "other", "run_id": "r9", "task_id": "erase"})["request_ids"] == []
    )
    nightly = views.task_erasure([ev], ledger, {"dag_id": "nightly", "run_id": "r2", "task_id": "purge"})
    assert nightly["request_ids"] == ["A"] and [f["reason"] for f in nightly["refusals"]] == ["legal-hold-7 keeps rows"]


def test_gating_audit_is_the_audit_of_the_published_snapshot():
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    audits = [
        {"event_id": "bad", "table": "db.t", "snapshot_id": "9", "dag_id": "d", "run_id": "r", "evaluated_at": t0},
        {"event_id": "ok", "table": "db.t", "snapshot_id": "7", "dag_id": "d", "run_id": "r", "evaluated_at": t0},
    ]
    pub = {"table": "db.t", "audited_snapshot_id": "7", "dag_id": "d", "run_id": "r", "finished_at": t0}
    assert views.gating_audit(audits, pub)["event_id"] == "ok"
    assert views.gating_audit(audits, {**pub, "audited_snapshot_id": None})["event_id"] == "bad"  # same run
    assert views.gating_audit(audits, {**pub, "audited_snapshot_id": None, "run_id": "x"}) is None
    # a publish bound to an audit run shows exactly that run, never another audit of the snapshot
    assert views.gating_audit(audits, {**pub, "audit_event_id": "bad"})["event_id"] == "bad"
    assert views.gating_audit(audits, {**pub, "audit_event_id": "gone"}) is None


def test_maintenance_chart_shows_each_actions_own_figures():
    from airflow_iceberg_provider.ui import charts

    before = {"data_files": 200, "avg_file_bytes": 1000, "delete_files": 10, "small_files": 200, "manifests": 50}
    after = {"data_files": 4, "avg_file_bytes": 50000, "delete_files": 0, "small_files": 4, "manifests": 1}
    runs = [
        {
            "event_id": f"job-{i}",
            "job_run_id": "job",
            "action": action,
            "status": "succeeded",
            "finished_at": datetime(2026, 3, 1, tzinfo=UTC),
            "before": before,
            "after": after,
            "output": output,
        }
        for i, (action, output) in enumerate(
            [
                (
                    "rewrite_data_files",
                    {
                        "rewritten_data_files_count": 200,
                        "added_data_files_count": 4,
                        "rewritten_bytes_count": 2_000_000,
                    },
                ),
                ("rewrite_manifests", {"rewritten_manifests_count": 50, "added_manifests_count": 1}),
                ("expire_snapshots", {"deleted_data_files_count": 190}),
            ]
        )
    ]
    svg = charts.health_svg(runs)
    assert svg.count("data files 200 → 4") == 1  # the job's effect once, not once per action
    for label in ("rewritten data files", "added manifests", "deleted data files", "rewritten bytes"):
        assert label in svg
    assert ">200<" in svg and ">1.9 MB<" in svg  # values at the bars
    assert 'class="tick"' in svg  # axis values
    assert views.action_output({"a_count": 3, "dry_run": False, "seconds": 2.0, "orphan_files": ["x", "y"]}) == {
        "a_count": 3,
        "orphan_files_count": 2,
    }


def test_moments_of_an_erasure_purge_are_dates_never_bars():
    """The purge's time-travel floors (epoch ms) were bars on an axis up to 2e12; now they are dates."""
    from airflow_iceberg_provider.ui import charts

    floor_before = int(datetime(2026, 2, 1, 8, 30, tzinfo=UTC).timestamp() * 1000)
    floor_after = int(datetime(2026, 2, 28, 23, 0, tzinfo=UTC).timestamp() * 1000)
    ledger = views.ledger_views(
        [
            {
                "event_id": "job-1-0",
                "operation": "maintenance.erasure_purge",
                "table_name": "db.t",
                "status": "succeeded",
                "finished_at": datetime(2026, 3, 1, tzinfo=UTC),
                "metrics": json.dumps(
                    {
                        "rows_deleted": 4,
                        "time_travel_floor_before_ms": floor_before,
                        "time_travel_floor_after_ms": floor_after,
                        "time_travel_lost_ms": floor_after - floor_before,
                        "purged_at": "2026-03-01T00:00:00+00:00",
                    }
                ),
                "details": "{}",
            }
        ]
    )
    (run,) = views.maintenance_runs(ledger, "db.t")
    assert run["output"] == {"rows_deleted": 4}
    assert run["moments"] == {
        "time_travel_floor_before": datetime(2026, 2, 1, 8, 30, tzinfo=UTC),
        "time_travel_floor_after": datetime(2026, 2, 28, 23, 0, tzinfo=UTC),
        "purged_at": datetime(2026, 3, 1, tzinfo=UTC),
    }
    # a length of time in milliseconds is neither a date (1970-01-...) nor a bar: it reads in words
    assert run["durations"] == {"time_travel_lost": "27 d 14 h"}
    svg = charts.health_svg([run])
    assert "2026-02-01 08:30:00 UTC" in svg and "2026-02-28 23:00:00 UTC" in svg
    assert '<text class="duration"' in svg and "27 d 14 h" in svg and "1970" not in svg
    assert svg.count('class="bar"') == 1  # rows deleted only
    assert str(floor_before) not in svg and "e+12" not in svg and "TB" not in svg


def _multi_publish_row(tables: list[tuple[str, int, int]], when: datetime) -> dict:
    """A ledger row in ``IcebergWapMultiPublishOperator._record``'s shape: no table, the steps in details."""
    steps = [
        {"table": t, "branch": "wap_x", "audited_snapshot_id": str(a), "main_before": str(b), "main_after": str(a)}
        for t, b, a in tables
    ]
    return {
        "event_id": "multi-1",
        "operation": "wap_multi_publish",
        "table_name": None,
        "ref": "main",
        "dag_id": "orders_wap",
        "run_id": "manual__multi",
        "task_id": "publish_all",
        "try_number": 1,
        "started_at": when,
        "finished_at": when,
        "status": "succeeded",
        "metrics": json.dumps({"tables": len(steps), "published_added_records": 30}),
        "details": json.dumps({"publish_id": "p-1", "method": "fast_forward", "tables": steps}),
        "provider_version": "test",
    }


def test_a_multi_table_publish_shows_on_each_table_it_touched():
    when = datetime(2026, 3, 1, tzinfo=UTC)
    ledger = views.ledger_views([_multi_publish_row([("db.a", 1, 2), ("db.b", 7, 8)], when)])
    assert [r["table"] for r in ledger] == ["db.a", "db.b"]
    assert views.governed_tables(ledger, [], [], "governance") == ["db.a", "db.b"]
    (a,) = views.publishes(ledger, "db.a")
    assert (a["snapshot_before"], a["snapshot_after"], a["branch"], a["method"]) == ("1", "2", "wap_x", "fast_forward")
    assert a["together_with"] == ["db.b"] and a["added_records"] is None  # the total is not db.a's figure
    (b,) = views.publishes(ledger, "db.b")
    assert b["snapshot_after"] == "8" and b["together_with"] == ["db.a"]


def test_the_tables_page_shows_the_last_multi_table_publish(ui):
    """Adds a multi-table publish of db.orders and db.customers (tests after it in this module see it)."""
    after = ui.ids["published"]
    ui.hook.governance.append(
        "ledger",
        [_multi_publish_row([("db.orders", ui.ids["base"], after), ("db.customers", 5, 6)], datetime.now(UTC))],
    )
    tables = {t["table"]: t for t in get(ui, "/governance/api/tables").json()["tables"]}
    assert tables["db.customers"]["last_publish"]["snapshot_after"] == "6"
    assert tables["db.orders"]["last_publish"]["operation"] == "wap_multi_publish"
    html = get(ui, "/governance/tables/db.orders").text
    assert 'data-publish="wap_multi_publish"' in html and "in one commit with <code>db.customers</code>" in html


def test_evidence_report_names_the_logical_and_the_purge_run_and_the_deadlines(ui):
    r = get(ui, "/governance/api/erasure/R-100", user="admin").json()
    assert [(x["dag_id"], x["task_id"]) for x in r["logical_runs"]] == [("erasure_daily", "erase_orders")]
    assert [(x["dag_id"], x["task_id"]) for x in r["purge_runs"]] == [("erasure_nightly", "purge_orders")]
    assert [d["label"] for d in r["deadlines"]] == [label for label, _ in views.DEADLINES] and not r["overdue"]
    html = get(ui, "/governance/erasure/R-100/report", user="admin").text
    logical = html.split('data-role="logical"')[1].split("</td>")[0]
    purge = html.split('data-role="purge"')[1].split("</td>")[0]
    assert "erasure_daily › erase_orders" in logical and "erasure_nightly › purge_orders" in purge
    # the overdue request (no evidence yet) shows its deadlines, past due
    overdue = get(ui, "/governance/api/erasure/R-300", user="admin").json()
    assert overdue["overdue"] and all(d["overdue"] for d in overdue["deadlines"])
    page = get(ui, "/governance/erasure/R-300/report", user="admin").text
    assert page.count('data-overdue="true"') == 2 and "due <b>" in page and "not purged yet" in page
    # and where its requests table is shown
    row = (
        get(ui, "/governance/tables/db.requests", user="admin").text.split('data-request="R-300"')[1].split("</tr>")[0]
    )
    assert row.count('data-overdue="true"') == 2 and "overdue" in row and "due 20" in row


def test_a_purge_by_the_maintenance_plan_is_the_reports_purge_run():
    t0 = datetime(2026, 3, 1, tzinfo=UTC)
    ledger = views.ledger_views(
        [
            {
                "event_id": "job-logical",
                "operation": "erasure",
                "table_name": "db.t",
                "dag_id": "gdpr",
                "run_id": "r1",
                "task_id": "erase",
                "status": "succeeded",
                "started_at": t0,
                "finished_at": t0 + timedelta(minutes=1),
                "metrics": json.dumps({"phase": "logical"}),
            },
            {
                "event_id": "job-plan-0",
                "operation": "maintenance.erasure_purge",
                "table_name": "db.t",
                "dag_id": "nightly",
                "run_id": "r2",
                "task_id": "maintain",
                "status": "succeeded",
                "started_at": t0 + timedelta(hours=5),
                "finished_at": t0 + timedelta(hours=5, minutes=3),
                "metrics": "{}",
            },
        ]
    )
    evidence = [
        {
            "request_id": "Q-1",
            "table_name": "db.t",
            "logical_erased_at": t0 + timedelta(seconds=30),
            "purged_at": t0 + timedelta(hours=5, minutes=2),
            "finished_at": t0 + timedelta(hours=5, minutes=2),
            "verification": "verified",
        }
    ]
    requests = [{"request_id": "Q-1", "received_at": t0 - timedelta(days=40), "status": "erased", "completed_at": t0}]
    report = views.evidence_report("Q-1", requests, evidence, ledger, now=t0)
    assert [(r["task_id"], r["table"]) for r in report["logical_runs"]] == [("erase", "db.t")]
    assert [(r["task_id"], r["event_id"]) for r in report["purge_runs"]] == [("maintain", "job-plan-0")]
    # erased after both deadlines: a miss that stays on the record, in red
    assert [d["state"] for d in report["deadlines"]] == ["late", "late"] and report["late"]
    assert report["deadlines"][0]["left_text"] == "erased 10 d 0 h late"


def test_a_hold_dropped_outside_the_provider_shows_as_a_violation(ui):
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator
    from tests.support.lake import append_batches, create_orders_table, fake_context

    create_orders_table(ui.hook, "db.held")
    snaps = append_batches(ui.hook, "db.held", 2)
    IcebergCreateTagOperator(
        task_id="hold", table="db.held", tag="c7", legal_hold=True, case_id="C-7", snapshot_id=snaps[0]
    ).execute(fake_context())
    assert "hold-violations" not in get(ui, "/governance/tables/db.held").text
    ui.hook.load_table("db.held").manage_snapshots().remove_tag("legal-hold-c7").commit()  # another engine
    (violation,) = get(ui, "/governance/api/tables/db.held").json()["hold_violations"]
    assert (violation["tag"], violation["problem"], violation["case_id"]) == ("legal-hold-c7", "dropped", "C-7")
    html = get(ui, "/governance/tables/db.held").text
    assert 'id="hold-violations"' in html and 'id="hold-violation-legal-hold-c7"' in html
    assert "was dropped" in html and "without a release" in html


def test_a_refusals_reason_does_not_repeat_that_it_was_refused():
    """The page says "Refused …, nothing was changed:"; the recorded message's own preamble is left out."""
    recorded = "Erasure refused, nothing was changed: subject column(s) ['email'] do not exist in db.profiles"
    assert views._refusal_reason({"refused": recorded}) == "subject column(s) ['email'] do not exist in db.profiles"
    assert views._refusal_reason({"reason": "tag release-1 keeps rows"}) == "tag release-1 keeps rows"
    assert views._refusal_reason({}) is None
