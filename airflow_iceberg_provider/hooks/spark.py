"""``IcebergSparkHook``: submit one PySpark job with the catalog wired in.

The hook composes the Spark provider's :class:`SparkSubmitHook` (built per
submission, because it resolves its connection in ``__init__``) and adds:

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

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

from airflow.sdk import BaseHook

from airflow_iceberg_provider import ICEBERG_SPARK_RUNTIME, __version__
from airflow_iceberg_provider.config import setting
from airflow_iceberg_provider.core.spec_secrets import SPEC_SECRET_PREFIX, split_spec_secrets
from airflow_iceberg_provider.exceptions import IcebergConnectionError, IcebergSparkJobError, IcebergValidationError
from airflow_iceberg_provider.hooks import _compat, _detached
from airflow_iceberg_provider.hooks._connect_inprocess import InProcessConnectJob
from airflow_iceberg_provider.hooks._job_package import SPARK_JOBS_DIR, job_package_zip
from airflow_iceberg_provider.hooks._storage_jars import with_storage_jars
from airflow_iceberg_provider.hooks._workdir import WORKDIR_PREFIX, create_workdir, sweep_stale_workdirs
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.hooks.catalog_config import is_secret_key, redaction_regex
from airflow_iceberg_provider.hooks.spark_connect import RUNNER as CONNECT_RUNNER
from airflow_iceberg_provider.hooks.spark_connect import (
    ConnectEndpoint,
    ConnectJobProcess,
    check_reachable,
    endpoint_from_connection,
    is_connect_connection,
    session_document,
    write_session_file,
)
from airflow_iceberg_provider.rules.durable_jobs import JobRecord, Liveness

JOB_RUNTIME_MODULE = SPARK_JOBS_DIR / "iceberg_job_runtime.py"
LOG4J_CONFIG = SPARK_JOBS_DIR / "log4j2.properties"
#: Spark's default ``spark.redaction.regex`` plus the catalog keys it misses; every submission adds
#: the exact keys of its secret conf (:func:`redaction_regex`), whatever their names.
SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]key|credential|access-key-id"
CONFIG_SECTION = "iceberg_provider"


@dataclass(frozen=True)
class SparkJob:
    """A built-in Spark job: its entry script and what its submission needs.

    :param name: the name operators pass to :meth:`IcebergSparkHook.run_job`.
    :param script: entry script file name in ``spark_jobs/`` (submitted by path).
    :param needs_package: ship the ``spark_jobs`` package zip with ``--py-files`` (every
        built-in job imports ``airflow_iceberg_provider.spark_jobs.*``).
    :param extra_jars: jars this job needs on top of the hook's Iceberg runtime jars.
    """

    name: str
    script: str
    needs_package: bool = True
    extra_jars: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return SPARK_JOBS_DIR / self.script


#: The built-in jobs, by name. Storage jars (S3) are added per submission from the connection's
#: FileIO (``hooks._storage_jars``), not from here.
SPARK_JOBS: dict[str, SparkJob] = {
    job.name: job
    for job in (
        SparkJob("wap_write", "wap_write.py"),
        SparkJob("wap_audit", "wap_audit.py"),
        SparkJob("wap_cherrypick", "wap_cherrypick.py"),
        SparkJob("maintenance", "maintenance.py"),
        SparkJob("erasure", "erasure.py"),
    )
}


def spark_job(job: str) -> SparkJob:
    """The registered built-in job ``job``; ``ValueError`` naming the known ones otherwise."""
    entry = SPARK_JOBS.get(job) if isinstance(job, str) else None
    if entry is None:
        raise ValueError(f"Unknown Spark job {job!r}; built-in jobs are: {', '.join(sorted(SPARK_JOBS))}.")
    return entry


def job_path(job: str) -> Path:
    """Absolute path of a built-in job's entry script (``spark_jobs/<script>``)."""
    return spark_job(job).path


_config = setting  # ``[iceberg_provider] <key>``: airflow_iceberg_provider.config is the one reader


def java_properties_line(key: str, value: str) -> str:
    """One ``key=value`` line in java.util.Properties syntax."""

    def esc(text: str, is_key: bool) -> str:
        out = []
        for i, ch in enumerate(text):
            if ch == "\\":
                out.append("\\\\")
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\r":
                out.append("\\r")
            elif ch == "\t":
                out.append("\\t")
            elif ch in "=:#!" or (ch == " " and (is_key or i == 0)):
                out.append("\\" + ch)
            elif ord(ch) > 0xFFFF:
                # java.util.Properties reads \\uXXXX as one UTF-16 unit: a supplementary
                # code point is written as its surrogate pair.
                code = ord(ch) - 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            elif ord(ch) > 126 or ord(ch) < 32:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "".join(out)

    return f"{esc(key, True)}={esc(value, False)}"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


@dataclass
class SubmitPlan:
    """Everything one spark-submit needs, as data (built without side effects)."""

    application: str
    name: str
    conf: dict[str, str]
    secret_conf: dict[str, str] = field(repr=False)
    jars: list[str]
    packages: list[str]
    py_files: list[str]
    env_vars: dict[str, str]
    spec: dict[str, Any] | None = field(default=None, repr=False)
    application_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class JobRun:
    """What a finished spark-submit tells the caller (the result itself is in the lake)."""

    job_run_id: str
    name: str
    started_at: datetime
    finished_at: datetime

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


def java_options(*parts: str | None) -> str:
    """JVM options joined in order (later ones win where the JVM keeps the last of a flag)."""
    return " ".join(part.strip() for part in parts if part and part.strip())


def driver_java_options(user: str | None, *, log4j: str | None) -> str:
    """The driver's JVM options: the provider's log4j configuration, ``[iceberg_provider]
    spark_driver_java_options``, then the task's own ``spark.driver.extraJavaOptions``.

    A task that names its own log4j configuration keeps it.
    """
    own = f"-Dlog4j2.configurationFile={log4j}" if log4j and "log4j2.configurationFile" not in (user or "") else None
    return java_options(own, _config("spark_driver_java_options"), user)


def conf_defaults() -> dict[str, str]:
    """``[iceberg_provider] spark_conf_defaults``: Spark conf every provider job starts from, under
    the catalog's conf and a task's own ``spark_conf``; a JSON object of scalar values.

    >>> import os; os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS"] = '{"spark.sql.shuffle.partitions": 4}'
    >>> conf_defaults()
    {'spark.sql.shuffle.partitions': '4'}
    >>> del os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS"]
    """
    raw = _config("spark_conf_defaults")
    if not raw:
        return {}
    fix = 'give a JSON object of Spark conf keys to values, e.g. {"spark.sql.shuffle.partitions": "8"}'
    try:
        doc = json.loads(raw)
    except ValueError:
        raise IcebergValidationError(f"[iceberg_provider] spark_conf_defaults is not JSON: {fix}") from None
    if not isinstance(doc, dict):
        raise IcebergValidationError(
            f"[iceberg_provider] spark_conf_defaults is a JSON {type(doc).__name__}, not an object: {fix}"
        )
    bad = sorted(str(k) for k, v in doc.items() if not str(k).startswith("spark.") or isinstance(v, dict | list))
    if bad:
        raise IcebergValidationError(
            f"[iceberg_provider] spark_conf_defaults has entries that are not Spark conf with a scalar value: "
            f"{bad}: {fix}"
        )
    secret = sorted(str(k) for k in doc if is_secret_key(str(k)))
    if secret:
        raise IcebergValidationError(
            f"[iceberg_provider] spark_conf_defaults names secret conf {secret}: it would reach spark-submit's "
            "command line; put credentials in the catalog connection, whose secrets travel in a 0600 file"
        )
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in doc.items()}


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
        self._submit_hook: Any = None
        self._connect_process: ConnectJobProcess | InProcessConnectJob | None = None
        self._detached: JobRecord | None = None

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
        conf = {
            **conf_defaults(),
            **catalog_conf.public,
            **self.conf,
            **{k: str(v) for k, v in (extra_conf or {}).items()},
        }
        conf.setdefault("spark.sql.session.timeZone", "UTC")
        conf.setdefault("spark.ui.enabled", "false")
        # Spark redacts conf by name only: every secret key is named in the regex, so an unknown key
        # (secret by the allowlist) is redacted in the event log and on the environment page too.
        conf["spark.redaction.regex"] = redaction_regex(
            [*catalog_conf.secret, SPEC_SECRET_PREFIX], conf.get("spark.redaction.regex") or SPARK_REDACTION_REGEX
        )
        # The log4j configuration travels with the submission (--files, see submit): a driver in
        # cluster deploy mode (YARN, Kubernetes) runs on another host and finds it, by name, in its
        # working directory; a client-mode driver is the submitting process and reads it in place.
        log4j = LOG4J_CONFIG.name if self._deploy_mode() == "cluster" else f"file:{LOG4J_CONFIG}"
        conf["spark.driver.extraJavaOptions"] = driver_java_options(
            conf.get("spark.driver.extraJavaOptions"), log4j=log4j
        )
        executor_options = java_options(
            _config("spark_executor_java_options"), conf.get("spark.executor.extraJavaOptions")
        )
        if executor_options:
            conf["spark.executor.extraJavaOptions"] = executor_options
        for key in list(conf):
            if key in catalog_conf.secret:
                conf.pop(key)
        jars, packages = list(self._jars), list(self._packages)
        if not jars and not packages:
            packages = [ICEBERG_SPARK_RUNTIME]
        jars += [j for j in extra_jars if j not in jars]
        if self.connect_endpoint() is None:  # a Spark Connect server has its jars already
            # an S3 warehouse: the AWS bundle (S3FileIO) and S3A's jars, pinned, or a refusal naming the setting
            jars, packages = with_storage_jars({**conf, **catalog_conf.secret}, jars, packages)
        env = dict(self.env_vars)
        if self.pyspark_python:
            # Conf rather than PYSPARK_PYTHON env: env vars are refused in standalone cluster
            # mode and would be put on argv in YARN/k8s mode by SparkSubmitHook.
            conf.setdefault("spark.pyspark.python", self.pyspark_python)
            conf.setdefault("spark.pyspark.driver.python", self.pyspark_python)
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
            env_vars=env,
            spec=full_spec,
            application_args=list(application_args),
        )

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
            name=name,
            extra_py_files=extra_py_files,
            extra_jars=entry.extra_jars,
            ship_package=entry.needs_package,
        )

    def submit(self, plan: SubmitPlan) -> JobRun:
        """Run spark-submit for a plan; raise :class:`IcebergSparkJobError` on failure.

        The spec (with a fresh ``job_run_id``) and the properties file are
        written to a private temporary directory that is removed afterwards; first,
        directories left by submissions whose task process was killed (SIGKILL skips
        the ``finally``) are removed (:func:`~airflow_iceberg_provider.hooks._workdir.sweep_stale_workdirs`).
        """
        endpoint = self.connect_endpoint()
        if endpoint is not None:
            return self._submit_connect(plan, endpoint)
        self._check_runtime(plan)
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
        workdir = create_workdir()
        try:
            self._submit_hook = self._spark_submit_hook(plan, workdir, job_run_id)
            started = datetime.now(UTC)
            t0 = time.monotonic()
            try:
                popen_kwargs = (
                    {"preexec_fn": _detached.die_with_parent_preexec(os.getpid())}
                    if _detached.can_die_with_parent()
                    else {}
                )
                self._submit_hook.submit(application=plan.application, **popen_kwargs)
            except Exception as err:  # AirflowException, OSError and more: one job error, named
                raise IcebergSparkJobError(
                    f"Spark job {plan.name!r} (job_run_id={job_run_id}) failed after "
                    f"{time.monotonic() - t0:.1f}s: {err}"
                ) from err
            return JobRun(job_run_id, plan.name, started, datetime.now(UTC))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            _compat.close_spark_submit_output(self._submit_hook)
            self._submit_hook = None

    def _spark_submit_hook(self, plan: SubmitPlan, workdir: Path, job_run_id: str) -> Any:
        """The Spark provider's hook for ``plan``, its spec and properties files written to ``workdir``."""
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        args = list(plan.application_args)
        # A client-mode driver is the JVM this host starts: it reads the 0600 spec file in place,
        # so the spec (an erasure's salt) never leaves this host. A cluster-mode driver runs
        # elsewhere: it gets the spec by --files (the job falls back to SparkFiles) with its
        # secrets moved into the properties file, as the catalog's secrets travel. The package
        # goes by --py-files, the log4j configuration by --files.
        files = [str(LOG4J_CONFIG)]
        secret_conf = dict(plan.secret_conf)
        if plan.spec is not None:
            spec = {**plan.spec, "job_run_id": job_run_id}
            spec_path = workdir / "job_spec.json"
            if self._deploy_mode() == "cluster":
                spec, spec_secrets = split_spec_secrets(spec)
                secret_conf.update(spec_secrets)
                files.insert(0, str(spec_path))
            _write_private(spec_path, json.dumps(spec, default=str))
            args = ["--spec", str(spec_path), *args]
        props_path = workdir / "spark.properties"
        _write_private(props_path, self._properties_text(secret_conf))
        _mask(secret_conf.values())
        return SparkSubmitHook(
            conn_id=self.spark_conn_id,
            conf=plan.conf,
            jars=",".join(plan.jars) or None,
            packages=",".join(plan.packages) or None,
            py_files=",".join(plan.py_files) or None,
            files=",".join(files),
            properties_file=str(props_path),
            env_vars=plan.env_vars or None,
            name=plan.name,
            application_args=args,
            driver_memory=self.driver_memory,
            executor_memory=self.executor_memory,
            executor_cores=self.executor_cores,
            num_executors=self.num_executors,
            spark_binary=self.spark_binary,
            deploy_mode=self.deploy_mode,
            verbose=self.verbose,
        )

    def on_kill(self) -> None:
        if self._submit_hook is not None:
            self._submit_hook.on_kill()
        if self._connect_process is not None:
            self._connect_process.terminate()
        if self._detached is not None:
            self.log.info("Killing detached Spark job %s (pid %s)", self._detached.job_run_id, self._detached.pid)
            _detached.terminate(self._detached)

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
    ) -> tuple[JobRecord, subprocess.Popen[bytes]]:
        """Start ``plan`` as a detached job (its own session, no parent-death signal); return at once.

        spark-submit (client mode: its JVM is the driver) or the Spark Connect client process runs
        with its output in ``job.log`` of its private working directory, which it owns from now on
        (the sweep keeps it while it runs). The returned :class:`JobRecord` names it for a retry.

        :param resume: what the operator needs after the job (stored with the record).
        :param commit_ref: a user application's ref, whose commit beyond ``commit_base`` (carrying the
            job run id) witnesses its result (stored with the record).
        """
        endpoint = self.connect_endpoint()
        if endpoint is None:
            self._check_runtime(plan)
            if not self.can_detach():
                raise IcebergConnectionError(
                    "A durable Spark job runs its driver as a process of this host (client deploy mode); "
                    f"connection {self.spark_conn_id!r} asks for cluster mode. Use client mode or durable=False."
                )
        elif not Path(plan.application).is_file():
            raise IcebergConnectionError(f"Spark application {plan.application!r} does not exist.")
        if plan.spec is not None:
            self.catalog_hook.governance.table("ledger")
        job_run_id = (plan.spec or {}).get("job_run_id") or uuid.uuid4().hex
        sweep_stale_workdirs()
        workdir = create_workdir()
        log_path = workdir / "job.log"
        try:
            if endpoint is None:
                submit_hook = self._spark_submit_hook(plan, workdir, job_run_id)
                cmd = _compat.spark_submit_command(submit_hook, plan.application)
                env = {**os.environ, **_compat.spark_submit_env(submit_hook)}
                mode = "spark_submit"
            else:
                check_reachable(endpoint)
                cmd, env = self._connect_command(plan, endpoint, workdir, job_run_id)
                mode = "spark_connect"
            proc = _detached.launch(cmd, env, log_path)
        except BaseException:  # any exit, even KeyboardInterrupt: the workdir holds secrets; re-raised
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        _detached.hand_workdir_to(workdir, proc.pid)
        record = JobRecord(
            job_run_id=job_run_id,
            job=job,
            mode=mode,
            **_detached.identity(proc.pid),
            workdir=str(workdir),
            log_path=str(log_path),
            started_at=datetime.now(UTC).isoformat(),
            resume=dict(resume or {}),
            max_tries=max_tries,
            commit_ref=commit_ref,
            commit_base=commit_base,
        )
        self._detached = record
        self.log.info(
            "Started durable Spark job %s (%s, job_run_id=%s, pid %s): it outlives this task process; a retry "
            "reconnects to it",
            plan.name,
            mode,
            job_run_id,
            proc.pid,
        )
        return record, proc

    def can_detach(self) -> bool:
        """Whether jobs of this connection can run detached: Spark Connect, or spark-submit in client mode
        (whose driver is the process this host starts and can find again)."""
        return self.connect_endpoint() is not None or self._deploy_mode() != "cluster"

    def wait_detached(self, record: JobRecord, proc: subprocess.Popen[bytes] | None = None) -> JobRun:
        """Follow a detached job's log into the task log until it exits; fail on a non-zero exit code.

        :param proc: the job's ``Popen`` when this process started it; for a job of an earlier try
            the exit code is unknown (its ledger row is the verdict).
        """
        follower = _detached.LogFollower(Path(record.log_path), lambda line: self.log.info("%s", line))
        endpoint = self.connect_endpoint() if record.mode == "spark_connect" else None
        self._detached = record
        t0 = time.monotonic()
        try:
            code = _detached.wait(
                record,
                follower,
                proc=proc,
                timeout_s=endpoint.timeout_s if endpoint is not None else None,
                on_timeout=lambda: _detached.terminate(record),
            )
        finally:
            self._detached = None
        self.discard_detached(record)
        if code not in (None, 0):
            raise IcebergSparkJobError(
                f"Spark job {record.job!r} (job_run_id={record.job_run_id}, {record.mode}) failed after "
                f"{time.monotonic() - t0:.1f}s. Error code is: {code}. Last spark-submit output:\n"
                + "\n".join(follower.tail[-15:])
            )
        return JobRun(
            record.job_run_id, f"airflow-iceberg-{record.job}", _parse_time(record.started_at), datetime.now(UTC)
        )

    @staticmethod
    def detached_liveness(record: JobRecord) -> Liveness:
        return _detached.liveness(record)

    @staticmethod
    def discard_detached(record: JobRecord) -> None:
        """Remove a finished job's working directory (its secrets and its log)."""
        if _detached.liveness(record) is not Liveness.ALIVE and Path(record.workdir).name.startswith(WORKDIR_PREFIX):
            shutil.rmtree(record.workdir, ignore_errors=True)

    @staticmethod
    def terminate_detached(record: JobRecord) -> bool:
        return _detached.terminate(record)

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
        return "spark_connect" if self.connect_endpoint() is not None else "spark_submit"

    def _submit_connect(self, plan: SubmitPlan, endpoint: ConnectEndpoint) -> JobRun:
        """Run the plan's job file as a Connect client process (:mod:`.spark_connect`)."""
        if not Path(plan.application).is_file():
            raise IcebergConnectionError(f"Spark application {plan.application!r} does not exist.")
        if plan.spec is not None:
            self.catalog_hook.governance.table("ledger")
        check_reachable(endpoint)
        job_run_id = (plan.spec or {}).get("job_run_id") or uuid.uuid4().hex
        sweep_stale_workdirs()
        workdir = create_workdir()
        try:
            started = datetime.now(UTC)
            self.log.info(
                "Running %s through Spark Connect (%s at %s, client %s)",
                plan.name,
                endpoint.conn_id,
                endpoint.address,
                endpoint.client,
            )
            if endpoint.client == "in_process":
                job = InProcessConnectJob(endpoint.conn_id, endpoint.address, endpoint.timeout_s, self.log)
                self._connect_process = job
                job.run(self._connect_document(plan, endpoint, workdir, job_run_id), plan.name)
            else:
                session_file = self._connect_session(plan, endpoint, workdir, job_run_id)
                python = endpoint.python or self.pyspark_python or sys.executable
                process = ConnectJobProcess(endpoint, python, self.log)
                self._connect_process = process
                process.run(session_file, plan.env_vars, plan.name)
            return JobRun(job_run_id, plan.name, started, datetime.now(UTC))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            self._connect_process = None

    def _connect_document(
        self, plan: SubmitPlan, endpoint: ConnectEndpoint, workdir: Path, job_run_id: str
    ) -> dict[str, Any]:
        """The Connect client's session document (conf, secrets, job); the spec as a 0600 file in ``workdir``.

        A client in the task process imports the provider's jobs from the installed package: only the
        user's own modules go on its path, not the job package zip.
        """
        args = list(plan.application_args)
        if plan.spec is not None:
            spec_path = workdir / "job_spec.json"
            _write_private(spec_path, json.dumps({**plan.spec, "job_run_id": job_run_id}, default=str))
            args = ["--spec", str(spec_path), *args]
        _mask(plan.secret_conf.values())
        py_files = plan.py_files
        if endpoint.client == "in_process":
            py_files = [p for p in py_files if p != str(job_package_zip())]
        return session_document(
            endpoint,
            application=plan.application,
            application_args=args,
            conf=plan.conf,
            secret_conf=plan.secret_conf,
            py_files=py_files,
            job_name=plan.name,
        )

    def _connect_session(self, plan: SubmitPlan, endpoint: ConnectEndpoint, workdir: Path, job_run_id: str) -> Path:
        """The runner's 0600 session file (spec, conf, secrets) in ``workdir``."""
        session_file = workdir / "session.json"
        write_session_file(session_file, self._connect_document(plan, endpoint, workdir, job_run_id))
        return session_file

    def _connect_command(
        self, plan: SubmitPlan, endpoint: ConnectEndpoint, workdir: Path, job_run_id: str
    ) -> tuple[list[str], dict[str, str]]:
        """The Connect runner's command line and environment (a detached run of :class:`ConnectJobProcess`).

        On Spark 4 (``client`` ``in_process``) the detached runner is the Airflow environment's own
        Python, whose pyspark-client is the Connect client: still no second Python.
        """
        python = endpoint.python or (sys.executable if endpoint.client == "in_process" else self.pyspark_python)
        python = python or sys.executable
        if not Path(python).is_file():
            raise IcebergConnectionError(
                f"Spark runtime Python {python!r} does not exist; set [iceberg_provider] pyspark_python "
                f"(or the extra python of connection {endpoint.conn_id!r})."
            )
        session_file = self._connect_session(plan, endpoint, workdir, job_run_id)
        env = {**os.environ, **plan.env_vars, "PYTHONUNBUFFERED": "1"}
        env.pop("SPARK_REMOTE", None)
        return [python, str(CONNECT_RUNNER), "--session", str(session_file)], env

    # -------------------------------------------------------------- checks
    def _deploy_mode(self) -> str:
        """``client`` or ``cluster``: the hook's argument, else the connection's ``deploy-mode`` extra."""
        if self.deploy_mode:
            return str(self.deploy_mode)
        try:
            extra = self.get_connection(self.spark_conn_id).extra_dejson
        except Exception:  # a missing connection is reported by _check_runtime
            return "client"
        return str(extra.get("deploy-mode") or extra.get("deploy_mode") or "client")

    def _master(self) -> str:
        conn = self.get_connection(self.spark_conn_id)
        host = conn.host or ""
        return f"{host}:{conn.port}" if conn.port else host

    def _check_runtime(self, plan: SubmitPlan) -> None:
        try:
            master = self._master()
        except Exception as err:  # any lookup failure: one message says how to define the connection
            raise IcebergConnectionError(
                f"Spark connection {self.spark_conn_id!r} does not exist; create it, e.g. "
                f'AIRFLOW_CONN_{self.spark_conn_id.upper()}=\'{{"conn_type": "spark", "host": '
                '"local[*]"}\' for local mode or host spark://master:7077 for a cluster.'
            ) from err
        path = os.environ.get("PATH", "")
        if shutil.which(self.spark_binary, path=plan.env_vars.get("PATH", path)) is None:
            raise IcebergConnectionError(
                f"{self.spark_binary!r} is not on PATH; install a Spark 3.5 distribution (or "
                "`pip install pyspark==3.5.*`) on the worker and put its bin/ directory on PATH."
            )
        missing = [j for j in plan.jars if "://" not in j and not Path(j).is_file()]
        if missing:
            raise IcebergConnectionError(
                f"Spark jars not found: {missing}; fix [iceberg_provider] spark_jars or the jars "
                "argument (run scripts/bootstrap.sh for the offline runtime)."
            )
        if not Path(plan.application).is_file() and "://" not in plan.application:
            raise IcebergConnectionError(f"Spark application {plan.application!r} does not exist.")
        if master.startswith("spark://") and self._deploy_mode() == "cluster" and plan.application.endswith(".py"):
            raise IcebergConnectionError(
                f"Spark connection {self.spark_conn_id!r} asks for deploy_mode='cluster' on the standalone "
                f"master {master}, and Spark standalone does not run Python applications in cluster deploy "
                "mode (spark-submit refuses them). Use deploy_mode='client' with a standalone master (the "
                "driver runs on the Airflow worker), or cluster mode on YARN or Kubernetes."
            )

    @staticmethod
    def _properties_text(secret_conf: Mapping[str, str]) -> str:
        """Secret conf plus the distribution's spark-defaults.conf (which --properties-file replaces)."""
        lines = ["# written by airflow-iceberg-provider; removed after the job"]
        for candidate in _spark_defaults_files():
            lines.append(candidate.read_text(encoding="utf-8"))
        lines += [java_properties_line(k, v) for k, v in secret_conf.items()]
        return "\n".join(lines) + "\n"


def _spark_defaults_files() -> list[Path]:
    dirs = [os.environ.get("SPARK_CONF_DIR")]
    if os.environ.get("SPARK_HOME"):
        dirs.append(os.path.join(os.environ["SPARK_HOME"], "conf"))
    for d in dirs:
        if d and (Path(d) / "spark-defaults.conf").is_file():
            return [Path(d) / "spark-defaults.conf"]
    return []


def _parse_time(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return datetime.now(UTC)


def _as_list(value: Sequence[str] | str | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value if str(v).strip()]


def _mask(values: Any) -> None:
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover
        return
    for value in values:
        if value:
            mask_secret(value)
