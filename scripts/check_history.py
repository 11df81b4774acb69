"""Fail when shipped text talks about the project's development history.

What ships (the package, whose docstrings and messages Airflow shows, the example DAGs, the docs
site and the README) describes the product as it is. Issue numbers, development rounds and
sessions, "the issue's target" or "this machine", host nicknames ("the machine above"), test
reports ("2,893 passed", "failure by design"), goals "(not met)" and, in user pages, the names of
test modules belong in commit messages, ``CHANGELOG.md`` (which is exempt), the benches' own
docstrings or the contributor pages.

Usage: ``python scripts/check_history.py [PATH ...]`` (default: the shipped paths). Exit code 1
with one ``path:line: [rule] text`` line per finding.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("airflow_iceberg_provider", "example_dags", "docs", "README.md")
EXEMPT = {"CHANGELOG.md"}
SUFFIXES = {".py", ".md", ".html", ".txt", ".properties", ".cfg", ".toml", ".yml", ".yaml", ".json", ".sh"}

#: (rule, pattern): case-insensitive; every match is a finding.
RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(pattern, re.IGNORECASE))
    for name, pattern in (
        ("development round", r"\brounds?[- ]?(\d+|one|two|three|four|five)(?![\w-])"),
        ("development session", r"\b(session[- ]\d+|(previous|earlier) session)\b"),
        ("the issue", r"\bthe issue\b|\bissue #?\d+\b|\bissues #?\d+\b"),
        ("this machine", r"\bth(is|ese) ([\w-]+ )?machines?\b"),
        ("the team", r"\bother engineers\b|\bengineers'"),
        ("newness marker", r"(?<![\w.])\(new\)|\bpre-#"),
        ("diary heading", r"^#+ what changed\b"),
        (
            "host nickname",
            r"\bzen[- ]?\d+ (host|machine)\b|\bthe (machine|host) (above|below)\b|\b(reference|other|first|second|faster|slower) host\b",
        ),
        ("test report", r"\b\d[\d,]*\s+(passed|xfailed|xpassed|deselected)\b|\bfailures? by design\b"),
        ("goal not met", r"\bnot met\b|\(met\)"),
    )
)
#: Test module names: a user page explains the product, not the test suite. Contributor pages and the
#: package's own comments (which point maintainers at the test that pins a rule) may name them.
TEST_MODULE = re.compile(r"\btest_\w+\.py\b")
USER_PAGES = ("docs", "README.md", "example_dags")
CONTRIBUTOR_PAGES = {"docs/contributing.md", "docs/architecture.md"}
ISSUE_REF = re.compile(r"#(\d+)\b")
UPSTREAM_PREFIX = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
#: A CSS colour: after a property (``color: ``, ``--fg: ``), an attribute (``fill="``) or a quote.
CSS_COLOR_CONTEXT = re.compile(r"([\w-]+\s*:\s*|=\s*[\"']|[\"'])$")


def _issue_refs(line: str) -> Iterator[str]:
    """``#`` followed by digits, unless it names another repository's issue (``apache/iceberg#123``)
    or is a CSS colour (``color: #212121``, ``fill="#000"``)."""
    for match in ISSUE_REF.finditer(line):
        before = line[: match.start()]
        if UPSTREAM_PREFIX.search(before):
            continue
        if len(match[1]) in (3, 6) and CSS_COLOR_CONTEXT.search(before):
            continue
        if before.endswith("&"):  # an HTML character reference (&#8594;)
            continue
        yield match.group(0)


def _user_page(path: Path) -> bool:
    name = path.as_posix()
    return name not in CONTRIBUTOR_PAGES and any(name == p or name.startswith(p + "/") for p in USER_PAGES)


def findings(path: Path, text: str) -> Iterator[str]:
    """One ``path:line: [rule] line`` string per history mention in ``text``."""
    user_page = _user_page(path)
    for number, line in enumerate(text.splitlines(), start=1):
        hits = [f"issue reference {ref}" for ref in _issue_refs(line)]
        hits += [name for name, pattern in RULES if pattern.search(line)]
        if user_page and TEST_MODULE.search(line):
            hits.append("test module in a user page")
        for hit in hits:
            yield f"{path}:{number}: [{hit}] {line.strip()[:160]}"


def shipped_files(paths: Iterable[str]) -> Iterator[Path]:
    """The text files under ``paths`` (relative to the repository root), minus the exempt ones."""
    for name in paths:
        base = ROOT / name
        candidates = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for file in candidates:
            if file.name in EXEMPT or file.suffix not in SUFFIXES or "__pycache__" in file.parts:
                continue
            yield file


def main(argv: list[str]) -> int:
    problems: list[str] = []
    for file in shipped_files(argv or SHIPPED):
        problems += findings(file.relative_to(ROOT), file.read_text(encoding="utf-8", errors="replace"))
    for problem in problems:
        print(problem)
    if problems:
        print(
            f"check_history: {len(problems)} mention(s) of development history in shipped text; "
            "describe the product as it is and move the history to CHANGELOG.md or the commit message",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
