"""The lake the unit and Spark tiers share: catalog connections, the standard orders table and its
batches, an execution context for calling ``operator.execute`` directly, and the pristine Airflow
database isolated Airflow processes copy."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pristine_airflow_db() -> Path:
    """The migrated Airflow DB nothing ever ran against (``scripts/bootstrap.sh``): copy it for an
    isolated Airflow. The shared ``$AIRFLOW_HOME`` DB collects DAGs, runs and triggers of
    ``make demo`` and earlier tests, which an isolated test must not inherit."""
    path = Path(os.environ.get("AIP_PRISTINE_AIRFLOW_DB", ROOT / ".work" / "airflow-pristine" / "airflow.db"))
    if not path.exists():
        pytest.fail(f"no pristine migrated Airflow DB at {path}; run scripts/bootstrap.sh")
    return path


def catalog_conn_json(db: Path, warehouse: Path, **extra: Any) -> str:
    return json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "host": f"sqlite:///{db}",
            "extra": {
                "catalog_type": "sql",
                "catalog_name": "lakehouse",
                "warehouse": f"file://{warehouse}",
                **extra,
            },
        }
    )


ORDERS_COLUMNS = {
    "order_id": "long",
    "customer_id": "string",
    "region": "string",
    "amount": "double",
    "order_ts": "timestamptz",
}


def create_orders_table(hook, table: str = "db.orders", partition_by=("day(order_ts)",), properties=None):
    """Create the standard orders test table through pyiceberg (format v2)."""
    from airflow_iceberg_provider.rules.schema import parse_columns, parse_partition_spec

    schema = parse_columns(ORDERS_COLUMNS)
    spec = parse_partition_spec(schema, list(partition_by))
    props = {"format-version": "2", **(properties or {})}
    hook.ensure_namespace(table.split(".")[0])
    return hook.catalog.create_table(table, schema=schema, partition_spec=spec, properties=props)


def orders_batch(start: int, count: int, day: str = "2026-01-01", customer_mod: int = 97):
    """A pyarrow batch of synthetic orders (ids start..start+count-1)."""
    from datetime import datetime, timedelta

    import pyarrow as pa

    base = datetime.fromisoformat(day).replace(tzinfo=UTC)
    ids = list(range(start, start + count))
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "customer_id": pa.array([f"c{i % customer_mod}" for i in ids], pa.string()),
            "region": pa.array([("ca", "us", "eu")[i % 3] for i in ids], pa.string()),
            "amount": pa.array([float(i % 500) + 1.0 for i in ids], pa.float64()),
            "order_ts": pa.array([base + timedelta(seconds=i % 3600) for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def append_batches(hook, table: str, batches: int, rows: int = 10, day: str = "2026-01-01") -> list[int]:
    """Append ``batches`` small commits through pyiceberg; returns the new snapshot ids."""
    ids = []
    for i in range(batches):
        tbl = hook.load_table(table)
        tbl.append(orders_batch(i * rows, rows, day))
        ids.append(hook.load_table(table).current_snapshot().snapshot_id)
    return ids


def fake_context(dag_id: str = "test_dag", run_id: str = "manual__2026-01-01", task_id: str = "t", try_number: int = 1):
    """Minimal execution context for calling ``operator.execute`` directly."""
    ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id, try_number=try_number, map_index=-1)
    return {"ti": ti, "task_instance": ti, "run_id": run_id, "ds": "2026-01-01", "ds_nodash": "20260101"}


def catalog_backend_conn(backend: str, tmp_path: Path) -> tuple[str, str]:
    """(connection JSON, namespace) for one backend; starts the server once per session."""
    if backend == "sqlite":
        (tmp_path / "warehouse").mkdir()
        return catalog_conn_json(tmp_path / "catalog.db", tmp_path / "warehouse"), "db"
    if backend == "postgres":
        from tests.support.servers import pg_conn_json, postgres

        server = postgres()
        (tmp_path / "warehouse").mkdir()
        return pg_conn_json(server, server.create_database(), tmp_path / "warehouse"), "db"
    from tests.support.servers import rest_conn_json, seaweed

    suffix = uuid.uuid4().hex[:8]
    conn = json.loads(rest_conn_json(seaweed()))
    conn["extra"]["governance_namespace"] = f"gov{suffix}"
    return json.dumps(conn), f"ns{suffix}"


def format_v3_copy(hook, table: str) -> str:
    """Point ``table`` at a format-version 3 copy of its current metadata, as Spark's
    ``ALTER TABLE ... SET TBLPROPERTIES ('format-version'='3')`` leaves it (the version, the row-lineage
    counter), without a JVM: pyiceberg 0.12 reads it but writes no v3 metadata. Returns the new
    metadata location."""
    from urllib.parse import urlparse

    tbl = hook.load_table(table)
    location = tbl.metadata_location
    meta = json.loads(Path(urlparse(location).path).read_text())
    meta["format-version"] = 3
    meta["next-row-id"] = sum(int(s.get("summary", {}).get("added-records", 0)) for s in meta.get("snapshots", []))
    target = location.replace(".metadata.json", "-v3.metadata.json")
    Path(urlparse(target).path).write_text(json.dumps(meta))
    hook.catalog.drop_table(table)  # the SQL catalog drops its pointer only; files stay
    hook.catalog.register_table(table, target)
    return target
