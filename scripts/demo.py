"""Run every example DAG end to end with ``airflow dags test`` and summarise the tables.

Each ``example_dags/example_*.py`` declares a module-level ``DEMO`` dict:
``{"order": int, "runs": [{"conf": {...}, "expect": "success"|"failed"|"awaiting_input"}], "tables": [...]}``
and optionally ``summarize(hook) -> list[str]``. A run whose outcome differs from
``expect`` fails the demo. A run expected ``awaiting_input`` names its approval gate (``task_id``):
the demo stops it once the gate waits for a person, and leaves it waiting, with a note, so the
gate's form can be seen in Airflow and the governance view. A run that is *meant* to fail gets an Airflow 3 DAG-run note
(``note``, else built from ``label``) saying what was expected and why, so the red run in the
UI reads as the demonstration it is, not as an incident.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import demo_connect  # noqa: E402

DAGS = ROOT / "example_dags"


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_dag(dag_id: str, conf: dict, date: str, mark_success: str | None = None) -> tuple[str, float, str]:
    # ``airflow dags test`` with the fix for DAGs that declare a deadline (see scripts/dag_test.py);
    # ``mark_success``: a regex of task ids marked success instead of run (``--mark-success-pattern``).
    cmd = [sys.executable, str(ROOT / "scripts" / "dag_test.py"), dag_id, date]
    if conf:
        cmd += ["-c", json.dumps(conf)]
    if mark_success:
        cmd += ["--mark-success-pattern", mark_success]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    out = proc.stdout + proc.stderr
    finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
    state = "success" if proc.returncode == 0 and finished and "state=success" in finished[-1] else "failed"
    return state, time.monotonic() - t0, out


#: The line ``airflow dags test`` logs while a human-in-the-loop task waits for its answer.
_WAITING = re.compile(r"Waiting for Human-in-the-loop input for tasks: \[(.*)\]")


def run_dag_until_waiting(
    dag_id: str, conf: dict, date: str, task_id: str, timeout: float = 900
) -> tuple[str, float, str]:
    """``airflow dags test`` of a run that must stop at an approval gate: started as :func:`run_dag`, it
    is stopped once ``task_id`` waits for a person (``awaiting_input``). ``dags test`` waits for an
    answer for ever; stopping it leaves the run *running* and the gate *awaiting input* in the metadata
    DB, with its form in Airflow's *Required actions*. Returns ``("awaiting_input", seconds, output)``,
    or ``run_dag``'s outcome when the run ended without waiting there."""
    import tempfile

    cmd = [sys.executable, str(ROOT / "scripts" / "dag_test.py"), dag_id, date]
    if conf:
        cmd += ["-c", json.dumps(conf)]
    t0 = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, text=True, env=os.environ.copy())
        state = None
        while state is None:
            time.sleep(0.25)
            sink.seek(0)
            out = sink.read()
            waiting = [m.group(1) for m in _WAITING.finditer(out)]
            if waiting and repr(task_id) in waiting[-1]:
                state = "awaiting_input"
            elif proc.poll() is not None:
                finished = [line for line in out.splitlines() if "DagRun Finished:" in line]
                ok = proc.returncode == 0 and finished and "state=success" in finished[-1]
                state = "success" if ok else "failed"
            elif time.monotonic() - t0 > timeout:
                state = "timed out"
        if proc.poll() is None:
            # SIGKILL at once: ``dags test`` waiting at a gate goes on polling after SIGTERM (Airflow 3.3:
            # it logged "Waiting for ... input" for the whole 30 s grace period), so a grace period only
            # adds its length. What the run did is committed: it stays running, the gate awaiting input.
            proc.kill()
            proc.wait()
        sink.seek(0)
        out = sink.read()
    return state, time.monotonic() - t0, out


def waiting_run_id(dag_id: str, task_id: str) -> str | None:
    """The newest run of ``dag_id`` whose ``task_id`` is awaiting input (the metadata DB)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select

    with create_session() as session:
        found = session.scalars(
            select(TaskInstance.run_id)
            .where(
                TaskInstance.dag_id == dag_id,
                TaskInstance.task_id == task_id,
                TaskInstance.state == TaskInstanceState.AWAITING_INPUT,
            )
            .order_by(TaskInstance.queued_dttm.desc())
        ).first()
    return found


def waiting_note(run: dict) -> str:
    """The note of a run left waiting at an approval gate on purpose."""
    why = run.get("note") or run.get("label") or "an approval gate waits for a person"
    return (
        f"Left waiting on purpose (demo): {why}. Its form is under Required actions (and on the task "
        "instance); the Governance view lists it under Approvals."
    )


def expected_failure_note(run: dict) -> str:
    """The note of a run meant to fail: what was expected, why, and that nothing is wrong."""
    why = run.get("note") or run.get("label") or "this run demonstrates a refusal"
    return (
        f"Expected to fail (demo): {why}. This failure is the safety check working, not an incident; "
        "`make demo` fails if this run does NOT fail."
    )


def set_run_note(dag_id: str, out: str, note: str, run_id: str | None = None) -> str | None:
    """Attach ``note`` to the DAG run ``airflow dags test`` just finished (Airflow 3 DAG-run notes).

    The run id comes from Airflow's ``DagRun Finished: ... run_id=...`` line (or ``run_id``); the note
    is written through Airflow's own model (the same row the UI's "Add note" edits). Returns the run id.
    """
    found = (
        [run_id] if run_id else re.findall(r"DagRun Finished: dag_id=[^,]*, logical_date=[^,]*, run_id=([^,]+),", out)
    )
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


_TASK_START = re.compile(r"\[DAG TEST\] starting task_id=(\S+) map_index=(-?\d+)")
_TASK_END = re.compile(r"\[DAG TEST\] end task task_id=(\S+) map_index=(-?\d+)")


def split_task_logs(out: str) -> dict[tuple[str, int], list[str]]:
    """The lines of each task in ``airflow dags test`` output (between its start and end markers)."""
    sections: dict[tuple[str, int], list[str]] = {}
    current: tuple[str, int] | None = None
    for line in out.splitlines():
        start = _TASK_START.search(line)
        if start:
            current = (start.group(1), int(start.group(2)))
            sections.setdefault(current, [])
        if current is not None:
            sections[current].append(line)
        end = _TASK_END.search(line)
        if end or "DagRun Finished:" in line:
            current = None
    return sections


def write_task_logs(dag_id: str, run_id: str, out: str) -> int:
    """Write each task's part of the ``dags test`` output where the API server reads task logs.

    ``airflow dags test`` runs the tasks in its own process and prints their logs; it writes no log
    file, so the UI would look for one on the worker's log server (none) and show nothing. The
    file goes to ``[logging] base_log_folder`` under Airflow's ``log_filename_template``, the path
    the API server of the same ``AIRFLOW_HOME`` reads. Returns the number of files written.
    """
    from types import SimpleNamespace

    import jinja2
    from airflow.configuration import conf
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    base = Path(conf.get("logging", "base_log_folder"))
    template = jinja2.Template(conf.get("logging", "log_filename_template"))
    sections = split_task_logs(out)
    written = 0
    with create_session() as session:
        tis = session.scalars(select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id))
        for ti in tis:
            lines = sections.get((ti.task_id, ti.map_index))
            if not lines:
                continue
            view = SimpleNamespace(dag_id=dag_id, run_id=run_id, task_id=ti.task_id, map_index=ti.map_index)
            path = base / template.render(ti=view, try_number=max(ti.try_number or 1, 1))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(lines) + "\n")
            written += 1
    return written


def keep_task_logs(dag_id: str, out: str, run_id: str | None = None) -> None:
    """:func:`write_task_logs` of the run in ``out`` (or ``run_id``); a failure is printed, never fatal."""
    run_id = run_id or run_id_of(out)
    if not run_id:
        return
    try:
        write_task_logs(dag_id, run_id, out)
    except Exception as err:  # task logs in the UI are a courtesy; never let them break the demo
        print(f"    task logs of {dag_id} {run_id} not written: {err}", flush=True)


def run_id_of(out: str) -> str | None:
    """The run id ``airflow dags test`` printed in its ``DagRun Finished`` line."""
    found = re.findall(r"DagRun Finished: dag_id=[^,]*, logical_date=[^,]*, run_id=([^,]+),", out)
    return found[-1] if found else None


#: One request the demo erases late on purpose, so the Erasure page shows a missed deadline in red: received
#: 35 days before the demo, erased (logical + purge, one run of the erasure example) and its key redacted only
#: now. Its subject is a customer of the example's tables, so the late run really removes rows.
OVERDUE_REQUESTS_TABLE = "erasure.requests"
OVERDUE_REQUEST_ID = "DSR-DEMO-LATE"
OVERDUE_SUBJECT = "cust-0011"
OVERDUE_DAYS = 35
OVERDUE_DAG = "iceberg_erasure"
#: The erasure example's check before it erases: it refuses to start while a request is past its deadline.
OVERDUE_CHECK = "deadline_check_before"
OVERDUE_NOTE = (
    f"Erased late on purpose (demo): request {OVERDUE_REQUEST_ID} in {OVERDUE_REQUESTS_TABLE} was received "
    f"{OVERDUE_DAYS} days ago and is erased only by this run, past its 30-day (PIPEDA / Law 25) and one-month "
    "(GDPR) deadlines, so the Erasure page and its evidence report show it in red as erased late. Its subject's "
    "rows are removed from both tables and its key is redacted like every other request's: no requests table "
    f"keeps it. The check before the erasure ({OVERDUE_CHECK}), which rightly stops at a request this old, is "
    "marked success for this run, as a steward does in Airflow to let a late erasure go ahead."
)
#: How :func:`erase_overdue_request` runs the erasure example (:func:`run_one`'s run).
OVERDUE_RUN = {
    "label": f"{OVERDUE_REQUEST_ID}, received {OVERDUE_DAYS} days ago, erased and redacted late",
    "mark_success": OVERDUE_CHECK,
    "run_note": OVERDUE_NOTE,
    "expect": "success",
}


def demo_subject_keys() -> set[str]:
    """Every subject key the demo submits: the example DAGs' ``DEMO_SUBJECTS`` and the late request's."""
    keys = {OVERDUE_SUBJECT}
    for path in sorted(DAGS.glob("example_*.py")):
        if "DEMO_SUBJECTS" in path.read_text():
            keys.update(dict(load(path).DEMO_SUBJECTS).values())
    return keys


def erase_overdue_request(hook, log_dir: Path) -> bool:
    """Submit the demo's late request (after every erasure example ran) and erase it with the erasure
    example, redaction included; whether the run ended as expected (True when there is no requests table)."""
    from datetime import timedelta

    if not hook.table_exists(OVERDUE_REQUESTS_TABLE):
        return True
    known = {r["request_id"] for r in hook.governance.erasure_request_states(OVERDUE_REQUESTS_TABLE)}
    if OVERDUE_REQUEST_ID not in known:
        received = datetime.now(UTC) - timedelta(days=OVERDUE_DAYS)
        hook.governance.submit_erasure_requests(
            OVERDUE_REQUESTS_TABLE, {OVERDUE_REQUEST_ID: OVERDUE_SUBJECT}, received_at=received
        )
    return run_one(OVERDUE_DAG, "late", OVERDUE_RUN, log_dir)


#: Asset-scheduled DAGs unpaused before the DAG whose publish feeds them: the publish's asset event
#: queues their run (Airflow queues runs of unpaused consumers only), and a scheduler runs it: the
#: events demo's, or the one `make ui` starts.
ASSET_CONSUMERS = {"iceberg_wap": ("iceberg_wap_consumer",)}


def unpause_consumers(dag_id: str) -> None:
    """Unpause the asset-scheduled consumers of ``dag_id`` (:data:`ASSET_CONSUMERS`)."""
    for consumer in ASSET_CONSUMERS.get(dag_id, ()):
        proc = subprocess.run(["airflow", "dags", "unpause", consumer], capture_output=True, text=True)
        state = "unpaused" if proc.returncode == 0 else f"not unpaused ({proc.stderr.strip()[-200:]})"
        print(f"    {consumer} {state}: the publish's asset event queues its run, a scheduler runs it", flush=True)


def run_one(dag_id: str, i: int | str, run: dict, log_dir: Path) -> bool:
    """One demo run of ``dag_id`` (its ``DEMO["runs"][i]``): run, keep its logs and note, print; whether
    it ended as expected. ``run["run_note"]``: the DAG-run note of a run that is not a failure or a wait."""
    # The logical date is the moment the run starts, so the UI's run durations are the real ones
    # (a back-dated logical date would read as a run of weeks).
    date = run.get("date") or datetime.now(UTC).replace(microsecond=0).isoformat()
    expect = run.get("expect", "success")
    with demo_connect.dag_mode(dag_id) as mode:
        if expect == "awaiting_input":
            state, seconds, out = run_dag_until_waiting(dag_id, run.get("conf", {}), date, run["task_id"])
        else:
            state, seconds, out = run_dag(dag_id, run.get("conf", {}), date, run.get("mark_success"))
    (log_dir / f"{dag_id}-{i}.log").write_text(out)
    ok = state == expect
    if state == "awaiting_input":  # the run never finishes here: its id comes from the metadata DB
        waiting = waiting_run_id(dag_id, run["task_id"])
        if waiting:
            keep_task_logs(dag_id, out, waiting)
            try:
                set_run_note(dag_id, out, waiting_note(run), run_id=waiting)
            except Exception as err:  # a note is a courtesy; never let it break the demo
                print(f"    DAG-run note not set: {err}", flush=True)
        print(f"    {run['task_id']} of {waiting} awaits input: {waiting_note(run)}", flush=True)
    else:
        keep_task_logs(dag_id, out)
    if expect == "failed":  # the UI shows the run as failed: say it was meant to
        try:
            noted = set_run_note(dag_id, out, expected_failure_note(run))
        except Exception as err:  # a note is a courtesy; never let it break the demo
            noted = f"not set: {err}"
        print(f"    DAG-run note ({noted}): {expected_failure_note(run)}", flush=True)
    elif run.get("run_note"):
        try:
            noted = set_run_note(dag_id, out, run["run_note"])
        except Exception as err:  # a note is a courtesy; never let it break the demo
            noted = f"not set: {err}"
        print(f"    DAG-run note ({noted}): {run['run_note']}", flush=True)
    print(
        f"{'OK ' if ok else 'BAD'} {dag_id} run {i} ({run.get('label', date)}): {state} "
        f"(expected {expect}) in {seconds:.1f}s via {mode}  log: {log_dir / f'{dag_id}-{i}.log'}",
        flush=True,
    )
    return ok


def main(argv: list[str]) -> int:
    only = set(argv)
    modes = contextlib.ExitStack()  # the Spark Connect server (scripts/demo_connect.py), stopped at the end
    modes.enter_context(demo_connect.execution_mode())
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
        unpause_consumers(dag_id)
        for i, run in enumerate(module.DEMO.get("runs", [{}])):
            failures += not run_one(dag_id, i, run, log_dir)
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
    if not only or OVERDUE_DAG in only:
        failures += not erase_overdue_request(IcebergCatalogHook(), log_dir)
    ledger = IcebergCatalogHook().governance.read("ledger")
    print(
        f"governance ledger: {len(ledger)} rows; last: "
        + ", ".join(f"{r['operation']}:{r['status']}" for r in ledger[-5:])
    )
    modes.close()
    print("demo: " + ("all runs as expected" if not failures else f"{failures} run(s) NOT as expected"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
