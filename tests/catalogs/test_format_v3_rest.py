"""A format-version 3 table behind a REST catalog (Apache Iceberg's ``RESTCatalogServer``): the
server writes the metadata, so the catalog-side verbs commit on v3 as on v2 through pyiceberg,
with no Spark job; what writes manifests (pyiceberg writes none for v3) is still refused.

The table is written at v2 through pyiceberg, then upgraded by the catalog server (the REST
``upgrade-format-version`` update, as Spark's ``ALTER TABLE ... SET TBLPROPERTIES`` sends it).
"""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_iceberg_provider.exceptions import IcebergRefusedError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator, IcebergRollbackOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from tests.support.lake import ORDERS_COLUMNS, append_batches, create_orders_table, fake_context
from tests.support.servers import iceberg_rest_fixture, rest_fixture_conn_json

pytestmark = pytest.mark.rest


@pytest.fixture
def rest_v3(monkeypatch):
    from pyiceberg.table.update import UpgradeFormatVersionUpdate

    conn = json.loads(rest_fixture_conn_json(iceberg_rest_fixture()))
    conn["extra"]["governance_namespace"] = f"gov{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
    hook = IcebergCatalogHook()
    ns = f"v3{uuid.uuid4().hex[:8]}"
    table = f"{ns}.orders"
    create_orders_table(hook, table, properties={"write.wap.enabled": "true"})
    snaps = append_batches(hook, table, 2)
    hook.catalog.commit_table(hook.load_table(table), (), (UpgradeFormatVersionUpdate(format_version=3),))
    assert hook.load_table(table).metadata.format_version == 3
    return hook, ns, table, snaps


def test_catalog_verbs_commit_on_v3_behind_rest(rest_v3):
    hook, ns, table, snaps = rest_v3
    assert hook.ref_change_route(table) == "catalog"
    ctx = fake_context(dag_id="v3_rest", run_id="r1")
    IcebergCreateTagOperator(task_id="tag", table=table, tag="release-1").execute(ctx)
    branch = IcebergWapCreateBranchOperator(task_id="branch", table=table, branch="wap_v3").execute(ctx)
    IcebergRollbackOperator(task_id="rollback", table=table, to_snapshot_id=snaps[0]).execute(ctx)
    assert hook.ensure_table_properties(table, {"commit.retry.num-retries": "6"})
    tbl = hook.load_table(table)
    assert tbl.metadata.format_version == 3 and tbl.metadata.properties["commit.retry.num-retries"] == "6"
    refs = hook.refs(tbl)
    assert refs["release-1"].snapshot_id == snaps[1] and refs[branch["branch"]].snapshot_id == snaps[1]
    assert refs["main"].snapshot_id == snaps[0]
    created = IcebergCreateTableOperator(
        task_id="create", table=f"{ns}.events", columns=ORDERS_COLUMNS, properties={"format-version": "3"}
    ).execute(ctx)
    assert created["created"] is True and hook.load_table(f"{ns}.events").metadata.format_version == 3


def test_manifest_writes_are_refused_on_v3_behind_rest_too(rest_v3):
    hook, _, table, _ = rest_v3
    before = hook.metadata_location(table)
    with pytest.raises(IcebergRefusedError, match=r"writes manifests.*whatever the catalog.*replace_where"):
        hook.refuse_uncommittable(table, change="on_rerun='replace' by data files", what="files")
    assert hook.metadata_location(table) == before
