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

from airflow_iceberg_provider.erasure_policy import FINAL_STATUSES
from airflow_iceberg_provider.governance import is_legal_hold
from airflow_iceberg_provider.ids import with_string_ids

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


def ledger_views(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every ledger row shaped (JSON decoded, ids as strings), newest first."""
    ordered = sorted(rows, key=lambda r: _when(r, "finished_at", "started_at"), reverse=True)
    return [_ledger_view(r) for r in ordered]


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
    """Successful ``wap_publish`` rows (``ledger_views`` output) of a table, newest first."""
    out = []
    for row in ledger_rows(ledger, table=table, operation="wap_publish"):
        if row["status"] not in ("succeeded", "noop"):
            continue
        d = row["details"]
        row["branch"] = d.get("branch")
        row["method"] = d.get("method")
        row["audited_snapshot_id"] = sid(d.get("audited_snapshot_id"))
        row["tag"] = d.get("tag")
        row["added_records"] = row["metrics"].get("published_added_records")
        out.append(row)
    return out


def publish_of_task(ledger: Iterable[Mapping[str, Any]], table: str, task: Mapping[str, str]) -> str | None:
    """The snapshot a given task published on ``table`` (for the publish task's extra link)."""
    for row in publishes(ledger, table):
        if all(row.get(k) == task.get(k) for k in ("dag_id", "run_id", "task_id") if task.get(k)):
            return row["snapshot_after"]
    return None


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


def erasure_requests(
    requests: Iterable[Mapping[str, Any]], evidence: Iterable[Mapping[str, Any]], *, now: datetime
) -> list[dict[str, Any]]:
    """Requests with status, age, deadlines (time left) and their evidence per table; open ones first."""
    by_request: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for e in evidence:
        by_request[e.get("request_id") or ""].append(e)
    out = []
    for r in requests:
        rid = r.get("request_id")
        received = r.get("received_at")
        status = r.get("status") or "unknown"
        is_open = status not in FINAL_STATUSES  # erased (or the legacy "done")
        ev = sorted(by_request.get(rid or "", []), key=lambda e: e.get("table_name") or "")
        deadlines = []
        if received is not None:
            for label, rule in DEADLINES:
                due = _add_deadline(received, rule)
                left = (due - now).total_seconds()
                deadlines.append(
                    {
                        "label": label,
                        "due": due,
                        "left_s": left if is_open else None,
                        "left_text": duration_text(left) if is_open else "met" if _met(r, ev, due) else "closed",
                        "overdue": is_open and left < 0,
                    }
                )
        out.append(
            {
                "request_id": rid,
                "requests_table": r.get("requests_table"),
                "status": status,
                "open": is_open,
                "received_at": received,
                "completed_at": r.get("completed_at"),
                "age_s": (now - received).total_seconds() if received else None,
                "age_text": duration_text((now - received).total_seconds()) if received else "—",
                "deadlines": deadlines,
                "overdue": any(d["overdue"] for d in deadlines),
                "tables": [
                    {"table": e.get("table_name"), "verification": e.get("verification")}
                    for e in ev
                    if e.get("table_name")
                ],
            }
        )
    return sorted(out, key=lambda q: (not q["open"], q["received_at"] or _EPOCH, q["request_id"] or ""))


def _met(request: Mapping[str, Any], evidence: Sequence[Mapping[str, Any]], due: datetime) -> bool:
    done_at = request.get("completed_at") or max((_when(e, "finished_at") for e in evidence), default=None)
    return bool(done_at and done_at != _EPOCH and done_at <= due)


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


def evidence_report(
    request_id: str, requests: Iterable[Mapping[str, Any]], evidence: Iterable[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """Everything a compliance officer hands over for one request; ``None`` when nothing is known."""
    request = next((r for r in requests if r.get("request_id") == request_id), None)
    rows = sorted((e for e in evidence if e.get("request_id") == request_id), key=lambda e: e.get("table_name") or "")
    if request is None and not rows:
        return None
    tables = []
    for e in rows:
        tables.append(
            {
                "table": e.get("table_name"),
                "rows_deleted": e.get("rows_deleted"),
                "rows_held": e.get("rows_held"),
                "snapshot_before": sid(e.get("snapshot_before")),
                "snapshot_after": sid(e.get("snapshot_after")),
                "files_rewritten": e.get("files_rewritten"),
                "files_removed": e.get("files_removed"),
                "snapshots_expired": e.get("snapshots_expired"),
                "refs_dropped": _json_list(e.get("refs_dropped")),
                "refs_blocking": _json_list(e.get("refs_blocking")),
                "ref_policy": e.get("ref_policy"),
                "subject_columns": _json_list(e.get("subject_columns")),
                "verification": e.get("verification"),
                "verified_rows_remaining": e.get("verified_rows_remaining"),
                "time_travel_floor_before": e.get("time_travel_floor_before"),
                "time_travel_floor_after": e.get("time_travel_floor_after"),
                "started_at": e.get("started_at"),
                "finished_at": e.get("finished_at"),
                "last_verified_at": e.get("last_verified_at"),
                "runs": e.get("runs"),
                "job_run_id": e.get("job_run_id"),
                "dag_id": e.get("dag_id"),
                "run_id": e.get("run_id"),
                "task_id": e.get("task_id"),
            }
        )
    hashes = sorted({e.get("subject_hash") for e in rows if e.get("subject_hash")})
    finished = [e["finished_at"] for e in rows if e.get("finished_at")]
    return {
        "request_id": request_id,
        "requests_table": request.get("requests_table") if request else None,
        "status": request.get("status") if request else None,
        "received_at": request.get("received_at") if request else None,
        "completed_at": request.get("completed_at") if request else None,
        "erased_at": max(finished) if finished else None,
        "subject_hashes": hashes,
        "tables": tables,
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


def requests_of_task(evidence: Iterable[Mapping[str, Any]], task: Mapping[str, str], table: str | None) -> list[str]:
    """Request ids whose evidence was last written by this Airflow task (the erasure task's extra link)."""
    return sorted(
        {
            e["request_id"]
            for e in evidence
            if e.get("request_id")
            and (not table or e.get("table_name") == table)
            and all(e.get(k) == task.get(k) for k in ("dag_id", "run_id", "task_id") if task.get(k))
        }
    )
