"""The provider on a PostgreSQL-backed SQL catalog (and the same checks on SQLite, parametrized).

A real PostgreSQL server is started on 127.0.0.1 (``tests/_servers.py``); each test gets a
fresh database. The ``catalog`` fixture runs the capability tests on both the embedded
SQLite catalog and PostgreSQL: the foundation + ref verbs of ``IcebergCatalogHook``, and a
representative subset of every capability — WAP publish (gate, fast-forward, conflict), tags
and rollback, the commit check and sensor, maintenance dry runs, and erasure's pre-flight
refusal. The Spark tests (``spark`` + ``postgres``) share one database: Spark's
``JdbcCatalog`` and pyiceberg's ``SqlCatalog`` on the same PostgreSQL catalog, and 8
concurrent writers (2 Spark jobs + 6 pyiceberg writers) appending to one table.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from _servers import pg_conn_json, postgres
from _wap_helpers import commit_to_branch, record_audit
from conftest import ROOT, append_batches, catalog_conn_json, create_orders_table, fake_context, orders_batch

from airflow_iceberg_provider.catalog_config import CatalogConfig
from airflow_iceberg_provider.exceptions import (
    IcebergCommitConflictError,
    IcebergPublishConflictError,
    IcebergRefusedError,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

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


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def catalog(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """An empty catalog with namespace ``db``: SQLite file or PostgreSQL database."""
    if request.param == "postgres":
        hook = _pg_lake(tmp_path, monkeypatch)
    else:
        (tmp_path / "warehouse").mkdir()
        conn = catalog_conn_json(tmp_path / "catalog.db", tmp_path / "warehouse")
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", conn)
        hook = IcebergCatalogHook()
        hook.ensure_namespace("db")
    yield hook
    hook.catalog.engine.dispose()


@pytest.fixture
def orders(catalog):
    create_orders_table(catalog, T).append(orders_batch(0, 10))
    return catalog


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
    assert any(j.endswith("postgresql-jdbc.jar") for j in plan.jars), "the PostgreSQL JDBC driver ships with the job"


@pytest.mark.postgres
def test_unreachable_server_is_reported_as_unavailable(tmp_path, monkeypatch):
    import json

    from _servers import free_ports

    from airflow_iceberg_provider.exceptions import IcebergCatalogUnavailableError

    (port,) = free_ports(1)
    conn = json.loads(pg_conn_json(postgres(), "nope", tmp_path))
    conn["host"] = f"postgresql+psycopg2://127.0.0.1:{port}/nope"
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", json.dumps(conn))
    with pytest.raises(IcebergCatalogUnavailableError, match="unavailable"):
        IcebergCatalogHook().table_exists(T)


# ------------------------------------------------------------------ hook: foundation + refs verbs
def test_foundation_and_ref_verbs(catalog):
    hook = catalog
    tbl = create_orders_table(hook, T)
    assert hook.metadata_location(T) == tbl.metadata_location
    assert hook.metadata_location("db.missing") is None
    ids = append_batches(hook, T, 3)
    loaded = hook.load_table(T)
    assert hook.metadata_location(T) == loaded.metadata_location  # the SQL fast path agrees with load_table
    assert [s.snapshot_id for s in hook.ref_chain(T)] == ids
    assert hook.snapshot(T, ref="main").snapshot_id == ids[-1]
    assert hook.snapshot(T, as_of=hook.snapshot(T, snapshot_id=ids[1]).timestamp_ms).snapshot_id == ids[1]
    assert len(hook.find_snapshots(T, ref="main", after_snapshot_id=ids[0], operation="append")) == 2
    health = hook.health(T)
    assert (health.records, health.snapshots, health.data_files) == (30, 3, 3)

    assert hook.create_tag(T, "t1", snapshot_id=ids[0]) == "created"
    assert hook.create_tag(T, "t1", snapshot_id=ids[0]) == "exists"
    with pytest.raises(IcebergRefusedError, match="immutable"):
        hook.create_tag(T, "t1", snapshot_id=ids[1])
    assert hook.create_branch(T, "exp", snapshot_id=ids[1], max_ref_age_ms=86_400_000) == "created"
    head = commit_to_branch(hook, T, "exp", 100, 5)
    assert hook.ref_snapshot_id(T, "main") == ids[-1]
    # main (ids[-1]) is not an ancestor of exp's head: refused, nothing changed
    before = hook.metadata_location(T)
    with pytest.raises(IcebergCommitConflictError, match="not an ancestor"):
        hook.fast_forward(T, to_snapshot_id=head)
    assert hook.metadata_location(T) == before
    assert hook.rollback(T, to_snapshot_id=ids[1], expected_snapshot_id=ids[-1]) is True
    assert hook.fast_forward(T, to_snapshot_id=head, expected_snapshot_id=ids[1]) is True
    assert hook.ref_snapshot_id(T) == head and hook.load_table(T).scan().to_arrow().num_rows == 25
    poll = hook.poll_commit(T, after_snapshot_id=ids[1])
    assert poll["loaded"] and poll["snapshot"]["snapshot_id"] == head
    assert hook.poll_commit(T, known_metadata_location=poll["metadata_location"])["loaded"] is False
    assert hook.remove_ref(T, "t1") and hook.remove_ref(T, "exp") and not hook.remove_ref(T, "exp")
    assert set(hook.refs(T)) == {"main"}
    event = hook.record_ledger(operation="test", table=T, status="succeeded", context=fake_context())
    assert hook.read_governance_rows("ledger", event_id=event)[0]["dag_id"] == "test_dag"


def test_compare_and_swap_rejects_a_stale_writer(orders):
    hook = orders
    stale = hook.load_table(T)
    hook.load_table(T).append(orders_batch(100, 5))  # another writer wins
    moved = hook.metadata_location(T)
    with pytest.raises(IcebergCommitConflictError):
        hook.set_ref(stale, "main", stale.current_snapshot().snapshot_id)
    assert hook.metadata_location(T) == moved
    # an append from the stale object loses the swap, refreshes and re-applies (no lost update)
    hook.retry_commit(lambda: stale.append(orders_batch(200, 5)), what=T)
    assert hook.metadata_location(T) != moved
    assert sorted(hook.load_table(T).scan().to_arrow()["order_id"].to_pylist()) == [
        *range(10),
        *range(100, 105),
        *range(200, 205),
    ]


# ------------------------------------------------------------------ operators: a subset per capability
def test_wap_publish_gate_fast_forward_conflict_and_asset_event(orders):
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from airflow_iceberg_provider.assets import iceberg_asset
    from airflow_iceberg_provider.operators.wap import IcebergWapCreateBranchOperator, IcebergWapPublishOperator

    hook = orders
    for name in ("a", "b"):
        IcebergWapCreateBranchOperator(task_id=f"c{name}", table=T, branch=name).execute(fake_context())
    head_a = commit_to_branch(hook, T, "a", 100, 5)
    head_b = commit_to_branch(hook, T, "b", 200, 5)
    pub_b = IcebergWapPublishOperator(task_id="pb", table=T, branch="b", audited_snapshot_id=head_b)
    before = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="no audit record"):
        pub_b.execute(fake_context())
    assert hook.metadata_location(T) == before
    record_audit(hook, T, "a", head_a, event_id="ea")
    record_audit(hook, T, "b", head_b, event_id="eb")
    asset = iceberg_asset(T)
    events = OutletEventAccessors()
    out = IcebergWapPublishOperator(
        task_id="pa", table=T, branch="a", audited_snapshot_id=head_a, outlets=[asset]
    ).execute({**fake_context(), "outlet_events": events})
    assert out["method"] == "fast_forward" and hook.ref_snapshot_id(T) == head_a
    assert events[asset].extra["snapshot_id"] == str(head_a)
    before = hook.metadata_location(T)
    with pytest.raises(IcebergPublishConflictError, match="main moved"):
        pub_b.execute(fake_context())
    assert hook.metadata_location(T) == before and hook.ref_snapshot_id(T) == head_a


def test_tag_rollback_commit_check_and_sensor(orders):
    from airflow_iceberg_provider.operators.refs import (
        IcebergCommitCheckOperator,
        IcebergCreateTagOperator,
        IcebergDropTagOperator,
        IcebergRollbackOperator,
    )
    from airflow_iceberg_provider.sensors.snapshot import IcebergSnapshotSensor

    hook = orders
    first = hook.ref_snapshot_id(T)
    out = IcebergCreateTagOperator(task_id="tag", table=T, tag="eod", max_ref_age=timedelta(days=7)).execute(
        fake_context()
    )
    assert out["outcome"] == "created" and hook.refs(T)["eod"].max_ref_age_ms == 7 * 86_400_000
    sensor = IcebergSnapshotSensor(task_id="s", table=T, after_snapshot_id=first, deferrable=False)
    assert sensor.poke(fake_context()) is False
    hook.load_table(T).append(orders_batch(100, 5))
    assert sensor.poke(fake_context()) is not False
    check = IcebergCommitCheckOperator(task_id="chk", table=T, operation="append", after_snapshot_id=first)
    assert check.execute(fake_context())["matched"] == 1
    before = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError):  # a tag is immutable without replace=True
        IcebergCreateTagOperator(task_id="tag2", table=T, tag="eod").execute(fake_context())
    assert hook.metadata_location(T) == before
    IcebergRollbackOperator(task_id="rb", table=T, to_tag="eod").execute(fake_context())
    assert hook.ref_snapshot_id(T) == first
    IcebergDropTagOperator(task_id="drop", table=T, tag="eod").execute(fake_context())
    assert "eod" not in hook.refs(T)


def test_maintenance_dry_runs_start_no_jvm_and_change_nothing(orders):
    from airflow_iceberg_provider.operators.maintenance import (
        IcebergExpireSnapshotsOperator,
        IcebergMaintenancePlanOperator,
    )

    hook = orders
    append_batches(hook, T, 3)
    before = hook.metadata_location(T)
    time.sleep(0.01)
    now_plus = {"older_than": datetime.now(UTC).isoformat(), "older_than_floor": timedelta(0)}
    out = IcebergExpireSnapshotsOperator(task_id="x", table=T, retain_last=1, dry_run=True, **now_plus).execute(
        fake_context()
    )
    assert out["spark_job"] is False and len(out["would_expire"]) == 3
    plan = IcebergMaintenancePlanOperator(task_id="p", table=T, actions=["rewrite_manifests"]).execute(fake_context())
    assert plan["healthy"] is True and plan["spark_job"] is False
    assert hook.metadata_location(T) == before
    assert len(hook.load_table(T).metadata.snapshots) == 4


def test_erasure_refuses_before_any_spark_job(orders, monkeypatch, tmp_path):
    erasure = pytest.importorskip("airflow_iceberg_provider.operators.erasure")
    from airflow_iceberg_provider.exceptions import IcebergValidationError

    hook = orders
    # a table identity-partitioned on the personal column cannot be erased safely: refused up front
    create_orders_table(hook, "db.by_customer", partition_by=("customer_id",)).append(orders_batch(0, 5))
    before = hook.metadata_location("db.by_customer")
    submitted = []
    monkeypatch.setattr(
        "airflow_iceberg_provider.hooks.spark.IcebergSparkHook.submit", lambda self, plan: submitted.append(plan)
    )
    subjects = tmp_path / "subjects.jsonl"
    subjects.write_text('{"request_id": "r1", "subject_key": "c1"}\n')
    subjects.chmod(0o600)
    monkeypatch.setenv("AIRFLOW_CONN_ERASURE_SALT", '{"conn_type": "generic", "password": "%s"}' % ("s" * 32))
    op = erasure.IcebergErasureOperator(
        task_id="e", table="db.by_customer", subject_columns=["customer_id"], subjects_file=str(subjects)
    )
    with pytest.raises((IcebergRefusedError, IcebergValidationError), match=r"identity\(customer_id\)"):
        op.execute(fake_context())
    assert submitted == [] and hook.metadata_location("db.by_customer") == before


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
