"""Snapshot ids reach Airflow as exact decimal strings (#20): XCom, Asset-event extra, ledger details.

The browser behind Airflow's XCom and Asset views parses JSON numbers as float64 and rounds
64-bit ids (``3742192974030064337`` shows as ``3742192974030064000``). These tests parse what
the provider emits the way JavaScript does (``json.loads(..., parse_int=float)``) and require
every id to come back exactly. No Spark: real SQLite catalogs and pyiceberg commits.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from airflow_iceberg_provider.ids import (
    MAX_SAFE_INTEGER,
    id_str,
    is_id_key,
    is_id_list_key,
    with_string_ids,
)
from tests.support.lake import append_batches, create_orders_table, fake_context, orders_batch
from tests.support.wap import commit_to_branch, record_audit

BIG = 3742192974030064337  # the id from the issue: a browser shows 3742192974030064000
ERASURE_ID = 8581868152581986941


def as_javascript(value: Any) -> Any:
    """What ``JSON.parse`` in a browser makes of the JSON Airflow stores: every number a float64."""
    return json.loads(json.dumps(value), parse_int=float, parse_float=float)


def id_values(value: Any, key: object = None) -> list[tuple[str, Any]]:
    """Every ``(key, value)`` under an id key (single ids and list items), recursively."""
    out: list[tuple[str, Any]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if is_id_key(k) and v is not None:
                out.append((k, v))
            elif is_id_list_key(k) and isinstance(v, list):
                out += [(k, item) for item in v]
            else:
                out += id_values(v, k)
    elif isinstance(value, list):
        for v in value:
            out += id_values(v, key)
    return out


def assert_exact_in_browser(value: Any, known: set[int]) -> int:
    """Every id in ``value`` survives a float64 parse as a string naming a real snapshot; returns how many."""
    found = id_values(as_javascript(value))
    for key, v in found:
        assert isinstance(v, str), f"{key}={v!r} is not a string: a browser shows {float(v):.0f}"
        assert int(v) in known, f"{key}={v} is not a snapshot of the table"
    return len(found)


# ------------------------------------------------------------------------- pure
def test_float64_rounds_a_numeric_id_but_not_its_string():
    assert BIG > MAX_SAFE_INTEGER and ERASURE_ID > MAX_SAFE_INTEGER
    assert as_javascript({"snapshot_id": BIG})["snapshot_id"] != BIG  # why: 3742192974030064000.0
    assert as_javascript(with_string_ids({"snapshot_id": BIG})) == {"snapshot_id": str(BIG)}
    assert int(as_javascript(with_string_ids({"snapshot_after": ERASURE_ID}))["snapshot_after"]) == ERASURE_ID


def test_with_string_ids_converts_id_keys_only_and_recurses():
    value = {
        "table": "db.t",
        "snapshot_id": BIG,
        "base_snapshot_id": 1,
        "audited_snapshot_id": None,
        "parent_id": -5,
        "sequence_number": 7,
        "snapshot_before": ERASURE_ID,
        "discarded": [BIG, ERASURE_ID],
        "would_expire": [],
        "added_records": 2**60,  # a count, not an id: untouched
        "retain_last": 3,
        "passed": True,
        "snapshot_ids": [1, "2"],
        "details": {"expire": [BIG], "previous_snapshot_id": BIG, "held_snapshots": {str(BIG): ["tag:x"]}},
        "results": [{"check": "a", "observed": 2**62, "snapshot_id": BIG}],
    }
    out = with_string_ids(value)
    assert out["snapshot_id"] == str(BIG) and out["base_snapshot_id"] == "1" and out["audited_snapshot_id"] is None
    assert (out["parent_id"], out["sequence_number"], out["snapshot_before"]) == ("-5", "7", str(ERASURE_ID))
    assert out["discarded"] == [str(BIG), str(ERASURE_ID)] and out["would_expire"] == []
    assert (out["added_records"], out["retain_last"], out["passed"]) == (2**60, 3, True)
    assert out["snapshot_ids"] == ["1", "2"]
    assert out["details"] == {
        "expire": [str(BIG)],
        "previous_snapshot_id": str(BIG),
        "held_snapshots": {str(BIG): ["tag:x"]},
    }
    assert out["results"] == [{"check": "a", "observed": 2**62, "snapshot_id": str(BIG)}]
    assert value["snapshot_id"] == BIG, "the input is not modified"
    assert with_string_ids(out) == out, "idempotent"


def test_id_str_accepts_ints_and_decimal_strings_and_refuses_floats():
    assert id_str(BIG) == str(BIG) and id_str(f" {BIG} ") == str(BIG) and id_str("007") == "7" and id_str(None) is None
    for bad in (float(BIG), True, "12a", "", [1]):
        with pytest.raises(ValueError, match="not a snapshot id"):
            id_str(bad)  # type: ignore[arg-type]


# ------------------------------------------------------ what operators emit
def _snapshots(hook, table: str) -> set[int]:
    return {s.snapshot_id for s in hook.list_snapshots(table)}


def _ledger_details(hook, operation: str) -> list[dict[str, Any]]:
    return [json.loads(r["details"] or "{}") for r in hook.governance.read("ledger", operation=operation)]


def test_wap_xcom_asset_extra_and_ledger_details_keep_exact_ids(lake):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_iceberg_provider.assets.uris import iceberg_asset
    from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator

    T = "db.orders"
    create_orders_table(lake, T).append(orders_batch(0, 10))
    created = IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    head = commit_to_branch(lake, T, "b", 100, 5)
    audit = record_audit(lake, T, "b", head)
    asset = iceberg_asset(T)
    events = OutletEventAccessors()
    op = IcebergWapPublishOperator(
        task_id="p",
        table=T,
        branch="b",
        audit=audit,
        audited_snapshot_id=str(head),
        base_snapshot_id=created["base_snapshot_id"],
        outlets=[asset],
    )
    published = op.execute({**fake_context(), "outlet_events": events})
    known = _snapshots(lake, T)
    assert assert_exact_in_browser(created, known) == 1
    assert assert_exact_in_browser(published, known) == 3  # published, audited, previous main
    assert as_javascript(published)["published_snapshot_id"] == str(head)
    assert assert_exact_in_browser(events[asset].extra, known) == 2
    assert as_javascript(events[asset].extra)["snapshot_id"] == str(head)
    details = _ledger_details(lake, "wap_create_branch") + _ledger_details(lake, "wap_publish")
    assert assert_exact_in_browser(details, known) == 1  # audited_snapshot_id (from_snapshot_id is None)
    assert details[-1]["audited_snapshot_id"] == str(head)
    # a retried publish recognises its ledger row (ids compared as strings and ints alike): no second row
    op.execute({**fake_context(try_number=2), "outlet_events": OutletEventAccessors()})
    assert len(lake.governance.read("ledger", operation="wap_publish")) == 1


def test_rollback_and_expiry_lists_of_ids_stay_exact(lake):
    from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
    from airflow_iceberg_provider.operators.refs import IcebergRollbackOperator

    T = "db.orders"
    create_orders_table(lake, T)
    ids = append_batches(lake, T, 4)
    known = _snapshots(lake, T)
    out = IcebergRollbackOperator(task_id="r", table=T, to_snapshot_id=ids[1]).execute(fake_context())
    assert assert_exact_in_browser(out, known) == 4  # target, previous head, 2 discarded
    assert as_javascript(out)["discarded"] == [str(ids[2]), str(ids[3])]
    (details,) = _ledger_details(lake, "rollback")
    assert details["discarded_snapshots"] == [str(ids[2]), str(ids[3])]
    assert details["target"] == {"to_snapshot_id": str(ids[1])}
    preview = IcebergExpireSnapshotsOperator(
        task_id="e",
        table=T,
        older_than="0s",
        older_than_floor="0s",
        retain_last=1,
        dry_run=True,
        jars=["x.jar"],
        packages=[],
    ).execute(fake_context())
    assert preview["would_expire"] and assert_exact_in_browser(preview, known) == len(preview["would_expire"])
    (details,) = _ledger_details(lake, "maintenance.expire_snapshots")
    assert assert_exact_in_browser(details, known) >= len(preview["would_expire"])
    assert details["expire"] == preview["would_expire"]


@pytest.mark.parametrize("native", [False, True])
def test_a_string_id_pulled_from_xcom_by_a_template_feeds_the_next_operator(lake, native):
    """``{{ ti.xcom_pull(...)['snapshot_id'] }}`` renders the string id; operators take it as given."""
    import jinja2
    from airflow.sdk.definitions._internal.templater import NativeEnvironment

    from airflow_iceberg_provider.operators.refs import IcebergCommitCheckOperator, IcebergCreateTagOperator

    T = "db.orders"
    create_orders_table(lake, T)
    ids = append_batches(lake, T, 3)
    upstream = IcebergCommitCheckOperator(task_id="check", table=T, after_snapshot_id=ids[0]).execute(fake_context())
    assert upstream["snapshot_id"] == str(ids[-1])
    ctx = fake_context()
    ctx["ti"].xcom_pull = lambda task_ids=None, key="return_value", **_: {"check": upstream}[task_ids]
    op = IcebergCreateTagOperator(
        task_id="tag", table=T, tag="pinned", snapshot_id="{{ ti.xcom_pull(task_ids='check')['snapshot_id'] }}"
    )
    env = NativeEnvironment() if native else jinja2.Environment()
    op.render_template_fields(ctx, jinja_env=env)
    assert op.snapshot_id == str(ids[-1])
    out = op.execute(ctx)
    assert out["snapshot_id"] == str(ids[-1]) and lake.refs(T)["pinned"].snapshot_id == ids[-1]
