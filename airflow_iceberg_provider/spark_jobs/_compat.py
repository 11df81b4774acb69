"""Every use of a private API of pyspark in the Spark jobs, one small function each.

pyspark has no public way to reach the driver JVM of a classic session (Iceberg's Java API, Hadoop's
file systems), to read a DataFrame's physical plan as text, or to collect a DataFrame as Arrow
record batches; each function names the private attribute it reads. ``tests/spark/test_compat.py`` pins
the pyspark version of the Spark runtime (:data:`PYSPARK_VERSION`) and exercises every function in
one local session, so an upgrade fails there first. The Airflow side's private uses (pyiceberg,
the Spark provider) live in :mod:`airflow_iceberg_provider.hooks._compat`.

Imports nothing at module level (the jobs' rule: pyspark only inside functions).
"""

from __future__ import annotations

from typing import Any

#: The pyspark release (the Spark runtime's) these functions were checked against.
PYSPARK_VERSION = "3.5.7"


def has_jvm(spark: Any) -> bool:
    """Whether the session has a driver JVM in this process (spark-submit), not a Spark Connect
    client: only a classic session has ``_jsparkSession``."""
    return hasattr(spark, "_jsparkSession")


def is_classic_dataframe(df: Any) -> bool:
    """Whether the DataFrame is backed by a JVM ``Dataset`` here (``_jdf``), not a Connect plan."""
    return hasattr(df, "_jdf")


def driver_jvm(spark: Any) -> Any:
    """The py4j view of a classic session's driver JVM (``SparkSession._jvm``): packages by name,
    e.g. ``driver_jvm(spark).org.apache.iceberg.IcebergBuild``. Spark Connect sessions have none."""
    return spark._jvm


def java_spark_session(spark: Any) -> Any:
    """The JVM ``SparkSession`` behind a classic session (``SparkSession._jsparkSession``), for
    Iceberg's ``Spark3Util.loadIcebergTable`` and the like."""
    return spark._jsparkSession


def hadoop_configuration(spark: Any) -> Any:
    """The driver's Hadoop ``Configuration`` (``SparkSession._jsc.hadoopConfiguration()``), for
    ``Path.getFileSystem``."""
    return spark._jsc.hadoopConfiguration()


def physical_plan(df: Any) -> str:
    """The DataFrame's physical plan as text: the JVM's executed plan in a classic session
    (``DataFrame._jdf``), the server's explain string under Spark Connect (``_explain_string``)."""
    if is_classic_dataframe(df):
        return str(df._jdf.queryExecution().executedPlan().toString())
    return str(df._explain_string(mode="simple"))


def collect_arrow_batches(df: Any) -> list[Any]:
    """The DataFrame's rows as Arrow record batches, without pandas: ``DataFrame._collect_as_arrow``
    in a classic session; under Spark Connect the public ``DataFrame.toArrow()`` (Spark 4), else the
    3.5 client's Arrow stream of the plan (``_session.client.to_table(_plan.to_proto(...))``)."""
    if hasattr(df, "_collect_as_arrow"):
        return list(df._collect_as_arrow())
    if hasattr(df, "toArrow"):
        return list(df.toArrow().to_batches())
    client = df._session.client
    table, _ = client.to_table(df._plan.to_proto(client))
    return list(table.to_batches())


__all__ = [
    "PYSPARK_VERSION",
    "collect_arrow_batches",
    "driver_jvm",
    "hadoop_configuration",
    "has_jvm",
    "is_classic_dataframe",
    "java_spark_session",
    "physical_plan",
]
