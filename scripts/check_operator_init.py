#!/usr/bin/env python3
"""Check that operator and sensor constructors assign their template fields verbatim.

Airflow renders template fields (Jinja) and resolves ``XComArg``s after ``__init__`` and
before ``execute()``. A constructor that validates or transforms a template field acts on the
unrendered text or on the ``XComArg`` object itself, so Airflow's own check
(``scripts/ci/prek/validate_operators_init.py`` in apache/airflow) allows only:

* ``self.field = field``, ``self.field = field or <default>``,
  ``self.field = field if field is not None else <default>``;
* forwarding ``super().__init__(field=field)``;
* ``field is None`` / ``field is not None`` (whether the argument was passed).

Everything else that reads a template field in ``__init__`` is reported, as is a template field
assigned anything other than its own argument. Checks of values belong in ``execute()`` (each
operator here has one ``check_arguments()``, which skips values that are still templated and
runs again in ``execute()`` on the rendered ones).

Usage: ``python scripts/check_operator_init.py [package_dir]``; exit code 1 on a violation.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

SCANNED = ("operators", "sensors")


def _class_fields(tree: ast.Module) -> dict[str, tuple[set[str], list[str]]]:
    """class name -> (its own constant template fields, classes whose fields it splices in)."""
    out: dict[str, tuple[set[str], list[str]]] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        own: set[str] = set()
        spliced: list[str] = []
        for st in cls.body:
            target = st.targets[0] if isinstance(st, ast.Assign) else getattr(st, "target", None)
            value = getattr(st, "value", None)
            if not (isinstance(target, ast.Name) and target.id == "template_fields" and value is not None):
                continue
            for node in ast.walk(value):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    own.add(node.value)
                elif isinstance(node, ast.Attribute) and node.attr == "template_fields":
                    base = node.value
                    if isinstance(base, ast.Name):
                        spliced.append(base.id)
        if own or spliced:
            out[cls.name] = (own, spliced)
    return out


def _resolve(name: str, table: dict[str, tuple[set[str], list[str]]], seen: frozenset[str] = frozenset()) -> set[str]:
    if name not in table or name in seen:
        return set()
    own, spliced = table[name]
    fields = set(own)
    for base in spliced:
        fields |= _resolve(base, table, seen | {name})
    return fields


def _is_self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _is_none_check(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Compare)
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.Is | ast.IsNot)
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value is None
    )


def _kept_value(value: ast.expr | None, field: str) -> list[ast.AST] | None:
    """The nodes reading ``field`` in a value that keeps the argument verbatim, else None."""
    if isinstance(value, ast.Name) and value.id == field:
        return [value]
    if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.Or):
        first = value.values[0]
        if isinstance(first, ast.Name) and first.id == field:
            return [first]
    if isinstance(value, ast.IfExp) and isinstance(value.body, ast.Name) and value.body.id == field:
        test = value.test
        if isinstance(test, ast.Name) and test.id == field:
            return [value.body, test]
        if _is_none_check(test) and isinstance(test, ast.Compare) and getattr(test.left, "id", None) == field:
            return [value.body, test.left]
    return None


def check_init(fn: ast.FunctionDef, fields: set[str]) -> Iterator[tuple[int, str]]:
    """(line, problem) for every template-field read or assignment outside the allowed patterns."""
    args = {a.arg for a in fn.args.args + fn.args.kwonlyargs} & fields
    allowed: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                field = _is_self_attr(target)
                if field not in fields:
                    continue
                kept = _kept_value(node.value, field) if field in args else None
                if kept is None:
                    yield node.lineno, f"self.{field} is assigned a computed value; assign the argument verbatim"
                else:
                    allowed.update(id(n) for n in kept)
        elif isinstance(node, ast.Call) and _is_super_init(node):
            for kw in node.keywords:
                if kw.arg in fields:
                    kept = _kept_value(kw.value, kw.arg)
                    if kept is None:
                        yield node.lineno, f"super().__init__({kw.arg}=...) passes a computed value"
                    else:
                        allowed.update(id(n) for n in kept)
        elif _is_none_check(node) and isinstance(node, ast.Compare):
            allowed.add(id(node.left))
    for node in ast.walk(fn):
        if id(node) in allowed:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in args:
            yield node.lineno, f"reads template field {node.id!r} before it is rendered"
        field = _is_self_attr(node)
        if field in fields and isinstance(node.ctx, ast.Load):  # type: ignore[attr-defined]
            yield node.lineno, f"reads self.{field} before it is rendered"


def _is_super_init(node: ast.Call) -> bool:
    func = node.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "__init__"
        and isinstance(func.value, ast.Call)
        and getattr(func.value.func, "id", None) == "super"
    )


def violations(package: Path) -> list[str]:
    trees = {p: ast.parse(p.read_text(), str(p)) for p in sorted(package.rglob("*.py"))}
    table: dict[str, tuple[set[str], list[str]]] = {}
    for tree in trees.values():
        table.update(_class_fields(tree))
    found: list[str] = []
    for path, tree in trees.items():
        if path.relative_to(package).parts[0] not in SCANNED:
            continue
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            fields = _resolve(cls.name, table)
            for fn in cls.body:
                if fields and isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    for line, problem in sorted(set(check_init(fn, fields))):
                        found.append(f"{path}:{line}: {cls.name}.__init__ {problem}")
    return found


def main(argv: list[str]) -> int:
    package = Path(argv[1] if len(argv) > 1 else "airflow_iceberg_provider")
    found = violations(package)
    for line in found:
        print(line)
    if found:
        print(
            f"{len(found)} template-field violation(s): assign template fields verbatim in __init__ and "
            "check them in execute() (see the module docstring)."
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
