"""Crypto-shredding: the declaration rule, the SQL, and the operators' refusals (SQLite catalog, no Spark).

Every operator refusal happens before any Spark job: the Spark connection is removed, so reaching
the submission would raise a connection error instead, and no table's metadata pointer moves.
"""

from __future__ import annotations

import json

import pytest

from airflow_iceberg_provider.core import crypto_shred as cs
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.operators.crypto_shred import IcebergCryptoShredWriteOperator
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.rules import crypto_shred
from tests.support.erasure import SALT, add_requests, person
from tests.support.lake import fake_context

WIDE_TYPES = {"subject_hash": "string", "email": "binary", "phone": "binary", "city": "string"}
DECLARED = {
    cs.MODE_PROPERTY: "crypto-shred",
    cs.KEY_TABLE_PROPERTY: "db.keys",
    cs.ENCRYPTED_COLUMNS_PROPERTY: "email, phone",
}


# ------------------------------------------------------------------------ declaration
def test_a_table_without_the_mode_erases_rows():
    assert cs.declaration("db.t", {}, WIDE_TYPES) is None
    assert cs.declaration("db.t", {cs.MODE_PROPERTY: "rows"}, WIDE_TYPES) is None


def test_a_complete_declaration_is_read():
    shred = cs.declaration("db.wide", DECLARED, WIDE_TYPES)
    assert shred == cs.CryptoShred("db.wide", "db.keys", ("email", "phone"), "subject_hash")
    assert shred.to_dict()["derived_table"] == "db.wide"


@pytest.mark.parametrize(
    ("props", "types", "match"),
    [
        ({cs.MODE_PROPERTY: "shred"}, WIDE_TYPES, "is not an erasure mode; set it to 'rows' or 'crypto-shred'"),
        ({cs.KEY_TABLE_PROPERTY: ""}, WIDE_TYPES, "without a key table; set airflow-iceberg.erasure.key-table"),
        ({cs.KEY_TABLE_PROPERTY: "keys"}, WIDE_TYPES, "'keys' is not 'namespace.table'"),
        ({cs.KEY_TABLE_PROPERTY: "db.wide"}, WIDE_TYPES, "names the table itself"),
        ({cs.ENCRYPTED_COLUMNS_PROPERTY: " , "}, WIDE_TYPES, "declares no encrypted column"),
        ({cs.ENCRYPTED_COLUMNS_PROPERTY: "email,fax"}, WIDE_TYPES, "'fax' does not exist"),
        ({cs.ENCRYPTED_COLUMNS_PROPERTY: "city"}, WIDE_TYPES, "'city' has type string, not binary"),
        ({cs.ENCRYPTED_COLUMNS_PROPERTY: "subject_hash"}, WIDE_TYPES, "cannot be encrypted"),
        ({}, {**WIDE_TYPES, "subject_hash": "long"}, "'subject_hash' is missing or not a string column"),
        ({cs.HASH_COLUMN_PROPERTY: "sh"}, WIDE_TYPES, "'sh' is missing or not a string"),
    ],
)
def test_a_malformed_declaration_names_the_property_and_the_fix(props, types, match):
    with pytest.raises(cs.CryptoShredError, match=match):
        cs.declaration("db.wide", {**DECLARED, **props}, types)
    with pytest.raises(IcebergValidationError, match=match):  # the Airflow side's error, same message
        crypto_shred.declared("db.wide", {**DECLARED, **props}, types)


def test_every_problem_is_named_at_once():
    with pytest.raises(cs.CryptoShredError) as err:
        cs.declaration("db.wide", {cs.MODE_PROPERTY: "crypto-shred"}, {})
    assert "without a key table" in str(err.value) and "no encrypted column" in str(err.value)


def test_key_table_problems():
    good = {cs.KEY_HASH_COLUMN: "string", cs.KEY_COLUMN: "binary"}
    props = dict(cs.KEY_TABLE_PROPERTIES)
    assert cs.key_table_problems("db.keys", good, props) == []
    assert "does not exist" in cs.key_table_problems("db.keys", None)[0]
    assert "lacks column(s) {'data_key': 'binary'}" in cs.key_table_problems("db.keys", {"subject_hash": "string"})[0]
    compressed = cs.key_table_problems("db.keys", good, {**props, "write.parquet.compression-codec": "zstd"})
    assert "set it to 'uncompressed'" in compressed[0]


def test_a_key_table_is_erasure_ready_for_its_subject_column():
    from airflow_iceberg_provider.rules.erasure import erasure_ready_properties

    ready = erasure_ready_properties(cs.KEY_HASH_COLUMN)
    assert {k: cs.KEY_TABLE_PROPERTIES.get(k) for k in ready} == ready


def test_shred_outcome():
    assert cs.shred_outcome("verified", key_bytes_found=0, rows_decrypting=0) == "verified"
    assert cs.shred_outcome("verified", key_bytes_found=1, rows_decrypting=0) == "failed"
    assert cs.shred_outcome("incomplete", key_bytes_found=1, rows_decrypting=0) == "incomplete"  # a hold keeps it
    assert cs.shred_outcome("incomplete", key_bytes_found=0, rows_decrypting=2) == "failed"


def test_erasure_target_is_the_key_tables_hash_column():
    shred = cs.declaration("db.wide", DECLARED, WIDE_TYPES)
    good = {cs.KEY_HASH_COLUMN: "string", cs.KEY_COLUMN: "binary"}
    assert crypto_shred.erasure_target(shred, ["subject_hash"], good, cs.KEY_TABLE_PROPERTIES) == ["subject_hash"]
    with pytest.raises(IcebergValidationError, match="pass subject_columns='subject_hash'"):
        crypto_shred.erasure_target(shred, ["customer_id"], good, cs.KEY_TABLE_PROPERTIES)
    with pytest.raises(IcebergValidationError, match="key table db.keys does not exist"):
        crypto_shred.erasure_target(shred, ["subject_hash"], None, None)


def test_write_columns_and_subject_column():
    shred = cs.declaration("db.wide", DECLARED, WIDE_TYPES)
    source = {"customer_id": "string", "email": "string", "phone": "string", "city": "string"}
    assert crypto_shred.write_columns(shred, WIDE_TYPES, source) == list(WIDE_TYPES)
    with pytest.raises(IcebergValidationError, match=r"source_table lacks column\(s\) \['phone'\]"):
        crypto_shred.write_columns(shred, WIDE_TYPES, {"customer_id": "string", "email": "string", "city": "string"})
    assert crypto_shred.subject_column("customer_id", source) == "customer_id"
    with pytest.raises(IcebergValidationError, match="subject_column='nope' is not a column of source_table"):
        crypto_shred.subject_column("nope", source)
    with pytest.raises(IcebergValidationError, match="has type double"):
        crypto_shred.subject_column("x", {"x": "double"})


# ------------------------------------------------------------------------------- SQL
def test_sql_quotes_identifiers_and_carries_no_value():
    shred = cs.declaration("db.wide", DECLARED, WIDE_TYPES)
    enc = cs.encrypt_select_sql(
        shred,
        source_view="src",
        subject_column="customer_id",
        hashes_view="hashes",
        key_table_sql="`c`.`db`.`keys`",
        derived_columns=list(WIDE_TYPES),
    )
    assert enc == (
        "SELECT h.`subject_hash` AS `subject_hash`, aes_encrypt(CAST(s.`email` AS STRING), k.`data_key`, 'GCM') AS "
        "`email`, aes_encrypt(CAST(s.`phone` AS STRING), k.`data_key`, 'GCM') AS `phone`, s.`city` FROM `src` s "
        "JOIN `hashes` h ON CAST(s.`customer_id` AS STRING) = h.`subject_key` "
        "JOIN `c`.`db`.`keys` k ON k.`subject_hash` = h.`subject_hash`"
    )
    dec = cs.decrypt_select_sql(
        shred, derived_sql="`c`.`db`.`wide`", key_table_sql="`c`.`db`.`keys`", columns=["city", "email"]
    )
    assert dec == (
        "SELECT d.`city`, CAST(try_aes_decrypt(d.`email`, k.`data_key`, 'GCM') AS STRING) AS `email` "
        "FROM `c`.`db`.`wide` d LEFT JOIN `c`.`db`.`keys` k ON k.`subject_hash` = d.`subject_hash`"
    )
    assert cs.decrypt_view_sql("v", shred, derived_sql="w", key_table_sql="k", columns=["city"]).startswith(
        "CREATE OR REPLACE TEMPORARY VIEW `v` AS SELECT d.`city`"
    )
    readable = cs.readable_rows_sql(shred, derived_sql="w", key_table_sql="k", hashes_view="erasure_keys_subject_hash")
    assert "IN (SELECT k FROM `erasure_keys_subject_hash`)" in readable and "v.`phone` IS NOT NULL" in readable
    ddl = cs.create_key_table_sql("`c`.`db`.`keys`")
    assert "`data_key` binary NOT NULL" in ddl and "'write.parquet.compression-codec' = 'uncompressed'" in ddl
    assert cs.merge_keys_sql("new", "`c`.`db`.`keys`").endswith("WHEN NOT MATCHED THEN INSERT *")
    with pytest.raises(ValueError, match="invalid identifier part"):
        cs.q("a`b")


def test_byte_scan_counts_needles():
    assert cs.occurrences(b"..abc..xyz", [b"abc", b"xyz", b"nope", b""]) == 2


# ------------------------------------------------------------------ operator refusals
@pytest.fixture
def shred_lake(lake, monkeypatch):
    from airflow_iceberg_provider.rules.schema import parse_columns

    monkeypatch.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": SALT}))
    monkeypatch.delenv("AIRFLOW_CONN_SPARK_DEFAULT", raising=False)
    schema = parse_columns({"subject_hash": "string", "email": "binary", "city": "string"})
    lake.catalog.create_table("db.no_key", schema=schema, properties={cs.MODE_PROPERTY: "crypto-shred"})
    declared = {**DECLARED, cs.ENCRYPTED_COLUMNS_PROPERTY: "email"}
    lake.catalog.create_table("db.wide", schema=schema, properties=declared)
    source = parse_columns({"customer_id": "string", "email": "string"})
    lake.catalog.create_table("db.source", schema=source)
    add_requests(lake, "db.requests", {"R-1": person(1)})
    return lake


def _refused(hook, op, match, tables=("db.no_key", "db.wide", "db.requests")):
    before = {t: hook.metadata_location(t) for t in tables}
    with pytest.raises(IcebergValidationError, match=match):
        op.execute(fake_context())
    assert {t: hook.metadata_location(t) for t in tables} == before


def _erase(table, **kw):
    args = {"task_id": "e", "table": table, "subject_columns": "subject_hash", "requests_table": "db.requests"}
    return IcebergErasureOperator(**{**args, **kw})


def test_erasure_of_a_table_declaring_crypto_shred_without_a_key_table_is_refused(shred_lake):
    _refused(shred_lake, _erase("db.no_key"), "db.no_key cannot be crypto-shredded: it declares .* without a key table")


def test_erasure_before_the_key_table_exists_or_by_another_column_is_refused(shred_lake):
    _refused(shred_lake, _erase("db.wide"), "key table db.keys does not exist")
    _refused(shred_lake, _erase("db.wide", subject_columns="customer_id"), "pass subject_columns='subject_hash'")


def test_encrypted_write_refusals(shred_lake):
    def write(table="db.wide", **kw):
        args = {"task_id": "w", "table": table, "source_table": "db.source", "subject_column": "customer_id"}
        return IcebergCryptoShredWriteOperator(**{**args, **kw})

    _refused(shred_lake, write("db.no_key"), "without a key table")
    _refused(shred_lake, write("db.requests"), "db.requests is not crypto-shredded")
    _refused(shred_lake, write(subject_column="nope"), "subject_column='nope' is not a column of source_table")
    _refused(shred_lake, write(), r"source_table lacks column\(s\) \['city'\]")
    op = write(source_table="{{ params.src }}")
    assert {"source_table", "subject_column", "salt_conn_id"} <= set(op.template_fields)
    assert op.source_table == "{{ params.src }}"  # assigned verbatim, checked in execute()


def test_the_erasure_of_a_crypto_shred_table_targets_its_key_table(shred_lake):
    import logging

    from airflow_iceberg_provider.operators._erasure_job import ErasureArgs, erasure_summary, prepare_erasure
    from airflow_iceberg_provider.params import validate_table
    from airflow_iceberg_provider.rules.schema import parse_columns

    keys = parse_columns({"subject_hash": "string", "data_key": "binary", "created_at": "timestamptz"})
    shred_lake.catalog.create_table("db.keys", schema=keys, properties=cs.KEY_TABLE_PROPERTIES)
    wide_before = shred_lake.metadata_location("db.wide")
    args = ErasureArgs(table=validate_table("db.wide"), subject_columns="subject_hash", requests_table="db.requests")
    prepared = prepare_erasure(shred_lake, args, "full", logging.getLogger("test"))
    assert prepared["subject_columns"] == ["subject_hash"]
    assert prepared["crypto_shred"] == {
        "derived_table": "db.wide",
        "key_table": "db.keys",
        "encrypted_columns": ["email"],
        "hash_column": "subject_hash",
    }
    assert prepared["tables_in_scope"] == ["db.wide"]  # evidence is kept under the derived table's name
    assert shred_lake.metadata_location("db.wide") == wide_before
    rows_mode = erasure_summary("db.t", "j", {"status": "succeeded"}, {}, 1.0, "full")
    assert rows_mode["erasure_mode"] == "rows" and "key_table" not in rows_mode
    metrics = {"erasure_mode": "crypto-shred", "key_table": "db.keys", "keys_shredded": 2, "key_bytes_found": 0}
    shredded = erasure_summary("db.wide", "j", {"status": "succeeded"}, metrics, 1.0, "full")
    assert shredded["keys_shredded"] == 2 and shredded["derived_table_rewritten"] is False
