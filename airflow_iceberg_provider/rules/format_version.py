"""Iceberg table format versions: which engine may commit to a table, and what each version allows.

Format version 3 brings deletion vectors: a merge-on-read DELETE on a v3 table writes one Puffin
blob per data file (``content`` 1, ``file_format`` ``PUFFIN`` in the ``delete_files`` metadata
table) instead of position-delete Parquet files. Spark with the Iceberg runtime reads and writes them;
pyiceberg 0.12 reads v3 tables (refs, snapshots, files, scans with deletion vectors applied) but
cannot write v3 table metadata. Who writes the metadata depends on the catalog:

* a REST catalog writes it server-side: pyiceberg sends the updates, so ref moves and property
  changes work on v3 as on v2 (but pyiceberg writes no v3 manifests, so nothing that commits
  data files: :data:`WRITES_MANIFESTS`);
* the other catalogs (``sql``, ``glue``, ``hive``) have the client write the metadata file, which
  pyiceberg refuses for v3: ref moves of write-audit-publish go through a Spark job instead, and
  every other metadata commit is refused with the way to make it (:func:`commit_problem`).

Pure: no catalog, no Spark, no Airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from airflow_iceberg_provider.core.deletion_vectors import has_deletion_vectors
from airflow_iceberg_provider.exceptions import IcebergValidationError

#: The format versions the provider works with.
FORMAT_VERSIONS = (1, 2, 3)
#: The format version of tables the provider creates when none is asked for.
DEFAULT_FORMAT_VERSION = 2
#: The newest format version pyiceberg 0.12 writes table metadata for.
PYICEBERG_WRITES_UP_TO = 2
#: Catalog types whose server writes the table metadata (the client sends updates only).
SERVER_WRITES_METADATA = frozenset({"rest"})

#: The kind of change (``what`` of :func:`commit_problem`) that writes manifests, which pyiceberg 0.12
#: cannot do for a format-version 3 table whatever the catalog.
WRITES_MANIFESTS = "files"

#: Where a metadata commit goes: pyiceberg through the catalog, or a Spark job.
CommitRoute = Literal["catalog", "spark"]


def format_version(value: Any, param: str = "properties['format-version']") -> int:
    """A format version given as text or int (``"2"``, ``3``); refused unless 1, 2 or 3."""
    text = str(value).strip()
    if text not in {str(v) for v in FORMAT_VERSIONS}:
        raise IcebergValidationError(
            f"{param}={value!r} is not an Iceberg format version; give one of "
            f"{', '.join(repr(str(v)) for v in FORMAT_VERSIONS)}."
        )
    return int(text)


def requested_format_version(properties: Mapping[str, Any]) -> int:
    """The ``format-version`` table property of a create request (default :data:`DEFAULT_FORMAT_VERSION`)."""
    if "format-version" not in properties:
        return DEFAULT_FORMAT_VERSION
    return format_version(properties["format-version"])


def pyiceberg_commits(version: int, catalog_type: str, what: str = "ref") -> bool:
    """Whether pyiceberg can commit a change of kind ``what`` to a table of ``version`` in this catalog."""
    if int(version) <= PYICEBERG_WRITES_UP_TO:
        return True
    return what != WRITES_MANIFESTS and catalog_type.lower() in SERVER_WRITES_METADATA


def ref_change_route(version: int, catalog_type: str) -> CommitRoute:
    """Where write-audit-publish's ref moves (branch, reset, publish, tag, drop) are committed:
    through the catalog (pyiceberg, one compare-and-swap commit) when it can, else a Spark job."""
    return "catalog" if pyiceberg_commits(version, catalog_type) else "spark"


def _spark_fix(what: str) -> str:
    """The way around pyiceberg for one kind of change, in Spark SQL."""
    fixes = {
        "ref": "make the ref change in Spark SQL (ALTER TABLE ... CREATE TAG / REPLACE BRANCH / DROP TAG)",
        "properties": "set them in Spark SQL (ALTER TABLE ... SET TBLPROPERTIES (...))",
        "expiry": "expire with IcebergExpireSnapshotsOperator or IcebergMaintenanceOperator (Spark)",
        "schema": "evolve the table in Spark SQL (ALTER TABLE ...)",
        "files": "make the change with Spark (for a WAP re-run, declare replace_where: the write job then "
        "replaces by predicate)",
    }
    return fixes.get(what, fixes["files"])


def commit_problem(table: str, version: int, catalog_type: str, *, change: str, what: str = "files") -> str | None:
    """Why pyiceberg cannot make ``change`` on this table (``None``: it can).

    :param change: the change in words (``"tag 'release-1'"``, ``"table properties"``).
    :param what: the kind of change (``ref``, ``properties``, ``expiry``, ``schema``, ``files``),
        which picks the way to make it instead.
    """
    if pyiceberg_commits(version, catalog_type, what):
        return None
    if what == WRITES_MANIFESTS:
        return (
            f"table={table!r} is format-version {version}: the {change} writes manifests, which pyiceberg 0.12 "
            f"cannot do for format-version 3 (whatever the catalog). Fix: {_spark_fix(what)}. Nothing was changed."
        )
    return (
        f"table={table!r} is format-version {version} and its {catalog_type!r} catalog has the client write "
        f"the table metadata, which pyiceberg 0.12 cannot do for format-version 3, so the {change} cannot be "
        f"committed here. Fix: {_spark_fix(what)}, or keep the table behind a REST catalog (its server writes "
        "v3 metadata). Nothing was changed."
    )


def create_problem(table: str, version: int, catalog_type: str) -> str | None:
    """Why the provider cannot create ``table`` at ``version`` through this catalog (``None``: it can)."""
    if pyiceberg_commits(version, catalog_type):
        return None
    return (
        f"properties['format-version']='{version}': table={table!r} cannot be created at format-version "
        f"{version} through the {catalog_type!r} catalog, whose client writes the table metadata (pyiceberg "
        "0.12 writes format-version 2 at most). Fix: create it in Spark SQL (CREATE TABLE ... USING iceberg "
        f"TBLPROPERTIES ('format-version'='{version}')), upgrade a format-version 2 table with ALTER TABLE ... "
        f"SET TBLPROPERTIES ('format-version'='{version}'), or use a REST catalog. Nothing was created."
    )


def position_delete_rewrite_skip(version: int) -> str | None:
    """Why ``rewrite_position_delete_files`` has nothing to do on a table (``None``: it may have)."""
    if version < 2:
        return "format-version 1 tables have no delete files"
    if has_deletion_vectors(version):
        return (
            "format-version 3 tables delete with deletion vectors (one per data file), which "
            "rewrite_position_delete_files leaves alone; rewrite_data_files removes them"
        )
    return None
