"""What the write-audit-publish operators share: the run's branch, refusals, WAP conf, re-run stops.

The operators themselves: :mod:`~airflow_iceberg_provider.operators.wap_branch` (create the
branch), :mod:`~airflow_iceberg_provider.operators.wap_write`,
:mod:`~airflow_iceberg_provider.operators.wap_audit` and
:mod:`~airflow_iceberg_provider.operators.wap_publish`; their pure rules are
:mod:`airflow_iceberg_provider.rules.wap_refs` (which snapshot each ref moves to) and
:mod:`airflow_iceberg_provider.rules.wap_rerun` (interval identity and re-runs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.core import audit_checks
from airflow_iceberg_provider.core.governance import airflow_identity
from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergCommitVerificationError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.params import MAIN_BRANCH, AuditBinding, branch_name_for_run, validate_name
from airflow_iceberg_provider.rules import wap_refs as _wap_refs
from airflow_iceberg_provider.rules import wap_rerun as rerun
from airflow_iceberg_provider.rules.refs import RefChange, expectation_problems, guard_ref_changes, landed_problems

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, Context
    from pyiceberg.table import Table

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.models import SnapshotInfo
    from airflow_iceberg_provider.operators._base import IcebergBaseOperator, IcebergSparkBaseOperator

WAP_ENABLED = {"write.wap.enabled": "true"}


def resolve_branch(branch: str | None, context: Context | Mapping[str, Any] | None, prefix: str = "wap") -> str:
    """The given branch name (validated, never ``main``) or the deterministic name for this DAG run."""
    if params.is_unset(branch):
        ident = airflow_identity(context)
        if not ident["dag_id"] or not ident["run_id"]:
            raise IcebergValidationError(
                "branch is not set and there is no DAG run to derive it from; pass branch='...' explicitly."
            )
        return branch_name_for_run(ident["dag_id"], ident["run_id"], validate_name(prefix, "branch_prefix"))
    return params.ref_name(branch.strip() if isinstance(branch, str) else branch, "branch", allow_main=False)


def audit_binding_for(
    task: BaseOperator, context: Context | Mapping[str, Any], value: Any, table: str, param: str = "audit"
) -> AuditBinding | None:
    """The audit run bound to ``task``: ``value`` (the audit task's result) if set, else the result of
    the one direct upstream task that audited ``table`` in this DAG run (``None`` if there is none).

    :raises IcebergValidationError: ``value`` is malformed, or several upstream tasks audited ``table``.
    """
    if not params.is_unset(value):
        return params.audit_binding(value, param)
    ti = context.get("ti") if hasattr(context, "get") else None
    pull = getattr(ti, "xcom_pull", None)
    if not callable(pull):
        return None
    found: dict[str, Any] = {}
    for task_id in sorted(task.upstream_task_ids):
        result = pull(task_ids=task_id)
        if isinstance(result, Mapping) and "audit_event_id" in result and result.get("table") == table:
            found[task_id] = result
    if len(found) > 1:
        raise IcebergValidationError(
            f"{param} is not set and several upstream tasks audited {table} ({sorted(found)}); pass "
            f"{param}=<the audit task>.output to say which audit the step is bound to."
        )
    for task_id, result in found.items():
        return params.audit_binding(result, f"{param} (the result of upstream task {task_id!r})")
    return None


def bound_verdict(
    hook: IcebergCatalogHook,
    binding: AuditBinding | None,
    *,
    table: str,
    snapshot_id: int,
    context: Context | Mapping[str, Any] | None,
    param: str = "audit",
) -> _wap_refs.Verdict:
    """Read the rows of exactly the bound audit run (by event id) and check them (:func:`~airflow_iceberg_provider.rules.wap_refs.read_verdict`)."""
    rows = hook.governance.read("audit_results", event_id=binding.event_id) if binding is not None else []
    ident = airflow_identity(context)
    return _wap_refs.read_verdict(
        rows,
        binding,
        table=table,
        snapshot_id=snapshot_id,
        dag_id=ident["dag_id"],
        run_id=ident["run_id"],
        now=datetime.now(UTC),
        where=f"{hook.governance_namespace}.audit_results",
        param=param,
    )


def required_check_hashes(value: Any, param: str = "required_checks") -> dict[str, str]:
    """``{check name: check hash}`` of a required check spec (the audit operator's check arguments as
    one mapping: ``column_mapping``, ``table_checks``, ``change_checks``, ``partition_clause``, ``accept_none``)."""
    if params.is_unset(value):
        return {}
    try:
        checks = audit_checks.parse_check_spec(value)
    except audit_checks.CheckSpecError as err:
        raise IcebergValidationError(
            f"{param}={params.describe(value)} is not a valid check spec: {err} Give the same check arguments as "
            "the audit's (wap_task_group passes its own)."
        ) from err
    return {c.name: audit_checks.check_hash(c) for c in checks}


def refuse_unsupported_format(hook: IcebergCatalogHook, tbl: Table, table: str, *, change: str) -> None:
    """Refuse ``change`` on a table pyiceberg cannot commit to (format-version 3 behind a catalog whose
    client writes the metadata), for the operators that have no Spark route (multi-table publish)."""
    hook.refuse_uncommittable(tbl, change=change, what="ref")


def commit_ref_changes(
    op: IcebergSparkBaseOperator, context: Context | None, tbl: Table, changes: Sequence[RefChange], operation: str
) -> bool:
    """A WAP plan's ref changes, committed where the table's format version allows; whether a commit was made.

    Through the catalog (one compare-and-swap commit of every change) when pyiceberg can write the
    table's metadata; for a format-version 3 table behind a catalog whose client writes it, through
    the ``ref_changes`` Spark job (one ``ALTER TABLE`` per change, each checked against the ref read
    fresh). Both are guarded before anything changes and read back through the catalog after.
    """
    hook, table = op.catalog_hook, op.ident.dotted
    if not changes:
        return False
    if hook.ref_change_route(tbl) == "catalog":
        return hook.apply_ref_changes(tbl, changes)
    guard_ref_changes(tbl.metadata.refs, changes, table=table)
    moved = expectation_problems(tbl.metadata.refs, changes)
    if moved:
        raise IcebergCommitConflictError(
            f"Refs of {table} changed since the plan: {'; '.join(moved)}; another writer changed them. Nothing "
            "was changed; retry the task."
        )
    op.log.info(
        "%s is format-version %s; committing its ref changes %s with Spark (pyiceberg writes no v3 metadata here)",
        table,
        tbl.metadata.format_version,
        [(c.ref, c.snapshot_id) for c in changes],
    )
    spec = op.job_spec(context, operation, ref=MAIN_BRANCH, changes=[asdict(c) for c in changes])
    op.run_spark_job(context, "ref_changes", spec)
    problems = landed_problems(hook.load_table(table).metadata.refs, changes)
    if problems:
        raise IcebergCommitVerificationError(
            f"After the ref changes job, the refs of {table} are not as planned: {'; '.join(problems)}. A "
            "concurrent writer may have changed them; inspect the table's refs."
        )
    return True


def snapshots_by_id(hook: IcebergCatalogHook, tbl: Table) -> dict[int, Any]:
    """Every snapshot of the loaded table by id (plain values for the pure plans)."""
    return {s.snapshot_id: s for s in hook.list_snapshots(tbl)}


def snapshot_shape(tbl: Table, snap: SnapshotInfo) -> tuple[int | None, str | None]:
    """A snapshot's ``total-records`` (None when its summary lacks it) and the schema JSON it was written with."""
    total = snap.summary.get("total-records")
    schema = tbl.schemas().get(snap.schema_id) if snap.schema_id is not None else tbl.schema()
    return (int(total) if total is not None else None), (schema.model_dump_json() if schema is not None else None)


def merge_base(hook: IcebergCatalogHook, tbl: Table, head: int | None, other: int | None) -> int | None:
    """Newest snapshot in ``head``'s ancestry that is also in ``other``'s (:func:`_wap_refs.merge_base`)."""
    return _wap_refs.merge_base(snapshots_by_id(hook, tbl), head, other)


def branch_snapshots(hook: IcebergCatalogHook, tbl: Table, head: int, base: int | None) -> list[Any]:
    """Snapshots from ``base`` (exclusive) to ``head`` (inclusive), oldest first (:func:`_wap_refs.branch_snapshots`)."""
    return _wap_refs.branch_snapshots(snapshots_by_id(hook, tbl), head, base)


def ensure_wap_enabled(hook: IcebergCatalogHook, tbl: Table, table: str) -> tuple[Table, bool]:
    """Set ``write.wap.enabled=true`` (Iceberg silently ignores ``spark.wap.branch`` without it)."""
    changed = hook.ensure_table_properties(tbl, WAP_ENABLED)
    return (hook.load_table(table) if changed else tbl), changed


#: Iceberg <= 1.10 decides whether a DELETE can be metadata-only by looking at ``main``'s files, not
#: the WAP branch's (apache/iceberg#15512), then fails the commit on the branch with "Cannot delete
#: file where some, but not all, rows match filter". Excluding Spark's metadata-only delete rule makes
#: every DELETE a row-level rewrite, which resolves the WAP branch correctly.
METADATA_DELETE_RULE = "org.apache.spark.sql.execution.datasources.v2.OptimizeMetadataOnlyDeleteFromTable"


def wap_write_conf(branch: str, spark_conf: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Spark conf for a WAP write: the branch, and the metadata-only DELETE rule excluded."""
    excluded = [r.strip() for r in str((spark_conf or {}).get("spark.sql.optimizer.excludedRules", "")).split(",")]
    rules = ",".join(dict.fromkeys([r for r in excluded if r] + [METADATA_DELETE_RULE]))
    return {"spark.wap.branch": branch, "spark.sql.optimizer.excludedRules": rules}


def refuse_wap_conf(spark_conf: Mapping[str, Any] | None) -> None:
    """Refuse ``spark.wap.id`` / ``spark.wap.branch`` in a user's ``spark_conf`` (the WAP operators set the branch)."""
    for key in ("spark.wap.id", "spark.wap.branch"):
        if key in (spark_conf or {}):
            raise IcebergValidationError(
                f"spark_conf sets {key!r}; the WAP operators set spark.wap.branch themselves, and Iceberg fails "
                "when spark.wap.id and spark.wap.branch are both set. Remove it from spark_conf."
            )


def stop_for_rerun(
    op: IcebergBaseOperator,
    context: Context,
    tbl: Table,
    branch: str,
    plan: rerun.RerunPlan,
    operation: str,
    *,
    drop_branch: bool = True,
) -> None:
    """``refuse``: raise, naming the earlier publish; ``skip``: ``noop`` ledger row, then skip the task.

    Either way (with ``drop_branch``) the run's branch is dropped when it holds nothing
    unpublished (it sits on ``main``'s history), so the table is left as it was before the run.
    """
    from airflow.sdk.exceptions import AirflowSkipException

    hook, table = op.catalog_hook, op.ident.dotted
    ref = hook.refs(tbl).get(branch)
    main_head = hook.ref_snapshot_id(tbl, MAIN_BRANCH)
    if (
        drop_branch
        and ref is not None
        and ref.type == "branch"
        and main_head is not None
        and hook.is_ancestor(tbl, ref.snapshot_id, main_head)
    ):
        hook.remove_ref(tbl, branch)
    hook.governance.record_ledger(
        operation=operation,
        table=table,
        ref=branch,
        status="noop" if plan.action == "skip" else "refused",
        context=context,
        snapshot_before=main_head,
        snapshot_after=main_head,
        details=with_string_ids({"on_rerun": plan.mode, "rerun": plan.to_dict(), "wap_interval": plan.interval_key}),
    )
    if plan.action == "skip":
        op.log.info("%s", plan.message)
        raise AirflowSkipException(plan.message)
    raise IcebergRefusedError(plan.message)
