"""The package's import graph: no cycles, and a short package root.

The graph is read from the source (``ast``), not from ``sys.modules``: every ``import`` and
``from ... import`` of every module, at any depth (a function-level import is still an edge),
absolute and relative, resolved to the package's own modules. Imports under ``if TYPE_CHECKING:``
are not executed and are left out of the runtime graph; a second test checks the graph with them,
so a type annotation cannot hide a cycle either.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_iceberg_provider"
#: The vocabulary at the top (parameters, ids, models, config, exceptions, ...) and no more.
MAX_ROOT_MODULES = 10


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported_names(tree: ast.Module, *, type_checking: bool) -> list[tuple[str, str | None, int]]:
    """Every import in ``tree`` as (module, imported name or None, relative level)."""
    found: list[tuple[str, str | None, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                for stmt in child.orelse:
                    visit_one(stmt)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend((alias.name, None, 0) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.extend((node.module or "", alias.name, node.level) for alias in node.names)
        visit(node)

    visit(tree)
    return found


def import_graph(package: Path, *, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the package modules it imports.

    :param package: the package directory.
    :param type_checking: include the imports under ``if TYPE_CHECKING:``.
    """
    modules = _modules(package)
    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        deps: set[str] = set()
        for module, imported, level in _imported_names(ast.parse(path.read_text()), type_checking=type_checking):
            if level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (level - 1)]
                module = ".".join([*base, module] if module else base)
            if imported is not None and f"{module}.{imported}" in modules:
                deps.add(f"{module}.{imported}")
                continue
            while module and module not in modules:
                module = module.rpartition(".")[0]
            if module:
                deps.add(module)
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(graph: dict[str, set[str]], found: list[list[str]]) -> str:
    lines = []
    for component in found:
        members = set(component)
        lines.append(" <-> ".join(component))
        lines.extend(f"    {m} imports {sorted(graph[m] & members)}" for m in component)
    return "\n".join(lines)


@pytest.mark.parametrize("type_checking", [False, True], ids=["runtime", "with-type-checking-imports"])
def test_package_has_no_import_cycle(type_checking: bool) -> None:
    graph = import_graph(PACKAGE, type_checking=type_checking)
    assert len(graph) > 100, "the walker found too few modules: is PACKAGE right?"
    found = cycles(graph)
    assert not found, (
        "import cycles (break them with a Protocol for the view one side needs, or move the shared "
        f"piece to a module both import):\n{_describe(graph, found)}"
    )


def test_package_root_holds_only_the_vocabulary() -> None:
    root_modules = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert len(root_modules) <= MAX_ROOT_MODULES, (
        f"{len(root_modules)} modules at the package root ({', '.join(root_modules)}): at most "
        f"{MAX_ROOT_MODULES}; put rules in rules/, ledger stores in governance/, hook helpers in hooks/"
    )


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_walker_finds_cycles_through_every_import_form(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from pkg.sub import b\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/b.py": "def f():\n    from ..c import x\n    return x\n",
            "pkg/c.py": "import pkg.a\nx = 1\n",
            "pkg/d.py": "from . import e\n",
            "pkg/e.py": "from .d import y\n",
        },
    )
    graph = import_graph(package)
    assert graph["pkg.a"] == {"pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.c"}
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.c", "pkg.sub.b"], ["pkg.d", "pkg.e"]]


def test_walker_leaves_type_checking_imports_out_of_the_runtime_graph(tmp_path: Path) -> None:
    package = _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/hook.py": "from pkg.store import Store\n",
            "pkg/store.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.hook import Hook\nelse:\n"
                "    import json\n"
            ),
        },
    )
    assert cycles(import_graph(package)) == []
    assert cycles(import_graph(package, type_checking=True)) == [["pkg.hook", "pkg.store"]]


def test_tests_and_benches_import_normally() -> None:
    """No test, test helper or benchmark patches the import path (also not in the scripts they hand to a
    child Python): the repository root is importable (pytest's ``pythonpath``, ``python -m bench.x``),
    helpers live in ``tests/support/``, and a child gets ``PYTHONPATH`` in its environment."""
    patch = ("sys.path." + "insert", "sys.path." + "append")
    found = []
    for folder in ("tests", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), start=1):
                if any(p in line for p in patch):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
