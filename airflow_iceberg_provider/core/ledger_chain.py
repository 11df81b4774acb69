"""The tamper-evident governance ledger: row chains, Merkle trees and signed checkpoints.

Standard library only at import time (shipped to the Spark driver with the rest of ``core``);
Ed25519 signing and verification import ``cryptography`` inside the functions that need it.

**Canonical encoding.** A row's canonical form is the compact JSON object of its columns
(``json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)``), UTF-8 encoded, without the hash columns (``prev_hash``, ``entry_hash``)
and with values normalised first:

* ``None`` is encoded by *omitting the key*, so a column added to the table later (``None`` in
  every older row) leaves the older rows' hashes unchanged;
* a timestamp is the string ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` in UTC (microseconds, Iceberg's
  precision; a naive value is taken as UTC); a date is ``YYYY-MM-DD``;
* booleans, integers and strings are JSON's own; a float is Python's shortest round-trip
  ``repr`` (NaN and infinities are refused); a ``Decimal`` is its string.

**Chain.** One chain per governance table, in ``chain_seq`` order from 0:
``entry_hash = SHA-256(prev_hash || canonical(row))`` over the 32 raw bytes of ``prev_hash``
(hex in the table) followed by the canonical bytes; the first row's ``prev_hash`` is
:data:`GENESIS` (32 zero bytes). ``chain_seq`` is one of the hashed columns.

**Merkle tree.** RFC 9162 section 2.1: ``leaf = SHA-256(0x00 || entry_hash)``,
``node = SHA-256(0x01 || left || right)``, the tree over a table's chain in ``chain_seq``
order; inclusion proofs (audit paths) as in RFC 9162 section 2.1.3.

**Checkpoints.** C2SP ``tlog-checkpoint`` notes (origin line, tree size, base64 root hash,
blank line, signature lines ``— <name> <base64(key_id[4] || signature)>``) signed with
Ed25519 as C2SP ``signed-note`` specifies: the signature is over the note text up to and
including the body's final newline, ``key_id = SHA-256(name || 0x0A || 0x01 || public_key)[:4]``,
and the auditor's verifier key is ``<name>+<hex key_id>+<base64(0x01 || public_key)>``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

#: The ``prev_hash`` of the first row of every chain (32 zero bytes, hex).
GENESIS = "0" * 64

#: The columns every governance table carries for its chain.
SEQ_COLUMN = "chain_seq"
PREV_COLUMN = "prev_hash"
HASH_COLUMN = "entry_hash"
CHAIN_COLUMNS = (SEQ_COLUMN, PREV_COLUMN, HASH_COLUMN)

#: Snapshot-summary properties a chained append stamps on its commit: the new chain head,
#: so the next writer finds it without scanning the table.
SUMMARY_HEAD = "airflow-iceberg.chain.head"
SUMMARY_SIZE = "airflow-iceberg.chain.size"
SUMMARY_FRONTIER = "airflow-iceberg.chain.frontier"

#: The signature algorithm byte of an Ed25519 key in C2SP signed-note.
_ED25519 = b"\x01"
_EM_DASH = "\u2014"


# ----------------------------------------------------------------------------- encoding
def _normalise(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a governance row value {value!r} is not a finite number; it cannot be chained.")
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    raise ValueError(f"a governance row value of type {type(value).__name__} has no canonical encoding.")


def normalised(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's values as its canonical encoding writes them (JSON-safe; ``None`` kept)."""
    return {k: _normalise(v) for k, v in row.items()}


def canonical(row: Mapping[str, Any]) -> bytes:
    """The canonical UTF-8 bytes of a governance row (see the module docstring)."""
    body = {k: _normalise(v) for k, v in row.items() if v is not None and k not in (PREV_COLUMN, HASH_COLUMN)}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def _raw(hex_hash: str, what: str) -> bytes:
    try:
        raw = bytes.fromhex(hex_hash)
    except (TypeError, ValueError):
        raw = b""
    if len(raw) != 32:
        raise ValueError(f"{what}={hex_hash!r} is not a SHA-256 hash (64 hex digits).")
    return raw


def entry_hash(prev_hash: str, row: Mapping[str, Any]) -> str:
    """``SHA-256(prev_hash || canonical(row))`` as hex."""
    return hashlib.sha256(_raw(prev_hash, PREV_COLUMN) + canonical(row)).hexdigest()


@dataclass(frozen=True)
class ChainHead:
    """Where a chain ends: how many rows it has, the last row's ``entry_hash`` and the Merkle
    frontier (the roots of the perfect subtrees of :class:`RootStream`, as ``"height:hex"``),
    from which the tree's root at this size follows without reading a row."""

    size: int = 0
    head: str = GENESIS
    frontier: tuple[str, ...] = ()

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any] | None) -> ChainHead | None:
        """The head a chained append stamped on its snapshot, or ``None`` (not a chained commit)."""
        if not summary:
            return None
        size_text, head = summary.get(SUMMARY_SIZE), summary.get(SUMMARY_HEAD)
        frontier = tuple(f for f in str(summary.get(SUMMARY_FRONTIER) or "").split(",") if f)
        try:
            size = int(str(size_text))
            _raw(str(head), SUMMARY_HEAD)
            stream = RootStream.from_frontier(size, frontier)
        except ValueError:
            return None
        return cls(size=size, head=str(head), frontier=stream.frontier())

    def summary(self) -> dict[str, str]:
        return {SUMMARY_HEAD: self.head, SUMMARY_SIZE: str(self.size), SUMMARY_FRONTIER: ",".join(self.frontier)}

    def root(self) -> bytes:
        """The RFC 9162 root of the chain at this size."""
        return RootStream.from_frontier(self.size, self.frontier).root()


def link(rows: Sequence[Mapping[str, Any]], head: ChainHead) -> tuple[list[dict[str, Any]], ChainHead]:
    """``rows`` with ``chain_seq``, ``prev_hash`` and ``entry_hash`` set, continuing ``head``."""
    out, prev, seq = [], head.head, head.size
    stream = RootStream.from_frontier(head.size, head.frontier)
    for row in rows:
        linked = {**row, SEQ_COLUMN: seq, PREV_COLUMN: prev}
        linked[HASH_COLUMN] = prev = entry_hash(prev, linked)
        stream.push(leaf_hash(prev))
        out.append(linked)
        seq += 1
    return out, ChainHead(size=seq, head=prev, frontier=stream.frontier())


def head_of(rows: Iterable[Mapping[str, Any]]) -> ChainHead:
    """The head of the chained rows among ``rows`` (the highest ``chain_seq``); unchained rows are skipped."""
    best: Mapping[str, Any] | None = None
    for row in rows:
        seq = row.get(SEQ_COLUMN)
        if seq is not None and row.get(HASH_COLUMN) and (best is None or seq > best[SEQ_COLUMN]):
            best = row
    if best is None:
        return ChainHead()
    return ChainHead(size=int(best[SEQ_COLUMN]) + 1, head=str(best[HASH_COLUMN]))


# ------------------------------------------------------------------------ Merkle tree
def leaf_hash(entry: str) -> bytes:
    """RFC 9162 leaf hash of a chain entry (its 32-byte ``entry_hash``)."""
    return hashlib.sha256(b"\x00" + _raw(entry, HASH_COLUMN)).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


class RootStream:
    """Merkle tree roots of a growing list of leaves, in O(log n) memory.

    Keeps the roots of the perfect subtrees (largest first); the RFC 9162 root of the
    current size folds them from the smallest.
    """

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[tuple[int, bytes]] = []  # (height, hash)

    def push(self, leaf: bytes) -> None:
        height, value = 0, leaf
        while self._stack and self._stack[-1][0] == height:
            _, left = self._stack.pop()
            value, height = node_hash(left, value), height + 1
        self._stack.append((height, value))
        self.size += 1

    @classmethod
    def from_frontier(cls, size: int, frontier: Sequence[str]) -> RootStream:
        """The stream of a tree of ``size`` leaves from its frontier (:meth:`frontier`);
        :class:`ValueError` when the frontier does not fit the size."""
        stream = cls()
        for item in frontier:
            height, _, value = item.partition(":")
            stream._stack.append((int(height), _raw(value, "frontier hash")))
        heights = [h for h, _ in stream._stack]
        if (
            sum(1 << h for h in heights) != size
            or heights != sorted(heights, reverse=True)
            or len(set(heights)) != len(heights)
        ):
            raise ValueError(f"a Merkle frontier {list(frontier)[:3]} does not describe a tree of {size} leaves.")
        stream.size = size
        return stream

    def frontier(self) -> tuple[str, ...]:
        """The roots of the perfect subtrees, largest first, as ``"height:hex"``."""
        return tuple(f"{h}:{v.hex()}" for h, v in self._stack)

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        acc = self._stack[-1][1]
        for _, value in reversed(self._stack[:-1]):
            acc = node_hash(value, acc)
        return acc


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 9162 ``MTH`` of leaf hashes (already ``leaf_hash``-ed)."""
    stream = RootStream()
    for leaf in leaves:
        stream.push(leaf)
    return stream.root()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


def inclusion_proof(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """RFC 9162 ``PATH(m, D[n])``: the audit path of leaf ``index`` in the tree of ``leaves``."""
    if not 0 <= index < len(leaves):
        raise ValueError(f"leaf index {index} is outside a tree of {len(leaves)} leaves.")
    path: list[bytes] = []
    lo, hi = 0, len(leaves)
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            path.append(merkle_root(leaves[lo + k : hi]))
            hi = lo + k
        else:
            path.append(merkle_root(leaves[lo : lo + k]))
            lo = lo + k
    return list(reversed(path))


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2: whether ``proof`` shows ``leaf`` at ``index`` in the tree of ``size`` with ``root``."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


# ------------------------------------------------------------------------ checkpoints
@dataclass(frozen=True)
class Checkpoint:
    """A parsed ``tlog-checkpoint`` note: its body and its signature lines ``(name, key_id, sig)``."""

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()
    signatures: tuple[tuple[str, bytes, bytes], ...] = ()

    def body(self) -> str:
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode(), *self.extensions]
        return "".join(f"{line}\n" for line in lines)

    def text(self) -> str:
        """The note: the body, and when signed a blank line and one line per signature."""
        if not self.signatures:
            return self.body()
        sig_lines = "".join(
            f"{_EM_DASH} {name} {base64.b64encode(key_id + sig).decode()}\n" for name, key_id, sig in self.signatures
        )
        return f"{self.body()}\n{sig_lines}"


def parse_checkpoint(text: str) -> Checkpoint:
    """Parse a checkpoint note (signed or unsigned); :class:`ValueError` names what is malformed."""
    body, sep, sigs = text.partition("\n\n")
    body += "\n"
    if not sep:
        body = text
    lines = body.split("\n")[:-1]
    if len(lines) < 3 or not body.endswith("\n"):
        raise ValueError("a checkpoint needs an origin line, a tree size line and a root hash line.")
    origin, size_text, root_text, *ext = lines
    if not origin or not size_text.isdigit() or (size_text != "0" and size_text.startswith("0")):
        raise ValueError(f"checkpoint origin {origin!r} / tree size {size_text!r} is malformed.")
    try:
        root = base64.b64decode(root_text, validate=True)
    except ValueError as err:
        raise ValueError(f"checkpoint root hash {root_text!r} is not base64.") from err
    if len(root) != 32:
        raise ValueError(f"checkpoint root hash {root_text!r} is not 32 bytes.")
    signatures = []
    for line in sigs.split("\n") if sep else []:
        if not line:
            continue
        parts = line.split(" ")
        if len(parts) != 3 or parts[0] != _EM_DASH:
            raise ValueError(f"checkpoint signature line {line[:60]!r} is not '\u2014 <name> <base64>'.")
        raw = base64.b64decode(parts[2], validate=True)
        if len(raw) < 5:
            raise ValueError(f"checkpoint signature of {parts[1]!r} is too short.")
        signatures.append((parts[1], raw[:4], raw[4:]))
    return Checkpoint(origin, int(size_text), root, tuple(ext), tuple(signatures))


def key_id(name: str, public_key: bytes) -> bytes:
    """The C2SP signed-note key id of an Ed25519 key: ``SHA-256(name || 0x0A || 0x01 || key)[:4]``."""
    return hashlib.sha256(name.encode() + b"\n" + _ED25519 + public_key).digest()[:4]


def _check_name(name: str) -> str:
    if not name or any(c.isspace() or c == "+" for c in name) or not name.isprintable():
        raise ValueError(
            f"signing key name {name!r} must be non-empty printable text without spaces or '+' "
            "(e.g. 'example.com/governance')."
        )
    return name


def verifier_key(name: str, public_key: bytes) -> str:
    """The auditor's verifier key text ``<name>+<hex key id>+<base64(0x01 || public key)>``."""
    _check_name(name)
    return f"{name}+{key_id(name, public_key).hex()}+{base64.b64encode(_ED25519 + public_key).decode()}"


def parse_verifier_key(text: str) -> tuple[str, bytes]:
    """``(name, 32-byte public key)`` of a verifier key; refuses a key whose id does not match."""
    parts = text.strip().split("+", 2)  # the base64 key may itself hold "+"
    if len(parts) != 3:
        raise ValueError("a verifier key is '<name>+<hex key id>+<base64 key>' on one line.")
    name, hex_id, b64 = parts
    raw = base64.b64decode(b64, validate=True)
    if len(raw) != 33 or raw[:1] != _ED25519:
        raise ValueError(f"verifier key of {name!r} is not an Ed25519 key (0x01 followed by 32 bytes).")
    if key_id(name, raw[1:]).hex() != hex_id.lower():
        raise ValueError(f"verifier key of {name!r}: the key id {hex_id} does not match the key.")
    return name, raw[1:]


def sign_checkpoint(checkpoint: Checkpoint, name: str, private_seed: bytes) -> Checkpoint:
    """The checkpoint with an Ed25519 signature by ``name`` added (``private_seed``: the 32-byte key)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    key = Ed25519PrivateKey.from_private_bytes(private_seed)
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    sig = key.sign(checkpoint.body().encode())
    sigs = (*checkpoint.signatures, (_check_name(name), key_id(name, public), sig))
    return Checkpoint(checkpoint.origin, checkpoint.size, checkpoint.root, checkpoint.extensions, sigs)


def checkpoint_signed_by(checkpoint: Checkpoint, name: str, public_key: bytes) -> bool:
    """Whether a signature line of ``name`` with this key's id verifies over the note body."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    want = key_id(name, public_key)
    key = Ed25519PublicKey.from_public_bytes(public_key)
    for sig_name, kid, sig in checkpoint.signatures:
        if sig_name == name and kid == want:
            try:
                key.verify(sig, checkpoint.body().encode())
                return True
            except InvalidSignature:
                return False
    return False


def public_key_of(private_seed: bytes) -> bytes:
    """The 32-byte Ed25519 public key of a 32-byte private key."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return Ed25519PrivateKey.from_private_bytes(private_seed).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def private_seed_from_text(text: str) -> bytes:
    """A 32-byte Ed25519 private key from base64 (the raw 32 bytes) or an unencrypted PKCS8 PEM."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
            load_pem_private_key,
        )

        key = load_pem_private_key(text.encode(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("the signing key PEM is not an Ed25519 private key.")
        return key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        raise ValueError(
            "the signing key must be the base64 of a 32-byte Ed25519 private key or an unencrypted PKCS8 PEM "
            "(e.g. `openssl genpkey -algorithm ed25519`)."
        )
    return raw


def proof_document(
    *, table: str, row: Mapping[str, Any], index: int, leaves: Sequence[bytes], checkpoint_text: str
) -> dict[str, Any]:
    """What one chained row needs to be verified offline: the row, its entry hash and position,
    the checkpoint covering it and the RFC 9162 audit path from its leaf to that checkpoint's root."""
    size = parse_checkpoint(checkpoint_text).size
    return {
        "table": table,
        "row": normalised(row),
        "entry_hash": row[HASH_COLUMN],
        "prev_hash": row[PREV_COLUMN],
        "leaf_index": index,
        "tree_size": size,
        "inclusion_proof": [base64.b64encode(p).decode() for p in inclusion_proof(index, leaves[:size])],
        "checkpoint": checkpoint_text,
    }
