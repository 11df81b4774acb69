"""Which table format versions delete rows with deletion vectors (shared by the Airflow side and the jobs).

From format version 3 on, a row-level delete is a deletion vector (a Puffin blob per data file);
Iceberg refuses position-delete files there ("Must use DVs for position deletes in V3"). The
Airflow side's format rules (``rules/format_version.py``) and the erasure job's choice of its
logical delete (``spark_jobs/erasure/logical.py``) both ask :func:`has_deletion_vectors`.
"""

from __future__ import annotations

#: The first format version whose row-level deletes are deletion vectors.
DELETION_VECTORS_SINCE = 3


def has_deletion_vectors(version: int) -> bool:
    """Whether row-level deletes on a table of this format version are deletion vectors."""
    return int(version) >= DELETION_VECTORS_SINCE
