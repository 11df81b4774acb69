"""Pure maintenance logic: durations, CALL builders, expiry preview (Iceberg retention rules), decisions.

No catalog, no Spark: every test here runs in milliseconds.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pendulum
import pytest

from airflow_iceberg_provider.core.maintenance_actions import ACTIONS, MaintenanceSqlError, check_sort_order
from airflow_iceberg_provider.exceptions import IcebergRefNotFoundError, IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.models import DataFileFacts, RefInfo, SnapshotInfo, TableHealth
from airflow_iceberg_provider.rules.expiry import ExpiryPreview, preview_expiry, validate_retain_last
from airflow_iceberg_provider.rules.maintenance import (
    ORPHAN_MIN_AGE,
    MaintenancePolicy,
    PartitionFiles,
    TableDefaults,
    check_expiry_cutoff,
    check_gc_enabled,
    check_main_branch,
    check_orphan_cutoff,
    compaction_candidates,
    decide,
    file_layout,
    parse_duration,
    resolve_cutoff,
    resolve_policy,
    rewrite_commit_problem,
    rewrite_options,
    validate_strategy,
)
from airflow_iceberg_provider.spark_jobs.maintenance_sql import (
    action_sql,
    expire_snapshots_sql,
    remove_orphan_files_sql,
    rewrite_data_files_sql,
    sql_options,
    sql_string,
    sql_timestamp,
)

NOW = 1_800_000_000_000  # fixed "now" in epoch ms
HOUR = 3600 * 1000
DAY = 24 * HOUR


# ------------------------------------------------------------------------ durations
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(hours=36), timedelta(hours=36)),
        (pendulum.duration(days=3), timedelta(days=3)),
        ("36h", timedelta(hours=36)),
        ("3d", timedelta(days=3)),
        ("90m", timedelta(minutes=90)),
        ("2w", timedelta(weeks=2)),
        ("P3D", timedelta(days=3)),
        ("PT36H", timedelta(hours=36)),
    ],
)
def test_parse_duration_accepts_common_forms(value, expected):
    assert parse_duration(value, "x") == expected


@pytest.mark.parametrize("value", ["soon", "3 days ago", 5, None, "P"])
def test_parse_duration_names_parameter_on_error(value):
    with pytest.raises(IcebergValidationError, match="older_than_floor="):
        parse_duration(value, "older_than_floor")


def test_resolve_cutoff_durations_are_relative_and_instants_absolute():
    assert resolve_cutoff(timedelta(days=1), "o", now=NOW) == NOW - DAY
    assert resolve_cutoff("7d", "o", now=NOW) == NOW - 7 * DAY
    assert resolve_cutoff(NOW - 5, "o", now=NOW) == NOW - 5
    assert resolve_cutoff(str(NOW - 5), "o", now=NOW) == NOW - 5
    dt = datetime(2026, 1, 1, tzinfo=UTC)
    assert resolve_cutoff(dt, "o", now=NOW) == int(dt.timestamp() * 1000)
    assert resolve_cutoff("2026-01-01T00:00:00Z", "o", now=NOW) == int(dt.timestamp() * 1000)
    assert resolve_cutoff(datetime(2026, 1, 1), "o", now=NOW) == int(dt.timestamp() * 1000)  # naive = UTC
    with pytest.raises(IcebergValidationError, match="older_than="):
        resolve_cutoff("yesterday-ish", "older_than", now=NOW)


# --------------------------------------------------------------------- validation
def test_retain_last_must_be_at_least_one():
    assert validate_retain_last(1) == 1
    assert validate_retain_last("3") == 3
    for bad in (0, -1, "0", True, 1.5, "x"):
        with pytest.raises(IcebergValidationError, match="retain_last"):
            validate_retain_last(bad)


def test_expiry_floor_refuses_recent_cutoffs_with_a_clear_message():
    check_expiry_cutoff(NOW - 2 * HOUR, now=NOW, floor=timedelta(hours=1))
    with pytest.raises(IcebergRefusedError, match=r"floor of 1h.*older_than_floor"):
        check_expiry_cutoff(NOW - 10 * 60 * 1000, now=NOW, floor=timedelta(hours=1))
    with pytest.raises(IcebergValidationError, match="future"):
        check_expiry_cutoff(NOW + HOUR, now=NOW, floor=timedelta(0))
    check_expiry_cutoff(NOW, now=NOW, floor=timedelta(0))  # an explicit zero floor allows "now"


def test_orphan_floor_is_24h_and_explains_in_flight_writes():
    check_orphan_cutoff(NOW - DAY, now=NOW)
    with pytest.raises(IcebergValidationError, match=r"at least 24 h.*in flight"):
        check_orphan_cutoff(NOW - int(ORPHAN_MIN_AGE.total_seconds() * 1000) + 1, now=NOW)


def test_gc_disabled_and_non_main_branch_are_refused_with_the_fix():
    check_gc_enabled({}, "db.t", "expire_snapshots")
    with pytest.raises(IcebergRefusedError, match=r"gc\.enabled=false.*gc\.enabled=true"):
        check_gc_enabled({"gc.enabled": "false"}, "db.t", "expire_snapshots")
    check_main_branch("main", "rewrite_data_files")
    with pytest.raises(IcebergValidationError, match="main branch only"):
        check_main_branch("audit", "rewrite_data_files")


def test_strategy_and_sort_order_validation():
    assert validate_strategy("binpack", None, 0) == ("binpack", None)
    assert validate_strategy("sort", "zorder(a, b)", 0) == ("sort", "zorder(a, b)")
    assert validate_strategy("sort", "a DESC NULLS LAST, b", 0) == ("sort", "a DESC NULLS LAST, b")
    assert validate_strategy("sort", None, 2) == ("sort", None)  # table sort order
    with pytest.raises(IcebergValidationError, match="z-order is strategy='sort'"):
        validate_strategy("zorder", None, 0)
    with pytest.raises(IcebergValidationError, match="needs strategy='sort'"):
        validate_strategy("binpack", "a", 0)
    with pytest.raises(IcebergValidationError, match="table sort order"):
        validate_strategy("sort", None, 0)
    with pytest.raises(IcebergValidationError, match="not a sort order"):
        validate_strategy("sort", "a; DROP TABLE x", 0)


def test_rewrite_options_named_arguments_win_and_values_are_checked():
    opts = rewrite_options(
        target_file_size_bytes=1 << 20,
        min_input_files=2,
        delete_file_threshold=1,
        partial_progress=True,
        options={"min-input-files": "9", "max-concurrent-file-group-rewrites": 4},
    )
    assert opts == {
        "target-file-size-bytes": str(1 << 20),
        "min-input-files": "2",
        "delete-file-threshold": "1",
        "partial-progress.enabled": "true",
        "max-concurrent-file-group-rewrites": "4",
    }
    with pytest.raises(IcebergValidationError, match="min_input_files"):
        rewrite_options(min_input_files=0)
    with pytest.raises(IcebergValidationError, match="options"):
        rewrite_options(options={"x') , evil => ('": "1"})
    with pytest.raises(IcebergValidationError, match="options"):
        rewrite_options(options={"min-input-files": "1'); DROP"})


# ------------------------------------------------------------------- SQL builders
def spark_unescape(literal: str) -> str:
    """Spark's ``unescapeSQLString`` for the escapes our builder emits (\\\\ and \\')."""
    assert literal[0] == literal[-1] == "'"
    body, out, i = literal[1:-1], [], 0
    while i < len(body):
        if body[i] == "\\":
            out.append(body[i + 1])
            i += 2
        else:
            assert body[i] != "'", "an unescaped quote would end the literal"
            out.append(body[i])
            i += 1
    return "".join(out)


@pytest.mark.parametrize(
    "value", ["region = 'ca'", "x\\' OR 1=1 --", "\\\\'", "it's", "a\nb", "') , where => ('1=1", ""]
)
def test_sql_string_round_trips_and_cannot_be_escaped(value):
    assert spark_unescape(sql_string(value)) == value


def test_sql_timestamp_is_utc_with_millis():
    ms = int(datetime(2026, 3, 4, 5, 6, 7, 89000, tzinfo=UTC).timestamp() * 1000)
    assert sql_timestamp(ms) == "TIMESTAMP '2026-03-04 05:06:07.089+00:00'"
    with pytest.raises(MaintenanceSqlError):
        sql_timestamp("2026-01-01")  # type: ignore[arg-type]


def test_call_builders_render_named_arguments():
    sql = expire_snapshots_sql("lakehouse", "db.t", older_than_ms=0, retain_last=2, snapshot_ids=[5, 6])
    assert sql == (
        "CALL `lakehouse`.system.expire_snapshots(table => 'db.t', older_than => "
        "TIMESTAMP '1970-01-01 00:00:00.000+00:00', retain_last => 2, snapshot_ids => array(5, 6), "
        "stream_results => true)"
    )
    sql = rewrite_data_files_sql(
        "lakehouse", "db.t", strategy="sort", sort_order="zorder(a,b)", where="a > 1", options={"min-input-files": 2}
    )
    assert "strategy => 'sort'" in sql and "sort_order => 'zorder(a,b)'" in sql
    assert "options => map('min-input-files', '2')" in sql and "where => 'a > 1'" in sql
    assert "dry_run => true" in remove_orphan_files_sql("c", "db.t", older_than_ms=0)
    for action in ACTIONS:
        args = {"older_than_ms": 0} if action == "remove_orphan_files" else {}
        assert action_sql("c", "db.t", action, args).startswith(f"CALL `c`.system.{action}(table => 'db.t'")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"catalog": "x`; --"}, "catalog"),
        ({"table": "db.t') --"}, "table"),
        ({"retain_last": 0}, "retain_last"),
        ({"snapshot_ids": ["1) --"]}, "integer"),
    ],
)
def test_expire_builder_refuses_unsafe_values(kwargs, match):
    args = {"catalog": "c", "table": "db.t", **kwargs}
    with pytest.raises(MaintenanceSqlError, match=match):
        expire_snapshots_sql(args.pop("catalog"), args.pop("table"), **args)


def test_options_and_sort_order_builders_refuse_injection():
    with pytest.raises(MaintenanceSqlError):
        sql_options({"a": "b'), x => ('"})
    with pytest.raises(MaintenanceSqlError):
        check_sort_order("zorder(a, b')")
    with pytest.raises(MaintenanceSqlError, match="unknown maintenance action"):
        action_sql("c", "db.t", "drop_table")


# ---------------------------------------------------------------- expiry preview
def snaps(n: int, *, start: int = NOW - 10 * DAY, step: int = DAY, first_id: int = 1, parent: int | None = None):
    """A linear chain of ``n`` snapshots, ids first_id.., one ``step`` apart."""
    out = []
    for i in range(n):
        sid = first_id + i
        out.append(SnapshotInfo(sid, parent if i == 0 else sid - 1, start + i * step, "append"))
    return out


def branch(name: str, sid: int, **kw) -> RefInfo:
    return RefInfo(name, "branch", sid, **kw)


def tag(name: str, sid: int, **kw) -> RefInfo:
    return RefInfo(name, "tag", sid, **kw)


def test_preview_expires_old_snapshots_and_keeps_retain_last():
    chain = snaps(10)  # ids 1..10, ages 10d..1d
    p = preview_expiry(chain, {"main": branch("main", 10)}, older_than_ms=NOW - 5 * DAY, retain_last=2, now=NOW)
    assert p.expire == [1, 2, 3, 4, 5]  # older than 5 days
    assert p.retain == [6, 7, 8, 9, 10]
    assert p.held_snapshots == {}
    p = preview_expiry(chain, {"main": branch("main", 10)}, older_than_ms=NOW, retain_last=3, now=NOW)
    assert p.retain == [8, 9, 10]
    assert p.kept_by_refs == {"8": ["branch:main"], "9": ["branch:main"], "10": ["branch:main"]}


def test_preview_reports_snapshots_kept_by_tags_branches_and_legal_holds():
    chain = snaps(10)
    side = [SnapshotInfo(20, 3, NOW - 7 * DAY, "append")]  # a branch forked from 3
    refs = {
        "main": branch("main", 10),
        "release-1": tag("release-1", 2),
        "legal-hold-case-42": tag("legal-hold-case-42", 4),
        "audit": branch("audit", 20),
    }
    p = preview_expiry(chain + side, refs, older_than_ms=NOW, retain_last=1, now=NOW)
    assert p.held_snapshots == {
        "2": ["tag:release-1"],
        "4": ["legal_hold:legal-hold-case-42"],
        "20": ["branch:audit"],
    }
    # the audit branch keeps only its head (retain_last=1); its fork point 3 is old and expires
    assert set(p.expire) == {1, 3, 5, 6, 7, 8, 9}
    assert set(p.retain) == {2, 4, 10, 20}


def test_preview_honours_ref_level_retention_and_max_ref_age():
    chain = snaps(10)
    refs = {
        "main": branch("main", 10, min_snapshots_to_keep=4),
        "old-tag": tag("old-tag", 1, max_ref_age_ms=2 * DAY),  # head is 10 days old: the tag itself expires
        "young-tag": tag("young-tag", 9, max_ref_age_ms=2 * DAY),
    }
    p = preview_expiry(chain, refs, older_than_ms=NOW, retain_last=1, now=NOW)
    assert p.refs_expired == ["old-tag"]
    assert p.retain == [7, 8, 9, 10]  # main's own min-snapshots-to-keep wins over retain_last
    assert 1 in p.expire


def test_preview_unreferenced_snapshots_expire_by_age_only():
    chain = snaps(5)
    orphan = SnapshotInfo(99, 2, NOW - HOUR, "append")  # e.g. a dropped branch, young
    old_orphan = SnapshotInfo(98, 2, NOW - 9 * DAY, "append")
    p = preview_expiry(
        [*chain, orphan, old_orphan], {"main": branch("main", 5)}, older_than_ms=NOW - DAY, retain_last=1, now=NOW
    )
    assert 99 in p.retain and 98 in p.expire


def test_preview_explicit_ids_refused_when_a_ref_points_at_them():
    chain = snaps(5)
    refs = {"main": branch("main", 5), "legal-hold-x": tag("legal-hold-x", 2)}
    p = preview_expiry(chain, refs, older_than_ms=0, retain_last=1, now=NOW, snapshot_ids=[3])
    assert p.expire == [3]
    with pytest.raises(IcebergRefusedError, match=r"2 \(held by legal_hold:legal-hold-x\)"):
        preview_expiry(chain, refs, older_than_ms=0, retain_last=1, now=NOW, snapshot_ids=[2])
    with pytest.raises(IcebergRefNotFoundError, match="777"):
        preview_expiry(chain, refs, older_than_ms=0, retain_last=1, now=NOW, snapshot_ids=[777])


# ----------------------------------------------------------------------- decisions
def health(**kw) -> TableHealth:
    base = dict(
        table="db.t",
        snapshot_id=10,
        format_version=2,
        data_files=4,
        data_bytes=4 << 30,
        records=1000,
        delete_files=0,
        position_delete_files=0,
        equality_delete_files=0,
        delete_bytes=0,
        manifests=2,
        snapshots=3,
        refs=1,
        oldest_snapshot_ms=NOW - HOUR,
        target_file_size_bytes=512 << 20,
        small_files=0,
    )
    return TableHealth(**{**base, **kw})


def part(name: str, small: int, *, small_bytes: int = 1000, large: int = 0, data: int | None = None, deletes: int = 0):
    return PartitionFiles(name, 0, data if data is not None else small, small_bytes, small, small_bytes, large, deletes)


def policy(**kw) -> MaintenancePolicy:
    return MaintenancePolicy(
        **{
            "target_file_size_bytes": 512 << 20,
            "expire_older_than_ms": NOW - 5 * DAY,
            "orphan_older_than_ms": NOW - 3 * DAY,
            **kw,
        }
    )


def test_compaction_candidates_mirror_binpack_rules():
    target = 100_000
    layout = [
        part("p1", 6),  # >= min_input_files small files
        part("p2", 2, small_bytes=150_000),  # two files whose bytes exceed the target
        part("p3", 1),  # a single small file: never rewritten
        part("p4", 3),  # too few, too small
        part("p5", 0, large=1, data=1),  # too large: split
    ]
    c = compaction_candidates(layout, target_file_size=target, min_input_files=5)
    assert c["partitions"] == ["p1", "p2", "p5"]
    assert c["files"] == 6 + 2 + 1


def test_healthy_table_needs_no_action():
    h = health(data_files=30, small_files=30)
    layout = [part(f"day={i}", 1) for i in range(30)]  # one (small) file per partition: nothing to merge

    expiry = ExpiryPreview(older_than_ms=NOW - 5 * DAY, retain_last=1, expire=[], retain=[10])
    d = decide(h, policy(), properties={}, layout=layout, expiry=expiry)
    assert d.healthy and d.actions == []
    assert set(d.skipped) == set(ACTIONS)


def test_unhealthy_table_gets_ordered_actions_with_reasons():

    h = health(data_files=200, small_files=200, delete_files=40, position_delete_files=40, manifests=150, snapshots=220)
    expiry = ExpiryPreview(older_than_ms=NOW - 5 * DAY, retain_last=1, expire=list(range(100)), retain=[1])
    d = decide(
        h,
        policy(remove_orphans=True),
        properties={},
        layout=[part("p", 200)],
        expiry=expiry,
    )
    assert [a.action for a in d.actions] == list(ACTIONS)
    rdf = d.actions[0]
    assert rdf.args["options"]["delete-file-threshold"] == "1"
    assert rdf.args["options"]["remove-dangling-deletes"] == "true"
    assert "200 of 200 data files" in rdf.reason and "delete files" in rdf.reason
    assert d.actions[3].args == {"older_than_ms": NOW - 5 * DAY, "retain_last": 1}
    assert d.actions[4].args["dry_run"] is True


def test_gc_disabled_skips_expiry_and_orphans_and_v1_skips_delete_rewrites():

    expiry = ExpiryPreview(older_than_ms=0, retain_last=1, expire=[1, 2], retain=[3])
    d = decide(
        health(format_version=1, data_files=50, small_files=50),
        policy(remove_orphans=True),
        properties={"gc.enabled": "false"},
        layout=[part("p", 50)],
        expiry=expiry,
    )
    assert [a.action for a in d.actions] == ["rewrite_data_files"]
    assert "gc.enabled=false" in d.skipped["expire_snapshots"]
    assert "gc.enabled=false" in d.skipped["remove_orphan_files"]
    assert "format-version 1" in d.skipped["rewrite_position_delete_files"]


def test_orphan_removal_alone_does_not_start_a_job_unless_forced():
    h = health()
    d = decide(h, policy(remove_orphans=True), properties={}, layout=[], expiry=None)
    assert d.healthy and "rides along" in d.skipped["remove_orphan_files"]
    d = decide(h, policy(remove_orphans=True), properties={}, layout=[], expiry=None, force=True)
    assert [a.action for a in d.actions] == ["rewrite_data_files", "rewrite_manifests", "remove_orphan_files"]


def test_policy_defaults_come_from_table_properties_and_arguments_win():
    props = {
        "write.target-file-size-bytes": str(64 << 20),
        "history.expire.max-snapshot-age-ms": str(2 * DAY),
        "history.expire.min-snapshots-to-keep": "7",
        "commit.manifest.min-count-to-merge": "30",
        "airflow-iceberg.maintenance.min-input-files": "3",
        "airflow-iceberg.maintenance.max-small-file-ratio": "0.5",
    }
    p = resolve_policy(props, now=NOW)
    assert p.target_file_size_bytes == 64 << 20
    assert p.expire_older_than_ms == NOW - 2 * DAY
    assert p.retain_last == 7 and p.max_manifests == 30 and p.min_input_files == 3 and p.max_small_file_ratio == 0.5
    p = resolve_policy(props, now=NOW, min_input_files=9, retain_last=2, expire_older_than="3d")
    assert (p.min_input_files, p.retain_last, p.expire_older_than_ms) == (9, 2, NOW - 3 * DAY)
    d = TableDefaults.from_properties({})
    assert (d.max_snapshot_age_ms, d.min_snapshots_to_keep, d.gc_enabled) == (5 * DAY, 1, True)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"retain_last": 0}, IcebergValidationError, "retain_last"),
        ({"expire_older_than": "5m"}, IcebergRefusedError, "expiry floor"),
        ({"orphan_older_than": "2h"}, IcebergValidationError, "24 h"),
        ({"actions": ["vacuum"]}, IcebergValidationError, "unknown entries"),
        ({"max_small_file_ratio": "lots"}, IcebergValidationError, "max_small_file_ratio"),
    ],
)
def test_policy_refuses_bad_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        resolve_policy({}, now=NOW, **kwargs)


def test_policy_refuses_bad_table_property_with_its_name():
    with pytest.raises(IcebergValidationError, match=re.escape("history.expire.min-snapshots-to-keep='many'")):
        resolve_policy({"history.expire.min-snapshots-to-keep": "many"}, now=NOW)


# ------------------------------------------------------------------ #16: statistics only when stale
def test_statistics_are_planned_only_when_a_policy_asks_and_they_are_stale():
    from airflow_iceberg_provider.rules.maintenance import COMPUTE_STATS, resolve_policy

    healthy = [part(f"day={i}", 1) for i in range(4)]
    off = decide(health(statistics_fresh=False), policy(), properties={}, layout=healthy)
    assert off.healthy and COMPUTE_STATS not in off.skipped  # not asked
    fresh = decide(health(statistics_fresh=True), policy(compute_stats=True), properties={}, layout=healthy)
    assert fresh.healthy and "current snapshot" in fresh.skipped[COMPUTE_STATS]
    stale = decide(health(statistics_fresh=False), policy(compute_stats=True), properties={}, layout=healthy)
    assert [a.action for a in stale.actions] == [COMPUTE_STATS] and "older snapshot" in stale.actions[0].reason
    # a compaction in the same plan makes fresh statistics stale: recompute after it, before expiry
    h = health(data_files=200, small_files=200, statistics_fresh=True)
    d = decide(h, policy(compute_stats=True), properties={}, layout=[part("p", 200)])
    assert [a.action for a in d.actions] == ["rewrite_data_files", COMPUTE_STATS]
    empty = decide(
        health(snapshot_id=None, data_files=0, statistics_fresh=None),
        policy(compute_stats=True),
        properties={},
        layout=[],
    )
    assert empty.healthy
    props = {"airflow-iceberg.maintenance.compute-stats": "true"}
    assert resolve_policy(props, now=NOW).compute_stats is True
    assert resolve_policy(props, now=NOW, compute_stats=False).compute_stats is False


def test_file_layout_counts_small_large_and_delete_files_per_partition():
    mib = 1024 * 1024

    def f(partition, size, content="data", spec_id=0):
        return DataFileFacts(spec_id, partition, content, size, 10)

    files = [
        f("p=1", 10 * mib),  # small (< 75 MiB of 100)
        f("p=1", 90 * mib),  # in range
        f("p=1", 200 * mib),  # large (> 180 MiB)
        f("p=1", 1 * mib, "position_deletes"),
        f("p=2", 1 * mib, "equality_deletes"),
        f("p=1", 5 * mib, spec_id=1),  # another spec: its own group
    ]
    layout = file_layout(files, target_file_size=100 * mib)
    assert [(p.spec_id, p.partition) for p in layout] == [(0, "p=1"), (0, "p=2"), (1, "p=1")]
    p1 = layout[0]
    assert (p1.data_files, p1.small_files, p1.large_files, p1.delete_files) == (3, 1, 1, 1)
    assert (p1.data_bytes, p1.small_bytes) == (300 * mib, 10 * mib)
    assert (layout[1].data_files, layout[1].delete_files) == (0, 1)
    assert file_layout([], target_file_size=mib) == []


# ------------------------------------------------------------- a rewrite's commits
def _commit(snapshot_id: int, operation: str, added: int = 0, deleted: int = 0) -> SnapshotInfo:
    summary = {"added-data-files": str(added), "deleted-data-files": str(deleted)}
    return SnapshotInfo(snapshot_id, snapshot_id - 1, 0, operation, summary)


REPORTED = {"added_data_files_count": 1, "rewritten_data_files_count": 7}


def test_a_rewrite_rebased_over_another_writers_append_is_its_replace_commit_alone():
    """A publish's append committed while the compaction ran sits in main's range; it is not the compaction's."""
    assert rewrite_commit_problem("rewrite_data_files", [_commit(2, "replace", 1, 7)], REPORTED) is None
    rebased = [_commit(2, "append", 3, 0), _commit(3, "replace", 1, 7), _commit(4, "delete", 0, 1)]
    assert rewrite_commit_problem("rewrite_data_files", rebased, REPORTED) is None
    partial = [_commit(2, "replace", 1, 4), _commit(3, "append", 2, 0), _commit(4, "replace", 0, 3)]
    assert rewrite_commit_problem("rewrite_data_files", partial, REPORTED) is None


def test_a_rewrite_without_a_replace_commit_or_with_other_counts_is_named():
    problem = rewrite_commit_problem("rewrite_manifests", [_commit(2, "append", 1)], {"rewritten_manifests_count": 3})
    assert problem and "main advanced only by [(2, 'append')], none a 'replace'" in problem
    problem = rewrite_commit_problem("rewrite_data_files", [_commit(2, "replace", 2, 7)], REPORTED)
    assert problem and "commits [2] add 2 / remove 7 data files but the procedure reported" in problem
    # another writer's files never count as the rewrite's
    problem = rewrite_commit_problem(
        "rewrite_data_files", [_commit(2, "append", 1), _commit(3, "replace", 0, 7)], REPORTED
    )
    assert problem and "add 0 / remove 7" in problem
