"""Erasure rules as pure functions: validation, salted hashing, ref analysis, deadlines.

Nothing here touches a catalog, Spark or the network, so every rule is unit-tested
in milliseconds. The lifecycle the Spark job shares (statuses, phases, ref analysis,
HMAC, evidence ids) is :mod:`airflow_iceberg_provider.core.erasure_lifecycle`.

Subjects (customer ids, e-mails…) are personal data: they never appear in argv,
logs, XCom, ledger or evidence rows. Evidence carries only
``HMAC-SHA256(salt, subject_key)``; the salt lives in an Airflow connection (or
secret backend) and never next to the evidence, so a hash can be recomputed by
someone holding the salt and a subject ("was this person erased?") but not reversed
by someone holding the evidence.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow_iceberg_provider.core.erasure_columns import subject_column_problems
from airflow_iceberg_provider.core.erasure_lifecycle import (
    FINAL_STATUSES,
    PHASE_INPUT_STATUSES,
    PHASE_PURGE,
    PHASES,
    REF_POLICIES,
    STATUS_BLOCKED,
    STATUS_PENDING,
    STATUS_REDACTED,
    STATUSES,
    hmac_hex,
)
from airflow_iceberg_provider.core.subject_index import DEFAULT_FPP as DEFAULT_INDEX_FPP
from airflow_iceberg_provider.core.subject_index import (
    FILE_SUFFIX,
    FPP_PROPERTY,
    INDEX_PROPERTY,
    check_fpp,
    index_lag,
    index_settings,
)
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.params import validate_name
from airflow_iceberg_provider.rules.format_version import FORMAT_VERSIONS

__all__ = [
    "new_request_rows",
    "bloom_filter_warnings",
    "deadline_report",
    "erasure_ready_properties",
    "SUBJECT_COLUMNS_PREFIX",
    "declared_subject_columns",
    "discover_subject_tables",
    "erasure_mapping",
    "subject_column_map",
    "subject_columns_property",
    "validate_subject_kind",
    "purge_candidates",
    "validate_deadlines",
    "validate_phase",
    "REQUESTS_COLUMNS",
    "SUBJECT_FILE_FORMATS",
    "overdue_requests",
    "subject_hash",
    "subject_index_lag",
    "subject_index_upkeep",
    "table_problems",
    "validate_ref_policy",
    "validate_request_ids",
    "validate_salt",
    "evidence_counts",
    "validate_subject_columns",
    "validate_subjects_file",
]

#: Columns of an erasure requests table (``request_id``, ``subject_key``, ``status`` are required
#: by the operator; ``received_at`` by the deadline sensor).
REQUESTS_COLUMNS = {
    "request_id": "string not null",
    "subject_key": "string",
    "received_at": "timestamptz",
    "status": "string",
    "updated_at": "timestamptz",
    "completed_at": "timestamptz",
}
REQUIRED_REQUEST_COLUMNS = ("request_id", "subject_key", "status")
SUBJECT_FILE_FORMATS = {".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv", ".parquet": "parquet"}
MIN_SALT_LENGTH = 16
_REQUEST_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}\Z")


def subject_hash(salt: str | bytes, subject_key: str) -> str:
    """``HMAC-SHA256(salt, subject_key)`` in hex — what the evidence table stores."""
    key = salt.encode("utf-8") if isinstance(salt, str) else salt
    return hmac_hex(key, str(subject_key))


def validate_ref_policy(value: object) -> str:
    if value not in REF_POLICIES:
        raise IcebergValidationError(
            f"ref_policy={value!r} is not supported; use 'fail' (refuse when a tag/branch keeps the subjects "
            "reachable), 'drop' (remove such refs) or 'keep' (erase the rest, record the erasure incomplete)."
        )
    return str(value)


def validate_subject_columns(value: object) -> list[str]:
    """A column name or a non-empty list of names (rows matching ANY of them are erased)."""
    cols = [value] if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else None
    if not cols:
        raise IcebergValidationError(
            f"subject_columns={value!r} is invalid; pass the column holding the subject key, e.g. "
            "'customer_id', or a list such as ['customer_id', 'referrer_id']."
        )
    for i, c in enumerate(cols):
        validate_name(c, f"subject_columns[{i}]")
    if len(set(cols)) != len(cols):
        raise IcebergValidationError(f"subject_columns={cols!r} lists a column twice; list each once.")
    return cols


def validate_request_ids(value: object) -> list[str] | None:
    """Optional explicit request ids (not personal data: opaque ticket ids)."""
    if value in (None, "", []):
        return None
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)):
        raise IcebergValidationError(f"request_ids={type(value).__name__} is invalid; pass a list of request ids.")
    out = []
    for i, v in enumerate(value):
        if not isinstance(v, str) or not _REQUEST_ID.match(v):
            raise IcebergValidationError(
                f"request_ids[{i}] is not a valid request id; ids match [A-Za-z0-9_.:-]{{1,128}} (opaque ticket "
                "ids — never pass subject values such as e-mails as request ids)."
            )
        out.append(v)
    return out


def new_request_rows(
    requests: object, *, received_at: datetime, known: Iterable[str] = (), redacted: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Rows to append to an erasure requests table for ``{request_id: subject_key}`` (status
    ``pending``), skipping ids already in the table (``known``) so that a re-run adds nothing.

    An id in ``redacted`` (a request erased everywhere whose key was then replaced by its hash) is
    refused: the request is closed for good, and silently skipping it would hide that a new
    request from the same person needs a new id.

    Request ids are opaque ticket ids (``[A-Za-z0-9_.:-]{1,128}``); a subject key must be a
    non-empty string and is taken exactly as given (matching is exact: no trimming, no case
    folding). Errors name the request id, never the subject key.
    """
    if not isinstance(requests, Mapping) or not requests:
        raise IcebergValidationError(
            "requests must be a non-empty mapping {request_id: subject_key}; pass e.g. {'REQ-1': '<subject key>'}."
        )
    ids = validate_request_ids(list(requests)) or []
    for rid in ids:
        key = requests[rid]
        if not isinstance(key, str) or not key:
            raise IcebergValidationError(
                f"requests[{rid!r}] has no subject key (got {type(key).__name__}); pass the subject's key as a "
                "non-empty string, exactly as it is stored in the subject columns."
            )
    closed = sorted(set(ids) & set(redacted))
    if closed:
        raise IcebergValidationError(
            f"requests {closed} were erased on every table in scope and their subject keys redacted (status "
            f"'{STATUS_REDACTED}'); a request id is never reopened. Submit the new request under a new request id "
            "(nothing was added)."
        )
    if received_at.tzinfo is None:
        raise IcebergValidationError("received_at has no time zone; pass an aware datetime, e.g. in UTC.")
    seen = set(known)
    return [
        {
            "request_id": rid,
            "subject_key": requests[rid],
            "received_at": received_at,
            "status": "pending",
            "updated_at": None,
            "completed_at": None,
        }
        for rid in ids
        if rid not in seen
    ]


def validate_subjects_file(path: object) -> tuple[str, str]:
    """Check an explicit subject file (exists, known format, not world-readable); return (path, format).

    The file is never opened here: Spark reads it. Columns: ``request_id``, ``subject_key``.
    """
    if not isinstance(path, str) or not path:
        raise IcebergValidationError("subjects_file must be a path string.")
    p = Path(path)
    fmt = SUBJECT_FILE_FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise IcebergValidationError(
            f"subjects_file has extension {p.suffix!r}; use one of {sorted(SUBJECT_FILE_FORMATS)} "
            "(columns request_id and subject_key)."
        )
    if "://" in path:
        return path, fmt  # object storage: access is governed by the store's policy
    if not p.is_file():
        raise IcebergValidationError(f"subjects_file {path!r} does not exist or is not a file.")
    mode = os.stat(p).st_mode
    if mode & stat.S_IROTH or mode & stat.S_IWOTH:
        raise IcebergValidationError(
            f"subjects_file {path!r} is world-readable or world-writable; it holds personal data. Run "
            f"`chmod 600 {path}` (or 640 for a service group) and retry."
        )
    return str(p.resolve()), fmt


def validate_salt(salt: object, source: str) -> str:
    if not isinstance(salt, str) or len(salt) < MIN_SALT_LENGTH:
        raise IcebergValidationError(
            f"The erasure salt from {source} is missing or shorter than {MIN_SALT_LENGTH} characters; store a "
            "random secret (e.g. `python -c 'import secrets; print(secrets.token_hex(32))'`) as the password of "
            "that connection. It must stay stable: evidence hashes are only comparable under the same salt."
        )
    return salt


def erasure_table_facts(tbl: Any, delete_files: Iterable[Any]) -> dict[str, Any]:
    """What :func:`table_problems` needs, from a loaded table's metadata and its delete files.

    ``partition_fields`` covers every partition spec the table ever had (old files keep
    their spec and their paths); ``equality_delete_files`` counts the equality-delete files
    among ``delete_files`` (the catalog hook's ``data_files(tbl, all_snapshots=True,
    deletes_only=True)``: every manifest of every snapshot still in the metadata).

    :param tbl: a pyiceberg table as loaded by the catalog hook (only its metadata is read).
    """
    meta = tbl.metadata
    schema = tbl.schema()
    names = {f.field_id: f.name for f in schema.fields}
    partition_fields = [
        (names.get(pf.source_id, f"#{pf.source_id}"), str(pf.transform))
        for spec in meta.partition_specs
        for pf in spec.fields
    ]
    return {
        "schema_fields": {f.name: str(f.field_type) for f in schema.fields},
        "partition_fields": partition_fields,
        "properties": dict(meta.properties),
        "format_version": meta.format_version,
        "equality_delete_files": sum(f.content == "equality_deletes" for f in delete_files),
    }


def table_problems(
    *,
    table: str,
    columns: Sequence[str],
    schema_fields: Mapping[str, str],
    partition_fields: Iterable[tuple[str, str]],
    properties: Mapping[str, str],
    format_version: int,
    equality_delete_files: int,
) -> list[str]:
    """Reasons the table cannot be erased safely (empty list: go ahead).

    :param schema_fields: column name -> type name (``string``, ``long``...).
    :param partition_fields: ``(source column, transform)`` for every field of every
        partition spec the table ever had (old files keep their spec and paths).
    """
    problems = subject_column_problems(table, columns, schema_fields)
    for source, transform in partition_fields:
        if source in columns and (transform == "identity" or transform.startswith("truncate")):
            problems.append(
                f"{table} is partitioned by {transform}({source}): the subject value (or its prefix) is part of "
                "data file paths and partition metadata, which a row delete cannot erase. Repartition the table "
                "(e.g. bucket[N] on the column or no partitioning) and rewrite it before erasure."
            )
    if format_version not in FORMAT_VERSIONS:
        problems.append(
            f"{table} is format-version {format_version}; this provider erases format-version "
            f"{', '.join(str(v) for v in FORMAT_VERSIONS)} tables."
        )
    file_format = properties.get("write.format.default", "parquet").lower()
    if file_format != "parquet":
        problems.append(
            f"{table} writes {file_format} data files (write.format.default); the independent verification "
            "reads parquet only."
        )
    if properties.get("gc.enabled", "true").lower() == "false":
        problems.append(
            f"{table} has gc.enabled=false: expire_snapshots cannot delete the old files that still hold the "
            "subjects. Set gc.enabled=true (only if no other table shares its files)."
        )
    try:
        index_settings(properties)
    except ValueError as err:
        problems.append(f"{table}: {err}.")
    if equality_delete_files:
        problems.append(
            f"{table} has {equality_delete_files} equality-delete file(s) in its history; they contain the "
            "deleted keys themselves. Compact them away (rewrite_data_files, then expire_snapshots) first."
        )
    return problems


def refuse_if_problems(problems: Sequence[str]) -> None:
    if problems:
        raise IcebergRefusedError("Erasure refused, nothing was changed: " + " ".join(problems))


def overdue_requests(rows: Iterable[Mapping[str, Any]], *, now: datetime, deadline: timedelta) -> list[dict[str, Any]]:
    """Requests not erased whose ``received_at`` is older than ``now - deadline`` (oldest first)."""
    limit = now - deadline
    out = [
        {"request_id": r["request_id"], "received_at": r["received_at"], "status": r.get("status")}
        for r in rows
        if r.get("status") not in FINAL_STATUSES and r.get("received_at") is not None and r["received_at"] < limit
    ]
    return sorted(out, key=lambda r: r["received_at"])


# ------------------------------------------------------------------ phases
def validate_phase(value: object) -> str:
    if value not in PHASES:
        raise IcebergValidationError(
            f"phase={value!r} is not an erasure phase; use 'logical' (merge-on-read delete on every ref, hours), "
            "'purge' (physical removal of every logically erased request of the table, one job) or 'full' (both "
            "in one run, the default)."
        )
    return str(value)


def purge_candidates(states: Iterable[Mapping[str, Any]], request_ids: Sequence[str] | None = None) -> list[str]:
    """Request ids a purge would take (logically erased, or blocked by a hold), or refuse.

    :raises IcebergValidationError: when there is none (the table is not touched).
    """
    wanted = set(request_ids) if request_ids else None
    ids = sorted(
        str(r["request_id"])
        for r in states
        if r.get("status") in PHASE_INPUT_STATUSES[PHASE_PURGE] and (wanted is None or r["request_id"] in wanted)
    )
    if not ids:
        scope = f"request_ids={sorted(wanted)}" if wanted else "the requests table"
        raise IcebergValidationError(
            f"phase='purge' found no logically erased request in {scope}: nothing to purge. Run phase='logical' "
            "first (the daily erasure), or phase='full' to delete and purge in one run."
        )
    return ids


def validate_deadlines(logical_hours: object, physical_days: object) -> tuple[timedelta, timedelta]:
    """(logical, physical) deadlines; the logical one (hours) may not be longer than the physical one (days)."""

    def num(v: object) -> float:
        try:
            return -1.0 if isinstance(v, bool) else float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return -1.0

    days, hours = num(physical_days), num(logical_hours)
    if not 0 < days <= 36500:  # also refuses NaN and infinity
        raise IcebergValidationError(
            f"deadline_days={physical_days!r} is invalid; pass a positive number of days, at most 36500 (30 for "
            "PIPEDA / Law 25; GDPR allows one month)."
        )
    if not 0 < hours <= 36500 * 24:
        raise IcebergValidationError(
            f"logical_deadline_hours={logical_hours!r} is invalid; pass a positive number of hours (e.g. 24)."
        )
    if hours > days * 24:
        raise IcebergValidationError(
            f"logical_deadline_hours={logical_hours!r} is longer than the physical deadline deadline_days="
            f"{physical_days!r} ({days * 24:g} hours); the logical erasure must come first: lower "
            "logical_deadline_hours or raise deadline_days."
        )
    return timedelta(hours=hours), timedelta(days=days)


def deadline_report(
    rows: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    logical: timedelta,
    physical: timedelta,
    warn_fraction: float = 0.8,
    copy_retention: timedelta = timedelta(0),
) -> dict[str, list[dict[str, Any]]]:
    """Requests past (``*_overdue``) or near (``*_at_risk``: more than ``warn_fraction`` of the
    time used) their logical deadline (not yet logically erased) or physical deadline (not erased).

    The physical deadline applies to every copy. With ``copy_retention`` (how long object-store
    versions and backups keep erased bytes, :mod:`~airflow_iceberg_provider.rules.erasure_retention`),
    a request must be unreachable from its tables by ``received_at + physical - copy_retention``:
    that is its ``due_at``. An erased request whose copies outlive the legal deadline (erased at
    ``completed_at`` = T, ``T + copy_retention > received_at + physical``) is ``physical_overdue``
    with ``copies_late`` until its copies are gone (``gone_from_copies_by``).
    """
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in ("logical_overdue", "logical_at_risk")}
    out.update({k: [] for k in ("physical_overdue", "physical_at_risk")})
    unreachable_by = physical - copy_retention
    for r in rows:
        status, received = r.get("status"), r.get("received_at")
        if received is None:
            continue
        item = {"request_id": r["request_id"], "received_at": received, "status": status}
        if status in FINAL_STATUSES:
            erased = r.get("completed_at")
            gone = erased + copy_retention if erased is not None and copy_retention else None
            if gone is not None and gone > received + physical and now < gone:
                due = received + physical
                out["physical_overdue"].append(
                    {**item, "due_at": due, "copies_late": True, "gone_from_copies_by": gone}
                )
            continue
        age = now - received
        checks = [("physical", unreachable_by)]
        if status in (STATUS_PENDING, STATUS_BLOCKED) or status not in STATUSES:
            checks.append(("logical", logical))
        for name, limit in checks:
            due_item = {**item, "due_at": received + limit}
            if age > limit:
                out[f"{name}_overdue"].append(due_item)
            elif age > limit * warn_fraction:
                out[f"{name}_at_risk"].append(due_item)
    for v in out.values():
        v.sort(key=lambda r: r["received_at"])
    return out


# ------------------------------------------------------- erasure-ready tables
def erasure_ready_properties(
    columns: str | Sequence[str],
    *,
    fpp: float = 0.01,
    keep_bounds: bool = False,
    kind: str | None = None,
    subject_index: bool = False,
    index_fpp: float = DEFAULT_INDEX_FPP,
    parquet_bloom_filters: bool = True,
) -> dict[str, str]:
    """Table properties that make erasure read only the files that can hold a subject.

    With ``kind`` (e.g. ``customer_id``, ``email``), the table also declares that these columns hold
    that kind of subject key (``erasure.subject-columns.<kind>=<col>[,<col>...]``), so that a
    catalog-wide erasure (:class:`IcebergErasureDiscoveryOperator`) finds it.

    * a Parquet bloom filter on every subject column (``write.parquet.bloom-filter-enabled.column.<c>``
      and its false-positive rate): analysis and verification skip files whose filters prove
      absence;
    * ``write.metadata.metrics.column.<c>=none`` unless ``keep_bounds``: manifests then never
      carry personal values as column bounds (pruning relies on the bloom filters). Keep
      bounds (``full``, exact) for sorted numeric keys, where they prune for free.
    * with ``subject_index``, the subject index (``airflow-iceberg.erasure.subject-index``): keyed
      fingerprints of every data file's subject values under the erasure salt, kept beside the
      table as a Puffin statistics file, so the logical phase opens only the files it names and
      those written since it was updated. With the index, ``parquet_bloom_filters=False`` drops
      the Parquet bloom filters: anyone who can read a data file can test a value against its
      bloom filter, and nobody without the salt can test one against the index. Files the index
      does not cover are then raw-read (a file is skipped only on a proof).

    Pass them to ``IcebergCreateTableOperator(properties=...)`` or ``ALTER TABLE ... SET TBLPROPERTIES``
    (files written before keep no filter until rewritten).

    :param columns: the subject columns (a name, a comma-separated string or a list).
    :param fpp: the bloom filters' false-positive rate, between 0 and 1 (default 0.01).
    :param keep_bounds: keep the columns' min/max bounds in the manifests (default ``False``).
    :param kind: the kind of subject key the columns hold (e.g. ``customer_id``), declared for a
        catalog-wide erasure; ``None`` declares nothing.
    :param subject_index: keep the subject index (default ``False``).
    :param index_fpp: the index's false-positive rate per key and data file (default one in a million).
    :param parquet_bloom_filters: write Parquet bloom filters on the subject columns (default ``True``);
        ``False`` needs ``subject_index=True``.
    :raises IcebergValidationError: a column name or ``fpp`` is invalid.
    """
    cols = validate_subject_columns(columns)
    if not 0 < float(fpp) < 1:
        raise IcebergValidationError(f"fpp={fpp!r} is invalid; pass a false-positive rate between 0 and 1, e.g. 0.01.")
    if not parquet_bloom_filters and not subject_index:
        raise IcebergValidationError(
            "parquet_bloom_filters=False without subject_index=True leaves erasure no proof but raw reads of "
            "every file; pass subject_index=True (the keyed index replaces the bloom filters) or keep the filters."
        )
    try:
        index_fpp = check_fpp(index_fpp, "index_fpp")
    except ValueError as err:
        raise IcebergValidationError(str(err)) from None
    props = {subject_columns_property(kind): ",".join(cols)} if kind is not None else {}
    for c in cols:
        if parquet_bloom_filters:
            props[f"write.parquet.bloom-filter-enabled.column.{c}"] = "true"
            props[f"write.parquet.bloom-filter-fpp.column.{c}"] = str(float(fpp))
        else:
            props[f"write.parquet.bloom-filter-enabled.column.{c}"] = "false"
        props[f"write.metadata.metrics.column.{c}"] = "full" if keep_bounds else "none"
    if subject_index:
        props[INDEX_PROPERTY] = "true"
        props[FPP_PROPERTY] = repr(index_fpp)
    return props


def subject_index_upkeep(
    properties: Mapping[str, str], salt: str | None, problem: str | None, *, salt_conn_id: str, table: str
) -> tuple[dict[str, Any] | None, str | None]:
    """What a provider write or compaction job receives to keep the subject index current, and the
    warning to log: ``(None, None)`` when the table does not declare the index; the spec entry
    ``{"salt": ...}`` when it does and the salt resolved; ``{"salt": None, "reason": ...}`` and a
    warning naming the setting when it did not (the write goes on; the index lags, and the next
    erasure or the maintenance plan's refresh catches up). A malformed flag warns the same way.

    :param salt: the erasure salt as resolved from ``salt_conn_id`` (``None`` when it could not be).
    :param problem: why it could not be resolved.
    """
    try:
        on = index_settings(properties)[0]
    except ValueError as err:
        return None, f"{table}: {err}; the subject index is not updated by this job."
    if not on:
        return None, None
    if salt:
        return {"salt": salt}, None
    reason = f"no erasure salt: connection {salt_conn_id!r} is missing or invalid"
    return {"salt": None, "reason": reason}, (
        f"{table} declares the subject index ({INDEX_PROPERTY}=true) but {reason} ({problem}); this job "
        f"leaves the index lagging. Define the connection {salt_conn_id!r} (its password is the erasure salt) "
        "so writes and compactions keep the index current."
    )


def subject_index_lag(tbl: Any, ref: str = "main") -> int | None:
    """Data files on ``ref``'s lineage the subject index does not cover, from a loaded table's
    metadata (``None``: the table has no index on that lineage; ``0``: current). Only tables with
    ``airflow-iceberg.erasure.subject-index=true`` are asked; others answer ``0``.

    :param tbl: a pyiceberg table as loaded by the catalog hook (only its metadata is read).
    :param ref: the branch whose head is asked (default ``main``; a WAP branch before its publish).
    """
    meta = tbl.metadata
    try:
        if not index_settings(meta.properties)[0]:
            return 0
    except ValueError as err:
        raise IcebergValidationError(f"{err}; nothing was changed.") from None
    snaps: dict[int, tuple[int | None, int | None]] = {}
    for s in meta.snapshots:
        # a summary leaves out a zero count (a delete-only commit); no summary at all counts as one file
        added = s.summary.additional_properties.get("added-data-files", 0) if s.summary else None
        snaps[s.snapshot_id] = (s.parent_snapshot_id, int(added) if added is not None else None)
    indexed = [f.snapshot_id for f in meta.statistics if f.statistics_path.endswith(FILE_SUFFIX)]
    head = meta.current_snapshot_id if ref == "main" else (meta.refs[ref].snapshot_id if ref in meta.refs else None)
    return index_lag(snaps, head, indexed)


def bloom_filter_warnings(table: str, columns: Sequence[str], properties: Mapping[str, str]) -> list[str]:
    """A warning per subject column written without a Parquet bloom filter (erasure then skips a file
    only by exact manifest bounds or by fully dictionary-encoded column chunks, and raw-reads the rest)."""
    return [
        f"{table}: subject column {c!r} has no Parquet bloom filter (set write.parquet.bloom-filter-enabled.column."
        f"{c}=true, see rules.erasure.erasure_ready_properties); erasure analysis and verification skip a file "
        "only when its exact manifest bounds or its dictionary pages (column chunks whose every data page is "
        "dictionary-encoded) prove no subject is in it, and raw-read every other file"
        for c in columns
        if str(properties.get(f"write.parquet.bloom-filter-enabled.column.{c}", "false")).lower() != "true"
        and str(properties.get(INDEX_PROPERTY, "false")) != "true"
    ]


def lifecycle_lines(hook: Any, requests_table: str, table: str) -> list[str]:
    """One line per request: status, received / logically erased / purged times, rows found, snapshots kept
    (request ids and hashes only; for demos and runbooks)."""
    if not hook.table_exists(requests_table):
        return []
    evidence = {e["request_id"]: e for e in hook.governance.read("erasure_evidence", table_name=table)}

    def t(v: Any) -> str:
        return v.strftime("%Y-%m-%d %H:%M:%S") if v is not None else "-"

    lines = []
    for r in sorted(hook.governance.erasure_request_states(requests_table), key=lambda r: r["request_id"]):
        e = evidence.get(r["request_id"], {})
        flag = "  [matched no row: check the key]" if e and not e.get("rows_found") else ""
        lines.append(
            f"lifecycle {r['request_id']}: received {t(r['received_at'])} -> logically erased "
            f"{t(e.get('logical_erased_at'))} -> purged {t(e.get('purged_at'))}; status={r['status']} "
            f"phase={e.get('phase') or '-'} rows_found={e.get('rows_found', '-')} "
            f"snapshots_kept={e.get('snapshots_kept', '-')} hash={str(e.get('subject_hash') or '-')[:12]}{flag}"
        )
    return lines


# ------------------------------------------------ subject columns declared by tables
#: Table property prefix declaring subject columns: ``erasure.subject-columns.<kind>=<col>[,<col>...]``.
SUBJECT_COLUMNS_PREFIX = "erasure.subject-columns."
_KIND = re.compile(r"^[a-z][a-z0-9_\-]{0,63}\Z")


def validate_subject_kind(value: object) -> str:
    """A key kind: lowercase letters, digits, ``_`` and ``-`` (``customer_id``, ``email``)."""
    if not isinstance(value, str) or not _KIND.match(value):
        raise IcebergValidationError(
            f"subject_kind={value!r} is not a key kind; use a lowercase name such as 'customer_id' or 'email' "
            "(letters, digits, '_' and '-', at most 64 characters, starting with a letter)."
        )
    return value


def subject_columns_property(kind: str) -> str:
    """The table property declaring the columns that hold subject keys of ``kind``."""
    return SUBJECT_COLUMNS_PREFIX + validate_subject_kind(kind)


def declared_subject_columns(properties: Mapping[str, str]) -> dict[str, list[str]]:
    """Kind -> columns a table declares (``erasure.subject-columns.<kind>``), in declaration order.

    A malformed declaration (bad kind, empty or invalid column list) raises, naming the property:
    a table that means to declare its personal data must not be skipped silently.
    """
    out: dict[str, list[str]] = {}
    for key in sorted(properties):
        if not key.startswith(SUBJECT_COLUMNS_PREFIX):
            continue
        kind = key[len(SUBJECT_COLUMNS_PREFIX) :]
        try:
            validate_subject_kind(kind)
            cols = validate_subject_columns([c.strip() for c in str(properties[key]).split(",") if c.strip()])
        except IcebergValidationError as err:
            raise IcebergValidationError(
                f"table property {key}={properties[key]!r} is malformed ({err}); set it to a comma-separated list "
                f"of column names, e.g. {SUBJECT_COLUMNS_PREFIX}customer_id=customer_id,referrer_id."
            ) from None
        out[kind] = cols
    return out


def discover_subject_tables(tables: Mapping[str, Mapping[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Tables declaring subject columns of ``kind``, with their erasure problems, sorted by name.

    :param tables: ``namespace.table`` -> :func:`erasure_table_facts`-like facts (``properties``,
        ``schema_fields``; ``partition_fields``, ``format_version`` and ``equality_delete_files``
        when known).
    :return: ``[{"table", "subject_columns", "problems"}]``; ``problems`` is what
        :func:`table_problems` says (an erasure of that table would refuse).
    """
    kind = validate_subject_kind(kind)
    out = []
    for name in sorted(tables):
        facts = tables[name]
        cols = declared_subject_columns(facts.get("properties") or {}).get(kind)
        if not cols:
            continue
        problems = table_problems(
            table=name,
            columns=cols,
            schema_fields=facts.get("schema_fields") or {},
            partition_fields=facts.get("partition_fields") or [],
            properties=facts.get("properties") or {},
            format_version=int(facts.get("format_version") or 2),
            equality_delete_files=int(facts.get("equality_delete_files") or 0),
        )
        out.append({"table": name, "subject_columns": cols, "problems": problems})
    return out


def erasure_mapping(discovered: Sequence[Mapping[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Keyword arguments of one :class:`IcebergErasureOperator` per discovered table, for
    ``IcebergErasureOperator.partial(...).expand_kwargs(...)``: each carries the whole list as
    ``tables_in_scope``, so a request becomes ``erased`` only when every table is verified.

    :raises IcebergValidationError: when no table declares ``kind``, or a declared table has problems
        (an erasure that silently skips a table holding the person would record a false erasure).
    """
    if not discovered:
        raise IcebergValidationError(
            f"no table declares subject columns of kind {kind!r} (table property {SUBJECT_COLUMNS_PREFIX}{kind}); "
            "declare them with rules.erasure.erasure_ready_properties(columns, kind=...) through "
            "IcebergAlterTableOperator(set_properties=...) or at table creation, or check the namespaces searched."
        )
    bad = [p for d in discovered for p in d.get("problems") or []]
    if bad:
        raise IcebergValidationError("Catalog-wide erasure refused, nothing was changed: " + " ".join(bad))
    scope = [str(d["table"]) for d in discovered]
    return [
        {"table": t, "subject_columns": list(d["subject_columns"]), "tables_in_scope": scope}
        for t, d in zip(scope, discovered, strict=True)
    ]


def subject_column_map(tables: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The record of where personal keys live: one row per (table, kind, column) a table declares.

    For governance views (the GDPR art. 30 record of processing): ``table``, ``kind``, ``column``,
    ``exists`` (in the current schema), ``type``, ``bloom_filter`` (Parquet bloom filter enabled),
    ``bounds`` (manifest metrics mode of the column: ``none`` means no personal value in
    manifests), ``erasure_ready`` (exists, bloom filter, no bounds) and ``problems`` (why an
    erasure of the table would refuse). A malformed declaration gives one row with ``kind`` None
    and the error under ``problems``.

    :param tables: ``namespace.table`` -> facts as for :func:`discover_subject_tables`.
    """
    rows: list[dict[str, Any]] = []
    for name in sorted(tables):
        facts = tables[name]
        props = facts.get("properties") or {}
        fields = facts.get("schema_fields") or {}
        try:
            declared = declared_subject_columns(props)
        except IcebergValidationError as err:
            rows.append(
                {
                    "table": name,
                    "kind": None,
                    "column": None,
                    "exists": False,
                    "type": None,
                    "bloom_filter": False,
                    "bounds": None,
                    "erasure_ready": False,
                    "problems": [str(err)],
                }
            )
            continue
        for kind, cols in declared.items():
            problems = discover_subject_tables({name: facts}, kind)[0]["problems"]
            for c in cols:
                bloom = str(props.get(f"write.parquet.bloom-filter-enabled.column.{c}", "false")).lower() == "true"
                bounds = str(
                    props.get(f"write.metadata.metrics.column.{c}")
                    or props.get("write.metadata.metrics.default", "truncate(16)")
                )
                rows.append(
                    {
                        "table": name,
                        "kind": kind,
                        "column": c,
                        "exists": c in fields,
                        "type": fields.get(c),
                        "bloom_filter": bloom,
                        "bounds": bounds,
                        "erasure_ready": c in fields and bloom and bounds == "none",
                        "problems": problems,
                    }
                )
    return rows


def evidence_counts(evidence: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What the task's result says about a run's evidence rows: counts, never a request id or a hash.

    >>> evidence_counts([{"request_id": "R-1", "rows_found": 0, "verification": "verified"},
    ...                  {"request_id": "R-2", "rows_found": 3, "verification": "verified"}])
    {'evidence_rows': 2, 'evidence_verification': {'verified': 2}, 'requests_matching_nothing': 1}
    """
    rows = list(evidence)
    verification: dict[str, int] = {}
    for row in rows:
        key = str(row.get("verification"))
        verification[key] = verification.get(key, 0) + 1
    return {
        "evidence_rows": len(rows),
        "evidence_verification": dict(sorted(verification.items())),
        "requests_matching_nothing": sum(1 for row in rows if not row.get("rows_found")),
    }
