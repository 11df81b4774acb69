"""The connection -> engine mapping, tested as data."""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.hooks.catalog_config import CatalogConfig, is_secret_key

P = "spark.sql.catalog.lake"


def cfg(host=None, login=None, password=None, **extra):
    return CatalogConfig.from_connection_fields(conn_id="c", host=host, login=login, password=password, extra=extra)


def test_sqlite_both_engines():
    c = cfg("sqlite:////data/cat.db", catalog_type="sql", catalog_name="lake", warehouse="file:///data/wh")
    assert c.pyiceberg_properties() == {"type": "sql", "uri": "sqlite:////data/cat.db", "warehouse": "file:///data/wh"}
    conf = c.spark_conf()
    assert conf.public == {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        P: "org.apache.iceberg.spark.SparkCatalog",
        f"{P}.warehouse": "file:///data/wh",
        f"{P}.type": "jdbc",
        f"{P}.uri": "jdbc:sqlite:/data/cat.db",
        f"{P}.jdbc.schema-version": "V1",
    }
    assert conf.secret == {}


def test_postgres_password_only_in_secret_conf():
    c = cfg(
        "postgresql+psycopg2://db.example:5433/iceberg",
        login="ice",
        password="p@ss:word/1",
        catalog_type="sql",
        catalog_name="lake",
        warehouse="s3://bucket/wh",
    )
    assert c.pyiceberg_properties()["uri"] == "postgresql+psycopg2://ice:p%40ss%3Aword%2F1@db.example:5433/iceberg"
    conf = c.spark_conf()
    assert conf.public[f"{P}.uri"] == "jdbc:postgresql://db.example:5433/iceberg"
    assert conf.public[f"{P}.jdbc.user"] == "ice"
    assert conf.public[f"{P}.io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert conf.secret == {f"{P}.jdbc.password": "p@ss:word/1"}
    assert all("p@ss" not in v for v in conf.public.values())


def test_rest_credential_and_token_are_secret():
    c = cfg(
        "http://127.0.0.1:8181",
        login="client",
        password="s3cret",
        catalog_type="rest",
        catalog_name="lake",
        properties={"s3.endpoint": "http://127.0.0.1:8333", "s3.secret-access-key": "abc123"},
    )
    props = c.pyiceberg_properties()
    assert props["credential"] == "client:s3cret"
    assert props["s3.endpoint"] == "http://127.0.0.1:8333"
    conf = c.spark_conf()
    assert conf.public[f"{P}.type"] == "rest"
    assert conf.public[f"{P}.s3.endpoint"] == "http://127.0.0.1:8333"
    assert conf.secret == {
        f"{P}.credential": "client:s3cret",
        f"{P}.s3.secret-access-key": "abc123",
        "spark.hadoop.fs.s3a.secret.key": "abc123",  # S3A for raw-file reads (#18)
    }
    token = cfg("http://x:8181", password="tok", catalog_type="rest", catalog_name="lake")
    assert token.spark_conf().secret == {f"{P}.token": "tok"}
    assert sorted(c.secret_values()) == ["abc123", "s3cret"]


def test_glue_and_hive():
    g = cfg(
        None,
        login="AKIA",
        password="sk",
        catalog_type="glue",
        catalog_name="lake",
        warehouse="s3://b/wh",
        properties={"glue.region": "ca-central-1"},
    )
    conf = g.spark_conf()
    assert conf.public[f"{P}.type"] == "glue"
    assert conf.public[f"{P}.glue.region"] == "ca-central-1"
    assert set(conf.secret) == {f"{P}.client.access-key-id", f"{P}.client.secret-access-key"}
    assert g.pyiceberg_properties()["glue.secret-access-key"] == "sk"
    h = cfg("thrift://hms:9083", catalog_type="hive", catalog_name="lake")
    assert h.spark_conf().public[f"{P}.uri"] == "thrift://hms:9083"
    assert h.pyiceberg_properties() == {"type": "hive", "uri": "thrift://hms:9083"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"host": "sqlite:////x.db", "catalog_type": "nessie"}, "catalog_type='nessie' is not supported"),
        ({"host": "sqlite:////x.db"}, "catalog_type=None is not supported"),
        ({"host": "sqlite:////x.db", "catalog_type": "sql"}, "warehouse is missing"),
        ({"catalog_type": "rest"}, "catalog URI is missing"),
        ({"host": "sqlite:///rel.db", "catalog_type": "sql", "warehouse": "file:///w"}, "absolute file path"),
        ({"host": "sqlite:///:memory:", "catalog_type": "sql", "warehouse": "file:///w"}, "in-memory"),
        ({"host": "oracle://x/y", "catalog_type": "sql", "warehouse": "file:///w"}, "not a supported SQL catalog"),
        ({"host": "sqlite:////x.db", "catalog_type": "sql", "warehouse": "/abs/wh"}, "must be a URI"),
        (
            {"host": "sqlite:////x.db", "catalog_type": "sql", "warehouse": "file:///w", "catalog_name": "a-b"},
            "catalog_name='a-b' is not a valid name",
        ),
        ({"host": "http://x", "catalog_type": "rest", "properties": "{not json"}, "not valid JSON"),
    ],
)
def test_bad_connections_name_the_fix(kwargs, message):
    host = kwargs.pop("host", None)
    with pytest.raises(IcebergConnectionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cfg(host, **kwargs)


def test_secret_key_detection():
    assert is_secret_key("s3.secret-access-key")
    assert is_secret_key("token")
    assert is_secret_key("jdbc.password")
    assert not is_secret_key("s3.endpoint")
    assert not is_secret_key("warehouse")
