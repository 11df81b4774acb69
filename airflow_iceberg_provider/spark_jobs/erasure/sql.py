"""Pure SQL of the erasure job: identifiers, statements, error-message redaction.

Shipped next to ``spark_jobs/erasure/run.py`` with ``--py-files``; the lifecycle rules it shares
with the Airflow side (statuses, phases, ref analysis, HMAC, evidence ids) are
:mod:`airflow_iceberg_provider.core.erasure_lifecycle`. No pyspark import, no I/O.

Nothing built here ever contains a subject value: subjects reach Spark SQL only
as a temporary view that statements semi-join against; identifiers are validated
by the Airflow side and backtick-quoted here once more (defence in depth).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime

from airflow_iceberg_provider.core.ref_guard import RefState, RefVerb, check_ref_change

SUBJECTS_VIEW = "erasure_subjects"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_REF = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,127}\Z")


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


#: Spark's names of the subject column types :mod:`~airflow_iceberg_provider.core.erasure_columns` accepts.
_SPARK_SUBJECT_TYPES = ("string", "bigint", "int")


def key_cast_sql(type_sql: str, column: str = "subject_key") -> str:
    """The subject key converted to a subject column's type, ``NULL`` when it does not convert.

    ``try_cast``, never ``CAST``: under ANSI mode (the default on Spark 4) a failing ``CAST`` raises
    an error whose message holds the value -- a subject key -- and Spark logs it. A key that does
    not convert is counted by the job (per column), never printed.

    >>> key_cast_sql("bigint")
    'try_cast(`subject_key` AS bigint)'
    """
    if type_sql not in _SPARK_SUBJECT_TYPES:
        raise ValueError(f"unsupported subject column type {type_sql!r}; supported: {_SPARK_SUBJECT_TYPES}")
    return f"try_cast({q(column)} AS {type_sql})"


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
    """``ALTER TABLE … DROP TAG|BRANCH`` for the erasure's ``ref_policy="drop"``; the ref guard
    (:func:`~airflow_iceberg_provider.core.ref_guard.check_ref_change`) refuses ``main`` and any legal
    hold (whatever its stored type) with :class:`~airflow_iceberg_provider.core.ref_guard.RefGuardRefusal`."""
    if not _REF.match(name):
        raise ValueError(f"refusing to drop ref {name!r}")
    check_ref_change(
        RefVerb.DROP, RefState.of(name, ref_type, None), table=table, param="ref_policy", expected_type=ref_type.lower()
    )
    kind = "TAG" if ref_type.lower() == "tag" else "BRANCH"
    return f"ALTER TABLE {table_sql(catalog, table)} DROP {kind} IF EXISTS {q(name)}"


def _literal(value: str) -> str:
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def set_properties_sql(table: str, props: Mapping[str, str]) -> str:
    """``ALTER TABLE … SET TBLPROPERTIES`` (one commit) for a quoted table.

    >>> set_properties_sql("`c`.`db`.`t`", {"write.delete.mode": "copy-on-write"})
    "ALTER TABLE `c`.`db`.`t` SET TBLPROPERTIES ('write.delete.mode' = 'copy-on-write')"
    """
    pairs = ", ".join(f"{_literal(k)} = {_literal(v)}" for k, v in props.items())
    return f"ALTER TABLE {table} SET TBLPROPERTIES ({pairs})"


def unset_properties_sql(table: str, keys: Iterable[str]) -> str:
    """``ALTER TABLE … UNSET TBLPROPERTIES IF EXISTS`` (one commit) for a quoted table."""
    return f"ALTER TABLE {table} UNSET TBLPROPERTIES IF EXISTS ({', '.join(_literal(k) for k in keys)})"


def _dotted(table: str) -> str:
    ns, name = table.split(".")
    if not (_IDENT.match(ns) and _IDENT.match(name)):
        raise ValueError(f"invalid table {table!r}")
    return f"{ns}.{name}"


def redact(text: str, secrets: Iterable[str], *, limit: int = 600) -> str:
    """Remove every secret/subject value from an error message, then bound its length."""
    out = str(text)
    for s in sorted({s for s in secrets if s and len(s) >= 2}, key=len, reverse=True):
        if s in out:
            out = out.replace(s, "[redacted]")
    lines = [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
    return " | ".join(lines[:3])[:limit]
