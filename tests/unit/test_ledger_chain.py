"""The governance chain's pure parts: canonical encoding, links, RFC 9162 Merkle tree, C2SP notes."""

from __future__ import annotations

import base64
import hashlib
from datetime import UTC, datetime, timedelta, timezone

import pytest

from airflow_iceberg_provider.core import ledger_chain as lc
from airflow_iceberg_provider.core import ledger_verify as lv

# RFC 6962 / RFC 9162 test data (the Certificate Transparency reference implementations' vectors)
RFC_LEAVES = [
    b"",
    b"\x00",
    b"\x10",
    b"\x20\x21",
    b"\x30\x31",
    b"\x40\x41\x42\x43",
    bytes(range(0x50, 0x58)),
    bytes(range(0x60, 0x70)),
]
RFC_ROOTS = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]

# golang.org/x/mod/sumdb/note's test key and signed note (C2SP signed-note)
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
GO_SIG = "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="

SEED = bytes(range(32))
OTHER_SEED = bytes(range(1, 33))


def _leaves(n: int) -> list[bytes]:
    return [hashlib.sha256(b"\x00" + d).digest() for d in RFC_LEAVES[:n]]


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 9162 section 2.1.1 taken literally (recursive), as the oracle."""
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return lc.node_hash(_mth(leaves[:k]), _mth(leaves[k:]))


# ------------------------------------------------------------------------- encoding
def test_canonical_is_sorted_compact_utf8_with_none_omitted_and_utc_microseconds():
    row = {
        "b": "é",
        "a": 1,
        "none": None,
        "ts": datetime(2026, 1, 2, 4, 4, 5, 6, tzinfo=timezone(timedelta(hours=1))),
        "flag": True,
        "x": 0.1,
        "entry_hash": "ignored",
        "prev_hash": "ignored",
    }
    assert lc.canonical(row) == '{"a":1,"b":"é","flag":true,"ts":"2026-01-02T03:04:05.000006Z","x":0.1}'.encode()


def test_a_column_added_later_leaves_older_hashes_unchanged():
    assert lc.entry_hash(lc.GENESIS, {"a": 1}) == lc.entry_hash(lc.GENESIS, {"a": 1, "new_column": None})


def test_naive_timestamps_are_taken_as_utc():
    aware = datetime(2026, 1, 1, 12, tzinfo=UTC)
    assert lc.canonical({"t": aware}) == lc.canonical({"t": aware.replace(tzinfo=None)})


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), object()])
def test_values_without_a_canonical_form_are_refused(bad):
    with pytest.raises(ValueError, match="canonical|finite"):
        lc.canonical({"v": bad})


def test_entry_hash_is_sha256_of_prev_bytes_then_canonical():
    prev = "ab" * 32
    row = {"event_id": "e1", "chain_seq": 3}
    assert lc.entry_hash(prev, row) == hashlib.sha256(bytes.fromhex(prev) + lc.canonical(row)).hexdigest()
    with pytest.raises(ValueError, match="prev_hash"):
        lc.entry_hash("not-hex", row)


def test_link_continues_a_head_and_every_field_is_covered():
    rows, head = lc.link([{"a": 1}, {"a": 2}], lc.ChainHead())
    assert [r["chain_seq"] for r in rows] == [0, 1]
    assert rows[0]["prev_hash"] == lc.GENESIS and rows[1]["prev_hash"] == rows[0]["entry_hash"]
    assert (head.size, head.head) == (2, rows[1]["entry_hash"])
    more, head2 = lc.link([{"a": 3}], head)
    assert more[0]["chain_seq"] == 2 and more[0]["prev_hash"] == head.head
    # any change of a value (or of the position) changes the hash
    assert lc.entry_hash(rows[0]["prev_hash"], {**rows[0], "a": 9}) != rows[0]["entry_hash"]
    assert lc.entry_hash(rows[0]["prev_hash"], {**rows[0], "chain_seq": 5}) != rows[0]["entry_hash"]


def test_head_round_trips_through_the_snapshot_summary_and_ignores_junk():
    _, head = lc.link([{"a": i} for i in range(7)], lc.ChainHead())
    assert lc.ChainHead.from_summary(head.summary()) == head
    assert lc.ChainHead.from_summary({**head.summary(), lc.SUMMARY_SIZE: "8"}) is None  # frontier of 7, not 8
    assert lc.ChainHead.from_summary({"operation": "append"}) is None
    assert lc.ChainHead.from_summary({lc.SUMMARY_HEAD: "zz", lc.SUMMARY_SIZE: "1"}) is None
    assert lc.head_of([{"chain_seq": None}, {"chain_seq": 0, "entry_hash": "aa" * 32}]) == lc.ChainHead(1, "aa" * 32)


# ------------------------------------------------------------------------ Merkle tree
@pytest.mark.parametrize("n", range(1, 9))
def test_merkle_root_matches_the_rfc_vectors(n):
    assert lc.merkle_root(_leaves(n)).hex() == RFC_ROOTS[n - 1]


def test_empty_tree_root_is_sha256_of_nothing():
    assert lc.merkle_root([]) == hashlib.sha256(b"").digest()


def test_root_stream_agrees_with_the_recursive_definition_at_every_size():
    leaves = [hashlib.sha256(bytes([i])).digest() for i in range(70)]
    stream = lc.RootStream()
    for i, leaf in enumerate(leaves, start=1):
        stream.push(leaf)
        assert stream.root() == _mth(leaves[:i])


def test_the_head_carries_the_merkle_root_across_appends():
    rows, head = lc.link([{"a": i} for i in range(5)], lc.ChainHead())
    more, head = lc.link([{"a": i} for i in range(5, 19)], lc.ChainHead.from_summary(head.summary()) or head)
    leaves = [lc.leaf_hash(r["entry_hash"]) for r in rows + more]
    assert head.size == 19 and head.root() == lc.merkle_root(leaves) == _mth(leaves)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 8, 13, 33])
def test_every_inclusion_proof_verifies_and_a_wrong_one_does_not(size):
    leaves = [hashlib.sha256(bytes([i])).digest() for i in range(size)]
    root = lc.merkle_root(leaves)
    for i in range(size):
        proof = lc.inclusion_proof(i, leaves)
        assert lc.verify_inclusion(i, size, leaves[i], proof, root)
        assert not lc.verify_inclusion(i, size, hashlib.sha256(b"x").digest(), proof, root)
        if size > 1:
            assert not lc.verify_inclusion((i + 1) % size, size, leaves[i], proof, root)


def test_inclusion_proof_shape_matches_rfc_path_for_leaf_0_of_7():
    leaves = _leaves(7)
    # PATH(0, D[7]) = PATH(0, D[0:4]) : MTH(D[4:7]) = [d1, MTH(D[2:4]), MTH(D[4:7])]
    assert lc.inclusion_proof(0, leaves) == [leaves[1], _mth(leaves[2:4]), _mth(leaves[4:7])]
    with pytest.raises(ValueError, match="outside"):
        lc.inclusion_proof(7, leaves)


# ------------------------------------------------------------------------ checkpoints
def test_key_id_and_signature_agree_with_the_go_note_package():
    name, public = lc.parse_verifier_key(GO_VKEY)
    assert name == "PeterNeumann"
    raw = base64.b64decode(GO_SIG)
    assert raw[:4] == lc.key_id(name, public) == bytes.fromhex("c74f20a3")
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    Ed25519PublicKey.from_public_bytes(public).verify(raw[4:], GO_TEXT.encode())  # raises if wrong


def test_verifier_key_round_trips_and_a_wrong_key_id_is_refused():
    public = lc.public_key_of(SEED)
    vkey = lc.verifier_key("example.com/gov", public)
    assert lc.parse_verifier_key(vkey) == ("example.com/gov", public)
    name, kid, b64 = vkey.split("+", 2)
    with pytest.raises(ValueError, match="does not match"):
        lc.parse_verifier_key(f"{name}+00000000+{b64}")
    with pytest.raises(ValueError, match="spaces"):
        lc.verifier_key("two words", public)


def test_checkpoint_text_is_the_tlog_checkpoint_format():
    root = hashlib.sha256(b"r").digest()
    cp = lc.sign_checkpoint(lc.Checkpoint("lake/governance.ledger", 12, root), "gov", SEED)
    text = cp.text()
    body, sig = text.split("\n\n")
    assert body == f"lake/governance.ledger\n12\n{base64.b64encode(root).decode()}"
    assert sig.startswith("\u2014 gov ") and sig.endswith("\n")
    raw = base64.b64decode(sig.split(" ")[2])
    assert raw[:4] == lc.key_id("gov", lc.public_key_of(SEED)) and len(raw) == 68
    parsed = lc.parse_checkpoint(text)
    assert parsed == cp and parsed.text() == text
    assert lc.checkpoint_signed_by(parsed, "gov", lc.public_key_of(SEED))
    assert not lc.checkpoint_signed_by(parsed, "gov", lc.public_key_of(OTHER_SEED))


def test_an_altered_checkpoint_no_longer_verifies():
    cp = lc.sign_checkpoint(lc.Checkpoint("o", 3, hashlib.sha256(b"r").digest()), "gov", SEED)
    altered = lc.parse_checkpoint(cp.text().replace("\n3\n", "\n4\n", 1))
    assert altered.size == 4
    assert not lc.checkpoint_signed_by(altered, "gov", lc.public_key_of(SEED))


@pytest.mark.parametrize(
    "text",
    [
        "",
        "origin\n",
        "origin\n01\nAAAA\n",
        "origin\n1\nnot base64!\n",
        "o\n1\n" + base64.b64encode(b"x").decode() + "\n",
    ],
)
def test_malformed_checkpoints_are_refused(text):
    with pytest.raises(ValueError, match="checkpoint"):
        lc.parse_checkpoint(text)


def test_private_keys_from_base64_or_pem_and_nothing_else():
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

    pem = Ed25519PrivateKey.from_private_bytes(SEED).private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    assert lc.private_seed_from_text(pem.decode()) == SEED
    assert lc.private_seed_from_text(base64.b64encode(SEED).decode()) == SEED
    with pytest.raises(ValueError, match="32-byte Ed25519"):
        lc.private_seed_from_text("hunter2")


# ------------------------------------------------------------------ pure verification
def _chain(n: int) -> list[dict]:
    rows, _ = lc.link(
        [{"event_id": f"e{i}", "operation": "op", "status": "succeeded"} for i in range(n)], lc.ChainHead()
    )
    return rows


def _kinds(findings):
    return {(f.kind, f.position) for f in findings}


def test_an_untouched_chain_walks_clean_and_keeps_the_checkpoint_roots():
    rows = _chain(9)
    walk = lv.walk_chain("governance.ledger", rows, sizes=[4, 9])
    assert walk.findings == []
    leaves = [lc.leaf_hash(r["entry_hash"]) for r in rows]
    assert walk.roots == {4: lc.merkle_root(leaves[:4]), 9: lc.merkle_root(leaves)}


def test_the_walk_names_each_kind_of_break():
    rows = _chain(6)
    edited = [dict(r) for r in rows]
    edited[2]["status"] = "failed"
    assert _kinds(lv.walk_chain("g.ledger", edited).findings) == {("edited", 2)}
    deleted = rows[:3] + rows[4:]
    assert ("deleted", 3) in _kinds(lv.walk_chain("g.ledger", deleted).findings)
    swapped = [dict(r) for r in rows]
    swapped[2]["chain_seq"], swapped[3]["chain_seq"] = 3, 2
    found = lv.walk_chain("g.ledger", swapped).findings
    assert found[0].kind == "reordered" and found[0].position == 2 and found[0].row_id == "e3"
    dup = [*rows, {**rows[1], "event_id": "forged"}]
    assert ("inserted", 1) in _kinds(lv.walk_chain("g.ledger", dup).findings)


def test_checkpoints_catch_truncation_rewrites_and_other_keys():
    rows = _chain(5)
    walk = lv.walk_chain("g.ledger", rows, sizes=[3, 5])
    good3 = lc.sign_checkpoint(lc.Checkpoint("cat/g.ledger", 3, walk.roots[3]), "gov", SEED).text()
    good5 = lc.sign_checkpoint(lc.Checkpoint("cat/g.ledger", 5, walk.roots[5]), "gov", SEED).text()
    key = ("gov", lc.public_key_of(SEED))
    assert lv.check_checkpoints("g.ledger", walk, [good3, good5], origin="cat/g.ledger", key=key) == []
    short = lv.walk_chain("g.ledger", rows[:4], sizes=[3, 5])
    found = lv.check_checkpoints("g.ledger", short, [good3, good5], origin="cat/g.ledger", key=key)
    assert [(f.kind, f.position) for f in found] == [("truncated", 4)]
    other = lc.sign_checkpoint(lc.Checkpoint("cat/g.ledger", 5, walk.roots[5]), "gov", OTHER_SEED).text()
    found = lv.check_checkpoints("g.ledger", walk, [other], origin="cat/g.ledger", key=key)
    assert [f.kind for f in found] == ["bad_signature"]
    unsigned = lc.Checkpoint("cat/g.ledger", 5, walk.roots[5]).text()
    assert [f.severity for f in lv.check_checkpoints("g.ledger", walk, [unsigned], origin=None, key=None)] == ["note"]
    assert [f.kind for f in lv.check_checkpoints("g.ledger", walk, [unsigned], origin=None, key=key)] == ["unsigned"]


def test_a_proof_document_verifies_offline_and_an_altered_row_does_not():
    rows = _chain(11)
    leaves = [lc.leaf_hash(r["entry_hash"]) for r in rows]
    cp = lc.sign_checkpoint(lc.Checkpoint("o", 11, lc.merkle_root(leaves)), "gov", SEED).text()
    doc = lc.proof_document(table="g.ledger", row=rows[6], index=6, leaves=leaves, checkpoint_text=cp)
    key = ("gov", lc.public_key_of(SEED))
    assert lv.verify_proof(doc, key) == []
    altered = {**doc, "row": {**doc["row"], "status": "failed"}}
    assert any("altered" in p for p in lv.verify_proof(altered, key))
    assert any("not signed" in p for p in lv.verify_proof(doc, ("gov", lc.public_key_of(OTHER_SEED))))
