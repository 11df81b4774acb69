"""The legal holds the ledger recorded, against the holds a table has: hold violations.

A hold placed through the provider is a ``create_tag`` ledger row with ``legal_hold`` in its
details; its release is a ``drop_tag`` row with ``legal_hold_released``. The provider's own verbs
never move, re-type or drop a hold (the ref guard), so a hold that the ledger records as placed
and not released, but that the table no longer has as placed, was changed by a writer outside the
provider. The health check, the maintenance plan and the governance view report it through
:func:`table_hold_violations` / :func:`violations_by_table`; the rules are
:func:`~airflow_iceberg_provider.rules.refs.placed_holds` and
:func:`~airflow_iceberg_provider.rules.refs.hold_violations`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider.core.governance import LEDGER, LedgerEntry
from airflow_iceberg_provider.rules.refs import HoldPlacement, HoldViolation, hold_violations, placed_holds

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_iceberg_provider.governance._reader import LedgerReaderHook

#: The ledger operations that place and release holds.
HOLD_OPERATIONS = ("create_tag", "drop_tag")


def recorded_holds(hook: LedgerReaderHook, table: str) -> dict[str, HoldPlacement]:
    """The holds of ``table`` the ledger records as placed and not released, by tag (none when there is
    no ledger yet: a read never creates the governance tables)."""
    if not hook.table_exists(f"{hook.governance.namespace}.{LEDGER.name}"):
        return {}
    entries = [e for op in HOLD_OPERATIONS for e in hook.governance.ledger_entries(table_name=table, operation=op)]
    return placed_holds(entries)


def table_hold_violations(hook: LedgerReaderHook, tbl: Table) -> list[HoldViolation]:
    """Holds of the loaded table ``tbl`` changed outside the provider (dropped, re-typed or moved)."""
    name = ".".join(tbl.name()[-2:])
    return hold_violations(recorded_holds(hook, name), tbl.metadata.refs)


def placed_holds_by_table(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, HoldPlacement]]:
    """Raw ``ledger`` rows (as read from the governance table) -> table -> placed, unreleased holds."""
    by_table: dict[str, list[LedgerEntry]] = {}
    for row in rows:
        if row.get("operation") in HOLD_OPERATIONS and row.get("table_name"):
            by_table.setdefault(str(row["table_name"]), []).append(LedgerEntry.from_row(dict(row)))
    return {table: placed_holds(entries) for table, entries in by_table.items()}


def violations_by_table(
    placed: Mapping[str, Mapping[str, HoldPlacement]], table: str, refs: Mapping[str, Any]
) -> list[HoldViolation]:
    """:func:`~airflow_iceberg_provider.rules.refs.hold_violations` of one table from
    :func:`placed_holds_by_table`'s answer."""
    return hold_violations(placed.get(table, {}), refs)


__all__ = ["recorded_holds", "placed_holds_by_table", "table_hold_violations", "violations_by_table"]
