"""One catalog connection, two engines: the declarative connection mapping.

An ``iceberg_catalog`` Airflow connection describes a catalog once. This module
turns it into

* the properties for :func:`pyiceberg.catalog.load_catalog` (Airflow side), and
* the ``spark.sql.catalog.<name>.*`` configuration for Spark's ``SparkCatalog``,
  split into *public* conf (safe on the spark-submit command line) and *secret*
  conf (only ever written to a 0600 properties file).

The mapping is pure data-in/data-out so it can be unit-tested without Airflow,
Spark or a catalog. Connection fields:

============  =================================================================
field         meaning
============  =================================================================
host          catalog URI: SQLAlchemy URL (``sql``), REST endpoint (``rest``),
              thrift URI (``hive``); unused for ``glue``
login         database user (``sql``), OAuth client id (``rest``), AWS access
              key id (``glue``)
password      database password, OAuth client secret or bearer token (``rest``
              without login), AWS secret key (``glue``) — a secret
extra         ``catalog_type`` (sql | rest | glue | hive), ``catalog_name``,
              ``warehouse``, ``properties`` (dict of Iceberg catalog / FileIO
              properties passed to both engines, e.g. ``s3.endpoint``),
              ``spark_properties`` (dict of Spark-only catalog properties),
              ``hold_release_requires_approval`` (``true``/``false``: every
              legal-hold release on this connection needs an approved
              ``IcebergRefApprovalOperator`` decision),
              ``erasure.copies.versioning-retention-days`` and
              ``erasure.copies.backup-retention-days`` (days copies outside
              the tables keep erased bytes; read by
              ``IcebergCatalogHook.copy_retention``)
============  =================================================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.params import NAME_RE, flag

CATALOG_TYPES = ("sql", "rest", "glue", "hive")
SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"

#: SQLAlchemy dialect -> JDBC sub-protocol for the SQL catalog.
_JDBC_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgresql", "postgres": "postgresql", "mysql": "mysql"}

# ------------------------------------------------------------------ public keys
# Only the property keys listed here travel in the public Spark conf (the spark-submit command
# line, Spark's event log and environment page). Every other key -- a credential, a header, a
# key this list does not know yet -- is secret: 0600 properties file, masked, redacted.
# The names are Iceberg's own (``CatalogProperties``, ``AwsProperties``, ``AwsClientProperties``,
# ``S3FileIOProperties``, ``HttpClientProperties``, ``AzureProperties``, ``GCPProperties``,
# ``OAuth2Properties``, ``AuthProperties``, the JDBC, Hive and REST catalogs) and pyiceberg's
# where it names the same setting differently.

#: Every catalog (``CatalogProperties``, Spark's ``SparkCatalog``).
CATALOG_PUBLIC_KEYS = frozenset(
    {
        "type",
        "catalog-impl",
        "io-impl",
        "py-io-impl",
        "warehouse",
        "uri",
        "clients",
        "client.pool.cache.eviction-interval-ms",
        "client-pool-cache-keys",
        "metrics-reporter-impl",
        "cache-enabled",
        "cache.case-sensitive",
        "cache.expiration-interval-ms",
        "io.manifest.cache-enabled",
        "io.manifest.cache.expiration-interval-ms",
        "io.manifest.cache.max-total-bytes",
        "io.manifest.cache.max-content-length",
        "lock-impl",
        "lock.table",
        "lock.heartbeat-interval-ms",
        "lock.heartbeat-timeout-ms",
        "lock.heartbeat-threads",
        "lock.acquire-interval-ms",
        "lock.acquire-timeout-ms",
        "app-id",
        "user",
        "auth.session-timeout-ms",
        "encryption.kms-type",
        "encryption.kms-impl",
        "default-namespace",
        "use-nullable-query-schema",
    }
)
#: Table and view properties a catalog stamps on what it creates (they end up in table metadata).
CATALOG_PUBLIC_PREFIXES = ("table-default.", "table-override.", "view-default.", "view-override.")

#: Per catalog type (the keys of that catalog implementation).
CATALOG_TYPE_PUBLIC_KEYS: dict[str, frozenset[str]] = {
    "sql": frozenset({"jdbc.user", "jdbc.schema-version", "jdbc.init-catalog-tables", "jdbc.strict-mode"}),
    "rest": frozenset(
        {
            "prefix",
            "rest-page-size",
            "view-endpoints-supported",
            "snapshot-loading-mode",
            "rest-metrics-reporting-enabled",
            "oauth2-server-uri",
            "scope",
            "audience",
            "resource",
            "token-expires-in-ms",
            "token-refresh-enabled",
            "token-exchange-enabled",
            "rest.auth.type",
            "rest.auth.basic.username",
            "rest.auth.sigv4.delegate-auth-type",
            "rest.sigv4-enabled",
            "rest.signing-region",
            "rest.signing-name",
            "header.X-Iceberg-Access-Delegation",
        }
    ),
    "hive": frozenset(
        {
            "list-all-tables",
            "hive.metastore.table.owner",
            "hive.metastore.database.owner",
            "hive.metastore.database.owner-type",
            "metastore.catalog.default",
            "hive.hive2-compatible",
            "hive.kerberos-authentication",
            "hive.kerberos-service-name",
            "lock-check-min-wait-time",
            "lock-check-max-wait-time",
            "lock-check-retries",
        }
    ),
    "glue": frozenset(
        {
            "glue.id",
            "glue.account-id",
            "glue.skip-archive",
            "glue.skip-name-validation",
            "glue.lakeformation-enabled",
            "glue.endpoint",
            "glue.region",
            "glue.profile-name",
            "glue.max-retries",
            "glue.retry-mode",
            "lakeformation.table-name",
            "lakeformation.db-name",
            "dynamodb.endpoint",
            "dynamodb.table-name",
        }
    ),
}

#: Per FileIO: a catalog may read files through any of them (``ResolvingFileIO``), so all apply.
FILE_IO_PUBLIC_KEYS: dict[str, frozenset[str]] = {
    "aws-client": frozenset(
        {
            "client.region",
            "client.factory",
            "client.credentials-provider",
            "client.refresh-credentials-endpoint",
            "client.refresh-credentials-enabled",
            "client.legacy-md5-plugin-enabled",
            "client.assume-role.arn",
            "client.assume-role.region",
            "client.assume-role.timeout-sec",
            "client.assume-role.session-name",
            "client.profile-name",
            "client.role-arn",
            "client.role-session-name",
            "kms.encryption-algorithm-spec",
            "kms.data-key-spec",
        }
    ),
    "http-client": frozenset(
        {
            "http-client.type",
            "http-client.urlconnection.connection-timeout-ms",
            "http-client.urlconnection.socket-timeout-ms",
            "http-client.apache.connection-timeout-ms",
            "http-client.apache.socket-timeout-ms",
            "http-client.apache.connection-acquisition-timeout-ms",
            "http-client.apache.connection-max-idle-time-ms",
            "http-client.apache.connection-time-to-live-ms",
            "http-client.apache.expect-continue-enabled",
            "http-client.apache.max-connections",
            "http-client.apache.tcp-keep-alive-enabled",
            "http-client.apache.use-idle-connection-reaper-enabled",
        }
    ),
    "s3": frozenset(
        {
            "s3.endpoint",
            "s3.region",
            "s3.path-style-access",
            "s3.client-factory-impl",
            "s3.access-grants.enabled",
            "s3.access-grants.fallback-to-iam",
            "s3.analytics-accelerator.enabled",
            "s3.crt.enabled",
            "s3.crt.max-concurrency",
            "s3.sse.type",
            "s3.multipart.num-threads",
            "s3.multipart.part-size-bytes",
            "s3.multipart.threshold",
            "s3.staging-dir",
            "s3.acl",
            "s3.session-token-expires-at-ms",
            "s3.use-arn-region-enabled",
            "s3.checksum-enabled",
            "s3.remote-signing-enabled",
            "s3.signer.uri",
            "s3.signer.endpoint",
            "s3.delete.batch-size",
            "s3.delete.num-threads",
            "s3.delete-enabled",
            "s3.write.table-tag-enabled",
            "s3.write.namespace-tag-enabled",
            "s3.write.storage-class",
            "s3.acceleration-enabled",
            "s3.dualstack-enabled",
            "s3.cross-region-access-enabled",
            "s3.preload-client-enabled",
            "s3.retry.num-retries",
            "s3.retry.min-wait-ms",
            "s3.retry.max-wait-ms",
            "s3.directory-bucket.list-prefix-as-directory",
            "s3.connect-timeout",
            "s3.request-timeout",
            "s3.force-virtual-addressing",
        }
    ),
    "adls": frozenset(
        {
            "adls.read.block-size-bytes",
            "adls.write.block-size-bytes",
            "adls.auth.shared-key.account.name",
            "adls.refresh-credentials-endpoint",
            "adls.refresh-credentials-enabled",
            "adls.account-name",
            "adls.account-host",
            "adls.blob-storage-authority",
            "adls.dfs-storage-authority",
            "adls.blob-storage-scheme",
            "adls.dfs-storage-scheme",
            "adls.anon",
        }
    ),
    "gcs": frozenset(
        {
            "gcs.project-id",
            "gcs.service.host",
            "gcs.user-project",
            "gcs.channel.read.chunk-size-bytes",
            "gcs.channel.write.chunk-size-bytes",
            "gcs.oauth2.token-expires-at",
            "gcs.oauth2.refresh-credentials-endpoint",
            "gcs.oauth2.refresh-credentials-enabled",
            "gcs.no-auth",
            "gcs.delete.batch-size",
            "gcs.access",
            "gcs.consistency",
            "gcs.cache-timeout",
            "gcs.requester-pays",
            "gcs.default-bucket-location",
            "gcs.version-aware",
        }
    ),
    # Hadoop's S3A, as the provider maps S3 FileIO settings onto it (``spark.hadoop.*`` and a
    # catalog's ``hadoop.*`` overrides); relative to ``spark.hadoop.`` / ``hadoop.``.
    "s3a": frozenset(
        {
            "fs.s3.impl",
            "fs.s3a.impl",
            "fs.s3a.endpoint",
            "fs.s3a.endpoint.region",
            "fs.s3a.path.style.access",
            "fs.s3a.connection.ssl.enabled",
        }
    ),
}
#: Per-bucket or per-account settings whose values are not credentials.
FILE_IO_PUBLIC_PREFIXES = (
    "s3.write.tags.",
    "s3.delete.tags.",
    "s3.access-points.",
    "s3.analytics-accelerator.",
    "client.assume-role.tags.",
    "adls.sas-token-expires-at-ms.",
)
_FILE_IO_PUBLIC = frozenset().union(*FILE_IO_PUBLIC_KEYS.values())
_HADOOP_PREFIXES = ("spark.hadoop.", "hadoop.")

#: Names that say "secret" outright: Spark conf outside a catalog (``spark_conf_defaults``) is
#: refused when its key looks like this (no allowlist can cover every Spark setting).
_SECRET_WORD_RE = re.compile(
    r"(secret|password|token|credential|private|access-key-id|access[.]key|sas-token|key$)", re.I
)


def is_public_key(key: str, catalog_type: str) -> bool:
    """Whether catalog property ``key`` is known to be public for a ``catalog_type`` catalog.

    Only keys on Iceberg's property lists (:data:`CATALOG_PUBLIC_KEYS`,
    :data:`CATALOG_TYPE_PUBLIC_KEYS`, :data:`FILE_IO_PUBLIC_KEYS` and the prefixes beside them)
    are public; everything else, including a key nobody listed, is secret.

    >>> is_public_key("s3.endpoint", "rest"), is_public_key("s3.sse.key", "rest")
    (True, False)
    >>> is_public_key("jdbc.user", "sql"), is_public_key("jdbc.user", "rest")
    (True, False)
    """
    if key.startswith("hadoop."):
        return key[len("hadoop.") :] in FILE_IO_PUBLIC_KEYS["s3a"]
    if key in CATALOG_PUBLIC_KEYS or key in _FILE_IO_PUBLIC:
        return True
    if key in CATALOG_TYPE_PUBLIC_KEYS.get(catalog_type, frozenset()):
        return True
    return key.startswith(CATALOG_PUBLIC_PREFIXES + FILE_IO_PUBLIC_PREFIXES)


def is_secret_key(key: str, catalog_type: str | None = None) -> bool:
    """Whether a property key names a secret (never logged, never on argv).

    With ``catalog_type``, ``key`` is a catalog property: secret unless :func:`is_public_key`.
    Without it, ``key`` is any other Spark conf key (used to refuse credentials in
    ``spark_conf_defaults``): a ``spark.sql.catalog.<name>.<key>`` key is judged by the allowlist
    (public for some catalog type), any other key is secret when its name says so (no list can
    cover every Spark and Hadoop setting).
    """
    if catalog_type is not None:
        return not is_public_key(key, catalog_type)
    if key.startswith("spark.sql.catalog."):
        rest = key.split(".", 4)[4:]
        return bool(rest) and not any(is_public_key(rest[0], ctype) for ctype in CATALOG_TYPES)
    if key.startswith("spark.hadoop.") and key[len("spark.hadoop.") :] in FILE_IO_PUBLIC_KEYS["s3a"]:
        return False
    return bool(_SECRET_WORD_RE.search(key))


def is_public_hadoop_key(key: str) -> bool:
    """Whether a ``spark.hadoop.*`` key the provider derives is on the S3A allowlist."""
    return key.startswith("spark.hadoop.") and key[len("spark.hadoop.") :] in FILE_IO_PUBLIC_KEYS["s3a"]


@dataclass(frozen=True)
class SparkCatalogConf:
    """Spark configuration for one catalog, split by sensitivity."""

    public: dict[str, str]
    secret: dict[str, str]

    def all(self) -> dict[str, str]:
        return {**self.public, **self.secret}


@dataclass(frozen=True)
class CatalogConfig:
    """Engine-neutral description of a catalog, built from an Airflow connection."""

    catalog_type: str
    catalog_name: str
    uri: str | None = None
    warehouse: str | None = None
    login: str | None = None
    password: str | None = field(default=None, repr=False)
    properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    spark_properties: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: every legal-hold release on this connection needs an approval bound to the hold
    hold_release_requires_approval: bool = False

    # ------------------------------------------------------------------ build
    @classmethod
    def from_connection_fields(
        cls,
        *,
        conn_id: str,
        host: str | None,
        login: str | None,
        password: str | None,
        extra: Mapping[str, Any],
    ) -> CatalogConfig:
        """Validate the connection's fields and build the config; errors name the fix."""

        def _get(name: str) -> Any:
            # The UI stores conn-fields as plain keys; older UIs prefix them.
            return extra.get(name, extra.get(f"extra__iceberg_catalog__{name}"))

        ctype = (_get("catalog_type") or "").strip().lower()
        if ctype not in CATALOG_TYPES:
            raise IcebergConnectionError(
                f"Connection {conn_id!r}: catalog_type={ctype or None!r} is not supported; set the "
                f"extra field catalog_type to one of {', '.join(CATALOG_TYPES)}."
            )
        name = _get("catalog_name") or "lakehouse"
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise IcebergConnectionError(
                f"Connection {conn_id!r}: catalog_name={name!r} is not a valid name; use "
                "[A-Za-z_][A-Za-z0-9_]* (it must be identical for Spark and pyiceberg)."
            )
        warehouse = _get("warehouse") or None
        properties = _as_str_dict(_get("properties"), f"Connection {conn_id!r} extra 'properties'")
        spark_properties = _as_str_dict(_get("spark_properties"), f"Connection {conn_id!r} extra 'spark_properties'")
        uri = host or properties.pop("uri", None) or None
        try:
            needs_approval = bool(
                flag(_get("hold_release_requires_approval"), "hold_release_requires_approval", optional=True)
            )
        except ValueError as err:
            raise IcebergConnectionError(f"Connection {conn_id!r} extra: {err}") from err
        cfg = cls(
            catalog_type=ctype,
            catalog_name=name,
            uri=uri,
            warehouse=warehouse,
            login=login or None,
            password=password or None,
            properties=properties,
            spark_properties=spark_properties,
            hold_release_requires_approval=needs_approval,
        )
        cfg._check(conn_id)
        return cfg

    def _check(self, conn_id: str) -> None:
        where = f"Connection {conn_id!r} (catalog_type={self.catalog_type})"
        if self.catalog_type in ("sql", "rest", "hive") and not self.uri:
            example = {
                "sql": "sqlite:////abs/path/catalog.db or postgresql+psycopg2://host:5432/db",
                "rest": "http://127.0.0.1:8181",
                "hive": "thrift://metastore:9083",
            }[self.catalog_type]
            raise IcebergConnectionError(f"{where}: the catalog URI is missing; set host to e.g. {example}.")
        if self.catalog_type in ("sql", "glue") and not self.warehouse:
            raise IcebergConnectionError(
                f"{where}: warehouse is missing; set the extra field warehouse to the table root, "
                "e.g. file:///abs/warehouse or s3://bucket/warehouse."
            )
        if self.catalog_type == "sql":
            self._jdbc_parts(where)
            if self.warehouse and self.warehouse.startswith("/"):
                raise IcebergConnectionError(
                    f"{where}: warehouse={self.warehouse!r} must be a URI; use 'file://{self.warehouse}' "
                    "so Spark and pyiceberg resolve the same location."
                )

    # ------------------------------------------------------------- pyiceberg
    def pyiceberg_properties(self) -> dict[str, str]:
        """Properties for ``pyiceberg.catalog.load_catalog(catalog_name, **props)``."""
        props: dict[str, str] = {"type": self.catalog_type, **self.properties}
        if self.warehouse:
            props["warehouse"] = self.warehouse
        if self.catalog_type == "sql":
            props["uri"] = self._sqlalchemy_url_with_credentials()
        elif self.catalog_type == "rest":
            props["uri"] = str(self.uri)
            props.update(self._rest_auth())
        elif self.catalog_type == "hive":
            props["uri"] = str(self.uri)
        elif self.catalog_type == "glue":
            if self.login:
                props.setdefault("glue.access-key-id", self.login)
                props.setdefault("client.access-key-id", self.login)
            if self.password:
                props.setdefault("glue.secret-access-key", self.password)
                props.setdefault("client.secret-access-key", self.password)
        return props

    # ----------------------------------------------------------------- Spark
    def spark_conf(self) -> SparkCatalogConf:
        """``spark.sql.*`` configuration for the same catalog under the same name."""
        prefix = f"spark.sql.catalog.{self.catalog_name}"
        public: dict[str, str] = {
            "spark.sql.extensions": ICEBERG_EXTENSIONS,
            prefix: SPARK_CATALOG_CLASS,
        }
        secret: dict[str, str] = {}
        catalog = {"warehouse": self.warehouse, **self._spark_catalog_type_conf()}
        merged = {**self.properties, **self.spark_properties}
        s3 = self._is_s3(merged)
        if s3:
            merged = s3_spark_properties(merged)
        for key, value in {**catalog, **merged}.items():
            if value is not None:
                _put(public, secret, f"{prefix}.{key}", value, secret_key=is_secret_key(key, self.catalog_type))
        if s3:  # raw-file reads through Hadoop's FileSystem (erasure verification, orphan listing)
            for key, value in s3a_hadoop_conf(merged, prefix="spark.hadoop.").items():
                _put(public, secret, key, value, secret_key=not is_public_hadoop_key(key))
        return SparkCatalogConf(public=public, secret=secret)

    def _spark_catalog_type_conf(self) -> dict[str, str | None]:
        """The catalog-type part of the Spark catalog conf (keys relative to ``spark.sql.catalog.<name>``)."""
        if self.catalog_type == "sql":
            dialect, jdbc_url = self._jdbc_parts(f"catalog {self.catalog_name!r}")
            out: dict[str, str | None] = {"type": "jdbc", "uri": jdbc_url, "jdbc.schema-version": "V1"}
            if dialect != "sqlite":
                user, pwd = self._db_credentials()
                out.update({"jdbc.user": user, "jdbc.password": pwd})
            return out
        if self.catalog_type == "rest":
            return {"type": "rest", "uri": str(self.uri), **self._rest_auth()}
        if self.catalog_type == "hive":
            return {"type": "hive", "uri": str(self.uri)}
        return {  # glue
            "type": "glue",
            "client.access-key-id": self.login,
            "client.secret-access-key": self.password,
        }

    def _is_s3(self, merged: Mapping[str, str]) -> bool:
        """An s3 warehouse, or none (REST: the server's) with S3 FileIO settings; never a file:// one."""
        if self.warehouse:
            return self.warehouse.startswith(S3_SCHEMES)
        return any(k.startswith("s3.") for k in merged)

    def secret_values(self) -> list[str]:
        """Every secret value this config carries (for log masking and tests)."""
        values = [self.password] if self.password else []
        merged = {**self.properties, **self.spark_properties}
        values += [v for k, v in merged.items() if is_secret_key(k, self.catalog_type)]
        return [v for v in values if v]

    # --------------------------------------------------------------- helpers
    def _jdbc_parts(self, where: str) -> tuple[str, str]:
        """Map the SQLAlchemy URL to (dialect, JDBC URL without credentials)."""
        url = str(self.uri or "")
        parts = urlsplit(url)
        dialect = parts.scheme.split("+", 1)[0].lower()
        if dialect not in _JDBC_DIALECTS:
            raise IcebergConnectionError(
                f"{where}: URI scheme {parts.scheme!r} is not a supported SQL catalog database; use "
                "sqlite:////abs/path/catalog.db, postgresql+psycopg2://host:port/db or mysql+pymysql://…"
            )
        if dialect == "sqlite":
            path = url.split(":///", 1)[1] if ":///" in url else ""
            if not path.startswith("/") or path == "/:memory:" or ":memory:" in path:
                raise IcebergConnectionError(
                    f"{where}: SQLite catalog URI {url!r} must name an absolute file path "
                    "(sqlite:////abs/path/catalog.db, four slashes); in-memory or relative databases "
                    "cannot be shared between Spark and pyiceberg."
                )
            return dialect, f"jdbc:sqlite:{path}"
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        query = f"?{parts.query}" if parts.query else ""
        return dialect, f"jdbc:{_JDBC_DIALECTS[dialect]}://{host}{port}{parts.path}{query}"

    def _db_credentials(self) -> tuple[str | None, str | None]:
        parts = urlsplit(str(self.uri or ""))
        user = self.login or (unquote(parts.username) if parts.username else None)
        pwd = self.password or (unquote(parts.password) if parts.password else None)
        return user, pwd

    def _sqlalchemy_url_with_credentials(self) -> str:
        url = str(self.uri)
        parts = urlsplit(url)
        if parts.scheme.startswith("sqlite"):
            return url
        user, pwd = self._db_credentials()
        if not user:
            return url
        auth = quote(user, safe="") + (f":{quote(pwd, safe='')}" if pwd else "")
        host = parts.hostname or "localhost"
        netloc = f"{auth}@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))

    def _rest_auth(self) -> dict[str, str]:
        if self.login and self.password:
            return {"credential": f"{self.login}:{self.password}"}
        if self.password:
            return {"token": self.password}
        return {}


S3_SCHEMES = ("s3://", "s3a://", "s3n://")
HADOOP_FILE_IO = "org.apache.iceberg.hadoop.HadoopFileIO"
S3A_FILE_SYSTEM = "org.apache.hadoop.fs.s3a.S3AFileSystem"
#: pyiceberg's unified ``client.*`` credentials -> the ``s3.*`` keys Iceberg Java's S3FileIO reads.
_CLIENT_TO_S3 = {
    "client.access-key-id": "s3.access-key-id",
    "client.secret-access-key": "s3.secret-access-key",
    "client.session-token": "s3.session-token",
}
#: FileIO property -> the S3A (Hadoop) setting it becomes under HadoopFileIO.
_S3_TO_S3A = {
    "s3.endpoint": "fs.s3a.endpoint",
    "s3.path-style-access": "fs.s3a.path.style.access",
    "client.region": "fs.s3a.endpoint.region",
    "s3.access-key-id": "fs.s3a.access.key",
    "s3.secret-access-key": "fs.s3a.secret.key",
    "s3.session-token": "fs.s3a.session.token",
}


def _put(public: dict[str, str], secret: dict[str, str], key: str, value: str, *, secret_key: bool) -> None:
    """File one conf entry as public or secret (the caller judged its key by the allowlist)."""
    (secret if secret_key else public)[key] = value


def s3_spark_properties(props: Mapping[str, str]) -> dict[str, str]:
    """Spark catalog properties for an S3 warehouse, from the properties pyiceberg reads.

    * ``io-impl`` defaults to Iceberg's ``S3FileIO`` (needs the AWS SDK v2 jars on Spark's
      classpath); pyiceberg's ``s3.region`` and ``client.*`` credentials are given to it as
      ``client.region`` and ``s3.*`` (the names Iceberg Java reads).
    * With ``io-impl`` set to ``HadoopFileIO`` (``hadoop-aws`` + AWS SDK v1 on the classpath),
      the same values become the catalog's Hadoop overrides ``hadoop.fs.s3a.*`` and both the
      ``s3`` and ``s3a`` schemes are served by ``S3AFileSystem``.
    """
    out = dict(props)
    out.setdefault("io-impl", S3_FILE_IO)
    if "s3.region" in out:
        out.setdefault("client.region", out["s3.region"])
    for client_key, s3_key in _CLIENT_TO_S3.items():
        if client_key in out:
            out.setdefault(s3_key, out.pop(client_key))
    if out["io-impl"] == HADOOP_FILE_IO:
        conf = s3a_hadoop_conf(out, prefix="hadoop.")
        out = {k: v for k, v in out.items() if k not in _S3_TO_S3A}
        out.update({k: v for k, v in conf.items() if k not in out})
    return out


def s3a_hadoop_conf(props: Mapping[str, str], *, prefix: str) -> dict[str, str]:
    """S3A settings (``<prefix>fs.s3a.*``, ``s3`` and ``s3a`` schemes -> ``S3AFileSystem``) from
    FileIO properties; with ``prefix="spark.hadoop."`` they are Spark's global Hadoop conf, used
    by jobs that read raw files through Hadoop's FileSystem (needs ``hadoop-aws`` + AWS SDK v1)."""
    out = {f"{prefix}fs.s3.impl": S3A_FILE_SYSTEM, f"{prefix}fs.s3a.impl": S3A_FILE_SYSTEM}
    for key, s3a_key in _S3_TO_S3A.items():
        if props.get(key):
            out[f"{prefix}{s3a_key}"] = props[key]
    if props.get("s3.endpoint", "").startswith("http://"):
        out[f"{prefix}fs.s3a.connection.ssl.enabled"] = "false"
    return out


def redaction_regex(secret_keys: Iterable[str], base: str) -> str:
    """A Spark redaction regex (``spark.redaction.regex``, ``spark.sql.redaction.options.regex``) that
    redacts what ``base`` does and each of ``secret_keys`` exactly (Spark redacts by key name).

    A ``spark.hadoop.X`` key is also named as ``X``: Spark reports it under that name among the
    Hadoop properties of its event log.

    >>> print(redaction_regex(["spark.sql.catalog.c.header.Authorization", "spark.hadoop.fs.x.k"], "(?i)secret"))
    (?i)secret|spark\\.sql\\.catalog\\.c\\.header\\.Authorization|spark\\.hadoop\\.fs\\.x\\.k|fs\\.x\\.k
    """
    names: list[str] = []
    for key in secret_keys:
        names.append(key)
        if key.startswith("spark.hadoop."):
            names.append(key[len("spark.hadoop.") :])
    escaped = [re.escape(name) for name in dict.fromkeys(names)]
    return "|".join([base, *escaped]) if escaped else base


def _as_str_dict(value: Any, what: str) -> dict[str, str]:
    if value in (None, ""):
        return {}
    if isinstance(value, str):
        import json

        try:
            value = json.loads(value)
        except ValueError as err:
            raise IcebergConnectionError(f"{what} is not valid JSON: {err}; pass an object.") from err
    if not isinstance(value, Mapping):
        raise IcebergConnectionError(f"{what} must be a JSON object of string properties.")
    return {str(k): str(v) for k, v in value.items()}
