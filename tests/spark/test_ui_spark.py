"""Governance view (#17) after a real erasure (one Spark job): no page and no API response
contains a subject value (nor the salt), and the erasure task's extra link opens its evidence.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest

from tests.support.erasure import SALT, add_requests, append_people, create_people_table, person, set_salt_connection
from tests.support.lake import catalog_conn_json, fake_context
from tests.support.ui import airflow_api_client

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

SUBJECTS = {"E-1": person(0), "E-2": person(5), "E-3": person(77)}  # person(77) has no rows


@pytest.fixture(scope="module")
def erased(tmp_path_factory):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator

    tmp = tmp_path_factory.mktemp("ui_spark")
    (tmp / "wh").mkdir()
    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    conn = catalog_conn_json(tmp / "catalog.db", tmp / "wh")
    with airflow_api_client(tmp, iceberg_catalog_default=conn) as (client, tokens):
        hook = IcebergCatalogHook()
        hook.ensure_namespace("db")
        create_people_table(hook, "db.people")
        append_people(hook, "db.people", 2)
        add_requests(hook, "db.requests", SUBJECTS, received_days_ago=3)
        op = IcebergErasureOperator(
            task_id="erase", table="db.people", subject_columns="customer_id", requests_table="db.requests"
        )
        result = op.execute(fake_context("erasure_dag", "manual__leak", "erase"))
        yield client, tokens, op, result
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
    else:
        os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


def test_no_page_or_api_response_contains_a_subject_value(erased):
    client, tokens, _, result = erased
    assert result["requests"] == 3 and result["rows_deleted"] > 0
    auth = {"Authorization": f"Bearer {tokens['admin']}"}
    urls = [
        "/governance/",
        "/governance/tables/db.people",
        "/governance/tables/db.requests",
        "/governance/erasure",
        "/governance/api/tables",
        "/governance/api/tables/db.people",
        "/governance/api/erasure",
        *(f"/governance/erasure/{rid}/report" for rid in SUBJECTS),
        *(f"/governance/api/erasure/{rid}" for rid in SUBJECTS),
    ]
    responses = {u: client.get(u, headers=auth) for u in urls}
    assert {u: r.status_code for u, r in responses.items() if r.status_code != 200} == {}
    blob = "".join(r.text for r in responses.values())
    assert "E-1" in blob and "db.people" in blob  # control: the responses are about this erasure
    for secret in [*SUBJECTS.values(), SALT]:
        assert secret not in blob
    # the evidence report carries the salted hash, the figures and the versions instead
    from airflow_iceberg_provider.rules.erasure import subject_hash

    report = client.get("/governance/api/erasure/E-1", headers=auth).json()
    assert report["subject_hashes"] == [subject_hash(SALT, SUBJECTS["E-1"])]
    t = report["tables"][0]
    assert t["table"] == "db.people" and t["rows_deleted"] > 0 and t["verification"] == report["verification"]
    assert t["batch"]["snapshot_after"] == str(result["snapshot_after"]) and report["iceberg_versions"]
    # E-3's subject has no row: its report says so, with the batch's figures labelled as the batch's
    nothing = client.get("/governance/api/erasure/E-3", headers=auth).json()
    (t3,) = nothing["tables"]
    assert nothing["matched_nothing"] and t3["request"]["rows_found"] == 0 and t3["request"]["rows_deleted"] == 0
    assert [(r["dag_id"], r["task_id"]) for r in t3["batch"]["runs"]] == [("erasure_dag", "erase")]
    assert t3["batch"]["runs"][0]["requests"] == 3


def test_erasure_task_extra_link_opens_its_evidence(erased):
    client, tokens, op, _ = erased
    from types import SimpleNamespace

    (link,) = op.operator_extra_links
    url = link.get_link(op, ti_key=SimpleNamespace(dag_id="erasure_dag", run_id="manual__leak", task_id="erase"))
    parts = urlsplit(url)
    assert parts.path.startswith("/plugin/iceberg-governance/governance/")  # inside Airflow's navigation
    path = f"{parts.path.removeprefix('/plugin/iceberg-governance')}?{parts.query}"
    resp = client.get(path, headers={"Authorization": f"Bearer {tokens['admin']}"})
    # three requests in one run: the link lands on the erasure page listing them with their reports
    assert resp.status_code == 200 and resp.url.path == "/governance/erasure"
    assert all(f"/governance/erasure/{rid}/report" in resp.text for rid in SUBJECTS)
    refused = client.get(path, headers={"Authorization": f"Bearer {tokens['viewer']}"}, follow_redirects=False)
    assert refused.status_code == 403 and "E-1" not in refused.text
    assert client.get(path, follow_redirects=False).status_code == 303  # to the login
