"""Build the sdist and the wheel of the provider, as ``python -m build`` would, with setuptools' PEP 517 backend.

``make dist`` runs it. The backend runs in a build environment of its own (``.work/build-env``: a
virtualenv with the ``[build-system] requires`` of pyproject.toml, installed by pip on first use),
never in the project's ``.venv``. The sdist is built from a copy of the repository's tracked files,
and the wheel from the unpacked sdist, so a file the sdist forgets fails the wheel instead of
shipping, and the build writes nothing into the working tree.

Usage: ``python scripts/build_dist.py [OUT_DIR]`` (default ``dist/``); prints the two file paths.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD_ENV = ROOT / ".work" / "build-env"
BACKEND_CALL = "import sys; from setuptools import build_meta as b; print(getattr(b, sys.argv[1])(sys.argv[2]))"


def build_requirements() -> list[str]:
    """The ``[build-system] requires`` of pyproject.toml."""
    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"])


def build_env_python() -> Path:
    """The build environment's interpreter, created with the build requirements when missing."""
    python = BUILD_ENV / "bin" / "python"
    stamp = BUILD_ENV / "requirements.txt"
    wanted = "\n".join(build_requirements())
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    shutil.rmtree(BUILD_ENV, ignore_errors=True)
    venv.create(BUILD_ENV, with_pip=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *build_requirements()], check=True)
    stamp.write_text(wanted)
    return python


def tracked_files() -> list[str]:
    """The repository's tracked files (their working-tree content is what gets built)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True).stdout
    return [name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def _backend(python: Path, hook: str, source: Path, out: Path) -> Path:
    result = subprocess.run(
        [str(python), "-c", BACKEND_CALL, hook, str(out)], cwd=source, check=True, capture_output=True, text=True
    )
    return out / result.stdout.strip().splitlines()[-1]


def build(out: Path) -> tuple[Path, Path]:
    """Build ``(sdist, wheel)`` into ``out``."""
    python = build_env_python()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="aip-dist-") as tmp:
        source = Path(tmp) / "source"
        for name in tracked_files():
            target = source / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target)
        sdist = _backend(python, "build_sdist", source, out)
        with tarfile.open(sdist) as archive:
            archive.extractall(Path(tmp) / "unpacked", filter="data")
        (unpacked,) = (Path(tmp) / "unpacked").iterdir()
        wheel = _backend(python, "build_wheel", unpacked, out)
    return sdist, wheel


def main(argv: list[str]) -> int:
    out = Path(argv[0]).resolve() if argv else ROOT / "dist"
    for path in build(out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
