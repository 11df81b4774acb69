"""Spark side of bench/publish.py: publish a branch with Iceberg's ``fast_forward`` procedure."""

from __future__ import annotations

from typing import Any

from iceberg_job_runtime import JobContext, run_job


def fast_forward(ctx: JobContext) -> dict[str, Any]:
    ns, name = ctx.spec["table"].split(".")
    ctx.snapshot_before = ctx.ref_snapshot(ref="main")
    ctx.spark.sql(
        f"CALL `{ctx.catalog}`.system.fast_forward(table => '{ns}.{name}', branch => 'main', to => '{ctx.spec['ref']}')"
    ).collect()
    ctx.snapshot_after = ctx.ref_snapshot(ref="main")
    return {}


if __name__ == "__main__":
    run_job(fast_forward)
