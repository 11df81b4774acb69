"""A real auth manager with per-DAG limits, for the governance-view permission tests.

Airflow 3.3 here ships the SimpleAuthManager, whose roles grant every DAG or none; per-DAG grants need
FAB or Keycloak, which are not installed. This subclass keeps the SimpleAuthManager's users, roles,
login and tokens and adds one thing: users listed in ``AIP_DAG_LIMITS`` (``user=dag_a|dag_b;other=dag_c``)
may read only those DAGs, and not "every DAG". The view asks it exactly what it asks FAB.
"""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

LIMITS_ENV = "AIP_DAG_LIMITS"
CLASS_PATH = "tests.support.dag_limited_auth.DagLimitedAuthManager"


def dag_limits() -> dict[str, set[str]]:
    """``AIP_DAG_LIMITS`` as user -> readable DAG ids."""
    out: dict[str, set[str]] = {}
    for item in filter(None, os.environ.get(LIMITS_ENV, "").split(";")):
        user, _, dags = item.partition("=")
        out[user.strip()] = {d.strip() for d in dags.split("|") if d.strip()}
    return out


class DagLimitedAuthManager(SimpleAuthManager):
    """The SimpleAuthManager, with the users of ``AIP_DAG_LIMITS`` limited to their DAGs."""

    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        allowed = dag_limits().get(user.get_name())
        if allowed is not None:
            if not details or not details.id or details.id not in allowed:
                return False
        return super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
