"""Verification of the governance chains, seals and checkpoints: pure, standard library only.

:mod:`airflow_iceberg_provider.verify` reads the tables from the catalog and hands their rows
here; this module re-walks each chain, checks the seals and every checkpoint, and returns
:class:`Finding` values. A finding names the table, the kind of break, the position in the
chain (``chain_seq``) when there is one and the row's id, so an auditor can look at the row.

Finding kinds (``severity="error"`` unless said):

* ``edited`` — a row's content no longer hashes to its ``entry_hash`` (or a sealed row's
  content changed);
* ``deleted`` — a position of the chain is missing (or a sealed row is gone);
* ``inserted`` — a row that the chain does not link (a duplicate position, a row whose
  successor skips it, or a row written outside the chained writer and never sealed);
* ``reordered`` — a row links to a row that is not its predecessor;
* ``truncated`` — the chain is shorter than a checkpoint says it was;
* ``forged`` — the chain up to a checkpoint's size does not have that checkpoint's root
  (rows rewritten with recomputed hashes);
* ``bad_signature`` — a checkpoint is not signed by the auditor's key (another key, or altered);
* ``unsigned`` — a checkpoint carries no signature (an error when a key is given, a note otherwise);
* ``unchained_history`` (note) — rows written before the chain started in that table.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_iceberg_provider.core import ledger_chain as lc

#: The ledger operation of a seal: a chained event listing the content hashes of rows that
#: another engine (a Spark job) wrote to a governance table, and what each replaced.
SEAL_OPERATION = "governance.seal"

#: The columns naming a row of each governance table (in findings and seals).
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "ledger": ("event_id",),
    "audit_results": ("event_id", "check_name"),
    "erasure_evidence": ("evidence_id",),
}


@dataclass(frozen=True)
class Finding:
    """One thing the verifier found: ``kind`` (see the module docstring), where, and why."""

    table: str
    kind: str
    message: str
    position: int | None = None
    row_id: str | None = None
    severity: str = "error"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def row_key(kind: str, row: Mapping[str, Any]) -> str:
    """The id of a governance row: its key columns joined with ``/``."""
    return "/".join(str(row.get(c)) for c in ROW_KEYS.get(kind, ("event_id",)))


def row_hash(row: Mapping[str, Any]) -> str:
    """SHA-256 of a row's canonical encoding (what a seal records for an unchained row), hex."""
    return hashlib.sha256(lc.canonical({k: v for k, v in row.items() if k not in lc.CHAIN_COLUMNS})).hexdigest()


def table_kind(table: str) -> str:
    return table.rsplit(".", 1)[-1]


@dataclass
class ChainWalk:
    """What walking one table's chain gave: findings, the entry hashes in order, roots by size."""

    findings: list[Finding] = field(default_factory=list)
    entries: list[str] = field(default_factory=list)
    roots: dict[int, bytes] = field(default_factory=dict)
    #: the rows that hashed correctly (the ledger's are where seals come from)
    valid: list[Mapping[str, Any]] = field(default_factory=list)
    #: every chained row in chain order
    rows: list[Mapping[str, Any]] = field(default_factory=list)


def walk_chain(table: str, rows: Iterable[Mapping[str, Any]], sizes: Iterable[int] = ()) -> ChainWalk:
    """Re-walk the chained rows of one table (rows without ``chain_seq`` are left out).

    :param sizes: tree sizes whose Merkle roots to keep (the checkpoints' sizes).
    """
    kind = table_kind(table)
    want = set(sizes)
    chained = sorted((r for r in rows if r.get(lc.SEQ_COLUMN) is not None), key=lambda r: int(r[lc.SEQ_COLUMN]))
    if len({int(r[lc.SEQ_COLUMN]) for r in chained}) != len(chained):
        # two rows claim a position: the one that hashes correctly is the chain's, the other is named
        chained.sort(key=lambda r: (int(r[lc.SEQ_COLUMN]), not _hashes(r)))
    walk = ChainWalk()
    stream = lc.RootStream()
    if 0 in want:
        walk.roots[0] = stream.root()
    known = {str(r.get(lc.HASH_COLUMN)) for r in chained}
    prev_stored, prev_prev, expected = lc.GENESIS, None, 0
    prev_row: Mapping[str, Any] | None = None
    for row in chained:
        seq, rid = int(row[lc.SEQ_COLUMN]), row_key(kind, row)
        stored, prev = str(row.get(lc.HASH_COLUMN)), str(row.get(lc.PREV_COLUMN))
        if seq < expected:
            walk.findings.append(Finding(table, "inserted", f"a second row at position {seq}", seq, rid))
            continue
        if seq > expected:
            missing = f"{expected}" if seq == expected + 1 else f"{expected}-{seq - 1}"
            walk.findings.append(
                Finding(table, "deleted", f"position(s) {missing} missing before row {rid}", expected, rid)
            )
        elif prev != prev_stored:
            if prev_prev is not None and prev == prev_prev and prev_row is not None:
                before = row_key(kind, prev_row)
                walk.findings.append(
                    Finding(
                        table,
                        "inserted",
                        f"row {before} at position {seq - 1} is not linked by its successor",
                        seq - 1,
                        before,
                    )
                )
            elif prev in known:
                walk.findings.append(
                    Finding(table, "reordered", f"row {rid} at position {seq} links to another row", seq, rid)
                )
            else:
                walk.findings.append(
                    Finding(
                        table, "inserted", f"row {rid} at position {seq} does not link to its predecessor", seq, rid
                    )
                )
        if not _hashes(row):
            walk.findings.append(
                Finding(table, "edited", f"row {rid} at position {seq} does not hash to its entry_hash", seq, rid)
            )
        else:
            walk.valid.append(row)
        try:
            stream.push(lc.leaf_hash(stored))
        except ValueError:
            stream.push(hashlib.sha256(b"\x00" + stored.encode()).digest())
        walk.entries.append(stored)
        walk.rows.append(row)
        if stream.size in want:
            walk.roots[stream.size] = stream.root()
        prev_prev, prev_stored, expected, prev_row = prev_stored, stored, seq + 1, row
    return walk


def _hashes(row: Mapping[str, Any]) -> bool:
    try:
        return lc.entry_hash(str(row.get(lc.PREV_COLUMN)), row) == row.get(lc.HASH_COLUMN)
    except ValueError:
        return False


def check_checkpoints(
    table: str,
    walk: ChainWalk,
    notes: Sequence[str],
    *,
    origin: str | None,
    key: tuple[str, bytes] | None,
) -> list[Finding]:
    """Check every checkpoint note of a table against its re-walked chain and the auditor's key."""
    findings: list[Finding] = []
    parsed = []
    for text in notes:
        try:
            parsed.append(lc.parse_checkpoint(text))
        except ValueError as err:
            findings.append(Finding(table, "forged", f"malformed checkpoint: {err}"))
    parsed.sort(key=lambda c: c.size)
    matched = 0
    for cp in parsed:
        label = f"checkpoint of size {cp.size}"
        if origin is not None and cp.origin != origin:
            findings.append(Finding(table, "forged", f"{label} names origin {cp.origin!r}, not {origin!r}"))
        if not cp.signatures:
            findings.append(
                Finding(table, "unsigned", f"{label} carries no signature", severity="error" if key else "note")
            )
        elif key is not None and not lc.checkpoint_signed_by(cp, *key):
            names = ", ".join(s[0] for s in cp.signatures)
            findings.append(
                Finding(table, "bad_signature", f"{label} is not signed by {key[0]!r} (signed by {names})", cp.size)
            )
        if cp.size > len(walk.entries):
            rid = None
            findings.append(
                Finding(
                    table,
                    "truncated",
                    f"the chain has {len(walk.entries)} rows but a {label} covered {cp.size}: "
                    f"rows from position {len(walk.entries)} on are gone",
                    len(walk.entries),
                    rid,
                )
            )
            continue
        if walk.roots.get(cp.size) != cp.root:
            kind = table_kind(table)
            first = walk.rows[matched] if matched < len(walk.rows) else None
            findings.append(
                Finding(
                    table,
                    "forged",
                    f"the chain's first {cp.size} rows do not have the root of the {label}; "
                    f"the rows from position {matched} to {cp.size - 1} were rewritten",
                    matched,
                    row_key(kind, first) if first is not None else None,
                )
            )
        else:
            matched = cp.size
    return findings


@dataclass
class SealState:
    """What the chained seal events say each table's unchained rows are: key -> latest hash."""

    expected: dict[str, dict[str, str]] = field(default_factory=dict)
    replaced: dict[str, int] = field(default_factory=dict)


def seals_from(ledger_rows: Iterable[Mapping[str, Any]]) -> SealState:
    """The seal state from the ledger's valid chained rows (in chain order)."""
    state = SealState()
    for row in sorted(ledger_rows, key=lambda r: int(r[lc.SEQ_COLUMN])):
        if row.get("operation") != SEAL_OPERATION:
            continue
        details = row.get("details")
        details = json.loads(details) if isinstance(details, str) and details else details or {}
        for table, entries in (details.get("tables") or {}).items():
            exp = state.expected.setdefault(table, {})
            for e in entries:
                if e.get("replaces"):
                    state.replaced[table] = state.replaced.get(table, 0) + 1
                exp[str(e["key"])] = str(e["hash"])
    return state


def check_sealed(table: str, rows: Iterable[Mapping[str, Any]], seals: SealState, *, chained: bool) -> list[Finding]:
    """Unchained rows of a table against the seals: each must be sealed with its current hash."""
    kind = table_kind(table)
    expected = seals.expected.get(table, {})
    unchained = [r for r in rows if r.get(lc.SEQ_COLUMN) is None]
    findings: list[Finding] = []
    if not expected and not chained:
        if unchained:
            findings.append(
                Finding(
                    table,
                    "unchained_history",
                    f"{len(unchained)} rows written before the chain started",
                    severity="note",
                )
            )
        return findings
    seen: set[str] = set()
    for row in unchained:
        rid = row_key(kind, row)
        want = expected.get(rid)
        if want is None:
            findings.append(Finding(table, "inserted", f"row {rid} is neither chained nor sealed", None, rid))
        elif want != row_hash(row):
            findings.append(
                Finding(table, "edited", f"row {rid} differs from the content its seal recorded", None, rid)
            )
        if want is not None:
            seen.add(rid)
    for rid in sorted(set(expected) - seen):
        findings.append(Finding(table, "deleted", f"sealed row {rid} is gone", None, rid))
    return findings


def summarise(findings: Sequence[Finding]) -> dict[str, Any]:
    """Counts by kind, and whether anything other than a note was found."""
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.kind] = counts.get(f.kind, 0) + 1
    return {"ok": not any(f.severity == "error" for f in findings), "counts": counts}


def _seal_lists(seal_row: Mapping[str, Any], table: str, key: str, digest: str) -> bool:
    details = seal_row.get("details")
    details = json.loads(details) if isinstance(details, str) and details else details or {}
    return any(e.get("key") == key and e.get("hash") == digest for e in (details.get("tables") or {}).get(table, []))


def row_proof(
    table: str,
    row: Mapping[str, Any],
    chain_rows: Sequence[Mapping[str, Any]],
    checkpoint_notes: Iterable[str],
    *,
    ledger_rows: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any] | None:
    """The offline proof of one governance row, or ``None`` when no checkpoint covers it yet.

    A chained row is proved by its own inclusion in its table's chain (``chain_rows``: that
    table's rows). A sealed row (written by a Spark job) is proved through the newest seal
    event listing its current content hash: the seal is a chained ledger row (``ledger_rows``)
    and the proof carries the sealed row, its hash and the seal's inclusion proof.
    """
    kind = table_kind(table)
    if row.get(lc.SEQ_COLUMN) is not None:
        target_table, target, rows = table, row, chain_rows
    else:
        key, digest = row_key(kind, row), row_hash(row)
        seals = [
            r
            for r in ledger_rows
            if r.get("operation") == SEAL_OPERATION
            and r.get(lc.SEQ_COLUMN) is not None
            and _seal_lists(r, table, key, digest)
        ]
        if not seals:
            return None
        target = max(seals, key=lambda r: int(r[lc.SEQ_COLUMN]))
        target_table, rows = f"{table.rsplit('.', 1)[0]}.ledger", ledger_rows
    ordered = sorted((r for r in rows if r.get(lc.SEQ_COLUMN) is not None), key=lambda r: int(r[lc.SEQ_COLUMN]))
    leaves = [lc.leaf_hash(str(r[lc.HASH_COLUMN])) for r in ordered]
    index = int(target[lc.SEQ_COLUMN])
    covering = []
    for note in checkpoint_notes:
        try:
            cp = lc.parse_checkpoint(note)
        except ValueError:
            continue
        if cp.origin.endswith(f"/{target_table}") and index < cp.size <= len(leaves):
            covering.append((cp.size, note))
    if not covering:
        return None
    doc = lc.proof_document(
        table=target_table, row=target, index=index, leaves=leaves, checkpoint_text=max(covering)[1]
    )
    if target is not row:
        doc["sealed"] = {"table": table, "key": row_key(kind, row), "hash": row_hash(row), "row": lc.normalised(row)}
    return doc


def verify_proof(doc: Mapping[str, Any], key: tuple[str, bytes] | None) -> list[str]:
    """Problems with one offline proof document (:func:`row_proof`); empty when it verifies."""
    import base64

    problems: list[str] = []
    sealed = doc.get("sealed")
    if sealed:
        if row_hash(dict(sealed.get("row") or {})) != sealed.get("hash"):
            problems.append(f"the sealed row {sealed.get('key')} does not hash to its recorded hash: it was altered")
        if not _seal_lists(
            dict(doc.get("row") or {}), str(sealed.get("table")), str(sealed.get("key")), str(sealed.get("hash"))
        ):
            problems.append(f"the seal event does not list row {sealed.get('key')} with that hash")
    row = dict(doc.get("row") or {})
    try:
        recomputed = lc.entry_hash(str(doc.get("prev_hash")), row)
    except ValueError as err:
        return [f"the row cannot be hashed: {err}"]
    if recomputed != doc.get("entry_hash") or row.get(lc.HASH_COLUMN) not in (None, recomputed):
        problems.append("the row does not hash to its entry_hash: it was altered")
    try:
        cp = lc.parse_checkpoint(str(doc.get("checkpoint")))
    except ValueError as err:
        return [*problems, f"the checkpoint is malformed: {err}"]
    if key is not None and not cp.signatures:
        problems.append(f"the checkpoint is unsigned; one signed by {key[0]!r} was expected")
    elif key is not None and not lc.checkpoint_signed_by(cp, *key):
        problems.append(f"the checkpoint is not signed by {key[0]!r}")
    proof = [base64.b64decode(p) for p in doc.get("inclusion_proof") or []]
    index = int(doc.get("leaf_index", -1))
    if cp.size != int(doc.get("tree_size", -1)) or not lc.verify_inclusion(
        index, cp.size, lc.leaf_hash(recomputed), proof, cp.root
    ):
        problems.append(f"the inclusion proof does not lead from leaf {index} to the checkpoint's root")
    return problems
