"""Format version 3: the pure rules (who commits, what is refused), the Spark ref statements, and
every catalog-side refusal on a real v3 table (pyiceberg reads it, writes nothing, and the table's
metadata location stays where it was)."""

from __future__ import annotations

import pytest

from airflow_iceberg_provider.core.ref_guard import RefGuardRefusal, RefState
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.operators.maintenance import IcebergRewritePositionDeleteFilesOperator
from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator
from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator
from airflow_iceberg_provider.operators.table_changes import IcebergAlterTableOperator
from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
from airflow_iceberg_provider.rules import format_version as fv
from airflow_iceberg_provider.rules.refs import RefChange, expectation_problems, landed_problems
from airflow_iceberg_provider.spark_jobs.ref_sql import RefChangeConflict, ref_change_sql, retention_clause
from tests.support.lake import (
    ORDERS_COLUMNS,
    append_batches,
    create_orders_table,
    fake_context,
    format_v3_copy,
)

T = "db.orders"
NO_SPARK = {"spark_conn_id": "no_such_spark_conn"}


# ------------------------------------------------------------------ the pure rules
@pytest.mark.parametrize(("value", "version"), [("1", 1), ("2", 2), (" 3 ", 3), (3, 3)])
def test_format_versions_accepted(value, version):
    assert fv.format_version(value) == version


@pytest.mark.parametrize("value", ["4", "0", "v3", "", None, "2.0"])
def test_other_format_versions_are_refused_by_parameter(value):
    with pytest.raises(IcebergValidationError, match=r"properties\['format-version'\]=.*give one of '1', '2', '3'"):
        fv.format_version(value)


def test_requested_format_version_defaults_to_2():
    assert fv.requested_format_version({}) == 2
    assert fv.requested_format_version({"format-version": "3"}) == 3


@pytest.mark.parametrize(
    ("version", "catalog", "route"),
    [
        (1, "sql", "catalog"),
        (2, "sql", "catalog"),
        (2, "glue", "catalog"),
        (3, "rest", "catalog"),
        (3, "REST", "catalog"),
    ]
    + [(3, kind, "spark") for kind in ("sql", "glue", "hive")],
)
def test_who_commits_ref_changes(version, catalog, route):
    assert fv.ref_change_route(version, catalog) == route
    assert fv.pyiceberg_commits(version, catalog) is (route == "catalog")
    assert (fv.commit_problem("db.t", version, catalog, change="tag 'x'", what="ref") is None) is (route == "catalog")


def test_no_catalog_lets_pyiceberg_write_v3_manifests():
    assert fv.pyiceberg_commits(2, "sql", fv.WRITES_MANIFESTS) and not fv.pyiceberg_commits(
        3, "rest", fv.WRITES_MANIFESTS
    )
    msg = fv.commit_problem("db.t", 3, "rest", change="on_rerun='replace' by data files", what=fv.WRITES_MANIFESTS)
    assert msg is not None and "writes manifests" in msg and "replace_where" in msg
    assert msg.endswith("Nothing was changed.")


def test_commit_problem_names_the_table_the_change_and_the_fix():
    msg = fv.commit_problem("db.t", 3, "sql", change="table properties ['a']", what="properties")
    assert msg is not None
    assert "table='db.t' is format-version 3" in msg and "table properties ['a']" in msg
    assert "ALTER TABLE ... SET TBLPROPERTIES" in msg and "REST catalog" in msg and msg.endswith("Nothing was changed.")


def test_create_problem_says_how_to_create_a_v3_table():
    assert fv.create_problem("db.t", 2, "sql") is None and fv.create_problem("db.t", 3, "rest") is None
    msg = fv.create_problem("db.t", 3, "sql")
    assert msg is not None and msg.startswith("properties['format-version']='3'")
    assert "TBLPROPERTIES ('format-version'='3')" in msg and msg.endswith("Nothing was created.")


def test_deletion_vectors_and_the_position_delete_rewrite():
    assert not fv.has_deletion_vectors(2) and fv.has_deletion_vectors(3)
    # one rule for both sides: the erasure job picks its logical delete with the same function
    from airflow_iceberg_provider.core import deletion_vectors
    from airflow_iceberg_provider.spark_jobs.erasure import logical

    assert fv.has_deletion_vectors is deletion_vectors.has_deletion_vectors is logical.has_deletion_vectors
    assert "format-version 1" in (fv.position_delete_rewrite_skip(1) or "")
    assert fv.position_delete_rewrite_skip(2) is None
    assert "deletion vectors" in (fv.position_delete_rewrite_skip(3) or "")


def test_ref_expectations_and_what_landed():
    refs = {"main": {"type": "branch", "snapshot_id": 2}, "b": {"type": "branch", "snapshot_id": 3}}
    publish = [RefChange("main", "branch", 3, 2), RefChange("b", "branch", None, 3), RefChange("t", "tag", 3, None)]
    assert expectation_problems(refs, publish) == []
    assert expectation_problems(refs, [RefChange("main", "branch", 3, 1)]) == [
        "ref 'main' points at 2, not 1 as planned"
    ]
    after = {"main": {"type": "branch", "snapshot_id": 3}, "t": {"type": "tag", "snapshot_id": 3}}
    assert landed_problems(after, publish) == []
    assert landed_problems(refs, publish) == [
        "'b' still exists",
        "'t' is a missing ref, not a tag",
        "'main' points at 2, not 3",
    ]


# ------------------------------------------------------------ the Spark ref statements
TBL = "`lakehouse`.`db`.`orders`"


def test_ref_statements_of_a_publish():
    main = RefState.of("main", "branch", 2)
    move = {"ref": "main", "ref_type": "branch", "snapshot_id": 3, "expected_snapshot_id": 2}
    assert ref_change_sql(TBL, T, move, main) == f"ALTER TABLE {TBL} REPLACE BRANCH `main` AS OF VERSION 3"
    tag = {
        "ref": "release-1",
        "ref_type": "tag",
        "snapshot_id": 3,
        "expected_snapshot_id": None,
        "max_ref_age_ms": 86_400_000,
    }
    assert (
        ref_change_sql(TBL, T, tag, RefState.of("release-1", None, None))
        == f"ALTER TABLE {TBL} CREATE TAG `release-1` AS OF VERSION 3 RETAIN 1440 MINUTES"
    )
    drop = {"ref": "wap_b", "ref_type": "branch", "snapshot_id": None, "expected_snapshot_id": 3}
    assert ref_change_sql(TBL, T, drop, RefState.of("wap_b", "branch", 3)) == (
        f"ALTER TABLE {TBL} DROP BRANCH IF EXISTS `wap_b`"
    )


def test_branch_retention_clause():
    change = {"ref": "b", "ref_type": "branch", "min_snapshots_to_keep": 2, "max_snapshot_age_ms": 120_000}
    assert retention_clause(change) == " WITH SNAPSHOT RETENTION 2 SNAPSHOTS 2 MINUTES"
    with pytest.raises(ValueError, match=r"max_ref_age_ms=1500 of ref 'b' is not a whole number of minutes"):
        retention_clause({"ref": "b", "ref_type": "branch", "max_ref_age_ms": 1500})


def test_a_ref_that_moved_stops_the_job_before_its_statement():
    move = {"ref": "main", "ref_type": "branch", "snapshot_id": 3, "expected_snapshot_id": 2}
    with pytest.raises(RefChangeConflict, match=r"Ref 'main' of db.orders points at 9, not 2 as planned"):
        ref_change_sql(TBL, T, move, RefState.of("main", "branch", 9))


def test_the_ref_guard_refuses_in_the_job_too():
    hold = {"ref": "legal-hold-case-1", "ref_type": "tag", "snapshot_id": None, "expected_snapshot_id": 3}
    with pytest.raises(RefGuardRefusal, match="legal hold"):
        ref_change_sql(TBL, T, hold, RefState.of("legal-hold-case-1", "tag", 3))


# ------------------------------------------------- a real v3 table behind the SQL catalog
@pytest.fixture
def v3(lake):
    create_orders_table(lake, T, properties={"write.wap.enabled": "true"})
    snaps = append_batches(lake, T, 2)
    location = format_v3_copy(lake, T)
    return lake, snaps, location


def test_pyiceberg_reads_the_v3_table_for_the_metadata_operations(v3):
    hook, snaps, location = v3
    tbl = hook.load_table(T)
    assert tbl.metadata.format_version == 3 and hook.metadata_location(T) == location
    assert hook.ref_snapshot_id(tbl) == snaps[-1]
    assert [s.snapshot_id for s in hook.ref_chain(tbl)] == snaps
    assert hook.health(tbl).format_version == 3
    assert tbl.scan().to_arrow().num_rows == 20
    assert hook.ref_change_route(tbl) == "spark"


@pytest.mark.parametrize(
    ("what", "call"),
    [
        ("tag", lambda h: h.create_tag(T, "release-1", snapshot_id=h.ref_snapshot_id(T))),
        ("branch", lambda h: h.create_branch(T, "side", snapshot_id=h.ref_snapshot_id(T))),
        ("properties", lambda h: h.ensure_table_properties(T, {"commit.retry.num-retries": "9"})),
        ("properties", lambda h: h.update_table_properties(T, updates={}, removals=["write.wap.enabled"])),
        ("rollback", lambda h: h.rollback(T, to_snapshot_id=h.ref_chain(T)[0].snapshot_id)),
    ],
)
def test_catalog_verbs_refuse_v3_with_the_fix_and_change_nothing(v3, what, call):
    hook, _, location = v3
    with pytest.raises(IcebergRefusedError, match=r"table='db.orders' is format-version 3.*Fix: .*Nothing was changed"):
        call(hook)
    assert hook.metadata_location(T) == location


def test_operators_without_a_spark_route_refuse_v3(v3):
    hook, _, location = v3
    cases = [
        (IcebergCreateTagOperator(task_id="t", table=T, tag="release-1"), "ALTER TABLE ... CREATE TAG"),
        (IcebergAlterTableOperator(task_id="a", table=T, add_columns={"note": "string"}), "evolve the table in Spark"),
    ]
    for op, fix in cases:
        with pytest.raises(IcebergRefusedError, match=r"format-version 3") as err:
            op.execute(fake_context())
        assert fix in str(err.value), op.task_id
        assert hook.metadata_location(T) == location, op.task_id


def test_the_wap_branch_is_left_to_the_write_on_v3(v3):
    hook, snaps, location = v3
    out = IcebergWapCreateBranchOperator(task_id="b", table=T, branch="wap_b").execute(fake_context())
    assert out["created"] is False and out["branch"] == "wap_b" and out["base_snapshot_id"] == str(snaps[-1])
    assert "wap_b" not in hook.refs(T) and hook.metadata_location(T) == location


def test_the_wap_branch_needs_wap_enabled_set_in_spark_on_v3(lake):
    create_orders_table(lake, T)
    append_batches(lake, T, 1)
    location = format_v3_copy(lake, T)
    with pytest.raises(IcebergRefusedError, match=r"write.wap.enabled.*SET TBLPROPERTIES"):
        IcebergWapCreateBranchOperator(task_id="b", table=T, branch="wap_b").execute(fake_context())
    assert lake.metadata_location(T) == location


def test_position_delete_rewrite_is_refused_before_any_job_on_v3(v3):
    hook, _, location = v3
    op = IcebergRewritePositionDeleteFilesOperator(task_id="r", table=T, **NO_SPARK)
    with pytest.raises(IcebergValidationError, match=r"table='db.orders': format-version 3 .*deletion vectors"):
        op.execute(fake_context())
    assert hook.metadata_location(T) == location


def test_create_table_at_v3_is_refused_on_the_sql_catalog_and_creates_nothing(lake):
    op = IcebergCreateTableOperator(
        task_id="c", table="db.v3", columns=ORDERS_COLUMNS, properties={"format-version": "3"}
    )
    with pytest.raises(
        IcebergRefusedError, match=r"properties\['format-version'\]='3'.*CREATE TABLE .*Nothing was created"
    ):
        op.execute(fake_context())
    assert not lake.table_exists("db.v3")
    with pytest.raises(IcebergValidationError, match=r"properties\['format-version'\]='4'"):
        IcebergCreateTableOperator(
            task_id="c", table="db.v4", columns=ORDERS_COLUMNS, properties={"format-version": "4"}
        )


def test_create_table_accepts_an_existing_v3_table_made_by_spark(v3):
    hook, _, location = v3
    out = IcebergCreateTableOperator(
        task_id="c",
        table=T,
        columns=dict(ORDERS_COLUMNS),
        partition_by=["day(order_ts)"],
        properties={"format-version": "3", "write.wap.enabled": "true"},
    ).execute(fake_context())
    assert out["table"] == T and out["created"] is False
    assert hook.metadata_location(T) == location


def test_pin_by_write_defers_only_a_creation_on_the_spark_route():
    from airflow_iceberg_provider.rules.wap_refs import BranchPlan, pin_by_write

    create = BranchPlan("create", "b", 7, (RefChange("b", "branch", 7, None),))
    assert pin_by_write(create, "catalog") is create
    deferred = pin_by_write(create, "spark")
    assert (deferred.action, deferred.base, deferred.changes) == ("deferred", 7, ())
    exists = BranchPlan("exists", "b", 7)
    assert pin_by_write(exists, "spark") is exists


def test_the_spark_route_refuses_a_moved_ref_or_a_guarded_one_before_any_job(v3):
    from airflow_iceberg_provider.exceptions import IcebergCommitConflictError
    from airflow_iceberg_provider.operators._wap_common import commit_ref_changes
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator

    hook, snaps, location = v3
    op = IcebergWapPublishOperator(task_id="p", table=T, branch="b", **NO_SPARK)  # no Spark connection at all
    tbl = hook.load_table(T)
    with pytest.raises(IcebergCommitConflictError, match=r"ref 'main' points at .* not .* as planned.*Nothing was"):
        commit_ref_changes(op, fake_context(), tbl, [RefChange("main", "branch", snaps[0], snaps[0])], "x")
    with pytest.raises(IcebergRefusedError, match="main"):
        commit_ref_changes(op, fake_context(), tbl, [RefChange("main", "branch", None, snaps[-1])], "x")
    assert commit_ref_changes(op, fake_context(), tbl, [], "x") is False
    assert hook.metadata_location(T) == location


def test_a_killed_erasures_properties_are_left_to_the_job_on_v3(lake, caplog):
    import logging

    from airflow_iceberg_provider.core.erasure_lifecycle import SWITCHED_PROPERTIES
    from airflow_iceberg_provider.operators._erasure_job import restore_switched_properties
    from airflow_iceberg_provider.params import validate_table

    switched = {"write.delete.mode": "copy-on-write", SWITCHED_PROPERTIES: '{"write.delete.mode": "merge-on-read"}'}
    create_orders_table(lake, T, properties=switched)
    location = format_v3_copy(lake, T)
    with caplog.at_level(logging.WARNING):
        assert restore_switched_properties(lake, validate_table(T), logging.getLogger("t")) == {}
    assert "the job restores them" in caplog.text
    assert lake.metadata_location(T) == location
