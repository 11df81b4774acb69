"""Tags, branches, rollback and commit checks: metadata-only operators (no JVM).

Every operator here validates its rendered arguments, makes at most one
compare-and-swap commit through :class:`IcebergCatalogHook`, reads the table
back to verify the result, writes one governance-ledger row, and returns a
small XCom-safe dict. Retries are safe: an operation that already happened is
a ``noop`` success; a refusal changes nothing on the table.

Legal holds follow the convention of :mod:`airflow_iceberg_provider.core.governance`:
a *tag* named ``legal-hold-…`` pins its snapshot — and therefore every data file
that snapshot references — until the hold is released (the tag is dropped with
``release_legal_hold=True``). A hold blocks physical erasure of those files. Every
ref change passes the ref guard (:func:`airflow_iceberg_provider.rules.refs.guard_ref_change`)
in the catalog hook before it commits: no operator here moves, re-types or drops a hold,
except the release, which reads the approval the hold's release policy asks for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_iceberg_provider import params
from airflow_iceberg_provider.core.ref_guard import RefKind, ref_state
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergBaseOperator
from airflow_iceberg_provider.params import MAIN_BRANCH, validate_ref
from airflow_iceberg_provider.rules.refs import (
    check_tag_name,
    tag_retention,
    validate_summary,
)

if TYPE_CHECKING:
    from datetime import timedelta

    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_provider.models import SnapshotInfo

_T = TypeVar("_T")
_templated = params.is_templated
_blank = params.is_unset


class _RefOperator(IcebergBaseOperator):
    """Shared plumbing: ledger rows (also for refusals) and ref verification."""

    ui_color = "#e8f4ea"

    def _ledger(self, context: Context | None, operation: str, ref: str | None, status: str, **kw: Any) -> str:
        if kw.get("details") is not None:  # ids as strings: a UI parses details as JSON (float64)
            kw["details"] = with_string_ids(kw["details"])
        return self.catalog_hook.governance.record_ledger(
            operation=operation, table=self.ident.dotted, ref=ref, status=status, context=context, **kw
        )

    def _refused(
        self, context: Context | None, operation: str, ref: str | None, err: Exception, **details: Any
    ) -> None:
        """Best-effort ledger row for a refusal (the target table itself is untouched)."""
        try:
            self._ledger(context, operation, ref, "refused", details={**details, "reason": str(err)[:1000]})
        except Exception as ledger_err:  # the refusal is what matters; never mask it
            self.log.warning("Could not record the refusal in the ledger: %s", ledger_err)

    def _attempt(
        self, context: Context, operation: str, ref: str, details: Mapping[str, Any], commit: Callable[[], _T]
    ) -> _T:
        """Run one commit; a refusal is recorded in the ledger (with ``details``) and re-raised."""
        try:
            return commit()
        except IcebergRefusedError as err:
            self._refused(context, operation, ref, err, **details)
            raise

    def _record(
        self, context: Context, operation: str, ref: str, status: str, details: Mapping[str, Any], **kw: Any
    ) -> None:
        """The ledger row of a finished ref operation (``kw``: snapshot_before/after, started_at)."""
        self._ledger(context, operation, ref, status, details=dict(details), **kw)

    def _verify_ref(self, ref: str, snapshot_id: int, ref_type: str, **retention: int | None) -> None:
        """Re-read the table and check the ref points where it should, with the retention asked for."""
        found = self.catalog_hook.refs(self.ident).get(ref)
        problems = []
        if found is None:
            problems.append("it does not exist")
        else:
            if found.snapshot_id != snapshot_id:
                problems.append(f"it points at {found.snapshot_id}, not {snapshot_id}")
            if found.type != ref_type:
                problems.append(f"it is a {found.type}, not a {ref_type}")
            problems += [
                f"{k}={getattr(found, k)} instead of {v}" for k, v in retention.items() if getattr(found, k) != v
            ]
        if problems:
            raise IcebergCommitVerificationError(
                f"After the commit, {self.ident} {ref_type} {ref!r} is not as intended: {'; '.join(problems)}. "
                "A concurrent writer may have changed it; inspect the table's refs."
            )

    def _source_snapshot(self, tbl: Table, ref: str, snapshot_id: Any, what: str) -> int:
        if isinstance(snapshot_id, str) and _blank(snapshot_id):
            # A template that rendered to nothing (an upstream task pushed no id) is not "use the
            # head": a tag or a legal hold on the wrong snapshot is worse than a failed task.
            params.refuse(
                "snapshot_id",
                snapshot_id,
                f"rendered to nothing (did the upstream task push no snapshot id?), so the {what} target is unknown",
                f"fix the template, or leave snapshot_id out (None) to use the head of ref {ref!r} on purpose",
            )
        if not _blank(snapshot_id):
            return params.snapshot_id(snapshot_id, "snapshot_id", required=True)
        head = self.catalog_hook.ref_snapshot_id(tbl, validate_ref(ref, "ref"))
        if head is None:
            raise IcebergRefusedError(
                f"{self.ident} has no snapshot on {ref!r} yet, so there is nothing to {what}. Write data first "
                "or pass snapshot_id. Nothing was changed."
            )
        return head


class IcebergCreateTagOperator(_RefOperator):
    """
    Tag a snapshot — an immutable audit point such as an end-of-day release or a legal hold.

    Idempotent under retries: the same tag on the same snapshot (and retention) succeeds
    without a commit. A tag of that name pointing elsewhere is refused unless
    ``replace=True`` (a legal hold is never replaced: release it first). The creator
    (dag/run/task/try) and, for a hold, the case id and reason are recorded in the
    governance ledger.

    :param table: ``namespace.table`` (templated).
    :param tag: tag name (templated), e.g. ``"eod_{{ ds_nodash }}"``.
    :param ref: tag the head of this branch (templated; default ``main``) ...
    :param snapshot_id: ... or this snapshot (templated).
    :param max_ref_age: how long the tag lives (measured from the snapshot's time):
        ``timedelta`` / pendulum ``Duration``, ISO-8601 (``"P90D"``) or milliseconds
        (templated). ``None`` keeps it forever.
    :param replace: move an existing tag of that name (not allowed for legal holds).
    :param legal_hold: make this tag a legal hold: the name gets the ``legal-hold-``
        prefix, ``case_id`` is required and ``max_ref_age`` is refused. The hold is created
        with an explicit never-expiring ``max-ref-age-ms`` (``2^63-1``), so a table-level
        ``history.expire.max-ref-age-ms`` cannot drop it; placing a hold again on the same
        snapshot pins a hold created without one (outcome ``hold_pinned``).
    :param case_id: legal case / matter reference recorded with the hold (templated).
    :param hold_reason: free-text reason recorded with the hold (templated; no personal data).
    :param requires_approval: the hold's release policy: ``True`` records that releasing this hold
        needs an approved ``IcebergRefApprovalOperator(gate="legal_hold_release")`` decision bound to
        its name, case id and snapshot (``true``/``false`` only; a connection can require it for every
        hold with its ``hold_release_requires_approval`` extra).
    :return: ``{"table", "tag", "snapshot_id", "outcome": created|exists|replaced|hold_pinned, "legal_hold", ...}``
    """

    template_fields: Sequence[str] = (
        *IcebergBaseOperator.template_fields,
        "tag",
        "ref",
        "snapshot_id",
        "max_ref_age",
        "case_id",
        "hold_reason",
    )

    def __init__(
        self,
        *,
        tag: str,
        ref: str = MAIN_BRANCH,
        snapshot_id: int | str | None = None,
        max_ref_age: timedelta | str | int | None = None,
        replace: bool = False,
        legal_hold: bool = False,
        case_id: str | None = None,
        hold_reason: str | None = None,
        requires_approval: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.tag = tag
        self.ref = ref
        self.snapshot_id = snapshot_id
        self.max_ref_age = max_ref_age
        self.replace = replace
        self.legal_hold = legal_hold
        self.case_id = case_id
        self.hold_reason = hold_reason
        self.requires_approval = requires_approval
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if self.legal_hold is True and self.replace is True:  # strings are converted in execute()
            raise IcebergValidationError(
                "legal_hold=True with replace=True: a legal hold is never moved. Release the hold "
                "(IcebergDropTagOperator with release_legal_hold=True) and place a new one."
            )
        if self.legal_hold is True and self.max_ref_age is not None:
            raise IcebergValidationError(
                "legal_hold=True with max_ref_age: a legal hold must not expire on its own; leave max_ref_age "
                "unset and release the hold explicitly when the case closes."
            )
        if self.legal_hold is True and not _templated(self.case_id) and _blank(self.case_id):
            raise IcebergValidationError("legal_hold=True requires case_id (the legal case or matter reference).")
        if params.flag(self.requires_approval, "requires_approval") and not self.legal_hold:
            params.refuse(
                "requires_approval",
                self.requires_approval,
                "is a legal hold's release policy, and this tag is not a legal hold",
                "pass legal_hold=True with a case_id, or leave requires_approval unset",
            )

    def _resolve(self) -> tuple[str, int | None]:
        """The tag's name (the one rule: :func:`~airflow_iceberg_provider.rules.refs.check_tag_name`) and retention."""
        if self.legal_hold and self.replace:
            raise IcebergValidationError(
                "legal_hold=True with replace=True: a legal hold is never moved. Release the hold "
                "(IcebergDropTagOperator with release_legal_hold=True) and place a new one. Nothing was changed."
            )
        if self.legal_hold and _blank(self.case_id):
            raise IcebergValidationError("legal_hold=True requires a non-empty case_id.")
        tag = check_tag_name(self.tag, "tag", legal_hold=self.legal_hold, case_id=self.case_id)
        max_age = params.retention_ms(self.max_ref_age, "max_ref_age")
        if self.legal_hold and max_age is not None:
            raise IcebergValidationError("legal_hold=True with max_ref_age: a legal hold must not expire on its own.")
        return tag, max_age

    def _details(self, tag: str, max_age: int | None) -> dict[str, Any]:
        details: dict[str, Any] = {
            "tag": tag,
            "source_ref": None if not _blank(self.snapshot_id) else self.ref,
            "max_ref_age_ms": max_age,
            "replace": self.replace,
            "legal_hold": self.legal_hold,
        }
        if self.legal_hold:
            details.update(
                case_id=str(self.case_id),
                reason=self.hold_reason,
                requires_approval=params.flag(self.requires_approval, "requires_approval"),
            )
        return details

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        tag, max_age = self._resolve()
        hook, started = self.catalog_hook, datetime.now(UTC)
        tbl = hook.load_table(self.ident)
        previous = tbl.metadata.refs.get(tag)
        snapshot_id = self._source_snapshot(tbl, self.ref, self.snapshot_id, "tag")
        details = self._details(tag, max_age)
        outcome = self._attempt(
            context,
            "create_tag",
            tag,
            {**details, "snapshot_id": snapshot_id},
            lambda: hook.create_tag(tbl, tag, snapshot_id=snapshot_id, max_ref_age_ms=max_age, replace=self.replace),
        )
        # a hold carries a never-expiring max-ref-age (the table's default must not drop it)
        self._verify_ref(tag, snapshot_id, "tag", max_ref_age_ms=tag_retention(tag, max_age))
        self._record(
            context,
            "create_tag",
            tag,
            "noop" if outcome == "exists" else "succeeded",
            {**details, "outcome": outcome},
            snapshot_before=previous.snapshot_id if previous is not None else None,
            snapshot_after=snapshot_id,
            started_at=started,
        )
        self.log.info("Tag %s on %s -> snapshot %s: %s", tag, self.ident, snapshot_id, outcome)
        return with_string_ids(
            {
                "table": self.ident.dotted,
                "tag": tag,
                "snapshot_id": snapshot_id,
                "outcome": outcome,
                "max_ref_age_ms": max_age,
                "legal_hold": self.legal_hold,
            }
        )


class IcebergCreateBranchOperator(_RefOperator):
    """
    Create a branch with retention (experiments, ML training sets; WAP has its own operators).

    Idempotent: an existing branch that starts at — or has since advanced from — the
    requested snapshot succeeds without moving it (only a changed retention is
    committed). A diverged branch is refused unless ``replace=True``.

    :param table: ``namespace.table`` (templated).
    :param branch: branch name (templated); ``main`` is refused.
    :param ref: branch from the head of this ref (templated; default ``main``) ...
    :param snapshot_id: ... or from this snapshot (templated).
    :param min_snapshots_to_keep: keep at least this many snapshots of the branch on expiry.
    :param max_snapshot_age: expire the branch's snapshots older than this (duration, templated).
    :param max_ref_age: drop the branch itself when its head is older than this (duration, templated).
    :param replace: re-point a diverged existing branch (its own commits become unreachable).
    :return: ``{"table", "branch", "snapshot_id", "outcome", retention...}``
    """

    template_fields: Sequence[str] = (
        *IcebergBaseOperator.template_fields,
        "branch",
        "ref",
        "snapshot_id",
        "min_snapshots_to_keep",
        "max_snapshot_age",
        "max_ref_age",
    )

    def __init__(
        self,
        *,
        branch: str,
        ref: str = MAIN_BRANCH,
        snapshot_id: int | str | None = None,
        min_snapshots_to_keep: int | str | None = None,
        max_snapshot_age: timedelta | str | int | None = None,
        max_ref_age: timedelta | str | int | None = None,
        replace: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.branch = branch
        self.ref = ref
        self.snapshot_id = snapshot_id
        self.min_snapshots_to_keep = min_snapshots_to_keep
        self.max_snapshot_age = max_snapshot_age
        self.max_ref_age = max_ref_age
        self.replace = replace
        self.check_arguments()

    def _resolve(self) -> tuple[str, dict[str, int | None]]:
        """The branch name (never ``main``) and its retention, as Iceberg stores it."""
        return params.ref_name(self.branch, "branch", allow_main=False), {
            "max_ref_age_ms": params.retention_ms(self.max_ref_age, "max_ref_age"),
            "max_snapshot_age_ms": params.retention_ms(self.max_snapshot_age, "max_snapshot_age"),
            "min_snapshots_to_keep": params.positive_int(self.min_snapshots_to_keep, "min_snapshots_to_keep"),
        }

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        branch, retention = self._resolve()
        hook, started = self.catalog_hook, datetime.now(UTC)
        tbl = hook.load_table(self.ident)
        previous = tbl.metadata.refs.get(branch)
        snapshot_id = self._source_snapshot(tbl, self.ref, self.snapshot_id, "branch from")
        details = {"branch": branch, "source_ref": None if not _blank(self.snapshot_id) else self.ref, **retention}
        outcome = self._attempt(
            context,
            "create_branch",
            branch,
            {**details, "snapshot_id": snapshot_id},
            lambda: hook.create_branch(tbl, branch, snapshot_id=snapshot_id, replace=self.replace, **retention),
        )
        head = hook.ref_snapshot_id(self.ident, branch)
        kept = outcome in ("exists", "retention_updated")  # the branch stays where it is (maybe advanced)
        self._verify_ref(branch, head if kept and head is not None else snapshot_id, "branch", **retention)
        self._record(
            context,
            "create_branch",
            branch,
            "noop" if outcome == "exists" else "succeeded",
            {**details, "outcome": outcome},
            snapshot_before=previous.snapshot_id if previous is not None else None,
            snapshot_after=head,
            started_at=started,
        )
        self.log.info("Branch %s on %s from snapshot %s: %s", branch, self.ident, snapshot_id, outcome)
        result = {"table": self.ident.dotted, "branch": branch, "snapshot_id": head, "outcome": outcome, **retention}
        return with_string_ids(result)


class _DropRefOperator(_RefOperator):
    ref_type = "tag"

    def _drop(self, context: Context, name: str, details: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Drop ``name`` through the hook, whose ref guard refuses ``main``, a legal hold and a ref of
        the other type before any commit (the refusal is recorded in the ledger)."""
        name = validate_ref(name, self.ref_type, allow_main=False)
        hook = self.catalog_hook
        started = datetime.now(UTC)
        tbl = hook.load_table(self.ident)
        found = ref_state(tbl.metadata.refs, name)
        operation = f"drop_{self.ref_type}"
        result = {"table": self.ident.dotted, self.ref_type: name, "dropped": False, "snapshot_id": None}
        if found.kind is RefKind.ABSENT:
            self.log.info("%s %r of %s is already gone; nothing to do", self.ref_type, name, self.ident)
            return result
        self._attempt(context, operation, name, {}, lambda: hook.remove_ref(tbl, name, ref_type=self.ref_type))
        self._verify_gone(name)
        self._ledger(
            context,
            operation,
            name,
            "succeeded",
            snapshot_before=found.snapshot_id,
            details={**(details or {}), self.ref_type: name},
            started_at=started,
        )
        self.log.info("Dropped %s %r (was at %s) from %s", self.ref_type, name, found.snapshot_id, self.ident)
        return with_string_ids({**result, "dropped": True, "snapshot_id": found.snapshot_id})

    def _verify_gone(self, name: str) -> None:
        if name in self.catalog_hook.refs(self.ident):
            raise IcebergCommitVerificationError(f"{self.ref_type} {name!r} is still on {self.ident} after the drop.")


class IcebergDropTagOperator(_DropRefOperator):
    """
    Drop a tag; "already gone" is a success (retries). Dropping a legal hold needs
    ``release_legal_hold=True`` and is recorded in the ledger as a release — the only way a
    hold is removed.

    The release follows the hold's release policy: when the hold was placed with
    ``requires_approval=True``, or the connection's ``hold_release_requires_approval`` extra is
    ``true``, the release needs an ``approved`` decision of
    ``IcebergRefApprovalOperator(gate="legal_hold_release")`` bound to this hold's name, case id
    and snapshot (the latest such decision counts). Without one — no gate, a gate marked
    success by hand, a rejection, an approval of another hold, case or snapshot — the release
    is refused and nothing changes. The release row names the approval it used
    (``details.approval_id``).

    :param table: ``namespace.table`` (templated).
    :param tag: tag name (templated).
    :param release_legal_hold: required to drop a ``legal-hold-…`` tag.
    :param release_reason: why the hold is released (templated; recorded in the ledger).
    :return: ``{"table", "tag", "dropped": bool, "snapshot_id"}`` (and ``"approval_id"`` for a release)
    """

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, "tag", "release_reason")
    ref_type = "tag"

    def __init__(
        self, *, tag: str, release_legal_hold: bool = False, release_reason: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.tag = tag
        self.release_legal_hold = release_legal_hold
        self.release_reason = release_reason
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if isinstance(self.tag, str) and not _templated(self.tag):
            params.ref_name(self.tag, "tag", allow_main=False)

    def _release(self, context: Context, tbl: Table, name: str, snapshot_id: int) -> dict[str, Any]:
        """The release path: the hook reads the hold's release policy and the approval bound to it,
        releases in one compare-and-swap, and the release row names the approval it used."""
        hook, started, table = self.catalog_hook, datetime.now(UTC), self.ident.dotted
        base = {"legal_hold_released": True, "release_reason": self.release_reason}
        released = self._attempt(
            context,
            "drop_tag",
            name,
            base,
            lambda: hook.release_legal_hold(tbl, name, expected_snapshot_id=snapshot_id),
        )
        self._verify_gone(name)
        result = {"table": table, "tag": name, "dropped": released is not None, "snapshot_id": snapshot_id}
        if released is None:
            return with_string_ids(result)
        details = {
            **base,
            "tag": name,
            "case_id": released.case_id,
            "release_policy": released.policy,
            "approval_id": released.approval_id,
        }
        self._ledger(
            context, "drop_tag", name, "succeeded", snapshot_before=snapshot_id, details=details, started_at=started
        )
        self.log.info(
            "Released legal hold %r (snapshot %s) of %s; approval %s", name, snapshot_id, table, released.approval_id
        )
        return with_string_ids({**result, "approval_id": released.approval_id})

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        name = validate_ref(self.tag, "tag", allow_main=False)
        release = bool(self.release_legal_hold)
        tbl = self.catalog_hook.load_table(self.ident)
        state = ref_state(tbl.metadata.refs, name)
        if release and state.is_hold and state.snapshot_id is not None:
            return self._release(context, tbl, name, state.snapshot_id)
        return self._drop(context, name)


class IcebergDropBranchOperator(_DropRefOperator):
    """
    Drop a branch (never ``main``); "already gone" is a success (retries).

    :param table: ``namespace.table`` (templated).
    :param branch: branch name (templated).
    :return: ``{"table", "branch", "dropped": bool, "snapshot_id"}``
    """

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, "branch")
    ref_type = "branch"

    def __init__(self, *, branch: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.branch = branch
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if isinstance(self.branch, str) and not _templated(self.branch):
            params.ref_name(self.branch, "branch", allow_main=False)

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        return self._drop(context, self.branch)


class IcebergRollbackOperator(_RefOperator):
    """
    Roll ``main`` (or a branch) back to an earlier snapshot — the on-call "undo the bad publish".

    The target is given by exactly one of ``to_snapshot_id``, ``to_tag`` or
    ``to_timestamp`` (the newest ancestor committed at or before that time) and must be
    an **ancestor** of the ref's head; anything else is refused with nothing changed.
    The move is a compare-and-swap on the ref (optionally also asserting
    ``expected_snapshot_id``, e.g. "only if main is still at the bad snapshot"). A
    retry after success is a no-op. The result is re-read through the hook.

    :param table: ``namespace.table`` (templated).
    :param ref: branch to roll back (templated; default ``main``).
    :param to_snapshot_id: target snapshot id (templated).
    :param to_tag: target tag (templated), e.g. ``"eod_{{ macros.ds_add(ds, -1) | replace('-', '') }}"``.
    :param to_timestamp: target time: datetime, ISO-8601 or epoch ms (templated).
    :param expected_snapshot_id: refuse unless the ref currently points here (templated).
    :return: ``{"table", "ref", "snapshot_id", "previous_snapshot_id", "rolled_back": bool, "discarded": [...]}``
    """

    template_fields: Sequence[str] = (
        *IcebergBaseOperator.template_fields,
        "ref",
        "to_snapshot_id",
        "to_tag",
        "to_timestamp",
        "expected_snapshot_id",
    )
    ui_color = "#fbe3d6"

    def __init__(
        self,
        *,
        ref: str = MAIN_BRANCH,
        to_snapshot_id: int | str | None = None,
        to_tag: str | None = None,
        to_timestamp: datetime | str | int | None = None,
        expected_snapshot_id: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ref = ref
        self.to_snapshot_id = to_snapshot_id
        self.to_tag = to_tag
        self.to_timestamp = to_timestamp
        self.expected_snapshot_id = expected_snapshot_id
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        targets = (self.to_snapshot_id, self.to_tag, self.to_timestamp)
        if not params.is_templated(targets) and sum(v is not None for v in targets) != 1:
            raise IcebergValidationError("Pass exactly one rollback target: to_snapshot_id, to_tag or to_timestamp.")

    def _resolve(self) -> tuple[str, dict[str, Any], dict[str, Any], int | None]:
        """``(ref, target kwargs for the hook, the rendered targets given, expected head)``."""
        ref = params.ref_name(self.ref, "ref")
        targets: dict[str, Any] = {
            "to_snapshot_id": self.to_snapshot_id,
            "to_tag": self.to_tag,
            "to_timestamp": self.to_timestamp,
        }
        given = {k: v for k, v in targets.items() if not _blank(v)}
        if len(given) != 1:
            raise IcebergValidationError(
                f"Exactly one rollback target must render to a value; got {sorted(given) or 'none'}."
            )
        kwargs: dict[str, Any] = {}
        if "to_snapshot_id" in given:
            kwargs["snapshot_id"] = params.snapshot_id(self.to_snapshot_id, "to_snapshot_id")
        elif "to_tag" in given:
            kwargs["tag"] = params.ref_name(self.to_tag, "to_tag")
        else:
            kwargs["as_of_ms"] = params.instant_ms(self.to_timestamp, "to_timestamp")
        return ref, kwargs, given, params.snapshot_id(self.expected_snapshot_id, "expected_snapshot_id")

    def _plan_and_move(self, tbl: Table, ref: str, target_kwargs: dict[str, Any], expected: int | None) -> Any:
        """``(target snapshot, snapshot ids dropped from the ref, moved?)``: resolve, then one CAS commit."""
        hook = self.catalog_hook
        target = hook.resolve_rollback_target(tbl, ref=ref, **target_kwargs)
        chain = [s.snapshot_id for s in hook.ref_chain(tbl, ref)]
        discarded = chain[chain.index(target.snapshot_id) + 1 :]
        moved = hook.rollback(tbl, to_snapshot_id=target.snapshot_id, ref=ref, expected_snapshot_id=expected)
        return target, discarded, moved

    def _verify_moved(self, ref: str, target: SnapshotInfo) -> None:
        after = self.catalog_hook.ref_snapshot_id(self.ident, ref)
        if after != target.snapshot_id:
            raise IcebergCommitVerificationError(
                f"After the rollback {self.ident} {ref!r} points at {after}, not {target.snapshot_id}; a "
                "concurrent writer moved it. Inspect the table history."
            )

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        ref, target_kwargs, given, expected = self._resolve()
        hook, started = self.catalog_hook, datetime.now(UTC)
        tbl = hook.load_table(self.ident)
        head = hook.ref_snapshot_id(tbl, ref)
        details = {"target": {k: str(v) for k, v in given.items()}, "expected_snapshot_id": expected}
        target, discarded, moved = self._attempt(
            context,
            "rollback",
            ref,
            {**details, "head": head},
            lambda: self._plan_and_move(tbl, ref, target_kwargs, expected),
        )
        self._verify_moved(ref, target)
        self._record(
            context,
            "rollback",
            ref,
            "succeeded" if moved else "noop",
            {**details, "discarded_snapshots": discarded},
            snapshot_before=head,
            snapshot_after=target.snapshot_id,
            started_at=started,
        )
        self.log.info(
            "Rolled %s %s back from %s to %s (discarded from the ref: %s)",
            self.ident,
            ref,
            head,
            target.snapshot_id,
            discarded or "nothing",
        )
        return with_string_ids(
            {
                "table": self.ident.dotted,
                "ref": ref,
                "snapshot_id": target.snapshot_id,
                "previous_snapshot_id": head,
                "rolled_back": moved,
                "discarded": discarded,
            }
        )


class IcebergCommitCheckOperator(_RefOperator):
    """
    Assert that a commit exists — the generic "did the job really commit" gate.

    Use it after your own Spark job (or any writer): it succeeds when ``ref``'s history
    holds at least ``min_commits`` snapshots matching ``operation`` and ``summary``
    (e.g. ``{"wap.id": "..."}`` or ``{"airflow.run-id": "{{ run_id }}"}``), optionally
    only those after ``after_snapshot_id`` / at or after ``since``; otherwise it fails
    with :class:`IcebergCommitVerificationError`. Reads metadata only; commits nothing.

    :param table: ``namespace.table`` (templated).
    :param ref: branch whose ancestry is searched (templated; default ``main``).
    :param operation: ``append`` | ``overwrite`` | ``delete`` | ``replace`` (templated).
    :param summary: snapshot summary properties that must match exactly (templated).
    :param after_snapshot_id: only commits after this snapshot in the ref's history (templated).
    :param since: only commits at or after this time (datetime / ISO-8601 / epoch ms, templated).
    :param min_commits: how many matching commits are required (default 1).
    :return: the newest matching snapshot: ``{"table", "ref", "snapshot_id", "operation", "summary",
        "timestamp_ms", "matched"}``
    """

    template_fields: Sequence[str] = (
        *IcebergBaseOperator.template_fields,
        "ref",
        "operation",
        "summary",
        "after_snapshot_id",
        "since",
    )
    ui_color = "#e0f0ff"

    def __init__(
        self,
        *,
        ref: str = MAIN_BRANCH,
        operation: str | None = None,
        summary: Mapping[str, Any] | None = None,
        after_snapshot_id: int | str | None = None,
        since: datetime | str | int | None = None,
        min_commits: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ref = ref
        self.operation = operation
        self.summary = summary
        self.after_snapshot_id = after_snapshot_id
        self.since = since
        self.min_commits = params.positive_int(min_commits, "min_commits")
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if self.operation is not None and not _templated(self.operation):
            params.operation(self.operation)

    def openlineage_tables(self) -> tuple[Sequence[str], Sequence[str]]:
        """A commit check only reads the table (an OpenLineage input)."""
        return [self.ident.dotted], []

    def _resolve(self) -> dict[str, Any]:
        """The rendered search: ``ref``, ``operation``, ``summary``, ``after_snapshot_id``, ``since_ms``."""
        return {
            "ref": params.ref_name(self.ref, "ref"),
            "operation": params.operation(self.operation),
            "summary": validate_summary(self.summary),
            "after_snapshot_id": params.snapshot_id(self.after_snapshot_id, "after_snapshot_id"),
            "since_ms": params.instant_ms(self.since, "since"),
        }

    def _check_searchable(self, tbl: Table, q: Mapping[str, Any]) -> None:
        """Refuse a search that cannot mean anything: no such ref, or a baseline outside its history."""
        ref, after = q["ref"], q["after_snapshot_id"]
        if ref != MAIN_BRANCH and ref not in tbl.metadata.refs:
            raise IcebergCommitVerificationError(
                f"{self.ident} has no ref {ref!r}, so no commit matching {q['operation'] or 'any operation'} "
                f"{q['summary'] or ''} exists on it. Check that the job wrote to this table and branch."
            )
        if after is not None and after not in {s.snapshot_id for s in self.catalog_hook.ref_chain(tbl, ref)}:
            raise IcebergCommitVerificationError(
                f"after_snapshot_id={after} is not in the history of {self.ident} {ref!r} (rolled back past, "
                "expired, or from another branch), so 'commits after it' is undefined. Pass a snapshot of this "
                "ref, or use since=<time>."
            )

    def _verify_found(self, found: Sequence[SnapshotInfo], q: Mapping[str, Any]) -> str:
        """The search criteria as text; refuses when fewer than ``min_commits`` matched."""
        after, since = q["after_snapshot_id"], q["since_ms"]
        criteria = (
            f"operation={q['operation'] or 'any'}, summary={q['summary'] or '{}'}"
            + (f", after snapshot {after}" if after is not None else "")
            + (f", since {since} ms" if since is not None else "")
        )
        need = self.min_commits or 1
        if len(found) < need:
            raise IcebergCommitVerificationError(
                f"Expected at least {need} commit(s) on {self.ident} {q['ref']!r} with {criteria}; found "
                f"{len(found)}. The writer did not commit what it claimed (or committed elsewhere)."
            )
        return criteria

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        q = self._resolve()
        ref = q["ref"]
        tbl = self.catalog_hook.load_table(self.ident)
        self._check_searchable(tbl, q)
        found = self.catalog_hook.find_snapshots(tbl, **q)
        criteria = self._verify_found(found, q)
        newest = found[-1]
        self.log.info(
            "Found %d matching commit(s) on %s %s (%s); newest %s",
            len(found),
            self.ident,
            ref,
            criteria,
            newest.snapshot_id,
        )
        result = {
            "table": self.ident.dotted,
            "ref": ref,
            "snapshot_id": newest.snapshot_id,
            "operation": newest.operation,
            "timestamp_ms": newest.timestamp_ms,
            "summary": newest.summary,
            "matched": len(found),
        }
        return with_string_ids(result)
