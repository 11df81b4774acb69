"""Deadline check for erasure requests (GDPR: one month; PIPEDA and Law 25: 30 days)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_provider._validation import validate_table
from airflow_iceberg_provider.erasure_policy import STATUS_DONE, overdue_requests
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

if TYPE_CHECKING:
    from airflow.sdk import Context


class IcebergErasureDeadlineExceededError(AirflowFailException):
    """At least one erasure request is past its legal deadline and not done."""


class IcebergErasureDeadlineSensor(BaseSensorOperator):
    """
    Fail when any erasure request older than the deadline is not ``done``.

    Reads only ``request_id``, ``received_at`` and ``status`` of the requests table
    (never the subject keys), through pyiceberg: no JVM.

    With ``wait_for_completion=False`` (default) it is a check: it succeeds at the first
    poke unless a request is overdue. With ``wait_for_completion=True`` it waits until
    every request is ``done`` and fails as soon as one passes its deadline.

    :param requests_table: ``namespace.table`` of erasure requests (templated).
    :param deadline_days: legal deadline in days from ``received_at`` (templated); 30 by default.
    :param wait_for_completion: keep poking until no request is open.
    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection (templated).
    """

    template_fields: Sequence[str] = ("requests_table", "deadline_days", "iceberg_catalog_conn_id")
    ui_color = "#f6d5d5"

    def __init__(
        self,
        *,
        requests_table: str,
        deadline_days: float | str = 30,
        wait_for_completion: bool = False,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.requests_table = requests_table
        self.deadline_days = deadline_days
        self.wait_for_completion = wait_for_completion
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id

    @cached_property
    def hook(self) -> IcebergCatalogHook:
        return IcebergCatalogHook(self.iceberg_catalog_conn_id)

    def _deadline(self) -> timedelta:
        try:
            days = -1.0 if isinstance(self.deadline_days, bool) else float(self.deadline_days)
        except (TypeError, ValueError):
            days = -1.0
        if not 0 < days <= 36500:  # also refuses NaN and infinity
            raise IcebergValidationError(
                f"deadline_days={self.deadline_days!r} is invalid; pass a positive number of days, at most 36500 (30 for PIPEDA / "
                "Law 25; GDPR allows one month)."
            )
        return timedelta(days=days)

    def poke(self, context: Context) -> bool:
        table = validate_table(self.requests_table, "requests_table").dotted
        deadline = self._deadline()
        rows = self.hook.erasure_request_states(table)
        now = datetime.now(UTC)
        overdue = overdue_requests(rows, now=now, deadline=deadline)
        if overdue:
            oldest = overdue[0]
            ids = ", ".join(r["request_id"] for r in overdue[:20]) + (" …" if len(overdue) > 20 else "")
            raise IcebergErasureDeadlineExceededError(
                f"{len(overdue)} erasure request(s) in {table} are older than {deadline.days} days and not done "
                f"(oldest {oldest['request_id']} received {oldest['received_at']:%Y-%m-%d}, status "
                f"{oldest['status']}): {ids}. Run the erasure, or resolve blocked requests (legal holds)."
            )
        open_requests = [r for r in rows if r.get("status") != STATUS_DONE]
        self.log.info("%d erasure request(s) open in %s, none past %s days", len(open_requests), table, deadline.days)
        return not (self.wait_for_completion and open_requests)
