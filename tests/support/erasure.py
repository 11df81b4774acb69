"""Helpers for the erasure tests: tables with distinctive subject values, raw file reads."""

from __future__ import annotations

import glob
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

SALT = "test-salt-6f1c2a9b0d4e8f7a3c5b"
PEOPLE_COLUMNS = {
    "order_id": "long",
    "customer_id": "string",
    "amount": "double",
    "order_ts": "timestamptz",
}


def person(n: int) -> str:
    """A subject key that cannot appear by accident in logs, paths or hashes."""
    return f"person-{n:03d}@erasure.example"


def set_salt_connection() -> None:
    os.environ["AIRFLOW_CONN_ERASURE_SALT"] = json.dumps({"conn_type": "generic", "password": SALT})


def create_people_table(hook, table: str, *, mode: str = "merge-on-read", partition_by=("day(order_ts)",), **props):
    from airflow_iceberg_provider.rules.schema import parse_columns, parse_partition_spec

    schema = parse_columns(PEOPLE_COLUMNS)
    spec = parse_partition_spec(schema, list(partition_by))
    properties = {"format-version": "2", "write.delete.mode": mode, "write.update.mode": mode, **props}
    hook.ensure_namespace(table.split(".")[0])
    return hook.catalog.create_table(table, schema=schema, partition_spec=spec, properties=properties)


def people_batch(start: int, count: int, people: int = 12, day: str = "2026-01-01"):
    import pyarrow as pa

    base = datetime.fromisoformat(day).replace(tzinfo=UTC)
    ids = list(range(start, start + count))
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "customer_id": pa.array([person(i % people) for i in ids], pa.string()),
            "amount": pa.array([float(i % 97) for i in ids], pa.float64()),
            "order_ts": pa.array([base + timedelta(hours=(i * 7) % 72) for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def append_people(hook, table: str, batches: int, rows: int = 60) -> list[int]:
    out = []
    for i in range(batches):
        tbl = hook.load_table(table)
        tbl.append(people_batch(i * rows, rows))
        out.append(hook.load_table(table).current_snapshot().snapshot_id)
    return out


def add_requests(hook, table: str, requests: dict[str, str], *, received_days_ago: float = 1) -> None:
    when = datetime.now(UTC) - timedelta(days=received_days_ago)
    hook.governance.submit_erasure_requests(table, requests, received_at=when)


def table_dir(hook, table: str) -> str:
    loc = hook.load_table(table).metadata.location
    return "/" + loc.split(":", 1)[1].lstrip("/") if loc.startswith("file:") else loc


def parquet_on_disk(hook, table: str) -> list[str]:
    """Every parquet file under the table's data location, live or not."""
    return glob.glob(os.path.join(table_dir(hook, table), "data", "**", "*.parquet"), recursive=True)


def values_on_disk(hook, table: str, column: str = "customer_id") -> dict[str, set[str]]:
    """Every parquet file under the table's location (live or not) -> values of ``column``."""
    import pyarrow.parquet as pq

    out = {}
    for path in parquet_on_disk(hook, table):
        t = pq.read_table(path)
        if column in t.column_names:
            out[path] = set(t.column(column).to_pylist())
    return out


def strings_on_disk(hook, table: str) -> set[str]:
    """Every string value in ANY column of every parquet file under the table's location (a
    subject under a column's old name too)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: set[str] = set()
    for path in parquet_on_disk(hook, table):
        t = pq.read_table(path)
        for name in t.column_names:
            kind = t.schema.field(name).type  # pyiceberg writes large_string, Spark string
            if pa.types.is_string(kind) or pa.types.is_large_string(kind):
                out |= set(t.column(name).to_pylist())
    return out


def values_by_snapshot(hook, table: str, column: str = "customer_id") -> dict[Any, set[str]]:
    """Time travel (deletes applied) to every snapshot and every ref that still exists."""
    tbl = hook.load_table(table)
    out: dict[Any, set[str]] = {}
    for snap in tbl.metadata.snapshots:
        out[snap.snapshot_id] = set(tbl.scan(snapshot_id=snap.snapshot_id).to_arrow().column(column).to_pylist())
    for name, ref in tbl.metadata.refs.items():
        out[name] = out.get(ref.snapshot_id, set())
    return out


def rows_of(hook, table: str, **equals: Any) -> list[dict[str, Any]]:
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo

    expr: Any = AlwaysTrue()
    for k, v in equals.items():
        expr = And(expr, EqualTo(k, v))
    return hook.load_table(table).scan(row_filter=expr).to_arrow().to_pylist()


def _zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    b = buf[pos]
    n, shift, pos = b & 0x7F, 7, pos + 1
    while b & 0x80:
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def avro_payload(data: bytes) -> bytes:
    """Decompressed record bytes of an Avro container file (manifests are deflate-compressed)."""
    import zlib

    assert data[:4] == b"Obj\x01", "not an avro container"
    pos, meta = 4, {}
    while True:
        count, pos = _zigzag(data, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = _zigzag(data, pos)
        for _ in range(count):
            klen, pos = _zigzag(data, pos)
            key = data[pos : pos + klen]
            pos += klen
            vlen, pos = _zigzag(data, pos)
            meta[key] = data[pos : pos + vlen]
            pos += vlen
    pos += 16  # sync marker
    codec, out = meta.get(b"avro.codec", b"null"), []
    while pos < len(data):
        _, pos = _zigzag(data, pos)
        size, pos = _zigzag(data, pos)
        block = data[pos : pos + size]
        pos += size + 16
        out.append(zlib.decompress(block, -15) if codec == b"deflate" else block)
    return b"".join(out)


def metadata_hits(hook, table: str, values) -> list[tuple[str, bytes]]:
    """(file, needle) for every metadata/manifest file of the table holding a subject or its
    16-character truncation (Iceberg's default string bound) — avro files decompressed."""
    needles = [v.encode() for v in values] + [v[:16].encode() for v in values]
    hits = []
    for path in glob.glob(os.path.join(table_dir(hook, table), "metadata", "*")):
        if os.path.basename(path).startswith("."):
            continue
        data = open(path, "rb").read()
        if path.endswith(".avro"):
            data = avro_payload(data)
        hits += [(os.path.basename(path), n) for n in needles if n in data]
    return hits


def subject_bytes_in_files(hook, table: str, values) -> list[tuple[str, str]]:
    """(file, value) for every file under the table's location (data, delete files, metadata; live
    or not) holding one of ``values``: the raw bytes, Avro blocks decompressed, and every string
    value of a Parquet file (compressed or dictionary-encoded pages hide the raw bytes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    hits = []
    for root, _, names in os.walk(table_dir(hook, table)):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                data = fh.read()
            texts = {data}
            if name.endswith(".avro"):
                texts.add(avro_payload(data))
            strings: set[str] = set()
            if name.endswith(".parquet"):
                t = pq.read_table(path)
                for column in t.column_names:
                    kind = t.schema.field(column).type
                    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
                        strings |= set(t.column(column).to_pylist())
            hits += [(path, v) for v in values if v in strings or any(v.encode() in x for x in texts)]
    return hits
