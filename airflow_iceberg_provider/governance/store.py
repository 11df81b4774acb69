"""``GovernanceStore``: reads and writes of the provider's governance tables through the catalog hook.

:mod:`airflow_iceberg_provider.core.governance` says what the tables are (names, schemas,
properties, the :class:`~airflow_iceberg_provider.core.governance.LedgerEntry` row type);
this module creates them when first used, appends rows (retrying commit conflicts)
and reads them back with the filter pushed into the scan. It also owns the erasure
*requests* table (creation, status reads) and the ledger side of legal holds.

It talks to the lake only through :class:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook`
(``catalog``, ``load_table``, ``translate_errors``, ``retry_commit``), so it inherits the
hook's connection and error translation; it holds no rules beyond row shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import __version__
from airflow_iceberg_provider.core.governance import (
    GOVERNANCE_TABLE_PROPERTIES,
    GOVERNANCE_TABLES,
    LEGAL_HOLD_MAX_REF_AGE_MS,
    TIME_COLUMNS,
    GovernanceTable,
    LedgerEntry,
    arrow_schema,
    is_legal_hold,
    pyiceberg_schema,
)
from airflow_iceberg_provider.params import TableIdent, validate_table

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_iceberg_provider.governance._hook import GovernanceHook


class GovernanceStore:
    """The governance tables of one catalog connection (namespace from the hook).

    :param hook: the catalog hook whose connection, error translation and commit
        retries are used.
    """

    def __init__(self, hook: GovernanceHook) -> None:
        self.hook = hook
        self._ready: dict[str, bool] = {}

    @property
    def namespace(self) -> str:
        return self.hook.governance_namespace

    # ------------------------------------------------------------- tables
    def table(self, kind: str | GovernanceTable) -> str:
        """Create the governance table if missing; return its ``namespace.table`` name."""
        hook = self.hook
        spec = GOVERNANCE_TABLES[kind] if isinstance(kind, str) else kind
        name = f"{self.namespace}.{spec.name}"
        if self._ready.get(name):
            return name
        hook.ensure_namespace(self.namespace)
        with hook.translate_errors(name):
            # Load first: a reader on a read-only catalog must never attempt the create.
            tbl = (
                hook.catalog.load_table(name)
                if hook.catalog.table_exists(name)
                else hook.catalog.create_table_if_not_exists(
                    name, schema=pyiceberg_schema(spec), properties=GOVERNANCE_TABLE_PROPERTIES
                )
            )
        props = tbl.metadata.properties
        missing = {k: v for k, v in GOVERNANCE_TABLE_PROPERTIES.items() if k not in props and k != "format-version"}
        if missing:  # a table created by an earlier version: add what it lacks, keep what a user set
            hook.retry_commit(lambda: hook.ensure_table_properties(name, missing), what=name)
        if {c.name for c in spec.columns} - set(tbl.schema().column_names):  # columns added by a later version
            hook.retry_commit(lambda: self._add_columns(name, spec), what=name)
        self._ready[name] = True
        return name

    def _add_columns(self, name: str, spec: GovernanceTable) -> None:
        """Add the columns of ``spec`` that the table lacks (optional columns; existing rows read NULL)."""
        with self.hook.translate_errors(name):
            tbl = self.hook.load_table(name)
            with tbl.update_schema() as update:
                update.union_by_name(pyiceberg_schema(spec))

    def append(self, kind: str, rows: list[dict[str, Any]]) -> None:
        """Append rows to a governance table (retrying commit conflicts with a refresh)."""
        import pyarrow as pa

        spec = GOVERNANCE_TABLES[kind]
        name = self.table(spec)
        schema = arrow_schema(spec)
        data = pa.Table.from_pylist([{c.name: r.get(c.name) for c in spec.columns} for r in rows], schema)
        self.hook.retry_commit(lambda: self.hook.load_table(name).append(data), what=name)

    def read(
        self,
        kind: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        **equals: Any,
    ) -> list[dict[str, Any]]:
        """Rows of a governance table whose columns equal the given values, optionally in a time window.

        The filter is pushed into the scan: files whose column bounds exclude it are not read.
        ``since``/``until`` bound the table's time column (``governance.TIME_COLUMNS``; inclusive).
        """
        from pyiceberg.expressions import AlwaysTrue, And, EqualTo, GreaterThanOrEqual, LessThanOrEqual

        name = self.table(kind)
        expr: Any = AlwaysTrue()
        for col, value in equals.items():
            expr = And(expr, EqualTo(col, value))  # type: ignore[call-arg,arg-type]
        if since is not None:
            expr = And(expr, GreaterThanOrEqual(TIME_COLUMNS[kind], since.isoformat()))  # type: ignore[call-arg,arg-type]
        if until is not None:
            expr = And(expr, LessThanOrEqual(TIME_COLUMNS[kind], until.isoformat()))  # type: ignore[call-arg,arg-type]
        rows: list[dict[str, Any]] = self.hook.load_table(name).scan(row_filter=expr).to_arrow().to_pylist()
        return rows

    # ------------------------------------------------------------- ledger
    def record(self, *entries: LedgerEntry) -> None:
        """Append ledger entries in one commit."""
        self.append("ledger", [e.to_row() for e in entries])

    def record_ledger(
        self,
        *,
        operation: str,
        table: str | None,
        ref: str | None = None,
        status: str,
        context: Mapping[str, Any] | None = None,
        snapshot_before: int | None = None,
        snapshot_after: int | None = None,
        metrics: Mapping[str, Any] | None = None,
        details: Mapping[str, Any] | None = None,
        started_at: datetime | None = None,
        event_id: str | None = None,
    ) -> str:
        """Write one ledger row for a metadata-only operation; returns its event id."""
        entry = LedgerEntry.new(
            operation=operation,
            status=status,
            context=context,
            event_id=event_id,
            started_at=started_at,
            table_name=table,
            ref=ref,
            snapshot_before=snapshot_before,
            snapshot_after=snapshot_after,
            metrics=metrics or {},
            details=details or {},
            provider_version=__version__,
        )
        self.record(entry)
        return entry.event_id

    def ledger_entries(self, **equals: Any) -> list[LedgerEntry]:
        """Ledger rows whose columns equal the given values, decoded (``metrics``/``details`` as dicts)."""
        return [LedgerEntry.from_row(r) for r in self.read("ledger", **equals)]

    def legal_hold_records(self, table: str, holds: list[dict[str, Any]]) -> None:
        """Fill each hold's ``details`` with what the ledger recorded when it was placed (in place)."""
        latest: dict[str, LedgerEntry] = {}
        entries = self.ledger_entries(table_name=table, operation="create_tag")
        for entry in sorted(entries, key=lambda e: e.finished_at or datetime.min.replace(tzinfo=UTC)):
            if entry.status in ("succeeded", "noop") and entry.snapshot_after is not None:
                latest[f"{entry.ref}@{entry.snapshot_after}"] = entry
        for hold in holds:
            found = latest.get(f"{hold['name']}@{hold['snapshot_id']}")
            if found is not None:
                hold["details"] = {
                    **found.details,
                    "dag_id": found.dag_id,
                    "run_id": found.run_id,
                    "task_id": found.task_id,
                    "recorded_at": found.finished_at.isoformat() if found.finished_at else None,
                }

    def legal_holds(self, table: str | TableIdent | Table, *, with_ledger: bool = True) -> list[dict[str, Any]]:
        """Legal-hold tags of a table (``governance.LEGAL_HOLD_PREFIX``), oldest snapshot first.

        Each item: ``name``, ``snapshot_id``, ``snapshot_timestamp_ms``, ``max_ref_age_ms``,
        ``never_expires`` (the hold carries its own never-expiring age) and ``details`` — the
        ledger details recorded when the hold was placed (case id, reason, who placed it), or
        ``None`` when the ledger has no record (a hold created outside this provider still
        counts: the tag name is the convention).
        """
        tbl = self.hook._table(table)
        holds = []
        for name, ref in tbl.metadata.refs.items():
            if not is_legal_hold(name, ref.snapshot_ref_type.value):
                continue
            snap = tbl.metadata.snapshot_by_id(ref.snapshot_id)
            holds.append(
                {
                    "name": name,
                    "snapshot_id": ref.snapshot_id,
                    "snapshot_timestamp_ms": snap.timestamp_ms if snap else None,
                    "max_ref_age_ms": ref.max_ref_age_ms,
                    # False: placed without its own age, so history.expire.max-ref-age-ms applies to it
                    "never_expires": ref.max_ref_age_ms == LEGAL_HOLD_MAX_REF_AGE_MS,
                    "details": None,
                }
            )
        if holds and with_ledger:
            self.legal_hold_records(".".join(tbl.name()[-2:]), holds)
        return sorted(holds, key=lambda h: (h["snapshot_timestamp_ms"] or 0, h["name"]))

    # ---------------------------------------------------- erasure requests
    def ensure_erasure_requests_table(self, table: str | TableIdent) -> str:
        """Create an erasure requests table (request_id, subject_key, received_at, status…) if missing."""
        from airflow_iceberg_provider.rules.erasure import REQUESTS_COLUMNS
        from airflow_iceberg_provider.rules.schema import parse_columns

        hook = self.hook
        ident = validate_table(table, "requests_table")
        hook.ensure_namespace(ident.namespace)
        with hook.translate_errors(ident.dotted):
            hook.catalog.create_table_if_not_exists(
                ident.dotted,
                schema=parse_columns(REQUESTS_COLUMNS),
                properties={"format-version": "2", "write.metadata.metrics.column.subject_key": "none"},
            )
        return ident.dotted

    def submit_erasure_requests(
        self, table: str | TableIdent, requests: Mapping[str, str], *, received_at: datetime | None = None
    ) -> list[str]:
        """Add ``{request_id: subject_key}`` as ``pending`` requests (creating the table if missing) in
        one commit and return the ids added; ids already in the table are skipped, so a re-run adds
        nothing. The subject keys are written to the requests table only: never logged or returned."""
        from airflow_iceberg_provider.rules.erasure import new_request_rows

        name = self.ensure_erasure_requests_table(table)
        states = self.erasure_request_states(name)
        known = [r["request_id"] for r in states]
        redacted = [r["request_id"] for r in states if r["status"] == "redacted"]
        rows = new_request_rows(requests, received_at=received_at or datetime.now(UTC), known=known, redacted=redacted)
        if rows:
            tbl = self.hook.load_table(name)
            with self.hook.translate_errors(name):
                tbl.append(pa_table(rows, tbl))
        return [r["request_id"] for r in rows]

    def erasure_request_states(
        self, table: str | TableIdent | Table, *, statuses: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """``request_id``, ``received_at``, ``status`` of erasure requests — never ``subject_key``."""
        from pyiceberg.expressions import AlwaysTrue, In

        tbl = self.hook._table(table)
        expr: Any = In("status", statuses) if statuses else AlwaysTrue()  # type: ignore[call-arg,arg-type]
        with self.hook.translate_errors(".".join(tbl.name()[-2:])):
            table_rows = tbl.scan(row_filter=expr, selected_fields=("request_id", "received_at", "status")).to_arrow()
        rows: list[dict[str, Any]] = table_rows.to_pylist()
        return rows


def pa_table(rows: list[dict[str, Any]], tbl: Table) -> Any:
    """Rows as an Arrow table in ``tbl``'s schema."""
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=tbl.schema().as_arrow())
