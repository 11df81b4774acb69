"""Spark reads what IcebergAlterTableOperator wrote through pyiceberg (one Spark job).

The sort order (``WRITE ORDERED BY``), a column rename and a new partition field are set
through pyiceberg; then sort compaction (``IcebergRewriteDataFilesOperator(strategy="sort")``
without an explicit ``sort_order``) runs in Spark with the table's order. Every assertion reads
the catalog or the Parquet files, never the job's own claims.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from airflow_iceberg_provider.operators.maintenance import IcebergRewriteDataFilesOperator
from airflow_iceberg_provider.operators.table_changes import IcebergAlterTableOperator
from tests.support.lake import append_batches, create_orders_table, fake_context

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]


def fingerprint(hook, table: str) -> tuple[int, int, float]:
    data = hook.load_table(table).scan().to_arrow()
    return data.num_rows, pc.sum(data["order_id"]).as_py(), round(pc.sum(data["amount"]).as_py(), 6)


@pytest.fixture(scope="module")
def sorted_compaction(module_lake):
    """db.evolved: 4 unsorted appends, then changed by the operator, then sort-compacted by Spark."""
    hook = module_lake
    create_orders_table(hook, "db.evolved", partition_by=())
    append_batches(hook, "db.evolved", 4, rows=50)  # amount ascending inside each file
    rows = fingerprint(hook, "db.evolved")
    changed = IcebergAlterTableOperator(
        task_id="alter",
        table="db.evolved",
        rename_columns={"region": "area"},
        add_partition_fields=["bucket(2, customer_id)"],
        sort_order="WRITE ORDERED BY amount DESC, order_id",
    ).execute(fake_context())
    out = IcebergRewriteDataFilesOperator(
        task_id="sort", table="db.evolved", strategy="sort", options={"rewrite-all": "true"}
    ).execute(fake_context())
    return hook, rows, changed, out


def test_spark_sort_compacts_with_the_order_set_through_pyiceberg(sorted_compaction):
    hook, rows, changed, out = sorted_compaction
    assert changed["outcome"] == "changed" and len(changed["changes"]) == 3
    assert out["strategy"] == "sort" and out["sort_order"] is None  # the table's own order
    assert out["rewritten_data_files"] == 4
    assert fingerprint(hook, "db.evolved") == rows
    tbl = hook.load_table("db.evolved")
    files = [t.file for t in tbl.scan().plan_files()]
    assert files and {f.spec_id for f in files} == {tbl.spec().spec_id}  # written under the new spec
    # (Iceberg 1.10's sort rewrite leaves the files' sort_order_id at 0; the rows themselves are the proof)
    for f in files:
        data = pq.read_table(Path(urlparse(f.file_path).path))
        assert "area" in data.column_names and "region" not in data.column_names  # Spark used the new name
        keys = list(zip((-a for a in data["amount"].to_pylist()), data["order_id"].to_pylist(), strict=True))
        assert keys == sorted(keys), f.file_path


def test_spark_compaction_after_the_change_leaves_the_change_in_place(sorted_compaction):
    hook, *_ = sorted_compaction
    again = IcebergAlterTableOperator(
        task_id="alter",
        table="db.evolved",
        rename_columns={"region": "area"},
        add_partition_fields=["bucket[2](customer_id)"],
        sort_order=["amount DESC NULLS LAST", "order_id ASC NULLS FIRST"],
    ).execute(fake_context())
    assert again["outcome"] == "noop"
