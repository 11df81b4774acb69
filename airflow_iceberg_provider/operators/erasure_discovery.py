"""Discovery of the tables a catalog-wide erasure covers: every table declaring subject columns.

Tables declare which columns hold which kind of subject key in a table property,
``erasure.subject-columns.<kind>=<column>[,<column>...]`` (set with
:func:`~airflow_iceberg_provider.rules.erasure.erasure_ready_properties` ``(columns, kind=...)`` at creation or through
:class:`IcebergAlterTableOperator`). The discovery reads table metadata through the catalog
(pyiceberg, no JVM) and returns one set of :class:`IcebergErasureOperator` arguments per table,
for dynamically mapped erasure tasks::

    tables = IcebergErasureDiscoveryOperator(task_id="discover", subject_kind="customer_id")
    IcebergErasureOperator.partial(
        task_id="erase", requests_table="privacy.requests", phase="logical"
    ).expand_kwargs(tables.output)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.params import validate_name
from airflow_iceberg_provider.rules.erasure import (
    discover_subject_tables,
    erasure_mapping,
    erasure_table_facts,
    subject_column_map,
    validate_subject_kind,
)

if TYPE_CHECKING:
    from airflow.sdk import Context


def catalog_table_facts(
    hook: IcebergCatalogHook, namespaces: Sequence[str] | None = None, *, with_deletes: bool = True
) -> dict[str, dict[str, Any]]:
    """``namespace.table`` -> erasure facts (schema, partitioning, properties, format version,
    equality-delete files) of every table of the catalog, or of ``namespaces``, read from metadata.

    The governance namespace is left out (its tables hold hashes, never subject keys).
    ``with_deletes=False`` skips reading manifests (``equality_delete_files`` is then 0), for views
    that only need the declarations.
    """
    catalog = hook.catalog
    governance = hook.governance_namespace
    names = list(namespaces) if namespaces else [".".join(ns) for ns in catalog.list_namespaces()]
    out: dict[str, dict[str, Any]] = {}
    for ns in names:
        if ns == governance:
            continue
        for ident in catalog.list_tables(ns):
            dotted = ".".join(ident[-2:])
            tbl = hook.load_table(dotted)
            deletes = hook.data_files(tbl, all_snapshots=True, deletes_only=True) if with_deletes else []
            out[dotted] = erasure_table_facts(tbl, deletes)
    return out


def catalog_subject_column_map(
    hook: IcebergCatalogHook, namespaces: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """:func:`~airflow_iceberg_provider.rules.erasure.subject_column_map` over the catalog (tables x declared subject columns)."""
    return subject_column_map(catalog_table_facts(hook, namespaces, with_deletes=False))


class IcebergErasureDiscoveryOperator(BaseOperator):
    """
    List every table of the catalog (or of ``namespaces``) that declares subject columns of
    ``subject_kind``, and return one set of erasure arguments per table.

    Each returned item is ``{"table", "subject_columns", "tables_in_scope"}``, where
    ``tables_in_scope`` is the whole list: with ``IcebergErasureOperator.partial(...).expand_kwargs``
    each mapped task erases one table, and a request becomes ``erased`` only when every declared
    table is verified. Refused (nothing to erase is never a silent success): no table declares the
    kind, a declaration is malformed, or a declared table cannot be erased (missing column,
    identity partitioning on a subject column, equality deletes...); the message names the table
    and the fix. Metadata only: no JVM, no commit.

    :param subject_kind: the key kind, as in ``erasure.subject-columns.<kind>`` (templated).
    :param namespaces: namespaces to search (templated); default every namespace but governance.
    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection id (templated).
    :param governance_namespace: namespace of the governance tables (default from the connection).
    :return: a list of erasure arguments, one per table (table names and column names only).
    """

    template_fields: Sequence[str] = ("subject_kind", "namespaces", "iceberg_catalog_conn_id")
    ui_color = "#f6d5d5"

    def __init__(
        self,
        *,
        subject_kind: str,
        namespaces: Sequence[str] | None = None,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        governance_namespace: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.subject_kind = subject_kind
        self.namespaces = namespaces
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.governance_namespace = governance_namespace

    def _namespaces(self) -> list[str] | None:
        if self.namespaces in (None, "", []):
            return None
        value = [self.namespaces] if isinstance(self.namespaces, str) else self.namespaces
        if not isinstance(value, (list, tuple)):
            raise IcebergValidationError(
                f"namespaces={self.namespaces!r} is invalid; pass a list of namespace names, e.g. ['sales', 'crm']."
            )
        return [validate_name(n, f"namespaces[{i}]") for i, n in enumerate(value)]

    def execute(self, context: Context) -> list[dict[str, Any]]:
        kind = validate_subject_kind(self.subject_kind)
        namespaces = self._namespaces()
        hook = IcebergCatalogHook(self.iceberg_catalog_conn_id, governance_namespace=self.governance_namespace)
        if namespaces:
            missing = [ns for ns in namespaces if not hook.catalog.namespace_exists(ns)]
            if missing:
                raise IcebergValidationError(
                    f"namespaces {missing} do not exist in catalog {hook.catalog_name!r}; fix namespaces= "
                    "(or leave it unset to search every namespace)."
                )
        discovered = discover_subject_tables(catalog_table_facts(hook, namespaces), kind)
        mapping = erasure_mapping(discovered, kind)
        self.log.info(
            "Erasure of subject kind %s covers %d table(s): %s",
            kind,
            len(mapping),
            ", ".join(f"{m['table']} ({', '.join(m['subject_columns'])})" for m in mapping),
        )
        return mapping
