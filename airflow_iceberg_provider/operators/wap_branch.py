"""Write-audit-publish, step 1: cut the run's branch through the catalog (no JVM) and enable WAP.

Composed with the write, audit and publish steps by
:func:`airflow_iceberg_provider.task_groups.wap_task_group`; the plan is
:func:`airflow_iceberg_provider.rules.wap_refs.plan_create_branch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
)
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergBaseOperator
from airflow_iceberg_provider.operators._wap_common import (
    ensure_wap_enabled,
    resolve_branch,
    snapshots_by_id,
)
from airflow_iceberg_provider.params import MAIN_BRANCH, validate_ref
from airflow_iceberg_provider.rules.wap_refs import BranchPlan, pin_by_write, plan_create_branch

if TYPE_CHECKING:
    from airflow.sdk import Context


class IcebergWapCreateBranchOperator(IcebergBaseOperator):
    """
    Cut a WAP branch from ``main`` (or another ref / snapshot) through the catalog; no JVM.

    Also sets ``write.wap.enabled=true`` on the table (without it Iceberg ignores
    ``spark.wap.branch`` and writes straight to ``main``). Idempotent: a retry finds the branch it
    created and reports the same base. On a format-version 3 table behind a catalog whose client
    writes the metadata (pyiceberg writes no v3 metadata) nothing is committed here: the branch is
    left to the write, which pins it at the reported base in its Spark job (``created`` is
    ``False``); the table must already have ``write.wap.enabled=true``.

    :param table: ``namespace.table`` (templated).
    :param branch: branch name (templated); default ``wap_<dag>__<run>_<hash>``, the same
        on every retry of the run (:func:`~airflow_iceberg_provider.params.branch_name_for_run`).
    :param from_ref: ref to branch from (templated), default ``main``.
    :param from_snapshot_id: snapshot to branch from instead of ``from_ref``'s head (templated).
    :param branch_prefix: prefix of the derived branch name.
    :return: ``{"table", "branch", "base_snapshot_id", "created", "wap_enabled_now"}``; for a
        table without any snapshot the branch is created by the first WAP write and
        ``base_snapshot_id`` is ``None``.
    """

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, "branch", "from_ref", "from_snapshot_id")
    ui_color = "#e3f1d4"

    def __init__(
        self,
        *,
        branch: str | None = None,
        from_ref: str = MAIN_BRANCH,
        from_snapshot_id: int | str | None = None,
        branch_prefix: str = "wap",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.branch = branch
        self.from_ref = from_ref
        self.from_snapshot_id = from_snapshot_id
        self.branch_prefix = branch_prefix
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        branch = resolve_branch(self.branch, context, self.branch_prefix)
        from_ref = validate_ref(self.from_ref, "from_ref")
        from_sid = params.snapshot_id(self.from_snapshot_id, "from_snapshot_id")
        hook, table = self.catalog_hook, self.ident.dotted
        tbl = hook.load_table(table)
        source = from_sid if from_sid is not None else hook.ref_snapshot_id(tbl, from_ref)
        plan = plan_create_branch(table, branch, hook.refs(tbl), snapshots_by_id(hook, tbl), source)
        plan = pin_by_write(plan, hook.ref_change_route(tbl))
        tbl, enabled_now = ensure_wap_enabled(hook, tbl, table)
        hook.apply_ref_changes(tbl, plan.changes)
        self.log.info("Branch %s of %s: %s", branch, table, plan.message)
        self._verify(plan)
        if plan.action == "create" or enabled_now:
            self._record(
                context, plan, {"from_ref": from_ref, "from_snapshot_id": from_sid, "wap_enabled_now": enabled_now}
            )
        result = {
            "table": table,
            "branch": branch,
            "base_snapshot_id": plan.base,
            "created": plan.action == "create",
            "wap_enabled_now": enabled_now,
        }
        return with_string_ids(result)

    def _verify(self, plan: BranchPlan) -> None:
        """A created branch is at its base (re-read through the catalog)."""
        found = self.catalog_hook.refs(self.ident).get(plan.branch) if plan.action == "create" else None
        if plan.action == "create" and (found is None or found.snapshot_id != plan.base):
            raise IcebergCommitVerificationError(
                f"After creating branch {plan.branch!r} of {self.ident}, it is {found}, not at snapshot {plan.base}."
            )

    def _record(self, context: Context, plan: BranchPlan, details: dict[str, Any]) -> None:
        self.catalog_hook.governance.record_ledger(
            operation="wap_create_branch",
            table=self.ident.dotted,
            ref=plan.branch,
            status="succeeded",
            context=context,
            snapshot_before=plan.base,
            snapshot_after=plan.base,
            details=with_string_ids(details),
        )


__all__ = ["IcebergWapCreateBranchOperator"]
