"""Spark on S3 (#18): the connection mapping for an ``s3://`` warehouse, tested as data (no Spark).

The same connection properties pyiceberg reads (``s3.endpoint``, ``s3.path-style-access``,
``s3.region``, ``s3.*`` / ``client.*`` credentials) must give Spark a working S3FileIO (the
default) or HadoopFileIO + S3A configuration, with every credential only in the secret conf
(the 0600 properties file) — never in the public conf that reaches argv.
"""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.core.maintenance_actions import MaintenanceSqlError
from airflow_iceberg_provider.hooks.catalog_config import (
    HADOOP_FILE_IO,
    S3_FILE_IO,
    CatalogConfig,
    s3_spark_properties,
)
from airflow_iceberg_provider.spark_jobs.arrow_sql import Unsupported
from airflow_iceberg_provider.spark_jobs.audit.files import Field, data_file_source, read_parquet_columns, s3_options
from airflow_iceberg_provider.spark_jobs.maintenance_sql import orphan_location_args, remove_orphan_files_sql

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


# ------------------------------------------------------------------ orphan removal on object storage
@pytest.mark.parametrize(
    ("location", "io_impl", "expected"),
    [
        (
            "s3://bucket/wh/db/t",
            S3_FILE_IO,
            {"prefix_mismatch_mode": "ERROR", "equal_schemes": {"s3a,s3n": "s3"}, "prefix_listing": True},
        ),
        ("s3a://bucket/wh/db/t", HADOOP_FILE_IO, {"prefix_mismatch_mode": "ERROR", "equal_schemes": {"s3a,s3n": "s3"}}),
        ("file:///data/wh/db/t", HADOOP_FILE_IO, {"prefix_mismatch_mode": "ERROR"}),
        ("/data/wh/db/t", None, {"prefix_mismatch_mode": "ERROR"}),
    ],
    ids=["s3-S3FileIO", "s3a-HadoopFileIO", "file", "bare-path"],
)
def test_orphan_scheme_handling_follows_location_and_file_io(location, io_impl, expected):
    assert orphan_location_args(location, io_impl) == expected


def test_orphan_sql_carries_scheme_handling_and_never_deletes_on_mismatch():
    args = orphan_location_args("s3://bucket/wh/db/t", S3_FILE_IO)
    sql = remove_orphan_files_sql("lake", "db.t", older_than_ms=0, dry_run=True, **args)
    assert "equal_schemes => map('s3a,s3n', 's3')" in sql
    assert "prefix_mismatch_mode => 'ERROR'" in sql and "prefix_listing => true" in sql
    plain = remove_orphan_files_sql("lake", "db.t", older_than_ms=0)
    assert "equal_schemes" not in plain and "prefix_listing" not in plain
    with pytest.raises(MaintenanceSqlError, match="prefix_mismatch_mode='delete'"):
        remove_orphan_files_sql("lake", "db.t", older_than_ms=0, prefix_mismatch_mode="delete")
    quoted = remove_orphan_files_sql("lake", "db.t", older_than_ms=0, equal_authorities={"a'b": "c"})
    assert "map('a\\'b', 'c')" in quoted  # keys and values are escaped literals


# ------------------------------------------------------------------ the audit's driver read on S3
def test_driver_s3_options_come_from_the_sessions_s3a_conf():
    conf = CatalogConfig.from_connection_fields(
        conn_id="c",
        host="sqlite:////data/catalog.db",
        login=None,
        password=None,
        extra={"catalog_type": "sql", "catalog_name": "lake", "warehouse": "s3://bucket/wh", "properties": S3_PROPS},
    ).spark_conf()
    options = s3_options(conf.all().get)  # what the driver's spark.conf.get sees (public + properties file)
    assert options == {
        "access_key": AK,
        "secret_key": SK,
        "session_token": TOKEN,
        "region": "eu-west-1",
        "endpoint_override": "127.0.0.1:8333",
        "scheme": "http",
    }
    assert s3_options({}.get) == {}  # no settings: pyarrow's default AWS credential chain
    https = s3_options({"spark.hadoop.fs.s3a.endpoint": "s3.eu-west-1.amazonaws.com"}.get)
    assert https == {"endpoint_override": "s3.eu-west-1.amazonaws.com", "scheme": "https"}


def test_driver_reads_s3_locations_through_the_object_store_and_refuses_without_one(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyarrow import fs

    (tmp_path / "bucket" / "wh").mkdir(parents=True)
    field = pa.field("qty", pa.int64(), metadata={b"PARQUET:field_id": b"5"})
    pq.write_table(pa.table({"qty": [1, 2]}, schema=pa.schema([field])), tmp_path / "bucket/wh/a b.parquet")
    store = fs.SubTreeFileSystem(str(tmp_path), fs.LocalFileSystem())  # stands in for S3: bucket/key paths
    fields = {"qty": Field("qty", 5, "long")}
    for location in ("s3://bucket/wh/a%20b.parquet", "s3a://bucket/wh/a%20b.parquet"):
        columns = read_parquet_columns([location], fields, 2, lambda: store)
        assert columns["qty"][0].to_pylist() == [1, 2]
    with pytest.raises(Unsupported, match="s3://"):
        data_file_source("s3://bucket/wh/a%20b.parquet")  # no object store: Spark reads the rows
    with pytest.raises(Unsupported, match="gs://"):
        data_file_source("gs://bucket/a.parquet", lambda: store)
