"""Sensor that waits for a new commit on an Iceberg ref (poke, reschedule or deferrable)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergProviderError, IcebergValidationError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.params import MAIN_BRANCH, validate_table
from airflow_iceberg_provider.rules.refs import validate_summary
from airflow_iceberg_provider.triggers.snapshot import IcebergSnapshotTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

STATE_KEY_PREFIX = "iceberg_snapshot_sensor"


def default_state_key(dag_id: str, task_id: str, table: str, ref: str) -> str:
    """Airflow Variable key under which a sensor remembers the last commit it reported."""
    raw = f"{STATE_KEY_PREFIX}.{dag_id}.{task_id}.{table}.{ref}"
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", raw)[:250]


def _default_deferrable() -> bool:
    from airflow_iceberg_provider.config import airflow_flag

    return airflow_flag("operators", "default_deferrable", fallback=False)


class IcebergSnapshotSensor(BaseSensorOperator):
    """
    Wait until ``ref`` of ``table`` has a commit newer than a baseline; return that commit.

    The baseline is ``after_snapshot_id`` and/or ``after_timestamp`` or — with
    ``since_last_seen=True`` — the last commit this sensor reported in an earlier run
    (persisted in the Airflow **Variable** ``iceberg_snapshot_sensor.<dag>.<task>.<table>.<ref>``,
    or ``state_key``; a Variable works across runs regardless of their logical dates and
    can be inspected or reset with ``airflow variables``). On the very first run there is
    no remembered value, so the explicit ``after_*`` arguments apply, and without them
    any existing matching commit satisfies the sensor. The value is stored when the
    sensor succeeds — if a downstream task then fails, the next run still starts after
    this commit (clear the Variable to re-process).

    Without any baseline the sensor waits until a matching commit exists at all. The
    newest matching commit is returned. A table, namespace or ref that does not exist
    yet means "not yet". Each poll reads only the catalog's metadata pointer; the
    metadata is parsed only when it changed.

    Modes: ``poke`` and ``reschedule`` as usual; ``deferrable=True`` (default:
    ``[operators] default_deferrable``) checks once, then hands the wait to
    :class:`~airflow_iceberg_provider.triggers.snapshot.IcebergSnapshotTrigger`
    (polling every ``poke_interval`` seconds) and frees the worker slot.

    :param table: ``namespace.table`` (templated).
    :param ref: branch to watch (templated; default ``main``).
    :param after_snapshot_id: only commits after this snapshot (templated).
    :param after_timestamp: only commits newer than this time: datetime, ISO-8601 or epoch ms (templated).
    :param since_last_seen: use the last commit this sensor reported as the baseline.
    :param operation: only ``append`` | ``overwrite`` | ``delete`` | ``replace`` commits (templated).
    :param summary: only commits whose summary has these exact properties (templated),
        e.g. ``{"wap.id": "{{ run_id }}"}``.
    :param iceberg_catalog_conn_id: ``iceberg_catalog`` connection id (templated).
    :param state_key: Variable key for ``since_last_seen`` (templated).
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param check_before_defer: poll once before deferring (skip the triggerer when the
        commit is already there).
    :return: ``{"table", "ref", "snapshot_id", "parent_id", "operation", "timestamp_ms", "summary", "matched"}``
    """

    template_fields: Sequence[str] = (
        "table",
        "ref",
        "after_snapshot_id",
        "after_timestamp",
        "operation",
        "summary",
        "iceberg_catalog_conn_id",
        "state_key",
    )
    ui_color = "#d9ecd0"

    def __init__(
        self,
        *,
        table: str,
        ref: str = MAIN_BRANCH,
        after_snapshot_id: int | str | None = None,
        after_timestamp: Any = None,
        since_last_seen: bool = False,
        operation: str | None = None,
        summary: Mapping[str, Any] | None = None,
        iceberg_catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        state_key: str | None = None,
        deferrable: bool | None = None,
        check_before_defer: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table = table
        self.ref = ref
        self.after_snapshot_id = after_snapshot_id
        self.after_timestamp = after_timestamp
        self.since_last_seen = since_last_seen
        self.operation = operation
        self.summary = summary
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.state_key = state_key
        self.deferrable = _default_deferrable() if deferrable is None else deferrable
        self.check_before_defer = check_before_defer
        self._baseline: tuple[int | None, int | None] | None = None
        self._known_location: str | None = None
        self.check_arguments()

    def check_arguments(self) -> None:
        """Refuse bad arguments; templated values (Jinja, ``XComArg``) are skipped before rendering
        and checked by :meth:`pre_execute` once rendered."""
        if not params.is_templated(self.table):
            validate_table(self.table)
        if isinstance(self.operation, str) and not params.is_templated(self.operation):
            params.operation(self.operation)
        if self.deferrable and self.mode == "reschedule":
            raise IcebergValidationError("deferrable=True and mode='reschedule' exclude each other; pick one.")

    def pre_execute(self, context: Any) -> None:
        super().pre_execute(context)
        params.resolve_flags(self)
        self.check_arguments()

    @cached_property
    def hook(self) -> IcebergCatalogHook:
        return IcebergCatalogHook(self.iceberg_catalog_conn_id)

    # ------------------------------------------------------------ baseline
    def _state_key(self, context: Context) -> str:
        if self.state_key:
            return str(self.state_key)
        ti = context.get("ti") or context.get("task_instance")
        return default_state_key(
            getattr(ti, "dag_id", None) or self.dag_id,
            getattr(ti, "task_id", None) or self.task_id,
            self.table,
            self.ref,
        )

    def _read_state(self, context: Context) -> dict[str, Any] | None:
        from airflow.sdk import Variable

        value = Variable.get(self._state_key(context), default=None, deserialize_json=True)
        return value if isinstance(value, dict) and "snapshot_id" in value else None

    def _write_state(self, context: Context, snapshot: Mapping[str, Any]) -> None:
        from airflow.sdk import Variable

        value = {
            "snapshot_id": snapshot["snapshot_id"],
            "timestamp_ms": snapshot["timestamp_ms"],
            "run_id": context.get("run_id"),
        }
        Variable.set(
            self._state_key(context),
            value,
            description=f"Last commit reported by IcebergSnapshotSensor for {self.table}@{self.ref}",
            serialize_json=True,
        )

    def _validate(self) -> tuple[str, str | None, dict[str, str]]:
        validate_table(self.table)
        return params.ref_name(self.ref, "ref"), params.operation(self.operation), validate_summary(self.summary)

    def resolve_baseline(self, context: Context) -> tuple[int | None, int | None]:
        """``(after_snapshot_id, after_timestamp_ms)`` for this run (rendered args or remembered state)."""
        if self._baseline is None:
            after_id = params.snapshot_id(self.after_snapshot_id, "after_snapshot_id")
            after_ms = params.instant_ms(self.after_timestamp, "after_timestamp")
            if self.since_last_seen:
                state = self._read_state(context)
                if state is not None:
                    after_id, after_ms = int(state["snapshot_id"]), state.get("timestamp_ms")
                    self.log.info("Baseline: last reported commit %s (run %s)", after_id, state.get("run_id"))
            self._baseline = (after_id, after_ms)
        return self._baseline

    # ------------------------------------------------------------- waiting
    def poke(self, context: Context) -> bool | PokeReturnValue:
        ref, operation, summary = self._validate()
        after_id, after_ms = self.resolve_baseline(context)
        result = self.hook.poll_commit(
            self.table,
            ref=ref,
            after_snapshot_id=after_id,
            after_timestamp_ms=after_ms,
            operation=operation,
            summary=summary,
            known_metadata_location=self._known_location,
        )
        self._known_location = result["metadata_location"]
        if result["snapshot"] is None:
            self.log.info(
                "No new matching commit on %s@%s (after %s / %s ms; metadata %s)",
                self.table,
                ref,
                after_id,
                after_ms,
                "re-read" if result["loaded"] else "unchanged",
            )
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._finish(context, result["snapshot"], result["matched"]))

    def execute(self, context: Context) -> Any:
        params.resolve_flags(self)  # strict flags first, before any I/O
        if not self.deferrable:
            return super().execute(context)
        if self.check_before_defer:
            found = self.poke(context)
            if isinstance(found, PokeReturnValue) and found.is_done:
                return found.xcom_value
        self.defer(
            trigger=self._trigger(context), method_name="execute_complete", timeout=timedelta(seconds=self.timeout)
        )

    def _trigger(self, context: Context) -> IcebergSnapshotTrigger:
        """The trigger that waits in the triggerer for the same commit :meth:`poke` looks for."""
        ref, operation, summary = self._validate()
        after_id, after_ms = self.resolve_baseline(context)
        self.log.info("Deferring: waiting for a commit on %s@%s after %s / %s ms", self.table, ref, after_id, after_ms)
        return IcebergSnapshotTrigger(
            table=validate_table(self.table).dotted,
            ref=ref,
            after_snapshot_id=after_id,
            after_timestamp_ms=after_ms,
            operation=operation,
            summary=summary,
            iceberg_catalog_conn_id=self.iceberg_catalog_conn_id,
            poll_interval=self.poke_interval,
        )

    def execute_complete(self, context: Context, event: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if not event or event.get("status") != "success":
            message = (event or {}).get("message", "no event")
            raise IcebergProviderError(f"Waiting for a commit on {self.table}@{self.ref} failed: {message}")
        self.log.info("Trigger reported a commit after %s poll(s)", event.get("polls"))
        return self._finish(context, event["snapshot"], int(event.get("matched", 1)))

    def _finish(self, context: Context, snapshot: Mapping[str, Any], matched: int) -> dict[str, Any]:
        if self.since_last_seen:
            self._write_state(context, snapshot)
        out = {
            "table": validate_table(self.table).dotted,
            "ref": self.ref,
            "snapshot_id": snapshot["snapshot_id"],
            "parent_id": snapshot.get("parent_id"),
            "operation": snapshot.get("operation"),
            "timestamp_ms": snapshot["timestamp_ms"],
            "summary": dict(snapshot.get("summary") or {}),
            "matched": matched,
        }
        self.log.info("New commit on %s@%s: %s (%s)", out["table"], self.ref, out["snapshot_id"], out["operation"])
        event: dict[str, Any] = with_string_ids(out)
        return event
