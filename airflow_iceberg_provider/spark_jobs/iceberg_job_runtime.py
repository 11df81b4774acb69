"""Runtime shared by every Spark job of the provider (and usable by user jobs).

Shipped to the Spark driver with ``--py-files``, so a job script can
``from iceberg_job_runtime import run_job``. It must import on the Airflow
side without pyspark (pyspark is imported inside functions only).

Protocol:

* the job is started as ``job.py --spec /path/job_spec.json``; the spec holds
  every parameter (never passed on argv, since it can carry personal data);
* the catalog is already configured by spark-submit under ``spec["catalog_name"]``;
* the job returns a dict of metrics; :func:`run_job` writes one row to the
  governance ledger (``<governance_namespace>.ledger``) with status, snapshot
  before/after and those metrics, then exits 0. On an exception it writes a
  ``failed`` row (best effort) and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.core.governance import LedgerEntry
from airflow_iceberg_provider.core.spec_secrets import restore_spec_secrets
from airflow_iceberg_provider.spark_jobs._compat import driver_jvm, has_jvm


def load_spec(argv: list[str] | None = None) -> dict[str, Any]:
    """Read the JSON spec named by ``--spec`` (falls back to SparkFiles in cluster mode)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--spec", required=True)
    args, _ = parser.parse_known_args(argv if argv is not None else sys.argv[1:])
    path = args.spec
    if not os.path.exists(path):
        from pyspark import SparkFiles

        path = SparkFiles.get(os.path.basename(path))
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def quote_ident(*parts: str) -> str:
    """Backtick-quote identifier parts (already validated on the Airflow side)."""
    for p in parts:
        if not p or "`" in p:
            raise ValueError(f"invalid identifier part {p!r}")
    return ".".join(f"`{p}`" for p in parts)


class JobContext:
    """What a job function receives: the spec, the session and helpers."""

    def __init__(self, spec: dict[str, Any], spark: Any) -> None:
        self.spec = spec
        self.spark = spark
        self.catalog = spec["catalog_name"]
        self.started_at = datetime.now(UTC)
        self.snapshot_before: int | None = None
        self.snapshot_after: int | None = None
        self.status = "succeeded"
        #: what the completion line says instead of the status (e.g. "audit completed: 2 of 11 checks failed")
        self.outcome: str | None = None
        self.details: dict[str, Any] = {}
        self._access: Any = None

    @property
    def access(self) -> Any:
        """The job's :class:`~airflow_iceberg_provider.spark_jobs.table_access.TableAccess`, chosen once
        from the session (driver JVM or Spark Connect client) on first use."""
        if self._access is None:
            from airflow_iceberg_provider.spark_jobs.table_access import for_session

            self._access = for_session(self.spark)
        return self._access

    def table(self, dotted: str | None = None) -> str:
        """Quoted ``catalog.namespace.table`` for SQL."""
        ns, name = (dotted or self.spec["table"]).split(".")
        return quote_ident(self.catalog, ns, name)

    def ref_snapshot(self, dotted: str | None = None, ref: str = "main") -> int | None:
        """Head snapshot id of a ref, read fresh from the catalog."""
        self.spark.sql(f"REFRESH TABLE {self.table(dotted)}")
        rows = self.spark.sql(
            f"SELECT snapshot_id FROM {self.table(dotted)}.refs WHERE name = :ref", args={"ref": ref}
        ).collect()
        return int(rows[0][0]) if rows else None

    def write_ledger(self, metrics: dict[str, Any], error: str | None = None) -> None:
        """Append this job's row to the governance ledger (one :class:`~airflow_iceberg_provider.core.governance.LedgerEntry`)."""
        ledger = quote_ident(self.catalog, self.spec["governance_namespace"], "ledger")
        row = LedgerEntry.new(
            event_id=self.spec["job_run_id"],
            operation=self.spec.get("operation") or self.spec.get("job") or "spark_job",
            status="failed" if error else self.status,
            airflow=self.spec.get("airflow") or {},
            started_at=self.started_at,
            table_name=self.spec.get("table"),
            ref=self.spec.get("ref"),
            snapshot_before=self.snapshot_before,
            snapshot_after=self.snapshot_after,
            metrics=metrics,
            details={**self.details, **({"error": error} if error else {})},
            provider_version=self.spec.get("provider_version"),
        ).to_row()
        schema = self.spark.table(ledger).schema
        values = tuple(row.get(f.name) for f in schema.fields)
        self.spark.createDataFrame([values], schema=schema).writeTo(ledger).append()


def is_connect(spark: Any = None) -> bool:
    """Whether this job runs as a Spark Connect client (no driver JVM in this process)."""
    if spark is not None:
        return not has_jvm(spark)
    return "SPARK_CONNECT_MODE_ENABLED" in os.environ


_RUNTIME_JAR = re.compile(r"iceberg-spark-runtime-[\d.]+_[\d.]+[-:]v?(\d+\.\d+\.\d+[\w.-]*?)(?:\.jar)?$")


def iceberg_version_of(jars: str, packages: str = "") -> str | None:
    """The Iceberg version named by the Spark runtime jar in ``spark.jars`` / ``spark.jars.packages``.

    >>> iceberg_version_of("/x/spark-connect_2.12-3.5.6.jar,/j/iceberg-spark-runtime-3.5_2.12-1.10.1.jar")
    'Apache Iceberg 1.10.1'
    >>> iceberg_version_of("", "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.12.0")
    'Apache Iceberg 1.12.0'
    """
    for item in [*jars.split(","), *packages.split(",")]:
        match = _RUNTIME_JAR.search(item.strip())
        if match:
            return f"Apache Iceberg {match.group(1)}"
    return None


def iceberg_version(spark: Any) -> str | None:
    """The Iceberg build the session runs: the driver JVM's ``IcebergBuild`` under spark-submit; under
    Spark Connect (no JVM in this process) the runtime jar the server was started with."""
    try:
        if not is_connect(spark):
            return str(driver_jvm(spark).org.apache.iceberg.IcebergBuild.fullVersion())
        return iceberg_version_of(spark.conf.get("spark.jars", ""), spark.conf.get("spark.jars.packages", ""))
    except Exception:  # py4j/Connect errors alike: the version is informative, unknown is an answer
        return None


def build_session(spec: dict[str, Any]) -> Any:
    """The job's session: spark-submit's driver session, or the Connect session the runner opened."""
    if is_connect():
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        return RemoteSparkSession.builder.getOrCreate()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(spec.get("job") or "airflow-iceberg-job").getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("AIRFLOW_ICEBERG_SPARK_LOG_LEVEL", "WARN"))
    return spark


def stop_session(spark: Any) -> None:
    """Stop spark-submit's session; a Connect session belongs to the runner, which clears it."""
    if not is_connect(spark):
        spark.stop()


def run_job(fn: Callable[[JobContext], dict[str, Any] | None], argv: list[str] | None = None) -> None:
    """Run ``fn`` under the job protocol (ledger row, exit code)."""
    spark = None
    ctx = None
    try:
        # The spec path is on argv; SparkFiles fallback needs the session.
        spark = build_session({})
        spec = restore_spec_secrets(load_spec(argv), lambda key: spark.conf.get(key, None))
        ctx = JobContext(spec, spark)
        metrics = fn(ctx) or {}
        ctx.write_ledger(metrics)
        print(f"[iceberg-job] {spec.get('job')} {ctx.outcome or ctx.status}: {json.dumps(metrics, default=str)}")
    except Exception as err:  # report, record, exit non-zero
        message = f"{type(err).__name__}: {err}"
        print(f"[iceberg-job] failed: {message}", file=sys.stderr)
        traceback.print_exc()
        if ctx is not None:
            try:
                ctx.write_ledger({}, error=message[:2000])
            except Exception:  # the ledger itself may be what failed
                traceback.print_exc()
        if spark is not None:
            stop_session(spark)
        sys.exit(1)
    stop_session(spark)
