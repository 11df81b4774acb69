"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

import pkgutil
from pathlib import Path
from typing import Any

from airflow_iceberg_provider import __version__

_PACKAGE = Path(__file__).resolve().parent


def _modules(kind: str) -> list[str]:
    """Public modules of a sub-package (``hooks``, ``operators``, ...), so adding a module registers it."""
    found = pkgutil.iter_modules([str(_PACKAGE / kind)])
    return sorted(f"airflow_iceberg_provider.{kind}.{m.name}" for m in found if not m.name.startswith("_"))


def _section(kind: str) -> list[dict[str, Any]]:
    modules = _modules(kind)
    return [{"integration-name": "Governed Apache Iceberg", "python-modules": modules}] if modules else []


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-iceberg-provider",
        "name": "Governed Apache Iceberg",
        "description": (
            "Governed Apache Iceberg lakehouse pipelines: branch write-audit-publish, tags and "
            "rollback, snapshot expiry and compaction, and verified GDPR/PIPEDA row-level erasure."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Governed Apache Iceberg",
                "external-doc-url": "https://iceberg.apache.org/",
                "tags": ["software"],
            }
        ],
        "hooks": _section("hooks"),
        "operators": _section("operators"),
        "sensors": _section("sensors"),
        "triggers": _section("triggers"),
        "config": {
            "iceberg_provider": {
                "description": "Spark runtime used by the Iceberg provider's Spark jobs.",
                "options": {
                    "spark_jars": {
                        "description": "Comma-separated local jars (offline Iceberg runtime).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
                        "default": "",
                    },
                    "spark_packages": {
                        "description": "Comma-separated Maven coordinates; used when spark_jars is empty.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2",
                        "default": "",
                    },
                    "pyspark_python": {
                        "description": "Python interpreter for the Spark driver and executors.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/spark-venv/bin/python",
                        "default": "",
                    },
                },
            }
        },
        "connection-types": [
            {
                "hook-class-name": "airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook",
                "hook-name": "Iceberg Catalog (governed lakehouse)",
                "connection-type": "iceberg_catalog",
                "conn-fields": {
                    "catalog_type": {
                        "label": "Catalog type",
                        "schema": {"type": ["string", "null"], "enum": ["sql", "rest", "glue", "hive"]},
                        "description": "sql (SQLite/PostgreSQL/MySQL via JDBC), rest, glue or hive.",
                    },
                    "catalog_name": {
                        "label": "Catalog name",
                        "schema": {"type": ["string", "null"], "default": "lakehouse"},
                        "description": "Same name on the Spark and pyiceberg side.",
                    },
                    "warehouse": {
                        "label": "Warehouse",
                        "schema": {"type": ["string", "null"]},
                        "description": "Table root URI, e.g. file:///data/wh or s3://bucket/wh.",
                    },
                    "governance_namespace": {
                        "label": "Governance namespace",
                        "schema": {"type": ["string", "null"], "default": "governance"},
                        "description": "Namespace of the ledger, audit-results and evidence tables.",
                    },
                    "properties": {
                        "label": "Catalog / FileIO properties (JSON)",
                        "schema": {"type": ["object", "null"]},
                        "description": 'Passed to both engines, e.g. {"s3.endpoint": "http://..."}.',
                    },
                    "spark_properties": {
                        "label": "Spark-only catalog properties (JSON)",
                        "schema": {"type": ["object", "null"]},
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["schema", "port"],
                    "relabeling": {
                        "host": "Catalog URI",
                        "login": "User / client id / access key id",
                        "password": "Password / client secret / token",
                    },
                    "placeholders": {
                        "host": "sqlite:////abs/catalog.db | postgresql+psycopg2://db:5432/iceberg | "
                        "http://rest:8181 | thrift://hms:9083",
                    },
                },
            }
        ],
    }
