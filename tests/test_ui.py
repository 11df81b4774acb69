"""Governance view (#17): pages and JSON API of the real Airflow API app, against a SQLite catalog.

The app under test is Airflow's own ``create_app("core")`` with the plugin mounted by the plugins
manager and the SimpleAuthManager; tokens come from its ``/auth/token`` route. The lake is filled by
the provider's operators and governance writers (``_ui_helpers.fill_lake``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from _ui_helpers import SALT, SUBJECTS, airflow_api_client, fill_lake
from conftest import catalog_conn_json

from airflow_iceberg_provider.ui import views


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


def get(ui, url, user="viewer", **kw):
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
]


# ---------------------------------------------------------------- access
def test_no_session_means_no_data(ui):
    for url in PAGES:
        anon = ui.client.get(url, follow_redirects=False)
        assert anon.status_code == 401, url
        assert "db.orders" not in anon.text and "R-100" not in anon.text
        bad = ui.client.get(url, headers={"Authorization": "Bearer not-a-jwt"}, follow_redirects=False)
        assert bad.status_code == 403, url
        forged = ui.client.get(url, cookies={"_token": "eyJhbGciOiJIUzUxMiJ9.e30.x"}, follow_redirects=False)
        assert forged.status_code == 403 and "db.orders" not in forged.text, url


def test_session_cookie_and_bearer_token_both_work(ui):
    assert get(ui, "/governance/api/tables").status_code == 200
    resp = ui.client.get("/governance/api/tables", cookies={"_token": ui.tokens["admin"]})
    assert resp.status_code == 200 and resp.json()["tables"][0]["table"] == "db.orders"


def test_every_route_is_read_only(ui):
    for url in ("/governance/", "/governance/api/tables", "/governance/erasure"):
        assert ui.client.post(url, headers={"Authorization": f"Bearer {ui.tokens['admin']}"}).status_code == 405
    # a catalog without governance tables reads as empty and is left without them
    resp = get(ui, "/governance/api/tables?conn=empty_catalog")
    assert resp.status_code == 200 and resp.json()["tables"] == []
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    assert IcebergCatalogHook("empty_catalog").catalog.list_namespaces() == []


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
    assert row["open_requests"] == 0 and data["open_requests_without_evidence"] == 2
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
    html = get(ui, "/governance/tables/db.orders").text
    assert '<td class="check-name">min_rows</td>' in html and '<td class="n observed">3</td>' in html
    assert '<tr class="fail"><td class="check-name">min_rows' in html  # highlighted
    assert "legal-hold-case-7" in html and 'aria-label="snapshot timeline"' in html
    assert 'aria-label="health before and after maintenance"' in html


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
    assert get(ui, "/governance/api/erasure/NOPE").status_code == 404


def test_erasure_page_deadlines_and_evidence_report(ui):
    data = get(ui, "/governance/api/erasure").json()
    by_id = {r["request_id"]: r for r in data["requests"]}
    assert data["open"] == 2 and data["overdue"] == 1 and data["requests_tables"] == ["db.requests"]
    assert by_id["R-300"]["overdue"] is True and by_id["R-300"]["deadlines"][0]["left_text"].startswith("overdue")
    assert by_id["R-200"]["overdue"] is False and by_id["R-100"]["status"] == "done"
    assert by_id["R-100"]["tables"] == [{"table": "db.orders", "verification": "verified"}]
    report = get(ui, "/governance/api/erasure/R-100").json()
    from airflow_iceberg_provider.erasure_policy import subject_hash

    assert report["subject_hashes"] == [subject_hash(SALT, SUBJECTS["R-100"])]
    t = report["tables"][0]
    assert (t["rows_deleted"], t["files_rewritten"], t["files_removed"]) == (4, 2, 5)
    assert t["snapshot_before"] == str(ui.ids["base"]) and report["verification"] == "verified"
    html = get(ui, "/governance/erasure/R-100/report").text
    for field in ("Rows removed", "Snapshot before", "Files rewritten", "Verification method", "Iceberg version"):
        assert field in html
    assert subject_hash(SALT, SUBJECTS["R-100"]) in html and "Apache Iceberg 1.10.2" in html


def test_no_subject_value_or_secret_in_any_response(ui):
    blob = "".join(get(ui, url, user="admin").text for url in PAGES)
    blob += get(ui, "/governance/tables/db.requests").text
    assert "R-100" in blob  # control: the responses do carry the requests
    for secret in [*SUBJECTS.values(), SALT, "subject_key"]:
        assert secret not in blob


# ----------------------------------------------------------- extra links
def _follow(ui, url):
    parts = urlsplit(url)
    return get(ui, f"{parts.path}?{parts.query}", follow_redirects=True)


def test_operator_extra_links_open_this_tasks_records(ui):
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
    from airflow_iceberg_provider.operators.maintenance import IcebergRewriteDataFilesOperator
    from airflow_iceberg_provider.operators.wap import IcebergWapAuditOperator, IcebergWapPublishOperator

    def link(op, task_id, run_id="manual__ui", dag_id="orders_wap"):
        (lnk,) = op.operator_extra_links
        return lnk.get_link(op, ti_key=SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id))

    audit = IcebergWapAuditOperator(
        task_id="audit_bad", table="db.orders", table_checks={"min_rows": {"check_statement": "COUNT(*) >= 100"}}
    )
    resp = _follow(ui, link(audit, "audit_bad"))
    assert resp.status_code == 200 and "(1 of 1, run by task orders_wap.audit_bad)" in resp.text
    assert '<td class="n observed">3</td>' in resp.text and '<td class="n observed">150</td>' not in resp.text
    publish = IcebergWapPublishOperator(task_id="publish", table="db.orders", branch="wap_ok")
    resp = _follow(ui, link(publish, "publish"))
    assert f'<span class="id" id="highlighted">{ui.ids["published"]}</span>' in resp.text
    erase = IcebergErasureOperator(
        task_id="erase_orders", table="db.orders", subject_columns="customer_id", requests_table="db.requests"
    )
    resp = _follow(ui, link(erase, "erase_orders", dag_id="erasure"))
    assert resp.url.path == "/governance/erasure/R-100/report" and "Erasure evidence report" in resp.text
    compact = IcebergRewriteDataFilesOperator(task_id="compact", table="db.orders")
    url = link(compact, "compact")
    assert url.endswith("#maintenance") and "dag_id" not in url
    assert 'aria-label="health before and after maintenance"' in _follow(ui, url).text


# ------------------------------------------------------------- pure rules
def test_deadlines_and_open_requests_rules():
    now = datetime(2026, 3, 31, tzinfo=UTC)
    reqs = [
        {"request_id": "a", "received_at": now - timedelta(days=29, hours=23), "status": "pending"},
        {"request_id": "b", "received_at": datetime(2026, 2, 28, tzinfo=UTC), "status": "blocked"},
        {
            "request_id": "c",
            "received_at": now - timedelta(days=90),
            "status": "done",
            "completed_at": now - timedelta(days=80),
        },
    ]
    ev = [{"request_id": "b", "table_name": "db.t", "verification": "incomplete"}]
    out = {r["request_id"]: r for r in views.erasure_requests(reqs, ev, now=now)}
    assert out["a"]["deadlines"][0]["left_text"] == "1 h 0 min" and not out["a"]["overdue"]
    # 30 days from Feb 28 is Mar 30 (overdue); one calendar month is Mar 28 (overdue too)
    assert [d["overdue"] for d in out["b"]["deadlines"]] == [True, True]
    assert out["c"]["deadlines"][0]["left_text"] == "met" and not out["c"]["open"]
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
