"""Deadline check for erasure requests: a logical deadline (hours) and a physical one
(GDPR: one month; PIPEDA and Law 25: 30 days)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_provider import params
from airflow_iceberg_provider.core.erasure_lifecycle import FINAL_STATUSES
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.params import validate_table
from airflow_iceberg_provider.rules.erasure import deadline_report, validate_deadlines
from airflow_iceberg_provider.rules.erasure_retention import longest, retention_fits

if TYPE_CHECKING:
    from airflow.sdk import Context


class IcebergErasureDeadlineExceededError(AirflowFailException):
    """At least one erasure request is past its logical or physical deadline."""


class IcebergErasureDeadlineSensor(BaseSensorOperator):
    """
    Fail when an erasure request is past either deadline; warn about those at risk.

    * **logical deadline** (``logical_deadline_hours``, 24 by default): a request still
      ``pending`` (or ``blocked``) that long after ``received_at`` is overdue — its rows are
      still visible;
    * **physical deadline** (``deadline_days``, 30 by default): a request not ``erased``
      that long after ``received_at`` is overdue.

    A logical deadline longer than the physical one is refused. Requests past
    ``warn_fraction`` of either deadline are counted as at risk in the log (ids never logged). Requests
    whose evidence says their key matched no row in any table (``rows_found = 0``) are
    logged as a warning: a typo, or a difference in case or whitespace.

    Reads only ``request_id``, ``received_at`` and ``status`` of the requests table and
    ``request_id``/``rows_found`` of the evidence (never a subject key), through
    pyiceberg: no JVM.

    With ``wait_for_completion=False`` (default) it is a check: it succeeds at the first
    poke unless a request is overdue. With ``wait_for_completion=True`` it waits until
    every request is erased and fails as soon as one passes a deadline.

    The physical deadline applies to every copy: when the catalog connection or the tables in
    scope declare how long object-store versions and backups keep erased bytes
    (``erasure.copies.versioning-retention-days``, ``erasure.copies.backup-retention-days``), a
    request is overdue once it can no longer be unreachable in time for its last copy to be gone
    by the deadline (``received_at + deadline_days - retention``), and an erased request whose
    copies outlive the deadline stays overdue until they are gone.

    :param requests_table: ``namespace.table`` of erasure requests (templated).
    :param deadline_days: physical deadline in days from ``received_at`` (templated); 30 by default.
    :param logical_deadline_hours: logical deadline in hours (templated); 24 by default.
    :param warn_fraction: share of a deadline after which a request is reported at risk.
    :param wait_for_completion: keep poking until no request is open.
    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection (templated).
    :param tables_in_scope: tables the requests cover (templated); their own retention properties
        count too. Default: the connection's declaration only.
    """

    template_fields: Sequence[str] = (
        "requests_table",
        "deadline_days",
        "logical_deadline_hours",
        "iceberg_catalog_conn_id",
        "tables_in_scope",
    )
    ui_color = "#f6d5d5"

    def __init__(
        self,
        *,
        requests_table: str,
        deadline_days: float | str = 30,
        logical_deadline_hours: float | str = 24,
        warn_fraction: float = 0.8,
        wait_for_completion: bool = False,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        tables_in_scope: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.requests_table = requests_table
        self.deadline_days = deadline_days
        self.logical_deadline_hours = logical_deadline_hours
        self.warn_fraction = warn_fraction
        self.wait_for_completion = wait_for_completion
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.tables_in_scope = tables_in_scope

    @cached_property
    def hook(self) -> IcebergCatalogHook:
        return IcebergCatalogHook(self.iceberg_catalog_conn_id)

    def poke(self, context: Context) -> bool:
        params.resolve_flags(self)  # strict flags first, before any I/O
        table = validate_table(self.requests_table, "requests_table").dotted
        logical, physical = validate_deadlines(self.logical_deadline_hours, self.deadline_days)
        scope = [validate_table(t, "tables_in_scope").dotted for t in self.tables_in_scope or []]
        retention = longest([self.hook.copy_retention(), *(self.hook.copy_retention(t) for t in scope)])
        where = f"the retention of copies declared on connection {self.iceberg_catalog_conn_id!r}"
        retention_fits(retention, physical, where=where + (f" and tables {scope}" if scope else ""))
        rows = self.hook.governance.erasure_request_states(table)
        report = deadline_report(
            rows,
            now=datetime.now(UTC),
            logical=logical,
            physical=physical,
            warn_fraction=self.warn_fraction,
            copy_retention=retention.longest,
        )
        self._warn(report, rows)
        overdue = report["logical_overdue"] + report["physical_overdue"]
        if overdue:
            parts = []
            copies = f", every copy: {retention.longest.total_seconds() / 86400:g} days of retention counted"
            for kind, limit in (
                ("logical", f"{logical.total_seconds() / 3600:g} hours"),
                ("physical", f"{physical.days} days" + (copies if retention.longest else "")),
            ):
                late = report[f"{kind}_overdue"]
                if late:
                    parts.append(f"{len(late)} past the {kind} deadline ({limit})")
            raise IcebergErasureDeadlineExceededError(
                f"Erasure requests in {table} are overdue — " + "; ".join(parts) + " (their ids are on the "
                "governance view's erasure page and in the requests table). Run the logical erasure "
                "(phase='logical') or the purge (phase='purge' / maintenance erasure_purge), or resolve blocked "
                "requests (legal holds)." + _copies_note(report["physical_overdue"])
            )
        open_requests = [r for r in rows if r.get("status") not in FINAL_STATUSES]
        self.log.info("%d erasure request(s) open in %s, none past a deadline", len(open_requests), table)
        return not (self.wait_for_completion and open_requests)

    def _warn(self, report: dict[str, list[dict[str, Any]]], rows: list[dict[str, Any]]) -> None:
        for kind in ("logical", "physical"):
            risk = report[f"{kind}_at_risk"]
            if risk:
                self.log.warning(
                    "%d erasure request(s) at risk of missing the %s deadline (ids on the governance view's "
                    "erasure page)",
                    len(risk),
                    kind,
                )
        found: dict[str, int] = {}
        for e in self.hook.governance.read("erasure_evidence"):
            if e.get("rows_found") is not None:  # a nullable column
                found[e["request_id"]] = found.get(e["request_id"], 0) + int(e["rows_found"])
        ids = {r["request_id"] for r in rows}
        unmatched = sorted(r for r, n in found.items() if n == 0 and r in ids)
        if unmatched:
            self.log.warning(
                "%d erasure request(s) matched no row in any table (rows_found = 0). A typo, or a difference "
                "in case or whitespace? Matching is exact; find them in the evidence table (rows_found = 0) or "
                "on the governance view's erasure page and check their keys.",
                len(unmatched),
            )


def _copies_note(overdue: list[dict[str, Any]]) -> str:
    late = [r for r in overdue if r.get("copies_late")]
    if not late:
        return ""
    last = max(r["gone_from_copies_by"] for r in late)
    return (
        f" {len(late)} of them are erased from their tables, but object-store versions or backups keep copies "
        f"past the deadline (the last gone by {last.isoformat()}): delete those copies now (noncurrent versions, "
        "backups) and record it, or shorten the declared retention."
    )
