"""Test job: proves the catalog secret reached Spark (by hash only) and appends one row."""

from __future__ import annotations

import hashlib

from iceberg_job_runtime import JobContext, run_job


def probe(ctx: JobContext) -> dict:
    key = f"spark.sql.catalog.{ctx.catalog}.s3.secret-access-key"
    value = ctx.spark.conf.get(key, "")
    digest = hashlib.sha256(value.encode()).hexdigest()
    if digest != ctx.spec["params"]["expected_sha256"]:
        raise RuntimeError("catalog secret did not reach the Spark session")
    ctx.spark.sql(f"INSERT INTO {ctx.table()} VALUES (1, 'c1', 'ca', 10.0, TIMESTAMP '2026-01-01 00:00:00')")
    return {"secret_seen": True}


if __name__ == "__main__":
    run_job(probe)
