"""The erasure lifecycle: request statuses and phases, ref analysis, outcomes, evidence ids, HMAC.

The rules both sides of an erasure apply: :mod:`airflow_iceberg_provider.rules.erasure` and the
erasure operators (Airflow side) validate, plan and report with them, and the ``erasure`` Spark
job (``spark_jobs/erasure*.py``, which builds the SQL) records with them, so a status, a phase
or an evidence id means the same on both sides. Stdlib only, no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from airflow_iceberg_provider.core.ref_guard import claims_hold

#: Ref policies: what to do with tags/branches that would keep the subjects reachable.
REF_POLICIES = ("fail", "drop", "keep")
#: Verification outcomes recorded in the evidence table.
VERIFIED, INCOMPLETE, FAILED = "verified", "incomplete", "failed"
#: Request statuses written back to the requests table (lifecycle: pending -> logically_erased -> erased;
#: blocked when a hold keeps rows).
#: ``redacted``: erased on every table in scope, and the request's own subject key replaced by its salted
#: hash (the requests table's history purged too); final, never reopened.
STATUS_PENDING, STATUS_LOGICAL, STATUS_ERASED, STATUS_BLOCKED = "pending", "logically_erased", "erased", "blocked"
STATUS_REDACTED = "redacted"
FINAL_STATUSES = (STATUS_ERASED, STATUS_REDACTED)
STATUSES = (STATUS_PENDING, STATUS_LOGICAL, STATUS_ERASED, STATUS_BLOCKED, STATUS_REDACTED)
#: Erased requests whose key may be redacted (``redacted`` ones already are).
REDACTABLE_STATUSES = (STATUS_ERASED,)
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
_HMAC_BLOCK = 64


# ------------------------------------------------------------------------ HMAC
def hmac_pads(salt: bytes) -> tuple[bytes, bytes]:
    """Inner and outer HMAC-SHA256 key pads, so Spark can compute HMAC with ``sha2``.

    ``HMAC(K, m) = H((K' ^ opad) || H((K' ^ ipad) || m))`` with ``K'`` the key
    (hashed when longer than the block) zero-padded to 64 bytes.
    """
    key = hashlib.sha256(salt).digest() if len(salt) > _HMAC_BLOCK else salt
    key = key.ljust(_HMAC_BLOCK, b"\x00")
    return bytes(b ^ 0x36 for b in key), bytes(b ^ 0x5C for b in key)


def hmac_digest(salt: bytes, value: str) -> bytes:
    """HMAC-SHA256 of a subject key (or of a subject column's value, as text) under the erasure salt."""
    return hmac.new(salt, value.encode("utf-8"), hashlib.sha256).digest()


def hmac_hex(salt: bytes, value: str) -> str:
    """Reference HMAC-SHA256 (hex) of a subject key; equals the Spark computation."""
    return hmac_digest(salt, value).hex()


class KeyedHasher:
    """:func:`hmac_digest` of many values under one salt, the key schedule computed once
    (the subject index hashes every value of a subject column)."""

    def __init__(self, salt: bytes) -> None:
        self._base = hmac.new(salt, digestmod=hashlib.sha256)

    def digest(self, value: object) -> bytes:
        h = self._base.copy()
        h.update(str(value).encode("utf-8"))
        return h.digest()

    def mac(self, data: bytes) -> bytes:
        """HMAC-SHA256 of raw bytes (the subject index seals its content with it)."""
        h = self._base.copy()
        h.update(data)
        return h.digest()


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
        legal = claims_hold(name)  # a hold turned into a branch is still a hold: never droppable
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


def erased_moment(request: Mapping[str, Any], evidence: Iterable[Mapping[str, Any]]) -> Any:
    """When a request was erased: its ``completed_at``, else the latest ``purged_at`` (or ``finished_at``)
    of its evidence rows; ``None`` when neither is known."""
    if request.get("completed_at") is not None:
        return request["completed_at"]
    moments = [e.get("purged_at") or e.get("finished_at") for e in evidence]
    known = [m for m in moments if m is not None]
    return max(known) if known else None


def redaction_plan(
    requests: Iterable[Mapping[str, Any]],
    evidence: Iterable[Mapping[str, Any]],
    scope: Sequence[str] | None = None,
    *,
    erased_before: Any = None,
) -> dict[str, Any]:
    """Which requests' keys to redact, from their statuses and their evidence rows (no key read).

    A request is redacted when its status is ``erased`` (every table in scope verified
    physically) and the evidence holds ONE salted hash for it; with ``scope``, every table
    of it must have a physical, verified evidence row too (a defence against a status written by
    another scope). Requests with several hashes (the salt changed between runs) or none are left
    as they are and listed under ``unresolved``. With ``erased_before`` (the end of a grace period:
    now minus ``redact_after``), a request erased after it (:func:`erased_moment`) keeps its key for
    now and is listed under ``waiting``; one whose erasure moment is unknown is redacted.

    :param requests: ``request_id``, ``status`` (and ``completed_at`` when the table has it).
    :param evidence: ``request_id``, ``table_name``, ``subject_hash``, ``phase``, ``verification``
        (and ``purged_at`` / ``finished_at`` for the grace period).
    :param erased_before: a timezone-aware datetime, or ``None`` (no grace period).
    :return: ``{"redact": {request_id: subject_hash}, "unresolved": [request_id], "waiting": [request_id]}``.
    """
    by_request: dict[str, list[Mapping[str, Any]]] = {}
    for e in evidence:
        by_request.setdefault(str(e["request_id"]), []).append(e)
    redact: dict[str, str] = {}
    unresolved = []
    waiting = []
    for r in requests:
        rid = str(r["request_id"])
        if r.get("status") not in REDACTABLE_STATUSES:
            continue
        rows = by_request.get(rid, [])
        erased_at = erased_moment(r, rows) if erased_before is not None else None
        if erased_at is not None and erased_at > erased_before:
            waiting.append(rid)
            continue
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
    return {"redact": redact, "unresolved": sorted(unresolved), "waiting": sorted(waiting)}


def merged_phase(old: str | None, new: str) -> str:
    """The phase an evidence row records after a run: a logical re-run never hides a purge."""
    if old in PHYSICAL_PHASES and new == PHASE_LOGICAL:
        return old
    return new


# ------------------------------------------------------------ switched table properties
#: Table property recording, while an erasure has live table properties switched (the delete mode
#: and manifest merging of its DELETEs), their values before the switch (JSON; ``null`` = unset).
#: Set in the same commit as the switch and removed by the restore: a run killed in between leaves
#: it, and the next erasure of the table restores those values first (:func:`restore_plan`).
SWITCHED_PROPERTIES = "airflow-iceberg.erasure.switched-properties"


def switch_plan(current: Mapping[str, str], wanted: Mapping[str, str]) -> dict[str, str]:
    """The properties to set (one commit) to switch ``wanted`` on, the record of the originals included.

    A key already recorded (an earlier switch of the same run, or of a killed one) keeps its
    recorded original: the record always holds the values from before any erasure touched them.

    >>> switch_plan({"write.delete.mode": "merge-on-read"}, {"write.delete.mode": "copy-on-write"})
    {'write.delete.mode': 'copy-on-write', 'airflow-iceberg.erasure.switched-properties': '{"write.delete.mode": "merge-on-read"}'}
    """
    originals = recorded_originals(current)
    for key in wanted:
        originals.setdefault(key, current.get(key))
    return {**dict(wanted), SWITCHED_PROPERTIES: json.dumps(originals, sort_keys=True)}


def recorded_originals(current: Mapping[str, str]) -> dict[str, str | None]:
    """The originals recorded by :func:`switch_plan` (empty when no switch is in force)."""
    raw = current.get(SWITCHED_PROPERTIES)
    if not raw:
        return {}
    try:
        doc = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(doc, dict):
        return {}
    return {str(k): (None if v is None else str(v)) for k, v in doc.items()}


def restore_plan(current: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """``(properties to set, properties to remove)`` that put the recorded originals back and drop the
    record; ``({}, [])`` when nothing is switched. Idempotent: applying it twice changes nothing more.

    >>> restore_plan({"write.delete.mode": "copy-on-write",
    ...               SWITCHED_PROPERTIES: '{"write.delete.mode": null, "commit.manifest-merge.enabled": "true"}'})
    ({'commit.manifest-merge.enabled': 'true'}, ['write.delete.mode', 'airflow-iceberg.erasure.switched-properties'])
    """
    if SWITCHED_PROPERTIES not in current:
        return {}, []
    originals = recorded_originals(current)
    to_set = {k: v for k, v in sorted(originals.items()) if v is not None and current.get(k) != v}
    to_remove = [k for k, v in sorted(originals.items()) if v is None and k in current]
    return to_set, [*to_remove, SWITCHED_PROPERTIES]
