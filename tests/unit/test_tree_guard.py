"""``scripts/tree_guard.py``: a test run that changes the git working tree fails, with the paths listed.

Each test builds a small git repository in a temporary directory and runs the guard's ``record`` and
``check`` around what a test run might do to it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts import tree_guard

GUARD = Path(tree_guard.__file__)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path):
    """A clone-like checkout: one tracked image, one tracked text file, ``.work/`` ignored."""
    repo = tmp_path / "repo"
    (repo / "docs/images").mkdir(parents=True)
    (repo / "docs/images/view.png").write_bytes(b"\x89PNG old")
    (repo / "README.md").write_text("readme\n")
    (repo / ".gitignore").write_text(".work/\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "-q", "-m", "init")
    return repo


def _around(repo: Path, change, *allowed: str) -> tuple[int, str]:
    """Record, apply ``change``, check (the guard run as scripts/test.sh runs it, against ``repo``)."""
    before = tree_guard.tree_state(repo)
    change()
    after = tree_guard.tree_state(repo)
    assert before is not None and after is not None
    lines = tree_guard.changed_paths(before, after, tuple(allowed))
    return (1 if lines else 0), "\n".join(lines)


def test_a_clean_run_passes_and_ignored_output_is_not_a_change(repo):
    rc, out = _around(repo, lambda: (repo / ".work").mkdir() or (repo / ".work" / "shot.png").write_bytes(b"x"))
    assert (rc, out) == (0, "")


def test_a_rewritten_tracked_file_and_a_new_unignored_file_fail_with_their_paths(repo):
    def change():
        (repo / "docs/images/view.png").write_bytes(b"\x89PNG new")
        (repo / "tests-output").mkdir()
        (repo / "tests-output" / "report.txt").write_text("x")

    rc, out = _around(repo, change)
    assert rc == 1
    assert out.splitlines() == ["  modified  docs/images/view.png", "  new  tests-output/report.txt"]


def test_a_contributors_own_edit_is_allowed_but_a_test_rewriting_it_again_is_not(repo):
    (repo / "README.md").write_text("work in progress\n")  # dirty before the run
    rc, out = _around(repo, lambda: None)
    assert (rc, out) == (0, "")
    rc, out = _around(repo, lambda: (repo / "README.md").write_text("rewritten by a test\n"))
    assert (rc, out) == (1, "  rewritten README.md")


def test_a_deleted_tracked_file_fails(repo):
    rc, out = _around(repo, lambda: (repo / "README.md").unlink())
    assert (rc, out) == (1, "  deleted  README.md")


def test_an_allowed_prefix_is_left_out(repo):
    rc, out = _around(repo, lambda: (repo / "docs/images/view.png").write_bytes(b"new"), "docs/images/")
    assert (rc, out) == (0, "")


def test_outside_a_git_checkout_there_is_nothing_to_compare(tmp_path):
    assert tree_guard.tree_state(tmp_path) is None


def test_the_command_line_fails_with_the_header_and_the_list(repo, tmp_path):
    """The CLI as scripts/test.sh calls it, in the checkout: record, check (unchanged: passes), a test
    rewrites the image (fails, naming it), the same with the image's folder allowed (passes)."""
    state = tmp_path / "before.json"

    def guard(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(GUARD), *args], capture_output=True, text=True, cwd=repo / "docs")

    assert guard("record", str(state)).returncode == 0
    ok = guard("check", str(state))
    assert ok.returncode == 0, ok.stderr
    (repo / "docs/images/view.png").write_bytes(b"\x89PNG rewritten")
    bad = guard("check", str(state))
    assert bad.returncode == 1
    assert bad.stderr.splitlines() == [tree_guard.HEADER, "  modified  docs/images/view.png"]
    assert guard("check", str(state), "docs/images/").returncode == 0
    assert guard("bogus").returncode == 2


def test_scripts_test_sh_runs_the_guard_around_pytest():
    script = (GUARD.parent / "test.sh").read_text()
    record, pytest_at, check = (
        script.index("tree_guard.py record"),
        script.index("python -m pytest"),
        script.index("tree_guard.py check"),
    )
    assert record < pytest_at < check
    makefile = (GUARD.parent.parent / "Makefile").read_text()
    assert "AIP_TREE_ALLOW=docs/images/" in makefile  # only make docs-images may change docs/images/
