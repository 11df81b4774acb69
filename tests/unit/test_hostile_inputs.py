"""Hostile and malformed input against every public operator and hook entry point (no Spark).

The corpus is data (``tests/support/hostile_inputs.py``). Every (entry point, value) pair must either

* raise :class:`IcebergValidationError` whose message names the parameter (``invalid``), with the
  metadata location of **every** table in the catalog unchanged (governance tables included),
* or be handled safely as data (``data``): a provider error or a result, never a raw crash,
  and the user tables' metadata unchanged.

No Spark job may start: ``IcebergSparkHook.submit`` is replaced by a guard that fails the test
(a hostile value must be refused before any job). Values also arrive through templates: a
subset of cases renders ``"{{ hostile }}"`` first, as Airflow does for templated fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from airflow_iceberg_provider import exceptions as exc
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook, job_path
from airflow_iceberg_provider.operators import (
    erasure,
    expiry,
    maintenance,
    refs,
    spark,
    table,
    wap_audit,
    wap_branch,
    wap_publish,
    wap_write,
)
from airflow_iceberg_provider.sensors.erasure import IcebergErasureDeadlineSensor
from airflow_iceberg_provider.sensors.snapshot import IcebergSnapshotSensor
from tests.support.erasure import SALT, add_requests
from tests.support.hostile_inputs import (
    COLUMNS,
    COUNTS,
    DURATIONS,
    MALFORMED_SPECS,
    REFS,
    REQUEST_IDS,
    SQL_FRAGMENTS,
    TABLES,
    TIMESTAMPS,
)
from tests.support.lake import append_batches, create_orders_table, fake_context
from tests.support.wap import record_audit

pytestmark = pytest.mark.security

T = "db.orders"
CHECKS = {"column_mapping": {"amount": {"min": {"geq_to": 0}}}}
SQL = "INSERT INTO {table} VALUES (1, 'c', 'ca', 1.0, TIMESTAMP '2026-01-01 00:00:00')"
PROVIDER_ERRORS = (
    exc.IcebergProviderError,
    exc.IcebergValidationError,
    exc.IcebergRefusedError,
    exc.IcebergRefNotFoundError,
    exc.IcebergTableNotFoundError,
    exc.IcebergCommitVerificationError,
    exc.IcebergConnectionError,
    exc.IcebergPublishConflictError,
)


class SparkReached(AssertionError):
    """A hostile value got as far as spark-submit."""


@pytest.fixture(scope="module")
def hostile_lake(module_lake):
    """db.orders (3 snapshots, tag release-1, branch dev, a legal hold, an audited WAP branch), db.requests.

    Module-scoped (hundreds of cases): a case that wrongly changed something fails on its own
    metadata check.
    """
    lake = module_lake
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_CONN_ERASURE_SALT", json.dumps({"conn_type": "generic", "password": SALT}))

        def guard(self, plan):
            raise SparkReached(f"spark-submit reached with {plan.spec!r:.300}")

        mp.setattr(IcebergSparkHook, "submit", guard)
        create_orders_table(lake, T)
        ids = append_batches(lake, T, 3)
        lake.create_tag(T, "release-1", snapshot_id=ids[0])
        lake.create_tag(T, "legal-hold-case-1", snapshot_id=ids[1])
        lake.create_branch(T, "dev", snapshot_id=ids[1])
        record_audit(lake, T, "dev", ids[1])
        add_requests(lake, "db.requests", {"R-1": "someone@example.com"})
        lake.ensure_table_properties(T, {"write.wap.enabled": "true"})
        lake.governance.table("ledger")
        yield lake, ids


def all_locations(hook) -> dict[str, str | None]:
    out = {}
    for ns in hook.catalog.list_namespaces():
        for ident in hook.catalog.list_tables(ns):
            name = ".".join(ident[-2:])
            out[name] = hook.metadata_location(name)
    return out


# --------------------------------------------------------------------------- entry points
# Each entry point: (name, parameter named in the error, callable(value, ctx, ids) -> Any).
Entry = tuple[str, str, Callable[[Any, dict, list[int]], Any]]


def _ex(op, ctx):
    return op.execute(ctx)


def _poke(sensor, ctx):
    return sensor.poke(ctx)


TABLE_ENTRIES: list[Entry] = [
    (
        "create_table",
        "table",
        lambda v, c, i: _ex(table.IcebergCreateTableOperator(task_id="t", table=v, columns={"a": "long"}), c),
    ),
    (
        "spark_submit",
        "table",
        lambda v, c, i: _ex(spark.IcebergSparkSubmitOperator(task_id="t", table=v, application="/x.py"), c),
    ),
    (
        "wap_branch",
        "table",
        lambda v, c, i: _ex(wap_branch.IcebergWapCreateBranchOperator(task_id="t", table=v, branch="b"), c),
    ),
    (
        "wap_write",
        "table",
        lambda v, c, i: _ex(wap_write.IcebergWapWriteOperator(task_id="t", table=v, branch="b", sql=SQL), c),
    ),
    (
        "wap_audit",
        "table",
        lambda v, c, i: _ex(wap_audit.IcebergWapAuditOperator(task_id="t", table=v, branch="dev", **CHECKS), c),
    ),
    (
        "wap_publish",
        "table",
        lambda v, c, i: _ex(wap_publish.IcebergWapPublishOperator(task_id="t", table=v, branch="dev"), c),
    ),
    ("create_tag", "table", lambda v, c, i: _ex(refs.IcebergCreateTagOperator(task_id="t", table=v, tag="x"), c)),
    (
        "create_branch",
        "table",
        lambda v, c, i: _ex(refs.IcebergCreateBranchOperator(task_id="t", table=v, branch="x"), c),
    ),
    ("drop_tag", "table", lambda v, c, i: _ex(refs.IcebergDropTagOperator(task_id="t", table=v, tag="release-1"), c)),
    (
        "drop_branch",
        "table",
        lambda v, c, i: _ex(refs.IcebergDropBranchOperator(task_id="t", table=v, branch="dev"), c),
    ),
    (
        "rollback",
        "table",
        lambda v, c, i: _ex(refs.IcebergRollbackOperator(task_id="t", table=v, to_snapshot_id=i[0]), c),
    ),
    ("commit_check", "table", lambda v, c, i: _ex(refs.IcebergCommitCheckOperator(task_id="t", table=v), c)),
    ("snapshot_sensor", "table", lambda v, c, i: _poke(IcebergSnapshotSensor(task_id="t", table=v), c)),
    (
        "expire",
        "table",
        lambda v, c, i: _ex(
            expiry.IcebergExpireSnapshotsOperator(task_id="t", table=v, older_than="0s", older_than_floor="0s"), c
        ),
    ),
    (
        "rewrite_data_files",
        "table",
        lambda v, c, i: _ex(maintenance.IcebergRewriteDataFilesOperator(task_id="t", table=v), c),
    ),
    (
        "rewrite_manifests",
        "table",
        lambda v, c, i: _ex(maintenance.IcebergRewriteManifestsOperator(task_id="t", table=v), c),
    ),
    (
        "rewrite_deletes",
        "table",
        lambda v, c, i: _ex(maintenance.IcebergRewritePositionDeleteFilesOperator(task_id="t", table=v), c),
    ),
    (
        "remove_orphans",
        "table",
        lambda v, c, i: _ex(maintenance.IcebergRemoveOrphanFilesOperator(task_id="t", table=v), c),
    ),
    (
        "maintenance_plan",
        "table",
        lambda v, c, i: _ex(maintenance.IcebergMaintenancePlanOperator(task_id="t", table=v, force=True), c),
    ),
    (
        "erasure",
        "table",
        lambda v, c, i: _ex(
            erasure.IcebergErasureOperator(
                task_id="t", table=v, subject_columns="customer_id", requests_table="db.requests"
            ),
            c,
        ),
    ),
    (
        "erasure_requests_table",
        "requests_table",
        lambda v, c, i: _ex(
            erasure.IcebergErasureOperator(task_id="t", table=T, subject_columns="customer_id", requests_table=v), c
        ),
    ),
    (
        "erasure_scope",
        "tables_in_scope",
        lambda v, c, i: _ex(
            erasure.IcebergErasureOperator(
                task_id="t",
                table=T,
                subject_columns="customer_id",
                requests_table="db.requests",
                tables_in_scope=[T, v],
            ),
            c,
        ),
    ),
    (
        "deadline_sensor",
        "requests_table",
        lambda v, c, i: _poke(IcebergErasureDeadlineSensor(task_id="t", requests_table=v), c),
    ),
    ("hook.load_table", "table", lambda v, c, i: c["hook"].load_table(v)),
    ("hook.metadata_location", "table", lambda v, c, i: c["hook"].metadata_location(v)),
    ("hook.poll_commit", "table", lambda v, c, i: c["hook"].poll_commit(v)),
    ("hook.requests_table", "requests_table", lambda v, c, i: c["hook"].governance.ensure_erasure_requests_table(v)),
]

REF_ENTRIES: list[Entry] = [
    (
        "wap_branch.branch",
        "branch",
        lambda v, c, i: _ex(wap_branch.IcebergWapCreateBranchOperator(task_id="t", table=T, branch=v), c),
    ),
    (
        "wap_branch.from_ref",
        "from_ref",
        lambda v, c, i: _ex(
            wap_branch.IcebergWapCreateBranchOperator(task_id="t", table=T, branch="dev", from_ref=v), c
        ),
    ),
    (
        "wap_write.branch",
        "branch",
        lambda v, c, i: _ex(wap_write.IcebergWapWriteOperator(task_id="t", table=T, branch=v, sql=SQL), c),
    ),
    (
        "wap_audit.branch",
        "branch",
        lambda v, c, i: _ex(wap_audit.IcebergWapAuditOperator(task_id="t", table=T, branch=v, **CHECKS), c),
    ),
    (
        "wap_publish.branch",
        "branch",
        lambda v, c, i: _ex(wap_publish.IcebergWapPublishOperator(task_id="t", table=T, branch=v), c),
    ),
    (
        "wap_publish.tag",
        "tag",
        lambda v, c, i: _ex(wap_publish.IcebergWapPublishOperator(task_id="t", table=T, branch="dev", tag=v), c),
    ),
    ("create_tag.tag", "tag", lambda v, c, i: _ex(refs.IcebergCreateTagOperator(task_id="t", table=T, tag=v), c)),
    (
        "create_tag.ref",
        "ref",
        lambda v, c, i: _ex(refs.IcebergCreateTagOperator(task_id="t", table=T, tag="release-1", ref=v), c),
    ),
    (
        "create_branch.branch",
        "branch",
        lambda v, c, i: _ex(refs.IcebergCreateBranchOperator(task_id="t", table=T, branch=v), c),
    ),
    ("drop_tag.tag", "tag", lambda v, c, i: _ex(refs.IcebergDropTagOperator(task_id="t", table=T, tag=v), c)),
    (
        "drop_branch.branch",
        "branch",
        lambda v, c, i: _ex(refs.IcebergDropBranchOperator(task_id="t", table=T, branch=v), c),
    ),
    (
        "rollback.ref",
        "ref",
        lambda v, c, i: _ex(refs.IcebergRollbackOperator(task_id="t", table=T, ref=v, to_snapshot_id=i[2]), c),
    ),
    ("rollback.to_tag", "to_tag", lambda v, c, i: _ex(refs.IcebergRollbackOperator(task_id="t", table=T, to_tag=v), c)),
    ("commit_check.ref", "ref", lambda v, c, i: _ex(refs.IcebergCommitCheckOperator(task_id="t", table=T, ref=v), c)),
    ("snapshot_sensor.ref", "ref", lambda v, c, i: _poke(IcebergSnapshotSensor(task_id="t", table=T, ref=v), c)),
    (
        "rewrite_data_files.branch",
        "branch",
        lambda v, c, i: _ex(maintenance.IcebergRewriteDataFilesOperator(task_id="t", table=T, branch=v), c),
    ),
    (
        "spark_submit.ref",
        "ref",
        lambda v, c, i: _ex(spark.IcebergSparkSubmitOperator(task_id="t", table=T, application="/x.py", ref=v), c),
    ),
    ("hook.create_tag", "tag", lambda v, c, i: c["hook"].create_tag(T, v, snapshot_id=i[0])),
    ("hook.create_branch", "branch", lambda v, c, i: c["hook"].create_branch(T, v, snapshot_id=i[0])),
    ("hook.remove_ref", "ref", lambda v, c, i: c["hook"].remove_ref(T, v)),
    ("hook.set_ref", "ref", lambda v, c, i: c["hook"].set_ref(T, v, i[0])),
    ("hook.fast_forward", "ref", lambda v, c, i: c["hook"].fast_forward(T, ref=v, to_snapshot_id=i[2])),
]
#: params where an existing-looking ref is legitimate input (the value is then data, not an attack)
REF_PARAMS_ALLOWING_MAIN = {
    "wap_branch.from_ref",
    "create_tag.ref",
    "rollback.ref",
    "commit_check.ref",
    "snapshot_sensor.ref",
    "rollback.to_tag",
}
#: cases that legitimately proceed (a real ref move or a Spark job): not hostile, not run here
SKIP = {(e, lb) for e in ("spark_submit.ref", "hook.set_ref", "hook.fast_forward") for lb in ("main", "main_upper")} | {
    ("rewrite_data_files.branch", "main"),
    ("hook.create_branch", "main_upper"),
}

COLUMN_ENTRIES: list[Entry] = [
    (
        "audit.column_mapping",
        "column_mapping",
        lambda v, c, i: _ex(
            wap_audit.IcebergWapAuditOperator(
                task_id="t", table=T, branch="dev", column_mapping={v: {"null_check": {"equal_to": 0}}}
            ),
            c,
        ),
    ),
    (
        "erasure.subject_columns",
        "subject_columns",
        lambda v, c, i: _ex(
            erasure.IcebergErasureOperator(task_id="t", table=T, subject_columns=[v], requests_table="db.requests"), c
        ),
    ),
    (
        "create_table.columns",
        "columns",
        lambda v, c, i: _ex(table.IcebergCreateTableOperator(task_id="t", table="db.new", columns={v: "long"}), c),
    ),
    (
        "rewrite.sort_order",
        "sort_order",
        lambda v, c, i: _ex(
            maintenance.IcebergRewriteDataFilesOperator(task_id="t", table=T, strategy="sort", sort_order=f"{v} DESC"),
            c,
        ),
    ),
]

SQL_ENTRIES: list[Entry] = [
    (
        "audit.check_statement",
        "check_statement",
        lambda v, c, i: _ex(
            wap_audit.IcebergWapAuditOperator(
                task_id="t", table=T, branch="dev", table_checks={"c": {"check_statement": v}}
            ),
            c,
        ),
    ),
    (
        "audit.partition_clause",
        "partition_clause",
        lambda v, c, i: _ex(
            wap_audit.IcebergWapAuditOperator(task_id="t", table=T, branch="dev", partition_clause=v, **CHECKS), c
        ),
    ),
    (
        "audit.column_partition_clause",
        "partition_clause",
        lambda v, c, i: _ex(
            wap_audit.IcebergWapAuditOperator(
                task_id="t",
                table=T,
                branch="dev",
                column_mapping={"amount": {"min": {"geq_to": 0, "partition_clause": v}}},
            ),
            c,
        ),
    ),
    (
        "write.replace_where",
        "replace_where",
        lambda v, c, i: _ex(
            wap_write.IcebergWapWriteOperator(
                task_id="t", table=T, branch="b", sql=SQL, on_rerun="replace", replace_where=v
            ),
            c,
        ),
    ),
    (
        "rewrite_data_files.where",
        "where",
        lambda v, c, i: _ex(maintenance.IcebergRewriteDataFilesOperator(task_id="t", table=T, where=v), c),
    ),
    (
        "rewrite_deletes.where",
        "where",
        lambda v, c, i: _ex(maintenance.IcebergRewritePositionDeleteFilesOperator(task_id="t", table=T, where=v), c),
    ),
]

REQUEST_ID_ENTRIES: list[Entry] = [
    (
        "erasure.request_ids",
        "request_ids",
        lambda v, c, i: _ex(
            erasure.IcebergErasureOperator(
                task_id="t", table=T, subject_columns="customer_id", requests_table="db.requests", request_ids=v
            ),
            c,
        ),
    ),
]

DURATION_ENTRIES: list[Entry] = [
    (
        "create_tag.max_ref_age",
        "max_ref_age",
        lambda v, c, i: _ex(refs.IcebergCreateTagOperator(task_id="t", table=T, tag="x", max_ref_age=v), c),
    ),
    (
        "create_branch.max_ref_age",
        "max_ref_age",
        lambda v, c, i: _ex(refs.IcebergCreateBranchOperator(task_id="t", table=T, branch="x", max_ref_age=v), c),
    ),
    (
        "create_branch.max_snapshot_age",
        "max_snapshot_age",
        lambda v, c, i: _ex(refs.IcebergCreateBranchOperator(task_id="t", table=T, branch="x", max_snapshot_age=v), c),
    ),
    (
        "expire.older_than_floor",
        "older_than_floor",
        lambda v, c, i: _ex(
            expiry.IcebergExpireSnapshotsOperator(task_id="t", table=T, older_than="30d", older_than_floor=v), c
        ),
    ),
    (
        "erasure_sensor.deadline_days",
        "deadline_days",
        lambda v, c, i: _poke(
            IcebergErasureDeadlineSensor(task_id="t", requests_table="db.requests", deadline_days=v), c
        ),
    ),
]

COUNT_ENTRIES: list[Entry] = [
    (
        "expire.retain_last",
        "retain_last",
        lambda v, c, i: _ex(
            expiry.IcebergExpireSnapshotsOperator(task_id="t", table=T, older_than="30d", retain_last=v), c
        ),
    ),
    (
        "plan.retain_last",
        "retain_last",
        lambda v, c, i: _ex(
            maintenance.IcebergMaintenancePlanOperator(task_id="t", table=T, retain_last=v, force=True), c
        ),
    ),
    (
        "create_branch.min_snapshots_to_keep",
        "min_snapshots_to_keep",
        lambda v, c, i: _ex(
            refs.IcebergCreateBranchOperator(task_id="t", table=T, branch="x", min_snapshots_to_keep=v), c
        ),
    ),
    (
        "commit_check.min_commits",
        "min_commits",
        lambda v, c, i: _ex(refs.IcebergCommitCheckOperator(task_id="t", table=T, min_commits=v), c),
    ),
    (
        "rewrite.target_file_size_bytes",
        "target_file_size_bytes",
        lambda v, c, i: _ex(
            maintenance.IcebergRewriteDataFilesOperator(task_id="t", table=T, target_file_size_bytes=v), c
        ),
    ),
]

TIMESTAMP_ENTRIES: list[Entry] = [
    (
        "rollback.to_timestamp",
        "to_timestamp",
        lambda v, c, i: _ex(refs.IcebergRollbackOperator(task_id="t", table=T, to_timestamp=v), c),
    ),
    (
        "commit_check.since",
        "since",
        lambda v, c, i: _ex(refs.IcebergCommitCheckOperator(task_id="t", table=T, since=v), c),
    ),
    (
        "snapshot_sensor.after_timestamp",
        "after_timestamp",
        lambda v, c, i: _poke(IcebergSnapshotSensor(task_id="t", table=T, after_timestamp=v), c),
    ),
    (
        "expire.older_than",
        "older_than",
        lambda v, c, i: _ex(expiry.IcebergExpireSnapshotsOperator(task_id="t", table=T, older_than=v), c),
    ),
    (
        "remove_orphans.older_than",
        "older_than",
        lambda v, c, i: _ex(maintenance.IcebergRemoveOrphanFilesOperator(task_id="t", table=T, older_than=v), c),
    ),
    (
        "plan.expire_older_than",
        "expire_older_than",
        lambda v, c, i: _ex(
            maintenance.IcebergMaintenancePlanOperator(task_id="t", table=T, expire_older_than=v, force=True), c
        ),
    ),
]
#: timestamps that are valid instants for "find commits since/as of" (a far-future one simply matches nothing)
TIMESTAMP_DATA = {("rollback.to_timestamp", lb) for lb in ("far_future", "year_9999", "overflowing_epoch_ms")} | {
    (e, lb)
    for e in ("commit_check.since", "snapshot_sensor.after_timestamp")
    for lb in ("far_future", "year_9999", "overflowing_epoch_ms")
}

SPEC_ENTRIES: list[Entry] = [
    (
        "audit.column_mapping",
        "column_mapping",
        lambda v, c, i: _ex(wap_audit.IcebergWapAuditOperator(task_id="t", table=T, branch="dev", column_mapping=v), c),
    ),
    (
        "audit.table_checks",
        "table_checks",
        lambda v, c, i: _ex(wap_audit.IcebergWapAuditOperator(task_id="t", table=T, branch="dev", table_checks=v), c),
    ),
    (
        "audit.change_checks",
        "change_checks",
        lambda v, c, i: _ex(wap_audit.IcebergWapAuditOperator(task_id="t", table=T, branch="dev", change_checks=v), c),
    ),
    (
        "commit_check.summary",
        "summary",
        lambda v, c, i: _ex(refs.IcebergCommitCheckOperator(task_id="t", table=T, summary=v), c),
    ),
    (
        "snapshot_sensor.summary",
        "summary",
        lambda v, c, i: _poke(IcebergSnapshotSensor(task_id="t", table=T, summary=v), c),
    ),
    (
        "rewrite.options",
        "options",
        lambda v, c, i: _ex(maintenance.IcebergRewriteDataFilesOperator(task_id="t", table=T, options=v), c),
    ),
    (
        "spark_submit.params_for_job",
        "params_for_job",
        lambda v, c, i: _ex(
            spark.IcebergSparkSubmitOperator(task_id="t", table=T, application="/x.py", params_for_job=v), c
        ),
    ),
]
#: a mapping where only a mapping of plain values belongs is data for the summary matchers and job params
SPEC_DATA = {
    (e, lb)
    for e in ("commit_check.summary", "snapshot_sensor.summary")
    for lb in ("threshold_sql", "threshold_nan", "unknown_check", "contradiction", "not_a_mapping", "empty_checks")
}
SKIP |= {
    ("spark_submit.params_for_job", lb)
    for lb in ("threshold_sql", "threshold_nan", "unknown_check", "contradiction", "not_a_mapping", "empty_checks")
}  # job params are data for the job
SKIP |= {("expire.older_than_floor", "zero_iso")}  # a zero floor is legitimate (tests use it)
# whitespace in a sort order is normalised ("amount\n DESC" is "amount DESC"), a valid compaction
SKIP |= {("rewrite.sort_order", "trailing_newline")}


def _cases() -> list[Any]:
    groups = [
        (TABLE_ENTRIES, TABLES, set()),
        (REF_ENTRIES, REFS, {(e, lb) for e in REF_PARAMS_ALLOWING_MAIN for lb in ("main", "main_upper")}),
        (COLUMN_ENTRIES, COLUMNS, set()),
        (SQL_ENTRIES, SQL_FRAGMENTS, set()),
        (REQUEST_ID_ENTRIES, REQUEST_IDS, set()),
        (DURATION_ENTRIES, DURATIONS, set()),
        (COUNT_ENTRIES, COUNTS, set()),
        (TIMESTAMP_ENTRIES, TIMESTAMPS, TIMESTAMP_DATA),
        (SPEC_ENTRIES, MALFORMED_SPECS, SPEC_DATA),
    ]
    out = []
    for entries, values, data in groups:
        for name, param, fn in entries:
            for label, value in values:
                if (name, label) in SKIP:
                    continue
                expect = "data" if (name, label) in data else "invalid"
                out.append(pytest.param(fn, param, value, expect, id=f"{name}-{label}"))
    return out


CASES = _cases()


def test_corpus_is_large_enough():
    corpus = TABLES + REFS + COLUMNS + SQL_FRAGMENTS + REQUEST_IDS + DURATIONS + COUNTS + TIMESTAMPS + MALFORMED_SPECS
    assert len(corpus) >= 50 and len(CASES) >= 500


@pytest.mark.parametrize(("fn", "param", "value", "expect"), CASES)
def test_hostile_input_is_refused_before_any_change(hostile_lake, fn, param, value, expect):
    hook, ids = hostile_lake
    before = all_locations(hook)
    ctx = {**fake_context(dag_id="hostile", run_id="r1"), "hook": hook}
    try:
        fn(value, ctx, ids)
    except exc.IcebergValidationError as err:
        assert param in str(err), f"error does not name {param!r}: {err}"
        if expect == "invalid":
            assert all_locations(hook) == before, "a refused input changed a table"
        return
    except SparkReached:
        raise
    except PROVIDER_ERRORS as err:
        assert expect == "data", f"expected a validation error naming {param!r}, got {type(err).__name__}: {err}"
    else:
        assert expect == "data", f"{param}={value!r:.80} was accepted"
    user_tables = {k: v for k, v in before.items() if not k.startswith("governance.")}
    after = {k: v for k, v in all_locations(hook).items() if k in user_tables}
    assert after == user_tables, "hostile data changed a user table"


TEMPLATED = [
    (
        "wap_branch.branch",
        lambda: wap_branch.IcebergWapCreateBranchOperator(task_id="t", table=T, branch="{{ hostile }}"),
        "branch",
        REFS,
    ),
    ("create_tag.tag", lambda: refs.IcebergCreateTagOperator(task_id="t", table=T, tag="{{ hostile }}"), "tag", REFS),
    (
        "drop_branch.branch",
        lambda: refs.IcebergDropBranchOperator(task_id="t", table=T, branch="{{ hostile }}"),
        "branch",
        REFS,
    ),
    (
        "commit_check.table",
        lambda: refs.IcebergCommitCheckOperator(task_id="t", table="{{ hostile }}"),
        "table",
        TABLES,
    ),
    (
        "publish.table",
        lambda: wap_publish.IcebergWapPublishOperator(task_id="t", table="{{ hostile }}", branch="dev"),
        "table",
        TABLES,
    ),
    (
        "erasure.requests_table",
        lambda: erasure.IcebergErasureOperator(
            task_id="t", table=T, subject_columns="customer_id", requests_table="{{ hostile }}"
        ),
        "requests_table",
        TABLES,
    ),
    (
        "audit.partition_clause",
        lambda: wap_audit.IcebergWapAuditOperator(
            task_id="t", table=T, branch="dev", partition_clause="{{ hostile }}", **CHECKS
        ),
        "partition_clause",
        SQL_FRAGMENTS,
    ),
    (
        "rewrite.where",
        lambda: maintenance.IcebergRewriteDataFilesOperator(task_id="t", table=T, where="{{ hostile }}"),
        "where",
        SQL_FRAGMENTS,
    ),
    (
        "audit.check_statement",
        lambda: wap_audit.IcebergWapAuditOperator(
            task_id="t", table=T, branch="dev", table_checks={"c": {"check_statement": "{{ hostile }}"}}
        ),
        "check_statement",
        SQL_FRAGMENTS,
    ),
    (
        "write.replace_where",
        lambda: wap_write.IcebergWapWriteOperator(
            task_id="t", table=T, branch="b", sql=SQL, on_rerun="replace", replace_where="{{ hostile }}"
        ),
        "replace_where",
        SQL_FRAGMENTS,
    ),
]


@pytest.mark.parametrize(
    ("factory", "param", "value"),
    [
        pytest.param(f, p, v, id=f"{n}-{label}")
        for n, f, p, group in TEMPLATED
        for label, v in group
        if isinstance(v, str) and v.strip() and v.strip() != "main"
    ],
)
def test_hostile_value_through_a_template(hostile_lake, factory, param, value):
    hook, _ = hostile_lake
    before = all_locations(hook)
    op = factory()
    ctx = {**fake_context(dag_id="hostile", run_id="r1"), "hostile": value}
    op.render_template_fields(ctx)
    with pytest.raises(exc.IcebergValidationError, match=param):
        op.execute(ctx)
    assert all_locations(hook) == before


def test_huge_valid_request_list_travels_in_the_spec_file_not_argv(hostile_lake, monkeypatch):
    """100,000 request ids are data: accepted, and put in the job spec (a file), never on argv."""
    hook, _ = hostile_lake
    seen = {}

    def capture(self, plan):
        seen["plan"] = plan
        raise SparkReached("captured")

    monkeypatch.setattr(IcebergSparkHook, "submit", capture)
    ids = [f"R-{i}" for i in range(100_000)]
    op = erasure.IcebergErasureOperator(
        task_id="t", table=T, subject_columns="customer_id", requests_table="db.requests", request_ids=ids
    )
    with pytest.raises(SparkReached):
        op.execute(fake_context())
    plan = seen["plan"]
    assert plan.spec["source"]["request_ids"] == ids
    argv = " ".join([*plan.application_args, *(f"{k}={v}" for k, v in plan.conf.items())])
    assert "R-99999" not in argv and SALT not in argv and SALT not in json.dumps(plan.conf)


def test_spark_job_names_cannot_escape_the_jobs_directory():
    for name in ("../operators/wap", "/etc/passwd", "maintenance; rm -rf /", "", "wap_write\n"):
        with pytest.raises(ValueError, match="job"):
            job_path(name)
    assert job_path("maintenance").name == "maintenance.py"
