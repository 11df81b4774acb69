"""Run a user PySpark application against the catalog and verify its commit."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergValidationError
from airflow_iceberg_provider.ids import with_string_ids
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.params import MAIN_BRANCH

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_iceberg_provider.hooks.spark import JobRun
    from airflow_iceberg_provider.models import SnapshotInfo


class IcebergSparkSubmitOperator(IcebergSparkBaseOperator):
    """
    Submit a PySpark application with the Iceberg catalog configured, then prove it committed.

    The application is started as ``app.py --spec <file>``; the JSON spec holds
    ``catalog_name``, ``table``, ``ref``, ``params`` and ``snapshot_properties``
    (Airflow identity to stamp on the commit with ``snapshot-property.*`` write
    options). Using ``iceberg_job_runtime.run_job`` (shipped with the job) gives the
    application a session, quoting helpers and a ledger row for free.

    The task succeeds only if, after the job, ``ref`` has advanced from the
    snapshot it had before the submission to a descendant whose operation is in
    ``expected_operations``; an exit code of 0 alone is never accepted.

    :param application: path of the PySpark script (templated).
    :param table: table the application writes, ``namespace.table`` (templated).
    :param ref: branch the commit must land on (templated).
    :param expected_operations: accepted snapshot operations (``append``, ``overwrite``,
        ``delete``, ``replace``).
    :param params_for_job: JSON-serialisable parameters for the job (templated); they
        travel in the spec file, not on the command line.
    :return: XCom dict with ``snapshot_id``, ``operation``, ``added_records``, ``job_run_id``…
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "application",
        "ref",
        "params_for_job",
    )
    ui_color = "#cfe8fc"

    def __init__(
        self,
        *,
        application: str,
        ref: str = MAIN_BRANCH,
        expected_operations: Sequence[str] = ("append", "overwrite"),
        params_for_job: Mapping[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.application = application
        self.ref = ref
        self.expected_operations = tuple(params.operations(expected_operations, "expected_operations"))
        self.params_for_job = params_for_job
        self.check_arguments()

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        ref, job_params = self._resolve()
        existing = self.catalog_hook.refs(self.ident).get(ref)
        before = existing.snapshot_id if existing else None
        spec = self.job_spec(context, "spark_submit", ref=ref, params=job_params)
        spec["snapshot_properties"] = {f"airflow.{k.replace('_', '-')}": v for k, v in spec["airflow"].items() if v}
        self.log.info("Submitting %s for %s@%s (head before: %s)", self.application, self.ident, ref, before)
        run = self.spark_hook.submit(self.spark_hook.plan(self.application, spec=spec, name=f"airflow-{self.task_id}"))
        snap = self.verify_new_commit(ref=ref, before_snapshot_id=before, operations=self.expected_operations)
        self._record(context, ref, before, snap, run)
        result = {
            "table": self.ident.dotted,
            "ref": ref,
            "snapshot_id": snap.snapshot_id,
            "previous_snapshot_id": before,
            "operation": snap.operation,
            "job_run_id": run.job_run_id,
            "seconds": round(run.seconds, 3),
            **_summary_metrics(snap.summary),
        }
        self.log.info("Verified commit on %s@%s: %s", self.ident, ref, result)
        return with_string_ids(result)

    def _resolve(self) -> tuple[str, Mapping[str, Any]]:
        """The rendered ref and ``params_for_job`` (a mapping of JSON values)."""
        ref = params.ref_name(self.ref, "ref")
        job_params = {} if self.params_for_job is None else self.params_for_job
        if not isinstance(job_params, Mapping):
            raise IcebergValidationError(
                f"params_for_job={job_params!r:.80} is not a mapping; pass a dict of JSON values."
            )
        try:
            json.dumps(job_params)
        except (TypeError, ValueError) as err:
            raise IcebergValidationError(
                f"params_for_job is not JSON-serialisable ({err}); pass plain strings, numbers, lists and dicts."
            ) from err
        return ref, job_params

    def _record(self, context: Context, ref: str, before: int | None, snap: SnapshotInfo, run: JobRun) -> None:
        """A ledger row, unless the application wrote its own (``iceberg_job_runtime.run_job`` does)."""
        self.record_application_write(
            context,
            run,
            operation="spark_submit",
            ref=ref,
            before=before,
            after=snap.snapshot_id,
            metrics=_summary_metrics(snap.summary),
            details={},
        )


def _summary_metrics(summary: Mapping[str, str]) -> dict[str, int]:
    keys = ("added-records", "deleted-records", "added-data-files", "deleted-data-files", "total-records")
    return {k.replace("-", "_"): int(summary[k]) for k in keys if k in summary}
