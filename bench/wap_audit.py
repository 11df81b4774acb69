"""Benchmark: a 20-check WAP audit in one pass vs ``count(*)`` vs one query per check.

Everything is measured inside ONE Spark session (one spark-submit), on a branch holding
``--rows`` rows (default 5,000,000), so JVM start-up does not dominate:

* ``SELECT count(*)`` over the same branch snapshot, forced to scan (Iceberg's aggregate
  push-down off) and as Spark plans it by default (answered from manifests);
* the audit query that ``IcebergWapAuditOperator`` runs (``audit_checks.build_audit_queries``);
* the same 20 checks as 20 separate queries (the common-sql way).

Targets (issue #3): single pass / count(*) <= 1.5; separate / single pass >= 5.
Usage: ``source scripts/env.sh && python bench/wap_audit.py [--rows N] [--repeat R]``.
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
sys.path.insert(0, str(ROOT / "tests"))

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
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from conftest import catalog_conn_json, create_orders_table

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook
    from airflow_iceberg_provider.operators.wap import AUDIT_CHECKS_MODULE, wap_write_conf
    from airflow_iceberg_provider.spark_jobs import audit_checks

    checks = audit_checks.parse_checks(COLUMN_MAPPING, TABLE_CHECKS)
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
            "repeat": args.repeat,
            "checks": [c.to_dict() for c in checks],
            "result_path": str(result_path),
        }
        plan = spark.plan(
            ROOT / "bench" / "jobs" / "wap_audit_bench_job.py",
            spec=spec,
            extra_conf=wap_write_conf("bench_branch"),
            extra_py_files=[str(AUDIT_CHECKS_MODULE)],
        )
        run = spark.submit(plan)
        res = json.loads(result_path.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    m = res["median"]
    vs_scan = m["audit_single_pass"] / m["count_scan"]
    vs_push = m["audit_single_pass"] / m["count_pushdown"]
    speedup = m["audit_separate"] / m["audit_single_pass"]
    print(
        f"wap_audit bench: {res['rows']:,} rows on a branch, {res['checks']} checks, one Spark session "
        f"(spark-submit {run.seconds:.0f}s incl. write {res['write_seconds']}s)"
    )
    print(f"  count(*) scan (push-down off)   median {m['count_scan']:.3f}s   all {res['all']['count_scan']}")
    print(f"  count(*) default (from metadata) median {m['count_pushdown']:.3f}s   all {res['all']['count_pushdown']}")
    print(
        f"  audit, single pass ({res['single_pass_queries']} queries)  median {m['audit_single_pass']:.3f}s   all {res['all']['audit_single_pass']}"
    )
    print(
        f"  audit, one query per check ({res['separate_queries']})  median {m['audit_separate']:.3f}s   all {res['all']['audit_separate']}"
    )
    print(
        f"  distinct counts, hash-based COUNT(DISTINCT) instead: median {m['distinct_hash_based']:.3f}s   "
        f"all {res['all']['distinct_hash_based']}"
    )
    print(f"  scan of the audited columns      median {m['scan_columns']:.3f}s   all {res['all']['scan_columns']}")
    for q in res["per_query"]:
        print(
            f"    query with {len(q['checks'])} checks ({', '.join(q['checks'][:3])}, ...): median {q['median']:.3f}s"
        )
    print(
        f"  ratio single-pass / count(*) scan      = {vs_scan:.2f}  (target <= 1.5: {'met' if vs_scan <= 1.5 else 'NOT met'})"
    )
    print(f"  ratio single-pass / count(*) metadata  = {vs_push:.2f}  (informational)")
    print(
        f"  speed-up separate / single-pass        = {speedup:.2f}x (target >= 5: {'met' if speedup >= 5 else 'NOT met'})"
    )
    free = [
        q["median"]
        for q in res["per_query"]
        if not any(c.split(".")[-1] in ("distinct_check", "unique_check") for c in q["checks"])
    ]
    free_single = sum(free)
    print(
        f"  shuffle-free checks only: single pass {free_single:.3f}s vs separate {res['separate_shuffle_free']:.3f}s "
        f"= {res['separate_shuffle_free'] / free_single:.2f}x; vs column scan = {free_single / m['scan_columns']:.2f}; "
        f"exact distinct counts: {res['separate_distinct']:.3f}s separately"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
