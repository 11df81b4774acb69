"""Configuration lookups, in one place: the provider's ``[iceberg_provider]`` options and Airflow's own.

An option ``[iceberg_provider] <key>`` is read from the environment variable
``AIRFLOW__ICEBERG_PROVIDER__<KEY>`` first (an empty value means "unset"), then from
Airflow's configuration; when Airflow's configuration cannot be loaded (pure unit tests,
the Spark side) the option is unset. Nothing else in the provider reads ``conf`` or the
environment for a setting.

Options (documented in ``get_provider_info()["config"]``):

``spark_jars``, ``spark_packages``, ``pyspark_python``
    the Spark runtime of the provider's jobs (Spark hook);
``spark_runtime``
    the Spark line the jobs run on, ``3.5`` (default) or ``4.1``: on ``4.1`` a Spark Connect job's
    client is the task process itself (Spark hook, Spark Connect mode);
``spark_conf_defaults``
    Spark conf (a JSON object) every provider job starts from (Spark hook);
``expiry_floor``
    the youngest snapshot age expiry may remove unless lowered per task (maintenance operators);
``sqlite_busy_timeout_ms``
    how long a SQLite catalog waits for a lock (catalog hook), default 30000;
``durable_remote_wait_seconds``
    how long a retried durable Spark task waits for the ledger row of a job started on another
    host (operators' durable jobs), default 21600;
``governance_restricted_role``
    the SimpleAuthManager role from which the governance view shows erasure requests, evidence
    reports and approval history (governance view), default ``admin``.

This module only reads settings; it does not validate their meaning (the callers do,
naming the option in their messages).
"""

from __future__ import annotations

import os

SECTION = "iceberg_provider"
DEFAULT_SQLITE_BUSY_TIMEOUT_MS = 30000


def setting(key: str) -> str | None:
    """``[iceberg_provider] <key>`` (env ``AIRFLOW__ICEBERG_PROVIDER__<KEY>`` first); ``None`` when unset."""
    env = os.environ.get(f"AIRFLOW__{SECTION.upper()}__{key.upper()}")
    if env is not None:
        return env or None
    try:
        from airflow.configuration import conf

        return conf.get(SECTION, key, fallback=None) or None
    except Exception:  # config unavailable (e.g. pure unit tests)
        return None


def int_setting(key: str, default: int, *, minimum: int = 0) -> int:
    """An integer option; ``default`` when unset or not an integer, at least ``minimum``."""
    raw = setting(key)
    try:
        return max(minimum, int(str(raw).strip())) if raw not in (None, "") else default
    except ValueError:
        return default


def airflow_setting(section: str, key: str, fallback: str = "") -> str:
    """One of Airflow's own options (e.g. ``[api] base_url``); ``fallback`` when config is unavailable."""
    try:
        from airflow.configuration import conf

        return conf.get(section, key, fallback=fallback) or fallback
    except Exception:  # config unavailable
        return fallback


def airflow_flag(section: str, key: str, fallback: bool = False) -> bool:
    """A boolean option of Airflow's own (e.g. ``[operators] default_deferrable``)."""
    from airflow.configuration import conf

    return conf.getboolean(section, key, fallback=fallback)


#: The Spark lines the provider runs on (``[iceberg_provider] spark_runtime``).
SPARK_RUNTIMES = ("3.5", "4.1")
DEFAULT_SPARK_RUNTIME = "3.5"


def spark_runtime() -> str:
    """``[iceberg_provider] spark_runtime``: ``3.5`` (default) or ``4.1``; ``ValueError`` naming the fix otherwise."""
    raw = (setting("spark_runtime") or DEFAULT_SPARK_RUNTIME).strip()
    if raw not in SPARK_RUNTIMES:
        raise ValueError(
            f"[iceberg_provider] spark_runtime={raw!r} is not a supported Spark runtime; use one of "
            f"{', '.join(SPARK_RUNTIMES)} (AIRFLOW__ICEBERG_PROVIDER__SPARK_RUNTIME)."
        )
    return raw


def sqlite_busy_timeout_ms() -> int:
    """How long a SQLite catalog waits for a lock before failing (retryably), in ms.

    ``[iceberg_provider] sqlite_busy_timeout_ms`` (env ``AIRFLOW__ICEBERG_PROVIDER__SQLITE_BUSY_TIMEOUT_MS``),
    default 30000. Past it, the operation fails with ``IcebergCatalogUnavailableError``.
    """
    return int_setting("sqlite_busy_timeout_ms", DEFAULT_SQLITE_BUSY_TIMEOUT_MS)
