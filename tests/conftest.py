"""Shared fixtures.

Tiers (see README): plain tests use real SQLite catalogs in a temp dir (milliseconds);
``spark`` tests run real spark-submit jobs; ``cluster`` tests start a standalone Spark
master+worker; ``airflow`` tests run ``airflow dags test``. All tiers run in CI.
The Spark runtime comes from ``scripts/env.sh`` (sourced by ``scripts/test.sh``).
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Parallel runs (pytest-xdist, ``scripts/test.sh``): each worker gets its own work directory, so
# nothing a module leaves under $AIP_WORK is seen by a module running beside it.
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("AIP_WORK"):
    os.environ["AIP_WORK"] = str(Path(os.environ["AIP_WORK"]) / os.environ["PYTEST_XDIST_WORKER"])
    Path(os.environ["AIP_WORK"]).mkdir(parents=True, exist_ok=True)


def pristine_airflow_db() -> Path:
    """The migrated Airflow DB nothing ever ran against (``scripts/bootstrap.sh``): copy it for an
    isolated Airflow. The shared ``$AIRFLOW_HOME`` DB collects DAGs, runs and triggers of
    ``make demo`` and earlier tests, which an isolated test must not inherit."""
    path = Path(os.environ.get("AIP_PRISTINE_AIRFLOW_DB", ROOT / ".work" / "airflow-pristine" / "airflow.db"))
    if not path.exists():
        pytest.fail(f"no pristine migrated Airflow DB at {path}; run scripts/bootstrap.sh")
    return path


def catalog_conn_json(db: Path, warehouse: Path, **extra: Any) -> str:
    return json.dumps(
        {
            "conn_type": "iceberg_catalog",
            "host": f"sqlite:///{db}",
            "extra": {
                "catalog_type": "sql",
                "catalog_name": "lakehouse",
                "warehouse": f"file://{warehouse}",
                **extra,
            },
        }
    )


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh SQLite catalog + warehouse wired as ``iceberg_catalog_default``; yields the hook."""
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", catalog_conn_json(tmp_path / "catalog.db", warehouse))
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    return hook


@pytest.fixture(scope="module")
def module_lake(tmp_path_factory: pytest.TempPathFactory):
    """Module-scoped lake for expensive (Spark) setups shared by several tests.

    The connection env var is set for the module and restored afterwards.
    """
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    tmp = tmp_path_factory.mktemp("lake")
    (tmp / "warehouse").mkdir()
    old = os.environ.get("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT")
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = catalog_conn_json(tmp / "catalog.db", tmp / "warehouse")
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    yield hook
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", None)
    else:
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = old


ORDERS_COLUMNS = {
    "order_id": "long",
    "customer_id": "string",
    "region": "string",
    "amount": "double",
    "order_ts": "timestamptz",
}


def create_orders_table(hook, table: str = "db.orders", partition_by=("day(order_ts)",), properties=None):
    """Create the standard orders test table through pyiceberg (format v2)."""
    from airflow_iceberg_provider.rules.schema import parse_columns, parse_partition_spec

    schema = parse_columns(ORDERS_COLUMNS)
    spec = parse_partition_spec(schema, list(partition_by))
    props = {"format-version": "2", **(properties or {})}
    hook.ensure_namespace(table.split(".")[0])
    return hook.catalog.create_table(table, schema=schema, partition_spec=spec, properties=props)


def orders_batch(start: int, count: int, day: str = "2026-01-01", customer_mod: int = 97):
    """A pyarrow batch of synthetic orders (ids start..start+count-1)."""
    from datetime import datetime, timedelta

    import pyarrow as pa

    base = datetime.fromisoformat(day).replace(tzinfo=UTC)
    ids = list(range(start, start + count))
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "customer_id": pa.array([f"c{i % customer_mod}" for i in ids], pa.string()),
            "region": pa.array([("ca", "us", "eu")[i % 3] for i in ids], pa.string()),
            "amount": pa.array([float(i % 500) + 1.0 for i in ids], pa.float64()),
            "order_ts": pa.array([base + timedelta(seconds=i % 3600) for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def append_batches(hook, table: str, batches: int, rows: int = 10, day: str = "2026-01-01") -> list[int]:
    """Append ``batches`` small commits through pyiceberg; returns the new snapshot ids."""
    ids = []
    for i in range(batches):
        tbl = hook.load_table(table)
        tbl.append(orders_batch(i * rows, rows, day))
        ids.append(hook.load_table(table).current_snapshot().snapshot_id)
    return ids


def fake_context(dag_id: str = "test_dag", run_id: str = "manual__2026-01-01", task_id: str = "t", try_number: int = 1):
    """Minimal execution context for calling ``operator.execute`` directly."""
    ti = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=task_id, try_number=try_number, map_index=-1)
    return {"ti": ti, "task_instance": ti, "run_id": run_id, "ds": "2026-01-01", "ds_nodash": "20260101"}


@pytest.fixture
def context():
    return fake_context()


# ---------------------------------------------------------------- one catalog fixture, three backends
@dataclass(frozen=True)
class CatalogUnderTest:
    """A fresh, empty catalog wired as ``iceberg_catalog_default``.

    ``hook`` talks to it; ``namespace`` exists and is this test's own (REST: a fresh namespace
    and governance namespace per test, since the SeaweedFS server is shared); ``table`` is the
    name scenarios use for their main table (not created).
    """

    backend: str
    hook: Any
    namespace: str

    @property
    def table(self) -> str:
        return f"{self.namespace}.orders"

    def name(self, table: str) -> str:
        """``<namespace>.<table>`` for a scenario's extra tables."""
        return f"{self.namespace}.{table}"


def _catalog_conn(backend: str, tmp_path: Path) -> tuple[str, str]:
    """(connection JSON, namespace) for one backend; starts the server once per session."""
    if backend == "sqlite":
        (tmp_path / "warehouse").mkdir()
        return catalog_conn_json(tmp_path / "catalog.db", tmp_path / "warehouse"), "db"
    if backend == "postgres":
        from _servers import pg_conn_json, postgres

        server = postgres()
        (tmp_path / "warehouse").mkdir()
        return pg_conn_json(server, server.create_database(), tmp_path / "warehouse"), "db"
    from _servers import rest_conn_json, seaweed

    suffix = uuid.uuid4().hex[:8]
    conn = json.loads(rest_conn_json(seaweed()))
    conn["extra"]["governance_namespace"] = f"gov{suffix}"
    return json.dumps(conn), f"ns{suffix}"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("rest", marks=pytest.mark.rest),
    ]
)
def catalog(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty catalog on SQLite (file), PostgreSQL (SQL catalog) or REST (SeaweedFS + S3), as
    pyiceberg's own ``catalog`` fixture: deselect a backend with ``-m "not postgres"`` / ``"not rest"``."""
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    conn, namespace = _catalog_conn(request.param, tmp_path)
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", conn)
    hook = IcebergCatalogHook()
    hook.ensure_namespace(namespace)
    yield CatalogUnderTest(request.param, hook, namespace)
    engine = getattr(hook.catalog, "engine", None)
    if engine is not None:  # SQL catalogs: close the pool (PostgreSQL connections)
        engine.dispose()


#: ``AIP_TEST_SPARK_MODE``: ``mixed`` (default) runs each Spark-tier module in the mode it declares
#: (spark-submit, or the shared Spark Connect server through the ``spark_on_connect`` fixture);
#: ``spark_submit`` runs every module through spark-submit (the Connect modules' second mode).
SPARK_MODE = os.environ.get("AIP_TEST_SPARK_MODE", "mixed")


@pytest.fixture(scope="session")
def connect_server_session(tmp_path_factory: pytest.TempPathFactory):
    """One Spark Connect server per test process (per xdist worker), started when a module first asks.

    Every job opens its own Connect session with its own catalog conf, so modules (each with its own
    lake) share the server the way tasks of different DAGs share a production endpoint; the server's
    JVM start is paid once instead of a spark-submit JVM per job.
    """
    import sys

    from _servers import free_ports

    if not os.environ.get("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS"):
        pytest.skip("source scripts/env.sh first (Spark jars)")
    sys.path.insert(0, str(ROOT / "scripts"))
    import connect_server

    # with the object-storage jars (S3FileIO, S3A): a session cannot add jars, and modules on S3 share the server
    s3_jars = [j for j in os.environ.get("AIP_S3_SPARK_JARS", "").split(",") if j.strip()]
    srv = connect_server.start(
        free_ports(1)[0], workdir=tmp_path_factory.mktemp("connect"), extra_jars=s3_jars, die_with_parent=True
    )
    yield srv
    connect_server.stop(srv)


@pytest.fixture(scope="module")
def spark_on_connect(request: pytest.FixtureRequest):
    """Run this module's provider jobs (``spark_default``) on the shared Spark Connect server.

    With ``AIP_TEST_SPARK_MODE=spark_submit`` the module keeps spark-submit. Yields the mode.
    """
    if SPARK_MODE == "spark_submit":
        yield "spark_submit"
        return
    srv = request.getfixturevalue("connect_server_session")
    old = os.environ.get("AIRFLOW_CONN_SPARK_DEFAULT")
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = srv.conn_json("spark_default", timeout=900)
    yield "spark_connect"
    if old is None:
        os.environ.pop("AIRFLOW_CONN_SPARK_DEFAULT", None)
    else:
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = old


# Scheduling: ``scripts/test.sh`` runs pytest-xdist with ``--dist loadfile --no-loadscope-reorder``, so
# modules go to the workers in collection order, which this hook sets to the longest first (the longest
# module started last would be the run's tail). A module's cost: its seconds on two workers (a 2-core run, rounded)
# below, else an estimate from its tests' tiers (at most _UNLISTED_CAP). Refresh the figures from the summary
# the run ends with.
MODULE_SECONDS = {
    "tests/test_reruns_dag.py": 640,
    "tests/test_cluster.py": 490,
    "tests/test_spark_rest.py": 380,
    "tests/test_faults_spark.py": 320,
    "tests/test_durable_jobs_airflow.py": 280,
    "tests/test_spark_connect.py": 260,
    "tests/test_erasure_lifecycle_spark.py": 250,
    "tests/test_spark_s3.py": 180,
    "tests/test_ui_browser.py": 150,
    "tests/test_make_ui.py": 120,
    "tests/test_readme_dag.py": 90,
    "tests/test_erasure_spark.py": 120,
    "tests/test_maintenance_erasure_purge_spark.py": 105,
    "tests/test_governance_airflow.py": 100,
    "tests/test_concurrency_spark.py": 80,
    "tests/test_audit_engine_spark.py": 75,
    "tests/test_erasure_catalog_spark.py": 75,
    "tests/test_durable_jobs.py": 70,
    "tests/test_catalog_postgres.py": 65,
    "tests/test_event_triggers_airflow.py": 65,
    "tests/test_refs_dag.py": 60,
    "tests/test_example_dags.py": 45,
    "tests/test_maintenance_spark.py": 45,
    "tests/test_ui_spark.py": 45,
    "tests/test_wap_spark.py": 45,
    "tests/test_governance_hygiene.py": 40,
    "tests/test_xcomarg_dag.py": 40,
}
#: a module missing from the table took less than this in the last measured run
_UNLISTED_CAP = 30.0
_TIER_SECONDS = {"cluster": 60.0, "spark": 30.0, "airflow": 60.0, "rest": 20.0, "postgres": 20.0, "faults": 20.0}


def _estimated_seconds(item: pytest.Item) -> float:
    return max((_TIER_SECONDS.get(mark.name, 0.0) for mark in item.iter_markers()), default=0.0) or 0.05


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    cost: dict[str, float] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        cost[module] = cost.get(module, 0.0) + _estimated_seconds(item)
    cost = {module: min(seconds, _UNLISTED_CAP) for module, seconds in cost.items()}
    cost.update({module: seconds for module, seconds in MODULE_SECONDS.items() if module in cost})
    order = {module: rank for rank, module in enumerate(sorted(cost, key=lambda m: (-cost[m], m)))}
    items.sort(key=lambda item: order[item.nodeid.split("::", 1)[0]])  # stable: a module keeps its own order


# Where the suite's wall time goes: the terminal summary lists the slowest test modules (setup,
# call and teardown summed per module; with xdist the controller receives every worker's reports).
_MODULE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    _MODULE_SECONDS[module] = _MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    slow = sorted(_MODULE_SECONDS.items(), key=lambda item: item[1], reverse=True)[:25]
    if not slow or slow[0][1] < 60:
        return
    terminalreporter.write_sep("=", "slowest test modules (seconds, summed over setup, call and teardown)")
    for module, seconds in slow:
        terminalreporter.write_line(f"{seconds:8.1f}  {module}")
