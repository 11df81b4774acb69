"""The Airflow side of an erasure job, shared by the erasure operator and the maintenance plan's purge.

:func:`prepare_erasure` resolves the rendered arguments, refuses from metadata before any JVM
starts (nothing changed), and returns the job's parameters (the salt included: they travel
only in the 0600 spec file). :func:`erasure_summary` and :func:`verify_evidence` turn the job's
ledger metrics into the task's result and prove the evidence rows exist. The Spark side runs
the same phases either as the ``erasure`` job or as the first action of a maintenance job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from airflow_iceberg_provider.core import crypto_shred as ck
from airflow_iceberg_provider.core.erasure_lifecycle import (
    PHASE_INPUT_STATUSES,
    PHASE_LOGICAL,
    PHASE_PURGE,
    recorded_originals,
    restore_plan,
)
from airflow_iceberg_provider.core.ref_guard import claims_hold
from airflow_iceberg_provider.exceptions import IcebergCommitVerificationError, IcebergValidationError
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_provider.ids import id_str
from airflow_iceberg_provider.params import TableIdent, validate_name, validate_table
from airflow_iceberg_provider.rules import crypto_shred
from airflow_iceberg_provider.rules.erasure import (
    REQUIRED_REQUEST_COLUMNS,
    bloom_filter_warnings,
    erasure_table_facts,
    evidence_counts,
    purge_candidates,
    refuse_if_problems,
    subject_index_upkeep,
    table_problems,
    validate_ref_policy,
    validate_request_ids,
    validate_salt,
    validate_subject_columns,
    validate_subjects_file,
)
from airflow_iceberg_provider.rules.erasure_retention import CopyRetention, redact_after
from airflow_iceberg_provider.rules.maintenance import preview_table_expiry

DEFAULT_SALT_CONN_ID = "erasure_salt"


class _Log(Protocol):
    """What is logged through: an operator's ``self.log``."""

    def info(self, msg: Any, /, *args: Any) -> Any: ...

    def warning(self, msg: Any, /, *args: Any) -> Any: ...


@dataclass(frozen=True)
class ErasureArgs:
    """The rendered arguments of one erasure (those of :class:`IcebergErasureOperator`)."""

    table: TableIdent
    subject_columns: str | Sequence[str]
    requests_table: str | None = None
    request_ids: Sequence[str] | str | None = None
    request_statuses: Sequence[str] | None = None
    subjects_file: str | None = None
    ref_policy: str = "fail"
    tables_in_scope: Sequence[str] | None = None
    salt_conn_id: str = DEFAULT_SALT_CONN_ID
    redact_erased_requests: bool = True
    redact_after: Any = None


def prepare_erasure(hook: IcebergCatalogHook, args: ErasureArgs, phase: str, log: _Log) -> dict[str, Any]:
    """Resolve the arguments, refuse from metadata (nothing changed); the job's parameters."""
    columns = validate_subject_columns(args.subject_columns)
    policy = validate_ref_policy(args.ref_policy)
    grace = redact_after(args.redact_after)
    scope = _scope(args)
    source = _source(hook, args, phase)
    shred = crypto_shred_target(hook, args.table, columns)
    target = validate_table(shred["key_table"], "key table") if shred else args.table
    if shred:
        columns = [ck.KEY_HASH_COLUMN]
    retention = _preflight(hook, target, columns, phase, log)
    salt = salt_from_connection(args.salt_conn_id)
    hook.governance.table("erasure_evidence")
    restored = restore_switched_properties(hook, target, log)
    log.info(
        "Erasure (%s) of %s (columns %s, source %s, ref_policy=%s)", phase, target, columns, source["kind"], policy
    )
    if shred:
        log.info("%s is crypto-shredded: its subjects' data keys are erased from %s, its rows stay", args.table, target)
    return {
        "crypto_shred": shred,
        "subject_columns": columns,
        "source": source,
        "ref_policy": policy,
        "salt": salt,
        "tables_in_scope": scope,
        "phase": phase,
        "redact_requests": bool(args.redact_erased_requests),
        "redact_after_seconds": grace.total_seconds() if grace is not None else None,
        "copy_retention": retention.to_dict(),
        "properties_restored": restored,
    }


def prepare_index_refresh(hook: IcebergCatalogHook, args: ErasureArgs, log: _Log) -> dict[str, Any]:
    """The job's parameters to bring the subject index up to ``main``'s head, no request erased
    (the maintenance plan's refresh); the same refusals from metadata as an erasure."""
    columns = validate_subject_columns(args.subject_columns)
    _preflight(hook, args.table, columns, PHASE_LOGICAL, log)
    log.info("Subject index of %s (columns %s): brought up to main's head", args.table, columns)
    return {
        "subject_columns": columns,
        "source": {"kind": "none"},
        "ref_policy": validate_ref_policy(args.ref_policy),
        "salt": salt_from_connection(args.salt_conn_id),
        "tables_in_scope": _scope(args),
        "phase": PHASE_PURGE,
        "index_only": True,
        "redact_requests": False,
        "properties_restored": {},
    }


def crypto_shred_target(hook: IcebergCatalogHook, table: TableIdent, columns: list[str]) -> dict[str, Any] | None:
    """The crypto-shred declaration of ``table`` when it has one (its erasure then runs on the key table).

    Refusals (nothing changed): a malformed declaration, subject columns other than the table's
    hash column, a missing or malformed key table.
    """
    tbl = hook.load_table(table)
    types = {f.name: str(f.field_type) for f in tbl.schema().fields}
    shred = crypto_shred.declared(table.dotted, dict(tbl.metadata.properties), types)
    if shred is None:
        return None
    key_types: dict[str, str] | None = None
    key_props: dict[str, str] | None = None
    if hook.table_exists(shred.key_table):
        key_tbl = hook.load_table(shred.key_table)
        key_types = {f.name: str(f.field_type) for f in key_tbl.schema().fields}
        key_props = dict(key_tbl.metadata.properties)
    crypto_shred.erasure_target(shred, columns, key_types, key_props)
    return shred.to_dict()


def restore_switched_properties(hook: IcebergCatalogHook, table: TableIdent, log: _Log) -> dict[str, str | None]:
    """Put back the table properties a killed erasure left switched, in one commit; what was restored.

    An erasure switches live table properties around its DELETEs (the delete mode, manifest
    merging) and records their originals in the same commit
    (:data:`~airflow_iceberg_provider.core.erasure_lifecycle.SWITCHED_PROPERTIES`); a run
    killed before its restore leaves both. The next erasure of the table restores them first and
    reports it (the job's ledger row and the task's result, ``properties_restored_after_kill``).
    Idempotent: nothing to restore, no commit.

    :return: ``{property: value restored}`` (``None``: the property was removed, as it was unset
        before); empty when nothing was switched.
    """
    tbl = hook.load_table(table)
    current = dict(tbl.metadata.properties)
    updates, removals = restore_plan(current)
    if not removals:
        return {}
    if not hook.can_commit(tbl, what="properties"):  # a v3 table pyiceberg cannot commit to: the job restores
        log.warning("%s: an earlier erasure was killed with table properties switched; the job restores them", table)
        return {}
    originals = recorded_originals(current)
    hook.update_table_properties(tbl, updates=updates, removals=removals)
    log.warning(
        "%s: an earlier erasure was killed with table properties switched; restored them to %s "
        "(None: unset, as before that run)",
        table,
        originals,
    )
    return originals


def nothing_to_purge(hook: IcebergCatalogHook, args: ErasureArgs) -> bool:
    """Whether no request of ``args.requests_table`` is logically erased (a purge would have nothing to do)."""
    req = validate_table(args.requests_table, "erasure_purge.requests_table").dotted
    try:
        purge_candidates(hook.governance.erasure_request_states(req), validate_request_ids(args.request_ids))
    except IcebergValidationError:
        return True
    return False


def _source(hook: IcebergCatalogHook, args: ErasureArgs, phase: str) -> dict[str, Any]:
    if args.requests_table is not None:
        req = validate_table(args.requests_table, "requests_table").dotted
        have = set(hook.load_table(req).schema().column_names)
        missing = [c for c in REQUIRED_REQUEST_COLUMNS if c not in have]
        if missing:
            raise IcebergValidationError(
                f"requests_table={req!r} lacks column(s) {missing}; create it with "
                "IcebergCatalogHook().governance.ensure_erasure_requests_table or add the columns."
            )
        statuses = list(args.request_statuses or PHASE_INPUT_STATUSES[phase])
        for i, s in enumerate(statuses):
            validate_name(s, f"request_statuses[{i}]")
        ids = validate_request_ids(args.request_ids)
        if phase == PHASE_PURGE:  # refuse before any JVM: nothing logically erased, nothing to purge
            ids = purge_candidates(hook.governance.erasure_request_states(req), ids)
        return {"kind": "requests_table", "table": req, "request_ids": ids, "statuses": statuses}
    if phase == PHASE_PURGE:
        raise IcebergValidationError(
            "phase='purge' needs requests_table= (the lifecycle state lives there); a subjects_file can be "
            "erased with phase='full'."
        )
    if args.request_ids:
        raise IcebergValidationError("request_ids applies to requests_table only; filter the subjects_file instead.")
    path, fmt = validate_subjects_file(args.subjects_file)
    return {"kind": "file", "path": path, "format": fmt}


def salt_from_connection(salt_conn_id: str) -> str:
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(salt_conn_id)
    except Exception as err:  # any lookup failure: one message says how to define the salt connection
        raise IcebergValidationError(
            f"salt_conn_id={salt_conn_id!r}: the connection does not exist; create one (any type) whose "
            f"password is a random secret of at least 16 characters, e.g. AIRFLOW_CONN_{salt_conn_id.upper()}"
            '=\'{"conn_type": "generic", "password": "..."}\'.'
        ) from err
    salt = validate_salt(conn.password, f"connection {salt_conn_id!r}")
    try:
        from airflow.sdk.log import mask_secret

        mask_secret(salt)
    except ImportError:  # pragma: no cover
        pass
    return salt


def index_upkeep(
    properties: Mapping[str, str], table: str, log: _Log, salt_conn_id: str = DEFAULT_SALT_CONN_ID
) -> dict[str, Any]:
    """Job parameters that keep the subject index current after a provider write or compaction:
    ``{"subject_index": {"salt": ...}}`` when the table declares the index (the salt resolved by
    :func:`salt_from_connection`, as for an erasure, and travelling like it: never on argv), ``{}`` when it does not.
    Without a usable salt the job still runs: a warning names the connection, the index lags."""
    entry, warning = subject_index_upkeep(properties, None, None, salt_conn_id=salt_conn_id, table=table)
    if entry is not None:  # declared: the salt is resolved as for an erasure
        salt: str | None = None
        problem: str | None = None
        try:
            salt = salt_from_connection(salt_conn_id)
        except IcebergValidationError as err:
            problem = str(err)
        entry, warning = subject_index_upkeep(properties, salt, problem, salt_conn_id=salt_conn_id, table=table)
    if warning:
        log.warning("%s", warning)
    return {"subject_index": entry} if entry is not None else {}


def _scope(args: ErasureArgs) -> list[str]:
    scope = [validate_table(t, "tables_in_scope").dotted for t in (args.tables_in_scope or [args.table.dotted])]
    if args.table.dotted not in scope:
        raise IcebergValidationError(f"tables_in_scope={scope} must include table {args.table.dotted!r}.")
    return scope


def _preflight(hook: IcebergCatalogHook, ident: TableIdent, columns: list[str], phase: str, log: _Log) -> CopyRetention:
    """Refusals from metadata (nothing changed) and warnings (bounds, bloom filters); the table's copy retention."""
    tbl = hook.load_table(ident)
    retention = hook.copy_retention(tbl)  # a malformed declaration refuses here, before anything changes
    facts = erasure_table_facts(tbl, hook.data_files(tbl, all_snapshots=True, deletes_only=True))
    problems = table_problems(table=ident.dotted, columns=columns, **facts)
    if phase == PHASE_LOGICAL and facts["format_version"] < 2:
        problems.append(
            f"{ident.dotted} is format-version 1: it has no delete files, so a logical (merge-on-read) erasure "
            "is impossible; use phase='full' or upgrade the table to format-version 2."
        )
    refuse_if_problems(problems)
    if phase != PHASE_LOGICAL:  # its expiry must not drop a legal hold by age: refuses, names the hold
        preview_table_expiry(tbl, retain_last=1)
    for c in columns:
        if facts["properties"].get(f"write.metadata.metrics.column.{c}") != "none":
            log.warning(
                "%s keeps column bounds for subject column %s in its manifests; set the table property "
                "write.metadata.metrics.column.%s=none so future manifests never carry personal values",
                ident,
                c,
                c,
            )
    for warning in bloom_filter_warnings(ident.dotted, columns, facts["properties"]):
        log.warning("%s", warning)
    return retention


def verify_evidence(
    hook: IcebergCatalogHook,
    ident: TableIdent,
    job_run_id: str,
    metrics: Mapping[str, Any],
    summary: dict[str, Any],
    *,
    log: _Log,
) -> None:
    """The job's evidence rows exist (one per request) and the refs it dropped are gone; adds their counts to ``summary``.

    The task's result and log carry counts only: request ids and subject hashes stay in the
    restricted evidence table (and the governance view's erasure pages).
    """
    evidence = hook.governance.read("erasure_evidence", job_run_id=job_run_id)
    if len(evidence) != int(metrics.get("requests", -1)):
        raise IcebergCommitVerificationError(
            f"The erasure job for {ident} reported {metrics.get('requests')} requests but "
            f"{len(evidence)} evidence rows carry its job_run_id {job_run_id}; the evidence is incomplete."
        )
    still_there = sorted(set(metrics.get("refs_dropped") or []) & set(hook.refs(ident)))
    if still_there:
        raise IcebergCommitVerificationError(f"Refs {still_there} of {ident} should have been dropped but exist.")
    holds_dropped = sorted(n for n in metrics.get("refs_dropped") or [] if claims_hold(str(n)))
    if holds_dropped:  # never: the job's drop builder refuses holds (the ref guard)
        raise IcebergCommitVerificationError(
            f"The erasure job for {ident} dropped legal holds {holds_dropped}; a hold is removed only by its "
            "release. Restore the holds (IcebergCreateTagOperator(legal_hold=True, ...)) and investigate."
        )
    summary.update(evidence_counts(evidence))
    unmatched = summary["requests_matching_nothing"]
    if unmatched:
        log.warning(
            "%d erasure request(s) matched no row of %s (rows_found = 0). A typo, or a difference in case or "
            "whitespace? Matching is exact: find them in %s (job_run_id %s, rows_found = 0) or on the governance "
            "view's erasure page, and check their keys.",
            unmatched,
            ident,
            hook.governance.table("erasure_evidence"),
            job_run_id,
        )


def erasure_summary(
    table: str, job_run_id: str, row: Mapping[str, Any], m: Mapping[str, Any], seconds: float, phase: str
) -> dict[str, Any]:
    """The task's result: counts, snapshot ids (strings), refs, verification; hashes only."""

    def iso(ms: Any) -> str | None:
        return datetime.fromtimestamp(int(ms) / 1000, UTC).isoformat() if ms else None

    return {
        "table": table,
        "job_run_id": job_run_id,
        "status": row["status"],
        "requests": int(m.get("requests", 0)),
        "rows_deleted": int(m.get("rows_deleted", 0)),
        "verification": m.get("verification"),
        "snapshot_before": id_str(row.get("snapshot_before")),  # strings: browsers round 64-bit ids
        "snapshot_after": id_str(row.get("snapshot_after")),
        "files_rewritten": int(m.get("files_rewritten", 0)),
        "files_removed": int(m.get("files_removed", 0)),
        "snapshots_expired": int(m.get("snapshots_expired", 0)),
        "refs_dropped": list(m.get("refs_dropped") or []),
        "refs_blocking": list(m.get("refs_blocking") or []),
        "rows_held": int(m.get("held_rows", 0)),
        "time_travel_floor_before": iso(m.get("time_travel_floor_before_ms")),
        "time_travel_floor_after": iso(m.get("time_travel_floor_after_ms")),
        "request_statuses": m.get("request_statuses") or {},
        "phase": phase,
        "files_considered": int(m.get("files_considered", 0)),
        "files_pruned_bounds": int(m.get("files_pruned_bounds", 0)),
        "files_pruned_bloom": int(m.get("files_pruned_bloom", 0)),
        "files_pruned_dictionary": int(m.get("files_pruned_dictionary", 0)),
        "files_raw_read": int(m.get("files_raw_read", 0)),
        "files_index_excluded": int(m.get("logical_files_index_excluded", 0)),
        "files_unindexed": int(m.get("logical_files_unindexed", 0)),
        "subject_index": dict(m.get("subject_index") or {}),
        "snapshots_kept": int(m.get("snapshots_retained", 0)),
        "requests_redacted": int(m.get("requests_redacted", 0)),
        "requests_redaction_waiting": len(m.get("requests_redaction_waiting") or []),
        "redaction_verification": m.get("redaction_verification"),
        "tags_pending_purge": list(m.get("tags_showing_subjects") or []),
        "properties_restored_after_kill": dict(m.get("properties_restored_after_kill") or {}),
        "keys_not_converted": dict(m.get("keys_not_converted") or {}),
        **_crypto_shred_summary(m),
        "seconds": round(seconds, 3),
    }


def _crypto_shred_summary(m: Mapping[str, Any]) -> dict[str, Any]:
    """The crypto-shred part of the task's result: the mode, the key table's purge, the derived table kept."""
    if m.get("erasure_mode") != ck.MODE_CRYPTO_SHRED:
        return {"erasure_mode": ck.MODE_ROWS}
    return {
        "erasure_mode": ck.MODE_CRYPTO_SHRED,
        "key_table": m.get("key_table"),
        "keys_shredded": int(m.get("keys_shredded", 0)),
        "key_files_scanned": int(m.get("key_files_scanned", 0)),
        "key_bytes_found": int(m.get("key_bytes_found", 0)),
        "rows_decrypting": int(m.get("rows_decrypting", 0)),
        "derived_table_rewritten": False,
    }
