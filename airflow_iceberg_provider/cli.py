"""``airflow iceberg-governance``: the ledger verifier and the signing key's public half, from Airflow.

Registered through ``get_provider_info()["cli"]`` (Airflow 3.3 loads provider CLI commands from
there). The commands read the catalog through the provider's connection; an auditor without
Airflow runs the same verification with ``python -m airflow_iceberg_provider.verify``.
"""

from __future__ import annotations

import sys
from typing import Any


def get_cli_commands() -> list[Any]:
    """The provider's CLI command group (Airflow's ``CLICommand`` values)."""
    from airflow.cli.cli_config import ActionCommand, Arg, GroupCommand, lazy_load_command

    conn = Arg(("--conn-id",), help="the catalog connection", default="iceberg_catalog_default")
    key = Arg(("--public-key",), help="file with the signer's verifier key (name+id+key) or PEM public key")
    key_name = Arg(("--key-name",), help="the signing key's name, for a PEM public key")
    json_out = Arg(("--json",), dest="json_out", help="write the JSON report to this file ('-' for stdout)")
    return [
        GroupCommand(
            name="iceberg-governance",
            help="Verify the governance ledger of an Iceberg catalog connection",
            subcommands=(
                ActionCommand(
                    name="verify",
                    help="Re-walk every governance chain and check its seals and signed checkpoints",
                    func=lazy_load_command("airflow_iceberg_provider.cli.verify_command"),
                    args=(conn, key, key_name, json_out),
                ),
                ActionCommand(
                    name="public-key",
                    help="Print the verifier key of the checkpoint signing connection (hand it to auditors)",
                    func=lazy_load_command("airflow_iceberg_provider.cli.public_key_command"),
                    args=(conn,),
                ),
            ),
        )
    ]


def verify_command(args: Any) -> None:
    """``airflow iceberg-governance verify``: exits non-zero on any finding."""
    from airflow_iceberg_provider import verify
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook(args.conn_id)
    key = None
    if args.public_key:
        with open(args.public_key, encoding="utf-8") as fh:
            key = verify.load_public_key(fh.read(), args.key_name)
    rc = verify.run(
        hook.catalog, hook.governance_namespace, catalog_name=hook.catalog_name, key=key, json_out=args.json_out
    )
    if rc:
        sys.exit(rc)


def public_key_command(args: Any) -> None:
    """``airflow iceberg-governance public-key``: the verifier key line, or exit 1 when no key is configured."""
    from airflow_iceberg_provider.core import ledger_chain as lc
    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook(args.conn_id)
    signer = hook.governance.signing_key()
    if signer is None:
        print(f"no signing connection {hook.signing_conn_id!r}: checkpoints are written unsigned", file=sys.stderr)
        sys.exit(1)
    print(lc.verifier_key(signer[0], lc.public_key_of(signer[1])))
