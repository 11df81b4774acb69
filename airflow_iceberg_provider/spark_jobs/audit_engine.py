"""Spark side of the WAP audit: evaluate data checks over one snapshot reading as little as possible.

Shipped with ``--py-files`` next to ``audit_checks`` (pure Python: specs, SQL, verdicts) and
used by the ``wap_audit`` job and ``bench/wap_audit.py``. Three ways to get a check's value,
cheapest first:

``change_set`` (incremental)
    The branch only appended rows since its base snapshot, and an earlier audit recorded
    this check's value for that base (``base_values``, found on the Airflow side): the
    check is evaluated over the appended data files only (Iceberg's incremental append
    scan between the two snapshots) and combined with the base value
    (:func:`audit_checks.combine`). Duplicates across the two parts are counted by a
    semi-join whose base side is bounded by the appended values' min/max, so Iceberg skips
    every base file whose column bounds cannot hold such a value.
``metadata``
    When every shuffle-free check is a ``COUNT(*)``, null count or ``MIN``/``MAX``, Iceberg
    answers them from the manifests' column metrics (Spark's aggregate push-down) if Spark's
    plan shows it did so (exact metrics, no delete files), and the shuffle-free scan is
    skipped; otherwise they join that scan (measured: an extra metadata query does not make
    a scan that reads the same columns any cheaper).
``scan``
    Everything else: one shuffle-free aggregate pass, one sort-based pass for exact
    distinct counts and one filtered pass per partition clause of general aggregate
    predicates (:func:`audit_checks.build_audit_queries`).

If the incremental read fails (e.g. the base snapshot was expired meanwhile), the checks
fall back to a scan of the whole snapshot: the result is the same, only slower.
"""

from __future__ import annotations

import decimal
import logging
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

CHANGE_SET = "change_set"
METADATA = "metadata"
SCAN = "scan"
_NUMERIC = ("byte", "short", "integer", "long", "float", "double", "decimal")


@dataclass
class Evaluation:
    """Observed values of the data checks and how each was obtained."""

    observed: dict[str, float | None] = field(default_factory=dict)
    methods: dict[str, str] = field(default_factory=dict)
    queries: list[tuple[str, float]] = field(default_factory=list)  # Spark queries run: (label, seconds)
    planning: list[tuple[str, float]] = field(default_factory=list)  # analysis, file plans: (label, seconds)
    fallback: str | None = None  # why an incremental evaluation fell back to a scan

    def count(self, method: str) -> int:
        return sum(1 for m in self.methods.values() if m == method)


def detect_modes(spark: Any, checks: list, source: str) -> dict[str, str]:
    """Row or aggregate predicate, per general table check, decided by Spark's analyser (no data read).

    All statements are analysed together first (one analysis when they are all row
    predicates, the usual case), one by one only if that fails.
    """
    import audit_checks as ac

    general = [c for c in checks if c.kind == "table" and not c.aggregate]
    if not general:
        return {}
    try:
        _ = spark.sql(ac.mode_probe_sql(general, source)).schema  # analysis only (eager), no data read
        return {c.name: ac.ROW for c in general}
    except Exception:  # noqa: BLE001 - at least one aggregate predicate: decide one by one
        pass
    modes = {}
    for check in general:
        try:
            _ = spark.sql(ac.mode_probe_sql([check], source)).schema
            modes[check.name] = ac.ROW
        except Exception:  # nested aggregate -> the statement is an aggregate predicate
            modes[check.name] = ac.AGGREGATE
    return modes


def numeric_aggregates_only(spark: Any, checks: list, source: str) -> list:
    """Demote single-aggregate table checks over non-numeric columns to general predicates."""
    import audit_checks as ac

    types = {f.name.lower(): f.dataType.typeName() for f in spark.sql(f"SELECT * FROM {source}").schema.fields}
    out = []
    for check in checks:
        if check.kind == "table" and check.aggregate in ("sum", "min", "max"):
            if types.get((check.column or "").lower(), "").split("(")[0] not in _NUMERIC:
                check = ac.as_general_statement(check)
        out.append(check)
    return out


def aggregate_pushed_down(df: Any) -> bool:
    """Whether Spark answers this aggregate from Iceberg metadata (the plan has no data scan)."""
    plan = df._jdf.queryExecution().executedPlan().toString()
    return "LocalTableScan" in plan and "BatchScan" not in plan


class AuditEngine:
    """Evaluate checks over ``table VERSION AS OF snapshot_id`` in one Spark session."""

    def __init__(self, spark: Any, table: str, *, buckets: int | None = None, driver_rows: int = 1_000_000) -> None:
        """
        :param driver_rows: up to this many appended rows, aggregate them on the driver (one
            shuffle-free projection collected as Arrow) instead of with Spark aggregates.
        """
        self.spark = spark
        self.table = table
        parallelism = int(spark.sparkContext.defaultParallelism)
        self.bucket_expr = "pmod(hash({v}), " + f"{buckets or max(8, 4 * parallelism)})"
        self.driver_rows = driver_rows
        self._views = 0

    def source(self, snapshot_id: int) -> str:
        return f"{self.table} VERSION AS OF {int(snapshot_id)}"

    def _run(self, ev: Evaluation, label: str, sql: str, args: dict[str, Any] | None = None) -> Any:
        start = time.monotonic()
        row = self.spark.sql(sql, args=args).collect()[0] if args else self.spark.sql(sql).collect()[0]
        ev.queries.append((label, time.monotonic() - start))
        return row

    def evaluate(
        self,
        checks: list,
        snapshot_id: int,
        *,
        base_snapshot_id: int | None = None,
        base_values: dict[str, float | None] | None = None,
        use_metadata: bool = True,
    ) -> tuple[Evaluation, list, dict[str, str]]:
        """Values of the column/table checks (change checks are computed on the Airflow side).

        :returns: the evaluation, the checks as evaluated (single-aggregate checks over
            non-numeric columns become general predicates) and the row/aggregate modes.
        """
        import audit_checks as ac

        source = self.source(snapshot_id)
        ev = Evaluation()
        start = time.monotonic()
        data = numeric_aggregates_only(self.spark, [c for c in checks if c.kind in ("column", "table")], source)
        modes = detect_modes(self.spark, data, source)
        ev.planning.append(("analyse", time.monotonic() - start))
        base_values = base_values or {}
        incremental = [
            c
            for c in data
            if base_snapshot_id is not None and c.name in base_values and ac.decomposable(c, modes.get(c.name))
        ]
        rest = [c for c in data if c not in incremental]
        if incremental:
            try:
                self._incremental(ev, incremental, snapshot_id, int(base_snapshot_id), base_values, modes)
                rest = [c for c in rest if c not in incremental]
            except Exception as err:  # noqa: BLE001 - any failure of the shortcut means: scan instead
                ev.fallback = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
                log.warning("Incremental audit not possible (%s); scanning the whole snapshot.", ev.fallback)
                for c in incremental:
                    ev.observed.pop(c.name, None)
                    ev.methods.pop(c.name, None)
                rest = data
        if rest:
            self._full(ev, rest, source, modes, use_metadata)
        evaluated = [next((d for d in data if d.name == c.name), c) for c in checks]
        return ev, evaluated, modes

    # ------------------------------------------------------------------ full snapshot
    def _full(self, ev: Evaluation, checks: list, source: str, modes: dict[str, str], use_metadata: bool) -> None:
        import audit_checks as ac

        remaining = list(checks)
        meta = ac.build_metadata_query(remaining, source) if use_metadata else None
        if meta is not None:
            answered = {name for _, name in meta.columns}
            if any(c.name not in answered and c.check_type not in ac.DISTINCT_CHECKS for c in remaining):
                meta = None  # the shuffle-free pass runs anyway, reading these columns: one query fewer
        if meta is not None:
            start = time.monotonic()
            df = self.spark.sql(meta.sql)
            if aggregate_pushed_down(df):
                row = df.collect()[0]
                ev.queries.append(("metadata", time.monotonic() - start))
                names = {name for _, name in meta.columns}
                for alias, name in meta.columns:
                    ev.observed[name] = row[alias]
                    ev.methods[name] = METADATA
                remaining = [c for c in remaining if c.name not in names]
        for i, query in enumerate(ac.build_audit_queries(remaining, source, modes, self.bucket_expr)):
            row = self._run(ev, f"scan{i}", query.sql)
            for alias, name in query.columns:
                ev.observed[name] = row[alias]
                ev.methods[name] = SCAN

    # --------------------------------------------------------------- appended rows only
    def _incremental(
        self,
        ev: Evaluation,
        checks: list,
        snapshot_id: int,
        base_snapshot_id: int,
        base_values: dict[str, float | None],
        modes: dict[str, str],
    ) -> None:
        import audit_checks as ac

        if snapshot_id == base_snapshot_id:  # nothing appended: the base's values are the branch's
            for c in checks:
                ev.observed[c.name] = base_values.get(c.name)
                ev.methods[c.name] = CHANGE_SET
            return
        self._views += 1
        view = f"__audit_appended_{self._views}"
        (
            self.spark.read.format("iceberg")
            .option("start-snapshot-id", str(base_snapshot_id))  # exclusive
            .option("end-snapshot-id", str(snapshot_id))  # inclusive; refuses non-append snapshots
            .load(self.table)
            .createOrReplaceTempView(view)
        )
        distinct = [c for c in checks if c.check_type in ac.DISTINCT_CHECKS]
        start = time.monotonic()
        appended = self.appended_files(base_snapshot_id, snapshot_id, {c.column for c in distinct})
        ev.planning.append(("plan appended files", time.monotonic() - start))
        if appended.records <= self.driver_rows:
            # one shuffle-free projection, collected as Arrow and aggregated on the driver
            projection = ac.driver_projection(checks, modes)
            start = time.monotonic()
            df = self.spark.sql(ac.driver_projection_sql(projection, view))
            columns = _arrow_columns(df, df._collect_as_arrow())
            change = ac.aggregate_columns(projection, columns)
            ev.queries.append(("appended", time.monotonic() - start))
        else:
            change = {}
            for i, query in enumerate(ac.build_audit_queries(checks, view, modes, self.bucket_expr)):
                row = self._run(ev, f"appended{i}", query.sql)
                change.update({name: row[alias] for alias, name in query.columns})
        for c in checks:
            overlap = 0.0
            if c.check_type in ac.DISTINCT_CHECKS and appended.records:
                overlap = self._overlap(ev, c, view, base_snapshot_id, appended.bounds.get(c.column))
            ev.observed[c.name] = ac.combine(c, base_values.get(c.name), change[c.name], overlap)
            ev.methods[c.name] = CHANGE_SET

    def _overlap(self, ev: Evaluation, check: Any, view: str, base_snapshot_id: int, bounds: Any) -> float:
        """Distinct appended values of the check that the base holds too (0 without reading when metrics prove it)."""
        import audit_checks as ac

        if bounds is not None:
            start = time.monotonic()
            in_range = self.base_files_in_range(base_snapshot_id, check.column, bounds)
            ev.planning.append((f"plan base files:{check.name}", time.monotonic() - start))
            if not in_range:
                return 0.0  # no base file's column bounds intersect the appended values' range
        sides, args = None, None
        if bounds is not None:
            sides = (bounds.lo_sql.format(p=":lo"), bounds.hi_sql.format(p=":hi"))
            args = {"lo": bounds.lo, "hi": bounds.hi}
        sql = ac.overlap_query(check, view, self.source(base_snapshot_id), sides)
        return float(self._run(ev, f"overlap:{check.name}", sql, args)["overlap"])

    def _jtable(self) -> Any:
        return self.spark._jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, self.table
        )

    def appended_files(self, base_snapshot_id: int, snapshot_id: int, columns: set) -> Appended:
        """Row count of the data files appended after the base, and per column the range their values span.

        Read through Iceberg's Java API (an incremental append scan's file plan: manifests only,
        no Spark job). A column gets no range, so its overlap join reads the whole base, when
        any appended file lacks a bound or its type has no exact SQL literal here.
        """
        jvm = self.spark._jvm
        jtable = self._jtable()
        schema = jtable.schema()
        fields = {}
        for col in columns:
            fld = schema.caseInsensitiveFindField(col)
            type_id = fld.type().typeId().toString() if fld is not None else None
            if type_id == "TIMESTAMP" and not fld.type().shouldAdjustToUTC():
                continue
            if type_id in _BOUND_LITERALS:
                fields[col] = fld
        found: dict[str, list] = {}  # column -> [java lo, java hi, python lo, python hi]
        records = 0
        tasks = (
            jtable.newIncrementalAppendScan()
            .fromSnapshotExclusive(base_snapshot_id)
            .toSnapshot(snapshot_id)
            .includeColumnStats()
            .planFiles()
        )
        conv = jvm.org.apache.iceberg.types.Conversions
        try:
            iterator = tasks.iterator()
            while iterator.hasNext():
                data_file = iterator.next().file()
                records += int(data_file.recordCount())
                lower, upper = data_file.lowerBounds(), data_file.upperBounds()
                for col, fld in list(fields.items()):
                    fid = fld.fieldId()
                    if lower is None or upper is None or not lower.containsKey(fid) or not upper.containsKey(fid):
                        fields.pop(col)  # unknown range: no pruning for this column
                        found.pop(col, None)
                        continue
                    jlo = conv.fromByteBuffer(fld.type(), lower.get(fid))
                    jhi = conv.fromByteBuffer(fld.type(), upper.get(fid))
                    lo, hi = _python_value(jlo), _python_value(jhi)
                    if col not in found:
                        found[col] = [jlo, jhi, lo, hi]
                        continue
                    if lo < found[col][2]:
                        found[col][0], found[col][2] = jlo, lo
                    if hi > found[col][3]:
                        found[col][1], found[col][3] = jhi, hi
        finally:
            tasks.close()
        bounds = {}
        for col, (jlo, jhi, lo, hi) in found.items():
            wrap = _BOUND_LITERALS[fields[col].type().typeId().toString()]
            bounds[col] = Bounds(fields[col].name(), jlo, jhi, lo, hi, wrap, wrap)
        return Appended(records, bounds)

    def base_files_in_range(self, base_snapshot_id: int, column: str, bounds: Bounds) -> bool:
        """Whether any data file of the base snapshot may hold a value in ``bounds`` (Iceberg's metrics pruning)."""
        exprs = self.spark._jvm.org.apache.iceberg.expressions.Expressions
        where = getattr(exprs, "and")(
            exprs.greaterThanOrEqual(bounds.field, bounds.jlo), exprs.lessThanOrEqual(bounds.field, bounds.jhi)
        )
        tasks = self._jtable().newScan().useSnapshot(base_snapshot_id).filter(where).planFiles()
        try:
            return bool(tasks.iterator().hasNext())
        finally:
            tasks.close()


@dataclass(frozen=True)
class Bounds:
    """The range of a column's values in the appended files (Java values for Iceberg, Python ones for SQL)."""

    field: str
    jlo: Any
    jhi: Any
    lo: Any
    hi: Any
    lo_sql: str
    hi_sql: str


@dataclass(frozen=True)
class Appended:
    records: int
    bounds: dict[str, Bounds]


def _arrow_columns(df: Any, batches: list) -> list:
    """The collected record batches as one Arrow array per column (typed, also when empty)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    table = pa.Table.from_batches(batches, schema=None if batches else to_arrow_schema(df.schema))
    return list(table.columns)


#: Iceberg type id -> SQL that turns the metrics' value (a parameter ``{p}``) into a Spark literal.
#: Not FLOAT/DOUBLE (NaN is outside the bounds yet equal to itself in Spark) and not timestamps
#: without zone (Spark compares them through the session time zone).
_BOUND_LITERALS = {
    "INTEGER": "{p}",
    "LONG": "{p}",
    "DECIMAL": "{p}",
    "STRING": "{p}",  # truncated bounds stay bounds: a prefix is <= and the incremented prefix >=
    "DATE": "date_from_unix_date({p})",  # days since epoch
    "TIMESTAMP": "timestamp_micros({p})",  # with zone: micros since epoch (UTC)
}


def _python_value(value: Any) -> Any:
    """A Java value from ``Conversions.fromByteBuffer`` as a Python value (strings arrive as CharBuffers)."""
    if isinstance(value, (int, float, decimal.Decimal, str)):
        return value
    return str(value.toString())
