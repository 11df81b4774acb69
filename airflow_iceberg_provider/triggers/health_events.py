"""Event trigger for ``AssetWatcher``: fire when a table's health crosses its maintenance thresholds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from airflow.triggers.base import TriggerEvent

from airflow_iceberg_provider.core.maintenance_actions import ACTIONS
from airflow_iceberg_provider.exceptions import (
    IcebergCatalogUnavailableError,
    IcebergProviderError,
    IcebergTableNotFoundError,
    IcebergValidationError,
)
from airflow_iceberg_provider.governance.maintenance_state import read_maintenance_state
from airflow_iceberg_provider.ids import id_str, with_string_ids
from airflow_iceberg_provider.params import validate_table
from airflow_iceberg_provider.rules.maintenance import decide, now_ms, resolve_policy
from airflow_iceberg_provider.triggers._event_state import IcebergEventTriggerBase, validate_poll_interval


def maintenance_verdict(hook: Any, table: str, actions: Sequence[str] | None = None) -> dict[str, Any]:
    """What ``IcebergMaintenancePlanOperator`` would decide for ``table`` now (no JVM, no commit).

    The same steps as the operator's ``plan()``: policy from the table properties
    (``resolve_policy``, the configured expiry floor), the one read of
    :func:`~airflow_iceberg_provider.governance.maintenance_state.read_maintenance_state`, then
    ``rules.maintenance.decide``.
    """
    from airflow_iceberg_provider.operators._maintenance_base import expiry_floor, health_summary

    tbl = hook.load_table(table)
    props = tbl.metadata.properties
    now = now_ms()
    policy = resolve_policy(props, now=now, older_than_floor=expiry_floor(None), actions=actions)
    # an expiry refusal (e.g. it would drop a legal hold) is reported: the plan will refuse
    state = read_maintenance_state(hook, tbl, policy, now=now, tolerate_refusal=True)
    health, refused = state.health, state.expiry_refused
    decision = decide(
        health,
        policy,
        properties=props,
        layout=state.layout,
        expiry=state.expiry,
        hold_violations=state.hold_violations,
    )
    reasons = {a.action: a.reason for a in decision.actions}
    if refused:
        reasons["expire_snapshots"] = f"refused: {refused}"
    return {
        "metadata_location": tbl.metadata_location,
        "snapshot_id": health.snapshot_id,
        "needs_maintenance": not decision.healthy or refused is not None,
        "actions": [a.action for a in decision.actions],
        "reasons": reasons,
        "findings": {k: v for k, v in decision.findings.items() if k != "held_snapshots"},
        "health": health_summary(health),
    }


def hysteresis(previous_unhealthy: bool, needs_maintenance: bool) -> tuple[bool, bool]:
    """``(fire, unhealthy)``: fire only on the healthy -> unhealthy edge; re-arm once healthy again."""
    return (needs_maintenance and not previous_unhealthy), needs_maintenance


def merged_state(values: Mapping[str, Any]) -> dict[str, Any] | None:
    """One view of several assets' states: unhealthy if any asset saw it unhealthy (never fire twice)."""
    valid = [dict(v) for v in values.values() if isinstance(v, Mapping)]
    if not valid:
        return None
    unhealthy = [v for v in valid if v.get("unhealthy")]
    return max(unhealthy or valid, key=lambda v: str(v.get("updated_at") or ""))


class IcebergTableHealthEventTrigger(IcebergEventTriggerBase):
    """
    Fire when ``table`` starts needing maintenance by its own policy; stay quiet until it healed.

    "Needs maintenance" is exactly what :class:`IcebergMaintenancePlanOperator` (default
    arguments) would act on: the thresholds come from the table properties
    (``write.target-file-size-bytes``, ``history.expire.*``, ``commit.manifest.min-count-to-merge``,
    ``airflow-iceberg.maintenance.*``) through ``rules.maintenance.resolve_policy`` and
    ``decide``. A maintenance DAG scheduled on the asset therefore runs the plan when, and
    only when, the plan has something to do.

    Cost: every poll reads the metadata pointer only (one row for SQL catalogs); health,
    file layout and expiry preview are computed only when the pointer moved since the last
    evaluation. A threshold crossed by time alone (snapshots ageing past the expiry cutoff)
    is therefore noticed at the table's next commit, or at the next ``recheck_interval``.

    Hysteresis: the trigger fires on the healthy -> unhealthy edge, records "unhealthy" in the
    asset state store (so a restarted triggerer does not fire again for the same episode),
    stays quiet while the table stays unhealthy (including the plan's own intermediate
    commits), and re-arms when an evaluation finds nothing to do.

    Event payload: ``kind="iceberg_health"``, ``table``, ``snapshot_id`` (decimal string),
    ``actions`` (names, in plan order), ``reasons``, ``findings``, ``health``.

    :param table: ``namespace.table``.
    :param actions: the actions the plan may choose from (default all), as for the operator.
    :param iceberg_catalog_conn_id: the ``iceberg_catalog`` connection.
    :param poll_interval: seconds between pointer reads.
    :param recheck_interval: also evaluate after this many seconds without a commit (time-driven
        thresholds: snapshot expiry); ``None`` (default): only on commits.
    """

    state_kind = "health"

    def __init__(
        self,
        *,
        table: str,
        actions: Sequence[str] | None = None,
        iceberg_catalog_conn_id: str = "iceberg_catalog_default",
        poll_interval: float = 60.0,
        recheck_interval: float | None = None,
    ) -> None:
        super().__init__()
        self.table = validate_table(table).dotted
        self.recheck_interval = (
            None if recheck_interval is None else validate_poll_interval(recheck_interval, "recheck_interval")
        )
        if actions is not None:
            if isinstance(actions, str) or not all(isinstance(a, str) for a in actions):
                raise IcebergValidationError(
                    f"actions={actions!r} is invalid; pass a list of action names from {list(ACTIONS)}."
                )
            unknown = [a for a in actions if a not in ACTIONS]
            if unknown or not actions:
                raise IcebergValidationError(
                    f"actions={list(actions)!r} has unknown entries {unknown} or is empty; choose from {list(ACTIONS)}."
                )
        self.actions = list(actions) if actions is not None else None
        self.iceberg_catalog_conn_id = iceberg_catalog_conn_id
        self.poll_interval = validate_poll_interval(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "actions": list(self.actions) if self.actions is not None else None,
                "iceberg_catalog_conn_id": self.iceberg_catalog_conn_id,
                "poll_interval": self.poll_interval,
                "recheck_interval": self.recheck_interval,
            },
        )

    def state_parts(self) -> tuple[Any, ...]:
        return (self.iceberg_catalog_conn_id, self.table, self.actions)

    def _evaluate(self, hook: Any, known: str | None, recheck: bool = False) -> dict[str, Any] | None:
        """``None`` while the pointer is unchanged (unless ``recheck``) or the table is missing; else the verdict."""
        location = hook.metadata_location(self.table)
        if location is None or (location == known and not recheck):
            return None
        try:
            return maintenance_verdict(hook, self.table, self.actions)
        except IcebergTableNotFoundError:
            return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        store = self.resolve_store()
        hook = await asyncio.to_thread(self.hook)  # importing the hook module must not block the loop
        key = self.state_key
        state = merged_state(await store.load(key)) or {}
        unhealthy = bool(state.get("unhealthy"))
        known = state.get("metadata_location")
        self.log.info("Watching the health of %s (stored state: %s)", self.table, state or "none")
        evaluated = time.monotonic()
        while True:
            recheck = self.recheck_interval is not None and time.monotonic() - evaluated >= self.recheck_interval
            try:
                verdict = await asyncio.to_thread(self._evaluate, hook, known, recheck)
            except IcebergCatalogUnavailableError as err:
                self.log.warning("Catalog unavailable while polling %s (%s); retrying", self.table, err)
                verdict = None
            except IcebergProviderError as err:  # e.g. a table property the policy refuses
                self.log.error("Cannot evaluate the maintenance policy of %s: %s", self.table, err)
                verdict, known = None, await asyncio.to_thread(hook.metadata_location, self.table)
            if verdict is not None or recheck:
                evaluated = time.monotonic()
            if verdict is not None:
                fire, unhealthy_now = hysteresis(unhealthy, verdict["needs_maintenance"])
                if fire:
                    yield TriggerEvent(self._event(verdict))
                elif unhealthy_now:
                    self.log.info("%s still needs %s; already reported", self.table, verdict["actions"])
                if fire or unhealthy_now != unhealthy:
                    await self.save_delivered(store, key, self._state(verdict, unhealthy_now))
                unhealthy, known = unhealthy_now, verdict["metadata_location"]
            await asyncio.sleep(self.poll_interval)

    def _event(self, verdict: Mapping[str, Any]) -> dict[str, Any]:
        event: dict[str, Any] = with_string_ids(
            {
                "kind": "iceberg_health",
                "table": self.table,
                "snapshot_id": verdict["snapshot_id"],
                "actions": list(verdict["actions"]),
                "reasons": dict(verdict["reasons"]),
                "findings": dict(verdict["findings"]),
                "health": dict(verdict["health"]),
            }
        )
        return event

    def _state(self, verdict: Mapping[str, Any], unhealthy: bool) -> dict[str, Any]:
        return {
            "unhealthy": unhealthy,
            "metadata_location": verdict["metadata_location"],
            "snapshot_id": id_str(verdict["snapshot_id"]),
            "actions": list(verdict["actions"]),
            "updated_at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        }
