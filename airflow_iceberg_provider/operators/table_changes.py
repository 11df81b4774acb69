"""Change a table's schema, partitioning, sort order and column properties (metadata only, no JVM).

The rules live in :mod:`airflow_iceberg_provider.rules.table_evolution` (pure): it diffs the request
against the table's current metadata and returns the changes, or refuses an unsafe one. This
module applies a plan in ONE pyiceberg transaction (one compare-and-swap commit: schema, spec,
sort order and properties change together or not at all), re-plans on the committed metadata
(an empty re-plan is the proof), and records one ledger row.

pyiceberg 0.12 can make every change here, including replacing the sort order
(``Transaction.update_sort_order``), so no Spark job is needed; Spark reads the result
(``tests/spark/test_table_changes_spark.py`` sort-compacts a changed table with the table's order).
Tables keep their format version (a format-version 3 table is changed only behind a REST catalog).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.operators._base import IcebergBaseOperator
from airflow_iceberg_provider.rules.schema import parse_transform, parse_type
from airflow_iceberg_provider.rules.table_evolution import (
    PARTITION_KINDS,
    SCHEMA_KINDS,
    Change,
    TableChangeRequest,
    build_request,
    describe,
    plan_changes,
)

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.params import TableIdent

_ARGS = (
    "add_columns",
    "rename_columns",
    "widen_columns",
    "add_partition_fields",
    "drop_partition_fields",
    "partition_by",
    "sort_order",
    "properties",
    "bloom_filter_columns",
    "metrics_modes",
)


def plan_table(tbl: Table, request: TableChangeRequest) -> list[Change]:
    """The changes ``request`` needs on the loaded table (pure; raises on an unsafe request)."""
    name = ".".join(tbl.name()[-2:])
    return plan_changes(name, tbl.schema(), tbl.spec(), tbl.sort_order(), tbl.properties, request)


def _column_name(schema: Any, field_id: int | None) -> str:
    """The name of a planned change's column in the base schema (changes of existing columns carry the id)."""
    if field_id is None:
        raise IcebergValidationError("internal: a change of an existing column carries no field id")
    return str(schema.find_column_name(field_id))


def _apply(tbl: Table, changes: Sequence[Change]) -> None:
    """Stage every change in one transaction; the commit is one compare-and-swap."""
    from pyiceberg.table.sorting import NullOrder

    with tbl.transaction() as tx:
        schema_changes = [c for c in changes if c.kind in SCHEMA_KINDS]
        if schema_changes:
            base = tx.table_metadata.schema()
            with tx.update_schema() as us:  # names below are the base schema's (field ids survive renames)
                for c in schema_changes:
                    if c.kind == "rename_column":
                        us.rename_column(_column_name(base, c.field_id), str(c.after))
                    elif c.kind == "add_column":
                        us.add_column(c.target, parse_type(c.after, c.target)[0])
                    else:
                        us.update_column(_column_name(base, c.field_id), field_type=parse_type(c.after, c.target)[0])
        spec_changes = [c for c in changes if c.kind in PARTITION_KINDS]
        if spec_changes:
            with tx.update_spec() as sp:
                for c in spec_changes:
                    if c.kind == "remove_partition_field":
                        sp.remove_field(c.target)
                    else:
                        tf = parse_transform(c.after, c.target)
                        sp.add_field(tf.column, tf.to_pyiceberg())
        for c in (c for c in changes if c.kind == "set_sort_order"):
            with tx.update_sort_order() as so:
                for term in c.terms:
                    add = so.asc if term.direction == "ASC" else so.desc
                    null = NullOrder.NULLS_FIRST if term.null_order == "FIRST" else NullOrder.NULLS_LAST
                    add(term.transform.column, term.transform.to_pyiceberg(), null)
        if sets := {c.target: c.after for c in changes if c.kind == "set_property"}:
            tx.set_properties(sets)
        if removes := [c.target for c in changes if c.kind == "remove_property"]:
            tx.remove_properties(*removes)


def apply_table_changes(hook: IcebergCatalogHook, ident: TableIdent, request: TableChangeRequest) -> list[Change]:
    """Plan on fresh metadata, apply in one commit (re-planned on a commit conflict), verify.

    Returns the changes made (``[]``: the table already was as requested; nothing committed).
    Raises the planner's refusal before any commit, so a refused request leaves the table's
    metadata location unchanged.
    """

    def attempt() -> list[Change]:
        tbl = hook.load_table(ident)
        changes = plan_table(tbl, request)
        if changes:
            hook.refuse_uncommittable(tbl, change=f"table change ({describe(changes)})", what="schema")
            try:
                _apply(tbl, changes)
            except ValueError as err:  # pyiceberg's own checks (e.g. a partition name that is a column)
                if isinstance(err, IcebergValidationError):
                    raise
                raise IcebergRefusedError(
                    f"pyiceberg refused the changes to {ident} ({describe(changes)}): {err}. Adjust the request; "
                    "nothing was changed."
                ) from err
        return changes

    changes = hook.retry_commit(attempt, what=ident.dotted)
    left = plan_table(hook.load_table(ident), request) if changes else []
    if left:
        raise IcebergCommitVerificationError(
            f"After the commit {ident} still differs from the request: {describe(left)}. A concurrent writer may "
            "have changed it; inspect the table and re-run the task."
        )
    return changes


class IcebergAlterTableOperator(IcebergBaseOperator):
    """
    Change a table the way users do: columns, partitioning, sort order, column properties.

    Declarative and idempotent: each argument states what the table should look like, the
    operator commits only what differs (one pyiceberg transaction, no JVM) and a re-run is a
    no-op (``outcome="noop"``, no commit). Unsafe requests are refused before anything is
    committed, naming the parameter, the problem and the fix: narrowing or incompatible type
    changes, renaming onto an existing column, unknown columns, transforms that do not apply
    to a column's type, bad metrics modes. Column and transform names refer to the columns
    *after* ``rename_columns``/``add_columns``. A ledger row records every run (``alter_table``:
    ``succeeded``, ``noop`` or ``refused``).

    :param table: ``namespace.table`` (templated).
    :param add_columns: ``{"discount": "decimal(12,2)"}``: new optional top-level columns (templated).
    :param rename_columns: ``{"amt": "amount"}`` (templated).
    :param widen_columns: ``{"qty": "long"}``; only int -> long, float -> double and
        decimal(P,S) -> decimal(P',S), P' > P (templated).
    :param add_partition_fields: partition fields to add, e.g. ``["bucket(16, customer_id)", "days(order_ts)"]``
        (Spark DDL spelling, or ``bucket[16](customer_id)``, ``day(order_ts)``) (templated).
    :param drop_partition_fields: partition fields to remove, by transform or field name (templated).
    :param partition_by: the whole spec instead of add/drop: fields not listed are removed (templated).
    :param sort_order: the table's write order (``WRITE ORDERED BY``), e.g.
        ``"days(order_ts), customer_id DESC NULLS LAST"`` or a list of terms; ``[]`` = unsorted.
        Sort compaction (``IcebergRewriteDataFilesOperator(strategy="sort")``) uses it (templated).
    :param properties: table properties to set (templated).
    :param bloom_filter_columns: ``["customer_id"]`` or ``{"customer_id": True}``: sets
        ``write.parquet.bloom-filter-enabled.column.<col>`` (files written afterwards get one) (templated).
    :param metrics_modes: ``{"email": "none", "note": "truncate(8)"}``: sets
        ``write.metadata.metrics.column.<col>`` (``none``, ``counts``, ``truncate(N)``, ``full``) (templated).
    """

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, *_ARGS)
    ui_color = "#eef3fb"

    def __init__(
        self,
        *,
        add_columns: Mapping[str, str] | None = None,
        rename_columns: Mapping[str, str] | None = None,
        widen_columns: Mapping[str, str] | None = None,
        add_partition_fields: Sequence[str] | None = None,
        drop_partition_fields: Sequence[str] | None = None,
        partition_by: Sequence[str] | None = None,
        sort_order: str | Sequence[str] | None = None,
        properties: Mapping[str, str] | None = None,
        bloom_filter_columns: Sequence[str] | Mapping[str, bool] | None = None,
        metrics_modes: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.add_columns = add_columns
        self.rename_columns = rename_columns
        self.widen_columns = widen_columns
        self.add_partition_fields = add_partition_fields
        self.drop_partition_fields = drop_partition_fields
        self.partition_by = partition_by
        self.sort_order = sort_order
        self.properties = properties
        self.bloom_filter_columns = bloom_filter_columns
        self.metrics_modes = metrics_modes
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if not any(params.is_templated(getattr(self, a)) for a in _ARGS):
            self._request()

    def _request(self) -> TableChangeRequest:
        return build_request(**{a: getattr(self, a) for a in _ARGS})

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        request = self._request()
        hook, started = self.catalog_hook, datetime.now(UTC)
        try:
            changes = apply_table_changes(hook, self.ident, request)
        except IcebergRefusedError as err:
            self._record(context, "refused", request, [], started, reason=str(err)[:1000])
            raise
        outcome = "changed" if changes else "noop"
        self._record(context, "succeeded" if changes else "noop", request, changes, started)
        self.log.info("%s %s: %s", self.ident, outcome, describe(changes))
        return {"table": self.ident.dotted, "outcome": outcome, "changes": [c.as_dict() for c in changes]}

    def _record(
        self,
        context: Context | None,
        status: str,
        request: TableChangeRequest,
        changes: Sequence[Change],
        started: datetime,
        **details: Any,
    ) -> None:
        """One ledger row; a refusal's row is best effort (the refusal itself must surface)."""
        try:
            self.catalog_hook.governance.record_ledger(
                operation="alter_table",
                table=self.ident.dotted,
                status=status,
                context=context,
                metrics={"changes": len(changes)},
                details={"request": request.summary(), "changes": [c.as_dict() for c in changes], **details},
                started_at=started,
            )
        except Exception as err:  # a failed ledger write must not mask the refusal (re-raised otherwise)
            if status != "refused":
                raise
            self.log.warning("Could not record the refusal in the ledger: %s", err)
