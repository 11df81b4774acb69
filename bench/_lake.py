"""A fresh local lake for a bench: SQLite catalog, ``file://`` warehouse, ``db.orders`` and the ledger."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any


def orders_lake(prefix: str) -> tuple[Path, Any]:
    """Point ``iceberg_catalog_default`` at a new lake under a temporary folder; return it and its hook.

    The lake holds ``db.orders`` (the tests' orders schema) and the governance ledger. Spark jobs log at
    WARN unless ``AIRFLOW_ICEBERG_SPARK_LOG_LEVEL`` says otherwise.
    """
    from tests.support.lake import catalog_conn_json, create_orders_table

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    (tmp / "wh").mkdir()
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp / "c.db", tmp / "wh")
    os.environ.setdefault("AIRFLOW_ICEBERG_SPARK_LOG_LEVEL", "WARN")

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    create_orders_table(hook, "db.orders")
    hook.governance.table("ledger")
    return tmp, hook
