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
from airflow_iceberg_provider.core import ledger_chain as lc
from airflow_iceberg_provider.core import ledger_verify as lv
from airflow_iceberg_provider.core.governance import (
    CHECKPOINTS,
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
        #: governance tables this store appended to since its last checkpoint
        self._dirty: set[str] = set()

    @property
    def namespace(self) -> str:
        return self.hook.governance_namespace

    # ------------------------------------------------------------- tables
    def table(self, kind: str | GovernanceTable) -> str:
        """Create the governance table if missing; return its ``namespace.table`` name."""
        hook = self.hook
        spec = (GOVERNANCE_TABLES.get(kind) or {CHECKPOINTS.name: CHECKPOINTS}[kind]) if isinstance(kind, str) else kind
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
        have = {f.name for f in tbl.schema().fields}
        evolved = any(c.name not in have for c in spec.columns)
        if evolved:
            hook.retry_commit(lambda: self._add_columns(name, spec), what=name)
        self._ready[name] = True
        if evolved and spec.name in GOVERNANCE_TABLES and tbl.metadata.current_snapshot() is not None:
            # the chain starts here: seal the rows an earlier version wrote, as they are now
            self.seal({spec.name: self.read(spec.name)})
        return name

    def _add_columns(self, name: str, spec: GovernanceTable) -> None:
        """Schema evolution: add the spec's columns a table created by an earlier version lacks
        (e.g. the chain columns); rows written before keep ``None`` in them."""
        want = pyiceberg_schema(spec)
        tbl = self.hook.load_table(name)
        have = {f.name for f in tbl.schema().fields}
        with tbl.update_schema() as update:
            for f in want.fields:
                if f.name not in have:
                    update.add_column(f.name, f.field_type, doc=f.doc)

    def append(self, kind: str, rows: list[dict[str, Any]]) -> None:
        """Append rows to a governance table as the next links of its chain, in one commit.

        The commit is a compare-and-swap on the table's ``main`` (pyiceberg's append asserts the
        snapshot it was built on): a concurrent writer's commit fails it, and the retry reloads
        the table, reads the new chain head and links the rows again, so the chain stays linear.
        """
        import pyarrow as pa

        spec = GOVERNANCE_TABLES[kind]
        name = self.table(spec)
        schema = arrow_schema(spec)
        # typed once through Arrow, so what is hashed is what the table gives back on read
        body = [{c.name: r.get(c.name) for c in spec.columns if c.name not in lc.CHAIN_COLUMNS} for r in rows]
        typed = pa.Table.from_pylist(body, pa.schema([f for f in schema if f.name not in lc.CHAIN_COLUMNS]))
        plain = typed.to_pylist()

        def commit() -> None:
            tbl = _without_rebase(self.hook.load_table(name))
            linked, head = lc.link(plain, self.chain_head(tbl))
            tbl.append(pa.Table.from_pylist(linked, schema), snapshot_properties=head.summary())

        self._chained_commit(commit, name)
        self._dirty.add(name)

    def _chained_commit(self, commit: Any, name: str, timeout_s: float = 300.0) -> None:
        """Run a chained commit, retrying lost compare-and-swaps until ``timeout_s`` has passed.

        Bounded by time, not by a count: under many concurrent writers a writer may lose many
        rounds in a row, and every round it loses another writer won (the ledger advances).
        The back-off is exponential with full jitter, capped at one second.
        """
        import random
        import time

        from pyiceberg.exceptions import CommitFailedException

        from airflow_iceberg_provider.exceptions import IcebergCommitConflictError

        deadline = time.monotonic() + timeout_s
        attempt = 0
        while True:
            attempt += 1
            try:
                with self.hook.translate_errors(name):
                    commit()
                return
            except (IcebergCommitConflictError, CommitFailedException):
                if time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0, min(1.0, 0.02 * 2 ** min(attempt, 10))))

    def chain_head(self, tbl: Table) -> lc.ChainHead:
        """The head of a governance table's chain: from the summary the last chained commit
        stamped, else (a commit by another writer, compaction, a table from an earlier
        version) from the chain columns of every row."""
        snap = tbl.metadata.current_snapshot()
        if snap is None:
            return lc.ChainHead()
        found = lc.ChainHead.from_summary(snap.summary.additional_properties if snap.summary else None)
        if found is not None:
            return found
        entries = self.chain_entries(tbl)
        if not entries:
            return lc.ChainHead()
        stream = lc.RootStream()
        for entry in entries:
            stream.push(lc.leaf_hash(entry))
        return lc.ChainHead(size=len(entries), head=entries[-1], frontier=stream.frontier())

    # ------------------------------------------------------------- seals
    def seal(
        self, rows_by_kind: Mapping[str, list[dict[str, Any]]], context: Mapping[str, Any] | None = None
    ) -> str | None:
        """Bring rows another engine wrote (a Spark job's ledger row, audit results, erasure
        evidence) under the chain: one chained ``governance.seal`` ledger event listing each
        row's id and content hash, and for a row sealed before with other content (an evidence
        row a later run or the redaction updated) the hash it replaces. Rows already sealed as
        they are, and chained rows, are skipped. Returns the seal's event id, or ``None``.
        """
        previous = self.sealed_hashes()
        tables: dict[str, list[dict[str, str]]] = {}
        for kind, rows in rows_by_kind.items():
            name = f"{self.namespace}.{kind}"
            for row in rows:
                if row.get(lc.HASH_COLUMN) is not None:
                    continue
                key, digest = lv.row_key(kind, row), lv.row_hash(row)
                old = previous.get(name, {}).get(key)
                if old == digest:
                    continue
                tables.setdefault(name, []).append({"key": key, "hash": digest, **({"replaces": old} if old else {})})
        if not tables:
            return None
        return self.record_ledger(
            operation=lv.SEAL_OPERATION,
            table=None,
            status="succeeded",
            context=context,
            details={"tables": tables},
        )

    def seal_job(self, job_run_id: str, *, job: str, context: Mapping[str, Any] | None = None) -> str | None:
        """Seal the rows a Spark job wrote: its ledger row and audit results (by its run id) and,
        for an erasure job, every evidence row whose content is not sealed yet (runs and the
        redaction update evidence rows in place)."""
        found: dict[str, list[dict[str, Any]]] = {
            "ledger": self.read("ledger", event_id=job_run_id),
            "audit_results": self.read("audit_results", event_id=job_run_id),
        }
        if job.startswith("erasure"):
            found["erasure_evidence"] = self.read("erasure_evidence")
        return self.seal(found, context)

    def sealed_hashes(self) -> dict[str, dict[str, str]]:
        """``{table: {row id: content hash}}`` as the seal events of the ledger say, latest first."""
        rows = self.read("ledger", operation=lv.SEAL_OPERATION)
        return lv.seals_from([r for r in rows if r.get(lc.SEQ_COLUMN) is not None]).expected

    # ------------------------------------------------------------- checkpoints
    def checkpoint(self, context: Mapping[str, Any] | None = None, tables: list[str] | None = None) -> list[str]:
        """Write a checkpoint of each governance table this store appended to (or of ``tables``).

        Each checkpoint is a C2SP ``tlog-checkpoint`` note over the table's chain (origin
        ``<catalog>/<namespace.table>``, the chain's size, the RFC 9162 root of its entry hashes),
        signed with the key of the signing connection when one is configured, appended to
        ``<governance>.ledger_checkpoints``. Returns the checkpoint texts written.
        """
        import pyarrow as pa

        from airflow_iceberg_provider.core.governance import airflow_identity

        todo = sorted(set(tables) if tables is not None else self._dirty)
        if not todo:
            return []
        signer = self.signing_key()
        out, rows = [], []
        for name in todo:
            head = self.chain_head(self.hook.load_table(name))  # the frontier: no row is read
            note = lc.Checkpoint(f"{self.hook.catalog_name}/{name}", head.size, head.root())
            if signer is not None:
                note = lc.sign_checkpoint(note, signer[0], signer[1])
            out.append(note.text())
            rows.append(
                {
                    "table_name": name,
                    "tree_size": head.size,
                    "root_hash": head.root().hex(),
                    "checkpoint": note.text(),
                    "key_name": signer[0] if signer else None,
                    "created_at": datetime.now(UTC),
                    **airflow_identity(context),
                }
            )
        target = self.table(CHECKPOINTS)
        data = pa.Table.from_pylist(rows, arrow_schema(CHECKPOINTS))
        self.hook.retry_commit(lambda: self.hook.load_table(target).append(data), what=target)
        self._dirty.difference_update(todo)
        return out

    def chain_entries(self, tbl: Table) -> list[str]:
        """The entry hashes of a table's chain in ``chain_seq`` order (unchained rows left out)."""
        import pyarrow.compute as pc

        cols = tbl.scan(selected_fields=(lc.SEQ_COLUMN, lc.HASH_COLUMN)).to_arrow()
        cols = cols.filter(pc.is_valid(cols[lc.SEQ_COLUMN])).sort_by(lc.SEQ_COLUMN)
        return [str(h) for h in cols[lc.HASH_COLUMN].to_pylist()]

    def signing_key(self) -> tuple[str, bytes] | None:
        """``(key name, 32-byte Ed25519 private key)`` from the signing connection, or ``None``.

        The connection is the catalog connection's extra ``ledger_signing_conn_id``, default
        :data:`SIGNING_CONN_ID`: ``login`` is the key name, ``password`` the private key (base64 of
        the 32 raw bytes, or an unencrypted PKCS8 PEM). Without that connection checkpoints
        are written unsigned and the verifier reports them as such.
        """
        from airflow_iceberg_provider.exceptions import IcebergValidationError

        conn_id = self.hook.signing_conn_id
        try:
            conn = self.hook.get_connection(conn_id)
        except Exception:  # no such connection: unsigned checkpoints
            return None
        try:
            return lc._check_name(conn.login or ""), lc.private_seed_from_text(conn.password or "")
        except ValueError as err:
            raise IcebergValidationError(
                f"ledger signing connection {conn_id!r}: {err} Fix the connection's login (key name) and "
                "password (private key), or delete the connection to write unsigned checkpoints."
            ) from err

    def proof(self, kind: str, **equals: Any) -> dict[str, Any]:
        """The offline proof of one governance row (``verify --evidence``): the row, its entry hash,
        the newest checkpoint covering it and the RFC 9162 inclusion proof to that checkpoint's
        root; for a row a Spark job wrote, the same for the seal event listing its content.

        :raises IcebergValidationError: no row or several rows match, or no checkpoint covers it yet.
        """
        from airflow_iceberg_provider.exceptions import IcebergValidationError

        name = self.table(kind)
        rows = self.read(kind, **equals)
        if len(rows) != 1:
            raise IcebergValidationError(
                f"proof of {name} where {equals}: {len(rows)} rows match and a proof needs exactly one; "
                "name the row by its id (e.g. evidence_id=...)."
            )
        ledger = self.read("ledger") if kind != "ledger" or rows[0].get(lc.SEQ_COLUMN) is None else []
        chain = self.read(kind) if rows[0].get(lc.SEQ_COLUMN) is not None else []
        notes = [c["checkpoint"] for c in self.read("ledger_checkpoints")]
        doc = lv.row_proof(name, rows[0], chain, notes, ledger_rows=ledger or chain)
        if doc is None:
            raise IcebergValidationError(
                f"proof of {name} where {equals}: no checkpoint covers the row (or the seal of it) yet; "
                "checkpoints are written after each task, or call hook.governance.checkpoint()."
            )
        return doc

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
        """``request_id``, ``received_at``, ``status`` (and ``completed_at``, when the table has it: when the
        request was erased) of erasure requests — never ``subject_key``."""
        from pyiceberg.expressions import AlwaysTrue, In

        tbl = self.hook._table(table)
        expr: Any = In("status", statuses) if statuses else AlwaysTrue()  # type: ignore[call-arg,arg-type]
        fields = ["request_id", "received_at", "status"]
        if "completed_at" in tbl.schema().column_names:
            fields.append("completed_at")
        with self.hook.translate_errors(".".join(tbl.name()[-2:])):
            table_rows = tbl.scan(row_filter=expr, selected_fields=tuple(fields)).to_arrow()
        rows: list[dict[str, Any]] = table_rows.to_pylist()
        return rows


def pa_table(rows: list[dict[str, Any]], tbl: Table) -> Any:
    """Rows as an Arrow table in ``tbl``'s schema."""
    import pyarrow as pa

    return pa.Table.from_pylist(rows, schema=tbl.schema().as_arrow())


def _without_rebase(tbl: Table) -> Table:
    """``tbl`` with pyiceberg's own commit retry off for the commits made through it.

    pyiceberg retries a commit that lost against a concurrent one by rebasing it onto the new
    snapshot (``commit.retry.num-retries``, default 4); for a chained append that would
    commit links computed from a stale head and fork the chain. The override lives in this
    loaded copy of the metadata only: a commit sends updates and requirements, never this
    property, so the table's own setting (which Spark's writers read) is unchanged.
    """
    props = {**tbl.metadata.properties, "commit.retry.num-retries": "0"}
    tbl.metadata = tbl.metadata.model_copy(update={"properties": props})
    return tbl
