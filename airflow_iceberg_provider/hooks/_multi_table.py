"""Ref changes of several tables in ONE catalog commit (REST ``POST /v1/{prefix}/transactions/commit``).

pyiceberg 0.12 has no multi-table transaction, but it builds everything the request needs: each
table's ref changes are staged on a pyiceberg ``Transaction`` (its ``manage_snapshots()`` builder
adds one ``assert-ref-snapshot-id`` requirement per ref and checks them against the loaded
metadata), and each table's staged requirements and updates become one of pyiceberg's own
``CommitTableRequest`` models. The request goes through the REST catalog's authenticated session.
A catalog that answers "not supported" (404, 405, 501, or no such route) is reported as such and
the caller falls back to its own protocol.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from airflow_iceberg_provider.exceptions import IcebergCatalogUnavailableError, IcebergCommitConflictError
from airflow_iceberg_provider.hooks._compat import rest_session, staged_changes

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from airflow_iceberg_provider.rules.refs import RefChange

TRANSACTIONS_ENDPOINT = "transactions/commit"


class CatalogAccess(Protocol):
    """The catalog hook as a multi-table commit uses it (the hook imports this module, so it is
    described here, not imported)."""

    @property
    def catalog(self) -> Catalog:
        """The pyiceberg catalog of the connection."""
        ...

    @property
    def catalog_name(self) -> str:
        """The catalog's name, as the connection configures it."""
        ...

    def translate_errors(self, what: str) -> AbstractContextManager[None]:
        """A context that turns pyiceberg errors into provider errors naming ``what``."""
        ...


class MultiTableCommitUnsupported(Exception):
    """The catalog has no multi-table commit (not REST, or the server lacks the endpoint)."""


def supports_multi_table_commit(hook: CatalogAccess) -> bool:
    """Whether the catalog speaks the REST protocol (the endpoint itself is tried on commit)."""
    from pyiceberg.catalog.rest import RestCatalog

    return isinstance(hook.catalog, RestCatalog)


def stage_on(ms: Any, changes: Sequence[RefChange]) -> None:
    """Stage ``changes`` on a pyiceberg ``ManageSnapshots`` builder (a ref set, or removed when its
    snapshot id is ``None``); the builder's commit carries them with their requirements."""
    for c in changes:
        if c.snapshot_id is None and c.ref_type == "tag":
            ms.remove_tag(c.ref)
        elif c.snapshot_id is None:
            ms.remove_branch(c.ref)
        elif c.ref_type == "tag":
            ms.create_tag(c.snapshot_id, c.ref, max_ref_age_ms=c.max_ref_age_ms)
        else:
            ms.create_branch(
                c.snapshot_id,
                c.ref,
                max_ref_age_ms=c.max_ref_age_ms,
                max_snapshot_age_ms=c.max_snapshot_age_ms,
                min_snapshots_to_keep=c.min_snapshots_to_keep,
            )


def stage_ref_changes(tbl: Table, changes: Sequence[RefChange]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(requirements, updates)`` of ``changes`` on ``tbl`` as pyiceberg stages them (nothing committed).

    The ref guard (:func:`~airflow_iceberg_provider.rules.refs.guard_ref_changes`) refuses first.
    """
    from pyiceberg.table.update.snapshot import ManageSnapshots

    from airflow_iceberg_provider.rules.refs import guard_ref_changes

    guard_ref_changes(tbl.metadata.refs, changes, table=".".join(tbl.name()[-2:]))
    tx = tbl.transaction()
    ms = ManageSnapshots(tx)
    stage_on(ms, changes)
    ms.commit()  # stages onto the (non-autocommit) transaction, validating every requirement
    return staged_changes(tx)


def commit_ref_changes_together(hook: CatalogAccess, plans: Mapping[str, tuple[Table, Sequence[RefChange]]]) -> None:
    """Commit every table's ref changes in one REST transaction; all tables change or none.

    :param plans: ``namespace.table`` -> (the loaded table, its ref changes; each asserts where its
        ref was when loaded).
    :raises MultiTableCommitUnsupported: the catalog has no multi-table commit (nothing was sent,
        or the server refused the route: nothing changed).
    :raises IcebergCommitConflictError: a requirement failed (409): nothing changed.
    """
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.table import CommitTableRequest, Namespace, TableIdentifier

    catalog = hook.catalog
    if not isinstance(catalog, RestCatalog):
        raise MultiTableCommitUnsupported(f"catalog {hook.catalog_name!r} is not a REST catalog")
    changes = []
    for name, (tbl, ref_changes) in plans.items():
        with hook.translate_errors(name):
            requirements, updates = stage_ref_changes(tbl, ref_changes)
        ident = tbl.name()
        request = CommitTableRequest(
            identifier=TableIdentifier(namespace=Namespace(root=list(ident[:-1])), name=ident[-1]),
            requirements=requirements,
            updates=updates,
        )
        changes.append(json.loads(request.model_dump_json()))
    url = catalog.url(TRANSACTIONS_ENDPOINT, prefixed=True)
    response = rest_session(catalog).post(url, data=json.dumps({"table-changes": changes}).encode())
    status = response.status_code
    if status in (200, 204):
        return
    text = response.text[:500]
    if status in (404, 405, 501) or (status == 400 and "transactions" in text.lower() and "not" in text.lower()):
        raise MultiTableCommitUnsupported(f"catalog {hook.catalog_name!r} answered {status} to {url}: {text}")
    if status == 409:
        raise IcebergCommitConflictError(
            f"The multi-table commit to {sorted(plans)} lost against a concurrent change ({text}); the catalog "
            "applied none of it. Nothing was changed."
        )
    raise IcebergCatalogUnavailableError(
        f"The multi-table commit to {sorted(plans)} failed with HTTP {status}: {text}. Check each table's main "
        "before retrying (a 5xx may mean the outcome is unknown)."
    )


__all__ = [
    "CatalogAccess",
    "MultiTableCommitUnsupported",
    "commit_ref_changes_together",
    "stage_ref_changes",
    "supports_multi_table_commit",
]
