"""Driver-side table and file access without the driver's JVM: the SQL and pyarrow forms behind
:class:`~.table_access.ConnectTableAccess` (they work in both execution modes):

* table facts through SQL: the location (``DESCRIBE TABLE EXTENDED``), the table's own
  properties, the live data files of a snapshot (the ``data_files`` metadata table with
  ``VERSION AS OF``), the schema (with field ids) from the current metadata file;
* files through pyarrow file systems: local paths and ``s3``/``s3a``/``s3n`` objects (pyarrow's
  S3 file system with the session's S3A settings, :func:`~.audit_files.s3_options`): listing,
  sizes, existence, ranged reads, deletes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlparse

from airflow_iceberg_provider.spark_jobs.audit.files import S3_SCHEMES, s3_options

#: Keys SHOW TBLPROPERTIES adds that are not the table's own properties.
RESERVED_PROPERTIES = frozenset(
    {
        "provider",
        "format",
        "current-snapshot-id",
        "location",
        "format-version",
        "sort-order",
        "identifier-fields",
    }
)


# ------------------------------------------------------------------------------ table facts
def table_location(spark: Any, table: str) -> str:
    """The table's base location (``table`` quoted ``catalog.ns.name``)."""
    for row in spark.sql(f"DESCRIBE TABLE EXTENDED {table}").collect():
        if str(row[0]).strip() == "Location":
            return str(row[1]).strip()
    raise RuntimeError(f"DESCRIBE TABLE EXTENDED {table} names no location")


def table_properties(spark: Any, table: str) -> dict[str, str]:
    """The table's own properties (Spark's ``SHOW TBLPROPERTIES`` without its reserved extras)."""
    rows = spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
    return {str(r[0]): str(r[1]) for r in rows if str(r[0]) not in RESERVED_PROPERTIES}


def snapshot_data_files(spark: Any, table: str, snapshot_id: int) -> list[str]:
    """Locations of the live data files of one snapshot (its manifests, through the metadata table)."""
    rows = spark.sql(f"SELECT file_path FROM {table}.data_files VERSION AS OF {int(snapshot_id)}").collect()
    return [str(r[0]) for r in rows]


def current_metadata(spark: Any, table: str) -> dict[str, Any]:
    """The table's current metadata JSON (read from the newest ``metadata_log_entries`` file)."""
    rows = spark.sql(f"SELECT file FROM {table}.metadata_log_entries ORDER BY timestamp DESC LIMIT 1").collect()
    if not rows:
        raise RuntimeError(f"{table} has no metadata log entry")
    return json.loads(read_bytes(spark, str(rows[0][0])).decode("utf-8"))


def schema_json(metadata: dict[str, Any], snapshot_id: int | None = None) -> str:
    """JSON of the schema a snapshot was written with (the current schema without ``snapshot_id``)."""
    schema_id = metadata.get("current-schema-id")
    if snapshot_id is not None:
        for snap in metadata.get("snapshots") or []:
            if int(snap.get("snapshot-id", -1)) == int(snapshot_id) and snap.get("schema-id") is not None:
                schema_id = snap["schema-id"]
    for schema in metadata.get("schemas") or []:
        if schema.get("schema-id") == schema_id:
            return json.dumps(schema)
    raise RuntimeError(f"no schema {schema_id} in the table metadata")


def top_level_field_ids(schema: str | dict[str, Any]) -> dict[str, int]:
    """Top-level column name -> Iceberg field id."""
    doc = json.loads(schema) if isinstance(schema, str) else schema
    return {str(f["name"]): int(f["id"]) for f in doc.get("fields") or []}


# ------------------------------------------------------------------------------ files
def filesystem(spark: Any, location: str) -> tuple[Any, str]:
    """(pyarrow file system, path in it) for a table file location."""
    from pyarrow import fs

    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return fs.LocalFileSystem(), unquote(parsed.path) if parsed.scheme else location
    if parsed.scheme in S3_SCHEMES:
        return fs.S3FileSystem(**s3_options(lambda key: _conf(spark, key))), f"{parsed.netloc}{parsed.path}"
    raise ValueError(f"no driver-side file system for {parsed.scheme}:// locations")


def _conf(spark: Any, key: str) -> str | None:
    try:
        return spark.conf.get(key, None)
    except Exception:  # noqa: BLE001 - unset
        return None


def _location(original: str, path: str) -> str:
    scheme = urlparse(original).scheme
    if scheme in ("", "file"):
        return "file:" + path if scheme else path
    return f"{scheme}://{path}"


def list_files(spark: Any, root: str) -> Iterator[tuple[str, int, int]]:
    """(location, modification time in ms, size) of every file under ``root``; nothing if it is missing."""
    from pyarrow import fs

    filesys, path = filesystem(spark, root)
    try:
        infos = filesys.get_file_info(fs.FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return
    for info in infos:
        if info.type == fs.FileType.File:
            mtime = info.mtime_ns // 1_000_000 if info.mtime_ns is not None else 0
            yield _location(root, info.path), int(mtime), int(info.size or 0)


def file_size(spark: Any, location: str) -> int:
    """Size in bytes (0 when the file vanished meanwhile)."""
    from pyarrow import fs

    filesys, path = filesystem(spark, location)
    info = filesys.get_file_info(path)
    return int(info.size or 0) if info.type == fs.FileType.File else 0


def exists(spark: Any, location: str) -> bool:
    from pyarrow import fs

    if location.startswith("/"):
        return os.path.exists(location)
    filesys, path = filesystem(spark, location)
    return bool(filesys.get_file_info(path).type != fs.FileType.NotFound)


def delete(spark: Any, location: str) -> None:
    filesys, path = filesystem(spark, location)
    filesys.delete_file(path)


def read_bytes(spark: Any, location: str) -> bytes:
    filesys, path = filesystem(spark, location)
    with filesys.open_input_stream(path) as fh:
        return bytes(fh.read())


def open_ranged(spark: Any, location: str) -> Any:
    """A random-access input file (``seek``/``read``, ``close``)."""
    filesys, path = filesystem(spark, location)
    return filesys.open_input_file(path)
