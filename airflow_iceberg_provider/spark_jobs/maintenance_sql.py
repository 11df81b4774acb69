"""Pure builders for the ``CALL <catalog>.system.<procedure>(...)`` statements of table maintenance.

Iceberg's SQL extension grammar does not accept Spark's named parameter markers
(``:name``) inside ``CALL`` arguments, so values are rendered as literals here,
in one audited place:

* identifiers (catalog, ``namespace.table``) must match the provider's strict
  identifier pattern (they were validated on the Airflow side already);
* strings (``where``, ``sort_order``, option values) become single-quoted SQL
  literals with backslash and quote escaped, so no value can end the literal;
* numbers are rendered from ``int``; timestamps from epoch milliseconds.

No pyspark and no Airflow import. The action names, their order and the option and sort-order
checks the Airflow side validates with live in :mod:`airflow_iceberg_provider.core.maintenance_actions`;
the erasure job reuses the builders here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.core.maintenance_actions import (
    ACTIONS,
    COMPUTE_STATS,
    STRATEGIES,
    MaintenanceSqlError,
    check_options,
    check_sort_order,
)
from airflow_iceberg_provider.core.ref_guard import claims_hold

#: Output columns of each procedure (Iceberg 1.10), i.e. the counts a run reports.
PROCEDURE_OUTPUTS = {
    "expire_snapshots": (
        "deleted_data_files_count",
        "deleted_position_delete_files_count",
        "deleted_equality_delete_files_count",
        "deleted_manifest_files_count",
        "deleted_manifest_lists_count",
        "deleted_statistics_files_count",
    ),
    "rewrite_data_files": (
        "rewritten_data_files_count",
        "added_data_files_count",
        "rewritten_bytes_count",
        "failed_data_files_count",
        "removed_delete_files_count",
    ),
    "rewrite_manifests": ("rewritten_manifests_count", "added_manifests_count"),
    "rewrite_position_delete_files": (
        "rewritten_delete_files_count",
        "added_delete_files_count",
        "rewritten_bytes_count",
        "added_bytes_count",
    ),
    "remove_orphan_files": ("orphan_file_location",),
}

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_NAME_RE = re.compile(rf"^{_NAME}\Z")
_TABLE_RE = re.compile(rf"^{_NAME}\.{_NAME}\Z")


def holds_dropped_by_age(
    refs: Iterable[Mapping[str, Any]],
    snapshot_ts_ms: Mapping[int, int],
    *,
    default_max_ref_age_ms: int | None,
    now_ms: int,
) -> list[str]:
    """Legal holds that ``expire_snapshots`` would drop as older than their max-ref-age.

    Iceberg (``RemoveSnapshots``) drops every ref but ``main`` whose head is older than
    its ``max-ref-age-ms``, else the table's ``history.expire.max-ref-age-ms``. The
    provider places holds with a never-expiring age; this catches holds placed without
    one, just before the procedure runs (the Airflow side refused them already).

    :param refs: ``{"name", "type", "snapshot_id", "max_ref_age_ms"}`` per ref.
    :param snapshot_ts_ms: snapshot id -> commit time (ms).
    """
    out = []
    for ref in refs:
        name = str(ref["name"])
        if not claims_hold(name):  # a hold turned into a branch is still a hold (the ref guard's rule)
            continue
        own = ref.get("max_ref_age_ms")
        limit = int(own) if own is not None else default_max_ref_age_ms
        ts = snapshot_ts_ms.get(int(ref["snapshot_id"]))
        if ts is None or (limit is not None and now_ms - int(ts) > limit):
            out.append(name)
    return sorted(out)


def sql_string(value: str) -> str:
    """A Spark SQL single-quoted string literal that always round-trips to ``value``.

    Spark's lexer treats ``\\`` as an escape inside literals, so both the
    backslash and the quote are escaped; no input can terminate the literal early.
    """
    if not isinstance(value, str):
        raise MaintenanceSqlError(f"expected a string, got {type(value).__name__}")
    if "\x00" in value:
        raise MaintenanceSqlError("NUL characters are not allowed in SQL string values")
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def sql_timestamp(epoch_ms: int) -> str:
    """``TIMESTAMP '…+00:00'`` literal for an epoch-milliseconds instant (session time zone irrelevant)."""
    if isinstance(epoch_ms, bool) or not isinstance(epoch_ms, int):
        raise MaintenanceSqlError(f"timestamp must be epoch milliseconds as int, got {epoch_ms!r}")
    dt = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return f"TIMESTAMP '{dt.strftime('%Y-%m-%d %H:%M:%S')}.{epoch_ms % 1000:03d}+00:00'"


def sql_int(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MaintenanceSqlError(f"expected an integer, got {value!r}")
    return str(value)


def sql_bool(value: Any) -> str:
    if not isinstance(value, bool):
        raise MaintenanceSqlError(f"expected a boolean, got {value!r}")
    return "true" if value else "false"


def sql_options(options: Mapping[str, Any]) -> str:
    """``map('k','v', …)`` for procedure options (keys and values checked by :func:`check_options`)."""
    parts = []
    for key, text in check_options(options):
        parts += [sql_string(key), sql_string(text)]
    return f"map({', '.join(parts)})"


def sql_string_map(mapping: Mapping[str, str]) -> str:
    """``map('k', 'v', …)`` of string literals (:func:`sql_string` escapes every key and value)."""
    parts = []
    for key, value in sorted(mapping.items()):
        parts += [sql_string(str(key)), sql_string(str(value))]
    return f"map({', '.join(parts)})"


def _target(catalog: str, table: str) -> tuple[str, str]:
    if not _NAME_RE.match(catalog or ""):
        raise MaintenanceSqlError(f"catalog name {catalog!r} is not a plain identifier")
    if not _TABLE_RE.match(table or ""):
        raise MaintenanceSqlError(f"table {table!r} is not 'namespace.table'")
    return f"`{catalog}`.system", sql_string(table)


def quote_table(catalog: str, table: str) -> str:
    """```catalog`.`namespace`.`table``` for SELECTs on the table and its metadata tables."""
    _target(catalog, table)
    return ".".join(f"`{p}`" for p in (catalog, *table.split(".")))


def _call(catalog: str, procedure: str, table: str, args: Iterable[tuple[str, str | None]]) -> str:
    prefix, table_lit = _target(catalog, table)
    rendered = [f"table => {table_lit}"] + [f"{name} => {value}" for name, value in args if value is not None]
    return f"CALL {prefix}.{procedure}({', '.join(rendered)})"


def expire_snapshots_sql(
    catalog: str,
    table: str,
    *,
    older_than_ms: int | None = None,
    retain_last: int | None = None,
    snapshot_ids: Iterable[int] = (),
    stream_results: bool = True,
    max_concurrent_deletes: int | None = None,
) -> str:
    """``CALL system.expire_snapshots``; refs (branches, tags) keep what they reach."""
    if retain_last is not None and (isinstance(retain_last, bool) or int(retain_last) < 1):
        raise MaintenanceSqlError(f"retain_last must be >= 1, got {retain_last!r}")
    ids = [sql_int(i) for i in snapshot_ids]
    return _call(
        catalog,
        "expire_snapshots",
        table,
        [
            ("older_than", sql_timestamp(older_than_ms) if older_than_ms is not None else None),
            ("retain_last", sql_int(retain_last) if retain_last is not None else None),
            ("snapshot_ids", f"array({', '.join(ids)})" if ids else None),
            ("stream_results", sql_bool(stream_results)),
            ("max_concurrent_deletes", sql_int(max_concurrent_deletes) if max_concurrent_deletes else None),
        ],
    )


def rewrite_data_files_sql(
    catalog: str,
    table: str,
    *,
    strategy: str = "binpack",
    sort_order: str | None = None,
    where: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> str:
    """``CALL system.rewrite_data_files`` (works on the ``main`` branch only).

    Z-order is ``strategy='sort', sort_order='zorder(a,b)'``: the procedure only
    knows ``binpack`` and ``sort``.
    """
    if strategy not in STRATEGIES:
        raise MaintenanceSqlError(f"strategy {strategy!r} must be one of {STRATEGIES}")
    if sort_order is not None and strategy != "sort":
        raise MaintenanceSqlError("sort_order needs strategy='sort'")
    return _call(
        catalog,
        "rewrite_data_files",
        table,
        [
            ("strategy", sql_string(strategy)),
            ("sort_order", sql_string(check_sort_order(sort_order)) if sort_order else None),
            ("options", sql_options(options) if options else None),
            ("where", sql_string(where) if where else None),
        ],
    )


def rewrite_manifests_sql(catalog: str, table: str, *, use_caching: bool | None = None) -> str:
    """``CALL system.rewrite_manifests``."""
    return _call(
        catalog,
        "rewrite_manifests",
        table,
        [("use_caching", sql_bool(use_caching) if use_caching is not None else None)],
    )


def rewrite_position_delete_files_sql(
    catalog: str, table: str, *, where: str | None = None, options: Mapping[str, Any] | None = None
) -> str:
    """``CALL system.rewrite_position_delete_files`` (drops dangling deletes while rewriting)."""
    return _call(
        catalog,
        "rewrite_position_delete_files",
        table,
        [
            ("options", sql_options(options) if options else None),
            ("where", sql_string(where) if where else None),
        ],
    )


def remove_orphan_files_sql(
    catalog: str,
    table: str,
    *,
    older_than_ms: int,
    dry_run: bool = True,
    max_concurrent_deletes: int | None = None,
    equal_schemes: Mapping[str, str] | None = None,
    equal_authorities: Mapping[str, str] | None = None,
    prefix_mismatch_mode: str | None = None,
    prefix_listing: bool | None = None,
) -> str:
    """``CALL system.remove_orphan_files`` (the procedure refuses intervals under 24 h).

    ``equal_schemes`` / ``equal_authorities`` / ``prefix_mismatch_mode`` / ``prefix_listing``
    are Iceberg's own arguments; :func:`orphan_location_args` computes them for a table's
    location and FileIO.
    """
    if prefix_mismatch_mode is not None and prefix_mismatch_mode not in PREFIX_MISMATCH_MODES:
        raise MaintenanceSqlError(
            f"prefix_mismatch_mode={prefix_mismatch_mode!r} is not one of {', '.join(PREFIX_MISMATCH_MODES)}"
        )
    return _call(
        catalog,
        "remove_orphan_files",
        table,
        [
            ("older_than", sql_timestamp(older_than_ms)),
            ("dry_run", sql_bool(dry_run)),
            ("max_concurrent_deletes", sql_int(max_concurrent_deletes) if max_concurrent_deletes else None),
            ("equal_schemes", sql_string_map(equal_schemes) if equal_schemes else None),
            ("equal_authorities", sql_string_map(equal_authorities) if equal_authorities else None),
            ("prefix_mismatch_mode", sql_string(prefix_mismatch_mode) if prefix_mismatch_mode else None),
            ("prefix_listing", sql_bool(prefix_listing) if prefix_listing is not None else None),
        ],
    )


#: Iceberg's ``DeleteOrphanFiles.PrefixMismatchMode``. Never ``DELETE`` here: a file whose scheme or
#: authority differs from the metadata's for the same path may be a live file under another name.
PREFIX_MISMATCH_MODES = ("ERROR", "IGNORE", "DELETE")
#: One object store, several URI schemes (Hadoop's S3A / S3N names for S3): compared as equal.
S3_EQUAL_SCHEMES = {"s3a,s3n": "s3"}
#: FileIOs that list a prefix in one paginated call (``SupportsPrefixOperations``).
PREFIX_LISTING_FILE_IOS = ("org.apache.iceberg.aws.s3.S3FileIO",)


def orphan_location_args(location: str, io_impl: str | None) -> dict[str, Any]:
    """Scheme handling for ``remove_orphan_files`` on a table at ``location`` read through ``io_impl``.

    A live file must never be listed as an orphan because the listing names it differently
    from the table metadata (``s3a://b/k`` listed, ``s3://b/k`` referenced, or the reverse):

    * object-store locations (``s3``, ``s3a``, ``s3n``) compare those schemes as equal
      (``equal_schemes``); the authority is the bucket, compared as is;
    * ``prefix_mismatch_mode`` is ``ERROR`` everywhere: a path that still differs in scheme or
      authority stops the run before anything is deleted (Iceberg's ``DELETE`` would remove it);
    * with ``S3FileIO`` the listing is the FileIO's own prefix listing (``prefix_listing``):
      one paginated ``ListObjectsV2`` walk instead of a Hadoop directory walk, and the listed
      names carry the table location's scheme. ``HadoopFileIO`` (S3A) lists through Hadoop.
    """
    scheme = location.split("://", 1)[0].lower() if "://" in location else "file"
    args: dict[str, Any] = {"prefix_mismatch_mode": "ERROR"}
    if scheme in ("s3", "s3a", "s3n"):
        args["equal_schemes"] = dict(S3_EQUAL_SCHEMES)
        if (io_impl or "") in PREFIX_LISTING_FILE_IOS:
            args["prefix_listing"] = True
    return args


def compute_table_stats_sql(catalog: str, table: str, *, snapshot_id: int | None = None) -> str:
    """``CALL system.compute_table_stats``: NDV sketches of every column into a Puffin file (current snapshot)."""
    return _call(
        catalog, "compute_table_stats", table, [("snapshot_id", sql_int(snapshot_id) if snapshot_id else None)]
    )


_BUILDERS: dict[str, Callable[..., str]] = {
    COMPUTE_STATS: compute_table_stats_sql,
    "expire_snapshots": expire_snapshots_sql,
    "rewrite_data_files": rewrite_data_files_sql,
    "rewrite_manifests": rewrite_manifests_sql,
    "rewrite_position_delete_files": rewrite_position_delete_files_sql,
    "remove_orphan_files": remove_orphan_files_sql,
}


def action_sql(catalog: str, table: str, action: str, args: Mapping[str, Any] | None = None) -> str:
    """The ``CALL`` statement of one planned action (``{"action": ..., "args": {...}}`` in a job spec)."""
    if action not in _BUILDERS:
        raise MaintenanceSqlError(f"unknown maintenance action {action!r}; known: {', '.join(ACTIONS)}")
    return _BUILDERS[action](catalog, table, **dict(args or {}))
