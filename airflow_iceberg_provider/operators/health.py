"""Health alerts on absolute thresholds, and metadata hygiene — through the catalog only (no JVM).

``IcebergTableHealthCheckOperator`` reads a table's health (manifests only, never data
files) and compares it with the thresholds practitioners alert on
(:mod:`~airflow_iceberg_provider.rules.health`): it fails or warns, as configured, naming
each crossed threshold with its value, and its XCom (``healthy``, ``breaches``) serves as a
branch condition. ``IcebergMetadataHygieneOperator`` bounds the metadata log through table
properties and deletes metadata files proven unreferenced (left by failed commits).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergHealthThresholdError, IcebergValidationError
from airflow_iceberg_provider.governance.holds import table_hold_violations
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergBaseOperator
from airflow_iceberg_provider.rules.erasure import bloom_filter_warnings
from airflow_iceberg_provider.rules.health import (
    METADATA_LEFTOVER_DEFAULT_AGE,
    THRESHOLDS,
    breaches,
    hold_violation_report,
    metadata_leftovers,
    metadata_property_changes,
    resolve_thresholds,
)
from airflow_iceberg_provider.rules.maintenance import now_ms

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_iceberg_provider.models import TableHealth
    from airflow_iceberg_provider.rules.health import Breach, HealthThresholds

ON_BREACH = ("fail", "warn")


class IcebergTableHealthCheckOperator(IcebergBaseOperator):
    """
    Check a table's health against absolute thresholds; fail or warn naming each crossed one.

    Thresholds (argument, else table property ``airflow-iceberg.health.<key>``, else default;
    ``"off"`` disables one): ``max_files`` (10,000 data files), ``min_avg_file_size_bytes``
    (10 MiB), ``max_snapshots`` (1,000), ``max_metadata_bytes`` (50 MiB metadata.json),
    ``max_metadata_log`` (off). Reads manifests only; no JVM.

    A legal hold that the ledger records as placed and not released, but that the table no
    longer has as placed (dropped, turned into a branch or moved by a writer outside the
    provider), is a hold violation: listed in ``hold_violations`` and treated as a breach.

    :param on_breach: ``"fail"`` (default) raises :class:`IcebergHealthThresholdError` after
        pushing the result to XCom; ``"warn"`` logs each breach at WARNING and succeeds.
    :param subject_columns: erasure subject columns: one WARNING (and an entry in the
        XCom's ``warnings``) per column written without a Parquet bloom filter; a name that is
        not a column is refused before anything is read or recorded.
    :param max_files: most data files (default 10,000; ``"off"`` disables the check) (templated).
    :param min_avg_file_size_bytes: smallest average data file size in bytes (default 10 MiB) (templated).
    :param max_snapshots: most snapshots kept in the metadata (default 1,000) (templated).
    :param max_metadata_bytes: largest current ``metadata.json`` in bytes (default 50 MiB) (templated).
    :param max_metadata_log: most entries of the metadata log (default off) (templated).
    :return: ``{"table", "healthy", "breaches": [{"threshold", "limit", "value", "message"}],
        "hold_violations": [{"tag", "problem", "placed_snapshot_id", "found_snapshot_id", "case_id", "message"}],
        "health", "thresholds", "warnings"}`` — e.g. ``ti.xcom_pull(...)["healthy"]`` in a ``@task.branch``.
    """

    acts_on_governance_tables = True  # keeps every row: governance tables are maintained too

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, "on_breach", "subject_columns", *THRESHOLDS)

    def __init__(
        self,
        *,
        on_breach: str = "fail",
        max_files: int | str | None = None,
        min_avg_file_size_bytes: int | str | None = None,
        max_snapshots: int | str | None = None,
        max_metadata_bytes: int | str | None = None,
        max_metadata_log: int | str | None = None,
        subject_columns: str | Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.on_breach = on_breach
        self.subject_columns = subject_columns
        self.max_files = max_files
        self.min_avg_file_size_bytes = min_avg_file_size_bytes
        self.max_snapshots = max_snapshots
        self.max_metadata_bytes = max_metadata_bytes
        self.max_metadata_log = max_metadata_log
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if not params.is_templated(self.on_breach):
            _validate_on_breach(self.on_breach)

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        on_breach = _validate_on_breach(self.on_breach)
        tbl = self.catalog_hook.load_table(self.ident)
        thresholds = resolve_thresholds(tbl.metadata.properties, **{n: getattr(self, n) for n in THRESHOLDS})
        warnings = self._subject_column_warnings(tbl)
        health = self.catalog_hook.health(tbl)
        found = breaches(health, thresholds)
        violations = hold_violation_report(self.ident.dotted, table_hold_violations(self.catalog_hook, tbl))
        result = {**self._result(health, thresholds, found), "warnings": warnings, "hold_violations": violations}
        result["healthy"] = not found and not violations
        bad = not result["healthy"]
        self._record(
            context, health, result, "succeeded" if not bad else ("failed" if on_breach == "fail" else "warned")
        )
        for b in found:
            self.log.warning("%s health threshold crossed: %s", self.ident, b.message)
        for v in violations:
            self.log.error("%s legal hold violation: %s", self.ident, v["message"])
        if bad and on_breach == "fail":
            context["ti"].xcom_push(key="return_value", value=result)
            raise self._breach_error(found, violations)
        self.log.info("%s health: %s", self.ident, "within all thresholds" if not found else f"{len(found)} breach(es)")
        return result

    def _subject_column_warnings(self, tbl: Any) -> list[str]:
        """Erasure subject columns without a bloom filter (logged now; erasure prunes less there)."""
        raw = self.subject_columns
        columns = [raw] if isinstance(raw, str) else list(raw or [])
        names = [f.name for f in tbl.schema().fields]
        for c in columns:
            if c not in names:
                raise IcebergValidationError(
                    f"subject_columns entry {c!r} is not a column of {self.ident}; pass one of {names}."
                )
        warnings = bloom_filter_warnings(self.ident.dotted, columns, tbl.metadata.properties)
        for w in warnings:
            self.log.warning("%s", w)
        return warnings

    def _result(self, health: TableHealth, thresholds: HealthThresholds, found: Sequence[Breach]) -> dict[str, Any]:
        return with_string_ids(
            {
                "table": self.ident.dotted,
                "healthy": not found,
                "breaches": [b.to_dict() for b in found],
                "health": health.to_dict(),
                "thresholds": thresholds.to_dict(),
            }
        )

    def _record(self, context: Context, health: TableHealth, result: dict[str, Any], status: str) -> None:
        self.catalog_hook.governance.record_ledger(
            operation="health_check",
            table=self.ident.dotted,
            status=status,
            context=context,
            snapshot_before=health.snapshot_id,
            snapshot_after=health.snapshot_id,
            metrics=result["health"],
            details={
                "breaches": result["breaches"],
                "thresholds": result["thresholds"],
                "hold_violations": result["hold_violations"],
            },
        )

    def _breach_error(
        self, found: Sequence[Breach], violations: Sequence[dict[str, Any]] = ()
    ) -> IcebergHealthThresholdError:
        parts = []
        if violations:
            parts.append(
                f"{self.ident} has {len(violations)} legal hold violation(s): "
                + "; ".join(v["message"] for v in violations)
                + "."
            )
        if found:
            parts.append(
                f"{self.ident} crossed {len(found)} health threshold(s): "
                + "; ".join(b.message for b in found)
                + ". Run the maintenance plan (IcebergMaintenancePlanOperator) or raise the threshold "
                "(argument or table property airflow-iceberg.health.<key>)."
            )
        return IcebergHealthThresholdError(" ".join(parts))


def _validate_on_breach(value: Any) -> str:
    return params.choice(value, "on_breach", ON_BREACH)


class IcebergMetadataHygieneOperator(IcebergBaseOperator):
    """
    Keep a table's metadata bounded: cap the metadata log and delete leftover metadata files.

    * ``previous_versions_max`` (optional): set ``write.metadata.delete-after-commit.enabled=true``
      and ``write.metadata.previous-versions-max`` (one pyiceberg commit, only when they differ);
    * leftovers: ``*.metadata.json`` files in the metadata directory that are neither the
      catalog's current pointer nor in the metadata log, and older than ``older_than``
      (default 1 h, floor 15 min, so an in-flight commit's file is never touched). A failed
      compare-and-swap leaves such a file; readers that pick the highest version number
      (ClickHouse's default lookup) could otherwise read a state that was never committed.

    :param previous_versions_max: metadata log length to keep (templated); ``None`` leaves properties.
    :param older_than: minimum age of a leftover (duration, templated).
    :param dry_run: list leftovers without deleting (templated).
    :return: ``{"table", "properties_set", "leftovers", "deleted", "dry_run"}``
    """

    acts_on_governance_tables = True  # keeps every row: governance tables are maintained too

    template_fields: Sequence[str] = (
        *IcebergBaseOperator.template_fields,
        "previous_versions_max",
        "older_than",
        "dry_run",
    )

    def __init__(
        self,
        *,
        previous_versions_max: int | str | None = None,
        older_than: timedelta | str = METADATA_LEFTOVER_DEFAULT_AGE,
        dry_run: bool | str = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.previous_versions_max = previous_versions_max
        self.older_than = older_than
        self.dry_run = dry_run  # type: ignore[method-assign,assignment]  # shadows BaseOperator.dry_run()
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        result = metadata_hygiene(
            self.catalog_hook,
            self.ident.dotted,
            previous_versions_max=params.positive_int(self.previous_versions_max, "previous_versions_max"),
            older_than=params.duration(self.older_than, "older_than", required=True),
            dry_run=params.flag(self.dry_run, "dry_run"),
            context=context,
        )
        self.log.info(
            "%s metadata hygiene: properties set %s, %d leftover(s) %s",
            self.ident,
            result["properties_set"] or "none",
            len(result["leftovers"]),
            "listed" if result["dry_run"] else "deleted",
        )
        return result


def metadata_hygiene(
    hook: Any,
    table: str,
    *,
    previous_versions_max: int | None,
    older_than: timedelta,
    dry_run: bool,
    context: Any = None,
) -> dict[str, Any]:
    """Plan (pure), apply, verify and record metadata hygiene for one table (shared with the plan)."""
    started = datetime.now(UTC)
    tbl = hook.load_table(table)
    changes = metadata_property_changes(tbl.metadata.properties, previous_versions_max)
    leftovers = metadata_leftovers(
        hook.metadata_files(tbl),
        current=tbl.metadata_location,
        metadata_log=[e.metadata_file for e in tbl.metadata.metadata_log],
        now_ms=now_ms(),
        min_age=older_than,
    )
    if not dry_run:
        if changes:
            hook.ensure_table_properties(tbl, changes)
        hook.delete_files(tbl, leftovers)
        current = hook.metadata_location(table)
        if any(p == current for p in leftovers):  # never: the current pointer is excluded by construction
            raise AssertionError("deleted the current metadata file")
    result = {
        "table": table,
        "properties_set": changes,
        "leftovers": leftovers,
        "deleted": 0 if dry_run else len(leftovers),
        "dry_run": dry_run,
    }
    hook.governance.record_ledger(
        operation="maintenance.metadata_hygiene",
        table=table,
        status="dry_run" if dry_run else ("noop" if not changes and not leftovers else "succeeded"),
        context=context,
        metrics={"leftovers": len(leftovers), "deleted": result["deleted"]},
        details={"properties_set": changes, "leftovers": leftovers[:200]},
        started_at=started,
    )
    return result


HYGIENE_OPTIONS = ("previous_versions_max", "older_than", "dry_run")


def run_metadata_hygiene(hook: Any, table: str, options: Any, context: Any = None) -> dict[str, Any]:
    """Metadata hygiene from a plan's ``metadata_hygiene={...}`` option (validated here, one home)."""
    if not isinstance(options, dict):
        options = {} if params.flag(options, "metadata_hygiene") else options
    if not isinstance(options, dict) or set(options) - set(HYGIENE_OPTIONS):
        raise IcebergValidationError(
            f"metadata_hygiene={options!r} must be True or a dict with keys from {HYGIENE_OPTIONS}, e.g. "
            "{'previous_versions_max': 20}."
        )
    pvm = options.get("previous_versions_max")
    return metadata_hygiene(
        hook,
        table,
        previous_versions_max=params.positive_int(pvm, "metadata_hygiene.previous_versions_max"),
        older_than=params.duration(
            options.get("older_than", METADATA_LEFTOVER_DEFAULT_AGE), "metadata_hygiene.older_than", required=True
        ),
        dry_run=params.flag(options.get("dry_run", False), "metadata_hygiene.dry_run"),
        context=context,
    )
