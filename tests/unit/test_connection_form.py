"""The catalog connection guides (#20): form fields, validation per catalog type, a clean log.

* the form (Airflow 3 renders ``conn-fields`` as JSON schema): catalog type required with
  ``sql`` as default, help naming the required fields per type, REST OAuth documented, help
  on both JSON editors, a documentation URL for the Providers page;
* the hook refuses an incomplete connection as soon as it builds its config (no catalog call),
  naming the missing field, for each catalog type;
* reading the connection registers no short non-secret string with Airflow's secret masker
  (the "Skipping masking for a secret as it's too short" warning) while secrets stay masked.
"""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path

import pytest

from airflow_iceberg_provider.exceptions import IcebergConnectionError
from airflow_iceberg_provider.get_provider_info import (
    CONN_FIELDS,
    DOCUMENTATION_URL,
    REQUIRED_FIELDS,
    UI_FIELD_BEHAVIOUR,
    get_provider_info,
)
from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook

ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------- form
def test_catalog_type_is_required_with_sql_as_default():
    schema = CONN_FIELDS["catalog_type"]["schema"]
    # Airflow's form treats a field as required when its schema type does not allow null
    assert schema["type"] == "string" and schema["default"] == "sql"
    assert schema["enum"] == ["sql", "rest", "glue", "hive"]
    optional = [name for name, f in CONN_FIELDS.items() if name != "catalog_type"]
    assert all("null" in CONN_FIELDS[name]["schema"]["type"] for name in optional)


def test_help_names_the_required_fields_of_every_type():
    help_text = CONN_FIELDS["catalog_type"]["description"]
    for ctype, fields in REQUIRED_FIELDS.items():
        sentence = help_text.split(f"{ctype}:")[1].split(".")[0:2]
        for field in fields:
            assert field.split(" (")[0] in " ".join(sentence), (ctype, field, sentence)
    warehouse = CONN_FIELDS["warehouse"]["description"]
    assert "Required for sql and glue" in warehouse
    assert "required for sql and glue" in UI_FIELD_BEHAVIOUR["placeholders"]["warehouse"]
    assert "empty for glue" in UI_FIELD_BEHAVIOUR["placeholders"]["host"]


def test_rest_oauth_and_both_json_editors_are_documented():
    props = CONN_FIELDS["properties"]["description"]
    for needle in ("oauth2-server-uri", "scope", "credential=<id>:<secret>", "bearer token", "token"):
        assert needle in props, needle
    assert CONN_FIELDS["spark_properties"].get("description"), "the second JSON editor needs help text"
    placeholders = UI_FIELD_BEHAVIOUR["placeholders"]
    assert "oauth2-server-uri" in placeholders["properties"] and "client id" in placeholders["login"]
    assert "bearer token" in placeholders["password"]


def test_provider_manager_serves_the_form_as_declared():
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    widget = pm.connection_form_widgets["extra__iceberg_catalog__catalog_type"]
    assert widget.field["value"] == "sql" and widget.field["schema"]["type"] == "string"
    assert "needs Catalog URI and Warehouse" in widget.field["description"]
    assert pm.connection_form_widgets["extra__iceberg_catalog__spark_properties"].field["description"]
    behaviour = pm.field_behaviours["iceberg_catalog"]
    assert "extra__iceberg_catalog__warehouse" in behaviour["placeholders"]


def test_documentation_url_is_in_the_package_metadata():
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    # Airflow reads Project-URL "Documentation" from the installed metadata for the Providers page link
    assert urls["Documentation"] == DOCUMENTATION_URL == get_provider_info()["documentation-url"]
    assert DOCUMENTATION_URL.startswith("https://") and "airflow.apache.org" not in DOCUMENTATION_URL


def test_providers_api_serves_the_documentation_url():
    """What the Providers page receives (it falls back to airflow.apache.org/docs/<package> without it)."""
    from airflow.api_fastapi.core_api.services.public.providers import _provider_mapper
    from airflow.providers_manager import ProvidersManager

    info = ProvidersManager().providers["airflow-iceberg-provider"]
    assert _provider_mapper(info).documentation_url == DOCUMENTATION_URL


# ------------------------------------------------------------ validation per type
def _conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: object) -> IcebergCatalogHook:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "iceberg_catalog", **fields}))
    return IcebergCatalogHook(conn_id)


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"extra": {"warehouse": "file:///w"}}, ["catalog_type=None", "catalog_type to one of sql, rest, glue, hive"]),
        ({"host": "sqlite:////tmp/c.db", "extra": {"catalog_type": "sql"}}, ["warehouse is missing", "warehouse"]),
        ({"extra": {"catalog_type": "sql", "warehouse": "file:///w"}}, ["catalog URI is missing", "set host"]),
        ({"extra": {"catalog_type": "rest"}}, ["catalog_type=rest", "catalog URI is missing", "http://"]),
        ({"extra": {"catalog_type": "glue"}}, ["catalog_type=glue", "warehouse is missing"]),
        ({"extra": {"catalog_type": "hive"}}, ["catalog_type=hive", "catalog URI is missing", "thrift://"]),
    ],
    ids=["no-type", "sql-no-warehouse", "sql-no-uri", "rest-no-uri", "glue-no-warehouse", "hive-no-uri"],
)
def test_hook_refuses_an_incomplete_connection_when_building_its_config(monkeypatch, fields, names):
    hook = _conn(monkeypatch, "incomplete", **fields)
    with pytest.raises(IcebergConnectionError) as err:
        hook.config  # noqa: B018 - building the config is what validates
    for name in names:
        assert name in str(err.value), (name, str(err.value))
    assert "'incomplete'" in str(err.value), "the message names the connection"
    assert "catalog" not in hook.__dict__, "no catalog was contacted"


@pytest.mark.parametrize(
    ("fields", "ctype"),
    [
        ({"host": "sqlite:////tmp/c.db", "extra": {"catalog_type": "sql", "warehouse": "file:///w"}}, "sql"),
        (
            {
                "host": "http://rest:8181",
                "login": "client",
                "password": "s3cret-value",
                "extra": {"catalog_type": "rest"},
            },
            "rest",
        ),
        ({"extra": {"catalog_type": "glue", "warehouse": "s3://b/wh"}}, "glue"),
        ({"host": "thrift://hms:9083", "extra": {"catalog_type": "hive"}}, "hive"),
    ],
)
def test_hook_accepts_a_complete_connection_of_each_type(monkeypatch, fields, ctype):
    assert _conn(monkeypatch, "complete", **fields).config.catalog_type == ctype


# ------------------------------------------------------------------ secret masker
@pytest.fixture
def masker():
    from airflow.sdk._shared.secrets_masker.secrets_masker import SecretsMasker, _secrets_masker

    m = _secrets_masker()
    patterns, replacer, warned = set(m.patterns), m.replacer, SecretsMasker._has_warned_short_secret
    SecretsMasker._has_warned_short_secret = False
    yield m
    m.patterns, m.replacer = patterns, replacer
    SecretsMasker._has_warned_short_secret = warned


EXTRA = {
    "catalog_type": "sql",  # 3 characters: Airflow's masker warned about it atop every task log
    "catalog_name": "lakehouse",
    "warehouse": "file:///w",
    "properties": {"s3.path-style-access": "true", "s3.secret-access-key": "wJalrXUtnFEMI-K7MDENG"},
}


def test_loading_the_connection_logs_no_too_short_warning_and_secrets_stay_masked(monkeypatch, masker, caplog):
    hook = _conn(monkeypatch, "masked", host="sqlite:////tmp/c.db", extra=EXTRA)
    with caplog.at_level(logging.WARNING):
        assert hook.config.catalog_type == "sql" and hook.governance_namespace == "governance"
    assert "too short" not in caplog.text, caplog.text
    assert masker.redact("key wJalrXUtnFEMI-K7MDENG") == "key ***", "the secret in properties is still masked"
    assert masker.redact("catalog sql, path style true") == "catalog sql, path style true"


def test_without_the_registration_airflow_warns_and_a_short_real_secret_still_warns(monkeypatch, masker, caplog):
    """Controls: what triggered the warning (Airflow loading the connection), and that secrets are unaffected."""
    from airflow.sdk._shared.secrets_masker import secrets_masker

    from airflow_iceberg_provider.hooks._masking import NON_SECRET_TERMS, register_non_secret_terms

    assert all(len(t) < 5 for t in NON_SECRET_TERMS), "only words the masker never masks anyway"
    monkeypatch.setattr(secrets_masker, "SECRETS_TO_SKIP_MASKING", {"airflow"})
    with caplog.at_level(logging.WARNING):
        assert _conn(monkeypatch, "before", host="sqlite:////tmp/c.db", extra=EXTRA).config.catalog_type == "sql"
    assert "too short (<5 chars)" in caplog.text
    caplog.clear()
    assert "airflow.sdk._shared.secrets_masker.secrets_masker" in register_non_secret_terms()
    assert NON_SECRET_TERMS <= secrets_masker.SECRETS_TO_SKIP_MASKING
    secrets_masker.SecretsMasker._has_warned_short_secret = False
    with caplog.at_level(logging.WARNING):
        masker.add_mask({"api_token": "abc"})  # a genuinely short secret: Airflow should still say so
    assert "too short (<5 chars)" in caplog.text


def test_the_test_button_reports_a_missing_field_or_the_namespaces(monkeypatch, tmp_path):
    """What ``AIRFLOW__CORE__TEST_CONNECTION=Enabled`` runs: config check, then list the namespaces."""
    ok, message = _conn(monkeypatch, "glue_incomplete", extra={"catalog_type": "glue"}).test_connection()
    assert not ok and "warehouse is missing" in message
    (tmp_path / "wh").mkdir()
    extra = {"catalog_type": "sql", "catalog_name": "lakehouse", "warehouse": f"file://{tmp_path / 'wh'}"}
    hook = _conn(monkeypatch, "good", host=f"sqlite:///{tmp_path / 'c.db'}", extra=extra)
    hook.ensure_namespace("sales")
    assert hook.test_connection() == (True, "Connected to sql catalog 'lakehouse' (1 namespaces).")
