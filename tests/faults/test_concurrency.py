"""Concurrency without Spark: 8 WAP runs on one table publishing at the same instant.

Each run writes its own branch cheaply (a pyiceberg append to the branch, plus the audit
record the audit job would write); the 8 publishes — metadata-only compare-and-swaps of
``main`` — are released together from a barrier in 8 threads, each with its own hook and
catalog connection. Runs whose publish loses re-run the pipeline on a fresh branch (what
the conflict error tells them to do) until every run has published.

What must hold: in each round exactly one publish wins (all branches were cut from the
same ``main``), every other run fails with the conflict error and changes nothing, and in
the end ``main`` holds the base rows plus every run's rows exactly once (no lost update,
no duplicate), with exactly one ``wap_publish`` ledger row per run.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_iceberg_provider.exceptions import (
    IcebergCatalogUnavailableError,
    IcebergCommitConflictError,
    IcebergPublishConflictError,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from tests.support.lake import create_orders_table, fake_context, orders_batch
from tests.support.wap import commit_to_branch, record_audit

pytestmark = pytest.mark.faults

T = "db.race"
RUNS = 8
ROWS = 5


def run_rows(i: int) -> range:
    return range(10_000 * (i + 1), 10_000 * (i + 1) + ROWS)


def test_eight_wap_runs_publish_at_once_and_no_update_is_lost(lake):
    hook = lake
    create_orders_table(hook, T, partition_by=()).append(orders_batch(0, 20))
    pending = set(range(RUNS))
    published: dict[int, int] = {}
    rounds: list[dict[str, int]] = []
    while pending:
        main = hook.ref_snapshot_id(T)
        branches = {}
        for i in sorted(pending):
            branch = f"run{i}_try{len(rounds) + 1}"
            hook.set_ref(T, branch, main)
            head = commit_to_branch(hook, T, branch, run_rows(i).start, ROWS)
            audit = record_audit(hook, T, branch, head, event_id=f"audit-{branch}", dag_id="race", run_id=f"run{i}")
            branches[i] = (branch, head, audit)
        barrier = threading.Barrier(len(pending))

        def publish(i: int, branches=branches, main=main, barrier=barrier) -> tuple[int, str, object]:
            branch, head, audit = branches[i]
            op = IcebergWapPublishOperator(
                task_id=f"publish_{i}", table=T, branch=branch, audit=audit, base_snapshot_id=main
            )
            op.catalog_hook.load_table(T)  # connect before the barrier: the race is the commit, not the setup
            barrier.wait()
            try:
                return i, "published", op.execute(fake_context(dag_id="race", run_id=f"run{i}"))
            except (IcebergPublishConflictError, IcebergCommitConflictError, IcebergCatalogUnavailableError) as err:
                return i, "conflict", err

        with ThreadPoolExecutor(len(pending)) as pool:
            results = list(pool.map(publish, sorted(pending)))
        winners = [(i, out) for i, kind, out in results if kind == "published"]
        assert len(winners) == 1, f"round {len(rounds) + 1}: {[(i, k, str(o)[:120]) for i, k, o in results]}"
        ((winner, out),) = winners
        assert out["method"] == "fast_forward" and out["published_snapshot_id"] == str(branches[winner][1])
        assert IcebergCatalogHook().ref_snapshot_id(T) == branches[winner][1], "main is not the winner's snapshot"
        for _, kind, failure in results:
            if kind == "conflict":
                text = str(failure)
                assert "main moved" in text or "lost against a concurrent change" in text, text
        kinds = Counter(type(o).__name__ for _, k, o in results if k == "conflict")
        rounds.append({"runs": len(pending), **kinds})
        published[winner] = int(out["published_snapshot_id"])
        pending.discard(winner)

    print("rounds:", rounds)
    assert len(rounds) == RUNS  # one winner per round: every publish raced against all others still pending
    ids = Counter(hook.load_table(T).scan().to_arrow().column("order_id").to_pylist())
    expected = Counter(list(range(20)) + [r for i in range(RUNS) for r in run_rows(i)])
    assert ids == expected, "a published run's rows are missing or duplicated on main"
    ledger = [r for r in hook.governance.read("ledger", operation="wap_publish", table_name=T)]
    assert sorted(r["snapshot_after"] for r in ledger) == sorted(published.values())
    assert all(r["status"] == "succeeded" for r in ledger)
    # main's history is a single line through every published snapshot
    chain = hook.ancestor_ids(T, hook.ref_snapshot_id(T))
    assert set(published.values()) <= set(chain)
