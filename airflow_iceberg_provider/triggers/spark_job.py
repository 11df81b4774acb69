"""Trigger a deferred durable Spark task waits on: its job record is the trigger's state.

A durable Spark operator with ``deferrable=True`` starts its detached job and records it in
``task_state_store`` exactly as a waiting one does, then defers to :class:`IcebergSparkJobTrigger`,
whose keyword arguments are that record's JSON (:meth:`JobRecord.to_json`) plus what polling needs.
The triggerer may run on another host than the job, so the trigger asks the witnesses any host can
read: the job's own ledger row (``event_id = job_run_id``) and, for a user application, its stamped
commit on ``record.commit_ref``. On the job's own host and boot it also reads the process's liveness
first, so a job that died without a verdict is noticed at the next poll instead of at the timeout.
:func:`~airflow_iceberg_provider.rules.durable_jobs.decide` turns the witnesses into the decision a
retry would take; :func:`event_status` maps that decision to the event that resumes the task.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iceberg_provider.exceptions import IcebergCatalogUnavailableError, IcebergValidationError
from airflow_iceberg_provider.hooks import _process
from airflow_iceberg_provider.params import validate_table
from airflow_iceberg_provider.rules.durable_jobs import Decision, JobRecord, Liveness, decide
from airflow_iceberg_provider.triggers._event_state import validate_poll_interval

#: The event statuses, as ``execute_complete`` reads them.
VERDICT = "verdict"  # the job left its verdict: the task takes its result (a retry's TAKE_RESULT)
FAILED = "failed"  # the job recorded a failure: the task fails, its retry starts a new job
DIED = "died"  # the job ended without a verdict: the task fails, its retry starts a new job
TIMEOUT = "timeout"  # the deadline passed: the job was stopped where this host could reach it
ERROR = "error"  # the trigger could not poll (bad connection): the task fails, the job is kept


def event_status(decision: Decision, ledger_status: str | None) -> str | None:
    """The event a decision resumes the task with, ``None`` while the job is still on its way.

    :param decision: :func:`~airflow_iceberg_provider.rules.durable_jobs.decide` on the witnesses.
    :param ledger_status: the job's ledger status (``None``: no row).
    """
    if decision in (Decision.RECONNECT, Decision.AWAIT_LEDGER):
        return None
    if decision is Decision.RESUBMIT:
        return FAILED if ledger_status == "failed" else DIED
    return VERDICT  # TAKE_RESULT (and FRESH, which the operator re-decides itself)


def _timeout_at(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise IcebergValidationError(
            f"timeout_at={value!r} is invalid; pass the deadline as epoch seconds (a number), or None for none."
        )
    return float(value)


class IcebergSparkJobTrigger(BaseTrigger):
    """
    Fire once the durable Spark job named by ``record`` has a verdict, died, or ran past its deadline.

    Event payload: ``status`` (``verdict``, ``failed``, ``died``, ``timeout`` or ``error``),
    ``job_run_id``, ``ledger_status``, ``committed``, ``liveness``; a ``timeout`` also says whether
    the job was ``killed`` (possible only when the triggerer runs on the job's host), an ``error``
    carries a ``message``.

    :param record: the job record as ``task_state_store`` holds it (:meth:`JobRecord.to_json`).
    :param table: ``namespace.table`` of the operator (an application's commit is looked for there).
    :param iceberg_catalog_conn_id: the ``iceberg_catalog`` connection holding the ledger.
    :param governance_namespace: namespace of the governance tables (default from the connection).
    :param poll_interval: seconds between two looks at the witnesses.
    :param timeout_at: deadline in epoch seconds (``None``: none); past it the job is stopped where
        this host can reach it, and the task fails.
    """

    def __init__(
        self,
        *,
        record: Mapping[str, Any],
        table: str,
        iceberg_catalog_conn_id: str = "iceberg_catalog_default",
        governance_namespace: str | None = None,
        poll_interval: float = 10.0,
        timeout_at: float | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # Airflow's BaseTrigger.__init__ is not annotated
        job = JobRecord.from_json(record)
        if job is None or job.taken:
            raise IcebergValidationError(
                f"record={dict(record) if isinstance(record, Mapping) else record!r} is not the record of a running "
                "durable Spark job (JobRecord.to_json() of a job whose result is not taken yet); defer with the "
                "record the operator stored in task_state_store."
            )
        self.job = job
        self.table = validate_table(table).dotted
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.governance_namespace = governance_namespace
        self.poll_interval = validate_poll_interval(poll_interval)
        self.timeout_at = _timeout_at(timeout_at)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "record": self.job.to_json(),
                "table": self.table,
                "iceberg_catalog_conn_id": self.iceberg_catalog_conn_id,
                "governance_namespace": self.governance_namespace,
                "poll_interval": self.poll_interval,
                "timeout_at": self.timeout_at,
            },
        )

    # ------------------------------------------------------------------ blocking parts (worker thread)
    def _hook(self) -> Any:
        from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

        return IcebergCatalogHook(self.iceberg_catalog_conn_id, governance_namespace=self.governance_namespace)

    def _look(self, hook: Any) -> tuple[Liveness, str | None, bool]:
        alive = _process.liveness(self.job)  # first: a job writes its row (makes its commit) before it exits
        status, committed = hook.job_verdict(self.table, self.job)
        return alive, status, committed

    def _event(self, status: str, alive: Liveness, ledger_status: str | None, committed: bool, **extra: Any) -> Any:
        return TriggerEvent(
            {
                "status": status,
                "job_run_id": self.job.job_run_id,
                "ledger_status": ledger_status,
                "committed": committed,
                "liveness": alive.value,
                **extra,
            }
        )

    # ------------------------------------------------------------------ the loop
    async def run(self) -> AsyncIterator[TriggerEvent]:
        job = self.job
        self.log.info(
            "Waiting for durable Spark job %s (%s, job_run_id=%s, pid %s on %s)",
            job.job,
            job.mode,
            job.job_run_id,
            job.pid,
            job.host,
        )
        hook = await asyncio.to_thread(self._hook)  # importing the hook module must not block the loop
        while True:
            try:
                alive, status, committed = await asyncio.to_thread(self._look, hook)
            except IcebergCatalogUnavailableError as err:  # transient: keep waiting
                self.log.warning("Catalog unavailable while waiting for job %s (%s); retrying", job.job_run_id, err)
                alive, status, committed = Liveness.OTHER_HOST, None, False
            except Exception as err:  # bad connection or table: waiting cannot fix it
                yield self._event(ERROR, Liveness.OTHER_HOST, None, False, message=f"{type(err).__name__}: {err}")
                return
            else:
                outcome = event_status(decide(job, status, alive, committed=committed), status)
                if outcome is not None:
                    self.log.info(
                        "Job %s: process %s, ledger row %s -> %s",
                        job.job_run_id,
                        alive.value,
                        status or "none",
                        outcome,
                    )
                    yield self._event(outcome, alive, status, committed)
                    return
            if self.timeout_at is not None and time.time() >= self.timeout_at:
                killed = await asyncio.to_thread(_process.terminate, job)  # only where this host can reach it
                yield self._event(TIMEOUT, alive, status, committed, killed=killed)
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """A user marked the deferred task failed or succeeded, or cleared it: stop the job as the
        operator's ``on_kill`` would (SIGTERM to its process group, SIGKILL after the grace period),
        where this host can reach it. Not called on a triggerer restart or a timeout."""
        if await asyncio.to_thread(_process.terminate, self.job):
            self.log.info("Stopped Spark job %s (pid %s): the task was killed", self.job.job_run_id, self.job.pid)


__all__ = ["DIED", "ERROR", "FAILED", "TIMEOUT", "VERDICT", "IcebergSparkJobTrigger", "event_status"]
