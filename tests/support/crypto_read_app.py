"""Test application: read a crypto-shredded table through its decrypting view, keep only digests.

Submitted by ``IcebergSparkSubmitOperator`` (``params.derived``): appends, to the operator's table,
one row per derived row with the subject hash and the SHA-256 of each decrypted e-mail (NULL when
it no longer decrypts), so the test compares digests and no plaintext is written anywhere.
"""

from __future__ import annotations

from iceberg_job_runtime import JobContext, run_job


def read_decrypted(ctx: JobContext) -> dict:
    from airflow_iceberg_provider.spark_jobs.crypto_shred import decrypted_view

    decrypted_view(ctx.spark, ctx.catalog, ctx.spec["params"]["derived"], "derived_decrypted")
    df = ctx.spark.sql("SELECT subject_hash, sha2(email, 256) AS email_sha256, city FROM derived_decrypted")
    writer = df.writeTo(ctx.table())
    for key, value in (ctx.spec.get("snapshot_properties") or {}).items():
        writer = writer.option(f"snapshot-property.{key}", str(value))
    writer.append()
    return {"rows": df.count()}


if __name__ == "__main__":
    run_job(read_decrypted)
