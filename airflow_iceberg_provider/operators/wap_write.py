"""Write-audit-publish, step 2: Spark writes to the run's branch, stamped and re-run safe."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.core.subject_index import INDEX_PROPERTY
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergRefNotFoundError,
    IcebergRefusedError,
    IcebergSparkJobError,
    IcebergValidationError,
)
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators._erasure_job import index_upkeep
from airflow_iceberg_provider.operators._wap_common import (
    branch_snapshots,
    commit_ref_changes,
    ensure_wap_enabled,
    refuse_wap_conf,
    resolve_branch,
    snapshots_by_id,
    stop_for_rerun,
    wap_write_conf,
)
from airflow_iceberg_provider.params import MAIN_BRANCH, SNAPSHOT_OPERATIONS
from airflow_iceberg_provider.rules import wap_rerun as rerun
from airflow_iceberg_provider.rules.erasure import subject_index_lag
from airflow_iceberg_provider.rules.format_version import WRITES_MANIFESTS
from airflow_iceberg_provider.rules.wap_refs import plan_branch_reset, write_base

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook


def plan_rerun_from_catalog(
    hook: IcebergCatalogHook,
    table: str,
    identity: rerun.RunIdentity,
    mode: str,
    replace_where: str | None = None,
    *,
    stamped: bool = True,
) -> tuple[Table, rerun.RerunPlan, float]:
    """Load the table once and decide (``rules.wap_rerun.plan_rerun``); the ledger only if history expired
    or the writes carry no stamps (``stamped=False``: SQL statements through Spark Connect).

    :return: the loaded table, the plan and the check's cost in milliseconds.
    """
    started = time.perf_counter()
    tbl = hook.load_table(table)
    chain, by_id = hook.ref_chain(tbl, MAIN_BRANCH), {s.snapshot_id: s for s in hook.list_snapshots(tbl)}
    plan = rerun.plan_rerun(mode, identity, chain, by_id, table=table, replace_where=replace_where, stamped=stamped)
    if plan.action == "read_ledger":
        rows = hook.governance.read("ledger", operation="wap_publish", table_name=table)
        plan = rerun.plan_rerun(
            mode, identity, chain, by_id, table=table, replace_where=replace_where, ledger_rows=rows, stamped=stamped
        )
    return tbl, plan, (time.perf_counter() - started) * 1000


class IcebergWapWriteOperator(IcebergSparkBaseOperator):
    """
    Write to a WAP branch with Spark: a PySpark application or SQL statements.

    The job runs with ``spark.wap.branch=<branch>``, so every write to the table
    (INSERT, INSERT OVERWRITE, MERGE, UPDATE, DELETE, ``writeTo().append()``) lands on
    the branch, never on ``main``. Afterwards the catalog must show the branch advanced
    from its base to a descendant; added/deleted records and files come from the
    snapshot summaries.

    Every commit of a SQL write carries the run's Airflow identity in its snapshot summary
    (``airflow.dag-id``, ``run-id``, ``task-id``, ``try-number``, ``logical-date``,
    ``data-interval-start``/``-end``, ``airflow.wap-interval``, the interval key, and
    ``airflow.job-run-id``, the Spark job's run id); an application receives the same properties
    as ``spec["snapshot_properties"]`` and should apply them
    (``writer.option("snapshot-property." + k, v)``).

    Re-runs: before writing, one catalog read decides whether this interval was
    already published to ``main`` (``rules.wap_rerun.plan_rerun``). ``on_rerun="fail"`` (default)
    refuses, naming the earlier publish's snapshot and run; ``"skip"`` records a ``noop``
    ledger row and skips (the audit and publish are skipped, no Asset event);
    ``"replace"`` first removes on the branch what the earlier publish added (the rows of
    ``replace_where``, checked to be exactly its rows, or the data files its append
    snapshots added), then writes.

    Retry safety: if the branch already carries commits beyond its base (an earlier
    try of this run), it is reset to the base first (compare-and-swap, no JVM), so a
    retried write never duplicates rows. A durable write (``durable=True``, the default, under a
    scheduler) goes further: its job outlives a killed task process, and the retry reconnects to
    it, or takes its verified commit, before any of the above (``durable_jobs``). The witness of
    a SQL write's result is its job's ledger row; an application's is its commit on the branch
    carrying its ``airflow.job-run-id`` (so it must apply ``spec["snapshot_properties"]``, and
    commit once: a retry takes its first stamped commit as its result), after which the retry
    writes the ledger row the killed task could not.

    :param table: ``namespace.table`` (templated).
    :param branch: the WAP branch (templated); default derived from the DAG run.
    :param base_snapshot_id: snapshot the branch was cut from (templated; e.g. the create
        task's XCom). Default: where the branch meets ``main``'s history, or ``main``'s head.
    :param application: path of a PySpark application (templated); it receives the spec as
        :class:`~airflow_iceberg_provider.operators.spark.IcebergSparkSubmitOperator` does.
    :param sql: one SQL statement or a list of them (templated); ``{table}`` stands for the
        quoted ``catalog.namespace.table``. Exactly one of ``application`` / ``sql``.
    :param sql_args: named parameters for the statements (``:name`` markers) (templated).
    :param params_for_job: JSON parameters for the application (templated), in the spec file.
    :param expected_operations: accepted snapshot operations on the branch.
    :param on_rerun: ``"fail"`` (default), ``"skip"`` or ``"replace"``: what a run does when
        its interval (DAG, task group, data interval) is already on ``main``.
    :param replace_where: with ``on_rerun="replace"``, a read-only predicate selecting exactly
        the interval's rows (templated; validated like the audit's SQL fragments), e.g.
        ``"order_ts >= TIMESTAMP '{{ data_interval_start }}' AND order_ts < TIMESTAMP
        '{{ data_interval_end }}'"``. SQL writes only.
    :param branch_prefix: prefix of the branch name derived from the DAG run when ``branch`` is not
        given (default ``wap``); the same prefix as the create-branch task's.
    :return: ``{"branch", "base_snapshot_id", "snapshot_id", "added_records", ...,
        "reset_from_snapshot_id", "rerun"}``
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "branch",
        "base_snapshot_id",
        "application",
        "sql",
        "sql_args",
        "params_for_job",
        "replace_where",
    )
    template_ext: Sequence[str] = (".sql",)
    ui_color = "#cfe8fc"
    supports_durable_jobs = True

    def __init__(
        self,
        *,
        branch: str | None = None,
        base_snapshot_id: int | str | None = None,
        application: str | None = None,
        sql: str | Sequence[str] | None = None,
        sql_args: Mapping[str, Any] | None = None,
        params_for_job: Mapping[str, Any] | None = None,
        expected_operations: Sequence[str] = SNAPSHOT_OPERATIONS,
        branch_prefix: str = "wap",
        on_rerun: str = "fail",
        replace_where: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.on_rerun = rerun.validate_on_rerun(on_rerun)
        self.replace_where = replace_where
        self.branch = branch
        self.base_snapshot_id = base_snapshot_id
        self.application = application
        self.sql = sql
        self.sql_args = sql_args
        self.params_for_job = params_for_job
        self.expected_operations = tuple(expected_operations)
        self.branch_prefix = branch_prefix
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if (self.application is None) == (self.sql is None):
            raise IcebergValidationError(
                f"Pass exactly one of application= (a PySpark script) or sql= (statements) to {type(self).__name__}."
            )
        bad = [op for op in self.expected_operations if op not in SNAPSHOT_OPERATIONS]
        if bad or not self.expected_operations:
            raise IcebergValidationError(
                f"expected_operations={list(self.expected_operations)!r} is invalid; use a non-empty subset of "
                f"{list(SNAPSHOT_OPERATIONS)}."
            )
        if not params.is_templated(self.spark_conf):
            refuse_wap_conf(self.spark_conf)
        if self.replace_where is not None and self.application is not None:
            raise IcebergValidationError(
                "replace_where applies to sql= writes (the provider's job deletes the rows before the statements); "
                "an application must remove the interval's rows itself. Remove replace_where or use sql=."
            )
        if isinstance(self.replace_where, str) and not params.is_templated(self.replace_where):
            rerun.validate_replace_where(self.replace_where)

    def _statements(self) -> list[str]:
        items = [self.sql] if isinstance(self.sql, str) else list(self.sql or [])
        out = [s.strip().rstrip(";").strip() for s in items if isinstance(s, str)]
        if len(out) != len(items) or not out or not all(out):
            raise IcebergValidationError("sql must be a non-empty statement or a list of non-empty statements.")
        return out

    def _validated_inputs(self) -> list[str] | None:
        refuse_wap_conf(self.spark_conf)
        statements = self._statements() if self.sql is not None else None
        for name, value in (("params_for_job", self.params_for_job), ("sql_args", self.sql_args)):
            if value is not None and not isinstance(value, Mapping):
                raise IcebergValidationError(f"{name}={value!r:.80} is not a mapping; pass a dict of JSON values.")
        try:
            json.dumps(self.params_for_job)
            json.dumps(self.sql_args)
        except (TypeError, ValueError) as err:
            raise IcebergValidationError(f"params_for_job / sql_args must be JSON-serialisable: {err}") from err
        return statements

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        resumed = self.resume_spark_job(context)  # an earlier try's durable job: reconnect or take its result
        if resumed is not None:
            before = resumed.resume
            head, metrics = self._verified_change(before["branch"], before["base"], before["main_before"], resumed.row)
            # an application's ledger row, which the task that started it did not live to write
            self._record(context, before["branch"], before["base"], head, metrics, resumed.run, before.get("interval"))
            return self._result(
                before["branch"], before["base"], head, before["reset_from"], resumed.run, before["rerun"], metrics
            )
        branch = resolve_branch(self.branch, context, self.branch_prefix)
        statements = self._validated_inputs()
        where = rerun.validate_replace_where(self.replace_where)
        hook, table = self.catalog_hook, self.ident.dotted
        identity = rerun.RunIdentity.from_context(context)
        # SQL statements through Spark Connect commit without the run's stamps: the ledger decides
        stamped = self.application is not None or self.spark_hook.execution_mode != "spark_connect"
        tbl, plan, check_ms = plan_rerun_from_catalog(hook, table, identity, self.on_rerun, where, stamped=stamped)
        rerun.validate_replace_where(where, columns=tbl.schema().column_names)  # only the table's columns
        self.log.info("Re-run check (one catalog read + plan): %.1f ms -> %s. %s", check_ms, plan.action, plan.message)
        if plan.action in ("refuse", "skip"):
            stop_for_rerun(self, context, tbl, branch, plan, "wap_write")
        self._refuse_replace_by_files_on_v3(tbl, plan)  # before the reset: nothing changes
        # the table loaded by the re-run check serves every step up to the job; it is loaded again only
        # after a commit whose result a later step needs (the property commit, the reset before a
        # replacement's compare-and-swap, the job's commit)
        tbl, _ = ensure_wap_enabled(hook, tbl, table)
        main_before, existing = hook.ref_snapshot_id(tbl, MAIN_BRANCH), hook.refs(tbl).get(branch)
        requested = params.snapshot_id(self.base_snapshot_id, "base_snapshot_id")
        by_id = snapshots_by_id(hook, tbl)
        base = write_base(by_id, requested, existing.snapshot_id if existing else None, main_before)
        reset_from = self._reset_to_base(tbl, branch, existing, base, by_id, context=context)
        replaced, replace_tbl = (
            self._replace_files(branch, base, plan, identity) if plan.action == "replace" else ({}, None)
        )
        job_run_id = uuid.uuid4().hex  # on every commit of the job: an application's durable witness
        props = rerun.summary_properties(identity, job_run_id=job_run_id)
        rerun_info = {"action": plan.action, "method": plan.method, "check_ms": round(check_ms, 1), **replaced}
        # what a retry that takes this job's result needs to verify, record and report it (durable jobs)
        before = {"branch": branch, "base": base, "main_before": main_before, "reset_from": reset_from}
        run, row = self._submit(
            context,
            branch,
            base,
            statements,
            props,
            plan,
            identity,
            replace_tbl,
            resume={**before, "rerun": rerun_info, "interval": plan.interval_key},
            index=index_upkeep(tbl.metadata.properties, table, self.log) if statements is not None else {},
        )
        head, metrics = self._verified_change(branch, base, main_before, row)
        self._record(context, branch, base, head, metrics, run, plan.interval_key)
        return self._result(branch, base, head, reset_from, run, rerun_info, metrics)

    def _result(
        self,
        branch: str,
        base: int | None,
        head: int,
        reset_from: int | None,
        run: Any,
        rerun_info: dict[str, Any],
        metrics: dict[str, Any],
    ) -> dict[str, Any]:
        result = {
            "table": self.ident.dotted,
            "branch": branch,
            "base_snapshot_id": base,
            "snapshot_id": head,
            "reset_from_snapshot_id": reset_from,
            "job_run_id": run.job_run_id,
            "seconds": round(run.seconds, 3),
            "rerun": rerun_info,
            **metrics,
        }
        self.log.info("Verified WAP write on %s@%s: %s", self.ident.dotted, branch, result)
        return with_string_ids(result)

    def _refuse_replace_by_files_on_v3(self, tbl: Table, plan: rerun.RerunPlan) -> None:
        """pyiceberg writes no format-version 3 manifests (whatever the catalog): a replacement by data files
        cannot be committed there; one by ``replace_where`` runs in the write job."""
        if plan.action == "replace" and plan.method == "files":
            self.catalog_hook.refuse_uncommittable(
                tbl, change="on_rerun='replace' by data files", what=WRITES_MANIFESTS
            )

    def _replace_files(
        self, branch: str, base: int | None, plan: rerun.RerunPlan, identity: rerun.RunIdentity
    ) -> tuple[dict[str, Any], Table]:
        """Check the branch holds the earlier publish; remove its files now (``files``) or list them for the job.

        Loads the table (after the reset's commit, before the removal's compare-and-swap commit);
        returns it with the result so the job's file list is read from the same load.
        """
        hook, table = self.catalog_hook, self.ident.dotted
        tbl = hook.load_table(table)
        earlier = plan.earlier
        published = earlier.published_snapshot_id if earlier else None
        if base is None or published is None or not hook.is_ancestor(tbl, published, base):
            raise IcebergRefusedError(
                f"{plan.message} But branch {branch!r} was cut at {base}, before that publish reached main, so the "
                "replacement cannot be applied to it. Nothing was changed. Clear the whole DAG run so the branch is "
                "cut again from main."
            )
        if plan.method != "files":
            return {}, tbl  # the job checks and deletes the predicate's rows
        props = rerun.summary_properties(identity, replaces=published)
        removed = hook.remove_files_on_branch(tbl, branch, plan.remove_snapshot_ids, props)
        self.log.info("Replace: removed %s from %s@%s (earlier publish %s)", removed, table, branch, published)
        return {"replaced_files": removed["files"], "replaced_rows": removed["rows"]}, tbl

    def _submit(
        self,
        context: Context,
        branch: str,
        base: int | None,
        statements: list[str] | None,
        props: dict[str, str],
        plan: rerun.RerunPlan,
        identity: rerun.RunIdentity,
        replace_tbl: Table | None = None,
        resume: dict[str, Any] | None = None,
        index: Mapping[str, Any] | None = None,
    ) -> tuple[Any, dict[str, Any] | None]:
        """Submit the write; the job run and, for SQL statements, its ledger row (``None`` for an application)."""
        # the job runs under the id its commits are stamped with
        spec = self.job_spec(
            context, "wap_write", ref=branch, base_snapshot_id=base, job_run_id=props[rerun.KEY_JOB_RUN]
        )
        conf = wap_write_conf(branch, self.spark_conf)
        self.log.info("Writing to %s@%s (base %s)", self.ident.dotted, branch, base)
        if statements is None:
            spec.update(params=self.params_for_job or {}, snapshot_properties=props)
            return self.run_application(
                context,
                str(self.application),
                spec,
                ref=branch,
                base=base,
                extra_conf=conf,
                name=f"airflow-{self.task_id}",
                resume=resume,
            ), None
        spec.update(statements=statements, sql_args=self.sql_args or {}, commit_properties=props, **dict(index or {}))
        if plan.method == "predicate":
            replaces = plan.earlier.published_snapshot_id if plan.earlier else None
            spec["replace"] = {
                "where": plan.replace_where,
                "expected_rows": plan.expected_rows,
                "files": self._replace_files_for_job(plan, replace_tbl),
                "properties": rerun.summary_properties(identity, replaces=replaces),
            }
        try:
            return self.run_spark_job(context, "wap_write", spec, extra_conf=conf, resume=resume)
        except IcebergSparkJobError as err:
            if "ReplaceRefused" in str(err):
                raise IcebergRefusedError(f"on_rerun='replace' refused before any write: {err}") from err
            raise

    def _replace_files_for_job(self, plan: rerun.RerunPlan, tbl: Table | None = None) -> list[str]:
        """Paths of the data files the earlier publish added (read-only: ``tbl`` as loaded by the replace check)."""
        tbl = self.catalog_hook.load_table(self.ident.dotted) if tbl is None else tbl
        return [f.file_path for f in self.catalog_hook.files_added_by(tbl, plan.remove_snapshot_ids)]

    def _verified_change(
        self, branch: str, base: int | None, main_before: int | None, row: Mapping[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        """The branch head the write produced (checked through the catalog) and its change metrics
        (with the subject index's update from the job's ledger ``row`` and the branch's lag, when the
        table declares the index).

        One load after the job's commit serves the check of ``main``, the commit verification and
        the metrics.
        """
        hook, table = self.catalog_hook, self.ident.dotted
        tbl = hook.load_table(table)
        main_after = hook.ref_snapshot_id(tbl, MAIN_BRANCH)
        if main_after != main_before:
            self.log.warning(
                "main of %s moved from %s to %s during the write (another writer?)", table, main_before, main_after
            )
        try:
            head = self.verify_new_commit(
                ref=branch, before_snapshot_id=base, operations=self.expected_operations, tbl=tbl
            )
        except (IcebergCommitVerificationError, IcebergRefNotFoundError) as err:
            hint = (
                f" main moved from {main_before} to {main_after} meanwhile: did the job write to main explicitly "
                "(e.g. a `branch_main` identifier)?"
                if main_after != main_before
                else ""
            )
            raise IcebergCommitVerificationError(f"{err}{hint}") from err
        snaps = branch_snapshots(hook, tbl, head.snapshot_id, base)
        unstamped = [s.snapshot_id for s in snaps if rerun.KEY_INTERVAL not in s.summary]
        if unstamped:
            self.log.warning(
                "Snapshots %s on %s@%s carry no airflow.wap-interval summary property (an application that did not "
                "apply spec['snapshot_properties']?): re-runs of this interval are then found through the ledger only.",
                unstamped[:5],
                table,
                branch,
            )
        metrics: dict[str, Any] = dict(rerun.change_metrics(snaps))
        if str(tbl.metadata.properties.get(INDEX_PROPERTY, "false")) == "true":  # declared: report its lag
            metrics["subject_index_lag"] = subject_index_lag(tbl, branch)
        return head.snapshot_id, {**metrics, **self._index_outcome(row, metrics)}

    def _index_outcome(self, row: Mapping[str, Any] | None, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """The write job's subject index update (from its ledger row), logged with the branch's lag."""
        outcome = (row or {}).get("metrics", {}).get("subject_index") if row else None
        if "subject_index_lag" not in metrics:
            return {}
        lag = metrics["subject_index_lag"]
        if lag != 0:
            self.log.warning(
                "The subject index of %s lags %s data file(s) behind the branch head (%s); the next erasure probes "
                "them directly and the maintenance plan refreshes the index.",
                self.ident.dotted,
                "every" if lag is None else lag,
                (outcome or {}).get("reason", "an application write is an outside writer"),
            )
        else:
            self.log.info("Subject index of %s updated for the branch head: %s", self.ident.dotted, outcome)
        return {"subject_index": dict(outcome or {})}

    def _record(
        self,
        context: Context,
        branch: str,
        base: int | None,
        head: int,
        metrics: dict[str, Any],
        run: Any,
        interval: str | None,
    ) -> None:
        """Ledger row of an application write, once (a SQL write's job wrote its own row)."""
        if self.sql is None:
            self.record_application_write(
                context,
                run,
                operation="wap_write",
                ref=branch,
                before=base,
                after=head,
                metrics=metrics,
                details={"wap_interval": interval},
            )

    def _reset_to_base(
        self,
        tbl: Table,
        branch: str,
        existing: Any,
        base: int | None,
        by_id: dict[int, Any] | None = None,
        *,
        context: Context | None = None,
    ) -> int | None:
        """Discard an earlier try's commits on the branch (``_wap_refs.plan_branch_reset``); the old head or ``None``.

        :param by_id: ``tbl``'s snapshots by id, when the caller already built them.
        """
        hook, table = self.catalog_hook, self.ident.dotted
        by_id = snapshots_by_id(hook, tbl) if by_id is None else by_id
        changes = plan_branch_reset(table, branch, existing, base, by_id)
        if existing is not None and changes:
            self.log.warning(
                "Branch %s of %s carries commits of an earlier try (%s beyond base %s); resetting it to the base so "
                "the retried write does not duplicate rows",
                branch,
                table,
                existing.snapshot_id,
                base,
            )
        commit_ref_changes(self, context, tbl, changes, "wap_branch_reset")
        return existing.snapshot_id if existing is not None and changes else None


__all__ = ["IcebergWapWriteOperator", "plan_rerun_from_catalog"]
