"""Spark on S3 vs a local warehouse (#18): the same WAP write / audit / publish and the same erasure.

Run: ``source scripts/env.sh && .venv/bin/python -m bench.spark_s3`` (12 spark-submits, ~8 min on
2 busy cores). Both lakes are a SQLite catalog; one warehouse is ``file://``, the other
``s3://<bucket>/wh`` on SeaweedFS ``weed mini`` (S3FileIO for Iceberg, S3A for raw-file reads,
jars from ``AIP_S3_SPARK_JARS``). The two lakes run interleaved, one step each in turn, so a
busy machine weighs on both sides alike. Steps: WAP write, the incremental audit twice (the appended
rows read on the driver through pyarrow, then by a Spark projection), publish, the maintenance
plan (compaction, manifests, expiry, orphan listing), erasure. Prints seconds per task, local |
S3 | ratio, and the seconds the audit job spent reading the appended rows each way.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

INSERT = (
    "INSERT INTO {table} SELECT id AS order_id, CAST(id % 97 AS STRING) AS customer_id, 'ca' AS region, "
    "CAST(id % 50 AS DOUBLE) + 1.0 AS amount, TIMESTAMP '2026-01-02 10:00:00' AS order_ts FROM range(1000, 1100)"
)
CHECKS = {
    "column_mapping": {"amount": {"null_check": {"equal_to": 0}}, "order_id": {"unique_check": {"equal_to": 0}}},
    "table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}},
}


def record_base_values(hook, audit_op, table: str, base: int, rows: int) -> None:
    """Audit rows for the base snapshot, as an earlier audit writes them: the audit below is incremental."""
    from datetime import UTC, datetime

    values = {"amount.null_check": 0.0, "order_id.unique_check": 0.0, "table.has_rows": float(rows)}
    hook.governance.append(
        "audit_results",
        [
            {
                "event_id": "base-audit",
                "table_name": table,
                "ref": "main",
                "snapshot_id": base,
                "check_name": c.name,
                "check_type": c.check_type,
                "column_name": c.column,
                "observed_value": values[c.name],
                "condition": c.describe(),
                "passed": True,
                "evaluated_at": datetime.now(UTC),
            }
            for c in audit_op.parse_checks()
        ],
    )


def scenario(conn: dict, jars: str) -> Iterator[None]:
    """The same steps on one lake, pausing (``yield``) after each timed step so two lakes run interleaved.

    Returns (seconds per task, seconds of the appended-rows read inside the audit) as the generator's value.
    """
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
    from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
    from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
    from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator
    from tests.support.erasure import SALT, add_requests, append_people, create_people_table, person
    from tests.support.lake import append_batches, create_orders_table, fake_context

    def use() -> None:  # this lake's connection and jars for the operators' hooks
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = json.dumps(conn)
        os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS"] = jars

    use()
    os.environ["AIRFLOW_CONN_ERASURE_SALT"] = json.dumps({"conn_type": "generic", "password": SALT})
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    create_orders_table(hook, "db.orders", partition_by=())
    append_batches(hook, "db.orders", 8, rows=10)  # 80 rows in 8 files: work for compaction
    create_people_table(hook, "db.people")
    append_people(hook, "db.people", 2)
    add_requests(hook, "db.requests", {"R-1": person(0), "R-2": person(7)})
    ctx = fake_context(dag_id="bench_s3", run_id="run")
    out: dict[str, float] = {}
    reads: dict[str, float] = {}

    def timed(name, fn):
        use()
        t0 = time.monotonic()
        result = fn()
        out[name] = time.monotonic() - t0
        return result

    created = IcebergWapCreateBranchOperator(task_id="create", table="db.orders").execute(ctx)
    br, base = created["branch"], created["base_snapshot_id"]
    w = IcebergWapWriteOperator(task_id="write", table="db.orders", branch=br, base_snapshot_id=base, sql=[INSERT])
    written = timed("WAP write (Spark)", lambda: w.execute(ctx))
    yield
    audits = {}
    for label, driver_read in (("driver", True), ("Spark", False)):
        a = IcebergWapAuditOperator(
            task_id=f"audit_{label}",
            table="db.orders",
            branch=br,
            snapshot_id=written["snapshot_id"],
            base_snapshot_id=base,
            incremental_min_rows=0,
            driver_read=driver_read,
            **CHECKS,
        )
        if not audits:
            record_base_values(hook, a, "db.orders", int(base), 80)
        audits[label] = timed(f"WAP audit, appended rows read by {label}", lambda a=a: a.execute(ctx))
        assert audits[label]["appended_read_by"] == label.lower(), audits[label]
        reads[label] = appended_read_seconds(hook, audits[label]["job_run_id"])
        yield
    p = IcebergWapPublishOperator(task_id="publish", table="db.orders", branch=br, audit=audits["driver"])
    timed("WAP publish (pyiceberg)", lambda: p.execute(ctx))
    m = IcebergMaintenancePlanOperator(
        task_id="plan",
        table="db.orders",
        min_input_files=2,
        max_manifests=3,
        expire_older_than="0s",
        older_than_floor="0s",
        retain_last=1,
        remove_orphans=True,
    )
    timed("maintenance plan (Spark)", lambda: m.execute(ctx))
    yield
    e = IcebergErasureOperator(
        task_id="erase", table="db.people", subject_columns="customer_id", requests_table="db.requests"
    )
    result = timed("erasure, full phase (Spark)", lambda: e.execute(ctx))
    assert result["verification"] == "verified", result
    return out, reads


def appended_read_seconds(hook, job_run_id: str) -> float:
    """Seconds the audit job spent reading the appended rows (driver: Parquet read + evaluation; Spark: its query)."""
    row = hook.governance.read("ledger", event_id=job_run_id)[0]
    details = json.loads(row["details"]) if isinstance(row["details"], str) else row["details"]
    steps = {**dict(details.get("planning") or []), **dict(details.get("queries") or [])}
    keys = ("read appended files", "evaluate on the driver", "appended", "register appended view")
    return sum(float(v) for k, v in steps.items() if k in keys)


def main() -> None:
    from tests.support import servers as _servers
    from tests.support.s3 import s3fs

    tmp = Path(tempfile.mkdtemp(prefix="bench-s3-"))
    (tmp / "wh").mkdir()
    base = {"conn_type": "iceberg_catalog", "extra": {"catalog_type": "sql", "catalog_name": "lakehouse"}}
    local = {**base, "host": f"sqlite:///{tmp / 'local.db'}"}
    local["extra"] = {**base["extra"], "warehouse": f"file://{tmp / 'wh'}"}
    server = _servers.start_seaweed()
    try:
        bucket = f"bench{uuid.uuid4().hex[:8]}"
        s3fs(server).create_dir(bucket)
        s3 = {**base, "host": f"sqlite:///{tmp / 's3.db'}"}
        s3["extra"] = {**base["extra"], "warehouse": f"s3://{bucket}/wh", "properties": server.file_io_properties()}
        jars = os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS"]
        runs = {"local": scenario(local, jars), "S3": scenario(s3, f"{jars},{os.environ['AIP_S3_SPARK_JARS']}")}
        results: dict[str, tuple[dict[str, float], dict[str, float]]] = {}
        while runs:  # one step on each lake in turn: both see the same machine load
            for name, run in list(runs.items()):
                try:
                    next(run)
                except StopIteration as done:
                    results[name] = done.value
                    del runs[name]
        (local_t, local_r), (s3_t, s3_r) = results["local"], results["S3"]
    finally:
        server.stop()
    print(f"\n{'step (whole task)':42} {'local':>9} {'S3':>9} {'S3/local':>9}")
    for name, secs in local_t.items():
        print(f"{name:42} {secs:8.1f}s {s3_t[name]:8.1f}s {s3_t[name] / secs:8.2f}x")
    print(f"\n{'inside the audit job: appended-rows read':42} {'local':>9} {'S3':>9} {'S3/local':>9}")
    for name, secs in local_r.items():
        print(f"{'read by ' + name:42} {secs:8.2f}s {s3_r[name]:8.2f}s {s3_r[name] / max(secs, 1e-3):8.2f}x")


if __name__ == "__main__":
    main()
