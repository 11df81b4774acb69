"""Table changes, planned purely: requested state vs current metadata -> list of changes or a refusal.

No I/O here: the functions take pyiceberg ``Schema`` / ``PartitionSpec`` / ``SortOrder`` values
and a properties mapping, and either return the :class:`Change` list that would bring the table
to the requested state (empty = already there, a no-op) or raise

* :class:`IcebergValidationError` for a malformed request (bad type, bad transform, bad
  metrics mode), detectable without the table, and
* :class:`IcebergRefusedError` for a change that is unsafe *for this table* (narrowing or
  incompatible type change, renaming onto an existing column, unknown column, a transform
  that does not apply to the column's type).

Every message names the parameter, the value's problem and the fix. The operator
(:mod:`airflow_iceberg_provider.operators.table_changes`) applies a plan in one pyiceberg
transaction and re-plans after the commit: an empty re-plan is the verification.

Types, columns and partition transforms are parsed by :mod:`airflow_iceberg_provider.rules.schema`
(one parser for the provider's and Spark DDL's spellings). Sort terms (``WRITE ORDERED BY``)
reuse its ``parse_transform``: ``bucket(16, id) DESC NULLS LAST``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.params import validate_name
from airflow_iceberg_provider.rules.erasure_retention import COPY_RETENTION_KEYS, copy_retention_problem
from airflow_iceberg_provider.rules.schema import (
    BARE_COLUMN,
    TRANSFORM_HELP,
    TransformSpec,
    parse_transform,
    parse_type,
    promotion_problem,
    type_name,
)

_SORT_TERM = re.compile(r"^(.*?)(?:\s+(ASC|DESC))?(?:\s+NULLS\s+(FIRST|LAST))?\Z", re.IGNORECASE | re.DOTALL)
_WRITE_ORDERED_BY = re.compile(r"^\s*WRITE\s+ORDERED\s+BY\s+", re.IGNORECASE)
_METRICS_MODE = re.compile(r"^(none|counts|full|truncate\((\d{1,4})\))\Z", re.IGNORECASE)
BLOOM_PREFIX = "write.parquet.bloom-filter-enabled.column."
BLOOM_FPP_PREFIX = "write.parquet.bloom-filter-fpp.column."
METRICS_PREFIX = "write.metadata.metrics.column."
METRICS_DEFAULT = "write.metadata.metrics.default"
DISTRIBUTION_MODE = "write.distribution-mode"
COLUMN_PROPERTY_PREFIXES = (BLOOM_PREFIX, BLOOM_FPP_PREFIX, METRICS_PREFIX)

SCHEMA_KINDS = ("rename_column", "add_column", "widen_column")
PARTITION_KINDS = ("remove_partition_field", "add_partition_field")


@dataclass(frozen=True)
class SortTerm:
    """One ``WRITE ORDERED BY`` term."""

    transform: TransformSpec
    direction: str  # ASC | DESC
    null_order: str  # FIRST | LAST

    def text(self, column: str | None = None) -> str:
        return f"{self.transform.text(column)} {self.direction} NULLS {self.null_order}"


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses/brackets (``bucket(16, id), ts DESC``)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def parse_sort_order(value: object, param: str = "sort_order") -> list[SortTerm]:
    """``"WRITE ORDERED BY days(ts), id DESC"`` / ``["days(ts)", "id DESC NULLS LAST"]`` / ``[]`` (unsorted).

    Null order defaults as in Spark/Iceberg: ASC -> NULLS FIRST, DESC -> NULLS LAST.
    """
    if isinstance(value, str):
        text = _WRITE_ORDERED_BY.sub("", value.strip())
        items: list[Any] = [] if text == "" or text.lower() == "unsorted" else _split_top_level(text)
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise IcebergValidationError(
            f"{param}={value!r} is not a sort order; pass 'col [ASC|DESC] [NULLS FIRST|LAST], ...' "
            "(transforms allowed, e.g. 'days(ts), bucket(16, id) DESC'), a list of such terms, or [] for unsorted."
        )
    terms = []
    for i, item in enumerate(items):
        m = _SORT_TERM.match(" ".join(str(item).split()))
        if m is None or not m.group(1):
            raise IcebergValidationError(f"{param}[{i}]={item!r} is empty; remove it or name a column.")
        direction = (m.group(2) or "ASC").upper()
        nulls = (m.group(3) or ("FIRST" if direction == "ASC" else "LAST")).upper()
        try:
            transform = parse_transform(m.group(1), f"{param}[{i}]")
        except IcebergValidationError as err:
            raise IcebergValidationError(
                f"{param}[{i}]={item!r} is not a sort term; use 'col|transform [ASC|DESC] [NULLS FIRST|LAST]' "
                f"where the transform is one of: {TRANSFORM_HELP.removeprefix('use ')}."
            ) from err
        if transform.kind == "void":
            raise IcebergValidationError(f"{param}[{i}]={item!r}: void cannot order rows; remove the term.")
        terms.append(SortTerm(transform, direction, nulls))
    return terms


def metrics_mode_problem(value: object) -> str | None:
    m = _METRICS_MODE.match(str(value).strip())
    if m is None:
        return "is not a metrics mode; use none, counts, truncate(N) or full"
    if m.group(2) is not None and int(m.group(2)) < 1:
        return "has a truncate length below 1; use truncate(N) with N >= 1"
    return None


# ------------------------------------------------------------------------- request
@dataclass(frozen=True)
class TableChangeRequest:
    """What the user asked for, validated for shape (no table needed). See the operator for meanings."""

    add_columns: dict[str, str] = field(default_factory=dict)
    rename_columns: dict[str, str] = field(default_factory=dict)
    widen_columns: dict[str, str] = field(default_factory=dict)
    add_partition_fields: tuple[TransformSpec, ...] = ()
    drop_partition_fields: tuple[str, ...] = ()
    partition_by: tuple[TransformSpec, ...] | None = None
    sort_order: tuple[SortTerm, ...] | None = None
    properties: dict[str, str] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict, compare=False)  # property key -> argument named in errors

    def summary(self) -> dict[str, Any]:
        """JSON-safe echo of the request (ledger ``details``)."""
        return {
            "add_columns": self.add_columns,
            "rename_columns": self.rename_columns,
            "widen_columns": self.widen_columns,
            "add_partition_fields": [t.text() for t in self.add_partition_fields],
            "drop_partition_fields": list(self.drop_partition_fields),
            "partition_by": None if self.partition_by is None else [t.text() for t in self.partition_by],
            "sort_order": None if self.sort_order is None else [s.text() for s in self.sort_order],
            "properties": self.properties,
        }


def _mapping(value: object, param: str, example: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise IcebergValidationError(f"{param}={value!r:.80} is not a mapping; pass e.g. {example}.")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def _items(value: object, param: str) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise IcebergValidationError(f"{param}={value!r:.80} is not a list; pass e.g. ['days(ts)', 'bucket(16, id)'].")
    return list(value)


def build_request(
    *,
    add_columns: Any = None,
    rename_columns: Any = None,
    widen_columns: Any = None,
    add_partition_fields: Any = None,
    drop_partition_fields: Any = None,
    partition_by: Any = None,
    sort_order: Any = None,
    properties: Any = None,
    bloom_filter_columns: Any = None,
    metrics_modes: Any = None,
) -> TableChangeRequest:
    """Validate the shape of every argument and fold column properties into ``properties``."""
    adds = _mapping(add_columns, "add_columns", "{'discount': 'decimal(12,2)'}")
    for name, spec in adds.items():
        validate_name(name, f"add_columns[{name!r}]")
        if parse_type(spec, f"add_columns[{name!r}]")[1]:
            raise IcebergValidationError(
                f"add_columns[{name!r}]={spec!r} adds a required column, which existing rows cannot satisfy; "
                "add it as optional (drop 'not null')."
            )
    renames = _mapping(rename_columns, "rename_columns", "{'amt': 'amount'}")
    for old, new in renames.items():
        validate_name(old, "rename_columns key")
        validate_name(new, f"rename_columns[{old!r}]")
        if old == new:
            raise IcebergValidationError(f"rename_columns[{old!r}]={new!r} renames a column onto itself; remove it.")
    if len(set(renames.values())) != len(renames):
        raise IcebergValidationError(f"rename_columns={renames!r} renames two columns to the same name; fix it.")
    widens = _mapping(widen_columns, "widen_columns", "{'order_id': 'long'}")
    for name, spec in widens.items():
        validate_name(name, "widen_columns key")
        parse_type(spec, f"widen_columns[{name!r}]")
    add_pf, drops, spec_by = _partition_request(add_partition_fields, drop_partition_fields, partition_by)
    props = _mapping(properties, "properties", "{'write.target-file-size-bytes': '134217728'}")
    origins = {k: f"properties[{k!r}]" for k in props}
    for key, value in _bloom_properties(bloom_filter_columns).items():
        props[key], origins[key] = value, f"bloom_filter_columns[{key.removeprefix(BLOOM_PREFIX)!r}]"
    for col, mode in _mapping(metrics_modes, "metrics_modes", "{'email': 'none'}").items():
        validate_name(col, "metrics_modes key")
        if (problem := metrics_mode_problem(mode)) is not None:
            raise IcebergValidationError(f"metrics_modes[{col!r}]={mode!r} {problem}.")
        props[METRICS_PREFIX + col], origins[METRICS_PREFIX + col] = mode.strip().lower(), f"metrics_modes[{col!r}]"
    check_property_values(props)
    return TableChangeRequest(
        add_columns=adds,
        rename_columns=renames,
        widen_columns=widens,
        add_partition_fields=add_pf,
        drop_partition_fields=drops,
        partition_by=spec_by,
        sort_order=None if sort_order is None else tuple(parse_sort_order(sort_order)),
        properties=props,
        origins=origins,
    )


def _partition_request(
    add_partition_fields: Any, drop_partition_fields: Any, partition_by: Any
) -> tuple[tuple[TransformSpec, ...], tuple[str, ...], tuple[TransformSpec, ...] | None]:
    add_pf = tuple(
        parse_transform(x, f"add_partition_fields[{i}]")
        for i, x in enumerate(_items(add_partition_fields, "add_partition_fields"))
    )
    for i, tf in enumerate(add_pf):
        if tf.kind == "void":
            raise IcebergValidationError(
                f"add_partition_fields[{i}]='void({tf.column})' adds nothing; to stop partitioning by a field "
                "use drop_partition_fields."
            )
    drops = tuple(str(x).strip() for x in _items(drop_partition_fields, "drop_partition_fields"))
    for i, item in enumerate(drops):
        if not BARE_COLUMN.match(item):  # a field name or a bare column is fine; else it must parse
            parse_transform(item, f"drop_partition_fields[{i}]")
    if partition_by is None:
        return add_pf, drops, None
    if add_pf or drops:
        raise IcebergValidationError(
            "partition_by (the whole spec) cannot be combined with add_partition_fields/drop_partition_fields; "
            "pass one or the other."
        )
    spec_by = tuple(
        parse_transform(x, f"partition_by[{i}]") for i, x in enumerate(_items(partition_by, "partition_by"))
    )
    return add_pf, drops, spec_by


def _bloom_properties(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, Sequence) and not isinstance(value, str):
        pairs = [(c, True) for c in value]
    else:
        raise IcebergValidationError(
            f"bloom_filter_columns={value!r:.80} is not a list or mapping; pass e.g. ['customer_id'] or "
            "{'customer_id': True, 'old_col': False}."
        )
    out = {}
    for col, enabled in pairs:
        validate_name(col, "bloom_filter_columns entry")
        out[BLOOM_PREFIX + str(col)] = "true" if params.flag(enabled, f"bloom_filter_columns[{col!r}]") else "false"
    return out


def check_property_values(props: Mapping[str, str]) -> None:
    """Values of well-known properties passed through ``properties`` (the other arguments check their own)."""
    for key, value in props.items():
        if key.startswith(METRICS_PREFIX) or key == METRICS_DEFAULT:
            if (problem := metrics_mode_problem(value)) is not None:
                raise IcebergValidationError(f"properties[{key!r}]={value!r} {problem}.")
        elif key.startswith(BLOOM_PREFIX) and value.lower() not in ("true", "false"):
            raise IcebergValidationError(f"properties[{key!r}]={value!r} is not a boolean; use 'true' or 'false'.")
        elif key == DISTRIBUTION_MODE and value not in ("none", "hash", "range"):
            raise IcebergValidationError(
                f"properties[{key!r}]={value!r} is not a distribution mode; use none, hash or range."
            )
        elif key in COPY_RETENTION_KEYS and (problem := copy_retention_problem(key, value)) is not None:
            raise IcebergValidationError(
                f"properties[{key!r}]={value!r} {problem}; set the days object-store versions or backups keep "
                "erased bytes, e.g. '30' (0 when there are none)."
            )
        elif key.startswith(BLOOM_FPP_PREFIX):
            try:
                ok = 0.0 < float(value) < 1.0
            except ValueError:
                ok = False
            if not ok:
                raise IcebergValidationError(
                    f"properties[{key!r}]={value!r} is not a probability; use a number between 0 and 1 such as 0.01."
                )


# ------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class Change:
    """One planned change; ``field_id`` (schema changes) lets apply find a renamed column, ``terms``
    carries a sort-order change's parsed terms (``before``/``after`` are texts for humans and the ledger)."""

    kind: str
    target: str
    before: str | None = None
    after: str | None = None
    field_id: int | None = None
    terms: tuple[SortTerm, ...] = field(default=(), compare=False, repr=False)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "before": self.before, "after": self.after}

    def __str__(self) -> str:
        return f"{self.kind} {self.target}: {self.before} -> {self.after}"


class _Columns:
    """Top-level columns as the plan goes: name -> (field id or None if added by this plan, type)."""

    def __init__(self, table: str, schema: Any) -> None:
        self.table = table
        self.by_name: dict[str, tuple[int | None, Any]] = {f.name: (f.field_id, f.field_type) for f in schema.fields}

    def name_of(self, field_id: int) -> str | None:
        return next((n for n, (fid, _) in self.by_name.items() if fid == field_id), None)

    def require(self, name: str, param: str) -> tuple[int | None, Any]:
        if name not in self.by_name:
            raise IcebergRefusedError(
                f"{param} names column {name!r}, which {self.table} does not have (columns: "
                f"{sorted(self.by_name)}); fix the name (after renames) or add the column first. Nothing was changed."
            )
        return self.by_name[name]


def plan_changes(
    table: str, schema: Any, spec: Any, sort_order: Any, properties: Mapping[str, str], request: TableChangeRequest
) -> list[Change]:
    """The changes that bring the table to ``request``; ``[]`` when it is already there.

    Order (also the apply order): renames, adds, widenings (names after renames), then partition
    fields, sort order and properties, which see the new names and columns.
    """
    cols = _Columns(table, schema)
    changes = _plan_schema(cols, request)
    changes += _plan_partition(cols, spec, request)
    changes += _plan_sort_order(cols, sort_order, request)
    changes += _plan_properties(cols, properties, request)
    return changes


def _plan_schema(cols: _Columns, request: TableChangeRequest) -> list[Change]:
    changes = []
    for old, new in request.rename_columns.items():
        if old in cols.by_name and new in cols.by_name:
            raise IcebergRefusedError(
                f"rename_columns[{old!r}]={new!r} would rename onto existing column {new!r} of {cols.table}; "
                "pick an unused name (or drop the other column first). Nothing was changed."
            )
        if old not in cols.by_name and new not in cols.by_name:
            cols.require(old, f"rename_columns[{old!r}]")
        if old in cols.by_name:  # else already renamed: new exists, old is gone
            fid, ftype = cols.by_name.pop(old)
            cols.by_name[new] = (fid, ftype)
            changes.append(Change("rename_column", old, old, new, fid))
    for name, spec in request.add_columns.items():
        ftype, _ = parse_type(spec, f"add_columns[{name!r}]")
        if name in cols.by_name:
            have = cols.by_name[name][1]
            if have != ftype:
                raise IcebergRefusedError(
                    f"add_columns[{name!r}]={spec!r}: {cols.table} already has {name!r} as {type_name(have)}; "
                    f"to widen it use widen_columns, otherwise choose another name. Nothing was changed."
                )
            continue
        cols.by_name[name] = (None, ftype)
        changes.append(Change("add_column", name, None, type_name(ftype)))
    for name, spec in request.widen_columns.items():
        param = f"widen_columns[{name!r}]"
        fid, have = cols.require(name, param)
        want, _ = parse_type(spec, param)
        if have == want:
            continue
        if fid is None:
            raise IcebergRefusedError(f"{param}={spec!r}: {name!r} is added by this change; add it with type {spec!r}.")
        if (problem := promotion_problem(have, want)) is not None:
            raise IcebergRefusedError(
                f"{param}={spec!r} refused: {name!r} is {type_name(have)} and {problem}. Only int -> long, "
                "float -> double and decimal(P,S) -> decimal(P',S) with P' > P are safe; for anything else add a "
                "new column and backfill it. Nothing was changed."
            )
        cols.by_name[name] = (fid, want)
        changes.append(Change("widen_column", name, type_name(have), type_name(want), fid))
    return changes


def _check_applies(cols: _Columns, tf: TransformSpec, param: str, item: Any) -> int | None:
    fid, ftype = cols.require(tf.column, param)
    if not tf.to_pyiceberg().can_transform(ftype):
        raise IcebergRefusedError(
            f"{param}={item!r}: transform {tf.kind} does not apply to {tf.column!r} ({type_name(ftype)}); "
            "use a transform for that type (day/hour for timestamps and dates, bucket or truncate for ids and "
            "strings, identity for anything). Nothing was changed."
        )
    return fid


def _current_fields(cols: _Columns, spec: Any) -> list[tuple[str, str, str]]:
    """``(field name, source column now, transform text)`` of the current spec (void fields skipped)."""
    out = []
    for pf in spec.fields:
        tf = str(pf.transform)
        if tf == "void":
            continue
        out.append((pf.name, cols.name_of(pf.source_id) or f"#{pf.source_id}", tf))
    return out


def _same(tf: TransformSpec, column: str, transform: str) -> bool:
    return tf.column == column and str(tf.to_pyiceberg()) == transform


def _field_text(column: str, transform: str) -> str:
    return column if transform == "identity" else f"{transform}({column})"


def _plan_partition(cols: _Columns, spec: Any, request: TableChangeRequest) -> list[Change]:
    current = _current_fields(cols, spec)
    if request.partition_by is not None:
        wanted = tuple(tf for tf in request.partition_by if tf.kind != "void")  # void = no field
        for i, tf in enumerate(wanted):
            _check_applies(cols, tf, f"partition_by[{i}]", tf.text())
        dropped = [f for f in current if not any(_same(tf, f[1], f[2]) for tf in wanted)]
    else:
        dropped = []
        for i, item in enumerate(request.drop_partition_fields):
            hit = [f for f in current if f[0] == item]  # a partition field name
            if not hit:
                tf = parse_transform(item, f"drop_partition_fields[{i}]")
                cols.require(tf.column, f"drop_partition_fields[{i}]")
                hit = [f for f in current if _same(tf, f[1], f[2])]
            dropped += [f for f in hit if f not in dropped]
        for i, tf in enumerate(request.add_partition_fields):
            _check_applies(cols, tf, f"add_partition_fields[{i}]", tf.text())
            if any(_same(tf, f[1], f[2]) for f in dropped):
                raise IcebergValidationError(
                    f"add_partition_fields[{i}]={tf.text()!r} is also dropped by drop_partition_fields; keep one of them."
                )
        wanted = request.add_partition_fields
    adds = [tf for tf in wanted if not any(_same(tf, c, t) for _, c, t in current)]
    return [Change("remove_partition_field", n, _field_text(c, t), None) for n, c, t in dropped] + [
        Change("add_partition_field", tf.text(), None, tf.text()) for tf in adds
    ]


def _order_text(cols: _Columns, sort_order: Any) -> list[str]:
    from pyiceberg.table.sorting import NullOrder, SortDirection

    out = []
    for sf in sort_order.fields if sort_order is not None else []:
        col = cols.name_of(sf.source_id) or f"#{sf.source_id}"
        body = _field_text(col, str(sf.transform))
        direction = "ASC" if sf.direction == SortDirection.ASC else "DESC"
        nulls = "FIRST" if sf.null_order == NullOrder.NULLS_FIRST else "LAST"
        out.append(f"{body} {direction} NULLS {nulls}")
    return out


def _plan_sort_order(cols: _Columns, sort_order: Any, request: TableChangeRequest) -> list[Change]:
    if request.sort_order is None:
        return []
    for i, term in enumerate(request.sort_order):
        _check_applies(cols, term.transform, f"sort_order[{i}]", term.text())
    have = _order_text(cols, sort_order)
    want = [t.text() for t in request.sort_order]
    if have == want:
        return []
    return [
        Change(
            "set_sort_order",
            "sort_order",
            ", ".join(have) or "unsorted",
            ", ".join(want) or "unsorted",
            terms=request.sort_order,
        )
    ]


def _plan_properties(cols: _Columns, properties: Mapping[str, str], request: TableChangeRequest) -> list[Change]:
    wanted = dict(request.properties)
    if "format-version" in wanted:
        raise IcebergRefusedError(
            f"properties['format-version']={wanted['format-version']!r}: the format version is not a table change "
            "this operator makes (pyiceberg 0.12 writes format-version 2 only); remove it. Nothing was changed."
        )
    for key in wanted:
        for prefix in COLUMN_PROPERTY_PREFIXES:
            if key.startswith(prefix):
                cols.require(key[len(prefix) :], request.origins.get(key, f"properties[{key!r}]"))
    changes = []
    removes = []
    for old, new in request.rename_columns.items():  # column properties follow a rename
        for prefix in COLUMN_PROPERTY_PREFIXES:
            if prefix + old in properties and new in cols.by_name:
                wanted.setdefault(prefix + new, properties[prefix + old])
                removes.append(prefix + old)
    for key, value in wanted.items():
        if properties.get(key) != value:
            changes.append(Change("set_property", key, properties.get(key), value))
    changes += [Change("remove_property", key, properties[key], None) for key in removes if key not in wanted]
    return changes


def describe(changes: Sequence[Change]) -> str:
    return "; ".join(str(c) for c in changes) or "no changes"
