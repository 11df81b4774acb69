"""Iceberg type -> Spark SQL type names, as Iceberg's Spark integration reads them.

Used by OpenLineage schema facets on the Airflow side (:mod:`airflow_iceberg_provider.assets.lineage`)
and by the audit job's column typing (``spark_jobs/audit/engine.py``). Stdlib only.
"""

from __future__ import annotations

#: Iceberg primitive type -> the Spark SQL type name Iceberg's Spark integration reads it as
#: (``DataType.typeName``; decimals are ``decimal(p,s)``, nested types spelled by the caller).
SPARK_TYPE_NAMES = {
    "boolean": "boolean",
    "int": "integer",
    "long": "long",
    "float": "float",
    "double": "double",
    "date": "date",
    "time": "long",
    "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp",
    "timestamp_ns": "timestamp_ntz",
    "timestamptz_ns": "timestamp",
    "string": "string",
    "uuid": "string",
    "binary": "binary",
}


def spark_type_family(iceberg_type: str) -> str:
    """Spark's type name for an Iceberg type without decimal precision (``decimal``), ``other`` if nested."""
    if iceberg_type.startswith("decimal"):
        return "decimal"
    if iceberg_type.startswith("fixed"):
        return "binary"
    return SPARK_TYPE_NAMES.get(iceberg_type, "other")
