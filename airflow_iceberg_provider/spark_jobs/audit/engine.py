"""Spark side of the WAP audit: evaluate data checks over one snapshot reading as little as possible.

Shipped with ``--py-files`` next to ``audit_sql`` (the checks' SQL; the specs are
:mod:`airflow_iceberg_provider.core.audit_checks`) and
used by the ``wap_audit`` job and ``bench/wap_audit.py``. Three ways to get a check's value,
cheapest first:

``change_set`` (incremental)
    The branch only appended rows since its base snapshot, and an earlier audit recorded
    this check's value for that base (``base_values``, found on the Airflow side): the
    check is evaluated over the appended data files only (Iceberg's incremental append
    scan between the two snapshots) and combined with the base value
    (:func:`audit_sql.combine`). Duplicates across the two parts are counted by a
    semi-join whose base side is bounded by the appended values' min/max, so Iceberg skips
    every base file whose column bounds cannot hold such a value. The driver reads the
    appended Parquet files itself (local or S3, :mod:`audit_files`) and evaluates the checks
    with :mod:`arrow_sql` (no Spark job) when it can do so exactly; otherwise one Spark
    projection reads them.
``metadata``
    When every shuffle-free check is a ``COUNT(*)``, null count or ``MIN``/``MAX``, Iceberg
    answers them from the manifests' column metrics (Spark's aggregate push-down) if Spark's
    plan shows it did so (exact metrics, no delete files), and the shuffle-free scan is
    skipped; otherwise they join that scan (measured: an extra metadata query does not make
    a scan that reads the same columns any cheaper).
``scan``
    Everything else: one shuffle-free aggregate pass, one sort-based pass for exact
    distinct counts and one filtered pass per partition clause of general aggregate
    predicates (:func:`audit_sql.build_audit_queries`). A snapshot of at most
    ``driver_rows`` rows (``snapshot_records``, from its summary) whose checks include an
    exact distinct count and all have a per-row value is read instead by one shuffle-free
    projection, collected as Arrow and aggregated on the driver, as the appended rows are,
    with no metadata query first: the two shuffles of an exact distinct count cost more than
    collecting a small snapshot's columns, and that one query answers every check.

If the incremental read fails (e.g. the base snapshot was expired meanwhile), the checks
fall back to a scan of the whole snapshot: the result is the same, only slower.
"""

from __future__ import annotations

import decimal
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from airflow_iceberg_provider.core import audit_checks as ck
from airflow_iceberg_provider.core.spark_types import spark_type_family
from airflow_iceberg_provider.spark_jobs import arrow_sql
from airflow_iceberg_provider.spark_jobs._compat import collect_arrow_batches, driver_jvm, physical_plan
from airflow_iceberg_provider.spark_jobs.audit.files import (
    _BOUND_LITERALS,
    Bounds,
    Field,
    column_bounds,
    read_parquet_columns,
    s3_options,
    schema_fields,
)
from airflow_iceberg_provider.spark_jobs.table_access import TableAccess, for_session

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
    appended_read_by: str | None = None  # "driver" (Parquet files read in the driver) or "spark"
    driver_refused: str | None = None  # why the driver did not read the appended rows itself

    def count(self, method: str) -> int:
        return sum(1 for m in self.methods.values() if m == method)


def detect_modes(
    spark: Any, checks: list, source: str, column_types: Callable[[], dict[str, str]] | None = None
) -> dict[str, str]:
    """Row or aggregate predicate, per general table check, decided without reading data.

    A statement in :mod:`arrow_sql`'s subset (which has no aggregate functions) over
    existing columns (``column_types``) is a row predicate. The others are decided by
    Spark's analyser: all together first (one analysis when they are all row predicates,
    the usual case), one by one only if that fails.
    """
    from airflow_iceberg_provider.spark_jobs.audit import sql as ac

    general = [c for c in checks if c.kind == "table" and not c.aggregate]
    if not general:
        return {}
    known: dict[str, str] = {}
    if column_types is not None:
        for check in general:
            try:
                columns = arrow_sql.parse_columns(check.statement)
            except arrow_sql.Unsupported:
                continue
            if columns <= column_types().keys():
                known[check.name] = ck.ROW
    general = [c for c in general if c.name not in known]
    if not general:
        return known
    try:
        _ = spark.sql(ac.mode_probe_sql(general, source)).schema  # analysis only (eager), no data read
        return known | {c.name: ck.ROW for c in general}
    except Exception:  # noqa: BLE001 - at least one aggregate predicate: decide one by one
        pass
    modes = dict(known)
    for check in general:
        try:
            _ = spark.sql(ac.mode_probe_sql([check], source)).schema
            modes[check.name] = ck.ROW
        except Exception:  # nested aggregate -> the statement is an aggregate predicate
            modes[check.name] = ck.AGGREGATE
    return modes


def numeric_aggregates_only(checks: list, column_types: Callable[[], dict[str, str]]) -> list:
    """Demote single-aggregate table checks over non-numeric columns to general predicates.

    :param column_types: lower-case column name -> Spark type name (called only when needed).
    """

    if not any(c.kind == "table" and c.aggregate in ("sum", "min", "max") for c in checks):
        return list(checks)
    types = column_types()
    out = []
    for check in checks:
        if check.kind == "table" and check.aggregate in ("sum", "min", "max"):
            if types.get((check.column or "").lower(), "") not in _NUMERIC:
                check = ck.as_general_statement(check)
        out.append(check)
    return out


def aggregate_pushed_down(df: Any) -> bool:
    """Whether Spark answers this aggregate from Iceberg metadata (the plan has no data scan)."""
    plan = physical_plan(df)
    return "LocalTableScan" in plan and "BatchScan" not in plan


class AuditEngine:
    """Evaluate checks over ``table VERSION AS OF snapshot_id`` in one Spark session."""

    def __init__(
        self,
        spark: Any,
        table: str,
        *,
        buckets: int | None = None,
        driver_rows: int = 1_000_000,
        driver_read: bool = True,
        access: TableAccess | None = None,
    ) -> None:
        """
        :param driver_rows: up to this many appended rows, aggregate them on the driver
            instead of with Spark aggregates.
        :param driver_read: let the driver read those rows from the appended Parquet files
            itself when it can evaluate every check exactly (:mod:`arrow_sql`); otherwise
            (or ``False``) a shuffle-free Spark projection is collected as Arrow.
        :param access: the job's table access (:func:`~.table_access.for_session` of ``spark`` when not given).
        """
        self.spark = spark
        self.table = table
        self.access = access if access is not None else for_session(spark)
        parallelism = self.access.default_parallelism()
        self.bucket_expr = "pmod(hash({v}), " + f"{buckets or max(8, 4 * parallelism)})"
        self.driver_rows = driver_rows
        self.driver_read = driver_read
        self._jtable_stale = False
        self._types_cache: dict[str, str] | None = None
        self._fields_cache: dict[str, Field] | None = None
        self._snapshot_id = 0
        self._views = 0
        self._object_store_cache: Any = None

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
        snapshot_records: int | None = None,
        snapshot_schema: str | None = None,
    ) -> tuple[Evaluation, list, dict[str, str]]:
        """Values of the column/table checks (change checks are computed on the Airflow side).

        :param snapshot_records: the snapshot's ``total-records`` (its summary, an upper bound
            of the rows it reads): small snapshots are aggregated on the driver.
        :param snapshot_schema: the Iceberg schema JSON the snapshot was written with, when the
            caller has it (saves reading the table metadata).
        :returns: the evaluation, the checks as evaluated (single-aggregate checks over
            non-numeric columns become general predicates) and the row/aggregate modes.
        """
        from airflow_iceberg_provider.spark_jobs.audit import sql as ac

        source = self.source(snapshot_id)
        self._jtable_stale = True
        self._types_cache = None
        self._fields_cache = schema_fields(snapshot_schema) if snapshot_schema else None
        self._snapshot_id = int(snapshot_id)
        ev = Evaluation()
        start = time.monotonic()
        data = numeric_aggregates_only(
            [c for c in checks if c.kind in ("column", "table")], lambda: self._column_types(source)
        )
        modes = detect_modes(self.spark, data, source, lambda: self._column_types(source))
        ev.planning.append(("analyse", time.monotonic() - start))
        base_values = base_values or {}
        incremental = [
            c
            for c in data
            if base_snapshot_id is not None and c.name in base_values and ac.decomposable(c, modes.get(c.name))
        ]
        rest = [c for c in data if c not in incremental]
        if incremental and base_snapshot_id is not None:
            try:
                self._incremental(ev, incremental, snapshot_id, int(base_snapshot_id), base_values, modes)
            except Exception as err:  # noqa: BLE001 - any failure of the shortcut means: scan instead
                ev.fallback = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
                log.warning("Incremental audit not possible (%s); scanning the whole snapshot.", ev.fallback)
                for c in incremental:
                    ev.observed.pop(c.name, None)
                    ev.methods.pop(c.name, None)
                rest = data
        if rest:
            self._full(ev, rest, source, modes, use_metadata, snapshot_records)
        evaluated = [next((d for d in data if d.name == c.name), c) for c in checks]
        return ev, evaluated, modes

    # ------------------------------------------------------------------ full snapshot
    def _full(
        self,
        ev: Evaluation,
        checks: list,
        source: str,
        modes: dict[str, str],
        use_metadata: bool,
        records: int | None = None,
    ) -> None:
        from airflow_iceberg_provider.spark_jobs.audit import sql as ac

        remaining = list(checks)
        if self._projectable(remaining, modes, records):  # one query for everything, no metadata query first
            self._project_checks(ev, remaining, modes, source, int(records or 0))
            return
        meta = ac.build_metadata_query(remaining, source) if use_metadata else None
        minmax = [c for c in remaining if (c.aggregate if c.kind == "table" else c.check_type) in ("min", "max")]
        if meta is not None and minmax:
            # metadata MIN/MAX order values natively, the scan as numbers: the same only for numbers and timestamps
            types, ordered = self._column_types(source), (*_NUMERIC, "timestamp")
            keep = [c for c in remaining if c not in minmax or types.get(c.column.lower(), "") in ordered]
            meta = ac.build_metadata_query(keep, source)
        if meta is not None:
            answered = {name for _, name in meta.columns}
            if any(c.name not in answered and c.check_type not in ck.DISTINCT_CHECKS for c in remaining):
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
        from airflow_iceberg_provider.spark_jobs.audit import sql as ac

        if snapshot_id == base_snapshot_id:  # nothing appended: the base's values are the branch's
            for c in checks:
                ev.observed[c.name] = base_values.get(c.name)
                ev.methods[c.name] = CHANGE_SET
            return
        start = time.monotonic()
        self.require_appends_only(base_snapshot_id, snapshot_id)
        # the driver reads the data itself, so it needs no metrics; a Spark read uses them
        appended = self.appended_files(base_snapshot_id, snapshot_id, checks, metrics=not self.driver_read)
        ev.planning.append(("plan appended files", time.monotonic() - start))
        direct = None
        if self.driver_read and appended.records <= self.driver_rows and appended.locations is not None:
            try:
                direct = self._direct(ev, checks, modes, appended, snapshot_id)
                ev.appended_read_by = "driver"
            except arrow_sql.Unsupported as err:  # outside what the driver evaluates exactly: Spark reads the rows
                ev.driver_refused = str(err)[:300]
                log.info("Appended rows read by Spark, not the driver: %s", ev.driver_refused)
        view = None

        def appended_view() -> str:
            nonlocal view
            if view is None:
                self._views += 1
                view = f"__audit_appended_{self._views}"
                start = time.monotonic()
                (
                    self.spark.read.format("iceberg")
                    .option("start-snapshot-id", str(base_snapshot_id))  # exclusive
                    .option("end-snapshot-id", str(snapshot_id))  # inclusive; refuses non-append snapshots
                    .load(self.table)
                    .createOrReplaceTempView(view)
                )
                ev.planning.append(("register appended view", time.monotonic() - start))
            return view

        if direct is not None:
            change, bounds = direct
        else:
            if self.driver_read:  # planned without metrics for the driver, which did not read after all
                start = time.monotonic()
                appended = self.appended_files(base_snapshot_id, snapshot_id, checks)
                ev.planning.append(("read appended files' metrics", time.monotonic() - start))
            metric_bounds: dict[str, Bounds | None] = dict(appended.bounds)
            change, bounds = dict(appended.values), metric_bounds  # answered by the appended files' metrics
            ev.appended_read_by = "spark"
            self._spark_change(
                ev, [c for c in checks if c.name not in change], modes, appended, appended_view(), change
            )
        for c in checks:
            overlap = 0.0
            no_values = c.column in bounds and bounds[c.column] is None  # only NULLs appended: nothing shared
            if c.check_type in ck.DISTINCT_CHECKS and appended.records and not no_values:
                overlap = self._overlap(ev, c, appended_view, base_snapshot_id, bounds.get(c.column))
            ev.observed[c.name] = ac.combine(c, base_values.get(c.name), change[c.name], overlap)
            ev.methods[c.name] = CHANGE_SET

    def _spark_change(
        self, ev: Evaluation, rest: list, modes: dict[str, str], appended: Appended, view: str, change: dict
    ) -> None:
        """Values of ``rest`` over the appended rows, evaluated by Spark (into ``change``)."""
        from airflow_iceberg_provider.spark_jobs.audit import sql as ac

        if rest and appended.records <= self.driver_rows:
            change.update(self._project(ev, "appended", rest, modes, view, appended.records))
        elif rest:
            for i, query in enumerate(ac.build_audit_queries(rest, view, modes, self.bucket_expr)):
                row = self._run(ev, f"appended{i}", query.sql)
                change.update({name: row[alias] for alias, name in query.columns})

    def _projectable(self, checks: list, modes: dict[str, str], records: int | None) -> bool:
        """A small snapshot (at most ``driver_rows``) whose checks need an exact distinct count (two shuffles in
        Spark) and all have a per-row value: one projection aggregated on the driver is cheaper."""
        from airflow_iceberg_provider.spark_jobs.audit import sql as ac

        if records is None or records > self.driver_rows:
            return False
        if not any(c.check_type in ck.DISTINCT_CHECKS for c in checks):
            return False
        return all(ac.decomposable(c, modes.get(c.name)) for c in checks)

    def _project_checks(self, ev: Evaluation, checks: list, modes: dict[str, str], source: str, records: int) -> None:
        for name, value in self._project(ev, "projection", checks, modes, source, records).items():
            ev.observed[name] = value
            ev.methods[name] = SCAN

    def _project(
        self, ev: Evaluation, label: str, checks: list, modes: dict[str, str], source: str, records: int
    ) -> dict[str, float | None]:
        """Values of decomposable ``checks`` over a small relation: one shuffle-free projection, collected as
        Arrow and aggregated on the driver with Spark's semantics (:func:`audit_sql.aggregate_columns`)."""
        from airflow_iceberg_provider.spark_jobs.audit import sql as ac

        projection = ac.driver_projection(checks, modes)
        start = time.monotonic()
        df = self.spark.sql(ac.driver_projection_sql(projection, source))
        with _conf(self.spark, "spark.sql.execution.arrow.maxRecordsPerBatch", str(max(1, records))):
            batches = _collect_arrow(df)  # few large batches: measured ~25 % faster than 10k-row ones
        values = ac.aggregate_columns(projection, _arrow_columns(df, batches))
        ev.queries.append((label, time.monotonic() - start))
        return values

    def _direct(
        self, ev: Evaluation, checks: list, modes: dict[str, str], appended: Appended, snapshot_id: int
    ) -> tuple[dict[str, float | None], dict[str, Bounds | None]]:
        """Values of ``checks`` over the appended rows, read from their Parquet files on the driver (no Spark job).

        The files of append-only snapshots are plain data files (no delete files), so
        reading them is reading the appended rows. Columns are matched by Iceberg field id
        (as Iceberg's own reader does), then the checks' per-row values are evaluated by
        :mod:`arrow_sql` with Spark's semantics and aggregated like the Spark-side
        projection. Raises :class:`arrow_sql.Unsupported` when any of that is not exact
        here (a file system other than local or S3, a column missing from an older file, an
        expression outside the subset): Spark then reads the rows. ``s3`` files are read
        through pyarrow's S3 file system with the session's S3A settings (:mod:`audit_files`).
        """
        from airflow_iceberg_provider.spark_jobs.audit import sql as ac

        projection = ac.driver_projection(checks, modes)
        fields = self._snapshot_fields(snapshot_id)
        needed: set[str] = set()
        for _, sql, _ in projection:
            needed |= arrow_sql.parse_columns(sql)
        for c in checks:
            if c.check_type in ck.DISTINCT_CHECKS:
                needed.add((c.column or "").lower())
        missing = needed - fields.keys()
        if missing:
            raise arrow_sql.Unsupported(f"columns {sorted(missing)} not in the snapshot's schema")
        start = time.monotonic()
        columns = read_parquet_columns(
            appended.locations or [], {n: fields[n] for n in needed}, appended.records, self._object_store
        )
        ev.planning.append(("read appended files", time.monotonic() - start))
        start = time.monotonic()
        tz = self.spark.conf.get("spark.sql.session.timeZone")
        evaluator = arrow_sql.Evaluator(columns, appended.records, tz)
        values = ac.aggregate_columns(projection, [evaluator.value(sql) for _, sql, _ in projection])
        bounds: dict[str, Bounds | None] = {}
        for c in checks:
            if c.check_type in ck.DISTINCT_CHECKS and c.column not in bounds:
                found = column_bounds(fields[c.column.lower()], columns[c.column.lower()][0])
                if found is None or isinstance(found, Bounds):  # False: a type without exact bounds
                    bounds[c.column] = found
        ev.planning.append(("evaluate on the driver", time.monotonic() - start))
        return values, bounds

    def _overlap(
        self, ev: Evaluation, check: Any, view: Callable[[], str], base_snapshot_id: int, bounds: Any
    ) -> float:
        """Distinct appended values of the check that the base holds too (0 without reading when metrics prove it)."""
        from airflow_iceberg_provider.spark_jobs.audit import sql as ac

        if bounds is not None:
            start = time.monotonic()
            in_range = self.base_files_in_range(base_snapshot_id, check.column, bounds)
            ev.planning.append((f"plan base files:{check.name}", time.monotonic() - start))
            if not in_range:
                return 0.0  # no base file's column bounds intersect the appended values' range
        sides, args = None, None
        if bounds is not None:
            sides = (bounds.sql.format(p=":lo"), bounds.sql.format(p=":hi"))
            args = {"lo": bounds.lo, "hi": bounds.hi}
        sql = ac.overlap_query(check, view(), self.source(base_snapshot_id), sides)
        return float(self._run(ev, f"overlap:{check.name}", sql, args)["overlap"])

    def _column_types(self, source: str) -> dict[str, str]:
        """Lower-case column name -> Spark type name (``decimal`` without precision) of the audited snapshot."""
        if self._types_cache is None:
            try:  # from the snapshot's Iceberg schema (manifest-free, no Spark analysis) ...
                fields = self._snapshot_fields(self._snapshot_id)
                self._types_cache = {n: spark_type_family(f.type) for n, f in fields.items()}
            except Exception:  # noqa: BLE001 - ... or, if that fails, as Spark's analyser sees it
                fields = self.spark.sql(f"SELECT * FROM {source}").schema.fields  # analysis only
                self._types_cache = {f.name.lower(): f.dataType.typeName().split("(")[0] for f in fields}
        return self._types_cache

    def _snapshot_fields(self, snapshot_id: int) -> dict[str, Field]:
        """Top-level fields of the schema ``VERSION AS OF snapshot_id`` reads, by lower-case name (one py4j call)."""
        if self._fields_cache is None:
            self._jtable()  # refreshed once per evaluation
            self._fields_cache = schema_fields(self.access.schema_json(self.table, snapshot_id))
        return self._fields_cache

    def _jtable(self) -> Any:
        """The Iceberg Java table (``None`` under Spark Connect); refreshed once per evaluation."""
        jtable = self.access.java_table(self.table, refresh=self._jtable_stale)
        self._jtable_stale = False
        return jtable

    def appended_files(
        self, base_snapshot_id: int, snapshot_id: int, checks: list, *, metrics: bool = True
    ) -> Appended:
        """The appended data files and what their metrics tell, without reading them.

        Read through Iceberg's Java API (an incremental append scan's file plan: manifests only,
        no Spark job): the appended row count; the files' locations when all are plain Parquet
        files (no delete files, not encrypted); and with ``metrics``: per unique/distinct
        column the range its values span (a column whose range is unknown, or whose type has
        no exact SQL literal here, gets none, and its overlap join then reads the whole base);
        and the appended rows' value of every check the metrics answer exactly
        (:func:`_metric_value`).
        """
        jtable = self._jtable()
        if jtable is None:
            # Spark Connect: the entries metadata table; no metrics, so Spark computes every check
            # over the appended rows and the overlap joins read the base without a pruning range.
            return self._appended_files_sql(base_snapshot_id, snapshot_id)
        fields = _metric_fields(jtable.schema(), checks) if metrics else {}
        stats = {col: _ColumnStats() for col in fields}
        records = files = 0
        locations: list[str] | None = []
        scan = jtable.newIncrementalAppendScan().fromSnapshotExclusive(base_snapshot_id).toSnapshot(snapshot_id)
        tasks = (scan.includeColumnStats() if metrics else scan).planFiles()
        conv = driver_jvm(self.spark).org.apache.iceberg.types.Conversions
        try:
            iterator = tasks.iterator()
            while iterator.hasNext():
                task = iterator.next()
                data_file = task.file()
                files += 1
                records += int(data_file.recordCount())
                if locations is not None:
                    locations = _with_plain_location(locations, task, data_file)
                if not fields:
                    continue
                if files > _MAX_METRIC_FILES:  # py4j calls per file add up: stop reading metrics
                    for st in stats.values():
                        st.complete = False
                    continue
                _add_file_metrics(data_file, fields, stats, conv)
        finally:
            tasks.close()
        values = {}
        for check in checks:
            known, value = _metric_value(check, records, fields.get(check.column or ""), stats.get(check.column or ""))
            if known:
                values[check.name] = value
        return Appended(records, _metric_bounds(fields, stats), values, locations)

    def _object_store(self) -> Any:
        """pyarrow's S3 file system for the driver read of ``s3`` data files (built once, from the session's S3A conf)."""
        if self._object_store_cache is None:
            from pyarrow import fs

            self._object_store_cache = fs.S3FileSystem(**s3_options(lambda key: self.spark.conf.get(key, None)))
        return self._object_store_cache

    def require_appends_only(self, base_snapshot_id: int, snapshot_id: int) -> None:
        """Raise unless ``base_snapshot_id`` is an ancestor of ``snapshot_id`` and every snapshot after it appends.

        Iceberg's incremental append scan silently *skips* other operations (an overwrite
        between the two would go unaudited), so this is checked here, not assumed.
        """
        self._append_chain(base_snapshot_id, snapshot_id)

    def _append_chain(self, base_snapshot_id: int, snapshot_id: int) -> list[int]:
        """The snapshots after ``base_snapshot_id`` up to ``snapshot_id``, walked from ``snapshot_id`` back
        through its parents (:meth:`~.table_access.TableAccess.lineage`), checked as in
        :meth:`require_appends_only`."""
        self._jtable()  # the table as of this evaluation
        chain: list[int] = []
        if int(snapshot_id) == int(base_snapshot_id):
            return chain
        for current, operation, parent in self.access.lineage(self.table, int(snapshot_id)):
            if operation != "append":
                raise ValueError(f"snapshot {current} is an {operation!r}, not an append")
            chain.append(current)
            if parent == int(base_snapshot_id):  # the base itself may be expired meanwhile
                return chain
        raise ValueError(f"snapshot {base_snapshot_id} is not an ancestor of {snapshot_id}")

    def _appended_files_sql(self, base_snapshot_id: int, snapshot_id: int) -> Appended:
        """The appended data files from the ``all_entries`` metadata table (row counts and locations, no metrics)."""
        chain = self._append_chain(base_snapshot_id, snapshot_id)
        if not chain:
            return Appended(0, {}, {}, [])
        ids = ", ".join(str(i) for i in chain)
        rows = self.spark.sql(
            "SELECT DISTINCT data_file.file_path, data_file.record_count, data_file.file_format, "
            f"data_file.key_metadata IS NULL AS plain FROM {self.table}.all_entries "
            f"WHERE status = 1 AND data_file.content = 0 AND snapshot_id IN ({ids})"
        ).collect()
        records = sum(int(r[1]) for r in rows)
        plain = all(str(r[2]).upper() == "PARQUET" and r[3] for r in rows)
        return Appended(records, {}, {}, [str(r[0]) for r in rows] if plain else None)

    def base_files_in_range(self, base_snapshot_id: int, column: str, bounds: Bounds) -> bool:
        """Whether any data file of the base snapshot may hold a value in ``bounds`` (Iceberg's metrics pruning)."""
        jtable = self._jtable()
        if jtable is None:  # Spark Connect: no pruning by the Java expression; the overlap query runs
            return True
        exprs = driver_jvm(self.spark).org.apache.iceberg.expressions.Expressions
        where = getattr(exprs, "and")(
            exprs.greaterThanOrEqual(bounds.field, bounds.jlo), exprs.lessThanOrEqual(bounds.field, bounds.jhi)
        )
        tasks = jtable.newScan().useSnapshot(base_snapshot_id).filter(where).planFiles()
        try:
            return bool(tasks.iterator().hasNext())
        finally:
            tasks.close()


@dataclass(frozen=True)
class Appended:
    records: int
    bounds: dict[str, Bounds]
    values: dict[str, float | None]  # check name -> its value over the appended rows, from metrics
    locations: list[str] | None = None  # the appended Parquet files (None: some file is not plain Parquet)


@dataclass
class _ColumnStats:
    """One column's metrics summed over the appended files."""

    complete: bool = True  # every file had null and value counts
    bounded: bool = True  # every file with a non-null value had both bounds
    nulls: int = 0
    non_null: int = 0
    nans: int | None = 0  # None: some file did not say
    lo: tuple | None = None  # (java value, python value)
    hi: tuple | None = None


#: Beyond this many appended files, metrics are not read (each file costs py4j round trips).
_MAX_METRIC_FILES = 500
#: Types whose metrics bounds are their exact min/max and whose CAST(... AS DOUBLE) we can mirror.
_EXACT_NUMERIC = ("INTEGER", "LONG", "DECIMAL", "FLOAT", "DOUBLE")


def _metric_fields(schema: Any, checks: list) -> dict[str, Any]:
    """Checked columns with primitive types (Iceberg Java fields): the ones whose metrics are read."""
    fields = {}
    for col in {c.column for c in checks if c.column}:
        fld = schema.caseInsensitiveFindField(col)
        if fld is not None and fld.type().isPrimitiveType():
            fields[col] = fld
    return fields


def _with_plain_location(locations: list[str], task: Any, data_file: Any) -> list[str] | None:
    """``locations`` plus this file's, or ``None`` once a file is not plain Parquet (deletes, encryption)."""
    plain = (
        str(data_file.format().toString()) == "PARQUET" and task.deletes().isEmpty() and data_file.keyMetadata() is None
    )
    if not plain:
        return None
    locations.append(str(data_file.location()))
    return locations


def _add_file_metrics(data_file: Any, fields: dict[str, Any], stats: dict[str, _ColumnStats], conv: Any) -> None:
    """Add one data file's null/value/NaN counts and bounds to each column's running stats."""
    maps = [data_file.nullValueCounts(), data_file.valueCounts(), data_file.nanValueCounts()]
    lower, upper = data_file.lowerBounds(), data_file.upperBounds()
    for col, fld in fields.items():
        st = stats[col]
        if not st.complete:
            continue
        fid = fld.fieldId()
        nulls, values, nans = (m.get(fid) if m is not None else None for m in maps)
        if nulls is None or values is None:
            st.complete = False
            continue
        st.nulls += int(nulls)
        st.non_null += int(values) - int(nulls)
        st.nans = None if nans is None or st.nans is None else st.nans + int(nans)
        if int(values) - int(nulls) == 0:
            continue  # only NULLs in this file: no bounds, nothing to bound
        if lower is None or upper is None or lower.get(fid) is None or upper.get(fid) is None:
            st.bounded = False
            continue
        jlo = conv.fromByteBuffer(fld.type(), lower.get(fid))
        jhi = conv.fromByteBuffer(fld.type(), upper.get(fid))
        lo, hi = _python_value(jlo), _python_value(jhi)
        if st.lo is None or lo < st.lo[1]:
            st.lo = (jlo, lo)
        if st.hi is None or hi > st.hi[1]:
            st.hi = (jhi, hi)


def _metric_bounds(fields: dict[str, Any], stats: dict[str, _ColumnStats]) -> dict[str, Bounds]:
    """Per column, the appended values' range when every file's metrics gave exact bounds of a literal type."""
    bounds = {}
    for col, fld in fields.items():
        st = stats[col]
        type_id = fld.type().typeId().toString()
        if type_id == "TIMESTAMP" and not fld.type().shouldAdjustToUTC():
            continue
        if st.complete and st.bounded and st.lo is not None and st.hi is not None and type_id in _BOUND_LITERALS:
            bounds[col] = Bounds(fld.name(), st.lo[0], st.hi[0], st.lo[1], st.hi[1], _BOUND_LITERALS[type_id])
    return bounds


def _metric_value(check: Any, records: int, fld: Any, st: _ColumnStats | None) -> tuple[bool, float | None]:
    """``(True, value)`` when the appended files' metrics give the check's exact value, else ``(False, None)``.

    Only checks without a partition clause: null counts, ``COUNT(*)``, ``COUNT(col)``, and
    min/max of integer, decimal, float/double (when the files report no NaN) and
    timestamp-with-zone columns (``CAST(ts AS DOUBLE)`` is seconds since the epoch).
    """
    if check.partition_clause:
        return False, None
    kind = check.aggregate if check.kind == "table" else check.check_type
    if check.kind == "table" and not check.aggregate:
        return False, None
    if kind == "count" and check.column is None:
        return True, float(records)
    if st is None or fld is None or not st.complete:
        return False, None
    if kind == "null_check":
        return True, float(st.nulls)
    if kind == "count":
        return True, float(st.non_null)
    if kind not in ("min", "max"):
        return False, None
    type_id = fld.type().typeId().toString()
    timestamp_tz = type_id == "TIMESTAMP" and fld.type().shouldAdjustToUTC()
    if not (type_id in _EXACT_NUMERIC or timestamp_tz):
        return False, None
    if type_id in ("FLOAT", "DOUBLE") and st.nans != 0:
        return False, None  # NaN is outside the bounds but is Spark's maximum
    if st.non_null == 0:
        return True, None  # MIN/MAX of no value is NULL
    if not st.bounded or st.lo is None or st.hi is None:
        return False, None
    value = (st.lo if kind == "min" else st.hi)[1]
    return True, float(value) / 1_000_000 if timestamp_tz else float(value)


@contextmanager
def _conf(spark: Any, key: str, value: str) -> Iterator[None]:
    """Set a session conf for the duration of a block, then restore it."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def _collect_arrow(df: Any) -> list:
    """The DataFrame's rows as Arrow record batches (spark-submit's driver, or the Connect client's stream)."""
    return collect_arrow_batches(df)


def _arrow_columns(df: Any, batches: list) -> list:
    """The collected record batches as one Arrow array per column (typed, also when empty)."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    table = pa.Table.from_batches(batches, schema=None if batches else to_arrow_schema(df.schema))
    return list(table.columns)


def _python_value(value: Any) -> Any:
    """A Java value from ``Conversions.fromByteBuffer`` as a Python value (strings arrive as CharBuffers)."""
    if isinstance(value, (int, float, decimal.Decimal, str)):
        return value
    return str(value.toString())
