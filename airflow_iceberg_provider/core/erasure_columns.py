"""Which columns can be erasure subject columns: one rule for the operator's pre-flight and the job's.

Both sides describe a table's columns in Iceberg's own type names (``string``, ``long``,
``decimal(10, 2)``, ``uuid``; a nested type is ``struct``, ``list`` or ``map``): the Airflow side
from the pyiceberg schema (``str(field.field_type)``), the Spark job from the table's metadata
JSON (:func:`iceberg_column_types`), never from Spark's own types, which merge several Iceberg
types into one (``uuid`` and ``string`` are both Spark ``string``).

A subject key arrives as a string and the job casts it to the column's type. Only types whose
cast is exact are accepted: a ``decimal`` cast rounds (``'12.5'`` to ``decimal(10, 0)`` is 13,
another subject's key), and ``uuid``, ``float``, ``timestamp`` and the like compare in another
spelling than the request's. Stdlib only: imported by the Spark job too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Iceberg types a subject column may have (an allowlist: everything else is refused).
SUBJECT_COLUMN_TYPES = ("string", "long", "int")


def iceberg_column_types(schema: Mapping[str, Any]) -> dict[str, str]:
    """Top-level column name -> Iceberg type name, from a schema of the table metadata JSON
    (``{"type": "struct", "fields": [{"name": ..., "type": "long" | {"type": "struct", ...}}]}``)."""
    out: dict[str, str] = {}
    for field in schema.get("fields") or []:
        kind = field.get("type")
        out[str(field.get("name"))] = str(kind.get("type")) if isinstance(kind, Mapping) else str(kind)
    return out


def subject_column_problems(table: str, columns: Sequence[str], column_types: Mapping[str, str]) -> list[str]:
    """Why ``columns`` cannot be the subject columns of ``table`` (empty: they can).

    :param table: the table, as the message should name it.
    :param columns: the subject columns asked for.
    :param column_types: every top-level column of the table -> its Iceberg type name (a nested
        type as ``struct`` or as pyiceberg spells it, ``struct<...>``).
    """
    problems = []
    missing = [c for c in columns if c not in column_types]
    if missing:
        problems.append(
            f"subject column(s) {missing} do not exist in {table} (columns: {sorted(column_types)}); fix "
            "subject_columns."
        )
    for c in columns:
        kind = column_types.get(c)
        if kind is not None:
            kind = kind.split("<", 1)[0]  # pyiceberg spells a nested type with its fields: struct<1: x: ...>
        if kind is not None and kind not in SUBJECT_COLUMN_TYPES:
            problems.append(
                f"subject column {c!r} of {table} has type {kind}; erasure matches {', '.join(SUBJECT_COLUMN_TYPES)} "
                "keys only (a key is cast to the column's type, and only these casts are exact). Erase by a "
                "string, long or int column that holds the subject key."
            )
    return problems


__all__ = ["SUBJECT_COLUMN_TYPES", "iceberg_column_types", "subject_column_problems"]
