"""The governance FastAPI app mounted by the plugin at ``/governance`` in the Airflow API server.

Access goes through Airflow's auth manager on every route (pages and JSON alike): the user comes from
the API server's own ``get_user`` dependency (the UI's ``_token`` cookie or an ``Authorization: Bearer``
JWT). Without a session a page redirects to Airflow's login (and back), a JSON route answers 401; an
invalid token gives 403. The auth manager then decides, per request (:mod:`.access`), which
``iceberg_catalog`` connections the user may read through (``is_authorized_connection``) and whose
DAGs' governance rows they may see (``is_authorized_dag``); :class:`~.reader.ScopedReader` applies the
DAG answers to every read. Two custom-view resources split what a user may see:

* :data:`RESOURCE_NAME` (``Governance``): table health, audits, publishes, maintenance, the timeline
  and the ledger without erasure and approval rows. Every role from viewer up.
* :data:`RESTRICTED_RESOURCE_NAME` (``Governance: erasure and approvals``): erasure requests, evidence
  reports, the erasure map, erasure ledger rows and approval history. With the SimpleAuthManager this
  is the role named by ``[iceberg_provider] governance_restricted_role`` (default ``admin``) and above;
  with other auth managers (FAB, Keycloak) an admin grants read on that resource.

Every route is a ``GET``; nothing writes.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlencode

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from airflow_iceberg_provider import __version__
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.governance.holds import placed_holds_by_table, violations_by_table
from airflow_iceberg_provider.params import validate_name, validate_table
from airflow_iceberg_provider.ui import charts, views
from airflow_iceberg_provider.ui.access import Access
from airflow_iceberg_provider.ui.links import URL_PREFIX, URL_ROUTE
from airflow_iceberg_provider.ui.reader import (
    CatalogUnreadableError,
    GovernanceReader,
    ScopedReader,
    catalog_connections,
    reader_for,
    waiting_gates,
)

log = logging.getLogger(__name__)

#: The custom-view resource of the public pages (FAB: grant "can read on Governance").
RESOURCE_NAME = "Governance"
#: The custom-view resource of erasure requests, evidence reports and approval history.
RESTRICTED_RESOURCE_NAME = "Governance: erasure and approvals"
#: ``[iceberg_provider]`` option: the SimpleAuthManager role (and above) granted the restricted resource.
RESTRICTED_ROLE_OPTION = "governance_restricted_role"
DEFAULT_RESTRICTED_ROLE = "admin"
DEFAULT_CONN_ID = "iceberg_catalog_default"
AUDITS_SHOWN = 20
LEDGER_SHOWN = 200
PUBLISHES_SHOWN = 50
MAINTENANCE_SHOWN = 50
TEMPLATES = Path(__file__).resolve().parent / "templates"


# ------------------------------------------------------------------- access
def restricted_role() -> str:
    """The SimpleAuthManager role granted the restricted resource (``viewer``/``user``/``op``/``admin``)."""
    from airflow_iceberg_provider.config import setting

    return (setting(RESTRICTED_ROLE_OPTION) or DEFAULT_RESTRICTED_ROLE).strip().lower()


def may_see_restricted(user: Any) -> bool:
    """Whether ``user`` may see erasure requests, evidence and approvals (:data:`RESTRICTED_RESOURCE_NAME`)."""
    from airflow.api_fastapi.app import get_auth_manager

    manager = get_auth_manager()
    try:
        from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import (
            SimpleAuthManager,
            SimpleAuthManagerRole,
        )
    except ImportError:  # pragma: no cover - the SimpleAuthManager ships with Airflow 3
        SimpleAuthManager = None  # type: ignore[assignment,misc]  # noqa: N806
    if SimpleAuthManager is not None and isinstance(manager, SimpleAuthManager):
        # the SimpleAuthManager grants every custom view to every viewer: map the resource to a role
        if SimpleAuthManager._is_admin(user):  # admin role, or "all admins" mode
            return True
        roles = {r.name.lower(): r.order for r in SimpleAuthManagerRole}
        needed = roles.get(restricted_role(), roles["admin"])
        have = roles.get(str(getattr(user, "role", "") or "").lower())
        return have is not None and have >= needed
    return bool(manager.is_authorized_custom_view(method="GET", resource_name=RESTRICTED_RESOURCE_NAME, user=user))


def _authorize(request: Request, user: GetUserDep) -> None:
    """Dependency of every route: an authenticated user allowed :data:`RESOURCE_NAME` (else 403)."""
    from airflow.api_fastapi.app import get_auth_manager

    manager = get_auth_manager()
    if not manager.is_authorized_custom_view(method="GET", resource_name=RESOURCE_NAME, user=user):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"Access to the {RESOURCE_NAME} view is not granted to this user."
        )
    request.state.restricted = may_see_restricted(user)
    request.state.access = Access(user, manager, restricted=request.state.restricted)


def _authorize_restricted(request: Request, user: GetUserDep) -> None:
    """Dependency of the erasure and approval routes: the user is allowed the restricted resource (else 403)."""
    if not may_see_restricted(user):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"Access to {RESTRICTED_RESOURCE_NAME} is not granted to this user; an admin grants it "
            f"({RESTRICTED_ROLE_OPTION} with the SimpleAuthManager, the {RESTRICTED_RESOURCE_NAME!r} "
            "custom view with other auth managers).",
        )


Restricted = [Depends(_authorize_restricted)]


# ----------------------------------------------------------------- helpers
def _env():
    from jinja2 import Environment, FileSystemLoader, select_autoescape

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html"]))
    env.filters["dt"] = lambda v: v.strftime("%Y-%m-%d %H:%M UTC") if v else "—"
    env.filters["num"] = views.num
    env.filters["bytes"] = charts._bytes
    env.filters["pct"] = lambda v: f"{v * 100:.0f} %" if v is not None else "—"
    env.filters["ratio"] = lambda v: f"{v:.2f}" if v is not None else "—"
    return env


_ENV = None


def _airflow_root(request: Request) -> str:
    """Path of the Airflow UI root as seen by the browser (the API server's root, without ``/governance``)."""
    base = request.scope.get("root_path", "").rstrip("/")
    return base[: -len(URL_PREFIX)] if base.endswith(URL_PREFIX) else ""


def airflow_links(root: str, dag_id: Any, run_id: Any = None, task_id: Any = None) -> dict[str, str]:
    """Airflow UI URLs of a DAG, its run and its task instance (what the governance rows name)."""
    if not dag_id:
        return {}
    out = {"dag": f"{root}/dags/{quote(str(dag_id), safe='')}"}
    if run_id:
        out["run"] = f"{out['dag']}/runs/{quote(str(run_id), safe='')}"
        if task_id:
            out["task"] = f"{out['run']}/tasks/{quote(str(task_id), safe='')}"
    return out


def _render(request: Request, template: str, started: float, *, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    global _ENV
    if _ENV is None:
        _ENV = _env()
    base = request.scope.get("root_path", "").rstrip("/")
    root = _airflow_root(request)
    html = _ENV.get_template(template).render(
        base=base,
        airflow_root=root,
        in_airflow=f"{root}/plugin/{URL_ROUTE}",
        restricted=getattr(request.state, "restricted", False),
        version=__version__,
        now=datetime.now(UTC),
        qs=lambda **kw: urlencode({k: v for k, v in kw.items() if v not in (None, "")}),
        af=lambda dag_id, run_id=None, task_id=None: airflow_links(root, dag_id, run_id, task_id),
        **ctx,
    )
    ms = (time.perf_counter() - started) * 1000
    return HTMLResponse(
        html, status_code=status_code, headers={"Server-Timing": f"app;dur={ms:.1f}", "Cache-Control": "no-store"}
    )


def _json(data: Any, started: float) -> JSONResponse:
    ms = (time.perf_counter() - started) * 1000
    return JSONResponse(
        jsonable_encoder(data), headers={"Server-Timing": f"app;dur={ms:.1f}", "Cache-Control": "no-store"}
    )


def _access(request: Request) -> Access:
    return request.state.access


def _pick_conn(request: Request, conn: str | None) -> tuple[str, list[str]]:
    """The connection to read through and the ones to offer: only those the user may read.

    A connection the user may not read answers exactly as one that does not exist (its id stays unknown).
    """
    every = catalog_connections()
    available = _access(request).readable_connections(every)
    if conn:
        if conn not in available:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"conn={conn!r} is not an iceberg_catalog connection you may read; choose one of {available} "
                "(an admin grants read on a connection).",
            )
        return conn, available
    if not available:
        if every:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                "You may not read any iceberg_catalog connection, so there is nothing to show; an admin grants "
                "read on the connection (Airflow's connection permission).",
            )
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            "No iceberg_catalog connection is defined; create one (conn_type 'iceberg_catalog').",
        )
    return (DEFAULT_CONN_ID if DEFAULT_CONN_ID in available else available[0]), available


def _reader(request: Request, conn_id: str) -> ScopedReader:
    """The connection's reader as this user sees it (rows of DAGs they may not read left out)."""
    return ScopedReader(reader_for(conn_id), _access(request))


def _table_param(table: str) -> str:
    try:
        return validate_table(table, "table").dotted
    except IcebergValidationError as err:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(err)) from err


def _task(dag_id: str | None = None, run_id: str | None = None, task_id: str | None = None) -> dict[str, str] | None:
    """The ``dag_id`` / ``run_id`` / ``task_id`` query parameters as one filter (``None`` when unset)."""
    task = {k: v for k, v in (("dag_id", dag_id), ("run_id", run_id), ("task_id", task_id)) if v}
    return task or None


TaskFilter = Annotated[dict[str, str] | None, Depends(_task)]


def _table_filters(
    task: TaskFilter,
    operation: str | None = None,
    status_filter: str | None = Query(None, alias="status"),
) -> dict[str, Any]:
    """The table page's ledger filters, shared by the HTML page and its JSON twin."""
    return {"operation": operation, "status_filter": status_filter, "task": task}


TableFilters = Annotated[dict[str, Any], Depends(_table_filters)]


def _health_view(state: dict[str, Any] | None) -> dict[str, Any] | None:
    """A table's health figures and the maintenance planner's verdict (``GovernanceReader.table_state``)."""
    if state is None or state["health"] is None:
        return None
    d = state["health"].to_dict()
    d["snapshot_id"] = views.sid(d.get("snapshot_id"))
    d["verdict"] = state["verdict"]
    return d


# ------------------------------------------------------------------- data
def _ledger(reader: ScopedReader, restricted: bool) -> list[dict[str, Any]]:
    rows = reader.derived("ledger", "views", views.ledger_views)
    return (
        rows if restricted else reader.derived("ledger", "public", lambda r: views.public_ledger(views.ledger_views(r)))
    )


def _hold_violations(reader: ScopedReader, table: str, refs: Any) -> list[dict[str, Any]]:
    """Legal holds the ledger records as placed that the table no longer has as placed."""
    placed = reader.derived("ledger", "placed_holds", placed_holds_by_table)
    return [{**v.to_dict(), "message": v.describe(table)} for v in violations_by_table(placed, table, refs)]


def _audits(reader: ScopedReader) -> list[dict[str, Any]]:
    return reader.derived("audit_results", "runs", views.audit_runs)


def _requests(reader: ScopedReader) -> list[dict[str, Any]]:
    evidence = reader.governance_rows("erasure_evidence")
    return views.erasure_requests(reader.erasure_requests(), evidence, now=datetime.now(UTC))


def tables_data(reader: ScopedReader, *, restricted: bool = False) -> dict[str, Any]:
    catalog = reader.status()
    if catalog["state"] == "unreadable":
        return {"catalog": catalog, "tables": [], "open_requests_without_evidence": 0}
    ledger = _ledger(reader, restricted)
    audits = _audits(reader)
    evidence = reader.governance_rows("erasure_evidence")
    open_by_table, unassigned = views.open_requests_by_table(_requests(reader)) if restricted else ({}, 0)
    latest = views.latest_audits(audits)
    rows = []
    for table in views.governed_tables(ledger, audits, evidence if restricted else [], reader.governance_namespace):
        state = reader.table_state(table)
        pubs = views.publishes(ledger, table)
        audit = latest.get(table)
        row: dict[str, Any] = {
            "table": table,
            "health": _health_view(state),
            "last_publish": pubs[0] if pubs else None,
            "last_audit": {k: audit[k] for k in ("passed", "failed", "evaluated_at", "snapshot_id", "ref")}
            if audit
            else None,
        }
        if restricted:
            row["open_requests"] = open_by_table.get(table, 0)
        rows.append(row)
    out: dict[str, Any] = {"catalog": catalog, "tables": rows}
    if restricted:
        out["open_requests_without_evidence"] = unassigned
    return out


def table_data(
    reader: ScopedReader,
    table: str,
    *,
    operation: str | None = None,
    status_filter: str | None = None,
    task: dict[str, str] | None = None,
    at: str | None = None,
    restricted: bool = False,
) -> dict[str, Any]:
    ledger = _ledger(reader, restricted)
    state = reader.table_state(table)
    all_audits = _audits(reader)
    audits = views.filter_runs(all_audits, table=table, task=task)
    gating = None
    if task:
        published = views.publish_row_of_task(ledger, table, task)
        if published and not at:
            at = published["snapshot_after"]
        if published and not audits:  # the publish task's link: show the audit that gated this publish
            gating = views.gating_audit(all_audits, published)
            audits = [gating] if gating else []
    pubs, runs = views.publishes(ledger, table), views.maintenance_runs(ledger, table)
    task_runs = views.filter_task(runs, task) if task else []
    if task_runs:  # a maintenance task's link: that task's runs (the chart shows its job)
        runs = task_runs
    verdicts = views.audit_verdicts(all_audits)
    out: dict[str, Any] = {
        "table": table,
        "exists": state is not None,
        "health": _health_view(state),
        "timeline": views.timeline(state["snapshots"], state["refs"]) if state else {"snapshots": [], "refs": []},
        "hold_violations": _hold_violations(reader, table, state["refs"]) if state else [],
        "at": at,
        "audits": audits if task else audits[:AUDITS_SHOWN],
        "audits_total": len(audits),
        "gating_audit": bool(gating),
        "publishes": pubs[:PUBLISHES_SHOWN],
        "publishes_total": len(pubs),
        "maintenance": runs[:MAINTENANCE_SHOWN],
        "maintenance_of_task": bool(task_runs),
        "maintenance_total": len(runs),
        "ledger": views.with_verdicts(
            views.ledger_rows(ledger, table=table, operation=operation, status=status_filter, limit=LEDGER_SHOWN),
            verdicts,
            views.stamped_snapshots(state["snapshots"]) if state else {},
        ),
        "ledger_options": views.ledger_options(ledger, table),
        "filters": {"operation": operation, "status": status_filter, **(task or {})},
    }
    if restricted:
        requests = _requests(reader)
        evidence = reader.governance_rows("erasure_evidence")
        out["erasure"] = views.table_erasure(table, requests, evidence)
        out["approvals"] = views.approvals(ledger, table)
    return out


def erasure_data(reader: ScopedReader, task: dict[str, str] | None = None, table: str | None = None) -> dict[str, Any]:
    evidence = reader.governance_rows("erasure_evidence")
    requests = views.erasure_requests(reader.erasure_requests(), evidence, now=datetime.now(UTC))
    out: dict[str, Any] = {
        "open": sum(r["open"] for r in requests),
        "overdue": sum(r["overdue"] for r in requests),
        "late": sum(r["late"] for r in requests),
        "requests_tables": reader.requests_tables(),
        "task": task,
        "task_table": table,
    }
    if task:
        done = views.task_erasure(evidence, _ledger(reader, True), task, table)
        keep = set(done["request_ids"])
        requests = [r for r in requests if r["request_id"] in keep]
        out["refusals"] = done["refusals"]
        out["task_runs"] = done["runs"]
    out["requests"] = requests
    return out


def _namespaces_param(reader: ScopedReader, namespaces: list[str] | None) -> list[str] | None:
    """The ``namespace`` query parameters, checked (400 for a bad name, 404 for one the catalog lacks)."""
    if not namespaces:
        return None
    try:
        names = [validate_name(n, "namespace") for n in namespaces]
    except IcebergValidationError as err:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(err)) from err
    missing = [n for n in names if not reader.namespace_exists(n)]
    if missing:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            f"namespace(s) {missing} do not exist in this catalog; leave namespace unset to map every namespace.",
        )
    return names


def erasure_map_data(reader: ScopedReader, namespaces: list[str] | None = None) -> dict[str, Any]:
    """Tables declaring subject columns (``erasure.subject-columns.<kind>``), their columns per key kind,
    erasure readiness and open requests, and the tables holding erasure evidence that declare none;
    names only, never a subject value."""
    names = _namespaces_param(reader, namespaces)
    open_by_table, unassigned = views.open_requests_by_table(_requests(reader))
    shaped = views.erasure_map(reader.subject_column_map(names), open_by_table)
    undeclared = views.undeclared_evidence_tables(
        reader.governance_rows("erasure_evidence"),
        [t["table"] for t in shaped["tables"]],
        reader.catalog_tables(names) if names else None,
    )
    return {**shaped, "undeclared": undeclared, "namespaces": names, "open_requests_without_evidence": unassigned}


def report_data(reader: ScopedReader, request_id: str) -> dict[str, Any]:
    evidence = reader.governance_rows("erasure_evidence")
    tables = {e["table_name"] for e in evidence if e.get("request_id") == request_id and e.get("table_name")}
    report = views.evidence_report(
        request_id,
        reader.erasure_requests(),
        evidence,
        _ledger(reader, True),
        retentions={t: reader.copy_retention(t) for t in sorted(tables)},
    )
    if report is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"No erasure request or evidence with id {request_id!r}.")
    return {**report, "proofs": _evidence_proofs(reader, request_id)}


def _evidence_proofs(reader: ScopedReader | GovernanceReader, request_id: str) -> list[dict[str, Any]]:
    """The offline proof of each evidence row of the request (``verify --evidence``); rows no
    checkpoint covers yet have none."""
    from airflow_iceberg_provider.core.ledger_verify import row_proof

    name = f"{reader.governance_namespace}.erasure_evidence"
    rows = [e for e in reader.governance_rows("erasure_evidence") if e.get("request_id") == request_id]
    if not rows:
        return []
    # a seal's proof needs the whole ledger, not the rows this user may read: the proof names no row of it
    whole = reader.base if isinstance(reader, ScopedReader) else reader
    ledger, notes = whole.governance_rows("ledger"), reader.checkpoint_notes()
    proofs = [row_proof(name, e, rows, notes, ledger_rows=ledger) for e in rows]
    return [p for p in proofs if p is not None]


def approvals_data(reader: ScopedReader) -> dict[str, Any]:
    """The decisions in the ledger, and the gates of the connection still waiting for one (of DAGs the
    user may read)."""
    waiting = [w for w in waiting_gates(reader.conn_id) if reader.access.may_read_dag(w["dag_id"])]
    return {"approvals": views.approvals(_ledger(reader, True)), "waiting": waiting}


def _restricted(request: Request) -> bool:
    return bool(getattr(request.state, "restricted", False))


# -------------------------------------------------------------------- app
router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def tables_page(request: Request, conn: str | None = None) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(request, conn)
    data = tables_data(_reader(request, conn_id), restricted=_restricted(request))
    return _render(request, "tables.html", started, conn=conn_id, conns=conns, page="tables", **data)


@router.get("/tables/{table}", response_class=HTMLResponse)
def table_page(
    request: Request,
    table: str,
    filters: TableFilters,
    conn: str | None = None,
    at: str | None = None,
) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(request, conn)
    data = table_data(_reader(request, conn_id), _table_param(table), at=at, restricted=_restricted(request), **filters)
    svg = {
        "timeline": charts.timeline_svg(data["timeline"], highlight=data["at"]),
        "health": charts.health_svg(data["maintenance"]),
    }
    return _render(request, "table.html", started, conn=conn_id, conns=conns, page="table", svg=svg, **data)


@router.get("/erasure", response_class=HTMLResponse, dependencies=Restricted)
def erasure_page(request: Request, task: TaskFilter, conn: str | None = None, table: str | None = None) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(request, conn)
    data = erasure_data(_reader(request, conn_id), task, _table_param(table) if table else None)
    return _render(request, "erasure.html", started, conn=conn_id, conns=conns, page="erasure", **data)


NamespacesParam = Annotated[list[str] | None, Query(alias="namespace")]


@router.get("/erasure-map", response_class=HTMLResponse, dependencies=Restricted)
def erasure_map_page(request: Request, namespaces: NamespacesParam = None, conn: str | None = None) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(request, conn)
    data = erasure_map_data(_reader(request, conn_id), namespaces)
    return _render(request, "erasure_map.html", started, conn=conn_id, conns=conns, page="erasure-map", **data)


@router.get("/erasure/{request_id}/report", response_class=HTMLResponse, dependencies=Restricted)
def report_page(request: Request, request_id: str, conn: str | None = None) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(request, conn)
    report = report_data(_reader(request, conn_id), request_id)
    return _render(request, "report.html", started, conn=conn_id, conns=conns, page="report", r=report)


@router.get("/approvals", response_class=HTMLResponse, dependencies=Restricted)
def approvals_page(request: Request, conn: str | None = None) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(request, conn)
    data = approvals_data(_reader(request, conn_id))
    return _render(request, "approvals.html", started, conn=conn_id, conns=conns, page="approvals", **data)


@router.get("/link/erasure", dependencies=Restricted)
def erasure_link(
    request: Request,
    task: TaskFilter,
    conn: str | None = None,
    table: str | None = None,
) -> RedirectResponse:
    """The erasure task's extra link: the requests that task processed (and its refusals), filtered."""
    conn_id, _ = _pick_conn(request, conn)
    base = request.scope.get("root_path", "").rstrip("/")
    params = {"conn": conn_id, "table": table, **(task or {})}
    return RedirectResponse(
        f"{base}/erasure?{urlencode({k: v for k, v in params.items() if v})}#requests", status_code=307
    )


# ---------------------------------------------------------------- JSON
@router.get("/api/connections")
def api_connections(request: Request) -> JSONResponse:
    started = time.perf_counter()
    return _json({"connections": _access(request).readable_connections(catalog_connections())}, started)


@router.get("/api/tables")
def api_tables(request: Request, conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(request, conn)
    return _json({"conn": conn_id, **tables_data(_reader(request, conn_id), restricted=_restricted(request))}, started)


@router.get("/api/tables/{table}")
def api_table(request: Request, table: str, filters: TableFilters, conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(request, conn)
    data = table_data(_reader(request, conn_id), _table_param(table), restricted=_restricted(request), **filters)
    return _json({"conn": conn_id, **data}, started)


@router.get("/api/erasure", dependencies=Restricted)
def api_erasure(request: Request, task: TaskFilter, conn: str | None = None, table: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(request, conn)
    data = erasure_data(_reader(request, conn_id), task, _table_param(table) if table else None)
    return _json({"conn": conn_id, **data}, started)


@router.get("/api/erasure-map", dependencies=Restricted)
def api_erasure_map(request: Request, namespaces: NamespacesParam = None, conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(request, conn)
    return _json({"conn": conn_id, **erasure_map_data(_reader(request, conn_id), namespaces)}, started)


@router.get("/api/erasure/{request_id}", dependencies=Restricted)
def api_report(request: Request, request_id: str, conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(request, conn)
    return _json({"conn": conn_id, **report_data(_reader(request, conn_id), request_id)}, started)


@router.get("/api/approvals", dependencies=Restricted)
def api_approvals(request: Request, conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(request, conn)
    return _json({"conn": conn_id, **approvals_data(_reader(request, conn_id))}, started)


# --------------------------------------------------------------- errors
def _is_page(request: Request) -> bool:
    return request.method == "GET" and not request.url.path.startswith(f"{request.scope.get('root_path', '')}/api/")


async def _http_error(request: Request, exc: Exception) -> Response:
    """A logged-out page view goes to Airflow's login (and back); other errors keep their status."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == status.HTTP_401_UNAUTHORIZED and _is_page(request):
        from airflow.api_fastapi.app import get_auth_manager

        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(get_auth_manager().get_url_login(next_url=target), status_code=303)
    if exc.status_code == status.HTTP_403_FORBIDDEN and _is_page(request):
        return _render(request, "denied.html", time.perf_counter(), status_code=403, message=str(exc.detail), conns=[])
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def _catalog_error(request: Request, exc: Exception) -> Response:
    """The catalog cannot be read: say so (503) instead of an empty page."""
    message = str(exc)
    if not _is_page(request):
        return JSONResponse({"detail": f"The catalog cannot be read: {message}"}, status_code=503)
    return _render(
        request, "unreadable.html", time.perf_counter(), status_code=503, message=message, conns=[], conn=None
    )


def create_app() -> FastAPI:
    """The governance app (every route behind :func:`_authorize`)."""
    app = FastAPI(
        title="Governed Apache Iceberg",
        dependencies=[Depends(_authorize)],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.include_router(router)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(CatalogUnreadableError, _catalog_error)
    global _ENV
    _ENV = _ENV or _env()  # compile the templates now, not on the first page view
    for name in (
        "tables.html",
        "table.html",
        "erasure.html",
        "erasure_map.html",
        "report.html",
        "approvals.html",
        "denied.html",
    ):
        _ENV.get_template(name)
    return app
