"""The governance ledger at 10,000 rows: cost of writing and reading one row, before and after maintenance.

Every provider task appends to ``governance.ledger`` in its own commit. This bench grows
a ledger to ``--rows`` rows in ``--commits`` commits (default 10,000 rows in 200
commits, i.e. 200 snapshots and 200 one-commit data files), then measures, side by side
in one run:

1. writing one ledger row (``hook.governance.record_ledger``, p50 of 7);
2. reading one table's rows (``hook.governance.read("ledger", table_name=...)``, p50 of 7);
3. the maintenance plan on the ledger (one spark-submit: compaction, manifests, expiry);
4. the same write and read again, and the ratios before/after.

Run: ``source scripts/env.sh && python -m bench.governance [--rows 10000] [--commits 200]``
(≈ 3-5 minutes on a 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def p50(fn, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--commits", type=int, default=200)
    args = parser.parse_args()

    from tests.support.lake import catalog_conn_json, fake_context

    tmp = Path(tempfile.mkdtemp(prefix="bench-governance-"))
    (tmp / "wh").mkdir()
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp / "catalog.db", tmp / "wh")
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator

    hook = IcebergCatalogHook()
    ledger = hook.governance.table("ledger")
    per_commit = args.rows // args.commits
    t0 = time.perf_counter()
    for c in range(args.commits):
        now = datetime.now(UTC)
        hook.governance.append(
            "ledger",
            [
                {
                    "event_id": f"{c}-{i}",
                    "operation": "wap_publish",
                    "table_name": f"sales.t{i % 50}",
                    "status": "succeeded",
                    "started_at": now,
                    "finished_at": now,
                }
                for i in range(per_commit)
            ],
        )
    print(
        f"grew {ledger} to {args.commits * per_commit} rows in {args.commits} commits: {time.perf_counter() - t0:.1f} s"
    )

    def write():
        hook.governance.record_ledger(operation="bench", table="sales.t1", status="succeeded")

    def read():
        return hook.governance.read("ledger", table_name="sales.t7")

    def measure(label: str) -> tuple[float, float]:
        h = hook.health(ledger)
        w, r = p50(write), p50(read)
        print(
            f"{label}: write one row p50 {w * 1000:.0f} ms, read one table's rows p50 {r * 1000:.0f} ms "
            f"({len(read())} rows); {h.data_files} files, {h.snapshots} snapshots, {h.manifests} manifests, "
            f"metadata log {h.metadata_log_length}, metadata.json {h.metadata_bytes:,} bytes"
        )
        return w, r

    w0, r0 = measure("before maintenance")
    t0 = time.perf_counter()
    out = IcebergMaintenancePlanOperator(
        task_id="plan", table=ledger, expire_older_than="0s", older_than_floor="0s"
    ).execute(fake_context())
    print(f"maintenance plan: {[a['action'] for a in out['actions']]} in {time.perf_counter() - t0:.1f} s")
    w1, r1 = measure("after maintenance")
    print(f"RATIO write before/after: {w0 / w1:.1f}x; read before/after: {r0 / r1:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
