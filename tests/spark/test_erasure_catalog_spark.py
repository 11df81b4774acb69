"""One request, every table (real Spark jobs, one module-scoped lake, 2 jobs).

Two tables declare customer-id columns (``erasure.subject-columns.customer_id``), a third one
declares another kind; the discovery operator lists the two, and the erasure runs once per
listed table with the arguments the discovery returned (what ``expand_kwargs`` maps). The
request stays open after the first table and becomes erased (then redacted) after the second;
the evidence has one row per request and table; the requests table's folder keeps no erased key.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

import json

import pytest

from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.erasure_discovery import IcebergErasureDiscoveryOperator
from airflow_iceberg_provider.rules.erasure import erasure_ready_properties
from tests.support.erasure import (
    SALT,
    add_requests,
    create_people_table,
    metadata_hits,
    people_batch,
    person,
    rows_of,
    set_salt_connection,
    strings_on_disk,
)
from tests.support.lake import fake_context

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

REQUESTS = "privacy.requests"
SUBJECTS = {"C-1": person(3), "C-2": person(4)}


@pytest.fixture(scope="module")
def catalog_lake(module_lake):
    import os

    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    hook = module_lake
    create_people_table(hook, "sales.orders", **erasure_ready_properties("customer_id", kind="customer_id"))
    create_people_table(hook, "crm.tickets", partition_by=())
    with hook.load_table("crm.tickets").transaction() as tx:  # an existing table declares its column
        tx.set_properties({"erasure.subject-columns.customer_id": "customer_id"})
    create_people_table(hook, "crm.newsletter", partition_by=(), **{"erasure.subject-columns.email": "customer_id"})
    for table in ("sales.orders", "crm.tickets", "crm.newsletter"):
        hook.load_table(table).append(people_batch(0, 48))
    add_requests(hook, REQUESTS, SUBJECTS, received_days_ago=1)
    yield hook
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
    else:
        os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


def _statuses(hook):
    return {r["request_id"]: r["status"] for r in hook.governance.erasure_request_states(REQUESTS)}


def test_one_request_is_erased_from_every_declaring_table(catalog_lake, capfd):
    hook = catalog_lake
    mapping = IcebergErasureDiscoveryOperator(task_id="discover", subject_kind="customer_id").execute(fake_context())
    scope = ["crm.tickets", "sales.orders"]
    assert [(m["table"], m["subject_columns"], m["tables_in_scope"]) for m in mapping] == [
        ("crm.tickets", ["customer_id"], scope),
        ("sales.orders", ["customer_id"], scope),
    ]
    results = []
    for i, kwargs in enumerate(mapping):
        op = IcebergErasureOperator(
            task_id=f"erase_{i}", phase="full", requests_table=REQUESTS, redact_erased_requests=True, **kwargs
        )
        results.append(op.execute(fake_context()))
        if i == 0:  # one table of two: the request is not erased yet, its key not redacted
            assert results[0]["verification"] == "verified" and results[0]["requests_redacted"] == 0
            assert _statuses(hook) == {"C-1": "pending", "C-2": "pending"}
            assert {person(3), person(4)} <= strings_on_disk(hook, REQUESTS)
    assert results[1]["verification"] == "verified" and results[1]["requests_redacted"] == 2, results[1]
    assert _statuses(hook) == {"C-1": "redacted", "C-2": "redacted"}
    for table in scope:
        assert not strings_on_disk(hook, table) & set(SUBJECTS.values()), table
    assert {person(3), person(4)} <= strings_on_disk(hook, "crm.newsletter")  # another kind: not in scope
    ev = [e for e in rows_of(hook, "governance.erasure_evidence") if e["request_id"] in SUBJECTS]
    assert sorted((e["request_id"], e["table_name"]) for e in ev) == [
        ("C-1", "crm.tickets"),
        ("C-1", "sales.orders"),
        ("C-2", "crm.tickets"),
        ("C-2", "sales.orders"),
    ]
    assert all(e["verification"] == "verified" and e["rows_found"] > 0 for e in ev)
    assert all(e["subject_redacted_at"] is not None for e in ev)
    assert not strings_on_disk(hook, REQUESTS) & set(SUBJECTS.values())
    assert metadata_hits(hook, REQUESTS, SUBJECTS.values()) == []
    out = capfd.readouterr()
    blob = json.dumps([mapping, results, ev], default=str) + out.out + out.err
    assert not any(s in blob for s in [*SUBJECTS.values(), SALT])
