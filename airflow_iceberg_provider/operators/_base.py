"""Shared operator plumbing: lazy hooks, Spark job submission and commit verification.

Concrete operators stay thin: validate rendered arguments, call one or two hook
methods (or :meth:`IcebergSparkBaseOperator.run_spark_job`), verify, return a
small XCom-safe dict.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_iceberg_provider import params
from airflow_iceberg_provider.config import airflow_flag
from airflow_iceberg_provider.core.governance import airflow_identity, decode_ledger_row
from airflow_iceberg_provider.exceptions import IcebergCommitVerificationError, IcebergSparkJobError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook, JobRun, SubmitPlan
from airflow_iceberg_provider.models import SnapshotInfo
from airflow_iceberg_provider.params import TableIdent, validate_table
from airflow_iceberg_provider.rules.durable_jobs import STATE_KEY, Decision, JobRecord, Liveness, decide

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table


#: Longest pause, in seconds, between two looks for the verdict of a job running on another host.
AWAIT_POLL_SECONDS = 10.0
#: Seconds between two looks of the trigger a deferred durable task waits on.
DEFER_POLL_SECONDS = 5.0

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


@dataclass(frozen=True)
class ResumedJob:
    """The finished job of an earlier try of this task, whose result this try takes."""

    record: JobRecord
    run: JobRun
    #: the job's own ledger row (decoded); empty for an application taken from its commit (it wrote none)
    row: dict[str, Any]

    @property
    def resume(self) -> dict[str, Any]:
        """What the operator stored before the job, to verify and report it."""
        return self.record.resume


class IcebergBaseOperator(BaseOperator):
    """
    Base for operators acting on one Iceberg table.

    :param table: ``namespace.table`` (templated).
    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection id (templated).
    :param governance_namespace: namespace of the governance tables (default from the connection).
    """

    template_fields: Sequence[str] = ("table", "iceberg_catalog_conn_id")
    #: Whether the operator may act on a governance table. Only health checks and maintenance
    #: may (they keep every row, and so every chain link); every other operator refuses one.
    acts_on_governance_tables: ClassVar[bool] = False

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
        """Check the rendered arguments (:meth:`check_arguments`) before ``execute()``, and refuse
        a governance table unless the operator keeps every row (:attr:`acts_on_governance_tables`)."""
        super().pre_execute(context)
        self.check_arguments()
        self.refuse_governance_table()

    def refuse_governance_table(self) -> None:
        """Refuse, before anything runs, an operator that could change rows of a governance table.

        :raises IcebergRefusedError: ``table`` names a governance table and the operator is not a
            health check or maintenance operator.
        """
        from airflow_iceberg_provider.core.governance import is_governance_table
        from airflow_iceberg_provider.exceptions import IcebergRefusedError

        if self.acts_on_governance_tables or not isinstance(self.table, str):
            return
        namespace = self.catalog_hook.governance_namespace
        if is_governance_table(self.ident.dotted, namespace):
            raise IcebergRefusedError(
                f"table={self.table!r} is a governance table: its rows are written only by the provider's "
                f"chained ledger writer, and {type(self).__name__} could change or remove them. Pick a data "
                f"table; health checks and maintenance are the operators that may act on {namespace}.* tables."
            )

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
        snapshot id from the catalog (see :mod:`airflow_iceberg_provider.assets.lineage`).
        """
        from airflow.providers.openlineage.extractors import OperatorLineage

        from airflow_iceberg_provider.assets.lineage import table_dataset

        inputs, outputs = self.openlineage_tables()
        return OperatorLineage(
            inputs=[table_dataset(self.catalog_hook, t) for t in inputs],
            outputs=[table_dataset(self.catalog_hook, t, output=True) for t in outputs],
        )

    def emit_asset_events(self, context: Context | None, *, snapshot_id: int | None, **extra: Any) -> list[str]:
        """Put ``{"table", "catalog", "snapshot_id", **extra}`` on this task's Asset outlets naming its table."""
        from airflow_iceberg_provider.assets.uris import emit_table_asset_events

        return emit_table_asset_events(
            self.outlets,
            context,
            table=self.ident.dotted,
            catalog=self.catalog_hook.catalog_name,
            snapshot_id=snapshot_id,
            **extra,
        )

    def checkpoint_governance(self, context: Any) -> None:
        """Write a (signed) checkpoint of every governance chain this task appended to.

        A failure is logged, not raised: the task's commit and its rows stand, and the next
        checkpoint of the table covers them.
        """
        if "catalog_hook" not in self.__dict__:  # the task never touched the catalog
            return
        try:
            self.catalog_hook.governance.checkpoint(context)
        except Exception as err:  # any failure: the task's commit stands, the next checkpoint covers it
            self.log.warning("Governance checkpoint not written: %s", err)

    def post_execute(self, context: Any, result: Any = None) -> None:
        """Fill the Asset events of outlets naming this table that ``execute`` left without ``extra``.

        The current ``main`` snapshot id goes into ``extra`` so consumers know which commit to
        read. Nothing is read when the task has no Asset outlet.
        """
        super().post_execute(context, result)
        self.checkpoint_governance(context)
        from airflow.sdk import Asset

        from airflow_iceberg_provider.assets.uris import asset_names_table, emit_table_asset_events

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


def _max_tries(context: Any) -> int | None:
    ti = context.get("ti") if context is not None and hasattr(context, "get") else None
    value = getattr(ti, "max_tries", None)
    return value if isinstance(value, int) else None


def _when(value: str | None) -> datetime:
    try:
        return datetime.fromisoformat(value) if value else datetime.now(UTC)
    except ValueError:
        return datetime.now(UTC)


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
    :param durable: on operators that support it (:attr:`supports_durable_jobs`: WAP write, SQL or
        application, the maintenance operators and their erasure purge), run the Spark job detached
        from the task process and record it in ``task_state_store``, so that a retry after the task
        process died reconnects to the job, or takes its committed result, instead of starting a
        second one (:mod:`airflow_iceberg_provider.rules.durable_jobs`). ``False``: the job dies with the
        task process (the behaviour without ``task_state_store``, e.g. outside a scheduler, and with
        a spark-submit connection in cluster deploy mode).
    :param deferrable: on a durable run, hand the wait for the started job to the triggerer instead
        of following its log in a worker slot (:class:`~airflow_iceberg_provider.triggers.spark_job.IcebergSparkJobTrigger`,
        whose state is the job record); when the job has its verdict the task resumes as a retry
        that takes the job's result would. Default ``[operators] default_deferrable``. A run that is
        not durable waits in the worker, with an info line saying why.
    """

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, "spark_conn_id", "spark_conf")
    #: whether ``execute()`` resumes an earlier try's job (:meth:`resume_spark_job`) before planning
    supports_durable_jobs: ClassVar[bool] = False

    def __init__(
        self,
        *,
        spark_conn_id: str = IcebergSparkHook.default_conn_name,
        jars: Sequence[str] | str | None = None,
        packages: Sequence[str] | str | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        driver_memory: str | None = None,
        executor_memory: str | None = None,
        durable: bool = True,
        deferrable: bool = airflow_flag("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spark_conn_id = spark_conn_id
        self.jars = jars
        self.packages = packages
        self.spark_conf = spark_conf
        self.driver_memory = driver_memory
        self.executor_memory = executor_memory
        self.durable = durable
        self.deferrable = deferrable

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
        (``iceberg_job_runtime.run_job`` does, under the same job run id) or an earlier try of this
        task recorded it: one row per job run id. ``True`` if written."""
        hook = self.catalog_hook
        if hook.governance.read("ledger", event_id=run.job_run_id):
            self._seal_job("application", run.job_run_id)  # the application's own row, under the chain
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
        resume: Mapping[str, Any] | None = None,
    ) -> tuple[JobRun, dict[str, Any]]:
        """Submit a registered built-in job, then read the ledger row it wrote; fail clearly if there is none.

        :param job: a registered built-in job (``hooks.spark.SPARK_JOBS``: the hook knows its entry
            script and what it ships).
        :param resume: JSON-safe values the operator needs after the job (its before-state): a
            durable job stores them with its record, and :meth:`resume_spark_job` hands them back
            to a retry that takes the job's result.
        :return: the job run and its ledger row (``metrics``/``details`` decoded).
        """
        hook = self.spark_hook
        spec = {**spec, "job_run_id": spec.get("job_run_id") or uuid.uuid4().hex}
        store = self._durable_store(context)
        try:
            plan = hook.job_plan(job, spec, extra_conf=extra_conf, name=f"airflow-iceberg-{job}")
            run = self._run_durable(context, store, plan, job, resume) if store is not None else hook.submit(plan)
        except IcebergSparkJobError as err:
            raise self._named_job_failure(job, spec["job_run_id"], err) from err
        return run, self._job_row(job, run)

    def run_application(
        self,
        context: Context | None,
        application: str,
        spec: Mapping[str, Any],
        *,
        ref: str,
        base: int | None,
        extra_conf: Mapping[str, Any] | None = None,
        name: str | None = None,
        resume: Mapping[str, Any] | None = None,
    ) -> JobRun:
        """Submit a user's PySpark application that commits to ``ref`` of this operator's table.

        The application writes no ledger row of its own (unless it runs under
        ``iceberg_job_runtime.run_job``); the operator records its write afterwards
        (:meth:`record_application_write`). Durable like a built-in job (:meth:`resume_spark_job`),
        with its commit as the witness a retry asks for: a snapshot on ``ref`` beyond ``base`` whose
        summary carries ``spec["job_run_id"]`` (``airflow.job-run-id``, which the operator puts in
        the ``snapshot_properties`` the application applies).

        :param spec: the application's spec, with ``job_run_id`` set.
        :param resume: as for :meth:`run_spark_job`.
        """
        hook = self.spark_hook
        plan = hook.plan(application, spec=spec, extra_conf=extra_conf, name=name)
        store = self._durable_store(context)
        if store is None:
            return hook.submit(plan)
        return self._run_durable(context, store, plan, str(spec.get("job") or "application"), resume, (ref, base))

    # ------------------------------------------------------------ durable jobs
    def _durable_store(self, context: Context | None) -> Any:
        """The task's ``task_state_store`` when this run is durable, else ``None``."""
        if not (self.supports_durable_jobs and self.durable) or context is None or not hasattr(context, "get"):
            return None
        store = context.get("task_state_store")
        if store is not None and not self.spark_hook.can_detach():
            self.log.info("Cluster deploy mode: the Spark job runs with the task (not durable)")
            return None
        return store

    def _defers(self, store: Any) -> bool:
        """Whether this run hands the wait for its job to the triggerer (``deferrable`` and durable).

        A deferred task's state is its job record: without one (``durable=False``, no
        ``task_state_store``, an operator that runs no durable job, cluster deploy mode) the task
        waits for its job in the worker, and says why.
        """
        if not params.flag(self.deferrable, "deferrable"):
            return False
        if store is None:
            self.log.info(
                "deferrable=True, but this run's Spark job is not durable (%s): it waits in the worker, since a "
                "deferred task's only state is the durable job record",
                "durable=False"
                if not self.durable
                else "no task_state_store"
                if self.supports_durable_jobs
                else f"{type(self).__name__} runs no durable job",
            )
            return False
        return True

    def _defer_to_job(self, context: Context | None, record: JobRecord, *, remote: bool = False) -> None:
        """Defer to :class:`~airflow_iceberg_provider.triggers.spark_job.IcebergSparkJobTrigger` on ``record``.

        The deadline is the task's ``execution_timeout`` (from the try's start), for a Spark Connect job
        also the connection's timeout (from the job's start), for a job on another host
        ``[iceberg_provider] durable_remote_wait_seconds``.
        """
        from airflow_iceberg_provider.triggers.spark_job import IcebergSparkJobTrigger

        limits: list[float] = []
        if self.execution_timeout is not None:
            ti = context.get("ti") if context is not None and hasattr(context, "get") else None
            start = getattr(ti, "start_date", None)
            begun = start.timestamp() if isinstance(start, datetime) else time.time()
            limits.append(begun + self.execution_timeout.total_seconds())
        job_limit = self.spark_hook.detached_time_limit(record)
        if job_limit is not None:
            limits.append(_when(record.started_at).timestamp() + job_limit)
        if remote:
            from airflow_iceberg_provider.config import int_setting

            limits.append(time.time() + int_setting("durable_remote_wait_seconds", 6 * 3600, minimum=1))
        self.log.info(
            "Deferring: the triggerer waits for Spark job %s (job_run_id=%s, pid %s on %s); its log: %s",
            record.job,
            record.job_run_id,
            record.pid,
            record.host,
            record.log_path,
        )
        self.defer(
            trigger=IcebergSparkJobTrigger(
                record=record.to_json(),
                table=self.ident.dotted,
                iceberg_catalog_conn_id=self.iceberg_catalog_conn_id,
                governance_namespace=self.governance_namespace,
                poll_interval=DEFER_POLL_SECONDS,
                timeout_at=min(limits) if limits else None,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> Any:
        """Resume after the deferred job's trigger fired: copy the job's log tail into the task log, then
        take its result through ``execute()``, exactly as a retry that finds the job finished does.

        A job that failed, died without a verdict or ran past its deadline fails the task (retryably:
        the retry starts a new job, as :func:`~airflow_iceberg_provider.rules.durable_jobs.decide` says).
        """
        from airflow_iceberg_provider.triggers import spark_job as events

        event = dict(event or {})
        status = str(event.get("status"))
        store = context.get("task_state_store") if hasattr(context, "get") else None
        record = JobRecord.from_json(store.get(STATE_KEY)) if store is not None else None
        if record is None or record.job_run_id != event.get("job_run_id"):
            raise IcebergSparkJobError(
                f"The deferred Spark job {event.get('job_run_id')} is no longer this task's recorded job "
                f"({'none' if record is None else record.job_run_id}); the task was reset while it waited. "
                "Clear the task to run it again."
            )
        self.spark_hook.job_log_tail(record, lambda line: self.log.info("%s", line))
        if status == events.VERDICT:
            return self.execute(context)
        where = f"job_run_id={record.job_run_id}, pid {record.pid} on {record.host}, log {record.log_path}"
        if status == events.FAILED:
            raise self._named_job_failure(
                record.job, record.job_run_id, IcebergSparkJobError(f"Spark job {record.job!r} ({where}) failed")
            )
        if status == events.DIED:
            raise IcebergSparkJobError(
                f"Spark job {record.job!r} ({where}) ended without a ledger row"
                + ("" if record.commit_ref is None else f" or a commit on {record.commit_ref!r}")
                + " (killed before its verdict); the task's retry starts a new job."
            )
        if status == events.TIMEOUT:
            killed = bool(event.get("killed")) or self.spark_hook.terminate_detached(record)
            raise IcebergSparkJobError(
                f"Spark job {record.job!r} ({where}) had no verdict by the deadline (execution_timeout, the Spark "
                "Connect connection's timeout, or [iceberg_provider] durable_remote_wait_seconds for a job on "
                "another host); "
                + ("it was stopped" if killed else "it could not be stopped from here (stop it on its host)")
                + ". Raise the limit, or clear the task to run it again."
            )
        raise IcebergSparkJobError(
            f"The trigger waiting for Spark job {record.job!r} ({where}) failed: {event.get('message')}; the job "
            "itself was left running, and the task's retry reconnects to it."
        )

    def _run_durable(
        self,
        context: Context | None,
        store: Any,
        plan: SubmitPlan,
        job: str,
        resume: Mapping[str, Any] | None,
        commit: tuple[str, int | None] | None = None,
    ) -> JobRun:
        """Start the job detached, record it in ``task_state_store`` before waiting, wait for it.

        :param commit: an application's ``(ref, base)``: its commit there is the witness of its result.
        """
        hook = self.spark_hook
        record, handle = hook.start_detached(
            plan,
            job,
            resume=resume,
            max_tries=_max_tries(context),
            commit_ref=commit[0] if commit else None,
            commit_base=commit[1] if commit else None,
        )
        try:
            store.set(STATE_KEY, record.to_json())
        except BaseException:  # unrecorded, no retry could find it: it must not outlive this task
            hook.terminate_detached(record)
            hook.discard_detached(record)
            raise
        if self._defers(store):
            self._defer_to_job(context, record)
        return hook.wait_detached(record, handle)

    def resume_spark_job(self, context: Context | None) -> ResumedJob | None:
        """The finished job of an earlier try of this task, or ``None``: then plan and run a fresh job.

        Called first in ``execute()`` (before any planning or write): reconnects to the recorded job
        while it runs (its log follows in this task's log), takes its result when its ledger row says
        it finished (an application: when its commit is in the catalog), and returns ``None`` when
        there is no record, the job failed or died without a verdict, or the task was cleared since
        (:func:`airflow_iceberg_provider.rules.durable_jobs.decide`).
        """
        store = self._durable_store(context)
        if store is None:
            return None
        record = JobRecord.from_json(store.get(STATE_KEY))
        if record is None:
            return None
        hook = self.spark_hook
        alive = hook.detached_liveness(record)  # first: a job writes its row (makes its commit) before it exits
        status, committed = self._job_verdict(record)
        decision = decide(record, status, alive, max_tries=_max_tries(context), committed=committed)
        self.log.info(
            "Recorded durable Spark job: %s (job_run_id=%s, pid %s on %s): process %s, ledger row %s%s -> %s",
            record.job,
            record.job_run_id,
            record.pid,
            record.host,
            alive.value,
            status or "none",
            "" if record.commit_ref is None else f", commit on {record.commit_ref} {'found' if committed else 'none'}",
            decision.value,
        )
        if decision is Decision.FRESH:
            if not record.taken and alive is Liveness.ALIVE:  # a cleared task: the old job must not race the new
                self.log.warning("The task was cleared: stopping its earlier job %s first", record.job_run_id)
                hook.terminate_detached(record)
            hook.discard_detached(record)
            return None
        run: JobRun | None = None
        if decision in (Decision.RECONNECT, Decision.AWAIT_LEDGER) and self._defers(store):
            self._defer_to_job(context, record, remote=decision is Decision.AWAIT_LEDGER)
        if decision is Decision.RECONNECT:
            self.log.info("Reconnected to running Spark job %s; following its log", record.job_run_id)
            run = hook.wait_detached(record)
            status, committed = self._job_verdict(record)
            decision = decide(record, status, Liveness.GONE, committed=committed)
        elif decision is Decision.AWAIT_LEDGER:
            status, committed = self._await_verdict(record)
            decision = decide(record, status, Liveness.OTHER_HOST, committed=committed)
        if decision is not Decision.TAKE_RESULT:
            verdict = "a ledger row" if record.commit_ref is None else "a ledger row or a commit"
            self.log.warning(
                "Spark job %s of an earlier try %s; starting a new job",
                record.job_run_id,
                "failed" if status == "failed" else f"ended without {verdict} (killed before its verdict)",
            )
            hook.terminate_detached(record)  # a failed job still on its way out must not race the new one
            hook.discard_detached(record)
            return None
        hook.discard_detached(record)
        self.log.info("Recorded Spark job %s finished (%s): taking its result, no new job", record.job_run_id, status)
        if run is None:
            run = JobRun(record.job_run_id, f"airflow-iceberg-{record.job}", _when(record.started_at), _when(None))
        return ResumedJob(record, run, self._job_row(record.job, run) if status is not None else {})

    def durable_job_taken(self, context: Context | None) -> None:
        """Mark the recorded job's result as taken (a cleared task then starts a fresh job)."""
        store = self._durable_store(context)
        if store is None:
            return
        try:
            record = JobRecord.from_json(store.get(STATE_KEY))
            if record is not None and not record.taken:
                store.set(STATE_KEY, record.as_taken().to_json())
        except Exception as err:  # the task succeeded; the record is bookkeeping
            self.log.warning("Could not mark the durable job record as taken: %s", err)

    def post_execute(self, context: Any, result: Any = None) -> None:
        super().post_execute(context, result)
        self.durable_job_taken(context)

    def _job_verdict(self, record: JobRecord) -> tuple[str | None, bool]:
        """The job's ledger status (``None``: no row) and, for an application, whether its commit is in the catalog."""
        return self.catalog_hook.job_verdict(self.ident, record)

    def _await_verdict(self, record: JobRecord) -> tuple[str | None, bool]:
        """A job on another host: wait for its ledger row or, for an application, its commit (never start a
        second job beside it)."""
        from airflow_iceberg_provider.config import int_setting

        limit = int_setting("durable_remote_wait_seconds", 6 * 3600, minimum=1)
        deadline, pause = time.monotonic() + limit, 1.0
        while True:
            status, committed = self._job_verdict(record)
            if status is not None or committed:
                return status, committed
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(pause, left))
            pause = min(pause * 2, AWAIT_POLL_SECONDS)
        witness = "no ledger row" + ("" if record.commit_ref is None else f" and no commit on {record.commit_ref!r}")
        raise IcebergSparkJobError(
            f"Spark job {record.job_run_id} was started by an earlier try on host {record.host!r} (pid {record.pid}) "
            f"and has left {witness} after waiting {limit}s ([iceberg_provider] durable_remote_wait_seconds); this "
            "host cannot see that process. Check it there (or raise durable_remote_wait_seconds), then clear the "
            "task to start a new job."
        )

    def _seal_job(self, job: str, job_run_id: str) -> None:
        """Bring the governance rows the Spark job wrote under the chain (``GovernanceStore.seal_job``).

        Logged, not raised, when it fails: the rows stand, and the verifier reports them as
        unsealed, which is what they are.
        """
        try:
            self.catalog_hook.governance.seal_job(job_run_id, job=job)
        except Exception as err:  # any failure: the rows stand and the verifier reports them unsealed
            self.log.warning("Governance rows of job %s not sealed: %s", job_run_id, err)

    def _job_row(self, job: str, run: JobRun) -> dict[str, Any]:
        """The job's own ledger row, decoded; fail when there is none or it records a failure."""
        self._seal_job(job, run.job_run_id)
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
        return row

    def _named_job_failure(self, job: str, job_run_id: str, err: Exception) -> IcebergSparkJobError:
        """The failure with its cause first: the job's own ``failed`` ledger row, when it could write one.

        spark-submit only says "Error code is: 1" followed by hundreds of log lines; the job
        runtime records the exception (redacted by jobs that handle personal data) in the
        ledger, so the task log and the retry e-mail name the cause (disk full, permission
        denied, commit conflict...). A job killed by a signal writes no row: the exit code says so.
        """
        self._seal_job(job, job_run_id)
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
