"""The provider on a PostgreSQL-backed SQL catalog: what only PostgreSQL has.

A real PostgreSQL server is started on 127.0.0.1 (``tests/support/servers.py``); each test gets a
fresh database. The capability scenarios shared by every backend (hook verbs, WAP publish,
tags and rollback, commit check and sensor, maintenance dry runs, erasure's pre-flight
refusal) run on SQLite, PostgreSQL and REST in ``tests/catalogs/test_catalogs.py`` (the parametrized
``catalog`` fixture of ``tests/conftest.py``). Here: the connection mapping, the password's
secret channel, an unreachable server, and the Spark tests (``spark`` + ``postgres``) share one database: Spark's
``JdbcCatalog`` and pyiceberg's ``SqlCatalog`` on the same PostgreSQL catalog, and 8
concurrent writers (2 Spark jobs + 6 pyiceberg writers) appending to one table.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.hooks.catalog_config import CatalogConfig
from tests.support.lake import ROOT, create_orders_table, fake_context, orders_batch
from tests.support.servers import pg_conn_json, postgres

T = "db.orders"


def _pg_lake(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> IcebergCatalogHook:
    server = postgres()
    warehouse = tmp / "warehouse"
    warehouse.mkdir()
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", pg_conn_json(server, server.create_database(), warehouse)
    )
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    return hook


@pytest.fixture
def pg_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    hook = _pg_lake(tmp_path, monkeypatch)
    yield hook
    hook.catalog.engine.dispose()


# ------------------------------------------------------------------ connection mapping
@pytest.mark.postgres
def test_connection_maps_one_postgres_catalog_to_both_engines(pg_lake):
    server = postgres()
    cfg: CatalogConfig = pg_lake.config
    db = cfg.uri.rsplit("/", 1)[1]
    props = pg_lake.config.pyiceberg_properties()
    assert props["uri"] == server.url(db, with_credentials=True)  # SQLAlchemy needs them in the URL
    conf = cfg.spark_conf()
    prefix = "spark.sql.catalog.lakehouse"
    assert conf.public[f"{prefix}.type"] == "jdbc"
    assert conf.public[f"{prefix}.uri"] == f"jdbc:postgresql://127.0.0.1:{server.port}/{db}"
    assert conf.public[f"{prefix}.jdbc.user"] == server.user
    assert conf.secret == {f"{prefix}.jdbc.password": server.password}
    assert not any(server.password in v for v in conf.public.values())
    ok, message = pg_lake.test_connection()
    assert ok, message
    # pyiceberg created its catalog tables in *this* PostgreSQL database
    conn = server.connect(db)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'iceberg_%'")
            assert {r[0] for r in cur.fetchall()} >= {"iceberg_tables", "iceberg_namespace_properties"}
    finally:
        conn.close()


@pytest.mark.postgres
def test_password_reaches_spark_only_through_the_secret_channel(pg_lake):
    from airflow_iceberg_provider.hooks.spark import IcebergSparkHook

    server = postgres()
    plan = IcebergSparkHook(catalog_hook=pg_lake).plan(ROOT / "example_dags/jobs/append_orders.py", spec={"t": 1})
    argv_like = " ".join([*plan.conf.keys(), *plan.conf.values(), *plan.jars, *plan.application_args])
    assert server.password not in argv_like
    assert plan.secret_conf["spark.sql.catalog.lakehouse.jdbc.password"] == server.password
    assert any(j.rsplit("/", 1)[-1].startswith("postgresql-") for j in plan.jars), (
        "the PostgreSQL JDBC driver ships with the job"
    )


@pytest.mark.postgres
def test_unreachable_server_is_reported_as_unavailable(tmp_path, monkeypatch):
    import json

    from airflow_iceberg_provider.exceptions import IcebergCatalogUnavailableError
    from tests.support.servers import free_ports

    (port,) = free_ports(1)
    conn = json.loads(pg_conn_json(postgres(), "nope", tmp_path))
    conn["host"] = f"postgresql+psycopg2://127.0.0.1:{port}/nope"
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
    with pytest.raises(IcebergCatalogUnavailableError, match="unavailable"):
        IcebergCatalogHook().table_exists(T)


# ------------------------------------------------------------------ Spark + PostgreSQL
SPARK_WRITERS = 2
PY_WRITERS = 6
ROWS_PER_PY_COMMIT = 40
SPARK_ROWS = 3000
#: commit retries are bounded: Iceberg (Spark) and pyiceberg both read these table properties
RETRY_PROPERTIES = {
    "commit.retry.num-retries": "10",
    "commit.retry.min-wait-ms": "50",
    "commit.retry.max-wait-ms": "2000",
}


@pytest.fixture(scope="module")
def spark_pg_lake(tmp_path_factory):
    """One PostgreSQL catalog for the module's Spark tests (connection set for the module)."""
    import os

    server = postgres()
    tmp = tmp_path_factory.mktemp("pglake")
    (tmp / "warehouse").mkdir()
    old = os.environ.get("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT")
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = pg_conn_json(
        server, server.create_database(), tmp / "warehouse"
    )
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    yield hook
    hook.catalog.engine.dispose()
    if old is None:
        os.environ.pop("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", None)
    else:
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = old


def pyiceberg_writer(
    writer: int,
    stop: threading.Event,
    *,
    min_commits: int,
    max_commits: int,
    rows: int,
    stats: dict,
    pause: tuple[float, float] = (0.0, 0.05),
) -> None:
    """Append batches with ids ``(writer+1)*1e6 + k*rows …`` through ``retry_commit`` until told to stop."""
    hook = IcebergCatalogHook()
    attempts_per_commit = []
    rnd = random.Random(writer)
    try:
        for k in range(max_commits):
            if k >= min_commits and stop.is_set():
                break
            calls = [0]

            def commit(k: int = k, calls: list = calls) -> None:
                calls[0] += 1
                hook.load_table(T).append(orders_batch((writer + 1) * 1_000_000 + k * rows, rows))

            hook.retry_commit(commit, what=T, attempts=12)
            attempts_per_commit.append(calls[0])
            time.sleep(rnd.uniform(*pause))
    finally:
        hook.catalog.engine.dispose()
        stats[f"py{writer}"] = attempts_per_commit


@pytest.mark.postgres
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_eight_concurrent_writers_spark_and_pyiceberg_every_row_once(spark_pg_lake, capfd, caplog):
    from airflow_iceberg_provider.operators.spark import IcebergSparkSubmitOperator

    hook = spark_pg_lake
    create_orders_table(hook, T, properties=RETRY_PROPERTIES)
    stats: dict = {}
    errors: list[BaseException] = []
    spark_done = threading.Event()

    def spark_writer(j: int) -> None:
        try:
            op = IcebergSparkSubmitOperator(
                task_id=f"spark{j}",
                table=T,
                application=str(ROOT / "example_dags/jobs/append_orders.py"),
                params_for_job={"rows": SPARK_ROWS, "seed": (j + 1) * 100_000_000},
                expected_operations=["append"],
            )
            stats[f"spark{j}"] = op.execute(fake_context(task_id=f"spark{j}"))
        except BaseException as err:  # surfaced below
            errors.append(err)

    def py_writer(w: int) -> None:
        try:
            pyiceberg_writer(
                w, spark_done, min_commits=3, max_commits=60, rows=ROWS_PER_PY_COMMIT, stats=stats, pause=(0.5, 2.0)
            )
        except BaseException as err:
            errors.append(err)

    t0 = time.monotonic()
    sparks = [threading.Thread(target=spark_writer, args=(j,)) for j in range(SPARK_WRITERS)]
    pys = [threading.Thread(target=py_writer, args=(w,)) for w in range(PY_WRITERS)]
    for t in sparks + pys:
        t.start()
    for t in sparks:
        t.join()
    spark_done.set()
    for t in pys:
        t.join()
    seconds = time.monotonic() - t0
    assert not errors, errors

    # every row exactly once
    ids = hook.load_table(T).scan(selected_fields=("order_id",)).to_arrow()["order_id"].to_pylist()
    expected: set[int] = set()
    for j in range(SPARK_WRITERS):
        seed = (j + 1) * 100_000_000
        expected |= set(range(seed, seed + SPARK_ROWS))
    py_commits = 0
    for w in range(PY_WRITERS):
        commits = len(stats[f"py{w}"])
        py_commits += commits
        start = (w + 1) * 1_000_000
        expected |= set(range(start, start + commits * ROWS_PER_PY_COMMIT))
    assert len(ids) == len(expected) and set(ids) == expected

    # one snapshot per successful commit, all on main's single line of history
    appends = hook.find_snapshots(T, ref="main", operation="append")
    assert len(appends) == py_commits + SPARK_WRITERS
    # the losers of the compare-and-swap retried (bounded, logged) and then succeeded. pyiceberg
    # refreshes and re-applies an append itself (commit.retry.num-retries; a warning per retry),
    # retry_commit retries what is left (attempts bounded, logged by the hook), and Spark's
    # Iceberg commit retries (logged by Iceberg's Tasks and relayed by SparkSubmitHook).
    attempts = [a for w in range(PY_WRITERS) for a in stats[f"py{w}"]]
    outer = sum(a - 1 for a in attempts)
    out = capfd.readouterr()
    printed, logged = out.out + out.err, "\n".join(r.getMessage() for r in caplog.records)

    def count(text: str) -> int:  # structlog prints (Airflow loggers) or stdlib records (pyiceberg)
        return max(printed.count(text), logged.count(text))

    inner = count("Commit failed due to a concurrent update")
    spark_retries = count("Retrying task after failure")
    assert count("conflicted (attempt") == outer
    assert inner + outer > 0 and max(attempts) <= 12
    for j in range(SPARK_WRITERS):
        assert stats[f"spark{j}"]["operation"] == "append"
    print(
        f"\n8 writers on PostgreSQL: {py_commits + SPARK_WRITERS} commits in {seconds:.1f}s; CAS losers retried "
        f"{inner} times inside pyiceberg, {outer} times through retry_commit "
        f"({(inner + outer) / len(attempts):.2f} per pyiceberg commit) and {spark_retries} times in Spark"
    )
