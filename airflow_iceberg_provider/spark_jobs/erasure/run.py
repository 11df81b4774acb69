"""Spark job: row-level erasure of data subjects from ONE table, physically, with proof.

One session does every step (see DESIGN "Facts that bite": a DELETE is not an erasure):

1. load the subjects (requests table or a file; never argv, never printed) into a
   cached temp view, keys cast to each subject column's type, HMAC computed in Spark;
2. refuse what cannot be erased (missing/unsupported column, equality-delete files,
   non-parquet data files) — nothing committed;
3. raw scan of every data file in the table's history (delete files NOT applied):
   which files hold subject rows; per ref, whether its head keeps such files
   reachable; apply the ref policy (``fail`` refuses, ``drop`` removes, ``keep`` holds);
4. one batched ``DELETE ... WHERE col IN (SELECT k FROM keys)`` on main and on every
   branch whose head still shows the rows (branches copy-on-write, then their
   manifests merged so DELETED entries stop carrying bounds);
5. ``rewrite_data_files`` with ``delete-file-threshold=1`` (main);
   ``expire_snapshots(older_than => now, retain_last => 1)``; ``rewrite_manifests``;
   expire again;
6. verify independently of the delete path: raw-read every data file reachable from
   any retained snapshot and count subject rows (must be 0 outside legal holds); no
   pre-erasure subject file reachable or on disk; no manifest entry bound equal to a
   subject key;
7. evidence rows (MERGE, one per request and table; salted hashes only) and request
   statuses (MERGE into the requests table).

Phases (``spec["phase"]``): ``full`` is the sequence above; ``logical`` (``erasure_logical.py``) stops after
step 4 (merge-on-read DELETE on main, properties restored and compared; copy-on-write on other
branches) and verifies with a count on every ref head; ``purge`` runs steps 3-7 with
``expire_snapshots(snapshot_ids => ...)`` limited to the snapshots that reach a subject file,
after ``rewrite_manifests``, and removes leftovers of killed rewrites. Steps 3 and 6 raw-read
only the files that exact manifest bounds and Parquet bloom filters cannot exclude
(``erasure_prune.py``). Evidence and request statuses: ``erasure_record.py``.

Error messages that leave this job are redacted (salt and subject keys removed).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_provider.core import crypto_shred as cs
from airflow_iceberg_provider.core import erasure_lifecycle as lc
from airflow_iceberg_provider.core.erasure_columns import iceberg_column_types, subject_column_problems
from airflow_iceberg_provider.spark_jobs import _fs
from airflow_iceberg_provider.spark_jobs.erasure import index as erasure_index
from airflow_iceberg_provider.spark_jobs.erasure import logical as erasure_logical
from airflow_iceberg_provider.spark_jobs.erasure import prune as ep
from airflow_iceberg_provider.spark_jobs.erasure import record as er
from airflow_iceberg_provider.spark_jobs.erasure import redact as erasure_redact
from airflow_iceberg_provider.spark_jobs.erasure import scan as esc
from airflow_iceberg_provider.spark_jobs.erasure import shred as erasure_shred
from airflow_iceberg_provider.spark_jobs.erasure import sql as es
from airflow_iceberg_provider.spark_jobs.table_access import TableAccess, for_session

norm_path = esc.norm_path


def subject_problems(table: str, columns: list[str], metadata: dict[str, Any]) -> list[str]:
    """Why ``columns`` cannot be the subject columns of ``table``, from its current metadata JSON: the
    operator's pre-flight rule (:func:`~airflow_iceberg_provider.core.erasure_columns.subject_column_problems`)
    over the same Iceberg types, not over Spark's."""
    return subject_column_problems(table, columns, iceberg_column_types(json.loads(_fs.schema_json(metadata))))


class ErasureRun:
    """All phases of one table's erasure, on one Spark session (also used by bench/)."""

    def __init__(self, spark: Any, spec: dict[str, Any], access: TableAccess | None = None) -> None:
        """
        :param access: the job's table access (:func:`~.table_access.for_session` of ``spark`` when not given).
        """
        self.spark = spark
        self.access = access if access is not None else for_session(spark)
        self.spec = spec
        self.catalog: str = spec["catalog_name"]
        # crypto-shred: the job erases the subjects' data keys from the key table, never the derived
        # table, whose name the evidence carries (``evidence_table``); the key table's subject column
        # holds keyed hashes, so the subjects are matched by HMAC(salt, key) (``hashed_columns``)
        self.shred = erasure_shred.declared(spec)
        self.table: str = self.shred.key_table if self.shred else spec["table"]
        self.evidence_table: str = spec["table"]
        self.columns: list[str] = es.check_columns(spec["subject_columns"])
        self.hashed_columns = set(self.columns) if self.shred else set()
        self.t = es.table_sql(self.catalog, self.table)
        self.policy: str = spec.get("ref_policy", "fail")
        self.salt: bytes = str(spec["salt"]).encode("utf-8")
        self.phase = "start"
        self.phase_name: str = spec.get("phase", lc.PHASE_FULL)
        if self.phase_name not in lc.PHASES:
            raise ValueError(f"unknown phase {self.phase_name!r}")
        self.timings: dict[str, float] = {}
        self.metrics: dict[str, Any] = {}
        if self.shred:  # every phase's result says the mode (the logical phase hides the key row on main)
            self.metrics.update(erasure_mode=cs.MODE_CRYPTO_SHRED, key_table=self.shred.key_table)
        self._cached: list[Any] = []
        self.details: dict[str, Any] = {}
        self.status = "succeeded"
        self.extra_secrets: list[str] = []  # keys read besides the subjects (redaction): never printed

    # ------------------------------------------------------------------ helpers
    def sql(self, query: str, **args: Any) -> Any:
        return self.spark.sql(query, args=args) if args else self.spark.sql(query)

    def timed(self, phase: str) -> Any:
        run = self

        class _T:
            def __enter__(self) -> None:
                run.phase = phase
                self.t0 = time.monotonic()

            def __exit__(self, *exc: Any) -> None:
                run.timings[phase] = round(run.timings.get(phase, 0.0) + time.monotonic() - self.t0, 3)

        return _T()

    def jtable(self, refresh: bool = True) -> Any:
        """The Iceberg Java table (spark-submit only: the position-delete path of :mod:`erasure_targeted`)."""
        jtable = self.access.java_table(self.t, refresh=refresh)
        if jtable is None:
            raise RuntimeError("the Iceberg Java API needs a driver JVM; this session is a Spark Connect client")
        return jtable

    def snapshot_files(self, snapshot_id: int) -> set[str]:
        """Live data files of one snapshot (normalised paths)."""
        return {norm_path(p) for p in self.access.snapshot_files(self.t, snapshot_id)}

    def exists(self, path: str) -> bool:
        return self.access.exists(self.t, path)

    def refresh(self) -> None:
        self.access.refresh(self.t)

    def main_head(self) -> int | None:
        rows = self.sql(f"SELECT snapshot_id FROM {self.t}.refs WHERE name = 'main'").collect()
        return int(rows[0][0]) if rows else None

    def snapshots(self) -> list[dict[str, Any]]:
        rows = self.sql(
            f"SELECT snapshot_id, parent_id, unix_millis(committed_at) AS ts, operation, summary FROM {self.t}.snapshots"
        ).collect()
        return [
            {
                "snapshot_id": int(r.snapshot_id),
                "parent_id": int(r.parent_id) if r.parent_id is not None else None,
                "timestamp_ms": int(r.ts),
                "operation": r.operation,
                "summary": dict(r.summary or {}),
            }
            for r in rows
        ]

    def refs(self) -> list[dict[str, Any]]:
        rows = self.sql(
            f"SELECT name, type, snapshot_id, max_reference_age_in_ms, min_snapshots_to_keep, "
            f"max_snapshot_age_in_ms FROM {self.t}.refs"
        ).collect()
        return [
            {
                "name": r.name,
                "type": r.type.lower(),
                "snapshot_id": int(r.snapshot_id),
                "max_ref_age_ms": r.max_reference_age_in_ms,
                "min_snapshots_to_keep": r.min_snapshots_to_keep,
                "max_snapshot_age_ms": r.max_snapshot_age_in_ms,
            }
            for r in rows
        ]

    def reachable_data_files(self) -> dict[str, str]:
        """Normalised path -> location of every data file reachable from a retained snapshot."""
        rows = self.sql(f"SELECT DISTINCT file_path FROM {self.t}.all_data_files").collect()
        return {norm_path(r[0]): r[0] for r in rows}

    def raw_hits(self, locations: list[str]) -> dict[str, int]:
        """Subject rows per data file, read straight from parquet (delete files NOT applied).

        Columns are matched by Iceberg field id, as Iceberg's own reader does: a file written
        before a subject column was renamed holds it under the old name, and a read by name would
        see nulls there and call the file clean. Files written without field ids (imported with
        ``add_files`` / ``migrate`` and read through a name mapping) make Spark refuse the read by
        id; then every file is read by the current names, which is how such files are mapped.
        """
        from pyspark.sql.types import StructField, StructType

        if not locations:
            return {}

        def schema(ids: dict[str, int]) -> Any:
            meta = {c: {"parquet.field.id": i} for c, i in ids.items()}
            return StructType([StructField(c, self.col_types[c], True, meta.get(c, {})) for c in self.columns])

        key = "spark.sql.parquet.fieldId.read.enabled"
        previous = self.spark.conf.get(key, "false")
        self.spark.conf.set(key, "true")
        try:
            return self._raw_hits(locations, schema(esc.field_ids(self)))
        except Exception as err:  # py4j wraps every JVM error: only the field-id one falls back, the rest re-raised
            if "field id" not in str(getattr(err, "java_exception", err)).lower():
                raise
        finally:
            self.spark.conf.set(key, previous)
        return self._raw_hits(locations, schema({}))  # by name

    def _raw_hits(self, locations: list[str], schema: Any) -> dict[str, int]:
        from pyspark.sql import functions as F

        raw = self.spark.read.schema(schema).parquet(*locations)
        raw = raw.select(*self.columns, F.input_file_name().alias("_erasure_file"))
        raw.createOrReplaceTempView("erasure_raw_files")
        rows = self.sql(
            f"SELECT _erasure_file AS f, count(*) AS n FROM erasure_raw_files "
            f"WHERE {es.match_predicate(self.columns)} GROUP BY _erasure_file"
        ).collect()
        return {norm_path(r.f): int(r.n) for r in rows}

    def table_properties(self) -> dict[str, str]:
        """The table's own properties, read from its metadata (not Spark's SHOW TBLPROPERTIES extras)."""
        return self.access.properties(self.t)

    def pruned_hits(self, locations: dict[str, str], prefix: str) -> dict[str, int]:
        """Raw hits over the files pruning cannot exclude; counts recorded as ``<prefix>_*`` and totals."""
        pr = esc.candidates(self, locations)
        for k in ("considered", "pruned_bounds", "pruned_bloom", "pruned_dictionary", "raw_read"):
            self.metrics[f"{prefix}_files_{k}"] = pr[k]
            self.metrics[f"files_{k}"] = self.metrics.get(f"files_{k}", 0) + pr[k]
        return self.raw_hits(pr["candidates"])

    def switch_properties(self, wanted: dict[str, str]) -> None:
        """Switch table properties on for this run's DELETEs: one commit that also records their originals
        (:func:`~airflow_iceberg_provider.core.erasure_lifecycle.switch_plan`), so a kill never leaves them
        switched for good: the next run restores them (:meth:`restore_properties`)."""
        current = self.table_properties()
        if all(current.get(k) == v for k, v in wanted.items()) and lc.SWITCHED_PROPERTIES in current:
            return
        self.sql(es.set_properties_sql(self.t, lc.switch_plan(current, wanted)))

    def restore_properties(self) -> dict[str, str | None]:
        """Put back the originals recorded by :meth:`switch_properties` (this run's, or a killed run's)
        and drop the record; returns them (empty when nothing was switched). Idempotent."""
        current = self.table_properties()
        to_set, to_remove = lc.restore_plan(current)
        if not to_remove:
            return {}
        if to_set:
            self.sql(es.set_properties_sql(self.t, to_set))
        self.sql(es.unset_properties_sql(self.t, to_remove))  # the record goes last: a kill before it is retried
        return lc.recorded_originals(current)

    # ----------------------------------------------------------------- subjects
    def load_subjects(self) -> int:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructField, StructType

        src = self.spec["source"]
        if src["kind"] == "requests_table":
            df = self.spark.table(es.table_sql(self.catalog, src["table"]))
            if src.get("request_ids"):
                ids = self.spark.createDataFrame([(str(i),) for i in src["request_ids"]], "request_id string")
                df = df.join(ids, "request_id", "left_semi")
            else:
                df = df.where(F.col("status").isin(list(src.get("statuses") or [lc.STATUS_PENDING])))
            # a redacted request is closed: its subject_key is a hash, never a key to match
            df = df.where(~F.coalesce(F.col("status"), F.lit("")).isin(lc.STATUS_REDACTED))
        else:
            reader = self.spark.read
            fmt = src.get("format", "json")
            if fmt == "csv":
                df = reader.option("header", "true").csv(src["path"])
            elif fmt == "parquet":
                df = reader.parquet(src["path"])
            else:
                df = reader.json(src["path"])
        df = (
            df.select(F.col("request_id").cast("string"), F.col("subject_key").cast("string"))
            .where(F.col("request_id").isNotNull() & F.col("subject_key").isNotNull())
            .dropDuplicates(["request_id"])
        )
        df = df.withColumn("subject_hash", F.lit(None).cast("string"))  # HMAC below: the salt never enters a plan
        for c in self.columns:  # try_cast: a key that does not convert never reaches an error message
            df = df.withColumn(f"k_{c}", F.expr(es.key_cast_sql(self.col_types[c].simpleString())))
        # Collected once (the subjects are small; the driver holds their keys anyway for pruning and
        # redaction), then registered as cached, materialised views: no lineage (a plan over a table
        # would be re-planned after every commit to it, and fail once expiry removed the manifests it
        # read) and exact size statistics. A DataFrame made from Python rows is an RDD scan whose
        # size Spark cannot estimate, so every IN-subquery against it became a sort-merge join that
        # shuffled the whole subject column of the table (measured at 20 M rows: 5.6 s vs 2.2 s for
        # a count, 13 s vs 3 s for the DELETE); a materialised cache reports its real size and is
        # broadcast.
        names = df.schema.fieldNames()
        hashed = {"subject_hash", *(f"k_{c}" for c in self.hashed_columns)}
        rows = [
            tuple(lc.hmac_hex(self.salt, r["subject_key"]) if n in hashed else r[n] for n in names)
            for r in df.collect()
        ]
        self._cached_view(self.spark.createDataFrame(rows, df.schema), es.SUBJECTS_VIEW)
        unconverted = {c: sum(1 for r in rows if r[names.index(f"k_{c}")] is None) for c in self.columns}
        if any(unconverted.values()):  # counted per column; the keys themselves are never printed
            self.metrics["keys_not_converted"] = {c: n for c, n in unconverted.items() if n}
        for c in self.columns:
            at = names.index(f"k_{c}")
            keys = list(dict.fromkeys(r[at] for r in rows if r[at] is not None))
            key_schema = StructType([StructField("k", self.col_types[c], True)])
            self._cached_view(self.spark.createDataFrame([(k,) for k in keys], key_schema), es.key_view(c))
        return len(rows)

    def _cached_view(self, df: Any, name: str) -> None:
        df = df.cache()
        df.count()  # materialised now: its statistics are exact from here on
        self._cached.append(df)
        df.createOrReplaceTempView(name)

    def release(self) -> None:
        """Drop the cached subject views from memory (the views stay usable, uncached)."""
        for df in self._cached:
            df.unpersist()
        self._cached.clear()

    # -------------------------------------------------------------------- checks
    def preflight(self) -> str | None:
        """Return a refusal reason (nothing committed) or None."""
        problems = subject_problems(self.table, self.columns, _fs.current_metadata(self.spark, self.t))
        if problems:
            return " ".join(problems)
        fields = {f.name: f.dataType for f in self.spark.table(self.t).schema.fields}
        self.col_types = {c: fields[c] for c in self.columns}
        # one metadata scan over every file in the table's history: content (0 data, 2 equality deletes), format
        kinds = self.sql(
            f"SELECT content, upper(file_format) AS fmt, count(*) AS n FROM {self.t}.all_files GROUP BY 1, 2"
        ).collect()
        eq = sum(int(r.n) for r in kinds if r.content == 2)
        if eq:
            return (
                f"{self.table} has {eq} equality-delete file(s) in its history; they store the deleted keys "
                "themselves. Rewrite them away (rewrite_data_files + expire_snapshots) before erasure."
            )
        other = sorted({r.fmt for r in kinds if r.content == 0} - {"PARQUET"})
        if other:
            return f"{self.table} has {other} data files; erasure verification reads parquet only"
        return None

    # --------------------------------------------------------------------- run
    def run(self) -> dict[str, Any]:
        started = datetime.now(UTC)
        try:
            if self.spec.get("index_only"):
                return self.run_index_only()
            stop = self._prepare()
            if stop is not None:
                return stop
            if self.phase_name == lc.PHASE_LOGICAL:
                return self.run_logical(started)
            return self.run_physical(started)
        finally:
            self.release()

    def _prepare(self) -> dict[str, Any] | None:
        """Preflight and subjects; the metrics to return when the run stops here (refused / no request)."""
        restored = {**(self.spec.get("properties_restored") or {}), **self.restore_properties()}
        if restored:  # a killed run left them switched: restored first, reported in the ledger row
            self.metrics["properties_restored_after_kill"] = restored
        with self.timed("preflight"):
            self.refresh()
            reason = self.preflight()
        if reason:
            return self._refuse(reason)
        with self.timed("load_subjects"):
            n_requests = self.load_subjects()
        self.metrics["requests"] = n_requests
        if self.phase_name in lc.PHYSICAL_PHASES and self.spec.get("copy_retention"):
            # the retention of copies outside the table declared at the purge: evidence reports add it to T
            self.metrics["copy_retention"] = self.spec["copy_retention"]
        if n_requests:
            return None
        self.status = "noop"
        self.snapshot_before = self.snapshot_after = self.main_head()
        self.metrics.update(rows_deleted=0, verification=None, timings_s=self.timings)
        if erasure_redact.wanted(self) and self.spec.get("write_evidence", True):
            # nothing to erase, but erased requests whose grace period ended are redacted now
            self.metrics.update(erasure_redact.redact_requests(self))
            if self.metrics.get("redaction_verification") == lc.FAILED:
                self.status = "failed"
                self.details["error"] = f"redaction of the requests table {self.spec['source']['table']} failed"
        return self.metrics

    def run_index_only(self) -> dict[str, Any]:
        """Bring the subject index up to ``main``'s head (the maintenance plan's refresh when no
        request waits for a purge): preflight, then only the files the index does not cover are read."""
        with self.timed("preflight"):
            self.refresh()
            reason = self.preflight()
        if reason:
            return self._refuse(reason)
        self.status = "noop"
        self.snapshot_before = self.snapshot_after = self.main_head()
        if self.snapshot_after is not None and self.access.java_table(self.t) is not None:
            with self.timed("subject_index"):
                live = {p: p for p in self.snapshot_files(self.snapshot_after)}
                self.metrics["subject_index"] = erasure_index.keep_current(self, self.snapshot_after, live)
        self.metrics.update(requests=0, rows_deleted=0, verification=None, timings_s=self.timings)
        return self.metrics

    # ------------------------------------------------------------------ physical phases
    def run_physical(self, started: datetime) -> dict[str, Any]:
        """``full`` and ``purge``: analyse, apply the ref policy, delete, rewrite, expire, verify, record."""
        snaps_before = self.snapshots()
        before_ids = {s["snapshot_id"] for s in snaps_before}
        self.snapshot_before = self.main_head()
        floor_before = min((s["timestamp_ms"] for s in snaps_before), default=None)
        with self.timed("analyze"):
            subject_files, analysis, counts = self._analyze(snaps_before)
            decision = lc.decide_policy(analysis, self.policy)
            shredded = erasure_shred.capture_keys(self, subject_files) if self.shred else []
        self.details["refs"] = [
            {k: a[k] for k in ("name", "type", "action", "blocking", "reason", "legal_hold")} for a in analysis
        ]
        if decision["refuse"]:
            return self._refuse(decision["refuse"], blocking=[b["name"] for b in decision["held"]])
        held = decision["held"]
        with self.timed("drop_refs"):
            dropped = self._drop_refs(decision["drop"])
        delete_refs = [a for a in analysis if a["action"] == "delete"]
        # Rows per request on the refs we delete on (counted in the analysis, before deleting).
        per_request = self.per_request_frame(counts["per_request"], [a["snapshot_id"] for a in delete_refs])
        live = counts["live"]
        with self.timed("delete"):
            rows_deleted_total = self._delete_refs(delete_refs, live)
        purge_out = self._purge_files(subject_files, held, dropped, before_ids)
        if self.phase_name in lc.PHYSICAL_PHASES:  # purge and full: both promise no subject on disk
            with self.timed("leftovers"):
                self.remove_leftovers()
        self.refresh()
        snaps_after = self.snapshots()
        after_ids = {s["snapshot_id"] for s in snaps_after}
        floor_after = min((s["timestamp_ms"] for s in snaps_after), default=None)
        with self.timed("verify"):
            verify = self.verify(subject_files, [h["snapshot_id"] for h in held])
        outcome = lc.verification_outcome(
            **{
                k: verify[k]
                for k in ("rows_outside_holds", "old_files_reachable", "old_files_on_disk", "bound_hits", "held_rows")
            }
        )
        outcome = self._shred_outcome(outcome, verify, shredded)
        self.snapshot_after = self.main_head()
        if outcome != lc.FAILED and self.snapshot_after is not None and self.access.java_table(self.t) is not None:
            with self.timed("subject_index"):  # the rewrite's new files added, the erased files' entries removed
                live = {p: p for p in self.snapshot_files(self.snapshot_after)}
                self.metrics["subject_index"] = erasure_index.keep_current(self, self.snapshot_after, live)
        self.metrics.update(
            rows_deleted=rows_deleted_total,
            rows_deleted_main=live.get("main", 0) if any(a["name"] == "main" for a in delete_refs) else 0,
            **purge_out,
            snapshots_expired=len(before_ids - after_ids),
            snapshots_retained=len(after_ids),
            time_travel_floor_before_ms=floor_before,
            time_travel_floor_after_ms=floor_after,
            time_travel_lost_ms=(floor_after - floor_before) if floor_before and floor_after else 0,
            verification=outcome,
            **verify,
            refs_dropped=[d["name"] for d in dropped],
            refs_blocking=[h["name"] for h in held],
            timings_s=self.timings,
        )
        self.details.update(
            refs_dropped=dropped,
            refs_blocking=[{"name": h["name"], "type": h["type"], "reason": h["reason"]} for h in held],
        )
        self.record(per_request, started, outcome, dropped, held, verify)
        if outcome != lc.FAILED and erasure_redact.wanted(self) and self.spec.get("write_evidence", True):
            self.metrics.update(erasure_redact.redact_requests(self))
            self.metrics["timings_s"] = self.timings
            if self.metrics.get("redaction_verification") == lc.FAILED:
                self.status = "failed"
                self.details["error"] = (
                    f"redaction of the requests table {self.spec['source']['table']} failed its verification: "
                    + ", ".join(f"{k} {self.metrics.get('redaction_' + k)}" for k in erasure_redact.CHECKS)
                )
                return self.metrics
        if outcome == lc.FAILED:
            self.status = "failed"
            self.details["error"] = (
                f"erasure verification failed on {self.table}: {verify['rows_outside_holds']} subject rows in "
                f"reachable files outside holds, {verify['old_files_reachable']} pre-erasure files reachable, "
                f"{verify['old_files_on_disk']} on disk, {verify['bound_hits']} manifest bounds equal a subject key"
            )
        return self.metrics

    def _shred_outcome(self, outcome: str, verify: dict[str, Any], shredded: list[bytes]) -> str:
        """Crypto-shred: the key bytes gone from every key-table file and the derived rows decrypting to
        NULL (:mod:`erasure_shred`), added to ``verify``; the outcome with them. Rows mode: ``outcome``."""
        if not self.shred:
            return outcome
        with self.timed("verify_shred"):
            verify.update(erasure_shred.verify(self, self.shred, shredded))
        self.details["crypto_shred"] = {**self.shred.to_dict(), "derived_table_rewritten": False}
        return cs.shred_outcome(
            outcome, key_bytes_found=verify["key_bytes_found"], rows_decrypting=verify["rows_decrypting"]
        )

    def _analyze(self, snaps_before: list[dict[str, Any]]) -> tuple[set[str], list[dict[str, Any]], dict[str, Any]]:
        """Which files hold subjects (raw, pruned), which ref heads keep them, subject rows per branch
        head (deletes applied; one scan over every distinct head): the ref analysis."""
        before_files = self.reachable_data_files()
        hits_before = self.pruned_hits(before_files, "analysis")
        subject_files = set(hits_before)
        refs = self.refs()
        branches = [r for r in refs if r["type"] == "branch"]
        counts = self.match_counts([r["snapshot_id"] for r in branches]) if subject_files else None
        holds = {
            ref["name"]: bool(subject_files & self.snapshot_files(ref["snapshot_id"])) if subject_files else False
            for ref in refs
        }
        live = {r["name"]: counts["rows"].get(r["snapshot_id"], 0) for r in branches} if counts else {}
        analysis = lc.analyze_refs(
            refs,
            snaps_before,
            holds=holds,
            live_rows=live,
            table_had_subjects=bool(subject_files),
            now_ms=int(time.time() * 1000),
        )
        self.metrics.update(
            files_with_subjects_before=len(subject_files), rows_with_subjects_raw_before=sum(hits_before.values())
        )
        return subject_files, analysis, {"live": live, "per_request": counts["per_request"] if counts else []}

    def _drop_refs(self, to_drop: list[dict[str, Any]]) -> list[dict[str, Any]]:
        dropped = []
        for ref in to_drop:
            self.sql(es.drop_ref_sql(self.catalog, self.table, ref["name"], ref["type"]))
            dropped.append({"name": ref["name"], "type": ref["type"], "reason": ref["reason"]})
        return dropped

    def _delete_refs(self, delete_refs: list[dict[str, Any]], live: dict[str, int]) -> int:
        """The batched DELETE on main (the table's delete mode) and copy-on-write on other branches."""
        total = 0
        if any(a["name"] == "main" for a in delete_refs):
            total += live.get("main", 0)
            self.sql(es.delete_sql(self.catalog, self.table, self.columns))
        branch_refs = [a["name"] for a in delete_refs if a["name"] != "main"]
        if branch_refs:
            total += sum(live.get(b, 0) for b in branch_refs)
            self.delete_on_branches(branch_refs)
        return total

    def _purge_files(
        self, subject_files: set[str], held: list[dict[str, Any]], dropped: list[Any], before_ids: set[int]
    ) -> dict[str, Any]:
        """Rewrite the files carrying deletes, expire, rewrite manifests.

        Nothing in any file of the table's history, no ref dropped and no manifest bound showing a
        subject: a re-run (or a subject without rows) only re-verifies and leaves the metadata
        untouched. A run killed after its first expiry (rows gone, DELETED manifest entries still
        carrying the subject as bounds) must still finish the purge on its re-run, or it could
        never verify.
        """
        held_files: set[str] = set()
        for h in held:
            held_files |= self.snapshot_files(h["snapshot_id"])
        expired = {"data": 0, "deletes": 0, "manifests": 0, "manifest_lists": 0}
        out: dict[str, Any] = {"files_rewritten": 0, "rewrite_data_files": {}}
        if subject_files or dropped or self.exposed_bound_files() - held_files:
            with self.timed("rewrite"):
                self.refresh()
                n_deletes = self.sql(f"SELECT count(*) FROM {self.t}.delete_files").collect()[0][0]
                if n_deletes:
                    out["rewrite_data_files"] = (
                        self.sql(es.rewrite_data_files_sql(self.catalog, self.table)).collect()[0].asDict()
                    )
            self.refresh()
            new_snaps = [s for s in self.snapshots() if s["snapshot_id"] not in before_ids]
            out["files_rewritten"] = sum(int(s["summary"].get("deleted-data-files", 0)) for s in new_snaps)
            with self.timed("expire"):
                if self.phase_name == lc.PHASE_PURGE:
                    self.sql(es.rewrite_manifests_sql(self.catalog, self.table)).collect()
                    self._expire_reaching(subject_files, expired)
                else:
                    self._expire(expired)
                    self.sql(es.rewrite_manifests_sql(self.catalog, self.table)).collect()
                    self._expire(expired)
        out.update(files_removed=expired["data"] + expired["deletes"], expire=expired)
        return out

    def _refuse(self, reason: str, blocking: list[str] | None = None) -> dict[str, Any]:
        self.status = "refused"
        self.details["refused"] = reason
        if blocking is not None:
            self.details["refs_blocking_names"] = blocking
        self.snapshot_before = self.snapshot_after = None
        self.metrics.update(refused=True, timings_s=self.timings)
        return self.metrics

    def match_counts(self, snapshot_ids: list[int], include_hidden: bool = False) -> dict[str, Any]:
        """Subject rows on each distinct snapshot (deletes applied), in ONE scan job.

        The matching rows' subject columns (a small set: the subjects' rows only) are
        materialised; rows per snapshot (``count(*) ... WHERE match``) and rows per (request,
        snapshot) (equi-join on each typed key, summed over the columns) are then computed from
        that set, without reading the table again. ``{"rows": {sid: n}, "per_request": [(request_id,
        sid, n)]}``.

        ``include_hidden``: the scan also returns the rows that delete files hide (Iceberg's
        ``_deleted`` metadata column: the reader marks them instead of dropping them). ``rows``
        still counts the visible rows only; ``per_request`` counts visible and hidden rows: what a
        merge-on-read DELETE erased, read back in the same scan that checks nothing is visible.
        """
        sids = [int(s) for s in dict.fromkeys(snapshot_ids)]  # snapshot ids come from the catalog, never input
        if not sids:
            return {"rows": {}, "per_request": []}
        cols = ", ".join(es.q(c) for c in self.columns)
        hidden = "_deleted" if include_hidden else "false"
        union = " UNION ALL ".join(
            f"SELECT {sid} AS ref, {hidden} AS hidden, {cols} FROM {self.t} VERSION AS OF {sid} "
            f"WHERE {es.match_predicate(self.columns)}"
            for sid in sids
        )
        # materialised now: the snapshots it reads may be expired by this run
        self.access.materialize(self.sql(union)).createOrReplaceTempView("erasure_matched")
        rows = {
            int(r.ref): int(r.n)
            for r in self.sql("SELECT ref, count_if(NOT hidden) AS n FROM erasure_matched GROUP BY ref").collect()
        }
        per_col = " UNION ALL ".join(
            f"SELECT s.request_id AS request_id, m.ref AS ref, count(*) AS n FROM {es.q(es.SUBJECTS_VIEW)} s "
            f"JOIN erasure_matched m ON m.{es.q(c)} = s.{es.q('k_' + c)} GROUP BY s.request_id, m.ref"
            for c in self.columns
        )
        per_request = [(str(r.request_id), int(r.ref), int(r.n)) for r in self.sql(per_col).collect()]
        return {"rows": rows, "per_request": per_request}

    def per_request_frame(self, per_request: list[Any], snapshot_ids: list[int]) -> Any:
        """DataFrame (request_id, n): rows per request summed over ``snapshot_ids`` (one term per ref)."""
        weight: dict[int, int] = {}
        for sid in snapshot_ids:
            weight[int(sid)] = weight.get(int(sid), 0) + 1
        out: dict[str, int] = {}
        for rid, sid, n in per_request:
            if sid in weight:
                out[rid] = out.get(rid, 0) + n * weight[sid]
        return self.spark.createDataFrame(sorted(out.items()), "request_id string, n long")

    def delete_on_branches(self, branches: list[str]) -> None:
        """Copy-on-write DELETE on each branch, then a manifest merge that drops DELETED entries.

        Iceberg rewrites data files and manifests on ``main`` only. On a branch: the DELETE
        runs copy-on-write with manifest merging off (so the DELETED entries stay apart from
        the new files' manifest), then an empty append to the branch merges every manifest
        into one (``min-count-to-merge=2``, one bin), which drops entries deleted by earlier
        snapshots — and their column bounds. Table properties are restored afterwards.
        """
        try:
            self.switch_properties({"write.delete.mode": "copy-on-write", "commit.manifest-merge.enabled": "false"})
            for b in branches:
                self.sql(es.delete_sql(self.catalog, self.table, self.columns, branch=b))
            self.switch_properties(
                {
                    "commit.manifest-merge.enabled": "true",
                    "commit.manifest.min-count-to-merge": "2",
                    "commit.manifest.target-size-bytes": str(1 << 40),
                }
            )
            self.refresh()
            for b in branches:
                self.access.append_empty(self.t, b, {"erasure.manifest-merge": "true"})
        finally:
            self.restore_properties()

    def _expire(self, acc: dict[str, int]) -> None:
        self.refresh()
        latest = max((s["timestamp_ms"] for s in self.snapshots()), default=0)
        older_than = max(int(time.time() * 1000), latest + 1)
        for r in self.sql(es.expire_sql(self.catalog, self.table, older_than)).collect():
            d = r.asDict()
            acc["data"] += int(d.get("deleted_data_files_count") or 0)
            acc["deletes"] += int(d.get("deleted_position_delete_files_count") or 0) + int(
                d.get("deleted_equality_delete_files_count") or 0
            )
            acc["manifests"] += int(d.get("deleted_manifest_files_count") or 0)
            acc["manifest_lists"] += int(d.get("deleted_manifest_lists_count") or 0)

    # ------------------------------------------------------------------- verify
    def exposed_bound_files(self) -> set[str]:
        """Data files whose manifest entries (any snapshot, DELETED ones included) carry a subject as a bound."""
        bound_files: set[str] = set()
        for c in self.columns:
            is_string = self.col_types[c].simpleString() == "string"
            bound_files |= {
                norm_path(r.f)
                for r in self.sql(es.bound_exposure_sql(self.catalog, self.table, c, is_string)).collect()
            }
        return bound_files

    def verify(self, subject_files_before: set[str], held_snapshot_ids: list[int]) -> dict[str, Any]:
        """Independent of the delete path: raw files of every retained snapshot, disk, manifests."""
        self.refresh()
        reachable = self.reachable_data_files()
        held_files: set[str] = set()
        for sid in held_snapshot_ids:
            held_files |= self.snapshot_files(sid)
        hits = self.pruned_hits(reachable, "verify")
        rows_outside = sum(n for f, n in hits.items() if f not in held_files)
        held_rows = sum(n for f, n in hits.items() if f in held_files)
        old_reachable = len((subject_files_before & set(reachable)) - held_files)
        old_on_disk = sum(1 for f in subject_files_before - held_files if self.exists(f))
        bound_hits = len(self.exposed_bound_files() - held_files)
        return {
            "verified_files": len(reachable),
            "rows_outside_holds": rows_outside,
            "held_rows": held_rows,
            "held_files": len(held_files & set(hits)),
            "old_files_reachable": old_reachable,
            "old_files_on_disk": old_on_disk,
            "bound_hits": bound_hits,
            "retained_snapshots_checked": len(self.snapshots()),
        }

    # ------------------------------------------------------------ purge pieces
    def _expire_reaching(self, subject_files: set[str], acc: dict[str, int]) -> None:
        """Expire ONLY the snapshots that reach a subject-holding file (live, or a DELETED manifest
        entry carrying its bounds); every other snapshot, and the refs on them, stay."""
        self.refresh()
        snaps = self.snapshots()
        snap_manifests, manifest_files = esc.manifest_index(self)
        reaching = ep.snapshots_reaching(
            snap_manifests, manifest_files, subject_files, esc.exposing_manifests(self, subject_files)
        )
        plan = ep.expiry_plan(snaps, reaching, {r["name"]: r["snapshot_id"] for r in self.refs()})
        self.metrics["expiry_plan"] = {k: plan[k] for k in ("heads_reaching", "oldest_kept_ms")}
        self.metrics["snapshots_kept_untouched"] = len(plan["keep"])
        if not plan["expire"]:
            return
        for r in self.sql(ep.expire_ids_sql(self.catalog, self.table, plan["expire"])).collect():
            d = r.asDict()
            acc["data"] += int(d.get("deleted_data_files_count") or 0)
            acc["deletes"] += int(d.get("deleted_position_delete_files_count") or 0) + int(
                d.get("deleted_equality_delete_files_count") or 0
            )
            acc["manifests"] += int(d.get("deleted_manifest_files_count") or 0)
            acc["manifest_lists"] += int(d.get("deleted_manifest_lists_count") or 0)

    def remove_leftovers(self) -> None:
        """Delete what killed or losing rewrites left behind: Parquet files under the table's data
        location that NO snapshot references, older than ``leftover_min_age_s`` (default 1 h: never a
        write still in flight), and that either hold a subject row or are partial (no footer)."""
        min_age_ms = int(float(self.spec.get("leftover_min_age_s", 3600)) * 1000)
        self.refresh()
        found = esc.unreferenced_parquet(self, esc.referenced_files(self), int(time.time() * 1000) - min_age_ms)
        partial = [loc for p, loc in found if not esc.is_readable_parquet(p)]
        readable = {p: loc for p, loc in found if esc.is_readable_parquet(p)}
        holding = list(self.raw_hits(list(readable.values()))) if readable else []
        removed = 0
        for loc in partial + [readable[p] for p in holding]:
            self.access.delete(self.t, loc)
            removed += 1
        self.metrics.update(leftovers_found=len(found), leftovers_removed=removed, leftovers_partial=len(partial))

    # ------------------------------------------------------------------ logical phase
    def run_logical(self, started: datetime) -> dict[str, Any]:
        """See :mod:`erasure_logical`."""
        return erasure_logical.run_logical(self, started)

    def record(self, per_request: Any, started: datetime, outcome: str, dropped: Any, held: Any, verify: Any) -> None:
        if self.spec.get("write_evidence", True) and self.metrics.get("requests"):
            with self.timed("evidence"):
                er.write_evidence(self, per_request, started, outcome, dropped, held, verify)
                if self.spec["source"]["kind"] == "requests_table":
                    self.metrics["request_statuses"] = er.update_requests(self)

    def iceberg_version(self) -> str | None:
        from airflow_iceberg_provider.spark_jobs.iceberg_job_runtime import iceberg_version

        return iceberg_version(self.spark)

    def secrets(self) -> list[str]:
        """Values to redact from any error message: the salt and every subject key."""
        out = [self.salt.decode("utf-8", "replace"), *self.extra_secrets]
        try:
            out += [r[0] for r in self.spark.table(es.SUBJECTS_VIEW).select("subject_key").collect()]
        except Exception:  # best effort while reporting an error: the subjects view may not exist yet
            pass
        return out


def run_erasure(
    spark: Any, spec: dict[str, Any], access: TableAccess | None = None
) -> tuple[ErasureRun, dict[str, Any]]:
    """Run one erasure in this Spark session: the ``erasure`` job, or a maintenance job's purge action.

    A failure is raised with a redacted message (never a subject key or the salt).
    """
    run = ErasureRun(spark, spec, access)
    try:
        metrics = run.run()
    except Exception as err:  # py4j wraps every JVM error: all are redacted before they leave the job
        text = str(err)
        java = getattr(err, "java_exception", None)
        if java is not None:
            text = str(java.toString())
        if run.phase == "load_subjects":
            # a parse error may quote the very record it could not read: keep only the type
            message = f"{type(err).__name__} while reading the subjects (message withheld: it may quote them)"
        else:
            message = es.redact(f"{type(err).__name__}: {text}", run.secrets())
        # `from None`: the original (unredacted) exception must not be printed by the runtime
        raise RuntimeError(f"erasure of {run.table} failed during phase {run.phase!r}: {message}") from None
    return run, metrics


def erase(ctx: Any) -> dict[str, Any]:
    """Job entry point under :func:`iceberg_job_runtime.run_job`."""
    run, metrics = run_erasure(ctx.spark, {**ctx.spec, "catalog_name": ctx.catalog}, ctx.access)
    ctx.status = run.status
    ctx.details.update(run.details)
    ctx.snapshot_before = getattr(run, "snapshot_before", None)
    ctx.snapshot_after = getattr(run, "snapshot_after", None)
    return metrics
