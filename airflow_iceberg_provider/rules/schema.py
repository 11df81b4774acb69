"""Schema and partition parsing: what users write -> pyiceberg ``Schema`` / ``PartitionSpec`` values.

The one parser of column types (``parse_type``: ``long``, ``decimal(12,2)``, ``string not null``),
of column mappings (``parse_columns``), of partition transforms (``parse_transform``) and of
partition specs (``parse_partition_spec``). A transform is accepted in the provider's spelling
(``day(ts)``, ``bucket[16](id)``, ``truncate[4](s)``) and in Spark DDL's (``days(ts)``,
``bucket(16, id)``, ``truncate(4, s)``). Also Iceberg's safe type promotions (``promotion_problem``).

Pure: pyiceberg types are imported inside the functions, no catalog is read. Used by the
create/alter table operators, the table-change planner (:mod:`airflow_iceberg_provider.rules.table_evolution`)
and the governance store (erasure requests table); hooks import it, never an operator.
Errors are :class:`IcebergValidationError` naming the parameter, the value and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.params import validate_name

TYPES = ("boolean", "int", "long", "float", "double", "date", "timestamp", "timestamptz", "string", "binary")
_DECIMAL = re.compile(r"^decimal\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)\Z")
_COL = r"[A-Za-z_][A-Za-z0-9_]{0,127}"
_UNARY = {
    "identity": "identity",
    "year": "year",
    "years": "year",
    "month": "month",
    "months": "month",
    "day": "day",
    "days": "day",
    "date": "day",
    "hour": "hour",
    "hours": "hour",
    "date_hour": "hour",
    "void": "void",
}
_TRANSFORM_UNARY = re.compile(rf"^([A-Za-z_]+)\(\s*({_COL})\s*\)\Z")
_TRANSFORM_BRACKET = re.compile(rf"^(bucket|truncate)\[\s*(\d+)\s*\]\(\s*({_COL})\s*\)\Z", re.IGNORECASE)
_TRANSFORM_SPARK = re.compile(
    rf"^(bucket|truncate)\(\s*(?:(\d+)\s*,\s*({_COL})|({_COL})\s*,\s*(\d+))\s*\)\Z", re.IGNORECASE
)
#: a bare column (or partition field) name
BARE_COLUMN = re.compile(rf"^{_COL}\Z")
TRANSFORM_HELP = (
    "use col, identity(col), year|month|day|hour(col), bucket[N](col), truncate[N](col) or Spark DDL's "
    "years|months|days|hours(col), bucket(N, col), truncate(N, col)"
)


# --------------------------------------------------------------------------- types
def parse_type(spec: object, param: str) -> tuple[Any, bool]:
    """``"long"``, ``"decimal(12,2)"``, ``"string not null"`` -> ``(pyiceberg type, required)``."""
    from pyiceberg import types as t

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
    text = " ".join(str(spec).strip().lower().split())
    required = text.endswith(" not null")
    text = text.removesuffix(" not null").strip()
    if (m := _DECIMAL.match(text)) is not None:
        precision, scale = int(m.group(1)), int(m.group(2))
        if 1 <= precision <= 38 and scale <= precision:
            return t.DecimalType(precision, scale), required
    elif text in mapping:
        return mapping[text], required
    raise IcebergValidationError(
        f"{param}={spec!r} is not a supported type; use one of {', '.join(TYPES)} or "
        "decimal(p,s) (1 <= p <= 38, s <= p), optionally followed by 'not null'."
    )


def parse_columns(columns: Mapping[str, str]) -> Any:
    """``{"name": "type"}`` (types: boolean int long float double date timestamp timestamptz
    string binary decimal(p,s); suffix ``not null`` for required) -> pyiceberg Schema."""
    from pyiceberg import types as t
    from pyiceberg.schema import Schema

    if not isinstance(columns, Mapping) or not columns:
        raise IcebergValidationError("columns must be a non-empty mapping of column name to type.")
    fields = []
    for i, (name, spec) in enumerate(columns.items(), start=1):
        validate_name(name, f"columns[{name!r}]")
        ftype, required = parse_type(spec, f"columns[{name!r}]")
        fields.append(t.NestedField(field_id=i, name=name, field_type=ftype, required=required))
    return Schema(*fields)


def parse_partition_spec(schema: Any, partition_by: Sequence[str]) -> Any:
    """``["day(order_ts)", "bucket(16, id)", "region"]`` -> pyiceberg PartitionSpec (see :func:`parse_transform`).

    Field names: the column for identity, else ``<column>_<transform>`` (``order_ts_day``).
    """
    from pyiceberg.partitioning import PartitionField, PartitionSpec

    fields = []
    for i, item in enumerate(partition_by):
        tf = parse_transform(item, f"partition_by[{i}]")
        try:
            source = schema.find_field(tf.column)
        except ValueError as err:
            raise IcebergValidationError(
                f"partition_by[{i}]={item!r}: column {tf.column!r} is not in columns."
            ) from err
        if not tf.to_pyiceberg().can_transform(source.field_type):
            raise IcebergValidationError(
                f"partition_by[{i}]={item!r}: {tf.kind} does not apply to {tf.column!r} ({source.field_type}); "
                "use a transform for that type (day/hour for timestamps, bucket or truncate for ids and strings)."
            )
        name = tf.column if tf.kind == "identity" else f"{tf.column}_{tf.kind}"
        fields.append(
            PartitionField(source_id=source.field_id, field_id=1000 + i, transform=tf.to_pyiceberg(), name=name)
        )
    return PartitionSpec(*fields)


def type_name(ftype: Any) -> str:
    """The spelling users write (``long``, ``decimal(12, 2)``)."""
    return str(ftype)


def promotion_problem(current: Any, target: Any) -> str | None:
    """``None`` if ``current -> target`` is one of Iceberg's safe promotions, else why not.

    Safe: int -> long, float -> double, decimal(P,S) -> decimal(P',S) with P' > P.
    """
    from pyiceberg import types as t

    if isinstance(current, t.IntegerType) and isinstance(target, t.LongType):
        return None
    if isinstance(current, t.FloatType) and isinstance(target, t.DoubleType):
        return None
    if isinstance(current, t.DecimalType) and isinstance(target, t.DecimalType):
        if target.scale != current.scale:
            return f"it changes the decimal scale from {current.scale} to {target.scale}, which rewrites every value"
        if target.precision < current.precision:
            return "it narrows the decimal precision, which can overflow existing values"
        return None
    narrowing = (isinstance(current, t.LongType) and isinstance(target, t.IntegerType)) or (
        isinstance(current, t.DoubleType) and isinstance(target, t.FloatType)
    )
    if narrowing:
        return "it is a narrowing, which can lose existing values"
    return "it is not a safe promotion (existing files could not be read as the new type)"


# --------------------------------------------------------------------- transforms
@dataclass(frozen=True)
class TransformSpec:
    """One parsed partition/sort transform: ``kind`` (identity/year/month/day/hour/void/bucket/truncate)."""

    kind: str
    column: str
    width: int | None = None

    def text(self, column: str | None = None) -> str:
        col = column or self.column
        if self.kind == "identity":
            return col
        return f"{self.kind}[{self.width}]({col})" if self.width is not None else f"{self.kind}({col})"

    def to_pyiceberg(self) -> Any:
        from pyiceberg import transforms as tr

        if self.kind == "bucket":
            return tr.BucketTransform(cast(int, self.width))
        if self.kind == "truncate":
            return tr.TruncateTransform(cast(int, self.width))
        return {
            "identity": tr.IdentityTransform,
            "year": tr.YearTransform,
            "month": tr.MonthTransform,
            "day": tr.DayTransform,
            "hour": tr.HourTransform,
            "void": tr.VoidTransform,
        }[self.kind]()


def parse_transform(item: object, param: str) -> TransformSpec:
    """Parse a partition/sort transform in the provider's or Spark DDL's spelling (see module doc)."""
    text = str(item).strip()
    if (m := BARE_COLUMN.match(text)) is not None:
        return TransformSpec("identity", text)
    if (m := _TRANSFORM_UNARY.match(text)) is not None and m.group(1).lower() in _UNARY:
        return TransformSpec(_UNARY[m.group(1).lower()], m.group(2))
    width: str | None = None
    if (m := _TRANSFORM_BRACKET.match(text)) is not None:
        kind, width, col = m.group(1).lower(), m.group(2), m.group(3)
    elif (m := _TRANSFORM_SPARK.match(text)) is not None:
        kind = m.group(1).lower()
        width, col = (m.group(2), m.group(3)) if m.group(2) else (m.group(5), m.group(4))
    else:
        raise IcebergValidationError(f"{param}={item!r} is not a partition transform; {TRANSFORM_HELP}.")
    if int(width) < 1:
        raise IcebergValidationError(
            f"{param}={item!r}: the {kind} width must be at least 1; use e.g. {kind}[16]({col})."
        )
    return TransformSpec(kind, col, int(width))
