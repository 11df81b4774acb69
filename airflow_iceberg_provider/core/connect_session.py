"""How a provider job's Spark Connect session is opened, configured and cleared.

Two clients run a job over Spark Connect: the runner process of the Spark 3.5 runtime
(``spark_jobs/connect_runner.py``) and, on Spark 4, the task process itself with the Airflow
environment's ``pyspark-client`` (``hooks/_connect_inprocess.py``). Both call these functions, so
the session a job gets is the same either way: the Iceberg SQL extensions checked, the catalog set
as *session* conf (secrets included: they travel in a config request, never in plan text, and only
this session sees them), server-wide keys skipped by name (never by value), and everything unset
again when the job ends.

Takes the session as a plain object (no pyspark import): the same code serves both clients.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
#: pyspark retries an unavailable server for ~10 minutes; a task fails within ~15 s instead
#: (a restarted server has lost this session's catalog conf: retrying against it cannot help).
RETRY_POLICY = {"max_retries": 6, "max_backoff": 5000}
#: Words of a gRPC error that mean the server did not answer (not that it refused the call).
_UNREACHABLE_WORDS = ("UNAVAILABLE", "failed to connect", "Connection refused", "DEADLINE_EXCEEDED")
#: Words of a gRPC error that mean the server refused the client's credentials.
_REFUSED_WORDS = ("UNAUTHENTICATED", "PERMISSION_DENIED", "Invalid authentication token")


class ConnectSessionError(RuntimeError):
    """The session cannot run provider jobs (no Iceberg extensions, a catalog key it cannot set)."""


def unreachable(err: BaseException) -> bool:
    """Whether a Connect error says that no server answered."""
    text = f"{type(err).__name__}: {err}"
    return any(word in text for word in _UNREACHABLE_WORDS)


def refused(err: BaseException) -> bool:
    """Whether a Connect error says that the server refused the client's token."""
    text = f"{type(err).__name__}: {err}"
    return any(word in text for word in _REFUSED_WORDS)


def limit_retries(spark: Any) -> None:
    """Cap pyspark's retries of an unavailable server (:data:`RETRY_POLICY`)."""
    policy = getattr(spark.client, "_retry_policy", None)
    if isinstance(policy, dict):
        policy.update(RETRY_POLICY)


def check_extensions(spark: Any, address: str) -> None:
    """Refuse a server started without the Iceberg SQL extensions (``CALL`` would not parse)."""
    extensions = spark.conf.get("spark.sql.extensions", "") or ""
    if ICEBERG_EXTENSIONS not in extensions:
        raise ConnectSessionError(
            f"the Spark Connect server at {address} runs without the Iceberg SQL extensions "
            f"(spark.sql.extensions={extensions!r}); start it with --conf spark.sql.extensions={ICEBERG_EXTENSIONS} "
            "and the Iceberg Spark runtime jar (scripts/connect_server.py does)."
        )


def configure_session(spark: Any, conf: Mapping[str, str], secret_conf: Mapping[str, str]) -> list[str]:
    """Set ``conf`` and ``secret_conf`` on the session; return the keys only the server can set.

    A catalog key the session cannot set is an error (the job would run against the server's
    catalog, or none); any other server-wide key is skipped and named, never its value.
    """
    skipped = []
    for key, value in {**conf, **secret_conf}.items():
        try:
            spark.conf.set(key, value)
        except Exception as err:  # noqa: BLE001 - a server-side conf: named (never its value) and skipped
            if key.startswith("spark.sql.catalog."):
                raise ConnectSessionError(
                    f"cannot set the catalog conf {key} on the session: {type(err).__name__}"
                ) from None
            skipped.append(key)
    return sorted(skipped)


def clear_session(spark: Any, keys: Iterable[str]) -> None:
    """Unset what the job set on its session (the server keeps idle sessions for a while)."""
    for key in keys:
        try:
            spark.conf.unset(key)
        except Exception:  # noqa: BLE001,S110 - best effort: the session is unreachable by others anyway
            pass


__all__ = [
    "ICEBERG_EXTENSIONS",
    "RETRY_POLICY",
    "ConnectSessionError",
    "check_extensions",
    "clear_session",
    "configure_session",
    "limit_retries",
    "refused",
    "unreachable",
]
