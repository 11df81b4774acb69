"""Faults without Spark: the catalog or storage goes away during a metadata operation.

* the SQLite catalog file is locked (another process holds the write lock) for longer than
  the busy timeout, during a WAP publish, a tag and a rollback;
* the PostgreSQL server (``postgres``) or the REST catalog server (``rest``) is stopped;
* the governance ledger's storage fails right after a publish moved ``main``.

Each must end in a clear, *retryable* error (an ``AirflowException`` that is not an
``AirflowFailException``), with every table's metadata pointer unchanged — and a retry once
the catalog is back must converge to exactly one commit and one ledger row.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_provider.exceptions import IcebergCatalogUnavailableError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator, IcebergRollbackOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from tests.support.lake import append_batches, create_orders_table, fake_context
from tests.support.servers import (
    ServerUnavailable,
    _as_user,
    pg_conn_json,
    rest_conn_json,
    start_postgres,
    start_seaweed,
)
from tests.support.wap import audit_of, commit_to_branch, record_audit

pytestmark = pytest.mark.faults

T = "db.orders"


def prepare(hook: IcebergCatalogHook) -> dict[str, int]:
    """db.orders with two commits on main and an audited WAP branch ``dev`` one append ahead."""
    create_orders_table(hook, T, partition_by=())
    ids = append_batches(hook, T, 2)
    hook.set_ref(T, "dev", ids[-1])
    head = commit_to_branch(hook, T, "dev", 500, 5)
    record_audit(hook, T, "dev", head, event_id="audit-dev")
    hook.governance.table("ledger")
    return {"first": ids[0], "main": ids[-1], "dev": head}


OPERATIONS = {
    "publish": lambda ids: IcebergWapPublishOperator(
        task_id="publish", table=T, branch="dev", audit=audit_of(ids["dev"], "audit-dev"), base_snapshot_id=ids["main"]
    ),
    "tag": lambda ids: IcebergCreateTagOperator(task_id="tag", table=T, tag="eod-1"),
    "rollback": lambda ids: IcebergRollbackOperator(task_id="rollback", table=T, to_snapshot_id=ids["first"]),
}
LEDGER_OPERATION = {"publish": "wap_publish", "tag": "create_tag", "rollback": "rollback"}


def expected_main(name: str, ids: dict[str, int]) -> int:
    return {"publish": ids["dev"], "tag": ids["main"], "rollback": ids["first"]}[name]


def locations(hook: IcebergCatalogHook) -> dict[str, str | None]:
    return {t: hook.metadata_location(t) for t in (T, "governance.ledger", "governance.audit_results")}


def assert_retryable(err: BaseException) -> None:
    assert isinstance(err, IcebergCatalogUnavailableError) and not isinstance(err, AirflowFailException)
    assert "unavailable" in str(err) and "retried" in str(err)


def converge(hook: IcebergCatalogHook, name: str, ids: dict[str, int]) -> None:
    """The retry succeeds; main is where the operation puts it; exactly one ledger row."""
    OPERATIONS[name](ids).execute(fake_context(try_number=2))
    assert hook.ref_snapshot_id(T) == expected_main(name, ids)
    rows = [
        r
        for r in hook.governance.read("ledger", operation=LEDGER_OPERATION[name], table_name=T)
        if r["status"] == "succeeded"
    ]
    assert len(rows) == 1, rows


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_sqlite_catalog_locked_longer_than_the_busy_timeout(lake, monkeypatch, name):
    ids = prepare(lake)
    before = locations(lake)
    db = json.loads(os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"])["host"].split("sqlite:///", 1)[1]
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SQLITE_BUSY_TIMEOUT_MS", "300")
    locker = sqlite3.connect(db, isolation_level=None, timeout=5)
    locker.execute("BEGIN EXCLUSIVE")  # another process holds the catalog's write lock
    try:
        t0 = time.monotonic()
        with pytest.raises(IcebergCatalogUnavailableError) as err:
            OPERATIONS[name](ids).execute(fake_context())
        assert time.monotonic() - t0 < 30, "the busy timeout was not honoured"
        assert_retryable(err.value)
        assert "database is locked" in str(err.value)
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert locations(lake) == before, "a failed commit left partial state"
    converge(lake, name, ids)


def test_ledger_storage_fails_after_the_publish_moved_main(lake):
    """The publish commits main, then its ledger row cannot be written: the retry records it exactly once."""
    ids = prepare(lake)
    ledger_data = Path(lake.load_table("governance.ledger").location().removeprefix("file://")) / "data"
    aside = ledger_data.with_name("data.aside")
    if ledger_data.exists():
        ledger_data.rename(aside)
    ledger_data.write_text("not a directory")  # every new ledger data file fails to open
    try:
        with pytest.raises(Exception, match="(?i)directory|exists"):
            OPERATIONS["publish"](ids).execute(fake_context())
        assert lake.ref_snapshot_id(T) == ids["dev"], "the publish itself committed before the ledger failed"
        assert not lake.governance.read("ledger", operation="wap_publish")
    finally:
        ledger_data.unlink()
        if aside.exists():
            aside.rename(ledger_data)
    converge(lake, "publish", ids)
    (row,) = lake.governance.read("ledger", operation="wap_publish")
    details = json.loads(row["details"])
    assert details["method"] == "recovered" and details["audited_snapshot_id"] == str(ids["dev"])
    assert json.loads(row["metrics"])["published_added_records"] == 5


def _pg_ctl(server, *args: str) -> None:
    cmd = [str(server.bindir / "pg_ctl"), "-D", str(server.datadir), *args]
    subprocess.run(_as_user(cmd, server.run_as), check=True, capture_output=True, timeout=120)


@pytest.mark.postgres
@pytest.mark.parametrize("name", ["publish", "rollback"])
def test_postgres_server_stopped_during_a_metadata_operation(tmp_path, monkeypatch, name):
    try:
        server = start_postgres()
    except ServerUnavailable as err:
        pytest.skip(str(err))
    try:
        (tmp_path / "warehouse").mkdir()
        monkeypatch.setenv(
            "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT",
            pg_conn_json(server, server.create_database(), tmp_path / "warehouse"),
        )
        hook = IcebergCatalogHook()
        hook.ensure_namespace("db")
        ids = prepare(hook)
        before = locations(hook)
        hook.catalog.engine.dispose()
        _pg_ctl(server, "-m", "fast", "-w", "stop")  # clean stop (the test server runs with fsync off)
        with pytest.raises(IcebergCatalogUnavailableError) as err:
            OPERATIONS[name](ids).execute(fake_context())
        assert_retryable(err.value)
        root = server.datadir.parent
        opts = f"-c listen_addresses=127.0.0.1 -p {server.port} -c unix_socket_directories={root} -c fsync=off"
        _pg_ctl(server, "-l", str(root / "server.log"), "-o", opts, "-w", "start")
        after = IcebergCatalogHook()
        assert locations(after) == before, "the stopped server left partial state"
        converge(after, name, ids)
        after.catalog.engine.dispose()
    finally:
        server.stop()


@pytest.mark.rest
def test_rest_catalog_server_stopped_during_a_metadata_operation(tmp_path, monkeypatch):
    try:
        server = start_seaweed()
    except ServerUnavailable as err:
        pytest.skip(str(err))
    try:
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", rest_conn_json(server))
        hook = IcebergCatalogHook()
        hook.ensure_namespace("db")
        ids = prepare(hook)
        server.stop()
        for name in ("publish", "tag", "rollback"):
            with pytest.raises(IcebergCatalogUnavailableError) as err:
                OPERATIONS[name](ids).execute(fake_context())
            assert_retryable(err.value)
    finally:
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)
