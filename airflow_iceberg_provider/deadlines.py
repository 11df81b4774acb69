"""Airflow 3.3 deadline alerts tied to the statutory erasure deadline.

An erasure DAG that runs every ``cadence`` keeps a request's statutory deadline only if each run
finishes within ``deadline - cadence`` of being queued: a request received just after a run started
waits one cadence for the next run, which must then finish in what is left.
:func:`erasure_deadline_alert` builds that ``DeadlineAlert`` (reference: the run's queued time), and
:func:`erasure_deadline_missed` is its default callback: it runs in the triggerer, logs the miss at
ERROR and writes an ``erasure.deadline_missed`` ledger row, so the governance view shows it.

Which tool when:

* ``IcebergErasureDeadlineSensor`` (a task): inside a run, checks every request's own age against
  both deadlines and fails the run when one is overdue: per request, after the fact, with the ids.
* the erasure event trigger (an asset watcher): starts a run as soon as a request nears its
  deadline, so nothing waits for the next scheduled run.
* ``DeadlineAlert`` (this module): watches the *run* itself from the scheduler, without a worker:
  it fires even when the run is stuck queued, a worker died or a Spark job hangs.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from typing import Any

from airflow_iceberg_provider.exceptions import IcebergValidationError

log = logging.getLogger(__name__)

MISSED_OPERATION = "erasure.deadline_missed"


def erasure_run_budget(
    deadline: timedelta,
    cadence: timedelta,
    margin: timedelta = timedelta(0),
    copy_retention: timedelta = timedelta(0),
) -> timedelta:
    """How long one run may take so that every request meets ``deadline`` on every copy
    (``deadline - copy_retention - cadence - margin``).

    ``copy_retention`` is how long object-store versions and backups keep what a purge deleted
    (``IcebergCatalogHook.copy_retention().longest``): a purge at T leaves copies until T + retention,
    and the legal deadline applies to them too.
    """
    for name, value in (("deadline", deadline), ("cadence", cadence), ("margin", margin)):
        if not isinstance(value, timedelta) or value < timedelta(0):
            raise IcebergValidationError(f"{name}={value!r} must be a non-negative datetime.timedelta.")
    if not isinstance(copy_retention, timedelta) or copy_retention < timedelta(0):
        raise IcebergValidationError(
            f"copy_retention={copy_retention!r} must be a non-negative datetime.timedelta (how long object-store "
            "versions and backups keep erased bytes, e.g. timedelta(days=7))."
        )
    budget = deadline - copy_retention - cadence - margin
    if budget <= timedelta(0):
        raise IcebergValidationError(
            f"deadline={deadline} leaves no time for a run that starts every cadence={cadence} (margin={margin}, "
            f"copy_retention={copy_retention}): a request received just after a run starts waits a whole cadence, "
            "and its copies outlive the purge by the retention. Run the erasure more often, lower the margin, or "
            "shorten the retention of object-store versions and backups."
        )
    return budget


def erasure_deadline_alert(
    *,
    deadline: timedelta,
    cadence: timedelta,
    margin: timedelta = timedelta(0),
    callback: Any = None,
    iceberg_catalog_conn_id: str | None = "iceberg_catalog_default",
    name: str = "statutory erasure deadline",
    copy_retention: timedelta = timedelta(0),
) -> Any:
    """A ``DeadlineAlert`` on the run's queued time with ``deadline - copy_retention - cadence - margin``
    as interval.

    :param deadline: the statutory (physical) deadline of a request, e.g. ``timedelta(days=30)``; for
        the logical deadline pass that one (e.g. ``timedelta(hours=72)``).
    :param cadence: how often the DAG runs (``timedelta(days=1)`` for ``@daily``).
    :param margin: time kept back for a retry or a person to act.
    :param callback: an ``AsyncCallback``/``SyncCallback``; default :func:`erasure_deadline_missed`.
    :param iceberg_catalog_conn_id: where the default callback writes its ledger row (``None``: log only).
    :param name: the alert's name, as Airflow shows it (default ``statutory erasure deadline``).
    :param copy_retention: how long object-store versions and backups keep erased bytes (the longest of
        the retentions the connection and tables declare); the deadline applies to every copy, so the
        run must finish that much earlier.
    """
    from airflow.sdk.definitions.callback import AsyncCallback
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference

    budget = erasure_run_budget(deadline, cadence, margin, copy_retention)
    if callback is None:
        callback = AsyncCallback(
            erasure_deadline_missed,
            kwargs={
                "statutory_deadline_hours": deadline.total_seconds() / 3600,
                "run_budget_hours": budget.total_seconds() / 3600,
                "copy_retention_hours": copy_retention.total_seconds() / 3600,
                "iceberg_catalog_conn_id": iceberg_catalog_conn_id,
            },
        )
    return DeadlineAlert(reference=DeadlineReference.DAGRUN_QUEUED_AT, interval=budget, callback=callback, name=name)


def missed_details(context: dict[str, Any] | None, **facts: Any) -> dict[str, Any]:
    """The ledger ``details`` of a missed run deadline (pure)."""
    dag_run = (context or {}).get("dag_run") or {}
    deadline = (context or {}).get("deadline") or {}
    when = deadline.get("deadline_time")
    return {
        "dag_id": dag_run.get("dag_id"),
        "run_id": dag_run.get("dag_run_id") or dag_run.get("run_id"),
        "queued_at": dag_run.get("queued_at"),
        "deadline_time": when.isoformat() if isinstance(when, datetime) else when,
        **facts,
    }


async def erasure_deadline_missed(
    context: dict[str, Any] | None = None,
    *,
    statutory_deadline_hours: float | None = None,
    run_budget_hours: float | None = None,
    iceberg_catalog_conn_id: str | None = "iceberg_catalog_default",
    copy_retention_hours: float | None = None,
    **_: Any,
) -> dict[str, Any]:
    """Deadline callback (triggerer): log the miss at ERROR and record it in the ledger."""
    details = missed_details(
        context,
        statutory_deadline_hours=statutory_deadline_hours,
        run_budget_hours=run_budget_hours,
        copy_retention_hours=copy_retention_hours,
    )
    log.error(
        "Erasure run %s of %s did not finish within %s h of being queued (deadline %s): requests received just "
        "after the previous run may miss their statutory deadline of %s h. Check the run now.",
        details["run_id"],
        details["dag_id"],
        run_budget_hours,
        details["deadline_time"],
        statutory_deadline_hours,
    )
    if iceberg_catalog_conn_id:
        await asyncio.to_thread(_record, iceberg_catalog_conn_id, details)
    return details


def _record(conn_id: str, details: dict[str, Any]) -> None:
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    try:
        IcebergCatalogHook(conn_id).governance.record_ledger(
            operation=MISSED_OPERATION,
            table=None,
            status="warned",
            context=None,
            details=details,
        )
    except Exception:  # the alert is logged above; a catalog outage must not hide it
        log.exception("Could not record the missed erasure deadline in the ledger")


__all__ = ["erasure_deadline_alert", "erasure_deadline_missed", "erasure_run_budget", "missed_details"]
