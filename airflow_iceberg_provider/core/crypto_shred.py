"""Crypto-shredding: the declaration of a derived table whose personal columns are encrypted per subject.

A wide derived table keeps each subject's personal columns encrypted (AES-256-GCM) with a data key
of its own; the keys live in one Iceberg *key table*, one row per subject::

    subject_hash string   -- HMAC-SHA256(erasure salt, subject key), hex: the evidence's keyed hash
    data_key     binary   -- 32 random bytes (Python ``secrets`` on the job's driver)
    created_at   timestamp

Erasing a subject deletes its key row through the ordinary two-phase erasure (the key table's
subject column is ``subject_hash``); once the key table is purged, the derived table's ciphertext
for that subject can no longer be decrypted in any snapshot, branch, tag or copy, and the wide
table is never rewritten.

Table properties of the derived table (an allowlist: anything else is refused):

* ``airflow-iceberg.erasure.mode``: ``rows`` (default: rows are deleted) or ``crypto-shred``;
* ``airflow-iceberg.erasure.key-table``: ``namespace.table`` of the key table;
* ``airflow-iceberg.erasure.encrypted-columns``: comma-separated ``binary`` columns holding ciphertext;
* ``airflow-iceberg.erasure.subject-hash-column``: the ``string`` column joining to the key table
  (default ``subject_hash``).

Everything here is pure (stdlib only; imported by the Spark jobs too): the declaration rule and the
Spark SQL that creates the key table, encrypts on write and decrypts for authorised readers. No
value, key or salt ever appears in the SQL text: subjects and keys reach Spark as temporary views.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from airflow_iceberg_provider.core.erasure_lifecycle import FAILED, VERIFIED

MODE_PROPERTY = "airflow-iceberg.erasure.mode"
KEY_TABLE_PROPERTY = "airflow-iceberg.erasure.key-table"
ENCRYPTED_COLUMNS_PROPERTY = "airflow-iceberg.erasure.encrypted-columns"
HASH_COLUMN_PROPERTY = "airflow-iceberg.erasure.subject-hash-column"
MODE_ROWS = "rows"
MODE_CRYPTO_SHRED = "crypto-shred"
MODES = (MODE_ROWS, MODE_CRYPTO_SHRED)
DEFAULT_HASH_COLUMN = "subject_hash"

#: The key table's columns: the keyed hash of the subject (its erasure subject column) and the data key.
KEY_HASH_COLUMN = "subject_hash"
KEY_COLUMN = "data_key"
KEY_CREATED_COLUMN = "created_at"
#: AES-256: a data key is 32 random bytes.
KEY_BYTES = 32
#: Spark's ``aes_encrypt`` mode: GCM (authenticated; a random 12-byte IV per value, prepended).
CIPHER_MODE = "GCM"

#: Properties of a key table. Keys are random bytes: compression gains nothing, and stored
#: uncompressed a key's bytes are exactly on disk, which the purge's byte scan checks. No column
#: bounds in manifests (a bound would be a key or a subject hash). Copy-on-write deletes. The
#: subject column erasure-ready (``rules.erasure.erasure_ready_properties("subject_hash")``: a
#: bloom filter of the hashes, which hold no key byte).
KEY_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.parquet.compression-codec": "uncompressed",
    "write.metadata.metrics.default": "none",
    "write.metadata.metrics.column.subject_hash": "none",
    "write.metadata.metrics.column.data_key": "none",
    "write.parquet.bloom-filter-enabled.column.subject_hash": "true",
    "write.parquet.bloom-filter-fpp.column.subject_hash": "0.01",
    "write.delete.mode": "copy-on-write",
    "write.update.mode": "copy-on-write",
    "write.merge.mode": "copy-on-write",
}

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")


class CryptoShredError(ValueError):
    """A crypto-shred declaration that cannot be used; the message names the property and the fix."""


@dataclass(frozen=True)
class CryptoShred:
    """A derived table's crypto-shred declaration, validated."""

    table: str
    key_table: str
    encrypted_columns: tuple[str, ...]
    hash_column: str = DEFAULT_HASH_COLUMN

    def to_dict(self) -> dict[str, object]:
        return {
            "derived_table": self.table,
            "key_table": self.key_table,
            "encrypted_columns": list(self.encrypted_columns),
            "hash_column": self.hash_column,
        }


def erasure_mode(properties: Mapping[str, str], table: str) -> str:
    """The declared erasure mode of ``table`` (``rows`` when not declared); an unknown value raises."""
    mode = str(properties.get(MODE_PROPERTY, MODE_ROWS)).strip()
    if mode not in MODES:
        raise CryptoShredError(
            f"{table}: table property {MODE_PROPERTY}={mode!r} is not an erasure mode; set it to "
            f"{' or '.join(repr(m) for m in MODES)} (or remove it: rows are deleted)."
        )
    return mode


def _dotted(value: str) -> bool:
    parts = value.split(".")
    return len(parts) == 2 and all(_IDENT.match(p) for p in parts)


def declaration(table: str, properties: Mapping[str, str], column_types: Mapping[str, str]) -> CryptoShred | None:
    """The crypto-shred declaration of ``table``, or ``None`` when it erases rows.

    :param table: ``namespace.table``, as messages name it.
    :param properties: the table's properties.
    :param column_types: top-level column -> Iceberg type name (``string``, ``binary``, ...).
    :raises CryptoShredError: every problem at once, each naming the property and the fix.
    """
    if erasure_mode(properties, table) != MODE_CRYPTO_SHRED:
        return None
    problems = []
    key_table = str(properties.get(KEY_TABLE_PROPERTY, "")).strip()
    if not key_table:
        problems.append(
            f"it declares {MODE_PROPERTY}={MODE_CRYPTO_SHRED} without a key table; set {KEY_TABLE_PROPERTY}="
            "'<namespace>.<table>' (the table holding one data key per subject)"
        )
    elif not _dotted(key_table):
        problems.append(f"{KEY_TABLE_PROPERTY}={key_table!r} is not 'namespace.table'; fix the property")
    elif key_table == table:
        problems.append(f"{KEY_TABLE_PROPERTY}={key_table!r} names the table itself; name a separate key table")
    raw_columns = str(properties.get(ENCRYPTED_COLUMNS_PROPERTY, ""))
    columns = tuple(c.strip() for c in raw_columns.split(",") if c.strip())
    if not columns:
        problems.append(
            f"it declares no encrypted column; set {ENCRYPTED_COLUMNS_PROPERTY}='<column>[,<column>...]' "
            "(binary columns holding the personal values' ciphertext)"
        )
    hash_column = str(properties.get(HASH_COLUMN_PROPERTY, DEFAULT_HASH_COLUMN)).strip()
    for c in columns:
        kind = column_types.get(c)
        if kind is None:
            problems.append(f"encrypted column {c!r} does not exist; fix {ENCRYPTED_COLUMNS_PROPERTY}")
        elif kind != "binary":
            problems.append(f"encrypted column {c!r} has type {kind}, not binary (ciphertext); fix the column's type")
    if hash_column in columns:
        problems.append(
            f"the subject hash column {hash_column!r} cannot be encrypted; fix {ENCRYPTED_COLUMNS_PROPERTY}"
        )
    if column_types.get(hash_column) != "string":
        problems.append(
            f"subject hash column {hash_column!r} is missing or not a string column; add it (the keyed hash of "
            f"the subject, joining to the key table) or set {HASH_COLUMN_PROPERTY}"
        )
    if problems:
        raise CryptoShredError(f"{table} cannot be crypto-shredded: " + "; ".join(problems) + ".")
    return CryptoShred(table=table, key_table=key_table, encrypted_columns=columns, hash_column=hash_column)


def key_table_problems(
    key_table: str, column_types: Mapping[str, str] | None, properties: Mapping[str, str] | None = None
) -> list[str]:
    """Why ``key_table`` cannot hold the data keys (empty: it can); ``column_types`` ``None``: it does not exist.

    Its Parquet files must stay uncompressed: the purge proves a key gone by finding none of its
    bytes in any file under the key table's location, which a codec would hide.
    """
    if column_types is None:
        return [
            f"key table {key_table} does not exist; IcebergCryptoShredWriteOperator creates it with the first "
            "encrypted write (nothing to erase before that)"
        ]
    want = {KEY_HASH_COLUMN: "string", KEY_COLUMN: "binary"}
    wrong = {c: t for c, t in want.items() if column_types.get(c) != t}
    if wrong:
        return [f"key table {key_table} lacks column(s) {wrong} (name: type); it is not a crypto-shred key table"]
    codec = (properties or {}).get("write.parquet.compression-codec")
    if codec != "uncompressed":
        return [
            f"key table {key_table} has write.parquet.compression-codec={codec!r}; set it to 'uncompressed' (keys "
            "are random bytes, and the purge's byte scan must see them) and rewrite its data files"
        ]
    return []


def shred_outcome(outcome: str, *, key_bytes_found: int, rows_decrypting: int) -> str:
    """The erasure's verification outcome once the crypto-shred checks are in.

    A subject row of the derived table that still decrypts fails it whatever the key table's
    outcome; key bytes on disk fail a ``verified`` outcome (an ``incomplete`` one is a hold that
    keeps the key row, and with it the key, on purpose).
    """
    if rows_decrypting:
        return FAILED
    if key_bytes_found and outcome == VERIFIED:
        return FAILED
    return outcome


# ------------------------------------------------------------------------------ SQL
def q(*parts: str) -> str:
    """Backtick-quoted identifier parts (validated)."""
    for p in parts:
        if not isinstance(p, str) or not _IDENT.match(p):
            raise ValueError(f"invalid identifier part {p!r}")
    return ".".join(f"`{p}`" for p in parts)


def qualified(catalog: str, dotted: str) -> str:
    """Quoted ``catalog.namespace.table``."""
    ns, _, name = dotted.partition(".")
    return q(catalog, ns, name)


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_key_table_sql(key_table_sql: str) -> str:
    """``CREATE TABLE IF NOT EXISTS`` of a key table (quoted name), with :data:`KEY_TABLE_PROPERTIES`."""
    props = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in KEY_TABLE_PROPERTIES.items())
    return (
        f"CREATE TABLE IF NOT EXISTS {key_table_sql} ({q(KEY_HASH_COLUMN)} string NOT NULL, "
        f"{q(KEY_COLUMN)} binary NOT NULL, {q(KEY_CREATED_COLUMN)} timestamp) USING iceberg "
        f"TBLPROPERTIES ({props})"
    )


def key_row_schema() -> str:
    """The key table's row as a Spark DDL schema (new keys are built as rows of it on the driver)."""
    return f"{q(KEY_HASH_COLUMN)} string, {q(KEY_COLUMN)} binary, {q(KEY_CREATED_COLUMN)} timestamp"


def merge_keys_sql(new_keys_view: str, key_table_sql: str) -> str:
    """Add the data keys of ``new_keys_view`` for subjects that still have none (one commit; a key
    another writer added meanwhile is kept, and this write then encrypts with it)."""
    return (
        f"MERGE INTO {key_table_sql} k USING {q(new_keys_view)} n ON k.{q(KEY_HASH_COLUMN)} = n.{q(KEY_HASH_COLUMN)} "
        "WHEN NOT MATCHED THEN INSERT *"
    )


def new_subjects_sql(hashes_view: str, key_table_sql: str) -> str:
    """The subject hashes of ``hashes_view`` (column ``subject_hash``) that have no data key yet."""
    return (
        f"SELECT DISTINCT h.{q(KEY_HASH_COLUMN)} FROM {q(hashes_view)} h LEFT ANTI JOIN {key_table_sql} k "
        f"ON k.{q(KEY_HASH_COLUMN)} = h.{q(KEY_HASH_COLUMN)}"
    )


def encrypt_select_sql(
    shred: CryptoShred,
    *,
    source_view: str,
    subject_column: str,
    hashes_view: str,
    key_table_sql: str,
    derived_columns: Sequence[str],
) -> str:
    """The source rows as the derived table stores them, in ``derived_columns`` order.

    ``hashes_view`` maps each subject key (``subject_key``, as text) to its keyed hash
    (``subject_hash``); the hash column takes the hash, each encrypted column
    ``aes_encrypt(CAST(value AS STRING), data_key, 'GCM')`` (a NULL value stays NULL), every other
    column is copied. Inner joins: a subject without a data key would be dropped, so the job
    inserts the missing keys first and compares row counts.
    """
    cols = []
    for c in derived_columns:
        if c == shred.hash_column:
            cols.append(f"h.{q(KEY_HASH_COLUMN)} AS {q(c)}")
        elif c in shred.encrypted_columns:
            cols.append(f"aes_encrypt(CAST(s.{q(c)} AS STRING), k.{q(KEY_COLUMN)}, '{CIPHER_MODE}') AS {q(c)}")
        else:
            cols.append(f"s.{q(c)}")
    return (
        f"SELECT {', '.join(cols)} FROM {q(source_view)} s "
        f"JOIN {q(hashes_view)} h ON CAST(s.{q(subject_column)} AS STRING) = h.`subject_key` "
        f"JOIN {key_table_sql} k ON k.{q(KEY_HASH_COLUMN)} = h.{q(KEY_HASH_COLUMN)}"
    )


def decrypt_select_sql(shred: CryptoShred, *, derived_sql: str, key_table_sql: str, columns: Sequence[str]) -> str:
    """What an authorised reader sees: the derived table with its encrypted columns decrypted.

    A subject whose key row is gone (erased) reads NULL in every encrypted column, never an error:
    a LEFT JOIN leaves the key NULL and ``try_aes_decrypt`` of a NULL key is NULL (it also turns
    a value that fails GCM authentication into NULL rather than failing the query).
    """
    cols = []
    for c in columns:
        if c in shred.encrypted_columns:
            cols.append(f"CAST(try_aes_decrypt(d.{q(c)}, k.{q(KEY_COLUMN)}, '{CIPHER_MODE}') AS STRING) AS {q(c)}")
        else:
            cols.append(f"d.{q(c)}")
    return (
        f"SELECT {', '.join(cols)} FROM {derived_sql} d LEFT JOIN {key_table_sql} k "
        f"ON k.{q(KEY_HASH_COLUMN)} = d.{q(shred.hash_column)}"
    )


def decrypt_view_sql(
    view: str, shred: CryptoShred, *, derived_sql: str, key_table_sql: str, columns: Sequence[str]
) -> str:
    """``CREATE OR REPLACE TEMPORARY VIEW`` over :func:`decrypt_select_sql` (a session's authorised readers)."""
    select = decrypt_select_sql(shred, derived_sql=derived_sql, key_table_sql=key_table_sql, columns=columns)
    return f"CREATE OR REPLACE TEMPORARY VIEW {q(view)} AS {select}"


def readable_rows_sql(shred: CryptoShred, *, derived_sql: str, key_table_sql: str, hashes_view: str) -> str:
    """Rows of the subjects in ``hashes_view`` (column ``k``) that still decrypt: any encrypted column
    non-NULL through :func:`decrypt_select_sql`. The erasure's check after the key table's purge: 0."""
    select = decrypt_select_sql(
        shred,
        derived_sql=derived_sql,
        key_table_sql=key_table_sql,
        columns=[shred.hash_column, *shred.encrypted_columns],
    )
    readable = " OR ".join(f"v.{q(c)} IS NOT NULL" for c in shred.encrypted_columns)
    return (
        f"SELECT count(*) AS n FROM ({select}) v WHERE v.{q(shred.hash_column)} IN "
        f"(SELECT k FROM {q(hashes_view)}) AND ({readable})"
    )


def occurrences(data: bytes, needles: Sequence[bytes]) -> int:
    """How many of ``needles`` occur in ``data`` (the purge's byte scan of one key-table file)."""
    return sum(1 for n in needles if n and n in data)
