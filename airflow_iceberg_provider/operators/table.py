"""Create a table through the catalog (no JVM)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.operators._base import IcebergBaseOperator
from airflow_iceberg_provider.rules.format_version import (
    DEFAULT_FORMAT_VERSION,
    create_problem,
    requested_format_version,
)
from airflow_iceberg_provider.rules.schema import parse_columns, parse_partition_spec
from airflow_iceberg_provider.rules.table_evolution import build_request, check_property_values, describe

if TYPE_CHECKING:
    from airflow.sdk import Context


class IcebergCreateTableOperator(IcebergBaseOperator):
    """
    Create an Iceberg table (and its namespace) through the catalog hook; no JVM.

    Idempotent: if the table exists with the same columns, partition spec and requested
    properties the task succeeds without a commit. A different schema is always refused (use
    :class:`~airflow_iceberg_provider.operators.table_changes.IcebergAlterTableOperator`). A
    different partition spec or different values of the requested properties are refused with
    ``on_mismatch="fail"`` (the default; the table is left unchanged) or applied in one commit
    with ``on_mismatch="update"`` (partition fields not listed are removed; properties not
    requested are left alone; recorded in the ledger as ``alter_table``).

    :param table: ``namespace.table`` (templated).
    :param columns: ``{"order_id": "long not null", "amount": "decimal(12,2)", ...}``.
    :param partition_by: partition transforms, e.g. ``["day(order_ts)", "bucket[16](customer_id)"]``
        or Spark DDL's ``["days(order_ts)", "bucket(16, customer_id)"]``.
    :param properties: table properties (templated); ``format-version`` is ``"1"``, ``"2"`` (the
        default) or ``"3"`` (deletion vectors). pyiceberg 0.12 writes format-version 3 metadata only
        through a REST catalog (its server writes it); behind another catalog a v3 table is created
        in Spark SQL and this operator refuses ``"3"`` with that fix (see the compatibility page).
    :param on_mismatch: ``"fail"`` or ``"update"``: what to do when the table exists with another
        partition spec or other values for the requested properties.
    """

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, "properties")

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        on_mismatch: str = "fail",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.columns = dict(columns)
        self.partition_by = list(partition_by)
        self.properties = properties
        self.on_mismatch = on_mismatch
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        params.choice(self.on_mismatch, "on_mismatch", ("fail", "update"))
        parse_partition_spec(parse_columns(self.columns), self.partition_by)
        if not params.is_templated(self.properties):
            self.table_properties()

    def table_properties(self) -> dict[str, str]:
        """The rendered ``properties`` as strings, with ``format-version`` defaulting to 2."""
        given = {} if params.is_unset(self.properties) else self.properties
        if not isinstance(given, Mapping):
            raise IcebergValidationError(
                f"properties={params.describe(given)} is not a mapping; pass e.g. {{'write.format.default': 'parquet'}}."
            )
        properties = {"format-version": str(DEFAULT_FORMAT_VERSION), **{str(k): str(v) for k, v in given.items()}}
        properties["format-version"] = str(requested_format_version(properties))
        check_property_values(properties)
        return properties

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        hook, ident = self.catalog_hook, self.ident
        schema = parse_columns(self.columns)
        spec = parse_partition_spec(schema, self.partition_by)
        properties = self.table_properties()
        if hook.table_exists(ident):
            return self._existing(context, schema, properties)
        problem = create_problem(ident.dotted, int(properties["format-version"]), hook.config.catalog_type)
        if problem:
            raise IcebergRefusedError(problem)
        if not self._create(schema, spec, properties):
            return self._existing(context, schema, properties)
        hook.governance.record_ledger(
            operation="create_table",
            table=ident.dotted,
            status="succeeded",
            context=context,
            details={"partition_by": self.partition_by, "properties": properties},
        )
        self.log.info("Created table %s partitioned by %s", ident, self.partition_by or "nothing")
        return {"table": ident.dotted, "created": True}

    def _create(self, schema: Any, spec: Any, properties: dict[str, str]) -> bool:
        """Create the table (and its namespace); ``False`` when a concurrent creator won the race."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        hook, ident = self.catalog_hook, self.ident
        hook.ensure_namespace(ident.namespace)
        try:
            with hook.translate_errors(ident.dotted):
                hook.catalog.create_table(
                    ident.dotted, schema=schema, partition_spec=spec, properties=dict(properties)
                )  # pyiceberg pops format-version
        except TableAlreadyExistsError:  # lost a race with a concurrent creator: compare with what won
            return False
        return True

    def _existing(self, context: Context, schema: Any, properties: dict[str, str]) -> dict[str, Any]:
        """Compare an existing table with the request: schema (always refused if different), then
        partition spec and properties (refused, or applied with ``on_mismatch="update"``)."""
        from airflow_iceberg_provider.operators.table_changes import apply_table_changes, plan_table

        hook, ident = self.catalog_hook, self.ident
        tbl = hook.load_table(ident)
        want = [(f.name, str(f.field_type)) for f in schema.fields]
        have = [(f.name, str(f.field_type)) for f in tbl.schema().fields]
        if want != have:
            raise IcebergRefusedError(
                f"Table {ident} already exists with a different schema {have}; refusing to change it. "
                "Evolve the schema explicitly (IcebergAlterTableOperator) or pick another table name."
            )
        props = {k: v for k, v in properties.items() if k != "format-version"}
        if str(tbl.metadata.format_version) != properties["format-version"]:
            raise IcebergRefusedError(
                f"Table {ident} already exists with format-version {tbl.metadata.format_version}, not "
                f"{properties['format-version']}; the format version is not changed here. Nothing was changed."
            )
        request = build_request(partition_by=self.partition_by, properties=props)
        mismatch = plan_table(tbl, request)
        if mismatch and self.on_mismatch == "fail":
            raise IcebergRefusedError(
                f"Table {ident} already exists but differs from the request: {describe(mismatch)}. Pass "
                "on_mismatch='update' to apply these changes, or align partition_by/properties with the table. "
                "Nothing was changed."
            )
        changes = apply_table_changes(hook, ident, request) if mismatch else []
        if changes:
            hook.governance.record_ledger(
                operation="alter_table",
                table=ident.dotted,
                status="succeeded",
                context=context,
                metrics={"changes": len(changes)},
                details={
                    "request": request.summary(),
                    "changes": [c.as_dict() for c in changes],
                    "via": "create_table",
                },
            )
        self.log.info("Table %s already exists; %s", ident, describe(changes) if changes else "as requested")
        return {
            "table": ident.dotted,
            "created": False,
            **({"changes": [c.as_dict() for c in changes]} if changes else {}),
        }
