"""The subject index on the Spark driver: find it in table metadata, probe it, keep it current.

The index itself (keyed fingerprints, Puffin encoding, the probe plan) is
:mod:`airflow_iceberg_provider.core.subject_index`; this module gathers its inputs through the
Iceberg API of the driver's JVM:

* **load**: the table's statistics files (``statistics`` in table metadata) named
  ``*.subject-index.puffin`` whose Puffin footer holds a blob of the provider's type for the run's
  subject columns and salt; the nearest ancestor of the head
  wins, any other indexed snapshot is still sound (files never change under a path);
* **plan**: live files the index covers and names, plus every live file it does not cover (a
  commit made without the index: an outside writer, a published branch, a compaction): only
  these are opened; files the index proves free of every key are skipped;
* **update** (when the table property ``airflow-iceberg.erasure.subject-index`` is ``true``): the
  files the index does not cover are read (their subject columns only, by Iceberg field id),
  fingerprinted under the salt, entries of files no longer live removed, and the Puffin file
  written into the table's metadata folder and registered on the head snapshot. Blobs of other
  types already registered on that snapshot (``compute_table_stats``) are copied into it.

* **follow** (after the provider's own writes: a WAP write, a cherry-pick publish, a compaction):
  :func:`follow` updates the index for the job's new snapshot from its nearest indexed ancestor,
  for the columns that index holds (by field id): only the files added since are read, and
  entries of files no longer live are removed. The salt comes in the job spec's
  ``subject_index`` entry, exactly as the erasure job's does (never on argv).

Subject values stay in the driver's memory; nothing here logs or records one. Any failure to
load or update leaves the erasure on its other proofs (bounds, bloom filters, raw reads).
"""

from __future__ import annotations

import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from airflow_iceberg_provider.core import subject_index as si
from airflow_iceberg_provider.core.erasure_lifecycle import KeyedHasher
from airflow_iceberg_provider.spark_jobs import _fs
from airflow_iceberg_provider.spark_jobs._compat import driver_jvm
from airflow_iceberg_provider.spark_jobs.erasure import scan as esc
from airflow_iceberg_provider.spark_jobs.erasure import sql as es

_LOADED: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def _read(tbl: Any, location: str) -> bytes:
    path = esc.strip_file_scheme(location)
    if path.startswith("/"):
        with open(path, "rb") as fh:
            return fh.read()
    stream = tbl.io().newInputFile(location).newStream()
    try:
        return bytes(stream.readAllBytes())
    finally:
        stream.close()


def _search_order(tbl: Any, head: int, indexed: set[int]) -> list[int]:
    """Indexed snapshots to try: the nearest ancestor of ``head`` first (the walk stops there), then
    the others, newest first."""
    first: list[int] = []
    sid: int | None = head
    seen: set[int] = set()
    while sid is not None and sid not in seen and indexed:
        if sid in indexed:
            first.append(sid)
            break
        seen.add(sid)
        snap = tbl.snapshot(int(sid))
        parent = snap.parentId() if snap is not None else None
        sid = int(parent) if parent is not None else None

    def when(s: int) -> int:
        snap = tbl.snapshot(int(s))
        return int(snap.timestampMillis()) if snap is not None else 0

    return first + sorted(indexed - set(first), key=when, reverse=True)


def _stats_files(tbl: Any) -> dict[int, Any]:
    """Snapshot id -> its statistics file."""
    return {int(f.snapshotId()): f for f in tbl.statisticsFiles()}


def load(run: Any, head: int) -> dict[str, Any]:
    """``{"indexes": column -> ColumnIndex, "snapshot_id": the indexed snapshot or None}`` (cached per run)."""
    cached = _LOADED.get(run)
    if cached is not None and cached["head"] == head:
        return cached
    tbl = run.jtable(refresh=False)
    hasher, kid = KeyedHasher(run.salt), si.key_id(run.salt)
    ids = esc.field_ids(run)
    files = _stats_files(tbl)
    ours = {sid for sid, f in files.items() if str(f.path()).endswith(si.FILE_SUFFIX)}
    order = _search_order(tbl, head, ours)
    found: dict[str, Any] = {"head": head, "indexes": {}, "snapshot_id": None}
    for sid in order:
        try:
            blobs = si.read_puffin(_read(tbl, str(files[sid].path())))
        except (si.SubjectIndexError, OSError):
            continue
        indexes = si.index_blobs(blobs, ids, kid, hasher)
        if indexes:
            found.update(indexes=indexes, snapshot_id=sid)
            break
    _LOADED[run] = found
    return found


def enabled(run: Any) -> tuple[bool, float]:
    """(maintain the index, false-positive rate) from the table's properties."""
    return si.index_settings(run.table_properties())


def choose(run: Any, tasks: dict[str, Any], head: int, prefix: str) -> dict[str, Any]:
    """The tasks to probe: those the index names or does not cover (all of them without an index).
    Counts recorded as ``<prefix>_files_index_*``."""
    if not run.spec.get("subject_index", True):
        return tasks
    loaded = load(run, head)
    if not loaded["indexes"]:
        run.metrics[f"{prefix}_files_index_excluded"] = 0
        return tasks
    hasher = KeyedHasher(run.salt)
    keys = esc.subject_keys(run)
    digests = {c: [hasher.digest(k) for k in keys[c] if k is not None] for c in run.columns}
    plan = si.plan_probe(tasks, loaded["indexes"], digests)
    run.metrics[f"{prefix}_files_index_named"] = len(plan.named)
    run.metrics[f"{prefix}_files_unindexed"] = len(plan.unindexed)
    run.metrics[f"{prefix}_files_index_excluded"] = len(plan.excluded)
    run.metrics["subject_index_snapshot"] = loaded["snapshot_id"]
    keep = plan.to_open()
    return {p: t for p, t in tasks.items() if p in keep}


def _values(run: Any, locations: list[str]) -> dict[str, dict[str, list[Any]]]:
    """Column -> normalised path -> distinct non-null values of the files (raw read, by field id)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType

    ids = esc.field_ids(run)
    key = "spark.sql.parquet.fieldId.read.enabled"
    previous = run.spark.conf.get(key, "false")
    out: dict[str, dict[str, list[Any]]] = {c: {esc.norm_path(loc): [] for loc in locations} for c in run.columns}
    for use_ids in (True, False):
        meta = {c: {"parquet.field.id": i} for c, i in ids.items()} if use_ids else {}
        schema = StructType([StructField(c, run.col_types[c], True, meta.get(c, {})) for c in run.columns])
        run.spark.conf.set(key, "true" if use_ids else previous)
        try:
            raw = run.spark.read.schema(schema).parquet(*locations)
            for c in run.columns:
                rows = (
                    raw.select(F.col("_metadata.file_path").alias("f"), F.col(c).alias("v"))
                    .where(F.col("v").isNotNull())
                    .distinct()
                    .collect()
                )
                for r in rows:
                    out[c].setdefault(esc.norm_path(r.f), []).append(r.v)
            return out
        except Exception as err:  # py4j wraps every JVM error: only the field-id one falls back
            if not use_ids or "field id" not in str(getattr(err, "java_exception", err)).lower():
                raise
        finally:
            run.spark.conf.set(key, previous)
    return out


def update(run: Any, head: int | None, live: Mapping[str, Any], location: Callable[[Any], str] = str) -> dict[str, Any]:
    """Bring the index up to ``head`` (``live``: normalised path -> its data file's location, or what
    ``location`` turns into one: only the files to read are asked) and register it there; returns
    what it did (recorded under ``subject_index`` in the metrics)."""
    on, fpp = enabled(run)
    if not on or head is None:
        return {"updated": False, "reason": "disabled" if not on else "no snapshot"}
    t0 = time.monotonic()
    loaded = load(run, head)
    hasher, kid, ids = KeyedHasher(run.salt), si.key_id(run.salt), esc.field_ids(run)
    stale = set(si.stale_columns(loaded["indexes"], run.columns, set(live), fpp))
    indexes: dict[str, si.ColumnIndex] = {}
    for c in run.columns:
        if c not in ids:
            continue
        old = loaded["indexes"].get(c)
        indexes[c] = (
            si.ColumnIndex(column=c, field_id=ids[c], fpp=fpp, key_id=kid) if c in stale or old is None else old
        )
    dropped = sum(idx.retain(set(live)) for idx in indexes.values())
    missing = sorted({p for idx in indexes.values() for p in set(live) - idx.covered()})
    if not missing and not dropped and not stale:  # an ancestor's index covers every live file
        return {"updated": False, "reason": "current", "snapshot_id": loaded["snapshot_id"], "files": len(live)}
    values = _values(run, [location(live[p]) for p in missing]) if missing else {}
    for c, by_path in values.items():  # a path read back in another spelling would index a file as empty
        if not set(by_path) <= set(missing):
            raise si.SubjectIndexError(f"the subject values of column {c!r} came back under unexpected file paths")
    added = 0
    for c, idx in indexes.items():
        added = max(added, idx.add({p: values.get(c, {}).get(p, []) for p in missing}, hasher))
    size = _register(run, head, indexes, hasher)
    if not size:
        return {"updated": False, "reason": "the head carries statistics that cannot be copied", "files": len(live)}
    _LOADED[run] = {"head": head, "indexes": indexes, "snapshot_id": head}
    return {
        "updated": True,
        "snapshot_id": head,
        "files_added": added,
        "files_dropped": dropped,
        "columns_rebuilt": sorted(stale),
        "files": len(live),
        "bytes": size,
        "seconds": round(time.monotonic() - t0, 3),
    }


def keep_current(
    run: Any, head: int | None, live: Mapping[str, Any], location: Callable[[Any], str] = str
) -> dict[str, Any]:
    """:func:`update` after a verified erasure; a failure is reported, not raised: the erasure is
    proven without the index, and a later run probes the files the index does not cover."""
    try:
        return update(run, head, live, location)
    except Exception as err:  # noqa: BLE001 - py4j wraps every JVM error; the erasure's proof does not depend on it
        _LOADED.pop(run, None)
        return {"updated": False, "reason": f"failed ({type(err).__name__}); the next erasure probes uncovered files"}


def _register(run: Any, head: int, indexes: dict[str, si.ColumnIndex], hasher: KeyedHasher) -> int:
    """Write the Puffin file beside the table's metadata and set it as the head's statistics file."""
    jvm = driver_jvm(run.spark)
    tbl = run.jtable(refresh=True)
    snap = tbl.snapshot(int(head))
    seq = int(snap.sequenceNumber())
    blobs = [si.column_blob(idx, head, seq, hasher) for _, idx in sorted(indexes.items())]
    existing = _stats_files(tbl).get(int(head))
    if existing is not None:  # keep other blob types (NDV sketches) registered on this snapshot
        try:
            blobs = [b for b in si.read_puffin(_read(tbl, str(existing.path()))) if b.type != si.BLOB_TYPE] + blobs
        except (si.SubjectIndexError, OSError):
            return 0  # never replace statistics it cannot copy: the index stays on an older snapshot
    puffin = si.encode_puffin(blobs)
    root = str(tbl.location()).rstrip("/")
    location = f"{root}/metadata/{head}-{uuid.uuid4().hex}{si.FILE_SUFFIX}"
    out = tbl.io().newOutputFile(location).createOrOverwrite()
    try:
        out.write(bytearray(puffin.data))
    finally:
        out.close()
    metas = jvm.java.util.ArrayList()
    for m in puffin.blobs:
        if m["type"] == si.BLOB_TYPE:  # named in the Puffin footer only (see :data:`si.FILE_SUFFIX`)
            continue
        fields = jvm.java.util.ArrayList()
        for f in m["fields"]:
            fields.add(jvm.java.lang.Integer.valueOf(int(f)))
        props = jvm.java.util.HashMap()
        for k, v in (m.get("properties") or {}).items():
            props.put(k, v)
        metas.add(
            jvm.org.apache.iceberg.GenericBlobMetadata(
                m["type"], int(m["snapshot-id"]), int(m["sequence-number"]), fields, props
            )
        )
    stats = jvm.org.apache.iceberg.GenericStatisticsFile(
        int(head), location, len(puffin.data), puffin.footer_size, metas
    )
    tbl.updateStatistics().setStatistics(stats).commit()
    run.refresh()
    return len(puffin.data)


# ------------------------------------------------------------------ the provider's own writes
#: Spec entry of a write or compaction job: ``{"salt": ...}`` when the table declares the index
#: (the salt travels like the erasure job's: 0600 spec file, or the properties file in cluster mode);
#: ``{"salt": None, "reason": ...}`` when no salt is configured.
SPEC_ENTRY = "subject_index"


class WriteRun:
    """What :func:`update` needs of a run, for a job that is not an erasure: the table, the salt and
    the subject columns the existing index holds."""

    def __init__(self, spark: Any, access: Any, catalog: str, table: str, salt: str) -> None:
        self.spark = spark
        self.access = access
        self.catalog = catalog
        self.table = table
        self.t = es.table_sql(catalog, table)
        self.salt: bytes = str(salt).encode("utf-8")
        self.spec: dict[str, Any] = {"subject_index": True}
        self.columns: list[str] = []
        self.col_types: dict[str, Any] = {}
        self.metrics: dict[str, Any] = {}

    def jtable(self, refresh: bool = True) -> Any:
        jtable = self.access.java_table(self.t, refresh=refresh)
        if jtable is None:
            raise RuntimeError("the Iceberg Java API needs a driver JVM; this session is a Spark Connect client")
        return jtable

    def refresh(self) -> None:
        self.access.refresh(self.t)

    def table_properties(self) -> dict[str, str]:
        return dict(self.access.properties(self.t))


def indexed_columns(run: WriteRun, head: int) -> list[str]:
    """The columns (current names) of the nearest index on ``head``'s lineage built with this salt;
    empty when none is there (the first erasure or the maintenance plan builds one)."""
    tbl = run.jtable(refresh=True)
    kid = si.key_id(run.salt)
    by_id = {i: c for c, i in _fs.top_level_field_ids(run.access.schema_json(run.t)).items()}
    files = _stats_files(tbl)
    ours = {sid for sid, f in files.items() if str(f.path()).endswith(si.FILE_SUFFIX)}
    for sid in _search_order(tbl, head, ours):
        try:
            blobs = si.read_puffin(_read(tbl, str(files[sid].path())))
        except (si.SubjectIndexError, OSError):
            continue
        ids = [
            b.fields[0]
            for b in blobs
            if b.type == si.BLOB_TYPE and len(b.fields) == 1 and b.properties.get("key-id") == kid
        ]
        cols = sorted({by_id[i] for i in ids if i in by_id})
        if cols:
            return cols
    return []


def _behind_at(run: WriteRun, head: int, base: int | None) -> str | None:
    """Why the index cannot follow ``head`` from ``base`` by reading only the job's own files."""
    if base is None:
        return None
    indexes = load(run, head)["indexes"]
    at_base = {esc.norm_path(loc) for loc in run.access.snapshot_files(run.t, int(base))}
    if not indexes or si.stale_columns(indexes, run.columns, at_base, enabled(run)[1]):
        return "the index needs a rebuild; the next erasure or the maintenance plan's refresh rebuilds it"
    uncovered = at_base - set.intersection(*(idx.covered() for idx in indexes.values()))
    if uncovered:
        return (
            f"the index did not cover {len(uncovered)} data file(s) of the snapshot this job started from "
            "(outside writers); the maintenance plan's refresh brings it current"
        )
    return None


def follow(ctx: Any, head: int | None, table: str | None = None, base: int | None = None) -> dict[str, Any]:
    """After a provider job committed ``head`` (a WAP branch's new head, a cherry-picked or compacted
    ``main``): bring the index up to it from its nearest indexed ancestor. Never raises: a job's
    commit does not depend on the index, and a lagging index is found through lineage.

    :param ctx: the job's context (its spec's :data:`SPEC_ENTRY` holds the salt).
    :param base: the snapshot the job started from. When the index did not cover it (outside
        writers since its last update) or needs a rebuild, nothing is read: a write or compaction
        reads only its own files, and the maintenance plan's refresh catches up.
    """
    entry = ctx.spec.get(SPEC_ENTRY)
    if not entry:
        return {"updated": False, "reason": "the table does not declare the subject index"}
    if not entry.get("salt"):
        return {"updated": False, "reason": str(entry.get("reason") or "no erasure salt configured")}
    if head is None:
        return {"updated": False, "reason": "no snapshot"}
    if ctx.access.java_table(ctx.table(table)) is None:
        return {
            "updated": False,
            "reason": "a Spark Connect session has no driver JVM to register statistics; the maintenance plan refreshes the index",
        }
    t0 = time.monotonic()
    try:
        run = WriteRun(ctx.spark, ctx.access, ctx.catalog, table or ctx.spec["table"], entry["salt"])
        run.columns = indexed_columns(run, int(head))
        if not run.columns:
            return {"updated": False, "reason": "no subject index on this lineage yet (the first erasure builds it)"}
        fields = {f.name: f.dataType for f in ctx.spark.table(run.t).schema.fields}
        run.col_types = {c: fields[c] for c in run.columns}
        live = {esc.norm_path(loc): loc for loc in ctx.access.snapshot_files(run.t, int(head))}
        behind = _behind_at(run, int(head), base)
        if behind:
            return {"updated": False, "reason": behind}
        out = update(run, int(head), live)
    except Exception as err:  # noqa: BLE001 - py4j wraps every JVM error; the job's commit stands without the index
        return {"updated": False, "reason": f"failed ({type(err).__name__}); the next erasure probes uncovered files"}
    out.setdefault("seconds", round(time.monotonic() - t0, 3))
    out["total_seconds"] = round(time.monotonic() - t0, 3)
    return out
