"""Erasure at lakehouse scale (#13): logical vs full purge, table-size independence, batching.

Every measurement runs side by side in ONE Spark session (``bench/jobs/erasure_scale_job.py``)
with the provider's own erasure code (``ErasureRun``, phases ``logical`` / ``purge`` / ``full``),
on generated tables (``spark.range``; no data is downloaded):

(a) a table of ``--a-rows`` rows in ``--a-files`` data files (issue: >= 20 M rows, >= 2,000
    files); 1,000 subjects spread over every file. Logical erasure vs the full one-job
    erasure (target: logical >= 20x faster); full scans after the logical erasure (merge-on-read
    cost), after the full purge and after the later purge;
(b) 10 subjects whose rows sit in a few files (range-partitioned by customer, Parquet bloom
    filters on ``customer_id``, no manifest bounds); the table grows from N to 10N rows with the
    same affected files. End-to-end purge time ratio (target <= 1.5) and the files raw-read by
    analysis and verification vs the affected files (target <= 2x);
(c) ``--c-days`` daily batches of ``--c-batch`` requests: daily logical erasures + ONE purge vs
    one full erasure per day (target: >= 10x less total time).

Run: ``source scripts/env.sh && python bench/erasure_scale.py`` (issue scale; hours on 2 cores), or
smaller: ``python bench/erasure_scale.py --a-rows 2000000 --a-files 400 --b-rows 200000 --c-rows 500000 --c-days 10``.
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
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
JOB = ROOT / "bench" / "jobs" / "erasure_scale_job.py"


def ok(flag: bool) -> str:
    return "OK" if flag else "MISSED"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--a-rows", type=int, default=20_000_000)
    p.add_argument("--a-files", type=int, default=2000)
    p.add_argument("--a-subjects", type=int, default=1000)
    p.add_argument("--b-rows", type=int, default=2_000_000, help="N (the table grows to 10N)")
    p.add_argument("--b-files", type=int, default=50)
    p.add_argument("--c-rows", type=int, default=2_000_000)
    p.add_argument("--c-files", type=int, default=200)
    p.add_argument("--c-days", type=int, default=30)
    p.add_argument("--c-batch", type=int, default=10)
    p.add_argument("--parts", default="abc")
    p.add_argument("--driver-memory", default="6g")
    args = p.parse_args()

    from conftest import catalog_conn_json

    work = Path(tempfile.mkdtemp(prefix="erasure-scale-"))
    (work / "warehouse").mkdir()
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(work / "catalog.db", work / "warehouse")
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

    hook = IcebergSparkHook(driver_memory=args.driver_memory, conf={"spark.sql.shuffle.partitions": "8"})
    result_path = work / "result.json"
    spec = {k: v for k, v in vars(args).items() if k not in ("driver_memory",)}
    spec.update(result_path=str(result_path), work_dir=str(work), salt="bench-salt-0123456789abcdef")
    plan = hook.plan(JOB, spec=spec, name="erasure-scale-bench")
    t0 = time.monotonic()
    hook.submit(plan)
    r = json.loads(result_path.read_text())
    print(f"\nErasure at scale (#13), one Spark session, {time.monotonic() - t0:.0f} s in all")
    if "a_logical_s" in r:
        x = r["a_full_s"] / r["a_logical_s"]
        print(f"(a) {r['a_rows']:,} rows, {r['a_files']:,} data files, {args.a_subjects:,} subjects over all files")
        print(
            f"    logical erasure (merge-on-read delete + verify)   {r['a_logical_s']:8.1f} s  {r['a_logical_verification']}"
        )
        print(
            f"    full erasure (delete+rewrite+expire+verify)      {r['a_full_s']:8.1f} s  {r['a_full_verification']}, "
            f"{r['a_full_files_rewritten']} files rewritten"
        )
        print(f"    logical is {x:.1f}x faster (target >= 20x: {ok(x >= 20)})")
        print(
            f"    full scan: after logical {r['a_scan_after_logical_s']:.2f} s | after full purge "
            f"{r['a_scan_after_full_s']:.2f} s | after the later purge {r['a_scan_after_purge_s']:.2f} s "
            f"(purge of the logically erased table: {r['a_purge_s']:.1f} s)"
        )
    if "b_n_s" in r:
        ratio = r["b_10n_s"] / r["b_n_s"]
        print("(b) 10 subjects, range-partitioned by customer, bloom filters on customer_id, no bounds:")
        for lab in ("b_n", "b_10n"):
            aff = r[f"{lab}_affected_files"]
            raw_a, raw_v = r[f"{lab}_analysis_raw_read"], r[f"{lab}_verify_raw_read"]
            print(
                f"    {r[f'{lab}_rows']:>12,} rows {r[f'{lab}_files']:>5} files: purge {r[f'{lab}_s']:7.1f} s "
                f"{r[f'{lab}_verification']}; affected files {aff}; raw-read analysis {raw_a} "
                f"(of {r[f'{lab}_analysis_considered']}, bloom-pruned {r[f'{lab}_analysis_pruned_bloom']}), "
                f"verify {raw_v} (of {r[f'{lab}_verify_considered']}, bloom-pruned "
                f"{r[f'{lab}_verify_pruned_bloom']}) -> {ok(max(raw_a, raw_v) <= 2 * max(aff, 1))} (<= 2x affected)"
            )
        print(f"    time(10N) / time(N) = {ratio:.2f} (target <= 1.5: {ok(ratio <= 1.5)})")
    if "c_full_total_s" in r:
        x = r["c_full_total_s"] / r["c_two_phase_total_s"]
        print(f"(c) {args.c_days} daily batches of {args.c_batch} requests:")
        print(
            f"    {args.c_days} logical erasures {r['c_logical_total_s']:.1f} s + one purge {r['c_purge_s']:.1f} s "
            f"({r['c_purge_verification']}) = {r['c_two_phase_total_s']:.1f} s"
        )
        print(f"    {args.c_days} full erasures {r['c_full_total_s']:.1f} s")
        print(f"    {x:.1f}x less total time (target >= 10x: {ok(x >= 10)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
