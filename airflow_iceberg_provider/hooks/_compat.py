"""Every use of a private API of pyiceberg or of the Apache Spark provider, one small function each.

The libraries offer no public way to do these things yet; each function names the private
attribute it reads, and ``tests/spark/test_compat.py`` pins the library version it was written for
(:data:`PYICEBERG_VERSION`, :data:`SPARK_PROVIDER_VERSION`) and exercises it, so an upgrade fails
there first, with the function to look at named. Nothing else in the package reaches into these
libraries' private names; the Spark jobs' own uses of pyspark's live in
:mod:`airflow_iceberg_provider.spark_jobs._compat` (the jobs cannot import the hooks).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import requests
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.table import Transaction

#: The pyiceberg release the pyiceberg functions below were checked against.
PYICEBERG_VERSION = "0.12.0"
#: The ``apache-airflow-providers-apache-spark`` release the spark-submit functions were checked against.
SPARK_PROVIDER_VERSION = "6.3.4"


def staged_changes(tx: Transaction) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """``(requirements, updates)`` staged on a pyiceberg transaction and not committed yet.

    pyiceberg keeps them in ``Transaction._requirements`` / ``_updates`` and only hands them to its
    own catalog's commit; a multi-table commit needs them for its request.
    """
    return tuple(tx._requirements), tuple(tx._updates)


def rest_session(catalog: RestCatalog) -> requests.Session:
    """The REST catalog's authenticated HTTP session (``RestCatalog._session``): its auth headers,
    OAuth token refresh, TLS and SigV4 settings, for an endpoint pyiceberg has no method for."""
    session: requests.Session = catalog._session
    return session


def spark_submit_command(hook: SparkSubmitHook, application: str) -> list[str]:
    """The spark-submit argv the Spark provider's hook would run for ``application``
    (``SparkSubmitHook._build_spark_submit_command``), to run it detached instead."""
    command: list[str] = hook._build_spark_submit_command(application)
    return command


def spark_submit_env(hook: SparkSubmitHook) -> dict[str, str]:
    """The environment variables the Spark provider's hook adds to spark-submit's (``_env``)."""
    env: Mapping[str, str] | None = hook._env
    return dict(env or {})


def close_spark_submit_output(hook: SparkSubmitHook) -> None:
    """Close the pipe the Spark provider's hook read spark-submit's output from (``_submit_sp``):
    the provider leaves it open after the process ends. A hook that never submitted has none."""
    process = getattr(hook, "_submit_sp", None)
    stdout = getattr(process, "stdout", None)
    if stdout is not None:
        stdout.close()


__all__ = [
    "PYICEBERG_VERSION",
    "SPARK_PROVIDER_VERSION",
    "close_spark_submit_output",
    "rest_session",
    "spark_submit_command",
    "spark_submit_env",
    "staged_changes",
]
