"""Durable Spark jobs: what a retried task does with the job an earlier try started (pure rules).

A durable Spark task starts its job (spark-submit's JVM, or the Spark Connect client process) as a
detached process of its own session, and records the job's identity in the task's
``task_state_store`` before it waits for it. When the task process dies (SIGKILL, OOM killer, lost
worker) the job keeps running; the retry reads the record back and asks its witnesses, in this
order:

1. is the recorded process still alive (same pid, same start time, same boot, same host)?
2. does the governance ledger hold the job's own row (``event_id = job_run_id``), and with which
   status?
3. for a user application (a record with :attr:`JobRecord.commit_ref`), which writes no ledger
   row of its own: does the catalog hold its commit, a snapshot on ``commit_ref`` beyond
   ``commit_base`` whose summary carries the job run id (``airflow.job-run-id``)?

Liveness is read *before* the ledger and the catalog: a job writes its row (and makes its commit)
before it exits, so a process seen gone followed by "no row" ("no commit") means that the job died
without a verdict, never that its row is still on its way.

=================  ===============  ============  ================================================
ledger row         commit (app.)    process       decision
=================  ===============  ============  ================================================
``failed``         any              any           :attr:`Decision.RESUBMIT` (a new job, a new job
                                                  run id)
any other status   any              any           :attr:`Decision.TAKE_RESULT` (no new JVM; verify
                                                  its commit)
none               any              alive         :attr:`Decision.RECONNECT` (wait for it, then as
                                                  above with the process gone)
none               yes              gone          :attr:`Decision.TAKE_RESULT` (the application
                                                  committed; the retry writes its ledger row)
none               yes              another host  :attr:`Decision.TAKE_RESULT`
none               no (or built-in  gone          :attr:`Decision.RESUBMIT` (it died without a
                   job)                           verdict; the operator's own re-run rules apply)
none               no (or built-in  another host  :attr:`Decision.AWAIT_LEDGER` (cannot be checked
                   job)                           from here: wait for its row, or its commit, never
                                                  start a second job)
=================  ===============  ============  ================================================

No record, a record whose result a finished try already took (``taken``), or a record of an
earlier *run* of the task (the task was cleared: Airflow gave it a new try budget, ``max_tries``)
means :attr:`Decision.FRESH`: a cleared task runs again instead of returning an old result.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

#: ``task_state_store`` key of the job record. Renaming it breaks the retries of running tasks.
STATE_KEY = "iceberg_spark_job"
#: Record layout version.
RECORD_VERSION = 1


class Decision(enum.StrEnum):
    FRESH = "fresh"
    RECONNECT = "reconnect"
    TAKE_RESULT = "take_result"
    RESUBMIT = "resubmit"
    AWAIT_LEDGER = "await_ledger"


@dataclass(frozen=True)
class JobRecord:
    """The identity of a detached job, as stored in ``task_state_store`` (JSON)."""

    job_run_id: str
    job: str
    mode: str  # "spark_submit" or "spark_connect"
    pid: int
    start_ticks: int | None
    host: str
    boot_id: str | None
    workdir: str
    log_path: str
    started_at: str
    #: what the operator needs after the job to verify and report it (its before-state)
    resume: dict[str, Any] = field(default_factory=dict)
    #: the task instance's ``max_tries`` when the job started (a clear changes it, a retry does not)
    max_tries: int | None = None
    taken: bool = False
    #: a user application's ref: its commit there (beyond ``commit_base``, carrying the job run id)
    #: witnesses its result; ``None`` for a built-in job, whose own ledger row is the witness
    commit_ref: str | None = None
    #: the snapshot ``commit_ref`` pointed at when the application started
    commit_base: int | None = None
    version: int = RECORD_VERSION

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Any) -> JobRecord | None:
        """The record, or ``None`` for a missing, foreign or malformed value (then a fresh job starts)."""
        if not isinstance(value, Mapping) or value.get("version") != RECORD_VERSION:
            return None
        try:
            return cls(
                job_run_id=str(value["job_run_id"]),
                job=str(value["job"]),
                mode=str(value["mode"]),
                pid=int(value["pid"]),
                start_ticks=None if value.get("start_ticks") is None else int(value["start_ticks"]),
                host=str(value["host"]),
                boot_id=value.get("boot_id"),
                workdir=str(value["workdir"]),
                log_path=str(value["log_path"]),
                started_at=str(value["started_at"]),
                resume=dict(value.get("resume") or {}),
                max_tries=None if value.get("max_tries") is None else int(value["max_tries"]),
                taken=bool(value.get("taken", False)),
                commit_ref=None if value.get("commit_ref") is None else str(value["commit_ref"]),
                commit_base=None if value.get("commit_base") is None else int(value["commit_base"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def as_taken(self) -> JobRecord:
        return replace(self, taken=True)


class Liveness(enum.StrEnum):
    ALIVE = "alive"
    GONE = "gone"
    OTHER_HOST = "other_host"


def decide(
    record: JobRecord | None,
    ledger_status: str | None,
    liveness: Liveness,
    *,
    max_tries: int | None = None,
    committed: bool = False,
) -> Decision:
    """What the retry does with ``record``'s job, given its ledger status, its commit and its process.

    :param ledger_status: the ``status`` of the job's own ledger row, ``None`` when it has none.
    :param liveness: the recorded process, read **before** the ledger and the catalog.
    :param max_tries: the running task instance's ``max_tries``.
    :param committed: whether the catalog holds the application's commit (``record.commit_ref``,
        beyond ``record.commit_base``, carrying the job run id); ignored for a built-in job.
    """
    if record is None or record.taken:
        return Decision.FRESH
    if max_tries is not None and record.max_tries is not None and max_tries != record.max_tries:
        return Decision.FRESH  # cleared: a new run of the task, not a retry of the one that started the job
    if ledger_status == "failed":
        return Decision.RESUBMIT
    if ledger_status is not None:
        return Decision.TAKE_RESULT
    if liveness is Liveness.ALIVE:
        return Decision.RECONNECT
    if committed and record.commit_ref is not None:
        return Decision.TAKE_RESULT  # an application writes no row: its commit is its result
    if liveness is Liveness.OTHER_HOST:
        return Decision.AWAIT_LEDGER
    return Decision.RESUBMIT


__all__ = ["STATE_KEY", "Decision", "JobRecord", "Liveness", "decide"]
