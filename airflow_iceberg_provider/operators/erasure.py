"""Row-level erasure (GDPR art. 17, PIPEDA / LPRPDE, Quebec Law 25) of data subjects from one table.

A DELETE is not an erasure: merge-on-read leaves the rows inside live data files,
copy-on-write leaves them in files older snapshots still reference, tags and
branches pin those snapshots, and DELETED manifest entries keep column bounds. The
operator runs ONE Spark job (``spark_jobs/erasure/run.py``) per phase:

* ``phase="logical"``: one batched merge-on-read DELETE on every branch that shows the
  subjects (whatever the table's delete mode; its properties are restored exactly), an
  independent count on every ref head, evidence; requests become ``logically_erased``.
* ``phase="purge"``: every logically erased request of the table in one job: rewrite the
  files that carry deletes or hold subjects, expire only the snapshots that reach a
  subject file, rewrite manifests, verify physically; requests become ``erased``.
* ``phase="full"`` (the default): delete, rewrite, expire (all history),
  manifests, verify, in one run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergRefusedError, IcebergValidationError
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators._erasure_job import (
    DEFAULT_SALT_CONN_ID,
    ErasureArgs,
    erasure_summary,
    prepare_erasure,
    verify_evidence,
)
from airflow_iceberg_provider.rules.erasure import validate_phase
from airflow_iceberg_provider.ui.links import GovernanceEvidenceLink

if TYPE_CHECKING:
    from airflow.sdk import Context

_LOGGED = (
    "requests",
    "rows_deleted",
    "files_rewritten",
    "snapshots_expired",
    "snapshots_kept",
    "files_raw_read",
    "verification",
    "refs_blocking",
    "refs_dropped",
    "requests_redacted",
)


class IcebergErasureOperator(IcebergSparkBaseOperator):
    """
    Physically erase data subjects' rows from one table, verify it, and record evidence.

    Subjects come from an Iceberg *requests table* (``request_id``, ``subject_key``,
    ``received_at``, ``status``; see :meth:`GovernanceStore.ensure_erasure_requests_table` (``hook.governance``))
    or from a *subjects file* (JSON lines / CSV / parquet with ``request_id`` and
    ``subject_key``, mode 0600). Spark reads them directly: they never pass through the
    Airflow worker's memory, argv, logs or XCom.

    The job refuses (nothing changed) when a tag or branch would keep the subjects
    reachable, unless ``ref_policy`` says otherwise: ``drop`` removes such refs (never
    ``main`` nor a ``legal-hold-*`` tag) and ``keep`` erases everything else and records
    the erasure as ``incomplete`` with the blocking refs named (legal hold).

    Evidence: one row per request in ``<governance>.erasure_evidence`` (salted
    HMAC-SHA256 of the subject key; the salt is the password of ``salt_conn_id`` and is
    never stored). Request statuses become ``erased`` when every table in
    ``tables_in_scope`` has verified evidence, ``blocked`` when a hold keeps rows. A
    re-run for the same requests deletes nothing, re-verifies and updates the same
    evidence rows.

    Lifecycle (:func:`~airflow_iceberg_provider.core.erasure_lifecycle.transition`): ``pending`` -> ``logically_erased``
    (``phase="logical"``) -> ``erased`` (``phase="purge"``); ``full`` goes to ``erased`` at once;
    ``blocked`` when a hold keeps rows. Requests whose key matched no row (``rows_found = 0``
    in the evidence) are counted in a warning; their ids stay in the restricted evidence table.

    :param phase: ``logical`` | ``purge`` | ``full`` (default) (templated).
    :param table: ``namespace.table`` to erase from (templated).
    :param subject_columns: column (or list of columns) holding the subject key (templated).
    :param requests_table: ``namespace.table`` of erasure requests (templated).
    :param request_ids: only these request ids (any status) (templated); default: every
        request whose status is in ``request_statuses``.
    :param request_statuses: statuses picked up when ``request_ids`` is not given; default
        by phase: logical ``pending``; purge ``logically_erased``, ``blocked``; full all open ones.
    :param subjects_file: alternative to ``requests_table``: path of a 0600 file (templated).
    :param ref_policy: ``fail`` (default), ``drop`` or ``keep`` (templated).
    :param tables_in_scope: every table the requests cover (templated); a request is
        ``erased`` only when all of them have verified evidence. Default: ``[table]``.
    :param salt_conn_id: connection whose password is the HMAC salt (templated).
    :param redact_erased_requests: physical phases (``purge``, ``full``) with a ``requests_table``:
        once a request is ``erased`` on every table in scope, replace its ``subject_key`` by the
        salted hash of its evidence, purge the requests table's history, verify, and record it
        (status ``redacted``, evidence ``subject_redacted_at``). Default True: after an erasure no
        table, the requests table included, holds the key in plain text. ``False`` keeps the keys.
    :param redact_after: grace period before an erased request's key is redacted (templated): a
        ``timedelta``, ``'72h'``, ``'7d'``, ``'P7D'`` or a number of hours; default ``None`` (at once).
        For teams that reconcile erased requests against a ticketing system: the key stays readable
        that long after the request was erased, then the next physical run (or a ``phase='full'``
        run with nothing to erase) redacts it. At most 365 days.
    :return: evidence summary: counts, snapshot ids, refs, verification (no request id, no hash).
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "subject_columns",
        "phase",
        "requests_table",
        "request_ids",
        "subjects_file",
        "ref_policy",
        "tables_in_scope",
        "salt_conn_id",
        "redact_after",
    )
    ui_color = "#f6d5d5"
    supports_durable_jobs = True
    operator_extra_links = (GovernanceEvidenceLink(),)

    def __init__(
        self,
        *,
        subject_columns: str | Sequence[str],
        requests_table: str | None = None,
        request_ids: Sequence[str] | str | None = None,
        request_statuses: Sequence[str] | None = None,
        phase: str = "full",
        subjects_file: str | None = None,
        ref_policy: str = "fail",
        tables_in_scope: Sequence[str] | None = None,
        salt_conn_id: str = DEFAULT_SALT_CONN_ID,
        redact_erased_requests: bool = True,
        redact_after: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.subject_columns = subject_columns
        self.requests_table = requests_table
        self.request_ids = request_ids
        self.request_statuses = request_statuses
        self.phase = phase
        self.subjects_file = subjects_file
        self.ref_policy = ref_policy
        self.tables_in_scope = tables_in_scope
        self.salt_conn_id = salt_conn_id
        self.redact_erased_requests = redact_erased_requests
        self.redact_after = redact_after
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if (self.requests_table is None) == (self.subjects_file is None):
            raise IcebergValidationError(
                "Pass exactly one subject source: requests_table='ns.requests' (an Iceberg table of requests) or "
                "subjects_file='/secure/path/subjects.jsonl' (never the subjects themselves as arguments)."
            )

    def erasure_args(self) -> ErasureArgs:
        """The rendered arguments as the job preparation takes them."""
        return ErasureArgs(
            table=self.ident,
            subject_columns=self.subject_columns,
            requests_table=self.requests_table,
            request_ids=self.request_ids,
            request_statuses=self.request_statuses,
            subjects_file=self.subjects_file,
            ref_policy=self.ref_policy,
            tables_in_scope=self.tables_in_scope,
            salt_conn_id=self.salt_conn_id,
            redact_erased_requests=self.redact_erased_requests,
            redact_after=self.redact_after,
        )

    # ----------------------------------------------------------------- execute
    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        ident, phase = self.ident, validate_phase(self.phase)
        resumed = self.resume_spark_job(context)  # an earlier try's durable job: reconnect or take its result
        if resumed is not None:
            run, row = resumed.run, resumed.row
        else:
            run, row = self.run_spark_job(context, "erasure", self._plan_job(context, phase))
        if row["status"] == "refused":
            raise IcebergRefusedError(
                f"Erasure of {ident} refused, nothing was changed: {row['details'].get('refused')}"
            )
        summary = self._summary(run.job_run_id, row, run.seconds)
        if row["status"] == "noop":
            self.log.info("No erasure requests to process for %s", ident)
            return summary
        self._verify_evidence(run.job_run_id, row, summary)
        self.log.info("Erasure (%s) of %s: %s", phase, ident, {k: summary[k] for k in _LOGGED})
        return summary

    def _plan_job(self, context: Context, phase: str) -> dict[str, Any]:
        """Resolve the arguments, refuse from metadata (nothing changed), and build the job's spec.

        A policy refusal before any job is recorded as a ``refused`` erasure ledger row with its reason, so
        the task's governance link says why; the governed table and the requests table stay unchanged.
        Invalid arguments are refused without a ledger row: a value that is not a valid identifier is
        never written anywhere.
        """
        try:
            prepared = prepare_erasure(self.catalog_hook, self.erasure_args(), phase, self.log)
        except IcebergRefusedError as err:
            self.catalog_hook.governance.record_ledger(
                operation="erasure",
                table=self.ident.dotted,
                status="refused",
                context=context,
                details={"refused": str(err)[:1000], "phase": phase, "before_spark": True},
            )
            raise
        return self.job_spec(context, "erasure", **prepared)

    def _verify_evidence(self, job_run_id: str, row: dict[str, Any], summary: dict[str, Any]) -> None:
        verify_evidence(
            self.catalog_hook,
            self.ident,
            job_run_id,
            row["metrics"],
            summary,
            log=self.log,
        )

    def _summary(self, job_run_id: str, row: dict[str, Any], seconds: float) -> dict[str, Any]:
        return erasure_summary(self.ident.dotted, job_run_id, row, row["metrics"], seconds, self.phase)
