"""Read-only catalog access for the governance view.

Everything goes through :class:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook` (the
connection, the pyiceberg catalog, ``metadata_location``, ``health``, ``refs``, ``list_snapshots``).
Nothing here writes: governance tables that do not exist yet read as empty (the hook's
``governance.table``/``governance.read`` would *create* them, so they are not used), and a
SQLite catalog is opened read-only (``mode=ro``) after checking that its file exists, so the view
never creates a catalog file or the catalog's own tables.

Results are cached per table **metadata location** (one indexed row read on SQL catalogs): a page
view re-reads a governance table or recomputes a table's health only when a commit changed it.
Erasure requests tables are read with :data:`REQUEST_FIELDS` only, so ``subject_key`` is never
loaded into the API server's memory.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_iceberg_provider.core.governance import CHECKPOINTS, GOVERNANCE_TABLES
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

if TYPE_CHECKING:
    from airflow_iceberg_provider.ui.access import Access

CONN_TYPE = IcebergCatalogHook.conn_type
#: The columns of an erasure requests table the view reads. ``subject_key`` is never among them.
REQUEST_FIELDS = ("request_id", "received_at", "status", "updated_at", "completed_at")
#: A table is recognised as an erasure requests table when it has these columns
#: (the shape ``IcebergCatalogHook().governance.ensure_erasure_requests_table`` creates).
REQUEST_SHAPE = ("request_id", "subject_key", "received_at", "status")
#: Readers (one pyiceberg catalog each) are rebuilt after this many seconds (connection edits).
READER_TTL_S = 300.0

_lock = threading.Lock()
_readers: dict[str, tuple[float, GovernanceReader]] = {}


#: The connection list is re-read after this many seconds (one metadata-DB query).
CONNECTIONS_TTL_S = 15.0
_connections: tuple[float, dict[str, str | None]] | None = None


def catalog_connections() -> dict[str, str | None]:
    """The ``iceberg_catalog`` connections (id -> team name): environment variables and the metadata DB
    (cached briefly). Every connection, whoever asks: the view shows a user only those
    :meth:`~airflow_iceberg_provider.ui.access.Access.readable_connections` keeps."""
    global _connections
    now = time.monotonic()
    if _connections is None or now - _connections[0] > CONNECTIONS_TTL_S:
        _connections = (now, _list_connections())
    return dict(_connections[1])


def _list_connections() -> dict[str, str | None]:
    ids: dict[str, str | None] = {
        key[len("AIRFLOW_CONN_") :].lower(): None
        for key, value in os.environ.items()
        if key.startswith("AIRFLOW_CONN_") and _is_catalog_conn(value)
    }
    try:
        from airflow.models.connection import Connection
        from airflow.utils.session import create_session
        from sqlalchemy import select

        with create_session() as session:
            team = getattr(Connection, "team_name", None)
            if team is None:  # pragma: no cover - Airflow without multi-team connections
                ids.update(
                    dict.fromkeys(session.scalars(select(Connection.conn_id).where(Connection.conn_type == CONN_TYPE)))
                )
            else:
                ids.update(
                    session.execute(select(Connection.conn_id, team).where(Connection.conn_type == CONN_TYPE)).tuples()
                )
    except Exception:  # no metadata DB (e.g. a bare test process): environment connections only
        pass
    return dict(sorted(ids.items()))


#: The approval gates of this provider (``TaskInstance.operator``): their waiting forms are listed.
GATE_OPERATORS = ("IcebergWapApprovalOperator", "IcebergRefApprovalOperator")


def waiting_gates(conn_id: str) -> list[dict[str, Any]]:
    """The approval gates of ``conn_id`` waiting for a person, oldest first, from Airflow's metadata DB:
    task instances of :data:`GATE_OPERATORS` awaiting input whose form has no answer yet.

    Each is ``{dag_id, run_id, task_id, map_index, subject, options, asked_at, table, ref}``; the
    table, the ref and the connection come from the gate's rendered fields (a gate rendered for another
    connection is left out). No metadata DB (a bare process): none.
    """
    try:
        from airflow.models.hitl import HITLDetail
        from airflow.models.renderedtifields import RenderedTaskInstanceFields as Rendered
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import and_, select

        query = (
            select(
                TaskInstance.dag_id,
                TaskInstance.run_id,
                TaskInstance.task_id,
                TaskInstance.map_index,
                HITLDetail.subject,
                HITLDetail.options,
                HITLDetail.created_at,
                Rendered.rendered_fields,
            )
            .join(HITLDetail, HITLDetail.ti_id == TaskInstance.id)
            .outerjoin(
                Rendered,
                and_(
                    Rendered.dag_id == TaskInstance.dag_id,
                    Rendered.run_id == TaskInstance.run_id,
                    Rendered.task_id == TaskInstance.task_id,
                    Rendered.map_index == TaskInstance.map_index,
                ),
            )
            .where(
                TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
                TaskInstance.operator.in_(GATE_OPERATORS),
                HITLDetail.responded_at.is_(None),
            )
            .order_by(HITLDetail.created_at)
        )
        with create_session() as session:
            rows = session.execute(query).all()
    except Exception:  # no metadata DB, or an Airflow without human-in-the-loop tasks
        return []
    out = []
    for dag_id, run_id, task_id, map_index, subject, options, created_at, rendered in rows:
        fields = rendered if isinstance(rendered, dict) else {}
        if (fields.get("iceberg_catalog_conn_id") or IcebergCatalogHook.default_conn_name) != conn_id:
            continue
        out.append(
            {
                "dag_id": dag_id,
                "run_id": run_id,
                "task_id": task_id,
                "map_index": map_index,
                "subject": subject,
                "options": list(options or ()),
                "asked_at": created_at,
                "table": fields.get("table"),
                "ref": fields.get("branch") or fields.get("ref"),
            }
        )
    return out


def _is_catalog_conn(value: str) -> bool:
    text = value.strip()
    if text.startswith("{"):
        try:
            return json.loads(text).get("conn_type") == CONN_TYPE
        except (ValueError, AttributeError):
            return False
    return text.split("://", 1)[0].replace("-", "_") == CONN_TYPE


def reader_for(conn_id: str) -> GovernanceReader:
    """The cached reader of one connection (rebuilt after :data:`READER_TTL_S`)."""
    now = time.monotonic()
    with _lock:
        hit = _readers.get(conn_id)
        if hit is None or now - hit[0] > READER_TTL_S:
            hit = (now, GovernanceReader(conn_id))
            _readers[conn_id] = hit
        return hit[1]


def clear_caches() -> None:
    """Forget every reader, cached read and the connection list (tests; connection changes)."""
    global _connections
    with _lock:
        _readers.clear()
        _connections = None


class CatalogUnreadableError(Exception):
    """The connection's catalog cannot be read (missing file, unreachable server, not a catalog)."""


def read_only_sqlite_uri(uri: str) -> tuple[str, str] | None:
    """``(path, read-only SQLAlchemy URI)`` of a file-backed SQLite catalog URI; ``None`` for other URIs."""
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    if not url.drivername.startswith("sqlite") or not url.database or url.database == ":memory:":
        return None
    path = url.database[len("file:") :].split("?")[0] if url.database.startswith("file:") else url.database
    return path, f"{url.drivername}:///file:{quote(path)}?mode=ro&uri=true"


class ReadOnlyCatalogHook(IcebergCatalogHook):
    """The catalog hook of the view: a SQLite catalog is opened read-only, and only if its file exists.

    pyiceberg's ``SqlCatalog`` creates the database file and its ``iceberg_tables`` /
    ``iceberg_namespace_properties`` tables when they are missing; here the file must exist and
    the catalog tables are not created (``init_catalog_tables=false``), so a wrong path reads as
    "cannot be read" instead of a new empty catalog.
    """

    @cached_property
    def catalog(self) -> Any:
        from pyiceberg.catalog import load_catalog

        props = dict(self.config.pyiceberg_properties())
        ro = read_only_sqlite_uri(props["uri"]) if self.config.catalog_type == "sql" else None
        if ro is not None:
            path, props["uri"] = ro
            if not Path(path).is_file():
                raise CatalogUnreadableError(f"the SQLite catalog file {path} does not exist")
            props["init_catalog_tables"] = "false"
        try:
            catalog = load_catalog(self.config.catalog_name, **props)
        except Exception as err:  # any catalog failure is shown on the page, named, instead of an error page
            raise CatalogUnreadableError(f"{type(err).__name__}: {str(err)[:300]}") from err
        if ro is not None:
            _busy_timeout(catalog)
        return catalog


def _busy_timeout(catalog: Any) -> None:
    """Wait for a writer's lock instead of failing at once (a read-only connection sets no WAL mode)."""
    from sqlalchemy import event

    from airflow_iceberg_provider.config import sqlite_busy_timeout_ms

    busy_ms = sqlite_busy_timeout_ms()

    @event.listens_for(catalog.engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {busy_ms}")
        cur.close()

    catalog.engine.dispose()


class GovernanceReader:
    """Cached, read-only reads of one catalog connection's governance and governed tables."""

    def __init__(self, conn_id: str) -> None:
        self.conn_id = conn_id
        self.hook = ReadOnlyCatalogHook(iceberg_catalog_conn_id=conn_id)
        self._cache: dict[tuple[str, str], tuple[str, Any]] = {}
        self._lock = threading.Lock()

    def status(self) -> dict[str, Any]:
        """Whether the catalog can be read and holds tables: ``state`` ``ok`` | ``empty`` | ``unreadable``.

        Never raises: a page shows the message instead of an empty list.
        """
        try:
            catalog = self.hook.catalog
            namespaces = [".".join(ns) for ns in catalog.list_namespaces()]
            tables = sum(len(catalog.list_tables(ns)) for ns in namespaces)
        except Exception as err:  # never raises: the page shows the failure's type and message
            reason = str(err) if isinstance(err, CatalogUnreadableError) else f"{type(err).__name__}: {str(err)[:300]}"
            return {"state": "unreadable", "message": reason, "namespaces": [], "tables": 0}
        return {"state": "ok" if tables else "empty", "message": "", "namespaces": namespaces, "tables": tables}

    @property
    def governance_namespace(self) -> str:
        return self.hook.governance_namespace

    # ----------------------------------------------------------------- cache
    def _cached(self, kind: str, table: str, load: Callable[[Any], Any], default: Any = None) -> Any:
        """``load(pyiceberg_table)``, recomputed only when the table's metadata location changed."""
        location = self.hook.metadata_location(table)
        if location is None:
            return default
        key = (kind, table)
        hit = self._cache.get(key)
        if hit is not None and hit[0] == location:
            return hit[1]
        tbl = self._table(table, location)
        value = load(tbl)
        with self._lock:
            self._cache[key] = (location, value)
        return value

    def _table(self, table: str, location: str) -> Any:
        hit = self._cache.get(("table", table))
        if hit is not None and hit[0] == location:
            return hit[1]
        tbl = self.hook.load_table(table)
        with self._lock:
            self._cache[("table", table)] = (tbl.metadata_location, tbl)
        return tbl

    # ------------------------------------------------------------ governance
    def governance_rows(self, kind: str) -> list[dict[str, Any]]:
        """Every row of a governance table (``ledger``, ``audit_results``, ``erasure_evidence``)."""
        spec = GOVERNANCE_TABLES[kind]
        name = f"{self.governance_namespace}.{spec.name}"
        return self._cached("rows", name, lambda tbl: tbl.scan().to_arrow().to_pylist(), default=[])

    def checkpoint_notes(self) -> list[str]:
        """The checkpoint notes of the governance chains (``ledger_checkpoints``), as written."""
        name = f"{self.governance_namespace}.{CHECKPOINTS.name}"
        rows = self._cached("rows", name, lambda tbl: tbl.scan().to_arrow().to_pylist(), default=[])
        return [str(r.get("checkpoint")) for r in rows]

    def derived(self, kind: str, name: str, shape: Callable[[list[dict[str, Any]]], Any]) -> Any:
        """``shape(rows)`` of a governance table, computed once per metadata location (e.g. grouped audits)."""
        spec = GOVERNANCE_TABLES[kind]
        table = f"{self.governance_namespace}.{spec.name}"
        return self._cached(f"derived:{name}", table, lambda _tbl: shape(self.governance_rows(kind)), default=shape([]))

    # ------------------------------------------------------- governed tables
    def table_state(self, table: str) -> dict[str, Any] | None:
        """Health, health verdict, refs and snapshots of a governed table; ``None`` when it does not exist."""

        def load(tbl: Any) -> dict[str, Any]:
            health, verdict = self._health_and_verdict(tbl)
            return {
                "health": health,
                "verdict": verdict,
                "properties": dict(tbl.properties),
                "refs": self.hook.refs(tbl),
                "snapshots": self.hook.list_snapshots(tbl),
                "metadata_location": tbl.metadata_location,
            }

        return self._cached("state", table, load)

    def _health_and_verdict(self, tbl: Any) -> tuple[Any, dict[str, Any]]:
        """The table's health and the maintenance planner's verdict on it
        (:func:`~airflow_iceberg_provider.rules.maintenance.health_verdict`), as the maintenance
        operator would plan it now with the table's own policy (metadata only, no data file opened)."""
        from airflow_iceberg_provider.exceptions import IcebergValidationError
        from airflow_iceberg_provider.governance.maintenance_state import read_maintenance_state
        from airflow_iceberg_provider.rules.health import breaches, resolve_thresholds
        from airflow_iceberg_provider.rules.maintenance import decide, health_verdict, now_ms, resolve_policy

        props = dict(tbl.properties)
        try:
            now = now_ms()
            policy = resolve_policy(props, now=now)
            thresholds = resolve_thresholds(props)
        except IcebergValidationError as err:  # a bad table property: say so instead of guessing
            reason = f"a table property is invalid, so the maintenance policy cannot be read: {err}"
            return self.hook.health(tbl), {"verdict": "unknown", "level": "warn", "reasons": [reason], "notes": []}
        state = read_maintenance_state(self.hook, tbl, policy, now=now, tolerate_refusal=True)
        decision = decide(state.health, policy, properties=props, layout=state.layout, expiry=state.expiry)
        breached = [(b.threshold, b.value, b.limit) for b in breaches(state.health, thresholds)]
        verdict = health_verdict(decision, breached, expiry_refused=state.expiry_refused)
        return state.health, verdict.to_dict()

    def health(self, table: str) -> Any:
        state = self.table_state(table)
        return state["health"] if state else None

    def catalog_tables(self, namespaces: Sequence[str] | None = None) -> list[str]:
        """``namespace.table`` of every table of the catalog (or of ``namespaces``), governance left out."""
        catalog = self.hook.catalog
        names = list(namespaces) if namespaces else [".".join(ns) for ns in catalog.list_namespaces()]
        out: list[str] = []
        for namespace in names:
            if namespace == self.governance_namespace:
                continue
            out.extend(".".join(ident[-2:]) for ident in catalog.list_tables(namespace))
        return sorted(out)

    def namespace_exists(self, namespace: str) -> bool:
        return bool(self.hook.catalog.namespace_exists(namespace))

    # ------------------------------------------------------ erasure requests
    def requests_tables(self) -> list[str]:
        """Tables shaped like an erasure requests table (:data:`REQUEST_SHAPE`), outside governance."""
        out = []
        for name in self.catalog_tables():
            shaped = self._cached("shape", name, lambda tbl: set(REQUEST_SHAPE) <= set(tbl.schema().column_names))
            if shaped:
                out.append(name)
        return out

    def erasure_requests(self) -> list[dict[str, Any]]:
        """Requests of every requests table: :data:`REQUEST_FIELDS` plus ``requests_table``."""
        rows: list[dict[str, Any]] = []
        for name in self.requests_tables():

            def load(tbl: Any) -> list[dict[str, Any]]:
                have = set(tbl.schema().column_names)
                fields = tuple(f for f in REQUEST_FIELDS if f in have)
                assert "subject_key" not in fields
                return tbl.scan(selected_fields=fields).to_arrow().to_pylist()

            for row in self._cached("requests", name, load, default=[]):
                rows.append({**row, "requests_table": name})
        return rows

    def copy_retention(self, table: str) -> dict[str, Any]:
        """The retention of copies outside ``table`` that the table and the connection declare
        (:meth:`IcebergCatalogHook.copy_retention`, as ``CopyRetention.to_dict()``); ``{"error": ...}``
        when a declaration is malformed; the connection's alone when the table is gone."""
        from airflow_iceberg_provider.exceptions import IcebergValidationError

        try:
            got = self._cached("retention", table, lambda tbl: self.hook.copy_retention(tbl).to_dict())
            return got if got is not None else self.hook.copy_retention().to_dict()
        except IcebergValidationError as err:
            return {"error": str(err)}

    # ------------------------------------------------------------ erasure map
    def subject_column_map(self, namespaces: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """:func:`~airflow_iceberg_provider.rules.erasure.subject_column_map` over the catalog (or
        ``namespaces``): one row per (table, key kind, column) a table declares in its
        ``erasure.subject-columns.<kind>`` properties, with its erasure readiness.

        The facts are those of ``operators.erasure_discovery.catalog_table_facts(with_deletes=False)``
        (schema, partitioning, properties, format version; no manifest read), cached per table
        metadata location. Metadata only: no data file is opened, so no personal value is read.
        """
        from airflow_iceberg_provider.rules.erasure import erasure_table_facts, subject_column_map

        facts = {}
        for name in self.catalog_tables(namespaces):
            table_facts = self._cached("facts", name, lambda tbl: erasure_table_facts(tbl, ()))
            if table_facts is not None:  # dropped between the listing and the read
                facts[name] = table_facts
        return subject_column_map(facts)


class ScopedReader:
    """A :class:`GovernanceReader` as one user sees it: governance rows of DAGs the user may not read
    are left out of every read (the one place the view applies per-DAG permissions).

    Shaped reads (:meth:`derived`) stay cached per metadata location, keyed by the set of hidden DAGs,
    so users with the same permissions share them.

    :param base: the connection's cached reader.
    :param access: the request's :class:`~airflow_iceberg_provider.ui.access.Access`.
    """

    def __init__(self, base: GovernanceReader, access: Access) -> None:
        self.base = base
        self.access = access

    @property
    def conn_id(self) -> str:
        return self.base.conn_id

    @property
    def governance_namespace(self) -> str:
        return self.base.governance_namespace

    def checkpoint_notes(self) -> list[str]:
        """The signed checkpoint notes (they name no DAG: every reader of the connection sees them)."""
        return self.base.checkpoint_notes()

    def status(self) -> dict[str, Any]:
        return self.base.status()

    def _hidden(self, kind: str) -> frozenset[str]:
        """The DAG ids of a governance table's rows this user may not read (the id set cached per commit)."""
        from airflow_iceberg_provider.ui.access import dag_ids

        return self.access.hidden_of(self.base.derived(kind, "dag_ids", dag_ids))

    def governance_rows(self, kind: str) -> list[dict[str, Any]]:
        """The rows of a governance table the user may see (:meth:`GovernanceReader.governance_rows`)."""
        from airflow_iceberg_provider.ui.access import without_dags

        return without_dags(self.base.governance_rows(kind), self._hidden(kind))  # type: ignore[return-value]

    def derived(self, kind: str, name: str, shape: Callable[[list[dict[str, Any]]], Any]) -> Any:
        """``shape`` of the rows the user may see (:meth:`GovernanceReader.derived`)."""
        from airflow_iceberg_provider.ui.access import without_dags

        hidden = self._hidden(kind)
        if not hidden:
            return self.base.derived(kind, name, shape)
        key = f"{name}:hidden={','.join(sorted(hidden))}"
        return self.base.derived(kind, key, lambda rows: shape(without_dags(rows, hidden)))  # type: ignore[arg-type]

    def table_state(self, table: str) -> dict[str, Any] | None:
        return self.base.table_state(table)

    def health(self, table: str) -> Any:
        return self.base.health(table)

    def catalog_tables(self, namespaces: Sequence[str] | None = None) -> list[str]:
        return self.base.catalog_tables(namespaces)

    def namespace_exists(self, namespace: str) -> bool:
        return self.base.namespace_exists(namespace)

    def requests_tables(self) -> list[str]:
        return self.base.requests_tables()

    def copy_retention(self, table: str) -> dict[str, Any]:
        return self.base.copy_retention(table)

    def erasure_requests(self) -> list[dict[str, Any]]:
        return self.base.erasure_requests()

    def subject_column_map(self, namespaces: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return self.base.subject_column_map(namespaces)
