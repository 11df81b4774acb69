"""Crypto-shredding end to end with real Spark jobs (3 jobs, one module-scoped lake).

An encrypted write of a wide derived table (job 1), the erasure of one subject, which erases and
purges its data key from the key table and leaves the derived table untouched (job 2), then an
authorised reader's decrypting view (job 3): the erased subject reads NULL, the others read their
values. Everything is read back independently: pyiceberg scans, the files on disk, AES-GCM
decryption with ``cryptography`` of what Spark wrote.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from airflow_iceberg_provider.core import crypto_shred as cs
from airflow_iceberg_provider.operators.crypto_shred import IcebergCryptoShredWriteOperator
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
from airflow_iceberg_provider.rules.erasure import subject_hash
from tests.support.erasure import SALT, add_requests, person, rows_of, set_salt_connection, subject_bytes_in_files
from tests.support.lake import fake_context

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

SOURCE, WIDE, KEYS, READ, REQUESTS = "db.cs_source", "db.cs_wide", "db.cs_keys", "db.cs_read", "db.cs_requests"
CUSTOMERS = [person(n) for n in range(700, 704)]
ERASED = CUSTOMERS[1]
READ_APP = Path(__file__).parents[1] / "support" / "crypto_read_app.py"


def _email(customer: str, row: int) -> str:
    return f"mail-{row}-{customer}"


def _create(hook, table: str, columns: dict[str, str], **properties: str):
    from airflow_iceberg_provider.rules.schema import parse_columns

    return hook.catalog.create_table(
        table, schema=parse_columns(columns), properties={"format-version": "2", **properties}
    )


def _derived_properties() -> dict[str, str]:
    return {cs.MODE_PROPERTY: cs.MODE_CRYPTO_SHRED, cs.KEY_TABLE_PROPERTY: KEYS, cs.ENCRYPTED_COLUMNS_PROPERTY: "email"}


@pytest.fixture(scope="module")
def lake_cs(module_lake):
    import pyarrow as pa

    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    hook = module_lake
    src = _create(hook, SOURCE, {"customer_id": "string", "email": "string", "city": "string", "amount": "double"})
    rows = [(c, _email(c, r), f"city-{r}", float(r)) for c in CUSTOMERS for r in range(3)]
    src.append(
        pa.table(
            {
                "customer_id": pa.array([r[0] for r in rows], pa.string()),
                "email": pa.array([r[1] for r in rows], pa.string()),
                "city": pa.array([r[2] for r in rows], pa.string()),
                "amount": pa.array([r[3] for r in rows], pa.float64()),
            }
        )
    )
    wide = {"subject_hash": "string", "email": "binary", "city": "string", "amount": "double"}
    _create(hook, WIDE, wide, **_derived_properties())
    add_requests(hook, REQUESTS, {"R-1": ERASED}, received_days_ago=1)
    yield hook
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
    else:
        os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


@pytest.fixture(scope="module")
def written(lake_cs):
    op = IcebergCryptoShredWriteOperator(
        task_id="write_wide", table=WIDE, source_table=SOURCE, subject_column="customer_id"
    )
    return op.execute(fake_context())


def _keys(hook) -> dict[str, bytes]:
    return {r[cs.KEY_HASH_COLUMN]: r[cs.KEY_COLUMN] for r in rows_of(hook, KEYS)}


def _files_with_bytes(root: str, needles: list[bytes]) -> list[str]:
    """Files under ``root`` holding any needle: raw bytes, and every binary value of a Parquet file."""
    import pyarrow.parquet as pq

    hits = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as fh:
                blobs = [fh.read()]
            if name.endswith(".parquet"):
                blobs += [v for v in pq.read_table(path).column(cs.KEY_COLUMN).to_pylist() if v]
            if any(n in b for n in needles for b in blobs):
                hits.append(path)
    return hits


def _dir(hook, table: str) -> str:
    return hook.load_table(table).metadata.location.removeprefix("file:").replace("///", "/")


def test_encrypted_write_stores_ciphertext_that_only_the_subjects_key_opens(lake_cs, written):
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    hook = lake_cs
    assert written["rows_written"] == 12 and written["subjects"] == 4 and written["keys_created"] == 4, written
    keys = _keys(hook)
    assert set(keys) == {subject_hash(SALT, c) for c in CUSTOMERS}
    assert all(len(k) == cs.KEY_BYTES for k in keys.values()) and len(set(keys.values())) == 4
    by_hash = {subject_hash(SALT, c): c for c in CUSTOMERS}
    rows = rows_of(hook, WIDE)
    assert len(rows) == 12
    for r in rows:  # Spark's GCM layout: 12-byte IV, ciphertext, 16-byte tag
        blob = r["email"]
        plain = AESGCM(keys[r["subject_hash"]]).decrypt(blob[:12], blob[12:], None).decode()
        assert plain.endswith(by_hash[r["subject_hash"]]) and plain.startswith("mail-")
    # no plaintext e-mail and no subject key anywhere in the derived table's files
    plain_values = [_email(c, n) for c in CUSTOMERS for n in range(3)] + CUSTOMERS
    assert subject_bytes_in_files(hook, WIDE, plain_values) == []
    props = hook.load_table(KEYS).metadata.properties
    assert {k: props.get(k) for k in cs.KEY_TABLE_PROPERTIES if k != "format-version"} == {
        k: v for k, v in cs.KEY_TABLE_PROPERTIES.items() if k != "format-version"
    }
    assert SALT not in json.dumps(written) and not any(c in json.dumps(written) for c in CUSTOMERS)


@pytest.fixture(scope="module")
def erased(lake_cs, written):
    hook = lake_cs
    key = _keys(hook)[subject_hash(SALT, ERASED)]
    wide_location = hook.metadata_location(WIDE)
    op = IcebergErasureOperator(
        task_id="erase_wide", table=WIDE, subject_columns="subject_hash", requests_table=REQUESTS
    )
    return op.execute(fake_context()), key, wide_location


def test_erasure_shreds_the_key_purges_the_key_table_and_leaves_the_derived_table(lake_cs, erased, capfd):
    hook = lake_cs
    result, key, wide_location = erased
    out = capfd.readouterr()
    assert result["verification"] == "verified", result
    assert result["erasure_mode"] == "crypto-shred" and result["key_table"] == KEYS
    assert result["keys_shredded"] == 1 and result["key_bytes_found"] == 0 and result["rows_decrypting"] == 0
    assert result["key_files_scanned"] > 0 and result["derived_table_rewritten"] is False
    # the derived table: not one commit, its ciphertext for the subject still there
    assert hook.metadata_location(WIDE) == wide_location
    hashes = [r["subject_hash"] for r in rows_of(hook, WIDE)]
    assert hashes.count(subject_hash(SALT, ERASED)) == 3
    # the key table: the row gone, and its key bytes in no file under its location (data, metadata, orphans)
    assert subject_hash(SALT, ERASED) not in _keys(hook) and len(_keys(hook)) == 3
    assert _files_with_bytes(_dir(hook, KEYS), [key]) == []
    assert _files_with_bytes(_dir(hook, KEYS), list(_keys(hook).values()))  # the scan does see live keys
    ev = [e for e in rows_of(hook, "governance.erasure_evidence") if e["request_id"] == "R-1"]
    assert [(e["table_name"], e["verification"]) for e in ev] == [(WIDE, "verified")]
    assert {r["request_id"]: r["status"] for r in rows_of(hook, REQUESTS)}["R-1"] in ("erased", "redacted")
    ledger = [r for r in rows_of(hook, "governance.ledger") if r["event_id"] == result["job_run_id"]]
    assert json.loads(ledger[0]["details"])["crypto_shred"]["key_table"] == KEYS
    blob = json.dumps(result) + out.out + out.err
    assert ERASED not in blob and SALT not in blob and key.hex() not in blob


def test_decrypting_view_reads_null_for_the_erased_subject_and_plaintext_for_the_others(lake_cs, erased):
    hook = lake_cs
    _create(hook, READ, {"subject_hash": "string", "email_sha256": "string", "city": "string"})
    IcebergSparkSubmitOperator(
        task_id="read", table=READ, application=str(READ_APP), params_for_job={"derived": WIDE}
    ).execute(fake_context())
    rows = rows_of(hook, READ)
    assert len(rows) == 12
    by_hash = {subject_hash(SALT, c): c for c in CUSTOMERS}
    for r in rows:
        customer = by_hash[r["subject_hash"]]
        if customer == ERASED:
            assert r["email_sha256"] is None and r["city"] is not None  # shredded; plain columns readable
        else:
            digests = {hashlib.sha256(_email(customer, n).encode()).hexdigest() for n in range(3)}
            assert r["email_sha256"] in digests
