"""The subject index: which data files may hold a subject, answered from table metadata.

For a table whose erasure reads subject columns, the index maps each data file to a membership
filter over *keyed* hashes of the file's subject values: ``HMAC-SHA256(erasure salt, str(value))``,
the same keyed hash the evidence rows carry for a subject key
(:func:`~airflow_iceberg_provider.core.erasure_lifecycle.hmac_digest`). Without the salt the index
answers nothing: a reader cannot test whether an e-mail address is in a file.

Shape (pure; the Spark job gathers values and writes the file):

* **Filters** are keyed fingerprints: the first ``b`` bits of each distinct value's HMAC, kept
  per file. A key matches a file when its fingerprint is among the file's; a file of ``n`` distinct
  values is falsely named with probability at most ``n / 2**b``, and never missed. ``b`` follows
  the configured false-positive rate (:func:`fingerprint_bits`).
* **Entries** of all files sit in one sorted array (``fingerprint << 24 | file number``), so a
  probe is one binary search per key: its cost follows the number of keys, not the number of
  files. An update adds the new files' entries and removes those of files no longer live (their
  path becomes a tombstone), so an erased file's fingerprints leave the index.
* **Blobs**: one per subject column, of type :data:`BLOB_TYPE`, in a Puffin file registered on a
  snapshot as its statistics file (``statistics`` in table metadata, listing none of these blobs:
  see :data:`FILE_SUFFIX`). The blob names the column's field id, the false-positive rate and a key id (an HMAC
  of a fixed label: it tells whether the index was built with this salt without revealing it).
* **Lineage**: data files are immutable and never reuse a path, so a filter stays true for its
  path forever. Any index of the table is therefore sound for any snapshot: the files the index
  holds are probed in the index, every live file it does not hold (a commit the index does not
  cover: an outside writer's append, a branch published since) is probed directly.

Stdlib only; no I/O.
"""

from __future__ import annotations

import hmac
import json
import math
import struct
import sys
import zlib
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_iceberg_provider.core.erasure_lifecycle import KeyedHasher, hmac_digest

#: The Puffin blob type of a subject index (one blob per subject column).
BLOB_TYPE = "airflow-iceberg-provider-subject-index-v1"
#: How an index's Puffin file is named. Its statistics entry in table metadata lists only the blobs
#: of other types the file carries: pyiceberg 0.12 refuses table metadata whose ``blob-metadata``
#: names a type outside the spec's (a table would become unreadable to it), so the index's own
#: blobs are named in the Puffin footer only, and the file is found by this suffix.
FILE_SUFFIX = ".subject-index.puffin"
#: Table property turning the index on (``true`` / ``false``).
INDEX_PROPERTY = "airflow-iceberg.erasure.subject-index"
#: Table property: the filters' false-positive rate (default :data:`DEFAULT_FPP`).
FPP_PROPERTY = "airflow-iceberg.erasure.subject-index.fpp"
#: Per key and file: the chance that a key falsely names a file of up to :data:`REF_VALUES` values.
DEFAULT_FPP = 1e-6
REF_VALUES = 1 << 20
MIN_FP_BITS, MAX_FP_BITS = 16, 40
#: Entries keep the file's number in their low bits: an index covers at most 2**24 files.
FILE_BITS = 24
MAX_FILES = 1 << FILE_BITS
_KEY_ID_LABEL = "airflow-iceberg-provider subject index key id"
_PAYLOAD_MAGIC = b"SIX1"
PUFFIN_MAGIC = b"PFA1"
CREATED_BY = "airflow-iceberg-provider"


class SubjectIndexError(ValueError):
    """An index blob or Puffin file that cannot be read (it then proves nothing)."""


# ------------------------------------------------------------------ settings
def index_settings(properties: Mapping[str, str]) -> tuple[bool, float]:
    """(enabled, false-positive rate) from table properties; a malformed value raises, naming the
    property and the fix (a flag is ``true`` or ``false`` and nothing else)."""
    raw = str(properties.get(INDEX_PROPERTY, "false")).strip()
    if raw not in ("true", "false"):
        raise ValueError(f"table property {INDEX_PROPERTY}={raw!r} is not a flag; set it to 'true' or 'false'")
    return raw == "true", check_fpp(properties.get(FPP_PROPERTY, DEFAULT_FPP), FPP_PROPERTY)


def check_fpp(value: object, name: str = "fpp") -> float:
    """A false-positive rate strictly between 0 and 0.5."""
    try:
        fpp = float(str(value))
    except ValueError:
        fpp = math.nan
    if not 0 < fpp < 0.5:
        raise ValueError(f"{name}={value!r} is not a false-positive rate; pass a number between 0 and 0.5, e.g. 0.01")
    return fpp


# ------------------------------------------------------------------ keyed hashes
def key_id(salt: bytes) -> str:
    """Identifies the salt an index was built with, without revealing it."""
    return hmac_digest(salt, _KEY_ID_LABEL).hex()[:32]


def fingerprint_bits(fpp: float) -> int:
    """Bits kept of each keyed hash: a key falsely matches a file of ``n`` distinct values with
    probability at most ``n / 2**bits``, so ``fpp`` holds for files of up to :data:`REF_VALUES`
    distinct values (and is lower for smaller files)."""
    return max(MIN_FP_BITS, min(MAX_FP_BITS, math.ceil(math.log2(REF_VALUES / fpp))))


def fingerprint(digest: bytes, bits: int) -> int:
    """The first ``bits`` bits of a keyed hash."""
    return int.from_bytes(digest[:8], "big") >> (64 - bits)


# ------------------------------------------------------------------ one column
@dataclass
class ColumnIndex:
    """The index of one subject column: the files it covers and, sorted, one entry per distinct
    (value fingerprint, file): ``fingerprint << FILE_BITS | file number``.

    ``paths[i]`` is ``""`` for a file no longer live (a tombstone: its entries are removed)."""

    column: str
    field_id: int
    fpp: float
    key_id: str
    paths: list[str] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    entries: array[int] = field(default_factory=lambda: array("Q"))

    @property
    def bits(self) -> int:
        return fingerprint_bits(self.fpp)

    def covered(self) -> set[str]:
        return {p for p in self.paths if p}

    def add(self, values_by_path: Mapping[str, Iterable[object]], hasher: KeyedHasher) -> int:
        """Add the files not yet covered (their distinct non-null values hashed); returns how many.
        Files past :data:`MAX_FILES` numbers stay uncovered (probed directly: still sound)."""
        have = self.covered()
        bits = self.bits
        new: list[int] = []
        for path, values in values_by_path.items():
            if path in have or len(self.paths) >= MAX_FILES:
                continue
            number = len(self.paths)
            fps = {fingerprint(hasher.digest(v), bits) for v in {str(v) for v in values if v is not None}}
            self.paths.append(path)
            self.counts.append(len(fps))
            new.extend((fp << FILE_BITS) | number for fp in fps)
        if new:
            self.entries = array("Q", sorted([*self.entries, *new]))
        return len(self.paths) - len(have) - self.tombstones()

    def retain(self, live: set[str]) -> int:
        """Tombstone every covered file not in ``live`` and remove its entries; returns how many."""
        dead = {i for i, p in enumerate(self.paths) if p and p not in live}
        if not dead:
            return 0
        for i in dead:
            self.paths[i] = ""
            self.counts[i] = 0
        mask = (1 << FILE_BITS) - 1
        self.entries = array("Q", [e for e in self.entries if (e & mask) not in dead])
        return len(dead)

    def candidates(self, digests: Iterable[bytes]) -> set[str]:
        """Covered files whose filters may hold any of the digests."""
        out: set[str] = set()
        bits, mask, entries = self.bits, (1 << FILE_BITS) - 1, self.entries
        for d in digests:
            fp = fingerprint(d, bits)
            i = bisect_left(entries, fp << FILE_BITS)
            end = (fp + 1) << FILE_BITS
            while i < len(entries) and entries[i] < end:
                path = self.paths[entries[i] & mask]
                if path:
                    out.add(path)
                i += 1
        return out

    def tombstones(self) -> int:
        return sum(1 for p in self.paths if not p)


def encode_column(index: ColumnIndex, hasher: KeyedHasher) -> bytes:
    """The blob payload: a magic, then a zlib stream of a JSON header (paths, counts, settings, and
    a MAC under the salt of everything else: an index changed without the salt is refused) and the
    sorted entries as little-endian 64-bit integers."""
    body = array("Q", index.entries)
    if sys.byteorder != "little":
        body.byteswap()
    header: dict[str, Any] = {
        "column": index.column,
        "field_id": index.field_id,
        "fpp": index.fpp,
        "bits": index.bits,
        "key_id": index.key_id,
        "paths": index.paths,
        "counts": index.counts,
        "entries": len(index.entries),
    }
    header["mac"] = _mac(header, body.tobytes(), hasher)
    head = json.dumps(header, separators=(",", ":")).encode("utf-8")
    return _PAYLOAD_MAGIC + zlib.compress(struct.pack("<I", len(head)) + head + body.tobytes(), 1)


def _mac(header: Mapping[str, Any], body: bytes, hasher: KeyedHasher) -> str:
    fields = {k: v for k, v in header.items() if k != "mac"}
    return hasher.mac(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode("utf-8") + body).hex()


def decode_column(payload: bytes, hasher: KeyedHasher) -> ColumnIndex:
    """Inverse of :func:`encode_column`; a damaged payload, or one not sealed under this salt,
    raises :class:`SubjectIndexError`."""
    try:
        if payload[:4] != _PAYLOAD_MAGIC:
            raise SubjectIndexError("not a subject index blob")
        raw = zlib.decompress(payload[4:])
        (n,) = struct.unpack_from("<I", raw, 0)
        h = json.loads(raw[4 : 4 + n].decode("utf-8"))
        body = raw[4 + n :]
        if not hmac.compare_digest(str(h.get("mac", "")), _mac(h, body, hasher)):
            raise SubjectIndexError("the subject index blob is not sealed under this salt (changed or another salt)")
        entries = array("Q")
        entries.frombytes(body)
        if sys.byteorder != "little":
            entries.byteswap()
        paths = [str(p) for p in h["paths"]]
        index = ColumnIndex(
            column=str(h["column"]),
            field_id=int(h["field_id"]),
            fpp=check_fpp(h["fpp"]),
            key_id=str(h["key_id"]),
            paths=paths,
            counts=[int(c) for c in h["counts"]],
            entries=entries,
        )
        if int(h["bits"]) != index.bits or len(entries) != int(h["entries"]) or len(index.counts) != len(paths):
            raise SubjectIndexError("the subject index blob is inconsistent")
        return index
    except SubjectIndexError:
        raise
    except (zlib.error, struct.error, KeyError, TypeError, ValueError, UnicodeDecodeError) as err:
        raise SubjectIndexError(f"the subject index blob cannot be read ({type(err).__name__})") from None


# ------------------------------------------------------------------ Puffin
@dataclass
class Blob:
    """One Puffin blob: its metadata (as in the footer) and its bytes."""

    type: str
    fields: list[int]
    snapshot_id: int
    sequence_number: int
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    compression_codec: str | None = None


@dataclass
class PuffinFile:
    """An encoded Puffin file and what table metadata's ``statistics`` entry needs."""

    data: bytes
    footer_size: int
    blobs: list[dict[str, Any]]


def encode_puffin(blobs: Sequence[Blob], created_by: str = CREATED_BY) -> PuffinFile:
    """Puffin v1: ``PFA1``, blobs, footer (``PFA1``, JSON payload, payload size int32 LE, 4 flag
    bytes, ``PFA1``); uncompressed blobs and footer."""
    out = bytearray(PUFFIN_MAGIC)
    metas = []
    for b in blobs:
        meta: dict[str, Any] = {
            "type": b.type,
            "fields": list(b.fields),
            "snapshot-id": int(b.snapshot_id),
            "sequence-number": int(b.sequence_number),
            "offset": len(out),
            "length": len(b.data),
        }
        if b.compression_codec:
            meta["compression-codec"] = b.compression_codec
        if b.properties:
            meta["properties"] = dict(b.properties)
        metas.append(meta)
        out += b.data
    payload = json.dumps({"blobs": metas, "properties": {"created-by": created_by}}, separators=(",", ":")).encode()
    footer = PUFFIN_MAGIC + payload + struct.pack("<i", len(payload)) + b"\x00\x00\x00\x00" + PUFFIN_MAGIC
    out += footer
    return PuffinFile(data=bytes(out), footer_size=len(footer), blobs=metas)


def decode_puffin_footer(tail: bytes, file_size: int) -> list[dict[str, Any]]:
    """The blob metadata of a Puffin file from its last bytes (``tail``: at least the footer)."""
    if len(tail) < 12 or tail[-4:] != PUFFIN_MAGIC:
        raise SubjectIndexError("not a Puffin file (no trailing magic)")
    flags = tail[-8:-4]
    (n,) = struct.unpack("<i", tail[-12:-8])
    if flags[0] & 1:
        raise SubjectIndexError("a compressed Puffin footer is not supported")
    start = len(tail) - 12 - n
    if n < 0 or start < 4 or tail[start - 4 : start] != PUFFIN_MAGIC or file_size < n + 20:
        raise SubjectIndexError("the Puffin footer is truncated")
    try:
        meta = json.loads(tail[start : start + n].decode("utf-8"))
        blobs = list(meta["blobs"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise SubjectIndexError("the Puffin footer is not valid JSON") from None
    return blobs


def read_puffin(data: bytes) -> list[Blob]:
    """Every blob of a Puffin file held in memory (compressed blobs kept as they are)."""
    if data[:4] != PUFFIN_MAGIC:
        raise SubjectIndexError("not a Puffin file (no leading magic)")
    out = []
    for m in decode_puffin_footer(data, len(data)):
        off, length = int(m["offset"]), int(m["length"])
        if off < 4 or off + length > len(data):
            raise SubjectIndexError("a Puffin blob lies outside the file")
        out.append(
            Blob(
                type=str(m["type"]),
                fields=[int(f) for f in m.get("fields", [])],
                snapshot_id=int(m.get("snapshot-id", -1)),
                sequence_number=int(m.get("sequence-number", -1)),
                data=data[off : off + length],
                properties={str(k): str(v) for k, v in (m.get("properties") or {}).items()},
                compression_codec=str(m["compression-codec"]) if m.get("compression-codec") else None,
            )
        )
    return out


def column_blob(index: ColumnIndex, snapshot_id: int, sequence_number: int, hasher: KeyedHasher) -> Blob:
    """The Puffin blob of one column's index."""
    return Blob(
        type=BLOB_TYPE,
        fields=[index.field_id],
        snapshot_id=snapshot_id,
        sequence_number=sequence_number,
        data=encode_column(index, hasher),
        properties={
            "column": index.column,
            "fpp": repr(index.fpp),
            "key-id": index.key_id,
            "files": str(len(index.covered())),
            "keyed-hash": "hmac-sha256",
        },
    )


def index_blobs(
    blobs: Iterable[Blob], field_ids: Mapping[str, int], salt_key_id: str, hasher: KeyedHasher
) -> dict[str, ColumnIndex]:
    """Column -> its index, from a Puffin file's blobs: only blobs of :data:`BLOB_TYPE` for the
    column's field id built with this salt; a damaged blob is left out (it proves nothing)."""
    out: dict[str, ColumnIndex] = {}
    by_id = {fid: c for c, fid in field_ids.items()}
    for b in blobs:
        if b.type != BLOB_TYPE or b.compression_codec or len(b.fields) != 1 or b.fields[0] not in by_id:
            continue
        if b.properties.get("key-id") != salt_key_id:
            continue
        try:
            col = decode_column(b.data, hasher)
        except SubjectIndexError:
            continue
        if col.key_id == salt_key_id and col.field_id == b.fields[0]:
            out[by_id[col.field_id]] = col
    return out


# ------------------------------------------------------------------ the plan
@dataclass
class ProbePlan:
    """Which live files a run opens: those the index names (``named``) and those it does not
    cover (``unindexed``); ``excluded`` files are proven free of every key by the index."""

    named: set[str]
    unindexed: set[str]
    excluded: set[str]

    def to_open(self) -> set[str]:
        return self.named | self.unindexed


def plan_probe(
    live: Iterable[str],
    indexes: Mapping[str, ColumnIndex],
    digests_by_column: Mapping[str, Sequence[bytes]],
) -> ProbePlan:
    """Split live files: a file is excluded only when, for EVERY subject column, the column's index
    covers it and no key's digest hits its filter; a column with no index covers nothing."""
    live = set(live)
    columns = list(digests_by_column)
    named: set[str] = set()
    unindexed: set[str] = set()
    proven = set(live)
    for c in columns:
        idx = indexes.get(c)
        if idx is None:
            unindexed |= live
            proven = set()
            continue
        covered = idx.covered() & live
        unindexed |= live - covered
        maybe = idx.candidates(digests_by_column[c]) & live
        named |= maybe
        proven &= covered - maybe
    named -= unindexed
    return ProbePlan(named=named, unindexed=unindexed, excluded=proven)


def stale_columns(indexes: Mapping[str, ColumnIndex], columns: Sequence[str], live: set[str], fpp: float) -> list[str]:
    """Columns whose index is missing, built at another rate, or covers under half the live files
    or holds more tombstones than files (then rebuilt rather than updated)."""
    out = []
    for c in columns:
        idx = indexes.get(c)
        if idx is None or abs(idx.fpp - fpp) > 1e-12:
            out.append(c)
            continue
        covered = len(idx.covered() & live)
        if covered * 2 < len(live) or idx.tombstones() > max(len(idx.covered()), 64):
            out.append(c)
    return out


def index_lag(
    snapshots: Mapping[int, tuple[int | None, int | None]], head: int | None, indexed: Iterable[int]
) -> int | None:
    """Data files committed on ``head``'s lineage since its nearest indexed ancestor (the sum of the
    snapshots' ``added-data-files``; a snapshot without that count counts as one file); ``None`` when
    no ancestor of ``head`` carries an index (the index is missing). ``0``: the index covers the head.

    :param snapshots: snapshot id -> (parent id, added data files from its summary).
    """
    if head is None:
        return 0
    marked, lag, seen = set(indexed), 0, set()
    sid: int | None = head
    while sid is not None and sid in snapshots and sid not in seen:
        if sid in marked:
            return lag
        seen.add(sid)
        parent, added = snapshots[sid]
        lag += 1 if added is None else int(added)
        sid = parent
    return None
