"""Row-level erasure (GDPR art. 17, PIPEDA / LPRPDE, Quebec Law 25) of data subjects from one table.

A DELETE is not an erasure: merge-on-read leaves the rows inside live data files,
copy-on-write leaves them in files older snapshots still reference, tags and
branches pin those snapshots, and DELETED manifest entries keep column bounds. The
operator runs ONE Spark job (``spark_jobs/erasure.py``) per phase:

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
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider._validation import validate_name, validate_table
from airflow_iceberg_provider.erasure_policy import (
    PHASE_INPUT_STATUSES,
    PHASE_LOGICAL,
    PHASE_PURGE,
    REQUIRED_REQUEST_COLUMNS,
    bloom_filter_warnings,
    erasure_table_facts,
    purge_candidates,
    refuse_if_problems,
    table_problems,
    validate_phase,
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
from airflow_iceberg_provider.ids import id_str
from airflow_iceberg_provider.maintenance_policy import preview_table_expiry
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.ui.links import GovernanceEvidenceLink

if TYPE_CHECKING:
    from airflow.sdk import Context

DEFAULT_SALT_CONN_ID = "erasure_salt"
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

    Lifecycle (:func:`erasure_policy.transition`): ``pending`` -> ``logically_erased``
    (``phase="logical"``) -> ``erased`` (``phase="purge"``); ``full`` goes to ``erased`` at once;
    ``blocked`` when a hold keeps rows. Requests whose key matched no row (``rows_found = 0``
    in the evidence) are logged as a warning by request id (never the key).

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
        ``done`` only when all of them have verified evidence. Default: ``[table]``.
    :param salt_conn_id: connection whose password is the HMAC salt (templated).
    :param redact_erased_requests: physical phases (``purge``, ``full``) with a ``requests_table``:
        once a request is ``erased`` on every table in scope, replace its ``subject_key`` by the
        salted hash of its evidence, purge the requests table's history, verify, and record it
        (status ``redacted``, evidence ``subject_redacted_at``). Default True.
    :param evidence_in_xcom: at most this many per-request evidence entries in the XCom.
    :return: evidence summary (counts, snapshot ids, refs, verification; hashes only).
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
    )
    ui_color = "#f6d5d5"
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
        evidence_in_xcom: int = 50,
        redact_erased_requests: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.subject_columns = subject_columns
        self.requests_table = requests_table
        self.request_ids = request_ids
        self.request_statuses = list(request_statuses) if request_statuses is not None else None
        self.phase = phase
        self.subjects_file = subjects_file
        self.ref_policy = ref_policy
        self.tables_in_scope = tables_in_scope
        self.salt_conn_id = salt_conn_id
        self.evidence_in_xcom = evidence_in_xcom
        self.redact_erased_requests = redact_erased_requests
        self.check_arguments()

    def check_arguments(self) -> None:
        super().check_arguments()
        if (self.requests_table is None) == (self.subjects_file is None):
            raise IcebergValidationError(
                "Pass exactly one subject source: requests_table='ns.requests' (an Iceberg table of requests) or "
                "subjects_file='/secure/path/subjects.jsonl' (never the subjects themselves as arguments)."
            )

    # ------------------------------------------------------------------ pieces
    def _source(self, phase: str) -> dict[str, Any]:
        if self.requests_table is not None:
            req = validate_table(self.requests_table, "requests_table").dotted
            have = set(self.catalog_hook.load_table(req).schema().column_names)
            missing = [c for c in REQUIRED_REQUEST_COLUMNS if c not in have]
            if missing:
                raise IcebergValidationError(
                    f"requests_table={req!r} lacks column(s) {missing}; create it with "
                    "IcebergCatalogHook.ensure_erasure_requests_table or add the columns."
                )
            statuses = self.request_statuses or list(PHASE_INPUT_STATUSES[phase])
            for i, s in enumerate(statuses):
                validate_name(s, f"request_statuses[{i}]")
            ids = validate_request_ids(self.request_ids)
            if phase == PHASE_PURGE:  # refuse before any JVM: nothing logically erased, nothing to purge
                ids = purge_candidates(self.catalog_hook.erasure_request_states(req), ids)
            return {"kind": "requests_table", "table": req, "request_ids": ids, "statuses": statuses}
        if phase == PHASE_PURGE:
            raise IcebergValidationError(
                "phase='purge' needs requests_table= (the lifecycle state lives there); a subjects_file can be "
                "erased with phase='full'."
            )
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
        ident, phase = self.ident, validate_phase(self.phase)
        spec = self._plan_job(context, phase)
        run, row = self.run_spark_job(context, "erasure", spec)
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
        """Resolve the arguments, refuse from metadata (nothing changed), and build the job's spec."""
        columns = validate_subject_columns(self.subject_columns)
        policy = validate_ref_policy(self.ref_policy)
        scope = self._scope()
        source = self._source(phase)
        self._preflight(columns, phase)
        salt = self._salt()
        self.catalog_hook.governance_table("erasure_evidence")
        self.log.info(
            "Erasure (%s) of %s (columns %s, source %s, ref_policy=%s)",
            phase, self.ident, columns, source["kind"], policy,
        )  # fmt: skip
        return self.job_spec(
            context,
            "erasure",
            subject_columns=columns,
            source=source,
            ref_policy=policy,
            salt=salt,
            tables_in_scope=scope,
            phase=phase,
            redact_requests=bool(self.redact_erased_requests),
        )

    def _preflight(self, columns: list[str], phase: str) -> None:
        """Refusals from metadata (nothing changed) and warnings (bounds, bloom filters)."""
        ident = self.ident
        tbl = self.catalog_hook.load_table(ident)
        facts = erasure_table_facts(tbl, self.catalog_hook.data_files(tbl, all_snapshots=True, deletes_only=True))
        problems = table_problems(table=ident.dotted, columns=columns, **facts)
        if phase == PHASE_LOGICAL and facts["format_version"] < 2:
            problems.append(
                f"{ident.dotted} is format-version 1: it has no delete files, so a logical (merge-on-read) erasure "
                "is impossible; use phase='full' or upgrade the table to format-version 2."
            )
        refuse_if_problems(problems)
        if phase != PHASE_LOGICAL:  # its expiry must not drop a legal hold by age: refuses, names the hold
            preview_table_expiry(tbl, retain_last=1)
        for c in columns:
            if facts["properties"].get(f"write.metadata.metrics.column.{c}") != "none":
                self.log.warning(
                    "%s keeps column bounds for subject column %s in its manifests; set the table property "
                    "write.metadata.metrics.column.%s=none so future manifests never carry personal values",
                    ident,
                    c,
                    c,
                )
        for warning in bloom_filter_warnings(ident.dotted, columns, facts["properties"]):
            self.log.warning("%s", warning)

    def _verify_evidence(self, job_run_id: str, row: dict[str, Any], summary: dict[str, Any]) -> None:
        ident, hook, metrics = self.ident, self.catalog_hook, row["metrics"]
        evidence = hook.read_governance_rows("erasure_evidence", job_run_id=job_run_id)
        if len(evidence) != int(metrics.get("requests", -1)):
            raise IcebergCommitVerificationError(
                f"The erasure job for {ident} reported {metrics.get('requests')} requests but "
                f"{len(evidence)} evidence rows carry its job_run_id {job_run_id}; the evidence is incomplete."
            )
        still_there = sorted(set(metrics.get("refs_dropped") or []) & set(hook.refs(ident)))
        if still_there:
            raise IcebergCommitVerificationError(f"Refs {still_there} of {ident} should have been dropped but exist.")
        summary["evidence_rows"] = len(evidence)
        summary["evidence"] = [
            {k: e.get(k) for k in ("request_id", "subject_hash", "rows_deleted", "rows_found", "phase", "verification")}
            for e in sorted(evidence, key=lambda e: e["request_id"])[: self.evidence_in_xcom]
        ]
        unmatched = sorted(e["request_id"] for e in evidence if not e.get("rows_found"))
        summary["requests_matching_nothing"] = unmatched
        if unmatched:
            self.log.warning(
                "%d erasure request(s) matched no row of %s (rows_found = 0): %s. A typo, or a difference in case "
                "or whitespace? Matching is exact; check the keys of these requests.",
                len(unmatched),
                ident,
                ", ".join(unmatched[:20]),
            )

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
            "phase": self.phase,
            "files_considered": int(m.get("files_considered", 0)),
            "files_pruned_bounds": int(m.get("files_pruned_bounds", 0)),
            "files_pruned_bloom": int(m.get("files_pruned_bloom", 0)),
            "files_pruned_dictionary": int(m.get("files_pruned_dictionary", 0)),
            "files_raw_read": int(m.get("files_raw_read", 0)),
            "snapshots_kept": int(m.get("snapshots_retained", 0)),
            "requests_redacted": int(m.get("requests_redacted", 0)),
            "redaction_verification": m.get("redaction_verification"),
            "tags_pending_purge": list(m.get("tags_showing_subjects") or []),
            "seconds": round(seconds, 3),
        }


def run_erasure_purge(parent: IcebergSparkBaseOperator, context: Context, options: dict[str, Any]) -> dict[str, Any]:
    """The purge phase on behalf of another operator (``IcebergMaintenancePlanOperator(erasure_purge=...)``).

    ``options`` are :class:`IcebergErasureOperator` arguments (``subject_columns``,
    ``requests_table``, ``ref_policy``, ``tables_in_scope``, ``salt_conn_id``…); the table,
    catalog and Spark settings come from ``parent``. Nothing logically erased: no job, and
    ``{"purged": False}`` (a nightly run with nothing to purge is not an error).
    """
    opts = dict(options or {})
    if "phase" in opts and opts.pop("phase") != PHASE_PURGE:
        raise IcebergValidationError("erasure_purge runs phase='purge' only; drop the 'phase' key.")
    if not opts.get("requests_table") or not opts.get("subject_columns"):
        raise IcebergValidationError(
            "erasure_purge needs at least {'requests_table': 'ns.requests', 'subject_columns': 'customer_id'}."
        )
    req = validate_table(opts["requests_table"], "erasure_purge.requests_table").dotted
    try:
        purge_candidates(parent.catalog_hook.erasure_request_states(req), validate_request_ids(opts.get("request_ids")))
    except IcebergValidationError:
        parent.log.info("erasure_purge: no logically erased request in %s, nothing to purge", req)
        return {"purged": False}
    op = IcebergErasureOperator(
        task_id=f"{parent.task_id}.erasure_purge",
        table=parent.table,
        phase=PHASE_PURGE,
        **parent.spark_settings(),
        **opts,
    )
    return {"purged": True, **op.execute(context)}
