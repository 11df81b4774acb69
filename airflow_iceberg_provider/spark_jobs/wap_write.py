"""Spark job: run SQL statements against a table with every write landing on a WAP branch.

Submitted with ``spark.wap.branch=<branch>`` (the Airflow side also made sure the
table has ``write.wap.enabled=true``, without which Iceberg silently ignores the
conf and writes to ``main``). Spec: ``table``, ``ref`` (the branch), ``statements``
(SQL strings; ``{table}`` is replaced by the quoted ``catalog.namespace.table``),
``sql_args`` (named parameters, bound with ``spark.sql(stmt, args=...)``),
``commit_properties`` (the Airflow identity, stamped on every commit's snapshot summary)
and, for ``on_rerun="replace"`` by predicate, ``replace``: ``{"where", "expected_rows",
"files", "properties"}``.

The replacement runs first, on the branch: one read checks that ``where`` matches exactly
``expected_rows`` rows (the earlier publish's) and none outside the earlier publish's
``files`` (when known); only then ``DELETE FROM ... WHERE`` removes them. A predicate that
would remove other rows, or leave some of the earlier rows, fails the job before any write.

INSERT, INSERT OVERWRITE, MERGE INTO, UPDATE and DELETE all commit to the branch.

When the table declares the subject index, the spec's ``subject_index`` entry carries the erasure
salt, and after the statements the index is updated for the branch's new head from its nearest
indexed ancestor (:func:`~airflow_iceberg_provider.spark_jobs.erasure.index.follow`: only the files
the write added are read). The publish's fast-forward then moves ``main`` onto a snapshot whose
index is already registered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_iceberg_provider.spark_jobs.table_access import TableAccess


class ReplaceRefused(RuntimeError):
    """The replace_where predicate does not select exactly the earlier publish's rows."""


def replace_check_sql(table: str, where: str, n_files: int) -> tuple[str, dict[str, str]]:
    """One read: rows ``where`` matches on the branch, and how many of them lie outside the earlier files.

    :return: the query and its parameter names (``:f0``, ``:f1``... bound to the file paths).
    """
    names = [f"f{i}" for i in range(n_files)]
    outside = f"count_if(NOT (_file IN ({', '.join(':' + n for n in names)})))" if names else "CAST(NULL AS BIGINT)"
    return f"SELECT count(*) AS matched, {outside} AS outside FROM {table} WHERE ({where})", dict.fromkeys(names, "")


def replace_verdict(matched: int, outside: int | None, expected: int, where: str) -> str | None:
    """Why the predicate must not be used (``None`` when it selects exactly the earlier publish's rows)."""
    if outside:
        return (
            f"replace_where ({where}) also matches {outside} rows that the earlier publish of this interval did "
            "not add (other intervals' rows); refusing to delete them. Nothing was written. Narrow the predicate "
            "to this interval."
        )
    if matched != expected:
        return (
            f"replace_where ({where}) matches {matched} rows on the branch, but the earlier publish of this "
            f"interval added {expected}; it would {'remove rows outside the interval' if matched > expected else 'leave some of its rows behind'}. "
            "Nothing was written. Fix the predicate so it selects exactly this interval's rows."
        )
    return None


def replace_by_predicate(
    access: TableAccess, table: str, replace: Mapping[str, Any], base_props: Mapping[str, str]
) -> dict:
    """Check, then delete the earlier publish's rows on the branch (``spark.wap.branch`` is set)."""
    spark = access.spark
    where, files = replace["where"], list(replace.get("files") or [])
    query, params = replace_check_sql(table, where, len(files))
    row = spark.sql(query, args={name: files[i] for i, name in enumerate(params)}).collect()[0]
    matched, outside = int(row["matched"]), row["outside"]
    why = replace_verdict(matched, None if outside is None else int(outside), int(replace["expected_rows"]), where)
    if why:
        raise ReplaceRefused(why)
    with access.commit_properties({**base_props, **(replace.get("properties") or {})}):
        spark.sql(f"DELETE FROM {table} WHERE ({where})").collect()
    return {"replaced_rows": matched, "replace_method": "predicate"}


def run_statements(spark: Any, table: str, statements: Sequence[str], args: Mapping[str, Any] | None) -> None:
    for i, statement in enumerate(statements):
        text = statement.replace("{table}", table)
        print(f"[wap_write] statement {i + 1}/{len(statements)}")
        if args:
            spark.sql(text, args=dict(args)).collect()
        else:
            spark.sql(text).collect()


def write(ctx: Any) -> dict[str, Any]:
    spec = ctx.spec
    spark = ctx.spark
    branch = spec["ref"]
    conf_branch = spark.conf.get("spark.wap.branch", None)
    if conf_branch != branch:  # belt and braces: never write to main by accident
        raise RuntimeError(f"spark.wap.branch is {conf_branch!r}, expected {branch!r}; refusing to write")
    if spark.conf.get("spark.wap.id", None):
        raise RuntimeError("spark.wap.id is set; it cannot be combined with spark.wap.branch")
    table = ctx.table()
    spark.sql(f"REFRESH TABLE {table}")
    ctx.snapshot_before = ctx.ref_snapshot(ref=branch)
    props = spec.get("commit_properties") or {}
    out: dict[str, Any] = {"statements": len(spec["statements"])}
    if spec.get("replace"):
        out.update(replace_by_predicate(ctx.access, table, spec["replace"], props))
    with ctx.access.commit_properties(props):
        run_statements(spark, table, spec["statements"], spec.get("sql_args") or None)
    ctx.snapshot_after = ctx.ref_snapshot(ref=branch)
    if spec.get("subject_index") and ctx.snapshot_after != ctx.snapshot_before:
        from airflow_iceberg_provider.spark_jobs.erasure.index import follow

        out["subject_index"] = follow(ctx, ctx.snapshot_after, base=ctx.snapshot_before)
    return out


if __name__ == "__main__":
    from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import run_job

    run_job(write)
