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


#: Where the Providers page links: the repository's ``docs/`` folder, readable on GitHub (also
#: ``[project.urls] Documentation`` in pyproject.toml, which Airflow reads from the installed
#: package's metadata; without it the page links to a non-existent page on airflow.apache.org).
#: No docs site is published; ``make docs-serve`` serves the built site on 127.0.0.1.
DOCUMENTATION_URL = "https://github.com/airflow-iceberg-provider/airflow-iceberg-provider/tree/main/docs"

#: What each catalog type needs (the hook refuses a connection without it, naming the field).
REQUIRED_FIELDS = {
    "sql": ("Catalog URI (host)", "Warehouse"),
    "rest": ("Catalog URI (host)",),
    "glue": ("Warehouse",),
    "hive": ("Catalog URI (host)",),
}

_TYPE_HELP = (
    "Required. sql: SQLite/PostgreSQL/MySQL catalog database, needs Catalog URI and Warehouse. "
    "rest: Iceberg REST catalog (Polaris, Nessie, Lakekeeper, S3 Tables), needs Catalog URI. "
    "glue: AWS Glue, needs Warehouse. hive: Hive Metastore, needs Catalog URI."
)

#: The connection form's extra fields (Airflow 3 renders them from this JSON schema; a type
#: without "null" makes the field required).
CONN_FIELDS: dict[str, Any] = {
    "catalog_type": {
        "label": "Catalog type",
        "schema": {"type": "string", "enum": ["sql", "rest", "glue", "hive"], "default": "sql"},
        "description": _TYPE_HELP,
    },
    "catalog_name": {
        "label": "Catalog name",
        "schema": {"type": ["string", "null"], "default": "lakehouse"},
        "description": "Same name on the Spark and pyiceberg side (letters, digits, underscores).",
    },
    "warehouse": {
        "label": "Warehouse",
        "schema": {"type": ["string", "null"]},
        "description": (
            "Table root URI. Required for sql and glue (e.g. file:///data/wh or s3://bucket/wh); "
            "for rest and hive optional (the catalog server decides, e.g. a Polaris catalog name)."
        ),
    },
    "governance_namespace": {
        "label": "Governance namespace",
        "schema": {"type": ["string", "null"], "default": "governance"},
        "description": "Namespace of the ledger, audit-results and evidence tables.",
    },
    "properties": {
        "label": "Catalog / FileIO properties (JSON)",
        "schema": {"type": ["object", "null"]},
        "description": (
            "Iceberg catalog and FileIO properties passed to both engines, e.g. "
            '{"s3.endpoint": "http://minio:9000", "s3.path-style-access": "true"}. '
            "REST with OAuth2: put the client id in Login and the client secret in Password (sent as "
            "credential=<id>:<secret>), or only a bearer token in Password (sent as token); the token "
            'endpoint and scope go here: {"oauth2-server-uri": "https://idp/oauth/tokens", '
            '"scope": "PRINCIPAL_ROLE:ALL"}. Keys naming a secret (secret, password, token, credential) '
            "are masked in logs and passed to Spark only through a 0600 properties file."
        ),
    },
    "spark_properties": {
        "label": "Spark-only catalog properties (JSON)",
        "schema": {"type": ["object", "null"]},
        "description": (
            "Catalog properties for the Spark side only, added under spark.sql.catalog.<name>., e.g. "
            '{"cache-enabled": "false"} or {"io-impl": "org.apache.iceberg.aws.s3.S3FileIO"}. '
            "pyiceberg does not see them. Leave empty if unsure."
        ),
    },
}

UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port"],
    "relabeling": {
        "host": "Catalog URI",
        "login": "Login: DB user (sql) / OAuth client id (rest) / access key id (glue)",
        "password": "Password: DB password (sql) / client secret or token (rest) / secret key (glue)",
    },
    "placeholders": {
        "host": "sqlite:////abs/catalog.db | postgresql+psycopg2://db:5432/iceberg | "
        "http://rest:8181/api/catalog | thrift://hms:9083 (empty for glue)",
        "login": "sql: db user | rest: OAuth client id (empty for a bearer token) | glue: AWS access key id",
        "password": "sql: db password | rest: client secret, or the bearer token | glue: AWS secret key",
        "warehouse": "file:///abs/warehouse or s3://bucket/warehouse (required for sql and glue)",
        "properties": '{"oauth2-server-uri": "https://idp/oauth/tokens", "scope": "PRINCIPAL_ROLE:ALL"}',
        "spark_properties": '{"cache-enabled": "false"}',
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-iceberg-provider",
        "name": "Governed Apache Iceberg",
        "description": (
            "Governed Apache Iceberg lakehouse pipelines: branch write-audit-publish, tags and "
            "rollback, snapshot expiry and compaction, and verified GDPR/PIPEDA row-level erasure."
        ),
        "versions": [__version__],
        "documentation-url": DOCUMENTATION_URL,
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
        "cli": ["airflow_iceberg_provider.cli.get_cli_commands"],
        "config": {
            "iceberg_provider": {
                "description": "Spark runtime used by the Iceberg provider's Spark jobs.",
                "options": {
                    "spark_jars": {
                        "description": "Comma-separated local jars (offline Iceberg runtime).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/jars/iceberg-spark-runtime-3.5_2.12-1.10.1.jar",
                        "default": "",
                    },
                    "spark_packages": {
                        "description": "Comma-separated Maven coordinates; used when spark_jars is empty.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1",
                        "default": "",
                    },
                    "pyspark_python": {
                        "description": "Python interpreter for the Spark driver and executors.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "/opt/spark-venv/bin/python",
                        "default": "",
                    },
                    "spark_runtime": {
                        "description": "The Spark line of the provider's jobs: 3.5 (Scala 2.12, Iceberg's "
                        "iceberg-spark-runtime-3.5_2.12) or 4.1 (Scala 2.13, iceberg-spark-runtime-4.1_2.13). On 4.1 "
                        "a Spark Connect job's client runs inside the task process with the Airflow environment's "
                        "pyspark-client; on 3.5 it runs in a Python of the Spark runtime (pyspark_python).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "4.1",
                        "default": "3.5",
                    },
                    "spark_conf_defaults": {
                        "description": "Spark conf every provider job starts from, as a JSON object: under the "
                        "catalog connection's conf and a task's own spark_conf, in spark-submit mode and on a "
                        "Spark Connect session alike (server-wide conf such as driver memory or jars cannot be "
                        "set on a session). Public conf only: secret-looking keys are refused.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": '{"spark.sql.shuffle.partitions": "8"}',
                        "default": "",
                    },
                    "spark_driver_java_options": {
                        "description": "JVM options for every Spark driver the provider starts (spark-submit in "
                        "client mode, and a driver a cluster launches), after the provider's log4j option and "
                        "before a task's own spark.driver.extraJavaOptions; e.g. a class-data-sharing archive "
                        "and C1-only compilation for short jobs on small machines.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "-XX:SharedArchiveFile=/opt/spark/cds/driver.jsa -XX:TieredStopAtLevel=1",
                        "default": "",
                    },
                    "spark_executor_java_options": {
                        "description": "JVM options for the executors of the provider's Spark jobs on a cluster "
                        "(a local-mode job runs its tasks in the driver), before a task's own "
                        "spark.executor.extraJavaOptions.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "-XX:+UseSerialGC",
                        "default": "",
                    },
                    "governance_restricted_role": {
                        "description": "SimpleAuthManager role (viewer, user, op or admin) from which the governance "
                        "view shows erasure requests, evidence reports and approval history; other auth managers "
                        "grant the 'Governance: erasure and approvals' custom view instead.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "op",
                        "default": "admin",
                    },
                    "expiry_floor": {
                        "description": "The youngest snapshot age that snapshot expiry and the maintenance plan may "
                        "remove unless a task lowers it with older_than_floor (a duration such as 1h, 30m or 2d).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "6h",
                        "default": "1h",
                    },
                    "sqlite_busy_timeout_ms": {
                        "description": "How long a SQLite catalog waits for a lock, in milliseconds, before the "
                        "operation fails with a retryable IcebergCatalogUnavailableError.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "60000",
                        "default": "30000",
                    },
                    "durable_remote_wait_seconds": {
                        "description": "How long a retried durable Spark task waits for the ledger row of the job "
                        "an earlier try started on another host (it never starts a second job beside one it "
                        "cannot see), in seconds.",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "3600",
                        "default": "21600",
                    },
                },
            }
        },
        "connection-types": [
            {
                "hook-class-name": "airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook",
                "hook-name": "Iceberg Catalog (governed lakehouse)",
                "connection-type": "iceberg_catalog",
                "conn-fields": CONN_FIELDS,
                "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
            }
        ],
    }
