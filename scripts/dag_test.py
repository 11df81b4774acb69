"""``airflow dags test`` for DAGs that declare a ``deadline=``: the same command, one Airflow defect fixed.

In Airflow 3.3.2, ``airflow dags test`` of a DAG with a ``DeadlineAlert`` fails at the end of a
*successful* run with ``StatementError: 'dict' object has no attribute 'hex'`` on
``SELECT ... FROM deadline_alert WHERE id = ?``. ``DAG.test()`` runs the DAG run from a DAG it
serialized and deserialized in memory, whose ``deadline`` still holds the encoded alert
definitions; the scheduler's copy (from the metadata DB) holds the alerts' UUIDs, and
``DagRun.update_state`` looks each entry up by UUID to prune the run's deadlines. Runs started by
the scheduler are not affected.

This wrapper lets that lookup accept the encoded definition as well: it returns an unsaved
``DeadlineAlert`` row built from the definition (reference, interval, callback), which is all the
pruning reads (``reference_class``). Everything else is ``airflow dags test`` unchanged.

Usage: ``python scripts/dag_test.py <dag_id> [logical_date] [-c CONF ...]`` (the arguments of
``airflow dags test``).
"""

from __future__ import annotations

import sys
from typing import Any


def accept_encoded_alert_definitions() -> None:
    """Let ``DeadlineAlert.get_by_id`` take the encoded definition ``DAG.test()`` leaves in ``dag.deadline``."""
    from airflow.models.deadline_alert import DeadlineAlert
    from airflow.serialization.definitions.deadline import DeadlineAlertFields
    from airflow.serialization.enums import Encoding

    by_id = DeadlineAlert.get_by_id

    def get_by_id(deadline_alert_id: Any, *, session: Any = None) -> DeadlineAlert:
        if isinstance(deadline_alert_id, dict):
            data = deadline_alert_id.get(Encoding.VAR, deadline_alert_id)
            return DeadlineAlert(
                name=data.get(DeadlineAlertFields.NAME),
                reference=data[DeadlineAlertFields.REFERENCE],
                interval=data[DeadlineAlertFields.INTERVAL],
                callback_def=data[DeadlineAlertFields.CALLBACK],
            )
        return by_id(deadline_alert_id, session=session) if session is not None else by_id(deadline_alert_id)

    DeadlineAlert.get_by_id = staticmethod(get_by_id)  # type: ignore[assignment,method-assign]


def main(argv: list[str]) -> int:
    accept_encoded_alert_definitions()
    from airflow.__main__ import main as airflow_main

    sys.argv = ["airflow", "dags", "test", *argv]
    return airflow_main() or 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
