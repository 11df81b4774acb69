"""Airflow Assets for Iceberg tables: one URI form, one way to emit events.

URI form emitted by this provider::

    iceberg://<catalog>/<namespace>/<table>        e.g. iceberg://lakehouse/sales/orders

``<catalog>`` is the connection's ``catalog_name`` (the Spark catalog name too). The
provider registers **no** asset-URI handler for the ``iceberg`` scheme, so Airflow accepts
every ``iceberg://`` URI other tools already use (e.g. ``iceberg://sales.orders``); when
this provider matches an outlet to a table it understands both forms
(:func:`parse_iceberg_asset_uri`).

Operators that change a table (WAP publish, erasure, maintenance…) set the event's
``extra`` to ``{"table", "catalog", "snapshot_id", …}`` on every Asset outlet that names
their table (:func:`emit_table_asset_events`); a consumer DAG scheduled on the Asset reads
the snapshot id from ``triggering_asset_events``. Snapshot ids in ``extra`` are decimal
**strings** (``"3742192974030064337"``): the Asset view parses ``extra`` in the browser, which
rounds 64-bit integers (:mod:`airflow_iceberg_provider.ids`); every operator accepts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_iceberg_provider.ids import id_str, with_string_ids
from airflow_iceberg_provider.params import validate_name, validate_table

if TYPE_CHECKING:
    from airflow.sdk import Asset

SCHEME = "iceberg"


def iceberg_asset_uri(table: str, catalog: str = "lakehouse") -> str:
    """``iceberg://<catalog>/<namespace>/<table>``: the Asset URI this provider emits for a table."""
    ident = validate_table(table)
    validate_name(catalog, "catalog")
    return f"{SCHEME}://{catalog}/{ident.namespace}/{ident.name}"


def iceberg_asset(table: str, catalog: str = "lakehouse", **kwargs: Any) -> Asset:
    """The Airflow Asset of a table (use as ``outlets=[...]`` / a consumer's ``schedule``).

    :param table: ``namespace.table``.
    :param catalog: the catalog name of the URI ``iceberg://<catalog>/<namespace>/<table>``
        (the connection's ``catalog_name``; ``lakehouse`` by default).
    :param kwargs: other :class:`~airflow.sdk.Asset` arguments (``name``, ``group``, ``extra``, ...).
    """
    from airflow.sdk import Asset

    return Asset(iceberg_asset_uri(table, catalog), **kwargs)


def parse_iceberg_asset_uri(uri: str) -> tuple[str | None, str, str] | None:
    """``(catalog or None, namespace, table)`` of an ``iceberg://`` URI, ``None`` if it names no table.

    Accepted: ``iceberg://cat/ns/table`` and ``iceberg://cat/ns.table`` (with catalog),
    ``iceberg://ns.table`` and ``iceberg://ns/table`` (catalog-less). Never raises: URIs
    from other tools must never break a DAG or a task.
    """
    try:
        parts = urlsplit(uri)
    except ValueError:
        return None
    if parts.scheme.lower() != SCHEME:
        return None
    segs = [s for s in [parts.netloc, *parts.path.split("/")] if s]
    if len(segs) == 1 and segs[0].count(".") == 1:  # iceberg://ns.table
        ns, table = segs[0].split(".")
        return None, ns, table
    if len(segs) == 2:
        if segs[1].count(".") == 1:  # iceberg://cat/ns.table
            ns, table = segs[1].split(".")
            return segs[0], ns, table
        return None, segs[0], segs[1]  # iceberg://ns/table
    if len(segs) == 3:
        return segs[0], segs[1], segs[2]
    return None


def asset_names_table(uri: str, table: str, catalog: str) -> bool:
    """Whether an Asset URI refers to ``table`` in ``catalog`` (catalog-less forms match any catalog)."""
    parsed = parse_iceberg_asset_uri(uri)
    if parsed is None:
        return False
    cat, ns, name = parsed
    ident = validate_table(table)
    return (ns, name) == (ident.namespace, ident.name) and cat in (None, catalog)


def emit_table_asset_events(
    outlets: Any,
    context: Mapping[str, Any] | None,
    *,
    table: str,
    catalog: str,
    snapshot_id: int | None,
    overwrite: bool = True,
    **extra: Any,
) -> list[str]:
    """Set ``extra`` on the events of every Asset outlet naming ``table``; returns their URIs.

    :param overwrite: replace an ``extra`` already set (``False``: only fill empty ones).
    """
    from airflow.sdk import Asset

    events = context.get("outlet_events") if context is not None and hasattr(context, "get") else None
    if events is None:
        return []
    done = []
    for asset in [o for o in (outlets or []) if isinstance(o, Asset)]:
        if not asset_names_table(asset.uri, table, catalog):
            continue
        if not overwrite and events[asset].extra:
            continue
        events[asset].extra = {
            "table": validate_table(table).dotted,
            "catalog": catalog,
            "snapshot_id": id_str(snapshot_id),
            **with_string_ids({k: v for k, v in extra.items() if v is not None}),
        }
        done.append(asset.uri)
    return done


__all__ = [
    "SCHEME",
    "asset_names_table",
    "emit_table_asset_events",
    "iceberg_asset",
    "iceberg_asset_uri",
    "parse_iceberg_asset_uri",
]
