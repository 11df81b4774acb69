"""Approval gates and partitioned publish events with a real Airflow API server and scheduler (own AIRFLOW_HOME).

One API server and one scheduler serve the module.

Partitioned publish events: a WAP publish of a branch that touched three days of a table partitioned
by ``day(order_ts)`` emits one asset event per day, and a DAG on ``PartitionedAssetTimetable`` runs
once per day, each run carrying its partition key.

Approval gates: five DAG runs wait for a steward at once:

* two WAP gates whose audits failed a warn-level check: one is answered *Publish* (``main`` moves
  to the audited snapshot, the publish accepts exactly that check), one *Drop branch* (the branch
  is gone, ``main`` unchanged);
* a WAP gate whose audit failed a non-warn check fails without asking;
* two legal-hold release gates: one approved (the hold is released), one rejected (it stays).

The answers go through ``PATCH .../hitlDetails`` as a logged-in user; every decision is one
``approval`` ledger row with who, when, what and the comment. Without Airflow, the pure rules and
the publish's use of a recorded decision are tested in milliseconds.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergRefusedError
from airflow_iceberg_provider.governance.approvals import approval_history, steward_waivers
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
from airflow_iceberg_provider.rules import approval as rules
from airflow_iceberg_provider.rules.wap_refs import Verdict
from tests.support.airflow_procs import airflow_env, api_server_and_scheduler, restored_environ
from tests.support.lake import catalog_conn_json, create_orders_table, fake_context, orders_batch
from tests.support.wap import commit_to_branch, record_audit


# ------------------------------------------------------------------------------- pure rules
def test_findings_sort_warn_and_blocking_checks_of_the_bound_audit():
    rows = [
        {"check_name": n, "passed": p, "observed_value": o, "condition": ">= 0"}
        for n, p, o in (("amount.min", False, -1.0), ("rows", True, 5.0), ("late_share", False, 0.4))
    ]
    verdict = Verdict("new", "0" * 64, 42, tuple(rows))
    found = rules.audit_findings(verdict, ["amount.min", "late_share"])
    assert found.event_id == "new" and found.checks == 3 and found.blocking == ()
    assert found.warned == ("amount.min", "late_share")
    assert rules.audit_findings(verdict, ["amount.min"]).blocking == ("late_share",)
    body = rules.wap_gate_body("db.t", "b", 42, 7, found)
    assert "| amount.min | -1.0 | >= 0 |" in body and "Keep for later" in body and "`main` is at `7`" in body


def test_decision_details_record_who_when_what_and_comment():
    event = {"responded_by_user": {"id": "u1", "name": "steward"}, "responded_at": datetime(2026, 1, 1, tzinfo=UTC)}
    d = rules.decision_details(
        gate="wap_publish", option="Drop branch", decisions=rules.WAP_DECISIONS, event=event, comment="  bad feed "
    )
    assert (d["decision"], d["decided_by"], d["decided_by_id"], d["comment"]) == (
        "drop_branch",
        "steward",
        "u1",
        "bad feed",
    )
    assert d["decided_at"] == "2026-01-01T00:00:00+00:00"


def test_ref_gate_forms_name_the_tag_its_snapshot_and_the_case():
    erase = rules.RefGate(rules.ERASURE_DROP_TAG, "db.t", "eod-2026-01-01", 7, {"snapshot": 7})
    assert erase.subject() == "Erase through tag eod-2026-01-01 of db.t?"
    assert "drops tag **eod-2026-01-01**" in erase.body() and "purged" in erase.body()
    hold = rules.RefGate(rules.LEGAL_HOLD_RELEASE, "db.t", "legal-hold-x", 7, {"case_id": "C-1", "reason": None})
    assert "case_id: `C-1`" in hold.body() and "reason" not in hold.body()


def test_publish_accepts_a_warn_check_only_after_a_recorded_publish_decision(lake):
    table = "db.orders"
    create_orders_table(lake, table).append(orders_batch(0, 10))
    lake.create_branch(table, "b", snapshot_id=lake.ref_snapshot_id(table))
    head = commit_to_branch(lake, table, "b", 100, 5)
    audit = record_audit(lake, table, "b", head, passed=False)  # amount.min failed
    publish = IcebergWapPublishOperator(task_id="p", table=table, branch="b", audit=audit)
    with pytest.raises(IcebergRefusedError, match=r"failed checks \['amount.min'\]"):
        publish.execute(fake_context())

    def decide(decision: str, snapshot: int, waived: list[str]) -> None:
        details = {
            "gate": "wap_publish",
            "decision": decision,
            "decided_at": datetime.now(UTC).isoformat(),
            "audit_event_id": audit["audit_event_id"],
            "spec_hash": audit["spec_hash"],
            "branch_head": str(snapshot),
            "failed_checks": [{"check": "amount.min", "observed": -1.0, "expected": ">= 0"}],
            "waived": waived,
        }
        lake.governance.record_ledger(
            operation="approval",
            table=table,
            ref="b",
            status="succeeded",
            context=fake_context(task_id="gate"),
            snapshot_after=snapshot,
            details=details,
        )

    decide("publish", lake.ref_snapshot_id(table), ["amount.min"])  # a decision on another snapshot
    decide("keep", head, [])
    with pytest.raises(IcebergRefusedError, match="failed checks"):
        publish.execute(fake_context())
    time.sleep(0.01)
    decide("publish", head, ["amount.min"])
    binding = params.audit_binding(audit)
    assert steward_waivers(lake, table, binding, dag_id="test_dag", run_id="manual__2026-01-01") == {"amount.min"}
    assert steward_waivers(lake, table, binding, dag_id="test_dag", run_id="manual__other") == set()
    assert publish.execute(fake_context())["published_snapshot_id"] == str(head)
    assert lake.ref_snapshot_id(table) == head


# ------------------------------------------------------------- a real API server and scheduler
DAG_FILE = """
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG, PartitionedAssetTimetable
from airflow_iceberg_provider.assets.uris import iceberg_asset
from airflow_iceberg_provider.operators.approval import IcebergRefApprovalOperator, IcebergWapApprovalOperator
from airflow_iceberg_provider.operators.refs import IcebergDropBranchOperator, IcebergDropTagOperator
from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator

TABLE = "{{ dag_run.conf['table'] }}"


def recorded_audit(table, failing, ti):
    # the rows the audit job writes for this run, and its result (the Spark audit is tested elsewhere)
    from datetime import UTC, datetime
    from airflow_iceberg_provider.core import audit_checks
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook()
    head = hook.ref_snapshot_id(table, "b")
    spec = {"amount": {"min": {"geq_to": 0}}}
    if table == "db.broken":  # a failed check that is not warn-level
        spec["amount"]["null_check"] = {"equal_to": 0}
    checks = audit_checks.parse_checks(spec)
    hashes = {c.name: audit_checks.check_hash(c) for c in checks}
    digest = audit_checks.spec_hash_of(hashes)
    event_id = f"audit-{ti.run_id}-{table}".replace(" ", "_").replace("+", "_")[:120]
    rows = [
        {
            "event_id": event_id, "table_name": table, "ref": "b", "snapshot_id": head,
            "dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id,
            "check_name": c.name, "check_type": c.check_type, "column_name": c.column,
            "observed_value": -1.0 if failing else 1.0, "condition": c.describe(), "passed": not failing,
            "evaluated_at": datetime.now(UTC), "check_hash": hashes[c.name], "spec_hash": digest,
        }
        for c in checks
    ]
    hook.governance.append("audit_results", rows)
    return {"audit_event_id": event_id, "spec_hash": digest, "snapshot_id": str(head), "table": table}


with DAG(dag_id="gated_publish", schedule=None):
    audit = PythonOperator(task_id="audit", python_callable=recorded_audit, op_kwargs={"table": TABLE, "failing": True})
    gate = IcebergWapApprovalOperator(
        task_id="gate", table=TABLE, branch="b", warn_checks=["amount.min"],
        publish_task_id="publish", drop_task_id="drop", audit=audit.output,
    )
    audit >> gate >> [
        IcebergWapPublishOperator(task_id="publish", table=TABLE, branch="b", audit=audit.output),
        IcebergDropBranchOperator(task_id="drop", table=TABLE, branch="b"),
    ]

EVENTS = iceberg_asset("db.events")

with DAG(dag_id="publish_events", schedule=None):
    PythonOperator(
        task_id="audit", python_callable=recorded_audit, op_kwargs={"table": "db.events", "failing": False}
    ) >> IcebergWapPublishOperator(
        task_id="publish", table="db.events", branch="b", outlets=[EVENTS], partition_events="iceberg"
    )

with DAG(dag_id="per_partition", schedule=PartitionedAssetTimetable(assets=EVENTS)):
    EmptyOperator(task_id="read_partition")

with DAG(dag_id="gated_release", schedule=None):
    IcebergRefApprovalOperator(
        task_id="approve", table="db.held", ref="{{ dag_run.conf['hold'] }}", gate="legal_hold_release"
    ) >> IcebergDropTagOperator(
        task_id="release", table="db.held", tag="{{ dag_run.conf['hold'] }}", release_legal_hold=True,
        release_reason="case closed",
    )
"""

USER, PASSWORD = "steward", "steward-pw-1234"
DAYS = ("2026-01-01", "2026-01-02", "2026-01-03")


class Api:
    """The public REST API of the test's own API server, as one logged-in user."""

    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.token = self._call("POST", "/auth/token", {"username": USER, "password": PASSWORD}, auth=False)[
            "access_token"
        ]

    def _call(self, method: str, path: str, body: dict | None = None, *, auth: bool = True) -> dict:
        req = urllib.request.Request(self.base + path, method=method, data=json.dumps(body).encode() if body else None)
        req.add_header("Content-Type", "application/json")
        if auth:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.loads(resp.read() or b"{}")

    def trigger(self, dag_id: str, conf: dict) -> str:
        return self._call("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]

    def hitl(self, dag_id: str, run_id: str, task_id: str) -> dict:
        return self._call("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails")

    def answer(self, dag_id: str, run_id: str, task_id: str, option: str, comment: str) -> dict:
        body = {"chosen_options": [option], "params_input": {"comment": comment}}
        return self._call(
            "PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails", body
        )


@pytest.fixture(scope="module")
def airflow_gates(tmp_path_factory):
    """A lake with two warn-audited tables, one error-audited table and two legal holds; an API
    server + scheduler on its own AIRFLOW_HOME with the gate DAGs unpaused."""
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator

    tmp = tmp_path_factory.mktemp("gates")
    env = airflow_env(tmp)
    conn = catalog_conn_json(tmp / "c.db", tmp / "wh")
    env["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = conn
    with restored_environ("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"):
        os.environ["AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT"] = conn
        hook = IcebergCatalogHook()
        state = {}
        for i, table in enumerate(("db.publish_me", "db.drop_me", "db.broken")):
            create_orders_table(hook, table).append(orders_batch(1000 * i, 10))
            hook.create_branch(table, "b", snapshot_id=hook.ref_snapshot_id(table))
            head = commit_to_branch(hook, table, "b", 1000 * i + 100, 5)
            state[table] = (hook.ref_snapshot_id(table), head)
        create_orders_table(hook, "db.events").append(orders_batch(0, 10, day="2025-12-31"))
        hook.create_branch("db.events", "b", snapshot_id=hook.ref_snapshot_id("db.events"))
        for i, day in enumerate(DAYS):
            hook.load_table("db.events").append(orders_batch(100 + 10 * i, 10, day=day), branch="b")
        create_orders_table(hook, "db.held").append(orders_batch(0, 3))
        for case in ("case-1", "case-2"):
            IcebergCreateTagOperator(
                task_id="hold",
                table="db.held",
                tag=case,
                legal_hold=True,
                case_id=case.upper(),
                hold_reason="litigation",
            ).execute(fake_context())
        dags = tmp / "dags"
        dags.mkdir()
        (dags / "gates.py").write_text(DAG_FILE)
        (tmp / "pw.json").write_text(json.dumps({USER: PASSWORD}))
        with api_server_and_scheduler(
            env,
            dags,
            tmp / "logs",
            "gates",
            ready=_login,
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS=f"{USER}:admin",
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(tmp / "pw.json"),
            AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS="False",
        ) as (af, api):
            yield api, af, hook, state, tmp


def _login(port: int) -> Api | None:
    try:
        return Api(port)
    except OSError:
        return None


def _deferrals_reported(tmp: Path, ti_ids: list[str]) -> bool:
    """Whether the scheduler's log shows each task's workload finished as awaiting input."""
    log = (tmp / "logs" / "scheduler.log").read_text(errors="replace")
    finished = [
        line for line in log.splitlines() if "Workload finished" in line and "final_state=awaiting_input" in line
    ]
    return all(any(_dashed(ti) in line for line in finished) for ti in ti_ids)


def _dashed(ti_id: str) -> str:
    """A task instance id as the logs write it (a UUID with dashes; the DB may store it without)."""
    raw = ti_id.replace("-", "")
    return f"{raw[:8]}-{raw[8:12]}-{raw[12:16]}-{raw[16:20]}-{raw[20:]}"


def _logs(tmp: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-4000:] for p in (tmp / "logs").glob("*.log"))


@pytest.mark.airflow
def test_stewards_decide_through_the_rest_api_and_the_tables_follow(airflow_gates):
    from scripts.events_demo import wait_for

    api, af, hook, state, tmp = airflow_gates
    runs = {
        "publish": ("gated_publish", api.trigger("gated_publish", {"table": "db.publish_me"}), "gate"),
        "drop": ("gated_publish", api.trigger("gated_publish", {"table": "db.drop_me"}), "gate"),
        "broken": ("gated_publish", api.trigger("gated_publish", {"table": "db.broken"}), "gate"),
        "release": ("gated_release", api.trigger("gated_release", {"hold": "legal-hold-case-1"}), "approve"),
        "keep_hold": ("gated_release", api.trigger("gated_release", {"hold": "legal-hold-case-2"}), "approve"),
    }

    def ti_state(dag_id: str, run_id: str, task_id: str) -> str | None:
        found = af.query(
            "SELECT state FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?", dag_id, run_id, task_id
        )
        return found[0][0] if found else None

    def ti_id(dag_id: str, run_id: str, task_id: str) -> str:
        found = af.query(
            "SELECT id FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = ?", dag_id, run_id, task_id
        )
        return str(found[0][0])

    def run_state(dag_id: str, run_id: str) -> str:
        return af.query("SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, run_id)[0][0]

    waiting = [k for k in runs if k != "broken"]
    try:
        wait_for(
            "four gates awaiting input",
            lambda: all(ti_state(*runs[k]) == "awaiting_input" for k in waiting),
            300,
            every=1,
        )
        wait_for("the error-level audit to fail its gate", lambda: ti_state(*runs["broken"]) == "failed", 120, every=1)
        # a gate is awaiting input before its worker process has reported the deferral; an answer in
        # between makes Airflow's scheduler see that report for the re-queued task and fail it
        # (LocalExecutor: "finished with state success, but the task instance's state attribute is
        # queued"). A steward answers later than that; the test waits for the reports.
        gate_ids = [ti_id(*runs[k]) for k in waiting]
        wait_for("the gates' worker processes to report the deferral", lambda: _deferrals_reported(tmp, gate_ids), 120)
    except TimeoutError:
        pytest.fail(f"{ {k: ti_state(*v) for k, v in runs.items()} }\n{_logs(tmp)}")

    form = api.hitl(*runs["publish"])
    assert form["options"] == ["Publish", "Drop branch", "Keep for later"]
    assert "| amount.min | -1.0 | >= 0 |" in form["body"] and "db.publish_me" in form["subject"]
    hold_form = api.hitl(*runs["release"])
    assert "CASE-1" in hold_form["body"] and hold_form["options"] == ["Approve", "Reject"]

    api.answer(*runs["publish"], "Publish", "late rows are expected on Mondays")
    api.answer(*runs["drop"], "Drop branch", "feed was truncated")
    api.answer(*runs["release"], "Approve", "case closed by counsel")
    api.answer(*runs["keep_hold"], "Reject", "still in discovery")
    try:
        wait_for(
            "the answered runs to finish",
            lambda: all(run_state(*runs[k][:2]) in ("success", "failed") for k in waiting),
            300,
            every=1,
        )
    except TimeoutError:
        pytest.fail(f"{ {k: run_state(*v[:2]) for k, v in runs.items()} }\n{_logs(tmp)}")
    assert {k: run_state(*runs[k][:2]) for k in waiting} == dict.fromkeys(waiting, "success"), _logs(tmp)

    # the tables follow the decisions
    assert hook.ref_snapshot_id("db.publish_me") == state["db.publish_me"][1]
    assert hook.ref_snapshot_id("db.drop_me") == state["db.drop_me"][0] and "b" not in hook.refs("db.drop_me")
    assert hook.ref_snapshot_id("db.broken") == state["db.broken"][0] and "b" in hook.refs("db.broken")
    held = hook.refs("db.held")
    assert "legal-hold-case-1" not in held and "legal-hold-case-2" in held

    # every decision in the ledger: who, when, what, comment
    decisions = {(d["table"], d["ref"]): d for d in approval_history(hook)}
    assert len(decisions) == 4
    published = decisions[("db.publish_me", "b")]
    assert (published["decision"], published["decided_by"], published["comment"]) == (
        "publish",
        USER,
        "late rows are expected on Mondays",
    )
    assert published["details"]["waived"] == ["amount.min"] and published["decided_at"]
    assert published["details"]["failed_checks"] == [{"check": "amount.min", "observed": -1.0, "expected": ">= 0"}]
    assert published["snapshot_id"] == state["db.publish_me"][1]
    assert decisions[("db.drop_me", "b")]["decision"] == "drop_branch"
    assert decisions[("db.held", "legal-hold-case-1")]["decision"] == "approved"
    kept = decisions[("db.held", "legal-hold-case-2")]
    assert (kept["decision"], kept["comment"], kept["details"]["case_id"]) == (
        "rejected",
        "still in discovery",
        "CASE-2",
    )


@pytest.mark.airflow
def test_a_publish_touching_three_days_runs_the_partitioned_consumer_once_per_day(airflow_gates):
    from scripts.events_demo import wait_for

    api, af, hook, _, tmp = airflow_gates
    api.trigger("publish_events", {})

    def consumer_runs() -> list[tuple]:
        return af.query(
            "SELECT partition_key, state FROM dag_run WHERE dag_id = 'per_partition' ORDER BY partition_key"
        )

    try:
        wait_for("three partitioned runs", lambda: len(consumer_runs()) >= 3, 300, every=1)
    except TimeoutError:
        pytest.fail(f"{consumer_runs()}\n{_logs(tmp)}")
    time.sleep(3)  # a fourth run would show up by now
    assert [k for k, _ in consumer_runs()] == list(DAYS)
    keys = af.query(
        "SELECT e.partition_key FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ? "
        "ORDER BY e.partition_key",
        "iceberg://lakehouse/db/events",
    )
    assert [k for (k,) in keys] == list(DAYS)
    assert hook.ref_snapshot_id("db.events") == hook.ref_snapshot_id("db.events", "b")
