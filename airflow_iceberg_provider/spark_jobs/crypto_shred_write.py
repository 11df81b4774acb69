"""Entry script of the ``crypto_shred_write`` job (submitted by path): :func:`.crypto_shred.write` under the job runtime."""

if __name__ == "__main__":
    from airflow_iceberg_provider.spark_jobs.crypto_shred import write
    from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import run_job

    run_job(write)
