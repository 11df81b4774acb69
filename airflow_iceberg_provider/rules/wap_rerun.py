"""Pure rules of write-audit-publish re-runs (no catalog, no Airflow I/O; tested in milliseconds).

Every WAP write stamps its Airflow identity on the snapshots it commits
(:func:`summary_properties`): DAG id, run id, task id, try number, logical date and
data interval, and the *interval key* ``<dag_id>/<group>/<interval>`` that says which
load of which interval the rows belong to. Whether an interval was already published
is then a question about ``main``'s own history (:func:`find_published`), answered
from one loaded table metadata; the ledger is consulted only when that history was
truncated by snapshot expiry (:func:`history_complete`).

:func:`plan_rerun` turns the answer and ``on_rerun`` into one :class:`RerunPlan`:

* ``fail`` (default): refuse before writing, naming the earlier publish (snapshot and run);
* ``skip``: write nothing, emit no Asset event, record a ``noop`` ledger row;
* ``replace``: remove what the earlier publish added (its append snapshots' data files, or
  the rows of a declared ``replace_where`` predicate), then write.

:func:`plan_publish_race` applies the same modes at publish time to a publish of the
same interval that reached ``main`` after this run's branch was cut.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from airflow_iceberg_provider.core.governance import decode_ledger_row
from airflow_iceberg_provider.exceptions import IcebergValidationError

ON_RERUN = ("fail", "skip", "replace")
#: snapshot summary keys of the Airflow identity (``airflow.<field>``; older writers stamped only the first four)
KEY_DAG, KEY_RUN, KEY_TASK, KEY_TRY = "airflow.dag-id", "airflow.run-id", "airflow.task-id", "airflow.try-number"
KEY_LOGICAL = "airflow.logical-date"
KEY_START, KEY_END = "airflow.data-interval-start", "airflow.data-interval-end"
KEY_INTERVAL = "airflow.wap-interval"
#: set on the snapshot that removed an earlier publish's rows (its value: that publish's snapshot id)
KEY_REPLACES = "airflow.wap-replaces"
#: the job run id of the Spark job that made the commit (its ledger row's ``event_id``): a durable
#: application write's witness (``durable_jobs``)
KEY_JOB_RUN = "airflow.job-run-id"
SOURCE_SNAPSHOT = "source-snapshot-id"  # set by Iceberg's cherry-pick on the replayed snapshot
SUMMARY_KEYS = {
    "added_records": "added-records",
    "deleted_records": "deleted-records",
    "added_data_files": "added-data-files",
    "deleted_data_files": "deleted-data-files",
    "added_delete_files": "added-delete-files",
    "added_position_deletes": "added-position-deletes",
    "removed_position_deletes": "removed-position-deletes",
}


def validate_on_rerun(value: object, param: str = "on_rerun") -> str:
    if value not in ON_RERUN:
        raise IcebergValidationError(
            f"{param}={value!r} is invalid; use 'fail' (refuse to publish an interval twice, the default), "
            "'skip' (a re-run writes nothing) or 'replace' (a re-run replaces the interval's rows)."
        )
    return str(value)


def validate_replace_where(
    value: Any, param: str = "replace_where", columns: Collection[str] | None = None
) -> str | None:
    """``None`` for unset values, else one row predicate accepted by the SQL allowlist (the audit's
    fragment rule, :func:`~airflow_iceberg_provider.core.audit_checks.sql_fragment`).

    :param columns: the table's column names, when known: no other column is accepted.
    """
    from airflow_iceberg_provider.params import is_unset

    if is_unset(value):  # the provider's one rule for "unset"
        return None
    from airflow_iceberg_provider.core.audit_checks import CheckSpecError, sql_fragment

    try:
        return sql_fragment(value, param, columns=columns)
    except CheckSpecError as err:
        raise IcebergValidationError(
            f"{err} Give the predicate selecting exactly this interval's rows, e.g. "
            "\"order_ts >= TIMESTAMP '{{ data_interval_start }}' AND order_ts < TIMESTAMP '{{ data_interval_end }}'\"."
        ) from err


# ------------------------------------------------------------------ identity
def _iso(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


@dataclass(frozen=True)
class RunIdentity:
    """Who writes: the DAG run and task try, and which interval of which WAP group it loads."""

    dag_id: str | None
    run_id: str | None
    task_id: str | None = None
    try_number: int | None = None
    logical_date: str | None = None
    interval_start: str | None = None
    interval_end: str | None = None
    group: str = ""

    @classmethod
    def from_context(cls, context: Mapping[str, Any] | None) -> RunIdentity:
        """Read the identity from an Airflow task context (a missing part stays ``None``)."""
        if not context:
            return cls(None, None)
        ti = context.get("ti") or context.get("task_instance")
        dag_run = context.get("dag_run")
        task_id = getattr(ti, "task_id", None)
        return cls(
            dag_id=getattr(ti, "dag_id", None),
            run_id=getattr(ti, "run_id", None) or context.get("run_id"),
            task_id=task_id,
            try_number=getattr(ti, "try_number", None),
            logical_date=_iso(context.get("logical_date") or getattr(dag_run, "logical_date", None)),
            interval_start=_iso(context.get("data_interval_start") or getattr(dag_run, "data_interval_start", None)),
            interval_end=_iso(context.get("data_interval_end") or getattr(dag_run, "data_interval_end", None)),
            group=task_id.rpartition(".")[0] if task_id else "",
        )

    @property
    def interval(self) -> str | None:
        """``start/end`` of the data interval, else the logical date, else ``run:<run_id>``."""
        if self.interval_start and self.interval_end:
            return f"{self.interval_start}/{self.interval_end}"
        if self.logical_date:
            return self.logical_date
        return f"run:{self.run_id}" if self.run_id else None

    @property
    def interval_key(self) -> str | None:
        """``<dag_id>/<task group>/<interval>``: the same for every run that loads this interval."""
        if not self.dag_id or self.interval is None:
            return None
        return f"{self.dag_id}/{self.group}/{self.interval}"


def summary_properties(
    identity: RunIdentity, *, replaces: int | None = None, job_run_id: str | None = None
) -> dict[str, str]:
    """Snapshot summary properties a WAP write stamps on every commit (strings only).

    :param replaces: the earlier publish whose rows the commit removes.
    :param job_run_id: the Spark job that commits them.
    """
    values = {
        KEY_DAG: identity.dag_id,
        KEY_RUN: identity.run_id,
        KEY_TASK: identity.task_id,
        KEY_TRY: identity.try_number,
        KEY_LOGICAL: identity.logical_date,
        KEY_START: identity.interval_start,
        KEY_END: identity.interval_end,
        KEY_INTERVAL: identity.interval_key,
        KEY_REPLACES: replaces,
        KEY_JOB_RUN: job_run_id,
    }
    return {k: str(v) for k, v in values.items() if v is not None}


# -------------------------------------------------------------- change sets
def change_metrics(snapshots: Sequence[Any]) -> dict[str, int]:
    """Added/deleted records and files summed over snapshot summaries, and the interval's net rows.

    ``net_added_records`` counts the rows the change adds: copy-on-write rewrites (re-added +
    deleted) cancel out and position deletes count, but rows removed by a replacement step
    (a snapshot stamped ``airflow.wap-replaces``) are reported as ``replaced_records`` instead
    of being subtracted, so a re-load of a 100-row day is judged as 100 added rows (as the
    first load was), not 0; ``interval_net_change`` is the difference ``main`` will see.
    """
    out = {key: 0 for key in SUMMARY_KEYS}
    replaced = 0
    for snap in snapshots:
        summary = snap.summary
        if summary.get(KEY_REPLACES):
            replaced += int(summary.get("deleted-records", 0) or 0) + int(summary.get("added-position-deletes", 0) or 0)
            replaced -= int(summary.get("added-records", 0) or 0)
        for key, summary_key in SUMMARY_KEYS.items():
            out[key] += int(summary.get(summary_key, 0) or 0)
    physical = (
        out["added_records"] - out["deleted_records"] - out["added_position_deletes"] + out["removed_position_deletes"]
    )
    out["replaced_records"] = replaced
    out["net_added_records"] = physical + replaced
    out["interval_net_change"] = physical
    out["snapshots"] = len(snapshots)
    return out


# ------------------------------------------------------------ earlier publish
@dataclass(frozen=True)
class EarlierPublish:
    """The latest publish of an interval found on ``main`` (or, after expiry, in the ledger)."""

    interval_key: str
    run_id: str | None
    try_number: str | None
    published_snapshot_id: int | None
    #: main-chain snapshots of that publish, oldest first (cherry-picked copies included)
    snapshot_ids: tuple[int, ...] = ()
    operations: tuple[str, ...] = ()
    #: main-chain append snapshots whose data files are that publish's rows
    append_ids: tuple[int, ...] = ()
    #: its replacement steps (stamped ``airflow.wap-replaces``): they removed an even earlier publish
    removal_ids: tuple[int, ...] = ()
    #: rows the publish added to the interval (``change_metrics(...)["net_added_records"]``)
    added_rows: int | None = None
    from_ledger: bool = False

    def describe(self) -> str:
        where = "ledger" if self.from_ledger else "main's history"
        return f"snapshot {self.published_snapshot_id} of run {self.run_id!r} (try {self.try_number}; from {where})"


def _identity_summary(snap: Any, by_id: Mapping[int, Any]) -> Mapping[str, str]:
    """The summary carrying the Airflow identity: the snapshot's own, or the cherry-pick source's."""
    summary: Mapping[str, str] = snap.summary
    if KEY_INTERVAL not in summary and summary.get(SOURCE_SNAPSHOT):
        source = by_id.get(int(summary[SOURCE_SNAPSHOT]))
        if source is not None:
            source_summary: Mapping[str, str] = source.summary
            return source_summary
    return summary


def find_published(chain: Sequence[Any], by_id: Mapping[int, Any], interval_key: str) -> EarlierPublish | None:
    """The latest publish of ``interval_key`` in ``chain`` (``main``'s ancestry, oldest first).

    A publish is the group of snapshots stamped with the interval by one write try
    (``run-id`` + ``try-number``): the latest try's group wins, since a replace removed
    what the earlier ones added.
    """
    matches = [(s, _identity_summary(s, by_id)) for s in chain]
    matches = [(s, m) for s, m in matches if m.get(KEY_INTERVAL) == interval_key]
    if not matches:
        return None
    last = matches[-1][1]
    group = [(s, m) for s, m in matches if (m.get(KEY_RUN), m.get(KEY_TRY)) == (last.get(KEY_RUN), last.get(KEY_TRY))]
    snaps = [s for s, _ in group]
    return EarlierPublish(
        interval_key=interval_key,
        run_id=last.get(KEY_RUN),
        try_number=last.get(KEY_TRY),
        published_snapshot_id=snaps[-1].snapshot_id,
        snapshot_ids=tuple(s.snapshot_id for s in snaps),
        operations=tuple(str(s.operation) for s in snaps),
        append_ids=tuple(s.snapshot_id for s, m in group if s.operation == "append" and not m.get(KEY_REPLACES)),
        removal_ids=tuple(s.snapshot_id for s, m in group if m.get(KEY_REPLACES)),
        added_rows=change_metrics(snaps)["net_added_records"],
    )


def history_complete(chain: Sequence[Any]) -> bool:
    """Whether ``chain`` (oldest first) reaches the table's first snapshot (nothing expired)."""
    return not chain or chain[0].parent_id is None


def published_from_ledger(
    rows: Iterable[Mapping[str, Any]], interval_key: str, on_main: set[int] | None = None
) -> EarlierPublish | None:
    """The latest succeeded ``wap_publish`` ledger row of the interval.

    Used when history was expired, and when the interval's writes carry no stamps (SQL statements
    through Spark Connect).

    :param on_main: ``main``'s ancestry when it is complete: a publish whose snapshot is no longer
        on it (rolled back) does not count.
    """
    found = []
    for row in rows:
        details = decode_ledger_row(row)["details"]
        if row.get("status") != "succeeded" or details.get("wap_interval") != interval_key:
            continue
        if on_main is not None and row.get("snapshot_after") is not None and int(row["snapshot_after"]) not in on_main:
            continue
        found.append((row, details))
    if not found:
        return None
    row, details = max(found, key=lambda rd: str(rd[0].get("finished_at")))
    metrics = decode_ledger_row(row)["metrics"]
    added = metrics.get("published_added_records")
    return EarlierPublish(
        interval_key=interval_key,
        run_id=row.get("run_id"),
        try_number=str(row.get("try_number")) if row.get("try_number") is not None else None,
        published_snapshot_id=row.get("snapshot_after"),
        added_rows=int(added) if added is not None else None,
        from_ledger=True,
    )


# ------------------------------------------------------------------- plans
@dataclass(frozen=True)
class RerunPlan:
    """What a WAP step does about an earlier publish of its interval.

    ``action``: ``write`` (nothing published yet), ``refuse``, ``skip``, ``replace``, or
    ``read_ledger`` (history was expired: read the ledger, then plan again).
    ``method`` (replace only): ``files`` (remove the data files of ``remove_snapshot_ids``)
    or ``predicate`` (delete the rows of ``replace_where``, which must match exactly
    ``expected_rows`` rows, none outside the files of ``remove_snapshot_ids`` when known).
    """

    action: str
    mode: str
    interval_key: str | None
    earlier: EarlierPublish | None = None
    method: str | None = None
    replace_where: str | None = None
    remove_snapshot_ids: tuple[int, ...] = ()
    expected_rows: int | None = None
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["remove_snapshot_ids"] = [str(i) for i in self.remove_snapshot_ids]
        if self.earlier is not None:
            out["earlier"] = {
                **out["earlier"],
                "published_snapshot_id": _str(self.earlier.published_snapshot_id),
                "snapshot_ids": [str(i) for i in self.earlier.snapshot_ids],
                "append_ids": [str(i) for i in self.earlier.append_ids],
                "removal_ids": [str(i) for i in self.earlier.removal_ids],
            }
        return out


def _str(value: int | None) -> str | None:
    return None if value is None else str(value)


def plan_rerun(
    mode: str,
    identity: RunIdentity,
    chain: Sequence[Any],
    by_id: Mapping[int, Any],
    *,
    table: str,
    replace_where: str | None = None,
    ledger_rows: Iterable[Mapping[str, Any]] | None = None,
    stamped: bool = True,
) -> RerunPlan:
    """Decide what a WAP write does for ``identity``'s interval, given ``main``'s ancestry.

    :param chain: ``main``'s ancestry, oldest first (snapshot values with ``snapshot_id``,
        ``parent_id``, ``operation``, ``summary``).
    :param by_id: every snapshot of the table by id (to follow cherry-picks to their source).
    :param ledger_rows: ``wap_publish`` ledger rows of the table; only needed when the plan
        said ``read_ledger``, else ``None``.
    :param stamped: whether the interval's writes stamp their snapshots. ``False`` for SQL
        statements through Spark Connect, which commit without the run's summary properties:
        then the ledger decides (a stamped publish on ``main`` still counts, from a run through
        spark-submit; the later of the two wins).
    """
    key = identity.interval_key
    if key is None:
        return RerunPlan("write", mode, None, message="no DAG run identity: the re-run check does not apply")
    earlier = find_published(chain, by_id, key)
    complete = history_complete(chain)
    if not stamped or (earlier is None and not complete):
        if ledger_rows is None:
            why = "main's history was expired" if stamped else "SQL writes through Spark Connect carry no stamps"
            return RerunPlan("read_ledger", mode, key, message=f"{why}; the ledger decides")
        on_main = {s.snapshot_id for s in chain} if complete else None
        logged = published_from_ledger(ledger_rows, key, on_main)
        if logged is not None and (earlier is None or _later_on_main(chain, logged, earlier)):
            earlier = logged
    if earlier is None:
        return RerunPlan("write", mode, key, message=f"interval {key} was not published yet")
    said = f"{table}: interval {identity.interval} of {identity.dag_id} was already published to main by {earlier.describe()}"
    if mode == "skip":
        return RerunPlan("skip", mode, key, earlier, message=f"{said}; on_rerun='skip': nothing is written.")
    if mode == "fail":
        return RerunPlan(
            "refuse",
            mode,
            key,
            earlier,
            message=f"{said}. on_rerun='fail' refuses to publish the interval a second time; nothing was changed. "
            "Use on_rerun='replace' to replace its rows, or on_rerun='skip' to keep them.",
        )
    return _plan_replace(mode, key, earlier, said, replace_where)


def _later_on_main(chain: Sequence[Any], logged: EarlierPublish, stamped: EarlierPublish) -> bool:
    """Whether the ledger's publish is later on ``main`` than the one its stamps show."""
    position = {s.snapshot_id: i for i, s in enumerate(chain)}
    return position.get(logged.published_snapshot_id or -1, len(chain)) > position.get(
        stamped.published_snapshot_id or -1, -1
    )


def _plan_replace(mode: str, key: str, earlier: EarlierPublish, said: str, replace_where: str | None) -> RerunPlan:
    # only the data files of appends are known to hold nothing but the publish's rows (a MERGE or
    # copy-on-write UPDATE re-adds other intervals' rows); its own replacement steps only removed rows
    files_known = (
        not earlier.from_ledger
        and bool(earlier.append_ids)
        and set(earlier.snapshot_ids) == set(earlier.append_ids) | set(earlier.removal_ids)
    )
    if replace_where is not None:
        if earlier.added_rows is None:
            return RerunPlan(
                "refuse",
                mode,
                key,
                earlier,
                message=f"{said}, but how many rows it added is unknown (no summary, no ledger metrics), so "
                f"replace_where cannot be checked against it. Nothing was changed.",
            )
        return RerunPlan(
            "replace",
            mode,
            key,
            earlier,
            method="predicate",
            replace_where=replace_where,
            remove_snapshot_ids=earlier.append_ids if files_known else (),
            expected_rows=earlier.added_rows,
            message=f"{said}; replacing the rows of replace_where (must be exactly its {earlier.added_rows} rows).",
        )
    if files_known:
        return RerunPlan(
            "replace",
            mode,
            key,
            earlier,
            method="files",
            remove_snapshot_ids=earlier.append_ids,
            expected_rows=earlier.added_rows,
            message=f"{said}; removing the data files its append snapshots {list(earlier.append_ids)} added.",
        )
    why = (
        "the ledger records it, but not which data files hold its rows (its snapshots were expired, or its "
        "writes carry no stamps)"
        if earlier.from_ledger
        else f"it committed {sorted(set(earlier.operations))} snapshots, and only the data files of appends are "
        "known to hold nothing but its rows"
    )
    return RerunPlan(
        "refuse",
        mode,
        key,
        earlier,
        message=f"{said}. on_rerun='replace' cannot prove which rows to remove: {why}. Nothing was changed. Declare "
        "replace_where (a predicate selecting exactly this interval's rows) to replace by predicate.",
    )


def plan_publish_race(
    mode: str,
    identity: RunIdentity,
    main_chain: Sequence[Any],
    by_id: Mapping[int, Any],
    branch_ids: set[int],
    *,
    table: str,
) -> RerunPlan:
    """At publish: did another run publish this interval after this branch was cut?

    Snapshots already in the branch's ancestry (the branch saw them, a replace removed their
    rows) and cherry-picked copies of the branch's own snapshots do not count.
    """
    key = identity.interval_key
    if key is None:
        return RerunPlan("write", mode, None)
    unseen = [
        s
        for s in main_chain
        if s.snapshot_id not in branch_ids and int(s.summary.get(SOURCE_SNAPSHOT) or 0) not in branch_ids
    ]
    earlier = find_published(unseen, by_id, key)
    if earlier is None:
        return RerunPlan("write", mode, key)
    said = (
        f"{table}: interval {identity.interval} of {identity.dag_id} was published to main by {earlier.describe()} "
        "after this run's branch was cut"
    )
    if mode == "skip":
        return RerunPlan("skip", mode, key, earlier, message=f"{said}; on_rerun='skip': this branch is not published.")
    return RerunPlan(
        "refuse",
        mode,
        key,
        earlier,
        message=f"{said}. Publishing this branch too would put the interval on main twice (on_rerun={mode!r}); "
        "main and the branch are unchanged. Clear this DAG run: its write plans again against the new main.",
    )
