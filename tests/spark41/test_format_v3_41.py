"""Format version 3 on Spark 4.1 and Iceberg 1.12: the lifecycle of ``tests/support/format_v3.py``.

The same flow and checks as the Spark 3.5 module (``tests/spark/test_format_v3_spark.py``), every job on
the module's Spark 4.1 Connect server with the task process as its client: upgrade to v3, write-audit-
publish with a deletion vector (the ref moves through the ``ref_changes`` job), one maintenance plan,
the logical erasure writing deletion vectors, the purge rewriting the data files, time travel and a
byte scan of every file under the table's location, each state read back through pyiceberg.
"""

from __future__ import annotations

import pytest

from tests.support import format_v3 as flow

pytestmark = [pytest.mark.spark, pytest.mark.connect, pytest.mark.spark41, pytest.mark.usefixtures("spark_default41")]


@pytest.fixture(scope="module")
def v3(module_lake, spark_default41):
    with flow.upgraded_table(module_lake) as hook:
        yield hook


@pytest.fixture(scope="module")
def published(v3):
    return flow.publish(v3)


def test_write_audit_publish_on_a_v3_table(v3, published):
    flow.check_published(v3, published)
    engine = v3.load_table(flow.TABLE).current_snapshot().summary
    assert engine["engine-version"].startswith("4.1.") and engine["iceberg-version"].startswith("Apache Iceberg 1.12.")


@pytest.fixture(scope="module")
def maintained(published):
    return flow.maintain()


def test_maintenance_compacts_away_the_deletion_vectors(v3, maintained):
    flow.check_maintained(v3, maintained)


@pytest.fixture(scope="module")
def erased(v3, maintained):
    return flow.erase(v3)


def test_logical_erasure_writes_deletion_vectors(erased):
    flow.check_logical_erasure(erased)


def test_purge_leaves_no_subject_byte_and_no_snapshot_that_held_one(v3, erased):
    flow.check_purged(v3, erased)
