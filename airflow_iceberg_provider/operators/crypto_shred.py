"""Encrypted writes to a crypto-shredded derived table (opt-in erasure mode for wide tables).

A derived table declaring ``airflow-iceberg.erasure.mode=crypto-shred`` stores each subject's
personal columns encrypted (AES-256-GCM) with a data key of its own, kept in a key table; its
erasure (:class:`~airflow_iceberg_provider.operators.erasure.IcebergErasureOperator`) then erases the
subject's key row instead of rewriting the wide table. The rules and the SQL are
:mod:`airflow_iceberg_provider.core.crypto_shred`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider import params
from airflow_iceberg_provider.exceptions import IcebergCommitVerificationError, IcebergValidationError
from airflow_iceberg_provider.operators._base import IcebergSparkBaseOperator
from airflow_iceberg_provider.operators._erasure_job import DEFAULT_SALT_CONN_ID, salt_from_connection
from airflow_iceberg_provider.params import validate_table
from airflow_iceberg_provider.rules import crypto_shred

if TYPE_CHECKING:
    from airflow.sdk import Context

JOB = "crypto_shred_write"


class IcebergCryptoShredWriteOperator(IcebergSparkBaseOperator):
    """
    Append a source table's rows to a crypto-shredded derived table, encrypting its personal columns.

    The derived table declares the mode in its properties (see
    :func:`~airflow_iceberg_provider.core.crypto_shred.declaration`): its key table, its encrypted
    ``binary`` columns and its subject hash column. One Spark job creates the key table if missing,
    gives every new subject a random 256-bit data key (Python ``secrets``), and appends the rows with
    the hash column set to ``HMAC-SHA256(salt, subject key)`` (the erasure's keyed hash) and each
    encrypted column set to ``aes_encrypt(value, data_key, 'GCM')``. Subject keys, data keys and the
    salt never reach argv, logs or XCom.

    After the job the operator checks that ``main`` of the derived table advanced by one append of as
    many rows as the source holds.

    :param table: the derived table, ``namespace.table`` (templated).
    :param source_table: ``namespace.table`` holding the rows in plain text, with every column of the
        derived table except the hash column, under the same names (templated).
    :param subject_column: the source column holding the subject key (templated).
    :param salt_conn_id: connection whose password is the erasure salt (templated): the same one the
        erasure uses, so the key table's hashes match the erasure requests.
    :return: ``rows_written``, ``subjects``, ``keys_created``, ``snapshot_id`` (string), ``key_table``.
    """

    template_fields: Sequence[str] = (
        *IcebergSparkBaseOperator.template_fields,
        "source_table",
        "subject_column",
        "salt_conn_id",
    )
    ui_color = "#f6d5d5"

    def __init__(
        self,
        *,
        source_table: str,
        subject_column: str,
        salt_conn_id: str = DEFAULT_SALT_CONN_ID,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.source_table = source_table
        self.subject_column = subject_column
        self.salt_conn_id = salt_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        params.resolve_flags(self)  # strict flags first, before any I/O
        hook = self.catalog_hook
        tbl = hook.load_table(self.ident)
        plan = self._plan(tbl)
        before = hook.ref_snapshot_id(tbl, "main")
        spec = self.job_spec(context, JOB, **plan, salt=salt_from_connection(self.salt_conn_id))
        run, row = self.run_spark_job(context, JOB, spec)
        snap = self.verify_new_commit(ref="main", before_snapshot_id=before, operations=("append",))
        metrics = row["metrics"]
        added = int(snap.summary.get("added-records", -1))
        if added != int(metrics["rows_read"]):
            raise IcebergCommitVerificationError(
                f"{self.ident}: the encrypted write read {metrics['rows_read']} source rows but its commit "
                f"{snap.snapshot_id} added {added}; a subject without a data key would be dropped. Check the key "
                f"table {plan['crypto_shred']['key_table']} (one row per subject) and re-run."
            )
        result = {
            "table": self.ident.dotted,
            "key_table": plan["crypto_shred"]["key_table"],
            "rows_written": added,
            "subjects": int(metrics["subjects"]),
            "keys_created": int(metrics["keys_created"]),
            "snapshot_id": str(snap.snapshot_id),
            "job_run_id": run.job_run_id,
        }
        self.log.info("Encrypted write to %s: %s", self.ident, result)
        return result

    def _plan(self, tbl: Any) -> dict[str, Any]:
        """Resolve the declaration and the source's columns (refusals: nothing changed); the job's parameters."""
        hook = self.catalog_hook
        types = {f.name: str(f.field_type) for f in tbl.schema().fields}
        shred = crypto_shred.declared(self.ident.dotted, dict(tbl.metadata.properties), types)
        if shred is None:
            raise IcebergValidationError(
                f"{self.ident} is not crypto-shredded; set its table properties airflow-iceberg.erasure.mode="
                "'crypto-shred', airflow-iceberg.erasure.key-table and airflow-iceberg.erasure.encrypted-columns, "
                "or write it with an ordinary writer."
            )
        source = validate_table(self.source_table, "source_table")
        source_types = {f.name: str(f.field_type) for f in hook.load_table(source).schema().fields}
        subject = crypto_shred.subject_column(self.subject_column, source_types)
        columns = crypto_shred.write_columns(shred, types, source_types)
        return {
            "crypto_shred": shred.to_dict(),
            "source_table": source.dotted,
            "subject_column": subject,
            "derived_columns": columns,
        }
