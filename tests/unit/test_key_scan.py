"""The byte scan the erasure tests use (``tests/support/key_scan.py``) finds a value wherever a table
keeps it: in a Parquet data file and as a column bound inside a compressed Avro manifest."""

from __future__ import annotations

from pathlib import Path

from tests.support.key_scan import AVRO_MAGIC, avro_contents, files_holding, scanned_files

KEY = "scan-me-person-0042@example.org"


def test_the_scan_finds_a_value_in_data_files_and_in_compressed_manifest_bounds(lake):
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    schema = Schema(NestedField(1, "k", StringType(), required=False))
    tbl = lake.catalog.create_table("db.scanned", schema, properties={"write.metadata.metrics.default": "full"})
    tbl.append(pa.table({"k": pa.array([KEY, "someone-else"])}))
    root = Path(tbl.location().removeprefix("file://"))
    kinds = scanned_files(root)
    assert kinds.get("parquet") and kinds.get("avro") and kinds.get("json")
    found = files_holding(root, [KEY, "never-written"])
    assert list(found) == [KEY]
    holders = found[KEY]
    assert any(p.endswith(".parquet") for p in holders)
    manifests = [p for p in holders if p.endswith(".avro")]
    assert manifests, holders  # the full bound of column k, in a manifest
    raw = (root / manifests[0]).read_bytes()
    assert raw.startswith(AVRO_MAGIC) and b"deflate" in raw
    assert KEY.encode() not in raw  # compressed: only the decompressed blocks show it
    assert any(KEY.encode() in block for block in avro_contents(raw))
