"""Spark on S3 (#18): the connection mapping for an ``s3://`` warehouse, tested as data (no Spark).

The same connection properties pyiceberg reads (``s3.endpoint``, ``s3.path-style-access``,
``s3.region``, ``s3.*`` / ``client.*`` credentials) must give Spark a working S3FileIO (the
default) or HadoopFileIO + S3A configuration, with every credential only in the secret conf
(the 0600 properties file) — never in the public conf that reaches argv.
"""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.catalog_config import (
    HADOOP_FILE_IO,
    S3_FILE_IO,
    CatalogConfig,
    s3_spark_properties,
)

P = "spark.sql.catalog.lake"
AK, SK, TOKEN, PG_PWD = "AKIA-EXAMPLE-KEY", "s3-secret-EXAMPLE", "session-token-EXAMPLE", "pg-pass-EXAMPLE"
S3_PROPS = {
    "s3.endpoint": "http://127.0.0.1:8333",
    "s3.path-style-access": "true",
    "s3.region": "eu-west-1",
    "s3.access-key-id": AK,
    "s3.secret-access-key": SK,
    "s3.session-token": TOKEN,
}


def cfg(ctype="sql", host="postgresql+psycopg2://db.example:5432/lake", **extra):
    extra = {"catalog_type": ctype, "catalog_name": "lake", "warehouse": "s3://bucket/wh", **extra}
    return CatalogConfig.from_connection_fields(conn_id="c", host=host, login="ice", password=PG_PWD, extra=extra)


def _assert_secrets_only_in_secret_conf(conf, *secrets):
    public_text = " ".join([*conf.public, *conf.public.values()])
    for value in secrets:
        assert value not in public_text
        assert value in conf.secret.values()


@pytest.mark.parametrize(
    "host", ["postgresql+psycopg2://db.example:5432/lake", "sqlite:////data/catalog.db"], ids=["postgres", "sqlite"]
)
def test_sql_catalog_s3_warehouse_gets_s3fileio_from_pyiceberg_properties(host):
    c = cfg(host=host, properties=S3_PROPS)
    conf = c.spark_conf()
    assert conf.public[f"{P}.io-impl"] == S3_FILE_IO
    assert conf.public[f"{P}.warehouse"] == "s3://bucket/wh"
    assert conf.public[f"{P}.s3.endpoint"] == "http://127.0.0.1:8333"
    assert conf.public[f"{P}.s3.path-style-access"] == "true"
    assert conf.public[f"{P}.client.region"] == "eu-west-1"  # Iceberg Java's region key
    assert conf.secret[f"{P}.s3.access-key-id"] == AK
    assert conf.secret[f"{P}.s3.secret-access-key"] == SK
    assert conf.secret[f"{P}.s3.session-token"] == TOKEN
    _assert_secrets_only_in_secret_conf(conf, AK, SK, TOKEN)
    # Spark's global Hadoop conf serves raw-file reads (erasure verification, orphan listing) through S3A
    assert conf.public["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf.public["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert conf.public["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf.public["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf.secret["spark.hadoop.fs.s3a.access.key"] == AK
    assert conf.secret["spark.hadoop.fs.s3a.secret.key"] == SK
    assert conf.secret["spark.hadoop.fs.s3a.session.token"] == TOKEN
    # pyiceberg keeps its own names: one connection, two engines
    props = c.pyiceberg_properties()
    assert {k: props[k] for k in S3_PROPS} == S3_PROPS


def test_rest_catalog_with_s3_properties_but_server_side_warehouse():
    c = cfg("rest", host="http://127.0.0.1:8181", warehouse=None, properties=S3_PROPS)
    conf = c.spark_conf()
    assert conf.public[f"{P}.type"] == "rest" and f"{P}.warehouse" not in conf.public
    assert conf.public[f"{P}.io-impl"] == S3_FILE_IO
    assert conf.public[f"{P}.client.region"] == "eu-west-1"
    _assert_secrets_only_in_secret_conf(conf, AK, SK, TOKEN, f"ice:{PG_PWD}")


def test_pyiceberg_client_credentials_become_s3fileio_keys():
    c = cfg(properties={"client.access-key-id": AK, "client.secret-access-key": SK, "client.region": "us-east-2"})
    conf = c.spark_conf()
    assert conf.secret[f"{P}.s3.access-key-id"] == AK and conf.secret[f"{P}.s3.secret-access-key"] == SK
    assert conf.public[f"{P}.client.region"] == "us-east-2"
    _assert_secrets_only_in_secret_conf(conf, AK, SK)


def test_explicit_s3_keys_win_over_client_keys():
    out = s3_spark_properties({"client.access-key-id": "client-ak", "s3.access-key-id": "s3-ak"})
    assert out["s3.access-key-id"] == "s3-ak" and "client.access-key-id" not in out


def test_hadoop_file_io_maps_to_s3a_for_both_schemes():
    c = cfg(properties=S3_PROPS, spark_properties={"io-impl": HADOOP_FILE_IO})
    conf = c.spark_conf()
    h = f"{P}.hadoop.fs"
    assert conf.public[f"{P}.io-impl"] == HADOOP_FILE_IO
    assert conf.public[f"{h}.s3.impl"] == conf.public[f"{h}.s3a.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert conf.public[f"{h}.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert conf.public[f"{h}.s3a.path.style.access"] == "true"
    assert conf.public[f"{h}.s3a.endpoint.region"] == "eu-west-1"
    assert conf.public[f"{h}.s3a.connection.ssl.enabled"] == "false"  # http:// endpoint
    assert conf.secret[f"{h}.s3a.access.key"] == AK  # a secret although its name doesn't say so
    assert conf.secret[f"{h}.s3a.secret.key"] == SK
    assert conf.secret[f"{h}.s3a.session.token"] == TOKEN
    assert not [k for k in conf.all() if k.startswith(P) and (".s3.access-key-id" in k or ".s3.endpoint" in k)]
    _assert_secrets_only_in_secret_conf(conf, AK, SK, TOKEN)


def test_local_warehouse_is_untouched_even_with_s3_properties():
    c = cfg(host="sqlite:////data/catalog.db", warehouse="file:///data/wh", properties={"s3.secret-access-key": SK})
    conf = c.spark_conf()
    assert f"{P}.io-impl" not in conf.public and not [k for k in conf.all() if "s3a" in k]


def test_user_io_impl_is_kept():
    out = s3_spark_properties({"io-impl": "com.example.MyFileIO", "s3.region": "x"})
    assert out["io-impl"] == "com.example.MyFileIO" and out["client.region"] == "x"
