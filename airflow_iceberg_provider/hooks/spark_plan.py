"""The spark-submit plan as data: the job registry, the Spark conf rules, the submission's values.

Everything here is pure (or reads settings only): no connection, no process, no file but the
distribution's ``spark-defaults.conf`` read when the properties file is written. The hook
(:class:`~airflow_iceberg_provider.hooks.spark.IcebergSparkHook`) merges a :class:`SubmitPlan` from
its connections and these rules; a runner (:mod:`~airflow_iceberg_provider.hooks.spark_runner`)
runs it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_iceberg_provider import ICEBERG_SPARK_RUNTIME
from airflow_iceberg_provider.config import setting
from airflow_iceberg_provider.core.spec_secrets import SPEC_SECRET_PREFIX
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.hooks._job_package import SPARK_JOBS_DIR
from airflow_iceberg_provider.hooks.catalog_config import is_secret_key, redaction_regex

JOB_RUNTIME_MODULE = SPARK_JOBS_DIR / "iceberg_job_runtime.py"
LOG4J_CONFIG = SPARK_JOBS_DIR / "log4j2.properties"
#: Spark's default ``spark.redaction.regex`` plus the catalog keys it misses; every submission adds
#: the exact keys of its secret conf (:func:`redaction_regex`), whatever their names.
SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]key|credential|access-key-id"
CONFIG_SECTION = "iceberg_provider"


@dataclass(frozen=True)
class SparkJob:
    """A built-in Spark job: its entry script and what its submission needs.

    :param name: the name operators pass to :meth:`IcebergSparkHook.run_job`.
    :param script: entry script file name in ``spark_jobs/`` (submitted by path).
    :param needs_package: ship the ``spark_jobs`` package zip with ``--py-files`` (every
        built-in job imports ``airflow_iceberg_provider.spark_jobs.*``).
    :param extra_jars: jars this job needs on top of the hook's Iceberg runtime jars.
    """

    name: str
    script: str
    needs_package: bool = True
    extra_jars: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        return SPARK_JOBS_DIR / self.script


#: The built-in jobs, by name. Storage jars (S3) are added per submission from the connection's
#: FileIO (``hooks._storage_jars``), not from here.
SPARK_JOBS: dict[str, SparkJob] = {
    job.name: job
    for job in (
        SparkJob("wap_write", "wap_write.py"),
        SparkJob("wap_audit", "wap_audit.py"),
        SparkJob("wap_cherrypick", "wap_cherrypick.py"),
        SparkJob("ref_changes", "ref_changes.py"),
        SparkJob("maintenance", "maintenance.py"),
        SparkJob("erasure", "erasure/__main__.py"),
        SparkJob("crypto_shred_write", "crypto_shred_write.py"),
    )
}


def spark_job(job: str) -> SparkJob:
    """The registered built-in job ``job``; ``ValueError`` naming the known ones otherwise."""
    entry = SPARK_JOBS.get(job) if isinstance(job, str) else None
    if entry is None:
        raise ValueError(f"Unknown Spark job {job!r}; built-in jobs are: {', '.join(sorted(SPARK_JOBS))}.")
    return entry


def job_path(job: str) -> Path:
    """Absolute path of a built-in job's entry script (``spark_jobs/<script>``)."""
    return spark_job(job).path


_config = setting  # ``[iceberg_provider] <key>``: airflow_iceberg_provider.config is the one reader


def java_properties_line(key: str, value: str) -> str:
    """One ``key=value`` line in java.util.Properties syntax."""

    def esc(text: str, is_key: bool) -> str:
        out = []
        for i, ch in enumerate(text):
            if ch == "\\":
                out.append("\\\\")
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\r":
                out.append("\\r")
            elif ch == "\t":
                out.append("\\t")
            elif ch in "=:#!" or (ch == " " and (is_key or i == 0)):
                out.append("\\" + ch)
            elif ord(ch) > 0xFFFF:
                # java.util.Properties reads \\uXXXX as one UTF-16 unit: a supplementary
                # code point is written as its surrogate pair.
                code = ord(ch) - 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            elif ord(ch) > 126 or ord(ch) < 32:
                out.append(f"\\u{ord(ch):04x}")
            else:
                out.append(ch)
        return "".join(out)

    return f"{esc(key, True)}={esc(value, False)}"


@dataclass
class SubmitPlan:
    """Everything one spark-submit needs, as data (built without side effects)."""

    application: str
    name: str
    conf: dict[str, str]
    secret_conf: dict[str, str] = field(repr=False)
    jars: list[str]
    packages: list[str]
    py_files: list[str]
    env_vars: dict[str, str]
    spec: dict[str, Any] | None = field(default=None, repr=False)
    application_args: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class JobRun:
    """What a finished spark-submit tells the caller (the result itself is in the lake)."""

    job_run_id: str
    name: str
    started_at: datetime
    finished_at: datetime

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


def java_options(*parts: str | None) -> str:
    """JVM options joined in order (later ones win where the JVM keeps the last of a flag)."""
    return " ".join(part.strip() for part in parts if part and part.strip())


def driver_java_options(user: str | None, *, log4j: str | None) -> str:
    """The driver's JVM options: the provider's log4j configuration, ``[iceberg_provider]
    spark_driver_java_options``, then the task's own ``spark.driver.extraJavaOptions``.

    A task that names its own log4j configuration keeps it.
    """
    own = f"-Dlog4j2.configurationFile={log4j}" if log4j and "log4j2.configurationFile" not in (user or "") else None
    return java_options(own, _config("spark_driver_java_options"), user)


def conf_defaults() -> dict[str, str]:
    """``[iceberg_provider] spark_conf_defaults``: Spark conf every provider job starts from, under
    the catalog's conf and a task's own ``spark_conf``; a JSON object of scalar values.

    >>> import os; os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS"] = '{"spark.sql.shuffle.partitions": 4}'
    >>> conf_defaults()
    {'spark.sql.shuffle.partitions': '4'}
    >>> del os.environ["AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS"]
    """
    raw = _config("spark_conf_defaults")
    if not raw:
        return {}
    fix = 'give a JSON object of Spark conf keys to values, e.g. {"spark.sql.shuffle.partitions": "8"}'
    try:
        doc = json.loads(raw)
    except ValueError:
        raise IcebergValidationError(f"[iceberg_provider] spark_conf_defaults is not JSON: {fix}") from None
    if not isinstance(doc, dict):
        raise IcebergValidationError(
            f"[iceberg_provider] spark_conf_defaults is a JSON {type(doc).__name__}, not an object: {fix}"
        )
    bad = sorted(str(k) for k, v in doc.items() if not str(k).startswith("spark.") or isinstance(v, dict | list))
    if bad:
        raise IcebergValidationError(
            f"[iceberg_provider] spark_conf_defaults has entries that are not Spark conf with a scalar value: "
            f"{bad}: {fix}"
        )
    secret = sorted(str(k) for k in doc if is_secret_key(str(k)))
    if secret:
        raise IcebergValidationError(
            f"[iceberg_provider] spark_conf_defaults names secret conf {secret}: it would reach spark-submit's "
            "command line; put credentials in the catalog connection, whose secrets travel in a 0600 file"
        )
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in doc.items()}


def submit_conf(
    *,
    catalog_public: Mapping[str, str],
    catalog_secret: Mapping[str, str],
    hook_conf: Mapping[str, str],
    extra_conf: Mapping[str, Any] | None,
    cluster: bool,
    pyspark_python: str | None,
) -> dict[str, str]:
    """The public Spark conf of one submission, merged in order (later wins): ``[iceberg_provider]
    spark_conf_defaults``, the catalog's public conf, the hook's ``conf``, the job's ``extra_conf``;
    then the provider's settings (UTC, no UI, redaction of every secret key, log4j, JVM options,
    the runtime Python). A key of the catalog's secret conf never stays in it.

    :param cluster: cluster deploy mode (the driver finds the log4j file by name in its directory).
    """
    conf = {
        **conf_defaults(),
        **catalog_public,
        **hook_conf,
        **{k: str(v) for k, v in (extra_conf or {}).items()},
    }
    conf.setdefault("spark.sql.session.timeZone", "UTC")
    conf.setdefault("spark.ui.enabled", "false")
    # Spark redacts conf by name only: every secret key is named in the regex, so an unknown key
    # (secret by the allowlist) is redacted in the event log and on the environment page too.
    conf["spark.redaction.regex"] = redaction_regex(
        [*catalog_secret, SPEC_SECRET_PREFIX], conf.get("spark.redaction.regex") or SPARK_REDACTION_REGEX
    )
    # The log4j configuration travels with the submission (--files): a driver in cluster deploy
    # mode (YARN, Kubernetes) runs on another host and finds it, by name, in its working
    # directory; a client-mode driver is the submitting process and reads it in place.
    log4j = LOG4J_CONFIG.name if cluster else f"file:{LOG4J_CONFIG}"
    conf["spark.driver.extraJavaOptions"] = driver_java_options(conf.get("spark.driver.extraJavaOptions"), log4j=log4j)
    executor_options = java_options(_config("spark_executor_java_options"), conf.get("spark.executor.extraJavaOptions"))
    if executor_options:
        conf["spark.executor.extraJavaOptions"] = executor_options
    for key in list(conf):
        if key in catalog_secret:
            conf.pop(key)
    if pyspark_python:
        # Conf rather than PYSPARK_PYTHON env: env vars are refused in standalone cluster
        # mode and would be put on argv in YARN/k8s mode by SparkSubmitHook.
        conf.setdefault("spark.pyspark.python", pyspark_python)
        conf.setdefault("spark.pyspark.driver.python", pyspark_python)
    return conf


def runtime_jars(
    jars: Sequence[str], packages: Sequence[str], extra_jars: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """The submission's jars and Maven packages: the configured ones, else the Iceberg Spark
    runtime package; then a job's own jars."""
    out_jars, out_packages = list(jars), list(packages)
    if not out_jars and not out_packages:
        out_packages = [ICEBERG_SPARK_RUNTIME]
    out_jars += [j for j in extra_jars if j not in out_jars]
    return out_jars, out_packages


def properties_text(secret_conf: Mapping[str, str]) -> str:
    """The ``--properties-file`` text: the distribution's spark-defaults.conf (which that file
    replaces for spark-submit), then the secret conf in java.util.Properties syntax."""
    lines = ["# written by airflow-iceberg-provider; removed after the job"]
    for candidate in _spark_defaults_files():
        lines.append(candidate.read_text(encoding="utf-8"))
    lines += [java_properties_line(k, v) for k, v in secret_conf.items()]
    return "\n".join(lines) + "\n"


def _spark_defaults_files() -> list[Path]:
    dirs = [os.environ.get("SPARK_CONF_DIR")]
    if os.environ.get("SPARK_HOME"):
        dirs.append(os.path.join(os.environ["SPARK_HOME"], "conf"))
    for d in dirs:
        if d and (Path(d) / "spark-defaults.conf").is_file():
            return [Path(d) / "spark-defaults.conf"]
    return []


def _parse_time(value: str) -> datetime:
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return datetime.now(UTC)


def _as_list(value: Sequence[str] | str | None) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v) for v in value if str(v).strip()]
