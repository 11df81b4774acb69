"""Cost of one idle sensor poll: a table with 10 snapshots vs one with 5,000.

An idle poll (nothing committed since the last one) is what a waiting sensor or
trigger does all day, so it must not grow with the table's history. The provider's
poll (``IcebergCatalogHook.poll_commit`` with the last seen metadata pointer) reads
only the catalog's pointer row; the naive poll loads and parses the table metadata
(``load_table`` + ``find_snapshots``) every time. Both are measured side by side.

Goal: p50(idle poll, 5,000 snapshots) / p50(idle poll, 10 snapshots) <= 1.5.

The big table is built quickly with pyiceberg: many one-row appends staged in one
transaction per batch (one metadata write per batch), and cached under
``$AIP_WORK/bench/sensor_poll`` for the next run.

Usage: ``source scripts/env.sh && python -m bench.sensor_poll [--snapshots 5000] [--polls 300]``
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONN_ID = "bench_sensor_poll"


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def connect(work: Path):
    (work / "wh").mkdir(parents=True, exist_ok=True)
    os.environ[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "host": f"sqlite:///{work / 'catalog.db'}",
            "extra": {"catalog_type": "sql", "catalog_name": "lakehouse", "warehouse": f"file://{work / 'wh'}"},
        }
    )
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    return IcebergCatalogHook(CONN_ID)


def ensure_table(hook, table: str, snapshots: int, build: str = "history") -> None:
    """Make ``table`` have exactly ``snapshots`` snapshots on ``main``; reuse a cached one.

    ``build="appends"``: one-row pyiceberg appends, one commit each (real, but slow: pyiceberg
    rewrites the growing metadata and manifest list on every commit — about an hour for 5,000
    on this 2-core machine, hence the cache). ``build="history"`` (default): three real appends,
    then the table's history is extended to ``snapshots`` entries in one metadata file (each
    extra snapshot is a real entry — id, parent, sequence number, timestamp, summary — reusing
    the last real manifest list), registered through the catalog. A poll only reads metadata,
    so what it sees has exactly the size and shape of a 5,000-commit history.
    """
    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    if hook.table_exists(table) and len(hook.load_table(table).metadata.snapshots) == snapshots:
        return
    if hook.table_exists(table):
        hook.catalog.drop_table(table)
    hook.ensure_namespace(table.split(".")[0])
    tbl = hook.catalog.create_table(
        table,
        schema=Schema(NestedField(1, "id", LongType(), required=False)),
        properties={"format-version": "2", "write.metadata.previous-versions-max": "5"},
    )
    t0 = time.monotonic()
    real = snapshots if build == "appends" else min(3, snapshots)
    for i in range(real):
        tbl.append(pa.table({"id": pa.array([i], pa.int64())}))  # refreshes tbl after each commit
        if (i + 1) % 250 == 0:
            print(f"  {table}: {i + 1}/{snapshots} snapshots ({time.monotonic() - t0:.0f}s)", flush=True)
    if real < snapshots:
        _extend_history(hook, table, snapshots)
    assert len(hook.load_table(table).metadata.snapshots) == snapshots
    print(f"  built {table} ({build}, {snapshots} snapshots) in {time.monotonic() - t0:.1f}s", flush=True)


def _extend_history(hook, table: str, snapshots: int) -> None:
    import random
    import uuid

    tbl = hook.load_table(table)
    meta = json.loads(tbl.metadata.model_dump_json())
    last = meta["snapshots"][-1]
    rng = random.Random(snapshots)
    now_ms = int(time.time() * 1000)
    extra = snapshots - len(meta["snapshots"])
    parent, seq, records = last["snapshot-id"], last["sequence-number"], int(last["summary"]["total-records"])
    for i in range(extra):
        sid = rng.getrandbits(62) + 1
        seq += 1
        records += 1
        ts = now_ms - (extra - i) * 1000  # one commit per second, ending now
        summary = {**last["summary"], "added-records": "1", "total-records": str(records)}
        meta["snapshots"].append(
            {
                "snapshot-id": sid,
                "parent-snapshot-id": parent,
                "sequence-number": seq,
                "timestamp-ms": ts,
                "manifest-list": last["manifest-list"],
                "summary": summary,
                "schema-id": last.get("schema-id", 0),
            }
        )
        meta["snapshot-log"].append({"snapshot-id": sid, "timestamp-ms": ts})
        parent = sid
    meta.update({"current-snapshot-id": parent, "last-sequence-number": seq, "last-updated-ms": now_ms})
    meta["refs"]["main"] = {"snapshot-id": parent, "type": "branch"}
    path = f"{meta['location']}/metadata/{len(meta['metadata-log']) + 2:05d}-{uuid.uuid4()}.metadata.json"
    Path(path.removeprefix("file://")).write_text(json.dumps(meta))
    hook.catalog.drop_table(table)  # SQL catalog: removes the pointer row only
    hook.catalog.register_table(table, path)


def idle_polls(hook, table: str, polls: int) -> list[float]:
    """Idle polls as a sensor makes them: pointer unchanged since the previous poll."""
    head = hook.ref_snapshot_id(table)
    first = hook.poll_commit(table, after_snapshot_id=head)  # the sensor's first poll: loads once
    assert first["loaded"] and first["snapshot"] is None
    known = first["metadata_location"]
    gc.collect()  # do not bill the first load's garbage to the idle polls
    out = []
    for _ in range(polls):
        t0 = time.perf_counter()
        res = hook.poll_commit(table, after_snapshot_id=head, known_metadata_location=known)
        out.append(time.perf_counter() - t0)
        assert not res["loaded"] and res["snapshot"] is None
    return out


def naive_polls(hook, table: str, polls: int) -> list[float]:
    """What a sensor without the pointer check pays: load + parse + search every time."""
    head = hook.ref_snapshot_id(table)
    out = []
    for _ in range(polls):
        t0 = time.perf_counter()
        hook.find_snapshots(table, ref="main", after_snapshot_id=head)
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--snapshots", type=int, default=5000)
    parser.add_argument("--small", type=int, default=10)
    parser.add_argument("--polls", type=int, default=500)
    parser.add_argument("--naive-polls", type=int, default=20)
    parser.add_argument("--build", choices=("history", "appends"), default="history", help="see ensure_table")
    args = parser.parse_args()
    work = Path(os.environ.get("AIP_WORK", ROOT / ".work")) / "bench" / "sensor_poll"
    hook = connect(work)
    small, big = "poll.small", f"poll.big_{args.snapshots}"
    ensure_table(hook, small, args.small, "appends")
    ensure_table(hook, big, args.snapshots, args.build)
    meta_bytes = {t: Path(hook.metadata_location(t).removeprefix("file://")).stat().st_size for t in (small, big)}
    # alternate the tables in rounds so machine noise hits both alike
    results: dict[str, dict[str, list[float]]] = {small: {}, big: {}}
    rounds = 5
    for _ in range(rounds):
        for table in (small, big):
            results[table].setdefault("idle poll (pointer only)", []).extend(
                idle_polls(hook, table, args.polls // rounds)
            )
    for _ in range(rounds):
        for table in (small, big):
            results[table].setdefault("naive poll (load + parse)", []).extend(
                naive_polls(hook, table, max(1, args.naive_polls // rounds))
            )
    print()
    print(f"{'poll':28} {'table':>22} {'p50':>10} {'p95':>10}")
    for kind in ("idle poll (pointer only)", "naive poll (load + parse)"):
        for table, n in ((small, args.small), (big, args.snapshots)):
            v = results[table][kind]
            label = f"{n} snaps, {meta_bytes[table] / 1024:.0f} KiB"
            print(f"{kind:28} {label:>22} {pct(v, 0.5) * 1000:8.3f}ms {pct(v, 0.95) * 1000:8.3f}ms")
    idle_ratio = statistics.median(results[big]["idle poll (pointer only)"]) / statistics.median(
        results[small]["idle poll (pointer only)"]
    )
    naive_ratio = statistics.median(results[big]["naive poll (load + parse)"]) / statistics.median(
        results[small]["naive poll (load + parse)"]
    )
    print(
        f"idle poll  {args.snapshots} vs {args.small} snapshots: {idle_ratio:.2f}x  -> goal <= 1.5: "
        f"{'met' if idle_ratio <= 1.5 else 'NOT met'}"
    )
    print(f"naive poll {args.snapshots} vs {args.small} snapshots: {naive_ratio:.1f}x (what the pointer check avoids)")
    return 0 if idle_ratio <= 1.5 else 1


if __name__ == "__main__":
    sys.exit(main())
