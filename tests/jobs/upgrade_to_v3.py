"""Test job: upgrade a table to format-version 3 the way users do (Spark SQL), then append rows.

``spec["params"]``: ``rows`` as ``[order_id, customer_id, amount]`` (one data file, so a later
row-level delete leaves a deletion vector rather than dropping the file).
"""

from __future__ import annotations

from iceberg_job_runtime import JobContext, run_job


def upgrade_and_append(ctx: JobContext) -> dict:
    from pyspark.sql import functions as F

    table = ctx.table()
    ctx.spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('format-version' = '3')")
    rows = [(int(o), str(c), float(a)) for o, c, a in ctx.spec["params"]["rows"]]
    df = ctx.spark.createDataFrame(rows, "order_id long, customer_id string, amount double").withColumn(
        "order_ts", F.to_timestamp(F.lit("2026-01-01 00:00:00"))
    )
    writer = df.coalesce(1).writeTo(table)
    for key, value in (ctx.spec.get("snapshot_properties") or {}).items():
        writer = writer.option(f"snapshot-property.{key}", str(value))
    writer.append()
    return {"rows": len(rows)}


if __name__ == "__main__":
    run_job(upgrade_and_append)
