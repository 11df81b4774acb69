"""Dictionary-page pruning (#13), pure: files written by pyarrow (an independent writer that
writes dictionary pages and ``encoding_stats``), adversarial chunks (fallback mid-chunk, missing
stats, damaged pages, renamed columns), every codec, int and string subject columns, unicode.

Soundness is asserted the same way everywhere: a key present in a file is NEVER proven absent.
"""

from __future__ import annotations

import struct
import zlib
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_iceberg_provider.spark_jobs import parquet_meta as pm
from airflow_iceberg_provider.spark_jobs.erasure import prune as ep

UNICODE = ["Zoë", "李雷", "Łódź", "🙂 emoji", "é" * 20, "quote'\"; DROP TABLE t; --", ""]


def _field(name, typ, fid):
    return pa.field(name, typ, metadata={b"PARQUET:field_id": str(fid).encode()})


def _write(tmp_path, name, columns, **opts):
    """columns: name -> (pyarrow type, values, field id)."""
    schema = pa.schema([_field(n, t, fid) for n, (t, _, fid) in columns.items()])
    table = pa.table({n: pa.array(v, t) for n, (t, v, _) in columns.items()}, schema=schema)
    path = tmp_path / name
    pq.write_table(table, path, **opts)
    data = path.read_bytes()
    return (lambda o, n: data[o : o + n]), len(data), data


def _proofs(read, size, keys_by_column, ids=None):
    return ep.file_proofs(read, size, {c: ep.key_probes(k) for c, k in keys_by_column.items()}, ids)


def _chunks(read, size, column):
    groups, _ = pm.parse_footer(pm.read_footer(read, size))
    return [g[(column,)] for g in groups]


def _mixed(n=600):
    strings = [f"customer-{i % 40:03d}" for i in range(n)]
    return {
        "c": (pa.string(), strings, 1),
        "n": (pa.int64(), [i % 40 for i in range(n)], 2),
        "i": (pa.int32(), [-(i % 40) for i in range(n)], 3),
    }


@pytest.mark.parametrize("codec", ["zstd", "snappy", "gzip", "none", "brotli", "lz4"])
def test_dictionary_proves_absence_and_never_excludes_a_present_key(tmp_path, codec):
    read, size, _ = _write(tmp_path, f"{codec}.parquet", _mixed(), compression=codec, row_group_size=250)
    assert [m.get("bloom_offset") for m in _chunks(read, size, "c")] == [None] * 3  # no bloom filter at all
    for v in range(40):  # every value present, first and last included
        got = _proofs(read, size, {"c": [f"customer-{v:03d}"], "n": [v], "i": [-v]})
        assert got == {"c": None, "n": None, "i": None}
    absent = _proofs(read, size, {"c": ["customer-040", "customer-00"], "n": [40, -1], "i": [1, -40]})
    assert absent == {"c": "dictionary", "n": "dictionary", "i": "dictionary"}
    # one present key among absent ones keeps the column
    assert _proofs(read, size, {"c": ["nobody", "customer-039"]}) == {"c": None}


def test_int_keys_are_typed_by_physical_type(tmp_path):
    read, size, _ = _write(tmp_path, "ints.parquet", _mixed())
    # 2**40 cannot be stored in INT32 and does not collide with a truncated value; a string key
    # cannot be in an int column; a null key matches nothing
    assert _proofs(read, size, {"i": [1 << 40], "n": [(1 << 40) + 5], "c": [None]}) == {
        "i": "dictionary",
        "n": "dictionary",
        "c": "dictionary",
    }
    assert _proofs(read, size, {"n": [(1 << 32) + 3]}) == {"n": "dictionary"}  # low 32 bits equal 3: still absent
    assert _proofs(read, size, {"n": [3, "3"]}) == {"n": None}


def test_unicode_keys_compare_as_exact_utf8_bytes(tmp_path):
    values = UNICODE * 30
    read, size, _ = _write(tmp_path, "u.parquet", {"c": (pa.string(), values, 1)})
    for v in UNICODE:
        assert _proofs(read, size, {"c": [v]}) == {"c": None}, v
    # matching is exact: another normalisation, case or whitespace is a different key
    nfd = "Zoe\u0308"
    assert _proofs(read, size, {"c": [nfd, "zoë", " Zoë", "李", "é" * 19]}) == {"c": "dictionary"}


def test_dictionary_fallback_mid_chunk_stays_a_candidate(tmp_path):
    # 40 repeated keys first, then 3,000 distinct ones: the writer's dictionary overflows and
    # the rest of the chunk is PLAIN; "late-2999" is only in those PLAIN pages
    values = [f"customer-{i % 40:03d}" for i in range(2000)] + [f"late-{i}" for i in range(3000)]
    read, size, _ = _write(
        tmp_path, "fallback.parquet", {"c": (pa.string(), values, 1)}, dictionary_pagesize_limit=4096
    )
    (meta,) = _chunks(read, size, "c")
    data_encodings = {s[2] for s in meta["encoding_stats"] if s[1] in (pm.PAGE_DATA, pm.PAGE_DATA_V2)}
    assert pm.ENC_RLE_DICTIONARY in data_encodings and pm.ENC_PLAIN in data_encodings  # really mixed
    assert not pm.fully_dictionary_encoded(meta["encoding_stats"])
    # the dictionary page itself does not hold the late key: trusting it would have been unsound
    trusted = dict(meta, encoding_stats=[{1: pm.PAGE_DICTIONARY, 2: 0, 3: 1}, {1: pm.PAGE_DATA, 2: 8, 3: 1}])
    assert b"late-2999" not in pm.dictionary_values(read, trusted)
    assert pm.dictionary_values(read, meta) is None
    assert _proofs(read, size, {"c": ["late-2999"]}) == {"c": None}
    assert _proofs(read, size, {"c": ["nobody"]}) == {"c": None}  # no proof at all for this chunk


def test_missing_or_odd_encoding_stats_prove_nothing(tmp_path):
    read, size, _ = _write(tmp_path, "s.parquet", _mixed())
    (meta,) = _chunks(read, size, "c")
    assert pm.dictionary_values(read, meta) is not None
    probe = ep.key_probes(["nobody"])
    assert ep.chunk_proof(read, meta, probe) == "dictionary"
    no_stats = {k: v for k, v in meta.items() if k != "encoding_stats"}
    assert pm.dictionary_values(read, no_stats) is None and ep.chunk_proof(read, no_stats, probe) is None
    d, rle, plain = {1: 2, 2: 0, 3: 1}, {1: 0, 2: 8, 3: 4}, {1: 0, 2: 0, 3: 1}
    assert pm.fully_dictionary_encoded([d, rle]) and pm.fully_dictionary_encoded([d, {1: 3, 2: 2, 3: 1}])
    for stats in (None, [], [d], [rle], [d, rle, plain], [{1: 2, 2: 0, 3: 2}, rle], [d, rle, {1: 9, 2: 0, 3: 1}]):
        assert not pm.fully_dictionary_encoded(stats), stats
    assert ep.chunk_proof(read, dict(meta, foreign=True), probe) is None  # chunk in another file / encrypted


def test_multiple_row_groups_only_one_holding_the_key(tmp_path):
    values = [f"a{i % 10}" for i in range(300)] + [f"b{i % 10}" for i in range(300)] + ["a1", "zz"] * 150
    read, size, _ = _write(tmp_path, "rg.parquet", {"c": (pa.string(), values, 1)}, row_group_size=300)
    assert len(_chunks(read, size, "c")) == 3
    for key in ("a1", "b9", "zz"):  # each in some row groups only
        assert _proofs(read, size, {"c": [key]}) == {"c": None}, key
    assert _proofs(read, size, {"c": ["b10", "a"]}) == {"c": "dictionary"}


def test_null_only_column_and_subject_equal_to_dictionary_edges(tmp_path):
    read, size, _ = _write(
        tmp_path,
        "nulls.parquet",
        {"c": (pa.string(), [None] * 100, 1), "e": (pa.string(), ["", "k1", "k10", "k" * 40] * 25, 2)},
    )
    assert _proofs(read, size, {"c": ["anyone"]}) == {"c": "dictionary"}  # an empty dictionary: no value at all
    for key in ("", "k1", "k10", "k" * 40):
        assert _proofs(read, size, {"e": [key]}) == {"e": None}, key
    assert _proofs(read, size, {"e": ["k", "k100", "k" * 39, "k" * 41]}) == {"e": "dictionary"}


def test_columns_are_matched_by_field_id_not_name(tmp_path):
    # the file was written when field 1 was called "a"; the table later renamed it to "b" and a
    # dropped column (field 2) had been called "b": probing by name would read the wrong column
    read, size, _ = _write(
        tmp_path, "renamed.parquet", {"a": (pa.string(), ["subject"] * 10, 1), "b": (pa.string(), ["x"] * 10, 2)}
    )
    assert _proofs(read, size, {"b": ["subject"]}) == {"b": "dictionary"}  # by name: the dropped column
    assert _proofs(read, size, {"b": ["subject"]}, ids={"b": 1}) == {"b": None}  # by id: the real one
    assert _proofs(read, size, {"b": ["nobody"]}, ids={"b": 1}) == {"b": "dictionary"}
    assert _proofs(read, size, {"b": ["nobody"]}, ids={"b": 99}) == {"b": None}  # id not in the file
    assert _proofs(read, size, {"b": ["nobody"]}, ids={}) == {"b": None}  # no id known


def test_decimal_and_other_key_types_prove_nothing(tmp_path):
    assert ep.key_probes([Decimal("1.50")]) == {} and ep.key_probes([1.5]) == {} and ep.key_probes([True]) == {}
    assert ep.key_hashes([Decimal("1.50")]) == {}  # the bloom path cannot prove with no hash either
    assert ep.key_probes(["ok", "\ud800"]) == {}  # a lone surrogate has no UTF-8 form: no proof, no crash
    read, size, _ = _write(
        tmp_path, "dec.parquet", {"d": (pa.decimal128(10, 2), [Decimal("1.25")] * 10, 1)}, store_decimal_as_integer=True
    )
    (meta,) = _chunks(read, size, "d")
    assert meta["type"] == pm.INT64  # the unscaled value: a Decimal key is never compared to it
    assert _proofs(read, size, {"d": [Decimal("9.99")]}) == {"d": None}


def _dictionary_span(read, size, column="c"):
    (meta,) = _chunks(read, size, column)
    return meta["dict_offset"], meta["data_offset"]


def test_damaged_dictionary_pages_stay_candidates_and_never_raise(tmp_path):
    cols = {"c": (pa.string(), [f"v{i % 30}" for i in range(300)], 1)}
    read, size, data = _write(tmp_path, "ok.parquet", cols, compression="zstd")
    start, end = _dictionary_span(read, size)
    assert _proofs(read, size, {"c": ["nobody"]}) == {"c": "dictionary"}

    def proofs_of(blob, key="nobody"):
        return _proofs(lambda o, n: blob[o : o + n], len(blob), {"c": [key]})

    # compressed body damaged (zstd rejects it), truncated file (no footer), header cut short
    body_damaged = data[: end - 8] + bytes(b ^ 0xFF for b in data[end - 8 : end]) + data[end:]
    assert proofs_of(body_damaged) == {"c": None}
    assert proofs_of(data[: size // 2]) == {"c": None}
    assert proofs_of(data[:start] + b"\x00" * (end - start) + data[end:]) == {"c": None}
    # a chunk whose sizes point past the chunk / a dictionary bigger than the cap
    (meta,) = _chunks(read, size, "c")
    assert pm.dictionary_values(read, dict(meta, total_compressed=5)) is None
    assert pm.dictionary_values(read, dict(meta, dict_offset=meta["data_offset"])) is None  # a data page there
    assert pm.dictionary_values(read, dict(meta, codec=3)) is None  # LZO: not read
    assert pm.dictionary_values(read, dict(meta, type=7)) is None  # FIXED_LEN_BYTE_ARRAY: not decoded


def test_every_single_byte_flip_of_a_checksummed_dictionary_page_is_safe(tmp_path):
    cols = {"c": (pa.string(), [f"v{i % 12}" for i in range(120)], 1)}
    read, size, data = _write(
        tmp_path, "crc.parquet", cols, compression="none", write_page_checksum=True, use_dictionary=True
    )
    start, end = _dictionary_span(read, size)
    assert _proofs(read, size, {"c": ["nobody"]}) == {"c": "dictionary"}  # the checksum verifies intact
    for pos in range(start, end):
        blob = data[:pos] + bytes([data[pos] ^ 0x5A]) + data[pos + 1 :]
        for v in range(12):  # a present key is never proven absent, whatever byte is damaged
            got = _proofs(lambda o, n, b=blob: b[o : o + n], len(blob), {"c": [f"v{v}"]})
            assert got == {"c": None}, (pos, v)


def test_damaged_footers_never_hang_or_raise(tmp_path):
    # a list header claiming 2**35 booleans must not loop for ever
    footer = bytes([0x49, 0xF1]) + bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x7F]) + b"\x01" * 8
    blob = b"PAR1" + footer + struct.pack("<I", len(footer)) + b"PAR1"
    assert _proofs(lambda o, n: blob[o : o + n], len(blob), {"c": ["x"]}) == {"c": None}
    deep = bytes([0x1C]) * 5000  # nested structs, deeper than the recursion limit
    blob = b"PAR1" + deep + struct.pack("<I", len(deep)) + b"PAR1"
    assert _proofs(lambda o, n: blob[o : o + n], len(blob), {"c": ["x"]}) == {"c": None}
    read, size, data = _write(tmp_path, "f.parquet", _mixed(), compression="gzip")
    n = struct.unpack("<I", data[-8:-4])[0]
    for pos in range(size - 8 - n, size - 8, 7):  # flips all over the footer: no exception escapes
        blob = data[:pos] + bytes([data[pos] ^ 0xA5]) + data[pos + 1 :]
        got = _proofs(lambda o, k, b=blob: b[o : o + k], len(blob), {"c": ["customer-001"]})
        assert set(got) == {"c"}


def test_gzip_and_crc_helpers():
    body = b"\x03\x00\x00\x00abc"
    gz = zlib.compressobj(wbits=31)
    packed = gz.compress(body) + gz.flush()
    assert pm.decompress(2, packed, len(body)) == body
    assert pm.decompress(2, packed[:-3], len(body)) is None  # truncated stream
    assert pm.decompress(0, body, len(body) + 1) is None  # size disagrees with the header
    assert pm.decompress(5, packed, len(body)) is None  # Hadoop-framed LZ4: not read
    assert pm.plain_values(pm.BYTE_ARRAY, body, 1) == {b"abc"}
    assert pm.plain_values(pm.BYTE_ARRAY, body, 2) is None and pm.plain_values(pm.BYTE_ARRAY, body + b"x", 1) is None
    assert pm.plain_values(pm.INT32, b"\x01\x00\x00\x00", 1) == {b"\x01\x00\x00\x00"}
    assert pm.plain_values(pm.INT64, b"\x01\x00\x00\x00", 1) is None


def test_prune_files_counts_dictionary_and_bloom_separately():
    f = {"path": "f", "metrics": {"a": {"lower": 1, "upper": 5}, "b": {"lower": 100, "upper": 200}}}
    res = ep.prune_files([f], {"a": [3], "b": [150]}, {}, lambda x: {"a": "bloom", "b": "dictionary"})
    assert (res["pruned_bloom"], res["pruned_dictionary"], res["raw_read"]) == (0, 1, 0)
    res = ep.prune_files([f], {"a": [3], "b": [150]}, {}, lambda x: {"a": "bloom", "b": True})
    assert (res["pruned_bloom"], res["pruned_dictionary"], res["raw_read"]) == (1, 0, 0)
    # b excluded by its bounds: its dictionary proof is not what pruned the file
    res = ep.prune_files([f], {"a": [3], "b": [250]}, {}, lambda x: {"a": "bloom", "b": "dictionary"})
    assert (res["pruned_bloom"], res["pruned_dictionary"]) == (1, 0)
    res = ep.prune_files([f], {"a": [3], "b": [150]}, {}, lambda x: {"a": "dictionary", "b": None})
    assert (res["pruned_dictionary"], res["raw_read"], res["candidates"]) == (0, 1, ["f"])
    assert ep.prune_files([f], {"a": [9]}, {})["pruned_dictionary"] == 0


def test_bloom_and_dictionary_from_one_file(tmp_path):
    # a bloom filter proves most absent keys; the dictionary settles the bloom's false positives
    values = [f"k{i}" for i in range(200)]
    read, size, _ = _write(
        tmp_path, "both.parquet", {"c": (pa.string(), values, 1)}, bloom_filter_options={"c": {"ndv": 200, "fpp": 0.5}}
    )
    kinds = {_proofs(read, size, {"c": [f"x{j}"]})["c"] for j in range(200)}
    assert kinds == {"bloom", "dictionary"}  # fpp 0.5: both sources used, never None
    assert ep.bloom_excludes(read, size, {"c": ep.key_hashes(["k7"])}) == {"c": False}
    assert all(_proofs(read, size, {"c": [v]}) == {"c": None} for v in values)
