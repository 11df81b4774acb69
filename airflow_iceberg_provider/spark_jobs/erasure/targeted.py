"""The logical phase on candidate files only: its cost follows the subjects, not the table.

A SQL ``DELETE ... WHERE col IN (SELECT k FROM keys)`` on a merge-on-read table scans the
subject columns of every live data file: Iceberg prunes files only by partition and manifest
bounds, and pushes no filter on the ``_file`` metadata column into planning (a
``_file IN (...)`` predicate is evaluated after the scan, on every file). So on a table of
thousands of files the DELETE reads them all to hide a few rows. Here, per ref head:

1. **candidates**: the head's live data files (its manifests, through the Iceberg API) are
   pruned with the purge's own proofs (``erasure_prune``: exact bounds, bloom filters,
   dictionary pages); a file is skipped only on a proof;
2. **positions**: the candidates are raw-read (delete files not applied; subject columns by
   Iceberg field id) with Parquet's row index: ``(file, position, request)`` of every subject row;
3. **commit**: one position-delete file per partition, written with Iceberg's own
   ``Parquet.writeDeletes`` into the table's data location, committed as ONE ``RowDelta`` on
   ``main``, validated against the changes committed since the head was read (every
   referenced data file still live; rows appended meanwhile are caught by step 4);
4. **verification**: the candidates of every ref head are read through Iceberg's reader WITH
   the head's delete files applied (the head's own scan tasks, staged with
   ``ScanTaskSetManager``: the catalog's view of those files, independent of step 2's raw read);
   no subject row may be visible on any branch head.

Needs the driver's JVM (spark-submit); a Spark Connect client runs the SQL ``DELETE`` path
(``erasure_logical``). Subject keys stay in the driver's memory and temp views, never in SQL text.
"""

from __future__ import annotations

import uuid
from typing import Any

from airflow_iceberg_provider.spark_jobs._compat import driver_jvm
from airflow_iceberg_provider.spark_jobs.erasure import index as ei
from airflow_iceberg_provider.spark_jobs.erasure import scan as esc
from airflow_iceberg_provider.spark_jobs.erasure import sql as es

HITS_VIEW = "erasure_position_hits"


def format_version(jtable: Any) -> int:
    """The format version of an Iceberg Java table's current metadata."""
    return int(jtable.operations().current().formatVersion())


def head_tasks(run: Any, snapshot_id: int) -> dict[str, Any]:
    """Normalised path -> the FileScanTask of each live data file of a snapshot (with its deletes)."""
    tbl = run.jtable(refresh=False)
    out: dict[str, Any] = {}
    tasks = tbl.newScan().useSnapshot(int(snapshot_id)).planFiles()
    try:
        it = tasks.iterator()
        while it.hasNext():
            task = it.next()
            out[esc.norm_path(str(task.file().location()))] = task
    finally:
        tasks.close()
    return out


def candidate_paths(run: Any, tasks: dict[str, Any], prefix: str, head: int | None = None) -> set[str]:
    """The paths of ``tasks`` no proof excludes (each file probed once); counts recorded as
    ``<prefix>_files_*`` and added to the ``files_*`` totals the evidence reports. With ``head``,
    the subject index (:mod:`erasure_index`) first drops the files it proves free of every key:
    only the files it names and those it does not cover are probed."""
    if head is not None:
        tasks = ei.choose(run, tasks, head, prefix)
    locations = {p: str(t.file().location()) for p, t in tasks.items()}
    pr = esc.candidates(run, locations)
    for k in ("considered", "pruned_bounds", "pruned_bloom", "pruned_dictionary", "raw_read"):
        run.metrics[f"{prefix}_files_{k}"] = run.metrics.get(f"{prefix}_files_{k}", 0) + pr[k]
        run.metrics[f"files_{k}"] = run.metrics.get(f"files_{k}", 0) + pr[k]
    return {esc.norm_path(loc) for loc in pr["candidates"]}


def raw_positions(run: Any, locations: list[str]) -> Any:
    """DataFrame ``(f, pos, <subject columns>)`` of the subject rows of the files, raw (delete files
    not applied), materialised. Subject columns are matched by Iceberg field id as the purge's raw
    read does; files written without field ids (imported) make Spark refuse that read, and then
    every file is read by the current names, which is how such files are mapped."""
    key = "spark.sql.parquet.fieldId.read.enabled"
    previous = run.spark.conf.get(key, "false")
    run.spark.conf.set(key, "true")
    try:
        return _positions(run, locations, esc.field_ids(run))
    except Exception as err:  # py4j wraps every JVM error: only the field-id one falls back, the rest re-raised
        if "field id" not in str(getattr(err, "java_exception", err)).lower():
            raise
    finally:
        run.spark.conf.set(key, previous)
    return _positions(run, locations, {})


def _positions(run: Any, locations: list[str], ids: dict[str, int]) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    meta = {c: {"parquet.field.id": i} for c, i in ids.items()}
    schema = StructType([StructField(c, run.col_types[c], True, meta.get(c, {})) for c in run.columns])
    raw = run.spark.read.schema(schema).parquet(*locations)
    raw = raw.select(F.col("_metadata.file_path").alias("f"), F.col("_metadata.row_index").alias("pos"), *run.columns)
    raw.createOrReplaceTempView("erasure_raw_positions")
    hits = run.sql(f"SELECT * FROM erasure_raw_positions WHERE {es.match_predicate(run.columns)}")
    return hits.localCheckpoint(eager=True)


def per_request_rows(run: Any, hits: Any) -> list[tuple[str, int]]:
    """(request_id, rows) over the raw hits, summed over the subject columns (as the full phase counts)."""
    hits.createOrReplaceTempView(HITS_VIEW)
    per_col = " UNION ALL ".join(
        f"SELECT s.request_id AS request_id, count(*) AS n FROM {es.q(es.SUBJECTS_VIEW)} s "
        f"JOIN {HITS_VIEW} h ON h.{es.q(c)} = s.{es.q('k_' + c)} GROUP BY s.request_id"
        for c in run.columns
    )
    out: dict[str, int] = {}
    for r in run.sql(per_col).collect():
        out[str(r.request_id)] = out.get(str(r.request_id), 0) + int(r.n)
    return sorted(out.items())


def commit_position_deletes(run: Any, tasks: dict[str, Any], hits: Any, base_snapshot: int) -> dict[str, int]:
    """Write one position-delete file per (spec, partition) for ``hits`` and commit them in ONE
    ``RowDelta`` on main, validated from ``base_snapshot``."""
    jvm = driver_jvm(run.spark)
    tbl = run.jtable(refresh=True)
    rows = hits.select("f", "pos").distinct().orderBy("f", "pos").collect()
    if not rows:
        return {"delete_files": 0, "positions": 0}
    groups: dict[tuple[int, str], list[tuple[str, int, Any]]] = {}
    for r in rows:
        task = tasks.get(esc.norm_path(r.f))
        if task is None:  # a file outside the head's candidates cannot be in the hits
            raise RuntimeError("a raw hit names a file that is not a live candidate of main")
        data = task.file()
        key = (int(data.specId()), str(data.partition()))
        groups.setdefault(key, []).append((str(data.location()), int(r.pos), data))
    io, specs, provider = tbl.io(), tbl.specs(), tbl.locationProvider()
    row_delta = tbl.newRowDelta()
    referenced = jvm.java.util.ArrayList()
    for (spec_id, _), positions in sorted(groups.items(), key=lambda g: g[0]):
        spec, partition = specs.get(spec_id), positions[0][2].partition()
        name = f"erasure-deletes-{uuid.uuid4().hex}.parquet"
        location = (
            provider.newDataLocation(spec, partition, name) if spec.isPartitioned() else provider.newDataLocation(name)
        )
        writer = (
            jvm.org.apache.iceberg.parquet.Parquet.writeDeletes(io.newOutputFile(location))
            .withSpec(spec)
            .withPartition(partition)
            .overwrite()
            .buildPositionWriter()
        )
        delete = jvm.org.apache.iceberg.deletes.PositionDelete.create()
        try:
            for path, pos, _ in sorted(positions, key=lambda p: (p[0], p[1])):
                writer.write(delete.set(path, pos))
        finally:
            writer.close()
        row_delta.addDeletes(writer.toDeleteFile())
        for path in dict.fromkeys(p[0] for p in positions):
            referenced.add(path)
    row_delta.validateFromSnapshot(int(base_snapshot))
    row_delta.validateDataFilesExist(referenced)
    row_delta.set("erasure.logical-delete", "positions")
    try:
        row_delta.commit()
    except Exception as err:  # py4j wraps Iceberg's ValidationException / IllegalArgumentException
        text = str(err)
        if "is not an ancestor of" in text or "ValidationException" in text or "CommitFailedException" in text:
            raise RuntimeError(
                f"commit conflict: main moved since snapshot {int(base_snapshot)}, which this erasure planned "
                f"against (a concurrent commit or snapshot expiry); nothing was committed, and a retry plans "
                f"against the new head ({text.splitlines()[0][:300]})"
            ) from None
        raise
    run.refresh()
    return {"delete_files": len(groups), "positions": len(rows)}


def visible_counts(run: Any, tasks: dict[str, Any]) -> int:
    """Subject rows visible in ``tasks`` read through Iceberg's reader, their delete files applied."""
    if not tasks:
        return 0
    jvm = driver_jvm(run.spark)
    tbl = run.jtable(refresh=False)
    group = f"erasure-verify-{uuid.uuid4().hex}"
    staged = jvm.java.util.ArrayList()
    for t in tasks.values():
        staged.add(t)
    manager = jvm.org.apache.iceberg.spark.ScanTaskSetManager.get()
    manager.stageTasks(tbl, group, staged)
    try:
        df = run.spark.read.format("iceberg").option("scan-task-set-id", group).load(f"{run.catalog}.{run.table}")
        df.select(*run.columns).createOrReplaceTempView("erasure_staged")
        return int(
            run.sql(f"SELECT count(*) FROM erasure_staged WHERE {es.match_predicate(run.columns)}").collect()[0][0]
        )
    finally:
        manager.removeTasks(tbl, group)
