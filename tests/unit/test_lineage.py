"""OpenLineage datasets and Airflow Assets for Iceberg tables (OpenLineage provider installed).

* Dataset identity follows the OpenLineage Spark integration's rules for Iceberg tables (the
  table location through ``FilesystemDatasetUtils.fromLocation``), checked against the same
  vectors the integration's own tests use, on real catalogs (SQLite here, REST + S3 below).
* The OpenLineage provider's ``DefaultExtractor`` picks up the base operator's
  ``get_openlineage_facets_on_complete`` for every provider operator.
* Assets: the URI form, both accepted forms, DAGs with other tools' ``iceberg://`` URIs parse,
  and the asset events carry the snapshot id.
"""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest

from airflow_iceberg_provider.assets.lineage import location_identity, spark_type_name
from airflow_iceberg_provider.assets.uris import (
    asset_names_table,
    iceberg_asset,
    iceberg_asset_uri,
    parse_iceberg_asset_uri,
)
from tests.support.lake import append_batches, create_orders_table, fake_context, orders_batch

T = "db.orders"


# ------------------------------------------------------------------ identity rules (pure)
@pytest.mark.parametrize(
    ("location", "expected"),
    [
        # the vectors of OpenLineage's FilesystemDatasetUtilsTestForLocal / ...ForS3
        ("file:/warehouse/location", ("file", "/warehouse/location")),
        ("file:/warehouse/location/", ("file", "/warehouse/location")),
        ("file:///warehouse/location", ("file", "/warehouse/location")),
        ("/warehouse/location", ("file", "/warehouse/location")),
        ("s3://bucket/warehouse", ("s3://bucket", "warehouse")),
        ("s3://bucket/warehouse/location/", ("s3://bucket", "warehouse/location")),
        ("s3a://bucket/warehouse/location", ("s3a://bucket", "warehouse/location")),
        ("gs://bucket/wh/db/t", ("gs://bucket", "wh/db/t")),
        (
            "abfss://container@account.dfs.core.windows.net/wh/t",
            ("abfss://container@account.dfs.core.windows.net", "wh/t"),
        ),
    ],
)
def test_location_identity_matches_openlineage_filesystem_rules(location, expected):
    assert location_identity(location) == expected


def test_iceberg_types_are_spelled_like_spark():
    from pyiceberg.types import DecimalType, ListType, LongType, MapType, StringType, TimestamptzType

    assert spark_type_name(LongType()) == "long"
    assert spark_type_name(TimestamptzType()) == "timestamp"
    assert spark_type_name(DecimalType(10, 2)) == "decimal(10,2)"
    assert spark_type_name(ListType(1, StringType())) == "array<string>"
    assert spark_type_name(MapType(1, StringType(), 2, LongType())) == "map<string,long>"


# ------------------------------------------------------------------ operator lineage (real catalog)
def test_operator_reports_output_dataset_with_schema_symlink_and_version(lake):
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator

    tbl = create_orders_table(lake, T)
    (sid,) = append_batches(lake, T, 1)
    op = IcebergCreateTagOperator(task_id="tag", table=T, tag="eod")
    op.execute(fake_context())
    lineage = op.get_openlineage_facets_on_complete(None)
    assert lineage.inputs == []
    (out,) = lineage.outputs
    assert (out.namespace, out.name) == location_identity(tbl.location())
    assert out.namespace == "file" and out.name.endswith("/warehouse/db/orders")  # Spark's layout too
    fields = {f.name: f.type for f in out.facets["schema"].fields}
    assert fields == {
        "order_id": "long",
        "customer_id": "string",
        "region": "string",
        "amount": "double",
        "order_ts": "timestamp",
    }
    (link,) = out.facets["symlinks"].identifiers
    assert (link.namespace, link.name, link.type) == ("iceberg://lakehouse", "db.orders", "TABLE")
    assert out.facets["version"].datasetVersion == str(sid)


def test_openlineage_provider_extracts_through_the_base_operator(lake):
    from airflow.providers.openlineage.extractors.base import DefaultExtractor
    from openlineage.client.serde import Serde

    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator

    create_orders_table(lake, T).append(orders_batch(0, 5))
    for op in (
        IcebergMaintenancePlanOperator(task_id="plan", table=T),
        IcebergWapPublishOperator(task_id="pub", table=T, branch="b"),
    ):
        metadata = DefaultExtractor(op).extract_on_complete(None)
        assert metadata is not None, type(op).__name__
        (out,) = metadata.outputs
        assert out.namespace == "file" and out.name.endswith("orders")
        json.loads(Serde.to_json(out))  # serialisable as the provider will send it


def test_read_only_operators_can_declare_inputs(lake):
    from airflow_iceberg_provider.operators._base import IcebergBaseOperator

    create_orders_table(lake, T)
    create_orders_table(lake, "db.daily")

    class CopyOperator(IcebergBaseOperator):
        def openlineage_tables(self):
            return ["db.orders"], [self.ident.dotted]

        def execute(self, context):
            return None

    lineage = CopyOperator(task_id="c", table="db.daily").get_openlineage_facets_on_complete(None)
    assert [d.name.rsplit("/", 1)[1] for d in lineage.inputs] == ["orders"]
    assert [d.name.rsplit("/", 1)[1] for d in lineage.outputs] == ["daily"]


def test_missing_table_falls_back_to_the_logical_identity(lake):
    from airflow_iceberg_provider.operators.refs import IcebergDropTagOperator

    op = IcebergDropTagOperator(task_id="d", table="db.gone", tag="x")
    (out,) = op.get_openlineage_facets_on_complete(None).outputs
    assert (out.namespace, out.name) == ("iceberg://lakehouse", "db.gone") and not out.facets


@pytest.mark.rest
def test_rest_catalog_tables_are_named_by_their_s3_location(monkeypatch):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator
    from tests.support.servers import rest_conn_json, seaweed

    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", rest_conn_json(seaweed()))
    ns = f"ol{uuid.uuid4().hex[:8]}"
    hook = IcebergCatalogHook()
    tbl = create_orders_table(hook, f"{ns}.orders")
    tbl.append(orders_batch(0, 3))
    op = IcebergCreateTagOperator(task_id="t", table=f"{ns}.orders", tag="v1", governance_namespace=f"g{ns}")
    op.execute(fake_context())
    (out,) = op.get_openlineage_facets_on_complete(None).outputs
    assert out.namespace == "s3://warehouse" and out.name.endswith(f"{ns}/orders")
    assert (out.namespace, out.name) == location_identity(hook.load_table(f"{ns}.orders").location())


# ------------------------------------------------------------------ Assets
def test_asset_uri_form_and_both_accepted_forms():
    assert iceberg_asset_uri("sales.orders") == "iceberg://lakehouse/sales/orders"
    assert iceberg_asset("sales.orders", "prod").uri == "iceberg://prod/sales/orders"
    assert parse_iceberg_asset_uri("iceberg://prod/sales/orders") == ("prod", "sales", "orders")
    assert parse_iceberg_asset_uri("iceberg://prod/sales.orders") == ("prod", "sales", "orders")
    assert parse_iceberg_asset_uri("iceberg://sales.orders") == (None, "sales", "orders")
    assert parse_iceberg_asset_uri("s3://bucket/key") is None
    assert parse_iceberg_asset_uri("iceberg://") is None
    assert asset_names_table("iceberg://sales.orders", "sales.orders", "prod")  # catalog-less matches
    assert not asset_names_table("iceberg://other/sales/orders", "sales.orders", "prod")


def test_dags_with_other_tools_iceberg_uris_still_parse(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    (tmp_path / "dag_assets.py").write_text(
        textwrap.dedent(
            """
            import pendulum
            from airflow.sdk import DAG, Asset
            from airflow.providers.standard.operators.empty import EmptyOperator
            from airflow_iceberg_provider.assets.uris import iceberg_asset

            theirs = [Asset("iceberg://db.table"), Asset("iceberg://Warehouse/ns/t?x=1"), Asset("iceberg://a/b/c/d")]
            with DAG("producer", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
                EmptyOperator(task_id="p", outlets=[*theirs, iceberg_asset("sales.orders")])
            with DAG("consumer", schedule=[Asset("iceberg://db.table")], start_date=pendulum.datetime(2026, 1, 1)):
                EmptyOperator(task_id="c")
            """
        )
    )
    bag = DagBag(dag_folder=str(tmp_path))
    assert bag.import_errors == {}
    uris = {o.uri for o in bag.get_dag("producer").get_task("p").outlets}
    assert "iceberg://db.table/" in uris and "iceberg://lakehouse/sales/orders" in uris  # Airflow adds the "/"
    assert parse_iceberg_asset_uri("iceberg://db.table/") == (None, "db", "table")


def test_asset_events_carry_the_snapshot_id(lake):
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator

    create_orders_table(lake, T)
    ids = append_batches(lake, T, 2)
    mine, theirs, other = iceberg_asset(T), Asset("iceberg://db.orders"), Asset("s3://bucket/unrelated")
    op = IcebergExpireSnapshotsOperator(
        task_id="x", table=T, retain_last=1, dry_run=True, outlets=[mine, theirs, other], older_than="P1D"
    )
    ctx = {**fake_context(), "outlet_events": OutletEventAccessors()}
    op.execute(ctx)
    op.post_execute(ctx)  # the task runner calls it after execute
    events = ctx["outlet_events"]
    for asset in (mine, theirs):
        assert events[asset].extra == {"table": T, "catalog": "lakehouse", "snapshot_id": str(ids[-1]), "task_id": "x"}
    assert events[other].extra == {}
    # what an operator set explicitly (e.g. WAP publish) is not overwritten
    events[mine].extra = {"snapshot_id": 1}
    op.post_execute(ctx)
    assert events[mine].extra == {"snapshot_id": 1}
    assert op.emit_asset_events(ctx, snapshot_id=ids[0], reason="erasure") == [mine.uri, theirs.uri]
    assert events[theirs].extra["snapshot_id"] == str(ids[0]) and events[theirs].extra["reason"] == "erasure"


def test_asset_event_of_an_unreadable_table_does_not_fail_the_task(lake):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_iceberg_provider.operators.refs import IcebergDropTagOperator

    asset = iceberg_asset("db.gone")
    op = IcebergDropTagOperator(task_id="d", table="db.gone", tag="x", outlets=[asset])
    ctx = {**fake_context(), "outlet_events": OutletEventAccessors()}
    op.post_execute(ctx)
    assert ctx["outlet_events"][asset].extra["snapshot_id"] is None


def test_read_only_provider_operators_report_inputs(lake):
    from airflow_iceberg_provider.operators.refs import IcebergCommitCheckOperator
    from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator

    create_orders_table(lake, T)
    check = IcebergCommitCheckOperator(task_id="c", table=T).get_openlineage_facets_on_complete(None)
    assert [d.name.rsplit("/", 2)[-2:] for d in check.inputs] == [["db", "orders"]] and check.outputs == []
    lake.governance.table("audit_results")
    audit = IcebergWapAuditOperator(task_id="a", table=T, branch="b", column_mapping={"amount": {"min": {"geq_to": 0}}})
    lineage = audit.get_openlineage_facets_on_complete(None)
    assert [d.name.rsplit("/", 1)[-1] for d in lineage.inputs] == ["orders"]
    assert [d.name.rsplit("/", 1)[-1] for d in lineage.outputs] == ["audit_results"]
