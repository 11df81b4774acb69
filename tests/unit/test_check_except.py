"""``scripts/check_except.py``: a broad ``except`` without a reason fails ``make lint``."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scripts import check_except

ROOT = Path(__file__).resolve().parents[2]


def _findings(source: str) -> list[int]:
    return [int(f.split(":")[1]) for f in check_except.findings(Path("m.py"), textwrap.dedent(source))]


@pytest.mark.parametrize(
    "handler",
    [
        "except Exception:",
        "except Exception as err:",
        "except BaseException:",
        "except:",
        "except (ValueError, Exception):",
        "except builtins.Exception:",
        "except Exception:  # noqa: BLE001",
        "except Exception:  # type: ignore[misc]",
        "except Exception:  # pragma: no cover",
        "except Exception:  #",
    ],
)
def test_a_broad_handler_without_a_reason_is_a_finding(handler: str) -> None:
    assert _findings(f"try:\n    f()\n{handler}\n    pass\n") == [3]


@pytest.mark.parametrize(
    "source",
    [
        "try:\n    f()\nexcept Exception:  # the ledger may be what failed\n    pass\n",
        "try:\n    f()\nexcept Exception:  # noqa: BLE001 - py4j wraps every JVM error\n    pass\n",
        "try:\n    f()\n# best effort: a cache\nexcept Exception:\n    pass\n",
        "try:\n    f()\nexcept (ValueError, OverflowError):\n    pass\n",
        "try:\n    f()\nexcept ExceptionGroup:\n    pass\n",
    ],
)
def test_a_reason_or_a_narrow_handler_passes(source: str) -> None:
    assert _findings(source) == []


def test_a_hash_inside_a_string_is_not_a_comment() -> None:
    assert _findings("try:\n    f()\nexcept Exception: x = '# not a reason'\n") == [3]


def test_a_comment_two_lines_up_or_inside_the_body_does_not_count() -> None:
    source = "try:\n    f()  # why\nexcept Exception:\n    # too late\n    pass\n"
    assert _findings(source) == [3]


def test_the_package_passes_and_a_bad_file_fails_the_command(tmp_path: Path) -> None:
    assert check_except.main([]) == 0
    bad = tmp_path / "bad.py"
    bad.write_text("try:\n    f()\nexcept Exception:\n    pass\n")
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check_except.py"), str(bad)], capture_output=True, text=True
    )
    assert run.returncode == 1
    assert f"{bad}:3: except Exception:" in run.stdout
    assert "narrow each to the exceptions the try block raises" in run.stderr
