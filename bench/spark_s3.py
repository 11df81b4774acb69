"""Spark on S3 vs a local warehouse (#18): the same WAP write / audit / publish and the same erasure.

Run: ``source scripts/env.sh && .venv/bin/python bench/spark_s3.py`` (6 spark-submits, ~6 min on
2 busy cores). Both lakes are a SQLite catalog; one warehouse is ``file://``, the other
``s3://<bucket>/wh`` on SeaweedFS ``weed mini`` (S3FileIO for Iceberg, S3A for raw-file reads,
jars from ``AIP_S3_SPARK_JARS``). Prints one table: seconds per step, local | S3 | ratio.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

INSERT = (
    "INSERT INTO {table} SELECT id AS order_id, CAST(id % 97 AS STRING) AS customer_id, 'ca' AS region, "
    "CAST(id % 50 AS DOUBLE) + 1.0 AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(1000, 1100)"
)
CHECKS = {
    "column_mapping": {"amount": {"null_check": {"equal_to": 0}}, "order_id": {"unique_check": {"equal_to": 0}}},
    "table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
}


def scenario(conn: dict) -> dict[str, float]:
    from _erasure_helpers import SALT, add_requests, append_people, create_people_table, person
    from conftest import create_orders_table, fake_context, orders_batch

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
    from airflow_iceberg_provider.operators.wap import (
        IcebergWapAuditOperator,
        IcebergWapCreateBranchOperator,
        IcebergWapPublishOperator,
        IcebergWapWriteOperator,
    )

    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = json.dumps(conn)
    os.environ["AIRFLOW_CONN_ERASURE_SALT"] = json.dumps({"conn_type": "generic", "password": SALT})
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    create_orders_table(hook, "db.orders").append(orders_batch(0, 50))
    create_people_table(hook, "db.people")
    append_people(hook, "db.people", 2)
    add_requests(hook, "db.requests", {"R-1": person(0), "R-2": person(7)})
    ctx = fake_context(dag_id="bench_s3", run_id="run")
    out: dict[str, float] = {}

    def timed(name, fn):
        t0 = time.monotonic()
        result = fn()
        out[name] = time.monotonic() - t0
        return result

    created = IcebergWapCreateBranchOperator(task_id="create", table="db.orders").execute(ctx)
    br, base = created["branch"], created["base_snapshot_id"]
    w = IcebergWapWriteOperator(task_id="write", table="db.orders", branch=br, base_snapshot_id=base, sql=[INSERT])
    written = timed("WAP write (Spark)", lambda: w.execute(ctx))
    a = IcebergWapAuditOperator(
        task_id="audit", table="db.orders", branch=br, snapshot_id=written["snapshot_id"], **CHECKS
    )
    audit = timed("WAP audit (Spark)", lambda: a.execute(ctx))
    p = IcebergWapPublishOperator(
        task_id="publish", table="db.orders", branch=br, audited_snapshot_id=audit["snapshot_id"]
    )
    timed("WAP publish (pyiceberg)", lambda: p.execute(ctx))
    e = IcebergErasureOperator(
        task_id="erase", table="db.people", subject_columns="customer_id", requests_table="db.requests"
    )
    result = timed("erasure, full phase (Spark)", lambda: e.execute(ctx))
    assert result["verification"] == "verified", result
    return out


def main() -> None:
    import _servers
    from pyarrow import fs

    tmp = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    (tmp / "wh").mkdir()
    base = {"conn_type": "iceberg_catalog", "extra": {"catalog_type": "sql", "catalog_name": "lakehouse"}}
    local = {**base, "host": f"sqlite:///{tmp / 'local.db'}"}
    local["extra"] = {**base["extra"], "warehouse": f"file://{tmp / 'wh'}"}
    server = _servers.start_seaweed()
    try:
        bucket = f"bench{uuid.uuid4().hex[:8]}"
        fs.S3FileSystem(
            access_key=server.access_key,
            secret_key=server.secret_key,
            endpoint_override=server.s3_endpoint,
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        ).create_dir(bucket)
        s3 = {**base, "host": f"sqlite:///{tmp / 's3.db'}"}
        s3["extra"] = {**base["extra"], "warehouse": f"s3://{bucket}/wh", "properties": server.file_io_properties()}
        jars = os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS"]
        local_t = scenario(local)
        os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS"] = f"{jars},{os.environ['AIP_S3_SPARK_JARS']}"
        s3_t = scenario(s3)
    finally:
        server.stop()
    print(f"\n{'step':32} {'local':>9} {'S3':>9} {'S3/local':>9}")
    for name, secs in local_t.items():
        print(f"{name:32} {secs:8.1f}s {s3_t[name]:8.1f}s {s3_t[name] / secs:8.2f}x")


if __name__ == "__main__":
    main()
