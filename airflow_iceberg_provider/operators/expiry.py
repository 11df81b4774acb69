"""Snapshot expiry: the operator that expires old snapshots and deletes the files only they reference.

Owns the resolution of ``IcebergExpireSnapshotsOperator``'s arguments (cutoff, floor,
``retain_last``, explicit ids, ``gc.enabled``) and the choice between a catalog-only preview
(dry run, or nothing to expire: no JVM) and one ``expire_snapshots`` Spark job. Which
snapshots expire is decided by :func:`~airflow_iceberg_provider.rules.maintenance.preview_table_expiry`
(Iceberg's retention rules, pure); submitting, verifying and recording the job is
:class:`~airflow_iceberg_provider.operators._maintenance_base._IcebergMaintenanceOperator`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators._maintenance_base import (
    _IcebergMaintenanceOperator,
    _parse_ids,
    expiry_floor,
)
from airflow_iceberg_provider.rules.expiry import ExpiryPreview, iso, validate_retain_last
from airflow_iceberg_provider.rules.maintenance import (
    PlannedAction,
    TableDefaults,
    check_expiry_cutoff,
    check_gc_enabled,
    now_ms,
    preview_table_expiry,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table


@dataclass(frozen=True)
class _ExpiryRequest:
    """The resolved arguments of one expiry."""

    cutoff: int
    retain: int
    ids: list[int]
    dry_run: bool

    def action(self, count: int, *, stream_results: bool) -> PlannedAction:
        args = {"older_than_ms": self.cutoff, "retain_last": self.retain, "snapshot_ids": self.ids}
        return PlannedAction(
            "expire_snapshots", {**args, "stream_results": stream_results}, f"{count} snapshots to expire"
        )


class IcebergExpireSnapshotsOperator(_IcebergMaintenanceOperator):
    """
    Expire old snapshots and physically delete the files only they reference (Spark ``expire_snapshots``).

    Snapshots reachable from a branch or tag (legal holds included) are kept;
    the result lists which old snapshots were kept and by which ref. With
    ``dry_run=True`` the preview is computed through the catalog hook and no JVM starts.
    When nothing would expire, no Spark job is started either.

    :param older_than: expire snapshots older than this — a duration (``pendulum.duration(days=7)``,
        ``'7d'``, ``'P7D'``) or an instant (datetime, ISO-8601, epoch ms); default
        ``now - history.expire.max-snapshot-age-ms`` (templated).
    :param retain_last: keep at least this many snapshots of main (>= 1); default
        ``history.expire.min-snapshots-to-keep`` (templated).
    :param snapshot_ids: expire these snapshots too (refused if a ref points at one) (templated).
    :param older_than_floor: refuse an ``older_than`` newer than ``now - floor``; default
        ``[iceberg_provider] expiry_floor`` (e.g. ``6h``), else 1 h.
    :param dry_run: only report what would expire (no JVM, nothing deleted) (templated).
    :param stream_results: stream file deletions in the procedure (less driver memory).
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "older_than",
        "retain_last",
        "snapshot_ids",
        "dry_run",
    )

    def __init__(
        self,
        *,
        older_than: Any = None,
        retain_last: int | str | None = None,
        snapshot_ids: Sequence[int | str] | str | None = None,
        older_than_floor: timedelta | str | None = None,
        dry_run: bool | str = False,
        stream_results: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.older_than = older_than
        self.retain_last = retain_last
        self.snapshot_ids = snapshot_ids
        self.older_than_floor = older_than_floor
        self.dry_run = dry_run  # type: ignore[method-assign,assignment]  # shadows BaseOperator.dry_run()
        self.stream_results = stream_results
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if isinstance(self.retain_last, int):
            validate_retain_last(self.retain_last)
        params.duration(self.older_than_floor, "older_than_floor")

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        tbl, now = self.catalog_hook.load_table(self.ident), now_ms()
        request = self._resolve(tbl, now)
        preview = preview_table_expiry(
            tbl, older_than=request.cutoff, retain_last=request.retain, snapshot_ids=request.ids, now_ms=now
        )
        result: dict[str, Any] = {
            "table": self.ident.dotted,
            "older_than": iso(request.cutoff),
            "retain_last": request.retain,
            "dry_run": request.dry_run,
            "held_snapshots": preview.held_snapshots,
            "refs_expired": preview.refs_expired,
        }
        if preview.held_snapshots:
            self.log.info("Old snapshots kept by refs on %s: %s", self.ident, preview.held_snapshots)
        if request.dry_run or not preview.expire:
            return self._without_job(context, tbl, preview, result, dry_run=request.dry_run)
        action = request.action(len(preview.expire), stream_results=params.flag(self.stream_results, "stream_results"))
        results, after, _ = self.run_actions(
            context, [action], health_before=self.catalog_hook.health(tbl), expiry=preview
        )
        return with_string_ids(
            {
                **result,
                "expired_snapshots": len(preview.expire),
                "removed": results[0]["output"],
                "snapshots_after": after.snapshots,
                "spark_job": True,
            }
        )

    def _resolve(self, tbl: Table, now: int) -> _ExpiryRequest:
        """Rendered arguments, table defaults, the expiry floor and (unless a dry run) ``gc.enabled``."""
        props = tbl.metadata.properties
        defaults = TableDefaults.from_properties(props)
        cutoff = (
            now - defaults.max_snapshot_age_ms
            if params.is_unset(self.older_than)
            else params.cutoff_ms(self.older_than, "older_than", now=now)
        )
        check_expiry_cutoff(cutoff, now=now, floor=expiry_floor(self.older_than_floor))
        retain = validate_retain_last(
            defaults.min_snapshots_to_keep if params.is_unset(self.retain_last) else self.retain_last
        )
        ids = _parse_ids(self.snapshot_ids)
        dry_run = params.flag(self.dry_run, "dry_run")
        if not dry_run:
            check_gc_enabled(props, self.ident.dotted, "expire_snapshots")
        return _ExpiryRequest(cutoff, retain, ids, dry_run)

    def _without_job(
        self, context: Context, tbl: Table, preview: ExpiryPreview, result: dict[str, Any], *, dry_run: bool
    ) -> dict[str, Any]:
        """A dry run, or nothing to expire: record the preview; no Spark job."""
        head = self.catalog_hook.ref_snapshot_id(tbl)
        self._record(
            context,
            "maintenance.expire_snapshots",
            "dry_run" if dry_run else "noop",
            snapshot_before=head,
            snapshot_after=head,
            metrics={"would_expire": len(preview.expire), "snapshots": len(preview.expire) + len(preview.retain)},
            details=preview.to_dict(),
        )
        self.log.info(
            "%s: %d snapshots %s expire (no Spark job started)",
            self.ident,
            len(preview.expire),
            "would" if dry_run else "need to",
        )
        return with_string_ids({**result, "would_expire": preview.expire, "expired_snapshots": 0, "spark_job": False})
