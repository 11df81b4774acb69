"""Test job: notes its driver's pid, then runs an INSERT that takes far longer than any test waits.

``spec["params"]["marker"]``: a file the job writes (its pid) when the INSERT starts, so a test kills
it mid-write rather than while the JVM starts.
"""

from __future__ import annotations

import os

from iceberg_job_runtime import JobContext, run_job


def slow_insert(ctx: JobContext) -> dict:
    marker = ctx.spec["params"]["marker"]
    with open(marker + ".part", "w") as fh:
        fh.write(str(os.getpid()))
    os.rename(marker + ".part", marker)
    ctx.spark.sql(
        f"INSERT INTO {ctx.table()} SELECT id, concat('slow-', CAST(id AS STRING)), CAST(id AS DOUBLE), "
        "TIMESTAMP '2026-01-05 00:00:00' FROM range(0, 5000000000)"
    ).collect()
    return {"rows": 0}


if __name__ == "__main__":
    run_job(slow_insert)
