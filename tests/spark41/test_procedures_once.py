"""Each stored procedure the provider calls runs exactly once over Spark Connect on Spark 4.1.

SPARK-51273 reports procedures running twice over Spark Connect on Spark 4. For each ``CALL`` (the
provider's own SQL where it builds one), one call from a Connect session must run the procedure's
``call`` exactly once on the server (counted from the server's log, :meth:`Server41.calls`), return
the result of a first run (a second run reports nothing left to do), and leave the table in the state
of one run: one cherry-picked snapshot, not two; one commit per rollback and fast-forward; one
rewrite snapshot; the expired files deleted once; the orphan listed once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_iceberg_provider.core.connect_session import configure_session
from airflow_iceberg_provider.core.ref_guard import RefState
from airflow_iceberg_provider.spark_jobs import maintenance_sql
from airflow_iceberg_provider.spark_jobs.wap_cherrypick import cherrypick_sql
from tests.spark41.conftest import TOKEN, Server41
from tests.support.lake import create_orders_table, orders_batch

pytestmark = [pytest.mark.spark, pytest.mark.connect, pytest.mark.spark41]


@pytest.fixture(scope="module")
def session(module_lake: Any, server41: Server41) -> Iterator[Any]:
    """A Connect session of this process on the module's server, with the lake's catalog set."""
    from pyspark.sql.connect.session import SparkSession

    spark = SparkSession.builder.remote(f"sc://localhost:{server41.server.port}/;token={TOKEN}").create()
    conf = module_lake.config.spark_conf()
    configure_session(spark, conf.public, conf.secret)
    yield spark
    spark.stop()


def _once(server41: Server41, procedure_class: str, run: Any) -> Any:
    """Run ``run()`` (one CALL); assert the server ran ``procedure_class.call`` exactly once."""
    before = server41.calls(procedure_class)
    result = run()
    time.sleep(1.0)  # the server's log is written as it goes; a second run would follow the first at once
    runs = server41.calls(procedure_class) - before
    assert runs == 1, f"{procedure_class} ran {runs} times for one CALL"
    return result


def _table(hook: Any, name: str, batches: int = 1, **props: str) -> str:
    create_orders_table(hook, f"db.{name}", partition_by=(), properties=props or None)
    for i in range(batches):
        hook.load_table(f"db.{name}").append(orders_batch(i * 10, 10))
    return f"db.{name}"


def test_cherrypick_snapshot_runs_once(module_lake, server41, session):
    hook = module_lake
    table = _table(hook, "cp")
    head = hook.ref_snapshot_id(table)
    hook.set_ref(hook.load_table(table), "b1", head, ref_type="branch")
    hook.load_table(table).append(orders_batch(500, 5), branch="b1")
    picked = hook.ref_snapshot_id(table, "b1")
    hook.load_table(table).append(orders_batch(900, 5))  # main moved: a fast-forward is impossible
    main = hook.ref_snapshot_id(table)
    snapshots = len(hook.list_snapshots(table))
    sql = cherrypick_sql(hook.catalog_name, table, picked, RefState.of("main", "branch", main))
    rows = _once(server41, "CherrypickSnapshotProcedure", lambda: session.sql(sql).collect())
    assert rows[0]["source_snapshot_id"] == picked
    assert len(hook.list_snapshots(table)) == snapshots + 1, "a second cherry-pick added another snapshot"
    assert hook.load_table(table).scan().to_arrow().num_rows == 10 + 5 + 5


def test_rollback_to_snapshot_runs_once(module_lake, server41, session):
    hook = module_lake
    table = _table(hook, "rb", batches=3)
    first = hook.list_snapshots(table)[0].snapshot_id
    sql = f"CALL `{hook.catalog_name}`.system.rollback_to_snapshot(table => '{table}', snapshot_id => {first})"
    rows = _once(server41, "RollbackToSnapshotProcedure", lambda: session.sql(sql).collect())
    assert rows[0]["current_snapshot_id"] == first == hook.ref_snapshot_id(table)
    assert rows[0]["previous_snapshot_id"] != first, "the result of a second run (nothing left to roll back)"
    assert len(hook.load_table(table).metadata.metadata_log) == 3 + 1, "one metadata file per commit: one rollback"


def test_fast_forward_runs_once(module_lake, server41, session):
    hook = module_lake
    table = _table(hook, "ff")
    hook.set_ref(hook.load_table(table), "b2", hook.ref_snapshot_id(table), ref_type="branch")
    hook.load_table(table).append(orders_batch(700, 5), branch="b2")
    target = hook.ref_snapshot_id(table, "b2")
    commits = len(hook.load_table(table).metadata.metadata_log)
    sql = f"CALL `{hook.catalog_name}`.system.fast_forward(table => '{table}', branch => 'main', to => 'b2')"
    rows = _once(server41, "FastForwardBranchProcedure", lambda: session.sql(sql).collect())
    assert rows[0]["updated_ref"] == target == hook.ref_snapshot_id(table)
    assert rows[0]["previous_ref"] != target, "the result of a second run (main already there)"
    assert len(hook.load_table(table).metadata.metadata_log) == commits + 1


def test_rewrite_data_files_runs_once(module_lake, server41, session):
    hook = module_lake
    table = _table(hook, "rw", batches=4)
    snapshots = len(hook.list_snapshots(table))
    sql = maintenance_sql.rewrite_data_files_sql(hook.catalog_name, table, options={"min-input-files": 2})
    rows = _once(server41, "RewriteDataFilesProcedure", lambda: session.sql(sql).collect())
    assert rows[0]["rewritten_data_files_count"] == 4 and rows[0]["added_data_files_count"] == 1
    assert len(hook.list_snapshots(table)) == snapshots + 1, "one replace snapshot"
    assert hook.load_table(table).current_snapshot().summary.operation.value == "replace"


def test_expire_snapshots_runs_once(module_lake, server41, session):
    hook = module_lake
    table = _table(hook, "ex", batches=3)
    hook.load_table(table).overwrite(orders_batch(1000, 10))
    sql = maintenance_sql.expire_snapshots_sql(
        hook.catalog_name, table, older_than_ms=int(time.time() * 1000) + 1000, retain_last=1
    )
    rows = _once(server41, "ExpireSnapshotsProcedure", lambda: session.sql(sql).collect())
    assert rows[0]["deleted_data_files_count"] == 3, rows  # a second run would report 0 and commit again
    assert len(hook.list_snapshots(table)) == 1


def test_remove_orphan_files_runs_once(module_lake, server41, session):
    hook = module_lake
    table = _table(hook, "or")
    location = hook.load_table(table).metadata.location.removeprefix("file://")
    orphan = f"{location}/data/orphan-{time.time_ns()}.parquet"
    with open(orphan, "wb") as fh:
        fh.write(b"not referenced")
    three_days_ago = time.time() - 3 * 86400  # older than Iceberg's 24 h floor, as a real leftover is
    os.utime(orphan, (three_days_ago, three_days_ago))
    sql = maintenance_sql.remove_orphan_files_sql(
        hook.catalog_name, table, older_than_ms=int((time.time() - 2 * 86400) * 1000), dry_run=True
    )
    rows = _once(server41, "RemoveOrphanFilesProcedure", lambda: session.sql(sql).collect())
    assert [r["orphan_file_location"].removeprefix("file:") for r in rows] == [orphan]
