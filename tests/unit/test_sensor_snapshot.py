"""IcebergSnapshotSensor (poke / reschedule / deferrable) and the cheap poll it relies on."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowRescheduleException, AirflowSensorTimeout, TaskDeferred

from airflow_iceberg_provider.exceptions import IcebergProviderError, IcebergValidationError
from airflow_iceberg_provider.sensors.snapshot import IcebergSnapshotSensor, default_state_key
from airflow_iceberg_provider.triggers.snapshot import IcebergSnapshotTrigger
from tests.support.lake import append_batches, create_orders_table, fake_context, orders_batch

T = "db.orders"


@pytest.fixture
def variables(monkeypatch):
    """Airflow Variables as a dict (the Task SDK stores them through the supervisor, absent in unit tests)."""
    from airflow.sdk import Variable

    store: dict[str, object] = {}

    def get(key, default=None, deserialize_json=False):
        return store.get(key, default)

    def set_(key, value, description=None, serialize_json=False):
        store[key] = value

    monkeypatch.setattr(Variable, "get", staticmethod(get))
    monkeypatch.setattr(Variable, "set", staticmethod(set_))
    return store


def sensor(**kw):
    return IcebergSnapshotSensor(**{"task_id": "wait", "table": T, "poke_interval": 0.05, "timeout": 10, **kw})


def test_poll_reads_only_the_pointer_until_it_changes(lake):
    create_orders_table(lake, T)
    (s1,) = append_batches(lake, T, 1)
    first = lake.poll_commit(T, after_snapshot_id=s1)
    assert (first["loaded"], first["snapshot"], first["head_snapshot_id"]) == (True, None, s1)
    idle = lake.poll_commit(T, after_snapshot_id=s1, known_metadata_location=first["metadata_location"])
    assert (idle["loaded"], idle["snapshot"]) == (False, None)  # pointer unchanged: nothing parsed
    (s2,) = append_batches(lake, T, 1)
    changed = lake.poll_commit(T, after_snapshot_id=s1, known_metadata_location=first["metadata_location"])
    assert changed["loaded"] and changed["snapshot"]["snapshot_id"] == s2
    missing = lake.poll_commit("nope.nothing")
    assert (missing["metadata_location"], missing["snapshot"]) == (None, None)


def test_poke_mode_returns_existing_commit(lake):
    create_orders_table(lake, T)
    s1, s2 = append_batches(lake, T, 2)
    out = sensor(after_snapshot_id=str(s1), operation="append").execute(fake_context())
    assert (out["snapshot_id"], out["parent_id"], out["operation"], out["matched"]) == (str(s2), str(s1), "append", 1)
    assert out["summary"]["added-records"] == "10"


def test_poke_mode_waits_for_a_commit(lake):
    create_orders_table(lake, T)
    (s1,) = append_batches(lake, T, 1)
    threading.Timer(0.4, lambda: lake.load_table(T).append(orders_batch(50, 4))).start()
    out = sensor(after_snapshot_id=s1).execute(fake_context())
    assert out["snapshot_id"] == str(lake.ref_snapshot_id(T)) != str(s1)


def test_missing_table_is_not_yet_and_times_out(lake):
    s = sensor(table="ghost.table", timeout=0.3)
    assert s.poke(fake_context()) is False
    with pytest.raises(AirflowSensorTimeout):
        s.execute(fake_context())


def test_reschedule_mode_reschedules_when_nothing_new(lake):
    create_orders_table(lake, T)
    (s1,) = append_batches(lake, T, 1)
    ctx = fake_context()
    ctx["ti"] = ctx["task_instance"] = SimpleNamespace(**vars(ctx["ti"]), get_first_reschedule_date=lambda c: None)
    with pytest.raises(AirflowRescheduleException):
        sensor(after_snapshot_id=s1, mode="reschedule").execute(ctx)
    append_batches(lake, T, 1)
    out = sensor(after_snapshot_id=s1, mode="reschedule").execute(ctx)
    assert out["snapshot_id"] == str(lake.ref_snapshot_id(T))


def test_deferrable_checks_first_then_defers(lake):
    create_orders_table(lake, T)
    s1, s2 = append_batches(lake, T, 2)
    assert sensor(after_snapshot_id=s1, deferrable=True).execute(fake_context())["snapshot_id"] == str(s2)
    with pytest.raises(TaskDeferred) as deferred:
        sensor(after_snapshot_id=s2, deferrable=True, summary={"wap.id": "{{ run_id }}"}, poke_interval=7).execute(
            fake_context()
        )
    trig = deferred.value.trigger
    assert isinstance(trig, IcebergSnapshotTrigger)
    assert deferred.value.method_name == "execute_complete"
    _, kwargs = trig.serialize()
    assert (kwargs["after_snapshot_id"], kwargs["poll_interval"], kwargs["table"]) == (s2, 7.0, T)
    assert kwargs["after_timestamp_ms"] is None


def test_execute_complete(lake):
    s = sensor()
    snap = {"snapshot_id": 5, "parent_id": 4, "operation": "append", "timestamp_ms": 99, "summary": {"a": "b"}}
    out = s.execute_complete(fake_context(), {"status": "success", "snapshot": snap, "matched": 2, "polls": 3})
    assert (out["snapshot_id"], out["matched"], out["summary"]) == ("5", 2, {"a": "b"})
    with pytest.raises(IcebergProviderError, match="IcebergConnectionError: boom"):
        s.execute_complete(fake_context(), {"status": "error", "message": "IcebergConnectionError: boom"})


def test_default_deferrable_follows_airflow_config(monkeypatch):
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "True")
    assert sensor().deferrable is True
    assert sensor(deferrable=False).deferrable is False
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "False")
    assert sensor().deferrable is False


def test_static_validation():
    with pytest.raises(IcebergValidationError, match="not a valid table identifier"):
        sensor(table="orders")
    with pytest.raises(IcebergValidationError, match="'upsert' is not a snapshot operation"):
        sensor(operation="upsert")
    with pytest.raises(IcebergValidationError, match="exclude each other"):
        sensor(deferrable=True, mode="reschedule")


def test_since_last_seen_persists_per_dag_task_table(lake, variables):
    create_orders_table(lake, T)
    (s1,) = append_batches(lake, T, 1)
    ctx = fake_context(dag_id="d", task_id="wait", run_id="run1")
    # first run: nothing remembered, so the existing commit counts
    assert sensor(since_last_seen=True).execute(ctx)["snapshot_id"] == str(s1)
    key = default_state_key("d", "wait", T, "main")
    assert key == "iceberg_snapshot_sensor.d.wait.db.orders.main"
    assert variables[key]["snapshot_id"] == s1 and variables[key]["run_id"] == "run1"
    # next run: the same commit is not reported again
    assert sensor(since_last_seen=True).poke(fake_context(dag_id="d", task_id="wait")) is False
    (s2,) = append_batches(lake, T, 1)
    out = sensor(since_last_seen=True).execute(fake_context(dag_id="d", task_id="wait", run_id="run2"))
    assert out["snapshot_id"] == str(s2) and variables[key]["snapshot_id"] == s2
    # deferred path stores it too
    (s3,) = append_batches(lake, T, 1)
    with pytest.raises(TaskDeferred) as deferred:
        sensor(since_last_seen=True, deferrable=True, check_before_defer=False).execute(
            fake_context(dag_id="d", task_id="wait")
        )
    assert deferred.value.trigger.serialize()[1]["after_snapshot_id"] == s2
    snap = lake.snapshot(T, snapshot_id=s3).to_dict()
    sensor(since_last_seen=True).execute_complete(
        fake_context(dag_id="d", task_id="wait"), {"status": "success", "snapshot": snap}
    )
    assert variables[key]["snapshot_id"] == s3
