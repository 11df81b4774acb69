"""Which snapshot each WAP ref moves to: the pure plans of branch, audit and publish (no I/O).

Each WAP operator reads the catalog once (*resolve*: refs and snapshots as plain values), asks a
function here what to do (*plan*), lets the hook do it (*apply*), checks the catalog (*verify*) and
writes its ledger row (*record*). The rules live here, once:

* :func:`audited_snapshot`: which snapshot a publish may publish (never an unaudited commit);
* :func:`read_verdict` and :func:`publish_verdict`: the verdict of exactly this run's audit (by
  its event id, spec hash and snapshot), and whether it lets the publish through;
* :func:`plan_publish` -> :class:`PublishPlan`: no-op, fast-forward or cherry-pick, the refusals
  (``main`` moved, non-append snapshots, another run published the interval) and every ref change
  of the publish (``main``, the tag, the dropped branch) as :class:`~airflow_iceberg_provider.rules.refs.RefChange`
  values that the hook commits **at once** with one compare-and-swap requirement per ref;
* :func:`plan_create_branch` and :func:`plan_branch_reset` for the first two steps.

The tag of a publish follows the rules of ``IcebergCreateTagOperator``
(:func:`~airflow_iceberg_provider.rules.refs.check_tag_name`, :func:`~airflow_iceberg_provider.rules.refs.plan_tag`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, NoReturn

from airflow_iceberg_provider.core.audit_checks import spec_hash_of
from airflow_iceberg_provider.exceptions import (
    IcebergPublishConflictError,
    IcebergRefNotFoundError,
    IcebergRefusedError,
)
from airflow_iceberg_provider.models import RefInfo
from airflow_iceberg_provider.params import MAIN_BRANCH, AuditBinding
from airflow_iceberg_provider.rules import wap_rerun as rerun
from airflow_iceberg_provider.rules.refs import RefChange, plan_tag

ON_CONFLICT = ("fail", "cherrypick")


# ----------------------------------------------------------------- history
def ancestry(by_id: Mapping[int, Any], head: int | None) -> list[int]:
    """Ids from ``head`` back through its parents (newest first, itself included; stops at expired ones)."""
    out: list[int] = []
    while head is not None and head in by_id:
        out.append(head)
        head = by_id[head].parent_id
    return out


def merge_base(by_id: Mapping[int, Any], head: int | None, other: int | None) -> int | None:
    """Newest snapshot in ``head``'s ancestry that is also in ``other``'s (where a branch was cut)."""
    if head is None or other is None:
        return None
    others = set(ancestry(by_id, other))
    return next((sid for sid in ancestry(by_id, head) if sid in others), None)


def branch_snapshots(by_id: Mapping[int, Any], head: int, base: int | None) -> list[Any]:
    """Snapshots from ``base`` (exclusive) to ``head`` (inclusive), oldest first."""
    chain = ancestry(by_id, head)
    if base is not None:
        if base not in chain:
            raise IcebergRefusedError(
                f"Snapshot {head} does not descend from the branch base {base}; the branch was replaced by "
                "another writer. Nothing was changed."
            )
        chain = chain[: chain.index(base)]
    return [by_id[sid] for sid in reversed(chain)]


def cherry_picked(by_id: Mapping[int, Any], chain: Sequence[int]) -> set[int]:
    """Source snapshot ids already replayed onto ``chain`` (``source-snapshot-id`` in the summaries)."""
    sources = (by_id[sid].summary.get(rerun.SOURCE_SNAPSHOT) for sid in chain if sid in by_id)
    return {int(s) for s in sources if s}


# ------------------------------------------------------------------ audit gate
def audited_snapshot(
    table: str, branch: str, branch_ref: RefInfo | None, requested: int | None, by_id: Mapping[int, Any]
) -> int:
    """The snapshot to publish: ``requested`` (or the branch head), which must still be the branch head."""
    if branch_ref is not None and branch_ref.type != "branch":
        raise IcebergRefusedError(f"{table} ref {branch!r} is a tag, not a WAP branch. Nothing was changed.")
    if requested is None:
        if branch_ref is None:
            raise IcebergRefNotFoundError(f"{table} has no branch {branch!r} to publish.")
        requested = branch_ref.snapshot_id
    if requested not in by_id:
        raise IcebergRefNotFoundError(
            f"Snapshot {requested} does not exist on table {table} (expired or never created)."
        )
    if branch_ref is not None and branch_ref.snapshot_id != requested:
        raise IcebergRefusedError(
            f"Branch {branch!r} of {table} moved after its audit: it is at {branch_ref.snapshot_id}, the audit "
            f"passed snapshot {requested}. Refusing to publish unaudited commits; re-run the audit. Nothing was "
            "changed."
        )
    return requested


#: how far an audit row's ``evaluated_at`` may lie ahead of the publish's clock (skew between hosts)
CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class Verdict:
    """The verdict of one audit run, read by its event id and checked against its binding.

    ``rows`` are the run's ``audit_results`` rows (one per check); ``failed`` lists the failed
    checks as ``{"check", "observed", "expected"}`` (sorted by check name).
    """

    event_id: str
    spec_hash: str
    snapshot_id: int
    rows: tuple[Mapping[str, Any], ...]

    @property
    def binding(self) -> AuditBinding:
        return AuditBinding(self.event_id, self.spec_hash, self.snapshot_id)

    @property
    def check_hashes(self) -> dict[str, str]:
        return {str(r["check_name"]): str(r["check_hash"]) for r in self.rows}

    @property
    def failed(self) -> tuple[dict[str, Any], ...]:
        return tuple(
            {"check": r["check_name"], "observed": r.get("observed_value"), "expected": r.get("condition")}
            for r in sorted(self.rows, key=lambda r: str(r["check_name"]))
            if not r["passed"]
        )


def _refuse_verdict(param: str, value: str, problem: str, fix: str) -> NoReturn:
    raise IcebergRefusedError(f"{param}={value} {problem}; {fix}. Nothing was changed.")


def read_verdict(
    rows: Sequence[Mapping[str, Any]],
    binding: AuditBinding | None,
    *,
    table: str,
    snapshot_id: int,
    dag_id: str | None,
    run_id: str | None,
    now: datetime,
    where: str,
    param: str = "audit",
) -> Verdict:
    """The verdict of exactly the audit run ``binding`` names, or a refusal.

    ``rows`` are the ``audit_results`` rows whose ``event_id`` is the binding's. They count only if
    every one of them is about ``table`` and ``snapshot_id`` (the snapshot being published, which
    must be the one the audit reported), was written in this DAG run (``dag_id``, ``run_id``), was
    not evaluated in the future (beyond :data:`CLOCK_SKEW`), and carries the spec hash the audit
    reported, which must also be the hash of the rows' own ``{check name: check hash}`` (one row
    per check): a row appended by anyone else, or a spec changed after the audit, refuses.
    """
    fix = "pass the return value of this run's IcebergWapAuditOperator (wap_task_group wires it) and re-run the audit"
    if binding is None:
        _refuse_verdict(
            param,
            "None",
            f"is not set, so no audit run is bound to snapshot {snapshot_id} of {table}; only the verdict of this "
            "run's own audit counts, never the latest row in " + where,
            "pass audit=<the audit task>.output, or put the audit task directly upstream of this task (a publish "
            "may also set require_audit=False deliberately)",
        )
    shown = f"{{audit_event_id: {binding.event_id}, snapshot_id: {binding.snapshot_id}}}"
    if binding.snapshot_id != snapshot_id:
        _refuse_verdict(
            param,
            shown,
            f"names snapshot {binding.snapshot_id}, but the publish is of snapshot {snapshot_id} of {table}",
            "publish the snapshot the audit audited, or audit the branch again",
        )
    if not rows:
        _refuse_verdict(
            param,
            shown,
            f"names an audit run with no rows in {where}: snapshot {snapshot_id} of {table} has no recorded audit "
            "under that event id",
            fix,
        )
    for row in rows:
        problem = _row_problem(row, binding, table, dag_id, run_id, now)
        if problem:
            _refuse_verdict(param, shown, f"is contradicted by a row in {where}: {problem}", fix)
    names = [str(r["check_name"]) for r in rows]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        _refuse_verdict(
            param, shown, f"has more than one row for checks {dupes} in {where} (rows were added after the audit)", fix
        )
    recomputed = spec_hash_of({str(r["check_name"]): str(r["check_hash"]) for r in rows})
    if recomputed != binding.spec_hash:
        _refuse_verdict(
            param,
            shown,
            f"reports spec hash {binding.spec_hash[:12]}..., but its rows in {where} are of a spec hashing to "
            f"{recomputed[:12]}... (checks {sorted(names)}): checks were added, removed or changed",
            fix,
        )
    return Verdict(binding.event_id, binding.spec_hash, snapshot_id, tuple(rows))


def _row_problem(
    row: Mapping[str, Any], binding: AuditBinding, table: str, dag_id: str | None, run_id: str | None, now: datetime
) -> str | None:
    """Why one row of the bound audit run does not belong to it (``None``: it does)."""
    name = row.get("check_name")
    if row.get("table_name") != table:
        return f"check {name!r} is of table {row.get('table_name')!r}, not {table!r}"
    if row.get("snapshot_id") != binding.snapshot_id:
        return f"check {name!r} is of snapshot {row.get('snapshot_id')}, not {binding.snapshot_id}"
    if (row.get("dag_id"), row.get("run_id")) != (dag_id, run_id):
        return (
            f"check {name!r} was written by DAG {row.get('dag_id')!r} run {row.get('run_id')!r}, not by this run "
            f"(DAG {dag_id!r} run {run_id!r})"
        )
    if row.get("spec_hash") != binding.spec_hash or not row.get("check_hash"):
        return f"check {name!r} carries spec hash {row.get('spec_hash')!r}, not the one the audit reported"
    evaluated = row.get("evaluated_at")
    if not isinstance(evaluated, datetime) or evaluated.tzinfo is None:
        return f"check {name!r} has no time zone aware evaluated_at ({evaluated!r})"
    if evaluated > now + CLOCK_SKEW:
        return f"check {name!r} is dated {evaluated.isoformat()}, in the future (now {now.isoformat()})"
    return None


def publish_verdict(
    verdict: Verdict,
    *,
    table: str,
    branch: str,
    required: Mapping[str, str] | None = None,
    waived: Collection[str] = (),
    param: str = "required_checks",
) -> None:
    """Refuse unless the bound audit ran at least the ``required`` checks and passed every check
    a data steward did not accept.

    :param required: ``{check name: check hash}`` (:func:`~airflow_iceberg_provider.core.audit_checks.check_hash`)
        of the checks the publish requires. The audit is *weaker* (refused) when one of them is
        missing from its spec, or present under the same name with another definition (any
        difference: bounds, tolerance, partition clause, statement, ``accept_none``). Extra checks
        are fine.
    :param waived: warn-level checks a steward accepted for exactly this audit run and snapshot.
    """
    ran = verdict.check_hashes
    missing = sorted(n for n in (required or {}) if n not in ran)
    changed = sorted(n for n, h in (required or {}).items() if n in ran and ran[n] != h)
    if missing or changed:
        raise IcebergRefusedError(
            f"{param}: the audit of snapshot {verdict.snapshot_id} of {table} (branch {branch!r}, "
            f"event_id={verdict.event_id}) is weaker than the publish requires: missing checks {missing}, checks "
            f"with another definition {changed}. Audit with at least the required checks, unchanged, and publish "
            "that audit. Nothing was changed."
        )
    failed = [f["check"] for f in verdict.failed if f["check"] not in waived]
    if failed:
        raise IcebergRefusedError(
            f"The audit of snapshot {verdict.snapshot_id} of {table} (branch {branch!r}, event_id="
            f"{verdict.event_id}) failed checks {failed}, and no data steward accepted them for this audit run; "
            "refusing to publish. Fix the data and re-run, or answer the approval gate of this run. Nothing was "
            "changed."
        )


# --------------------------------------------------------------------- publish
@dataclass(frozen=True)
class PublishState:
    """What the publish read from the catalog (one table load), as plain values."""

    table: str
    branch: str
    audited: int
    refs: Mapping[str, RefInfo]
    #: every snapshot of the table by id (``SnapshotInfo``-like: ``snapshot_id``, ``parent_id``, ``operation``, ``summary``)
    by_id: Mapping[int, Any]
    #: the branch base given to the operator (``None``: where the branch meets ``main``)
    base: int | None = None

    @property
    def main_head(self) -> int | None:
        ref = self.refs.get(MAIN_BRANCH)
        return ref.snapshot_id if ref is not None else None


@dataclass(frozen=True)
class PublishPlan:
    """What a publish does. ``action``: ``noop`` (already on ``main``), ``fast_forward``,
    ``cherrypick`` (a Spark job replays ``cherrypick_ids``), or the re-run outcomes ``skip`` /
    ``refuse`` (another run published the interval: ``race``).

    ``changes`` are committed together (``main``, the tag, the dropped branch), each asserting
    where its ref was when planned; a cherry-pick's come from :meth:`after_cherrypick`.
    """

    action: str
    table: str
    branch: str
    audited: int
    base: int | None
    main_head: int | None
    published: int | None
    changes: tuple[RefChange, ...] = ()
    tag: str | None = None
    tag_outcome: str | None = None
    drop_branch: bool = False
    cherrypick_ids: tuple[int, ...] = ()
    picked_already: frozenset[int] = frozenset()
    metrics: dict[str, int] = field(default_factory=dict)
    race: rerun.RerunPlan | None = None
    message: str = ""

    @property
    def moves_main(self) -> bool:
        return self.action in ("fast_forward", "cherrypick")

    def after_cherrypick(self, new_head: int) -> PublishPlan:
        """The plan once the cherry-pick job moved ``main`` to ``new_head``: tag it, drop the branch."""
        tag_changes, outcome = _tag_changes(self.table, self.tag, None, new_head)
        drop = (RefChange(self.branch, "branch", None, self.audited),) if self.drop_branch else ()
        return replace(self, published=new_head, changes=tag_changes + drop, tag_outcome=outcome)

    def result(self) -> dict[str, Any]:
        """The publish's XCom value (ids as given; the operator stringifies them)."""
        return {
            "table": self.table,
            "branch": self.branch,
            "published_snapshot_id": self.published,
            "audited_snapshot_id": self.audited,
            "previous_main_snapshot_id": self.main_head,
            "method": self.action,
            "published": self.action != "noop",
            "branch_dropped": self.drop_branch,
            "tag": self.tag,
            **self.metrics,
        }


def _tag_changes(
    table: str, tag: str | None, existing: RefInfo | None, snapshot_id: int
) -> tuple[tuple[RefChange, ...], str | None]:
    if tag is None:
        return (), None
    outcome, change = plan_tag(existing, tag, snapshot_id, None, table=table)
    return ((change,) if change is not None else ()), outcome


def plan_publish(
    state: PublishState,
    *,
    on_conflict: str = "fail",
    on_rerun: str = "fail",
    identity: rerun.RunIdentity | None = None,
    tag: str | None = None,
    drop_branch: bool = False,
) -> PublishPlan:
    """Decide the publish of ``state.audited`` and every ref change it makes.

    :param tag: the tag name, already checked by :func:`~airflow_iceberg_provider.rules.refs.check_tag_name`.
    :raises IcebergPublishConflictError: ``main`` moved and ``on_conflict="fail"``, or a cherry-pick
        would replay non-append snapshots (nothing was changed).
    :raises IcebergRefusedError: the branch was replaced, or the tag's name is taken (nothing was changed).
    """
    by_id, audited, main_head = state.by_id, state.audited, state.main_head
    main_chain = ancestry(by_id, main_head)
    base = state.base if state.base is not None else merge_base(by_id, audited, main_head)
    snaps = branch_snapshots(by_id, audited, base) if audited not in main_chain else []
    since_base = main_chain[: main_chain.index(base)] if base in main_chain else main_chain
    picked = cherry_picked(by_id, since_base)
    branch_ref = state.refs.get(state.branch)
    plan = PublishPlan(
        "noop",
        state.table,
        state.branch,
        audited,
        base,
        main_head,
        None,
        tag=tag,
        drop_branch=bool(drop_branch and branch_ref is not None and branch_ref.type == "branch"),
        picked_already=frozenset(picked),
        metrics=rerun.change_metrics(snaps),
    )
    if audited in main_chain or (snaps and all(s.snapshot_id in picked for s in snaps)):
        published = audited if audited in main_chain else main_head
        return _with_changes(plan, state, published, f"snapshot {audited} is already on main (head {main_head})")
    race = rerun.plan_publish_race(
        on_rerun,
        identity or rerun.RunIdentity(None, None),
        [by_id[sid] for sid in reversed(main_chain)],
        by_id,
        set(ancestry(by_id, audited)),
        table=state.table,
    )
    if race.action != "write":
        return replace(plan, action=race.action, race=race, message=race.message)
    if main_head is None or main_head in ancestry(by_id, audited):
        plan = replace(plan, action="fast_forward")
        return _with_changes(plan, state, audited, f"fast-forward main {main_head} -> {audited}")
    if on_conflict == "fail":
        raise IcebergPublishConflictError(
            f"Cannot publish {state.table} branch {state.branch!r}: main moved since the branch was cut (main is at "
            f"{main_head}, the branch was cut at {base}), so main cannot be fast-forwarded to the audited snapshot "
            f"{audited} without losing the other commit(s). main and the branch are unchanged. Re-run the pipeline "
            "on a fresh branch (clear the DAG run), or publish with on_conflict='cherrypick' to replay "
            "append-only changes (the combination for backfills with several runs at once)."
        )
    return _plan_cherrypick(plan, state, snaps, picked)


def _with_changes(plan: PublishPlan, state: PublishState, published: int | None, message: str) -> PublishPlan:
    """``main`` to ``published`` (fast-forward, keeping its retention), the tag, the dropped branch."""
    changes: tuple[RefChange, ...] = ()
    if plan.action == "fast_forward":
        main = state.refs.get(MAIN_BRANCH)
        changes = (
            RefChange(
                MAIN_BRANCH,
                "branch",
                published,
                plan.main_head,
                max_ref_age_ms=main.max_ref_age_ms if main else None,
                max_snapshot_age_ms=main.max_snapshot_age_ms if main else None,
                min_snapshots_to_keep=main.min_snapshots_to_keep if main else None,
            ),
        )
    tag_changes: tuple[RefChange, ...] = ()
    outcome: str | None = None
    if plan.tag is not None and published is not None:
        tag_changes, outcome = _tag_changes(state.table, plan.tag, state.refs.get(plan.tag), published)
    drop = (RefChange(state.branch, "branch", None, state.refs[state.branch].snapshot_id),) if plan.drop_branch else ()
    return replace(
        plan, published=published, changes=changes + tag_changes + drop, tag_outcome=outcome, message=message
    )


def _plan_cherrypick(plan: PublishPlan, state: PublishState, snaps: Sequence[Any], picked: set[int]) -> PublishPlan:
    not_append = [(s.snapshot_id, s.operation) for s in snaps if s.operation != "append"]
    if not_append:
        raise IcebergPublishConflictError(
            f"main of {state.table} moved since the branch was cut and the branch holds non-append snapshots "
            f"{not_append}; cherry-picking only replays appends safely (overwrites/deletes could undo the other "
            "writer's rows; an on_rerun='replace' branch starts with one). main and the branch are unchanged; "
            "clear the DAG run to re-run the pipeline on a fresh branch."
        )
    taken = state.refs.get(plan.tag) if plan.tag is not None else None
    if taken is not None:  # the job creates main's new head: no existing ref of that name can already be on it
        raise IcebergRefusedError(
            f"{state.table} already has a {taken.type} {plan.tag!r} at {taken.snapshot_id}; the cherry-pick publish "
            "would tag the new head of main it creates. Choose another tag name. Nothing was changed."
        )
    todo = tuple(s.snapshot_id for s in snaps if s.snapshot_id not in picked)
    return replace(
        plan,
        action="cherrypick",
        cherrypick_ids=todo,
        message=f"main moved (now {plan.main_head}); cherry-picking {list(todo)}",
    )


def cherrypick_missing(plan: PublishPlan, by_id: Mapping[int, Any], new_head: int | None) -> tuple[list[int], bool]:
    """After the cherry-pick job: the snapshots it did not replay onto ``main``, and whether ``main``
    still descends from its previous head (both must hold for the publish to count)."""
    chain = ancestry(by_id, new_head)
    done = cherry_picked(by_id, chain) | set(chain)
    missing = [sid for sid in plan.cherrypick_ids if sid not in done]
    return missing, plan.main_head is None or plan.main_head in chain


# ---------------------------------------------------------- create branch
@dataclass(frozen=True)
class BranchPlan:
    """What the create-branch step does: ``create`` at ``base``, ``exists`` (keep), or ``deferred``
    (empty table: the first WAP write creates the branch)."""

    action: str
    branch: str
    base: int | None
    changes: tuple[RefChange, ...] = ()
    message: str = ""


def plan_create_branch(
    table: str, branch: str, refs: Mapping[str, RefInfo], by_id: Mapping[int, Any], source: int | None
) -> BranchPlan:
    """Cut ``branch`` at ``source`` (idempotent: an existing branch keeps its place; its base is the merge base)."""
    if source is not None and source not in by_id:
        raise IcebergRefNotFoundError(f"Snapshot {source} does not exist on table {table} (expired or never created).")
    existing = refs.get(branch)
    if existing is not None:
        if existing.type != "branch":
            raise IcebergRefusedError(
                f"{table} already has a tag named {branch!r}; choose another branch name. Nothing was changed."
            )
        base = merge_base(by_id, existing.snapshot_id, source)
        return BranchPlan("exists", branch, base, message=f"already exists at {existing.snapshot_id} (base {base})")
    if source is None:
        return BranchPlan("deferred", branch, None, message="no snapshot yet; the first WAP write creates the branch")
    change = RefChange(branch, "branch", source, None)
    return BranchPlan("create", branch, source, (change,), message=f"created at snapshot {source}")


def pin_by_write(plan: BranchPlan, route: str) -> BranchPlan:
    """A branch to create on a table whose ref moves go through Spark (format-version 3 behind a
    catalog whose client writes metadata) is left to the write, which pins it at the same base in its
    ref-changes job: the create-branch step then starts no JVM and commits nothing."""
    if route != "spark" or plan.action != "create":
        return plan
    return BranchPlan(
        "deferred",
        plan.branch,
        plan.base,
        message=f"not created here (format-version 3: ref moves go through Spark); the write pins it at {plan.base}",
    )


# ------------------------------------------------------------------- write
def write_base(
    by_id: Mapping[int, Any], requested: int | None, branch_head: int | None, main_head: int | None
) -> int | None:
    """The snapshot a WAP write starts from: the given base, else where the branch meets ``main``, else ``main``'s head."""
    if requested is not None:
        return requested
    return merge_base(by_id, branch_head, main_head) if branch_head is not None else main_head


def plan_branch_reset(
    table: str, branch: str, existing: RefInfo | None, base: int | None, by_id: Mapping[int, Any]
) -> tuple[RefChange, ...]:
    """Ref changes that make ``branch`` start at ``base`` before a write (an earlier try's commits discarded).

    A missing branch is pinned to ``base`` (Spark would cut it from the current ``main``); a branch
    beyond ``base`` is reset to it with its retention (compare-and-swap on its head); one that does
    not descend from ``base`` is refused.
    """
    if existing is not None and existing.type != "branch":
        raise IcebergRefusedError(f"{table} has a tag named {branch!r}; WAP needs a branch. Nothing was changed.")
    if existing is None:
        return (RefChange(branch, "branch", base, None),) if base is not None else ()
    if existing.snapshot_id == base:
        return ()
    if base is not None and base not in ancestry(by_id, existing.snapshot_id):
        raise IcebergRefusedError(
            f"Branch {branch!r} of {table} is at {existing.snapshot_id}, which does not descend from the base "
            f"{base}; refusing to reset it. Pass the right base_snapshot_id or a new branch name."
        )
    if base is None:  # no base (empty table when it was cut): drop it, the write creates it again
        return (RefChange(branch, "branch", None, existing.snapshot_id),)
    return (
        RefChange(
            branch,
            "branch",
            base,
            existing.snapshot_id,
            max_ref_age_ms=existing.max_ref_age_ms,
            max_snapshot_age_ms=existing.max_snapshot_age_ms,
            min_snapshots_to_keep=existing.min_snapshots_to_keep,
        ),
    )


# ------------------------------------------------------------------- audit
@dataclass(frozen=True)
class AuditPlan:
    """What the audit job evaluates: the exact snapshot, its base, the change set's values."""

    snapshot_id: int
    base: int | None
    main_head: int | None
    change: dict[str, int]
    #: observed values of the change-set checks (from snapshot summaries, no scan)
    change_values: dict[str, float | None]
    #: change-set checks that cannot apply, with the reason
    skipped: dict[str, str]


def audit_target(
    table: str, branch: str, refs: Mapping[str, RefInfo], requested: int | None, by_id: Mapping[int, Any]
) -> int:
    """The snapshot to audit: ``requested`` (or the branch head), which must be on the branch."""
    branch_ref = refs.get(branch)
    if branch_ref is None or branch_ref.type != "branch":
        raise IcebergRefNotFoundError(
            f"{table} has no branch {branch!r} to audit; run the WAP write first (refs: {sorted(refs)})."
        )
    snapshot_id = requested or branch_ref.snapshot_id
    if snapshot_id not in ancestry(by_id, branch_ref.snapshot_id):
        raise IcebergRefusedError(
            f"Snapshot {snapshot_id} is not on branch {branch!r} of {table} (head {branch_ref.snapshot_id}); "
            "nothing to audit."
        )
    return snapshot_id


def plan_audit(
    snapshot_id: int,
    base: int | None,
    main_head: int | None,
    snapshots: Sequence[Any],
    *,
    wants_ratio: bool,
    baseline: int | None,
) -> AuditPlan:
    """The change set of ``snapshots`` (base exclusive .. audited) and the change-set checks' values.

    :param baseline: net rows of the previous published change (``added_rows_ratio``'s denominator).
    """
    change = rerun.change_metrics(snapshots)
    values: dict[str, float | None] = {"change.added_rows": change["net_added_records"]}
    skipped: dict[str, str] = {}
    if wants_ratio and baseline:
        values["change.added_rows_ratio"] = change["net_added_records"] / baseline
    elif wants_ratio:
        skipped["change.added_rows_ratio"] = "no previous published change to compare with"
    return AuditPlan(snapshot_id, base, main_head, change, values, skipped)


__all__ = [
    "ON_CONFLICT",
    "CLOCK_SKEW",
    "AuditPlan",
    "BranchPlan",
    "PublishPlan",
    "PublishState",
    "Verdict",
    "ancestry",
    "audit_target",
    "audited_snapshot",
    "branch_snapshots",
    "cherry_picked",
    "cherrypick_missing",
    "merge_base",
    "plan_audit",
    "plan_branch_reset",
    "plan_create_branch",
    "plan_publish",
    "publish_verdict",
    "read_verdict",
    "write_base",
]
