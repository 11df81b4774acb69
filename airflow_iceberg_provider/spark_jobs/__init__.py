"""Code that runs inside the Spark driver (and executors), shipped as one package.

:class:`~airflow_iceberg_provider.hooks.spark.IcebergSparkHook` zips this package once per
content (:mod:`airflow_iceberg_provider.hooks._job_package`) and passes the zip with
``--py-files``; the registered jobs (``hooks.spark.SPARK_JOBS``) are submitted by the path of
their entry script. Rules for every module here:

* import siblings absolutely (``from airflow_iceberg_provider.spark_jobs.x import ...``): one
  import identity on both sides, no ``try/except ImportError`` fallback to bare names;
* import nothing from Airflow or pyiceberg, and pyspark/pyarrow only inside functions, so the
  pure builders are unit-tested on the Airflow side and every module imports in the Spark
  runtime without Airflow (``tests/unit/test_spark_job_package.py`` checks both);
* outside this package, only :mod:`airflow_iceberg_provider.core` (the pure rules shared with
  the Airflow side, shipped in the same zip) may be imported; the Airflow side never imports
  this package (it submits job scripts by path).
"""
