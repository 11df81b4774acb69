"""Example user PySpark job: give a table every maintenance pathology, in ONE Spark session.

* ``commits`` tiny appends (``files_per_commit`` small files each, round-robin over ``days``
  partitions),
  so the table gets hundreds of small files and snapshots;
* with ``commit.manifest-merge.enabled=false`` on the table, one manifest per append;
* ``deletes`` merge-on-read DELETEs (one position delete file each, format v2);
* a legal-hold tag half-way, which keeps its snapshot (and files) through expiry.

Parameters arrive in ``spec["params"]``; submitted by ``IcebergSparkSubmitOperator``.
"""

from __future__ import annotations

from iceberg_job_runtime import JobContext, run_job


def make_pathology(ctx: JobContext) -> dict:
    from pyspark.sql import functions as F

    params = ctx.spec.get("params", {})
    commits = int(params.get("commits", 200))
    rows = int(params.get("rows_per_commit", 20))
    days = int(params.get("days", 4))
    deletes = int(params.get("deletes", 20))
    hold = str(params.get("hold_tag", "legal-hold-case-1"))
    files_per_commit = int(params.get("files_per_commit", 1))
    table = ctx.table()
    spark = ctx.spark
    base = (
        spark.range(0, rows, 1, max(files_per_commit, 1))  # one task, hence one file, per partition
        .withColumn("customer_id", (F.col("id") % 97).cast("string"))
        .withColumn(
            "region", F.element_at(F.array(F.lit("ca"), F.lit("us"), F.lit("eu")), (F.col("id") % 3 + 1).cast("int"))
        )
        .withColumn("amount", F.round((F.col("id") % 500) / 3.0 + 1.0, 2))
        .cache()
    )
    base.count()
    for i in range(commits):
        day = f"2026-01-{(i % days) + 1:02d}"
        df = base.select(
            (F.col("id") + F.lit(i * rows)).alias("order_id"),
            "customer_id",
            "region",
            "amount",
            (F.to_timestamp(F.lit(day + " 00:00:00")) + F.make_interval(secs=F.col("id"))).alias("order_ts"),
        )
        df.writeTo(table).append()
        if hold and i == commits // 2:
            spark.sql(f"ALTER TABLE {table} CREATE TAG `{hold}`")
    for j in range(deletes):
        # one row in one partition per DELETE: merge-on-read writes a position delete file
        spark.sql(f"DELETE FROM {table} WHERE order_id = :oid", args={"oid": j * rows * 3 + 1})
    total = spark.table(table).count()
    return {"commits": commits, "deletes": deletes, "rows": total}


if __name__ == "__main__":
    run_job(make_pathology)
