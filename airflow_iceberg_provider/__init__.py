"""Apache Airflow provider for governed Apache Iceberg lakehouse pipelines."""

from __future__ import annotations

__version__ = "0.1.0"

#: Iceberg runtime the Spark jobs are built and tested against.
ICEBERG_SPARK_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.1"

__all__ = ["__version__", "ICEBERG_SPARK_RUNTIME"]
