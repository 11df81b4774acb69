"""Row-level erasure (GDPR art. 17, PIPEDA / LPRPDE, Quebec Law 25) of data subjects from one table.

A DELETE is not an erasure: merge-on-read leaves the rows inside live data files,
copy-on-write leaves them in files older snapshots still reference, tags and
branches pin those snapshots, and DELETED manifest entries keep column bounds. The
operator runs ONE Spark job (``spark_jobs/erasure.py``) that deletes, rewrites,
expires, rewrites manifests, expires again and then verifies by reading the raw data
files of every retained snapshot; then it checks the evidence the job wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider._validation import validate_name, validate_table
from airflow_iceberg_provider.erasure_policy import (
    REQUIRED_REQUEST_COLUMNS,
    STATUS_BLOCKED,
    STATUS_PENDING,
    refuse_if_problems,
    table_problems,
    validate_ref_policy,
    validate_request_ids,
    validate_salt,
    validate_subject_columns,
    validate_subjects_file,
)
from airflow_iceberg_provider.exceptions import (
    IcebergCommitVerificationError,
    IcebergRefusedError,
    IcebergValidationError,
)
from airflow_iceberg_provider.hooks.spark import SPARK_JOBS_DIR
from airflow_iceberg_provider.ids import id_str
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.ui.links import GovernanceEvidenceLink

if TYPE_CHECKING:
    from airflow.sdk import Context

ERASURE_SQL_MODULE = SPARK_JOBS_DIR / "erasure_sql.py"
DEFAULT_SALT_CONN_ID = "erasure_salt"


class IcebergErasureOperator(IcebergSparkBaseOperator):
    """
    Physically erase data subjects' rows from one table, verify it, and record evidence.

    Subjects come from an Iceberg *requests table* (``request_id``, ``subject_key``,
    ``received_at``, ``status``; see :meth:`IcebergCatalogHook.ensure_erasure_requests_table`)
    or from a *subjects file* (JSON lines / CSV / parquet with ``request_id`` and
    ``subject_key``, mode 0600). Spark reads them directly: they never pass through the
    Airflow worker's memory, argv, logs or XCom.

    The job refuses (nothing changed) when a tag or branch would keep the subjects
    reachable, unless ``ref_policy`` says otherwise: ``drop`` removes such refs (never
    ``main`` nor a ``legal-hold-*`` tag) and ``keep`` erases everything else and records
    the erasure as ``incomplete`` with the blocking refs named (legal hold).

    Evidence: one row per request in ``<governance>.erasure_evidence`` (salted
    HMAC-SHA256 of the subject key; the salt is the password of ``salt_conn_id`` and is
    never stored). Request statuses become ``done`` when every table in
    ``tables_in_scope`` has verified evidence, ``blocked`` when a hold keeps rows. A
    re-run for the same requests deletes nothing, re-verifies and updates the same
    evidence rows.

    :param table: ``namespace.table`` to erase from (templated).
    :param subject_columns: column (or list of columns) holding the subject key (templated).
    :param requests_table: ``namespace.table`` of erasure requests (templated).
    :param request_ids: only these request ids (any status) (templated); default: every
        request whose status is in ``request_statuses``.
    :param request_statuses: statuses picked up when ``request_ids`` is not given.
    :param subjects_file: alternative to ``requests_table``: path of a 0600 file (templated).
    :param ref_policy: ``fail`` (default), ``drop`` or ``keep`` (templated).
    :param tables_in_scope: every table the requests cover (templated); a request is
        ``done`` only when all of them have verified evidence. Default: ``[table]``.
    :param salt_conn_id: connection whose password is the HMAC salt (templated).
    :param evidence_in_xcom: at most this many per-request evidence entries in the XCom.
    :return: evidence summary (counts, snapshot ids, refs, verification; hashes only).
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "subject_columns",
        "requests_table",
        "request_ids",
        "subjects_file",
        "ref_policy",
        "tables_in_scope",
        "salt_conn_id",
    )
    ui_color = "#f6d5d5"
    operator_extra_links = (GovernanceEvidenceLink(),)

    def __init__(
        self,
        *,
        subject_columns: str | Sequence[str],
        requests_table: str | None = None,
        request_ids: Sequence[str] | str | None = None,
        request_statuses: Sequence[str] = (STATUS_PENDING, STATUS_BLOCKED),
        subjects_file: str | None = None,
        ref_policy: str = "fail",
        tables_in_scope: Sequence[str] | None = None,
        salt_conn_id: str = DEFAULT_SALT_CONN_ID,
        evidence_in_xcom: int = 50,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.subject_columns = subject_columns
        self.requests_table = requests_table
        self.request_ids = request_ids
        self.request_statuses = list(request_statuses)
        self.subjects_file = subjects_file
        self.ref_policy = ref_policy
        self.tables_in_scope = tables_in_scope
        self.salt_conn_id = salt_conn_id
        self.evidence_in_xcom = evidence_in_xcom
        if (requests_table is None) == (subjects_file is None):
            raise IcebergValidationError(
                "Pass exactly one subject source: requests_table='ns.requests' (an Iceberg table of requests) or "
                "subjects_file='/secure/path/subjects.jsonl' (never the subjects themselves as arguments)."
            )

    # ------------------------------------------------------------------ pieces
    def _source(self) -> dict[str, Any]:
        if self.requests_table is not None:
            req = validate_table(self.requests_table, "requests_table").dotted
            have = set(self.catalog_hook.load_table(req).schema().column_names)
            missing = [c for c in REQUIRED_REQUEST_COLUMNS if c not in have]
            if missing:
                raise IcebergValidationError(
                    f"requests_table={req!r} lacks column(s) {missing}; create it with "
                    "IcebergCatalogHook.ensure_erasure_requests_table or add the columns."
                )
            for i, s in enumerate(self.request_statuses):
                validate_name(s, f"request_statuses[{i}]")
            return {
                "kind": "requests_table",
                "table": req,
                "request_ids": validate_request_ids(self.request_ids),
                "statuses": self.request_statuses,
            }
        if self.request_ids:
            raise IcebergValidationError(
                "request_ids applies to requests_table only; filter the subjects_file instead."
            )
        path, fmt = validate_subjects_file(self.subjects_file)
        return {"kind": "file", "path": path, "format": fmt}

    def _salt(self) -> str:
        from airflow.sdk import BaseHook

        try:
            conn = BaseHook.get_connection(self.salt_conn_id)
        except Exception as err:
            raise IcebergValidationError(
                f"salt_conn_id={self.salt_conn_id!r}: the connection does not exist; create one (any type) whose "
                f"password is a random secret of at least 16 characters, e.g. AIRFLOW_CONN_{self.salt_conn_id.upper()}"
                '=\'{"conn_type": "generic", "password": "..."}\'.'
            ) from err
        salt = validate_salt(conn.password, f"connection {self.salt_conn_id!r}")
        try:
            from airflow.sdk.log import mask_secret

            mask_secret(salt)
        except ImportError:  # pragma: no cover
            pass
        return salt

    def _scope(self) -> list[str]:
        scope = [validate_table(t, "tables_in_scope").dotted for t in (self.tables_in_scope or [self.table])]
        if self.ident.dotted not in scope:
            raise IcebergValidationError(f"tables_in_scope={scope} must include table {self.ident.dotted!r}.")
        return scope

    # ----------------------------------------------------------------- execute
    def execute(self, context: Context) -> dict[str, Any]:
        ident, hook = self.ident, self.catalog_hook
        columns = validate_subject_columns(self.subject_columns)
        policy = validate_ref_policy(self.ref_policy)
        scope = self._scope()
        source = self._source()
        facts = hook.erasure_table_facts(ident)
        refuse_if_problems(table_problems(table=ident.dotted, columns=columns, **facts))
        for c in columns:
            if facts["properties"].get(f"write.metadata.metrics.column.{c}") != "none":
                self.log.warning(
                    "%s keeps column bounds for subject column %s in its manifests; set the table property "
                    "write.metadata.metrics.column.%s=none so future manifests never carry personal values",
                    ident,
                    c,
                    c,
                )
        salt = self._salt()
        hook.governance_table("erasure_evidence")
        self.log.info(
            "Erasing subjects from %s (columns %s, source %s, ref_policy=%s)", ident, columns, source["kind"], policy
        )
        spec = self.job_spec(
            context,
            "erasure",
            subject_columns=columns,
            source=source,
            ref_policy=policy,
            salt=salt,
            tables_in_scope=scope,
        )
        run, row = self.run_spark_job(context, "erasure", spec, extra_py_files=[str(ERASURE_SQL_MODULE)])
        metrics, details = row["metrics"], row["details"]
        if row["status"] == "refused":
            raise IcebergRefusedError(f"Erasure of {ident} refused, nothing was changed: {details.get('refused')}")
        summary = self._summary(run.job_run_id, row, run.seconds)
        if row["status"] == "noop":
            self.log.info("No erasure requests to process for %s", ident)
            return summary
        evidence = hook.read_governance_rows("erasure_evidence", job_run_id=run.job_run_id)
        if len(evidence) != int(metrics.get("requests", -1)):
            raise IcebergCommitVerificationError(
                f"The erasure job for {ident} reported {metrics.get('requests')} requests but "
                f"{len(evidence)} evidence rows carry its job_run_id {run.job_run_id}; the evidence is incomplete."
            )
        still_there = sorted(set(metrics.get("refs_dropped") or []) & set(hook.refs(ident)))
        if still_there:
            raise IcebergCommitVerificationError(f"Refs {still_there} of {ident} should have been dropped but exist.")
        summary["evidence_rows"] = len(evidence)
        summary["evidence"] = [
            {k: e.get(k) for k in ("request_id", "subject_hash", "rows_deleted", "verification")}
            for e in sorted(evidence, key=lambda e: e["request_id"])[: self.evidence_in_xcom]
        ]
        self.log.info(
            "Erasure of %s: %s requests, %s rows deleted, %s files rewritten, %s snapshots expired, verification=%s, "
            "blocking refs=%s, dropped refs=%s",
            ident,
            summary["requests"],
            summary["rows_deleted"],
            summary["files_rewritten"],
            summary["snapshots_expired"],
            summary["verification"],
            summary["refs_blocking"],
            summary["refs_dropped"],
        )
        return summary

    def _summary(self, job_run_id: str, row: dict[str, Any], seconds: float) -> dict[str, Any]:
        m = row["metrics"]

        def iso(ms: Any) -> str | None:
            return datetime.fromtimestamp(int(ms) / 1000, UTC).isoformat() if ms else None

        return {
            "table": self.ident.dotted,
            "job_run_id": job_run_id,
            "status": row["status"],
            "requests": int(m.get("requests", 0)),
            "rows_deleted": int(m.get("rows_deleted", 0)),
            "verification": m.get("verification"),
            "snapshot_before": id_str(row.get("snapshot_before")),  # strings: browsers round 64-bit ids
            "snapshot_after": id_str(row.get("snapshot_after")),
            "files_rewritten": int(m.get("files_rewritten", 0)),
            "files_removed": int(m.get("files_removed", 0)),
            "snapshots_expired": int(m.get("snapshots_expired", 0)),
            "refs_dropped": list(m.get("refs_dropped") or []),
            "refs_blocking": list(m.get("refs_blocking") or []),
            "rows_held": int(m.get("held_rows", 0)),
            "time_travel_floor_before": iso(m.get("time_travel_floor_before_ms")),
            "time_travel_floor_after": iso(m.get("time_travel_floor_after_ms")),
            "request_statuses": m.get("request_statuses") or {},
            "seconds": round(seconds, 3),
        }
