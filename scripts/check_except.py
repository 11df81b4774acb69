"""Fail on a broad ``except`` in the package that does not say why it is broad.

A handler of ``Exception`` or ``BaseException`` (alone or in a tuple), or a bare ``except:``,
catches what nobody thought of. Either narrow it to the exceptions the code in the ``try`` really
raises, or say why everything must be caught, in a comment on the ``except`` line or on the line
just above it::

    except Exception as err:  # the catalog may be what failed: never mask the refusal

A ``noqa``/``type: ignore``/``pragma`` marker alone is not a reason: the comment needs words
beyond it (``# noqa: BLE001 - py4j wraps every JVM error`` is fine).

Usage: ``python scripts/check_except.py [PATH ...]`` (default: the package). Exit code 1 with one
``path:line: except ...`` line per finding.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("airflow_iceberg_provider",)
BROAD = frozenset({"Exception", "BaseException"})
#: Tool markers that are not a reason by themselves.
_MARKERS = re.compile(
    r"noqa(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?|pragma:[\w\s-]*?cover"
)


def _names(node: ast.expr | None) -> set[str]:
    if node is None:
        return {"<bare>"}
    if isinstance(node, ast.Tuple):
        return set().union(*(_names(e) for e in node.elts))
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):  # builtins.Exception
        return {node.attr}
    return set()


def _comment(line: str) -> str | None:
    """The comment of a source line (``#`` outside a string literal), without the ``#``."""
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#":
            return line[i + 1 :]
    return None


def _is_reason(comment: str | None) -> bool:
    return comment is not None and re.search(r"[A-Za-z]{2}", _MARKERS.sub("", comment)) is not None


def findings(path: Path, text: str) -> Iterator[str]:
    """One ``path:line: text`` string per broad handler without a reason in ``text``."""
    lines = text.splitlines()
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.ExceptHandler) or not (_names(node.type) & (BROAD | {"<bare>"})):
            continue
        own = lines[node.lineno - 1]
        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        if _is_reason(_comment(own)) or (above.startswith("#") and _is_reason(above[1:])):
            continue
        yield f"{path}:{node.lineno}: {own.strip()}"


def python_files(paths: Iterable[str]) -> Iterator[Path]:
    """The ``.py`` files under ``paths`` (relative to the repository root or absolute)."""
    for name in paths:
        base = ROOT / name
        yield from [base] if base.is_file() else sorted(base.rglob("*.py"))


def main(argv: list[str]) -> int:
    problems: list[str] = []
    for file in python_files(argv or DEFAULT_PATHS):
        shown = file.relative_to(ROOT) if file.is_relative_to(ROOT) else file
        problems += findings(shown, file.read_text(encoding="utf-8"))
    for problem in problems:
        print(problem)
    if problems:
        print(
            f"check_except: {len(problems)} broad except clause(s) without a reason; narrow each to the "
            "exceptions the try block raises, or say why it must catch everything in a comment on the "
            "except line or the line above",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
