"""How an audit's outcome reads: the completion line, the failed checks, a readable table (pure).

Shared by the ``wap_audit`` Spark job (its completion line, shipped with ``--py-files``) and by
:class:`~airflow_iceberg_provider.operators.wap_audit.IcebergWapAuditOperator` (task log and XCom), so
both say the same thing: ``audit completed: 2 of 11 checks failed``. Importable without pyspark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def completion_line(checks: int, failed: int) -> str:
    """``audit completed: 2 of 11 checks failed`` (or ``... all 11 checks passed``).

    The job *completed* either way (every verdict is recorded); whether the data passed is a
    separate question, so the line never says "succeeded".
    """
    if failed:
        return f"audit completed: {failed} of {checks} check{'s' if checks != 1 else ''} failed"
    return f"audit completed: all {checks} check{'s' if checks != 1 else ''} passed"


def results_in_order(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """``{"check", "observed", "condition", "passed"}`` per recorded row, in the order the checks were given."""
    order = {name: i for i, name in enumerate(names)}
    ordered = sorted(rows, key=lambda r: order.get(r["check_name"], len(order)))
    return [
        {
            "check": r["check_name"],
            "observed": r["observed_value"],
            "condition": r["condition"],
            "passed": bool(r["passed"]),
        }
        for r in ordered
    ]


def failed_checks(results: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``{"check", "observed", "expected"}`` of every failed check (what a reader looks for first)."""
    return [
        {"check": r["check"], "observed": r["observed"], "expected": r["condition"]} for r in results if not r["passed"]
    ]


def _text(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return str(value)


def failure_table(results: Sequence[Mapping[str, Any]]) -> str:
    """The failed checks as an aligned text table (``check | observed | expected``); ``""`` when none failed."""
    rows = [(f["check"], _text(f["observed"]), str(f["expected"])) for f in failed_checks(results)]
    if not rows:
        return ""
    header = ("check", "observed", "expected")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


__all__ = ["completion_line", "failed_checks", "failure_table", "results_in_order"]
