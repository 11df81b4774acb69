"""Strict flags: every boolean flag of every operator and sensor, templated or not, is ``True``/``False``
or ``"true"``/``"false"`` (any case) and nothing else; enum parameters take exactly their values.

The flags are discovered by introspecting the constructors (:func:`params.flag_parameters`), so a
new flag is covered here without editing this file. A refusal happens as the first step of
``execute()`` (after rendering, before any I/O) and names the parameter.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest

from airflow_iceberg_provider import operators, params, sensors
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.operators.expiry import IcebergExpireSnapshotsOperator
from tests.support.lake import append_batches, create_orders_table, fake_context

pytestmark = pytest.mark.security

NO_SPARK = {"spark_conn_id": "no_such_spark_conn"}
CHECKS = {"table_checks": {"has_rows": {"check_statement": "COUNT(*) > 0"}}}

#: The smallest valid constructor arguments of each class that has a flag. A class missing here
#: fails :func:`test_every_class_with_a_flag_is_covered`: add its required arguments.
REQUIRED: dict[str, dict[str, Any]] = {
    "IcebergErasureOperator": {
        "table": "db.orders",
        "subject_columns": ["customer_id"],
        "requests_table": "db.erasure_requests",
        **NO_SPARK,
    },
    "IcebergCryptoShredWriteOperator": {
        "table": "db.orders",
        "source_table": "db.staged_orders",
        "subject_column": "customer_id",
        **NO_SPARK,
    },
    "IcebergExpireSnapshotsOperator": {"table": "db.orders", **NO_SPARK},
    "IcebergMetadataHygieneOperator": {"table": "db.orders"},
    "IcebergRewriteDataFilesOperator": {"table": "db.orders", **NO_SPARK},
    "IcebergRewriteManifestsOperator": {"table": "db.orders", **NO_SPARK},
    "IcebergRewritePositionDeleteFilesOperator": {"table": "db.orders", **NO_SPARK},
    "IcebergRemoveOrphanFilesOperator": {"table": "db.orders", **NO_SPARK},
    "IcebergMaintenancePlanOperator": {"table": "db.orders", **NO_SPARK},
    "IcebergWapMultiPublishOperator": {"tables": [{"table": "db.orders"}, {"table": "db.items"}]},
    "IcebergCreateTagOperator": {"table": "db.orders", "tag": "release-1"},
    "IcebergCreateBranchOperator": {"table": "db.orders", "branch": "dev"},
    "IcebergDropTagOperator": {"table": "db.orders", "tag": "release-1"},
    "IcebergSparkSubmitOperator": {"table": "db.orders", "application": "/nowhere/job.py", **NO_SPARK},
    "IcebergWapAuditOperator": {"table": "db.orders", **CHECKS, **NO_SPARK},
    "IcebergWapPublishOperator": {"table": "db.orders", **NO_SPARK},
    "IcebergWapWriteOperator": {"table": "db.orders", "sql": "INSERT INTO db.orders SELECT 1", **NO_SPARK},
    "IcebergErasureDeadlineSensor": {"requests_table": "db.erasure_requests"},
    "IcebergSnapshotSensor": {"table": "db.orders", "mode": "poke", "deferrable": False},
}


def _classes_with_flags() -> dict[str, type]:
    found: dict[str, type] = {}
    for package in (operators, sensors):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for name, cls in vars(module).items():
                if (
                    inspect.isclass(cls)
                    and cls.__module__ == module.__name__
                    and not name.startswith("_")
                    and not inspect.isabstract(cls)
                    and callable(getattr(cls, "execute", None))
                    and params.flag_parameters(cls)
                    and name not in ("IcebergSparkBaseOperator",)  # a base: its flags are checked on every subclass
                ):
                    found[name] = cls
    return found


CLASSES = _classes_with_flags()
FLAGS = [
    (name, flag, optional) for name, cls in CLASSES.items() for flag, optional in params.flag_parameters(cls).items()
]
BAD = ["yes", "1", 1, 0, "on", "", "no", "True ish", 1.0]


def _build(name: str) -> Any:
    return CLASSES[name](task_id="t", **REQUIRED[name])


def _run(op: Any) -> None:
    """The task's first step after rendering: ``execute`` (``poke`` for a sensor without its own)."""
    if "execute" in vars(type(op)) or not hasattr(op, "poke"):
        op.execute(fake_context())
    else:
        op.poke(fake_context())


def test_every_class_with_a_flag_is_covered():
    assert set(CLASSES) == set(REQUIRED), "add the required arguments of new classes to REQUIRED"
    assert len(FLAGS) >= 30
    assert ("IcebergExpireSnapshotsOperator", "dry_run", False) in FLAGS
    assert ("IcebergSnapshotSensor", "deferrable", True) in FLAGS


@pytest.mark.parametrize(("name", "flag", "optional"), FLAGS, ids=[f"{n}.{f}" for n, f, _ in FLAGS])
def test_flags_refuse_anything_but_true_and_false(name, flag, optional):
    for value in [*BAD, *([] if optional else [None])]:
        op = _build(name)
        setattr(op, flag, value)  # what rendering a template field does
        with pytest.raises(IcebergValidationError) as err:
            _run(op)
        message = str(err.value)
        assert message.startswith(f"{flag}={params.describe(value)} is not"), message
        assert "pass True or False" in message


@pytest.mark.parametrize(("name", "flag", "optional"), FLAGS, ids=[f"{n}.{f}" for n, f, _ in FLAGS])
def test_flags_parse_true_false_in_any_case(name, flag, optional):
    for value, expected in [(True, True), (False, False), ("TRUE", True), ("false", False), (" False ", False)]:
        op = _build(name)
        setattr(op, flag, value)
        params.resolve_flags(op)
        assert getattr(op, flag) is expected
    if optional:
        for unset in (None, "None", "null"):
            op = _build(name)
            setattr(op, flag, unset)
            params.resolve_flags(op)
            assert getattr(op, flag) is None


@pytest.mark.parametrize("value", ["yes", "1", 1, "on", "", "TRUE ", None])
def test_flag_rule(value):
    if value == "TRUE ":
        assert params.flag(value, "x") is True
        return
    with pytest.raises(IcebergValidationError, match=r"^x=.* is not"):
        params.flag(value, "x")


def test_flag_refuses_an_unrendered_template():
    with pytest.raises(IcebergValidationError, match="still holds a Jinja template"):
        params.flag("{{ params.dry }}", "dry_run")


@pytest.mark.parametrize("value", ["Auto", " auto", "autox", None, 1, True, ""])
def test_choice_takes_exactly_its_values(value):
    assert params.choice("auto", "transaction", ("auto", "catalog")) == "auto"
    with pytest.raises(IcebergValidationError, match=r"^transaction=.* is not one of the accepted values; use one of"):
        params.choice(value, "transaction", ("auto", "catalog"))


@pytest.mark.parametrize("value", ["yes", "1", 1, "on", ""])
def test_expiry_dry_run_that_is_not_a_boolean_expires_nothing(lake, value):
    create_orders_table(lake, "db.orders", partition_by=())
    append_batches(lake, "db.orders", 4)
    before = lake.metadata_location("db.orders")
    snapshots = [s.snapshot_id for s in lake.list_snapshots("db.orders")]
    op = IcebergExpireSnapshotsOperator(
        task_id="expire", table="db.orders", older_than="0s", older_than_floor="0s", dry_run=value, **NO_SPARK
    )
    with pytest.raises(IcebergValidationError, match=r"^dry_run=.* is not a boolean flag; pass True or False"):
        op.execute(fake_context())
    assert lake.metadata_location("db.orders") == before
    assert [s.snapshot_id for s in lake.list_snapshots("db.orders")] == snapshots
    assert [r for r in lake.governance.read("ledger") if r["operation"] == "maintenance.expire_snapshots"] == []


def test_expiry_dry_run_true_in_any_case_is_a_dry_run(lake):
    create_orders_table(lake, "db.orders", partition_by=())
    append_batches(lake, "db.orders", 4)
    before = lake.metadata_location("db.orders")
    op = IcebergExpireSnapshotsOperator(
        task_id="expire", table="db.orders", older_than="0s", older_than_floor="0s", dry_run="TRUE", **NO_SPARK
    )
    out = op.execute(fake_context())
    assert out["dry_run"] is True and out["spark_job"] is False
    assert lake.metadata_location("db.orders") == before


@pytest.mark.parametrize("value", ["yes", "1", 1, "on", ""])
def test_task_group_flags_are_strict(value):
    """``asset`` is a flag or an Asset (refused at parse time); ``drop_branch`` reaches the publish
    operator verbatim, whose ``execute()`` refuses it (covered by the table above)."""
    import pendulum
    from airflow.sdk import DAG

    from airflow_iceberg_provider.task_groups import wap_task_group

    spec = {
        "table": "wap.orders",
        "sql": "INSERT INTO {table} SELECT 1",
        "column_mapping": {"amount": {"min": {"geq_to": 0}}},
    }
    with DAG("flags", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
        with pytest.raises(IcebergValidationError, match=r"^asset=.* is not a boolean flag"):
            wap_task_group(group_id="a", asset=value, **spec)
    with DAG("flags2", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
        wap_task_group(group_id="b", asset="FALSE", drop_branch=value, **spec)
    publish = dag.task_dict["b.publish"]
    assert publish.outlets == [] and publish.drop_branch == value
    with pytest.raises(IcebergValidationError, match=r"^drop_branch=.* is not a boolean flag"):
        publish.execute(fake_context())


@pytest.mark.parametrize(("rendered", "refused"), [("yes", True), ("1", True), ("TRUE", False), ("True", False)])
def test_a_templated_flag_is_checked_after_rendering(lake, rendered, refused):
    create_orders_table(lake, "db.orders", partition_by=())
    append_batches(lake, "db.orders", 3)
    before = lake.metadata_location("db.orders")
    op = IcebergExpireSnapshotsOperator(
        task_id="expire", table="db.orders", older_than="0s", older_than_floor="0s", dry_run="{{ params.dry }}"
    )
    ctx = {**fake_context(), "params": {"dry": rendered}}
    op.render_template_fields(ctx)
    if refused:
        with pytest.raises(IcebergValidationError, match=rf"^dry_run='{rendered}' is not a boolean flag"):
            op.execute(ctx)
    else:
        assert op.execute(ctx)["dry_run"] is True
    assert lake.metadata_location("db.orders") == before


def test_flag_conflicts_are_checked_on_the_converted_values(lake):
    """``legal_hold="true"`` with ``replace="TRUE"`` (rendered strings) is the same conflict as with
    booleans: refused in ``execute()``, the table unchanged."""
    from airflow_iceberg_provider.operators.refs import IcebergCreateTagOperator

    create_orders_table(lake, "db.orders", partition_by=())
    append_batches(lake, "db.orders", 1)
    before = lake.metadata_location("db.orders")
    op = IcebergCreateTagOperator(
        task_id="hold", table="db.orders", tag="legal-hold-case-9", legal_hold="true", replace="TRUE", case_id="9"
    )
    with pytest.raises(IcebergValidationError, match="legal_hold=True with replace=True"):
        op.execute(fake_context())
    assert lake.metadata_location("db.orders") == before
