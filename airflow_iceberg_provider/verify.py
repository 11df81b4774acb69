"""The offline verifier of the governance ledger, for an auditor: pyiceberg only, no Airflow.

Reads every governance table's chain from the catalog, re-walks it, checks the seals of rows
other engines wrote and every checkpoint (signature and Merkle root), and names the first
broken row of each kind::

    python -m airflow_iceberg_provider.verify --catalog-uri sqlite:////lake/catalog.db \\
        --warehouse file:///lake/warehouse --public-key governance.vkey [--json report.json]

    python -m airflow_iceberg_provider.verify --evidence report.json --public-key governance.vkey

The exit code is 0 when nothing but notes was found, 1 on any finding, 2 when the verifier
could not run (bad arguments, unreachable catalog). See ``docs/trust-model.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_iceberg_provider.core import ledger_chain as lc
from airflow_iceberg_provider.core import ledger_verify as lv
from airflow_iceberg_provider.core.governance import (
    CHECKPOINTS,
    DEFAULT_GOVERNANCE_NAMESPACE,
    GOVERNANCE_TABLES,
)


def load_public_key(text: str, name: str | None = None) -> tuple[str, bytes]:
    """``(key name, public key)`` from a verifier key line, or from a PEM public key and ``name``."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat, load_pem_public_key

        key = load_pem_public_key(text.encode())
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("the public key PEM is not an Ed25519 key.")
        if not name:
            raise ValueError("a PEM public key needs --key-name (the name the checkpoints are signed with).")
        return name, key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return lc.parse_verifier_key(text)


def verify_tables(
    tables: Mapping[str, Sequence[Mapping[str, Any]]],
    checkpoints: Sequence[Mapping[str, Any]],
    *,
    catalog_name: str | None,
    key: tuple[str, bytes] | None,
) -> list[lv.Finding]:
    """Findings over every governance table's rows (``{"ns.table": rows}``) and the checkpoint rows."""
    findings: list[lv.Finding] = []
    notes: dict[str, list[str]] = {}
    for cp in checkpoints:
        notes.setdefault(str(cp.get("table_name")), []).append(str(cp.get("checkpoint")))
    walks: dict[str, lv.ChainWalk] = {}
    for name, rows in tables.items():
        sizes = [lc.parse_checkpoint(n).size for n in notes.get(name, []) if _parses(n)]
        walks[name] = walk = lv.walk_chain(name, rows, sizes)
        findings += walk.findings
        origin = f"{catalog_name}/{name}" if catalog_name else None
        findings += lv.check_checkpoints(name, walk, notes.get(name, []), origin=origin, key=key)
    ledger = next((w for n, w in walks.items() if lv.table_kind(n) == "ledger"), None)
    seals = lv.seals_from(ledger.valid if ledger else [])
    for name, rows in tables.items():
        findings += lv.check_sealed(name, rows, seals, chained=bool(walks[name].entries))
    for name in sorted(set(notes) - set(tables)):
        findings.append(lv.Finding(name, "deleted", "checkpoints exist for a governance table that is gone"))
    return findings


def _parses(note: str) -> bool:
    try:
        lc.parse_checkpoint(note)
        return True
    except ValueError:
        return False


def read_catalog(catalog: Any, namespace: str) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Rows of every governance table of ``namespace`` and of its checkpoints table (missing ones skipped)."""
    from pyiceberg.exceptions import NoSuchTableError

    tables: dict[str, list[dict[str, Any]]] = {}
    for kind in GOVERNANCE_TABLES:
        name = f"{namespace}.{kind}"
        try:
            tables[name] = catalog.load_table(name).scan().to_arrow().to_pylist()
        except NoSuchTableError:
            continue
    try:
        checkpoints = catalog.load_table(f"{namespace}.{CHECKPOINTS.name}").scan().to_arrow().to_pylist()
    except NoSuchTableError:
        checkpoints = []
    return tables, checkpoints


def _catalog(args: argparse.Namespace) -> Any:
    from pyiceberg.catalog import load_catalog

    props: dict[str, str] = {"uri": args.catalog_uri}
    if args.warehouse:
        props["warehouse"] = args.warehouse
    props["type"] = "rest" if args.catalog_uri.startswith(("http://", "https://")) else "sql"
    for item in args.property or []:
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"--property {item!r} must be key=value.")
        props[k] = v
    return load_catalog(args.catalog_name, **props)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m airflow_iceberg_provider.verify",
        description="Verify the governance ledger's chains, seals and signed checkpoints (no Airflow needed).",
    )
    p.add_argument(
        "--catalog-uri", help="pyiceberg catalog URI (sqlite:///..., postgresql+psycopg2://..., https://...)"
    )
    p.add_argument("--warehouse", help="warehouse location of the catalog")
    p.add_argument("--catalog-name", default="iceberg", help="catalog name as the provider's connection names it")
    p.add_argument("--namespace", default=DEFAULT_GOVERNANCE_NAMESPACE, help="governance namespace")
    p.add_argument("--property", action="append", help="extra pyiceberg catalog property key=value (repeatable)")
    p.add_argument("--public-key", help="file with the signer's verifier key (name+id+key) or PEM public key")
    p.add_argument("--key-name", help="the signing key's name, for a PEM public key")
    p.add_argument(
        "--checkpoint",
        action="append",
        help="a checkpoint note kept outside the catalog (one note per file; repeatable): checked like the catalog's",
    )
    p.add_argument("--evidence", help="verify one proof document (an erasure evidence report's proof) offline")
    p.add_argument("--json", dest="json_out", help="write the report as JSON to this file ('-' for stdout)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the verifier; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        key = None
        if args.public_key:
            with open(args.public_key, encoding="utf-8") as fh:
                key = load_public_key(fh.read(), args.key_name)
        if args.evidence:
            with open(args.evidence, encoding="utf-8") as fh:
                doc = json.load(fh)
            # an evidence report carries "proofs" (one per table); a single proof document also works
            proofs = doc["proofs"] if "proofs" in doc else [doc.get("proof", doc)]
            problems = [p for proof in proofs for p in lv.verify_proof(proof, key)]
            if not proofs:
                problems.append("the document carries no proof (no checkpoint covered its rows when it was made)")
            report: dict[str, Any] = {
                "ok": not problems,
                "proofs": len(proofs),
                "problems": problems,
                "signature_checked": key is not None,
            }
            _emit(report, args.json_out, [f"PROBLEM {p}" for p in problems] or ["proof verifies"])
            return 0 if report["ok"] else 1
        if not args.catalog_uri:
            parser.error("--catalog-uri is required unless --evidence is given")
        catalog = _catalog(args)
    except (OSError, ValueError) as err:
        print(f"verify: {err}", file=sys.stderr)
        return 2
    try:
        kept = [_kept_checkpoint(path) for path in args.checkpoint or []]
    except (OSError, ValueError) as err:
        print(f"verify: {err}", file=sys.stderr)
        return 2
    return run(catalog, args.namespace, catalog_name=args.catalog_name, key=key, json_out=args.json_out, kept=kept)


def _kept_checkpoint(path: str) -> dict[str, Any]:
    """A checkpoint an auditor archived, as a checkpoints-table row (its table from the origin line)."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    origin = lc.parse_checkpoint(text).origin
    if "/" not in origin:
        raise ValueError(f"checkpoint {path}: origin {origin!r} is not '<catalog>/<namespace.table>'.")
    return {"table_name": origin.split("/", 1)[1], "checkpoint": text}


def run(
    catalog: Any,
    namespace: str,
    *,
    catalog_name: str,
    key: tuple[str, bytes] | None,
    json_out: str | None,
    kept: Sequence[Mapping[str, Any]] = (),
) -> int:
    """Verify the governance tables of ``namespace`` in a pyiceberg catalog, print the findings
    (and write the JSON report); returns the exit code (0 clean, 1 findings).

    :param kept: checkpoints kept outside the catalog (``--checkpoint``), checked with the catalog's:
        a checkpoint removed from the catalog still proves its rows.
    """
    tables, in_catalog = read_catalog(catalog, namespace)
    checkpoints: list[Mapping[str, Any]] = [*in_catalog, *kept]
    findings = verify_tables(tables, checkpoints, catalog_name=catalog_name, key=key)
    summary = lv.summarise(findings)
    report = {
        **summary,
        "tables": {n: len(r) for n, r in tables.items()},
        "checkpoints": len(checkpoints),
        "signature_checked": key is not None,
        "findings": [f.to_dict() for f in findings],
    }
    lines = [
        f"{f.severity.upper()} {f.kind} {f.table}"
        + (f" position {f.position}" if f.position is not None else "")
        + (f" row {f.row_id}" if f.row_id else "")
        + f": {f.message}"
        for f in findings
    ]
    if key is None:
        lines.append("NOTE no --public-key given: checkpoint signatures were not checked")
    lines.append(
        ("OK" if summary["ok"] else "FAILED")
        + f": {sum(report['tables'].values())} rows in {len(tables)} tables, {len(checkpoints)} checkpoints"
    )
    _emit(report, json_out, lines)
    return 0 if summary["ok"] else 1


def _emit(report: Mapping[str, Any], json_out: str | None, lines: list[str]) -> None:
    if json_out == "-":
        print(json.dumps(report, indent=2, default=str))
        return
    if json_out:
        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, default=str)
    for line in lines:
        print(line)


if __name__ == "__main__":
    sys.exit(main())
