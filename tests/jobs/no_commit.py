"""Test job: exits 0 and writes its ledger row, but commits nothing to the table."""

from __future__ import annotations

from iceberg_job_runtime import JobContext, run_job


def nothing(ctx: JobContext) -> dict:
    ctx.spark.sql(f"SELECT count(*) FROM {ctx.table()}").collect()
    return {"rows_written": 0}


if __name__ == "__main__":
    run_job(nothing)
