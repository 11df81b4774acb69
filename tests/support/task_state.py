"""A task's ``task_state_store`` kept in a JSON file, for tests that SIGKILL a task process and retry it.

The durable-job tests write a small task script (a string in the test module), run it in a child
Python, kill that process while its Spark job runs, then load the same script in the test process as
the retry. Both tries share the state through :class:`FileStore`, whose file outlives the killed
process. :func:`task_script` makes the script find this module when it runs by path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


class FileStore:
    """The ``task_state_store`` contract (get / set of JSON), kept in a file that outlives the task."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def get(self, key: str, default: Any = None) -> Any:
        return json.loads(self.path.read_text()).get(key, default) if self.path.exists() else default

    def set(self, key: str, value: Any, **_: Any) -> None:
        data = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.path.write_text(json.dumps({**data, key: value}))


def file_store_context(store: str | Path, task_id: str, try_number: int = 1) -> dict[str, Any]:
    """The context of try ``try_number`` of task ``task_id`` (DAG ``d``, run ``r``, ``max_tries=1``) whose
    ``task_state_store`` is the file ``store``."""
    ti = SimpleNamespace(dag_id="d", run_id="r", task_id=task_id, try_number=try_number, map_index=-1, max_tries=1)
    return {"ti": ti, "task_instance": ti, "run_id": "r", "task_state_store": FileStore(store)}


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the repository root first on ``PYTHONPATH``, for a child Python
    (a task process started by path) that imports ``tests.support`` and the package like the tests do."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    return {**env, **extra}
