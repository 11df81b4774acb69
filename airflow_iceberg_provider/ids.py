"""Snapshot ids as exact decimal strings wherever Airflow shows them: the one converter.

Iceberg snapshot ids are random 64-bit integers (``3742192974030064337``). Every JSON
reader that parses numbers as IEEE-754 doubles keeps only 53 bits of them: the browser
behind Airflow's XCom, Asset-event and lineage views shows ``3742192974030064000``, an id
that does not exist, and a user who copies it to roll back, tag or time-travel points at
nothing. So every snapshot id, parent id and sequence number the provider hands to Airflow
travels as a **decimal string**, under the same key as before:

* operator return values (XCom), through :func:`with_string_ids` at each ``return``;
* Asset-event ``extra`` (:func:`airflow_iceberg_provider.assets.uris.emit_table_asset_events`);
* the ``details`` JSON of governance-ledger rows written from the Airflow side;
* OpenLineage facets (``datasetVersion``, a string by the facet's definition).

No integer copy is kept alongside: a second key holding the rounded number would be the one
a browser shows. Inputs keep accepting both forms
(:func:`airflow_iceberg_provider.params.validate_snapshot_id` takes an ``int`` or a
decimal string), so ``{{ ti.xcom_pull(task_ids='audit')['snapshot_id'] }}`` renders the same
text as before and feeds any operator's ``snapshot_id`` argument unchanged. Python code that
pulls the XCom and needs a number calls ``int(value)``. Hooks keep returning ``int`` (they
are Python APIs; :class:`~airflow_iceberg_provider.models.SnapshotInfo`), and the ledger's
``snapshot_before`` / ``snapshot_after`` columns stay Iceberg ``long`` columns.

Which values are ids is decided by their key (one rule for the whole provider, see
:func:`is_id_key` / :func:`is_id_list_key`); only ``int`` values are converted, so ``None``
and values that already are strings pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, overload

#: keys whose value is one snapshot id / parent id / sequence number
ID_KEYS = frozenset({"snapshot_id", "parent_id", "sequence_number", "snapshot_before", "snapshot_after", "head"})
#: ... and any key ending like this (``base_snapshot_id``, ``audited_snapshot_id``, ``last_sequence_number``)
ID_SUFFIXES = ("_snapshot_id", "_parent_id", "_sequence_number")
#: keys whose value is a list of snapshot ids
ID_LIST_KEYS = frozenset(
    {"snapshot_ids", "discarded", "discarded_snapshots", "would_expire", "expire", "retain", "explicit_ids", "picked"}
)
ID_LIST_SUFFIXES = ("_snapshot_ids",)
#: the largest integer a float64 (JavaScript ``Number``) holds exactly
MAX_SAFE_INTEGER = 2**53 - 1
_DECIMAL = re.compile(r"-?[0-9]{1,20}")


def is_id_key(key: object) -> bool:
    """Whether a mapping key names one snapshot id, parent id or sequence number."""
    return isinstance(key, str) and (key in ID_KEYS or key.endswith(ID_SUFFIXES))


def is_id_list_key(key: object) -> bool:
    """Whether a mapping key names a list of snapshot ids."""
    return isinstance(key, str) and (key in ID_LIST_KEYS or key.endswith(ID_LIST_SUFFIXES))


def id_str(value: int | str | None) -> str | None:
    """``3742192974030064337`` -> ``"3742192974030064337"``; a decimal string is normalised; ``None`` stays.

    :raises ValueError: for anything else (floats have already lost the id's low bits).
    """
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and _DECIMAL.fullmatch(value.strip()):
        return str(int(value.strip()))
    raise ValueError(
        f"{value!r} is not a snapshot id; pass the integer or its decimal string (a float has lost digits)."
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _convert(key: object, value: Any) -> Any:
    if is_id_key(key) and _is_int(value):
        return str(value)
    if is_id_list_key(key) and isinstance(value, (list, tuple)):
        return [str(v) if _is_int(v) else with_string_ids(v) for v in value]
    return with_string_ids(value)


@overload
def with_string_ids(value: Mapping[str, Any]) -> dict[str, Any]: ...
@overload
def with_string_ids(value: object) -> Any: ...
def with_string_ids(value: object) -> Any:
    """A copy of ``value`` (dicts and lists, recursively) with every id-keyed ``int`` as a decimal string.

    Everything else is returned as it is: counts, timestamps, ``None``, strings.
    """
    if isinstance(value, Mapping):
        return {k: _convert(k, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [with_string_ids(v) for v in value]
    return value


__all__ = [
    "ID_KEYS",
    "ID_LIST_KEYS",
    "ID_LIST_SUFFIXES",
    "ID_SUFFIXES",
    "MAX_SAFE_INTEGER",
    "id_str",
    "is_id_key",
    "is_id_list_key",
    "with_string_ids",
]
