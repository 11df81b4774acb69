"""The subject index's pure parts: keyed filters, bit-sliced probing, Puffin encoding, lineage plans."""

from __future__ import annotations

import struct

import pytest

from airflow_iceberg_provider.core import subject_index as si
from airflow_iceberg_provider.core.erasure_lifecycle import KeyedHasher, hmac_digest, hmac_hex

SALT = b"index-salt-0123456789"


def _index(files: dict[str, list[object]], fpp: float = 0.01) -> si.ColumnIndex:
    idx = si.ColumnIndex(column="customer_id", field_id=3, fpp=fpp, key_id=si.key_id(SALT))
    idx.add(files, KeyedHasher(SALT))
    return idx


def _digests(keys: list[object], salt: bytes = SALT) -> list[bytes]:
    return [KeyedHasher(salt).digest(k) for k in keys]


def test_keyed_hash_is_the_evidence_hmac() -> None:
    assert KeyedHasher(SALT).digest("cust-1") == hmac_digest(SALT, "cust-1")
    assert KeyedHasher(SALT).digest(42).hex() == hmac_hex(SALT, "42")


def test_no_false_negatives_and_exact_files() -> None:
    files = {f"/wh/f{i}.parquet": [f"cust-{i}-{j}" for j in range(50)] for i in range(300)}
    idx = _index(files)
    for i in (0, 17, 299):
        assert f"/wh/f{i}.parquet" in idx.candidates(_digests([f"cust-{i}-7"]))
    got = idx.candidates(_digests(["cust-5-1", "cust-200-49"]))
    assert {"/wh/f5.parquet", "/wh/f200.parquet"} <= got


def test_false_positive_rate_holds() -> None:
    # 0.3 per key and file of 2**20 values: 2**-20 bits kept... a file of 1,000 values is named
    # falsely with probability <= 1000 * 2**-bits
    files = {f"/wh/f{i}.parquet": [f"v-{i}-{j}" for j in range(1000)] for i in range(100)}
    idx = _index(files, fpp=0.3)
    assert idx.bits == 22
    absent = _digests([f"absent-{n}" for n in range(300)])
    hits = sum(len(idx.candidates([d])) for d in absent)
    rate = 1000 / 2**idx.bits
    assert hits <= 2 * rate * 300 * 100 + 5
    assert si.fingerprint_bits(1e-6) == 40 and si.fingerprint_bits(1e-3) == 30


def test_without_the_salt_nothing_matches() -> None:
    idx = _index({"/wh/a.parquet": ["alice@example.com"]})
    assert idx.candidates(_digests(["alice@example.com"])) == {"/wh/a.parquet"}
    assert idx.candidates(_digests(["alice@example.com"], salt=b"another-salt-0123456")) == set()


def test_ints_and_nulls() -> None:
    idx = _index({"/wh/a.parquet": [1, 2, None], "/wh/b.parquet": [None], "/wh/c.parquet": []})
    assert idx.candidates(_digests([2])) == {"/wh/a.parquet"}
    assert idx.counts == [2, 0, 0]


def test_retain_clears_bits_of_dropped_files() -> None:
    idx = _index({"/wh/a.parquet": ["x"], "/wh/b.parquet": ["x", "y"]})
    assert idx.retain({"/wh/b.parquet"}) == 1
    assert idx.candidates(_digests(["x"])) == {"/wh/b.parquet"}
    assert idx.paths[0] == "" and idx.tombstones() == 1
    assert len(idx.entries) == 2 and all(e & ((1 << si.FILE_BITS) - 1) == 1 for e in idx.entries)


def test_encode_decode_round_trip_and_damage() -> None:
    idx = _index({f"/wh/f{i}.parquet": [f"k{i}", f"z{i}"] for i in range(20)})
    back = si.decode_column(si.encode_column(idx, KeyedHasher(SALT)), KeyedHasher(SALT))
    assert back.paths == idx.paths and back.candidates(_digests(["k7"])) == {"/wh/f7.parquet"}
    payload = si.encode_column(idx, KeyedHasher(SALT))
    with pytest.raises(si.SubjectIndexError, match="not sealed"):
        si.decode_column(payload, KeyedHasher(b"another-salt-0123456"))
    import zlib

    raw = bytearray(zlib.decompress(payload[4:]))
    raw[-3] ^= 0xFF  # one entry changed: a file would be hidden
    forged = payload[:4] + zlib.compress(bytes(raw))
    for bad in (b"XXXX" + payload[4:], payload[:-5], payload[:4] + b"garbage", forged):
        with pytest.raises(si.SubjectIndexError):
            si.decode_column(bad, KeyedHasher(SALT))


def test_puffin_layout() -> None:
    idx = _index({"/wh/a.parquet": ["x"]})
    pf = si.encode_puffin([si.column_blob(idx, snapshot_id=7, sequence_number=2, hasher=KeyedHasher(SALT))])
    data = pf.data
    assert data[:4] == b"PFA1" and data[-4:] == b"PFA1"
    (n,) = struct.unpack("<i", data[-12:-8])
    assert pf.footer_size == n + 16 and data[-pf.footer_size : -pf.footer_size + 4] == b"PFA1"
    blobs = si.read_puffin(data)
    assert blobs[0].type == si.BLOB_TYPE and blobs[0].snapshot_id == 7 and blobs[0].fields == [3]
    assert pf.blobs[0]["offset"] == 4
    got = si.index_blobs(blobs, {"customer_id": 3}, si.key_id(SALT), KeyedHasher(SALT))
    assert got["customer_id"].covered() == {"/wh/a.parquet"}
    assert si.index_blobs(blobs, {"customer_id": 3}, si.key_id(b"other-salt-0123456789"), KeyedHasher(SALT)) == {}
    assert si.index_blobs(blobs, {"customer_id": 4}, si.key_id(SALT), KeyedHasher(SALT)) == {}
    foreign = si.Blob(type="apache-datasketches-theta-v1", fields=[3], snapshot_id=7, sequence_number=2, data=b"\1")
    mixed = si.read_puffin(si.encode_puffin([foreign, blobs[0]]).data)
    assert [b.type for b in mixed] == ["apache-datasketches-theta-v1", si.BLOB_TYPE]
    for bad in (data[:-1], b"PFA1", data[:10] + data[-4:]):
        with pytest.raises(si.SubjectIndexError):
            si.read_puffin(bad)


def test_plan_probe_opens_named_and_unindexed_only() -> None:
    idx = _index({f"/wh/f{i}.parquet": [f"k{i}"] for i in range(100)})
    live = {f"/wh/f{i}.parquet" for i in range(100)} | {"/wh/outside.parquet"}
    plan = si.plan_probe(live, {"customer_id": idx}, {"customer_id": _digests(["k3", "k50"])})
    assert {"/wh/f3.parquet", "/wh/f50.parquet"} <= plan.named
    assert plan.unindexed == {"/wh/outside.parquet"}
    assert len(plan.named) <= 4  # at the configured rate, 2 keys over 100 files
    assert plan.excluded == live - plan.to_open()
    # a second subject column without an index: nothing is excluded
    plan2 = si.plan_probe(live, {"customer_id": idx}, {"customer_id": _digests(["k3"]), "email": _digests(["e"])})
    assert plan2.excluded == set() and plan2.to_open() == live


def test_stale_columns() -> None:
    idx = _index({f"/wh/f{i}.parquet": [f"k{i}"] for i in range(10)})
    live = {f"/wh/f{i}.parquet" for i in range(10)}
    assert si.stale_columns({"c": idx}, ["c"], live, 0.01) == []
    assert si.stale_columns({"c": idx}, ["c", "d"], live, 0.01) == ["d"]
    assert si.stale_columns({"c": idx}, ["c"], live, 0.001) == ["c"]
    assert si.stale_columns({"c": idx}, ["c"], {f"/wh/g{i}" for i in range(30)}, 0.01) == ["c"]


def test_settings_refuse_bad_values() -> None:
    assert si.index_settings({}) == (False, si.DEFAULT_FPP)
    assert si.index_settings({si.INDEX_PROPERTY: "true", si.FPP_PROPERTY: "0.001"}) == (True, 0.001)
    with pytest.raises(ValueError, match="'true' or 'false'"):
        si.index_settings({si.INDEX_PROPERTY: "yes"})
    with pytest.raises(ValueError, match=si.FPP_PROPERTY):
        si.index_settings({si.FPP_PROPERTY: "2"})


def test_erasure_ready_properties_with_the_index() -> None:
    from airflow_iceberg_provider.exceptions import IcebergValidationError
    from airflow_iceberg_provider.rules.erasure import bloom_filter_warnings, erasure_ready_properties

    props = erasure_ready_properties("customer_id", subject_index=True, parquet_bloom_filters=False)
    assert props[si.INDEX_PROPERTY] == "true" and si.index_settings(props) == (True, si.DEFAULT_FPP)
    assert props["write.parquet.bloom-filter-enabled.column.customer_id"] == "false"
    assert props["write.metadata.metrics.column.customer_id"] == "none"
    assert bloom_filter_warnings("db.t", ["customer_id"], props) == []
    assert si.INDEX_PROPERTY not in erasure_ready_properties("customer_id")
    with pytest.raises(IcebergValidationError, match="subject_index=True"):
        erasure_ready_properties("customer_id", parquet_bloom_filters=False)
    with pytest.raises(IcebergValidationError, match="index_fpp=0.9"):
        erasure_ready_properties("customer_id", subject_index=True, index_fpp=0.9)


def test_malformed_index_property_is_a_table_problem() -> None:
    from airflow_iceberg_provider.rules.erasure import table_problems

    common = {
        "table": "db.t",
        "columns": ["customer_id"],
        "schema_fields": {"customer_id": "string"},
        "partition_fields": [],
        "format_version": 2,
        "equality_delete_files": 0,
    }
    assert table_problems(properties={si.INDEX_PROPERTY: "true"}, **common) == []
    (problem,) = table_problems(properties={si.INDEX_PROPERTY: "on"}, **common)
    assert si.INDEX_PROPERTY in problem and "'true' or 'false'" in problem


def test_index_lag_over_lineage() -> None:
    # 1 <- 2 <- 3 <- 4 (head); 5 is on another branch
    snaps = {1: (None, 4), 2: (1, 2), 3: (2, None), 4: (3, 5), 5: (1, 9)}
    assert si.index_lag(snaps, 4, [4]) == 0
    assert si.index_lag(snaps, 4, [2]) == 5 + 1  # snapshot 3 has no count: counted as one file
    assert si.index_lag(snaps, 4, [5]) is None  # an index off the lineage: missing for this head
    assert si.index_lag(snaps, 4, []) is None
    assert si.index_lag(snaps, None, []) == 0


def test_subject_index_lag_from_a_loaded_table(tmp_path) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from airflow_iceberg_provider.exceptions import IcebergValidationError
    from airflow_iceberg_provider.rules.erasure import subject_index_lag

    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    cat.create_namespace("db")
    data = pa.table({"customer_id": pa.array(["a", "b"], pa.string())})
    tbl = cat.create_table("db.t", schema=data.schema)
    tbl.append(data)
    assert subject_index_lag(cat.load_table("db.t")) == 0  # index off: never planned
    with cat.load_table("db.t").transaction() as tx:
        tx.set_properties({si.INDEX_PROPERTY: "true"})
    assert subject_index_lag(cat.load_table("db.t")) is None  # on, never built
    with cat.load_table("db.t").transaction() as tx:
        tx.set_properties({si.INDEX_PROPERTY: "maybe"})
    with pytest.raises(IcebergValidationError, match="'true' or 'false'"):
        subject_index_lag(cat.load_table("db.t"))


def test_subject_index_lag_of_a_branch(tmp_path) -> None:
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog

    from airflow_iceberg_provider.rules.erasure import subject_index_lag

    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    cat.create_namespace("db")
    data = pa.table({"customer_id": pa.array(["a", "b"], pa.string())})
    tbl = cat.create_table("db.t", schema=data.schema, properties={si.INDEX_PROPERTY: "true"})
    tbl.append(data)
    tbl = cat.load_table("db.t")
    tbl.manage_snapshots().create_branch(tbl.current_snapshot().snapshot_id, "wap").commit()
    cat.load_table("db.t").append(data, branch="wap")
    tbl = cat.load_table("db.t")
    assert subject_index_lag(tbl, "wap") is None and subject_index_lag(tbl, "absent") == 0


UPKEEP = {"salt_conn_id": "erasure_salt", "table": "db.t"}


def test_index_upkeep_only_for_tables_that_declare_the_index() -> None:
    from airflow_iceberg_provider.rules.erasure import subject_index_upkeep

    assert subject_index_upkeep({}, "s" * 16, None, **UPKEEP) == (None, None)
    assert subject_index_upkeep({si.INDEX_PROPERTY: "false"}, None, "missing", **UPKEEP) == (None, None)
    assert subject_index_upkeep({si.INDEX_PROPERTY: "true"}, "s" * 16, None, **UPKEEP) == ({"salt": "s" * 16}, None)


def test_index_upkeep_without_a_salt_warns_and_lets_the_job_run() -> None:
    from airflow_iceberg_provider.rules.erasure import subject_index_upkeep

    entry, warning = subject_index_upkeep({si.INDEX_PROPERTY: "true"}, None, "the connection does not exist", **UPKEEP)
    assert entry is not None and entry["salt"] is None and "'erasure_salt'" in entry["reason"]
    assert warning is not None and "db.t" in warning and "connection 'erasure_salt'" in warning
    assert si.INDEX_PROPERTY in warning and "lagging" in warning and "the connection does not exist" in warning


def test_index_upkeep_with_a_malformed_flag_warns_and_skips() -> None:
    from airflow_iceberg_provider.rules.erasure import subject_index_upkeep

    entry, warning = subject_index_upkeep({si.INDEX_PROPERTY: "yes"}, "s" * 16, None, **UPKEEP)
    assert entry is None and warning is not None and "'true' or 'false'" in warning and "db.t" in warning


def test_a_delete_only_commit_adds_no_lag(tmp_path) -> None:
    """A summary leaves out ``added-data-files`` when it is zero: a commit that only removes files
    (an erasure's delete) does not make the index lag."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.table.statistics import StatisticsFile

    from airflow_iceberg_provider.rules.erasure import subject_index_lag

    cat = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}")
    cat.create_namespace("db")
    data = pa.table({"customer_id": pa.array(["a", "b"], pa.string())})
    tbl = cat.create_table("db.t", schema=data.schema, properties={si.INDEX_PROPERTY: "true"})
    tbl.append(data)
    tbl.append(pa.table({"customer_id": pa.array(["c"], pa.string())}))
    tbl = cat.load_table("db.t")
    head = tbl.current_snapshot().snapshot_id
    stats = StatisticsFile(
        snapshot_id=head,
        statistics_path=f"file://{tmp_path}/{head}-x{si.FILE_SUFFIX}",
        file_size_in_bytes=1,
        file_footer_size_in_bytes=1,
        blob_metadata=[],
    )
    with tbl.update_statistics() as update:
        update.set_statistics(stats)
    assert subject_index_lag(cat.load_table("db.t")) == 0
    cat.load_table("db.t").delete("customer_id == 'c'")  # drops the second file whole
    tbl = cat.load_table("db.t")
    assert tbl.current_snapshot().summary.additional_properties.get("added-data-files") is None
    assert subject_index_lag(tbl) == 0
    tbl.append(data)
    assert subject_index_lag(cat.load_table("db.t")) == 1
