"""The logical phase of an erasure: hide the subjects on every branch head, verify, record.

Functions over a :class:`LogicalRun` (what they use of :class:`erasure.ErasureRun`: its session,
table, subject views, timers, catalog reads and evidence recording):
one batched merge-on-read DELETE on ``main`` (copy-on-write on other branches that show the
subjects), table properties restored and compared, then ONE read of every ref head through the
catalog that verifies no subject row is visible and counts the rows hidden per request. No
rewrite, no expiry: the purge does the physical part.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.core.deletion_vectors import has_deletion_vectors
from airflow_iceberg_provider.spark_jobs.erasure import index as ei
from airflow_iceberg_provider.spark_jobs.erasure import sql as es
from airflow_iceberg_provider.spark_jobs.erasure import targeted as et
from airflow_iceberg_provider.spark_jobs.table_access import TableAccess


class LogicalRun(Protocol):
    """What the logical phase reads and calls on its erasure run (``erasure.ErasureRun`` provides it)."""

    spark: Any
    #: the job's table access
    access: TableAccess
    spec: dict[str, Any]
    catalog: str
    table: str
    columns: list[str]
    #: the quoted table reference for SQL
    t: str
    timings: dict[str, float]
    metrics: dict[str, Any]
    details: dict[str, Any]
    status: str
    snapshot_before: int | None
    snapshot_after: int | None

    def sql(self, query: str, **args: Any) -> Any: ...

    def timed(self, phase: str) -> AbstractContextManager[Any]: ...

    def refresh(self) -> None: ...

    def refs(self) -> list[dict[str, Any]]: ...

    def table_properties(self) -> dict[str, str]: ...

    def switch_properties(self, wanted: dict[str, str]) -> None: ...

    def restore_properties(self) -> dict[str, str | None]: ...

    def match_counts(self, snapshot_ids: list[int], include_hidden: bool = False) -> dict[str, Any]: ...

    def per_request_frame(self, per_request: list[Any], snapshot_ids: list[int]) -> Any: ...

    def delete_on_branches(self, branches: list[str]) -> None: ...

    def record(
        self, per_request: Any, started: datetime, outcome: str, dropped: Any, held: Any, verify: Any
    ) -> None: ...


def shows_subjects(run: LogicalRun, snapshot_id: int) -> bool:
    """Whether any subject row is visible on the snapshot (deletes applied). Spark stops at the
    first row found (a limit-1 collect scans one partition first), so this is cheap when the
    subjects are there, and a full scan only when they are not: then no DELETE runs, and a re-run
    commits nothing (Iceberg commits a DELETE that matched no row as an empty snapshot)."""
    sid = int(snapshot_id)  # from the catalog, never input
    probe = f"SELECT 1 FROM {run.t} VERSION AS OF {sid} WHERE {es.match_predicate(run.columns)} LIMIT 1"
    return bool(run.sql(probe).collect())


def run_logical(run: LogicalRun, started: datetime) -> dict[str, Any]:
    """The logical phase: on candidate files only (:func:`run_targeted`) when the table access offers
    Iceberg's Java API (a driver JVM: position-delete files have no SQL form), the table's format
    version takes position-delete files (before v3; a v3 table takes deletion vectors, which the SQL
    DELETE writes) and ``spec["logical_delete"]`` is not ``"sql"``; else one SQL DELETE (:func:`run_sql`)."""
    jtable = run.access.java_table(run.t)
    if (
        jtable is not None
        and not has_deletion_vectors(et.format_version(jtable))
        and run.spec.get("logical_delete", "positions") != "sql"
    ):
        return run_targeted(run, started)
    return run_sql(run, started)


def run_targeted(run: LogicalRun, started: datetime) -> dict[str, Any]:
    """See :mod:`erasure_targeted`: candidates of every ref head, a position-delete commit on main
    built from the candidates' raw positions, copy-on-write on other branches showing the subjects,
    verification of every ref head's candidates with their deletes applied."""
    refs = run.refs()
    heads = {r["name"]: r for r in refs}
    main = heads.get("main")
    run.snapshot_before = main["snapshot_id"] if main else None
    with run.timed("candidates"):
        tasks_by_head = {sid: et.head_tasks(run, sid) for sid in {r["snapshot_id"] for r in refs}}
        every = {p: t for tasks in tasks_by_head.values() for p, t in tasks.items()}  # each file probed once
        keep = et.candidate_paths(run, every, "logical", main["snapshot_id"] if main else None)
        cands = {sid: {p: t for p, t in tasks.items() if p in keep} for sid, tasks in tasks_by_head.items()}
    per_request: list[tuple[str, int]] = []
    written = {"delete_files": 0, "positions": 0}
    with run.timed("delete"):
        if main is not None and cands[main["snapshot_id"]]:
            main_cands = cands[main["snapshot_id"]]
            hits = et.raw_positions(run, [str(t.file().location()) for t in main_cands.values()])
            per_request = et.per_request_rows(run, hits)
            visible_before = et.visible_counts(run, main_cands)
            if visible_before:
                written = et.commit_position_deletes(run, main_cands, hits, main["snapshot_id"])
        others = [
            r["name"]
            for r in refs
            if r["type"] == "branch" and r["name"] != "main" and et.visible_counts(run, cands[r["snapshot_id"]])
        ]
        if others:
            run.delete_on_branches(others)
    run.refresh()
    with run.timed("verify"):
        after = {r["name"]: r for r in run.refs()}
        visible: dict[str, int] = {}
        for name, r in after.items():
            sid = r["snapshot_id"]
            if sid not in cands:  # a new head (main after the commit, a branch after copy-on-write)
                old = tasks_by_head.get(heads[name]["snapshot_id"], {}) if name in heads else {}
                old_cands = cands.get(heads[name]["snapshot_id"], {}) if name in heads else {}
                now = et.head_tasks(run, sid)
                new_files = {p: t for p, t in now.items() if p not in old}
                fresh = et.candidate_paths(run, new_files, "logical_new", sid) if new_files else set()
                cands[sid] = {p: t for p, t in now.items() if p in old_cands or p in fresh}
                tasks_by_head[sid] = now
            visible[name] = et.visible_counts(run, cands[sid])
    branch_rows = sum(v for n, v in visible.items() if after[n]["type"] == "branch")
    tags_showing = sorted(n for n, v in visible.items() if v and after[n]["type"] == "tag")
    outcome = lc.FAILED if branch_rows else lc.VERIFIED
    run.snapshot_after = after["main"]["snapshot_id"] if "main" in after else None
    frame = run.spark.createDataFrame(per_request, "request_id string, n long")
    run.metrics.update(
        rows_deleted=sum(n for _, n in per_request),
        refs_deleted_on=(["main"] if written["positions"] else []) + others,
        rows_visible_on_branch_heads=branch_rows,
        tags_showing_subjects=tags_showing,
        properties_restored=True,
        logical_delete="positions",
        position_delete_files=written["delete_files"],
        positions_deleted=written["positions"],
        files_rewritten=0,
        snapshots_expired=0,
        verification=outcome,
        timings_s=run.timings,
    )
    run.details["tags_pending_purge"] = tags_showing
    if outcome == lc.VERIFIED:
        _keep_index_current(run, tasks_by_head)
    run.record(frame, started, outcome, [], [], {"rows_outside_holds": branch_rows, "held_rows": 0})
    if outcome == lc.FAILED:
        run.status = "failed"
        run.details["error"] = (
            f"logical erasure verification failed on {run.table}: {branch_rows} subject rows visible on the "
            "candidate files of branch heads"
        )
    return run.metrics


def _keep_index_current(run: LogicalRun, tasks_by_head: dict[int, dict[str, Any]]) -> None:
    """The subject index brought up to main's new head (only files it does not cover are read)."""
    if run.snapshot_after is None or run.snapshot_after not in tasks_by_head:
        return
    with run.timed("subject_index"):
        run.metrics["subject_index"] = ei.keep_current(
            run, run.snapshot_after, tasks_by_head[run.snapshot_after], lambda t: str(t.file().location())
        )


def run_sql(run: LogicalRun, started: datetime) -> dict[str, Any]:
    """One batched merge-on-read DELETE on main (copy-on-write on other branches showing the
    subjects, see below); verified by an independent count on every ref head; no rewrite of
    main, no expiry. Table properties restored exactly (checked).

    Cost on a table with main only: a probe that stops at the first visible subject row, the
    DELETE's own scan, and ONE scan of every ref head afterwards (one job) that both verifies
    (no subject row visible) and counts the rows per request the DELETE hides (``_deleted``).
    Other branches are deleted on copy-on-write, so their rows are counted before (one more
    scan, only when such branches exist). A ``rows_found`` on main counts the subject's rows
    hidden on its head: those this run hid and those an earlier, not yet purged, logical
    erasure hid.
    """
    refs = run.refs()
    branches = [r for r in refs if r["type"] == "branch"]
    others = [r for r in branches if r["name"] != "main"]
    run.snapshot_before = next((r["snapshot_id"] for r in refs if r["name"] == "main"), None)
    with run.timed("count"):
        before = run.match_counts([r["snapshot_id"] for r in others])
        main_shows = run.snapshot_before is not None and shows_subjects(run, run.snapshot_before)
    targets = [
        r["name"] for r in branches if (main_shows if r["name"] == "main" else before["rows"].get(r["snapshot_id"], 0))
    ]
    props_before = run.table_properties()
    with run.timed("delete"):
        delete_logical(run, targets)
    run.refresh()
    props_after = run.table_properties()
    with run.timed("verify"):
        heads = {r["name"]: r for r in run.refs()}
        after = run.match_counts([r["snapshot_id"] for r in heads.values()], include_hidden=True)
        visible = {n: after["rows"].get(r["snapshot_id"], 0) for n, r in heads.items()}
    main_now = heads["main"]["snapshot_id"] if "main" in heads else None
    other_olds = [r["snapshot_id"] for r in others if r["name"] in targets]
    per_request_rows = [x for x in before["per_request"] if x[1] in other_olds]
    per_request_rows += [x for x in after["per_request"] if x[1] == main_now]
    per_request = run.per_request_frame(per_request_rows, other_olds + ([main_now] if main_now else []))
    branch_rows = sum(v for n, v in visible.items() if heads[n]["type"] == "branch")
    tags_showing = sorted(n for n, v in visible.items() if v and heads[n]["type"] == "tag")
    restored = props_after == props_before
    outcome = lc.FAILED if branch_rows or not restored else lc.VERIFIED
    run.snapshot_after = main_now
    run.metrics.update(
        rows_deleted=sum(n for _, _, n in per_request_rows),
        refs_deleted_on=targets,
        rows_visible_on_branch_heads=branch_rows,
        tags_showing_subjects=tags_showing,
        properties_restored=restored,
        files_rewritten=0,
        snapshots_expired=0,
        verification=outcome,
        timings_s=run.timings,
    )
    run.details["tags_pending_purge"] = tags_showing
    run.record(per_request, started, outcome, [], [], {"rows_outside_holds": branch_rows, "held_rows": 0})
    if outcome == lc.FAILED:
        run.status = "failed"
        run.details["error"] = (
            f"logical erasure verification failed on {run.table}: {branch_rows} subject rows visible on "
            f"branch heads; table properties restored: {restored}"
        )
    return run.metrics


def delete_logical(run: LogicalRun, targets: list[str]) -> None:
    """Merge-on-read DELETE on main; other branches: copy-on-write + manifest merge, as in the full
    phase (Iceberg rewrites data files on main only, so rows masked by delete files on a branch
    could never be purged).

    For main's statement only (then restored, and compared by the caller): ``write.delete.mode``
    merge-on-read whatever the table says, and ``write.delete.granularity`` ``partition``: one
    position-delete file per partition and writer instead of one per data file (subjects spread
    over every file would otherwise write, and every later read open, one delete file per data
    file). The purge rewrites those data files and drops the then dangling delete files.
    """
    if "main" in targets:
        run.switch_properties({"write.delete.mode": "merge-on-read", "write.delete.granularity": "partition"})
        try:
            run.sql(es.delete_sql(run.catalog, run.table, run.columns))
        finally:
            run.restore_properties()
    others = [b for b in targets if b != "main"]
    if others:
        run.delete_on_branches(others)
