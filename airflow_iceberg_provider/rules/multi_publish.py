"""Pure rules of a multi-table publish (no catalog, no Airflow I/O; tested in milliseconds).

A multi-table publish moves ``main`` of several tables to their audited snapshots together.
Each table's publish is planned with the single-table rules
(:func:`~airflow_iceberg_provider.rules.wap_refs.plan_publish`), so every refusal of a publish
(unaudited snapshot, branch moved after its audit, ``main`` moved since the branch was cut, a
taken tag name) refuses the whole publish before anything moves.

Two ways to apply it:

* one catalog commit (REST ``POST /v1/{prefix}/transactions/commit``): every table's ref changes,
  each asserting where its refs were; the catalog applies all or none;
* on catalogs without multi-table transactions, an explicit protocol: a *journal* row in the
  ledger names every table with ``main`` before and after (``prepared``), then each table moves
  with a compare-and-swap per ref, and a failure part-way moves the tables already moved back
  (compare-and-swap again: only a ref still where this publish put it is moved back).

A try that died part-way leaves a ``prepared`` journal without an outcome. The next try reads
it and :func:`plan_recovery` decides from where every ``main`` is now: finish the publish
(every table still where the journal saw it or already moved), move the moved tables back
(another writer moved a not-yet-moved table), or refuse (a moved table moved again: a person
must decide), naming every table and ref.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.params import MAIN_BRANCH
from airflow_iceberg_provider.rules.refs import RefChange

OPERATION = "wap_multi_publish"

#: journal and outcome statuses of a multi-table publish's ledger rows
PREPARED, SUCCEEDED, ROLLED_BACK, FAILED = "prepared", "succeeded", "rolled_back", "failed"


@dataclass(frozen=True)
class TableStep:
    """One table of a multi-table publish: its ref changes and ``main`` before and after."""

    table: str
    branch: str
    audited: int
    before: int | None
    after: int
    changes: tuple[RefChange, ...]
    metrics: dict[str, int] = field(default_factory=dict)
    tag: str | None = None

    def inverse(self) -> tuple[RefChange, ...]:
        """The changes that undo this step (each asserting the ref is where this step put it)."""
        return tuple(
            RefChange(
                c.ref,
                c.ref_type,
                c.expected_snapshot_id,
                c.snapshot_id,
                max_ref_age_ms=c.max_ref_age_ms,
                max_snapshot_age_ms=c.max_snapshot_age_ms,
                min_snapshots_to_keep=c.min_snapshots_to_keep,
            )
            for c in self.changes
        )

    def to_journal(self) -> dict[str, Any]:
        """The step as plain values (ids as strings) for the ledger's ``details``."""
        return {
            "table": self.table,
            "branch": self.branch,
            "audited_snapshot_id": str(self.audited),
            "main_before": None if self.before is None else str(self.before),
            "main_after": str(self.after),
            "tag": self.tag,
            "changes": [
                {
                    "ref": c.ref,
                    "ref_type": c.ref_type,
                    "snapshot_id": None if c.snapshot_id is None else str(c.snapshot_id),
                    "expected_snapshot_id": None if c.expected_snapshot_id is None else str(c.expected_snapshot_id),
                    "max_ref_age_ms": c.max_ref_age_ms,
                    "max_snapshot_age_ms": c.max_snapshot_age_ms,
                    "min_snapshots_to_keep": c.min_snapshots_to_keep,
                }
                for c in self.changes
            ],
            **{k: v for k, v in self.metrics.items() if k in ("net_added_records", "added_records", "deleted_records")},
        }

    @classmethod
    def from_journal(cls, item: Mapping[str, Any]) -> TableStep:
        def _id(v: Any) -> int | None:
            return None if v in (None, "") else int(v)

        changes = tuple(
            RefChange(
                c["ref"],
                c["ref_type"],
                _id(c["snapshot_id"]),
                _id(c["expected_snapshot_id"]),
                max_ref_age_ms=c.get("max_ref_age_ms"),
                max_snapshot_age_ms=c.get("max_snapshot_age_ms"),
                min_snapshots_to_keep=c.get("min_snapshots_to_keep"),
            )
            for c in item.get("changes", [])
        )
        return cls(
            table=item["table"],
            branch=item["branch"],
            audited=int(item["audited_snapshot_id"]),
            before=_id(item.get("main_before")),
            after=int(item["main_after"]),
            changes=changes,
            tag=item.get("tag"),
        )


def check_tables(tables: object, param: str = "tables") -> list[dict[str, Any]]:
    """The ``tables`` parameter as a list of ``{"table", "branch", "audited_snapshot_id", "audit"}`` dicts.

    Accepts ``"ns.t"`` strings (branch, audit and audited snapshot defaulted) or mappings with ``table``
    and optionally ``branch``, ``audited_snapshot_id``, ``base_snapshot_id`` and ``audit`` (the
    table's audit task result). At least two distinct tables.
    """
    if isinstance(tables, (str, bytes)) or not isinstance(tables, Sequence) or not tables:
        raise IcebergValidationError(
            f"{param}={tables!r} must be a non-empty list of tables, each 'namespace.table' or "
            "{'table': ..., 'branch': ..., 'audited_snapshot_id': ...}."
        )
    out: list[dict[str, Any]] = []
    for i, item in enumerate(tables):
        if isinstance(item, str):
            item = {"table": item}
        if not isinstance(item, Mapping) or not item.get("table"):
            raise IcebergValidationError(
                f"{param}[{i}]={item!r} has no table; give 'namespace.table' or a mapping with a 'table' key."
            )
        unknown = set(item) - {"table", "branch", "audited_snapshot_id", "base_snapshot_id", "audit"}
        if unknown:
            raise IcebergValidationError(
                f"{param}[{i}] has unknown keys {sorted(unknown)}; allowed: table, branch, audited_snapshot_id, "
                "base_snapshot_id, audit."
            )
        out.append(dict(item))
    names = [str(t["table"]).strip() for t in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise IcebergValidationError(f"{param} lists {dupes} more than once; each table is published once.")
    return out


def publish_id(dag_id: str | None, run_id: str | None, task_id: str | None, map_index: int | None) -> str:
    """A stable id of one multi-table publish task (the same for every try of it): the journal's key."""
    raw = f"{dag_id}\x1f{run_id}\x1f{task_id}\x1f{-1 if map_index is None else map_index}"
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def check_steps(steps: Sequence[TableStep]) -> None:
    """Every table of a multi-table publish needs a ``main`` to return to if the publish is undone."""
    empty = [s.table for s in steps if s.before is None]
    if empty:
        raise IcebergRefusedError(
            f"Tables {empty} have no snapshot on main yet: a multi-table publish must be able to move main back, "
            "and an empty main cannot be restored. Publish those tables once on their own first. Nothing was changed."
        )


@dataclass(frozen=True)
class Recovery:
    """What a new try does with a ``prepared`` journal of an earlier try that died.

    ``action``: ``restart`` (no table moved: the journal is void, publish afresh), ``complete``
    (every table already moved: record the outcome), ``roll_forward`` (move the tables in
    ``todo``), ``roll_back`` (move the tables in ``todo`` back), ``refuse``.
    """

    action: str
    todo: tuple[TableStep, ...] = ()
    message: str = ""


def plan_recovery(
    steps: Sequence[TableStep], heads: Mapping[str, int | None], built_on: Collection[str] = ()
) -> Recovery:
    """Decide the repair of a publish that died part-way, from where each table's ``main`` is now.

    A table is *before* (``main`` where the journal saw it), *after* (where the publish puts it)
    or *elsewhere* (another writer moved it). Finishing is preferred: the journal holds the plan
    every table was checked against. If a table not yet moved is elsewhere, the moved ones go
    back instead. If a moved table was committed on top of since (``built_on``: tables whose
    ``main`` descends from the published snapshot), nothing is changed automatically.
    """
    moved = [s for s in steps if heads.get(s.table) == s.after or s.table in built_on]
    before = [s for s in steps if s not in moved and heads.get(s.table) == s.before]
    elsewhere = [s for s in steps if s not in moved and s not in before]
    states = ", ".join(f"{s.table}: main at {heads.get(s.table)} (before {s.before}, after {s.after})" for s in steps)
    if not moved:
        return Recovery("restart", message=f"an earlier try moved no table ({states}); publishing afresh")
    if len(moved) == len(steps):
        return Recovery("complete", message=f"an earlier try moved every table ({states}); recording the outcome")
    if not elsewhere:
        return Recovery(
            "roll_forward",
            tuple(before),
            f"an earlier try died after moving {[s.table for s in moved]}; moving {[s.table for s in before]} too "
            f"({states})",
        )
    if any(heads.get(s.table) != s.after for s in moved):
        return Recovery(
            "refuse",
            message=f"another writer moved {[s.table for s in elsewhere]}, which this publish had not moved yet, and "
            f"{[s.table for s in moved if heads.get(s.table) != s.after]}, which it had moved, was committed on "
            "top of since",
        )
    return Recovery(
        "roll_back",
        tuple(moved),
        f"an earlier try died after moving {[s.table for s in moved]}, and another writer moved "
        f"{[s.table for s in elsewhere]} since; moving {[s.table for s in moved]} back ({states})",
    )


def refuse_partial(steps: Sequence[TableStep], heads: Mapping[str, int | None], what: str) -> IcebergRefusedError:
    """The error of a publish left part-way that cannot be repaired automatically."""
    lines = "\n".join(
        f"  - {s.table}: main at {heads.get(s.table)}; before the publish {s.before}, published {s.after}"
        for s in steps
    )
    return IcebergRefusedError(
        f"The multi-table publish is left part-way and {what}:\n{lines}\n"
        "Decide per table: roll main back to its 'before' snapshot (IcebergRollbackOperator) or publish the "
        "remaining tables, then clear this task. Nothing more was changed."
    )


def main_change(step: TableStep) -> RefChange | None:
    return next((c for c in step.changes if c.ref == MAIN_BRANCH), None)


__all__ = [
    "FAILED",
    "OPERATION",
    "PREPARED",
    "ROLLED_BACK",
    "SUCCEEDED",
    "Recovery",
    "TableStep",
    "check_steps",
    "check_tables",
    "main_change",
    "plan_recovery",
    "publish_id",
    "refuse_partial",
]
