"""The docs' code comes from the example DAGs; the README stays short; shipped text has no diary.

Pure tests (no Airflow import, no build): ``make docs`` builds the site itself.
"""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from scripts import check_history, docs_hooks

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
EXAMPLES = sorted((ROOT / "example_dags").glob("*.py"))


def _directives() -> list[tuple[Path, str, str]]:
    return [(page, path, marker) for page in PAGES for path, marker in docs_hooks.example_directives(page.read_text())]


def _shown() -> list[tuple[Path, str, str, str | None]]:
    return [(page, *shown) for page in PAGES for shown in docs_hooks.shown_examples(page.read_text())]


@pytest.mark.parametrize(("page", "path", "marker", "code"), _shown(), ids=lambda v: getattr(v, "name", None))
def test_every_code_block_of_a_page_equals_its_marked_region(
    page: Path, path: str, marker: str, code: str | None
) -> None:
    """The pages show real fenced blocks (GitHub hides the directive comment), equal to the DAG's code."""
    expected = docs_hooks.extract_example(path, marker)
    where = f"{page.relative_to(ROOT)} ({path} {marker})"
    assert code is not None, f"{where}: no fenced python block after the directive; run scripts/docs_hooks.py --sync"
    assert code == expected, f"{where}: the block drifted from the DAG's region; run scripts/docs_hooks.py --sync"
    compile(code if not code.startswith(" ") else f"if True:\n{code}", f"{path}:{marker}", "exec")


def test_the_pages_show_every_example_of_the_site() -> None:
    """34 examples on 12 pages at the time of writing; a page losing its blocks fails here."""
    shown = _shown()
    assert len(shown) >= 34 and len({page for page, *_ in shown}) >= 12
    assert all(code for *_, code in shown)


def test_a_missing_marker_fails_with_its_name(tmp_path: Path) -> None:
    with pytest.raises(docs_hooks.ExampleIncludeError, match=r"\[START no_such_marker\]"):
        docs_hooks.extract_example("example_dags/example_iceberg_wap.py", "no_such_marker")
    with pytest.raises(docs_hooks.ExampleIncludeError, match="does not exist"):
        docs_hooks.render_includes("<!-- exampleinclude: example_dags/nope.py howto_wap -->")


def test_a_directive_without_its_block_or_with_a_drifted_block_fails_the_build() -> None:
    directive = "<!-- exampleinclude: example_dags/example_iceberg_wap.py howto_wap -->"
    with pytest.raises(docs_hooks.ExampleIncludeError, match="no fenced"):
        docs_hooks.render_includes(f"# Page\n\n{directive}\n\nText.\n")
    synced = docs_hooks.sync_examples(f"# Page\n\n{directive}\n\nText.\n")
    assert synced.startswith(
        f'# Page\n\n{directive}\n```python title="example_dags/example_iceberg_wap.py"\nwap = wap_task_group('
    )
    assert "# [START" not in synced and "# [END" not in synced and synced.endswith("```\n\nText.\n")
    assert docs_hooks.render_includes(synced) == synced
    assert docs_hooks.sync_examples(synced) == synced, "--sync is idempotent"
    drifted = synced.replace("wap = wap_task_group(", "wap = wap_task_group(  # edited in the page", 1)
    with pytest.raises(docs_hooks.ExampleIncludeError, match="differs from the marked region"):
        docs_hooks.render_includes(drifted)
    assert docs_hooks.sync_examples(drifted) == synced


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_dag_is_included_in_a_page(example: Path) -> None:
    included = {path for _, path, _ in _directives()}
    assert str(example.relative_to(ROOT)) in included, (
        f"{example.relative_to(ROOT)} is not included in any docs page: put '# [START name]' / '# [END name]' "
        "around its key code and add '<!-- exampleinclude: <path> <name> -->' to the page of its task"
    )


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_markers_are_paired(example: Path) -> None:
    text = example.read_text()
    starts = re.findall(r"^\s*# \[START (\w+)\]\s*$", text, re.M)
    ends = re.findall(r"^\s*# \[END (\w+)\]\s*$", text, re.M)
    assert len(starts) == len(set(starts)), f"duplicate START markers in {example.name}"
    assert sorted(starts) == sorted(ends), f"unpaired markers in {example.name}: {set(starts) ^ set(ends)}"


def test_every_example_marker_is_included_in_a_page() -> None:
    defined = {
        (str(example.relative_to(ROOT)), marker)
        for example in sorted((ROOT / "example_dags").rglob("*.py"))
        for marker in re.findall(r"^\s*# \[START (\w+)\]\s*$", example.read_text(), re.M)
    }
    included = {(path, marker) for _, path, marker in _directives()}
    unused = sorted(defined - included)
    assert not unused, f"example code marked for the docs but shown on no page: {unused}"


def _nav_pages(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [page for value in node.values() for page in _nav_pages(value)]
    if isinstance(node, list):
        return [page for item in node for page in _nav_pages(item)]
    return []


def test_every_page_is_in_the_nav_once() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_pages(config["nav"])
    twice = sorted({page for page in nav if nav.count(page) > 1})
    assert not twice, f"pages listed more than once in mkdocs.yml's nav: {twice}"
    pages = {str(page.relative_to(DOCS)) for page in PAGES}
    assert set(nav) == pages, f"not in the nav: {sorted(pages - set(nav))}; missing files: {sorted(set(nav) - pages)}"


def test_the_documentation_url_is_the_docs_folder_everywhere() -> None:
    project_urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    info = ast.parse((ROOT / "airflow_iceberg_provider/get_provider_info.py").read_text())
    constant = next(
        node.value.value
        for node in info.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "DOCUMENTATION_URL"
    )
    assert project_urls["Documentation"] == constant
    assert "site_url" not in yaml.safe_load((ROOT / "mkdocs.yml").read_text()), "no docs site is published"
    assert "github.io" not in (ROOT / "README.md").read_text(), "the README links to a site nothing publishes"


def test_every_metadata_url_is_the_repository_or_a_path_in_it() -> None:
    """No site is published: every URL of the package metadata is the repository or one of its files."""
    project_urls = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]
    repo = project_urls["Source"]
    assert yaml.safe_load((ROOT / "mkdocs.yml").read_text())["repo_url"] == repo
    for name, url in project_urls.items():
        if url == repo:
            continue
        match = re.fullmatch(re.escape(repo) + r"/(?:tree|blob)/main/(?P<path>.+)", url)
        assert match, f"[project.urls] {name} = {url!r} is neither the repository nor a path in it"
        assert (ROOT / match["path"]).exists(), (
            f"[project.urls] {name} points at {match['path']}, not in the repository"
        )


@pytest.mark.parametrize("kind", ["operators", "sensors", "triggers", "hooks"])
def test_every_public_class_of_the_api_reference_has_a_docstring(kind: str) -> None:
    classes = docs_hooks.public_classes(kind)
    assert classes, kind
    undocumented = []
    for module, name in classes:
        tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text())
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
        if not (ast.get_docstring(node) or "").strip():
            undocumented.append(f"{module}.{name}")
    assert not undocumented, f"public classes without a docstring (the API reference would be empty): {undocumented}"


def test_api_reference_lists_the_operators_of_every_capability() -> None:
    names = {name for _, name in docs_hooks.public_classes("operators")}
    assert {"IcebergWapPublishOperator", "IcebergCreateTagOperator", "IcebergMaintenancePlanOperator"} <= names
    assert {"IcebergErasureOperator", "IcebergAlterTableOperator", "IcebergSparkSubmitOperator"} <= names
    assert all(not n.startswith("_") for n in names)


def test_readme_is_short_and_its_dag_uses_real_arguments() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert blocks, "the README shows a WAP DAG"
    tree = ast.parse(blocks[0])
    group = ast.parse((ROOT / "airflow_iceberg_provider/task_groups.py").read_text())
    fn = next(n for n in group.body if isinstance(n, ast.FunctionDef) and n.name == "wap_task_group")
    accepted = {a.arg for a in fn.args.kwonlyargs + fn.args.args}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "wap_task_group"]
    assert calls and {k.arg for k in calls[0].keywords} <= accepted


def test_readme_links_point_at_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(((?!https?://)[^)#]+)(?:#[^)]*)?\)", readme)
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert targets and not missing, missing


@pytest.mark.parametrize(
    ("line", "rules"),
    [
        ("the pre-#13 behaviour", {"issue reference #13", "newness marker"}),
        ("Daily logical erasure (#13): requests", {"issue reference #13"}),
        ("excluded (apache/iceberg#15512), which fails", set()),
        ("body { color: #212121; } .x { fill: '#000' } :root { --fg: #616161; }", set()),
        ("requests_redacted=len(new), interrupting this session's operations", set()),
        ("a table (new) here", {"newness marker"}),
        ("an arrow &#8594; here", set()),
        ("README: round-2 session-3 suite figures", {"development round", "development session"}),
        ("Measured on this 2-core machine (noisy)", {"this machine"}),
        ("short of the issue's 20x", {"the issue"}),
        ("browsers round 64-bit ids; a round trip", set()),
        ("On a machine with 2 cores", set()),
        ("Figures marked **(Zen 5 host)** come from", {"host nickname"}),
        ("on the machine above (slower JVM starts)", {"host nickname"}),
        ("On the reference host that took 20 s", {"host nickname"}),
        ("a Zen 5 EPYC (CPU family 26); on the Zen 5 CPU", set()),
        ("2,893 passed, 5 skipped and one failure by design", {"test report"}),
        ("the audit passed; every check passed", set()),
        ("| ≥ 20× (not met) |", {"goal not met"}),
        ("files read ≤ 2× (met)", {"goal not met"}),
        ("the deadline was met", set()),
        ("round 3 of the work", {"development round"}),
        ("closed in issue 45", {"the issue"}),
    ],
)
def test_history_lint_rules(line: str, rules: set[str]) -> None:
    found = {f.split("[", 1)[1].split("]", 1)[0] for f in check_history.findings(Path("x.py"), line)}
    assert found == rules


def test_history_lint_flags_test_modules_in_user_pages_only() -> None:
    line = "Tested in `tests/airflow/test_durable_jobs_airflow.py` with a real scheduler"
    rule = "test module in a user page"
    assert any(rule in f for f in check_history.findings(Path("docs/reliability.md"), line))
    assert any(rule in f for f in check_history.findings(Path("README.md"), line))
    assert not any(rule in f for f in check_history.findings(Path("docs/contributing.md"), line))
    assert not any(rule in f for f in check_history.findings(Path("airflow_iceberg_provider/core/__init__.py"), line))


def test_shipped_text_has_no_development_history() -> None:
    """What ``make lint`` checks, also in ``make test`` (CI runs the test command)."""
    problems = [
        problem
        for file in check_history.shipped_files(check_history.SHIPPED)
        for problem in check_history.findings(
            file.relative_to(ROOT), file.read_text(encoding="utf-8", errors="replace")
        )
    ]
    assert not problems, "\n".join(problems)


def test_history_lint_exempts_the_changelog() -> None:
    files = {p.name for p in check_history.shipped_files(["README.md", "CHANGELOG.md", "docs"])}
    assert "README.md" in files and "CHANGELOG.md" not in files


# a bench is a script under bench/; a module named with a leading underscore is a helper the benches share
@pytest.mark.parametrize(
    "bench", sorted(p for p in (ROOT / "bench").glob("*.py") if not p.name.startswith("_")), ids=lambda p: p.name
)
def test_every_bench_is_on_the_performance_page(bench: Path) -> None:
    assert f"bench/{bench.name}" in (DOCS / "performance.md").read_text(), (
        f"bench/{bench.name} is not on docs/performance.md: say what it measures, the command and the figure"
    )


def test_no_test_writes_under_docs_and_screenshots_go_to_an_ignored_folder() -> None:
    """A test run changes no tracked file: the browser test's screenshots land under ``.work/``,
    and only ``make docs-images`` (``AIP_SCREENSHOTS=docs/images``) refreshes the docs' images."""
    writers = [
        f"{test.name}:{number}"
        for test in sorted((ROOT / "tests").rglob("*.py"))
        if test.name != "test_docs.py"
        for number, line in enumerate(test.read_text().splitlines(), start=1)
        if re.search(r"""["']docs["']\s*/\s*["']images""", line)
        or (re.search(r"""ROOT\s*/\s*["']docs["']""", line) and re.search(r"write|save|mkdir|copy|open\(", line))
    ]
    assert not writers, f"tests that reach into docs/ (screenshots belong under .work/): {writers}"
    browser = (ROOT / "tests" / "airflow" / "test_ui_browser.py").read_text()
    assert 'IMAGES = Path(os.environ.get("AIP_SCREENSHOTS") or ROOT / ".work" / "screenshots")' in browser
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", ".work/screenshots/governance-table.png"], cwd=ROOT, check=False
    )
    assert ignored.returncode == 0, ".work/ must stay in .gitignore: the test screenshots are written there"
    makefile = (ROOT / "Makefile").read_text()
    assert "AIP_SCREENSHOTS=$(CURDIR)/docs/images" in makefile, "make docs-images refreshes docs/images/"
