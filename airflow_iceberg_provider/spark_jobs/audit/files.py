"""Reading a snapshot's appended Parquet files on the Spark driver (the audit's fast path).

Pure pyarrow, no pyspark: Iceberg schemas by lower-case name (:func:`schema_fields`), Parquet
columns matched by field id (:func:`read_parquet_columns`), the appended values' range
(:func:`column_bounds`), and where a data file is read from (:func:`data_file_source`):

* ``file://`` locations from the local file system;
* ``s3://`` / ``s3a://`` / ``s3n://`` locations through pyarrow's ``S3FileSystem``, built by
  :func:`s3_options` from the S3A settings the catalog connection gave the Spark session
  (``spark.hadoop.fs.s3a.*``: endpoint, path style, region and credentials, which reached the
  driver through the 0600 properties file, never argv); no settings: the AWS default chain;
* anything else raises :class:`arrow_sql.Unsupported` and Spark reads the rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_iceberg_provider.spark_jobs import arrow_sql

S3_SCHEMES = ("s3", "s3a", "s3n")


@dataclass(frozen=True)
class Bounds:
    """The range of a column's values in the appended files (Java values for Iceberg, Python ones for SQL)."""

    field: str
    jlo: Any
    jhi: Any
    lo: Any
    hi: Any
    sql: str  # turns a bound (parameter ``{p}``) into a Spark literal


#: Iceberg type id -> SQL that turns the metrics' value (a parameter ``{p}``) into a Spark literal.
#: Not FLOAT/DOUBLE (NaN is outside the bounds yet equal to itself in Spark) and not timestamps
#: without zone (Spark compares them through the session time zone).
_BOUND_LITERALS = {
    "INTEGER": "{p}",
    "LONG": "{p}",
    "DECIMAL": "{p}",
    "STRING": "{p}",  # truncated bounds stay bounds: a prefix is <= and the incremented prefix >=
    "DATE": "date_from_unix_date({p})",  # days since epoch
    "TIMESTAMP": "timestamp_micros({p})",  # with zone: micros since epoch (UTC)
}


@dataclass(frozen=True)
class Field:
    """A top-level column of an Iceberg schema."""

    name: str
    field_id: int
    type: str  # Iceberg's type name: long, decimal(10, 2), timestamptz, ... ("struct" etc. for nested ones)


def schema_fields(schema_json: str) -> dict[str, Field]:
    """Top-level fields of an Iceberg schema (``SchemaParser.toJson``) by lower-case name.

    Names that differ only in case are left out (Spark would call them ambiguous).
    """
    import json

    out: dict[str, Field] = {}
    clashes = set()
    for f in json.loads(schema_json)["fields"]:
        kind = f["type"] if isinstance(f["type"], str) else str(f["type"].get("type", "nested"))
        key = f["name"].lower()
        if key in out:
            clashes.add(key)
        out[key] = Field(f["name"], int(f["id"]), kind)
    return {k: v for k, v in out.items() if k not in clashes}


def _arrow_type(iceberg_type: str) -> Any:
    """The Arrow type a primitive Iceberg column is read as (``Unsupported`` for the others)."""
    import pyarrow as pa

    simple = {
        "boolean": pa.bool_(),
        "int": pa.int32(),
        "long": pa.int64(),
        "float": pa.float32(),
        "double": pa.float64(),
        "string": pa.string(),
        "date": pa.date32(),
        "timestamptz": pa.timestamp("us", tz="UTC"),
    }
    if iceberg_type in simple:
        return simple[iceberg_type]
    if iceberg_type.startswith("decimal("):
        precision, scale = (int(x) for x in iceberg_type[len("decimal(") : -1].split(","))
        return pa.decimal128(precision, scale)
    raise arrow_sql.Unsupported(f"column type {iceberg_type}")


def local_path(location: str) -> str:
    """The local file system path of a data file location (``Unsupported`` for object stores)."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(location)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return unquote(parsed.path)
    if parsed.scheme == "" and location.startswith("/"):
        return location
    raise arrow_sql.Unsupported(f"data files on {parsed.scheme}:// are read by Spark")


def read_parquet_columns(
    locations: list[str],
    fields: dict[str, Field],
    records: int,
    object_store: Callable[[], Any] | None = None,
) -> dict[str, tuple[Any, str]]:
    """Read ``fields`` from Parquet data files, matching columns by Iceberg field id.

    :param object_store: the pyarrow file system of ``s3`` locations (:func:`data_file_source`).
    :returns: lower-case name -> (Arrow array over all files in order, Iceberg type name).
    :raises arrow_sql.Unsupported: a file lacks a field (a column added later, whose values
        Iceberg fills from the schema), field ids are missing, or the row count differs
        from the manifests'.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    wanted = {f.field_id: (key, _arrow_type(f.type)) for key, f in fields.items()}
    parts: dict[str, list] = {key: [] for key in fields}
    total = 0
    for location in locations:
        with pq.ParquetFile(data_file_source(location, object_store)) as pf:
            by_id = {}
            for arrow_field in pf.schema_arrow:
                fid = (arrow_field.metadata or {}).get(b"PARQUET:field_id")
                if fid is not None:
                    by_id[int(fid)] = arrow_field.name
            absent = [fid for fid in wanted if fid not in by_id]
            if absent:
                raise arrow_sql.Unsupported(f"field ids {absent} not in {location}")
            table = pf.read(columns=[by_id[fid] for fid in wanted])
            total += pf.metadata.num_rows
        for i, (key, typ) in enumerate(wanted.values()):
            column = table.column(i)
            if column.type != typ:
                try:
                    column = column.cast(typ)  # promotions: int -> long, float -> double, wider decimals
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                    raise arrow_sql.Unsupported(f"column {key} as {typ}: {err}") from err
            parts[key].extend(column.chunks)
    if total != records:
        raise arrow_sql.Unsupported(f"{total} rows in the files, {records} in the manifests")
    return {
        key: (pa.chunked_array(parts[key], type=wanted[fields[key].field_id][1]).combine_chunks(), fields[key].type)
        for key in fields
    }


#: Iceberg type -> the Java type id used by :data:`_BOUND_LITERALS`.
_TYPE_IDS = {"int": "INTEGER", "long": "LONG", "string": "STRING", "date": "DATE", "timestamptz": "TIMESTAMP"}


def column_bounds(fld: Field, values: Any) -> Bounds | None | bool:
    """The range of the appended values of a column, as :func:`AuditEngine.base_files_in_range` needs it.

    ``None`` when there is no non-null value (nothing can be shared with the base), ``False``
    when the type has no exact bound here (floats: NaN ordering; zone-less timestamps).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    type_id = "DECIMAL" if fld.type.startswith("decimal(") else _TYPE_IDS.get(fld.type)
    if type_id is None:
        return False
    if pa.types.is_timestamp(values.type):
        values = values.cast(pa.int64())  # micros since the epoch, what timestamp_micros() takes
    elif pa.types.is_date32(values.type):
        values = values.cast(pa.int32())  # days since the epoch, what date_from_unix_date() takes
    found = pc.min_max(values)
    lo, hi = found["min"].as_py(), found["max"].as_py()
    if lo is None:
        return None
    return Bounds(fld.name, lo, hi, lo, hi, _BOUND_LITERALS[type_id])


#: S3A setting (``spark.hadoop.`` + key) -> pyarrow ``S3FileSystem`` argument.
_S3A_TO_ARROW = {
    "fs.s3a.access.key": "access_key",
    "fs.s3a.secret.key": "secret_key",
    "fs.s3a.session.token": "session_token",
    "fs.s3a.endpoint.region": "region",
}


def s3_options(conf: Callable[[str], str | None]) -> dict[str, Any]:
    """pyarrow ``S3FileSystem`` arguments from the session's S3A settings (``conf(key)`` reads one).

    The same settings Spark's own raw-file reads use, so the driver reads what the executors
    would. Without an access key the AWS default credential chain applies (instance roles).
    """
    out: dict[str, Any] = {}
    for key, arg in _S3A_TO_ARROW.items():
        value = conf(f"spark.hadoop.{key}")
        if value:
            out[arg] = value
    endpoint = conf("spark.hadoop.fs.s3a.endpoint")
    if endpoint:
        scheme, _, host = endpoint.partition("://") if "://" in endpoint else ("", "", endpoint)
        ssl = (conf("spark.hadoop.fs.s3a.connection.ssl.enabled") or "true").lower() != "false"
        out["endpoint_override"] = host.rstrip("/")
        out["scheme"] = scheme or ("https" if ssl else "http")
    return out  # path-style addressing is pyarrow's default with an endpoint override


def data_file_source(location: str, object_store: Callable[[], Any] | None = None) -> Any:
    """What ``pq.ParquetFile`` opens for a data file: a local path, or an object store input file.

    :param object_store: returns the pyarrow file system for ``s3`` locations (built once, lazily).
    :raises arrow_sql.Unsupported: a location the driver cannot read (Spark reads the rows).
    """
    from urllib.parse import unquote, urlparse

    scheme = urlparse(location).scheme.lower()
    if scheme in S3_SCHEMES and object_store is not None:
        bucket_key = location.split("://", 1)[1]
        return object_store().open_input_file(unquote(bucket_key))
    return local_path(location)
