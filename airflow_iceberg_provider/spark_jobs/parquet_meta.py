"""Parquet metadata reader for erasure pruning: pure Python, no pyspark, no I/O beyond a
caller-supplied ``read(offset, length)`` (a local mmap, or ranged reads through Hadoop's
FileSystem on object stores).

Reads only what proves absence: the footer (Thrift compact protocol: row groups, column
chunks with ``encoding_stats``, codec and page offsets, the schema's field ids), split-block
bloom filters (xxHash64; the 32-byte blocks a few keys hash to, or the bitset once for many
keys) and dictionary pages
(decompressed with the stdlib or pyarrow, CRC checked when written, PLAIN values). The
decisions built on them live in ``erasure_prune.py``. A damaged file raises one of
:data:`DAMAGED` (or yields None); it never proves anything.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

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
            if size > len(self.buf) - self.pos:
                raise ValueError("thrift map larger than its buffer")
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
        if size > len(self.buf) - self.pos:  # every element takes at least one byte
            raise ValueError("thrift list larger than its buffer")
        return size, head & 0x0F


# Parquet enums (parquet.thrift)
PAGE_DATA, PAGE_DICTIONARY, PAGE_DATA_V2 = 0, 2, 3
ENC_PLAIN, ENC_PLAIN_DICTIONARY, ENC_RLE_DICTIONARY = 0, 2, 8
#: CompressionCodec -> pyarrow codec name (0 UNCOMPRESSED and 2 GZIP are read with the stdlib;
#: 3 LZO and 5 Hadoop-framed LZ4 are not read: such chunks stay candidates)
_ARROW_CODECS = {1: "snappy", 4: "brotli", 6: "zstd", 7: "lz4_raw"}
#: What parsing a damaged file can raise (it then proves nothing).
DAMAGED = (ValueError, IndexError, TypeError, struct.error, UnicodeDecodeError, OverflowError, RecursionError)
_U32 = struct.Struct("<I").unpack_from
#: Dictionary pages larger than this (uncompressed) are not read: the file stays a candidate.
MAX_DICTIONARY_BYTES = 32 << 20
_PAGE_HEADER_READ = 256


def _string(t: _Thrift) -> bytes:
    n = t.varint()
    if t.pos + n > len(t.buf):
        raise ValueError("truncated thrift string")
    t.pos += n
    return t.buf[t.pos - n : t.pos]


def _i32_fields(t: _Thrift, wanted: tuple[int, ...]) -> dict[int, int]:
    """A struct of which only the listed i32 fields are kept."""
    out = {}
    for fid, ftype in t.fields():
        if fid in wanted and ftype == 5:
            out[fid] = t.zigzag()
        else:
            t.skip(ftype)
    return out


def _column_meta(t: _Thrift) -> dict[str, Any]:
    """ColumnMetaData: type, path, codec, sizes, page offsets, encoding_stats, bloom filter location."""
    out: dict[str, Any] = {}
    ints = {1: "type", 4: "codec", 7: "total_compressed", 9: "data_offset", 11: "dict_offset"}
    ints |= {14: "bloom_offset", 15: "bloom_length"}
    for fid, ftype in t.fields():
        if fid in ints and ftype in (5, 6):
            out[ints[fid]] = t.zigzag()
        elif fid == 3 and ftype == 9:
            size, _ = t.list_header()
            out["path"] = tuple(_string(t).decode("utf-8", "replace") for _ in range(size))
        elif fid == 13 and ftype == 9:  # list<PageEncodingStats{1: page_type, 2: encoding, 3: count}>
            size, _ = t.list_header()
            out["encoding_stats"] = [_i32_fields(t, (1, 2, 3)) for _ in range(size)]
        else:
            t.skip(ftype)
    return out


def _column_chunk(t: _Thrift) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    foreign = False
    for fid, ftype in t.fields():
        if fid == 3 and ftype == 12:
            meta = _column_meta(t)
        elif fid == 1 and ftype == 8:
            foreign = foreign or bool(_string(t))  # the chunk lives in another file
        else:
            foreign = foreign or fid in (8, 9)  # column encryption: pages unreadable here
            t.skip(ftype)
    if foreign:
        meta["foreign"] = True
    return meta


def _schema_element(t: _Thrift) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fid, ftype in t.fields():
        if fid == 4 and ftype == 8:
            out["name"] = _string(t).decode("utf-8", "replace")
        elif fid in (5, 9) and ftype == 5:
            out["children" if fid == 5 else "field_id"] = t.zigzag()
        else:
            t.skip(ftype)
    return out


def top_level_field_ids(elements: Sequence[Mapping[str, Any]]) -> dict[int, str | None]:
    """Field id -> name of each top-level primitive column of a Parquet schema (None: ambiguous)."""
    out: dict[int, str | None] = {}
    remaining = [int(elements[0].get("children") or 0)] if elements else []
    for el in elements[1:]:
        if not remaining or remaining[-1] <= 0:
            raise ValueError("malformed parquet schema")
        depth = len(remaining)
        remaining[-1] -= 1
        kids = int(el.get("children") or 0)
        if depth == 1 and not kids and el.get("field_id") is not None:
            fid = int(el["field_id"])
            out[fid] = None if fid in out else el.get("name")
        if kids:
            remaining.append(kids)
        while len(remaining) > 1 and remaining[-1] == 0:
            remaining.pop()
    return out


def parse_footer(footer: bytes) -> tuple[list[dict[tuple[str, ...], dict[str, Any]]], dict[int, str | None]]:
    """(per row group: column path tuple -> column chunk metadata, top-level field id -> name)."""
    t = _Thrift(footer)
    groups: list[dict[tuple[str, ...], dict[str, Any]]] = []
    elements: list[dict[str, Any]] = []
    for fid, ftype in t.fields():
        if fid == 2 and ftype == 9:
            n, _ = t.list_header()
            elements = [_schema_element(t) for _ in range(n)]
        elif fid == 4 and ftype == 9:
            n_groups, _ = t.list_header()
            for _ in range(n_groups):
                cols: dict[tuple[str, ...], dict[str, Any]] = {}
                for gfid, gtype in t.fields():
                    if gfid != 1 or gtype != 9:
                        t.skip(gtype)
                        continue
                    n_cols, _ = t.list_header()
                    for _ in range(n_cols):
                        meta = _column_chunk(t)
                        if "path" in meta:
                            cols[meta["path"]] = meta
                groups.append(cols)
        else:
            t.skip(ftype)
    return groups, top_level_field_ids(elements)


def bloom_bitset(read: Callable[[int, int], bytes], offset: int, length: int | None) -> tuple[int, int] | None:
    """Parse a BloomFilterHeader: (bitset offset, bitset bytes), or None unless split-block /
    xxHash / uncompressed. The bitset is read afterwards: the blocks a few keys hash to, or all
    of it for many keys (:func:`sbbf_might_contain_any`)."""
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


#: Up to this many keys, each key's 32-byte block is read on its own; beyond it the bitset is read
#: once and every key is checked against it (one ranged read instead of one per key on object
#: stores, and a vectorized check instead of a Python loop per key).
BLOOM_BLOCK_READS_MAX_KEYS = 8


class KeyHashes(list):
    """xxHash64 of the keys of one physical type (a list of ints), with the derived arrays the
    vectorized bloom check needs, computed once per erasure rather than once per file."""

    _vector: Any = None

    def vector(self) -> Any:
        """``(high 32 bits, bit masks per salt)`` as numpy arrays, or None without numpy."""
        if self._vector is None:
            try:
                import numpy as np
            except ImportError:  # the per-key check still works
                self._vector = False
                return None
            h = np.array(self, dtype=np.uint64)
            salt = np.array(_SALT, dtype=np.uint64)
            key = h & np.uint64(0xFFFFFFFF)
            shifts = (((key[:, None] * salt[None, :]) & np.uint64(0xFFFFFFFF)) >> np.uint64(27)).astype(np.uint32)
            self._vector = (h >> np.uint64(32), np.uint32(1) << shifts)
        return self._vector or None


def sbbf_might_contain_any(read: Callable[[int, int], bytes], base: int, num_bytes: int, hashes: Sequence[int]) -> bool:
    """Whether any of ``hashes`` may be in the split-block bloom filter at ``base`` (``num_bytes``):
    exactly ``any(sbbf_might_contain_at(read, base, num_bytes, h) for h in hashes)``, reading the
    bitset once and checking all keys at once when there are more than
    :data:`BLOOM_BLOCK_READS_MAX_KEYS` of them."""
    vector = hashes.vector() if isinstance(hashes, KeyHashes) and len(hashes) > BLOOM_BLOCK_READS_MAX_KEYS else None
    if vector is None:
        return any(sbbf_might_contain_at(read, base, num_bytes, h) for h in hashes)
    import numpy as np

    high, masks = vector
    blocks = num_bytes // 32
    if blocks == 0:
        return True
    bitset = read(base, num_bytes)
    if len(bitset) != num_bytes:
        raise ValueError(f"bloom filter bitset cut short: {len(bitset)} of {num_bytes} bytes")
    index = ((high * np.uint64(blocks)) >> np.uint64(32)).astype(np.intp)
    words = np.frombuffer(bitset, dtype="<u4").reshape(blocks, 8)[index]
    return bool(((words & masks) == masks).all(axis=1).any())


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


# ------------------------------------------------------------ dictionary pages
def fully_dictionary_encoded(encoding_stats: Sequence[Mapping[int, int]] | None) -> bool:
    """Whether ``encoding_stats`` PROVE that every data page of a chunk is dictionary-encoded
    (then its one dictionary page holds every distinct non-null value). Absent stats prove
    nothing; a chunk that fell back to another encoding mid-way is not fully encoded."""
    if not encoding_stats:
        return False
    data = [s for s in encoding_stats if s.get(1) in (PAGE_DATA, PAGE_DATA_V2)]
    dictionary = [s for s in encoding_stats if s.get(1) == PAGE_DICTIONARY]
    if any(s.get(1) not in (PAGE_DATA, PAGE_DATA_V2, PAGE_DICTIONARY, 1) for s in encoding_stats):
        return False
    return (
        bool(data)
        and all(s.get(2) in (ENC_PLAIN_DICTIONARY, ENC_RLE_DICTIONARY) for s in data)
        and sum(int(s.get(3, 1)) for s in dictionary) == 1
    )


def decompress(codec: int, data: bytes, size: int) -> bytes | None:
    """A page body of ``size`` bytes uncompressed, or None (unknown codec, corrupt data, other size)."""
    out: bytes | None
    if codec == 0:
        out = data
    elif codec == 2:
        try:
            out = zlib.decompress(data, 47)  # gzip (or zlib) header
        except zlib.error:
            return None
    elif codec in _ARROW_CODECS:
        out = _arrow_decompress(_ARROW_CODECS[codec], data, size)
    else:
        return None
    return bytes(out) if out is not None and len(out) == size else None


def _arrow_decompress(name: str, data: bytes, size: int) -> bytes | None:
    try:
        import pyarrow as pa
    except ImportError:  # no pyarrow in this interpreter: no proof
        return None
    failed = (OSError, ValueError, NotImplementedError, pa.ArrowException)
    try:
        codec = pa.Codec(name)
        out = codec.decompress(data, decompressed_size=size, asbytes=True)
    except failed:  # codec not built in, or corrupt data
        return None
    if name != "zstd" and size > 0:
        # these codecs fill a larger buffer only partly, without an error: exactly ``size``
        # bytes must not fit in one byte less
        try:
            codec.decompress(data, decompressed_size=size - 1, asbytes=True)
            return None
        except failed:
            pass
    return out


def plain_entries(physical_type: int, data: bytes, count: int) -> Iterator[bytes]:
    """The PLAIN-encoded values of a dictionary page, lazily; ValueError unless ``data`` holds
    exactly ``count`` of them (for BYTE_ARRAY, raised once the walk reaches the end)."""
    width = {INT32: 4, INT64: 8}.get(physical_type)
    if width:
        if count < 0 or len(data) != width * count:
            raise ValueError("dictionary size does not match its value count")
        return (data[i : i + width] for i in range(0, len(data), width))
    if physical_type != BYTE_ARRAY:
        raise ValueError(f"physical type {physical_type} is not decoded")
    return _byte_array_entries(data, count)


def _byte_array_entries(data: bytes, count: int) -> Iterator[bytes]:
    pos, end, u32 = 0, len(data), _U32
    for _ in range(count):
        if pos + 4 > end:
            raise ValueError("truncated dictionary page")
        (n,) = u32(data, pos)
        pos += 4
        if pos + n > end:
            raise ValueError("truncated dictionary value")
        yield data[pos : pos + n]
        pos += n
    if pos != end:
        raise ValueError("dictionary page longer than its value count")


def plain_values(physical_type: int, data: bytes, count: int) -> set[bytes] | None:
    """Every PLAIN-encoded value of a dictionary page, or None unless ``data`` holds exactly ``count``."""
    try:
        return set(plain_entries(physical_type, data, count))
    except ValueError:
        return None


def _page_header(t: _Thrift) -> dict[str, int]:
    out: dict[str, int] = {}
    names = {1: "type", 2: "uncompressed", 3: "compressed", 4: "crc"}
    for fid, ftype in t.fields():
        if fid in names and ftype == 5:
            out[names[fid]] = t.zigzag()
        elif fid == 7 and ftype == 12:  # DictionaryPageHeader{1: num_values, 2: encoding}
            d = _i32_fields(t, (1, 2))
            out["num_values"], out["encoding"] = d.get(1, -1), d.get(2, -1)
        else:
            t.skip(ftype)
    return out


def dictionary_values(read: Callable[[int, int], bytes], meta: Mapping[str, Any]) -> set[bytes] | None:
    """Every distinct non-null value of a column chunk, from its dictionary page, or None unless
    ``encoding_stats`` prove every data page dictionary-encoded and the page reads back cleanly."""
    try:
        page = _dictionary_page(read, meta)
    except DAMAGED:
        return None
    return None if page is None else plain_values(int(meta.get("type", -1)), *page)


def dictionary_excludes(read: Callable[[int, int], bytes], meta: Mapping[str, Any], keys: frozenset[bytes]) -> bool:
    """True when the chunk's dictionary page (see :func:`dictionary_values`) PROVES that no key
    (plain encoding) is in the chunk; stops at the first key found."""
    try:
        page = _dictionary_page(read, meta)
        return page is not None and keys.isdisjoint(plain_entries(int(meta.get("type", -1)), *page))
    except DAMAGED:
        return False


def _dictionary_page(read: Callable[[int, int], bytes], meta: Mapping[str, Any]) -> tuple[bytes, int] | None:
    """(decompressed PLAIN values, value count) of a fully dictionary-encoded chunk, or None."""
    if meta.get("foreign") or not fully_dictionary_encoded(meta.get("encoding_stats")):
        return None
    start, total = meta.get("dict_offset") or meta.get("data_offset"), meta.get("total_compressed")
    if start is None or total is None or start < 4 or total <= 0:
        return None
    t = _Thrift(read(start, min(int(total), _PAGE_HEADER_READ)))
    h = _page_header(t)
    body_len, size = h.get("compressed", -1), h.get("uncompressed", -1)
    if (
        h.get("type") != PAGE_DICTIONARY
        or h.get("encoding") not in (ENC_PLAIN, ENC_PLAIN_DICTIONARY)
        or not 0 <= body_len <= total - t.pos
        or not 0 <= size <= MAX_DICTIONARY_BYTES
    ):
        return None
    body = read(start + t.pos, body_len)
    if len(body) != body_len or ("crc" in h and zlib.crc32(body) != h["crc"] & 0xFFFFFFFF):
        return None
    data = decompress(int(meta.get("codec", -1)), body, size)
    return None if data is None else (data, h["num_values"])
