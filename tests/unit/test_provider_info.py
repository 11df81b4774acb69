"""Provider registration: Airflow's ProvidersManager and CLI see the package."""

from __future__ import annotations

import json
import subprocess

from airflow_iceberg_provider.get_provider_info import get_provider_info


def test_provider_info_lists_real_modules():
    import importlib

    info = get_provider_info()
    assert info["package-name"] == "airflow-iceberg-provider"
    for section in ("hooks", "operators"):
        modules = info[section][0]["python-modules"]
        assert modules, section
        for name in modules:
            importlib.import_module(name)
    conn = info["connection-types"][0]
    assert conn["connection-type"] == "iceberg_catalog"
    assert conn["hook-class-name"] == "airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook"
    assert {"catalog_type", "catalog_name", "warehouse", "properties"} <= set(conn["conn-fields"])


def test_airflow_cli_lists_provider_and_hook():
    out = subprocess.run(["airflow", "providers", "list", "-o", "json"], capture_output=True, text=True, check=True)
    names = {p["package_name"] for p in json.loads(out.stdout[out.stdout.index("[") :])}
    assert "airflow-iceberg-provider" in names
    hooks = subprocess.run(["airflow", "providers", "hooks", "-o", "json"], capture_output=True, text=True, check=True)
    assert "IcebergCatalogHook" in hooks.stdout and "iceberg_catalog" in hooks.stdout


def test_connection_form_widgets_registered():
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    widgets = pm.connection_form_widgets
    assert "extra__iceberg_catalog__catalog_type" in widgets
    assert pm.field_behaviours["iceberg_catalog"]["relabeling"]["host"] == "Catalog URI"
