"""Entry script of the ``erasure`` job (submitted by path): :func:`.run.erase` under the job runtime."""

if __name__ == "__main__":
    from airflow_iceberg_provider.spark_jobs.erasure.run import erase
    from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import run_job

    run_job(erase)
