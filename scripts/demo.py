"""Run every example DAG end to end with ``airflow dags test`` and summarise the tables.

Each ``example_dags/example_*.py`` declares a module-level ``DEMO`` dict:
``{"order": int, "runs": [{"conf": {...}, "expect": "success"|"failed"}], "tables": [...]}``
and optionally ``summarize(hook) -> list[str]``. A run whose outcome differs from
``expect`` fails the demo. A run that is *meant* to fail gets an Airflow 3 DAG-run note
(``note``, else built from ``label``) saying what was expected and why, so the red run in the
UI reads as the demonstration it is, not as an incident.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DAGS = ROOT / "example_dags"


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_dag(dag_id: str, conf: dict, date: str) -> tuple[str, float, str]:
    cmd = ["airflow", "dags", "test", dag_id, date]
    if conf:
        cmd += ["-c", json.dumps(conf)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    out = proc.stdout + proc.stderr
    finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
    state = "success" if proc.returncode == 0 and finished and "state=success" in finished[-1] else "failed"
    return state, time.monotonic() - t0, out


def expected_failure_note(run: dict) -> str:
    """The note of a run meant to fail: what was expected, why, and that nothing is wrong."""
    why = run.get("note") or run.get("label") or "this run demonstrates a refusal"
    return (
        f"Expected to fail (demo): {why}. This failure is the safety check working, not an incident; "
        "`make demo` fails if this run does NOT fail."
    )


def set_run_note(dag_id: str, out: str, note: str) -> str | None:
    """Attach ``note`` to the DAG run ``airflow dags test`` just finished (Airflow 3 DAG-run notes).

    The run id comes from Airflow's ``DagRun Finished: ... run_id=...`` line; the note is written
    through Airflow's own model (the same row the UI's "Add note" edits). Returns the run id.
    """
    found = re.findall(r"DagRun Finished: dag_id=[^,]*, logical_date=[^,]*, run_id=([^,]+),", out)
    if not found:
        return None
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == found[-1]))
        if dag_run is None:
            return None
        dag_run.note = note
    return found[-1]


def main(argv: list[str]) -> int:
    only = set(argv)
    modules = []
    for path in sorted(DAGS.glob("example_*.py")):
        module = load(path)
        if hasattr(module, "DEMO") and hasattr(module, "dag"):
            if not only or module.dag.dag_id in only:
                modules.append(module)
    modules.sort(key=lambda m: m.DEMO.get("order", 100))
    log_dir = Path(os.environ.get("AIP_WORK", ROOT / ".work")) / "demo-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    for module in modules:
        dag_id = module.dag.dag_id
        for i, run in enumerate(module.DEMO.get("runs", [{}])):
            date = run.get("date", f"2026-01-{i + 1:02d}T00:00:00+00:00")
            state, seconds, out = run_dag(dag_id, run.get("conf", {}), date)
            (log_dir / f"{dag_id}-{i}.log").write_text(out)
            expect = run.get("expect", "success")
            ok = state == expect
            failures += not ok
            if expect == "failed":  # the UI shows the run as failed: say it was meant to
                try:
                    noted = set_run_note(dag_id, out, expected_failure_note(run))
                except Exception as err:  # a note is a courtesy; never let it break the demo
                    noted = f"not set: {err}"
                print(f"    DAG-run note ({noted}): {expected_failure_note(run)}", flush=True)
            print(
                f"{'OK ' if ok else 'BAD'} {dag_id} run {i} ({run.get('label', date)}): {state} "
                f"(expected {expect}) in {seconds:.1f}s  log: {log_dir / f'{dag_id}-{i}.log'}",
                flush=True,
            )
        if module.DEMO.get("driver"):  # needs long-running Airflow processes (e.g. a triggerer)
            failures += subprocess.call([sys.executable, str(ROOT / module.DEMO["driver"])]) != 0
        hook = IcebergCatalogHook()
        for table in module.DEMO.get("tables", []):
            if not hook.table_exists(table):
                print(f"    {table}: missing")
                continue
            health = hook.health(table)
            refs = ", ".join(f"{r.name}->{r.snapshot_id}" for r in hook.refs(table).values())
            print(
                f"    {table}: main={health.snapshot_id} records={health.records} data_files={health.data_files} "
                f"delete_files={health.delete_files} snapshots={health.snapshots} refs=[{refs}]"
            )
        if hasattr(module, "summarize"):
            for line in module.summarize(hook):
                print(f"    {line}")
    ledger = IcebergCatalogHook().read_governance_rows("ledger")
    print(
        f"governance ledger: {len(ledger)} rows; last: "
        + ", ".join(f"{r['operation']}:{r['status']}" for r in ledger[-5:])
    )
    print("demo: " + ("all runs as expected" if not failures else f"{failures} run(s) NOT as expected"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
