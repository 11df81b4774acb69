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
    ``COUNT(*)``, null counts and ``MIN``/``MAX`` are answered by Iceberg from the manifests'
    column metrics (Spark's aggregate push-down), when Spark's plan shows it did so
    (exact metrics, no delete files); otherwise they join the scan.
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
import math
import time
from dataclasses import dataclass, field
from datetime import date, datetime
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
    queries: list[tuple[str, float]] = field(default_factory=list)  # (label, seconds)
    fallback: str | None = None  # why an incremental evaluation fell back to a scan

    def count(self, method: str) -> int:
        return sum(1 for m in self.methods.values() if m == method)


def detect_modes(spark: Any, checks: list, source: str) -> dict[str, str]:
    """Row or aggregate predicate, per general table check, decided by Spark's analyser (no data read)."""
    import audit_checks as ac

    modes = {}
    for check in checks:
        if check.kind != "table" or check.aggregate:
            continue
        try:
            _ = spark.sql(ac.mode_probe_sql(check, source)).schema  # analysis only (eager), no data read
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

    def __init__(self, spark: Any, table: str, *, buckets: int | None = None) -> None:
        self.spark = spark
        self.table = table
        parallelism = int(spark.sparkContext.defaultParallelism)
        self.bucket_expr = "pmod(hash({v}), " + f"{buckets or max(8, 4 * parallelism)})"
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
        data = numeric_aggregates_only(self.spark, [c for c in checks if c.kind in ("column", "table")], source)
        modes = detect_modes(self.spark, data, source)
        ev = Evaluation()
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
        change: dict[str, Any] = {}
        queries = ac.build_audit_queries(checks, view, modes, self.bucket_expr, ac.bounds_columns(checks))
        for i, query in enumerate(queries):
            row = self._run(ev, f"appended{i}", query.sql)
            change.update({name: row[alias] for alias, name in query.columns})
        base_source = self.source(base_snapshot_id)
        for c in checks:
            overlap = 0.0
            if c.check_type in ac.DISTINCT_CHECKS:
                lo, hi = change[f"lo:{c.name}"], change[f"hi:{c.name}"]
                if lo is not None:
                    bounded = _exact_literal(lo) and _exact_literal(hi)
                    sql = ac.overlap_query(c, view, base_source, bounded)
                    row = self._run(ev, f"overlap:{c.name}", sql, {"lo": lo, "hi": hi} if bounded else None)
                    overlap = float(row["overlap"])
            ev.observed[c.name] = ac.combine(c, base_values.get(c.name), change[c.name], overlap)
            ev.methods[c.name] = CHANGE_SET


def _exact_literal(value: Any) -> bool:
    """Bounds that survive the trip Spark -> Python -> SQL literal unchanged (timestamps may not: time zones)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, float):
        return not math.isnan(value)
    if isinstance(value, datetime):
        return False
    return isinstance(value, (int, decimal.Decimal, str, date))
