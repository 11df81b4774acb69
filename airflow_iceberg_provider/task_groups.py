"""Task-group factories composing the provider's operators into governed pipelines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, TaskGroup, TriggerRule

from airflow_iceberg_provider import params
from airflow_iceberg_provider.assets.uris import iceberg_asset
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook
from airflow_iceberg_provider.operators.wap_audit import IcebergWapAuditOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator


def _merge(defaults: dict[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    return {**defaults, **dict(overrides or {})}


def _xcom(task_id: str, key: str) -> str:
    return "{{ ti.xcom_pull(task_ids='" + task_id + "')['" + key + "'] }}"


def _asset_outlets(asset: Asset | bool | None, table: str, catalog_name: str) -> list[Asset]:
    """``True``: the table's ``iceberg://`` Asset; an Asset: itself; ``None``/``False``: none.

    Any other value is refused (the strict flag rule): ``"yes"`` never silently means "no event".
    """
    if isinstance(asset, Asset):
        return [asset]
    if asset is None:
        return []
    return [iceberg_asset(table, catalog_name)] if params.flag(asset, "asset") else []


def _required_checks(audit: IcebergWapAuditOperator) -> dict[str, Any] | None:
    """The audit's own check spec, as the publish's ``required_checks`` (``None`` when it has no checks)."""
    spec = {
        "column_mapping": audit.column_mapping,
        "table_checks": audit.table_checks,
        "change_checks": audit.change_checks,
        "partition_clause": audit.partition_clause,
        "accept_none": audit.accept_none,
    }
    if not any(spec[k] for k in ("column_mapping", "table_checks", "change_checks")):
        return None
    return {k: v for k, v in spec.items() if v is not None}


def _step(shared: dict[str, Any], overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """A Spark step's arguments: every upstream step must have succeeded, then the user's overrides."""
    return _merge({"trigger_rule": TriggerRule.ALL_SUCCESS, **shared}, overrides)


def wap_task_group(
    *,
    table: str,
    group_id: str = "wap",
    application: str | None = None,
    sql: str | Sequence[str] | None = None,
    sql_args: Mapping[str, Any] | None = None,
    params_for_job: Mapping[str, Any] | None = None,
    column_mapping: Mapping[str, Any] | None = None,
    table_checks: Mapping[str, Any] | None = None,
    change_checks: Mapping[str, Any] | None = None,
    partition_clause: str | None = None,
    branch: str | None = None,
    branch_prefix: str = "wap",
    from_ref: str = "main",
    on_conflict: str = "fail",
    on_rerun: str = "fail",
    replace_where: str | None = None,
    drop_branch: bool = True,
    tag: str | None = None,
    asset: Asset | bool | None = True,
    catalog_name: str = "lakehouse",
    iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
    spark_conn_id: str = IcebergSparkHook.default_conn_name,
    spark_conf: Mapping[str, Any] | None = None,
    jars: Sequence[str] | str | None = None,
    packages: Sequence[str] | str | None = None,
    write_kwargs: Mapping[str, Any] | None = None,
    audit_kwargs: Mapping[str, Any] | None = None,
    publish_kwargs: Mapping[str, Any] | None = None,
    **group_kwargs: Any,
) -> TaskGroup:
    """
    Branch -> write -> audit -> publish for one table, as a TaskGroup.

    ``create_branch`` cuts the run's branch (deterministic name, so retries find it),
    ``write`` runs the application or SQL on it, ``audit`` checks exactly the snapshot the
    write produced, ``publish`` fast-forwards ``main`` to exactly the audited snapshot (and
    optionally tags it). The publish is bound to this audit's verdict (its result, passed as
    ``audit``) and requires the audit's own checks (``required_checks``), so no other audit row,
    and no audit with fewer or changed checks, can open it. Every step runs only if all upstream steps succeeded (the default
    ``all_success`` trigger rule): a failed audit leaves ``main`` untouched and the branch in
    place for inspection. Snapshot ids travel between the tasks through XCom templates, and
    every user-varied argument is templated.

    :param table: ``namespace.table``; must be static (it names the Asset outlet).
    :param group_id: the TaskGroup's id (default ``wap``); the tasks are ``<group_id>.create_branch``,
        ``.write``, ``.audit`` and ``.publish``.
    :param application: path of a PySpark application to run on the branch (templated); it receives
        a configured session and a spec, and applies ``spec["snapshot_properties"]`` to its commit.
        Exactly one of ``application`` / ``sql``.
    :param sql: one SQL statement or a list of them (templated); ``{table}`` stands for the quoted
        ``catalog.namespace.table``.
    :param sql_args: named parameters for the statements (``:name`` markers) (templated).
    :param params_for_job: JSON parameters for the application, in its spec file (templated).
    :param column_mapping: per-column audit checks in the common-sql format, e.g.
        ``{"order_id": {"null_check": {"equal_to": 0}}}``.
    :param table_checks: table-level audit checks (``{"name": {"check_statement": "..."}}``).
    :param change_checks: change-set audit checks on what the branch added (``added_rows``,
        ``added_rows_ratio`` with ``min`` / ``max``).
    :param partition_clause: a predicate that limits every audit check to some rows (templated).
    :param branch: the WAP branch (templated); default derived from the DAG run, the same on every
        retry.
    :param branch_prefix: prefix of the derived branch name (default ``wap``).
    :param from_ref: ref the branch is cut from (templated), default ``main``.
    :param asset: the Asset to emit on publish: ``True`` (default) for
        ``iceberg://<catalog_name>/<namespace>/<table>``, an :class:`~airflow.sdk.Asset`, or
        ``None``/``False`` for none.
    :param catalog_name: catalog name used in the default Asset URI (the connection's
        ``catalog_name``; ``lakehouse`` by default).
    :param on_conflict: publish behaviour when ``main`` moved: ``"fail"`` or ``"cherrypick"``
        (``"cherrypick"`` lets concurrent runs of a backfill publish one after the other).
    :param on_rerun: what a run does when its interval (DAG, group, data interval) is already
        on ``main`` (a cleared run, a re-triggered logical date, a re-processed backfill day):
        ``"fail"`` (default: refuse before writing, naming the earlier publish), ``"skip"``
        (write nothing, no Asset event, a ``noop`` ledger row) or ``"replace"`` (remove what the
        earlier publish added, then write: ``main`` ends with exactly the new rows).
    :param replace_where: with ``on_rerun="replace"`` and ``sql=``, a read-only predicate
        selecting exactly the interval's rows (templated); without it the data files of the
        earlier publish's append snapshots are removed. See the README's re-run table.
    :param drop_branch: drop the branch after a successful publish (default ``True``).
    :param tag: optional tag for the published snapshot (templated), e.g. ``"daily-{{ ds }}"``.
    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection id of every task (templated).
    :param spark_conn_id: the Spark provider's connection of the write, audit and publish (templated).
    :param spark_conf: extra Spark configuration of the Spark tasks (public; never secrets) (templated).
    :param jars: local jars for the Iceberg runtime (default ``[iceberg_provider] spark_jars``).
    :param packages: Maven coordinates (default ``[iceberg_provider] spark_packages``).
    :param write_kwargs: extra arguments of the write task
        (:class:`~airflow_iceberg_provider.operators.wap_write.IcebergWapWriteOperator`), e.g.
        ``{"retries": 2}``; they override the group's.
    :param audit_kwargs: extra arguments of the audit task
        (:class:`~airflow_iceberg_provider.operators.wap_audit.IcebergWapAuditOperator`), e.g.
        ``{"warn_checks": [...]}``.
    :param publish_kwargs: extra arguments of the publish task
        (:class:`~airflow_iceberg_provider.operators.wap_publish.IcebergWapPublishOperator`), e.g.
        ``{"partition_events": "iceberg"}``.
    :param group_kwargs: any other keyword goes to Airflow's ``TaskGroup`` (``tooltip``,
        ``default_args``, ...).
    :return: the TaskGroup (use it in ``>>`` like a task).
    """
    common: dict[str, Any] = {"table": table, "iceberg_catalog_conn_id": iceberg_catalog_conn_id}
    spark = {**common, "spark_conn_id": spark_conn_id, "spark_conf": spark_conf, "jars": jars, "packages": packages}
    with TaskGroup(group_id, **group_kwargs) as group:
        create = IcebergWapCreateBranchOperator(
            task_id="create_branch", branch=branch, branch_prefix=branch_prefix, from_ref=from_ref, **common
        )
        branch_x, base_x = _xcom(create.task_id, "branch"), _xcom(create.task_id, "base_snapshot_id")
        write = IcebergWapWriteOperator(
            task_id="write",
            branch=branch_x,
            base_snapshot_id=base_x,
            application=application,
            sql=sql,
            sql_args=sql_args,
            params_for_job=params_for_job,
            on_rerun=on_rerun,
            replace_where=replace_where,
            **_step(spark, write_kwargs),
        )
        audit = IcebergWapAuditOperator(
            task_id="audit",
            branch=branch_x,
            snapshot_id=_xcom(write.task_id, "snapshot_id"),
            base_snapshot_id=base_x,
            column_mapping=column_mapping,
            table_checks=table_checks,
            change_checks=change_checks,
            partition_clause=partition_clause,
            # a failed audit raises AirflowFailException anyway; retries only re-run a crashed job
            **_step(spark, audit_kwargs),
        )
        publish = IcebergWapPublishOperator(
            task_id="publish",
            branch=branch_x,
            audited_snapshot_id=_xcom(audit.task_id, "snapshot_id"),
            # the verdict of exactly this audit (event id, spec hash, snapshot), with at least its checks
            audit=audit.output,
            required_checks=_required_checks(audit),
            base_snapshot_id=base_x,
            on_conflict=on_conflict,
            on_rerun=on_rerun,
            drop_branch=drop_branch,
            tag=tag,
            outlets=_asset_outlets(asset, table, catalog_name),
            **_step(spark, publish_kwargs),
        )
        create >> write >> audit >> publish
    return group
