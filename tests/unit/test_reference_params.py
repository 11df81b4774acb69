"""The API reference shows every constructor parameter: the class's own ``:param`` fields and those of its
package base classes (``scripts/docs_hooks.py`` renders the inherited ones under each class).

The constructor's parameters are introspected from the classes themselves (every ``__init__`` of the
class and of its bases defined in the package; Airflow's own ``BaseOperator`` arguments are
documented by Airflow), and compared with the ``:param`` names the reference renders.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from scripts import docs_hooks

KINDS = ("operators", "sensors", "triggers", "hooks")
CLASSES = [(module, name) for kind in KINDS for module, name in docs_hooks.public_classes(kind)]
#: Module-level functions the "Task groups and helpers" reference page renders.
HELPERS = [
    ("airflow_iceberg_provider.task_groups", "wap_task_group"),
    ("airflow_iceberg_provider.assets.uris", "iceberg_asset"),
    ("airflow_iceberg_provider.rules.erasure", "erasure_ready_properties"),
    ("airflow_iceberg_provider.deadlines", "erasure_deadline_alert"),
]


def _named_params(function: Callable[..., Any]) -> list[str]:
    return [
        p.name
        for p in inspect.signature(function).parameters.values()
        if p.name not in {"self", "cls"} and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]


def constructor_params(cls: type) -> dict[str, str]:
    """``{parameter: class whose __init__ takes it}`` over the class and its package bases."""
    found: dict[str, str] = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("airflow_iceberg_provider") or "__init__" not in vars(klass):
            continue
        for name in _named_params(vars(klass)["__init__"]):
            found.setdefault(name, klass.__name__)
    return found


def missing_params(module: str, name: str) -> list[str]:
    cls = getattr(importlib.import_module(module), name)
    documented = docs_hooks.documented_params(module, name)
    return [
        f"{module}.{name}: parameter {param!r} (taken by {owner}.__init__) has no ':param {param}:' in the "
        f"docstring of {name} or of its base classes; document it where it is defined ({owner})"
        for param, owner in constructor_params(cls).items()
        if param not in documented
    ]


@pytest.mark.parametrize(("module", "name"), CLASSES, ids=[name for _, name in CLASSES])
def test_every_constructor_parameter_is_in_the_rendered_reference(module: str, name: str) -> None:
    missing = missing_params(module, name)
    assert not missing, "\n".join(missing)


@pytest.mark.parametrize(("module", "name"), HELPERS, ids=[name for _, name in HELPERS])
def test_every_helper_argument_is_documented(module: str, name: str) -> None:
    function = getattr(importlib.import_module(module), name)
    documented = docs_hooks.docstring_params(inspect.getdoc(function) or "")
    missing = [param for param in _named_params(function) if param not in documented]
    assert not missing, f"{module}.{name}: arguments without ':param name:' in its docstring: {missing}"


def test_the_reference_renders_inherited_parameters_on_each_operator() -> None:
    rendered = docs_hooks.render_api_reference("operators")
    block = rendered.split("::: airflow_iceberg_provider.operators.wap_write.IcebergWapWriteOperator", 1)[1]
    block = block.split(":::", 1)[0]
    for param in ("spark_conn_id", "spark_conf", "durable", "iceberg_catalog_conn_id"):
        assert f"| `{param}` |" in block, f"{param} not rendered under IcebergWapWriteOperator"
    assert "*(from `IcebergSparkBaseOperator`)*" in block


def test_a_missing_parameter_is_named_with_its_class_and_owner(tmp_path: Any) -> None:
    """The check can fail, and says which parameter is missing where."""

    class Undocumented:
        """No parameters documented.

        :param a: documented.
        """

        def __init__(self, a: int, b: int, **kwargs: Any) -> None: ...

    Undocumented.__module__ = "airflow_iceberg_provider.fake"
    assert constructor_params(Undocumented) == {"a": "Undocumented", "b": "Undocumented"}
    documented = docs_hooks.docstring_params(inspect.getdoc(Undocumented) or "")
    assert set(documented) == {"a"}
