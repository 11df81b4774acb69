"""The governance FastAPI app mounted by the plugin at ``/governance`` in the Airflow API server.

Access goes through Airflow's auth manager on every route (pages and JSON alike): the user comes from
the API server's own ``get_user`` dependency (the UI's ``_token`` cookie or an ``Authorization: Bearer``
JWT) — none gives 401, an invalid token 403 — and must be allowed the custom view
:data:`RESOURCE_NAME` (``is_authorized_custom_view``, method ``GET``), else 403. Every route is a
``GET``; nothing writes.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from airflow.api_fastapi.core_api.security import GetUserDep
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from airflow_iceberg_provider import __version__
from airflow_iceberg_provider._validation import validate_table
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.ui import charts, views
from airflow_iceberg_provider.ui.reader import GovernanceReader, catalog_connections, reader_for

log = logging.getLogger(__name__)

#: The custom-view resource the auth manager is asked about (FAB: grant "can read on Governance").
RESOURCE_NAME = "Governance"
DEFAULT_CONN_ID = "iceberg_catalog_default"
AUDITS_SHOWN = 20
LEDGER_SHOWN = 200
PUBLISHES_SHOWN = 50
MAINTENANCE_SHOWN = 50
TEMPLATES = Path(__file__).resolve().parent / "templates"


def _authorize(user: GetUserDep) -> None:
    """Dependency: an authenticated user (401/403 from ``get_user``) allowed the Governance view (else 403)."""
    from airflow.api_fastapi.app import get_auth_manager

    if not get_auth_manager().is_authorized_custom_view(method="GET", resource_name=RESOURCE_NAME, user=user):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN, f"Access to the {RESOURCE_NAME} view is not granted to this user."
        )


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


def _render(request: Request, template: str, started: float, **ctx: Any) -> HTMLResponse:
    global _ENV
    if _ENV is None:
        _ENV = _env()
    base = request.scope.get("root_path", "").rstrip("/")
    html = _ENV.get_template(template).render(
        base=base,
        version=__version__,
        now=datetime.now(UTC),
        qs=lambda **kw: urlencode({k: v for k, v in kw.items() if v not in (None, "")}),
        **ctx,
    )
    ms = (time.perf_counter() - started) * 1000
    return HTMLResponse(html, headers={"Server-Timing": f"app;dur={ms:.1f}", "Cache-Control": "no-store"})


def _json(data: Any, started: float) -> JSONResponse:
    ms = (time.perf_counter() - started) * 1000
    return JSONResponse(
        jsonable_encoder(data), headers={"Server-Timing": f"app;dur={ms:.1f}", "Cache-Control": "no-store"}
    )


def _pick_conn(conn: str | None) -> tuple[str, list[str]]:
    available = catalog_connections()
    if conn:
        if conn not in available:
            raise HTTPException(
                status.HTTP_404_NOT_FOUND,
                f"conn={conn!r} is not an iceberg_catalog connection; choose one of {available}.",
            )
        return conn, available
    if not available:
        raise HTTPException(
            status.HTTP_404_NOT_FOUND,
            "No iceberg_catalog connection is defined; create one (conn_type 'iceberg_catalog').",
        )
    return (DEFAULT_CONN_ID if DEFAULT_CONN_ID in available else available[0]), available


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


def _health_view(h: Any) -> dict[str, Any] | None:
    if h is None:
        return None
    d = h.to_dict()
    d["snapshot_id"] = views.sid(d.get("snapshot_id"))
    return d


# ------------------------------------------------------------------- data
def _ledger(reader: GovernanceReader) -> list[dict[str, Any]]:
    return reader.derived("ledger", "views", views.ledger_views)


def _audits(reader: GovernanceReader) -> list[dict[str, Any]]:
    return reader.derived("audit_results", "runs", views.audit_runs)


def tables_data(reader: GovernanceReader) -> dict[str, Any]:
    ledger = _ledger(reader)
    audits = _audits(reader)
    evidence = reader.governance_rows("erasure_evidence")
    requests = views.erasure_requests(reader.erasure_requests(), evidence, now=datetime.now(UTC))
    open_by_table, unassigned = views.open_requests_by_table(requests)
    latest = views.latest_audits(audits)
    rows = []
    for table in views.governed_tables(ledger, audits, evidence, reader.governance_namespace):
        pubs = views.publishes(ledger, table)
        audit = latest.get(table)
        rows.append(
            {
                "table": table,
                "health": _health_view(reader.health(table)),
                "last_publish": pubs[0] if pubs else None,
                "last_audit": {k: audit[k] for k in ("passed", "failed", "evaluated_at", "snapshot_id", "ref")}
                if audit
                else None,
                "open_requests": open_by_table.get(table, 0),
            }
        )
    return {"tables": rows, "open_requests_without_evidence": unassigned}


def table_data(
    reader: GovernanceReader,
    table: str,
    *,
    operation: str | None = None,
    status_filter: str | None = None,
    task: dict[str, str] | None = None,
    at: str | None = None,
) -> dict[str, Any]:
    ledger = _ledger(reader)
    state = reader.table_state(table)
    audits = views.filter_runs(_audits(reader), table=table, task=task)
    if task and not at:
        at = views.publish_of_task(ledger, table, task)
    pubs, runs = views.publishes(ledger, table), views.maintenance_runs(ledger, table)
    return {
        "table": table,
        "exists": state is not None,
        "health": _health_view(state["health"]) if state else None,
        "timeline": views.timeline(state["snapshots"], state["refs"]) if state else {"snapshots": [], "refs": []},
        "at": at,
        "audits": audits if task else audits[:AUDITS_SHOWN],
        "audits_total": len(audits),
        "publishes": pubs[:PUBLISHES_SHOWN],
        "publishes_total": len(pubs),
        "maintenance": runs[:MAINTENANCE_SHOWN],
        "maintenance_total": len(runs),
        "ledger": views.ledger_rows(ledger, table=table, operation=operation, status=status_filter, limit=LEDGER_SHOWN),
        "ledger_options": views.ledger_options(ledger, table),
        "filters": {"operation": operation, "status": status_filter, **(task or {})},
    }


def erasure_data(reader: GovernanceReader) -> dict[str, Any]:
    evidence = reader.governance_rows("erasure_evidence")
    requests = views.erasure_requests(reader.erasure_requests(), evidence, now=datetime.now(UTC))
    return {
        "requests": requests,
        "open": sum(r["open"] for r in requests),
        "overdue": sum(r["overdue"] for r in requests),
        "requests_tables": reader.requests_tables(),
    }


def report_data(reader: GovernanceReader, request_id: str) -> dict[str, Any]:
    report = views.evidence_report(request_id, reader.erasure_requests(), reader.governance_rows("erasure_evidence"))
    if report is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"No erasure request or evidence with id {request_id!r}.")
    return report


# -------------------------------------------------------------------- app
router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def tables_page(request: Request, conn: str | None = None) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(conn)
    data = tables_data(reader_for(conn_id))
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
    conn_id, conns = _pick_conn(conn)
    data = table_data(reader_for(conn_id), _table_param(table), at=at, **filters)
    svg = {
        "timeline": charts.timeline_svg(data["timeline"], highlight=data["at"]),
        "health": charts.health_svg(data["maintenance"]),
    }
    return _render(request, "table.html", started, conn=conn_id, conns=conns, page="table", svg=svg, **data)


@router.get("/erasure", response_class=HTMLResponse)
def erasure_page(request: Request, conn: str | None = None) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(conn)
    data = erasure_data(reader_for(conn_id))
    return _render(request, "erasure.html", started, conn=conn_id, conns=conns, page="erasure", **data)


@router.get("/erasure/{request_id}/report", response_class=HTMLResponse)
def report_page(request: Request, request_id: str, conn: str | None = None) -> HTMLResponse:
    started = time.perf_counter()
    conn_id, conns = _pick_conn(conn)
    report = report_data(reader_for(conn_id), request_id)
    return _render(request, "report.html", started, conn=conn_id, conns=conns, page="report", r=report)


@router.get("/link/erasure")
def erasure_link(
    request: Request,
    task: TaskFilter,
    conn: str | None = None,
    table: str | None = None,
) -> RedirectResponse:
    """The erasure task's extra link: its evidence report (or the erasure page when it covered several)."""
    conn_id, _ = _pick_conn(conn)
    reader = reader_for(conn_id)
    name = _table_param(table) if table else None
    ids = views.requests_of_task(reader.governance_rows("erasure_evidence"), task or {}, name)
    base = request.scope.get("root_path", "").rstrip("/")
    if len(ids) == 1:
        return RedirectResponse(f"{base}/erasure/{ids[0]}/report?{urlencode({'conn': conn_id})}", status_code=307)
    return RedirectResponse(f"{base}/erasure?{urlencode({'conn': conn_id})}", status_code=307)


# ---------------------------------------------------------------- JSON
@router.get("/api/connections")
def api_connections() -> JSONResponse:
    started = time.perf_counter()
    return _json({"connections": catalog_connections()}, started)


@router.get("/api/tables")
def api_tables(conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(conn)
    return _json({"conn": conn_id, **tables_data(reader_for(conn_id))}, started)


@router.get("/api/tables/{table}")
def api_table(table: str, filters: TableFilters, conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(conn)
    data = table_data(reader_for(conn_id), _table_param(table), **filters)
    return _json({"conn": conn_id, **data}, started)


@router.get("/api/erasure")
def api_erasure(conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(conn)
    return _json({"conn": conn_id, **erasure_data(reader_for(conn_id))}, started)


@router.get("/api/erasure/{request_id}")
def api_report(request_id: str, conn: str | None = None) -> JSONResponse:
    started = time.perf_counter()
    conn_id, _ = _pick_conn(conn)
    return _json({"conn": conn_id, **report_data(reader_for(conn_id), request_id)}, started)


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
    global _ENV
    _ENV = _ENV or _env()  # compile the templates now, not on the first page view
    for name in ("tables.html", "table.html", "erasure.html", "report.html"):
        _ENV.get_template(name)
    return app
