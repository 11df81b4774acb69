"""Spark job ``crypto_shred_write``: append a source table's rows to a crypto-shredded derived table.

1. create the key table if missing (:data:`~airflow_iceberg_provider.core.crypto_shred.KEY_TABLE_PROPERTIES`);
2. the source's distinct subject keys are hashed on the driver (``HMAC-SHA256(salt, key)``, the
   erasure's keyed hash; the salt never enters a Spark plan) into a cached temporary view;
3. every subject without a data key gets 32 bytes from Python's ``secrets`` (the operating
   system's CSPRNG), added with one ``MERGE ... WHEN NOT MATCHED``: a concurrent writer that added a
   key for the same subject first wins, and this job then encrypts with that key;
4. one ``INSERT INTO`` the derived table: the hash column takes the keyed hash, each encrypted
   column ``aes_encrypt(value, data_key, 'GCM')``, the other columns are copied.

Subject keys, data keys and the salt are never printed; the metrics are counts.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.core import crypto_shred as cs
from airflow_iceberg_provider.core.erasure_lifecycle import KeyedHasher

SOURCE_VIEW = "crypto_shred_source"
HASHES_VIEW = "crypto_shred_hashes"
NEW_KEYS_VIEW = "crypto_shred_new_keys"


def declaration(spec: dict[str, Any]) -> cs.CryptoShred:
    raw = spec["crypto_shred"]
    return cs.CryptoShred(
        table=str(raw["derived_table"]),
        key_table=str(raw["key_table"]),
        encrypted_columns=tuple(raw["encrypted_columns"]),
        hash_column=str(raw["hash_column"]),
    )


def write(ctx: Any) -> dict[str, Any]:
    """Job entry point under :func:`iceberg_job_runtime.run_job`."""
    from pyspark.sql import functions as F

    spark, spec = ctx.spark, ctx.spec
    shred = declaration(spec)
    derived, key_table = ctx.table(), ctx.table(shred.key_table)
    subject = spec["subject_column"]
    ctx.snapshot_before = ctx.ref_snapshot()
    spark.sql(cs.create_key_table_sql(key_table))
    source = spark.table(ctx.table(spec["source_table"]))
    source.createOrReplaceTempView(SOURCE_VIEW)
    rows_read, nulls = source.select(F.count(F.lit(1)), F.count(F.when(F.col(subject).isNull(), 1))).first()
    if nulls:
        raise ValueError(
            f"{spec['source_table']} has {nulls} row(s) whose subject_column {subject!r} is NULL: they would have "
            "no data key; filter them out or give them a subject"
        )
    hasher = KeyedHasher(str(spec["salt"]).encode("utf-8"))
    keys = [r[0] for r in source.select(F.col(subject).cast("string")).distinct().collect()]
    hashes = spark.createDataFrame(
        [(k, hasher.digest(k).hex()) for k in keys], "subject_key string, subject_hash string"
    ).cache()
    hashes.count()
    hashes.createOrReplaceTempView(HASHES_VIEW)
    try:
        new = [r[0] for r in spark.sql(cs.new_subjects_sql(HASHES_VIEW, key_table)).collect()]
        if new:
            now = datetime.now(UTC)
            fresh = [(h, bytes(secrets.token_bytes(cs.KEY_BYTES)), now) for h in new]
            spark.createDataFrame(fresh, cs.key_row_schema()).createOrReplaceTempView(NEW_KEYS_VIEW)
            spark.sql(cs.merge_keys_sql(NEW_KEYS_VIEW, key_table)).collect()
        columns = list(spec["derived_columns"])
        select = cs.encrypt_select_sql(
            shred,
            source_view=SOURCE_VIEW,
            subject_column=subject,
            hashes_view=HASHES_VIEW,
            key_table_sql=key_table,
            derived_columns=columns,
        )
        spark.sql(f"INSERT INTO {derived} {select}").collect()
    finally:
        hashes.unpersist()
    ctx.snapshot_after = ctx.ref_snapshot()
    ctx.details["crypto_shred"] = shred.to_dict()
    return {"rows_read": int(rows_read), "subjects": len(keys), "keys_created": len(new)}


def decrypted_view(spark: Any, catalog: str, table: str, view: str) -> cs.CryptoShred:
    """Register ``view`` (temporary) over ``table`` with its encrypted columns decrypted, for authorised
    readers of a user job: an erased subject reads NULL there, never an error.

    The declaration is read from the table's properties (a table that is not crypto-shredded raises
    ``ValueError``); the reader needs read access to the key table, which is the access to grant
    or withhold.

    :param catalog: the Spark catalog name (``ctx.catalog`` in a job under ``run_job``).
    :param table: the derived table, ``namespace.table``.
    """
    import json

    from airflow_iceberg_provider.core.erasure_columns import iceberg_column_types
    from airflow_iceberg_provider.spark_jobs.table_access import for_session

    access = for_session(spark)
    derived = cs.qualified(catalog, table)
    types = iceberg_column_types(json.loads(access.schema_json(derived)))
    shred = cs.declaration(table, access.properties(derived), types)
    if shred is None:
        raise ValueError(f"{table} is not crypto-shredded ({cs.MODE_PROPERTY} is not {cs.MODE_CRYPTO_SHRED!r})")
    key_table = cs.qualified(catalog, shred.key_table)
    spark.sql(cs.decrypt_view_sql(view, shred, derived_sql=derived, key_table_sql=key_table, columns=list(types)))
    return shred
