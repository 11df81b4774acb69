"""Erasure end to end with real Spark jobs (4 jobs, one shared lake).

What is asserted is physical: every parquet file left under the table's location is
read with pyarrow, every metadata/manifest file is scanned for the subjects' bytes,
every retained snapshot and ref is time-travelled — not just what the job reports.

The jobs run on the suite's shared Spark Connect server (``spark_on_connect`` in tests/conftest.py);
``AIP_TEST_SPARK_MODE=spark_submit`` runs them through spark-submit instead.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_iceberg_provider.exceptions import IcebergRefusedError
from airflow_iceberg_provider.operators.erasure import IcebergErasureOperator
from airflow_iceberg_provider.rules.erasure import subject_hash
from tests.support.erasure import (
    SALT,
    add_requests,
    append_people,
    create_people_table,
    metadata_hits,
    people_batch,
    person,
    rows_of,
    set_salt_connection,
    values_by_snapshot,
    values_on_disk,
)
from tests.support.lake import fake_context

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("spark_on_connect")]

# person(0) is the smallest key: it is the lower bound of every file's customer_id column,
# so DELETED manifest entries would carry it unless manifests are rewritten and expired.
SUBJECTS = {"R-1": person(0), "R-2": person(7), "R-3": person(99)}  # person(99) has no rows
ERASED = {person(0), person(7)}


@pytest.fixture(scope="module")
def env(module_lake):
    old = os.environ.get("AIRFLOW_CONN_ERASURE_SALT")
    set_salt_connection()
    hook = module_lake
    create_people_table(hook, "db.people", mode="merge-on-read")
    snaps = append_people(hook, "db.people", 3)
    tbl = hook.load_table("db.people")
    hook.set_ref(tbl, "release-1", snaps[1], ref_type="tag")
    hook.set_ref(hook.load_table("db.people"), "dev", snaps[2], ref_type="branch")
    hook.load_table("db.people").append(people_batch(1000, 40), branch="dev")  # rows only on dev
    add_requests(hook, "db.requests", SUBJECTS)
    yield hook
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ERASURE_SALT", None)
    else:
        os.environ["AIRFLOW_CONN_ERASURE_SALT"] = old


def _op(**kw):
    args = {"task_id": "erase", "table": "db.people", "subject_columns": "customer_id", "requests_table": "db.requests"}
    return IcebergErasureOperator(**{**args, **kw})


def test_fail_policy_refuses_naming_the_tag_and_changes_nothing(env):
    before = env.metadata_location("db.people")
    req_before = env.metadata_location("db.requests")
    with pytest.raises(IcebergRefusedError, match="release-1") as err:
        _op(ref_policy="fail").execute(fake_context())
    assert "ref_policy='drop'" in str(err.value)
    assert env.metadata_location("db.people") == before
    assert env.metadata_location("db.requests") == req_before
    assert not any(p in str(err.value) for p in ERASED)


def test_drop_policy_erases_physically_and_records_evidence(env, capfd):
    people_before = rows_of(env, "db.people")
    assert metadata_hits(env, "db.people", ERASED)  # control: manifests carry person(0) as a bound
    result = _op(ref_policy="drop").execute(fake_context())
    out = capfd.readouterr()

    assert result["verification"] == "verified"
    assert result["refs_dropped"] == ["release-1"] and "release-1" not in env.refs("db.people")
    assert result["requests"] == 3 and result["rows_deleted"] > 0 and result["snapshots_expired"] > 0

    # nothing on disk, in any parquet file under the table (live or not)
    on_disk = values_on_disk(env, "db.people")
    assert on_disk and not [p for p, vals in on_disk.items() if vals & ERASED]
    # time travel to every retained snapshot and ref: none; other people untouched on main
    for where, vals in values_by_snapshot(env, "db.people").items():
        assert not vals & ERASED, where
    after = rows_of(env, "db.people")
    assert len(after) == len([r for r in people_before if r["customer_id"] not in ERASED])
    dev = env.load_table("db.people").scan(snapshot_id=env.ref_snapshot_id("db.people", "dev")).to_arrow()
    assert dev.num_rows > len(after)  # dev kept its own rows (minus the subjects')
    # no manifest, manifest list or metadata file carries the subjects (not even truncated bounds)
    assert metadata_hits(env, "db.people", ERASED) == []

    evidence = rows_of(env, "governance.erasure_evidence")
    assert sorted(e["request_id"] for e in evidence) == ["R-1", "R-2", "R-3"]
    by_req = {e["request_id"]: e for e in evidence}
    for rid, key in SUBJECTS.items():
        assert by_req[rid]["subject_hash"] == subject_hash(SALT, key)
        assert by_req[rid]["verification"] == "verified" and by_req[rid]["verified_rows_remaining"] == 0
    assert by_req["R-3"]["rows_deleted"] == 0 and by_req["R-1"]["rows_deleted"] > 0
    assert json.loads(by_req["R-1"]["refs_dropped"]) == ["release-1"]
    statuses = {r["request_id"]: r["status"] for r in rows_of(env, "db.requests")}
    # erased on every table in scope, then redacted (the default): the keys became their salted hashes
    assert statuses == {"R-1": "redacted", "R-2": "redacted", "R-3": "redacted"}
    assert result["requests_redacted"] == 3 and result["redaction_verification"] == "verified", result

    # no subject value (nor the salt) in XCom, evidence, ledger, or any log line
    ledger = env.governance.read("ledger", event_id=result["job_run_id"])
    blob = json.dumps([result, evidence, ledger], default=str) + out.out + out.err
    for secret in [*SUBJECTS.values(), SALT]:
        assert secret not in blob


def _subjects_file(tmp_path, subjects: dict[str, str]) -> str:
    path = tmp_path / "subjects.jsonl"
    path.write_text("".join(json.dumps({"request_id": r, "subject_key": k}) + "\n" for r, k in subjects.items()))
    os.chmod(path, 0o600)
    return str(path)


def test_rerun_is_a_noop_that_reverifies_without_duplicating_evidence(env, tmp_path):
    """Same request ids again, this time from a 0600 subjects file instead of the requests table."""
    before = env.metadata_location("db.people")
    op = _op(ref_policy="drop", requests_table=None, subjects_file=_subjects_file(tmp_path, SUBJECTS))
    result = op.execute(fake_context())
    assert result["rows_deleted"] == 0 and result["verification"] == "verified"
    assert result["refs_dropped"] == [] and result["files_rewritten"] == 0
    evidence = rows_of(env, "governance.erasure_evidence")
    assert len(evidence) == 3 and all(e["runs"] == 2 for e in evidence)
    assert all(e["rows_deleted"] > 0 for e in evidence if e["request_id"] != "R-3")  # first run's counts kept
    assert env.metadata_location("db.people") == before  # nothing left to purge: table untouched
    assert values_by_snapshot(env, "db.people")["main"].isdisjoint(ERASED)


def test_keep_policy_with_legal_hold_erases_the_rest_and_records_incomplete(env):
    create_people_table(env, "db.profiles", mode="copy-on-write")
    snaps = append_people(env, "db.profiles", 2)
    env.set_ref(env.load_table("db.profiles"), "legal-hold-case-1", snaps[0], ref_type="tag")
    held_files = {
        "/" + p.split(":", 1)[1].lstrip("/")
        for p in env.load_table("db.profiles").inspect.data_files(snaps[0]).column("file_path").to_pylist()
    }
    add_requests(env, "db.requests", {"R-10": person(0)})
    profiles = {"table": "db.profiles", "request_ids": ["R-10"]}

    # drop may not remove a legal hold
    before = env.metadata_location("db.profiles")
    with pytest.raises(IcebergRefusedError, match="legal-hold-case-1"):
        _op(ref_policy="drop", **profiles).execute(fake_context())
    assert env.metadata_location("db.profiles") == before

    result = _op(ref_policy="keep", **profiles).execute(fake_context())
    assert result["verification"] == "incomplete"
    assert result["refs_blocking"] == ["legal-hold-case-1"] and result["rows_held"] > 0
    assert result["request_statuses"] == {"blocked": 1}
    assert "legal-hold-case-1" in env.refs("db.profiles")
    # the subject survives only in files the hold pins
    holding = {p for p, vals in values_on_disk(env, "db.profiles").items() if person(0) in vals}
    assert holding and holding <= held_files
    by_snap = values_by_snapshot(env, "db.profiles")
    assert person(0) not in by_snap["main"] and person(0) in by_snap["legal-hold-case-1"]
    ev = rows_of(env, "governance.erasure_evidence", request_id="R-10")
    assert len(ev) == 1 and ev[0]["verification"] == "incomplete" and ev[0]["rows_held"] > 0
    assert json.loads(ev[0]["refs_blocking"]) == ["legal-hold-case-1"]
    assert {r["request_id"]: r["status"] for r in rows_of(env, "db.requests")}["R-10"] == "blocked"
