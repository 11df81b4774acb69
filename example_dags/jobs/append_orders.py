"""Example user PySpark job: append one day of synthetic orders to a table.

Submitted by ``IcebergSparkSubmitOperator``; parameters arrive in the job spec
(``spec["params"]``), the catalog is preconfigured by the provider.
"""

from __future__ import annotations

# [START howto_user_job]
from iceberg_job_runtime import JobContext, run_job


def append_orders(ctx: JobContext) -> dict:
    from pyspark.sql import functions as F

    params = ctx.spec.get("params", {})
    rows = int(params.get("rows", 1000))
    day = params.get("ds", "2026-01-01")
    bad = bool(params.get("bad_rows", False))
    seed = int(params.get("seed", 0))
    df = (
        ctx.spark.range(seed, seed + rows)
        .withColumn("order_id", F.col("id"))
        .withColumn("customer_id", (F.col("id") % 997).cast("string"))
        .withColumn(
            "region", F.element_at(F.array(*[F.lit(r) for r in ("ca", "us", "eu")]), (F.col("id") % 3 + 1).cast("int"))
        )
        .withColumn("amount", F.round((F.col("id") % 500) / 3.0 + 1.0, 2))
        .withColumn(
            "order_ts", F.to_timestamp(F.lit(day + " 12:00:00")) + F.expr("make_interval(0,0,0,0,0,0, id % 3600)")
        )
        .drop("id")
    )
    if bad:  # negative amounts and duplicated ids, for the audit demo
        df = df.withColumn("amount", F.when(F.col("order_id") % 10 == 0, -F.col("amount")).otherwise(F.col("amount")))
        df = df.unionByName(df.limit(5))
    writer = df.writeTo(ctx.table())
    for key, value in (ctx.spec.get("snapshot_properties") or {}).items():
        writer = writer.option(f"snapshot-property.{key}", str(value))
    writer.append()
    return {"rows_written": df.count()}


if __name__ == "__main__":
    run_job(append_orders)
# [END howto_user_job]
