"""``make ui`` runs quietly: one port setting moves every server, the workers fit the machine, and
stopping it leaves no process and no file behind.

``scripts/ui.sh`` over a fresh Airflow home and a SQLite catalog in WAL mode (as ``make demo``
leaves it); the test reads the catalog through the governance view's API (a read of a WAL-mode
database creates ``-wal``/``-shm`` files), then stops the script as Ctrl-C does and looks for every
process that carried the run's session mark, and for files beside the catalog.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.support.lake import ROOT, catalog_conn_json, pristine_airflow_db
from tests.support.servers import free_port_range

pytestmark = pytest.mark.airflow


def session_processes(mark: str) -> dict[int, str]:
    """``{pid: command line}`` of every live process whose environment carries ``AIP_UI_SESSION=mark``."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"AIP_UI_SESSION={mark}".encode() in env:
            found[int(entry)] = cmd.strip()
    return found


def descendants(root: int) -> set[int]:
    """Every live process under ``root`` (through the parent pids of /proc)."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent[int(entry)] = int(Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, grew = {root}, True
    while grew:
        children = {pid for pid, ppid in parent.items() if ppid in tree} - tree
        tree |= children
        grew = bool(children)
    return tree - {root}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _lake(work: Path) -> tuple[Path, str]:
    """A SQLite catalog in WAL mode with one table, as the demo leaves it."""
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    lake = work / "lake"
    (lake / "warehouse").mkdir(parents=True)
    conn = catalog_conn_json(lake / "catalog.db", lake / "warehouse")
    old = os.environ.get("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT")
    os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = conn
    try:
        hook = IcebergCatalogHook()
        hook.ensure_namespace("demo")
        hook.catalog.create_table("demo.orders", schema=_schema())
        hook.catalog.close() if hasattr(hook.catalog, "close") else None
    finally:
        if old is None:
            os.environ.pop("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", None)
        else:
            os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = old
    return lake, conn


def _schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    return Schema(NestedField(1, "order_id", LongType(), required=False))


def test_make_ui_moves_every_server_fits_the_machine_and_stops_clean(tmp_path: Path) -> None:
    work, home, dags = tmp_path / "work", tmp_path / "work" / "airflow", tmp_path / "dags"
    home.mkdir(parents=True)
    dags.mkdir()
    (home / "airflow.db").write_bytes(pristine_airflow_db().read_bytes())
    lake, conn = _lake(work)
    import sqlite3

    assert sqlite3.connect(lake / "catalog.db").execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    before = sorted(p.name for p in lake.iterdir())
    port, mark = free_port_range(3), uuid.uuid4().hex[:16]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__LOGGING__") and k != "PYTHONWARNINGS"}
    env.update(
        AIP_WORK=str(work),
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT=conn,
        AIP_UI_PORT=str(port),
        AIP_UI_SESSION=mark,
    )
    env.pop("AIRFLOW__CORE__PARALLELISM", None)
    log = tmp_path / "ui.log"
    with log.open("w") as sink:
        proc = subprocess.Popen(
            ["bash", str(ROOT / "scripts" / "ui.sh")],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 600
        while "login admin" not in log.read_text():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        base = f"http://127.0.0.1:{port}"
        # one setting moved every server: the API server, the scheduler's and the triggerer's log servers
        deadline = time.monotonic() + 180
        while not (_listening(port + 1) and _listening(port + 2)) and time.monotonic() < deadline:
            time.sleep(1)
        assert _listening(port) and _listening(port + 1) and _listening(port + 2), log.read_text()[-3000:]
        # a read of the catalog through the governance view (creates SQLite's -wal/-shm beside it)
        password = dict(re.findall(r"login (\w+)\s+/ (\S+)", log.read_text()))["admin"]
        request = urllib.request.Request(
            f"{base}/auth/token",
            data=json.dumps({"username": "admin", "password": password}).encode(),
            headers={"Content-Type": "application/json"},
        )
        token = json.loads(urllib.request.urlopen(request, timeout=60).read())["access_token"]
        tables = urllib.request.Request(f"{base}/governance/api/tables", headers={"Authorization": f"Bearer {token}"})
        listing = json.loads(urllib.request.urlopen(tables, timeout=120).read())
        assert listing["catalog"]["state"] == "ok" and listing["catalog"]["tables"] == 1, listing
        during = sorted(p.name for p in lake.iterdir())
        assert set(during) - set(before) <= {"catalog.db-wal", "catalog.db-shm"}, during
        print(f"beside the catalog while the view ran: {during}; processes: {sorted(session_processes(mark).values())}")
        # the workers fit the machine: no more LocalExecutor workers than cores
        running = session_processes(mark)
        tree = descendants(proc.pid) | set(running)
        workers = [cmd for cmd in running.values() if "LocalExecutor" in cmd]
        assert len(workers) <= (os.cpu_count() or 2), workers
        assert len(running) < 30, running
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C
        proc.wait(timeout=120)
    left = session_processes(mark)
    assert not left, f"processes left after make ui stopped: {left}"
    survivors = sorted(pid for pid in tree if _alive(pid))
    assert not survivors, f"processes of make ui's tree left after it stopped: {survivors}"
    assert sorted(p.name for p in lake.iterdir()) == before, "files left beside the catalog"
    for port_in_use in (port, port + 1, port + 2):
        assert not _listening(port_in_use), f"port {port_in_use} still served"


def test_a_busy_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    port = free_port_range(3)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port + 2))
        busy.listen()
        env = {**os.environ, "AIP_WORK": str(tmp_path / "work"), "AIRFLOW_HOME": str(tmp_path / "home")}
        env.update(AIP_UI_PORT=str(port), AIP_UI_SESSION=uuid.uuid4().hex[:16])
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / "airflow.db").write_bytes(pristine_airflow_db().read_bytes())
        result = subprocess.run(
            ["bash", str(ROOT / "scripts" / "ui.sh")], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT
        )
    assert result.returncode == 1
    assert (
        f"[{port + 2}]" in result.stderr and "AIP_UI_PORT" in result.stderr and "Nothing was started" in result.stderr
    )
    assert not session_processes(env["AIP_UI_SESSION"])
