"""Operator extra links from a task instance to its governance pages.

Airflow 3 evaluates ``get_link`` on the worker when the task finishes (success *or* failure) and
stores the URL in XCom; the UI shows it on the task instance page. The URL carries the connection,
the table and the task's identity (dag, run, task), which the governance tables record on every
row, so the page finds *this* task's audit, publish or evidence without any XCom read.
Snapshot ids never appear in these URLs as numbers a browser could round: the page resolves them.

The URLs open the page *inside* Airflow's navigation: ``/plugin/iceberg-governance/governance/...``
is the Governance entry's frame with the page deep-linked, so the user keeps Airflow's menu.
"""

from __future__ import annotations

from typing import Any, ClassVar
from urllib.parse import quote, urlencode

from airflow.sdk import BaseOperatorLink

#: Where the plugin mounts the governance app in the API server.
URL_PREFIX = "/governance"
#: The Governance nav entry's route in the Airflow UI (``/plugin/<route>`` frames the app).
URL_ROUTE = "iceberg-governance"


def governance_url(path: str, *, framed: bool = True, **params: Any) -> str:
    """``[api] base_url`` (if set) + the page URL: framed in Airflow's navigation unless ``framed=False``.

    Framed: ``/plugin/iceberg-governance/governance<path>?...``; bare: ``/governance<path>?...``.
    """
    from airflow_iceberg_provider.config import airflow_setting

    base = airflow_setting("api", "base_url").rstrip("/")
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    frame = f"/plugin/{URL_ROUTE}" if framed else ""
    return f"{base}{frame}{URL_PREFIX}{path}{'?' + query if query else ''}"


class _GovernanceLink(BaseOperatorLink):
    """Common part: the task identity and the operator's connection and table."""

    path: ClassVar[str] = "/tables/{table}"
    fragment: ClassVar[str] = ""

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        table = str(getattr(operator, "table", "") or "")
        params: dict[str, Any] = {
            "conn": getattr(operator, "iceberg_catalog_conn_id", None),
            "dag_id": ti_key.dag_id,
            "run_id": ti_key.run_id,
            "task_id": ti_key.task_id,
        }
        path = self.path.format(table=quote(table, safe="."))
        if "{table}" not in self.path:
            params["table"] = table
        return governance_url(path, **params) + self.fragment


class GovernanceAuditLink(_GovernanceLink):
    """WAP audit task → its audit results (each check's observed value against its threshold)."""

    name = "Governance: audit results"
    fragment = "#audits"


class GovernancePublishLink(_GovernanceLink):
    """WAP publish task → the table's snapshot timeline, the published snapshot highlighted, and the
    audit that gated the publish (the audit of the published snapshot)."""

    name = "Governance: table timeline"
    fragment = "#timeline"


class GovernanceEvidenceLink(_GovernanceLink):
    """Erasure task → the requests it processed (each with its evidence report), or its refusal."""

    name = "Governance: erasure evidence"
    path = "/link/erasure"


class GovernanceHealthLink(_GovernanceLink):
    """Maintenance task → the table's health before/after chart, showing the runs of this task."""

    name = "Governance: table health"
    fragment = "#maintenance"
