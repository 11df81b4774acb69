"""The ref guard on real SQLite catalogs (no JVM): the refusal matrix (every public verb x every kind
of ref), the release policy, and holds changed by a writer outside the provider."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from airflow_iceberg_provider.exceptions import (
    IcebergHealthThresholdError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.hooks._multi_table import stage_ref_changes
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.operators.approval import IcebergRefApprovalOperator
from airflow_iceberg_provider.operators.health import IcebergTableHealthCheckOperator
from airflow_iceberg_provider.operators.maintenance import IcebergMaintenancePlanOperator
from airflow_iceberg_provider.operators.refs import (
    IcebergCreateBranchOperator,
    IcebergCreateTagOperator,
    IcebergDropBranchOperator,
    IcebergDropTagOperator,
    IcebergRollbackOperator,
)
from airflow_iceberg_provider.rules.refs import RefChange
from tests.support.lake import append_batches, catalog_conn_json, create_orders_table, fake_context

T = "db.orders"
HOLD = "legal-hold-c1"
NAMES = {"legal_hold": HOLD, "tag": "v1", "branch": "dev", "main": "main"}


def _setup(hook: IcebergCatalogHook, *, requires_approval: bool = False) -> list[int]:
    """db.orders: s1 <- s2 <- s3 on main; legal hold, tag v1 and branch dev on s2."""
    create_orders_table(hook, T)
    snaps = append_batches(hook, T, 3)
    IcebergCreateTagOperator(
        task_id="hold",
        table=T,
        tag="c1",
        legal_hold=True,
        case_id="C-1",
        snapshot_id=snaps[1],
        requires_approval=requires_approval,
    ).execute(fake_context(task_id="hold"))
    hook.create_tag(T, "v1", snapshot_id=snaps[1])
    hook.create_branch(T, "dev", snapshot_id=snaps[1])
    return snaps


@pytest.fixture
def refs_table(lake):
    return lake, _setup(lake)


def _current(hook: IcebergCatalogHook, name: str) -> int | None:
    found = hook.refs(T).get(name)
    return found.snapshot_id if found else None


def _stored(hook: IcebergCatalogHook, name: str) -> str:
    return hook.refs(T)[name].type


# every public verb: operators, then the catalog hook's verbs (incl. the multi-table staging)
VERBS = {
    "op:create_tag(replace)": lambda h, n, s: IcebergCreateTagOperator(
        task_id="v", table=T, tag=n, snapshot_id=s[0], replace=True
    ).execute(fake_context()),
    "op:create_branch(replace)": lambda h, n, s: IcebergCreateBranchOperator(
        task_id="v", table=T, branch=n, snapshot_id=s[0], replace=True
    ).execute(fake_context()),
    "op:rollback": lambda h, n, s: IcebergRollbackOperator(task_id="v", table=T, ref=n, to_snapshot_id=s[0]).execute(
        fake_context()
    ),
    "op:drop_tag": lambda h, n, s: IcebergDropTagOperator(task_id="v", table=T, tag=n).execute(fake_context()),
    "op:drop_branch": lambda h, n, s: IcebergDropBranchOperator(task_id="v", table=T, branch=n).execute(fake_context()),
    "hook:set_ref(branch)": lambda h, n, s: h.set_ref(T, n, s[0]),
    "hook:set_ref(tag)": lambda h, n, s: h.set_ref(T, n, s[0], ref_type="tag"),
    "hook:fast_forward": lambda h, n, s: h.fast_forward(T, ref=n, to_snapshot_id=s[2]),
    "hook:rollback": lambda h, n, s: h.rollback(T, ref=n, to_snapshot_id=s[0]),
    "hook:remove_ref": lambda h, n, s: h.remove_ref(T, n),
    "hook:create_tag(replace)": lambda h, n, s: h.create_tag(T, n, snapshot_id=s[0], replace=True),
    "hook:create_branch(replace)": lambda h, n, s: h.create_branch(T, n, snapshot_id=s[0], replace=True),
    "hook:apply_ref_changes(move branch)": lambda h, n, s: h.apply_ref_changes(
        T, [RefChange(n, "branch", s[0], _current(h, n))]
    ),
    "hook:apply_ref_changes(move tag)": lambda h, n, s: h.apply_ref_changes(
        T, [RefChange(n, "tag", s[0], _current(h, n))]
    ),
    "hook:apply_ref_changes(drop)": lambda h, n, s: h.apply_ref_changes(
        T, [RefChange(n, _stored(h, n), None, _current(h, n))]
    ),
    "hook:remove_files_on_branch": lambda h, n, s: h.remove_files_on_branch(T, n, [s[1]], {}),
    "multi-table:stage_ref_changes(move)": lambda h, n, s: stage_ref_changes(
        h.load_table(T), [RefChange(n, "branch", s[0], _current(h, n))]
    ),
}

#: (verb, kind) pairs that may change (or keep) the ref; everything else must be refused
ALLOWED = {
    ("op:create_tag(replace)", "tag"),
    ("op:create_branch(replace)", "branch"),
    ("op:rollback", "branch"),
    ("op:rollback", "main"),
    ("op:drop_tag", "tag"),
    ("op:drop_branch", "branch"),
    ("hook:set_ref(branch)", "branch"),
    ("hook:set_ref(branch)", "main"),
    ("hook:set_ref(tag)", "tag"),
    ("hook:fast_forward", "branch"),
    ("hook:fast_forward", "main"),
    ("hook:rollback", "branch"),
    ("hook:rollback", "main"),
    ("hook:remove_ref", "tag"),
    ("hook:remove_ref", "branch"),
    ("hook:create_tag(replace)", "tag"),
    ("hook:create_branch(replace)", "branch"),
    ("hook:apply_ref_changes(move branch)", "branch"),
    ("hook:apply_ref_changes(move branch)", "main"),
    ("hook:apply_ref_changes(move tag)", "tag"),
    ("hook:apply_ref_changes(drop)", "tag"),
    ("hook:apply_ref_changes(drop)", "branch"),
    ("hook:remove_files_on_branch", "branch"),
    ("hook:remove_files_on_branch", "main"),
    ("multi-table:stage_ref_changes(move)", "branch"),
    ("multi-table:stage_ref_changes(move)", "main"),
}


PAIRS = [(verb, kind) for verb in VERBS for kind in NAMES]


@pytest.fixture(scope="module")
def shared_refs_table(module_lake):
    """One table for the refusals: a refusal changes nothing, which each test asserts."""
    return module_lake, _setup(module_lake)


@pytest.mark.parametrize(("verb", "kind"), [p for p in PAIRS if p in ALLOWED])
def test_allowed_changes_keep_the_refs_type(refs_table, verb, kind):
    hook, snaps = refs_table
    name = NAMES[kind]
    before_type = _stored(hook, name)
    VERBS[verb](hook, name, snaps)
    after = hook.refs(T).get(name)
    assert after is None or after.type == before_type  # a tag stays a tag, a branch a branch
    assert hook.refs(T)[HOLD].snapshot_id == snaps[1]


@pytest.mark.parametrize(("verb", "kind"), [p for p in PAIRS if p not in ALLOWED])
def test_refusal_matrix(shared_refs_table, verb, kind):
    hook, snaps = shared_refs_table
    name = NAMES[kind]
    before_type, before_snapshot = _stored(hook, name), _current(hook, name)
    location = hook.metadata_location(T)
    with pytest.raises((IcebergRefusedError, IcebergValidationError)) as err:
        VERBS[verb](hook, name, snaps)
    assert repr(name) in str(err.value) or name in str(err.value)
    assert hook.metadata_location(T) == location  # nothing was committed
    assert (_stored(hook, name), _current(hook, name)) == (before_type, before_snapshot)
    assert (_stored(hook, HOLD), _current(hook, HOLD)) == ("tag", snaps[1])  # no hold moved or removed


def test_the_hold_is_refused_with_the_release_path_named(refs_table):
    """The reported attack: roll the hold back (it would become a branch), then drop it as a branch."""
    hook, snaps = refs_table
    location = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError) as err:
        IcebergRollbackOperator(task_id="r", table=T, ref=HOLD, to_snapshot_id=snaps[0]).execute(fake_context())
    assert str(err.value).startswith(f"ref={HOLD!r}: refusing to rollback legal hold {HOLD!r}")
    assert "IcebergDropTagOperator(tag=..., release_legal_hold=True" in str(err.value)
    with pytest.raises(IcebergRefusedError, match=f"branch={HOLD!r}: refusing to drop legal hold"):
        IcebergDropBranchOperator(task_id="d", table=T, branch=HOLD).execute(fake_context())
    assert hook.metadata_location(T) == location
    refused = hook.governance.read("ledger", table_name=T, status="refused")
    assert {r["operation"] for r in refused} == {"rollback", "drop_branch"}


def test_a_release_flag_on_a_plain_tag_is_an_ordinary_drop(refs_table):
    hook, _ = refs_table
    out = IcebergDropTagOperator(task_id="d", table=T, tag="v1", release_legal_hold=True).execute(fake_context())
    assert out["dropped"] is True and "v1" not in hook.refs(T)


# ------------------------------------------------------------------------ release policy
def _approve(hook: IcebergCatalogHook, option: str = "Approve", tag: str = HOLD) -> str:
    """Answer an ``IcebergRefApprovalOperator(gate="legal_hold_release")`` as a steward would; the event id."""
    op = IcebergRefApprovalOperator(task_id="gate", table=T, ref=tag, gate="legal_hold_release")
    event = {
        "chosen_options": [option],
        "params_input": {},
        "responded_by_user": {"id": "7", "name": "steward"},
        "responded_at": datetime.now(UTC),
    }
    op.execute_complete(fake_context(task_id="gate"), event)
    rows = sorted(hook.governance.read("ledger", table_name=T, operation="approval"), key=lambda r: r["finished_at"])
    return rows[-1]["event_id"]


def _release(**kw):
    return IcebergDropTagOperator(
        task_id="release", table=T, tag=HOLD, release_legal_hold=True, release_reason="case closed", **kw
    ).execute(fake_context(task_id="release"))


def _release_rows(hook):
    rows = hook.governance.read("ledger", table_name=T, operation="drop_tag", ref=HOLD)
    return [{**r, "details": json.loads(r["details"])} for r in rows]


@pytest.fixture
def required(lake):
    return lake, _setup(lake, requires_approval=True)


def test_release_without_approval_when_required_is_refused_and_changes_nothing(required):
    hook, snaps = required
    location = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="requires_approval=True, and there is none"):
        _release()
    with pytest.raises(IcebergRefusedError, match="there is none"):  # the hook verb enforces it too
        hook.release_legal_hold(T, HOLD, expected_snapshot_id=snaps[1])
    assert hook.metadata_location(T) == location and _stored(hook, HOLD) == "tag"
    assert [r["status"] for r in _release_rows(hook)] == ["refused"]


def test_release_with_a_bound_approval_names_it(required):
    hook, snaps = required
    approval = _approve(hook)
    out = _release()
    assert out["dropped"] is True and out["approval_id"] == approval
    assert HOLD not in hook.refs(T)
    (row,) = [r for r in _release_rows(hook) if r["status"] == "succeeded"]
    assert row["details"]["approval_id"] == approval
    assert row["details"]["legal_hold_released"] is True and row["details"]["case_id"] == "C-1"
    assert row["details"]["release_policy"] == "hold" and row["snapshot_before"] == snaps[1]


def test_a_rejection_cannot_release(required):
    hook, _ = required
    _approve(hook)
    _approve(hook, "Reject")  # the latest decision bound to the hold counts
    location = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="is 'rejected', not 'approved'"):
        _release()
    assert hook.metadata_location(T) == location


@pytest.mark.parametrize("binding", [{"case_id": "C-9"}, {"snapshot": "other"}, {"ref": "legal-hold-other"}], ids=str)
def test_an_approval_for_another_case_snapshot_or_hold_cannot_release(required, binding):
    hook, snaps = required
    ref = binding.get("ref", HOLD)
    snapshot = snaps[0] if binding.get("snapshot") else snaps[1]
    hook.governance.record_ledger(  # a decision row as the gate writes it, bound to something else
        operation="approval",
        table=T,
        ref=ref,
        status="succeeded",
        context=fake_context(task_id="gate"),
        snapshot_after=snapshot,
        details={
            "gate": "legal_hold_release",
            "decision": "approved",
            "decided_at": datetime.now(UTC).isoformat(),
            "case_id": binding.get("case_id", "C-1"),
        },
    )
    location = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="needs an approval bound to this hold"):
        _release()
    assert hook.metadata_location(T) == location and _stored(hook, HOLD) == "tag"


def test_a_connection_can_require_approval_for_every_hold(tmp_path, monkeypatch):
    (tmp_path / "wh").mkdir()
    conn = catalog_conn_json(tmp_path / "c.db", tmp_path / "wh", hold_release_requires_approval="true")
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", conn)
    hook = IcebergCatalogHook()
    hook.ensure_namespace("db")
    _setup(hook)  # placed without a policy of its own
    with pytest.raises(IcebergRefusedError, match="the connection sets hold_release_requires_approval"):
        _release()
    approval = _approve(hook)
    assert _release()["approval_id"] == approval


def test_a_connection_flag_is_true_or_false_only(tmp_path, monkeypatch):
    from airflow_iceberg_provider.exceptions import IcebergConnectionError

    conn = catalog_conn_json(tmp_path / "c.db", tmp_path, hold_release_requires_approval="yes")
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT", conn)
    with pytest.raises(IcebergConnectionError, match="hold_release_requires_approval='yes' is not a boolean flag"):
        _ = IcebergCatalogHook().config


def test_without_a_policy_the_release_needs_no_approval(refs_table):
    hook, _ = refs_table
    out = _release()
    assert out["dropped"] is True and out["approval_id"] is None
    (row,) = [r for r in _release_rows(hook) if r["status"] == "succeeded"]
    assert row["details"]["release_policy"] == "none"


def test_requires_approval_is_for_holds_only():
    with pytest.raises(IcebergValidationError, match="requires_approval=True is a legal hold's release policy"):
        IcebergCreateTagOperator(task_id="t", table=T, tag="v2", requires_approval=True)
    with pytest.raises(IcebergValidationError, match="requires_approval='maybe' is not a boolean flag"):
        IcebergCreateTagOperator(
            task_id="t", table=T, tag="c2", legal_hold=True, case_id="C", requires_approval="maybe"
        )


# ------------------------------------------------------------------------ outside writers
def _retype_hold_to_branch(hook, snapshot_id):
    """What another engine can do: a ref update that ignores the ref's type (pyiceberg, no provider)."""
    tbl = hook.load_table(T)
    tbl.manage_snapshots().remove_tag(HOLD).commit()
    hook.load_table(T).manage_snapshots().create_branch(snapshot_id, HOLD).commit()


OUTSIDE = {
    "turned into a branch": lambda h, s: _retype_hold_to_branch(h, s[0]),
    "moved": lambda h, s: (
        h.load_table(T).manage_snapshots().remove_tag(HOLD).commit(),
        h.load_table(T).manage_snapshots().create_tag(s[2], HOLD).commit(),
    ),
    "dropped": lambda h, s: h.load_table(T).manage_snapshots().remove_tag(HOLD).commit(),
}


@pytest.mark.parametrize("problem", list(OUTSIDE))
def test_outside_writers_are_reported_by_health_check_and_maintenance_plan(refs_table, problem):
    hook, snaps = refs_table
    OUTSIDE[problem](hook, snaps)
    out = IcebergTableHealthCheckOperator(
        task_id="health", table=T, on_breach="warn", min_avg_file_size_bytes="off"
    ).execute(fake_context())
    assert out["healthy"] is False and out["breaches"] == []
    (violation,) = out["hold_violations"]
    assert (violation["tag"], violation["problem"], violation["case_id"]) == (HOLD, problem, "C-1")
    assert violation["placed_snapshot_id"] == str(snaps[1])

    ti = SimpleNamespace(**vars(fake_context()["ti"]), xcom_push=lambda **kw: None)
    with pytest.raises(IcebergHealthThresholdError, match=f"legal hold {HOLD!r} of {T} .* was {problem}"):
        IcebergTableHealthCheckOperator(task_id="health", table=T, min_avg_file_size_bytes="off").execute(
            {**fake_context(), "ti": ti}
        )

    plan = IcebergMaintenancePlanOperator(
        task_id="plan",
        table=T,
        expire_older_than="0s",
        older_than_floor="0s",
        spark_conn_id="no_such_spark_conn",
    )
    decision, _, _ = plan.plan()
    assert [v["problem"] for v in decision.findings["hold_violations"]] == [problem]
    assert not decision.healthy
    assert "expire_snapshots" not in [a.action for a in decision.actions]
    assert decision.skipped["expire_snapshots"].startswith("legal hold violation")


def test_a_hold_turned_into_a_branch_stays_guarded(refs_table):
    hook, snaps = refs_table
    _retype_hold_to_branch(hook, snaps[0])
    location = hook.metadata_location(T)
    with pytest.raises(IcebergRefusedError, match="turned into a branch by a writer outside the provider"):
        IcebergDropBranchOperator(task_id="d", table=T, branch=HOLD).execute(fake_context())
    with pytest.raises(IcebergRefusedError, match="refusing to fast-forward legal hold"):
        hook.fast_forward(T, ref=HOLD, to_snapshot_id=snaps[2])
    assert hook.metadata_location(T) == location
    # its release is still the release path, and it is recorded as one
    assert _release()["dropped"] is True and HOLD not in hook.refs(T)


def test_a_healthy_table_with_holds_reports_no_violation(refs_table):
    out = IcebergTableHealthCheckOperator(
        task_id="health", table=T, on_breach="warn", min_avg_file_size_bytes="off"
    ).execute(fake_context())
    assert out["hold_violations"] == [] and out["healthy"] is True
    _release()  # released through the provider: not a violation either
    again = IcebergTableHealthCheckOperator(
        task_id="health", table=T, on_breach="warn", min_avg_file_size_bytes="off"
    ).execute(fake_context())
    assert again["hold_violations"] == []


def test_a_wap_publish_cannot_drop_a_hold_named_as_its_branch(lake):
    """Naming a hold as the WAP branch to publish and drop is refused before the publish's commit."""
    from airflow_iceberg_provider.operators.wap_branch import IcebergWapCreateBranchOperator
    from airflow_iceberg_provider.operators.wap_publish import IcebergWapPublishOperator
    from tests.support.lake import orders_batch
    from tests.support.wap import commit_to_branch, record_audit

    create_orders_table(lake, T).append(orders_batch(0, 10))
    IcebergWapCreateBranchOperator(task_id="c", table=T, branch="b").execute(fake_context())
    head = commit_to_branch(lake, T, "b", 100, 5)
    IcebergCreateTagOperator(task_id="h", table=T, tag="c1", legal_hold=True, case_id="C-1", snapshot_id=head).execute(
        fake_context()
    )
    record_audit(lake, T, HOLD, head)
    location = lake.metadata_location(T)
    with pytest.raises((IcebergRefusedError, IcebergValidationError), match=HOLD) as err:
        IcebergWapPublishOperator(task_id="p", table=T, branch=HOLD, drop_branch=True).execute(fake_context())
    assert "not a WAP branch" in str(err.value)
    assert lake.metadata_location(T) == location and _stored(lake, HOLD) == "tag"
