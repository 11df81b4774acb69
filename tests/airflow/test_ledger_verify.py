"""The governance chain on a real SQLite catalog: chained writes, seals, checkpoints, and the
offline verifier naming every kind of tampering with its row."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_iceberg_provider import verify
from airflow_iceberg_provider.core import ledger_chain as lc
from airflow_iceberg_provider.core import ledger_verify as lv
from airflow_iceberg_provider.core.governance import (
    AUDIT_RESULTS,
    LEDGER,
    LEDGER_SIGNING_CONN_ID,
    arrow_schema,
    pyiceberg_schema,
)
from airflow_iceberg_provider.exceptions import IcebergValidationError
from tests.support.lake import ROOT

SEED = bytes(range(32))
OTHER_SEED = bytes(range(7, 39))
LEDGER_NAME = "governance.ledger"


def _signing(monkeypatch: pytest.MonkeyPatch, seed: bytes = SEED, name: str = "gov") -> None:
    conn = {"conn_type": "generic", "login": name, "password": base64.b64encode(seed).decode()}
    monkeypatch.setenv(f"AIRFLOW_CONN_{LEDGER_SIGNING_CONN_ID.upper()}", json.dumps(conn))


@pytest.fixture
def signed_lake(lake, monkeypatch):
    _signing(monkeypatch)
    return lake


def _args(hook: Any, tmp_path: Path, *extra: str) -> list[str]:
    props = hook.config.pyiceberg_properties()
    return [
        "--catalog-uri",
        props["uri"],
        "--warehouse",
        props["warehouse"],
        "--catalog-name",
        hook.catalog_name,
        *extra,
    ]


def _key_file(tmp_path: Path, seed: bytes = SEED, name: str = "gov") -> str:
    path = tmp_path / f"{name}-{seed[0]}.vkey"
    path.write_text(lc.verifier_key(name, lc.public_key_of(seed)) + "\n")
    return str(path)


def _run(hook: Any, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = tmp_path / f"report-{uuid.uuid4().hex}.json"
    rc = verify.main(_args(hook, tmp_path, "--json", str(out), *extra))
    return rc, json.loads(out.read_text())


def _ledger_rows(hook: Any, n: int, *, checkpoint_each: bool = True) -> list[str]:
    ids = []
    for i in range(n):
        ids.append(hook.governance.record_ledger(operation="op", table="db.t", status="succeeded", details={"i": i}))
        if checkpoint_each:
            hook.governance.checkpoint()
    return ids


def _rewrite(hook: Any, name: str, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> None:
    """What anyone with the catalog connection can do: replace a table's rows outside the provider."""
    tbl = hook.load_table(name)
    rows = sorted(tbl.scan().to_arrow().to_pylist(), key=lambda r: (r["chain_seq"] is None, r["chain_seq"] or 0))
    tbl.overwrite(pa.Table.from_pylist(change(rows), schema=tbl.schema().as_arrow()))


def _first(report: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["kind"] == kind]
    assert found, f"no {kind} finding in {report['findings']}"
    return found[0]


# ---------------------------------------------------------------------- chained writes
def test_an_untouched_signed_ledger_verifies(signed_lake, tmp_path):
    _ledger_rows(signed_lake, 4)
    rc, report = _run(signed_lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert rc == 0 and report["ok"] and report["findings"] == []
    assert report["tables"] == {LEDGER_NAME: 4} and report["checkpoints"] == 4 and report["signature_checked"]
    rows = signed_lake.governance.read("ledger")
    assert sorted(r["chain_seq"] for r in rows) == [0, 1, 2, 3]
    cps = signed_lake.governance.read("ledger_checkpoints")
    assert {c["key_name"] for c in cps} == {"gov"}
    assert max(cps, key=lambda c: c["tree_size"])["checkpoint"].startswith(
        f"{signed_lake.catalog_name}/{LEDGER_NAME}\n4\n"
    )


def test_rows_are_linked_in_one_commit_with_the_head_in_the_snapshot_summary(lake):
    lake.governance.append("ledger", [{"event_id": f"e{i}", "operation": "op", "status": "noop"} for i in range(3)])
    tbl = lake.load_table(LEDGER_NAME)
    head = lc.ChainHead.from_summary(tbl.metadata.current_snapshot().summary.additional_properties)
    rows = sorted(lake.governance.read("ledger"), key=lambda r: r["chain_seq"])
    assert (head.size, head.head) == (3, rows[-1]["entry_hash"])
    assert head.root() == lc.merkle_root([lc.leaf_hash(r["entry_hash"]) for r in rows])
    assert lv.walk_chain(LEDGER_NAME, rows).findings == []


def test_the_head_is_found_by_scanning_after_a_commit_by_another_writer(lake):
    _ledger_rows(lake, 2, checkpoint_each=False)
    tbl = lake.load_table(LEDGER_NAME)
    tbl.append(pa.Table.from_pylist([], schema=arrow_schema(LEDGER)))  # an empty commit, no chain summary
    assert lc.ChainHead.from_summary(lake.load_table(LEDGER_NAME).metadata.current_snapshot().summary) is None
    _ledger_rows(lake, 1, checkpoint_each=False)
    rows = lake.governance.read("ledger")
    assert sorted(r["chain_seq"] for r in rows) == [0, 1, 2]
    assert lv.walk_chain(LEDGER_NAME, rows).findings == []


def test_concurrent_writers_keep_one_linear_chain(lake):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    lake.governance.table("ledger")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            hook = IcebergCatalogHook()  # one hook per writer, as one per task
            for i in range(4):
                hook.governance.record_ledger(
                    operation="op", table="db.t", status="succeeded", details={"w": w, "i": i}
                )
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    rows = lake.governance.read("ledger")
    assert sorted(r["chain_seq"] for r in rows) == list(range(20))
    assert len({r["prev_hash"] for r in rows}) == 20  # no two rows share a predecessor: no fork
    assert lv.walk_chain(LEDGER_NAME, rows).findings == []


# ---------------------------------------------------------------------- tampering
def _edit(rows):
    rows[2] = {**rows[2], "status": "failed"}
    return rows


def _delete(rows):
    return rows[:2] + rows[3:]


def _insert(rows):
    forged = {**rows[2], "event_id": "forged-row", "details": '{"i": 99}'}
    return rows[:3] + [forged] + rows[3:]


def _reorder(rows):
    rows[2], rows[3] = {**rows[3], "chain_seq": 2}, {**rows[2], "chain_seq": 3}
    return rows


def _truncate(rows):
    return rows[:4]


def _forge(rows):
    """Rewrite row 2 and recompute every hash after it: a consistent chain, but not the one checkpointed."""
    stream = lc.RootStream()
    for r in rows[:2]:
        stream.push(lc.leaf_hash(r["entry_hash"]))
    head = lc.ChainHead(2, rows[1]["entry_hash"], stream.frontier())
    body = [{k: v for k, v in r.items() if k not in lc.CHAIN_COLUMNS} for r in rows[2:]]
    body[0]["status"] = "failed"
    linked, _ = lc.link(body, head)
    return rows[:2] + linked


@pytest.mark.parametrize(
    ("tamper", "kind", "position", "row"),
    [
        (_edit, "edited", 2, 2),
        (_delete, "deleted", 2, 3),
        (_insert, "inserted", 2, "forged-row"),
        (_reorder, "reordered", 2, 3),
        (_truncate, "truncated", 4, None),
        (_forge, "forged", 2, 2),
    ],
)
def test_the_verifier_names_each_kind_of_tampering_with_its_row(signed_lake, tmp_path, tamper, kind, position, row):
    ids = _ledger_rows(signed_lake, 6)
    _rewrite(signed_lake, LEDGER_NAME, tamper)
    rc, report = _run(signed_lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert rc == 1 and not report["ok"]
    found = _first(report, kind)
    assert found["table"] == LEDGER_NAME and found["position"] == position
    assert found["row_id"] == (ids[row] if isinstance(row, int) else row)


def test_a_forged_chain_alone_is_caught_only_by_the_checkpoints(signed_lake, tmp_path):
    _ledger_rows(signed_lake, 6)
    _rewrite(signed_lake, LEDGER_NAME, _forge)
    rc, report = _run(signed_lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert {f["kind"] for f in report["findings"]} == {"forged"}  # every link and hash is self-consistent


def test_checkpoints_signed_with_another_key_are_named(lake, tmp_path, monkeypatch):
    _signing(monkeypatch, OTHER_SEED, name="intruder")
    _ledger_rows(lake, 2)
    rc, report = _run(lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert rc == 1
    found = _first(report, "bad_signature")
    assert found["table"] == LEDGER_NAME and "intruder" in found["message"]


def test_unsigned_checkpoints_are_a_note_without_a_key_and_a_finding_with_one(lake, tmp_path):
    _ledger_rows(lake, 2)
    rc, report = _run(lake, tmp_path)
    assert rc == 0 and {f["kind"] for f in report["findings"]} == {"unsigned"}
    rc, report = _run(lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert rc == 1 and _first(report, "unsigned")["severity"] == "error"


def test_a_malformed_signing_connection_is_refused_naming_it_and_writes_no_checkpoint(lake, monkeypatch):
    _ledger_rows(lake, 1, checkpoint_each=False)
    lake.governance.table("ledger_checkpoints")
    before = lake.load_table("governance.ledger_checkpoints").metadata_location
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{LEDGER_SIGNING_CONN_ID.upper()}",
        json.dumps({"conn_type": "generic", "login": "gov", "password": "not-a-key"}),
    )
    with pytest.raises(IcebergValidationError, match=f"{LEDGER_SIGNING_CONN_ID}.*32-byte Ed25519"):
        lake.governance.checkpoint()
    assert lake.load_table("governance.ledger_checkpoints").metadata_location == before


# ---------------------------------------------------------------------- seals (rows another engine wrote)
def _spark_like_audit_rows(hook: Any, event_id: str, n: int = 2) -> None:
    """Rows appended the way the audit job appends them: outside the chained writer."""
    name = hook.governance.table("audit_results")
    rows = [
        {
            "event_id": event_id,
            "table_name": "db.t",
            "check_name": f"c{i}",
            "passed": True,
            "observed_value": float(i),
            "evaluated_at": datetime.now(UTC),
        }
        for i in range(n)
    ]
    hook.load_table(name).append(pa.Table.from_pylist(rows, schema=arrow_schema(AUDIT_RESULTS)))


def test_rows_a_job_wrote_are_sealed_and_then_verify(signed_lake, tmp_path):
    _spark_like_audit_rows(signed_lake, "job-1")
    assert signed_lake.governance.seal_job("job-1", job="wap_audit") is not None
    assert signed_lake.governance.seal_job("job-1", job="wap_audit") is None  # already sealed as they are
    signed_lake.governance.checkpoint()
    rc, report = _run(signed_lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert rc == 0, report["findings"]


@pytest.mark.parametrize(
    ("change", "kind", "row"),
    [
        (lambda rows: [{**rows[0], "passed": False}, *rows[1:]], "edited", "job-1/c0"),
        (lambda rows: rows[1:], "deleted", "job-1/c0"),
        (lambda rows: [*rows, {**rows[0], "check_name": "c9"}], "inserted", "job-1/c9"),
    ],
)
def test_tampering_with_sealed_rows_is_named(signed_lake, tmp_path, change, kind, row):
    _spark_like_audit_rows(signed_lake, "job-1")
    signed_lake.governance.seal_job("job-1", job="wap_audit")
    signed_lake.governance.checkpoint()
    _rewrite(signed_lake, "governance.audit_results", change)
    rc, report = _run(signed_lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert rc == 1
    found = _first(report, kind)
    assert found["table"] == "governance.audit_results" and found["row_id"] == row


def test_an_updated_evidence_row_is_resealed_saying_what_it_replaced(lake, tmp_path):
    from airflow_iceberg_provider.core.governance import ERASURE_EVIDENCE

    name = lake.governance.table("erasure_evidence")
    row = {"evidence_id": "ev1", "request_id": "r1", "table_name": "db.t", "verification": "verified", "runs": 1}
    lake.load_table(name).append(pa.Table.from_pylist([row], schema=arrow_schema(ERASURE_EVIDENCE)))
    lake.governance.seal_job("job-a", job="erasure")
    old_hash = lv.row_hash(lake.governance.read("erasure_evidence")[0])
    # the redaction updates the row in place (a MERGE by the Spark job)
    _rewrite(lake, name, lambda rows: [{**rows[0], "redaction_verification": "verified"}])
    rc, report = _run(lake, tmp_path)
    assert rc == 1 and _first(report, "edited")["row_id"] == "ev1"  # not yet sealed: reported
    lake.governance.seal_job("job-b", job="erasure")
    seal = [r for r in lake.governance.ledger_entries(operation=lv.SEAL_OPERATION)]
    replaced = [e for s in seal for e in s.details["tables"][name] if "replaces" in e]
    assert replaced == [{"key": "ev1", "hash": replaced[0]["hash"], "replaces": old_hash}]
    rc, report = _run(lake, tmp_path)
    assert rc == 0, report["findings"]


# ---------------------------------------------------------------------- older tables
def test_a_ledger_from_an_earlier_version_gains_the_chain_and_its_history_is_sealed(lake, tmp_path):
    old_columns = [c for c in LEDGER.columns if c.name not in lc.CHAIN_COLUMNS]
    old_spec = type(LEDGER)(name="ledger", columns=old_columns, doc="")
    lake.ensure_namespace("governance")
    tbl = lake.catalog.create_table(LEDGER_NAME, schema=pyiceberg_schema(old_spec))
    old_rows = [{"event_id": f"old{i}", "operation": "op", "status": "succeeded"} for i in range(3)]
    tbl.append(pa.Table.from_pylist(old_rows, schema=arrow_schema(old_spec)))
    rc, report = _run(lake, tmp_path)  # before the provider touched it: history, not tampering
    assert rc == 0 and _first(report, "unchained_history")["severity"] == "note"

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook()
    hook.governance.record_ledger(operation="op", table="db.t", status="succeeded")
    hook.governance.checkpoint()
    fields = [f.name for f in hook.load_table(LEDGER_NAME).schema().fields]
    assert fields[-3:] == list(lc.CHAIN_COLUMNS)
    assert {e.event_id for e in hook.governance.ledger_entries()} >= {"old0", "old1", "old2"}
    rc, report = _run(lake, tmp_path)
    assert rc == 0 and report["findings"][0]["kind"] == "unsigned", report["findings"]
    _rewrite(hook, LEDGER_NAME, lambda rows: [r for r in rows if r["event_id"] != "old1"])
    rc, report = _run(lake, tmp_path)
    assert rc == 1 and _first(report, "deleted")["row_id"] == "old1"


# ---------------------------------------------------------------------- offline proofs
def test_one_row_proof_verifies_offline_and_fails_when_altered(signed_lake, tmp_path):
    ids = _ledger_rows(signed_lake, 5)
    doc = signed_lake.governance.proof("ledger", event_id=ids[2])
    assert doc["leaf_index"] == 2 and doc["tree_size"] == 5
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"request_id": "r1", "proof": doc}))
    assert verify.main(["--evidence", str(path), "--public-key", _key_file(tmp_path)]) == 0
    assert verify.main(["--evidence", str(path), "--public-key", _key_file(tmp_path, OTHER_SEED)]) == 1
    doc["row"]["status"] = "failed"
    path.write_text(json.dumps(doc))
    assert verify.main(["--evidence", str(path), "--public-key", _key_file(tmp_path)]) == 1


def test_a_proof_needs_one_chained_row_and_a_checkpoint(lake):
    ids = _ledger_rows(lake, 1, checkpoint_each=False)
    with pytest.raises(IcebergValidationError, match="no checkpoint covers the row"):
        lake.governance.proof("ledger", event_id=ids[0])
    with pytest.raises(IcebergValidationError, match="0 rows match and a proof needs exactly one"):
        lake.governance.proof("ledger", event_id="nope")


def _evidence(hook: Any, **values: Any) -> None:
    from airflow_iceberg_provider.core.governance import ERASURE_EVIDENCE

    name = hook.governance.table("erasure_evidence")
    row = {"evidence_id": "ev1", "request_id": "r1", "table_name": "db.t", "verification": "verified", **values}
    hook.load_table(name).append(pa.Table.from_pylist([row], schema=arrow_schema(ERASURE_EVIDENCE)))


def test_an_evidence_report_carries_proofs_an_auditor_verifies_offline(signed_lake, tmp_path):
    from airflow_iceberg_provider.ui.app import report_data
    from airflow_iceberg_provider.ui.reader import GovernanceReader

    _ledger_rows(signed_lake, 3, checkpoint_each=False)
    _evidence(signed_lake, rows_deleted=4, finished_at=datetime(2026, 3, 1, tzinfo=UTC))
    signed_lake.governance.seal_job("erasure-run", job="erasure")  # what the operator does after the job
    signed_lake.governance.checkpoint()
    report = report_data(GovernanceReader("iceberg_catalog_default"), "r1")
    assert len(report["proofs"]) == 1 and report["proofs"][0]["sealed"]["key"] == "ev1"
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report, default=str))
    assert verify.main(["--evidence", str(path), "--public-key", _key_file(tmp_path)]) == 0
    report["proofs"][0]["sealed"]["row"]["rows_deleted"] = 0  # the figure an officer would want to change
    path.write_text(json.dumps(report, default=str))
    assert verify.main(["--evidence", str(path), "--public-key", _key_file(tmp_path)]) == 1
    assert verify.main(["--evidence", str(path), "--public-key", _key_file(tmp_path, OTHER_SEED)]) == 1


def test_a_report_without_a_covering_checkpoint_has_no_proof_and_does_not_verify(lake, tmp_path):
    from airflow_iceberg_provider.ui.app import report_data
    from airflow_iceberg_provider.ui.reader import GovernanceReader

    _evidence(lake)
    report = report_data(GovernanceReader("iceberg_catalog_default"), "r1")  # never sealed nor checkpointed
    assert report["proofs"] == []
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report, default=str))
    assert verify.main(["--evidence", str(path)]) == 1
    with pytest.raises(IcebergValidationError, match="no checkpoint covers the row"):
        lake.governance.proof("erasure_evidence", evidence_id="ev1")


# ---------------------------------------------------------------------- scale and isolation
def test_an_untouched_ledger_of_100000_rows_verifies(lake, tmp_path):
    n = 100_000
    start = datetime(2026, 1, 1, tzinfo=UTC)
    body = pa.table(
        {
            "event_id": [f"{i:032x}" for i in range(n)],
            "operation": ["maintenance.expire_snapshots"] * n,
            "table_name": ["db.orders"] * n,
            "status": ["succeeded"] * n,
            "finished_at": pa.array([start + timedelta(seconds=i) for i in range(n)], pa.timestamp("us", tz="UTC")),
            "details": ['{"files": 3}'] * n,
        }
    ).to_pylist()
    linked, head = lc.link(body, lc.ChainHead())
    name = lake.governance.table("ledger")
    lake.load_table(name).append(
        pa.Table.from_pylist(linked, schema=arrow_schema(LEDGER)), snapshot_properties=head.summary()
    )
    lake.governance.checkpoint(tables=[name])
    lake.governance.record_ledger(operation="op", table="db.t", status="succeeded")  # continues at 100000
    lake.governance.checkpoint()
    t0 = time.monotonic()
    rc, report = _run(lake, tmp_path)
    seconds = time.monotonic() - t0
    assert rc == 0 and report["tables"][name] == n + 1, report["findings"]
    assert seconds < 60, f"verification of {n} rows took {seconds:.1f}s"


def test_the_verifier_runs_without_airflow(signed_lake, tmp_path):
    _ledger_rows(signed_lake, 2)
    code = (
        "import sys\n"
        "sys.modules['airflow'] = None  # any import of airflow now fails\n"
        "from airflow_iceberg_provider import verify\n"
        "rc = verify.main(sys.argv[1:])\n"
        "assert not any(m == 'airflow' or m.startswith('airflow.') for m in sys.modules if sys.modules[m] is not None)\n"
        "sys.exit(rc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", code, *_args(signed_lake, tmp_path, "--public-key", _key_file(tmp_path))],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "OK: 2 rows" in proc.stdout


def test_bad_arguments_exit_2_naming_the_problem(tmp_path, capsys):
    bad = tmp_path / "bad.vkey"
    bad.write_text("nonsense")
    assert verify.main(["--catalog-uri", "sqlite:///x.db", "--public-key", str(bad)]) == 2
    assert "verifier key" in capsys.readouterr().err


# ---------------------------------------------------------------------- the operator's checkpoint
def test_a_task_that_wrote_ledger_rows_leaves_a_signed_checkpoint_of_them(signed_lake, tmp_path):
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator
    from tests.support.lake import append_batches, create_orders_table, fake_context

    create_orders_table(signed_lake, "db.orders")
    append_batches(signed_lake, "db.orders", 1)
    op = IcebergCreateTagOperator(task_id="tag", table="db.orders", tag="release-1")
    ctx = fake_context(task_id="tag")
    op.execute(ctx)
    op.post_execute(ctx)
    cps = signed_lake.governance.read("ledger_checkpoints", table_name=LEDGER_NAME)
    size = len(signed_lake.governance.read("ledger"))
    assert [(c["tree_size"], c["task_id"], c["key_name"]) for c in cps] == [(size, "tag", "gov")]
    rc, report = _run(signed_lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert rc == 0, report["findings"]


def test_a_task_that_wrote_nothing_writes_no_checkpoint(signed_lake):
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator
    from tests.support.lake import fake_context

    op = IcebergCreateTagOperator(task_id="tag", table="db.orders", tag="release-1")
    op.post_execute(fake_context(task_id="tag"))  # the hook was never built: nothing read, nothing written
    assert "catalog_hook" not in op.__dict__


# ---------------------------------------------------------------------- the airflow CLI
@pytest.mark.airflow
def test_the_airflow_cli_prints_the_public_key_and_verifies(signed_lake, tmp_path):
    from airflow_iceberg_provider.get_provider_info import get_provider_info

    assert get_provider_info()["cli"] == ["airflow_iceberg_provider.cli.get_cli_commands"]
    _ledger_rows(signed_lake, 2)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    key = subprocess.run(
        ["airflow", "iceberg-governance", "public-key"], capture_output=True, text=True, env=env, timeout=300
    )
    assert key.returncode == 0, key.stderr
    assert key.stdout.strip() == lc.verifier_key("gov", lc.public_key_of(SEED))
    vkey = tmp_path / "gov.vkey"
    vkey.write_text(key.stdout)
    _rewrite(signed_lake, LEDGER_NAME, _edit_first)
    out = subprocess.run(
        ["airflow", "iceberg-governance", "verify", "--public-key", str(vkey)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ERROR edited governance.ledger position 0" in out.stdout


def _edit_first(rows):
    rows[0] = {**rows[0], "status": "failed"}
    return rows


# ---------------------------------------------------------------------- governance tables are not targets
def _governance_targets():
    from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator, IcebergRollbackOperator
    from airflow_iceberg_provider.operators.wap_write import IcebergWapWriteOperator

    return {
        "erasure": lambda t: IcebergErasureOperator(
            task_id="x", table=t, subject_columns="event_id", requests_table="db.requests"
        ),
        "wap_write": lambda t: IcebergWapWriteOperator(task_id="x", table=t, sql="SELECT 1 AS event_id"),
        "rollback": lambda t: IcebergRollbackOperator(task_id="x", table=t, to_snapshot_id=1),
        "tag": lambda t: IcebergCreateTagOperator(task_id="x", table=t, tag="v1"),
    }


@pytest.mark.parametrize("verb", ["erasure", "wap_write", "rollback", "tag"])
@pytest.mark.parametrize("kind", ["ledger", "erasure_evidence", "ledger_checkpoints"])
def test_operators_that_could_change_rows_refuse_a_governance_table(lake, verb, kind):
    from airflow_iceberg_provider.exceptions import IcebergRefusedError
    from tests.support.lake import fake_context

    _ledger_rows(lake, 1)
    name = lake.governance.table(kind)
    before = lake.load_table(name).metadata_location
    op = _governance_targets()[verb](name)
    with pytest.raises(IcebergRefusedError, match=rf"table='{name}' is a governance table.*Pick a data table"):
        op.pre_execute(fake_context())
    assert lake.load_table(name).metadata_location == before


def test_health_checks_and_maintenance_may_act_on_governance_tables(lake):
    from airflow_iceberg_provider.operators.health import IcebergTableHealthCheckOperator
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
    from tests.support.lake import fake_context

    _ledger_rows(lake, 1)
    IcebergTableHealthCheckOperator(task_id="h", table=LEDGER_NAME).pre_execute(fake_context())
    IcebergMaintenancePlanOperator(task_id="m", table=LEDGER_NAME).pre_execute(fake_context())


def test_a_checkpoint_kept_outside_the_catalog_still_proves_its_rows(signed_lake, tmp_path):
    ids = _ledger_rows(signed_lake, 4, checkpoint_each=False)
    (note,) = signed_lake.governance.checkpoint()
    kept = tmp_path / "ledger-4.checkpoint"
    kept.write_text(note)
    # someone with catalog access truncates the ledger and deletes its checkpoints
    _rewrite(signed_lake, LEDGER_NAME, lambda rows: rows[:2])
    cps = signed_lake.load_table("governance.ledger_checkpoints")
    cps.overwrite(pa.Table.from_pylist([], schema=cps.schema().as_arrow()))
    rc, report = _run(signed_lake, tmp_path, "--public-key", _key_file(tmp_path))
    assert rc == 0  # the catalog alone no longer shows it
    rc, report = _run(signed_lake, tmp_path, "--public-key", _key_file(tmp_path), "--checkpoint", str(kept))
    assert rc == 1
    found = _first(report, "truncated")
    assert (found["table"], found["position"]) == (LEDGER_NAME, 2)
    assert report["tables"] == {LEDGER_NAME: 2} and len(ids) == 4


def test_an_unsigned_proof_verifies_only_without_a_key(lake, tmp_path):
    ids = _ledger_rows(lake, 2)
    path = tmp_path / "proof.json"
    path.write_text(json.dumps(lake.governance.proof("ledger", event_id=ids[0])))
    assert verify.main(["--evidence", str(path)]) == 0
    assert verify.main(["--evidence", str(path), "--public-key", _key_file(tmp_path)]) == 1
