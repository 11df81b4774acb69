"""Maintenance action names, their execution order, and the checks of user-given option values.

The Airflow side plans with these names (``rules.maintenance``, the maintenance operators,
health triggers) and the ``maintenance`` Spark job runs them
(``spark_jobs/maintenance_sql.py`` renders the ``CALL`` statements). Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: Maintenance actions, in the order a plan runs them: compaction first (it
#: produces replaced files), then delete files and manifests, then expiry (which
#: physically removes what the rewrites replaced), orphan removal last.
ACTIONS = (
    "rewrite_data_files",
    "rewrite_position_delete_files",
    "rewrite_manifests",
    "expire_snapshots",
    "remove_orphan_files",
)

#: The erasure purge when a maintenance plan carries one: always its first action, in the same session.
ERASURE_PURGE = "erasure_purge"

#: Opt-in step (a policy asks for it): Puffin table statistics (NDV sketches) for the current snapshot.
COMPUTE_STATS = "compute_table_stats"
#: Execution order of everything a plan may run: statistics after the rewrites (they describe the
#: snapshot the rewrites produce), before expiry.
EXECUTION_ORDER = (
    "rewrite_data_files",
    "rewrite_position_delete_files",
    "rewrite_manifests",
    COMPUTE_STATS,
    "expire_snapshots",
    "remove_orphan_files",
)

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_OPTION_KEY_RE = re.compile(r"^[a-z][a-z0-9\-.]{0,99}\Z")
_OPTION_VALUE_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,200}\Z")
_SORT_TERM_RE = re.compile(rf"^{_NAME}(\s+(ASC|DESC))?(\s+NULLS\s+(FIRST|LAST))?\Z", re.IGNORECASE)
_ZORDER_RE = re.compile(rf"^zorder\(\s*{_NAME}(\s*,\s*{_NAME})*\s*\)\Z", re.IGNORECASE)
STRATEGIES = ("binpack", "sort")


class MaintenanceSqlError(ValueError):
    """A value cannot be rendered safely into a maintenance statement."""


def check_options(options: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(key, text)`` per procedure option, sorted by key; keys and values restricted to plain tokens.

    :raises MaintenanceSqlError: on a key that is not a plain Iceberg option name or a value
        that is not a plain token (nothing outside ``[A-Za-z0-9_.-]`` reaches a ``CALL``).
    """
    out = []
    for key, value in sorted(options.items()):
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if not _OPTION_KEY_RE.match(str(key)):
            raise MaintenanceSqlError(
                f"option name {key!r} is not a plain Iceberg option name (e.g. 'min-input-files')"
            )
        if not _OPTION_VALUE_RE.match(text):
            raise MaintenanceSqlError(f"option {key!r} value {value!r} must be a plain token ([A-Za-z0-9_.-])")
        out.append((str(key), text))
    return out


def check_sort_order(sort_order: str) -> str:
    """Accept ``zorder(a, b)`` or ``col [ASC|DESC] [NULLS FIRST|LAST], …``; return it stripped."""
    text = " ".join(str(sort_order).split())
    if _ZORDER_RE.match(text):
        return text
    terms = [t.strip() for t in text.split(",")]
    if text and all(_SORT_TERM_RE.match(t) for t in terms):
        return text
    raise MaintenanceSqlError(
        f"sort_order={sort_order!r} is not a sort order; use 'col [ASC|DESC] [NULLS FIRST|LAST], ...' "
        "or 'zorder(col1, col2)'"
    )
