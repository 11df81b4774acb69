"""Secrets by allowlist, and where a job spec's secrets travel in each deploy mode."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from airflow_iceberg_provider.core.spec_secrets import (
    SPEC_SECRET_PREFIX,
    restore_spec_secrets,
    split_spec_secrets,
)
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.hooks.catalog_config import CatalogConfig, is_public_key, is_secret_key
from airflow_iceberg_provider.hooks.spark import IcebergSparkHook, conf_defaults
from tests.support.lake import catalog_conn_json

pytestmark = pytest.mark.security

P = "spark.sql.catalog.lake"
VALUE = "Val-7d1e5b0c-unique"

#: (catalog type, property key, public?) -- Iceberg's and pyiceberg's own names, and made-up ones.
CASES = [
    # REST
    ("rest", "oauth2-server-uri", True),
    ("rest", "scope", True),
    ("rest", "rest.signing-region", True),
    ("rest", "header.X-Iceberg-Access-Delegation", True),
    ("rest", "header.Authorization", False),
    ("rest", "credential", False),
    ("rest", "token", False),
    ("rest", "rest.auth.basic.password", False),
    ("rest", "rest.secret-access-key", False),
    # S3
    ("sql", "s3.endpoint", True),
    ("sql", "s3.path-style-access", True),
    ("sql", "s3.sse.type", True),
    ("sql", "s3.access-points.my-bucket", True),
    ("sql", "s3.sse.key", False),
    ("sql", "s3.sse.md5", False),
    ("sql", "s3.access-key-id", False),
    ("sql", "s3.secret-access-key", False),
    ("sql", "s3.session-token", False),
    # ADLS
    ("sql", "adls.account-name", True),
    ("sql", "adls.auth.shared-key.account.name", True),
    ("sql", "adls.read.block-size-bytes", True),
    ("sql", "adls.account-key", False),
    ("sql", "adls.connection-string", False),
    ("sql", "adls.connection-string.acct", False),
    ("sql", "adls.sas-token.acct", False),
    ("sql", "adls.auth.shared-key.account.key", False),
    ("sql", "adls.client-secret", False),
    ("sql", "adls.token", False),
    # GCS
    ("sql", "gcs.project-id", True),
    ("sql", "gcs.service.host", True),
    ("sql", "gcs.oauth2.token", False),
    ("sql", "gcs.encryption-key", False),
    ("sql", "gcs.decryption-key", False),
    # Glue
    ("glue", "glue.id", True),
    ("glue", "glue.region", True),
    ("glue", "client.assume-role.arn", True),
    ("glue", "client.assume-role.external-id", False),
    ("glue", "glue.session-token", False),
    # Hive
    ("hive", "list-all-tables", True),
    ("hive", "hive.metastore.database.owner", True),
    ("hive", "hadoop.fs.s3a.endpoint", True),
    ("hive", "hadoop.fs.s3a.secret.key", False),
    ("hive", "hive.metastore.sasl.qop", False),
    # a key of one catalog type is not public for another
    ("rest", "jdbc.user", False),
    # made up: secret, whatever its name says
    ("rest", "my.endpoint", False),
    ("sql", "warehouse-colour", False),
    ("hive", "x", False),
]


def _cfg(ctype: str, properties: dict[str, str]) -> CatalogConfig:
    host = {"sql": "sqlite:////tmp/c.db", "rest": "http://127.0.0.1:8181", "hive": "thrift://hms:9083"}.get(ctype)
    return CatalogConfig.from_connection_fields(
        conn_id="c",
        host=host,
        login=None,
        password=None,
        extra={
            "catalog_type": ctype,
            "catalog_name": "lake",
            "warehouse": "file:///tmp/wh" if ctype != "glue" else "s3://b/wh",
            "properties": properties,
        },
    )


@pytest.mark.parametrize(("ctype", "key", "public"), CASES, ids=[f"{c}:{k}" for c, k, _ in CASES])
def test_only_listed_keys_reach_the_public_conf(ctype, key, public):
    assert is_public_key(key, ctype) is public
    conf = _cfg(ctype, {key: VALUE}).spark_conf()
    if public:
        assert conf.public[f"{P}.{key}"] == VALUE and f"{P}.{key}" not in conf.secret
    else:
        assert conf.secret[f"{P}.{key}"] == VALUE
        assert VALUE not in json.dumps(conf.public)
        assert VALUE in _cfg(ctype, {key: VALUE}).secret_values()


def test_every_secret_key_is_redacted_in_the_event_log(tmp_path, monkeypatch):
    """Spark redacts by key name: the plan's regex names each secret key, made-up ones included."""
    made_up = {"adls.account-key": "a" * 20, "header.Authorization": "Bearer x" * 3, "vendor.magic": "m" * 12}
    (tmp_path / "wh").mkdir()
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT",
        catalog_conn_json(tmp_path / "c.db", tmp_path / "wh", properties={**made_up, "s3.endpoint": "http://e"}),
    )
    plan = IcebergSparkHook(conf={"spark.redaction.regex": "(?i)mine"}).plan("/app.py", spec={"table": "db.t"})
    regex = re.compile(plan.conf["spark.redaction.regex"])
    for key in made_up:
        full = f"spark.sql.catalog.lakehouse.{key}"
        assert full in plan.secret_conf and full not in plan.conf
        assert regex.search(full), full
    assert regex.search("spark.mine.too")  # the task's own regex is kept
    assert regex.search(SPEC_SECRET_PREFIX + "salt")
    assert not regex.search("spark.sql.catalog.lakehouse.s3.endpoint")
    assert not any(v in " ".join(plan.conf.values()) for v in made_up.values())


def test_conf_defaults_refuse_non_public_catalog_keys(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW__ICEBERG_PROVIDER__SPARK_CONF_DEFAULTS",
        json.dumps({"spark.sql.catalog.lake.adls.account-key": "k" * 20}),
    )
    with pytest.raises(
        IcebergValidationError, match=r"names secret conf \['spark.sql.catalog.lake.adls.account-key'\]"
    ):
        conf_defaults()
    assert is_secret_key("spark.sql.catalog.lake.header.Authorization")
    assert not is_secret_key("spark.sql.catalog.lake.uri") and not is_secret_key("spark.sql.shuffle.partitions")


# ------------------------------------------------------------------ job spec secrets


def test_spec_secrets_split_and_restore_round_trip():
    spec = {"table": "db.t", "salt": "s" * 16, "erasure": {"salt": "t" * 16, "phase": "purge"}}
    shipped, conf = split_spec_secrets(spec)
    assert "s" * 16 not in json.dumps(shipped) and "t" * 16 not in json.dumps(shipped)
    assert conf == {SPEC_SECRET_PREFIX + "salt": "s" * 16, SPEC_SECRET_PREFIX + "erasure.salt": "t" * 16}
    assert restore_spec_secrets(json.loads(json.dumps(shipped)), conf.get) == spec
    with pytest.raises(KeyError, match="spec-secret.erasure.salt") as err:
        restore_spec_secrets(json.loads(json.dumps(shipped)), {}.get)
    assert "t" * 16 not in str(err.value)


SALT = "salt-9b2f4e71c0d3a5"


@pytest.fixture
def submit_env(tmp_path, monkeypatch):
    (tmp_path / "wh").mkdir()
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_CATALOG_DEFAULT",
        catalog_conn_json(tmp_path / "c.db", tmp_path / "wh", properties={"adls.account-key": "acct-key-" + "9" * 12}),
    )
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    return tmp_path


def _submission(tmp_path: Path, deploy_mode: str) -> tuple[list[str], str, str]:
    hook = IcebergSparkHook(deploy_mode=deploy_mode)
    plan = hook.plan("/app.py", spec={"table": "db.t", "erasure": {"salt": SALT}})
    workdir = tmp_path / deploy_mode
    workdir.mkdir()
    cmd, _ = hook.runner().command(plan, "run-1", workdir)
    return cmd, (workdir / "job_spec.json").read_text(), (workdir / "spark.properties").read_text()


def test_client_mode_keeps_the_spec_on_this_host(submit_env):
    cmd, spec, props = _submission(submit_env, "client")
    files = cmd[cmd.index("--files") + 1].split(",")
    assert not any(f.endswith("job_spec.json") for f in files)  # the driver reads it in place
    assert json.loads(spec)["erasure"]["salt"] == SALT  # in the 0600 spec file only
    assert SALT not in props and SALT not in " ".join(cmd)
    assert "acct-key-" not in " ".join(cmd) and "acct-key-" in props


def test_cluster_mode_ships_the_spec_without_its_secrets(submit_env):
    cmd, spec, props = _submission(submit_env, "cluster")
    files = cmd[cmd.index("--files") + 1].split(",")
    assert any(f.endswith("job_spec.json") for f in files)
    assert SALT not in spec and json.loads(spec)["secrets_in_conf"] == ["erasure.salt"]
    assert f"{SPEC_SECRET_PREFIX}erasure.salt={SALT}" in props  # travels as the catalog's secrets do
    assert SALT not in " ".join(cmd) and "acct-key-" not in " ".join(cmd)
