"""Governance tables: the provider's audit trail, kept in the lake itself.

Three Iceberg tables live in one namespace (``governance`` by default):

``ledger``
    One row per provider operation (Spark job or metadata operation): what ran,
    for which Airflow task try, on which table and ref, snapshot before/after,
    status and metrics. A Spark job that commits nothing to the target table
    still writes its ledger row, so the Airflow side always has a result to read.
``audit_results``
    One row per audit check evaluated on a WAP branch.
``erasure_evidence``
    One row per erasure request per table (salted subject hash only).

The schemas are defined here once. The Airflow side creates the tables with
pyiceberg before a job is submitted; Spark jobs append rows using the table's
own schema, so the column list is never duplicated in job code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_GOVERNANCE_NAMESPACE = "governance"

#: Legal-hold convention: a *tag* whose name starts with this prefix is a hold.
#: Holds pin their snapshot (and its files) until released; maintenance reports
#: the snapshots they keep and erasure reports them as blocking refs.
LEGAL_HOLD_PREFIX = "legal-hold-"

#: The ``max-ref-age-ms`` every legal hold carries: Java's ``Long.MAX_VALUE``, i.e. never.
#: Iceberg applies the table default ``history.expire.max-ref-age-ms`` to every ref
#: *without* its own ``max-ref-age-ms``; a hold therefore always gets an explicit one, so
#: no table property can make ``expire_snapshots`` drop it (``now - ts > 2^63-1`` never holds).
LEGAL_HOLD_MAX_REF_AGE_MS = 2**63 - 1


def is_legal_hold(ref_name: str, ref_type: str = "tag") -> bool:
    """Whether a ref is a legal hold under the provider's naming convention."""
    return ref_type == "tag" and ref_name.startswith(LEGAL_HOLD_PREFIX)


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # one of: string, long, int, double, boolean, timestamptz
    required: bool = False
    doc: str = ""


@dataclass(frozen=True)
class GovernanceTable:
    name: str
    columns: Sequence[Column]
    doc: str


_AIRFLOW_COLUMNS = (
    Column("dag_id", "string"),
    Column("run_id", "string"),
    Column("task_id", "string"),
    Column("try_number", "int"),
)

LEDGER = GovernanceTable(
    name="ledger",
    doc="One row per provider operation.",
    columns=(
        Column("event_id", "string", required=True, doc="unique id of this operation (job run id)"),
        Column("operation", "string", required=True),
        Column("table_name", "string", doc="namespace.table the operation acted on"),
        Column("ref", "string"),
        *_AIRFLOW_COLUMNS,
        Column("started_at", "timestamptz"),
        Column("finished_at", "timestamptz"),
        Column("status", "string", doc="succeeded | failed | noop | refused | dry_run"),
        Column("snapshot_before", "long"),
        Column("snapshot_after", "long"),
        Column("metrics", "string", doc="JSON object"),
        Column("details", "string", doc="JSON object"),
        Column("provider_version", "string"),
    ),
)

AUDIT_RESULTS = GovernanceTable(
    name="audit_results",
    doc="One row per audit check evaluated on a branch.",
    columns=(
        Column("event_id", "string", required=True),
        Column("table_name", "string"),
        Column("ref", "string"),
        Column("snapshot_id", "long"),
        Column("base_snapshot_id", "long"),
        *_AIRFLOW_COLUMNS,
        Column("check_name", "string"),
        Column("check_type", "string"),
        Column("column_name", "string"),
        Column("observed_value", "double"),
        Column("condition", "string"),
        Column("passed", "boolean"),
        Column("evaluated_at", "timestamptz"),
    ),
)

ERASURE_EVIDENCE = GovernanceTable(
    name="erasure_evidence",
    doc="One row per erasure request per table; subjects appear only as salted hashes.",
    columns=(
        Column("evidence_id", "string", required=True),
        Column("request_id", "string"),
        Column("table_name", "string"),
        Column("subject_hash", "string", doc="HMAC-SHA256(salt, subject key), hex"),
        Column("rows_deleted", "long"),
        Column("snapshot_before", "long"),
        Column("snapshot_after", "long"),
        Column("files_rewritten", "long"),
        Column("files_removed", "long"),
        Column("snapshots_expired", "long"),
        Column("refs_dropped", "string", doc="JSON list"),
        Column("refs_blocking", "string", doc="JSON list"),
        Column("verification", "string", doc="verified | incomplete | failed"),
        Column("verified_rows_remaining", "long"),
        Column("started_at", "timestamptz"),
        Column("finished_at", "timestamptz"),
        *_AIRFLOW_COLUMNS,
        Column("provider_version", "string"),
        Column("iceberg_version", "string"),
        # added by the erasure operator (#6); table-level figures repeat on each request row
        Column("rows_held", "long", doc="subject rows still in files pinned by blocking refs (ref_policy=keep)"),
        Column("subject_columns", "string", doc="JSON list of the columns matched"),
        Column("ref_policy", "string", doc="fail | drop | keep"),
        Column("time_travel_floor_before", "timestamptz", doc="oldest snapshot before the erasure"),
        Column("time_travel_floor_after", "timestamptz", doc="oldest snapshot after expiry"),
        Column("job_run_id", "string", doc="ledger event_id of the latest run for this request and table"),
        Column("last_verified_at", "timestamptz"),
        Column("runs", "int", doc="how many erasure runs covered this request on this table"),
    ),
)

GOVERNANCE_TABLES = {t.name: t for t in (LEDGER, AUDIT_RESULTS, ERASURE_EVIDENCE)}

#: The time column readers filter on (``read_governance_rows(..., since=, until=)``).
TIME_COLUMNS = {"ledger": "finished_at", "audit_results": "evaluated_at", "erasure_evidence": "finished_at"}

#: Properties every governance table gets (set at creation; added where missing on first use).
#: They get one small commit per task, hundreds a day: keep the metadata log bounded, merge
#: manifests as they accumulate, and let the maintenance plan expire day-old snapshots (an
#: append-only table loses no row when its old snapshots expire) and compact toward 64 MiB files.
GOVERNANCE_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "16",
    "write.target-file-size-bytes": str(64 * 1024 * 1024),
    "history.expire.max-snapshot-age-ms": str(24 * 3600 * 1000),
    "history.expire.min-snapshots-to-keep": "5",
    "airflow-iceberg.maintenance.min-input-files": "20",
}


def pyiceberg_schema(table: GovernanceTable):  # -> pyiceberg.schema.Schema
    """Build the pyiceberg schema for a governance table."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    types = {
        "string": StringType(),
        "long": LongType(),
        "int": IntegerType(),
        "double": DoubleType(),
        "boolean": BooleanType(),
        "timestamptz": TimestamptzType(),
    }
    fields = [
        NestedField(field_id=i, name=c.name, field_type=types[c.type], required=c.required, doc=c.doc or None)
        for i, c in enumerate(table.columns, start=1)
    ]
    return Schema(*fields)


def arrow_schema(table: GovernanceTable):  # -> pyarrow.Schema
    """Arrow schema matching :func:`pyiceberg_schema` (for pyiceberg appends)."""
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "long": pa.int64(),
        "int": pa.int32(),
        "double": pa.float64(),
        "boolean": pa.bool_(),
        "timestamptz": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([pa.field(c.name, types[c.type], nullable=not c.required) for c in table.columns])
