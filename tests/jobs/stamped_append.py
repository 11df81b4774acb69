"""Test job: a user application that writes no ledger row of its own (no job runtime).

Waits until the file ``params["gate"]`` exists (the test opens it when it wants the commit), then
appends ``params["rows"]`` orders from ``params["start"]`` in one commit stamped with
``spec["snapshot_properties"]``.
"""

from __future__ import annotations

import os
import time

from iceberg_job_runtime import load_spec, quote_ident
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

if __name__ == "__main__":
    spark = SparkSession.builder.getOrCreate()
    spec = load_spec()
    params = spec.get("params") or {}
    gate, deadline = params.get("gate"), time.monotonic() + 300
    while gate and not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.2)
    start, rows = int(params.get("start", 0)), int(params.get("rows", 10))
    df = spark.range(start, start + rows).select(
        F.col("id").alias("order_id"),
        F.col("id").cast("string").alias("customer_id"),
        F.lit("ca").alias("region"),
        F.lit(1.0).alias("amount"),
        F.lit("2026-01-05 00:00:00").cast("timestamp").alias("order_ts"),
    )
    writer = df.writeTo(quote_ident(spec["catalog_name"], *spec["table"].split(".")))
    for key, value in (spec.get("snapshot_properties") or {}).items():
        writer = writer.option(f"snapshot-property.{key}", str(value))
    writer.append()
    spark.stop()
