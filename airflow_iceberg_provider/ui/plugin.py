"""The Airflow plugin: mounts the governance app at ``/governance`` and adds a "Governance" nav entry.

Registered through the ``airflow.plugins`` entry point of this distribution (``pyproject.toml``), so
``airflow plugins`` lists it as soon as the provider is installed. (The provider-info ``plugins``
list is only read when ``[core] lazy_discover_providers = False``; registering both would load the
plugin twice, so only the entry point is used.)

The FastAPI app is built on the first request (:class:`LazyApp`): processes that merely load
plugins (scheduler, workers, CLI) never import the API server's security module or Jinja templates.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_iceberg_provider.ui.links import (
    URL_PREFIX,
    URL_ROUTE,
    GovernanceAuditLink,
    GovernanceEvidenceLink,
    GovernanceHealthLink,
    GovernancePublishLink,
)


class LazyApp:
    """ASGI app that builds :func:`airflow_iceberg_provider.ui.app.create_app` on first use."""

    def __init__(self) -> None:
        self._app: Any = None

    def _get(self) -> Any:
        if self._app is None:
            from airflow_iceberg_provider.ui.app import create_app

            self._app = create_app()
        return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self._get()(scope, receive, send)

    def __repr__(self) -> str:
        return "airflow_iceberg_provider.ui.app:create_app"


class IcebergGovernancePlugin(AirflowPlugin):
    """Governance view of the governed Apache Iceberg provider (read-only)."""

    name = "iceberg_governance"
    fastapi_apps = [{"app": LazyApp(), "url_prefix": URL_PREFIX, "name": "Iceberg governance"}]
    external_views = [
        {
            "name": "Governance",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "url_route": URL_ROUTE,
        }
    ]
    operator_extra_links = [
        GovernanceAuditLink(),
        GovernancePublishLink(),
        GovernanceEvidenceLink(),
        GovernanceHealthLink(),
    ]
