"""A format-version 3 table (deletion vectors) through the whole governed lifecycle, with real Spark 3.5.

The flow and its checks are ``tests/support/format_v3.py`` (the Spark 4.1 tier runs the same flow on
Iceberg 1.12 in ``tests/spark41/test_format_v3_41.py``): upgrade to v3 by a Spark job, write-audit-publish
with a deletion vector, one maintenance plan, the logical erasure writing deletion vectors, the purge,
time travel and a byte scan of every file under the table's location.
"""

from __future__ import annotations

import pytest

from tests.support import format_v3 as flow

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]


@pytest.fixture(scope="module")
def v3(module_lake):
    with flow.upgraded_table(module_lake) as hook:
        yield hook


@pytest.fixture(scope="module")
def published(v3):
    return flow.publish(v3)


def test_write_audit_publish_on_a_v3_table(v3, published):
    flow.check_published(v3, published)


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
