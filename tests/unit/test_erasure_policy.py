"""Erasure rules without Spark: hashing, ref analysis, policies, SQL builders, validation."""

from __future__ import annotations

import hashlib
import hmac
import os

import pytest

from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.rules import erasure as ep
from airflow_iceberg_provider.spark_jobs.erasure import sql as es

NOW = 1_800_000_000_000
DAY = 86_400_000


# ------------------------------------------------------------------------- hashing
@pytest.mark.parametrize("salt", [b"0123456789abcdef", b"x" * 64, b"long-" * 40])
def test_spark_hmac_pads_equal_python_hmac(salt):
    """The job computes HMAC with two sha2 calls over the pads; it must equal hmac.new."""
    ipad, opad = lc.hmac_pads(salt)
    for key in ("c42", "alice@example.com", "Zoë", ""):
        inner = hashlib.sha256(ipad + key.encode()).digest()
        spark_like = hashlib.sha256(opad + inner).hexdigest()
        assert spark_like == hmac.new(salt, key.encode(), hashlib.sha256).hexdigest()
        assert ep.subject_hash(salt.decode(), key) == spark_like


def test_subject_hash_depends_on_salt_and_is_not_the_value():
    a = ep.subject_hash("salt-one-0123456789", "alice@example.com")
    b = ep.subject_hash("salt-two-0123456789", "alice@example.com")
    assert a != b and len(a) == 64 and "alice" not in a


def test_evidence_id_is_deterministic_per_request_and_table():
    assert lc.evidence_id("R-1", "db.orders") == lc.evidence_id("R-1", "db.orders")
    assert lc.evidence_id("R-1", "db.orders") != lc.evidence_id("R-1", "db.profiles")


# --------------------------------------------------------------------- ref analysis
def _snaps():
    # s1 <- s2 <- s3 (main); s2 also tagged; s4 branch off s2
    return [
        {"snapshot_id": 1, "parent_id": None, "timestamp_ms": NOW - 10 * DAY},
        {"snapshot_id": 2, "parent_id": 1, "timestamp_ms": NOW - 5 * DAY},
        {"snapshot_id": 3, "parent_id": 2, "timestamp_ms": NOW - 1 * DAY},
        {"snapshot_id": 4, "parent_id": 2, "timestamp_ms": NOW - 2 * DAY},
    ]


def _ref(name, rtype, sid, **kw):
    return {"name": name, "type": rtype, "snapshot_id": sid, **kw}


def _analyze(refs, holds, live=None, had=True):
    out = lc.analyze_refs(refs, _snaps(), holds=holds, live_rows=live or {}, table_had_subjects=had, now_ms=NOW)
    return {a["name"]: a for a in out}


def test_tag_holding_subjects_blocks_and_legal_hold_is_flagged_and_undroppable():
    a = _analyze(
        [_ref("main", "branch", 3), _ref("release-1", "tag", 2), _ref("legal-hold-case-7", "tag", 2)],
        holds={"main": True, "release-1": True, "legal-hold-case-7": True},
        live={"main": 4},
    )
    assert a["main"]["action"] == "delete" and not a["main"]["blocking"]
    assert a["release-1"]["blocking"] and a["release-1"]["droppable"] and not a["release-1"]["legal_hold"]
    assert a["legal-hold-case-7"]["blocking"] and a["legal-hold-case-7"]["legal_hold"]
    assert not a["legal-hold-case-7"]["droppable"]


def test_tag_without_subjects_or_expiring_does_not_block():
    a = _analyze(
        [_ref("main", "branch", 3), _ref("clean", "tag", 2), _ref("old", "tag", 1, max_ref_age_ms=DAY)],
        holds={"clean": False, "old": True},
    )
    assert not a["clean"]["blocking"]
    assert a["old"]["action"] == "expires" and not a["old"]["blocking"]


def test_branches_with_live_rows_are_deleted_masked_rows_block():
    a = _analyze(
        [_ref("main", "branch", 3), _ref("dev", "branch", 4), _ref("audit", "branch", 2)],
        holds={"main": True, "dev": True, "audit": True},
        live={"main": 0, "dev": 3, "audit": 0},
    )
    assert a["dev"]["action"] == "delete" and not a["dev"]["blocking"]
    assert a["audit"]["blocking"] and "main only" in a["audit"]["reason"]
    assert not a["main"]["blocking"]  # masked rows on main are rewritten by rewrite_data_files


def test_branch_retention_keeping_history_blocks_main_is_not_droppable():
    a = _analyze(
        [
            _ref("main", "branch", 3, min_snapshots_to_keep=5),
            _ref("dev", "branch", 4, max_snapshot_age_ms=30 * DAY),
            _ref("short", "branch", 4, max_snapshot_age_ms=DAY),
        ],
        holds={},
        live={"main": 1, "dev": 1, "short": 1},
    )
    assert a["main"]["blocking"] and not a["main"]["droppable"]
    assert a["dev"]["blocking"] and "max-snapshot-age-ms" in a["dev"]["reason"]
    assert not a["short"]["blocking"]  # its pre-erasure ancestors are older than its max age
    assert not _analyze([_ref("main", "branch", 3, min_snapshots_to_keep=5)], holds={}, had=False)["main"]["blocking"]


def test_policies():
    analysis = lc.analyze_refs(
        [_ref("main", "branch", 3), _ref("release-1", "tag", 2), _ref("legal-hold-x", "tag", 2)],
        _snaps(),
        holds={"release-1": True, "legal-hold-x": True},
        live_rows={"main": 1},
        table_had_subjects=True,
        now_ms=NOW,
    )
    fail = lc.decide_policy(analysis, "fail")
    assert fail["refuse"] and "release-1" in fail["refuse"] and "legal-hold-x" in fail["refuse"]
    drop = lc.decide_policy(analysis, "drop")
    assert drop["refuse"] and "legal-hold-x" in drop["refuse"] and not drop["drop"]
    keep = lc.decide_policy(analysis, "keep")
    assert keep["refuse"] is None and {h["name"] for h in keep["held"]} == {"release-1", "legal-hold-x"}
    only_release = [a for a in analysis if a["name"] != "legal-hold-x"]
    drop = lc.decide_policy(only_release, "drop")
    assert drop["refuse"] is None and [d["name"] for d in drop["drop"]] == ["release-1"]
    assert lc.decide_policy([a for a in analysis if a["name"] == "main"], "fail")["refuse"] is None
    with pytest.raises(ValueError):
        lc.decide_policy(analysis, "ignore")


def test_outcomes_and_request_status():
    base = dict(rows_outside_holds=0, old_files_reachable=0, old_files_on_disk=0, bound_hits=0, held_rows=0)
    assert lc.verification_outcome(**base) == "verified"
    assert lc.verification_outcome(**{**base, "held_rows": 3}) == "incomplete"
    for key in ("rows_outside_holds", "old_files_reachable", "old_files_on_disk", "bound_hits"):
        assert lc.verification_outcome(**{**base, key: 1}) == "failed"
    assert lc.request_status(["verified", "verified"], 2) == "erased"
    assert lc.request_status(["verified"], 2) == "pending"
    assert lc.request_status(["verified", "incomplete"], 2) == "blocked"
    assert lc.request_status(["failed", "verified"], 2) == "pending"


def test_redact_removes_salt_and_subjects():
    msg = "AnalysisException: cannot cast 'alice@example.com' near salt s3cr3t-salt\n\tat org.apache.X\nsecond"
    out = es.redact(msg, ["alice@example.com", "s3cr3t-salt", "c1"])
    assert "alice" not in out and "s3cr3t" not in out and "[redacted]" in out and "org.apache" not in out


# -------------------------------------------------------------------- SQL builders
def test_delete_is_one_semi_join_without_values():
    sql = es.delete_sql("lakehouse", "db.orders", ["customer_id", "email"])
    assert sql == (
        "DELETE FROM `lakehouse`.`db`.`orders` WHERE `customer_id` IN (SELECT k FROM `erasure_keys_customer_id`) "
        "OR `email` IN (SELECT k FROM `erasure_keys_email`)"
    )
    assert es.delete_sql("lakehouse", "db.orders", ["c"], branch="dev-1").startswith(
        "DELETE FROM `lakehouse`.`db`.`orders`.`branch_dev-1` WHERE"
    )
    for bad in ("db.orders; DROP", "db.or`ders"):
        with pytest.raises(ValueError):
            es.delete_sql("lakehouse", bad, ["c"])
    with pytest.raises(ValueError):
        es.delete_sql("lakehouse", "db.orders", ["c) OR (1=1"])
    with pytest.raises(ValueError):
        es.delete_sql("lakehouse", "db.orders", ["c"], branch="x` y")


def test_procedure_calls():
    sql = es.expire_sql("lakehouse", "db.orders", 1_767_225_600_123)
    assert "older_than => TIMESTAMP '2026-01-01 00:00:00.123+00:00'" in sql and "retain_last => 1" in sql
    assert "'delete-file-threshold', '1'" in es.rewrite_data_files_sql("lakehouse", "db.orders")
    assert "rewrite_manifests(table => 'db.orders'" in es.rewrite_manifests_sql("lakehouse", "db.orders")
    assert es.drop_ref_sql("lakehouse", "db.orders", "release-1", "tag").endswith("DROP TAG IF EXISTS `release-1`")
    with pytest.raises(ValueError):
        es.drop_ref_sql("lakehouse", "db.orders", "main", "branch")


# ----------------------------------------------------------------------- validation
def test_validate_inputs(tmp_path):
    assert ep.validate_subject_columns("customer_id") == ["customer_id"]
    assert ep.validate_subject_columns(["a", "b"]) == ["a", "b"]
    for bad in ("", [], ["a", "a"], ["x y"], 5):
        with pytest.raises(IcebergValidationError):
            ep.validate_subject_columns(bad)
    assert ep.validate_request_ids("R-1, R-2") == ["R-1", "R-2"]
    assert ep.validate_request_ids(None) is None
    with pytest.raises(IcebergValidationError, match="never pass subject values"):
        ep.validate_request_ids(["alice@example.com"])
    with pytest.raises(IcebergValidationError):
        ep.validate_ref_policy("ignore")
    with pytest.raises(IcebergValidationError, match="16 characters"):
        ep.validate_salt("short", "connection 'erasure_salt'")
    assert ep.validate_salt("x" * 16, "c") == "x" * 16


def test_subjects_file_rules(tmp_path):
    f = tmp_path / "subjects.jsonl"
    f.write_text('{"request_id": "R-1", "subject_key": "c1"}\n')
    os.chmod(f, 0o600)
    assert ep.validate_subjects_file(str(f)) == (str(f.resolve()), "json")
    os.chmod(f, 0o644)
    with pytest.raises(IcebergValidationError, match="chmod 600"):
        ep.validate_subjects_file(str(f))
    with pytest.raises(IcebergValidationError, match="extension"):
        ep.validate_subjects_file(str(tmp_path / "subjects.txt"))
    with pytest.raises(IcebergValidationError, match="does not exist"):
        ep.validate_subjects_file(str(tmp_path / "missing.csv"))


def _facts(**kw):
    base = {
        "table": "db.t",
        "columns": ["customer_id"],
        "schema_fields": {"customer_id": "string", "order_ts": "timestamptz"},
        "partition_fields": [("order_ts", "day")],
        "properties": {},
        "format_version": 2,
        "equality_delete_files": 0,
    }
    return {**base, **kw}


def test_table_problems():
    assert ep.table_problems(**_facts()) == []
    assert "do not exist" in ep.table_problems(**_facts(columns=["email"]))[0]
    assert "paths" in ep.table_problems(**_facts(partition_fields=[("customer_id", "identity")]))[0]
    assert ep.table_problems(**_facts(partition_fields=[("customer_id", "truncate[4]")]))
    assert ep.table_problems(**_facts(partition_fields=[("customer_id", "bucket[16]")])) == []
    assert "equality-delete" in ep.table_problems(**_facts(equality_delete_files=2))[0]
    assert "parquet" in ep.table_problems(**_facts(properties={"write.format.default": "orc"}))[0]
    assert "gc.enabled" in ep.table_problems(**_facts(properties={"gc.enabled": "false"}))[0]
    assert ep.table_problems(**_facts(format_version=3)) == []  # deletion vectors: erased by Spark
    assert "format-version 4" in ep.table_problems(**_facts(format_version=4))[0]
    assert "type" in ep.table_problems(**_facts(schema_fields={"customer_id": "binary"}))[0]
    with pytest.raises(IcebergRefusedError, match="nothing was changed"):
        ep.refuse_if_problems(["x"])


def test_overdue_requests():
    from datetime import UTC, datetime, timedelta

    now = datetime(2026, 3, 1, tzinfo=UTC)
    rows = [
        {"request_id": "old-erased", "received_at": now - timedelta(days=60), "status": "erased"},
        {"request_id": "old-open", "received_at": now - timedelta(days=31), "status": "pending"},
        {"request_id": "old-blocked", "received_at": now - timedelta(days=40), "status": "blocked"},
        {"request_id": "new", "received_at": now - timedelta(days=3), "status": "pending"},
    ]
    out = ep.overdue_requests(rows, now=now, deadline=timedelta(days=30))
    assert [r["request_id"] for r in out] == ["old-blocked", "old-open"]


def test_job_path_normalisation_and_import_without_pyspark():
    from airflow_iceberg_provider.spark_jobs.erasure import run as job

    assert (
        job.norm_path("file:/tmp/w/a%20b.parquet") == job.norm_path("file:///tmp/w/a b.parquet") == "/tmp/w/a b.parquet"
    )
    assert job.norm_path("s3://bucket/k.parquet") == "s3://bucket/k.parquet"
