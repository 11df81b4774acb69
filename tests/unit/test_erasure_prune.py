"""Candidate-file pruning soundness (#13), pure: bounds, Parquet bloom filters (files written by
pyarrow, an independent writer), adversarial layouts, and the snapshot expiry selection."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_iceberg_provider.spark_jobs import parquet_meta as pm
from airflow_iceberg_provider.spark_jobs.erasure import prune as ep


@pytest.mark.parametrize(
    ("data", "expected"),
    [(b"", 0xEF46DB3751D8E999), (b"a", 0xD24EC4F1A98C6E5B), (b"abc", 0x44BC2CF5AD770999)],
)
def test_xxhash64_reference_vectors(data, expected):
    assert pm.xxhash64(data) == expected
    assert pm.xxhash64(b"Nobody inspects the spammish repetition") == 0xFBCEA83C8A378BF1


def _file(tmp_path, name, bloom=True, rows=None, row_group_size=300):
    rows = rows or [f"k{i}" for i in range(1000)]
    t = pa.table({"c": pa.array(rows, pa.string()), "n": pa.array(range(len(rows)), pa.int64())})
    path = tmp_path / name
    opts = {"bloom_filter_options": {"c": {"ndv": len(rows), "fpp": 0.01}, "n": True}} if bloom else {}
    pq.write_table(t, path, row_group_size=row_group_size, **opts)
    data = path.read_bytes()
    return (lambda o, n: data[o : o + n]), len(data)


def test_bloom_filter_never_excludes_a_present_key(tmp_path):
    read, size = _file(tmp_path, "a.parquet")
    for i in range(0, 1000, 7):  # every row group, first and last values included below
        got = ep.bloom_excludes(read, size, {"c": ep.key_hashes([f"k{i}"]), "n": ep.key_hashes([i])})
        assert got == {"c": False, "n": False}
    for i in (0, 299, 300, 599, 600, 999):
        assert ep.bloom_excludes(read, size, {"c": ep.key_hashes([f"k{i}"])}) == {"c": False}
    absent = sum(ep.bloom_excludes(read, size, {"c": ep.key_hashes([f"x{j}"])})["c"] for j in range(300))
    assert absent > 250  # and it does prove absence for most absent keys (fpp 1 %)


def test_no_bloom_filter_or_unreadable_footer_proves_nothing(tmp_path):
    read, size = _file(tmp_path, "plain.parquet", bloom=False)
    assert ep.bloom_excludes(read, size, {"c": ep.key_hashes(["zzz"])}) == {"c": False}
    assert ep.bloom_excludes(lambda o, n: b"\0" * n, 100, {"c": ep.key_hashes(["zzz"])}) == {"c": False}
    garbage = b"x" * 50 + (40).to_bytes(4, "little") + b"PAR1"
    assert ep.bloom_excludes(lambda o, n: garbage[o : o + n], len(garbage), {"c": ep.key_hashes(["z"])}) == {"c": False}


def test_one_row_group_without_filter_keeps_the_file(tmp_path):
    # a file whose second row group lacks a filter for c (pyarrow: filters per column; simulate with
    # a column that is absent from the filters -> no proof for that column)
    read, size = _file(tmp_path, "b.parquet")
    assert ep.bloom_excludes(read, size, {"missing_col": ep.key_hashes(["zzz"])}) == {"missing_col": False}


def test_key_type_mismatch_is_not_a_proof(tmp_path):
    read, size = _file(tmp_path, "c.parquet")
    # a string key cannot be hashed as INT64: the file cannot hold it, but no hash means "absent"
    assert ep.key_hashes(["abc"])[pm.INT64] == []
    assert pm.plain_bytes(1 << 40, pm.INT32) is None and pm.plain_bytes(True, pm.INT64) is None


def _props(mode="truncate(16)"):
    return {"write.metadata.metrics.default": mode}


def _f(path, lower, upper, vc=10, nc=0):
    return {"path": path, "metrics": {"c": {"lower": lower, "upper": upper, "value_count": vc, "null_count": nc}}}


def test_bounds_pruning_is_sound_under_adversarial_layouts():
    long_subject = "person-000@erasure.example"  # longer than the 16-character truncation
    files = [
        _f("exact-out", "a", "b"),  # exact bounds, subject outside: pruned
        _f("equal-lower", "person-1", "zzz"),  # subject equal to a bound: kept
        _f("equal-upper", "a", "person-1"),
        _f("truncated", long_subject[:16], "person-000@erasy"),  # 16 chars: may be truncated -> kept
        _f("no-bounds", None, None),
        _f("null-only", None, None, vc=10, nc=10),  # every value null: cannot hold a key -> pruned
        _f("null-unknown", None, None, vc=None, nc=None),
        {"path": "no-metrics", "metrics": {}},
    ]
    keys = {"c": ["person-1", long_subject]}
    res = ep.prune_files(files, keys, _props())
    assert sorted(res["candidates"]) == sorted(
        ["equal-lower", "equal-upper", "truncated", "no-bounds", "null-unknown", "no-metrics"]
    )
    assert res["considered"] == 8 and res["pruned_bounds"] == 2 and res["pruned_bloom"] == 0
    assert res["raw_read"] == 6
    # 'full' metrics: a long bound is exact; 'counts'/'none': bounds unusable
    assert ep.prune_files([_f("x", "a" * 30, "b" * 30)], {"c": ["c"]}, _props("full"))["pruned_bounds"] == 1
    assert ep.prune_files([_f("x", "a", "b")], {"c": ["c"]}, _props("counts"))["raw_read"] == 1
    # numbers are exact; a key equal to a bound is kept; a type mismatch proves nothing
    nums = [_f("n1", 10, 20), _f("n2", 21, 30), _f("n3", "10", "20")]
    res = ep.prune_files(nums, {"c": [20]}, _props())
    assert res["candidates"] == ["n1", "n3"]


def test_multi_column_files_pruned_only_when_every_column_excludes():
    f = {
        "path": "f",
        "metrics": {
            "a": {"lower": 1, "upper": 5, "value_count": 3, "null_count": 0},
            "b": {"lower": 100, "upper": 200, "value_count": 3, "null_count": 0},
        },
    }
    assert ep.prune_files([f], {"a": [50], "b": [150]}, {})["raw_read"] == 1  # b may hold it
    assert ep.prune_files([f], {"a": [50], "b": [250]}, {})["pruned_bounds"] == 1
    calls = []
    res = ep.prune_files([f], {"a": [3], "b": [250]}, {}, lambda x: calls.append(x) or {"a": True})
    assert res["pruned_bloom"] == 1 and calls == [f]  # bounds kept it for a, the filter excluded a
    assert ep.prune_files([f], {"a": [3], "b": [150]}, {}, lambda x: {"a": True})["raw_read"] == 1


def test_expiry_keeps_history_without_subjects_30_days():
    # day d's snapshot lists manifests m1..md; subjects first in day 20's files
    snaps = [{"snapshot_id": d, "timestamp_ms": d * 1000} for d in range(1, 31)]
    snap_manifests = {d: [f"m{i}" for i in range(1, d + 1)] for d in range(1, 31)}
    manifest_files = {f"m{i}": {f"f{i}"} for i in range(1, 31)}
    subject_files = {f"f{i}" for i in range(20, 31)}
    reaching = ep.snapshots_reaching(snap_manifests, manifest_files, subject_files)
    assert reaching == set(range(20, 31))
    plan = ep.expiry_plan(snaps, reaching, {"main": 31, "audit": 25})
    assert plan["keep"] == list(range(1, 20)) + [25] and plan["heads_reaching"] == ["audit"]
    assert plan["expire"] == [d for d in range(20, 31) if d != 25] and plan["oldest_kept_ms"] == 1000
    # a manifest known to carry a DELETED entry of a subject file exposes its snapshots too
    assert 3 in ep.snapshots_reaching(snap_manifests, manifest_files, subject_files, {"m3"})
    sql = ep.expire_ids_sql("lakehouse", "db.t", [5, 6])
    assert "snapshot_ids => array(5, 6)" in sql
    with pytest.raises(ValueError):
        ep.expire_ids_sql("lake`x", "db.t", [1])


def test_metrics_mode_parsing():
    assert ep.metrics_mode({}, "c") == ("truncate", 16)
    assert ep.metrics_mode({"write.metadata.metrics.column.c": "truncate(8)"}, "c") == ("truncate", 8)
    assert ep.metrics_mode({"write.metadata.metrics.default": "none"}, "c") == ("none", None)
    assert ep.metrics_mode({"write.metadata.metrics.default": "weird"}, "c") == ("unknown", None)
    assert not ep.bound_is_exact("a" * 8, "truncate", 8) and ep.bound_is_exact("a" * 7, "truncate", 8)


def test_batched_bloom_check_answers_exactly_as_the_per_key_check():
    """Many keys: the bitset is read once and checked vectorized; the answer is the per-key one,
    on random filters of every density (a false answer would drop a subject's file)."""
    import random

    rng = random.Random(7)
    for _ in range(300):
        blocks = rng.choice([1, 2, 7, 64, 513])
        density = rng.choice([0.02, 0.3, 0.9, 1.0])
        bitset = bytes(sum(1 << b for b in range(8) if rng.random() < density) for _ in range(blocks * 32))
        hashes = pm.KeyHashes(rng.getrandbits(64) for _ in range(rng.choice([9, 50, 1000])))
        reads = []

        def read(o, n, data=bitset, reads=reads):
            reads.append(n)
            return data[o : o + n]

        expected = any(pm.sbbf_might_contain(bitset, h) for h in hashes)
        assert pm.sbbf_might_contain_any(read, 0, len(bitset), hashes) is expected
        assert reads == [len(bitset)]  # one read of the whole bitset


def test_batched_bloom_check_proves_absence_in_a_real_file_and_a_short_read_proves_nothing(tmp_path):
    read, size = _file(tmp_path, "many.parquet", rows=[f"k{i}" for i in range(300)], row_group_size=300)
    present = ep.key_probes([f"x{j}" for j in range(40)] + ["k17"])
    absent = ep.key_probes([f"absent-{j}" for j in range(40)])
    assert ep.file_proofs(read, size, {"c": present}) == {"c": None}
    proof = ep.file_proofs(read, size, {"c": absent})["c"]
    assert proof in ("bloom", "dictionary")  # a bloom false positive is settled by the dictionary

    def short(o, n):
        return read(o, n)[: max(0, n - 1)] if n > 64 else read(o, n)

    assert ep.file_proofs(short, size, {"c": absent}) == {"c": None}
