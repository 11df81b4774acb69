"""Pure logic of the erasure job: SQL builders, HMAC pads, ref analysis, outcomes.

Shipped next to ``spark_jobs/erasure.py`` with ``--py-files`` and imported by the
Airflow side (``airflow_iceberg_provider.erasure_policy``) for validation and
tests. No pyspark import, no I/O.

Nothing built here ever contains a subject value: subjects reach Spark SQL only
as a temporary view that statements semi-join against; identifiers are validated
by the Airflow side and backtick-quoted here once more (defence in depth).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

#: Ref policies: what to do with tags/branches that would keep the subjects reachable.
REF_POLICIES = ("fail", "drop", "keep")
#: Legal-hold convention (mirrors ``airflow_iceberg_provider.governance``; this module ships alone).
LEGAL_HOLD_PREFIX = "legal-hold-"
#: Verification outcomes recorded in the evidence table.
VERIFIED, INCOMPLETE, FAILED = "verified", "incomplete", "failed"
#: Request statuses written back to the requests table (lifecycle: pending -> logically_erased -> erased;
#: blocked when a hold keeps rows). ``done`` is the old name of ``erased``, still read as erased.
#: ``redacted``: erased on every table in scope, and the request's own subject key replaced by its salted
#: hash (the requests table's history purged too); final, never reopened.
STATUS_PENDING, STATUS_LOGICAL, STATUS_ERASED, STATUS_BLOCKED = "pending", "logically_erased", "erased", "blocked"
STATUS_REDACTED = "redacted"
LEGACY_DONE = "done"
FINAL_STATUSES = (STATUS_ERASED, LEGACY_DONE, STATUS_REDACTED)
STATUSES = (STATUS_PENDING, STATUS_LOGICAL, STATUS_ERASED, STATUS_BLOCKED, LEGACY_DONE, STATUS_REDACTED)
#: Erased requests whose key may be redacted (``redacted`` ones already are).
REDACTABLE_STATUSES = (STATUS_ERASED, LEGACY_DONE)
#: Prefix of a redacted ``subject_key``: ``hmac-sha256:<hex>``, the hash the evidence rows carry.
REDACTED_PREFIX = "hmac-sha256:"
#: Erasure phases: ``logical`` (merge-on-read delete, hours), ``purge`` (physical, batched), ``full`` (both).
PHASE_LOGICAL, PHASE_PURGE, PHASE_FULL = "logical", "purge", "full"
PHASES = (PHASE_LOGICAL, PHASE_PURGE, PHASE_FULL)
PHYSICAL_PHASES = (PHASE_PURGE, PHASE_FULL)
#: Statuses each phase picks up when no request ids are given.
PHASE_INPUT_STATUSES = {
    PHASE_LOGICAL: (STATUS_PENDING,),
    PHASE_PURGE: (STATUS_LOGICAL, STATUS_BLOCKED),
    PHASE_FULL: (STATUS_PENDING, STATUS_BLOCKED, STATUS_LOGICAL),
}
#: Column types a subject column may have (Spark SQL simple type names).
SUPPORTED_SUBJECT_TYPES = ("string", "bigint", "int", "smallint", "decimal")
SUBJECTS_VIEW = "erasure_subjects"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}\Z")
_HMAC_BLOCK = 64


# --------------------------------------------------------------------- identifiers
def q(*parts: str) -> str:
    """Backtick-quote already validated identifier parts."""
    for p in parts:
        if not isinstance(p, str) or not p or "`" in p:
            raise ValueError(f"invalid identifier part {p!r}")
    return ".".join(f"`{p}`" for p in parts)


def table_sql(catalog: str, dotted: str, branch: str | None = None) -> str:
    """Quoted ``catalog.ns.table`` (or ``...`.`branch_<name>``` for a branch)."""
    ns, name = dotted.split(".")
    for part in (catalog, ns, name):
        if not _IDENT.match(part):
            raise ValueError(f"invalid identifier {part!r}")
    if branch is None or branch == "main":
        return q(catalog, ns, name)
    if not _REF.match(branch):
        raise ValueError(f"invalid branch name {branch!r}")
    return q(catalog, ns, name, f"branch_{branch}")


def check_columns(columns: Sequence[str]) -> list[str]:
    if not columns:
        raise ValueError("at least one subject column is required")
    for c in columns:
        if not isinstance(c, str) or not _IDENT.match(c):
            raise ValueError(f"invalid subject column {c!r}")
    return list(columns)


def key_view(column: str) -> str:
    """Name of the temp view holding the subject keys cast to ``column``'s type."""
    return f"erasure_keys_{column}"


# -------------------------------------------------------------------- statements
def match_predicate(columns: Sequence[str], alias: str | None = None) -> str:
    """``col IN (SELECT k FROM erasure_keys_col) OR ...`` — a semi-join, no literals."""
    prefix = f"{q(alias)}." if alias else ""
    return " OR ".join(f"{prefix}{q(c)} IN (SELECT k FROM {q(key_view(c))})" for c in check_columns(columns))


def delete_sql(catalog: str, table: str, columns: Sequence[str], branch: str | None = None) -> str:
    """One batched DELETE for every subject (on ``main`` or a branch)."""
    return f"DELETE FROM {table_sql(catalog, table, branch)} WHERE {match_predicate(columns)}"


def count_sql(catalog: str, table: str, columns: Sequence[str], version: str | int | None = None) -> str:
    """Rows (deletes applied) matching the subjects, optionally time-travelled (``:version`` param)."""
    travel = " VERSION AS OF :version" if version is not None else ""
    return f"SELECT count(*) AS n FROM {table_sql(catalog, table)}{travel} WHERE {match_predicate(columns)}"


def per_request_count_sql(catalog: str, table: str, column: str, version_param: bool = False) -> str:
    """Rows per request for one subject column (equi-join on the typed key)."""
    travel = " VERSION AS OF :version" if version_param else ""
    return (
        f"SELECT s.request_id AS request_id, count(t.{q(column)}) AS n "
        f"FROM {q(SUBJECTS_VIEW)} s LEFT JOIN {table_sql(catalog, table)}{travel} t "
        f"ON t.{q(column)} = s.{q('k_' + column)} GROUP BY s.request_id"
    )


def bound_exposure_sql(catalog: str, table: str, column: str, is_string: bool, min_prefix: int = 8) -> str:
    """Data files whose DELETED manifest entry (any retained snapshot) still carries a subject key
    as lower/upper bound of ``column``. String bounds are truncated (default 16 characters, the
    upper one with its last character incremented), so a strict prefix of at least
    ``min_prefix`` characters counts as exposure too.
    """
    col = q(column)
    lb, ub = f"e.readable_metrics.{col}.lower_bound", f"e.readable_metrics.{col}.upper_bound"
    cond = f"{lb} = k.k OR {ub} = k.k"
    if is_string:
        cond += (
            f" OR (length({lb}) >= {int(min_prefix)} AND length({lb}) < length(k.k) AND startswith(k.k, {lb}))"
            f" OR (length({ub}) > {int(min_prefix)} AND length({ub}) <= length(k.k)"
            f" AND startswith(k.k, substring({ub}, 1, length({ub}) - 1)))"
        )
    return (
        f"SELECT DISTINCT e.data_file.file_path AS f FROM {table_sql(catalog, table)}.all_entries e "
        f"JOIN {q(key_view(column))} k ON ({cond}) WHERE e.status = 2 AND e.data_file.content = 0"
    )


def _ts_literal(epoch_ms: int) -> str:
    dt = datetime.fromtimestamp(int(epoch_ms) / 1000, UTC)
    return "TIMESTAMP '" + dt.strftime("%Y-%m-%d %H:%M:%S.") + f"{dt.microsecond // 1000:03d}+00:00'"


def expire_sql(catalog: str, table: str, older_than_ms: int) -> str:
    """``expire_snapshots`` with an explicit ``older_than`` and ``retain_last => 1``.

    CALL arguments must be literals; the timestamp is computed by the job, never user input.
    """
    return (
        f"CALL {q(catalog)}.system.expire_snapshots(table => '{_dotted(table)}', "
        f"older_than => {_ts_literal(older_than_ms)}, retain_last => 1, stream_results => true)"
    )


def rewrite_data_files_sql(catalog: str, table: str, where: str | None = None) -> str:
    """Rewrite every data file carrying a delete file (and only those: size limits opened).

    New files get a fresh sequence number, so the applied delete files become dangling and
    are removed in the same call.
    """
    opts = (
        "map('delete-file-threshold', '1', 'min-file-size-bytes', '0', "
        "'max-file-size-bytes', '9223372036854775807', 'min-input-files', '1', "
        "'remove-dangling-deletes', 'true', 'use-starting-sequence-number', 'false')"
    )
    where_sql = f", where => '{where}'" if where else ""
    return f"CALL {q(catalog)}.system.rewrite_data_files(table => '{_dotted(table)}', options => {opts}{where_sql})"


def rewrite_manifests_sql(catalog: str, table: str) -> str:
    return f"CALL {q(catalog)}.system.rewrite_manifests(table => '{_dotted(table)}', use_caching => false)"


def drop_ref_sql(catalog: str, table: str, name: str, ref_type: str) -> str:
    if not _REF.match(name) or name == "main":
        raise ValueError(f"refusing to drop ref {name!r}")
    kind = "TAG" if ref_type.lower() == "tag" else "BRANCH"
    return f"ALTER TABLE {table_sql(catalog, table)} DROP {kind} IF EXISTS {q(name)}"


def _dotted(table: str) -> str:
    ns, name = table.split(".")
    if not (_IDENT.match(ns) and _IDENT.match(name)):
        raise ValueError(f"invalid table {table!r}")
    return f"{ns}.{name}"


# ------------------------------------------------------------------------ HMAC
def hmac_pads(salt: bytes) -> tuple[bytes, bytes]:
    """Inner and outer HMAC-SHA256 key pads, so Spark can compute HMAC with ``sha2``.

    ``HMAC(K, m) = H((K' ^ opad) || H((K' ^ ipad) || m))`` with ``K'`` the key
    (hashed when longer than the block) zero-padded to 64 bytes.
    """
    key = hashlib.sha256(salt).digest() if len(salt) > _HMAC_BLOCK else salt
    key = key.ljust(_HMAC_BLOCK, b"\x00")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def hmac_hex(salt: bytes, value: str) -> str:
    """Reference HMAC-SHA256 (hex) of a subject key; equals the Spark computation."""
    return hmac.new(salt, value.encode("utf-8"), hashlib.sha256).hexdigest()


def evidence_id(request_id: str, table: str) -> str:
    """Deterministic evidence row id: one row per (request, table), re-runs update it."""
    return hashlib.sha256(f"{request_id}\x00{table}".encode()).hexdigest()[:32]


# ------------------------------------------------------------------ ref analysis
def analyze_refs(
    refs: Sequence[Mapping[str, Any]],
    snapshots: Sequence[Mapping[str, Any]],
    *,
    holds: Mapping[str, bool],
    live_rows: Mapping[str, int],
    table_had_subjects: bool,
    now_ms: int,
) -> list[dict[str, Any]]:
    """Decide, per ref, whether it would keep the subjects' rows reachable.

    :param refs: ``{"name", "type" ("branch"|"tag"), "snapshot_id", "max_ref_age_ms",
        "min_snapshots_to_keep", "max_snapshot_age_ms"}`` per ref.
    :param snapshots: ``{"snapshot_id", "parent_id", "timestamp_ms"}`` per snapshot.
    :param holds: ref name -> whether the raw data files of its head snapshot contain
        subject rows (delete files ignored).
    :param live_rows: branch name -> rows matching the subjects with deletes applied.
    :param table_had_subjects: whether any file in the table's history holds subjects.
    :return: one dict per ref: ``name``, ``type``, ``snapshot_id``, ``action``
        (``delete`` | ``none`` | ``expires``), ``blocking`` (bool), ``reason``,
        ``droppable`` (bool), ``legal_hold`` (bool).
    """
    by_id = {int(s["snapshot_id"]): s for s in snapshots}
    out = []
    for ref in sorted(refs, key=lambda r: (r["name"] != "main", r["name"])):
        name, rtype, sid = ref["name"], str(ref["type"]).lower(), int(ref["snapshot_id"])
        head_ts = int(by_id.get(sid, {}).get("timestamp_ms") or now_ms)
        legal = rtype == "tag" and name.startswith(LEGAL_HOLD_PREFIX)
        item: dict[str, Any] = {
            "name": name,
            "type": rtype,
            "snapshot_id": sid,
            "action": "none",
            "blocking": False,
            "reason": None,
            "droppable": name != "main" and not legal,
            "legal_hold": legal,
        }
        if rtype == "tag":
            max_age = ref.get("max_ref_age_ms")
            if holds.get(name):
                if max_age is not None and head_ts + int(max_age) < now_ms:
                    item["action"] = "expires"
                else:
                    item["blocking"] = True
                    item["reason"] = (
                        "legal hold: the tag pins a snapshot whose data files contain the subjects' rows"
                        if legal
                        else "the tag pins a snapshot whose data files contain the subjects' rows"
                    )
            out.append(item)
            continue
        live = int(live_rows.get(name, 0))
        if live > 0:
            item["action"] = "delete"
        elif holds.get(name) and name != "main":
            item["blocking"] = True
            item["reason"] = (
                "the branch head's data files hold the subjects' rows masked only by delete files; "
                "Iceberg rewrites data files on main only"
            )
        if table_had_subjects and not item["blocking"]:
            keep = ref.get("min_snapshots_to_keep")
            age = ref.get("max_snapshot_age_ms")
            ancestors = _ancestry(by_id, sid)
            if keep is not None and int(keep) > 1 and len(ancestors) > 1:
                item["blocking"] = True
                item["reason"] = f"branch retention min-snapshots-to-keep={keep} keeps pre-erasure snapshots reachable"
            elif age is not None and any(int(a["timestamp_ms"]) >= now_ms - int(age) for a in ancestors[1:]):
                item["blocking"] = True
                item["reason"] = f"branch retention max-snapshot-age-ms={age} keeps pre-erasure snapshots reachable"
        out.append(item)
    return out


def _ancestry(by_id: Mapping[int, Mapping[str, Any]], sid: int) -> list[Mapping[str, Any]]:
    chain, seen = [], set()
    cur: int | None = sid
    while cur is not None and cur in by_id and cur not in seen:
        seen.add(cur)
        chain.append(by_id[cur])
        parent = by_id[cur].get("parent_id")
        cur = int(parent) if parent is not None else None
    return chain


def decide_policy(analysis: Sequence[Mapping[str, Any]], policy: str) -> dict[str, Any]:
    """Apply the ref policy: ``{"refuse": str|None, "drop": [...], "held": [...]}``.

    ``fail`` refuses when anything blocks; ``drop`` removes blocking refs but never
    ``main`` or a legal hold (refuses instead); ``keep`` erases what it can and
    records the blocking refs as holding the erasure incomplete.
    """
    if policy not in REF_POLICIES:
        raise ValueError(f"ref_policy={policy!r}; use one of {REF_POLICIES}")
    blocking = [dict(a) for a in analysis if a.get("blocking")]
    names = ", ".join(f"{b['type']} {b['name']!r} ({b['reason']})" for b in blocking)
    if not blocking:
        return {"refuse": None, "drop": [], "held": []}
    if policy == "fail":
        return {
            "refuse": f"refs would keep the subjects' rows reachable: {names}. Use ref_policy='drop' to remove "
            "them or ref_policy='keep' to erase the rest and record the erasure as incomplete.",
            "drop": [],
            "held": blocking,
        }
    if policy == "drop":
        undroppable = [b for b in blocking if not b.get("droppable")]
        if undroppable:
            which = ", ".join(f"{b['type']} {b['name']!r} ({b['reason']})" for b in undroppable)
            return {
                "refuse": f"ref_policy='drop' cannot remove {which}: main is never dropped and legal holds are "
                "released only by their owner. Release the hold / clear main's retention, or use ref_policy='keep'.",
                "drop": [],
                "held": blocking,
            }
        return {"refuse": None, "drop": blocking, "held": []}
    return {"refuse": None, "drop": [], "held": blocking}


# --------------------------------------------------------------------- outcomes
def verification_outcome(
    *, rows_outside_holds: int, old_files_reachable: int, old_files_on_disk: int, bound_hits: int, held_rows: int
) -> str:
    """``verified`` only when nothing outside holds remains; ``incomplete`` when holds keep rows."""
    if rows_outside_holds or old_files_reachable or old_files_on_disk or bound_hits:
        return FAILED
    return INCOMPLETE if held_rows else VERIFIED


def request_status(verifications: Iterable[str | None], tables_in_scope: int) -> str:
    """Status of a request from its evidence rows over the tables in scope."""
    values = [v for v in verifications if v]
    if any(v == FAILED for v in values):
        return STATUS_PENDING
    if any(v == INCOMPLETE for v in values):
        return STATUS_BLOCKED
    if len(values) >= tables_in_scope and all(v == VERIFIED for v in values):
        return STATUS_ERASED
    return STATUS_PENDING


# -------------------------------------------------------------------- lifecycle
class LifecycleRefusal(ValueError):
    """A transition the request lifecycle does not allow."""


def transition(current: str, phase: str, outcome: str | None) -> str:
    """Next status of ONE request on ONE table after ``phase`` ended with ``outcome``.

    ``pending --logical--> logically_erased --purge--> erased``; ``full`` goes from any open
    status straight to ``erased``; an ``incomplete`` physical verification (a hold keeps
    rows) gives ``blocked``; a ``failed`` verification reopens the request (``pending``).
    ``erased`` is final: re-runs re-verify and never move it back, except a failed
    physical re-verification. Refused (:class:`LifecycleRefusal`): an unknown phase or
    status, and a purge of a request never logically erased.
    """
    if phase not in PHASES:
        raise LifecycleRefusal(f"unknown phase {phase!r}; use one of {PHASES}")
    if current not in STATUSES:
        raise LifecycleRefusal(f"unknown request status {current!r}; statuses are {STATUSES}")
    if outcome not in (VERIFIED, INCOMPLETE, FAILED, None):
        raise LifecycleRefusal(f"unknown verification outcome {outcome!r}")
    final = current in FINAL_STATUSES
    if phase == PHASE_PURGE and current == STATUS_PENDING:
        raise LifecycleRefusal(
            "a pending request cannot be purged: run phase='logical' first (or phase='full' for both at once)"
        )
    if current == STATUS_REDACTED:
        return STATUS_REDACTED  # final and redacted: nothing moves it (its key is gone)
    if outcome is None:
        return STATUS_ERASED if final else current
    if phase == PHASE_LOGICAL:
        if final or current == STATUS_BLOCKED:
            return STATUS_ERASED if final else current  # a logical run neither undoes a purge nor lifts a hold
        return STATUS_LOGICAL if outcome == VERIFIED else STATUS_PENDING
    if outcome == VERIFIED:
        return STATUS_ERASED
    return STATUS_BLOCKED if outcome == INCOMPLETE else STATUS_PENDING


def combined_status(current: str, per_table: Mapping[str, tuple[str | None, str | None]], scope: Sequence[str]) -> str:
    """Status of a request from its evidence over every table in scope.

    :param per_table: table -> (last phase recorded, its verification) from the evidence.
    """
    if current not in STATUSES:
        raise LifecycleRefusal(f"unknown request status {current!r}; statuses are {STATUSES}")
    if current == STATUS_REDACTED:
        return STATUS_REDACTED
    got = [per_table.get(t, (None, None)) for t in scope]
    outcomes = [o for _, o in got]
    if FAILED in outcomes:
        return STATUS_PENDING
    if INCOMPLETE in outcomes:
        return STATUS_BLOCKED
    if scope and all(o == VERIFIED for o in outcomes):
        if all(p in PHYSICAL_PHASES for p, _ in got):
            return STATUS_ERASED
        return STATUS_LOGICAL
    if current in FINAL_STATUSES:
        return STATUS_ERASED
    return STATUS_PENDING if current != STATUS_LOGICAL else STATUS_LOGICAL


def redacted_key(subject_hash: str) -> str:
    """The value a redacted request's ``subject_key`` holds: ``hmac-sha256:<hex>`` (the evidence hash)."""
    h = str(subject_hash or "")
    if not re.match(r"^[0-9a-f]{64}\Z", h):
        raise ValueError("a redacted key is built from a 64-hex-digit HMAC-SHA256")
    return REDACTED_PREFIX + h


def redaction_plan(
    requests: Iterable[Mapping[str, Any]], evidence: Iterable[Mapping[str, Any]], scope: Sequence[str] | None = None
) -> dict[str, Any]:
    """Which requests' keys to redact, from their statuses and their evidence rows (no key read).

    A request is redacted when its status is erased (``erased`` / ``done``: every table in scope
    verified physically) and the evidence holds ONE salted hash for it; with ``scope``, every table
    of it must have a physical, verified evidence row too (a defence against a status written by
    another scope). Requests with several hashes (the salt changed between runs) or none are left
    as they are and listed under ``unresolved``.

    :param requests: ``request_id``, ``status``.
    :param evidence: ``request_id``, ``table_name``, ``subject_hash``, ``phase``, ``verification``.
    :return: ``{"redact": {request_id: subject_hash}, "unresolved": [request_id]}``.
    """
    by_request: dict[str, list[Mapping[str, Any]]] = {}
    for e in evidence:
        by_request.setdefault(str(e["request_id"]), []).append(e)
    redact: dict[str, str] = {}
    unresolved = []
    for r in requests:
        rid = str(r["request_id"])
        if r.get("status") not in REDACTABLE_STATUSES:
            continue
        rows = by_request.get(rid, [])
        hashes = {str(e["subject_hash"]) for e in rows if e.get("subject_hash")}
        verified = {
            str(e["table_name"])
            for e in rows
            if e.get("verification") == VERIFIED and (e.get("phase") or PHASE_FULL) in PHYSICAL_PHASES
        }
        if len(hashes) != 1 or (scope is not None and not set(scope) <= verified):
            unresolved.append(rid)
            continue
        redact[rid] = hashes.pop()
    return {"redact": redact, "unresolved": sorted(unresolved)}


def merged_phase(old: str | None, new: str) -> str:
    """The phase an evidence row records after a run: a logical re-run never hides a purge."""
    if old in PHYSICAL_PHASES and new == PHASE_LOGICAL:
        return old
    return new


def redact(text: str, secrets: Iterable[str], *, limit: int = 600) -> str:
    """Remove every secret/subject value from an error message, then bound its length."""
    out = str(text)
    for s in sorted({s for s in secrets if s and len(s) >= 2}, key=len, reverse=True):
        if s in out:
            out = out.replace(s, "[redacted]")
    lines = [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    return " | ".join(lines[:3])[:limit]
