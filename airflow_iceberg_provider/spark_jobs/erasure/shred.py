"""Crypto-shred erasure: the checks an erasure job adds when it erases a derived table's data keys.

The job runs on the key table (its subject column is the keyed hash of the subject, matched
against ``HMAC(salt, subject key)`` computed on the driver) and never touches the derived table.
Around the ordinary physical erasure of the key rows it adds two proofs
(:mod:`airflow_iceberg_provider.core.crypto_shred` holds the rules and the SQL):

* before deleting, the erased subjects' data keys are read raw from the key-table files that hold
  them (kept in memory only, never printed);
* after the purge, every file under the key table's location (data, metadata, files no snapshot
  references) is scanned for those key bytes (must be 0), and the derived table's rows of the
  erased subjects are read through the decrypting select (every encrypted column must be NULL).
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg_provider.core import crypto_shred as cs
from airflow_iceberg_provider.spark_jobs.erasure import sql as es


def declared(spec: dict[str, Any]) -> cs.CryptoShred | None:
    """The crypto-shred declaration the Airflow side validated and put in the spec (``None``: rows mode)."""
    raw = spec.get("crypto_shred")
    if not raw:
        return None
    return cs.CryptoShred(
        table=str(raw["derived_table"]),
        key_table=str(raw["key_table"]),
        encrypted_columns=tuple(raw["encrypted_columns"]),
        hash_column=str(raw["hash_column"]),
    )


def capture_keys(run: Any, subject_files: set[str]) -> list[bytes]:
    """The erased subjects' data keys, read raw (no delete applied) from the key-table files holding them."""
    from pyspark.sql import functions as F

    reachable = run.reachable_data_files()
    locations = sorted(reachable[p] for p in subject_files if p in reachable)
    if not locations:
        return []
    hashes = [r[0] for r in run.spark.table(es.key_view(cs.KEY_HASH_COLUMN)).collect()]
    raw = run.spark.read.parquet(*locations).where(F.col(cs.KEY_HASH_COLUMN).isin(hashes))
    return sorted({bytes(r[0]) for r in raw.select(cs.KEY_COLUMN).collect() if r[0] is not None})


def key_bytes_on_disk(run: Any, keys: list[bytes]) -> tuple[int, int]:
    """(files scanned, files holding any of ``keys``) under the key table's location."""
    if not keys:
        return 0, 0
    root = run.access.location(run.t)
    files = [loc for loc, _mtime in run.access.list_files(run.t, root)]
    sizes = run.access.file_sizes(files)
    holding = 0
    for loc in files:
        with run.access.open_ranged(loc) as read:
            if cs.occurrences(read(0, sizes[loc]), keys):
                holding += 1
    return len(files), holding


def verify(run: Any, shred: cs.CryptoShred, keys: list[bytes]) -> dict[str, Any]:
    """The crypto-shred proofs after the key table's purge (see the module docstring)."""
    scanned, holding = key_bytes_on_disk(run, keys)
    derived = es.table_sql(run.catalog, shred.table)
    run.sql(f"REFRESH TABLE {derived}")
    rows = run.sql(
        cs.readable_rows_sql(
            shred, derived_sql=derived, key_table_sql=run.t, hashes_view=es.key_view(cs.KEY_HASH_COLUMN)
        )
    ).collect()
    return {
        "erasure_mode": cs.MODE_CRYPTO_SHRED,
        "key_table": shred.key_table,
        "keys_shredded": len(keys),
        "key_files_scanned": scanned,
        "key_bytes_found": holding,
        "rows_decrypting": int(rows[0][0]),
    }
