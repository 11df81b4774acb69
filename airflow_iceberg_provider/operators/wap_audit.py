"""Write-audit-publish, step 3: audit the exact branch snapshot with declarative checks in one Spark job.

Every check's verdict is recorded in ``governance.audit_results``; a failed check fails the task
(no retry). The check grammar is :mod:`airflow_iceberg_provider.core.audit_checks`, the plan
:func:`airflow_iceberg_provider.rules.wap_refs.plan_audit`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.core import audit_checks, audit_report
from airflow_iceberg_provider.core.governance import airflow_identity, decode_ledger_row
from airflow_iceberg_provider.exceptions import (
    IcebergAuditFailedError,
    IcebergCommitVerificationError,
    IcebergValidationError,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators._wap_common import resolve_branch, snapshot_shape, snapshots_by_id
from airflow_iceberg_provider.params import MAIN_BRANCH, validate_name
from airflow_iceberg_provider.rules import wap_refs as _wap_refs
from airflow_iceberg_provider.rules import wap_rerun as rerun
from airflow_iceberg_provider.rules.wap_refs import AuditPlan, audit_target, plan_audit
from airflow_iceberg_provider.ui.links import GovernanceAuditLink

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

#: the XCom key of a task's return value (a failed audit pushes its result under it before failing)
XCOM_RETURN_KEY = "return_value"


def previous_published_added(hook: IcebergCatalogHook, tbl: Table, table: str) -> int | None:
    """Rows added by the last change published to ``main`` (ledger first, else ``main``'s head commit)."""
    rows = [
        r
        for r in hook.governance.read("ledger", operation="wap_publish", table_name=table)
        if r.get("status") == "succeeded"
    ]
    if rows:
        last = max(rows, key=lambda r: r["finished_at"])
        value = decode_ledger_row(last)["metrics"].get("published_added_records")
        if value is not None:
            return int(value)
    main = hook.ref_snapshot_id(tbl, MAIN_BRANCH)
    if main is None:
        return None
    snap = hook.snapshot(tbl, snapshot_id=main)
    if snap.operation not in ("append", "overwrite"):
        return None
    return rerun.change_metrics([snap])["net_added_records"]


class IcebergWapAuditOperator(IcebergSparkBaseOperator):
    """
    Audit one snapshot of a WAP branch with declarative checks, in one Spark job.

    Checks use the common-sql format (see :mod:`~airflow_iceberg_provider.core.audit_checks`):
    ``column_mapping`` (``null_check``, ``distinct_check``, ``unique_check``, ``min``, ``max``
    with ``equal_to`` / ``greater_than`` / ``geq_to`` / ``less_than`` / ``leq_to``, optional
    ``tolerance`` and ``partition_clause``), ``table_checks`` (``check_statement``, optional
    ``partition_clause``) and WAP change-set checks ``change_checks`` (``added_rows``: net rows
    the branch added since its base; ``added_rows_ratio``: that against the net rows of the
    previous published change; with ``min`` / ``max``). Specs are validated before any Spark job starts.

    Every check's observed value and verdict is appended to ``governance.audit_results``
    (ref, snapshot id, base, run, check, value, verdict, the check's hash and the spec's hash). Any
    failing check fails the task
    with :class:`~airflow_iceberg_provider.exceptions.IcebergAuditFailedError` (no retry:
    a retry cannot fix data), listing each failed check and its observed value; ``main`` is
    not touched and the branch is kept for inspection. Before failing, the task pushes the same
    result it returns on success to XCom (``return_value``: every check's observed value and
    condition, plus ``failed_checks``), logs each failed check at ERROR and a table of the failed
    checks (observed vs expected) with the outcome (``audit completed: 2 of 11 checks failed``)
    at WARNING. Snapshot ids in the result are decimal strings (:mod:`airflow_iceberg_provider.ids`).

    :param table: ``namespace.table`` (templated).
    :param branch: the branch to audit (templated); default derived from the DAG run.
    :param snapshot_id: the exact snapshot to audit (templated), default the branch head.
    :param base_snapshot_id: the branch's base (templated), default where it meets ``main``.
    :param column_mapping: column checks (templated).
    :param table_checks: table checks (templated).
    :param change_checks: change-set checks (templated).
    :param partition_clause: predicate applied to every column/table check (templated).
    :param accept_none: a NULL observed value counts as 0 (common-sql default ``True``).
    :param incremental: when the branch only *appended* since its base and an earlier audit
        recorded a check's value for that base snapshot (typically: ``main``'s head, published
        by fast-forward after its own audit), evaluate that check over the appended data
        files only and combine it with the recorded value (exact for null counts, min/max,
        single-aggregate table checks such as ``COUNT(*) > 0`` or ``SUM(x) > 0``, row
        predicates, and unique/distinct counts, whose cross-duplicates are found by a join
        reading only base files whose column bounds overlap the new values). Other checks,
        or any branch with overwrites/deletes, are evaluated over the whole snapshot.
        ``False`` always audits the whole snapshot.
    :param incremental_min_rows: audit incrementally only when the base snapshot holds at
        least this many rows (default 1,000,000): on a small table one pass over everything
        is cheaper than the extra steps (a fresh Spark session pays ~1-3 s per extra query).
    :param warn_checks: names of warn-level checks: when every failed check is one of them, the task
        succeeds with ``passed: False`` and ``needs_approval: True`` (each failure logged at WARNING),
        and the publish refuses until a data steward accepts them at an approval gate
        (:class:`~airflow_iceberg_provider.operators.approval.IcebergWapApprovalOperator`).
    :param driver_read: in an incremental audit, let the Spark driver read up to 1M appended
        rows straight from their Parquet files and evaluate the checks itself (no Spark job;
        exact Spark semantics for the SQL subset of ``spark_jobs/arrow_sql.py``, anything else
        is left to Spark). ``False``: a Spark job always reads them.
    :param branch_prefix: prefix of the branch name derived from the DAG run when ``branch`` is not
        given (default ``wap``); the same prefix as the create-branch task's.
    :return: ``{"branch", "snapshot_id", "base_snapshot_id", "passed", "outcome", "checks", "failed",
        "failed_checks", "results", "incremental_checks", "metadata_checks", "appended_read_by",
        "audit_event_id", "spec_hash", "dag_id", "run_id", "task_id", ...}``: the verdict's identity is
        ``audit_event_id`` (the ``event_id`` of its ``audit_results`` rows), ``spec_hash`` (SHA-256 of
        the check spec it ran, :func:`~airflow_iceberg_provider.core.audit_checks.spec_hash`, also on
        every row) and ``snapshot_id``; pass the result to the publish (``audit``) to bind the publish
        to this verdict. (``appended_read_by``:
        ``"driver"`` when the appended Parquet files were read by the Spark driver itself, no
        Spark job; ``"spark"`` when a Spark job read them; ``None`` without incremental checks)
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "branch",
        "snapshot_id",
        "base_snapshot_id",
        "column_mapping",
        "table_checks",
        "change_checks",
        "partition_clause",
    )
    ui_color = "#fff2c6"
    operator_extra_links = (GovernanceAuditLink(),)

    def __init__(
        self,
        *,
        branch: str | None = None,
        column_mapping: Mapping[str, Any] | None = None,
        table_checks: Mapping[str, Any] | None = None,
        change_checks: Mapping[str, Any] | None = None,
        partition_clause: str | None = None,
        accept_none: bool = True,
        snapshot_id: int | str | None = None,
        base_snapshot_id: int | str | None = None,
        branch_prefix: str = "wap",
        incremental: bool = True,
        incremental_min_rows: int = 1_000_000,
        driver_read: bool = True,
        warn_checks: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.branch = branch
        self.warn_checks = warn_checks
        self.incremental = incremental
        self.driver_read = driver_read
        self.incremental_min_rows = incremental_min_rows
        self.column_mapping = column_mapping
        self.table_checks = table_checks
        self.change_checks = change_checks
        self.partition_clause = partition_clause
        self.accept_none = accept_none
        self.snapshot_id = snapshot_id
        self.base_snapshot_id = base_snapshot_id
        self.branch_prefix = branch_prefix
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if not params.is_templated(self.driver_read):
            params.flag(self.driver_read, "driver_read")
        rows = self.incremental_min_rows
        if isinstance(rows, bool) or not isinstance(rows, int):
            raise IcebergValidationError(
                f"incremental_min_rows={rows!r} is not an integer; give a row count such as 1000000 "
                "(0 audits incrementally whenever possible)."
            )
        if rows < 0:
            raise IcebergValidationError(f"incremental_min_rows={rows} is negative; give 0 or a positive row count.")
        specs = (self.column_mapping, self.table_checks, self.change_checks, self.partition_clause)
        if not params.is_templated(specs):
            self.parse_checks()

    def parse_checks(self, columns: Sequence[str] | None = None) -> list[audit_checks.Check]:
        """Validate the rendered check specs (no Spark, no catalog).

        :param columns: the audited table's column names, once loaded: the SQL fragments may
            then name only these.
        """
        try:
            checks = audit_checks.parse_checks(
                self.column_mapping,
                self.table_checks,
                self.change_checks,
                partition_clause=self.partition_clause,
                accept_none=self.accept_none,
                columns=columns,
            )
        except audit_checks.CheckSpecError as err:
            raise IcebergValidationError(f"Invalid audit checks for {self.task_id}: {err}") from err
        for check in checks:
            if check.column is not None:
                validate_name(check.column, f"column_mapping[{check.column!r}]")
        return checks

    def _reusable_base_values(
        self,
        checks: Sequence[audit_checks.Check],
        table: str,
        base: int | None,
        snapshots: Sequence[Any],
        tbl: Table | None = None,
    ) -> dict[str, float | None]:
        """Values recorded for the base snapshot that an incremental audit may combine with (else ``{}``)."""
        if not self.incremental or base is None:
            return {}
        not_append = [s.snapshot_id for s in snapshots if s.operation != "append"]
        if not_append:
            self.log.info(
                "Full audit: the branch rewrote or deleted rows since base %s (snapshots %s are not appends).",
                base,
                not_append[:5],
            )
            return {}
        base_snapshot = self.catalog_hook.snapshot(tbl if tbl is not None else table, snapshot_id=base)
        base_rows = int(base_snapshot.summary.get("total-records", 0) or 0)
        if base_rows < self.incremental_min_rows:
            self.log.info(
                "Full audit: the base snapshot %s holds %d rows (< incremental_min_rows=%d); one pass is cheaper.",
                base,
                base_rows,
                self.incremental_min_rows,
            )
            return {}
        rows = self.catalog_hook.governance.read("audit_results", table_name=table, snapshot_id=base)
        values = audit_checks.reusable_base_values(checks, rows)
        self.log.info(
            "Incremental audit: %d of %d checks reuse values recorded for base snapshot %s.",
            len(values),
            sum(1 for c in checks if c.kind != "change"),
            base,
        )
        return values

    def openlineage_tables(self) -> tuple[Sequence[str], Sequence[str]]:
        """The audit reads the table's branch (an OpenLineage input); its verdicts go to the governance table."""
        return [self.ident.dotted], [f"{self.catalog_hook.governance_namespace}.audit_results"]

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        checks = self.parse_checks()
        branch = resolve_branch(self.branch, context, self.branch_prefix)
        plan, snapshots, tbl = self._plan(branch, checks)
        self.parse_checks(columns=tbl.schema().column_names)  # before any job: only the table's columns
        base_values = self._reusable_base_values(checks, self.ident.dotted, plan.base, snapshots, tbl)
        spec = self._spec(context, branch, checks, plan, base_values, tbl)
        self.log.info(
            "Auditing %s@%s snapshot %s (base %s) with %d checks",
            self.ident.dotted,
            branch,
            plan.snapshot_id,
            plan.base,
            len(checks),
        )
        run, ledger = self.run_spark_job(context, "wap_audit", spec)
        results = self._recorded_results(checks, run.job_run_id, branch)
        summary = {**self._summary(branch, plan, results, run.job_run_id, ledger), **self._identity(context, checks)}
        self._report(context, summary, ledger["metrics"])
        warned = {f["check"] for f in summary["failed_checks"]} <= set(self.warn_checks)
        if summary["failed"] and not warned:
            raise IcebergAuditFailedError(self._failure_message(summary, spec["audit_table"]))
        if summary["failed"]:
            self.log.warning("Only warn-level checks failed: the publish waits for a data steward's approval")
        return {**summary, "needs_approval": bool(summary["failed"])}

    def _plan(self, branch: str, checks: Sequence[audit_checks.Check]) -> tuple[AuditPlan, list[Any], Table]:
        """Resolve (one table load) and plan: the exact snapshot on the branch, its base, the change set."""
        hook, table = self.catalog_hook, self.ident.dotted
        tbl = hook.load_table(table)
        refs, by_id = hook.refs(tbl), snapshots_by_id(hook, tbl)
        requested = params.snapshot_id(self.snapshot_id, "snapshot_id")
        snapshot_id = audit_target(table, branch, refs, requested, by_id)
        main_head = hook.ref_snapshot_id(tbl, MAIN_BRANCH)
        base = params.snapshot_id(self.base_snapshot_id, "base_snapshot_id")
        base = base if base is not None else _wap_refs.merge_base(by_id, snapshot_id, main_head)
        snapshots = _wap_refs.branch_snapshots(by_id, snapshot_id, base)
        wants_ratio = any(c.check_type == "added_rows_ratio" for c in checks)
        baseline = previous_published_added(hook, tbl, table) if wants_ratio else None
        plan = plan_audit(snapshot_id, base, main_head, snapshots, wants_ratio=wants_ratio, baseline=baseline)
        return plan, snapshots, tbl

    def _spec(
        self,
        context: Context,
        branch: str,
        checks: Sequence[audit_checks.Check],
        plan: AuditPlan,
        base_values: dict[str, float | None],
        tbl: Table,
    ) -> dict[str, Any]:
        """The audit job's spec: the exact snapshot (its size and schema), the checks, the values known without a scan."""
        records, schema = snapshot_shape(tbl, self.catalog_hook.snapshot(tbl, snapshot_id=plan.snapshot_id))
        return self.job_spec(
            context,
            "wap_audit",
            ref=branch,
            snapshot_id=plan.snapshot_id,
            snapshot_records=records,
            snapshot_schema=schema,
            base_snapshot_id=plan.base,
            checks=[c.to_dict() for c in checks],
            change_values=plan.change_values,
            skipped=plan.skipped,
            audit_table=self.catalog_hook.governance.table("audit_results"),
            incremental_base=plan.base if base_values else None,
            base_values=base_values,
            driver_read=self.driver_read,
        )

    def _identity(self, context: Context, checks: Sequence[audit_checks.Check]) -> dict[str, Any]:
        """Who ran this verdict: the spec's hash and the Airflow identity (the event id is ``job_run_id``)."""
        ident = airflow_identity(context)
        return {
            "spec_hash": audit_checks.spec_hash(checks),
            "dag_id": ident["dag_id"],
            "run_id": ident["run_id"],
            "task_id": ident["task_id"],
        }

    def _recorded_results(
        self, checks: Sequence[audit_checks.Check], job_run_id: str, branch: str
    ) -> list[dict[str, Any]]:
        """Every check's verdict as the job recorded it in ``audit_results`` (one row per check, each
        carrying the hash of the check this operator asked for, or the task fails)."""
        table = self.ident.dotted
        rows = self.catalog_hook.governance.read("audit_results", event_id=job_run_id)
        names = [c.name for c in checks]
        expected = {c.name: audit_checks.check_hash(c) for c in checks}
        recorded = {r["check_name"]: r.get("check_hash") for r in rows}
        if sorted(r["check_name"] for r in rows) != sorted(names) or recorded != expected:
            raise IcebergCommitVerificationError(
                f"The audit job for {table}@{branch} recorded {len(rows)} result rows for {len(checks)} checks "
                f"(event_id={job_run_id}), or rows whose check hashes differ from the checks asked for; the audit "
                "cannot be trusted, so the task fails."
            )
        return audit_report.results_in_order(rows, names)

    def _summary(
        self,
        branch: str,
        plan: AuditPlan,
        results: list[dict[str, Any]],
        job_run_id: str,
        ledger: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The XCom value: every check's observed value and condition, the failed ones, ids as strings."""
        failed = audit_report.failed_checks(results)
        metrics = ledger["metrics"]
        return with_string_ids(
            {
                "table": self.ident.dotted,
                "branch": branch,
                "snapshot_id": plan.snapshot_id,
                "base_snapshot_id": plan.base,
                "main_snapshot_id": plan.main_head,
                "passed": not failed,
                "outcome": audit_report.completion_line(len(results), len(failed)),
                "checks": len(results),
                "failed": len(failed),
                "failed_checks": failed,
                "results": results,
                "job_run_id": job_run_id,
                "audit_event_id": job_run_id,
                "queries": metrics.get("queries"),
                "incremental_checks": metrics.get("from_change_set", 0),
                "metadata_checks": metrics.get("from_metadata", 0),
                "appended_read_by": metrics.get("appended_read_by"),
                **plan.change,
            }
        )

    def _report(self, context: Context, summary: Mapping[str, Any], metrics: Mapping[str, Any]) -> None:
        """Log the verdicts (failed checks at ERROR, their table and the outcome at WARNING).

        A failed audit also pushes ``summary`` to XCom (key ``return_value``, as a passed audit
        returns it) *before* the task fails, so the observed values are in the UI even where task
        logs are not served.
        """
        if metrics.get("incremental_fallback"):
            self.log.warning("Incremental audit fell back to a full scan: %s", metrics["incremental_fallback"])
        for r in summary["results"]:
            level = logging.INFO if r["passed"] else logging.ERROR
            verdict = "PASS" if r["passed"] else "FAIL"
            self.log.log(level, "%s %s: observed %s, expected %s", verdict, r["check"], r["observed"], r["condition"])
        where = f"{summary['table']}@{summary['branch']} snapshot {summary['snapshot_id']}"
        if not summary["failed"]:
            self.log.info("%s: %s", where, summary["outcome"])
            return
        table = audit_report.failure_table(summary["results"])
        self.log.warning("Failed checks of %s:\n%s\n%s", where, table, summary["outcome"])
        ti = context.get("ti") if hasattr(context, "get") else None
        if ti is not None and hasattr(ti, "xcom_push"):
            ti.xcom_push(key=XCOM_RETURN_KEY, value=dict(summary))

    def _failure_message(self, summary: Mapping[str, Any], audit_table: str) -> str:
        hook, table, branch = self.catalog_hook, summary["table"], summary["branch"]
        lines = "\n".join(
            f"  - {f['check']}: observed {f['observed']}, expected {f['expected']}" for f in summary["failed_checks"]
        )
        return (
            f"Audit of {table} branch {branch!r} snapshot {summary['snapshot_id']}: {summary['outcome']}:\n{lines}\n"
            f"main was not touched (still at {summary['main_snapshot_id']}); the branch is kept for inspection "
            f"(SELECT ... FROM {hook.catalog_name}.{table} VERSION AS OF '{branch}'). Results are in "
            f"{audit_table} (event_id={summary['job_run_id']}) and in this task's XCom. A retry cannot fix data: "
            "fix the data and re-run."
        )


__all__ = ["IcebergWapAuditOperator"]
