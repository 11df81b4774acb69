"""Test-only DAG (no Spark): every templated argument comes from an upstream task.

Each template field of each catalog-only operator and sensor is given either as an ``XComArg``
(``values["key"]``) or as Jinja pulling the same XCom (``"{{ ti.xcom_pull(...)['key'] }}"``,
rendered as a native object); the two forms alternate argument by argument, and ``FLIP``
swaps them, so a second parse covers the other form of every argument. Nothing in an
operator's ``__init__`` may look at these values: they are an ``XComArg`` object or an
unrendered string there. ``tests/airflow/test_xcomarg_dag.py`` parses it both ways and runs it with
``airflow dags test``; the operators that need Spark are covered by the parse test there.
"""

from __future__ import annotations

import os
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
from airflow_iceberg_provider.operators.health import IcebergMetadataHygieneOperator, IcebergTableHealthCheckOperator
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from airflow_iceberg_provider.operators.refs import (
    IcebergCommitCheckOperator,
    IcebergCreateBranchOperator,
    IcebergCreateTagOperator,
    IcebergDropBranchOperator,
    IcebergDropTagOperator,
    IcebergRollbackOperator,
)
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.operators.table_changes import IcebergAlterTableOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineSensor
from airflow_iceberg_provider.sensors.snapshot import IcebergSnapshotSensor

FLIP = os.environ.get("XCOMARG_DAG_FLIP") == "1"
TABLE = "xc.orders"

STATIC: dict[str, Any] = {
    "table": TABLE,
    "conn": "iceberg_catalog_default",
    "spark_conn": "spark_default",
    "spark_conf": {"spark.sql.shuffle.partitions": "2"},
    "properties": {"write.format.default": "parquet"},
}


class _Args:
    """Hands out each argument as an XComArg or as Jinja, alternating (``FLIP`` starts the other way)."""

    def __init__(self, task_id: str, values: Any) -> None:
        self.task_id, self.values, self.n = task_id, values, int(FLIP)

    def __call__(self, key: str) -> Any:
        self.n += 1
        if self.n % 2:
            return self.values[key]
        return "{{ ti.xcom_pull(task_ids='" + self.task_id + "')['" + key + "'] }}"


with DAG(
    dag_id="xcomarg_all_operators",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,
) as dag:

    @task
    def static_values() -> dict[str, Any]:
        return STATIC

    first = static_values()
    s = _Args("static_values", first)
    create = IcebergCreateTableOperator(
        task_id="create",
        table=s("table"),
        iceberg_catalog_conn_id=s("conn"),
        columns={"order_id": "long", "note": "string"},
        properties=s("properties"),
    )

    @task
    def append() -> dict[str, str]:
        import pyarrow as pa

        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        hook = IcebergCatalogHook()
        tbl = hook.load_table(TABLE)
        ids = []
        for n in (1, 2):
            tbl.append(pa.table({"order_id": pa.array([n], pa.int64()), "note": pa.array([f"n{n}"], pa.string())}))
            tbl = hook.load_table(TABLE)
            ids.append(str(tbl.metadata.current_snapshot_id))
        hook.governance.ensure_erasure_requests_table("xc.requests")
        return {"first": ids[0], "second": ids[1]}

    appended = append()
    create >> appended

    @task
    def values(snaps: dict[str, str]) -> dict[str, Any]:
        return {
            **STATIC,
            "none": None,
            "main": "main",
            "tag": "eod_1",
            "branch": "exp",
            "wap_branch": "wap_xc",
            "first": snaps["first"],
            "second": snaps["second"],
            "append": "append",
            "summary": {},
            "retention": "P30D",
            "age": "P7D",
            "keep": 2,
            "hour": "1h",
            "floor": "1h",
            "retain": 10,
            "false": False,
            "true": True,
            "warn": "warn",
            "max_files": 1000,
            "add_columns": {"amount": "double"},
            "sort_order": "order_id",
            "alter_properties": {"comment": "orders"},
            "bloom": ["order_id"],
            "metrics": {"note": "counts"},
            "requests": "xc.requests",
            "days": 30,
            "hours": 24,
        }

    v = values(appended)
    a = _Args("values", v)

    def base() -> dict[str, Any]:
        return {"table": a("table"), "iceberg_catalog_conn_id": a("conn")}

    def spark() -> dict[str, Any]:
        return {**base(), "spark_conn_id": a("spark_conn"), "spark_conf": a("spark_conf")}

    alter = IcebergAlterTableOperator(
        task_id="alter",
        **base(),
        add_columns=a("add_columns"),
        rename_columns=a("none"),
        widen_columns=a("none"),
        add_partition_fields=a("none"),
        drop_partition_fields=a("none"),
        partition_by=a("none"),
        sort_order=a("sort_order"),
        properties=a("alter_properties"),
        bloom_filter_columns=a("bloom"),
        metrics_modes=a("metrics"),
    )
    tag = IcebergCreateTagOperator(
        task_id="tag",
        **base(),
        tag=a("tag"),
        ref=a("main"),
        snapshot_id=a("first"),
        max_ref_age=a("retention"),
        case_id=a("none"),
        hold_reason=a("none"),
    )
    branch = IcebergCreateBranchOperator(
        task_id="branch",
        **base(),
        branch=a("branch"),
        ref=a("main"),
        snapshot_id=a("none"),
        min_snapshots_to_keep=a("keep"),
        max_snapshot_age=a("age"),
        max_ref_age=a("none"),
    )
    check = IcebergCommitCheckOperator(
        task_id="commit_check",
        **base(),
        ref=a("main"),
        operation=a("append"),
        summary=a("summary"),
        after_snapshot_id=a("first"),
        since=a("none"),
    )
    health = IcebergTableHealthCheckOperator(
        task_id="health",
        **base(),
        on_breach=a("warn"),
        subject_columns=a("none"),
        max_files=a("max_files"),
        min_avg_file_size_bytes=a("none"),
        max_snapshots=a("none"),
        max_metadata_bytes=a("none"),
        max_metadata_log=a("none"),
    )
    hygiene = IcebergMetadataHygieneOperator(
        task_id="hygiene", **base(), previous_versions_max=a("none"), older_than=a("hour"), dry_run=a("true")
    )
    expire = IcebergExpireSnapshotsOperator(
        task_id="expire",
        **spark(),
        older_than=a("none"),
        retain_last=a("retain"),
        snapshot_ids=a("none"),
        dry_run=a("true"),
    )
    plan = IcebergMaintenancePlanOperator(
        task_id="plan",
        **spark(),
        expire_older_than=a("none"),
        older_than_floor=a("floor"),
        retain_last=a("retain"),
        force=a("false"),
        actions=["expire_snapshots"],
    )
    wap_branch = IcebergWapCreateBranchOperator(
        task_id="wap_branch", **base(), branch=a("wap_branch"), from_ref=a("main"), from_snapshot_id=a("none")
    )

    @task
    def wap_append(created: dict[str, Any]) -> str:
        import pyarrow as pa

        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        hook = IcebergCatalogHook()
        tbl = hook.load_table(TABLE)
        row = {"order_id": pa.array([3], pa.int64()), "note": pa.array(["n3"], pa.string())}
        row["amount"] = pa.array([1.5], pa.float64())
        tbl.append(pa.table(row), branch=created["branch"])
        return str(hook.ref_snapshot_id(TABLE, created["branch"]))

    written = wap_append(wap_branch.output)
    publish = IcebergWapPublishOperator(
        task_id="publish",
        **spark(),
        branch=a("wap_branch"),
        audited_snapshot_id=written,
        base_snapshot_id=a("none"),
        tag=a("none"),
        require_audit=False,
        drop_branch=True,
    )
    rollback = IcebergRollbackOperator(
        task_id="rollback",
        **base(),
        ref=a("main"),
        to_snapshot_id=a("none"),
        to_tag=a("tag"),
        to_timestamp=a("none"),
        expected_snapshot_id=a("none"),
    )
    drop_tag = IcebergDropTagOperator(task_id="drop_tag", **base(), tag=a("tag"), release_reason=a("none"))
    drop_branch = IcebergDropBranchOperator(task_id="drop_branch", **base(), branch=a("branch"))
    sensor = IcebergSnapshotSensor(
        task_id="sensor",
        table=a("table"),
        ref=a("main"),
        after_snapshot_id=a("first"),
        after_timestamp=a("none"),
        operation=a("append"),
        summary=a("summary"),
        iceberg_catalog_conn_id=a("conn"),
        state_key=a("none"),
        deferrable=False,
        poke_interval=1,
        timeout=60,
    )
    deadlines = IcebergErasureDeadlineSensor(
        task_id="deadlines",
        requests_table=a("requests"),
        deadline_days=a("days"),
        logical_deadline_hours=a("hours"),
        iceberg_catalog_conn_id=a("conn"),
        poke_interval=1,
        timeout=60,
    )
    chain = [alter, tag, branch, check, health, hygiene, expire, plan, wap_branch]
    for up, down in zip(chain, chain[1:], strict=False):
        up >> down
    check >> sensor
    written >> publish >> rollback >> [drop_tag, drop_branch]
    tag >> rollback
    branch >> drop_branch
    v >> deadlines
