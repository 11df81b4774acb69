"""Crypto-shredding rules on the Airflow side: which table an erasure or an encrypted write works on.

Pure functions over values the operators read from the catalog (properties, column types); the
declaration itself, the key table's shape and the Spark SQL are
:mod:`airflow_iceberg_provider.core.crypto_shred` (shared with the Spark jobs). Every refusal is an
:class:`~airflow_iceberg_provider.exceptions.IcebergValidationError` naming the table, the
property or parameter, and the fix; it is raised before any job starts, so nothing is changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from airflow_iceberg_provider.core import crypto_shred as cs
from airflow_iceberg_provider.core.crypto_shred import CryptoShred
from airflow_iceberg_provider.core.erasure_columns import SUBJECT_COLUMN_TYPES
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.params import validate_table


def declared(table: str, properties: Mapping[str, str], column_types: Mapping[str, str]) -> CryptoShred | None:
    """``table``'s crypto-shred declaration (``None``: its erasure deletes rows), validated."""
    try:
        shred = cs.declaration(table, properties, column_types)
    except cs.CryptoShredError as err:
        raise IcebergValidationError(str(err)) from None
    if shred is not None:
        validate_table(shred.key_table, cs.KEY_TABLE_PROPERTY)
    return shred


def erasure_target(
    shred: CryptoShred,
    subject_columns: Sequence[str],
    key_table_types: Mapping[str, str] | None,
    key_table_properties: Mapping[str, str] | None,
) -> list[str]:
    """The subject columns of a crypto-shred erasure, run on the key table: ``[subject_hash]``.

    :param subject_columns: the erasure's ``subject_columns``: the derived table's hash column.
    :param key_table_types: the key table's column types (``None``: it does not exist).
    :param key_table_properties: the key table's properties.
    """
    if list(subject_columns) != [shred.hash_column]:
        raise IcebergValidationError(
            f"subject_columns={list(subject_columns)} does not fit {shred.table}: it is crypto-shredded "
            f"({cs.MODE_PROPERTY}={cs.MODE_CRYPTO_SHRED}), so its subjects' data keys are erased from "
            f"{shred.key_table}; pass subject_columns={shred.hash_column!r} (its subject hash column)."
        )
    problems = cs.key_table_problems(shred.key_table, key_table_types, key_table_properties)
    if problems:
        raise IcebergValidationError(f"Cannot crypto-shred {shred.table}: " + "; ".join(problems) + ".")
    return [cs.KEY_HASH_COLUMN]


def write_columns(shred: CryptoShred, derived_types: Mapping[str, str], source_types: Mapping[str, str]) -> list[str]:
    """The derived table's columns an encrypted write fills from ``source_table``, in order.

    The hash column takes the subject's keyed hash; every other derived column (encrypted or not)
    must exist in the source under the same name.
    """
    missing = [c for c in derived_types if c != shred.hash_column and c not in source_types]
    if missing:
        raise IcebergValidationError(
            f"source_table lacks column(s) {missing} of {shred.table}; select them in the source (same names), "
            f"the encrypted ones ({', '.join(shred.encrypted_columns)}) in plain text."
        )
    return list(derived_types)


def subject_column(value: object, source_types: Mapping[str, str]) -> str:
    """The source column holding the subject key: a ``string``, ``long`` or ``int`` column of the source."""
    if not isinstance(value, str) or value not in source_types:
        raise IcebergValidationError(
            f"subject_column={value!r} is not a column of source_table (columns: {sorted(source_types)}); "
            "name the column holding the subject key."
        )
    if source_types[value] not in SUBJECT_COLUMN_TYPES:
        raise IcebergValidationError(
            f"subject_column={value!r} has type {source_types[value]}; a subject key is a "
            f"{', '.join(SUBJECT_COLUMN_TYPES)} column (hashed as text, as erasure requests give it)."
        )
    return value
