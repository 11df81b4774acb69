"""Erasure benchmark: batched vs per-subject DELETE, copy-on-write vs merge-on-read, scaling.

All measurements run side by side in ONE Spark session (``bench/jobs/erasure_bench_job.py``)
on a freshly built table (default 5,000,000 rows, 500,000 customers over 30 days):

1. delete phase for 1,000 subjects: one batched ``DELETE ... WHERE customer_id IN (SELECT k
   FROM keys)`` vs one ``DELETE`` per subject. The per-subject cost is MEASURED on a sample
   (``--sample``, default 5 subjects, same session, same table) and EXTRAPOLATED to 1,000;
2. the batched delete phase under merge-on-read vs copy-on-write (separate clones);
3. end to end (delete + rewrite + expire + rewrite manifests + expire + raw-file verification,
   the provider's ``ErasureRun``) for 10 vs 10,000 subjects, and the wall time for 1,000.

Targets: (1) batched >= 50x faster; (3) time(10,000) / time(10) <= 2.

Run: ``source scripts/env.sh && python -m bench.erasure [--rows 5000000] [--customers 500000]``
(about 8-12 minutes at the default size on a 2-core machine; ``--rows 1000000`` for a quick look).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "bench" / "jobs" / "erasure_bench_job.py"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--customers", type=int, default=500_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--sample", type=int, default=5, help="per-subject DELETEs actually measured")
    parser.add_argument("--driver-memory", default="4g")
    args = parser.parse_args()

    from tests.support.lake import catalog_conn_json

    work = Path(tempfile.mkdtemp(prefix="erasure-bench-"))
    (work / "warehouse").mkdir()
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(work / "catalog.db", work / "warehouse")
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

    hook = IcebergSparkHook(driver_memory=args.driver_memory, conf={"spark.sql.shuffle.partitions": "8"})
    result_path = work / "result.json"
    spec = {
        "rows": args.rows,
        "customers": args.customers,
        "days": args.days,
        "per_subject_sample": args.sample,
        "result_path": str(result_path),
        "work_dir": str(work),
        "salt": "bench-salt-0123456789abcdef",
    }
    plan = hook.plan(
        JOB,
        spec=spec,
        name="erasure-bench",
    )
    t0 = time.monotonic()
    hook.submit(plan)
    total = time.monotonic() - t0
    r = json.loads(result_path.read_text())

    per_mean = sum(r["per_subject_sample_s"]) / len(r["per_subject_sample_s"])
    per_1000 = per_mean * 1000
    speedup = per_1000 / r["batched_cow_s"]
    ratio = r["e2e_10000_s"] / r["e2e_10_s"]
    print(
        f"\nErasure benchmark: {r['rows']:,} rows, {args.customers:,} customers, {r['data_files']} data files "
        f"(built in {r['build_s']:.0f}s; whole Spark session {total:.0f}s)"
    )
    print("(1) delete phase, 1,000 subjects, copy-on-write, same session:")
    print(f"    one batched DELETE (semi-join)          {r['batched_cow_s']:8.1f} s")
    print(
        f"    one DELETE per subject, measured on {len(r['per_subject_sample_s'])}: "
        f"{per_mean:.2f} s each ({', '.join(f'{x:.1f}' for x in r['per_subject_sample_s'])})"
    )
    print(f"    -> extrapolated x1,000 (NOT measured)   {per_1000:8.1f} s")
    print(f"    batched is {speedup:,.0f}x faster  (target >= 50x: {'OK' if speedup >= 50 else 'MISSED'})")
    print("(2) delete phase, 1,000 subjects, batched:")
    print(f"    copy-on-write  {r['batched_cow_s']:8.1f} s")
    print(
        f"    merge-on-read  {r['batched_mor_s']:8.1f} s   (MOR/COW = {r['batched_mor_s'] / r['batched_cow_s']:.2f}; "
        "MOR defers the rewrite to the purge phase)"
    )
    print("(3) end to end (delete + rewrite + expire + manifests + expire + verify), merge-on-read:")
    for n in (10, 1000, 10_000):
        t = r[f"e2e_{n}_timings"] or {}
        phases = ", ".join(f"{k} {v:.1f}" for k, v in t.items())
        print(
            f"    {n:>6,} subjects  {r[f'e2e_{n}_s']:8.1f} s  verification={r[f'e2e_{n}_verification']}  "
            f"rows deleted={r[f'e2e_{n}_rows_deleted']:,}  [{phases}]"
        )
    print(f"    time(10,000) / time(10) = {ratio:.2f}  (target <= 2: {'OK' if ratio <= 2 else 'MISSED'})")
    print(f"    end-to-end wall time for 1,000 subjects: {r['e2e_1000_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
