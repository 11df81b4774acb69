"""``IcebergCatalogHook``: one connection, a pyiceberg catalog, plain-value table verbs.

Every operator of this provider verifies its work through this hook: Spark jobs
do the heavy lifting, then the operator loads the table here and checks that the
commit it expected is really there. Metadata-only operations (refs, publish,
rollback, health) run here without a JVM.

This module holds the connection (catalog config, SQLite tuning), the translation of
pyiceberg/SQLAlchemy errors, table loads, refs and snapshots, and the compare-and-swap
ref moves; the rules those moves follow are planned purely in
:mod:`airflow_iceberg_provider.rules.refs`. The hook class also mixes in the table-file
verbs (:mod:`~airflow_iceberg_provider.hooks._table_files`); the governance tables are read and
written through its ``governance`` property (a
:class:`~airflow_iceberg_provider.governance.store.GovernanceStore`). It never imports an operator.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from airflow.sdk import BaseHook

from airflow_iceberg_provider.config import sqlite_busy_timeout_ms
from airflow_iceberg_provider.core.governance import DEFAULT_GOVERNANCE_NAMESPACE, LEDGER_SIGNING_CONN_ID
from airflow_iceberg_provider.exceptions import (
    IcebergCatalogUnavailableError,
    IcebergCommitConflictError,
    IcebergCommitVerificationError,
    IcebergConnectionError,
    IcebergRefNotFoundError,
    IcebergRefusedError,
    IcebergTableNotFoundError,
)
from airflow_iceberg_provider.governance.store import GovernanceStore
from airflow_iceberg_provider.hooks._masking import register_non_secret_terms
from airflow_iceberg_provider.hooks._multi_table import stage_on
from airflow_iceberg_provider.hooks._table_files import TableFilesMixin
from airflow_iceberg_provider.hooks.catalog_config import CatalogConfig
from airflow_iceberg_provider.models import RefInfo, SnapshotInfo, ref_infos, snapshot_info
from airflow_iceberg_provider.params import (
    MAIN_BRANCH,
    TableIdent,
    validate_name,
    validate_ref,
    validate_snapshot_id,
    validate_table,
)
from airflow_iceberg_provider.rules.erasure_retention import CopyRetention, copy_retention
from airflow_iceberg_provider.rules.format_version import (
    CommitRoute,
    commit_problem,
    pyiceberg_commits,
    ref_change_route,
)

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from airflow_iceberg_provider.rules.durable_jobs import JobRecord
    from airflow_iceberg_provider.rules.refs import HoldRelease, RefChange

# catalog_type "sql" & co. are not secrets: no "too short to mask" warning atop every task log
register_non_secret_terms()

T = TypeVar("T")


class IcebergCatalogHook(TableFilesMixin, BaseHook):
    """
    Interact with an Iceberg catalog through pyiceberg.

    :param iceberg_catalog_conn_id: id of an ``iceberg_catalog`` connection.
    :param governance_namespace: namespace of the governance tables (ledger,
        audit results, erasure evidence); defaults to the connection extra
        ``governance_namespace`` or ``governance``.
    """

    conn_name_attr = "iceberg_catalog_conn_id"
    default_conn_name = "iceberg_catalog_default"
    conn_type = "iceberg_catalog"
    hook_name = "Iceberg Catalog (governed lakehouse)"

    def __init__(
        self,
        iceberg_catalog_conn_id: str = default_conn_name,
        governance_namespace: str | None = None,
    ) -> None:
        super().__init__()
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self._governance_namespace = governance_namespace

    # ------------------------------------------------------------ connection
    @cached_property
    def config(self) -> CatalogConfig:
        """Validated catalog description derived from the connection."""
        try:
            conn = self.get_connection(self.iceberg_catalog_conn_id)
        except Exception as err:  # any lookup failure (not defined, secrets backend): one message says how to define it
            raise IcebergConnectionError(
                f"Iceberg catalog connection {self.iceberg_catalog_conn_id!r} is not defined; create it "
                "(conn_type 'iceberg_catalog') in the UI, with `airflow connections add`, or as "
                f"AIRFLOW_CONN_{self.iceberg_catalog_conn_id.upper()}."
            ) from err
        return CatalogConfig.from_connection_fields(
            conn_id=self.iceberg_catalog_conn_id,
            host=conn.host,
            login=conn.login,
            password=conn.password,
            extra=conn.extra_dejson,
        )

    @property
    def catalog_name(self) -> str:
        return self.config.catalog_name

    @cached_property
    def governance_namespace(self) -> str:
        if self._governance_namespace:
            return validate_name(self._governance_namespace, "governance_namespace")
        conn = self.get_connection(self.iceberg_catalog_conn_id)
        value = conn.extra_dejson.get("governance_namespace") or DEFAULT_GOVERNANCE_NAMESPACE
        return validate_name(value, "governance_namespace")

    @cached_property
    def signing_conn_id(self) -> str:
        """The connection holding the governance ledger's checkpoint signing key: the catalog
        connection's extra ``ledger_signing_conn_id``, default ``iceberg_ledger_signing``."""
        conn = self.get_connection(self.iceberg_catalog_conn_id)
        value = conn.extra_dejson.get("ledger_signing_conn_id") or LEDGER_SIGNING_CONN_ID
        return validate_name(value, "ledger_signing_conn_id")

    def copy_retention(self, table: str | TableIdent | Table | None = None) -> CopyRetention:
        """How long copies outside the table (object-store versions, backups) keep erased bytes: the
        table's ``erasure.copies.*-retention-days`` properties, else the connection's extras of the same
        names (``table=None``: the connection's only). A malformed value raises, naming where it is."""
        extras = self.get_connection(self.iceberg_catalog_conn_id).extra_dejson
        if table is None:
            return copy_retention(extras, conn_id=self.iceberg_catalog_conn_id)
        tbl = self._table(table)
        return copy_retention(extras, tbl.metadata.properties, table=_name(tbl), conn_id=self.iceberg_catalog_conn_id)

    @cached_property
    def governance(self) -> GovernanceStore:
        """The governance tables (ledger, audit results, erasure evidence, legal holds, erasure
        requests) of this connection: ``hook.governance.read("ledger", table_name=...)``,
        ``hook.governance.record_ledger(...)``, ``hook.governance.submit_erasure_requests(...)``."""
        return GovernanceStore(self)

    @cached_property
    def catalog(self) -> Catalog:
        """The pyiceberg catalog (created once per hook)."""
        from pyiceberg.catalog import load_catalog

        props = self.config.pyiceberg_properties()
        with self.translate_errors("catalog"):
            catalog = load_catalog(self.config.catalog_name, **props)
        if self.config.catalog_type == "sql" and props["uri"].startswith("sqlite"):
            _sqlite_tune(catalog)
        return catalog

    def get_conn(self) -> Catalog:
        return self.catalog

    def test_connection(self) -> tuple[bool, str]:
        try:
            namespaces = self.catalog.list_namespaces()
        except Exception as err:  # report any failure to the UI
            return False, f"{type(err).__name__}: {err}"
        return True, f"Connected to {self.config.catalog_type} catalog {self.catalog_name!r} " + (
            f"({len(namespaces)} namespaces)."
        )

    # ------------------------------------------------------------ error map
    @contextlib.contextmanager
    def translate_errors(self, what: str) -> Iterator[None]:
        """Translate pyiceberg/SQLAlchemy errors into provider errors naming ``what``."""
        from pyiceberg.exceptions import (
            CommitFailedException,
            NoSuchNamespaceError,
            NoSuchTableError,
        )

        try:
            yield
        except (NoSuchTableError, NoSuchNamespaceError) as err:
            raise IcebergTableNotFoundError(
                f"Table {what} does not exist in catalog {self.catalog_name!r}: {err}. Create it first "
                "or check the table name."
            ) from err
        except CommitFailedException as err:
            raise IcebergCommitConflictError(
                f"Commit to {what} lost against a concurrent change: {err}. Retry the task; the table "
                "was not modified by this attempt."
            ) from err
        except NotImplementedError as err:  # pyiceberg writes no v3 metadata; raised before the catalog moves
            if "V3" not in str(err):
                raise
            raise IcebergRefusedError(
                f"table={what!r} is format-version 3 and pyiceberg 0.12 cannot write its metadata through the "
                f"{self.config.catalog_type!r} catalog. Fix: make the change in Spark SQL, or keep the table "
                "behind a REST catalog. Nothing was changed."
            ) from err
        # SQLAlchemy and HTTP errors share no base class: an outage is recognised by its text,
        # everything else is re-raised as it is
        except Exception as err:
            text = str(err).lower()
            if "database is locked" in text or "could not connect" in text or "connection refused" in text:
                raise IcebergCatalogUnavailableError(
                    f"Catalog {self.catalog_name!r} is unavailable while accessing {what}: {err}. Nothing "
                    "was committed; the task can be retried."
                ) from err
            raise

    # ------------------------------------------------------ format versions
    def ref_change_route(self, table: str | TableIdent | Table) -> CommitRoute:
        """Where ref moves of this table are committed: ``catalog`` (pyiceberg) or ``spark``
        (:func:`~airflow_iceberg_provider.rules.format_version.ref_change_route`)."""
        tbl = self._table(table)
        return ref_change_route(int(tbl.metadata.format_version), self.config.catalog_type)

    def can_commit(self, table: str | TableIdent | Table, *, what: str) -> bool:
        """Whether pyiceberg can commit a change of kind ``what`` to this table
        (:func:`~airflow_iceberg_provider.rules.format_version.pyiceberg_commits`)."""
        tbl = self._table(table)
        return pyiceberg_commits(int(tbl.metadata.format_version), self.config.catalog_type, what)

    def refuse_uncommittable(self, table: str | TableIdent | Table, *, change: str, what: str) -> None:
        """Refuse, before any commit, a metadata change pyiceberg cannot commit to this table
        (format-version 3 behind a catalog whose client writes the metadata).

        :raises IcebergRefusedError: naming the table, the change and the way to make it instead.
        """
        tbl = self._table(table)
        version = int(tbl.metadata.format_version)
        problem = commit_problem(_name(tbl), version, self.config.catalog_type, change=change, what=what)
        if problem:
            raise IcebergRefusedError(problem)

    # ---------------------------------------------------------------- tables
    def load_table(self, table: str | TableIdent) -> Table:
        ident = validate_table(table)
        with self.translate_errors(ident.dotted):
            return self.catalog.load_table(ident.dotted)

    def table_exists(self, table: str | TableIdent) -> bool:
        ident = validate_table(table)
        with self.translate_errors(ident.dotted):
            return self.catalog.table_exists(ident.dotted)

    def ensure_namespace(self, namespace: str) -> None:
        validate_name(namespace, "namespace")
        from pyiceberg.exceptions import NamespaceAlreadyExistsError

        try:
            with contextlib.suppress(NamespaceAlreadyExistsError), self.translate_errors(namespace):
                self.catalog.create_namespace(namespace)
        except Exception:  # the engines' integrity errors share no base class
            # Two tasks creating it at once: a SQL catalog's check-then-insert loses with an
            # integrity error (not NamespaceAlreadyExistsError). Fine if it exists now.
            if not self.catalog.namespace_exists(namespace):
                raise

    def metadata_location(self, table: str | TableIdent) -> str | None:
        """Current metadata pointer of a table, read as cheaply as the catalog allows.

        For SQL catalogs this is one indexed row read (no metadata file is parsed),
        so it costs the same for a table with 10 or 10,000 snapshots. Returns
        ``None`` when the table (or its namespace) does not exist.
        """
        ident = validate_table(table)
        from pyiceberg.catalog.sql import SqlCatalog

        cat = self.catalog
        if isinstance(cat, SqlCatalog):
            from sqlalchemy import text

            with self.translate_errors(ident.dotted), cat.engine.connect() as conn:
                row = conn.execute(
                    text(
                        "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = :c "
                        "AND table_namespace = :n AND table_name = :t"
                    ),
                    {"c": self.catalog_name, "n": ident.namespace, "t": ident.name},
                ).first()
            return row[0] if row else None
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.catalog.load_table(ident.dotted).metadata_location
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    # ------------------------------------------------------------------ refs
    def refs(self, table: str | TableIdent | Table) -> dict[str, RefInfo]:
        return ref_infos(self._table(table).metadata.refs)

    def ref_snapshot_id(self, table: str | TableIdent | Table, ref: str = MAIN_BRANCH) -> int | None:
        """Head snapshot id of a ref; ``None`` for ``main`` of an empty table."""
        tbl = self._table(table)
        validate_ref(ref)
        found = tbl.metadata.refs.get(ref)
        if found is None:
            if ref == MAIN_BRANCH:
                return None
            raise IcebergRefNotFoundError(
                f"Ref {ref!r} does not exist on table {_name(tbl)}; existing refs: "
                f"{sorted(tbl.metadata.refs) or 'none'}."
            )
        return found.snapshot_id

    # ------------------------------------------------------------- snapshots
    def list_snapshots(self, table: str | TableIdent | Table) -> list[SnapshotInfo]:
        return [snapshot_info(s) for s in self._table(table).metadata.snapshots]

    def snapshot(
        self,
        table: str | TableIdent | Table,
        *,
        snapshot_id: int | str | None = None,
        ref: str | None = None,
        as_of: datetime | int | None = None,
    ) -> SnapshotInfo:
        """Look a snapshot up by id, by ref head, or as of a time (exactly one)."""
        given = [x is not None for x in (snapshot_id, ref, as_of)]
        if sum(given) != 1:
            raise ValueError("snapshot() takes exactly one of snapshot_id, ref or as_of.")
        tbl = self._table(table)
        if snapshot_id is not None:
            sid = validate_snapshot_id(snapshot_id)
            snap = tbl.metadata.snapshot_by_id(sid)
            if snap is None:
                raise IcebergRefNotFoundError(
                    f"Snapshot {sid} does not exist on table {_name(tbl)} (expired or never created)."
                )
            return snapshot_info(snap)
        if ref is not None:
            head = self.ref_snapshot_id(tbl, ref)
            if head is None:
                raise IcebergRefNotFoundError(f"Table {_name(tbl)} has no snapshot yet on {ref!r}.")
            return self.snapshot(tbl, snapshot_id=head)
        ts_ms = to_epoch_ms(as_of)
        snap = tbl.snapshot_as_of_timestamp(ts_ms)
        if snap is None:
            raise IcebergRefNotFoundError(
                f"Table {_name(tbl)} has no snapshot on main at or before {ts_ms} ms since epoch."
            )
        return snapshot_info(snap)

    def ancestor_ids(self, table: str | TableIdent | Table, snapshot_id: int) -> list[int]:
        """Ids from ``snapshot_id`` back through its parents (newest first, itself included)."""
        tbl = self._table(table)
        by_id = {s.snapshot_id: s for s in tbl.metadata.snapshots}
        out: list[int] = []
        current: int | None = snapshot_id
        while current is not None and current in by_id:
            out.append(current)
            current = by_id[current].parent_snapshot_id
        return out

    def is_ancestor(self, table: str | TableIdent | Table, ancestor_id: int, snapshot_id: int) -> bool:
        """Whether ``ancestor_id`` is ``snapshot_id`` or one of its ancestors."""
        return ancestor_id in self.ancestor_ids(table, snapshot_id)

    def find_snapshots(
        self,
        table: str | TableIdent | Table,
        *,
        ref: str | None = None,
        operation: str | None = None,
        summary: Mapping[str, str] | None = None,
        after_snapshot_id: int | None = None,
        since_ms: int | None = None,
    ) -> list[SnapshotInfo]:
        """Snapshots (oldest first) whose operation and summary match.

        :param ref: only snapshots in this ref's ancestry.
        :param after_snapshot_id: only snapshots *after* this one in the ref's ancestry.
        :param since_ms: only snapshots committed at or after this time.
        """
        tbl = self._table(table)
        if ref is not None:
            head = self.ref_snapshot_id(tbl, ref)
            chain = self.ancestor_ids(tbl, head) if head is not None else []
            if after_snapshot_id is not None:
                chain = chain[: chain.index(after_snapshot_id)] if after_snapshot_id in chain else chain
            candidates = [tbl.metadata.snapshot_by_id(i) for i in reversed(chain)]
        else:
            candidates = list(tbl.metadata.snapshots)
        out = []
        for snap in candidates:
            if snap is None:
                continue
            info = snapshot_info(snap)
            if operation is not None and info.operation != operation:
                continue
            if since_ms is not None and info.timestamp_ms < since_ms:
                continue
            if summary and any(info.summary.get(k) != str(v) for k, v in summary.items()):
                continue
            out.append(info)
        return out

    def job_verdict(self, table: str | TableIdent, record: JobRecord) -> tuple[str | None, bool]:
        """A durable job's witnesses: its ledger status (``None``: no row) and, for a user application
        (``record.commit_ref``), whether its commit is on that ref of ``table``: a snapshot beyond
        ``record.commit_base`` whose summary carries the job run id.

        Read by a retried task and by the trigger a deferred task waits on, on any host.
        """
        from airflow_iceberg_provider.rules.wap_rerun import KEY_JOB_RUN

        rows = self.governance.read("ledger", event_id=record.job_run_id)
        status = str(rows[0].get("status")) if rows else None
        if status is not None or record.commit_ref is None:
            return status, False
        tbl = self.load_table(table)
        if record.commit_ref not in self.refs(tbl):
            return None, False
        found = self.find_snapshots(
            tbl, ref=record.commit_ref, after_snapshot_id=record.commit_base, summary={KEY_JOB_RUN: record.job_run_id}
        )
        return None, bool(found)

    # ---------------------------------------------------------- ref updates
    def set_ref(
        self,
        table: str | TableIdent | Table,
        ref: str,
        snapshot_id: int,
        *,
        ref_type: str = "branch",
        expected_snapshot_id: int | None = None,
        max_ref_age_ms: int | None = None,
        max_snapshot_age_ms: int | None = None,
        min_snapshots_to_keep: int | None = None,
        verb: str = "",
    ) -> None:
        """Point a branch or tag at a snapshot with compare-and-swap.

        The ref guard (:func:`~airflow_iceberg_provider.rules.refs.guard_ref_change`) decides first:
        a legal hold is never set here, a tag never becomes a branch nor a branch a tag. The commit
        asserts that the ref still points where the loaded metadata says (or at
        ``expected_snapshot_id`` when given, checked first), so a concurrent move makes this fail
        with :class:`IcebergCommitConflictError` and changes nothing; afterwards the ref must have
        the type asked for.

        :param verb: how the guard reads the change (``rollback``, ``fast-forward``; default: create,
            move or set retention, from the ref's state).
        :raises IcebergRefusedError: the guard refused (nothing was changed).
        """
        from airflow_iceberg_provider.rules.refs import RefChange

        tbl = self._table(table)
        validate_ref(ref)
        current = tbl.metadata.refs.get(ref)
        change = RefChange(
            ref,
            "tag" if ref_type == "tag" else "branch",
            snapshot_id,
            current.snapshot_id if current is not None else None,
            max_ref_age_ms=max_ref_age_ms,
            max_snapshot_age_ms=max_snapshot_age_ms,
            min_snapshots_to_keep=min_snapshots_to_keep,
            verb=verb,
        )
        self._guard(tbl, [change])
        if expected_snapshot_id is not None and (current is None or current.snapshot_id != expected_snapshot_id):
            raise IcebergCommitConflictError(
                f"Ref {ref!r} of {_name(tbl)} points at "
                f"{current.snapshot_id if current else 'nothing'}, not the expected {expected_snapshot_id}; "
                "another writer moved it. Nothing was changed."
            )
        self.refuse_uncommittable(tbl, change=f"{change.ref_type} {change.ref!r} change", what="ref")
        with self.translate_errors(_name(tbl)), tbl.manage_snapshots() as ms:
            stage_on(ms, [change])
        self._verify_kept_types(tbl, [change])

    def fast_forward(
        self,
        table: str | TableIdent | Table,
        *,
        to_snapshot_id: int,
        ref: str = MAIN_BRANCH,
        expected_snapshot_id: int | None = None,
    ) -> bool:
        """Move ``ref`` forward to ``to_snapshot_id`` (a descendant of its head), atomically.

        pyiceberg has no fast-forward, so this checks ancestry on the loaded
        metadata and commits a ref update whose requirement asserts the ref's
        current snapshot (compare-and-swap). Returns ``False`` (no commit) when the
        ref already points at ``to_snapshot_id`` — a retried publish is a no-op.

        :raises IcebergCommitConflictError: the ref is not an ancestor of the target
            (someone else moved it), or moved between load and commit.
        """
        from airflow_iceberg_provider.core.ref_guard import RefVerb
        from airflow_iceberg_provider.rules.refs import guard_ref_change

        tbl = self._table(table)
        validate_ref(ref)
        guard_ref_change(
            RefVerb.FAST_FORWARD,
            tbl.metadata.refs,
            ref,
            table=_name(tbl),
            result_type="branch",
            snapshot_id=to_snapshot_id,
        )
        head = self.ref_snapshot_id(tbl, ref) if ref == MAIN_BRANCH or ref in tbl.metadata.refs else None
        if head == to_snapshot_id:
            return False
        if expected_snapshot_id is not None and head != expected_snapshot_id:
            raise IcebergCommitConflictError(
                f"Cannot fast-forward {_name(tbl)} {ref!r}: it points at {head}, not the expected "
                f"{expected_snapshot_id}; another writer moved it. Nothing was changed."
            )
        if tbl.metadata.snapshot_by_id(to_snapshot_id) is None:
            raise IcebergRefNotFoundError(f"Snapshot {to_snapshot_id} does not exist on {_name(tbl)}.")
        if head is not None and not self.is_ancestor(tbl, head, to_snapshot_id):
            raise IcebergCommitConflictError(
                f"Cannot fast-forward {_name(tbl)} {ref!r} from {head} to {to_snapshot_id}: {head} is not an "
                f"ancestor of {to_snapshot_id} ({ref!r} moved since the source was cut). Nothing was changed."
            )
        self._move_keeping_retention(tbl, ref, to_snapshot_id, verb="fast-forward")
        return True

    def _move_keeping_retention(
        self, tbl: Table, ref: str, snapshot_id: int, *, expected_snapshot_id: int | None = None, verb: str = ""
    ) -> None:
        """Point a branch at ``snapshot_id`` with the retention it has (pyiceberg's move would drop it)."""
        existing = tbl.metadata.refs.get(ref)
        self.set_ref(
            tbl,
            ref,
            snapshot_id,
            verb=verb,
            expected_snapshot_id=expected_snapshot_id,
            max_ref_age_ms=existing.max_ref_age_ms if existing else None,
            max_snapshot_age_ms=existing.max_snapshot_age_ms if existing else None,
            min_snapshots_to_keep=existing.min_snapshots_to_keep if existing else None,
        )

    def remove_ref(self, table: str | TableIdent | Table, ref: str, *, ref_type: str | None = None) -> bool:
        """Remove a branch or tag (never ``main``, never a legal hold: :meth:`release_legal_hold`);
        ``False`` if it was already gone.

        :param ref_type: ``"branch"`` or ``"tag"``: refuse when the ref is of the other type.
        :raises IcebergRefusedError: the ref guard refused (nothing was changed).
        """
        from airflow_iceberg_provider.core.ref_guard import RefVerb
        from airflow_iceberg_provider.rules.refs import RefChange, guard_ref_change

        tbl = self._table(table)
        validate_ref(ref, allow_main=False)
        state = guard_ref_change(
            RefVerb.DROP, tbl.metadata.refs, ref, table=_name(tbl), param=ref_type or "ref", expected_type=ref_type
        )
        if state.stored_type is None:
            return False
        change = RefChange(ref, state.stored_type, None, state.snapshot_id)
        self.refuse_uncommittable(tbl, change=f"{change.ref_type} {change.ref!r} change", what="ref")
        with self.translate_errors(_name(tbl)), tbl.manage_snapshots() as ms:
            stage_on(ms, [change])
        self._verify_kept_types(tbl, [change])
        return True

    def release_legal_hold(
        self, table: str | TableIdent | Table, tag: str, *, expected_snapshot_id: int
    ) -> HoldRelease | None:
        """The release path, the only verb that removes a legal hold: policy, then one compare-and-swap.

        The hold's release policy is read from the ledger (``requires_approval`` recorded when the
        hold was placed) and from the connection (``hold_release_requires_approval``); where either
        asks for it, only an ``approved`` ``legal_hold_release`` decision bound to the hold's name,
        case id and snapshot releases it
        (:func:`~airflow_iceberg_provider.rules.refs.release_decision`). ``None`` if the hold was
        already gone.

        :raises IcebergRefusedError: ``tag`` is not a legal hold, or the approval its policy needs is
            missing, rejected or bound to another hold, case or snapshot (nothing was changed).
        :raises IcebergCommitConflictError: the hold does not pin ``expected_snapshot_id`` (nothing changed).
        """
        from airflow_iceberg_provider.core.ref_guard import RefVerb
        from airflow_iceberg_provider.governance.approvals import hold_release_decisions
        from airflow_iceberg_provider.governance.holds import HOLD_OPERATIONS
        from airflow_iceberg_provider.rules.refs import (
            HoldRelease,
            RefChange,
            guard_ref_change,
            placed_holds,
            release_decision,
        )

        tbl = self._table(table)
        name = _name(tbl)
        validate_ref(tag, "tag", allow_main=False)
        state = guard_ref_change(RefVerb.RELEASE, tbl.metadata.refs, tag, table=name, param="tag")
        if state.stored_type is None or state.snapshot_id is None:
            return None
        if state.snapshot_id != expected_snapshot_id:
            raise IcebergCommitConflictError(
                f"Legal hold {tag!r} of {name} pins snapshot {state.snapshot_id}, not {expected_snapshot_id} "
                "as the release was decided for; another writer changed it. Nothing was changed."
            )
        entries = self.governance.ledger_entries(table_name=name, ref=tag)
        hold = placed_holds([e for e in entries if e.operation in HOLD_OPERATIONS]).get(tag)
        case_id = hold.case_id if hold is not None else None
        decision = release_decision(
            table=name,
            tag=tag,
            snapshot_id=state.snapshot_id,
            case_id=case_id,
            hold_requires=bool(hold and hold.requires_approval),
            connection_requires=self.config.hold_release_requires_approval,
            decisions=hold_release_decisions(entries),
        )
        change = RefChange(tag, state.stored_type, None, state.snapshot_id, verb="release")
        self.refuse_uncommittable(tbl, change=f"release of legal hold {tag!r}", what="ref")
        with self.translate_errors(name), tbl.manage_snapshots() as ms:
            stage_on(ms, [change])
        self._verify_kept_types(tbl, [change])
        return HoldRelease(tag, state.snapshot_id, case_id, decision.policy, decision.approval_id)

    def apply_ref_changes(self, table: str | TableIdent | Table, changes: Sequence[RefChange]) -> bool:
        """Apply a plan's ref changes (move, create, remove; branches and tags) in ONE catalog commit.

        One ``manage_snapshots()`` chain, as pyiceberg's builders do: each step carries an
        ``assert-ref-snapshot-id`` requirement for its ref, all committed together, so a concurrent
        change to any of them fails the whole commit with :class:`IcebergCommitConflictError` and
        nothing changes. The plan's expectations are checked against the loaded metadata first
        (the requirements assert what was loaded). ``main`` moves with ``create_branch("main")``
        (as :meth:`fast_forward`), never ``set_current_snapshot()``: that one stages separately,
        and pyiceberg 0.12's ``Transaction`` keeps only the first staging's requirement of a type,
        so ``main``'s assertion would be lost. Returns whether a commit was made.
        """
        if not changes:
            return False
        tbl = self._table(table)
        self._guard(tbl, changes)
        for c in changes:
            validate_ref(c.ref, allow_main=c.snapshot_id is not None)
            found = tbl.metadata.refs.get(c.ref)
            if (found.snapshot_id if found is not None else None) != c.expected_snapshot_id:
                raise IcebergCommitConflictError(
                    f"Ref {c.ref!r} of {_name(tbl)} points at {found.snapshot_id if found else 'nothing'}, not "
                    f"{c.expected_snapshot_id if c.expected_snapshot_id is not None else 'nothing'} as planned; "
                    "another writer changed it. Nothing was changed."
                )
        self.refuse_uncommittable(tbl, change=f"ref change of {', '.join(repr(c.ref) for c in changes)}", what="ref")
        with self.translate_errors(_name(tbl)), tbl.manage_snapshots() as ms:
            stage_on(ms, changes)
        self._verify_kept_types(tbl, changes)
        return True

    def _guard(self, tbl: Table, changes: Sequence[RefChange]) -> None:
        """The ref guard over every change, before any commit (:func:`~airflow_iceberg_provider.rules.refs.guard_ref_changes`)."""
        from airflow_iceberg_provider.rules.refs import guard_ref_changes

        guard_ref_changes(tbl.metadata.refs, changes, table=_name(tbl))

    def _verify_kept_types(self, tbl: Table, changes: Sequence[RefChange]) -> None:
        """After a commit (``tbl`` holds the committed metadata): each ref has the type planned, a tag stays a tag."""
        from airflow_iceberg_provider.rules.refs import kept_types_problems

        problems = kept_types_problems(tbl.metadata.refs, changes)
        if problems:
            raise IcebergCommitVerificationError(
                f"After the commit, the refs of {_name(tbl)} are not as planned: {'; '.join(problems)}. A "
                "concurrent writer may have changed them; inspect the table's refs."
            )

    def ensure_table_properties(self, table: str | TableIdent | Table, properties: Mapping[str, str]) -> bool:
        """Set table properties that differ; returns whether a commit was made."""
        tbl = self._table(table)
        missing = {k: str(v) for k, v in properties.items() if tbl.metadata.properties.get(k) != str(v)}
        if not missing:
            return False
        self.refuse_uncommittable(tbl, change=f"table properties {sorted(missing)}", what="properties")
        with self.translate_errors(_name(tbl)), tbl.transaction() as tx:
            tx.set_properties(missing)
        return True

    def update_table_properties(
        self, table: str | TableIdent | Table, *, updates: Mapping[str, str], removals: Sequence[str] = ()
    ) -> bool:
        """Set ``updates`` and remove ``removals`` (absent ones ignored) in one commit; whether a commit was made."""
        tbl = self._table(table)
        current = tbl.metadata.properties
        to_set = {k: str(v) for k, v in updates.items() if current.get(k) != str(v)}
        to_remove = [k for k in removals if k in current and k not in to_set]
        if not to_set and not to_remove:
            return False
        self.refuse_uncommittable(tbl, change=f"table properties {sorted([*to_set, *to_remove])}", what="properties")
        with self.translate_errors(_name(tbl)), tbl.transaction() as tx:
            if to_set:
                tx.set_properties(to_set)
            if to_remove:
                tx.remove_properties(*to_remove)
        return True

    # ------------------------------------------ tags, branches, rollback, commit polling
    def ref_chain(self, table: str | TableIdent | Table, ref: str = MAIN_BRANCH) -> list[SnapshotInfo]:
        """A ref's ancestry as plain values, **oldest first** (head last); empty for an empty table."""
        tbl = self._table(table)
        if ref != MAIN_BRANCH and ref not in tbl.metadata.refs:
            return []
        head = self.ref_snapshot_id(tbl, ref)
        if head is None:
            return []
        return [snapshot_info(tbl.metadata.snapshot_by_id(i)) for i in reversed(self.ancestor_ids(tbl, head))]

    def create_tag(
        self,
        table: str | TableIdent | Table,
        tag: str,
        *,
        snapshot_id: int,
        max_ref_age_ms: int | None = None,
        replace: bool = False,
    ) -> str:
        """Create an (immutable) tag, idempotently; returns ``created``, ``exists``, ``replaced``
        or ``hold_pinned``.

        The same tag on the same snapshot with the same retention is ``exists`` (no
        commit): a retried task succeeds. A tag pointing elsewhere (or with another
        retention) is refused unless ``replace=True``; a branch of that name is always
        refused. The commit is a compare-and-swap on the tag.

        A legal hold (``legal-hold-…``) always gets the never-expiring ``max-ref-age-ms``
        (:func:`~airflow_iceberg_provider.rules.refs.tag_retention`); placing it again on
        the same snapshot pins a hold created without one (``hold_pinned``).

        :raises IcebergRefusedError: the name is taken (nothing was changed).
        """
        from airflow_iceberg_provider.rules.refs import plan_tag, tag_retention

        tbl = self._table(table)
        validate_ref(tag, "tag", allow_main=False)
        tag_retention(tag, max_ref_age_ms)  # a hold with another age is refused before anything else
        if tbl.metadata.snapshot_by_id(snapshot_id) is None:
            raise IcebergRefNotFoundError(
                f"Snapshot {snapshot_id} does not exist on {_name(tbl)} (expired or never created); cannot tag it."
            )
        existing = ref_infos(tbl.metadata.refs).get(tag)
        outcome, change = plan_tag(existing, tag, snapshot_id, max_ref_age_ms, table=_name(tbl), replace=replace)
        if change is not None:
            self.apply_ref_changes(tbl, [change])
        return outcome

    def create_branch(
        self,
        table: str | TableIdent | Table,
        branch: str,
        *,
        snapshot_id: int,
        max_ref_age_ms: int | None = None,
        max_snapshot_age_ms: int | None = None,
        min_snapshots_to_keep: int | None = None,
        replace: bool = False,
    ) -> str:
        """Create a branch with retention, idempotently.

        Returns ``created``; ``exists`` when the branch already starts at (or has since
        advanced from) ``snapshot_id`` with the same retention; ``retention_updated``
        when only the retention differed (set on the current head, compare-and-swap);
        ``replaced`` when ``replace=True`` re-pointed a diverged branch.

        :raises IcebergRefusedError: ``main``, a tag of that name, or a branch that does
            not descend from ``snapshot_id`` without ``replace=True`` (nothing changed).
        """
        from airflow_iceberg_provider.rules.refs import plan_branch

        tbl = self._table(table)
        validate_ref(branch, "branch", allow_main=False)
        if tbl.metadata.snapshot_by_id(snapshot_id) is None:
            raise IcebergRefNotFoundError(
                f"Snapshot {snapshot_id} does not exist on {_name(tbl)} (expired or never created); cannot "
                "branch from it."
            )
        retention = {
            "max_ref_age_ms": max_ref_age_ms,
            "max_snapshot_age_ms": max_snapshot_age_ms,
            "min_snapshots_to_keep": min_snapshots_to_keep,
        }
        existing = ref_infos(tbl.metadata.refs).get(branch)
        descends = existing is not None and self.is_ancestor(tbl, snapshot_id, existing.snapshot_id)
        outcome, change = plan_branch(
            existing, branch, snapshot_id, retention, table=_name(tbl), descends=descends, replace=replace
        )
        if change is not None:
            self.apply_ref_changes(tbl, [change])
        return outcome

    def resolve_rollback_target(
        self,
        table: str | TableIdent | Table,
        *,
        ref: str = MAIN_BRANCH,
        snapshot_id: int | None = None,
        tag: str | None = None,
        as_of_ms: int | None = None,
    ) -> SnapshotInfo:
        """The snapshot to roll ``ref`` back to (exactly one of id, tag or time), checked to be an ancestor.

        ``as_of_ms`` picks the newest snapshot of the ref's ancestry committed at or
        before that time.

        :raises IcebergRefusedError: the target is not an ancestor of the ref's head.
        """
        from airflow_iceberg_provider.rules.refs import rollback_target

        tbl = self._table(table)
        return rollback_target(
            self.ref_chain(tbl, ref),
            ref_infos(tbl.metadata.refs),
            table=_name(tbl),
            ref=ref,
            known_ids={s.snapshot_id for s in tbl.metadata.snapshots},
            snapshot_id=snapshot_id,
            tag=tag,
            as_of_ms=as_of_ms,
        )

    def rollback(
        self,
        table: str | TableIdent | Table,
        *,
        to_snapshot_id: int,
        ref: str = MAIN_BRANCH,
        expected_snapshot_id: int | None = None,
    ) -> bool:
        """Move ``ref`` back to an ancestor snapshot (compare-and-swap); ``False`` if already there.

        The ref keeps its retention. ``expected_snapshot_id`` (when given) must be the
        ref's current head, so a rollback decided on stale information never lands.

        :raises IcebergRefusedError: the target is not an ancestor of the head.
        :raises IcebergCommitConflictError: the ref moved (nothing was changed).
        """
        from airflow_iceberg_provider.core.ref_guard import RefVerb
        from airflow_iceberg_provider.rules.refs import guard_ref_change

        tbl = self._table(table)
        validate_ref(ref)
        guard_ref_change(
            RefVerb.ROLLBACK, tbl.metadata.refs, ref, table=_name(tbl), result_type="branch", snapshot_id=to_snapshot_id
        )
        target = self.resolve_rollback_target(tbl, ref=ref, snapshot_id=to_snapshot_id)
        head = self.ref_snapshot_id(tbl, ref)
        if head == target.snapshot_id:
            return False
        if expected_snapshot_id is not None and head != expected_snapshot_id:
            raise IcebergCommitConflictError(
                f"Cannot roll back {_name(tbl)} {ref!r}: it points at {head}, not the expected "
                f"{expected_snapshot_id}; another writer moved it. Nothing was changed."
            )
        self._move_keeping_retention(tbl, ref, target.snapshot_id, expected_snapshot_id=head, verb="rollback")
        return True

    def poll_commit(
        self,
        table: str | TableIdent,
        *,
        ref: str = MAIN_BRANCH,
        after_snapshot_id: int | None = None,
        after_timestamp_ms: int | None = None,
        operation: str | None = None,
        summary: Mapping[str, str] | None = None,
        known_metadata_location: str | None = None,
    ) -> dict[str, Any]:
        """One cheap sensor poll: is there a matching commit on ``ref`` newer than the baseline?

        Reads only the catalog's metadata pointer first (one row read for SQL
        catalogs); the metadata is loaded and parsed only when the pointer differs
        from ``known_metadata_location``. A missing table, namespace or ref is "not yet".

        :return: ``{"metadata_location", "loaded", "snapshot" (SnapshotInfo dict or None),
            "matched", "head_snapshot_id"}``.
        """
        from airflow_iceberg_provider.rules.refs import select_new_commit

        ident = validate_table(table)
        location = self.metadata_location(ident)
        out: dict[str, Any] = {
            "metadata_location": location,
            "loaded": False,
            "snapshot": None,
            "matched": 0,
            "head_snapshot_id": None,
        }
        if location is None or location == known_metadata_location:
            return out
        try:  # a lock or outage surfaces as IcebergCatalogUnavailableError (transient)
            with self.translate_errors(ident.dotted):
                tbl = self.catalog.load_table(ident.dotted)
        except IcebergTableNotFoundError:  # dropped between the two reads: "not yet"
            return {**out, "metadata_location": None}
        chain = self.ref_chain(tbl, ref)
        if after_snapshot_id is not None and after_timestamp_ms is None:
            baseline = tbl.metadata.snapshot_by_id(after_snapshot_id)
            # if the ref was rolled back past the baseline, "newer" falls back to its commit time
            after_timestamp_ms = baseline.timestamp_ms if baseline is not None else None
        found, count = select_new_commit(
            chain,
            after_snapshot_id=after_snapshot_id,
            after_timestamp_ms=after_timestamp_ms,
            operation=operation,
            summary=summary,
        )
        return {
            "metadata_location": tbl.metadata_location,
            "loaded": True,
            "snapshot": found.to_dict() if found else None,
            "matched": count,
            "head_snapshot_id": chain[-1].snapshot_id if chain else None,
        }

    # --------------------------------------------------------------- helpers
    def retry_commit(self, fn: Callable[[], T], *, what: str, attempts: int = 5) -> T:
        """Run ``fn`` (which must reload what it commits to) retrying commit conflicts."""
        from pyiceberg.exceptions import CommitFailedException

        for attempt in range(1, attempts + 1):
            try:
                with self.translate_errors(what):
                    return fn()
            except (IcebergCommitConflictError, IcebergCatalogUnavailableError, CommitFailedException):
                if attempt == attempts:
                    raise
                self.log.info("Commit to %s conflicted (attempt %d/%d); retrying", what, attempt, attempts)
                time.sleep(0.05 * 2**attempt)
        raise AssertionError("unreachable")

    def _table(self, table: str | TableIdent | Table) -> Table:
        if isinstance(table, (str, TableIdent)):
            return self.load_table(table)
        return table


def _name(tbl: Table) -> str:
    return ".".join(tbl.name()[-2:])


def to_epoch_ms(value: datetime | int | float | str | None, param: str = "as_of") -> int:
    """A point in time as epoch ms (the one grammar: :func:`airflow_iceberg_provider.params.instant_ms`)."""
    from airflow_iceberg_provider.params import instant_ms

    return instant_ms(value, param, required=True)  # type: ignore[return-value]


def _sqlite_tune(catalog: Catalog) -> None:
    """WAL + busy timeout so Spark's JDBC catalog and pyiceberg share one SQLite file."""
    from sqlalchemy import event

    engine = catalog.engine  # type: ignore[attr-defined]
    busy_ms = sqlite_busy_timeout_ms()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cur.close()

    engine.dispose()  # pooled connections predate the listener
    with engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
