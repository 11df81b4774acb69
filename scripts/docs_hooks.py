"""MkDocs hook: code examples are the tested example DAGs' code, visible wherever a page is read.

A page shows the code between two markers of an example DAG as a real fenced code block, right
after a comment naming its source::

    <!-- exampleinclude: example_dags/example_iceberg_wap.py howto_wap -->
    ```python title="example_dags/example_iceberg_wap.py"
    wap = wap_task_group(
        ...
    ```

The block holds, dedented, the lines between ``# [START howto_wap]`` and ``# [END howto_wap]`` of
that file, so GitHub, an editor and the built site all show the code (GitHub hides the comment).
The build fails when a block is missing or differs from its marked region (``tests/unit/test_docs.py``
checks the same); ``python scripts/docs_hooks.py --sync`` writes every block from the example DAGs
after a DAG changed. A page can also include a whole file of the repository (the changelog page
includes ``CHANGELOG.md``)::

    <!-- fileinclude: CHANGELOG.md -->

The API reference pages list every public operator, sensor, trigger and hook class of the
package, found in the code, so a new class is documented without editing a page::

    <!-- apireference: operators -->

becomes one mkdocstrings ``::: module.Class`` block per class, grouped by module.

A missing file or marker fails the build (``mkdocs build --strict`` turns every problem into an
error), and ``tests/unit/test_docs.py`` checks the same without building the site.
"""

from __future__ import annotations

import ast
import logging
import re
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

EXAMPLE_DIRECTIVE = re.compile(
    r"^<!--\s*exampleinclude:\s*(?P<path>\S+)\s+(?P<marker>[A-Za-z0-9_]+)\s*-->[ \t]*$", re.M
)
#: The fenced block that follows a directive (on the next line).
EXAMPLE_BLOCK = re.compile(r"\n```python title=\"(?P<title>[^\"]*)\"\n(?P<code>.*?)\n```[ \t]*$", re.M | re.S)
FILE_DIRECTIVE = re.compile(r"^<!--\s*fileinclude:\s*(?P<path>\S+)\s*-->\s*$", re.M)
API_DIRECTIVE = re.compile(r"^<!--\s*apireference:\s*(?P<kind>[a-z_]+)\s*-->\s*$", re.M)
#: Which classes each API reference kind lists: (package directory, class-name suffixes).
API_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "operators": ("operators", ("Operator",)),
    "sensors": ("sensors", ("Sensor",)),
    "triggers": ("triggers", ("Trigger",)),
    "hooks": ("hooks", ("Hook",)),
    "exceptions": ("", ("Error",)),
}
#: A Sphinx cross-reference role as mkdocstrings renders it from a reST docstring
#: (``:class:`~pkg.mod.Name``` -> ``:class:<code>~pkg.mod.Name</code>``).
SPHINX_ROLE_HTML = re.compile(r":(?:class|func|meth|mod|attr|exc|data|obj|py:\w+):<code>(~?)([^<]+)</code>")
MARKER_LINE = re.compile(r"^\s*# \[(START|END) [A-Za-z0-9_]+\]\s*$")


class ExampleIncludeError(Exception):
    """A page names an example file or marker that does not exist."""


def _repo_file(path: str) -> Path:
    file = (ROOT / path).resolve()
    if ROOT not in file.parents or not file.is_file():
        raise ExampleIncludeError(f"included file {path!r} does not exist in the repository")
    return file


def extract_example(path: str, marker: str) -> str:
    """The dedented code between ``# [START marker]`` and ``# [END marker]`` in ``path``.

    :param path: file relative to the repository root, e.g. ``example_dags/example_iceberg_wap.py``
    :param marker: the marker's name, e.g. ``howto_wap``
    :raises ExampleIncludeError: the file, the start or the end marker is missing, or the section is empty
    """
    lines = _repo_file(path).read_text(encoding="utf-8").splitlines()
    start = [i for i, line in enumerate(lines) if line.strip() == f"# [START {marker}]"]
    end = [i for i, line in enumerate(lines) if line.strip() == f"# [END {marker}]"]
    if len(start) != 1 or len(end) != 1 or end[0] <= start[0]:
        raise ExampleIncludeError(
            f"{path}: expected exactly one '# [START {marker}]' followed by one '# [END {marker}]' "
            f"(found {len(start)} start and {len(end)} end markers); add them around the code to include"
        )
    body = [line for line in lines[start[0] + 1 : end[0]] if not MARKER_LINE.match(line)]
    code = textwrap.dedent("\n".join(body)).strip("\n")
    if not code.strip():
        raise ExampleIncludeError(f"{path}: the section {marker!r} is empty")
    return code


def example_directives(markdown: str) -> list[tuple[str, str]]:
    """Every ``(path, marker)`` a page includes."""
    return [(m["path"], m["marker"]) for m in EXAMPLE_DIRECTIVE.finditer(markdown)]


def public_classes(kind: str) -> list[tuple[str, str]]:
    """``(module, class)`` for every public class of an API reference kind, in file order.

    A public class is defined at the top level of a module whose name does not start with ``_``,
    its name does not start with ``_`` and ends with one of the kind's suffixes.
    """
    if kind not in API_KINDS:
        raise ExampleIncludeError(f"unknown API reference kind {kind!r}; one of {sorted(API_KINDS)}")
    folder, suffixes = API_KINDS[kind]
    package = ROOT / "airflow_iceberg_provider"
    base = package / folder if folder else package
    found: list[tuple[str, str]] = []
    for file in sorted(base.rglob("*.py") if folder else base.rglob("*.py")):
        relative = file.relative_to(package)
        if any(part.startswith("_") for part in relative.parts) or "spark_jobs" in relative.parts:
            continue
        module = ".".join(("airflow_iceberg_provider", *relative.with_suffix("").parts))
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and node.name.endswith(suffixes):
                found.append((module, node.name))
    return found


PARAM_LINE = re.compile(r"^\s*:param\s+(?:[\w\[\], .|]+\s+)?(?P<name>\w+):\s*(?P<text>.*)$")


def _module_file(module: str) -> Path:
    path = ROOT / (module.replace(".", "/") + ".py")
    return path if path.is_file() else ROOT / module.replace(".", "/") / "__init__.py"


def _class_node(module: str, name: str) -> ast.ClassDef | None:
    file = _module_file(module)
    if not file.is_file():
        return None
    tree = ast.parse(file.read_text(encoding="utf-8"))
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _imported_from(module: str, name: str) -> str | None:
    """The package module a name of ``module`` is imported from (``None`` outside the package)."""
    tree = ast.parse(_module_file(module).read_text(encoding="utf-8"))
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            source = node.module or ""
            if node.level:
                parts = package.split(".")
                source = ".".join(parts[: len(parts) - node.level + 1] + ([source] if source else []))
            return source if source.startswith("airflow_iceberg_provider") else None
    return None


def provider_bases(module: str, name: str) -> list[tuple[str, str]]:
    """``(module, class)`` of the class and its bases defined in the package, nearest first."""
    chain: list[tuple[str, str]] = []
    todo = [(module, name)]
    while todo:
        current = todo.pop(0)
        node = _class_node(*current)
        if node is None or current in chain:
            continue
        chain.append(current)
        for base in node.bases:
            if isinstance(base, ast.Name):
                if _class_node(current[0], base.id) is not None:
                    todo.append((current[0], base.id))
                elif (source := _imported_from(current[0], base.id)) is not None:
                    todo.append((source, base.id))
    return chain


def docstring_params(docstring: str) -> dict[str, str]:
    """``{name: description}`` of a reST docstring's ``:param name:`` fields (continuation lines joined)."""
    params: dict[str, str] = {}
    current = None
    for line in docstring.splitlines():
        match = PARAM_LINE.match(line)
        if match:
            current = match["name"]
            params[current] = match["text"].strip()
        elif current and line.startswith((" ", "\t")) and line.strip() and not line.strip().startswith(":"):
            params[current] += " " + line.strip()
        else:
            current = None
    return params


def _docstrings(node: ast.ClassDef) -> str:
    init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    return "\n".join(
        textwrap.dedent(doc)
        for doc in (ast.get_docstring(node, clean=False), init and ast.get_docstring(init, clean=False))
        if doc
    )


def documented_params(module: str, name: str) -> dict[str, tuple[str, str]]:
    """``{parameter: (class documenting it, description)}`` over the class and its package bases: what the
    rendered reference shows (the class's own ``:param`` first, then each base's)."""
    documented: dict[str, tuple[str, str]] = {}
    for owner_module, owner in provider_bases(module, name):
        node = _class_node(owner_module, owner)
        assert node is not None
        for param, text in docstring_params(_docstrings(node)).items():
            documented.setdefault(param, (owner, text))
    return documented


def inherited_params_table(module: str, name: str) -> str:
    """A markdown table of the parameters a class takes from its package bases and does not document itself."""
    rows = [
        f"| `{param}` | {text} *(from `{owner}`)* |"
        for param, (owner, text) in documented_params(module, name).items()
        if owner != name
    ]
    if not rows:
        return ""
    return "\n".join(["**Inherited parameters:**", "", "| Name | Description |", "|---|---|", *rows, ""])


def render_api_reference(kind: str) -> str:
    """mkdocstrings blocks for every public class of ``kind``, one section per module, each followed by the
    parameters it inherits from the package's base classes (documented once, on the base)."""
    blocks: list[str] = []
    current = None
    for module, name in public_classes(kind):
        if module != current:
            current = module
            blocks.append(f"## `{module.removeprefix('airflow_iceberg_provider.')}`\n")
        blocks.append(f"::: {module}.{name}\n    options:\n      heading_level: 3\n")
        inherited = inherited_params_table(module, name)
        if inherited:
            blocks.append(inherited)
    return "\n".join(blocks)


def example_block(path: str, marker: str) -> str:
    """The fenced block a page shows for ``(path, marker)``: the marked region, as a Python block."""
    return f'```python title="{path}"\n{extract_example(path, marker)}\n```'


def shown_examples(markdown: str) -> list[tuple[str, str, str | None]]:
    """``(path, marker, code)`` for every directive of a page: ``code`` is the fenced block right
    after the directive, ``None`` when there is none."""
    shown: list[tuple[str, str, str | None]] = []
    for match in EXAMPLE_DIRECTIVE.finditer(markdown):
        block = EXAMPLE_BLOCK.match(markdown, match.end())
        shown.append((match["path"], match["marker"], block["code"] if block else None))
    return shown


def check_examples(markdown: str) -> None:
    """Raise when a directive of the page has no block, or its block differs from the marked region.

    :raises ExampleIncludeError: naming the file, the marker and how to fix it
    """
    for path, marker, code in shown_examples(markdown):
        expected = extract_example(path, marker)
        if code is None:
            raise ExampleIncludeError(
                f"{path} {marker}: no fenced ```python block follows the directive; "
                "run `python scripts/docs_hooks.py --sync` to write it"
            )
        if code != expected:
            raise ExampleIncludeError(
                f"{path} {marker}: the page's code block differs from the marked region of the example DAG; "
                "run `python scripts/docs_hooks.py --sync` to copy the DAG's code into the page"
            )


def sync_examples(markdown: str) -> str:
    """The page with every directive followed by its marked region's block (replacing the old block)."""

    def replace(match: re.Match[str]) -> str:
        directive = f"<!-- exampleinclude: {match['path']} {match['marker']} -->"
        return f"{directive}\n{example_block(match['path'], match['marker'])}"

    pattern = re.compile(EXAMPLE_DIRECTIVE.pattern + r"(?:" + EXAMPLE_BLOCK.pattern + r")?", re.M | re.S)
    return pattern.sub(replace, markdown)


def render_includes(markdown: str) -> str:
    """Check the page's example blocks and expand its API reference and file includes."""
    check_examples(markdown)

    def whole_file(match: re.Match[str]) -> str:
        return _repo_file(match["path"]).read_text(encoding="utf-8")

    markdown = API_DIRECTIVE.sub(lambda m: render_api_reference(m["kind"]), markdown)
    return FILE_DIRECTIVE.sub(whole_file, markdown)


def strip_sphinx_roles(html: str) -> str:
    """Render the docstrings' Sphinx roles as plain code (``~`` keeps the last name, as Sphinx does)."""
    return SPHINX_ROLE_HTML.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html)


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: the API reference shows ``Name`` where a docstring says ``:class:`~pkg.Name```."""
    return strip_sphinx_roles(html)


class _InheritedParameterFilter(logging.Filter):
    """Drop griffe's "No matching parameter" warning: operators document the arguments they pass on to
    their base class through ``**kwargs`` (``table``, connection ids), as Airflow's own operators do.
    Every other docstring warning still fails the strict build."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "No matching parameter for" not in record.getMessage()


def on_config(config: Any) -> Any:
    """MkDocs event: install the griffe warning filter before any docstring is parsed."""
    logging.getLogger("mkdocs.plugins.griffe").addFilter(_InheritedParameterFilter())
    return config


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: expand the include directives of each page."""
    try:
        return render_includes(markdown)
    except ExampleIncludeError as err:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_path}: {err}") from err


def main(argv: list[str]) -> int:
    """``--sync``: rewrite every page's example blocks from the example DAGs; otherwise check them."""
    status = 0
    for page in sorted((ROOT / "docs").rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        if argv == ["--sync"]:
            synced = sync_examples(text)
            if synced != text:
                page.write_text(synced, encoding="utf-8")
                print(f"updated {page.relative_to(ROOT)}")
            continue
        try:
            check_examples(text)
        except ExampleIncludeError as err:
            print(f"{page.relative_to(ROOT)}: {err}")
            status = 1
    return status


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
