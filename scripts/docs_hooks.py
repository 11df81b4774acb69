"""MkDocs hook: code examples come from the tested example DAGs.

A page includes the code between two markers of an example DAG, as Airflow's ``exampleinclude``
directive does::

    <!-- exampleinclude: example_dags/example_iceberg_wap.py howto_wap -->

includes, dedented, the lines between ``# [START howto_wap]`` and ``# [END howto_wap]`` of that
file as a Python code block. A page can also include a whole file of the repository (the
changelog page includes ``CHANGELOG.md``)::

    <!-- fileinclude: CHANGELOG.md -->

A missing file or marker fails the build (``mkdocs build --strict`` turns every problem into an
error), and ``tests/test_docs.py`` checks the same without building the site.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

EXAMPLE_DIRECTIVE = re.compile(r"^<!--\s*exampleinclude:\s*(?P<path>\S+)\s+(?P<marker>[A-Za-z0-9_]+)\s*-->\s*$", re.M)
FILE_DIRECTIVE = re.compile(r"^<!--\s*fileinclude:\s*(?P<path>\S+)\s*-->\s*$", re.M)
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


def render_includes(markdown: str) -> str:
    """Replace every include directive of a page by the included text."""

    def example(match: re.Match[str]) -> str:
        path, marker = match["path"], match["marker"]
        code = extract_example(path, marker)
        return f'```python title="{path}"\n{code}\n```'

    def whole_file(match: re.Match[str]) -> str:
        return _repo_file(match["path"]).read_text(encoding="utf-8")

    return FILE_DIRECTIVE.sub(whole_file, EXAMPLE_DIRECTIVE.sub(example, markdown))


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: expand the include directives of each page."""
    try:
        return render_includes(markdown)
    except ExampleIncludeError as err:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{page.file.src_path}: {err}") from err
