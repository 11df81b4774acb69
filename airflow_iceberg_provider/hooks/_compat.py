"""Every use of a private API of pyiceberg or of the Apache Spark provider, one function each.

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


class SparkSubmitPrivate:
    """The members of the Spark provider's ``SparkSubmitHook`` that it keeps private, read lazily.

    Built by :func:`spark_submit_private`, the one function through which this package reaches
    into that hook; each method names the private member it reads.
    """

    def __init__(self, hook: SparkSubmitHook) -> None:
        self._hook = hook

    def command(self, application: str) -> list[str]:
        """The spark-submit argv the hook would run for ``application``
        (``_build_spark_submit_command``), to run it detached instead."""
        command: list[str] = self._hook._build_spark_submit_command(application)
        return command

    def env(self) -> dict[str, str]:
        """The environment variables the hook adds to spark-submit's (``_env``, set by :meth:`command`)."""
        env: Mapping[str, str] | None = self._hook._env
        return dict(env or {})

    def close_output(self) -> None:
        """Close the pipe the hook read spark-submit's output from (``_submit_sp``): the provider
        leaves it open after the process ends. A hook that never submitted has none."""
        process = getattr(self._hook, "_submit_sp", None)
        stdout = getattr(process, "stdout", None)
        if stdout is not None:
            stdout.close()


def spark_submit_private(hook: SparkSubmitHook) -> SparkSubmitPrivate:
    """The Spark provider hook's private members (checked against :data:`SPARK_PROVIDER_VERSION`)."""
    return SparkSubmitPrivate(hook)


__all__ = [
    "PYICEBERG_VERSION",
    "SPARK_PROVIDER_VERSION",
    "SparkSubmitPrivate",
    "rest_session",
    "spark_submit_private",
    "staged_changes",
]
