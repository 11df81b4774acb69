"""governance.LedgerEntry: the one ledger-row type (pure, no catalog)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from airflow_iceberg_provider.core.governance import LEDGER, LedgerEntry, airflow_identity, decode_ledger_row
from airflow_iceberg_provider.core.ledger_chain import CHAIN_COLUMNS

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def _entry(**over):
    values = dict(
        event_id="e1",
        operation="maintenance.expire_snapshots",
        status="succeeded",
        table_name="db.orders",
        ref="main",
        dag_id="d",
        run_id="r",
        task_id="t",
        try_number=2,
        started_at=T0,
        finished_at=T0,
        snapshot_before=2**63 - 1,
        snapshot_after=1,
        metrics={"files": 3, "nested": {"a": [1, 2]}},
        details={"reason": "x"},
        provider_version="0.1.0",
    )
    values.update(over)
    return LedgerEntry(**values)


def test_round_trip_row_and_back():
    entry = _entry()
    row = entry.to_row()
    # exactly the table's columns, less the chain's, which the chained writer sets
    assert set(row) == {c.name for c in LEDGER.columns} - set(CHAIN_COLUMNS)
    assert json.loads(row["metrics"]) == {"files": 3, "nested": {"a": [1, 2]}}
    assert row["metrics"] == json.dumps(json.loads(row["metrics"]), sort_keys=True)
    assert LedgerEntry.from_row(row) == entry
    assert LedgerEntry.from_row({**row, "extra_column": 1}) == entry


def test_from_row_decodes_empty_and_string_ids():
    row = {**_entry().to_row(), "metrics": None, "details": "", "snapshot_after": "42"}
    entry = LedgerEntry.from_row(row)
    assert (entry.metrics, entry.details, entry.snapshot_after) == ({}, {}, 42)
    assert decode_ledger_row({"metrics": '{"n": 1}', "details": None, "x": 1}) == {
        "metrics": {"n": 1},
        "details": {},
        "x": 1,
    }


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("status", "ok", "status='ok' is not one of"),
        ("event_id", "", "event_id=''"),
        ("operation", "drop table x; --", "operation="),
        ("snapshot_before", "12a", "snapshot_before='12a' is not a snapshot id"),
        ("snapshot_after", True, "snapshot_after=True"),
        ("metrics", "[1, 2]", "metrics must be a mapping"),
        ("details", "{not json", "details '{not json' is not JSON"),
        ("try_number", "2", "try_number='2'"),
        ("started_at", "yesterday", "started_at='yesterday' is not a datetime"),
    ],
)
def test_refuses_bad_values(field, value, says):
    with pytest.raises(ValueError, match="ledger " + field) as err:
        _entry(**{field: value})
    assert says.split("=")[0] in str(err.value)


def test_new_fills_event_id_times_and_identity():
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id="t", try_number=3)
    entry = LedgerEntry.new(operation="create_tag", status="noop", context={"ti": ti}, table_name="db.t")
    assert len(entry.event_id) == 32 and entry.started_at == entry.finished_at
    assert (entry.dag_id, entry.run_id, entry.task_id, entry.try_number) == ("d", "r", "t", 3)
    spark_side = LedgerEntry.new(
        operation="wap_write", status="failed", airflow={"dag_id": "d", "try_number": 1}, started_at=T0
    )
    assert spark_side.started_at == T0 and spark_side.finished_at > T0 and spark_side.task_id is None
    assert airflow_identity(None) == {"dag_id": None, "run_id": None, "task_id": None, "try_number": None}


def test_frozen():
    with pytest.raises(AttributeError):
        _entry().status = "failed"  # type: ignore[misc]


def test_governance_imports_without_airflow_or_pyiceberg():
    """The Spark job runtime imports it: no Airflow, pyiceberg or pyarrow on its import path."""
    code = (
        "import sys; import airflow_iceberg_provider.core.governance as g; "
        "bad = [m for m in ('airflow', 'pyiceberg', 'pyarrow') if m in sys.modules]; "
        "assert not bad, bad; print(g.LedgerEntry.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "LedgerEntry", out.stderr
