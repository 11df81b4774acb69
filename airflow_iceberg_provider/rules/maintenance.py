"""Table-maintenance policy: defaults from table properties, validation, decisions.

Pure logic, testable without Spark or a catalog: the operators feed it plain
values read through :class:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook`
(``TableHealth``, snapshots, refs, per-partition file counts) and submit what it
decides as one Spark job.

Here: durations and cutoffs, parameter checks and safety floors, ``TableDefaults``
(what a table's properties say), ``preview_table_expiry`` (a loaded table's defaults fed
to :mod:`airflow_iceberg_provider.rules.expiry`, which mirrors Iceberg's
``RemoveSnapshots`` retention rules), ``file_layout`` / ``compaction_candidates``
(binpack's size rules), ``resolve_policy`` and ``decide`` (one planner per action
family). It must not read the catalog (``maintenance_state`` does, once) nor build SQL
(the ``maintenance`` Spark job does; action names and option checks are
:mod:`airflow_iceberg_provider.core.maintenance_actions`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, SupportsFloat

from airflow_iceberg_provider import params
from airflow_iceberg_provider.core import sql_allowlist
from airflow_iceberg_provider.core.maintenance_actions import (
    ACTIONS,
    COMPUTE_STATS,
    EXECUTION_ORDER,
    STRATEGIES,
    MaintenanceSqlError,
    check_options,
    check_sort_order,
)
from airflow_iceberg_provider.exceptions import (
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.models import DataFileFacts, TableHealth
from airflow_iceberg_provider.params import JAVA_LONG_MAX
from airflow_iceberg_provider.rules.expiry import ExpiryPreview, iso, preview_expiry, validate_retain_last
from airflow_iceberg_provider.rules.format_version import position_delete_rewrite_skip

# Iceberg defaults (TableProperties) -------------------------------------------
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1
DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024
DEFAULT_MANIFEST_MERGE_COUNT = 100
#: binpack's default file-size window, as fractions of the target size.
MIN_FILE_SIZE_FRACTION = 0.75
MAX_FILE_SIZE_FRACTION = 1.8

# Provider safety floors ------------------------------------------------------------
#: ``remove_orphan_files`` refuses shorter intervals itself (unless spark.testing=true).
ORPHAN_MIN_AGE = timedelta(hours=24)
ORPHAN_DEFAULT_AGE = timedelta(days=3)
#: Default floor for expiry: never expire snapshots younger than this unless lowered explicitly.
DEFAULT_EXPIRY_FLOOR = timedelta(hours=1)

#: Provider-specific table properties that set plan defaults (operator arguments win).
PROPERTY_PREFIX = "airflow-iceberg.maintenance."

_ORPHAN_RISK = (
    "files younger than the interval may belong to writes that are still in flight (written but "
    "not yet committed); deleting them corrupts those commits. Use at least 24 h — more than your "
    "longest running write — the default is 3 days."
)


# ----------------------------------------------------------------------------- time
def now_ms() -> int:
    return int(datetime.now(UTC).timestamp() * 1000)


_now_ms = now_ms  # for functions whose parameter is called now_ms


def parse_duration(value: object, param: str) -> timedelta:
    """A required duration (the one grammar: :func:`airflow_iceberg_provider.params.duration`)."""
    return params.duration(value, param, required=True)


#: ``older_than`` as an absolute instant (a duration means now minus it): :func:`params.cutoff_ms`.
resolve_cutoff = params.cutoff_ms


def _human(td: timedelta) -> str:
    secs = int(td.total_seconds())
    if secs % 86400 == 0 and secs:
        return f"{secs // 86400}d"
    if secs % 3600 == 0 and secs:
        return f"{secs // 3600}h"
    return f"{secs}s"


# ----------------------------------------------------------------------- validation
def validate_positive_int(value: object, param: str, *, minimum: int = 1) -> int:
    """A required count or size, ``minimum`` .. 2^63-1 (Iceberg's procedures take a Java ``long``)."""
    return params.positive_int(value, param, required=True, minimum=minimum, maximum=JAVA_LONG_MAX)  # type: ignore[return-value]


def validate_where(value: Any, param: str = "where", columns: Collection[str] | None = None) -> str | None:
    """A compaction filter: one row predicate on columns (``None``/empty: no filter).

    Iceberg parses it as a Spark expression; before any job it is parsed here and accepted only
    by the SQL allowlist (:mod:`~airflow_iceberg_provider.core.sql_allowlist`): no subqueries,
    table or path references, comments, ``;``, or functions off the list.

    :param columns: the table's column names, when known: no other column is accepted.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise IcebergValidationError(f"{param}={value!r} is not a string; pass a predicate such as \"region = 'ca'\".")
    try:
        return sql_allowlist.check_fragment(value, param, columns=columns)
    except sql_allowlist.UnsafeSqlError as err:
        raise IcebergValidationError(f"{err} Nothing was changed.") from err


def validate_ratio(value: object, param: str) -> float:
    try:
        out = float(value) if isinstance(value, (str, SupportsFloat)) else -1.0
    except (TypeError, ValueError):
        out = -1.0
    if isinstance(value, bool) or not 0.0 <= out:
        raise IcebergValidationError(f"{param}={value!r} is invalid; pass a number >= 0 (a ratio, e.g. 0.2).")
    return out


def check_expiry_cutoff(cutoff_ms: int, *, now: int, floor: timedelta, param: str = "older_than") -> None:
    """Refuse an expiry cutoff newer than ``now - floor``."""
    if floor < timedelta(0):
        raise IcebergValidationError(f"older_than_floor={floor!r} is negative; pass a duration >= 0.")
    if cutoff_ms > now:
        raise IcebergValidationError(
            f"{param} resolves to {iso(cutoff_ms)}, which is in the future; pass a past timestamp or a "
            "positive duration."
        )
    if now - cutoff_ms < floor.total_seconds() * 1000:
        raise IcebergRefusedError(
            f"{param} resolves to {iso(cutoff_ms)}, only {_human(timedelta(milliseconds=now - cutoff_ms))} ago, "
            f"newer than the expiry floor of {_human(floor)}: snapshots that recent may still be read by "
            "running queries or needed for time travel. Pass an older value, or lower older_than_floor "
            "explicitly if you really mean it. Nothing was changed."
        )


def check_orphan_cutoff(cutoff_ms: int, *, now: int, param: str = "older_than") -> None:
    """Refuse orphan removal for files younger than 24 h (the procedure's own floor)."""
    age = timedelta(milliseconds=now - cutoff_ms)
    if age < ORPHAN_MIN_AGE:
        raise IcebergValidationError(
            f"{param} resolves to {iso(cutoff_ms)} (files younger than {_human(age)} would be candidates); "
            f"remove_orphan_files needs at least 24 h: {_ORPHAN_RISK} Nothing was changed."
        )


def check_gc_enabled(properties: Mapping[str, str], table: str, action: str) -> None:
    if str(properties.get("gc.enabled", "true")).strip().lower() == "false":
        raise IcebergRefusedError(
            f"Table {table} has gc.enabled=false, so Iceberg refuses {action} (it would delete files the "
            "table may not own, e.g. after a migrate/snapshot or for a table sharing files). Set the table "
            "property gc.enabled=true if this table owns its files, or skip this action. Nothing was changed."
        )


#: the only operation Iceberg's rewrite procedures commit (data files, manifests, position deletes)
REWRITE_OPERATION = "replace"


def rewrite_commit_problem(action: str, commits: Sequence[Any], output: Mapping[str, Any]) -> str | None:
    """What is wrong with a rewrite's commits, or ``None``; ``commits`` are main's snapshots (plain values
    with ``snapshot_id``, ``operation``, ``summary``) from before the action to after it, oldest first.

    Iceberg rebases a rewrite over writers that committed meanwhile, so their snapshots (an
    ``append`` of a publish, an ``overwrite`` or ``delete`` of an erasure) may sit in that range:
    they are not the rewrite's. The rewrite's own are the ``replace`` snapshots; there must be
    one, and for ``rewrite_data_files`` they must add and remove exactly the data files the
    procedure reported.
    """
    ours = [c for c in commits if c.operation == REWRITE_OPERATION]
    if not ours:
        seen = [(c.snapshot_id, c.operation) for c in commits]
        return f"{action} reports {dict(output)} but main advanced only by {seen}, none a '{REWRITE_OPERATION}'"
    if action == "rewrite_data_files":  # one commit, or several (partial progress, dangling deletes)
        added = sum(int(c.summary.get("added-data-files", 0)) for c in ours)
        removed = sum(int(c.summary.get("deleted-data-files", 0)) for c in ours)
        if (added, removed) != (output.get("added_data_files_count"), output.get("rewritten_data_files_count")):
            return (
                f"rewrite_data_files commits {[c.snapshot_id for c in ours]} add {added} / remove {removed} "
                f"data files but the procedure reported {dict(output)}"
            )
    return None


def check_main_branch(branch: str, action: str) -> None:
    if branch != "main":
        raise IcebergValidationError(
            f"branch={branch!r}: {action} works on the main branch only (Iceberg's procedure has no branch "
            "argument). Compact main, or publish the branch to main first."
        )


def rewrite_options(
    *,
    target_file_size_bytes: Any = None,
    min_input_files: Any = None,
    delete_file_threshold: Any = None,
    partial_progress: Any = None,
    partial_progress_max_commits: Any = None,
    remove_dangling_deletes: bool | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Options map for ``rewrite_data_files``; named arguments win over ``options``."""
    out = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in (options or {}).items()}
    if target_file_size_bytes is not None:
        out["target-file-size-bytes"] = str(
            validate_positive_int(target_file_size_bytes, "target_file_size_bytes", minimum=1024)
        )
    if min_input_files is not None:
        out["min-input-files"] = str(validate_positive_int(min_input_files, "min_input_files"))
    if delete_file_threshold is not None:
        out["delete-file-threshold"] = str(validate_positive_int(delete_file_threshold, "delete_file_threshold"))
    if partial_progress is not None:
        out["partial-progress.enabled"] = "true" if _as_bool(partial_progress, "partial_progress") else "false"
    if partial_progress_max_commits is not None:
        out["partial-progress.max-commits"] = str(
            validate_positive_int(partial_progress_max_commits, "partial_progress_max_commits")
        )
    if remove_dangling_deletes is not None:
        out["remove-dangling-deletes"] = (
            "true" if _as_bool(remove_dangling_deletes, "remove_dangling_deletes") else "false"
        )
    try:
        check_options(out)
    except MaintenanceSqlError as err:
        raise IcebergValidationError(f"options: {err}.") from err
    return out


def validate_strategy(strategy: object, sort_order: Any, table_sort_fields: int) -> tuple[str, str | None]:
    """``binpack``, ``sort`` (table sort order or ``sort_order``), z-order via ``sort_order='zorder(a,b)'``."""
    if strategy not in STRATEGIES:
        hint = " (z-order is strategy='sort', sort_order='zorder(a,b)')" if str(strategy).lower() == "zorder" else ""
        raise IcebergValidationError(f"strategy={strategy!r} is invalid; use 'binpack' or 'sort'{hint}.")
    if sort_order is not None and sort_order != "":
        if strategy != "sort":
            raise IcebergValidationError(
                f"sort_order={sort_order!r} needs strategy='sort' (binpack does not sort); pass strategy='sort'."
            )
        try:
            return strategy, check_sort_order(str(sort_order))
        except MaintenanceSqlError as err:
            raise IcebergValidationError(f"{err}.") from err
    if strategy == "sort" and table_sort_fields == 0:
        raise IcebergValidationError(
            "strategy='sort' without sort_order needs a table sort order, and this table has none; pass "
            "sort_order='col ASC, ...' or sort_order='zorder(a,b)', or set one with ALTER TABLE ... WRITE ORDERED BY."
        )
    return strategy, None


def _as_bool(value: Any, param: str) -> bool:
    """The strict flag rule (:func:`~airflow_iceberg_provider.params.flag`)."""
    return params.flag(value, param)


# --------------------------------------------------------------------- table defaults
def _prop_int(props: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = props.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        return int(str(raw).strip())
    except ValueError as err:
        raise IcebergValidationError(f"table property {key}={raw!r} is not an integer; fix the property.") from err


def _prop_float(props: Mapping[str, str], key: str, default: float) -> float:
    raw = props.get(key)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as err:
        raise IcebergValidationError(f"table property {key}={raw!r} is not a number; fix the property.") from err


@dataclass(frozen=True)
class TableDefaults:
    """What a table's properties say about maintenance (Iceberg's keys, Iceberg's defaults)."""

    gc_enabled: bool
    max_snapshot_age_ms: int
    min_snapshots_to_keep: int
    max_ref_age_ms: int | None
    target_file_size_bytes: int
    manifest_merge_count: int

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TableDefaults:
        return cls(
            gc_enabled=str(props.get("gc.enabled", "true")).strip().lower() != "false",
            max_snapshot_age_ms=_prop_int(props, "history.expire.max-snapshot-age-ms", DEFAULT_MAX_SNAPSHOT_AGE_MS)
            or DEFAULT_MAX_SNAPSHOT_AGE_MS,
            min_snapshots_to_keep=_prop_int(
                props, "history.expire.min-snapshots-to-keep", DEFAULT_MIN_SNAPSHOTS_TO_KEEP
            )
            or DEFAULT_MIN_SNAPSHOTS_TO_KEEP,
            max_ref_age_ms=_prop_int(props, "history.expire.max-ref-age-ms", None),
            target_file_size_bytes=_prop_int(props, "write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE)
            or DEFAULT_TARGET_FILE_SIZE,
            manifest_merge_count=_prop_int(props, "commit.manifest.min-count-to-merge", DEFAULT_MANIFEST_MERGE_COUNT)
            or DEFAULT_MANIFEST_MERGE_COUNT,
        )


# ------------------------------------------------------------------- expiry of a table
def preview_table_expiry(
    tbl: Any,
    *,
    older_than: Any = None,
    retain_last: int | None = None,
    snapshot_ids: Sequence[int | str] = (),
    now_ms: int | None = None,
) -> ExpiryPreview:
    """Which snapshots Spark ``expire_snapshots`` would remove from a loaded table (metadata only, no JVM).

    The table's own properties give the defaults, exactly as Iceberg applies them;
    :func:`~airflow_iceberg_provider.rules.expiry.preview_expiry` applies the retention
    rules (refs keep what they reach; the result lists which *old* snapshots are kept by
    which ref: ``branch:``, ``tag:`` or ``legal_hold:``).

    :param tbl: a pyiceberg table as loaded by the catalog hook (only its metadata is read).
    :param older_than: duration (age) or instant (datetime, ISO string, epoch ms);
        default ``now - history.expire.max-snapshot-age-ms`` (Iceberg default 5 days).
    :param retain_last: snapshots of main to keep at least; default
        ``history.expire.min-snapshots-to-keep`` (Iceberg default 1).
    :param snapshot_ids: snapshots to expire explicitly (refused when a ref points at one).
    """
    from airflow_iceberg_provider.models import ref_infos, snapshot_info
    from airflow_iceberg_provider.params import validate_snapshot_id

    meta = tbl.metadata
    defaults = TableDefaults.from_properties(meta.properties)
    now = now_ms if now_ms is not None else _now_ms()
    cutoff = (
        resolve_cutoff(older_than, "older_than", now=now)
        if older_than is not None
        else now - defaults.max_snapshot_age_ms
    )
    return preview_expiry(
        [snapshot_info(s) for s in meta.snapshots],
        ref_infos(meta.refs),
        older_than_ms=cutoff,
        retain_last=retain_last if retain_last is not None else defaults.min_snapshots_to_keep,
        now=now,
        snapshot_ids=[validate_snapshot_id(i, "snapshot_ids") for i in snapshot_ids],
        default_max_ref_age_ms=defaults.max_ref_age_ms,
        table=".".join(tbl.name()[-2:]),
    )


# --------------------------------------------------------------------- compaction layout
@dataclass(frozen=True)
class PartitionFiles:
    """Data/delete file counts of one partition of the current ``main`` state."""

    partition: str
    spec_id: int
    data_files: int
    data_bytes: int
    small_files: int
    small_bytes: int
    large_files: int
    delete_files: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def file_layout(files: Iterable[DataFileFacts], *, target_file_size: int) -> list[PartitionFiles]:
    """Per-partition data and delete file counts of ``main``'s current state.

    Files smaller than 75 % / larger than 180 % of the target size are counted as
    small / large, which is binpack compaction's own selection rule.
    """
    small, large = int(target_file_size * MIN_FILE_SIZE_FRACTION), int(target_file_size * MAX_FILE_SIZE_FRACTION)
    counters = ("data_files", "data_bytes", "small_files", "small_bytes", "large_files", "delete_files")
    stats: dict[tuple[int, str], dict[str, int]] = {}
    for f in files:
        s = stats.setdefault((f.spec_id, f.partition), dict.fromkeys(counters, 0))
        if f.content != "data":
            s["delete_files"] += 1
            continue
        s["data_files"] += 1
        s["data_bytes"] += f.file_size_in_bytes
        if f.file_size_in_bytes < small:
            s["small_files"] += 1
            s["small_bytes"] += f.file_size_in_bytes
        elif f.file_size_in_bytes > large:
            s["large_files"] += 1
    return [PartitionFiles(partition=p, spec_id=sid, **s) for (sid, p), s in sorted(stats.items())]


def compaction_candidates(
    layout: Iterable[PartitionFiles], *, target_file_size: int, min_input_files: int
) -> dict[str, Any]:
    """Which partitions binpack would rewrite (mirrors ``SizeBasedFileRewritePlanner``'s size rules).

    A partition's out-of-range files (smaller than 75 % or larger than 180 % of the
    target) form a group that is rewritten when it has at least ``min_input_files``
    files (and more than one), when its bytes exceed the target (more than one file),
    or when it holds a too-large file. Delete-driven rewrites are decided separately.
    """
    parts, files, nbytes = [], 0, 0
    for p in layout:
        n = p.small_files + p.large_files
        too_many = n > 1 and n >= min_input_files
        enough_content = n > 1 and p.small_bytes > target_file_size
        if too_many or enough_content or p.large_files > 0:
            parts.append(p.partition)
            files += n
            nbytes += p.small_bytes
    return {"partitions": parts, "files": files, "bytes": nbytes}


# ------------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class MaintenancePolicy:
    """Thresholds and parameters of a maintenance plan (operator arguments over table properties)."""

    target_file_size_bytes: int
    min_input_files: int = 5
    #: compact when compactable files / data files reaches this share
    max_small_file_ratio: float = 0.2
    #: rewrite data files with their deletes applied when delete files per data file reaches this
    max_deletes_per_data_file: float = 0.1
    delete_file_threshold: int = 1
    max_manifests: int = DEFAULT_MANIFEST_MERGE_COUNT
    expire_older_than_ms: int = 0
    retain_last: int = DEFAULT_MIN_SNAPSHOTS_TO_KEEP
    min_snapshots_to_expire: int = 1
    remove_orphans: bool = False
    orphan_older_than_ms: int = 0
    orphan_dry_run: bool = True
    partial_progress: bool = False
    actions: tuple[str, ...] = ACTIONS
    #: regenerate Puffin table statistics when they do not describe the current snapshot
    compute_stats: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["expire_older_than"] = iso(self.expire_older_than_ms)
        out["orphan_older_than"] = iso(self.orphan_older_than_ms)
        return out


def resolve_policy(
    properties: Mapping[str, str],
    *,
    now: int,
    target_file_size_bytes: Any = None,
    min_input_files: Any = None,
    max_small_file_ratio: Any = None,
    max_deletes_per_data_file: Any = None,
    delete_file_threshold: Any = None,
    max_manifests: Any = None,
    expire_older_than: Any = None,
    retain_last: Any = None,
    min_snapshots_to_expire: Any = None,
    older_than_floor: timedelta = DEFAULT_EXPIRY_FLOOR,
    remove_orphans: Any = None,
    orphan_older_than: Any = ORPHAN_DEFAULT_AGE,
    orphan_dry_run: Any = True,
    partial_progress: Any = None,
    actions: Sequence[str] | None = None,
    compute_stats: Any = None,
) -> MaintenancePolicy:
    """Merge operator arguments (win) with table properties (Iceberg's and ``airflow-iceberg.maintenance.*``).

    Validates everything, including the expiry floor and the 24 h orphan floor.
    """
    d = TableDefaults.from_properties(properties)

    def pick(arg: Any, key: str, default: Any) -> Any:
        if arg is not None:
            return arg
        return properties.get(PROPERTY_PREFIX + key, default)

    acts = tuple(actions) if actions is not None else ACTIONS
    unknown = [a for a in acts if a not in ACTIONS]
    if unknown:
        raise IcebergValidationError(
            f"actions={list(acts)!r} has unknown entries {unknown}; choose from {list(ACTIONS)}."
        )
    floor = parse_duration(older_than_floor, "older_than_floor")
    expire_cutoff = (
        resolve_cutoff(expire_older_than, "expire_older_than", now=now)
        if expire_older_than is not None
        else now - d.max_snapshot_age_ms
    )
    check_expiry_cutoff(expire_cutoff, now=now, floor=floor, param="expire_older_than")
    orphan_cutoff = resolve_cutoff(orphan_older_than, "orphan_older_than", now=now)
    check_orphan_cutoff(orphan_cutoff, now=now, param="orphan_older_than")
    return MaintenancePolicy(
        target_file_size_bytes=validate_positive_int(
            target_file_size_bytes if target_file_size_bytes is not None else d.target_file_size_bytes,
            "target_file_size_bytes",
            minimum=1024,
        ),
        min_input_files=validate_positive_int(pick(min_input_files, "min-input-files", 5), "min_input_files"),
        max_small_file_ratio=validate_ratio(
            pick(max_small_file_ratio, "max-small-file-ratio", 0.2), "max_small_file_ratio"
        ),
        max_deletes_per_data_file=validate_ratio(
            pick(max_deletes_per_data_file, "max-deletes-per-data-file", 0.1), "max_deletes_per_data_file"
        ),
        delete_file_threshold=validate_positive_int(
            pick(delete_file_threshold, "delete-file-threshold", 1), "delete_file_threshold"
        ),
        max_manifests=validate_positive_int(
            pick(max_manifests, "max-manifests", d.manifest_merge_count), "max_manifests"
        ),
        expire_older_than_ms=expire_cutoff,
        retain_last=validate_retain_last(retain_last if retain_last is not None else d.min_snapshots_to_keep),
        min_snapshots_to_expire=validate_positive_int(
            pick(min_snapshots_to_expire, "min-snapshots-to-expire", 1), "min_snapshots_to_expire"
        ),
        remove_orphans=_as_bool(pick(remove_orphans, "remove-orphans", False), "remove_orphans"),
        orphan_older_than_ms=orphan_cutoff,
        orphan_dry_run=_as_bool(orphan_dry_run, "orphan_dry_run"),
        partial_progress=_as_bool(pick(partial_progress, "partial-progress", False), "partial_progress"),
        actions=acts,
        compute_stats=_as_bool(pick(compute_stats, "compute-stats", False), "compute_stats"),
    )


@dataclass(frozen=True)
class PlannedAction:
    action: str
    args: dict[str, Any]
    reason: str

    def spec(self) -> dict[str, Any]:
        return {"action": self.action, "args": self.args}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class MaintenanceDecision:
    actions: list[PlannedAction]
    skipped: dict[str, str]
    findings: dict[str, Any]

    @property
    def healthy(self) -> bool:
        """Nothing to do, and no legal hold violated."""
        return not self.actions and not self.findings.get("hold_violations")

    def to_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "actions": [a.to_dict() for a in self.actions],
            "skipped": dict(self.skipped),
            "findings": dict(self.findings),
        }


@dataclass
class _Plan:
    """What ``decide`` accumulates: planned actions, skipped actions with reasons, findings."""

    health: TableHealth
    policy: MaintenancePolicy
    allowed: set[str]
    gc: bool
    force: bool
    actions: list[PlannedAction] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    findings: dict[str, Any] = field(default_factory=dict)

    def wants(self, action: str) -> bool:
        return action in self.allowed


def _plan_compaction(plan: _Plan, layout: Iterable[PartitionFiles]) -> bool:
    """Plan ``rewrite_data_files``; returns whether the delete ratio calls for rewriting deletes."""
    health, policy = plan.health, plan.policy
    cand = compaction_candidates(
        layout, target_file_size=policy.target_file_size_bytes, min_input_files=policy.min_input_files
    )
    ratio = cand["files"] / health.data_files if health.data_files else 0.0
    deletes_ratio = health.deletes_per_data_file
    plan.findings.update(
        compactable_files=cand["files"],
        compactable_partitions=len(cand["partitions"]),
        compactable_ratio=round(ratio, 4),
        small_files=health.small_files,
        small_file_ratio=round(health.small_file_ratio, 4),
        deletes_per_data_file=round(deletes_ratio, 4),
        manifests=health.manifests,
        snapshots=health.snapshots,
    )
    by_size = cand["files"] >= 2 and ratio >= policy.max_small_file_ratio and ratio > 0
    by_deletes = health.delete_files > 0 and deletes_ratio >= policy.max_deletes_per_data_file
    if not plan.wants("rewrite_data_files"):
        return by_deletes
    if not (health.data_files and (by_size or by_deletes or plan.force)):
        plan.skipped["rewrite_data_files"] = (
            f"{cand['files']} compactable files ({ratio:.0%} < {policy.max_small_file_ratio:.0%}) and "
            f"{deletes_ratio:.2f} delete files per data file (< {policy.max_deletes_per_data_file})"
        )
        return by_deletes
    reasons = []
    if by_size:
        reasons.append(
            f"{cand['files']} of {health.data_files} data files ({ratio:.0%}) are compactable in "
            f"{len(cand['partitions'])} partition(s) (threshold {policy.max_small_file_ratio:.0%})"
        )
    if by_deletes:
        reasons.append(
            f"{health.delete_files} delete files for {health.data_files} data files ({deletes_ratio:.2f} per "
            f"file, threshold {policy.max_deletes_per_data_file})"
        )
    opts = rewrite_options(
        target_file_size_bytes=policy.target_file_size_bytes,
        min_input_files=policy.min_input_files,
        delete_file_threshold=policy.delete_file_threshold,
        partial_progress=policy.partial_progress,
        remove_dangling_deletes=True if health.delete_files else None,
    )
    plan.actions.append(
        PlannedAction("rewrite_data_files", {"strategy": "binpack", "options": opts}, "; ".join(reasons) or "forced")
    )
    return by_deletes


def _plan_position_deletes(plan: _Plan, by_deletes: bool) -> None:
    health = plan.health
    if not plan.wants("rewrite_position_delete_files"):
        return
    skip = position_delete_rewrite_skip(health.format_version)
    if skip:
        plan.skipped["rewrite_position_delete_files"] = skip
    elif health.position_delete_files and (by_deletes or plan.force):
        plan.actions.append(
            PlannedAction(
                "rewrite_position_delete_files",
                {"options": {"rewrite-all": "true"}},
                f"{health.position_delete_files} position delete files: compact them and drop dangling ones",
            )
        )
    else:
        plan.skipped["rewrite_position_delete_files"] = f"{health.position_delete_files} position delete files"


def _plan_manifests(plan: _Plan) -> None:
    health, policy = plan.health, plan.policy
    if not plan.wants("rewrite_manifests"):
        return
    if health.manifests > policy.max_manifests or (plan.force and health.manifests > 1):
        plan.actions.append(
            PlannedAction(
                "rewrite_manifests",
                {},
                f"{health.manifests} manifests (threshold {policy.max_manifests})" if not plan.force else "forced",
            )
        )
    else:
        plan.skipped["rewrite_manifests"] = f"{health.manifests} manifests <= {policy.max_manifests}"


def _plan_expiry(plan: _Plan, expiry: ExpiryPreview | None) -> None:
    policy = plan.policy
    if not plan.wants("expire_snapshots"):
        return
    if not plan.gc:
        plan.skipped["expire_snapshots"] = "gc.enabled=false: Iceberg refuses expire_snapshots on this table"
        return
    if expiry is None:
        plan.skipped["expire_snapshots"] = "no expiry preview"
        return
    plan.findings["expirable_snapshots"] = len(expiry.expire)
    plan.findings["held_snapshots"] = expiry.held_snapshots
    # compaction in the same run makes the replaced files reclaimable only through expiry
    if len(expiry.expire) >= policy.min_snapshots_to_expire or (plan.force and expiry.expire):
        plan.actions.append(
            PlannedAction(
                "expire_snapshots",
                {"older_than_ms": policy.expire_older_than_ms, "retain_last": policy.retain_last},
                f"{len(expiry.expire)} snapshots older than {iso(policy.expire_older_than_ms)} beyond the "
                f"last {policy.retain_last} (threshold {policy.min_snapshots_to_expire})",
            )
        )
    else:
        plan.skipped["expire_snapshots"] = (
            f"{len(expiry.expire)} expirable snapshots (< {policy.min_snapshots_to_expire})"
            + (f"; {len(expiry.held_snapshots)} old snapshots held by refs" if expiry.held_snapshots else "")
        )


def _plan_orphans(plan: _Plan) -> None:
    policy = plan.policy
    if not plan.wants("remove_orphan_files"):
        return
    if not policy.remove_orphans:
        plan.skipped["remove_orphan_files"] = "remove_orphans is off (it lists the whole table location)"
    elif not plan.actions and not plan.force:
        plan.skipped["remove_orphan_files"] = (
            "no other action needs a Spark job; orphan removal rides along with one (or use force=True, "
            "or schedule IcebergRemoveOrphanFilesOperator on its own cadence)"
        )
    elif not plan.gc:
        plan.skipped["remove_orphan_files"] = "gc.enabled=false: Iceberg refuses remove_orphan_files on this table"
    else:
        plan.actions.append(
            PlannedAction(
                "remove_orphan_files",
                {"older_than_ms": policy.orphan_older_than_ms, "dry_run": policy.orphan_dry_run},
                f"policy asks for orphan removal (files older than {iso(policy.orphan_older_than_ms)}"
                + (", dry run)" if policy.orphan_dry_run else ")"),
            )
        )


def _plan_statistics(plan: _Plan) -> None:
    health, policy = plan.health, plan.policy
    plan.findings["statistics_fresh"] = health.statistics_fresh
    rewrites = [a.action for a in plan.actions if a.action in ("rewrite_data_files", "rewrite_position_delete_files")]
    if policy.compute_stats and health.snapshot_id is not None and (health.statistics_fresh is False or rewrites):
        plan.actions.append(
            PlannedAction(
                COMPUTE_STATS,
                {},
                "table statistics describe an older snapshot"
                if not rewrites
                else f"{' and '.join(rewrites)} will produce a new snapshot",
            )
        )
    elif policy.compute_stats:
        plan.skipped[COMPUTE_STATS] = "table statistics describe the current snapshot"


def decide(
    health: TableHealth,
    policy: MaintenancePolicy,
    *,
    properties: Mapping[str, str],
    layout: Iterable[PartitionFiles] | None = None,
    expiry: ExpiryPreview | None = None,
    force: bool = False,
    hold_violations: Sequence[Any] = (),
) -> MaintenanceDecision:
    """Which actions the policy calls for, in execution order, each with its reason.

    ``force`` plans every allowed and applicable action regardless of thresholds
    (safety checks still apply: gc, format version, floors).

    ``hold_violations`` (:class:`~airflow_iceberg_provider.rules.refs.HoldViolation` values: legal
    holds dropped, re-typed or moved outside the provider) are reported in the findings
    (``hold_violations``), and no snapshot is expired while there is one: the snapshot a violated
    hold pinned must stay until the hold is restored or released.
    """
    plan = _Plan(
        health=health,
        policy=policy,
        allowed=set(policy.actions),
        gc=TableDefaults.from_properties(properties).gc_enabled,
        force=force,
    )
    by_deletes = _plan_compaction(plan, layout or [])
    _plan_position_deletes(plan, by_deletes)
    _plan_manifests(plan)
    _plan_expiry(plan, expiry)
    if hold_violations:
        plan.findings["hold_violations"] = [v.to_dict() for v in hold_violations]
        if any(a.action == "expire_snapshots" for a in plan.actions) or plan.wants("expire_snapshots"):
            plan.actions = [a for a in plan.actions if a.action != "expire_snapshots"]
            plan.skipped["expire_snapshots"] = (
                f"legal hold violation: {', '.join(repr(v.tag) for v in hold_violations)} changed outside the "
                "provider; restore or release the hold before expiring snapshots"
            )
    _plan_orphans(plan)  # after the others: it rides along with another action's job
    _plan_statistics(plan)
    order = {name: i for i, name in enumerate(EXECUTION_ORDER)}
    plan.actions.sort(key=lambda a: order[a.action])
    return MaintenanceDecision(actions=plan.actions, skipped=plan.skipped, findings=plan.findings)


# ------------------------------------------------------------------------------ verdict
#: What each maintenance action does, in words (the verdict's reasons name actions this way).
ACTION_WORDS = {
    "rewrite_data_files": "compact data files",
    "rewrite_position_delete_files": "compact position delete files",
    "rewrite_manifests": "merge manifests",
    "expire_snapshots": "expire old snapshots",
    "remove_orphan_files": "remove orphan files",
    COMPUTE_STATS: "refresh table statistics",
}
#: The maintenance action that brings each health threshold back within bounds.
FIXED_BY = {
    "max_files": "rewrite_data_files",
    "min_avg_file_size_bytes": "rewrite_data_files",
    "max_snapshots": "expire_snapshots",
}
#: Health verdicts and their levels (a CSS class each): green, amber, red.
VERDICT_LEVELS = {"healthy": "ok", "needs maintenance": "warn", "unhealthy": "fail", "unknown": "warn"}


def _size_words(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} bytes"


def breach_words(threshold: str, value: float, limit: float) -> str:
    """One crossed health threshold in words, e.g. ``average data file 1.2 KiB, below the 10.0 MiB minimum``."""
    if threshold == "min_avg_file_size_bytes":
        return f"average data file {_size_words(value)}, below the {_size_words(limit)} minimum"
    if threshold == "max_metadata_bytes":
        return f"table metadata {_size_words(value)}, above the {_size_words(limit)} maximum"
    what = {"max_files": "data files", "max_snapshots": "snapshots", "max_metadata_log": "metadata log entries"}
    return f"{value:,.0f} {what.get(threshold, threshold)}, above the {limit:,.0f} maximum"


@dataclass(frozen=True)
class HealthVerdict:
    """A table's verdict at a glance, decided by the maintenance planner.

    ``healthy`` (green): the planner plans nothing and no health threshold is crossed.
    ``needs maintenance`` (amber): the planner plans actions; its own reasons say why, and a
    crossed threshold that a planned action fixes is routine.
    ``unhealthy`` (red): an incident, something the next maintenance run will not fix: a crossed
    threshold with no action planned for it (a small average file size with nothing to compact
    is only a note: the data is small), or an expiry the table's refs refuse.
    """

    verdict: str
    reasons: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def level(self) -> str:
        return VERDICT_LEVELS[self.verdict]

    def to_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "level": self.level, "reasons": list(self.reasons), "notes": list(self.notes)}


def health_verdict(
    decision: MaintenanceDecision,
    breached: Iterable[tuple[str, float, float]],
    *,
    expiry_refused: str | None = None,
) -> HealthVerdict:
    """The verdict of :func:`decide`'s ``decision`` and the crossed health thresholds.

    :param decision: the planner's decision for the table as it is now.
    :param breached: ``(threshold, value, limit)`` of every crossed threshold
        (:func:`airflow_iceberg_provider.rules.health.breaches`).
    :param expiry_refused: why the planner's expiry preview was refused (a legal hold), if it was.
    """
    planned = {a.action for a in decision.actions}
    reasons = [f"{ACTION_WORDS.get(a.action, a.action)}: {a.reason}" for a in decision.actions]
    incidents: list[str] = []
    notes: list[str] = []
    for threshold, value, limit in breached:
        words = breach_words(threshold, value, limit)
        fix = FIXED_BY.get(threshold)
        if fix in planned:
            notes.append(f"{words}; the planned maintenance ({ACTION_WORDS[fix]}) addresses it")
        elif threshold == "min_avg_file_size_bytes":
            why = decision.skipped.get("rewrite_data_files", "the planner finds nothing to compact")
            notes.append(f"{words}, but there is nothing to compact ({why})")
        else:
            planner = f" ({ACTION_WORDS[fix]}: {decision.skipped[fix]})" if fix and fix in decision.skipped else ""
            incidents.append(f"{words}, and maintenance will not fix it{planner}")
    if expiry_refused:
        incidents.append(f"snapshot expiry is refused: {expiry_refused}")
    verdict = "unhealthy" if incidents else "needs maintenance" if decision.actions else "healthy"
    return HealthVerdict(verdict, tuple(incidents + reasons), tuple(notes))
