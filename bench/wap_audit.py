"""Benchmark: a 20-check WAP audit of a branch vs ``count(*)`` vs one query per check.

Everything is measured inside ONE Spark session (one spark-submit), so JVM start-up does not
dominate. The table is a WAP pipeline's: ``--rows`` (default 5,000,000) published orders on
``main``, audited once when published, and a branch with today's ``--batch`` (default 50,000)
appended orders; the branch snapshot (5.05M rows) is what is timed:

* ``SELECT count(*)`` over the branch snapshot, as Spark runs it (Iceberg answers from the
  manifests) and forced to scan (aggregate push-down off);
* the audit ``IcebergWapAuditOperator`` runs (``audit_engine``): the appended rows only
  (read from their Parquet files by the driver), combined with the values recorded for
  the base; and the same with the appended rows read by a Spark projection instead;
* the same audit of the whole snapshot (what a first audit, or an audit after a rewrite,
  costs), with and without metadata answers;
* the same 20 checks as 20 separate queries (the common-sql way).

The job also checks that every way yields identical observed values.
Targets (issue #3): audit / count(*) <= 1.5; one query per check / audit >= 5.
Medians of ``--repeat`` runs after ``--warmup`` rounds of every timed way (steady state).
Usage: ``source scripts/env.sh && python -m bench.wap_audit [--rows N] [--batch N] [--repeat R] [--warmup W]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COLUMN_MAPPING = {
    "order_id": {
        "null_check": {"equal_to": 0},
        "unique_check": {"equal_to": 0},
        "min": {"geq_to": 0},
        "max": {"geq_to": 0, "partition_clause": "region = 'ca'"},
    },
    "customer_id": {"null_check": {"equal_to": 0}},
    "region": {"null_check": {"equal_to": 0}},
    "amount": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}, "max": {"leq_to": 10_000, "tolerance": 0.1}},
    "order_ts": {"null_check": {"equal_to": 0}, "min": {"geq_to": 0}, "max": {"greater_than": 0}},
}
TABLE_CHECKS = {
    "has_rows": {"check_statement": "COUNT(*) > 0"},
    "amount_positive": {"check_statement": "amount > 0"},
    "region_known": {"check_statement": "region IN ('ca', 'us', 'eu')"},
    "ts_in_day": {"check_statement": "order_ts >= TIMESTAMP '2026-01-01 00:00:00'"},
    "ca_amounts": {"check_statement": "amount < 5000", "partition_clause": "region = 'ca'"},
    "eu_customers": {"check_statement": "customer_id IS NOT NULL", "partition_clause": "region = 'eu'"},
    "total_amount": {"check_statement": "SUM(amount) > 0"},
    "us_rows": {"check_statement": "COUNT(*) > 1000", "partition_clause": "region = 'us'"},
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=5, help="rounds of every timed way before timing")
    args = parser.parse_args()

    from airflow_iceberg_provider.core import audit_checks as ck
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook
    from airflow_iceberg_provider.operators._wap_common import wap_write_conf
    from tests.support.lake import catalog_conn_json, create_orders_table

    checks = ck.parse_checks(COLUMN_MAPPING, TABLE_CHECKS)
    assert len(checks) == 20, len(checks)
    tmp = Path(tempfile.mkdtemp(prefix="bench-wap-audit-"))
    try:
        (tmp / "warehouse").mkdir()
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp / "catalog.db", tmp / "warehouse")
        hook = IcebergCatalogHook()
        create_orders_table(hook, "bench.orders", partition_by=(), properties={"write.wap.enabled": "true"})
        result_path = tmp / "result.json"
        spark = IcebergSparkHook(catalog_hook=hook, driver_memory="3g")
        spec = {
            "job": "wap_audit_bench",
            "table": "bench.orders",
            "ref": "bench_branch",
            "rows": args.rows,
            "batch": args.batch,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "checks": [c.to_dict() for c in checks],
            "result_path": str(result_path),
        }
        plan = spark.plan(
            ROOT / "bench" / "jobs" / "wap_audit_bench_job.py",
            spec=spec,
            extra_conf=wap_write_conf("bench_branch"),
        )
        run = spark.submit(plan)
        res = json.loads(result_path.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    m, every = res["median"], res["all"]
    inc = m["audit_incremental"]
    print(
        f"wap_audit bench: {res['rows']:,} published rows + {res['batch']:,} appended on the branch, "
        f"{res['checks']} checks, one Spark session (spark-submit {run.seconds:.0f}s, write {res['write_seconds']}s, "
        f"first audit of main {res['first_audit_seconds']}s)"
    )
    rows = [
        ("count(*) as Spark runs it (manifests)", "count_pushdown"),
        ("count(*) forced to scan", "count_scan"),
        ("audit, as the operator runs it", "audit_incremental"),
        ("  same, appended rows read by Spark", "audit_incremental_spark_read"),
        ("audit of the whole snapshot", "audit_whole"),
        ("audit of the whole snapshot, no metadata", "audit_whole_no_metadata"),
        (f"one query per check ({res['separate_queries']})", "audit_separate"),
    ]
    for label, key in rows:
        print(f"  {label:<44} median {m[key]:7.3f}s   all {every[key]}")
    for label in ("incremental", "incremental_spark_read", "whole"):
        methods = res["methods"][label]
        counts = {k: sum(1 for v in methods.values() if v == k) for k in sorted(set(methods.values()))}
        queries = ", ".join(f"{q} {s:.3f}s" for q, s in res["queries"][label])
        print(f"  {label}: checks by method {counts}; queries (last run): {queries}")
    if res["fallback"]:
        print(f"  FALLBACK: {res['fallback']}")
    print(f"  observed values identical across all ways: {'yes' if not res['mismatches'] else res['mismatches']}")
    verdict = "met" if inc / m["count_pushdown"] <= 1.5 else "NOT met"
    print(f"  ratio audit / count(*) as Spark runs it  = {inc / m['count_pushdown']:.2f}  (target <= 1.5: {verdict})")
    verdict = "met" if inc / m["count_scan"] <= 1.5 else "NOT met"
    print(f"  ratio audit / count(*) forced to scan    = {inc / m['count_scan']:.2f}  (target <= 1.5: {verdict})")
    speedup = m["audit_separate"] / inc
    print(
        f"  speed-up one query per check / audit     = {speedup:.1f}x (target >= 5: {'met' if speedup >= 5 else 'NOT met'})"
    )
    print(
        f"  whole-snapshot audit: / count(*) scan = {m['audit_whole'] / m['count_scan']:.2f}; "
        f"one query per check / whole = {m['audit_separate'] / m['audit_whole']:.2f}x; "
        f"metadata answers save {m['audit_whole_no_metadata'] - m['audit_whole']:.3f}s"
    )
    print(
        f"  appended rows read by the driver vs by a Spark projection: "
        f"{m['audit_incremental_spark_read'] / inc:.1f}x faster (ratio to count(*) as Spark runs it with "
        f"the Spark read: {m['audit_incremental_spark_read'] / m['count_pushdown']:.2f})"
    )
    return 0 if not res["mismatches"] else 1


if __name__ == "__main__":
    sys.exit(main())
