"""Byte scan of a table's storage for plaintext values (test tooling).

Every file under a table's location is read, whatever the table's metadata says about it (data
files, delete files, manifests, manifest lists, metadata JSON, files no snapshot references).
Compressed content is opened first, so a value cannot hide behind a codec:

* Avro containers (manifests, manifest lists): the header (schema and Iceberg's metadata) and
  every block, decompressed (``null`` and ``deflate``; another codec fails the scan);
* Parquet files: the raw bytes, every value of every column (no delete file applied) and the
  footer's column statistics (min / max of each column chunk);
* gzip files (compressed metadata JSON): decompressed;
* anything else: the raw bytes.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable
from pathlib import Path

AVRO_MAGIC = b"Obj\x01"
PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"


def _long(buf: bytes, pos: int) -> tuple[int, int]:
    """An Avro zig-zag varint at ``pos``: (value, next position)."""
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


def _bytes(buf: bytes, pos: int) -> tuple[bytes, int]:
    n, pos = _long(buf, pos)
    return buf[pos : pos + n], pos + n


def avro_contents(buf: bytes) -> list[bytes]:
    """The header's metadata values and every block of an Avro object container, decompressed."""
    pos = len(AVRO_MAGIC)
    meta: dict[str, bytes] = {}
    while True:
        count, pos = _long(buf, pos)
        if count == 0:
            break
        if count < 0:
            count = -count
            _, pos = _long(buf, pos)  # the block's size in bytes
        for _ in range(count):
            key, pos = _bytes(buf, pos)
            value, pos = _bytes(buf, pos)
            meta[key.decode()] = value
    sync = buf[pos : pos + 16]
    pos += 16
    codec = meta.get("avro.codec", b"null").decode()
    out = list(meta.values())
    while pos < len(buf):
        _, pos = _long(buf, pos)  # objects in the block
        block, pos = _bytes(buf, pos)
        if codec == "deflate":
            out.append(zlib.decompress(block, -15))
        elif codec == "null":
            out.append(block)
        else:
            raise ValueError(f"Avro codec {codec!r} is not handled by the scan; extend tests/support/key_scan.py")
        if buf[pos : pos + 16] != sync:
            raise ValueError("Avro block not followed by the file's sync marker: the file is corrupt")
        pos += 16
    return out


def parquet_contents(path: Path) -> list[bytes]:
    """Every value of every column and every column chunk's min / max, as text."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    out = [repr(pf.read().to_pylist()).encode()]
    meta = pf.metadata
    for rg in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            stats = meta.row_group(rg).column(c).statistics
            if stats is not None and stats.has_min_max:
                out.append(repr((stats.min, stats.max)).encode())
    return out


def file_contents(path: Path) -> list[bytes]:
    """The raw bytes of ``path`` and, by its format, its decompressed or decoded content."""
    raw = path.read_bytes()
    out = [raw]
    if raw.startswith(AVRO_MAGIC):
        out += avro_contents(raw)
    elif raw.startswith(PARQUET_MAGIC):
        out += parquet_contents(path)
    elif raw.startswith(GZIP_MAGIC):
        out.append(gzip.decompress(raw))
    return out


def files_holding(root: Path, keys: Iterable[str]) -> dict[str, list[str]]:
    """``{key: [files under root holding it]}`` for the keys found (empty: no file holds any key)."""
    wanted = {k: k.encode() for k in keys}
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        contents = file_contents(path)
        for key, needle in wanted.items():
            if any(needle in c for c in contents):
                found.setdefault(key, []).append(str(path.relative_to(root)))
    return found


def scanned_files(root: Path) -> dict[str, int]:
    """How many files of each kind the scan reads under ``root`` (``avro``, ``parquet``, ``json``, ``other``)."""
    kinds: dict[str, int] = {}
    for path in (p for p in root.rglob("*") if p.is_file()):
        head = path.read_bytes()[:4]
        kind = (
            "avro"
            if head == AVRO_MAGIC
            else "parquet"
            if head == PARQUET_MAGIC
            else "json"
            if path.name.endswith(".json")
            else "other"
        )
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds
