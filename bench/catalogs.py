"""Catalog back ends side by side: SQLite (embedded) vs PostgreSQL vs REST (SeaweedFS + S3).

Starts a PostgreSQL server (fsync on, like production) and SeaweedFS ``weed mini`` on
127.0.0.1 (``tests/support/servers.py``), then measures in one run, on one table per catalog:

* p50 / p95 latency through ``IcebergCatalogHook`` (warm process, as inside a task) of
  ``load_table``; **publish** = ``fast_forward(table name, to=branch head, expected=main)``
  (load + ancestry check + compare-and-swap commit); **tag** = ``create_tag`` (load + commit);
* concurrent appends on SQLite vs PostgreSQL: ``--writers`` processes each append
  ``--commits`` batches to ONE table through ``retry_commit``; reports commits/s, CAS
  retries per commit (pyiceberg's own refresh-and-retry plus ``retry_commit``'s) and checks
  every row is present exactly once.

Usage: ``source scripts/env.sh && python -m bench.catalogs [--reps 30] [--writers 8] [--commits 10] [--rows 100]``
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONN_ENV = "AIRFLOW_CONN_BENCH_CATALOG"
CONN_ID = "bench_catalog"
RETRY_PROPERTIES = {
    "commit.retry.num-retries": "10",
    "commit.retry.min-wait-ms": "20",
    "commit.retry.max-wait-ms": "2000",
}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def sqlite_conn(tmp: Path) -> str:
    from tests.support.lake import catalog_conn_json

    (tmp / "warehouse").mkdir(parents=True, exist_ok=True)
    return catalog_conn_json(tmp / "catalog.db", tmp / "warehouse")


def make_hook(conn: str, governance: str = "governance"):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    os.environ[CONN_ENV] = conn
    return IcebergCatalogHook(CONN_ID, governance_namespace=governance)


# ------------------------------------------------------------------ latency
def measure_latency(conn: str, namespace: str, reps: int) -> dict[str, list[float]]:
    from tests.support.lake import create_orders_table, orders_batch

    hook = make_hook(conn)
    table = f"{namespace}.orders"
    hook.ensure_namespace(namespace)
    create_orders_table(hook, table).append(orders_batch(0, 100))
    for i in range(1, 20):  # some history, like a real table
        hook.load_table(table).append(orders_batch(i * 100, 100))
    out: dict[str, list[float]] = {"load_table": [], "publish": [], "tag": []}
    for i in range(reps):
        t0 = time.perf_counter()
        tbl = hook.load_table(table)
        out["load_table"].append(time.perf_counter() - t0)
        main = tbl.current_snapshot().snapshot_id
        branch = f"b{i}"
        hook.set_ref(tbl, branch, main)
        hook.load_table(table).append(orders_batch(100_000 + i * 10, 10), branch=branch)
        head = hook.ref_snapshot_id(table, branch)
        t0 = time.perf_counter()
        hook.fast_forward(table, to_snapshot_id=head, expected_snapshot_id=main)
        out["publish"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        hook.create_tag(table, f"t{i}", snapshot_id=head)
        out["tag"].append(time.perf_counter() - t0)
    return out


# ------------------------------------------------------------------ concurrent appends
def _writer(args: tuple) -> dict:
    conn, table, writer, commits, rows, start_at = args
    counter = {"pyiceberg_retries": 0}

    class _Count(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "Commit failed due to a concurrent update" in record.getMessage():
                counter["pyiceberg_retries"] += 1

    logging.getLogger("pyiceberg").addHandler(_Count())
    from tests.support.lake import orders_batch

    hook = make_hook(conn)
    hook.catalog.list_namespaces()  # connect before the start line
    calls_total = 0
    time.sleep(max(0.0, start_at - time.time()))
    t0 = time.time()
    for k in range(commits):
        calls = [0]

        def commit(k: int = k, calls: list = calls) -> None:
            calls[0] += 1
            hook.load_table(table).append(orders_batch((writer + 1) * 1_000_000 + k * rows, rows))

        hook.retry_commit(commit, what=table, attempts=20)
        calls_total += calls[0]
    return {
        "started": t0,
        "finished": time.time(),
        "outer_retries": calls_total - commits,
        "pyiceberg_retries": counter["pyiceberg_retries"],
    }


def measure_concurrency(conn: str, writers: int, commits: int, rows: int) -> dict[str, float]:
    from tests.support.lake import create_orders_table

    hook = make_hook(conn)
    table = "conc.orders"
    hook.ensure_namespace("conc")
    create_orders_table(hook, table, properties=RETRY_PROPERTIES)
    start_at = time.time() + 3.0
    ctx = mp.get_context("fork")
    with ctx.Pool(writers) as pool:
        results = pool.map(_writer, [(conn, table, w, commits, rows, start_at) for w in range(writers)])
    wall = max(r["finished"] for r in results) - min(r["started"] for r in results)
    ids = hook.load_table(table).scan(selected_fields=("order_id",)).to_arrow()["order_id"].to_pylist()
    expected = {(w + 1) * 1_000_000 + i for w in range(writers) for i in range(commits * rows)}
    exactly_once = len(ids) == len(expected) and set(ids) == expected
    total = writers * commits
    retries = sum(r["outer_retries"] + r["pyiceberg_retries"] for r in results)
    return {
        "commits": total,
        "seconds": wall,
        "commits_per_s": total / wall,
        "retries_per_commit": retries / total,
        "exactly_once": exactly_once,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--commits", type=int, default=10)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--no-rest", action="store_true", help="skip the REST catalog")
    args = parser.parse_args()
    logging.getLogger("pyiceberg").setLevel(logging.WARNING)

    from tests.support import servers as _servers

    tmp = Path(tempfile.mkdtemp(prefix="bench-catalogs-"))
    started = []
    try:
        t0 = time.perf_counter()
        pg = _servers.start_postgres(durable=True)
        started.append(pg)
        print(f"PostgreSQL {pg.port} (fsync on) ready in {time.perf_counter() - t0:.1f}s", flush=True)
        catalogs: dict[str, str] = {
            "sqlite": sqlite_conn(tmp / "sqlite"),
            "postgres": _servers.pg_conn_json(pg, pg.create_database("bench"), _mk(tmp / "pg")),
        }
        if not args.no_rest:
            t0 = time.perf_counter()
            weed = _servers.start_seaweed()
            started.append(weed)
            print(f"SeaweedFS REST catalog + S3 ready in {time.perf_counter() - t0:.1f}s", flush=True)
            catalogs["rest"] = _servers.rest_conn_json(weed)

        latency = {}
        for name, conn in catalogs.items():
            t0 = time.perf_counter()
            latency[name] = measure_latency(conn, f"lat{os.getpid()}", args.reps)
            print(f"  latency on {name}: {args.reps} reps in {time.perf_counter() - t0:.1f}s", flush=True)

        names = list(catalogs)
        print(f"\np50 latency through IcebergCatalogHook, ms ({args.reps} reps; p95 in brackets)")
        print(
            f"{'operation':<12}"
            + "".join(f"{n:>20}" for n in names)
            + "".join(f"{n + '/sqlite':>18}" for n in names[1:])
        )
        for op in ("load_table", "publish", "tag"):
            p50 = {n: statistics.median(latency[n][op]) * 1000 for n in names}
            cells = "".join(f"{p50[n]:>11.1f} [{pct(latency[n][op], 0.95) * 1000:>6.1f}]" for n in names)
            ratios = "".join(f"{p50[n] / p50['sqlite']:>17.2f}x" for n in names[1:])
            print(f"{op:<12}{cells}{ratios}")

        conc = {}
        for name in ("sqlite", "postgres"):
            print(f"  concurrent appends on {name} ...", flush=True)
            conc[name] = measure_concurrency(catalogs[name], args.writers, args.commits, args.rows)
        print(f"\n{args.writers} concurrent writers x {args.commits} appends of {args.rows} rows to one table")
        print(f"{'catalog':<10}{'commits/s':>12}{'retries/commit':>16}{'seconds':>10}{'rows exactly once':>20}")
        for name, r in conc.items():
            print(
                f"{name:<10}{r['commits_per_s']:>12.2f}{r['retries_per_commit']:>16.2f}{r['seconds']:>10.1f}"
                f"{str(r['exactly_once']):>20}"
            )
        ratio = conc["postgres"]["commits_per_s"] / conc["sqlite"]["commits_per_s"]
        print(f"postgres/sqlite throughput: {ratio:.2f}x")
        print(
            json.dumps(
                {
                    "latency_p50_ms": {
                        n: {op: round(statistics.median(v) * 1000, 2) for op, v in latency[n].items()} for n in names
                    },
                    "concurrency": conc,
                }
            )
        )
        if not all(r["exactly_once"] for r in conc.values()):
            raise SystemExit("ERROR: a concurrent append was lost or duplicated")
    finally:
        for server in reversed(started):
            server.stop()


def _mk(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


if __name__ == "__main__":
    main()
