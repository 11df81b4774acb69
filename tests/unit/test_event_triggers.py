"""Event triggers (AssetWatcher) driven with asyncio against real SQLite catalogs.

Each test runs the trigger's ``run()`` the way the triggerer does (one task consuming the
async generator), commits to the table from outside while it runs, and "restarts the
triggerer" by cancelling that task at its await point and starting a new instance rebuilt
from ``serialize()`` with the same durable watermark store.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from airflow.sdk import Asset
from airflow.sdk._shared.module_loading import import_string
from airflow.triggers.base import BaseEventTrigger

from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.triggers._event_state import AssetStateWatermarks, JsonFileWatermarks
from airflow_iceberg_provider.triggers.commit_events import IcebergCommitEventTrigger, newest_watermark
from airflow_iceberg_provider.triggers.erasure_events import IcebergErasureDeadlineEventTrigger, approaching
from airflow_iceberg_provider.triggers.health_events import IcebergTableHealthEventTrigger, hysteresis
from tests.support.lake import create_orders_table, orders_batch

T = "db.orders"
FAST = 0.05


class Running:
    """A trigger's run() consumed by a task, as the triggerer does; events land in a queue."""

    def __init__(self, trigger, store):
        trigger.watermark_store = store
        self.trigger = trigger
        self.events: asyncio.Queue = asyncio.Queue()
        self.task = asyncio.create_task(self._pump())

    async def _pump(self):
        async for event in self.trigger.run():
            await self.events.put(event.payload)

    async def take(self, n: int, timeout: float = 10.0) -> list[dict]:
        return [await asyncio.wait_for(self.events.get(), timeout) for _ in range(n)]

    async def quiet(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        assert self.events.empty(), f"unexpected event(s): {self.drain()}"
        if self.task.done():
            self.task.result()  # surface a crash

    def drain(self) -> list[dict]:
        out = []
        while not self.events.empty():
            out.append(self.events.get_nowait())
        return out

    async def stop(self) -> None:
        """Triggerer shutdown: the task is cancelled wherever run() awaits."""
        self.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self.task


def rebuilt(trigger):
    path, kwargs = trigger.serialize()
    return import_string(path)(**json.loads(json.dumps(kwargs)))


async def append(hook, table: str, start: int, rows: int = 5) -> int:
    def go():
        hook.load_table(table).append(orders_batch(start, rows))
        return hook.load_table(table).current_snapshot().snapshot_id

    return await asyncio.to_thread(go)


async def delete_some(hook, table: str, below: int) -> int:
    from pyiceberg.expressions import LessThan

    def go():
        hook.load_table(table).delete(LessThan("order_id", below))
        return hook.load_table(table).current_snapshot().snapshot_id

    return await asyncio.to_thread(go)


# ------------------------------------------------------------------------------ serialization
TRIGGERS = [
    IcebergCommitEventTrigger(
        table="db.orders",
        ref="audit",
        operation="append",
        summary={"k": 1},
        after_snapshot_id=2**63 - 1,
        iceberg_catalog_conn_id="cat",
        poll_interval=5,
    ),
    IcebergTableHealthEventTrigger(
        table="db.orders", actions=["rewrite_data_files"], poll_interval=7, recheck_interval=3600
    ),
    IcebergErasureDeadlineEventTrigger(
        requests_table="gov.requests", deadlines={"logical": "48h", "physical": "P30D"}, margin={"physical": "36h"}
    ),
]


@pytest.mark.parametrize("trigger", TRIGGERS, ids=lambda t: type(t).__name__)
def test_serialize_round_trip_is_primitive_and_stable(trigger):
    path, kwargs = trigger.serialize()
    assert isinstance(trigger, BaseEventTrigger)
    assert json.loads(json.dumps(kwargs)) == kwargs  # JSON primitives only
    again = import_string(path)(**kwargs)
    assert again.serialize() == (path, kwargs)
    # Airflow identifies a watcher's trigger by this hash: the rebuilt trigger is the same trigger
    assert BaseEventTrigger.hash(path, kwargs) == BaseEventTrigger.hash(*again.serialize())
    assert again.state_key == trigger.state_key


def test_snapshot_ids_serialize_as_decimal_strings():
    _, kwargs = TRIGGERS[0].serialize()
    assert kwargs["after_snapshot_id"] == str(2**63 - 1)
    _, kwargs = TRIGGERS[2].serialize()
    assert kwargs["deadlines"] == {"logical": 172800.0, "physical": 2592000.0} and kwargs["margin"] == {
        "logical": 0.0,
        "physical": 129600.0,
    }


@pytest.mark.parametrize(
    ("make", "names"),
    [
        (lambda: IcebergCommitEventTrigger(table="orders"), "table"),
        (lambda: IcebergCommitEventTrigger(table="db.orders; drop"), "table"),
        (lambda: IcebergCommitEventTrigger(table=T, ref="main\n"), "ref"),
        (lambda: IcebergCommitEventTrigger(table=T, operation="merge"), "operation"),
        (lambda: IcebergCommitEventTrigger(table=T, summary=["wap.id"]), "summary"),
        (lambda: IcebergCommitEventTrigger(table=T, after_snapshot_id="12x"), "after_snapshot_id"),
        (lambda: IcebergCommitEventTrigger(table=T, poll_interval=0), "poll_interval"),
        (lambda: IcebergCommitEventTrigger(table=T, poll_interval=float("nan")), "poll_interval"),
        (lambda: IcebergTableHealthEventTrigger(table=T, actions=["vacuum"]), "actions"),
        (lambda: IcebergTableHealthEventTrigger(table=T, actions="rewrite_data_files"), "actions"),
        (lambda: IcebergTableHealthEventTrigger(table=T, actions=[]), "actions"),
        (lambda: IcebergTableHealthEventTrigger(table=T, recheck_interval=-1), "recheck_interval"),
        (lambda: IcebergErasureDeadlineEventTrigger(requests_table="requests"), "requests_table"),
        (lambda: IcebergErasureDeadlineEventTrigger(requests_table=T, deadlines={"legal": "30d"}), "deadlines"),
        (lambda: IcebergErasureDeadlineEventTrigger(requests_table=T, deadlines={}), "deadlines"),
        (lambda: IcebergErasureDeadlineEventTrigger(requests_table=T, deadlines={"physical": "soon"}), "physical"),
        (lambda: IcebergErasureDeadlineEventTrigger(requests_table=T, deadlines={"physical": -5}), "physical"),
        (lambda: IcebergErasureDeadlineEventTrigger(requests_table=T, margin="31d"), "margin"),
        (lambda: IcebergErasureDeadlineEventTrigger(requests_table=T, margin=True), "margin"),
        (lambda: IcebergErasureDeadlineEventTrigger(requests_table=T, margin={"legal": "1h"}), "margin"),
        (
            lambda: IcebergErasureDeadlineEventTrigger(
                requests_table=T, deadlines={"logical": "31d", "physical": "30d"}
            ),
            "logical deadline is longer",
        ),
        (
            lambda: IcebergErasureDeadlineEventTrigger(requests_table=T, deadlines={"logical": "48h"}, margin="2d"),
            "logical deadline of 2d",
        ),
    ],
)
def test_bad_arguments_are_refused_naming_the_parameter(make, names):
    with pytest.raises(IcebergValidationError, match=names):
        make()


def test_keyword_only():
    with pytest.raises(TypeError):
        IcebergCommitEventTrigger(T)  # type: ignore[misc]


# ------------------------------------------------------------------------------ commit events
def test_one_event_per_matching_commit_in_order_with_string_ids(lake, tmp_path):
    create_orders_table(lake, T)
    base = asyncio.run(append(lake, T, 0))

    async def scenario():
        run = Running(
            IcebergCommitEventTrigger(table=T, operation="append", poll_interval=FAST),
            JsonFileWatermarks(tmp_path / "wm.json"),
        )
        await run.quiet(0.4)  # history (the base commit) is not replayed
        s1 = await append(lake, T, 100)
        s2 = await append(lake, T, 200)  # two commits between polls: two events
        await delete_some(lake, T, 150)  # filtered out (not an append)
        s3 = await append(lake, T, 300)
        events = await run.take(3)
        await run.quiet(0.4)
        await run.stop()
        return s1, s2, s3, events

    s1, s2, s3, events = asyncio.run(scenario())
    assert [e["snapshot_id"] for e in events] == [str(s1), str(s2), str(s3)]
    assert events[0]["parent_id"] == str(base) and events[1]["parent_id"] == str(s1)
    assert all(e["operation"] == "append" and e["kind"] == "iceberg_commit" for e in events)
    assert events[0]["summary"]["added-records"] == "5"
    assert json.loads((tmp_path / "wm.json").read_text())["_"]


def test_restart_mid_stream_loses_nothing_and_repeats_nothing(lake, tmp_path):
    create_orders_table(lake, T)
    store = JsonFileWatermarks(tmp_path / "wm.json")
    trigger = IcebergCommitEventTrigger(table=T, poll_interval=FAST)

    async def scenario():
        seen, made = [], []
        run = Running(trigger, store)
        await run.quiet(0.2)
        for i in range(3):
            made.append(await append(lake, T, 10 * i))
        seen += await run.take(3)
        made.append(await append(lake, T, 100))  # committed right before the restart
        await run.stop()  # triggerer goes down (maybe before, maybe after it saw the 4th)
        seen += run.drain()
        made.append(await append(lake, T, 200))  # committed while it is down
        made.append(await append(lake, T, 300))
        run = Running(rebuilt(trigger), store)
        seen += await run.take(len(made) - len(seen))
        made.append(await append(lake, T, 400))  # after the restart
        seen += await run.take(1)
        await run.quiet(0.4)
        await run.stop()
        return made, seen

    made, seen = asyncio.run(scenario())
    assert [e["snapshot_id"] for e in seen] == [str(s) for s in made]


def test_cancelled_during_handoff_redelivers_instead_of_losing(lake, tmp_path):
    """The watermark is saved only after the triggerer took the event (resumed the generator)."""
    create_orders_table(lake, T)
    store = JsonFileWatermarks(tmp_path / "wm.json")
    trigger = IcebergCommitEventTrigger(table=T, poll_interval=FAST)
    trigger.watermark_store = store

    async def scenario():
        gen = trigger.run()
        first = asyncio.ensure_future(anext(gen))
        await asyncio.sleep(0.3)
        sid = await append(lake, T, 1)
        event = await asyncio.wait_for(first, 10)  # yielded, but the triggerer dies before queueing it
        await gen.aclose()
        again = rebuilt(trigger)
        again.watermark_store = store
        gen2 = again.run()
        redelivered = await asyncio.wait_for(anext(gen2), 10)
        await gen2.aclose()
        return sid, event, redelivered

    sid, event, redelivered = asyncio.run(scenario())
    assert event.payload["snapshot_id"] == redelivered.payload["snapshot_id"] == str(sid)


def test_several_assets_on_one_trigger_keep_a_watermark_each(lake, tmp_path):
    create_orders_table(lake, T)
    path = tmp_path / "wm.json"
    trigger = IcebergCommitEventTrigger(table=T, poll_interval=FAST)

    async def scenario():
        run = Running(trigger, JsonFileWatermarks(path, assets=("orders_a", "orders_b")))
        await run.quiet(0.2)
        s1 = await append(lake, T, 1)
        (e1,) = await run.take(1)
        await run.stop()
        # a third asset joins the same trigger (same kwargs = same trigger row in Airflow)
        run = Running(rebuilt(trigger), JsonFileWatermarks(path, assets=("orders_a", "orders_b", "orders_c")))
        await run.quiet(0.3)  # no replay of s1 for the newcomer: events always go to every asset
        s2 = await append(lake, T, 2)
        (e2,) = await run.take(1)
        await run.stop()
        return s1, s2, e1, e2

    s1, s2, e1, e2 = asyncio.run(scenario())
    assert (e1["snapshot_id"], e2["snapshot_id"]) == (str(s1), str(s2))
    stored = json.loads(path.read_text())
    assert set(stored) == {"orders_a", "orders_b", "orders_c"}
    assert {v[trigger.state_key]["snapshot_id"] for v in stored.values()} == {str(s2)}


def test_newest_watermark_wins():
    assert newest_watermark({"a": None, "b": {"snapshot_id": "5", "timestamp_ms": 10}}) == {
        "snapshot_id": "5",
        "timestamp_ms": 10,
    }
    marks = {"a": {"snapshot_id": "5", "timestamp_ms": 10}, "b": {"snapshot_id": "9", "timestamp_ms": 20}}
    assert newest_watermark(marks)["snapshot_id"] == "9"
    assert newest_watermark({"a": "garbage"}) is None


def test_asset_state_store_adapter_finds_every_watched_asset():
    """The triggerer injects AssetStateStoreAccessors(inlets=watched assets); we need each one."""
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

    injected = AssetStateStoreAccessors(inlets=[Asset(name="a", uri="s3://x/a"), Asset(name="b", uri="s3://x/b")])
    store = AssetStateWatermarks.from_injected(injected)
    assert store is not None and sorted(store.accessors) == ["a", "b"]
    assert AssetStateWatermarks.from_injected(None) is None


def test_table_created_after_the_trigger_started(lake, tmp_path):
    async def scenario():
        run = Running(IcebergCommitEventTrigger(table=T, poll_interval=FAST), JsonFileWatermarks(tmp_path / "w"))
        await run.quiet(0.3)  # not there yet: waiting, not failing
        await asyncio.to_thread(create_orders_table, lake, T)
        s1 = await append(lake, T, 1)
        (e1,) = await run.take(1)
        await run.stop()
        return s1, e1

    s1, e1 = asyncio.run(scenario())
    assert e1["snapshot_id"] == str(s1) and e1["parent_id"] is None


# ------------------------------------------------------------------------------ health events
def test_hysteresis_rule():
    assert hysteresis(False, True) == (True, True)
    assert hysteresis(True, True) == (False, True)
    assert hysteresis(True, False) == (False, False)
    assert hysteresis(False, False) == (False, False)


def test_health_fires_on_crossing_stays_quiet_and_rearms_after_healing(lake, tmp_path):
    # the threshold comes from the table's own properties (default min-input-files is 5)
    create_orders_table(lake, T, partition_by=(), properties={"airflow-iceberg.maintenance.min-input-files": "3"})
    store = JsonFileWatermarks(tmp_path / "health.json")
    trigger = IcebergTableHealthEventTrigger(table=T, poll_interval=FAST)

    async def scenario():
        run = Running(trigger, store)
        await append(lake, T, 0)
        await append(lake, T, 10)
        await run.quiet(0.5)  # 2 small files: below the table's min-input-files=3
        await append(lake, T, 20)  # pathology: 3 small files
        (event,) = await run.take(1)
        await append(lake, T, 30)  # still unhealthy: already reported
        await run.quiet(0.5)
        await run.stop()
        run = Running(rebuilt(trigger), store)  # a restart does not report the same episode again
        await run.quiet(0.5)
        await asyncio.to_thread(_heal, lake)  # one file: nothing to do -> re-armed, no event
        await run.quiet(0.5)
        await append(lake, T, 100)  # healed file + 1 small: 2 files, below the threshold
        await run.quiet(0.5)
        await append(lake, T, 110)  # crossed again
        (again,) = await run.take(1)
        await run.stop()
        return event, again

    event, again = asyncio.run(scenario())
    assert event["kind"] == "iceberg_health" and event["actions"] == ["rewrite_data_files"]
    assert "3 of 3 data files" in event["reasons"]["rewrite_data_files"]
    assert event["health"]["data_files"] == 3 and isinstance(event["snapshot_id"], str)
    assert again["actions"] == ["rewrite_data_files"] and again["health"]["data_files"] == 3


def _heal(lake):
    """What compaction does to this table: all rows in one file (a real overwrite commit)."""
    tbl = lake.load_table(T)
    tbl.overwrite(tbl.scan().to_arrow())
    assert lake.health(T).data_files == 1


def test_health_computed_only_when_the_pointer_moved(lake, tmp_path):
    create_orders_table(lake, T, partition_by=())
    trigger = IcebergTableHealthEventTrigger(table=T, poll_interval=FAST)
    calls = []

    class Counting(type(lake)):
        def health(self, *a, **kw):
            calls.append(1)
            return super().health(*a, **kw)

    trigger.hook = lambda: Counting()  # the real hook, counting its health reads

    async def scenario():
        run = Running(trigger, JsonFileWatermarks(tmp_path / "h.json"))
        await run.quiet(0.6)  # ~12 polls of the new table: evaluated once
        counts = [len(calls)]
        for i in range(2):
            await append(lake, T, 10 * i)
            await run.quiet(0.6)  # ~12 polls, one pointer change each
            counts.append(len(calls))
        await run.stop()
        return counts

    assert asyncio.run(scenario()) == [1, 2, 3]


def test_health_recheck_interval_evaluates_without_a_commit(lake, tmp_path):
    """Time-driven thresholds (snapshot expiry) need an evaluation even when nothing is committed."""
    create_orders_table(lake, T, partition_by=())
    trigger = IcebergTableHealthEventTrigger(table=T, poll_interval=FAST, recheck_interval=0.3)
    calls = []

    class Counting(type(lake)):
        def health(self, *a, **kw):
            calls.append(1)
            return super().health(*a, **kw)

    trigger.hook = lambda: Counting()

    async def scenario():
        run = Running(trigger, JsonFileWatermarks(tmp_path / "h.json"))
        await run.quiet(1.1)
        await run.stop()

    asyncio.run(scenario())
    assert 2 <= len(calls) <= 6  # without recheck_interval: exactly 1 (see the test above)


# ------------------------------------------------------------------------------ deadline events
def _requests(lake, rows):
    table = lake.governance.ensure_erasure_requests_table("gov.requests")
    tbl = lake.load_table(table)
    data = pa.Table.from_pylist(
        [{"subject_key": "x", "updated_at": None, "completed_at": None, **r} for r in rows],
        schema=tbl.schema().as_arrow(),
    )
    tbl.overwrite(data)
    return table


def test_approaching_rule_per_kind():
    now = datetime(2026, 3, 1, tzinfo=UTC)
    rows = [
        {"request_id": "r1", "received_at": now - timedelta(days=29, hours=1), "status": "pending"},
        {"request_id": "r2", "received_at": now - timedelta(days=29, hours=1), "status": "logically_erased"},
        {"request_id": "r3", "received_at": now - timedelta(hours=1), "status": "pending"},
        {"request_id": "r4", "received_at": now - timedelta(days=40), "status": "redacted"},
        {"request_id": "r5", "received_at": None, "status": "pending"},
        {"request_id": "r6", "received_at": now - timedelta(days=3), "status": "blocked"},  # a hold: not deleted
        {"request_id": "r7", "received_at": now - timedelta(days=40), "status": "erased"},
    ]
    got = approaching(
        rows,
        now=now,
        deadlines={"logical": timedelta(hours=48), "physical": timedelta(days=30)},
        margins={"logical": timedelta(days=1), "physical": timedelta(days=1)},
    )
    assert [(g["request_id"], g["deadline"], g["overdue"]) for g in got] == [
        ("r1", "logical", True),
        ("r6", "logical", True),
        ("r1", "physical", False),
        ("r2", "physical", False),
    ]


@pytest.mark.security
def test_deadline_events_fire_once_per_request_and_kind_across_restarts(lake, tmp_path):
    now = datetime.now(UTC)
    table = _requests(
        lake,
        [
            {"request_id": "r1", "received_at": now - timedelta(days=29), "status": "pending"},
            {"request_id": "r2", "received_at": now, "status": "pending"},
            {"request_id": "r3", "received_at": now - timedelta(hours=12), "status": "erased"},
        ],
    )
    store = JsonFileWatermarks(tmp_path / "dl.json")
    # r2's logical deadline (48 h) comes within the margin about 1.5 s from now, with no commit
    margin = timedelta(hours=48) - (datetime.now(UTC) - now) - timedelta(seconds=1.5)
    margins = {"logical": margin.total_seconds(), "physical": "2d"}
    trigger = IcebergErasureDeadlineEventTrigger(
        requests_table=table,
        deadlines={"logical": "48h", "physical": "30d"},
        margin=margins,
        poll_interval=FAST,
    )

    async def scenario():
        run = Running(trigger, store)
        first = await run.take(2)
        await run.stop()
        run = Running(rebuilt(trigger), store)
        timed = await run.take(1, timeout=10)  # by time alone
        await run.quiet(0.5)
        await run.stop()
        return first, timed

    first, timed = asyncio.run(scenario())
    r1, r2 = (now - timedelta(days=29)).isoformat(), now.isoformat()
    assert [(e["received_at"], e["deadline"], e["overdue"]) for e in first] == [
        (r1, "logical", True),
        (r1, "physical", False),
    ]
    assert (timed[0]["received_at"], timed[0]["deadline"], timed[0]["overdue"]) == (r2, "logical", False)
    # asset events are public: no request id in them (the fired state, kept by the triggerer, has them)
    assert all("request_id" not in e for e in first + timed)
    assert not any(rid in json.dumps(first + timed) for rid in ('"r1"', '"r2"', '"r3"'))
    assert "subject_key" not in json.dumps(first + timed) and "x" not in [e.get("subject") for e in first]
    stored = json.loads((tmp_path / "dl.json").read_text())["_"][trigger.state_key]["fired"]
    assert set(stored) == {"r1|logical", "r1|physical", "r2|logical"}


def test_shutdown_during_the_watermark_save_completes_the_save(tmp_path):
    """The event is already queued when the save starts: a cancellation must not skip the save."""

    class SlowStore(JsonFileWatermarks):
        def _write(self, key, value):
            import time

            time.sleep(0.3)
            super()._write(key, value)

    store = SlowStore(tmp_path / "wm.json")
    trigger = IcebergCommitEventTrigger(table=T)

    async def scenario():
        task = asyncio.create_task(trigger.save_delivered(store, "k", {"snapshot_id": "7", "timestamp_ms": 1}))
        await asyncio.sleep(0.05)  # inside the save
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return await store.load("k")

    assert asyncio.run(scenario()) == {"_": {"snapshot_id": "7", "timestamp_ms": 1}}


def test_health_verdict_flags_an_expiry_that_would_drop_a_legal_hold(lake):
    """#16: the plan refuses such an expiry; the health watcher must say so, not crash the trigger."""
    from airflow_iceberg_provider.triggers.health_events import maintenance_verdict
    from tests.support.lake import append_batches, create_orders_table

    create_orders_table(lake, "db.held", partition_by=())
    ids = append_batches(lake, "db.held", 2)
    lake.set_ref("db.held", "legal-hold-case-1", ids[0], ref_type="tag")  # placed by hand: no own age
    lake.ensure_table_properties("db.held", {"history.expire.max-ref-age-ms": "1"})
    verdict = maintenance_verdict(lake, "db.held")
    assert verdict["needs_maintenance"] is True
    assert "legal-hold-case-1" in verdict["reasons"]["expire_snapshots"]
