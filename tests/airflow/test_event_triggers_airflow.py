"""Watchers run by a real ``airflow triggerer`` (own AIRFLOW_HOME, SQLite metadata DB).

Two assets watch the same table with identical trigger kwargs, so Airflow runs ONE trigger for
both (``BaseEventTrigger.hash``) and every event becomes an asset event of each. The table is
committed to from this process while the triggerer runs; the triggerer is stopped (SIGTERM)
and restarted in the middle of the stream. Asserted from Airflow's own tables: every commit
became exactly one asset event per asset, in order, and each asset's watermark sits in
Airflow's asset state store, written by the watcher. On the same triggerer a health watcher
fires once on the pathology, stays quiet after the maintenance plan (one real Spark job) healed
the table, and fires again when the table crosses its policy again.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scripts.events_demo import AirflowProcesses, payloads, wait_for
from tests.support.airflow_procs import airflow_env
from tests.support.lake import catalog_conn_json, create_orders_table, fake_context, orders_batch

DAG_FILE = """
from airflow.sdk import DAG, Asset, AssetWatcher
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow_iceberg_provider.triggers.commit_events import IcebergCommitEventTrigger
from airflow_iceberg_provider.triggers.health_events import IcebergTableHealthEventTrigger


def watcher():  # identical kwargs: one trigger row serves both assets
    return AssetWatcher(name="orders_commits", trigger=IcebergCommitEventTrigger(table="db.orders", poll_interval=0.5))


for name in ("orders_a", "orders_b"):
    with DAG(dag_id=f"consume_{name}", schedule=[Asset(name=name, watchers=[watcher()])]):
        EmptyOperator(task_id="noop")

health = IcebergTableHealthEventTrigger(table="db.orders", poll_interval=0.5)
with DAG(dag_id="maintain_orders", schedule=[Asset(name="orders_health", watchers=[AssetWatcher(name="h", trigger=health)])]):
    EmptyOperator(task_id="noop")
"""


@pytest.mark.airflow
@pytest.mark.spark
@pytest.mark.usefixtures("spark_on_connect")
def test_triggerer_restart_mid_stream_exactly_once_per_asset_and_health_hysteresis(tmp_path: Path):
    """...and, on the same triggerer, the health watcher: fires once when the table crosses its
    policy (5 small files, default min-input-files), stays quiet after the maintenance plan
    (a real Spark job) healed it, fires again when crossed again."""
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator

    env = airflow_env(tmp_path)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "watchers.py").write_text(DAG_FILE)
    env.update(
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__TRIGGERER__ENABLE_HEALTH_CHECK="False",
    )
    env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp_path / "c.db", tmp_path / "wh")
    old = os.environ.get("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT")
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"]
    hook = IcebergCatalogHook()
    create_orders_table(hook, "db.orders")
    hook.load_table("db.orders").append(orders_batch(0, 5))  # history: not replayed
    af = AirflowProcesses(env, tmp_path / "logs")
    made: list[str] = []

    def commit(i: int) -> None:
        hook.load_table("db.orders").append(orders_batch(100 * (i + 1), 5))
        made.append(str(hook.ref_snapshot_id("db.orders")))

    def delivered(asset: str) -> list[str]:
        return [p["snapshot_id"] for p in payloads(af.asset_events(asset))]

    def logs() -> str:
        return "\n".join(p.read_text()[-3000:] for p in (tmp_path / "logs").glob("*.log"))

    try:
        af.cli("dags", "reserialize")
        assert af.query("SELECT count(*) FROM trigger")[0][0] == 2, "one commit trigger for both assets + health"
        af.start("triggerer")
        wait_for("both assets' start marks", lambda: len(af.state_store()) == 2, 120)
        commit(0)
        commit(1)
        wait_for("2 events per asset", lambda: len(delivered("orders_a")) == len(delivered("orders_b")) == 2, 60)
        latency = _latency(af, made[-1], hook)
        assert af.stop("triggerer") is not None  # graceful stop in the middle of the stream
        commit(2)  # while it is down
        commit(3)
        af.start("triggerer")
        wait_for("the 2 missed commits", lambda: len(delivered("orders_a")) == len(delivered("orders_b")) == 4, 120)
        commit(4)  # after the restart
        wait_for("5 events per asset", lambda: len(delivered("orders_b")) >= 5, 60)
        time.sleep(3)  # a duplicate would show up by now (poll every 0.5 s)
        assert delivered("orders_a") == made, logs()
        assert delivered("orders_b") == made, logs()
        store = {k: v for k, v in af.state_store().items() if "commit" in k}
        assert {k.split()[0] for k in store} == {"orders_a", "orders_b"}
        assert all(v["value"]["snapshot_id"] == made[-1] and v["by"] == "watcher" for v in store.values()), store
        # health: 6 small files now; crossed at the 5th (after the restart), reported once
        (crossed,) = payloads(af.asset_events("orders_health"))
        assert crossed["actions"] == ["rewrite_data_files"] and crossed["health"]["data_files"] == 5, crossed
        plan = IcebergMaintenancePlanOperator(task_id="plan", table="db.orders").execute(fake_context())
        assert plan["spark_job"] is True and hook.health("db.orders").data_files == 1, plan
        time.sleep(3)  # the plan's commits are seen; healed: quiet, re-armed
        assert len(af.asset_events("orders_health")) == 1
        for i in range(5, 9):  # 1 + 4 small files: crossed again
            commit(i)
        again = wait_for("the second health event", lambda: payloads(af.asset_events("orders_health"))[1:], 60)
        assert again[0]["health"]["data_files"] == 5
        first = af.asset_events("orders_a")[0]["extra"]
        assert first["from_trigger"] is True and first["payload"]["operation"] == "append"
        print(f"commit -> asset event latency with poll_interval=0.5 s: {latency:.2f}s")
    finally:
        af.stop_all()
        if old is None:
            os.environ.pop("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = old


def _latency(af: AirflowProcesses, snapshot_id: str, hook) -> float:
    """Seconds from the commit (its Iceberg timestamp) to the asset event row (its timestamp)."""
    from datetime import datetime

    snap = hook.snapshot("db.orders", snapshot_id=int(snapshot_id))
    event = next(e for e in af.asset_events("orders_a") if e["extra"]["payload"]["snapshot_id"] == snapshot_id)
    ts = datetime.fromisoformat(str(event["timestamp"]).replace(" ", "T"))
    if ts.tzinfo is None:
        from datetime import UTC

        ts = ts.replace(tzinfo=UTC)
    return ts.timestamp() - snap.timestamp_ms / 1000
