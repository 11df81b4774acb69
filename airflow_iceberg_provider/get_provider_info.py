"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``)."""

from __future__ import annotations

from typing import Any

from airflow_iceberg_provider import __version__


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
        "hooks": [
            {
                "integration-name": "Governed Apache Iceberg",
                "python-modules": [
                    "airflow_iceberg_provider.hooks.catalog",
                    "airflow_iceberg_provider.hooks.spark",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": "Governed Apache Iceberg",
                "python-modules": [
                    "airflow_iceberg_provider.operators.table",
                    "airflow_iceberg_provider.operators.spark",
                ],
            }
        ],
        "sensors": [],
        "triggers": [],
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
                        "description": "Passed to both engines, e.g. {\"s3.endpoint\": \"http://...\"}.",
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
