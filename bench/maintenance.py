"""Table maintenance, measured side by side in one run.

Builds a sick table with ONE Spark job (``--commits`` appends of ``--files-per-commit``
small files each: by default 200 snapshots and 2,000 data files, manifest merging off,
a legal-hold tag half-way), then measures:

1. health check latency through the catalog hook (``IcebergCatalogHook.health``, p50 of 5);
2. a full-scan query (pyiceberg ``scan().to_arrow()`` + sum, best of 3) before maintenance;
3. the maintenance plan on the sick table (one spark-submit: compaction, manifests, expiry);
4. the same full scan after compaction, and the file-count reduction;
5. the plan on the now-healthy table (catalog only, no JVM) vs a forced run
   (``force=True``: the same actions submitted anyway) on the same table.

Run: ``source scripts/env.sh && python -m bench.maintenance [--commits 200] [--files-per-commit 10]``
Default run ≈ 5-8 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PATHOLOGY = ROOT / "example_dags" / "jobs" / "maintenance_pathology.py"
TABLE = "bench.orders"


def timed(fn, repeat: int = 1):
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, times


def full_scan(hook):
    import pyarrow.compute as pc

    data = hook.load_table(TABLE).scan().to_arrow()
    return data.num_rows, pc.sum(data["amount"]).as_py()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--files-per-commit", type=int, default=10)
    parser.add_argument("--rows-per-commit", type=int, default=2000)
    parser.add_argument("--days", type=int, default=2)
    args = parser.parse_args()

    from tests.support.lake import catalog_conn_json, fake_context

    tmp = Path(tempfile.mkdtemp(prefix="bench-maintenance-"))
    (tmp / "wh").mkdir()
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp / "c.db", tmp / "wh")

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
    from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator
    from airflow_iceberg_provider.operators.table import IcebergCreateTableOperator

    hook = IcebergCatalogHook()
    ctx = fake_context(dag_id="bench_maintenance")
    IcebergCreateTableOperator(
        task_id="create",
        table=TABLE,
        columns={
            "order_id": "long",
            "customer_id": "string",
            "region": "string",
            "amount": "double",
            "order_ts": "timestamptz",
        },
        partition_by=["day(order_ts)"],
        properties={
            "format-version": "2",
            "commit.manifest-merge.enabled": "false",
            # no shuffle by partition before writing: each of the files_per_commit tasks writes its own file
            "write.distribution-mode": "none",
            "write.target-file-size-bytes": str(64 * 1024 * 1024),
        },
    ).execute(ctx)
    print(f"building: {args.commits} commits x {args.files_per_commit} files (one Spark job) ...", flush=True)
    _, t_build = timed(
        lambda: IcebergSparkSubmitOperator(
            task_id="sicken",
            table=TABLE,
            application=str(PATHOLOGY),
            params_for_job={
                "commits": args.commits,
                "files_per_commit": args.files_per_commit,
                "rows_per_commit": args.rows_per_commit,
                "hold_tag": "",
                "days": args.days,
                "deletes": 0,
            },
            expected_operations=["append"],
        ).execute(ctx)
    )

    health, t_health = timed(lambda: hook.health(TABLE), repeat=5)
    print(
        f"table: {health.data_files} data files, {health.snapshots} snapshots, {health.manifests} manifests, "
        f"{health.records} rows (built in {t_build[0]:.0f}s)"
    )
    scan_before, t_scan_before = timed(lambda: full_scan(hook), repeat=3)

    plan = dict(expire_older_than="0s", older_than_floor="0s", retain_last=1)
    sick = IcebergMaintenancePlanOperator(task_id="plan", table=TABLE, **plan)
    out, t_sick = timed(lambda: sick.execute(ctx))
    after = hook.health(TABLE)
    scan_after, t_scan_after = timed(lambda: full_scan(hook), repeat=3)
    assert scan_after[0] == scan_before[0] and abs(scan_after[1] - scan_before[1]) < 1e-6 * abs(scan_before[1])

    healthy_out, t_healthy = timed(
        lambda: IcebergMaintenancePlanOperator(task_id="plan2", table=TABLE, **plan).execute(ctx), repeat=3
    )
    assert healthy_out["spark_job"] is False
    forced_out, t_forced = timed(
        lambda: IcebergMaintenancePlanOperator(task_id="plan3", table=TABLE, force=True, **plan).execute(ctx)
    )

    p50 = statistics.median
    reduction = 1 - after.data_files / health.data_files
    print()
    print(f"{'measure':<52} {'value':>14}")
    print(
        f"{'health check through the catalog hook (p50 of 5)':<52} {p50(t_health):>13.3f}s "
        f"{'(< 2 s: ok)' if p50(t_health) < 2 else '(>= 2 s!)'}"
    )
    print(
        f"{'maintenance plan on the sick table (one JVM)':<52} {t_sick[0]:>13.1f}s  actions: "
        + ", ".join(a["action"] for a in out["actions"])
    )
    print(
        f"{'data files before -> after':<52} {health.data_files:>6} -> {after.data_files:<5} "
        f"(-{reduction:.1%}{', >= 95%: ok' if reduction >= 0.95 else ', < 95%!'})"
    )
    print(
        f"{'snapshots / manifests before -> after':<52} {health.snapshots}/{health.manifests} -> "
        f"{after.snapshots}/{after.manifests}"
    )
    speedup = min(t_scan_before) / min(t_scan_after)
    print(f"{'full scan before (best of 3)':<52} {min(t_scan_before):>13.3f}s")
    print(
        f"{'full scan after (best of 3)':<52} {min(t_scan_after):>13.3f}s  speed-up x{speedup:.1f}"
        f"{' (>= 3x: ok)' if speedup >= 3 else ' (< 3x!)'}"
    )
    ratio = t_forced[0] / p50(t_healthy)
    print(f"{'plan on the healthy table (no JVM, p50 of 3)':<52} {p50(t_healthy):>13.3f}s")
    print(
        f"{'forced run on the same table (force=True)':<52} {t_forced[0]:>13.1f}s  actions: "
        + ", ".join(a["action"] for a in forced_out["actions"])
    )
    print(
        f"{'healthy plan is cheaper than a forced run by':<52} {'x' + format(ratio, '.0f'):>14}"
        f"{' (>= 20x: ok)' if ratio >= 20 else ' (< 20x!)'}"
    )
    print(f"rows checked equal before/after: {scan_before[0]}; lake: {tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
