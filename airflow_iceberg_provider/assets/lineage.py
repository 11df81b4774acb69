"""OpenLineage datasets for Iceberg tables, named the way the OpenLineage Spark listener names them.

The Spark integration (``openlineage-spark``, ``IcebergHandler``) identifies an Iceberg
table by its **table location** (``FilesystemDatasetUtils.fromLocation``):

==========================================  ==================  ==============================
location                                    namespace           name
==========================================  ==================  ==============================
``file:///lake/wh/sales/orders``            ``file``            ``/lake/wh/sales/orders``
``s3://bucket/wh/sales/orders``             ``s3://bucket``     ``wh/sales/orders``
``gs://b/wh/t``, ``abfss://c@acct/...``     ``scheme://auth``   path without the leading ``/``
==========================================  ==================  ==============================

The provider emits the same primary identity (read from the table's metadata, so it
joins with what Spark jobs emit for the same table whichever engine created it), plus

* a ``symlinks`` facet with the logical name ``<namespace>.<table>`` in the catalog's
  namespace (``iceberg://<catalog>``: the same identity as the Asset URI,
  :mod:`airflow_iceberg_provider.assets.uris`), type ``TABLE``;
* a ``schema`` facet from the catalog (Iceberg types spelled as Spark's type names);
* a ``version`` facet with the current snapshot id (Spark emits the same).

Everything here is pure except :func:`table_dataset`, which reads one table through the
catalog hook. The OpenLineage client is imported lazily (``apache-airflow-providers-openlineage``
is an optional extra).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from airflow_iceberg_provider.core.spark_types import SPARK_TYPE_NAMES

if TYPE_CHECKING:
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook


def location_identity(location: str) -> tuple[str, str]:
    """``(namespace, name)`` of a table location, as OpenLineage's filesystem rules spell it."""
    loc = location.rstrip("/")
    parts = urlsplit(loc)
    scheme = (parts.scheme or "file").lower()
    if scheme == "file" or not parts.netloc:
        path = parts.path if parts.scheme else loc
        return "file", "/" + path.lstrip("/")
    name = parts.path.lstrip("/") or "/"
    return f"{scheme}://{parts.netloc}", name


def spark_type_name(iceberg_type: Any) -> str:
    """Spark's name for an Iceberg type (``long``, ``decimal(10,2)``, ``array<string>`` …)."""
    from pyiceberg.types import DecimalType, FixedType, ListType, MapType, StructType

    if isinstance(iceberg_type, DecimalType):
        return f"decimal({iceberg_type.precision},{iceberg_type.scale})"
    if isinstance(iceberg_type, FixedType):
        return "binary"
    if isinstance(iceberg_type, ListType):
        return f"array<{spark_type_name(iceberg_type.element_type)}>"
    if isinstance(iceberg_type, MapType):
        return f"map<{spark_type_name(iceberg_type.key_type)},{spark_type_name(iceberg_type.value_type)}>"
    if isinstance(iceberg_type, StructType):
        return "struct"
    return SPARK_TYPE_NAMES.get(str(iceberg_type), str(iceberg_type))


def schema_fields(schema: Any) -> list[Any]:
    """OpenLineage schema fields (nested structs included) for a pyiceberg schema."""
    from openlineage.client.facet_v2 import schema_dataset
    from pyiceberg.types import StructType

    def convert(field: Any) -> Any:
        nested = None
        if isinstance(field.field_type, StructType):
            nested = [convert(f) for f in field.field_type.fields]
        return schema_dataset.SchemaDatasetFacetFields(
            name=field.name, type=spark_type_name(field.field_type), description=field.doc, fields=nested
        )

    return [convert(f) for f in schema.fields]


def table_dataset(hook: IcebergCatalogHook, table: str, *, output: bool = False) -> Any:
    """An OpenLineage ``InputDataset`` / ``OutputDataset`` for a table, with facets from the catalog.

    When the table cannot be loaded (dropped, catalog down) the dataset falls back to its
    logical identity (namespace ``iceberg://<catalog>``, name ``<ns>.<table>``) without facets:
    lineage must never fail a task.
    """
    from openlineage.client.event_v2 import InputDataset, OutputDataset
    from openlineage.client.facet_v2 import dataset_version_dataset, schema_dataset, symlinks_dataset

    from airflow_iceberg_provider.params import validate_table

    ident = validate_table(table)
    catalog = hook.catalog_name
    logical_ns, logical_name = f"iceberg://{catalog}", ident.dotted
    cls = OutputDataset if output else InputDataset
    try:
        tbl = hook.load_table(ident)
    except Exception:  # lineage is best effort
        return cls(namespace=logical_ns, name=logical_name)
    namespace, name = location_identity(tbl.location())
    facets: dict[str, Any] = {
        "schema": schema_dataset.SchemaDatasetFacet(fields=schema_fields(tbl.schema())),
        "symlinks": symlinks_dataset.SymlinksDatasetFacet(
            identifiers=[symlinks_dataset.Identifier(namespace=logical_ns, name=logical_name, type="TABLE")]
        ),
    }
    snap = tbl.current_snapshot()
    if snap is not None:
        facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(snap.snapshot_id))
    return cls(namespace=namespace, name=name, facets=facets)
