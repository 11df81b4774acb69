"""Fail a test run that changed the git working tree: a tracked file rewritten, or a new file git does not ignore.

``scripts/test.sh`` records the tree before pytest and checks it afterwards::

    python scripts/tree_guard.py record "$AIP_WORK/tree-before.json"
    python -m pytest ...
    python scripts/tree_guard.py check "$AIP_WORK/tree-before.json" [ALLOWED_PREFIX ...]

It compares the checkout of the current directory. The record is ``git status --porcelain`` (untracked files listed one by one, ignored files left
out) plus the SHA-256 of every file it lists, so a contributor's own uncommitted edits are allowed,
and a test that rewrites one of them again is still caught. Outside a git checkout (an unpacked
sdist) there is nothing to compare and both commands do nothing. ``make docs-images`` allows
``docs/images/`` (``AIP_TREE_ALLOW``): refreshing the screenshots there is its job.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

#: What ``check`` prints above the list of changed paths.
HEADER = (
    "ERROR: the test run changed the working tree (tests must write under .work/ or a temporary directory; "
    "screenshots for docs/images/ are written by `make docs-images` only):"
)


def tree_state(root: Path) -> dict[str, str] | None:
    """Every path ``git status`` lists, mapped to its status and the SHA-256 of its content; None outside git."""
    proc = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain=v1", "-z", "--untracked-files=all"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        return None
    entries = proc.stdout.split("\0")
    state: dict[str, str] = {}
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if not entry:
            continue
        status, path = entry[:2], entry[3:]
        if status[0] in "RC":  # a rename or copy: the next entry is the original path
            i += 1
        state[path] = f"{status}|{_digest(root / path)}"
    return state


def _digest(path: Path) -> str:
    if path.is_symlink():
        return "symlink:" + hashlib.sha256(str(path.readlink()).encode()).hexdigest()
    if not path.is_file():
        return "absent"
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: ``git status --porcelain`` codes, in words.
_LABELS = {"?": "new", "M": "modified", "D": "deleted", "A": "added", "R": "renamed", "C": "copied", "T": "retyped"}


def changed_paths(before: dict[str, str], after: dict[str, str], allowed: tuple[str, ...] = ()) -> list[str]:
    """The paths whose status or content differs between two :func:`tree_state` records, one line each;
    paths under an ``allowed`` prefix are left out."""
    lines = []
    for path in sorted(before.keys() | after.keys()):
        was, now = before.get(path), after.get(path)
        if was == now or (allowed and path.startswith(allowed)):
            continue
        if was is None and now is not None:
            lines.append(f"  {_LABELS.get(now.split('|', 1)[0].strip()[:1], 'changed')}  {path}")
        elif now is None:
            lines.append(f"  restored  {path}")
        else:
            lines.append(f"  rewritten {path}")
    return lines


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("record", "check"):
        print("usage: tree_guard.py record STATE_FILE | check STATE_FILE [ALLOWED_PREFIX ...]", file=sys.stderr)
        return 2
    command, state_file, allowed = argv[0], Path(argv[1]), tuple(argv[2:])
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    now = tree_state(Path(top.stdout.strip())) if top.returncode == 0 else None
    if command == "record":
        state_file.parent.mkdir(parents=True, exist_ok=True)
        state_file.write_text(json.dumps(now))
        return 0
    before = json.loads(state_file.read_text()) if state_file.exists() else None
    if before is None or now is None:
        return 0
    lines = changed_paths(before, now, allowed)
    if lines:
        print("\n".join([HEADER, *lines]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
