"""Pure shaping of governance rows into what the pages and the JSON API show.

No I/O: every function takes rows (dicts as read from the governance tables) and returns plain
values, so the rules (which audit is the latest, when a request is overdue, which rows a filter
keeps) are tested in milliseconds. Snapshot ids leave this module as **decimal strings** (a 64-bit
id loses digits in a browser's JavaScript number).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow_iceberg_provider.core.erasure_lifecycle import FINAL_STATUSES
from airflow_iceberg_provider.core.governance import is_legal_hold
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.rules.erasure_retention import deadline_outcome

#: Erasure deadlines shown for every open request (days from ``received_at``, or one calendar month).
DEADLINES: tuple[tuple[str, str], ...] = (
    ("PIPEDA / Law 25 (30 days)", "30d"),
    ("GDPR art. 12(3) (1 month)", "1m"),
)
_EPOCH = datetime.min.replace(tzinfo=UTC)


def sid(value: Any) -> str | None:
    """A snapshot id as a decimal string (``None`` stays ``None``)."""
    return None if value is None else str(int(value))


def num(value: Any) -> str:
    """A readable number: integers exactly, other floats to 6 significant digits."""
    if value is None:
        return "—"
    v = float(value)
    if v != v:  # NaN
        return "NaN"
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return format(v, ".6g")


def _when(row: Mapping[str, Any], *keys: str) -> datetime:
    for k in keys:
        if row.get(k) is not None:
            return row[k]
    return _EPOCH


def _json(text: Any) -> dict[str, Any]:
    """A ledger ``metrics``/``details`` object, snapshot ids inside it as strings (``ids.with_string_ids``)."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return with_string_ids(value) if isinstance(value, dict) else {}


def governed_tables(
    ledger: Iterable[Mapping[str, Any]],
    audits: Iterable[Mapping[str, Any]],
    evidence: Iterable[Mapping[str, Any]],
    governance_namespace: str,
) -> list[str]:
    """Every table with a governance record (the governance tables themselves excluded).

    :param ledger: ``ledger_views`` output; ``audits``: ``audit_runs`` output; ``evidence``: raw rows.
    """
    names = {r.get("table") for rows in (ledger, audits) for r in rows}
    names |= {r.get("table_name") for r in evidence}
    return sorted(n for n in names if n and "." in n and n.split(".")[0] != governance_namespace)


# ------------------------------------------------------------------ audits
def audit_runs(
    rows: Iterable[Mapping[str, Any]], *, table: str | None = None, task: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Audit rows grouped by audit (``event_id``), newest first; failed checks first within an audit.

    :param task: keep only audits run by this Airflow task (``dag_id``, ``run_id``, ``task_id``).
    """
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if table and r.get("table_name") != table:
            continue
        if task and any(task.get(k) and r.get(k) != task[k] for k in ("dag_id", "run_id", "task_id")):
            continue
        groups[r["event_id"]].append(r)
    out = []
    for event_id, checks in groups.items():
        first = checks[0]
        shaped = [
            {
                "name": c.get("check_name"),
                "type": c.get("check_type"),
                "column": c.get("column_name"),
                "observed": c.get("observed_value"),
                "observed_text": num(c.get("observed_value")),
                "condition": c.get("condition"),
                "passed": bool(c.get("passed")),
            }
            for c in sorted(checks, key=lambda c: (bool(c.get("passed")), c.get("check_name") or ""))
        ]
        failed = sum(not c["passed"] for c in shaped)
        out.append(
            {
                "event_id": event_id,
                "table": first.get("table_name"),
                "ref": first.get("ref"),
                "snapshot_id": sid(first.get("snapshot_id")),
                "base_snapshot_id": sid(first.get("base_snapshot_id")),
                "dag_id": first.get("dag_id"),
                "run_id": first.get("run_id"),
                "task_id": first.get("task_id"),
                "try_number": first.get("try_number"),
                "evaluated_at": max(_when(c, "evaluated_at") for c in checks),
                "passed": failed == 0,
                "failed": failed,
                "checks": shaped,
            }
        )
    return sorted(out, key=lambda a: a["evaluated_at"], reverse=True)


def filter_runs(
    runs: Iterable[Mapping[str, Any]], *, table: str | None = None, task: Mapping[str, str] | None = None
) -> list[Mapping[str, Any]]:
    """Audits (``audit_runs`` output) of one table and, optionally, one Airflow task."""
    return [
        a
        for a in runs
        if (not table or a["table"] == table)
        and not (task and any(task.get(k) and a.get(k) != task[k] for k in ("dag_id", "run_id", "task_id")))
    ]


def filter_task(rows: Iterable[Mapping[str, Any]], task: Mapping[str, str]) -> list[dict[str, Any]]:
    """Shaped rows written by one Airflow task (every ``dag_id``/``run_id``/``task_id`` it gives)."""
    keys = ("dag_id", "run_id", "task_id")
    return [dict(r) for r in rows if all(r.get(k) == task[k] for k in keys if task.get(k))]


def latest_audits(runs: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """The newest audit of each table, from ``audit_runs`` output (newest first)."""
    latest: dict[str, Mapping[str, Any]] = {}
    for audit in runs:
        latest.setdefault(audit["table"], audit)
    return latest


# ------------------------------------------------------------------ ledger
def _ledger_view(r: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "event_id": r.get("event_id"),
        "operation": r.get("operation"),
        "table": r.get("table_name"),
        "ref": r.get("ref"),
        "status": r.get("status"),
        "dag_id": r.get("dag_id"),
        "run_id": r.get("run_id"),
        "task_id": r.get("task_id"),
        "try_number": r.get("try_number"),
        "started_at": r.get("started_at"),
        "finished_at": r.get("finished_at"),
        "snapshot_before": sid(r.get("snapshot_before")),
        "snapshot_after": sid(r.get("snapshot_after")),
        "metrics": _json(r.get("metrics")),
        "details": _json(r.get("details")),
    }


#: The ledger operation of a publish of several tables in one commit (one row, the tables in its details).
MULTI_PUBLISH = "wap_multi_publish"


def _per_table(view: dict[str, Any]) -> list[dict[str, Any]]:
    """A multi-table publish row as one row per table it touched (its ``details.tables`` steps), so the
    publish shows on each table; other rows as they are."""
    steps = view["details"].get("tables") if view["operation"] == MULTI_PUBLISH else None
    if not view["table"] and isinstance(steps, list) and steps:
        out = []
        for step in steps:
            if not isinstance(step, dict) or not step.get("table"):
                continue
            details = {**view["details"], **step, "tables": [s.get("table") for s in steps if isinstance(s, dict)]}
            out.append(
                {
                    **view,
                    "table": step["table"],
                    "snapshot_before": step.get("main_before"),
                    "snapshot_after": step.get("main_after"),
                    "details": details,
                }
            )
        return out or [view]
    return [view]


def ledger_views(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every ledger row shaped (JSON decoded, ids as strings), newest first; a multi-table publish
    becomes one row per table it touched."""
    ordered = sorted(rows, key=lambda r: _when(r, "finished_at", "started_at"), reverse=True)
    return [v for r in ordered for v in _per_table(_ledger_view(r))]


def ledger_rows(
    ledger: Iterable[Mapping[str, Any]],
    *,
    table: str | None = None,
    operation: str | None = None,
    status: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Shaped ledger rows (``ledger_views`` output) of a table, filtered by exact operation and status."""
    kept = [
        dict(r)
        for r in ledger
        if (not table or r["table"] == table)
        and (not operation or r["operation"] == operation)
        and (not status or r["status"] == status)
    ]
    return kept[:limit]


def ledger_options(ledger: Iterable[Mapping[str, Any]], table: str) -> dict[str, list[str]]:
    """The operations and statuses present in a table's ledger (the filter's choices)."""
    ops, statuses = set(), set()
    for r in ledger:
        if r["table"] == table:
            ops.add(r["operation"] or "")
            statuses.add(r["status"] or "")
    return {"operations": sorted(ops - {""}), "statuses": sorted(statuses - {""})}


def publishes(ledger: Iterable[Mapping[str, Any]], table: str) -> list[dict[str, Any]]:
    """Successful publishes of a table (``wap_publish`` rows, and its part of ``wap_multi_publish`` rows,
    which name the other tables published in the same commit under ``together_with``), newest first."""
    out = []
    for row in ledger_rows(ledger, table=table):
        if row["operation"] not in ("wap_publish", MULTI_PUBLISH) or row["status"] not in ("succeeded", "noop"):
            continue
        d = row["details"]
        row["branch"] = d.get("branch")
        row["method"] = d.get("method")
        row["audited_snapshot_id"] = sid(d.get("audited_snapshot_id"))
        row["audit_event_id"] = d.get("audit_event_id")
        row["tag"] = d.get("tag")
        multi = row["operation"] == MULTI_PUBLISH
        # a multi-table publish records one total for every table: not this table's figure
        row["added_records"] = None if multi else row["metrics"].get("published_added_records")
        row["together_with"] = [t for t in d.get("tables") or [] if t != table] if multi else []
        out.append(row)
    return out


def publish_row_of_task(
    ledger: Iterable[Mapping[str, Any]], table: str, task: Mapping[str, str]
) -> dict[str, Any] | None:
    """The publish a given task made on ``table`` (``publishes`` output), newest first; ``None`` if none."""
    for row in publishes(ledger, table):
        if all(row.get(k) == task.get(k) for k in ("dag_id", "run_id", "task_id") if task.get(k)):
            return row
    return None


def publish_of_task(ledger: Iterable[Mapping[str, Any]], table: str, task: Mapping[str, str]) -> str | None:
    """The snapshot a given task published on ``table`` (for the publish task's extra link)."""
    row = publish_row_of_task(ledger, table, task)
    return row["snapshot_after"] if row else None


def gating_audit(audits: Iterable[Mapping[str, Any]], publish: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The audit that gated a publish: the audit run it was bound to (``audit_event_id``), else the
    audit of the snapshot it published (``audited_snapshot_id``), else the newest audit of the same DAG
    run on the same table before the publish."""
    table = publish.get("table")
    audited = publish.get("audited_snapshot_id")
    same_table = [a for a in audits if a.get("table") == table]
    bound = publish.get("audit_event_id")
    if bound:
        return next((a for a in same_table if a.get("event_id") == bound), None)
    if audited:
        for a in same_table:
            if a.get("snapshot_id") == audited:
                return a
    finished = publish.get("finished_at")
    for a in same_table:  # newest first
        if a.get("dag_id") == publish.get("dag_id") and a.get("run_id") == publish.get("run_id"):
            if not finished or a["evaluated_at"] <= finished:
                return a
    return None


def audit_verdicts(audits: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Audit verdicts by event id (``audit_runs`` output): the ledger shows them on its audit rows."""
    return {
        a["event_id"]: {
            "passed": a["passed"],
            "text": "passed" if a["passed"] else f"failed {a['failed']} of {len(a['checks'])} checks",
        }
        for a in audits
    }


def _row_verdict(row: Mapping[str, Any], verdicts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """What an operation concluded, where it is more than its job state (audits, health checks, refusals)."""
    op, st = row.get("operation") or "", row.get("status")
    m, d = row.get("metrics") or {}, row.get("details") or {}
    if op == "wap_audit" or op.endswith("audit"):
        hit = verdicts.get(row.get("event_id") or "")
        if hit:
            return {"text": hit["text"], "ok": hit["passed"]}
        failed = m.get("checks_failed", m.get("failed"))
        if failed is not None:
            total = m.get("checks", m.get("checks_total"))
            text = "passed" if not failed else f"failed {failed}" + (f" of {total} checks" if total else " checks")
            return {"text": text, "ok": not failed}
        if "passed" in m:
            return {"text": "passed" if m["passed"] else "failed", "ok": bool(m["passed"])}
    if st == "refused":
        return {"text": f"refused: {_refusal_reason(d) or 'see details'}", "ok": False}
    if st == "warned":
        return {"text": "warning", "ok": False}
    if op.startswith("erasure") and m.get("verification"):
        return {"text": f"verification {m['verification']}", "ok": m["verification"] == "verified"}
    return None


def stamped_snapshots(snapshots: Sequence[Any]) -> dict[tuple[str, str, str], list[str]]:
    """Snapshot ids by the Airflow task stamped on their commit (``airflow.dag-id``/``run-id``/``task-id``
    summary properties, which the provider's Spark operators ask every job to set)."""
    out: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for snap in sorted(snapshots, key=lambda x: x.timestamp_ms):
        summary = snap.summary
        key = (summary.get("airflow.dag-id"), summary.get("airflow.run-id"), summary.get("airflow.task-id"))
        if all(key):
            out[key].append(str(snap.snapshot_id))
    return dict(out)


#: Operations whose ``snapshot_after`` is a snapshot they committed (not one they only read or pointed at).
COMMITTING_PREFIXES = ("spark_submit", "wap_write", "wap_cherrypick", "maintenance.", "erasure", "rollback")


def with_verdicts(
    rows: Iterable[dict[str, Any]],
    verdicts: Mapping[str, Mapping[str, Any]],
    stamped: Mapping[tuple[str, str, str], list[str]] | None = None,
) -> list[dict[str, Any]]:
    """Ledger rows with ``verdict`` (``{"text", "ok"}`` or ``None``) and ``created_snapshots``."""
    out = []
    for r in rows:
        row = dict(r)
        row["verdict"] = _row_verdict(row, verdicts)
        row["created_snapshots"] = _created_snapshots(row, stamped or {})
        out.append(row)
    return out


def _created_snapshots(row: Mapping[str, Any], stamped: Mapping[tuple[str, str, str], list[str]]) -> list[str]:
    """Snapshots a row's operation committed: those stamped with its Airflow task, else its
    ``snapshot_after`` when the operation commits and the ref moved."""
    key = (row.get("dag_id"), row.get("run_id"), row.get("task_id"))
    ids = list(stamped.get(key, [])) if row.get("operation") in ("spark_submit", "wap_write") else []  # type: ignore[arg-type]
    after, before = row.get("snapshot_after"), row.get("snapshot_before")
    op = row.get("operation") or ""
    if after and after != before and op.startswith(COMMITTING_PREFIXES) and after not in ids:
        ids.append(after)
    return ids


def _health_figures(h: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not h:
        return None
    files = int(h.get("data_files") or 0)
    return {
        "data_files": files,
        "avg_file_bytes": int(h.get("data_bytes") or 0) // files if files else 0,
        "delete_files": int(h.get("delete_files") or 0),
        "small_files": int(h.get("small_files") or 0),
        "manifests": int(h.get("manifests") or 0),
    }


#: Metric keys of a maintenance row that are not the action's own output.
_NOT_OUTPUT = {"health_before", "health_after", "seconds", "dry_run"}


#: Endings of metric keys that hold a moment (epoch milliseconds or a timestamp), never a quantity.
MOMENT_KEY_ENDINGS = ("_ms", "_at", "_time", "timestamp", "_floor", "_floor_before", "_floor_after")


#: Words of a millisecond metric that is a length of time, not a moment (``time_travel_lost_ms``).
DURATION_KEY_WORDS = ("lost", "duration", "elapsed", "age", "wait", "delay", "retention")


def is_duration_key(key: str) -> bool:
    """Whether a metric is a length of time in milliseconds (shown as ``2 d 3 h``), not a moment."""
    return key.endswith("_ms") and any(word in key.removesuffix("_ms").split("_") for word in DURATION_KEY_WORDS)


def is_moment_key(key: str) -> bool:
    """Whether a metric is a moment (shown as a date), not a quantity (drawn as a bar) nor a length of time."""
    return key.endswith(MOMENT_KEY_ENDINGS) and not key.endswith(("_bytes", "_count")) and not is_duration_key(key)


def action_durations(metrics: Mapping[str, Any]) -> dict[str, str]:
    """The lengths of time one maintenance action reported (e.g. how much time travel an erasure purge
    removed), in words: ``0 h 0 min`` for none, ``27 d 14 h``."""
    return {
        k.removesuffix("_ms"): duration_text(v / 1000)
        for k, v in metrics.items()
        if is_duration_key(k) and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def action_moments(metrics: Mapping[str, Any]) -> dict[str, datetime]:
    """The moments one maintenance action reported (e.g. the time-travel floor before and after an
    erasure purge), as UTC dates: epoch milliseconds and ISO texts alike."""
    out: dict[str, datetime] = {}
    for k, v in metrics.items():
        if not is_moment_key(k) or isinstance(v, bool) or v is None:
            continue
        when: datetime | None = None
        if isinstance(v, (int, float)):
            when = datetime.fromtimestamp(v / 1000, UTC)
        elif isinstance(v, str):
            try:
                when = datetime.fromisoformat(v)
            except ValueError:
                when = None
            if when is not None and when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
        if when is not None:
            out[k.removesuffix("_ms")] = when
    return out


def action_output(metrics: Mapping[str, Any]) -> dict[str, float]:
    """What one maintenance action did: the numeric figures of its procedure's output (counts, bytes).
    Moments (:func:`is_moment_key`) and lengths of time (:func:`is_duration_key`) are not figures:
    :func:`action_moments` and :func:`action_durations` give them as dates and in words."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if k in _NOT_OUTPUT or isinstance(v, bool) or is_moment_key(k) or is_duration_key(k):
            continue
        if isinstance(v, (int, float)):
            out[k] = v
        elif isinstance(v, list) and k.endswith(("files", "locations", "snapshot_ids")):
            out[f"{k}_count"] = len(v)
    return out


def maintenance_runs(ledger: Iterable[Mapping[str, Any]], table: str) -> list[dict[str, Any]]:
    """``maintenance.*`` rows (``ledger_views`` output) of a table with health before/after, newest first."""
    out = []
    for row in ledger_rows(ledger, table=table):
        if not (row["operation"] or "").startswith("maintenance."):
            continue
        m = row["metrics"]
        row["action"] = row["operation"].split(".", 1)[1]
        row["before"] = _health_figures(m.get("health_before"))
        row["after"] = _health_figures(m.get("health_after"))
        row["reason"] = row["details"].get("reason")
        row["seconds"] = m.get("seconds")
        row["output"] = action_output(m)
        row["moments"] = action_moments(m)
        row["durations"] = action_durations(m)
        row["job_run_id"] = row["details"].get("job_run_id") or (row["event_id"] or "").rsplit("-", 1)[0]
        out.append(row)
    return out


# ---------------------------------------------------------------- snapshots
def timeline(snapshots: Sequence[Any], refs: Mapping[str, Any]) -> dict[str, Any]:
    """Snapshots (id as string, time, operation) and refs (branches, tags, legal holds) for the chart."""
    snaps = [
        {
            "snapshot_id": sid(s.snapshot_id),
            "parent_id": sid(s.parent_id),
            "timestamp_ms": s.timestamp_ms,
            "operation": s.operation or "unknown",
            "added_records": s.summary.get("added-records"),
            "deleted_records": s.summary.get("deleted-records"),
        }
        for s in sorted(snapshots, key=lambda s: s.timestamp_ms)
    ]
    ref_list = [
        {
            "name": r.name,
            "type": r.type,
            "legal_hold": is_legal_hold(r.name, r.type),
            "snapshot_id": sid(r.snapshot_id),
        }
        for r in sorted(refs.values(), key=lambda r: (r.type, r.name))
    ]
    return {"snapshots": snaps, "refs": ref_list}


# ------------------------------------------------------------------ erasure
def _add_deadline(received: datetime, rule: str) -> datetime:
    if rule.endswith("d"):
        return received + timedelta(days=int(rule[:-1]))
    import pendulum

    return pendulum.instance(received).add(months=int(rule[:-1]))


def duration_text(seconds: float) -> str:
    """``3 d 4 h`` / ``5 h 2 min`` / ``overdue 2 d 1 h``."""
    sign = "overdue " if seconds < 0 else ""
    s = abs(int(seconds))
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    return f"{sign}{d} d {h} h" if d else f"{sign}{h} h {rem // 60} min"


#: How a closed request's deadline reads (an open one shows its time left, or how long it is overdue).
_CLOSED_TEXT = {"met": "met", "closed": "closed", "late": "erased {} late", "copies_late": "copies gone {} late"}


def request_deadlines(
    received: datetime | None,
    *,
    now: datetime,
    is_open: bool,
    erased_at: datetime | None,
    gone_from_copies_by: datetime | None = None,
) -> list[dict[str, Any]]:
    """Each statutory deadline (:data:`DEADLINES`) of one request, with what it says
    (:func:`~airflow_iceberg_provider.rules.erasure_retention.deadline_outcome`): ``state``, ``missed``
    (overdue, erased late or copies gone late: shown in red), ``overdue`` (open and past it), the text."""
    if received is None:
        return []
    out = []
    for label, rule in DEADLINES:
        due = _add_deadline(received, rule)
        o = deadline_outcome(
            due, now=now, is_open=is_open, erased_at=erased_at, gone_from_copies_by=gone_from_copies_by
        )
        if is_open:
            text = duration_text(o["left_s"])
        else:
            text = _CLOSED_TEXT[o["state"]].format(duration_text(o["late_s"] or 0))
        out.append(
            {
                "label": label,
                "due": due,
                "state": o["state"],
                "missed": o["missed"],
                "left_s": o["left_s"],
                "late_s": o["late_s"],
                "left_text": text,
                "overdue": o["state"] == "overdue",
            }
        )
    return out


def erasure_requests(
    requests: Iterable[Mapping[str, Any]], evidence: Iterable[Mapping[str, Any]], *, now: datetime
) -> list[dict[str, Any]]:
    """Requests with status, age, deadlines (time left, or whether they were met) and their evidence per
    table; open ones first. ``overdue``: open and past a deadline; ``late``: closed, and erased after a
    deadline (the evidence report also counts the copies outside the table)."""
    by_request: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for e in evidence:
        by_request[e.get("request_id") or ""].append(e)
    out = []
    for r in requests:
        rid = r.get("request_id")
        received = r.get("received_at")
        status = r.get("status") or "unknown"
        is_open = status not in FINAL_STATUSES  # erased or redacted
        ev = sorted(by_request.get(rid or "", []), key=lambda e: e.get("table_name") or "")
        erased_at = _erased_at(r, ev) if not is_open else None
        deadlines = request_deadlines(received, now=now, is_open=is_open, erased_at=erased_at)
        out.append(
            {
                "request_id": rid,
                "requests_table": r.get("requests_table"),
                "status": status,
                "open": is_open,
                "received_at": received,
                "completed_at": r.get("completed_at"),
                "erased_at": erased_at,
                # age stops at erasure: an erased request shows how long it took
                "age_s": _age(received, r, ev, now, is_open),
                "age_text": duration_text(_age(received, r, ev, now, is_open) or 0) if received else "—",
                "deadlines": deadlines,
                "overdue": any(d["overdue"] for d in deadlines),
                "late": any(d["missed"] and not d["overdue"] for d in deadlines),
                "tables": [
                    {"table": e.get("table_name"), "verification": e.get("verification")}
                    for e in ev
                    if e.get("table_name")
                ],
            }
        )
    return sorted(out, key=lambda q: (not q["open"], q["received_at"] or _EPOCH, q["request_id"] or ""))


def table_erasure(
    table: str, requests: Iterable[Mapping[str, Any]], evidence: Iterable[Mapping[str, Any]]
) -> dict[str, Any]:
    """An erasure-relevant table's requests (``erasure_requests`` output) and its evidence rows.

    A requests table lists every request it holds; a governed table lists the requests with
    evidence on it, each with that table's per-request figures.
    """
    ev = {e.get("request_id"): e for e in evidence if e.get("table_name") == table}
    rows = []
    for r in requests:
        e = ev.get(r["request_id"])
        if e is None and r.get("requests_table") != table:
            continue
        rows.append(
            {
                **r,
                "evidence": None
                if e is None
                else {
                    "rows_found": e.get("rows_found", e.get("rows_deleted")),
                    "rows_deleted": e.get("rows_deleted"),
                    "phase": e.get("phase"),
                    "verification": e.get("verification"),
                    "finished_at": e.get("finished_at"),
                },
            }
        )
    return {"requests": rows, "is_requests_table": any(r.get("requests_table") == table for r in requests)}


def _erased_at(request: Mapping[str, Any], evidence: Sequence[Mapping[str, Any]]) -> datetime | None:
    """When a request was erased: its ``completed_at``, else the latest purge or evidence of it."""
    if request.get("completed_at"):
        return request["completed_at"]
    moments = [_when(e, "purged_at", "finished_at") for e in evidence]
    latest = max(moments, default=_EPOCH)
    return None if latest == _EPOCH else latest


def _age(
    received: datetime | None,
    request: Mapping[str, Any],
    evidence: Sequence[Mapping[str, Any]],
    now: datetime,
    is_open: bool,
) -> float | None:
    if received is None:
        return None
    end = now if is_open else (_erased_at(request, evidence) or now)
    return (end - received).total_seconds()


def open_requests_by_table(requests: Iterable[Mapping[str, Any]]) -> tuple[dict[str, int], int]:
    """Open requests per table they have evidence on, and open requests with no evidence yet."""
    per_table: dict[str, int] = defaultdict(int)
    unassigned = 0
    for r in requests:
        if not r["open"]:
            continue
        if not r["tables"]:
            unassigned += 1
        for t in {t["table"] for t in r["tables"]}:
            per_table[t] += 1
    return dict(per_table), unassigned


def _not_ready_reasons(row: Mapping[str, Any]) -> list[str]:
    """Why one declared subject column is not erasure-ready (empty when it is), naming the table property."""
    if row.get("erasure_ready"):
        return []
    c = row.get("column")
    out = []
    if not row.get("exists"):
        out.append("not in the table's current schema")
    if not row.get("bloom_filter"):
        out.append(f"no Parquet bloom filter (set write.parquet.bloom-filter-enabled.column.{c}=true)")
    if row.get("bounds") != "none":
        out.append(
            f"manifests keep its bounds, metrics mode {row.get('bounds')} (set write.metadata.metrics.column.{c}=none)"
        )
    return out


def undeclared_evidence_tables(
    evidence: Iterable[Mapping[str, Any]], declared: Iterable[str], catalog_tables: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """Tables that hold erasure evidence (someone's data was erased there) but declare no subject columns:
    a catalog-wide erasure driven by the declarations would miss them.

    :param evidence: raw evidence rows (``table_name``, ``request_id``).
    :param declared: the tables the erasure map lists (they declare subject columns).
    :param catalog_tables: the tables in the map's scope; ``None``: every table with evidence.
    """
    known = set(declared)
    scope = None if catalog_tables is None else set(catalog_tables)
    counts: dict[str, set[str]] = defaultdict(set)
    for e in evidence:
        name = e.get("table_name")
        if name and name not in known and (scope is None or name in scope):
            counts[str(name)].add(str(e.get("request_id") or ""))
    return [
        {
            "table": name,
            "requests_with_evidence": len(counts[name]),
            "problem": (
                f"holds erasure evidence of {len(counts[name])} request(s) but declares no subject columns: "
                f"a catalog-wide erasure would skip it (set erasure.subject-columns.<kind>=<column> on {name})"
            ),
        }
        for name in sorted(counts)
    ]


def erasure_map(rows: Iterable[Mapping[str, Any]], open_by_table: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The erasure map: each table declaring subject columns, its columns per key kind and their readiness.

    :param rows: ``erasure_policy.subject_column_map`` output (one row per table, kind and column;
        a malformed declaration is one row with ``kind`` None and the error under ``problems``).
    :param open_by_table: open erasure requests per table (``open_requests_by_table``); ``None``
        leaves the count out.
    :return: ``tables`` (sorted by name, each with ``columns``, ``ready``, ``problems`` and
        ``open_requests``), ``kinds``, and counts of ready and not-ready tables. Names only: no value.
    """
    tables: dict[str, dict[str, Any]] = {}
    for r in rows:
        name = str(r["table"])
        t = tables.setdefault(name, {"table": name, "columns": [], "problems": [], "ready": True})
        for p in r.get("problems") or []:
            if p not in t["problems"]:
                t["problems"].append(p)
        if r.get("kind") is None:  # malformed declaration
            t["ready"] = False
            continue
        reasons = _not_ready_reasons(r)
        t["columns"].append(
            {
                "kind": r["kind"],
                "column": r["column"],
                "type": r.get("type"),
                "exists": bool(r.get("exists")),
                "bloom_filter": bool(r.get("bloom_filter")),
                "bounds": r.get("bounds"),
                "erasure_ready": bool(r.get("erasure_ready")),
                "not_ready": reasons,
            }
        )
        t["ready"] = t["ready"] and bool(r.get("erasure_ready"))
    out = []
    for name in sorted(tables):
        t = tables[name]
        t["ready"] = t["ready"] and not t["problems"]
        if open_by_table is not None:
            t["open_requests"] = int(open_by_table.get(name, 0))
        out.append(t)
    return {
        "tables": out,
        "kinds": sorted({c["kind"] for t in out for c in t["columns"]}),
        "ready_tables": sum(t["ready"] for t in out),
        "not_ready_tables": sum(not t["ready"] for t in out),
    }


#: Words of ledger operations whose rows belong to the restricted side of the view (erasure, including
#: the maintenance plan's ``maintenance.erasure_purge``, and approvals).
RESTRICTED_OPERATION_WORDS = ("erasure", "approval")
#: Words of ``metrics``/``details`` keys that carry erasure facts (request ids, subject hashes, evidence):
#: public rows lose these keys, at any depth.
RESTRICTED_KEY_WORDS = ("erasure", "request", "subject", "evidence", "purge")


def is_restricted_operation(operation: str | None) -> bool:
    """Whether a ledger row is erasure or approval history (shown only with the restricted permission)."""
    op = (operation or "").lower()
    return any(w in op for w in RESTRICTED_OPERATION_WORDS)


def _without_restricted_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _without_restricted_keys(v)
            for k, v in value.items()
            if not any(w in str(k).lower() for w in RESTRICTED_KEY_WORDS)
        }
    if isinstance(value, list):
        return [_without_restricted_keys(v) for v in value]
    return value


def public_ledger(ledger: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Ledger rows without erasure and approval history, and without erasure facts inside the
    ``metrics``/``details`` of the rows kept (what every viewer may see)."""
    return [
        {
            **r,
            "metrics": _without_restricted_keys(r.get("metrics") or {}),
            "details": _without_restricted_keys(r.get("details") or {}),
        }
        for r in ledger
        if not is_restricted_operation(r.get("operation"))
    ]


def approvals(ledger: Iterable[Mapping[str, Any]], table: str | None = None) -> list[dict[str, Any]]:
    """Approval decisions recorded in the ledger (``ledger_views`` output), newest first."""
    out = []
    for r in ledger:
        if "approval" not in (r.get("operation") or "").lower():
            continue
        if table and r.get("table") != table:
            continue
        d, m = r.get("details") or {}, r.get("metrics") or {}
        row = dict(r)
        row["decision"] = d.get("decision") or d.get("chosen_options") or m.get("decision") or r.get("status")
        row["decided_by"] = d.get("decided_by") or d.get("responded_by") or d.get("user") or m.get("decided_by")
        row["comment"] = d.get("comment") or d.get("reason") or d.get("params_input")
        row["gate"] = d.get("gate")
        row["decided_at"] = d.get("decided_at") or r.get("finished_at")
        row["snapshot_id"] = r.get("snapshot_after")
        out.append(row)
    return out


def _erasure_rows(ledger: Iterable[Mapping[str, Any]], table: str | None) -> list[Mapping[str, Any]]:
    """Erasure runs: the erasure operator's rows and the maintenance plan's purge (``maintenance.erasure_purge``)."""
    return [r for r in ledger if "erasure" in (r.get("operation") or "") and (not table or r.get("table") == table)]


def _inside(when: Any, row: Mapping[str, Any]) -> bool:
    start, end = row.get("started_at"), row.get("finished_at")
    return bool(when and start and end and start <= when <= end)


def _run_view(row: Mapping[str, Any], role: str) -> dict[str, Any]:
    m, d = row.get("metrics") or {}, row.get("details") or {}
    return {
        "role": role,
        "event_id": row.get("event_id"),
        "status": row.get("status"),
        "phase": m.get("phase") or d.get("phase"),
        "dag_id": row.get("dag_id"),
        "run_id": row.get("run_id"),
        "task_id": row.get("task_id"),
        "try_number": row.get("try_number"),
        "started_at": row.get("started_at"),
        "finished_at": row.get("finished_at"),
        "requests": m.get("requests"),
        "rows_deleted": m.get("rows_deleted"),
        "files_rewritten": m.get("files_rewritten"),
        "files_removed": m.get("files_removed"),
        "snapshots_expired": m.get("snapshots_expired"),
        "copy_retention": m.get("copy_retention"),
    }


def evidence_runs(e: Mapping[str, Any], ledger: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The erasure runs (ledger rows, oldest first) that wrote one evidence row.

    An evidence row is MERGEd by every run that covers its request on its table and keeps the
    moments those runs recorded: ``logical_erased_at`` (the logical run), ``purged_at`` (the purge),
    ``finished_at`` (the latest run) and ``job_run_id`` (the latest run's ledger event). A run is one
    of them when it is that event, or when one of those moments falls inside its ledger row's
    ``started_at`` .. ``finished_at`` on the same table.
    """
    rows = _erasure_rows(ledger, e.get("table_name"))
    marks = (
        ("logical", e.get("logical_erased_at")),
        ("purge", e.get("purged_at")),
        ("latest", e.get("finished_at")),
        ("latest", e.get("last_verified_at")),
    )
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        roles = [role for role, when in marks if _inside(when, row)]
        if row.get("event_id") and row.get("event_id") == e.get("job_run_id"):
            roles.append("latest")
        if roles:
            role = next((r for r in ("logical", "purge") if r in roles), "latest")
            found.setdefault(row["event_id"], _run_view(row, role))
    if not found and e.get("task_id"):  # no ledger row to match: the evidence's own (latest) task
        found["-"] = {
            "role": "latest",
            "event_id": e.get("job_run_id"),
            "status": None,
            "phase": e.get("phase"),
            "dag_id": e.get("dag_id"),
            "run_id": e.get("run_id"),
            "task_id": e.get("task_id"),
            "try_number": e.get("try_number"),
            "started_at": None,
            "finished_at": e.get("finished_at"),
            "requests": None,
        }
    return sorted(found.values(), key=lambda r: r["finished_at"] or _EPOCH)


#: How each ref policy reads on a report (the evidence stores the bare word).
REF_POLICY_TEXT = {
    "fail": "refuse when a tag or branch keeps the subject's rows",
    "drop": "drop tags and branches that keep the subject's rows",
    "keep": "keep held refs; their rows are counted as held",
}


def _phase_runs(tables: Sequence[Mapping[str, Any]], role: str) -> list[dict[str, Any]]:
    """The runs of one role (``logical`` or ``purge``) across a report's tables, each with its table."""
    return [{**run, "table": t["table"]} for t in tables for run in t["batch"]["runs"] if run["role"] == role]


def _completion(
    purged_at: datetime | None, runs: Sequence[Mapping[str, Any]], declared: Mapping[str, Any] | None
) -> dict[str, Any]:
    """One table's two dates: unreachable from the table at T (the purge) and gone from every copy by
    T + the retention of object-store versions and backups (recorded by the purge run, else declared now)."""
    recorded = next(
        (r["copy_retention"] for r in reversed(runs) if r["role"] == "purge" and r.get("copy_retention")), None
    )
    retention, source = (recorded, "recorded by the purge run") if recorded else (declared, "declared now")
    if not retention or retention.get("error"):
        return {
            "unreachable_at": purged_at,
            "gone_from_copies_by": None,
            "retention_days": None,
            "versioning_retention_days": None,
            "backup_retention_days": None,
            "retention_source": (retention or {}).get("error") or "no retention declared",
        }
    days = float(retention.get("retention_days") or 0)
    return {
        "unreachable_at": purged_at,
        "gone_from_copies_by": purged_at + timedelta(days=days) if purged_at else None,
        "retention_days": days,
        "versioning_retention_days": retention.get("versioning_retention_days"),
        "backup_retention_days": retention.get("backup_retention_days"),
        "retention_source": source if retention.get("declared_by") else f"{source}: none declared (0 days)",
    }


def _overall_completion(tables: Sequence[Mapping[str, Any]], deadlines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The request's two dates (the latest over its tables) and the deadlines the second one misses."""
    done = [t["completion"] for t in tables]
    unreachable = [c["unreachable_at"] for c in done]
    gone = [c["gone_from_copies_by"] for c in done]
    at = max(unreachable) if done and all(unreachable) else None
    by = max(gone) if done and all(gone) else None
    late = [d["label"] for d in deadlines if by is not None and by > d["due"]]
    return {"unreachable_at": at, "gone_from_copies_by": by, "copies_late_for": late}


def evidence_report(
    request_id: str,
    requests: Iterable[Mapping[str, Any]],
    evidence: Iterable[Mapping[str, Any]],
    ledger: Iterable[Mapping[str, Any]] = (),
    *,
    now: datetime | None = None,
    retentions: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """Everything a compliance officer hands over for one request; ``None`` when nothing is known.

    Each table's figures come in two groups: ``request`` holds what is true of *this* request (its
    rows found and removed, the verification of its subject), ``batch`` what the erasure runs did to
    the table for every request they processed together (files rewritten and removed, snapshots
    expired, refs), with the runs and Airflow tasks that did it. ``completion`` holds its two dates:
    unreachable from the table at T (the purge), gone from every copy by T + the retention of
    object-store versions and backups (the one the purge run recorded, else ``retentions[table]``,
    what is declared now: ``CopyRetention.to_dict()``). The report's ``completion`` is the latest of
    each over the tables, with the statutory deadlines the second date misses.
    """
    request = next((r for r in requests if r.get("request_id") == request_id), None)
    rows = sorted((e for e in evidence if e.get("request_id") == request_id), key=lambda e: e.get("table_name") or "")
    if request is None and not rows:
        return None
    ledger = list(ledger)
    tables: list[dict[str, Any]] = []
    for e in rows:
        found = e.get("rows_found")
        deleted = e.get("rows_deleted")
        runs = evidence_runs(e, ledger)
        batch_sizes = [r["requests"] for r in runs if r.get("requests") is not None]
        tables.append(
            {
                "table": e.get("table_name"),
                "request": {
                    "rows_found": found if found is not None else deleted,
                    "rows_deleted": deleted,
                    "matched_nothing": not (found or deleted),
                    "phase": e.get("phase"),
                    "logical_erased_at": e.get("logical_erased_at"),
                    "purged_at": e.get("purged_at"),
                    "verification": e.get("verification"),
                    "last_verified_at": e.get("last_verified_at"),
                    "subject_columns": _json_list(e.get("subject_columns")),
                },
                "batch": {
                    "runs": runs,
                    "runs_recorded": e.get("runs"),
                    "largest_batch": max(batch_sizes) if batch_sizes else None,
                    "snapshot_before": sid(e.get("snapshot_before")),
                    "snapshot_after": sid(e.get("snapshot_after")),
                    "files_rewritten": e.get("files_rewritten"),
                    "files_removed": e.get("files_removed"),
                    "snapshots_expired": e.get("snapshots_expired"),
                    "leftovers_removed": e.get("leftovers_removed"),
                    "refs_dropped": _json_list(e.get("refs_dropped")),
                    "refs_blocking": _json_list(e.get("refs_blocking")),
                    "ref_policy": e.get("ref_policy"),
                    "ref_policy_text": REF_POLICY_TEXT.get(e.get("ref_policy") or "", e.get("ref_policy")),
                    "rows_held": e.get("rows_held"),
                    "verified_rows_remaining": e.get("verified_rows_remaining"),
                    "time_travel_floor_before": e.get("time_travel_floor_before"),
                    "time_travel_floor_after": e.get("time_travel_floor_after"),
                    "started_at": e.get("started_at"),
                    "finished_at": e.get("finished_at"),
                },
                "completion": _completion(e.get("purged_at"), runs, (retentions or {}).get(e.get("table_name") or "")),
                # flat aliases of the per-request figures (JSON readers of earlier reports)
                "rows_deleted": deleted,
                "verification": e.get("verification"),
            }
        )
    hashes = sorted({str(e["subject_hash"]) for e in rows if e.get("subject_hash")})
    finished = [e["finished_at"] for e in rows if e.get("finished_at")]
    now = now or datetime.now(UTC)
    shaped = erasure_requests([request], rows, now=now)[0] if request else None
    completion = _overall_completion(tables, shaped["deadlines"] if shaped else [])
    deadlines = (
        request_deadlines(
            shaped["received_at"],
            now=now,
            is_open=shaped["open"],
            erased_at=shaped["erased_at"],
            gone_from_copies_by=completion["gone_from_copies_by"],
        )
        if shaped
        else []
    )
    return {
        "completion": completion,
        "deadlines": deadlines,
        "overdue": bool(shaped and shaped["overdue"]),
        "late": any(d["missed"] and not d["overdue"] for d in deadlines),
        "open": bool(shaped and shaped["open"]),
        "logical_runs": _phase_runs(tables, "logical"),
        "purge_runs": _phase_runs(tables, "purge"),
        "logically_erased": any(t["request"]["logical_erased_at"] for t in tables),
        "purged": any(t["request"]["purged_at"] for t in tables),
        "request_id": request_id,
        "requests_table": request.get("requests_table") if request else None,
        "status": request.get("status") if request else None,
        "received_at": request.get("received_at") if request else None,
        "completed_at": request.get("completed_at") if request else None,
        "erased_at": max(finished) if finished else None,
        "subject_hashes": hashes,
        "tables": tables,
        "matched_nothing": bool(tables) and all(t["request"]["matched_nothing"] for t in tables),
        "verification": _overall(t["verification"] for t in tables),
        "provider_versions": sorted({e.get("provider_version") for e in rows if e.get("provider_version")}),
        "iceberg_versions": sorted({e.get("iceberg_version") for e in rows if e.get("iceberg_version")}),
    }


def _json_list(text: Any) -> list[Any]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return [text]
    return value if isinstance(value, list) else [value]


def _overall(verifications: Iterable[str | None]) -> str:
    values = list(verifications)
    if not values:
        return "no evidence yet"
    for worst in ("failed", "incomplete"):
        if worst in values:
            return worst
    return "verified" if all(v == "verified" for v in values) else "unknown"


def task_erasure(
    evidence: Iterable[Mapping[str, Any]],
    ledger: Iterable[Mapping[str, Any]],
    task: Mapping[str, str],
    table: str | None = None,
) -> dict[str, Any]:
    """What one Airflow task did in erasure: the requests it processed and the runs it refused.

    A request counts when its evidence names the task, or when one of the moments its evidence
    recorded (logical erasure, purge, latest run) falls inside one of the task's erasure runs.
    """
    keys = ("dag_id", "run_id", "task_id")

    def same_task(row: Mapping[str, Any]) -> bool:
        return all(row.get(k) == task.get(k) for k in keys if task.get(k))

    runs = [r for r in _erasure_rows(ledger, table) if same_task(r)]
    ids = set()
    for e in evidence:
        if not e.get("request_id") or (table and e.get("table_name") != table):
            continue
        if same_task(e) and any(task.get(k) for k in keys):
            ids.add(e["request_id"])
            continue
        for run in runs:
            if run.get("table") != e.get("table_name"):
                continue
            moments = (e.get("logical_erased_at"), e.get("purged_at"), e.get("finished_at"), e.get("last_verified_at"))
            if e.get("job_run_id") == run.get("event_id") or any(_inside(m, run) for m in moments):
                ids.add(e["request_id"])
                break
    refusals = [
        {
            **_run_view(r, "refused"),
            "table": r.get("table"),
            "reason": _refusal_reason(r.get("details") or {}),
            "blocking": (r.get("details") or {}).get("refs_blocking") or (r.get("metrics") or {}).get("refs_blocking"),
        }
        for r in runs
        if r.get("status") in ("refused", "failed")
    ]
    return {"request_ids": sorted(ids), "refusals": refusals, "runs": [_run_view(r, "task") for r in runs]}


#: How a refusal's recorded message may begin; the page already says that it was refused and changed nothing.
_REFUSAL_PREAMBLES = ("Erasure refused, nothing was changed: ", "Erasure refused: ", "refused: ")


def _refusal_reason(details: Mapping[str, Any]) -> Any:
    """Why a run was refused, as recorded (without a preamble that repeats "refused, nothing was changed")."""
    reason = details.get("refused") or details.get("reason") or details.get("error")
    if isinstance(reason, str):
        for preamble in _REFUSAL_PREAMBLES:
            reason = reason.removeprefix(preamble)
    return reason


def requests_of_task(evidence: Iterable[Mapping[str, Any]], task: Mapping[str, str], table: str | None) -> list[str]:
    """Request ids whose evidence was last written by this Airflow task."""
    return task_erasure(evidence, (), task, table)["request_ids"]
