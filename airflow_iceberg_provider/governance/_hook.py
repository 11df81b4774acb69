"""What the governance stores need from a catalog hook, as a :class:`~typing.Protocol`.

:class:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook` satisfies it structurally, so
the stores depend on this description and not on the hook module (which builds a store in its
``governance`` property): the hook imports the store, the store imports only this.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from airflow_iceberg_provider.params import TableIdent

T = TypeVar("T")


class GovernanceHook(Protocol):
    """The catalog hook as the governance stores use it: its catalog, table loading, error
    translation and commit retries, and the namespace of the governance tables."""

    @property
    def catalog(self) -> Catalog:
        """The pyiceberg catalog of the connection."""
        ...

    @property
    def governance_namespace(self) -> str:
        """The namespace that holds the governance tables."""
        ...

    @property
    def catalog_name(self) -> str:
        """The catalog's name (the same on the Spark side and in pyiceberg)."""
        ...

    @property
    def signing_conn_id(self) -> str:
        """The Airflow connection that holds the ledger's checkpoint signing key."""
        ...

    def get_connection(self, conn_id: str) -> Any:
        """An Airflow connection by id (raises when it does not exist)."""
        ...

    def translate_errors(self, what: str) -> AbstractContextManager[None]:
        """A context that turns pyiceberg errors into provider errors naming ``what``."""
        ...

    def load_table(self, table: str | TableIdent) -> Table:
        """The table ``namespace.table``, loaded."""
        ...

    def _table(self, table: str | TableIdent | Table) -> Table:
        """``table`` loaded if it is a name, else as given."""
        ...

    def ensure_namespace(self, namespace: str) -> None:
        """Create ``namespace`` if it does not exist."""
        ...

    def ensure_table_properties(self, table: str | TableIdent | Table, properties: Mapping[str, str]) -> bool:
        """Set the table properties that differ; whether a commit was made."""
        ...

    def retry_commit(self, fn: Callable[[], T], *, what: str, attempts: int = 5) -> T:
        """Run ``fn`` (which reloads what it commits to), retrying commit conflicts."""
        ...


__all__ = ["GovernanceHook"]
