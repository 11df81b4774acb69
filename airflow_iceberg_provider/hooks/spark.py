"""``IcebergSparkHook``: submit one PySpark job with the catalog wired in.

The hook merges a :class:`~airflow_iceberg_provider.hooks.spark_plan.SubmitPlan` from its
connections (the rules are in :mod:`~airflow_iceberg_provider.hooks.spark_plan`) and hands it to
the runner its Spark connection picks (:mod:`~airflow_iceberg_provider.hooks.spark_runner`:
spark-submit through the Spark provider's ``SparkSubmitHook``, or a Spark Connect client). The
plan carries:

* the Spark catalog configuration derived from the *same* ``iceberg_catalog``
  connection the :class:`IcebergCatalogHook` uses (same catalog name);
* the Iceberg runtime: Maven ``packages`` (production default) or local ``jars``;
* the job protocol: a JSON *spec file* (0600, never argv values) and the whole
  ``spark_jobs`` package shipped as one zip with ``--py-files`` (built once per content by
  :func:`~airflow_iceberg_provider.hooks._job_package.job_package_zip`), so jobs import
  their siblings absolutely and user scripts keep ``from iceberg_job_runtime import run_job``;
* the job registry (:data:`SPARK_JOBS`): which built-in job runs which entry script with
  which extra jars, so operators name a job and never list files;
* the secret channel: catalog secrets go only into a 0600 ``--properties-file``
  (merged with the distribution's ``spark-defaults.conf``), never into argv,
  environment passed on argv, or logs.

When ``spark_conn_id`` names a ``spark_connect`` connection, the same plan runs as a
short-lived Spark Connect client of that server instead (:mod:`.spark_connect`): same job
file, same spec, the catalog conf set on the task's own session.

Results never come back through stdout: jobs commit to the lake and write a
ledger row, which the operator then reads through the catalog hook.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_iceberg_provider import __version__
from airflow_iceberg_provider.exceptions import IcebergSparkJobError
from airflow_iceberg_provider.hooks import _process
from airflow_iceberg_provider.hooks._job_package import job_package_zip
from airflow_iceberg_provider.hooks._storage_jars import with_storage_jars
from airflow_iceberg_provider.hooks._workdir import WORKDIR_PREFIX, create_workdir, sweep_stale_workdirs
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.hooks.spark_connect import (
    ConnectEndpoint,
    endpoint_from_connection,
    is_connect_connection,
)
from airflow_iceberg_provider.hooks.spark_plan import (
    CONFIG_SECTION,
    JOB_RUNTIME_MODULE,
    LOG4J_CONFIG,
    SPARK_JOBS,
    SPARK_REDACTION_REGEX,
    JobRun,
    SparkJob,
    SubmitPlan,
    _as_list,
    _config,
    _parse_time,
    conf_defaults,
    driver_java_options,
    java_options,
    java_properties_line,
    job_path,
    runtime_jars,
    spark_job,
    submit_conf,
)
from airflow_iceberg_provider.hooks.spark_runner import (
    MODE_CONNECT,
    MODE_SUBMIT,
    ConnectProcessRunner,
    JobHandle,
    SparkRunner,
    SparkSubmitRunner,
    SubmitTarget,
    mask_secrets,
    reattached_runner,
)
from airflow_iceberg_provider.rules.durable_jobs import JobRecord, Liveness


class IcebergSparkHook(BaseHook):
    """
    Submit PySpark jobs against an Iceberg catalog through ``spark-submit``.

    :param iceberg_catalog_conn_id: the ``iceberg_catalog`` connection (same as the catalog hook).
    :param spark_conn_id: the Spark provider's ``spark`` connection (master, deploy mode, binary).
    :param jars: local jars (offline runtime); default ``[iceberg_provider] spark_jars``.
    :param packages: Maven coordinates; default ``[iceberg_provider] spark_packages``, else the
        Iceberg Spark runtime when no jars are configured either.
    :param conf: extra Spark conf (public: it appears on the command line).
    :param env_vars: extra environment for spark-submit (client mode only, not for secrets).
    :param pyspark_python: Python for the driver/executors; default ``[iceberg_provider] pyspark_python``.
    :param driver_memory: the driver's memory, e.g. ``"2g"`` (default: the Spark connection's or Spark's).
    :param executor_memory: each executor's memory on a cluster, e.g. ``"4g"``.
    :param executor_cores: cores per executor on a cluster.
    :param num_executors: number of executors (YARN, Kubernetes).
    :param spark_binary: the submit command, ``spark-submit`` by default (as the Spark provider's).
    :param deploy_mode: ``"client"`` or ``"cluster"``; default the Spark connection's ``deploy-mode``
        extra, else client (a Spark standalone master runs Python applications in client mode only).
    :param verbose: pass ``--verbose`` to spark-submit.
    :param catalog_hook: an already built :class:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook`
        to reuse (its connection and loaded catalog); default one built from ``iceberg_catalog_conn_id``.
    """

    conn_name_attr = "spark_conn_id"
    default_conn_name = "spark_default"
    hook_name = "Iceberg Spark jobs"

    def __init__(
        self,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        spark_conn_id: str = default_conn_name,
        *,
        jars: Sequence[str] | str | None = None,
        packages: Sequence[str] | str | None = None,
        conf: Mapping[str, Any] | None = None,
        env_vars: Mapping[str, str] | None = None,
        pyspark_python: str | None = None,
        driver_memory: str | None = None,
        executor_memory: str | None = None,
        executor_cores: int | None = None,
        num_executors: int | None = None,
        spark_binary: str = "spark-submit",
        deploy_mode: str | None = None,
        verbose: bool = False,
        catalog_hook: IcebergCatalogHook | None = None,
    ) -> None:
        super().__init__()
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.spark_conn_id = spark_conn_id
        self._jars = _as_list(jars) if jars is not None else _as_list(_config("spark_jars"))
        self._packages = _as_list(packages) if packages is not None else _as_list(_config("spark_packages"))
        self.conf = {str(k): str(v) for k, v in (conf or {}).items()}
        self.env_vars = dict(env_vars or {})
        self.pyspark_python = pyspark_python or _config("pyspark_python")
        self.driver_memory = driver_memory
        self.executor_memory = executor_memory
        self.executor_cores = executor_cores
        self.num_executors = num_executors
        self.spark_binary = spark_binary
        self.deploy_mode = deploy_mode
        self.verbose = verbose
        self._catalog_hook = catalog_hook
        self._running: SparkRunner | None = None
        self._detached: JobHandle | None = None

    @cached_property
    def catalog_hook(self) -> IcebergCatalogHook:
        return self._catalog_hook or IcebergCatalogHook(self.iceberg_catalog_conn_id)

    # ------------------------------------------------------------- planning
    def plan(
        self,
        application: str | Path,
        *,
        spec: Mapping[str, Any] | None = None,
        extra_conf: Mapping[str, Any] | None = None,
        name: str | None = None,
        application_args: Sequence[str] = (),
        extra_py_files: Sequence[str | Path] = (),
        extra_jars: Sequence[str] = (),
        ship_package: bool = True,
    ) -> SubmitPlan:
        """Build the submission as data: conf split by sensitivity, runtime, env, spec.

        :param extra_py_files: more modules shipped with ``--py-files`` after the ``spark_jobs``
            package zip (a user job's own helpers), importable by the job by file stem.
        :param extra_jars: jars added to the runtime jars (a registered job's own needs).
        :param ship_package: ship the ``spark_jobs`` package zip (which also provides
            ``iceberg_job_runtime`` to user scripts); built once per content.
        """
        cfg = self.catalog_hook.config
        catalog_conf = cfg.spark_conf()
        conf = submit_conf(
            catalog_public=catalog_conf.public,
            catalog_secret=catalog_conf.secret,
            hook_conf=self.conf,
            extra_conf=extra_conf,
            cluster=self._deploy_mode() == "cluster",
            pyspark_python=self.pyspark_python,
        )
        jars, packages = runtime_jars(self._jars, self._packages, extra_jars)
        if self.connect_endpoint() is None:  # a Spark Connect server has its jars already
            # an S3 warehouse: the AWS bundle (S3FileIO) and S3A's jars, pinned, or a refusal naming the setting
            jars, packages = with_storage_jars({**conf, **catalog_conf.secret}, jars, packages)
        full_spec = None
        if spec is not None:
            full_spec = {
                "catalog_name": cfg.catalog_name,
                "governance_namespace": self.catalog_hook.governance_namespace,
                "provider_version": __version__,
                **spec,
            }
        return SubmitPlan(
            application=str(application),
            name=name or f"airflow-iceberg-{Path(str(application)).stem}",
            conf=conf,
            secret_conf=dict(catalog_conf.secret),
            jars=jars,
            packages=packages,
            py_files=[*([str(job_package_zip())] if ship_package else []), *(str(p) for p in extra_py_files)],
            env_vars=dict(self.env_vars),
            spec=full_spec,
            application_args=list(application_args),
        )

    def job_plan(
        self,
        job: str,
        spec: Mapping[str, Any],
        *,
        extra_conf: Mapping[str, Any] | None = None,
        name: str | None = None,
        extra_py_files: Sequence[str | Path] = (),
    ) -> SubmitPlan:
        """The plan of a registered built-in job (:data:`SPARK_JOBS`) with its spec."""
        entry = spark_job(job)
        return self.plan(
            entry.path,
            spec=spec,
            extra_conf=extra_conf,
            name=name or f"airflow-iceberg-{entry.name}",  # the job's name, whatever its entry script's file
            extra_py_files=extra_py_files,
            extra_jars=entry.extra_jars,
            ship_package=entry.needs_package,
        )

    # ------------------------------------------------------------- runners
    def runner(self) -> SparkRunner:
        """The runner the Spark connection picks: Spark Connect for a ``spark_connect`` connection,
        spark-submit otherwise."""
        endpoint = self.connect_endpoint()
        if endpoint is not None:
            return ConnectProcessRunner(endpoint, self.pyspark_python, self.log)
        return SparkSubmitRunner(
            SubmitTarget(
                conn_id=self.spark_conn_id,
                deploy_mode=self._deploy_mode(),
                spark_binary=self.spark_binary,
                driver_memory=self.driver_memory,
                executor_memory=self.executor_memory,
                executor_cores=self.executor_cores,
                num_executors=self.num_executors,
                verbose=self.verbose,
            ),
            self.log,
        )

    def _runner_of(self, handle: JobHandle) -> SparkRunner:
        """The runner that waits for, kills and finds ``handle``'s job: a Connect job's waits end at the
        connection's timeout; every other job is followed until it exits."""
        endpoint = self.connect_endpoint() if handle.mode == MODE_CONNECT else None
        if endpoint is not None:
            return ConnectProcessRunner(endpoint, self.pyspark_python, self.log)
        return reattached_runner(handle.mode)

    def _prepare(self, runner: SparkRunner, plan: SubmitPlan, *, detached: bool) -> tuple[str, Path]:
        """Checks, the ledger table, the job run id and a fresh private working directory."""
        runner.check(plan, detached=detached)
        if plan.spec is not None:  # jobs under the protocol append their result to the ledger
            self.catalog_hook.governance.table("ledger")
        job_run_id = (plan.spec or {}).get("job_run_id") or uuid.uuid4().hex
        stale = sweep_stale_workdirs()
        if stale:
            self.log.warning(
                "Removed %d working director(ies) left by killed submissions: %s",
                len(stale),
                ", ".join(p.name for p in stale),
            )
        return job_run_id, create_workdir()

    # ------------------------------------------------------------- running
    def run_job(
        self,
        job: str,
        spec: Mapping[str, Any],
        *,
        extra_conf: Mapping[str, Any] | None = None,
        name: str | None = None,
        extra_py_files: Sequence[str | Path] = (),
    ) -> JobRun:
        """Submit a registered built-in job (:data:`SPARK_JOBS`) with its spec."""
        return self.submit(self.job_plan(job, spec, extra_conf=extra_conf, name=name, extra_py_files=extra_py_files))

    def submit(self, plan: SubmitPlan) -> JobRun:
        """Run a plan tied to this task and wait for it; raise :class:`IcebergSparkJobError` on failure.

        The spec (with a fresh ``job_run_id``) and the properties file are
        written to a private temporary directory that is removed afterwards; first,
        directories left by submissions whose task process was killed (SIGKILL skips
        the ``finally``) are removed (:func:`~airflow_iceberg_provider.hooks._workdir.sweep_stale_workdirs`).
        """
        runner = self.runner()
        job_run_id, workdir = self._prepare(runner, plan, detached=False)
        self._running = runner
        try:
            started = datetime.now(UTC)
            runner.run(plan, job_run_id, workdir)
            return JobRun(job_run_id, plan.name, started, datetime.now(UTC))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            self._running = None

    def on_kill(self) -> None:
        if self._running is not None:
            self._running.kill()
        if self._detached is not None:
            self.log.info("Killing detached Spark job %s (pid %s)", self._detached.job_run_id, self._detached.pid)
            self._runner_of(self._detached).kill(self._detached)

    # ------------------------------------------------------- durable jobs
    def start_detached(
        self,
        plan: SubmitPlan,
        job: str,
        *,
        resume: Mapping[str, Any] | None = None,
        max_tries: int | None = None,
        commit_ref: str | None = None,
        commit_base: int | None = None,
    ) -> tuple[JobRecord, JobHandle]:
        """Start ``plan`` as a detached job (its own session, no parent-death signal); return at once.

        spark-submit (client mode: its JVM is the driver) or the Spark Connect client process runs
        with its output in ``job.log`` of its private working directory, which it owns from now on
        (the sweep keeps it while it runs). The returned :class:`JobRecord` names it for a retry;
        the :class:`~airflow_iceberg_provider.hooks.spark_runner.JobHandle` also holds its process.

        :param resume: what the operator needs after the job (stored with the record).
        :param commit_ref: a user application's ref, whose commit beyond ``commit_base`` (carrying the
            job run id) witnesses its result (stored with the record).
        """
        runner = self.runner()
        job_run_id, workdir = self._prepare(runner, plan, detached=True)
        try:
            handle = runner.start(plan, job_run_id, workdir)
        except BaseException:  # any exit, even KeyboardInterrupt: the workdir holds secrets; re-raised
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        record = JobRecord(
            **handle.record_fields(),
            job=job,
            resume=dict(resume or {}),
            max_tries=max_tries,
            commit_ref=commit_ref,
            commit_base=commit_base,
        )
        self._detached = handle
        self.log.info(
            "Started durable Spark job %s (%s, job_run_id=%s, pid %s): it outlives this task process; a retry "
            "reconnects to it",
            plan.name,
            handle.mode,
            job_run_id,
            handle.pid,
        )
        return record, handle

    def can_detach(self) -> bool:
        """Whether jobs of this connection can run detached: Spark Connect, or spark-submit in client mode
        (whose driver is the process this host starts and can find again)."""
        return self.runner().can_detach()

    def wait_detached(self, record: JobRecord, handle: JobHandle | None = None) -> JobRun:
        """Follow a detached job's log into the task log until it exits; fail on a non-zero exit code.

        :param handle: the job's handle when this process started it (with its process); for a job
            of an earlier try the exit code is unknown (its ledger row is the verdict).
        """
        handle = handle if handle is not None else JobHandle.of_record(record)
        self._detached = handle
        t0 = time.monotonic()
        try:
            end = self._runner_of(handle).wait(handle, lambda line: self.log.info("%s", line))
        finally:
            self._detached = None
        self.discard_detached(record)
        if end.code not in (None, 0):
            raise IcebergSparkJobError(
                f"Spark job {record.job!r} (job_run_id={record.job_run_id}, {record.mode}) failed after "
                f"{time.monotonic() - t0:.1f}s. Error code is: {end.code}. Last spark-submit output:\n"
                + "\n".join(end.tail[-15:])
            )
        return JobRun(
            record.job_run_id, f"airflow-iceberg-{record.job}", _parse_time(record.started_at), datetime.now(UTC)
        )

    def job_log_tail(self, record: JobRecord, emit: Callable[[str], None], *, lines: int = 200) -> bool:
        """Copy the last ``lines`` of a detached job's log into ``emit`` (the task log), masked as the
        followed log is: the catalog's secrets are registered with the log masker first. ``False`` when
        the log cannot be read on this host (the job ran on another host, or its directory is gone).
        """
        if self.detached_liveness(record) is Liveness.OTHER_HOST:
            self.log.info("The log of Spark job %s is on host %s: %s", record.job_run_id, record.host, record.log_path)
            return False
        mask_secrets(self.catalog_hook.config.spark_conf().secret.values())
        tail = _process.read_tail(Path(record.log_path), lines=lines)
        if not tail:
            self.log.info(
                "The log of Spark job %s (%s) is %s",
                record.job_run_id,
                record.log_path,
                "gone" if tail is None else "empty",
            )
            return tail is not None
        self.log.info("Last %d line(s) of Spark job %s's log (%s):", len(tail), record.job_run_id, record.log_path)
        for line in tail:
            emit(line)
        return True

    def detached_time_limit(self, record: JobRecord) -> float | None:
        """The wall-clock limit of a detached job, in seconds from its start: a Spark Connect
        connection's timeout; ``None`` for spark-submit (no limit of its own)."""
        endpoint = self.connect_endpoint() if record.mode == MODE_CONNECT else None
        return None if endpoint is None else endpoint.timeout_s

    @staticmethod
    def detached_liveness(record: JobRecord) -> Liveness:
        handle = JobHandle.of_record(record)
        return reattached_runner(handle.mode).reattach(handle)

    @classmethod
    def discard_detached(cls, record: JobRecord, *, grace_s: float = 30.0) -> None:
        """Remove a finished job's working directory (its secrets and its log).

        A job writes its verdict before its process exits (Spark's shutdown takes seconds), so a
        task that takes the verdict at once (a deferred task resumed by it) gives the process
        ``grace_s`` to exit. A process still alive after that keeps its directory, which the sweep
        of a later submission on this host removes once the process is gone.
        """
        if not Path(record.workdir).name.startswith(WORKDIR_PREFIX):
            return
        deadline = time.monotonic() + grace_s
        while cls.detached_liveness(record) is Liveness.ALIVE:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.2)
        shutil.rmtree(record.workdir, ignore_errors=True)

    @staticmethod
    def terminate_detached(record: JobRecord) -> bool:
        handle = JobHandle.of_record(record)
        return reattached_runner(handle.mode).kill(handle)

    # ------------------------------------------------------- Spark Connect
    def connect_endpoint(self) -> ConnectEndpoint | None:
        """The Connect server when ``spark_conn_id`` is a ``spark_connect`` connection, else ``None``."""
        try:
            conn = self.get_connection(self.spark_conn_id)
        except Exception:  # a missing connection is reported by the spark-submit checks
            return None
        return endpoint_from_connection(conn) if is_connect_connection(conn) else None

    @property
    def execution_mode(self) -> str:
        """``"spark_connect"`` or ``"spark_submit"``, as the connection chooses."""
        return MODE_CONNECT if self.connect_endpoint() is not None else MODE_SUBMIT

    # -------------------------------------------------------------- checks
    def _deploy_mode(self) -> str:
        """``client`` or ``cluster``: the hook's argument, else the connection's ``deploy-mode`` extra."""
        if self.deploy_mode:
            return str(self.deploy_mode)
        try:
            extra = self.get_connection(self.spark_conn_id).extra_dejson
        except Exception:  # a missing connection is reported by the runner's checks
            return "client"
        return str(extra.get("deploy-mode") or extra.get("deploy_mode") or "client")


__all__ = [
    "CONFIG_SECTION",
    "JOB_RUNTIME_MODULE",
    "LOG4J_CONFIG",
    "SPARK_JOBS",
    "SPARK_REDACTION_REGEX",
    "IcebergSparkHook",
    "JobRun",
    "SparkJob",
    "SubmitPlan",
    "conf_defaults",
    "driver_java_options",
    "java_options",
    "java_properties_line",
    "job_path",
    "spark_job",
]
