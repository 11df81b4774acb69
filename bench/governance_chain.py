"""The governance chain's cost, side by side in one run.

1. Ledger writes/s from ``--writers`` concurrent processes on a PostgreSQL catalog (fsync on,
   ``tests/_servers.py``), each writing ``--rows`` ledger rows one commit at a time, as tasks
   do: **with the chain** (``GovernanceStore.record_ledger``: compare-and-swap append, the head
   from the snapshot summary, its own retry) and **without it** (the same rows appended as
   the store did before the chain: a plain pyiceberg append with pyiceberg's rebase retry and
   ``retry_commit``), each mode on its own ledger table. Prints both rates and the ratio
   (goal: the chain at most 10 % slower), and checks every row is there exactly once and the
   chained ledger verifies.
2. Verification speed over ``--verify-rows`` chained ledger rows (generated at run time, one
   append to a SQLite catalog): read time and walk + Merkle time of
   ``python -m airflow_iceberg_provider.verify``'s code, rows/s.

Usage: ``source scripts/env.sh && python -m bench.governance_chain [--writers 8] [--rows 15] [--verify-rows 1000000]``
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import os
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONN_ENV = "AIRFLOW_CONN_BENCH_CATALOG"
CONN_ID = "bench_catalog"


def make_hook(conn: str, governance: str):
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    os.environ[CONN_ENV] = conn
    return IcebergCatalogHook(CONN_ID, governance_namespace=governance)


def _writer(args: tuple) -> dict:
    conn, namespace, chained, writer, rows, start_at = args
    import pyarrow as pa

    from airflow_iceberg_provider.core.governance import LEDGER, LedgerEntry, arrow_schema

    hook = make_hook(conn, namespace)
    name = hook.governance.table("ledger")
    schema = arrow_schema(LEDGER)
    time.sleep(max(0.0, start_at - time.time()))
    t0 = time.time()
    for k in range(rows):
        if chained:
            hook.governance.record_ledger(
                operation="bench", table="db.t", status="succeeded", event_id=f"w{writer}-{k}", details={"k": k}
            )
        else:  # the store's append before the chain: one plain append, retried
            entry = LedgerEntry.new(
                operation="bench", status="succeeded", event_id=f"w{writer}-{k}", table_name="db.t", details={"k": k}
            )
            data = pa.Table.from_pylist([{c.name: entry.to_row().get(c.name) for c in LEDGER.columns}], schema)
            hook.retry_commit(lambda data=data: hook.load_table(name).append(data), what=name, attempts=20)
    return {"started": t0, "finished": time.time()}


def measure_writes(conn: str, namespace: str, *, chained: bool, writers: int, rows: int) -> dict:
    hook = make_hook(conn, namespace)
    hook.governance.table("ledger")  # created before the start line, as in production
    start_at = time.time() + 3.0
    ctx = mp.get_context("fork")
    with ctx.Pool(writers) as pool:
        results = pool.map(_writer, [(conn, namespace, chained, w, rows, start_at) for w in range(writers)])
    wall = max(r["finished"] for r in results) - min(r["started"] for r in results)
    got = hook.governance.read("ledger")
    ids = sorted(r["event_id"] for r in got)
    expected = sorted(f"w{w}-{k}" for w in range(writers) for k in range(rows))
    out = {"rows": len(expected), "seconds": wall, "rows_per_s": len(expected) / wall, "exactly_once": ids == expected}
    if chained:
        from airflow_iceberg_provider.core import ledger_verify as lv

        walk = lv.walk_chain(f"{namespace}.ledger", got)
        out["chain_ok"] = not walk.findings and len(walk.entries) == len(expected)
    return out


def measure_verify(n: int, tmp: Path) -> dict:
    import pyarrow as pa

    from airflow_iceberg_provider import verify
    from airflow_iceberg_provider.core import ledger_chain as lc
    from airflow_iceberg_provider.core.governance import LEDGER, arrow_schema
    from tests.support.lake import catalog_conn_json

    (tmp / "wh").mkdir(parents=True, exist_ok=True)
    hook = make_hook(catalog_conn_json(tmp / "catalog.db", tmp / "wh"), "governance")
    name = hook.governance.table("ledger")
    t0 = time.perf_counter()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    body = [
        {
            "event_id": f"{i:032x}",
            "operation": "maintenance.expire_snapshots",
            "table_name": f"db.t{i % 50}",
            "status": "succeeded",
            "dag_id": "nightly",
            "finished_at": start + timedelta(seconds=i),
            "snapshot_after": 1_000_000 + i,
            "details": '{"files": 3}',
        }
        for i in range(n)
    ]
    linked, head = lc.link(body, lc.ChainHead())
    hook.load_table(name).append(pa.Table.from_pylist(linked, schema=arrow_schema(LEDGER)), head.summary())
    generated = time.perf_counter() - t0
    hook.governance.checkpoint(tables=[name])
    props = hook.config.pyiceberg_properties()
    catalog = verify._catalog(
        argparse.Namespace(
            catalog_uri=props["uri"], warehouse=props["warehouse"], catalog_name=hook.catalog_name, property=[]
        )
    )
    t0 = time.perf_counter()
    tables, checkpoints = verify.read_catalog(catalog, "governance")
    read = time.perf_counter() - t0
    t0 = time.perf_counter()
    findings = verify.verify_tables(tables, checkpoints, catalog_name=hook.catalog_name, key=None)
    walked = time.perf_counter() - t0
    errors = [f for f in findings if f.severity == "error"]
    return {
        "rows": n,
        "generate_and_write_s": generated,
        "read_s": read,
        "verify_s": walked,
        "rows_per_s": n / (read + walked),
        "ok": not errors and len(tables[name]) == n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--rows", type=int, default=15, help="ledger rows (commits) per writer and mode")
    parser.add_argument("--verify-rows", type=int, default=1_000_000)
    args = parser.parse_args()
    logging.getLogger("pyiceberg").setLevel(logging.ERROR)

    import _servers

    tmp = Path(tempfile.mkdtemp(prefix="bench-chain-"))
    pg = _servers.start_postgres(durable=True)
    try:
        warehouse = tmp / "pg"
        warehouse.mkdir()
        conn = _servers.pg_conn_json(pg, pg.create_database("chain"), warehouse)
        writes = {}
        for label, chained in (("without chain", False), ("with chain", True)):
            print(f"  {args.writers} writers, {label} ...", flush=True)
            writes[label] = measure_writes(
                conn, "gov_chain" if chained else "gov_plain", chained=chained, writers=args.writers, rows=args.rows
            )
    finally:
        pg.stop()
    plain, chain = writes["without chain"], writes["with chain"]
    print(f"\nLedger writes from {args.writers} concurrent writers on PostgreSQL ({args.rows} one-row commits each)")
    print(f"{'mode':<16}{'rows/s':>10}{'seconds':>10}{'exactly once':>14}")
    for label, r in writes.items():
        print(f"{label:<16}{r['rows_per_s']:>10.2f}{r['seconds']:>10.1f}{str(r['exactly_once']):>14}")
    slower = 1 - chain["rows_per_s"] / plain["rows_per_s"]
    print(
        f"chain/plain throughput: {chain['rows_per_s'] / plain['rows_per_s']:.2f}x ({slower:+.0%} slower; goal <= 10%)"
    )
    print(f"chained ledger verifies as one linear chain: {chain['chain_ok']}")

    print(f"\n  generating {args.verify_rows} chained rows ...", flush=True)
    ver = measure_verify(args.verify_rows, tmp / "verify")
    print(
        f"Verification of {ver['rows']} ledger rows: read {ver['read_s']:.1f}s + walk/Merkle {ver['verify_s']:.1f}s "
        f"= {ver['rows_per_s']:,.0f} rows/s (generation and write {ver['generate_and_write_s']:.1f}s); ok: {ver['ok']}"
    )
    print(json.dumps({"writes": writes, "verify": ver}))
    if not (plain["exactly_once"] and chain["exactly_once"] and chain["chain_ok"] and ver["ok"]):
        raise SystemExit("ERROR: a row was lost or duplicated, or the chain does not verify")


if __name__ == "__main__":
    main()
