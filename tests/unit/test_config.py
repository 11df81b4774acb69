"""airflow_iceberg_provider.config: the one reader of configuration (no catalog, no Spark)."""

from __future__ import annotations

from airflow_iceberg_provider import config


def test_provider_setting_env_first_empty_means_unset(monkeypatch):
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", "/a.jar,/b.jar")
    assert config.setting("spark_jars") == "/a.jar,/b.jar"
    monkeypatch.setenv("AIRFLOW__ICEBERG_PROVIDER__SPARK_JARS", "")
    assert config.setting("spark_jars") is None
    monkeypatch.delenv("AIRFLOW__ICEBERG_PROVIDER__NO_SUCH_OPTION", raising=False)
    assert config.setting("no_such_option") is None


def test_sqlite_busy_timeout_default_value_and_bad_values(monkeypatch):
    key = "AIRFLOW__ICEBERG_PROVIDER__SQLITE_BUSY_TIMEOUT_MS"
    monkeypatch.delenv(key, raising=False)
    assert config.sqlite_busy_timeout_ms() == 30000
    monkeypatch.setenv(key, " 1500 ")
    assert config.sqlite_busy_timeout_ms() == 1500
    monkeypatch.setenv(key, "-5")
    assert config.sqlite_busy_timeout_ms() == 0
    monkeypatch.setenv(key, "soon")
    assert config.sqlite_busy_timeout_ms() == 30000


def test_airflow_settings(monkeypatch):
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example/")
    assert config.airflow_setting("api", "base_url") == "https://airflow.example/"
    assert config.airflow_setting("no_such_section", "x", "fb") == "fb"
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "true")
    assert config.airflow_flag("operators", "default_deferrable") is True
    monkeypatch.setenv("AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE", "false")
    assert config.airflow_flag("operators", "default_deferrable") is False
