"""Candidate-file pruning and history selection for erasure: pure Python, no pyspark, no I/O
beyond a caller-supplied ``read(offset, length)``.

Shipped in the ``spark_jobs`` package and unit-tested on the Airflow side; the Parquet footer,
bloom filter and dictionary page reading is ``parquet_meta.py``.

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
  Arrow) and **dictionary pages**, per row group and subject column chunk: the bloom filter
  proves absence when no key hits it; the dictionary page when the chunk's ``encoding_stats``
  show EVERY data page dictionary-encoded (then the dictionary holds every distinct value;
  absent stats or a mid-chunk fallback to PLAIN prove nothing), and none of its PLAIN-decoded
  values is a key. This is what covers parquet-mr, which writes NO bloom filter for a fully
  dictionary-encoded chunk. A file is skipped for a column only when EVERY row group proves
  it. Keys compare in their plain encoding (BYTE_ARRAY: UTF-8 bytes; INT32/INT64:
  little-endian); keys of other Python types (``Decimal``) prove nothing. Columns are found by
  Iceberg field id when the caller gives it.

A file is pruned when, for every subject column, no key can be in it (rows match if ANY
subject column equals a key).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from airflow_iceberg_provider.spark_jobs import parquet_meta as pm
from airflow_iceberg_provider.spark_jobs.parquet_meta import BYTE_ARRAY, INT32, INT64

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


# ------------------------------------------------------------------ file proofs
PROOF_BLOOM, PROOF_DICTIONARY = "bloom", "dictionary"


def key_probes(keys: Iterable[Any]) -> dict[int, tuple[list[int], frozenset[bytes]]]:
    """Per physical type: (xxHash64 of each key, plain encodings of the keys).

    A key that cannot be stored in a type (a string in an INT64 column, 2**40 in INT32) is
    left out of that type. A type is absent altogether when a key's Python type is not one
    this module encodes (``Decimal``, ``float``…) or a string has no UTF-8 form: nothing is
    proven for such columns.
    """
    keys = [k for k in keys if k is not None]  # a null key matches no row
    out: dict[int, tuple[list[int], frozenset[bytes]]] = {}
    if any(not isinstance(k, (str, int)) or isinstance(k, bool) for k in keys):
        return out
    for ptype in (INT32, INT64, BYTE_ARRAY):
        try:
            plain = [b for b in (pm.plain_bytes(k, ptype) for k in keys) if b is not None]
        except UnicodeEncodeError:  # a lone surrogate has no UTF-8 form: prove nothing
            return {}
        out[ptype] = (pm.KeyHashes(pm.xxhash64(b) for b in plain), frozenset(plain))
    return out


def key_hashes(keys: Iterable[Any], physical_types: Sequence[int] = (INT32, INT64, BYTE_ARRAY)) -> dict[int, list[int]]:
    """xxHash64 of each key per physical type it can be stored in (see :func:`key_probes`)."""
    return {p: hs for p, (hs, _) in key_probes(keys).items() if p in physical_types}


def chunk_proof(
    read: Callable[[int, int], bytes], meta: Mapping[str, Any], probe: Mapping[int, tuple[list[int], Any]]
) -> str | None:
    """``"bloom"`` or ``"dictionary"`` when that source PROVES no key is in the column chunk, else None.
    The bloom filter is tried first (a few 32-byte reads); the dictionary also settles a bloom
    false positive. A probe without plain encodings (``None``) skips the dictionary."""
    if meta.get("foreign") or meta.get("type") not in probe:
        return None
    hashes, plain = probe[meta["type"]]
    if meta.get("bloom_offset") is not None:
        bitset = pm.bloom_bitset(read, int(meta["bloom_offset"]), meta.get("bloom_length"))
        if bitset is not None and not pm.sbbf_might_contain_any(read, *bitset, hashes):
            return PROOF_BLOOM
    if plain is not None and pm.dictionary_excludes(read, meta, plain):
        return PROOF_DICTIONARY
    return None


def _chunks(groups: list[dict[tuple[str, ...], dict[str, Any]]], path: tuple[str, ...] | None) -> list[Any]:
    return [cols.get(path) if path else None for cols in groups]


def file_proofs(
    read: Callable[[int, int], bytes],
    size: int,
    probes: Mapping[str, Mapping[int, tuple[list[int], Any]]],
    field_ids: Mapping[str, int] | None = None,
) -> dict[str, str | None]:
    """Per subject column: the source proving no key is in ANY row group of the file
    (``"dictionary"`` when at least one row group needed its dictionary, else ``"bloom"``), or None.

    :param probes: column -> :func:`key_probes` of its keys.
    :param field_ids: column -> Iceberg field id: the Parquet column is found by field id (a
        renamed or re-added column is never confused with another); without it, by name.
    """
    out: dict[str, str | None] = {c: None for c in probes}
    try:
        footer = pm.read_footer(read, size)
        if footer is None:
            return out
        groups, ids = pm.parse_footer(footer)
        if not groups:
            return out  # no row group: nothing to prove with (and raw-reading it costs nothing)
        for col, probe in probes.items():
            name: str | None
            if field_ids is None:
                name = col
            else:  # a column the caller has no field id for proves nothing
                name = ids.get(int(field_ids[col])) if field_ids.get(col) is not None else None
            proofs = []
            for meta in _chunks(groups, (name,) if name else None):
                proof = chunk_proof(read, meta, probe) if meta else None
                if proof is None:
                    break
                proofs.append(proof)
            else:
                out[col] = PROOF_DICTIONARY if PROOF_DICTIONARY in proofs else PROOF_BLOOM
    except pm.DAMAGED:
        return {c: None for c in probes}  # a damaged file proves nothing
    return out


def bloom_excludes(
    read: Callable[[int, int], bytes], size: int, hashes_by_column: Mapping[str, Mapping[int, list[int]]]
) -> dict[str, bool]:
    """Per subject column: True when the file's bloom filters alone PROVE no key is present.

    :param hashes_by_column: column -> physical type -> xxHash64 of every key in that
        type's plain encoding (see :func:`key_hashes`).
    """
    probes = {c: {p: (hs, None) for p, hs in by_type.items()} for c, by_type in hashes_by_column.items()}
    return {c: v == PROOF_BLOOM for c, v in file_proofs(read, size, probes).items()}


# ------------------------------------------------------------------ pruning
def prune_files(
    files: Sequence[Mapping[str, Any]],
    keys_by_column: Mapping[str, Sequence[Any]],
    properties: Mapping[str, str],
    file_check: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Split data files into candidates (to raw-read) and pruned ones.

    :param files: ``{"path", "metrics": {column: {"lower", "upper", "value_count", "null_count"}}}``.
    :param file_check: file -> {column: proof} (called only for files bounds did not prune); a
        proof is ``"dictionary"``, ``"bloom"`` (or True), or falsy: not proven.
    :return: ``{"candidates": [paths], "considered", "pruned_bounds", "pruned_bloom",
        "pruned_dictionary", "raw_read"}``; a file is counted under the dictionary when any of
        its columns needed a dictionary page, else under the bloom filter.
    """
    sorted_keys = {c: sorted(set(v)) for c, v in keys_by_column.items()}
    modes = {c: metrics_mode(properties, c) for c in keys_by_column}
    candidates, by_bounds, by_bloom, by_dictionary = [], 0, 0, 0
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
        if file_check is not None:
            proofs = file_check(f)
            if all(excluded[c] or proofs.get(c) for c in sorted_keys):
                if any(not excluded[c] and proofs.get(c) == PROOF_DICTIONARY for c in sorted_keys):
                    by_dictionary += 1
                else:
                    by_bloom += 1
                continue
        candidates.append(f["path"])
    return {
        "candidates": candidates,
        "considered": len(files),
        "pruned_bounds": by_bounds,
        "pruned_bloom": by_bloom,
        "pruned_dictionary": by_dictionary,
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
