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

:class:`LedgerEntry` is the one typed value of a ledger row: the catalog hook, the
maintenance operator and the Spark job runtime build it, readers decode rows with
:meth:`LedgerEntry.from_row`. This module imports only the standard library at module
level (pyiceberg and pyarrow inside the schema builders), so the Spark job runtime can
import it without Airflow or pyiceberg.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.schema import Schema

DEFAULT_GOVERNANCE_NAMESPACE = "governance"

#: The Airflow connection holding the Ed25519 key that signs the ledger's checkpoints
#: (``login``: key name, ``password``: private key); see ``docs/trust-model.md``.
LEDGER_SIGNING_CONN_ID = "iceberg_ledger_signing"

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

#: The chain every governance table carries (``core.ledger_chain``): position, previous
#: row's hash and this row's hash. Last in the schema, so tables created before the chain
#: gain them by schema evolution; ``None`` in rows written before the chain started.
_CHAIN_COLUMNS = (
    Column("chain_seq", "long", doc="position of the row in its table's chain, from 0"),
    Column("prev_hash", "string", doc="entry_hash of the previous row of the chain (hex)"),
    Column("entry_hash", "string", doc="SHA-256(prev_hash || canonical row), hex"),
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
        *_CHAIN_COLUMNS,
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
        Column("check_hash", "string", doc="SHA-256 of the check's canonical JSON (core.audit_checks.check_hash)"),
        Column("spec_hash", "string", doc="SHA-256 of the check spec the audit ran (core.audit_checks.spec_hash)"),
        *_CHAIN_COLUMNS,
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
        # written by the erasure operator; table-level figures repeat on each request row
        Column("rows_held", "long", doc="subject rows still in files pinned by blocking refs (ref_policy=keep)"),
        Column("subject_columns", "string", doc="JSON list of the columns matched"),
        Column("ref_policy", "string", doc="fail | drop | keep"),
        Column("time_travel_floor_before", "timestamptz", doc="oldest snapshot before the erasure"),
        Column("time_travel_floor_after", "timestamptz", doc="oldest snapshot after expiry"),
        Column("job_run_id", "string", doc="ledger event_id of the latest run for this request and table"),
        Column("last_verified_at", "timestamptz"),
        Column("runs", "int", doc="how many erasure runs covered this request on this table"),
        # the erasure lifecycle (logical -> purge) and the pruning of the physical phases
        Column("phase", "string", doc="logical | purge | full: the furthest phase done"),
        Column("rows_found", "long", doc="subject rows the run found (0: the key matched nothing)"),
        Column("logical_erased_at", "timestamptz"),
        Column("purged_at", "timestamptz"),
        Column("files_considered", "long"),
        Column("files_pruned_bounds", "long"),
        Column("files_pruned_bloom", "long"),
        Column("files_pruned_dictionary", "long"),
        Column("files_raw_read", "long"),
        Column("snapshots_kept", "long"),
        Column("leftovers_removed", "long"),
        # the requests-table redaction
        Column("subject_redacted_at", "timestamptz"),
        Column("redaction_verification", "string"),
        *_CHAIN_COLUMNS,
    ),
)

GOVERNANCE_TABLES = {t.name: t for t in (LEDGER, AUDIT_RESULTS, ERASURE_EVIDENCE)}

#: The signed checkpoints of the governance chains: append-only, never chained itself
#: (each row is a signed statement), never compacted away by governance maintenance.
CHECKPOINTS = GovernanceTable(
    name="ledger_checkpoints",
    doc="One row per checkpoint of one governance table's chain (a C2SP tlog-checkpoint note).",
    columns=(
        Column("table_name", "string", required=True, doc="the governance table (namespace.table)"),
        Column("tree_size", "long", required=True, doc="rows of the chain the checkpoint covers"),
        Column("root_hash", "string", doc="RFC 9162 Merkle tree hash over the entry hashes, hex"),
        Column("checkpoint", "string", doc="the checkpoint note text (signed when a key is configured)"),
        Column("key_name", "string", doc="signing key name; None when unsigned"),
        Column("created_at", "timestamptz"),
        *_AIRFLOW_COLUMNS,
    ),
)


def is_governance_table(table: str, governance_namespace: str) -> bool:
    """Whether ``namespace.table`` is one of the governance tables (or their checkpoints) of the namespace."""
    namespace, _, name = table.rpartition(".")
    return namespace == governance_namespace and (name in GOVERNANCE_TABLES or name == CHECKPOINTS.name)


#: The time column readers filter on (``GovernanceStore.read(..., since=, until=)``).
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


def pyiceberg_schema(table: GovernanceTable) -> Schema:
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


def arrow_schema(table: GovernanceTable) -> pa.Schema:
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


# ------------------------------------------------------------------------- ledger entry
#: What a ledger row's ``status`` may say.
LEDGER_STATUSES = ("succeeded", "failed", "noop", "refused", "dry_run", "warned", "prepared", "rolled_back")
_AIRFLOW_KEYS = ("dag_id", "run_id", "task_id", "try_number")
_OPERATION = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}\Z")


def airflow_identity(context: Mapping[str, Any] | None) -> dict[str, Any]:
    """dag/run/task/try of the running task instance, for ledgers and summaries."""
    if not context:
        return dict.fromkeys(_AIRFLOW_KEYS)
    ti = context.get("ti") or context.get("task_instance")
    return {
        "dag_id": getattr(ti, "dag_id", None),
        "run_id": getattr(ti, "run_id", None) or context.get("run_id"),
        "task_id": getattr(ti, "task_id", None),
        "try_number": getattr(ti, "try_number", None),
    }


def _json_object(value: Any, name: str) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as err:
            raise ValueError(f"ledger {name} {value[:80]!r} is not JSON; it must be a JSON object.") from err
    if not isinstance(value, Mapping):
        raise ValueError(f"ledger {name} must be a mapping (a JSON object), got {type(value).__name__}.")
    return dict(value)


def _optional_long(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).lstrip("-").isdigit():
        raise ValueError(f"ledger {name}={value!r} is not a snapshot id; pass an integer (or its decimal string).")
    return int(value)


def _instant(value: Any, name: str) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    raise ValueError(f"ledger {name}={value!r} is not a datetime; pass a datetime or an ISO-8601 string.")


@dataclass(frozen=True)
class LedgerEntry:
    """One row of the governance ledger, as a typed value.

    ``metrics`` and ``details`` are mappings here and JSON objects in the table
    (:meth:`to_row` encodes, :meth:`from_row` decodes). Construction refuses an
    unknown status, an empty event id or operation, non-integer snapshot ids and
    non-mapping metrics/details, naming the field and the fix.
    """

    event_id: str
    operation: str
    status: str
    table_name: str | None = None
    ref: str | None = None
    dag_id: str | None = None
    run_id: str | None = None
    task_id: str | None = None
    try_number: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    snapshot_before: int | None = None
    snapshot_after: int | None = None
    metrics: Mapping[str, Any] = field(default_factory=dict)
    details: Mapping[str, Any] = field(default_factory=dict)
    provider_version: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.event_id, str) or not self.event_id:
            raise ValueError(f"ledger event_id={self.event_id!r} must be a non-empty string (e.g. uuid4().hex).")
        if not isinstance(self.operation, str) or not _OPERATION.match(self.operation):
            raise ValueError(
                f"ledger operation={self.operation!r} must be a name such as 'create_tag' or "
                "'maintenance.expire_snapshots' (letters, digits, '_', '.', '-')."
            )
        if self.status not in LEDGER_STATUSES:
            raise ValueError(f"ledger status={self.status!r} is not one of {', '.join(LEDGER_STATUSES)}.")
        if self.try_number is not None and (isinstance(self.try_number, bool) or not isinstance(self.try_number, int)):
            raise ValueError(f"ledger try_number={self.try_number!r} must be an integer or None.")
        set_ = object.__setattr__
        for name in ("snapshot_before", "snapshot_after"):
            set_(self, name, _optional_long(getattr(self, name), name))
        for name in ("started_at", "finished_at"):
            set_(self, name, _instant(getattr(self, name), name))
        for name in ("metrics", "details"):
            set_(self, name, _json_object(getattr(self, name), name))

    @classmethod
    def new(
        cls,
        *,
        operation: str,
        status: str,
        context: Mapping[str, Any] | None = None,
        airflow: Mapping[str, Any] | None = None,
        event_id: str | None = None,
        started_at: datetime | None = None,
        finished_at: datetime | None = None,
        **values: Any,
    ) -> LedgerEntry:
        """An entry for an operation that ends now: a fresh event id unless given, the Airflow
        identity from ``context`` (or an ``airflow`` mapping of dag_id/run_id/task_id/try_number),
        ``started_at`` defaulting to ``finished_at`` (now)."""
        now = finished_at or datetime.now(UTC)
        identity = (
            {k: (airflow or {}).get(k) for k in _AIRFLOW_KEYS} if airflow is not None else airflow_identity(context)
        )
        return cls(
            event_id=event_id or uuid.uuid4().hex,
            operation=operation,
            status=status,
            started_at=started_at or now,
            finished_at=now,
            **identity,
            **values,
        )

    def to_row(self) -> dict[str, Any]:
        """The ledger table row (``metrics``/``details`` as JSON text, sorted keys)."""
        row = {f.name: getattr(self, f.name) for f in fields(self)}
        row["metrics"] = json.dumps(dict(self.metrics), default=str, sort_keys=True)
        row["details"] = json.dumps(dict(self.details), default=str, sort_keys=True)
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> LedgerEntry:
        """Decode a row read from the ledger table (extra columns are ignored)."""
        values: dict[str, Any] = {f.name: row.get(f.name) for f in fields(cls) if f.name in row}
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict with ``metrics``/``details`` decoded (what readers used to build by hand)."""
        return asdict(self)


def decode_ledger_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A ledger row with its JSON ``metrics``/``details`` decoded; other columns kept as they are."""
    return {
        **row,
        "metrics": _json_object(row.get("metrics"), "metrics"),
        "details": _json_object(row.get("details"), "details"),
    }
