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
              ``IcebergRefApprovalOperator`` decision)
============  =================================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.params import NAME_RE, flag

CATALOG_TYPES = ("sql", "rest", "glue", "hive")
SPARK_CATALOG_CLASS = "org.apache.iceberg.spark.SparkCatalog"
ICEBERG_EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"

#: Property keys whose values are secrets, wherever they appear.
_SECRET_KEY_RE = re.compile(r"(secret|password|token|credential|session|private|access-key-id)", re.I)

#: SQLAlchemy dialect -> JDBC sub-protocol for the SQL catalog.
_JDBC_DIALECTS = {"sqlite": "sqlite", "postgresql": "postgresql", "postgres": "postgresql", "mysql": "mysql"}


def is_secret_key(key: str) -> bool:
    """Whether a property key names a secret (never logged, never on argv)."""
    return bool(_SECRET_KEY_RE.search(key))


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
            needs_approval = flag(_get("hold_release_requires_approval"), "hold_release_requires_approval")
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
                _put(public, secret, f"{prefix}.{key}", value, secret_key=key in self._type_secret_keys())
        if s3:  # raw-file reads through Hadoop's FileSystem (erasure verification, orphan listing)
            for key, value in s3a_hadoop_conf(merged, prefix="spark.hadoop.").items():
                _put(public, secret, key, value)
        for key in list(public):
            if key.endswith(_S3A_SECRET_SUFFIXES):
                secret[key] = public.pop(key)
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

    @staticmethod
    def _type_secret_keys() -> tuple[str, ...]:
        """Catalog-type keys that are secret whatever their names say."""
        return ("jdbc.password", "credential", "token", "client.access-key-id", "client.secret-access-key")

    def _is_s3(self, merged: Mapping[str, str]) -> bool:
        """An s3 warehouse, or none (REST: the server's) with S3 FileIO settings; never a file:// one."""
        if self.warehouse:
            return self.warehouse.startswith(S3_SCHEMES)
        return any(k.startswith("s3.") for k in merged)

    def secret_values(self) -> list[str]:
        """Every secret value this config carries (for log masking and tests)."""
        values = [self.password] if self.password else []
        values += [v for k, v in {**self.properties, **self.spark_properties}.items() if is_secret_key(k)]
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
#: S3A keys that are secrets although their names don't say so.
_S3A_SECRET_SUFFIXES = (".fs.s3a.access.key",)


def _put(public: dict[str, str], secret: dict[str, str], key: str, value: str, *, secret_key: bool = False) -> None:
    """File one conf entry as public or secret (by its name, or because the caller says so)."""
    (secret if secret_key or is_secret_key(key) else public)[key] = value


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
