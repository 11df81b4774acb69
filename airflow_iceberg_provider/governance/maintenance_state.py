"""The one read of what a maintenance decision needs: health, file layout, expiry preview.

``IcebergMaintenancePlanOperator.plan()`` and the health event trigger's
``maintenance_verdict`` both decide from the same facts; this module reads them once,
through the catalog hook (manifests of ``main``'s current state, metadata only, no JVM),
and hands them to the pure rules (:func:`~airflow_iceberg_provider.rules.maintenance.file_layout`,
:func:`~airflow_iceberg_provider.rules.maintenance.preview_table_expiry`,
:func:`~airflow_iceberg_provider.rules.maintenance.decide`). It holds no thresholds itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider.exceptions import IcebergRefusedError
from airflow_iceberg_provider.governance.holds import table_hold_violations
from airflow_iceberg_provider.rules.expiry import ExpiryPreview
from airflow_iceberg_provider.rules.maintenance import (
    MaintenancePolicy,
    PartitionFiles,
    TableDefaults,
    file_layout,
    preview_table_expiry,
)

if TYPE_CHECKING:
    from airflow_iceberg_provider.models import TableHealth


@dataclass(frozen=True)
class MaintenanceState:
    """What ``decide`` reads about a table: ``main``'s shape and the expiry preview."""

    health: TableHealth
    layout: list[PartitionFiles]
    #: ``None`` when gc is off, expiry is not among the policy's actions, or it was refused
    expiry: ExpiryPreview | None
    #: why the expiry preview refused (e.g. it would drop a legal hold), when refusals are tolerated
    expiry_refused: str | None = None
    #: legal holds the ledger records as placed that the table no longer has as placed
    hold_violations: tuple[Any, ...] = ()


def read_maintenance_state(
    hook: Any, tbl: Any, policy: MaintenancePolicy, *, now: int, tolerate_refusal: bool = False
) -> MaintenanceState:
    """Health, per-partition layout (only when there is more than one data file) and expiry preview.

    :param hook: the catalog hook the table was loaded with.
    :param tbl: the loaded pyiceberg table (its metadata is read once).
    :param tolerate_refusal: return an expiry refusal in ``expiry_refused`` instead of raising it.
    :raises IcebergRefusedError: the expiry would drop a legal hold (unless tolerated).
    """
    target = policy.target_file_size_bytes
    health = hook.health(tbl, target_file_size=target)
    layout = file_layout(hook.data_files(tbl), target_file_size=target) if health.data_files > 1 else []
    expiry, refused = None, None
    if TableDefaults.from_properties(tbl.metadata.properties).gc_enabled and "expire_snapshots" in policy.actions:
        try:
            expiry = preview_table_expiry(
                tbl, older_than=policy.expire_older_than_ms, retain_last=policy.retain_last, now_ms=now
            )
        except IcebergRefusedError as err:
            if not tolerate_refusal:
                raise
            refused = str(err)
    violations = tuple(table_hold_violations(hook, tbl))
    return MaintenanceState(
        health=health, layout=layout, expiry=expiry, expiry_refused=refused, hold_violations=violations
    )
