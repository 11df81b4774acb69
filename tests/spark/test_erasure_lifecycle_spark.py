"""Two-phase erasure (#13) end to end with real Spark jobs (3 jobs, one module-scoped lake).

30 daily appends; the subjects first appear on day 20; a branch shows them too; the table is
copy-on-write (the logical phase must still delete merge-on-read and restore the properties).
Everything asserted is read back independently: pyiceberg scans of every ref head, every
Parquet file under the table location read with pyarrow, the requests and evidence tables.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime, timedelta

import pytest

from airflow_iceberg_provider.core.governance import decode_ledger_row
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.rules.erasure import subject_hash
from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineSensor
from tests.support.erasure import (
    SALT,
    add_requests,
    create_people_table,
    metadata_hits,
    people_batch,
    person,
    rows_of,
    set_salt_connection,
    strings_on_disk,
    values_by_snapshot,
    values_on_disk,
)
from tests.support.lake import fake_context

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

SUBJECTS = {"R-1": person(900), "R-2": person(901), "R-3": person(999)}  # person(999) has no rows
ERASED = {person(900), person(901)}
TABLE = "db.daily"


def _day(hook, day: int, rows: int = 20) -> int:
    import pyarrow as pa

    base = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=day - 1)
    ids = list(range(day * 1000, day * 1000 + rows))
    keys = [person(i % 10) for i in ids]
    if day >= 20:  # the subjects' first rows
        keys[0], keys[1] = person(900), person(901)
    tbl = hook.load_table(TABLE)
    tbl.append(
        pa.table(
            {
                "order_id": pa.array(ids, pa.int64()),
                "customer_id": pa.array(keys, pa.string()),
                "amount": pa.array([1.0] * rows, pa.float64()),
                "order_ts": pa.array([base] * rows, pa.timestamp("us", tz="UTC")),
            }
        )
    )
    return hook.load_table(TABLE).current_snapshot().snapshot_id


def _check_dictionary_proofs_on_disk(hook, on_disk):
    """The dictionary parser on every file, including those Spark (parquet-mr under Iceberg)
    rewrote: no present key is ever proven absent; the erased keys are, by the dictionary."""
    import pyarrow.parquet as pq

    from airflow_iceberg_provider.spark_jobs.erasure import prune as ep

    ids = {"customer_id": hook.load_table(TABLE).schema().find_field("customer_id").field_id}
    written_by_spark = 0
    for path, vals in on_disk.items():
        with open(path, "rb") as fh:
            data = fh.read()

        def proof(keys, d=data):
            probes = {"customer_id": ep.key_probes(keys)}
            return ep.file_proofs(lambda o, n: d[o : o + n], len(d), probes, ids)["customer_id"]

        assert all(proof([v]) is None for v in vals if v is not None), path
        if "parquet-mr" in (pq.ParquetFile(path).metadata.created_by or ""):
            written_by_spark += 1
            assert proof(sorted(ERASED)) == "dictionary", path
    assert written_by_spark > 0


@pytest.fixture(scope="module")
def lake13(module_lake):
    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    hook = module_lake
    create_people_table(hook, TABLE, mode="copy-on-write")
    days = {d: _day(hook, d) for d in range(1, 31)}
    hook.set_ref(hook.load_table(TABLE), "dev", days[25], ref_type="branch")
    add_requests(hook, "db.requests13", SUBJECTS, received_days_ago=2)
    yield hook, days
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
    else:
        os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


def _op(phase, **kw):
    args = {
        "task_id": f"erase_{phase}",
        "table": TABLE,
        "subject_columns": "customer_id",
        "requests_table": "db.requests13",
        "redact_erased_requests": True,
    }
    return IcebergErasureOperator(phase=phase, **{**args, **kw})


def _statuses(hook):
    return {r["request_id"]: r["status"] for r in rows_of(hook, "db.requests13")}


@pytest.fixture(scope="module")
def logical(lake13):
    hook, days = lake13
    props = dict(hook.load_table(TABLE).metadata.properties)
    snaps = {s.snapshot_id for s in hook.load_table(TABLE).metadata.snapshots}
    result = _op("logical").execute(fake_context())
    return result, props, snaps


def test_purge_before_logical_is_refused_with_metadata_unchanged(lake13):
    hook, _ = lake13
    before = hook.metadata_location(TABLE)
    with pytest.raises(IcebergValidationError, match="phase='logical' first"):
        _op("purge").execute(fake_context())
    with pytest.raises(IcebergValidationError, match="phase='bogus' is not an erasure phase"):
        _op("bogus").execute(fake_context())
    assert hook.metadata_location(TABLE) == before


def test_logical_hides_subjects_on_every_ref_head_without_rewrite_or_expiry(lake13, logical, capfd):
    hook, days = lake13
    result, props, snaps = logical
    tbl = hook.load_table(TABLE)
    assert result["verification"] == "verified" and result["phase"] == "logical"
    assert dict(tbl.metadata.properties) == props  # copy-on-write table, properties exactly as before
    assert props["write.delete.mode"] == "copy-on-write"
    by_ref = values_by_snapshot(hook, TABLE)
    assert not by_ref["main"] & ERASED and not by_ref["dev"] & ERASED
    # merge-on-read: rows still in the files, no snapshot expired, no data file rewritten
    assert any(vals & ERASED for vals in values_on_disk(hook, TABLE).values())
    assert snaps <= {s.snapshot_id for s in tbl.metadata.snapshots}
    main = dict(tbl.current_snapshot().summary.additional_properties)
    assert tbl.current_snapshot().snapshot_id not in snaps
    assert int(main.get("added-position-delete-files", 0)) > 0 and "deleted-data-files" not in main  # merge-on-read
    assert _statuses(hook) == {"R-1": "logically_erased", "R-2": "logically_erased", "R-3": "logically_erased"}
    ev = {e["request_id"]: e for e in rows_of(hook, "governance.erasure_evidence") if e["table_name"] == TABLE}
    assert {e["phase"] for e in ev.values()} == {"logical"} and all(e["logical_erased_at"] for e in ev.values())
    assert ev["R-1"]["rows_found"] > 0 and ev["R-3"]["rows_found"] == 0
    assert result["requests_matching_nothing"] == 1 and "R-3" not in json.dumps(result)
    # the deadline sensor warns about the request that matched nothing (a count: no id, no key)
    capfd.readouterr()
    sensor = IcebergErasureDeadlineSensor(task_id="d", requests_table="db.requests13", logical_deadline_hours=72)
    assert sensor.poke(fake_context()) is True
    out = capfd.readouterr()
    assert "1 erasure request(s) matched no row in any table (rows_found = 0)" in out.out + out.err
    assert "R-3" not in out.out + out.err
    blob = json.dumps([result, list(ev.values())], default=str) + out.out + out.err
    assert not any(s in blob for s in [*SUBJECTS.values(), SALT])


def test_purge_removes_every_subject_file_and_leftover_and_keeps_history_without_subjects(lake13, logical, capfd):
    hook, days = lake13
    # what a compaction killed mid-way leaves: a complete output file no snapshot references, and a
    # partial one (no footer), both older than the 1 h in-flight guard
    holding = next(p for p, vals in values_on_disk(hook, TABLE).items() if vals & ERASED)
    leftover = os.path.join(os.path.dirname(holding), "00000-0-killed-compaction-00001.parquet")
    partial = os.path.join(os.path.dirname(holding), "00000-1-killed-compaction-00002.parquet")
    shutil.copy(holding, leftover)
    with open(holding, "rb") as fh, open(partial, "wb") as out:
        out.write(fh.read()[:200])
    old = time.time() - 7200
    for p in (leftover, partial):
        os.utime(p, (old, old))
    add_requests(hook, "db.requests13", {"R-4": person(5)}, received_days_ago=1)  # pending: keeps its key
    assert not metadata_hits(hook, "db.requests13", SUBJECTS.values())  # metrics none on subject_key
    result = _op("purge").execute(fake_context())
    out = capfd.readouterr()
    assert result["verification"] == "verified", result
    assert result["requests_redacted"] == 3 and result["redaction_verification"] == "verified", result
    on_disk = values_on_disk(hook, TABLE)
    assert on_disk and not [p for p, vals in on_disk.items() if vals & ERASED]
    assert not os.path.exists(leftover) and not os.path.exists(partial)
    kept = {s.snapshot_id for s in hook.load_table(TABLE).metadata.snapshots}
    assert {days[d] for d in range(1, 20)} <= kept  # days 1-19 never held a subject: kept
    assert not {days[d] for d in range(20, 31)} & kept  # every snapshot reaching a subject file: gone
    for where, vals in values_by_snapshot(hook, TABLE).items():
        assert not vals & ERASED, where
    assert "dev" in hook.refs(TABLE)
    assert _statuses(hook) == {"R-1": "redacted", "R-2": "redacted", "R-3": "redacted", "R-4": "pending"}
    ev = {e["request_id"]: e for e in rows_of(hook, "governance.erasure_evidence") if e["table_name"] == TABLE}
    assert {e["phase"] for e in ev.values()} == {"purge"} and all(e["purged_at"] for e in ev.values())
    assert ev["R-1"]["rows_found"] > 0 and ev["R-1"]["snapshots_kept"] >= 19
    assert ev["R-1"]["files_considered"] >= ev["R-1"]["files_raw_read"] > 0
    # days 1-19 (no bloom filter, truncated bounds): their dictionary pages prove the subjects absent
    assert ev["R-1"]["files_pruned_dictionary"] >= 19 and ev["R-1"]["files_pruned_bloom"] == 0
    assert ev["R-1"]["files_raw_read"] <= ev["R-1"]["files_considered"] - 19
    _check_dictionary_proofs_on_disk(hook, on_disk)
    assert ev["R-1"]["leftovers_removed"] == 2
    ledger = hook.governance.read("ledger", event_id=result["job_run_id"])
    blob = json.dumps([result, list(ev.values()), ledger], default=str) + out.out + out.err
    assert not any(s in blob for s in [*SUBJECTS.values(), SALT])

    # re-runs change nothing: no request left for either phase (redacted ids are never picked up again)
    before = hook.metadata_location(TABLE)
    with pytest.raises(IcebergValidationError, match="nothing to purge"):
        _op("purge").execute(fake_context())
    assert _op("logical", request_ids=sorted(SUBJECTS)).execute(fake_context())["status"] == "noop"
    assert hook.metadata_location(TABLE) == before


def test_purge_redacts_erased_requests_and_purges_the_requests_tables_history(lake13, logical):
    """After the purge, the requests table's folder (every Parquet file, every metadata and manifest
    file) holds no erased subject's key; the pending request keeps its key; the sensor and the UI
    work on the hashed rows; re-submitting a redacted id is refused, nothing added."""
    from airflow_iceberg_provider.ui.views import erasure_requests

    hook, _ = lake13
    if _statuses(hook).get("R-1") != "redacted":
        pytest.skip("needs the purge of test_purge_removes_every_subject_file_and_leftover...")
    on_disk = strings_on_disk(hook, "db.requests13")
    assert not on_disk & set(SUBJECTS.values()), "an erased subject's key is still in a requests data file"
    assert person(5) in on_disk  # R-4, not yet erased, keeps its key
    assert metadata_hits(hook, "db.requests13", SUBJECTS.values()) == []
    rows = {r["request_id"]: r for r in rows_of(hook, "db.requests13")}
    ev = {e["request_id"]: e for e in rows_of(hook, "governance.erasure_evidence") if e["table_name"] == TABLE}
    for rid, key in SUBJECTS.items():
        assert (
            rows[rid]["subject_key"]
            == "hmac-sha256:" + subject_hash(SALT, key)
            == "hmac-sha256:" + ev[rid]["subject_hash"]
        )
        assert ev[rid]["subject_redacted_at"] is not None and ev[rid]["redaction_verification"] == "verified"
    assert rows["R-4"]["subject_key"] == person(5)
    # only the current snapshot is left of the requests table's history
    assert len(hook.load_table("db.requests13").metadata.snapshots) == 1
    before = hook.metadata_location("db.requests13")
    with pytest.raises(IcebergValidationError, match=r"\['R-1'\] were erased .* never reopened"):
        hook.governance.submit_erasure_requests("db.requests13", {"R-1": person(900), "R-9": person(7)})
    assert hook.metadata_location("db.requests13") == before
    sensor = IcebergErasureDeadlineSensor(task_id="d2", requests_table="db.requests13", logical_deadline_hours=72)
    assert sensor.poke(fake_context()) is True
    view = {
        r["request_id"]: r
        for r in erasure_requests(hook.governance.erasure_request_states("db.requests13"), [], now=datetime.now(UTC))
    }
    assert view["R-1"]["status"] == "redacted" and not view["R-1"]["open"] and view["R-4"]["open"]


def test_purge_finds_subjects_in_files_written_before_the_subject_column_was_renamed(lake13):
    """The raw reads of analysis and verification match columns by field id: the file written
    while the column was called ``customer_id`` holds the subject under that name, and the purge
    must still expire the history that reaches it (a read by the current name saw nulls there)."""
    hook, _ = lake13
    table, requests = "db.renamed", "db.requests_renamed"
    create_people_table(hook, table, partition_by=())
    hook.load_table(table).append(people_batch(0, 40))  # person(0..11), column customer_id
    with hook.load_table(table).update_schema() as upd:
        upd.rename_column("customer_id", "customer_key")
    later = people_batch(100, 40, people=5).rename_columns(["order_id", "customer_key", "amount", "order_ts"])
    hook.load_table(table).append(later)  # person(0..4) only
    subject = person(7)  # only in the file written before the rename
    assert subject in strings_on_disk(hook, table)
    add_requests(hook, requests, {"RN-1": subject}, received_days_ago=1)
    args = {"table": table, "subject_columns": "customer_key", "requests_table": requests}
    logical = IcebergErasureOperator(task_id="rn_logical", phase="logical", **args).execute(fake_context())
    assert logical["verification"] == "verified" and logical["rows_deleted"] > 0
    purge = IcebergErasureOperator(task_id="rn_purge", phase="purge", **args).execute(fake_context())
    assert purge["verification"] == "verified", purge
    assert subject not in strings_on_disk(hook, table)
    assert person(1) in strings_on_disk(hook, table)  # other people's rows stay


def test_full_erasure_of_files_added_without_field_ids_reads_them_by_name(lake13, tmp_path):
    """Files imported with ``add_files`` carry no Parquet field ids (pyiceberg maps them by name):
    the raw reads by field id are refused by Spark for them, and fall back to names."""
    import pyarrow.parquet as pq

    hook, _ = lake13
    table, requests = "db.imported", "db.requests_imported"
    create_people_table(hook, table, partition_by=())
    path = str(tmp_path / "imported.parquet")
    pq.write_table(people_batch(0, 40), path)  # plain pyarrow: no field ids
    assert "field_id" not in str(pq.read_schema(path).field("customer_id").metadata or {})
    hook.load_table(table).add_files([path])
    add_requests(hook, requests, {"IM-1": person(7)}, received_days_ago=1)
    args = {"table": table, "subject_columns": "customer_id", "requests_table": requests}
    result = IcebergErasureOperator(task_id="im_full", phase="full", **args).execute(fake_context())
    assert result["verification"] == "verified" and result["rows_deleted"] > 0, result
    # the analysis found the subject in the imported file by its raw read (by name, the fallback)
    (row,) = hook.governance.read("ledger", event_id=result["job_run_id"])
    metrics = decode_ledger_row(row)["metrics"]
    assert metrics["files_with_subjects_before"] == 1 and metrics["rows_with_subjects_raw_before"] > 0
    assert person(7) not in strings_on_disk(hook, table)
    assert not os.path.exists(path) or person(7) not in pq.read_table(path).column("customer_id").to_pylist()
    assert person(1) in strings_on_disk(hook, table)


def test_a_grace_period_keeps_the_key_until_a_run_with_nothing_to_erase_redacts_it(lake13):
    """``redact_after``: the erasing run leaves the erased request's key in the requests table (listed
    as waiting); a later ``full`` run with no request left to erase redacts it once the grace period
    is over, and purges the requests table's history."""
    hook, _ = lake13
    table, requests = "db.grace", "db.requests_grace"
    create_people_table(hook, table, partition_by=())
    hook.load_table(table).append(people_batch(0, 40))
    add_requests(hook, requests, {"G-1": person(3)}, received_days_ago=1)
    args = {"table": table, "subject_columns": "customer_id", "requests_table": requests}
    first = IcebergErasureOperator(task_id="g_full", phase="full", redact_after="1h", **args).execute(fake_context())
    assert first["verification"] == "verified" and first["rows_deleted"] > 0, first
    assert first["requests_redacted"] == 0 and first["requests_redaction_waiting"] == 1, first
    assert {r["status"] for r in rows_of(hook, requests)} == {"erased"}
    assert person(3) in strings_on_disk(hook, requests) and person(3) not in strings_on_disk(hook, table)
    before = hook.metadata_location(table)
    again = IcebergErasureOperator(task_id="g_again", phase="full", **args).execute(fake_context())
    assert again["status"] == "noop" and again["requests_redacted"] == 1, again
    assert again["redaction_verification"] == "verified"
    assert hook.metadata_location(table) == before  # nothing to erase: the data table is not touched
    (row,) = rows_of(hook, requests)
    assert row["status"] == "redacted" and row["subject_key"] == "hmac-sha256:" + subject_hash(SALT, person(3))
    assert person(3) not in strings_on_disk(hook, requests)
    assert metadata_hits(hook, requests, [person(3)]) == []
