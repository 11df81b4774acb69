"""Spark SQL statements of a plan's ref changes (pure; no pyspark).

Used where pyiceberg cannot commit a ref change: a format-version 3 table behind a catalog whose
client writes the table metadata. Each :class:`~airflow_iceberg_provider.rules.refs.RefChange`
of the Airflow side's plan arrives as a dict (``ref``, ``ref_type``, ``snapshot_id``,
``expected_snapshot_id``, ``verb``, retention fields) and becomes one ``ALTER TABLE`` statement,
checked first against the ref as the job read it fresh: the state the plan expected (else
:class:`RefChangeConflict`) and the ref guard
(:func:`~airflow_iceberg_provider.core.ref_guard.check_ref_change`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_iceberg_provider.core.ref_guard import RefKind, RefState, RefVerb, check_ref_change
from airflow_iceberg_provider.spark_jobs.erasure.sql import q

MINUTE_MS = 60_000


class RefChangeConflict(RuntimeError):
    """The ref is not where the plan saw it: another writer changed it (nothing more is changed)."""


def _minutes(change: Mapping[str, Any], key: str) -> int:
    """A retention in milliseconds as whole minutes (the finest unit Spark's ref DDL takes)."""
    ms = int(change[key])
    if ms <= 0 or ms % MINUTE_MS:
        raise ValueError(
            f"{key}={ms} of ref {change['ref']!r} is not a whole number of minutes; Spark SQL sets ref "
            "retention in minutes at the finest. Give the retention in minutes. Nothing was changed."
        )
    return ms // MINUTE_MS


def retention_clause(change: Mapping[str, Any]) -> str:
    """`` RETAIN n MINUTES`` and, for a branch, `` WITH SNAPSHOT RETENTION [k SNAPSHOTS] [m MINUTES]``.

    >>> retention_clause({"ref": "t", "ref_type": "tag", "max_ref_age_ms": 5_400_000})
    ' RETAIN 90 MINUTES'
    >>> retention_clause({"ref": "b", "ref_type": "branch", "min_snapshots_to_keep": 3})
    ' WITH SNAPSHOT RETENTION 3 SNAPSHOTS'
    """
    clause = ""
    if change.get("max_ref_age_ms") is not None:
        clause += f" RETAIN {_minutes(change, 'max_ref_age_ms')} MINUTES"
    if change.get("ref_type") == "branch":
        keep = change.get("min_snapshots_to_keep")
        age = change.get("max_snapshot_age_ms")
        parts = ([f"{int(keep)} SNAPSHOTS"] if keep is not None else []) + (
            [f"{_minutes(change, 'max_snapshot_age_ms')} MINUTES"] if age is not None else []
        )
        if parts:
            clause += " WITH SNAPSHOT RETENTION " + " ".join(parts)
    return clause


def change_verb(change: Mapping[str, Any], state: RefState) -> RefVerb:
    """The verb the change performs on the ref as read (the plan's own verb when it names one)."""
    if change.get("verb"):
        return RefVerb(change["verb"])
    if change.get("snapshot_id") is None:
        return RefVerb.DROP
    if state.kind is RefKind.ABSENT:
        return RefVerb.CREATE
    return RefVerb.MOVE if int(change["snapshot_id"]) != state.snapshot_id else RefVerb.SET_RETENTION


def ref_change_sql(table_sql: str, table: str, change: Mapping[str, Any], state: RefState) -> str:
    """The ``ALTER TABLE`` statement of one change, after checking the ref is where the plan saw it.

    :param table_sql: the quoted ``catalog.namespace.table``.
    :param table: ``namespace.table`` (for the messages).
    :param state: the ref as the job read it, just before this statement.
    :raises RefChangeConflict: the ref moved since the plan was made.

    >>> ref_change_sql("`c`.`db`.`t`", "db.t", {"ref": "main", "ref_type": "branch", "snapshot_id": 2,
    ...     "expected_snapshot_id": 1}, RefState.of("main", "branch", 1))
    'ALTER TABLE `c`.`db`.`t` REPLACE BRANCH `main` AS OF VERSION 2'
    """
    name, ref_type = str(change["ref"]), str(change["ref_type"]).lower()
    expected = change.get("expected_snapshot_id")
    if state.snapshot_id != (int(expected) if expected is not None else None):
        raise RefChangeConflict(
            f"Ref {name!r} of {table} points at {state.snapshot_id if state.snapshot_id is not None else 'nothing'}, "
            f"not {expected if expected is not None else 'nothing'} as planned; another writer changed it. "
            "Nothing more was changed; retry the task."
        )
    verb = change_verb(change, state)
    target = change.get("snapshot_id")
    check_ref_change(
        verb,
        state,
        table=table,
        param="ref",
        result_type=ref_type if target is not None else None,
        snapshot_id=int(target) if target is not None else None,
        expected_type=ref_type if target is None else None,
    )
    kind = "TAG" if ref_type == "tag" else "BRANCH"
    if target is None:
        stored = "TAG" if state.stored_type == "tag" else "BRANCH"
        return f"ALTER TABLE {table_sql} DROP {stored} IF EXISTS {q(name)}"
    how = "CREATE" if state.kind is RefKind.ABSENT else "REPLACE"
    return f"ALTER TABLE {table_sql} {how} {kind} {q(name)} AS OF VERSION {int(target)}{retention_clause(change)}"
