"""Create a table through the catalog (no JVM)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider._validation import validate_name
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.operators._base import IcebergBaseOperator

if TYPE_CHECKING:
    from airflow.sdk import Context

_TYPES = ("boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz", "string", "binary")
_DECIMAL = re.compile(r"^decimal\((\d{1,2}),\s*(\d{1,2})\)$")
_TRANSFORM = re.compile(r"^(identity|year|month|day|hour|void)\((\w+)\)$|^(bucket|truncate)\[(\d+)\]\((\w+)\)$|^(\w+)$")


def parse_columns(columns: Mapping[str, str]) -> Any:
    """``{"name": "type"}`` (types: boolean int long float double date timestamp timestamptz
    string binary decimal(p,s); suffix ``not null`` for required) -> pyiceberg Schema."""
    from pyiceberg import types as t
    from pyiceberg.schema import Schema

    mapping = {
        "boolean": t.BooleanType(),
        "int": t.IntegerType(),
        "long": t.LongType(),
        "float": t.FloatType(),
        "double": t.DoubleType(),
        "date": t.DateType(),
        "timestamp": t.TimestampType(),
        "timestamptz": t.TimestamptzType(),
        "string": t.StringType(),
        "binary": t.BinaryType(),
    }
    if not isinstance(columns, Mapping) or not columns:
        raise IcebergValidationError("columns must be a non-empty mapping of column name to type.")
    fields = []
    for i, (name, spec) in enumerate(columns.items(), start=1):
        validate_name(name, f"columns[{name!r}]")
        text = str(spec).strip().lower()
        required = text.endswith(" not null")
        text = text.removesuffix(" not null").strip()
        if (m := _DECIMAL.match(text)) is not None:
            ftype: Any = t.DecimalType(int(m.group(1)), int(m.group(2)))
        elif text in mapping:
            ftype = mapping[text]
        else:
            raise IcebergValidationError(
                f"columns[{name!r}]={spec!r} is not a supported type; use one of {', '.join(_TYPES)} or "
                "decimal(p,s), optionally followed by 'not null'."
            )
        fields.append(t.NestedField(field_id=i, name=name, field_type=ftype, required=required))
    return Schema(*fields)


def parse_partition_spec(schema: Any, partition_by: Sequence[str]) -> Any:
    """``["day(order_ts)", "bucket[16](id)", "region"]`` -> pyiceberg PartitionSpec."""
    from pyiceberg import transforms as tr
    from pyiceberg.partitioning import PartitionField, PartitionSpec

    fields = []
    for i, item in enumerate(partition_by):
        m = _TRANSFORM.match(str(item).strip())
        if m is None:
            raise IcebergValidationError(
                f"partition_by[{i}]={item!r} is not a partition transform; use col, identity(col), "
                "year|month|day|hour(col), bucket[N](col) or truncate[N](col)."
            )
        if m.group(6):
            kind, col, width = "identity", m.group(6), None
        elif m.group(1):
            kind, col, width = m.group(1), m.group(2), None
        else:
            kind, col, width = m.group(3), m.group(5), int(m.group(4))
        try:
            source = schema.find_field(col)
        except ValueError as err:
            raise IcebergValidationError(f"partition_by[{i}]={item!r}: column {col!r} is not in columns.") from err
        transform = {
            "identity": tr.IdentityTransform,
            "year": tr.YearTransform,
            "month": tr.MonthTransform,
            "day": tr.DayTransform,
            "hour": tr.HourTransform,
            "void": tr.VoidTransform,
        }.get(kind)
        tf = (
            transform()
            if transform
            else (tr.BucketTransform(width) if kind == "bucket" else tr.TruncateTransform(width))
        )
        name = col if kind == "identity" else f"{col}_{kind}"
        fields.append(PartitionField(source_id=source.field_id, field_id=1000 + i, transform=tf, name=name))
    return PartitionSpec(*fields)


class IcebergCreateTableOperator(IcebergBaseOperator):
    """
    Create an Iceberg table (and its namespace) through the catalog hook; no JVM.

    Idempotent: if the table exists with the same column names and types the task
    succeeds without a commit; a different schema is refused (nothing is changed).

    :param table: ``namespace.table`` (templated).
    :param columns: ``{"order_id": "long not null", "amount": "decimal(12,2)", ...}``.
    :param partition_by: partition transforms, e.g. ``["day(order_ts)", "bucket[16](customer_id)"]``.
    :param properties: table properties (templated); ``format-version`` defaults to 2
        (pyiceberg cannot yet write v3 metadata, which tagging and publish need).
    """

    template_fields: Sequence[str] = (*IcebergBaseOperator.template_fields, "properties")

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.columns = dict(columns)
        self.partition_by = list(partition_by)
        self.properties = {"format-version": "2", **{k: str(v) for k, v in (properties or {}).items()}}
        self._schema = parse_columns(self.columns)
        parse_partition_spec(self._schema, self.partition_by)

    def execute(self, context: Context) -> dict[str, Any]:
        hook = self.catalog_hook
        ident = self.ident
        schema = parse_columns(self.columns)
        spec = parse_partition_spec(schema, self.partition_by)
        if hook.table_exists(ident):
            existing = hook.load_table(ident).schema()
            want = [(f.name, str(f.field_type)) for f in schema.fields]
            have = [(f.name, str(f.field_type)) for f in existing.fields]
            if want != have:
                raise IcebergRefusedError(
                    f"Table {ident} already exists with a different schema {have}; refusing to change it. "
                    "Evolve the schema explicitly or pick another table name."
                )
            self.log.info("Table %s already exists with the requested schema", ident)
            return {"table": ident.dotted, "created": False}
        hook.ensure_namespace(ident.namespace)
        from pyiceberg.exceptions import TableAlreadyExistsError

        try:
            with hook.translate_errors(ident.dotted):
                hook.catalog.create_table(ident.dotted, schema=schema, partition_spec=spec, properties=self.properties)
        except TableAlreadyExistsError:  # lost a race with a concurrent creator: same outcome
            return {"table": ident.dotted, "created": False}
        hook.record_ledger(
            operation="create_table",
            table=ident.dotted,
            status="succeeded",
            context=context,
            details={"partition_by": self.partition_by, "properties": self.properties},
        )
        self.log.info("Created table %s partitioned by %s", ident, self.partition_by or "nothing")
        return {"table": ident.dotted, "created": True}
