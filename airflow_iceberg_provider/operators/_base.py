"""Shared operator plumbing: lazy hooks, Spark job submission and commit verification.

Concrete operators stay thin: validate rendered arguments, call one or two hook
methods (or :meth:`IcebergSparkBaseOperator.run_spark_job`), verify, return a
small XCom-safe dict.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_iceberg_provider import params
from airflow_iceberg_provider._validation import TableIdent, validate_table
from airflow_iceberg_provider.core.governance import airflow_identity, decode_ledger_row
from airflow_iceberg_provider.exceptions import IcebergCommitVerificationError, IcebergSparkJobError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook, JobRun
from airflow_iceberg_provider.models import SnapshotInfo

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table


_JAVA_EXCEPTION = re.compile(r"(?:[a-z_]\w*\.)+[A-Z]\w*(?:Exception|Error)(?=: )")


def root_cause(error: str) -> str:
    """The innermost exception of a job's error text (``java.io.IOException: No space left on device``).

    Spark wraps the cause several times (``Py4JJavaError: An error occurred while calling o41.sql``,
    ``SparkException: Job aborted ... : FSError: java.io.IOException: ...``): take the last
    ``Caused by:`` line, else the first line naming a Java exception, and within it the last
    exception; a Python error keeps its first line.
    """
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if not lines:
        return error
    caused = [line for line in lines if line.startswith("Caused by: ")]
    line = (
        caused[-1].removeprefix("Caused by: ")
        if caused
        else next((line for line in lines if _JAVA_EXCEPTION.search(line)), lines[0])
    )
    matches = list(_JAVA_EXCEPTION.finditer(line))
    return line[matches[-1].start() :] if matches else line


class IcebergBaseOperator(BaseOperator):
    """
    Base for operators acting on one Iceberg table.

    :param table: ``namespace.table`` (templated).
    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection id (templated).
    :param governance_namespace: namespace of the governance tables (default from the connection).
    """

    template_fields: Sequence[str] = ("table", "iceberg_catalog_conn_id")

    def __init__(
        self,
        *,
        table: str,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        governance_namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.governance_namespace = governance_namespace

    def check_arguments(self) -> None:
        """Refuse bad arguments, naming the parameter, the problem and the fix.

        Concrete operators call it at the end of ``__init__``, where values that are still
        templated (Jinja, ``XComArg``: :func:`params.is_templated`) are skipped, so static
        mistakes fail when the DAG is parsed; :meth:`pre_execute` calls it again on the
        rendered values. Subclasses extend it and call ``super().check_arguments()``.
        """
        if not params.is_templated(self.table):
            validate_table(self.table)

    def pre_execute(self, context: Any) -> None:
        """Check the rendered arguments (:meth:`check_arguments`) before ``execute()``."""
        super().pre_execute(context)
        self.check_arguments()

    @cached_property
    def catalog_hook(self) -> IcebergCatalogHook:
        return IcebergCatalogHook(self.iceberg_catalog_conn_id, governance_namespace=self.governance_namespace)

    @property
    def ident(self) -> TableIdent:
        return validate_table(self.table)

    # ------------------------------------------------- lineage and assets
    def openlineage_tables(self) -> tuple[Sequence[str], Sequence[str]]:
        """``(inputs, outputs)`` as ``namespace.table`` names for OpenLineage.

        Default: the operator changes ``self.table`` (an output). Operators that only read
        a table, or touch more than one, override this.
        """
        return [], [self.ident.dotted]

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage datasets of the tables this task read/wrote, named like the Spark listener names them.

        Identity = the table location (joins with ``openlineage-spark`` events for the same table),
        a ``symlinks`` facet ``iceberg://<catalog>`` / ``<ns>.<table>``, the schema and the current
        snapshot id from the catalog (see :mod:`airflow_iceberg_provider.lineage`).
        """
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_iceberg_provider.lineage import table_dataset

        inputs, outputs = self.openlineage_tables()
        return OperatorLineage(
            inputs=[table_dataset(self.catalog_hook, t) for t in inputs],
            outputs=[table_dataset(self.catalog_hook, t, output=True) for t in outputs],
        )

    def emit_asset_events(self, context: Context | None, *, snapshot_id: int | None, **extra: Any) -> list[str]:
        """Put ``{"table", "catalog", "snapshot_id", **extra}`` on this task's Asset outlets naming its table."""
        from airflow_iceberg_provider.assets import emit_table_asset_events

        return emit_table_asset_events(
            self.outlets,
            context,
            table=self.ident.dotted,
            catalog=self.catalog_hook.catalog_name,
            snapshot_id=snapshot_id,
            **extra,
        )

    def post_execute(self, context: Any, result: Any = None) -> None:
        """Fill the Asset events of outlets naming this table that ``execute`` left without ``extra``.

        The current ``main`` snapshot id goes into ``extra`` so consumers know which commit to
        read. Nothing is read when the task has no Asset outlet.
        """
        super().post_execute(context, result)
        from airflow.sdk import Asset

        from airflow_iceberg_provider.assets import asset_names_table, emit_table_asset_events

        events = context.get("outlet_events") if hasattr(context, "get") else None
        assets = [o for o in (self.outlets or []) if isinstance(o, Asset)]
        if events is None or not assets:
            return
        table, catalog = self.ident.dotted, self.catalog_hook.catalog_name
        if all(events[a].extra or not asset_names_table(a.uri, table, catalog) for a in assets):
            return
        try:
            snapshot_id = self.catalog_hook.ref_snapshot_id(self.ident)
        except Exception as err:  # the task succeeded; an unreadable table must not fail it now
            self.log.warning("Asset events for %s carry no snapshot id: %s", table, err)
            snapshot_id = None
        emit_table_asset_events(
            self.outlets,
            context,
            table=self.ident.dotted,
            catalog=self.catalog_hook.catalog_name,
            snapshot_id=snapshot_id,
            overwrite=False,
            task_id=self.task_id,
        )


class IcebergSparkBaseOperator(IcebergBaseOperator):
    """
    Base for operators that run a Spark job and then verify it through the catalog.

    :param spark_conn_id: the Spark provider's connection (master, deploy mode) (templated).
    :param jars: local jars for the Iceberg runtime (default: ``[iceberg_provider] spark_jars``).
    :param packages: Maven coordinates (default: ``[iceberg_provider] spark_packages`` or the
        Iceberg Spark runtime).
    :param spark_conf: extra Spark configuration (public; never put secrets here) (templated).
    :param driver_memory: e.g. ``"2g"``.
    :param executor_memory: e.g. ``"4g"``.
    """

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, "spark_conn_id", "spark_conf")

    def __init__(
        self,
        *,
        spark_conn_id: str = IcebergSparkHook.default_conn_name,
        jars: Sequence[str] | str | None = None,
        packages: Sequence[str] | str | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        driver_memory: str | None = None,
        executor_memory: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self.jars = jars
        self.packages = packages
        self.spark_conf = spark_conf
        self.driver_memory = driver_memory
        self.executor_memory = executor_memory

    @cached_property
    def spark_hook(self) -> IcebergSparkHook:
        return IcebergSparkHook(
            self.iceberg_catalog_conn_id,
            self.spark_conn_id,
            jars=self.jars,
            packages=self.packages,
            conf=dict(self.spark_conf or {}),
            driver_memory=self.driver_memory,
            executor_memory=self.executor_memory,
            catalog_hook=self.catalog_hook,
        )

    def job_spec(self, context: Context | None, operation: str, **params: Any) -> dict[str, Any]:
        """Common spec fields: operation, table, Airflow identity."""
        return {
            "job": operation,
            "operation": operation,
            "table": self.ident.dotted,
            "airflow": airflow_identity(context),
            **params,
        }

    def record_application_write(
        self,
        context: Context,
        run: JobRun,
        *,
        operation: str,
        ref: str,
        before: int | None,
        after: int,
        metrics: Mapping[str, Any],
        details: Mapping[str, Any],
    ) -> bool:
        """The ledger row of a user application's commit, unless the application wrote its own
        (``iceberg_job_runtime.run_job`` does, under the same job run id). ``True`` if written."""
        hook = self.catalog_hook
        if hook.governance.read("ledger", event_id=run.job_run_id):
            return False
        hook.governance.record_ledger(
            operation=operation,
            table=self.ident.dotted,
            ref=ref,
            status="succeeded",
            context=context,
            snapshot_before=before,
            snapshot_after=after,
            metrics=dict(metrics),
            details={"application": str(getattr(self, "application", None)), **details},
            started_at=run.started_at,
            event_id=run.job_run_id,
        )
        return True

    def run_spark_job(
        self,
        context: Context | None,
        job: str,
        spec: Mapping[str, Any],
        *,
        extra_conf: Mapping[str, Any] | None = None,
        application: str | None = None,
    ) -> tuple[JobRun, dict[str, Any]]:
        """Submit a job, then read the ledger row it wrote; fail clearly if there is none.

        :param job: a registered built-in job (``hooks.spark.SPARK_JOBS``: the hook knows its entry
            script and what it ships) unless ``application`` is given.
        :return: the job run and its ledger row (``metrics``/``details`` decoded).
        """
        hook = self.spark_hook
        spec = {**spec, "job_run_id": spec.get("job_run_id") or uuid.uuid4().hex}
        try:
            if application is None:
                run = hook.run_job(job, spec, extra_conf=extra_conf, name=f"airflow-iceberg-{job}")
            else:
                run = hook.submit(hook.plan(application, spec=spec, extra_conf=extra_conf, name=job))
        except IcebergSparkJobError as err:
            raise self._named_job_failure(job, spec["job_run_id"], err) from err
        rows = self.catalog_hook.governance.read("ledger", event_id=run.job_run_id)
        if not rows:
            raise IcebergCommitVerificationError(
                f"Spark job {job!r} exited 0 after {run.seconds:.1f}s but wrote no ledger row "
                f"(event_id={run.job_run_id}) to {self.catalog_hook.governance_namespace}.ledger; its "
                "result cannot be verified, so the task fails. Check the job log above."
            )
        row = decode_ledger_row(rows[0])
        if row.get("status") == "failed":
            raise IcebergSparkJobError(f"Spark job {job!r} recorded failure: {row['details'].get('error')}")
        return run, row

    def _named_job_failure(self, job: str, job_run_id: str, err: Exception) -> IcebergSparkJobError:
        """The failure with its cause first: the job's own ``failed`` ledger row, when it could write one.

        spark-submit only says "Error code is: 1" followed by hundreds of log lines; the job
        runtime records the exception (redacted by jobs that handle personal data) in the
        ledger, so the task log and the retry e-mail name the cause (disk full, permission
        denied, commit conflict...). A job killed by a signal writes no row: the exit code says so.
        """
        try:
            rows = self.catalog_hook.governance.read("ledger", event_id=job_run_id)
        except Exception as read_err:  # the catalog may be what failed
            self.log.warning("Could not read the ledger row of failed job %s: %s", job_run_id, read_err)
            rows = []
        cause = None
        for row in rows:
            if row.get("status") == "failed":
                cause = decode_ledger_row(row)["details"].get("error")
        text = str(err)
        if cause is None and ("Error code is: -9" in text or "Error code is: 137" in text):
            cause = "spark-submit was killed (SIGKILL); nothing after its last commit happened"
        if cause is None and "Last spark-submit output:" in text:  # the job could not even record its failure
            tail = text.split("Last spark-submit output:", 1)[1]
            if _JAVA_EXCEPTION.search(tail) or "[iceberg-job] failed:" in tail:
                cause = tail.strip()
        if cause is None:
            return err if isinstance(err, IcebergSparkJobError) else IcebergSparkJobError(text)
        detail = text if cause in text else f"{cause}\n{text}"
        return IcebergSparkJobError(
            f"Spark job {job!r} (job_run_id={job_run_id}) failed: {root_cause(cause)}\n{detail}"
        )

    def verify_new_commit(
        self,
        *,
        ref: str,
        before_snapshot_id: int | None,
        operations: Iterable[str] | None = None,
        summary: Mapping[str, str] | None = None,
        tbl: Table | None = None,
    ) -> SnapshotInfo:
        """The newest snapshot committed on ``ref`` after ``before_snapshot_id``, checked.

        Fails with :class:`IcebergCommitVerificationError` when the ref did not
        advance, advanced to a snapshot that does not descend from the old head,
        or when no new snapshot has an accepted operation / summary.

        :param tbl: the table as loaded after the job's commit (default: loaded here).
        """
        hook = self.catalog_hook
        tbl = hook.load_table(self.ident) if tbl is None else tbl
        head = hook.ref_snapshot_id(tbl, ref)
        if head is None or head == before_snapshot_id:
            raise IcebergCommitVerificationError(
                f"The job finished but {self.ident} ref {ref!r} did not advance (still at "
                f"{before_snapshot_id}); nothing was committed. Check that the job writes to this table "
                "and ref."
            )
        if before_snapshot_id is not None and not hook.is_ancestor(tbl, before_snapshot_id, head):
            raise IcebergCommitVerificationError(
                f"{self.ident} ref {ref!r} moved from {before_snapshot_id} to {head}, which does not "
                "descend from it: another writer replaced the ref concurrently."
            )
        new = hook.find_snapshots(tbl, ref=ref, after_snapshot_id=before_snapshot_id, summary=summary)
        ops = set(operations or ())
        matching = [s for s in new if not ops or s.operation in ops]
        if not matching:
            seen = sorted({str(s.operation) for s in new})
            raise IcebergCommitVerificationError(
                f"{self.ident} ref {ref!r} advanced to {head} but no new snapshot has operation in "
                f"{sorted(ops)}" + (f" and summary {dict(summary)}" if summary else "") + f" (saw {seen})."
            )
        return matching[-1]

    def on_kill(self) -> None:
        if "spark_hook" in self.__dict__:
            self.spark_hook.on_kill()
