"""Candidate-file pruning and history selection for erasure: pure Python, no pyspark, no I/O
beyond a caller-supplied ``read(offset, length)``.

Shipped next to ``spark_jobs/erasure.py`` (``--py-files``) and unit-tested on the Airflow side.

Soundness rule: a data file is skipped ONLY when its metadata proves that no subject key
can be in it. Anything unknown (no bounds, truncated bounds, a row group without a bloom
filter, an unsupported encoding, an encrypted footer, a parse error) keeps the file a
candidate, and candidates are raw-read.

* **Bounds** (manifest ``lower_bound`` / ``upper_bound``): used only when exact. Numbers
  are exact; a string bound is exact when it is shorter than the column's truncation
  length (``truncate(16)`` by default), or always under ``full``. A subject equal to a
  bound is inside the range (kept). A column whose values are all null (``value_count ==
  null_value_count``) cannot hold a subject.
* **Parquet bloom filters** (split-block, xxHash64, as written by parquet-mr/Iceberg and
  Arrow): a file is skipped for a column only when EVERY row group has a filter for that
  column and no key hits any of them. Keys are hashed in their plain encoding
  (BYTE_ARRAY: UTF-8 bytes; INT32/INT64: little-endian).

A file is pruned when, for every subject column, no key can be in it (rows match if ANY
subject column equals a key).
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

DEFAULT_TRUNCATE = 16

# ----------------------------------------------------------------------- bounds
_TRUNC = re.compile(r"^truncate\((\d+)\)$")


def metrics_mode(properties: Mapping[str, str], column: str) -> tuple[str, int | None]:
    """(``none``|``counts``|``truncate``|``full``, truncation length) for one column."""
    raw = properties.get(f"write.metadata.metrics.column.{column}") or properties.get(
        "write.metadata.metrics.default", f"truncate({DEFAULT_TRUNCATE})"
    )
    raw = str(raw).strip().lower()
    m = _TRUNC.match(raw)
    if m:
        return "truncate", int(m.group(1))
    if raw in ("none", "counts", "full"):
        return raw, None
    return "unknown", None


def bound_is_exact(bound: Any, mode: str, truncate_len: int | None) -> bool:
    """Whether a manifest bound is the real min/max (not a truncation)."""
    if bound is None or mode in ("none", "counts", "unknown"):
        return False
    if not isinstance(bound, str):
        return isinstance(bound, int) and not isinstance(bound, bool)
    if mode == "full":
        return True
    # Iceberg truncates by code points; a bound shorter than the length cannot be truncated
    return truncate_len is not None and len(bound) < min(truncate_len, DEFAULT_TRUNCATE)


def bounds_exclude(
    sorted_keys: Sequence[Any],
    *,
    lower: Any,
    upper: Any,
    mode: str,
    truncate_len: int | None,
    value_count: int | None = None,
    null_count: int | None = None,
) -> bool:
    """True only when the file's metrics PROVE that no key of ``sorted_keys`` is in the column."""
    if not sorted_keys:
        return True
    if value_count is not None and null_count is not None and int(value_count) == int(null_count):
        return True  # every value is null: a (non-null) key cannot match
    if not (bound_is_exact(lower, mode, truncate_len) and bound_is_exact(upper, mode, truncate_len)):
        return False
    if type(lower) is not type(sorted_keys[0]) or type(upper) is not type(sorted_keys[0]):
        return False
    i = bisect_left(sorted_keys, lower)  # first key >= lower (str order == UTF-8 byte order)
    return not (i < len(sorted_keys) and sorted_keys[i] <= upper)


# ----------------------------------------------------------------------- xxHash64
_P1, _P2, _P3, _P4, _P5 = (
    0x9E3779B185EBCA87,
    0xC2B2AE3D27D4EB4F,
    0x165667B19E3779F9,
    0x85EBCA77C2B2AE63,
    0x27D4EB2F165667C5,
)
_M = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def _merge(acc: int, val: int) -> int:
    return ((acc ^ _round(0, val)) * _P1 + _P4) & _M


def xxhash64(data: bytes, seed: int = 0) -> int:
    """xxHash64 (the hash of Parquet's split-block bloom filters)."""
    n, p = len(data), 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M
        while p + 32 <= n:
            a, b, c, d = struct.unpack_from("<4Q", data, p)
            v1, v2, v3, v4 = _round(v1, a), _round(v2, b), _round(v3, c), _round(v4, d)
            p += 32
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while p + 8 <= n:
        (k,) = struct.unpack_from("<Q", data, p)
        h = (_rotl(h ^ _round(0, k), 27) * _P1 + _P4) & _M
        p += 8
    if p + 4 <= n:
        (k,) = struct.unpack_from("<I", data, p)
        h = (_rotl(h ^ (k * _P1) & _M, 23) * _P2 + _P3) & _M
        p += 4
    while p < n:
        h = (_rotl(h ^ (data[p] * _P5) & _M, 11) * _P1) & _M
        p += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    return h ^ (h >> 32)


# ----------------------------------------------------- split-block bloom filter
_SALT = (0x47B6137B, 0x44974D91, 0x8824AD5B, 0xA2B7289D, 0x705495C7, 0x2DF1424B, 0x9EFC4947, 0x5C6BFB31)
#: Parquet physical types (parquet.thrift ``Type``)
INT32, INT64, BYTE_ARRAY = 1, 2, 6


def plain_bytes(value: Any, physical_type: int) -> bytes | None:
    """The plain encoding Parquet hashes, or None when the key cannot be stored in that type."""
    if physical_type == BYTE_ARRAY and isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, int) and not isinstance(value, bool):
        if physical_type == INT32 and -(1 << 31) <= value < (1 << 31):
            return struct.pack("<i", value)
        if physical_type == INT64 and -(1 << 63) <= value < (1 << 63):
            return struct.pack("<q", value)
    return None


def sbbf_might_contain(bitset: bytes, h: int) -> bool:
    """Split-block bloom filter probe (parquet-format BloomFilter.md)."""
    blocks = len(bitset) // 32
    if blocks == 0:
        return True
    block = (((h >> 32) * blocks) >> 32) * 32
    key = h & 0xFFFFFFFF
    words = struct.unpack_from("<8I", bitset, block)
    return all(words[i] & (1 << (((key * _SALT[i]) & 0xFFFFFFFF) >> 27)) for i in range(8))


# ------------------------------------------------------- Thrift compact reader
class _Thrift:
    """Just enough of Thrift's compact protocol to walk a Parquet footer."""

    def __init__(self, buf: bytes, pos: int = 0) -> None:
        self.buf, self.pos = buf, pos

    def byte(self) -> int:
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def fields(self) -> Iterable[tuple[int, int]]:
        """Yield (field id, type) of a struct; the caller reads or skips each value."""
        last = 0
        while True:
            head = self.byte()
            if head == 0:
                return
            delta, ftype = head >> 4, head & 0x0F
            last = last + delta if delta else self.zigzag()
            yield last, ftype

    def skip(self, ftype: int) -> None:
        if ftype in (1, 2):
            return
        if ftype == 3:
            self.pos += 1
        elif ftype in (4, 5, 6):
            self.varint()
        elif ftype == 7:
            self.pos += 8
        elif ftype == 8:
            n = self.varint()
            self.pos += n
        elif ftype in (9, 10):
            size, etype = self.list_header()
            for _ in range(size):
                self.skip_elem(etype)
        elif ftype == 11:
            size = self.varint()
            if size:
                kv = self.byte()
                for _ in range(size):
                    self.skip_elem(kv >> 4)
                    self.skip_elem(kv & 0x0F)
        elif ftype == 12:
            for _, t in self.fields():
                self.skip(t)
        else:
            raise ValueError(f"unknown thrift type {ftype}")

    def skip_elem(self, etype: int) -> None:
        if etype in (1, 2):  # booleans in containers take one byte
            self.pos += 1
        else:
            self.skip(etype)

    def list_header(self) -> tuple[int, int]:
        head = self.byte()
        size = head >> 4
        if size == 15:
            size = self.varint()
        return size, head & 0x0F


def _column_meta(t: _Thrift) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fid, ftype in t.fields():
        if fid == 1 and ftype == 5:
            out["type"] = t.zigzag()
        elif fid == 3 and ftype == 9:
            size, _ = t.list_header()
            parts = []
            for _ in range(size):
                n = t.varint()
                parts.append(t.buf[t.pos : t.pos + n].decode("utf-8", "replace"))
                t.pos += n
            out["path"] = ".".join(parts)
        elif fid == 14 and ftype == 6:
            out["bloom_offset"] = t.zigzag()
        elif fid == 15 and ftype == 5:
            out["bloom_length"] = t.zigzag()
        else:
            t.skip(ftype)
    return out


def footer_bloom_locations(footer: bytes) -> list[dict[str, dict[str, Any]]]:
    """Per row group: column path -> ``{"type", "bloom_offset", "bloom_length"}`` (offset absent = no filter)."""
    t = _Thrift(footer)
    groups: list[dict[str, dict[str, Any]]] = []
    for fid, ftype in t.fields():
        if fid != 4 or ftype != 9:
            t.skip(ftype)
            continue
        n_groups, _ = t.list_header()
        for _ in range(n_groups):
            cols: dict[str, dict[str, Any]] = {}
            for gfid, gtype in t.fields():
                if gfid != 1 or gtype != 9:
                    t.skip(gtype)
                    continue
                n_cols, _ = t.list_header()
                for _ in range(n_cols):
                    meta: dict[str, Any] = {}
                    for cfid, ctype in t.fields():
                        if cfid == 3 and ctype == 12:
                            meta = _column_meta(t)
                        else:
                            t.skip(ctype)
                    if "path" in meta:
                        cols[meta["path"]] = meta
            groups.append(cols)
    return groups


def _bloom_bitset(read: Callable[[int, int], bytes], offset: int, length: int | None) -> tuple[int, int] | None:
    """Parse a BloomFilterHeader: (bitset offset, bitset bytes), or None unless split-block /
    xxHash / uncompressed. Only the blocks the keys hash to are read afterwards."""
    t = _Thrift(read(offset, 64))
    num_bytes, kinds = None, {}
    for fid, ftype in t.fields():
        if fid == 1 and ftype == 5:
            num_bytes = t.zigzag()
        elif fid in (2, 3, 4) and ftype == 12:
            got = []
            for k, kt in t.fields():
                got.append(k)
                t.skip(kt)
            kinds[fid] = got
        else:
            t.skip(ftype)
    if not num_bytes or num_bytes % 32 or any(kinds.get(f) != [1] for f in (2, 3, 4)):
        return None
    if length is not None and length < t.pos + num_bytes:
        return None
    return offset + t.pos, num_bytes


def sbbf_might_contain_at(read: Callable[[int, int], bytes], base: int, num_bytes: int, h: int) -> bool:
    """:func:`sbbf_might_contain` reading only the one 32-byte block ``h`` selects."""
    blocks = num_bytes // 32
    block = ((h >> 32) * blocks) >> 32
    key = h & 0xFFFFFFFF
    words = struct.unpack("<8I", read(base + block * 32, 32))
    return all(words[i] & (1 << (((key * _SALT[i]) & 0xFFFFFFFF) >> 27)) for i in range(8))


def read_footer(read: Callable[[int, int], bytes], size: int) -> bytes | None:
    """The Thrift FileMetaData bytes, or None (not parquet, or an encrypted footer)."""
    if size < 12:
        return None
    tail = read(size - 8, 8)
    if tail[4:] != b"PAR1":
        return None
    (n,) = struct.unpack("<I", tail[:4])
    if n <= 0 or n > size - 12:
        return None
    return read(size - 8 - n, n)


def bloom_excludes(
    read: Callable[[int, int], bytes], size: int, hashes_by_column: Mapping[str, Mapping[int, list[int]]]
) -> dict[str, bool]:
    """Per subject column: True when the file's bloom filters PROVE no key is present.

    :param hashes_by_column: column -> physical type -> xxHash64 of every key in that
        type's plain encoding (see :func:`key_hashes`).
    """
    out = {c: False for c in hashes_by_column}
    try:
        footer = read_footer(read, size)
        if footer is None:
            return out
        groups = footer_bloom_locations(footer)
        if not groups:
            return out  # no row group: nothing to prove with (and raw-reading it costs nothing)
        for col, by_type in hashes_by_column.items():
            proven = True
            for cols in groups:
                meta = cols.get(col)
                if not meta or meta.get("bloom_offset") is None or meta.get("type") not in by_type:
                    proven = False
                    break
                bitset = _bloom_bitset(read, int(meta["bloom_offset"]), meta.get("bloom_length"))
                if bitset is None or any(sbbf_might_contain_at(read, *bitset, h) for h in by_type[meta["type"]]):
                    proven = False
                    break
            out[col] = proven
    except (ValueError, IndexError, struct.error, UnicodeDecodeError):
        return {c: False for c in hashes_by_column}
    return out


def key_hashes(keys: Iterable[Any], physical_types: Sequence[int] = (INT32, INT64, BYTE_ARRAY)) -> dict[int, list[int]]:
    """xxHash64 of each key per physical type it can be stored in (unrepresentable keys omitted
    from that type; when a key cannot be represented, a file of that type cannot hold it)."""
    out: dict[int, list[int]] = {}
    for ptype in physical_types:
        hs = [xxhash64(b) for b in (plain_bytes(k, ptype) for k in keys) if b is not None]
        out[ptype] = hs
    return out


# ------------------------------------------------------------------ pruning
def prune_files(
    files: Sequence[Mapping[str, Any]],
    keys_by_column: Mapping[str, Sequence[Any]],
    properties: Mapping[str, str],
    bloom_check: Callable[[Mapping[str, Any]], Mapping[str, bool]] | None = None,
) -> dict[str, Any]:
    """Split data files into candidates (to raw-read) and pruned ones.

    :param files: ``{"path", "metrics": {column: {"lower", "upper", "value_count", "null_count"}}}``.
    :param bloom_check: file -> {column: proven absent} (called only for files bounds did not prune).
    :return: ``{"candidates": [paths], "considered", "pruned_bounds", "pruned_bloom", "raw_read"}``.
    """
    sorted_keys = {c: sorted(set(v)) for c, v in keys_by_column.items()}
    modes = {c: metrics_mode(properties, c) for c in keys_by_column}
    candidates, by_bounds, by_bloom = [], 0, 0
    for f in files:
        excluded = {}
        for c, keys in sorted_keys.items():
            m = (f.get("metrics") or {}).get(c) or {}
            mode, length = modes[c]
            excluded[c] = bounds_exclude(
                keys,
                lower=m.get("lower"),
                upper=m.get("upper"),
                mode=mode,
                truncate_len=length,
                value_count=m.get("value_count"),
                null_count=m.get("null_count"),
            )
        if all(excluded.values()):
            by_bounds += 1
            continue
        if bloom_check is not None:
            bloom = bloom_check(f)
            if all(excluded[c] or bloom.get(c, False) for c in sorted_keys):
                by_bloom += 1
                continue
        candidates.append(f["path"])
    return {
        "candidates": candidates,
        "considered": len(files),
        "pruned_bounds": by_bounds,
        "pruned_bloom": by_bloom,
        "raw_read": len(candidates),
    }


# ------------------------------------------------------------ history to expire
def snapshots_reaching(
    snapshot_manifests: Mapping[int, Sequence[str]],
    manifest_files: Mapping[str, Iterable[str]],
    subject_files: set[str],
    exposing_manifests: Iterable[str] = (),
) -> set[int]:
    """Snapshots with a manifest listing a subject file live, or a manifest known to carry a
    DELETED entry of one (``exposing_manifests``: DELETED entries keep the file's bounds)."""
    exposing = {m for m, paths in manifest_files.items() if not subject_files.isdisjoint(paths)}
    exposing |= set(exposing_manifests)
    return {sid for sid, ms in snapshot_manifests.items() if not exposing.isdisjoint(ms)}


def expiry_plan(
    snapshots: Sequence[Mapping[str, Any]], reaching: set[int], ref_heads: Mapping[str, int]
) -> dict[str, Any]:
    """Which snapshots to expire (those reaching a subject file, except ref heads) and what stays.

    :return: ``{"expire": [ids], "keep": [ids], "heads_reaching": [ref names], "oldest_kept_ms"}``.
    """
    heads = set(ref_heads.values())
    expire = sorted(
        s["snapshot_id"] for s in snapshots if s["snapshot_id"] in reaching and s["snapshot_id"] not in heads
    )
    keep = [s for s in snapshots if s["snapshot_id"] not in set(expire)]
    return {
        "expire": expire,
        "keep": sorted(s["snapshot_id"] for s in keep),
        "heads_reaching": sorted(n for n, sid in ref_heads.items() if sid in reaching),
        "oldest_kept_ms": min((int(s["timestamp_ms"]) for s in keep), default=None),
    }


def expire_ids_sql(catalog: str, dotted: str, snapshot_ids: Sequence[int]) -> str:
    """``expire_snapshots(snapshot_ids => array(...))``: ids are integers read from the catalog."""
    ids = ", ".join(str(int(s)) for s in snapshot_ids)
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", catalog) or not re.match(
        r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$", dotted
    ):
        raise ValueError("invalid identifier")
    return (
        f"CALL `{catalog}`.system.expire_snapshots(table => '{dotted}', snapshot_ids => array({ids}), "
        "retain_last => 1, stream_results => true)"
    )
