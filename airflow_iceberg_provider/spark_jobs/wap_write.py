"""Spark job: run SQL statements against a table with every write landing on a WAP branch.

Submitted with ``spark.wap.branch=<branch>`` (the Airflow side also made sure the
table has ``write.wap.enabled=true``, without which Iceberg silently ignores the
conf and writes to ``main``). Spec: ``table``, ``ref`` (the branch), ``statements``
(SQL strings; ``{table}`` is replaced by the quoted ``catalog.namespace.table``),
``sql_args`` (named parameters, bound with ``spark.sql(stmt, args=...)``).

INSERT, INSERT OVERWRITE, MERGE INTO, UPDATE and DELETE all commit to the branch.
"""

from __future__ import annotations

from typing import Any

from iceberg_job_runtime import JobContext, run_job


def write(ctx: JobContext) -> dict[str, Any]:
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
    args = spec.get("sql_args") or None
    for i, statement in enumerate(spec["statements"]):
        text = statement.replace("{table}", table)
        print(f"[wap_write] statement {i + 1}/{len(spec['statements'])}")
        if args:
            spark.sql(text, args=args).collect()
        else:
            spark.sql(text).collect()
    ctx.snapshot_after = ctx.ref_snapshot(ref=branch)
    return {"statements": len(spec["statements"])}


if __name__ == "__main__":
    run_job(write)
