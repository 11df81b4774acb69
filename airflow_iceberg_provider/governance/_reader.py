"""What the ledger readers (:mod:`.holds`, :mod:`.approvals`) need from a catalog hook, as a Protocol.

:class:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook` satisfies it structurally. The
hook calls those readers (a hold's release reads its approval and the holds the ledger placed), so
the readers describe the hook instead of importing it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from airflow_iceberg_provider.governance.store import GovernanceStore
    from airflow_iceberg_provider.params import TableIdent


class LedgerReaderHook(Protocol):
    """The catalog hook as the ledger readers use it: its governance store and a table-existence check."""

    @property
    def governance(self) -> GovernanceStore:
        """The governance store of the hook's catalog."""
        ...

    def table_exists(self, table: str | TableIdent) -> bool:
        """Whether ``namespace.table`` exists in the catalog."""
        ...


__all__ = ["LedgerReaderHook"]
