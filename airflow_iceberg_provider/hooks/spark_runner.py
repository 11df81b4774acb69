"""Runners: how a :class:`~airflow_iceberg_provider.hooks.spark_plan.SubmitPlan` becomes a running Spark job.

Every runner offers the same verbs (:class:`SparkRunner`):

* ``run``: the job tied to the task (it dies with the task process), waited for; a failure raises
  :class:`~airflow_iceberg_provider.exceptions.IcebergSparkJobError`;
* ``start``: the job detached (it outlives the task process), named by a :class:`JobHandle` whose
  fields a durable job record (:class:`~airflow_iceberg_provider.rules.durable_jobs.JobRecord`)
  stores;
* ``wait``: follow a started job's log into the task log until it exits;
* ``kill``: stop a started job (SIGTERM to its process group, SIGKILL after a grace period), or the
  job ``run`` is waiting for;
* ``reattach``: find a started job again from its handle, after the task process that started it
  died (same pid, same start time, same boot, same host).

:class:`SparkSubmitRunner` runs spark-submit (the Spark provider's hook builds its command line;
attached runs go through that hook's own ``submit``, which tracks and kills cluster-mode drivers on
YARN and Kubernetes). :class:`ConnectProcessRunner` runs the same plan as a Spark Connect client
process (:mod:`~airflow_iceberg_provider.hooks.spark_connect`). The hook merges the plan and picks the
runner from its Spark connection; process handling itself lives in
:mod:`~airflow_iceberg_provider.hooks._process`, working directories in
:mod:`~airflow_iceberg_provider.hooks._workdir`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk import BaseHook

from airflow_iceberg_provider.config import spark_runtime
from airflow_iceberg_provider.core.spec_secrets import split_spec_secrets
from airflow_iceberg_provider.exceptions import IcebergConnectionError, IcebergSparkJobError
from airflow_iceberg_provider.hooks import _compat, _process
from airflow_iceberg_provider.hooks._connect_inprocess import InProcessConnectJob
from airflow_iceberg_provider.hooks._job_package import job_package_zip
from airflow_iceberg_provider.hooks._workdir import _write_private, hand_workdir_to
from airflow_iceberg_provider.hooks.spark_connect import RUNNER as CONNECT_RUNNER
from airflow_iceberg_provider.hooks.spark_connect import (
    ConnectEndpoint,
    ConnectJobProcess,
    check_reachable,
    session_document,
    write_session_file,
)
from airflow_iceberg_provider.hooks.spark_plan import LOG4J_CONFIG, SubmitPlan, properties_text
from airflow_iceberg_provider.rules.durable_jobs import JobRecord, Liveness

if TYPE_CHECKING:
    import subprocess

#: The runners' names, as a durable job record stores them (``JobRecord.mode``).
MODE_SUBMIT = "spark_submit"
MODE_CONNECT = "spark_connect"


@dataclass(frozen=True)
class JobHandle:
    """A started job as its runner names it; every field but ``process`` goes into the durable job record."""

    mode: str
    job_run_id: str
    pid: int
    start_ticks: int | None
    host: str
    boot_id: str | None
    workdir: str
    log_path: str
    started_at: str
    #: the job's ``Popen`` in the process that started it (its exit code); ``None`` once reattached
    process: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)

    def record_fields(self) -> dict[str, Any]:
        """The fields a :class:`JobRecord` stores to find this job again."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "process"}

    @classmethod
    def of_record(cls, record: JobRecord) -> JobHandle:
        """The handle stored in ``record`` (no ``Popen``: another process started the job)."""
        return cls(**{f.name: getattr(record, f.name) for f in fields(cls) if f.name != "process"})


@dataclass(frozen=True)
class JobExit:
    """How a waited-for job ended: its exit code (``None`` when this process is not its parent) and
    the last lines of its output."""

    code: int | None
    tail: list[str]


class SparkRunner(Protocol):
    """What every runner offers the hook (see the module's description of each verb)."""

    mode: str

    def check(self, plan: SubmitPlan, *, detached: bool) -> None:
        """Refuse, naming the fix, a plan this runner cannot run; nothing is written or started yet."""

    def can_detach(self) -> bool:
        """Whether a job of this runner can outlive the task process (a durable job)."""

    def run(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> None:
        """Run ``plan`` tied to the task and wait for it; :class:`IcebergSparkJobError` on failure."""

    def start(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> JobHandle:
        """Start ``plan`` detached, its output in ``workdir``, which the job owns from now on."""

    def wait(self, handle: JobHandle, emit: Callable[[str], None]) -> JobExit:
        """Follow a started job's output into ``emit`` until it exits."""

    def kill(self, handle: JobHandle | None = None) -> bool:
        """Stop a started job, or (``None``) the job :meth:`run` is waiting for; ``True`` if it ran."""

    def reattach(self, handle: JobHandle) -> Liveness:
        """Whether the job ``handle`` names still runs, as seen from this host."""


class _ProcessRunner:
    """The verbs shared by runners whose detached job is a process of this host."""

    mode = ""
    #: the wall-clock limit of a detached job (seconds), ``None`` for none
    timeout_s: float | None = None

    def command(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def start(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> JobHandle:
        log_path = workdir / "job.log"
        cmd, env = self.command(plan, job_run_id, workdir)
        proc = _process.launch(cmd, env, log_path)
        hand_workdir_to(workdir, proc.pid)
        return JobHandle(
            mode=self.mode,
            job_run_id=job_run_id,
            **_process.identity(proc.pid),
            workdir=str(workdir),
            log_path=str(log_path),
            started_at=datetime.now(UTC).isoformat(),
            process=proc,
        )

    def wait(self, handle: JobHandle, emit: Callable[[str], None]) -> JobExit:
        follower = _process.LogFollower(Path(handle.log_path), emit)
        code = _process.wait(
            handle,
            follower,
            proc=handle.process,
            timeout_s=self.timeout_s,
            on_timeout=lambda: _process.terminate(handle),
        )
        return JobExit(code, follower.tail)

    def kill(self, handle: JobHandle | None = None) -> bool:
        if handle is not None:
            return _process.terminate(handle)
        return self._kill_attached()

    def _kill_attached(self) -> bool:
        """Stop the job :meth:`run` is waiting for; ``True`` if one ran (none here)."""
        return False

    def reattach(self, handle: JobHandle) -> Liveness:
        return _process.liveness(handle)


@dataclass(frozen=True)
class SubmitTarget:
    """Where and how spark-submit runs: the Spark connection and the hook's resource arguments."""

    conn_id: str
    deploy_mode: str
    spark_binary: str = "spark-submit"
    driver_memory: str | None = None
    executor_memory: str | None = None
    executor_cores: int | None = None
    num_executors: int | None = None
    verbose: bool = False


class SparkSubmitRunner(_ProcessRunner):
    """spark-submit, through the Spark provider's hook (built per submission: it resolves its
    connection in ``__init__``)."""

    mode = MODE_SUBMIT

    def __init__(self, target: SubmitTarget, log: Any) -> None:
        self.target = target
        self.log = log
        self._submit_hook: Any = None

    def can_detach(self) -> bool:
        """spark-submit in client mode: its JVM is the driver, a process this host can find again."""
        return self.target.deploy_mode != "cluster"

    def check(self, plan: SubmitPlan, *, detached: bool) -> None:
        conn_id = self.target.conn_id
        try:
            conn = BaseHook.get_connection(conn_id)
            master = f"{conn.host or ''}:{conn.port}" if conn.port else (conn.host or "")
        except Exception as err:  # any lookup failure: one message says how to define the connection
            raise IcebergConnectionError(
                f"Spark connection {conn_id!r} does not exist; create it, e.g. "
                f'AIRFLOW_CONN_{conn_id.upper()}=\'{{"conn_type": "spark", "host": '
                '"local[*]"}\' for local mode or host spark://master:7077 for a cluster.'
            ) from err
        path = os.environ.get("PATH", "")
        if shutil.which(self.target.spark_binary, path=plan.env_vars.get("PATH", path)) is None:
            line = spark_runtime()
            raise IcebergConnectionError(
                f"{self.target.spark_binary!r} is not on PATH; install a Spark {line} distribution (or "
                f"`pip install pyspark=={line}.*`) on the worker and put its bin/ directory on PATH "
                "([iceberg_provider] spark_runtime chooses the line)."
            )
        missing = [j for j in plan.jars if "://" not in j and not Path(j).is_file()]
        if missing:
            raise IcebergConnectionError(
                f"Spark jars not found: {missing}; fix [iceberg_provider] spark_jars or the jars "
                "argument (run scripts/bootstrap.sh for the offline runtime)."
            )
        if not Path(plan.application).is_file() and "://" not in plan.application:
            raise IcebergConnectionError(f"Spark application {plan.application!r} does not exist.")
        cluster = self.target.deploy_mode == "cluster"
        if master.startswith("spark://") and cluster and plan.application.endswith(".py"):
            raise IcebergConnectionError(
                f"Spark connection {conn_id!r} asks for deploy_mode='cluster' on the standalone "
                f"master {master}, and Spark standalone does not run Python applications in cluster deploy "
                "mode (spark-submit refuses them). Use deploy_mode='client' with a standalone master (the "
                "driver runs on the Airflow worker), or cluster mode on YARN or Kubernetes."
            )
        if detached and not self.can_detach():
            raise IcebergConnectionError(
                "A durable Spark job runs its driver as a process of this host (client deploy mode); "
                f"connection {conn_id!r} asks for cluster mode. Use client mode or durable=False."
            )

    def run(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> None:
        self._submit_hook = self.submit_hook(plan, workdir, job_run_id)
        t0 = time.monotonic()
        try:
            popen_kwargs = (
                {"preexec_fn": _process.die_with_parent_preexec(os.getpid())} if _process.can_die_with_parent() else {}
            )
            self._submit_hook.submit(application=plan.application, **popen_kwargs)
        except Exception as err:  # AirflowException, OSError and more: one job error, named
            raise IcebergSparkJobError(
                f"Spark job {plan.name!r} (job_run_id={job_run_id}) failed after {time.monotonic() - t0:.1f}s: {err}"
            ) from err
        finally:
            _compat.spark_submit_private(self._submit_hook).close_output()
            self._submit_hook = None

    def _kill_attached(self) -> bool:
        submit_hook = self._submit_hook
        if submit_hook is None:
            return False
        submit_hook.on_kill()
        return True

    def command(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> tuple[list[str], dict[str, str]]:
        """spark-submit's argv and environment for ``plan``, its files written to ``workdir``."""
        private = _compat.spark_submit_private(self.submit_hook(plan, workdir, job_run_id))
        cmd = private.command(plan.application)
        return cmd, {**os.environ, **private.env()}

    def submit_hook(self, plan: SubmitPlan, workdir: Path, job_run_id: str) -> Any:
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
            if self.target.deploy_mode == "cluster":
                spec, spec_secrets = split_spec_secrets(spec)
                secret_conf.update(spec_secrets)
                files.insert(0, str(spec_path))
            _write_private(spec_path, json.dumps(spec, default=str))
            args = ["--spec", str(spec_path), *args]
        props_path = workdir / "spark.properties"
        _write_private(props_path, properties_text(secret_conf))
        mask_secrets(secret_conf.values())
        return SparkSubmitHook(
            conn_id=self.target.conn_id,
            conf=plan.conf,
            jars=",".join(plan.jars) or None,
            packages=",".join(plan.packages) or None,
            py_files=",".join(plan.py_files) or None,
            files=",".join(files),
            properties_file=str(props_path),
            env_vars=plan.env_vars or None,
            name=plan.name,
            application_args=args,
            driver_memory=self.target.driver_memory,
            executor_memory=self.target.executor_memory,
            executor_cores=self.target.executor_cores,
            num_executors=self.target.num_executors,
            spark_binary=self.target.spark_binary,
            deploy_mode=self.target.deploy_mode,
            verbose=self.target.verbose,
        )


class ConnectProcessRunner(_ProcessRunner):
    """The plan's job file as a Spark Connect client: inside the task process when the endpoint's
    ``client`` is ``in_process`` (Spark 4: the Airflow environment's ``pyspark-client``), else as a
    short-lived client process of the Spark runtime's Python (:mod:`.spark_connect`)."""

    mode = MODE_CONNECT

    def __init__(self, endpoint: ConnectEndpoint, python: str | None, log: Any) -> None:
        self.endpoint = endpoint
        # In process (Spark 4), a detached run is the Airflow environment's own Python: its
        # pyspark-client is the Connect client, so there is still no second Python.
        own = sys.executable if endpoint.client == "in_process" else python
        self.python = endpoint.python or own or sys.executable
        self.log = log
        self.timeout_s = endpoint.timeout_s
        self._process: ConnectJobProcess | InProcessConnectJob | None = None

    def can_detach(self) -> bool:
        return True

    def check(self, plan: SubmitPlan, *, detached: bool) -> None:
        if not Path(plan.application).is_file():
            raise IcebergConnectionError(f"Spark application {plan.application!r} does not exist.")

    def run(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> None:
        check_reachable(self.endpoint)
        endpoint = self.endpoint
        self.log.info(
            "Running %s through Spark Connect (%s at %s, client %s)",
            plan.name,
            endpoint.conn_id,
            endpoint.address,
            endpoint.client,
        )
        try:
            if endpoint.client == "in_process":
                job = InProcessConnectJob(endpoint.conn_id, endpoint.address, endpoint.timeout_s, self.log)
                self._process = job
                job.run(self.session_document(plan, workdir, job_run_id), plan.name)
            else:
                session_file = self.session_file(plan, workdir, job_run_id)
                process = ConnectJobProcess(endpoint, self.python, self.log)
                self._process = process
                process.run(session_file, plan.env_vars, plan.name)
        finally:
            self._process = None

    def _kill_attached(self) -> bool:
        process = self._process
        if process is None:
            return False
        process.terminate()
        return True

    def session_document(self, plan: SubmitPlan, workdir: Path, job_run_id: str) -> dict[str, Any]:
        """The Connect client's session document (conf, secrets, job); the spec as a 0600 file in ``workdir``.

        A client in the task process imports the provider's jobs from the installed package: only the
        user's own modules go on its path, not the job package zip.
        """
        args = list(plan.application_args)
        if plan.spec is not None:
            spec_path = workdir / "job_spec.json"
            _write_private(spec_path, json.dumps({**plan.spec, "job_run_id": job_run_id}, default=str))
            args = ["--spec", str(spec_path), *args]
        mask_secrets(plan.secret_conf.values())
        py_files = plan.py_files
        if self.endpoint.client == "in_process":
            py_files = [p for p in py_files if p != str(job_package_zip())]
        return session_document(
            self.endpoint,
            application=plan.application,
            application_args=args,
            conf=plan.conf,
            secret_conf=plan.secret_conf,
            py_files=py_files,
            job_name=plan.name,
        )

    def session_file(self, plan: SubmitPlan, workdir: Path, job_run_id: str) -> Path:
        """The runner's 0600 session file (spec, conf, secrets) in ``workdir``."""
        session_file = workdir / "session.json"
        write_session_file(session_file, self.session_document(plan, workdir, job_run_id))
        return session_file

    def command(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> tuple[list[str], dict[str, str]]:
        """The Connect runner's command line and environment (a detached run of :class:`ConnectJobProcess`)."""
        check_reachable(self.endpoint)
        if not Path(self.python).is_file():
            raise IcebergConnectionError(
                f"Spark runtime Python {self.python!r} does not exist; set [iceberg_provider] pyspark_python "
                f"(or the extra python of connection {self.endpoint.conn_id!r})."
            )
        session_file = self.session_file(plan, workdir, job_run_id)
        env = {**os.environ, **plan.env_vars, "PYTHONUNBUFFERED": "1"}
        env.pop("SPARK_REMOTE", None)
        return [self.python, str(CONNECT_RUNNER), "--session", str(session_file)], env


class _Reattached(_ProcessRunner):
    """The process verbs for a job an earlier try started (whatever the connection says today)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def can_detach(self) -> bool:
        return True

    def check(self, plan: SubmitPlan, *, detached: bool) -> None:
        raise IcebergSparkJobError(f"A reattached {self.mode} runner starts no job.")

    def run(self, plan: SubmitPlan, job_run_id: str, workdir: Path) -> None:
        raise IcebergSparkJobError(f"A reattached {self.mode} runner starts no job.")


def reattached_runner(mode: str) -> SparkRunner:
    """The runner verbs (wait, kill, reattach) for a job recorded with ``mode``: both runners' detached
    jobs are processes of the host that started them."""
    return _Reattached(mode)


def mask_secrets(values: Any) -> None:
    """Tell Airflow's log masker every secret value (the Spark conf's and the spec's)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover
        return
    for value in values:
        if value:
            mask_secret(value)


__all__ = [
    "MODE_CONNECT",
    "MODE_SUBMIT",
    "ConnectProcessRunner",
    "JobExit",
    "JobHandle",
    "SparkRunner",
    "SparkSubmitRunner",
    "SubmitTarget",
    "reattached_runner",
]
