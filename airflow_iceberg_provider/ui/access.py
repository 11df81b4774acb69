"""What one user may see in the governance view, as Airflow's auth manager answers it.

The view asks the configured auth manager (SimpleAuthManager, FAB, Keycloak or any other) the same
questions Airflow's own UI asks:

* ``is_authorized_connection(GET, conn_id)``: the user may read the ``iceberg_catalog`` connection
  the view reads through. Connections the user may not read are left out of the connection list,
  and ``?conn=`` naming one answers as if it did not exist.
* ``is_authorized_dag(GET, TASK_INSTANCE, dag_id)``: the user may read what the DAG's tasks did.
  Every governance row carries the ``dag_id`` of the task that wrote it; rows of DAGs the user may
  not read are hidden. Rows written outside Airflow (no ``dag_id``) are shown only to users who may
  read every DAG.

Each answer is asked once per request. The rules that apply the answers to rows are pure
(:func:`hidden_dag_ids`, :func:`without_dags`) so they are tested without Airflow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: The marker of rows written outside Airflow (no ``dag_id``) in a set of hidden DAG ids.
NO_DAG = ""


def _dag_key(row: Mapping[str, Any]) -> str:
    return str(row.get("dag_id") or NO_DAG)


def dag_ids(rows: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The ``dag_id`` values of ``rows`` (:data:`NO_DAG` for rows without one)."""
    return frozenset(_dag_key(r) for r in rows)


def hidden_dag_ids(rows: Iterable[Mapping[str, Any]], may_read_dag: Callable[[str], bool]) -> frozenset[str]:
    """The ``dag_id`` values among ``rows`` the user may not read (:data:`NO_DAG` for rows without one).

    :param rows: governance rows (raw or shaped: both carry ``dag_id``).
    :param may_read_dag: the auth manager's answer for one DAG id (:data:`NO_DAG`: every DAG).
    """
    return frozenset(d for d in dag_ids(rows) if not may_read_dag(d))


def without_dags(rows: Iterable[Mapping[str, Any]], hidden: frozenset[str]) -> list[Mapping[str, Any]]:
    """``rows`` without those of the ``hidden`` DAG ids (:func:`hidden_dag_ids`)."""
    rows = list(rows)
    return rows if not hidden else [r for r in rows if _dag_key(r) not in hidden]


class Access:
    """One request's user and the auth manager's answers about them (each question asked once).

    :param user: the authenticated user (``GetUserDep``).
    :param manager: the auth manager (``get_auth_manager()``).
    :param restricted: whether the user holds the view's erasure-and-approvals permission.
    """

    def __init__(self, user: Any, manager: Any, *, restricted: bool) -> None:
        self.user = user
        self.manager = manager
        self.restricted = restricted
        self._dags: dict[str, bool] = {}
        self._conns: dict[str, bool] = {}

    def may_read_dag(self, dag_id: str) -> bool:
        """Whether the user may read what ``dag_id``'s tasks did (:data:`NO_DAG`: every DAG)."""
        if dag_id not in self._dags:
            from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

            details = DagDetails(id=dag_id) if dag_id != NO_DAG else None
            self._dags[dag_id] = bool(
                self.manager.is_authorized_dag(
                    method="GET", access_entity=DagAccessEntity.TASK_INSTANCE, details=details, user=self.user
                )
            )
        return self._dags[dag_id]

    def may_read_connection(self, conn_id: str, team_name: str | None = None) -> bool:
        """Whether the user may read the connection ``conn_id``."""
        if conn_id not in self._conns:
            from airflow.api_fastapi.auth.managers.models.resource_details import ConnectionDetails

            self._conns[conn_id] = bool(
                self.manager.is_authorized_connection(
                    method="GET", details=ConnectionDetails(conn_id=conn_id, team_name=team_name), user=self.user
                )
            )
        return self._conns[conn_id]

    def readable_connections(self, conns: Mapping[str, str | None]) -> list[str]:
        """The ids of ``conns`` (id -> team name) the user may read, sorted."""
        return sorted(c for c, team in conns.items() if self.may_read_connection(c, team))

    def hidden(self, rows: Iterable[Mapping[str, Any]]) -> frozenset[str]:
        """The DAG ids among ``rows`` whose rows this user may not see."""
        return hidden_dag_ids(rows, self.may_read_dag)

    def hidden_of(self, ids: Iterable[str]) -> frozenset[str]:
        """The DAG ids among ``ids`` (:func:`dag_ids`) this user may not read."""
        return frozenset(d for d in ids if not self.may_read_dag(d))
