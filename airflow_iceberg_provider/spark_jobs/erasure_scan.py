"""Spark-driver helpers of the erasure job: pruned candidate files, manifest reachability.

The decisions are the pure functions of ``erasure_prune.py``; this module only gathers
their inputs from the table (metadata tables, manifests, Parquet footers). Subject keys
stay in the driver's memory (they are already there as a temp view) and are never
printed.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

from airflow_iceberg_provider.spark_jobs import _fs
from airflow_iceberg_provider.spark_jobs import erasure_prune as ep
from airflow_iceberg_provider.spark_jobs import erasure_sql as es
from airflow_iceberg_provider.spark_jobs._compat import driver_jvm, hadoop_configuration


def norm_path(path: str) -> str:
    """Canonical form of a file location (``file:/x``, ``file:///x`` and ``/x`` are equal)."""
    from urllib.parse import unquote

    return strip_file_scheme(unquote(str(path)))


def strip_file_scheme(location: str) -> str:
    """``file:/x`` and ``file:///x`` -> ``/x``; anything else unchanged."""
    return "/" + location[len("file:") :].lstrip("/") if location.startswith("file:") else location


def subject_keys(run: Any) -> dict[str, list[Any]]:
    return {c: [r[0] for r in run.spark.table(es.key_view(c)).collect()] for c in run.columns}


def file_metrics(run: Any, locations: dict[str, str]) -> list[dict[str, Any]]:
    """Manifest metrics of the subject columns for each data file in ``locations``."""
    sel = []
    for i, c in enumerate(run.columns):
        rm = f"readable_metrics.{es.q(c)}"
        sel += [
            f"{rm}.lower_bound AS lo{i}",
            f"{rm}.upper_bound AS hi{i}",
            f"{rm}.value_count AS vc{i}",
            f"{rm}.null_value_count AS nc{i}",
        ]
    rows = run.sql(
        f"SELECT file_path, file_size_in_bytes AS size, {', '.join(sel)} FROM {run.t}.all_data_files"
    ).collect()
    out, seen = [], set()
    for r in rows:
        p = norm_path(r.file_path)
        if p not in locations or p in seen:
            continue
        seen.add(p)
        d = r.asDict()
        metrics = {
            c: {"lower": d[f"lo{i}"], "upper": d[f"hi{i}"], "value_count": d[f"vc{i}"], "null_count": d[f"nc{i}"]}
            for i, c in enumerate(run.columns)
        }
        out.append({"path": p, "location": locations[p], "size": int(r.size), "metrics": metrics})
    for p in set(locations) - seen:  # not in the metadata table (should not happen): never pruned
        out.append({"path": p, "location": locations[p], "size": None, "metrics": {}})
    return out


def field_ids(run: Any) -> dict[str, int]:
    """Iceberg field id of each subject column (Parquet columns are matched by id, not name)."""
    if not _fs.has_jvm(run.spark):  # Spark Connect: the current schema from the metadata file
        ids = _fs.top_level_field_ids(_fs.schema_json(_fs.current_metadata(run.spark, run.t)))
        return {c: ids[c] for c in run.columns if c in ids}
    schema = run.jtable(refresh=False).schema()
    fields = {c: schema.findField(c) for c in run.columns}
    return {c: int(f.fieldId()) for c, f in fields.items() if f is not None}


def _probe_local(path: str, probes: dict[str, Any], ids: dict[str, int]) -> dict[str, Any]:
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return {}
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return ep.file_proofs(lambda o, n: mm[o : o + n], size, probes, ids)


def _probe_hadoop(run: Any, f: dict[str, Any], probes: dict[str, Any], ids: dict[str, int]) -> dict[str, Any]:
    """Object storage: ranged reads (footer, bloom blocks, dictionary pages) through Hadoop's
    FileSystem (S3A for ``s3://``); any failure proves nothing (the file stays a candidate)."""
    from py4j.protocol import Py4JError

    if not f.get("size"):
        return {}
    if not _fs.has_jvm(run.spark):  # Spark Connect: pyarrow's file system (S3 with the session's S3A settings)
        try:
            with _fs.open_ranged(run.spark, f["location"]) as fh:

                def read_arrow(offset: int, length: int) -> bytes:
                    fh.seek(offset)
                    return bytes(fh.read(length))

                return ep.file_proofs(read_arrow, int(f["size"]), probes, ids)
        except (OSError, ValueError):
            return {}
    try:
        path = driver_jvm(run.spark).org.apache.hadoop.fs.Path(f["location"])
        stream = path.getFileSystem(hadoop_configuration(run.spark)).open(path)
        try:

            def read(offset: int, length: int) -> bytes:
                stream.seek(offset)
                return bytes(stream.readNBytes(length))

            return ep.file_proofs(read, int(f["size"]), probes, ids)
        finally:
            stream.close()
    except Py4JError:
        return {}


def _file_check(run: Any, probes: dict[str, Any], ids: dict[str, int]) -> Any:
    """file -> {column: proof} from its bloom filters and dictionary pages (local or object storage)."""

    def check(f: dict[str, Any]) -> dict[str, Any]:
        path = f["path"]
        if path.startswith("/"):
            return _probe_local(path, probes, ids) if os.path.isfile(path) else {}
        return _probe_hadoop(run, f, probes, ids)

    return check


def candidates(run: Any, locations: dict[str, str]) -> dict[str, Any]:
    """Prune ``locations`` (normalised path -> location) to the files that may hold a subject."""
    if not locations:
        counts = ("considered", "pruned_bounds", "pruned_bloom", "pruned_dictionary", "raw_read")
        return {"candidates": [], **dict.fromkeys(counts, 0)}
    keys = subject_keys(run)
    props = {r.key: r.value for r in run.sql(f"SHOW TBLPROPERTIES {run.t}").collect()}
    probes = {c: ep.key_probes(v) for c, v in keys.items()}
    files = file_metrics(run, locations)
    check = _file_check(run, probes, field_ids(run)) if run.spec.get("bloom_pruning", True) else None
    result = ep.prune_files(files, keys, props, check)
    result["candidates"] = [locations[p] for p in result["candidates"]]
    return result


def manifest_index(run: Any) -> tuple[dict[int, list[str]], dict[str, set[str]]]:
    """Snapshot id -> its data manifests; manifest -> live data files (each manifest read once)."""
    if not _fs.has_jvm(run.spark):
        return _manifest_index_sql(run)
    jvm = driver_jvm(run.spark)
    tbl = run.jtable(refresh=True)
    io = tbl.io()
    snaps: dict[int, list[str]] = {}
    files: dict[str, set[str]] = {}
    for snap in tbl.snapshots():
        paths = []
        for manifest in snap.dataManifests(io):
            path = str(manifest.path())
            paths.append(path)
            if path in files:
                continue
            live: set[str] = set()
            reader = jvm.org.apache.iceberg.ManifestFiles.read(manifest, io, tbl.specs())
            try:
                it = reader.iterator()
                while it.hasNext():
                    live.add(norm_path(it.next().location()))
            finally:
                reader.close()
            files[path] = live
        snaps[int(snap.snapshotId())] = paths
    return snaps, files


def _manifest_index_sql(run: Any) -> tuple[dict[int, list[str]], dict[str, set[str]]]:
    """:func:`manifest_index` from metadata tables (Spark Connect): each snapshot's data manifests
    (``all_manifests``), plus one pseudo-manifest per snapshot holding its live data files
    (``data_files VERSION AS OF``), so "a manifest lists a subject file" reads "the snapshot does"."""
    run.refresh()
    snaps: dict[int, list[str]] = {}
    for r in run.sql(
        f"SELECT DISTINCT reference_snapshot_id, path FROM {run.t}.all_manifests WHERE content = 0"
    ).collect():
        snaps.setdefault(int(r[0]), []).append(str(r[1]))
    files: dict[str, set[str]] = {}
    for r in run.sql(f"SELECT snapshot_id FROM {run.t}.snapshots").collect():
        sid = int(r[0])
        live = f"live-files-of-snapshot:{sid}"
        files[live] = {norm_path(p) for p in _fs.snapshot_data_files(run.spark, run.t, sid)}
        snaps.setdefault(sid, []).append(live)
    return snaps, files


def exposing_manifests(run: Any, subject_files: set[str]) -> set[str]:
    """Manifests that may carry a DELETED entry (with bounds) of a subject file: every manifest
    written by a snapshot that deleted one (a superset: sound for expiry)."""
    rows = run.sql(
        f"SELECT DISTINCT snapshot_id, data_file.file_path AS f FROM {run.t}.all_entries WHERE status = 2"
    ).collect()
    deleting = {int(r.snapshot_id) for r in rows if norm_path(r.f) in subject_files}
    if not deleting:
        return set()
    ms = run.sql(f"SELECT DISTINCT path, added_snapshot_id FROM {run.t}.all_manifests").collect()
    return {str(r.path) for r in ms if r.added_snapshot_id is not None and int(r.added_snapshot_id) in deleting}


def referenced_files(run: Any) -> set[str]:
    """Every data and delete file referenced by any snapshot still in the metadata."""
    out: set[str] = set()
    for kind in ("all_data_files", "all_delete_files"):
        out |= {norm_path(r[0]) for r in run.sql(f"SELECT DISTINCT file_path FROM {run.t}.{kind}").collect()}
    return out


def unreferenced_parquet(run: Any, referenced: set[str], older_than_ms: int) -> list[tuple[str, str]]:
    """(normalised path, location) of Parquet files under the table's data location that no
    snapshot references and that were last modified before ``older_than_ms`` (an object store is
    listed through the table's FileIO, else Hadoop's FileSystem)."""
    location = (
        str(run.jtable(refresh=False).location()) if _fs.has_jvm(run.spark) else _fs.table_location(run.spark, run.t)
    )
    root = location.rstrip("/") + "/data"
    local = _local_dir(root)
    if local is not None:  # a local warehouse: listed in Python (the py4j listing costs ~1 ms a file)
        return [
            (p, loc)
            for p, loc, mtime_ms in _walk_local(local)
            if p.endswith(".parquet") and p not in referenced and mtime_ms < older_than_ms
        ]
    if not _fs.has_jvm(run.spark):  # Spark Connect: pyarrow's listing
        return [
            (p, loc)
            for loc, mtime_ms, _size in _fs.list_files(run.spark, root)
            if (p := norm_path(loc)).endswith(".parquet") and p not in referenced and mtime_ms < older_than_ms
        ]
    listed = _list_with_table_io(run, root)
    if listed is None:
        listed = _list_with_hadoop(run, root)
    return [
        (p, loc)
        for loc, mtime_ms in listed
        if (p := norm_path(loc)).endswith(".parquet") and p not in referenced and mtime_ms < older_than_ms
    ]


def _list_with_table_io(run: Any, root: str) -> list[tuple[str, int]] | None:
    """(location, modified ms) of every object under ``root`` through the table's own FileIO
    (``listPrefix``), which holds the credentials the catalog vends (a REST catalog's S3FileIO);
    None when that FileIO cannot list prefixes."""
    try:
        it = run.jtable(refresh=False).io().listPrefix(root.rstrip("/") + "/").iterator()
    except Exception as err:  # noqa: BLE001 - py4j: no listPrefix on this FileIO
        text = str(getattr(err, "java_exception", err))
        if "UnsupportedOperation" in text or "listPrefix" in text or "does not exist" in text:
            return None
        raise
    out = []
    while it.hasNext():
        info = it.next()
        out.append((str(info.location()), int(info.createdAtMillis())))
    return out


def _list_with_hadoop(run: Any, root: str) -> list[tuple[str, int]]:
    """(location, modified ms) of every file under ``root`` through Hadoop's FileSystem."""
    jvm = driver_jvm(run.spark)
    path = jvm.org.apache.hadoop.fs.Path(root)
    fs = path.getFileSystem(hadoop_configuration(run.spark))
    if not fs.exists(path):
        return []
    out = []
    it = fs.listFiles(path, True)
    while it.hasNext():
        st = it.next()
        out.append((str(st.getPath().toString()), int(st.getModificationTime())))
    return out


def _local_dir(location: str) -> str | None:
    """The local directory of a ``file:`` (or bare absolute) location; None for other schemes."""
    local = strip_file_scheme(location)
    return local if local.startswith("/") else None


def _walk_local(root: str) -> list[tuple[str, str, int]]:
    """(normalised path, ``file:`` location, mtime in ms) of every file under ``root``."""
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = os.path.join(dirpath, name)
            try:
                mtime_ms = int(os.stat(full).st_mtime * 1000)
            except FileNotFoundError:  # removed while listing (a concurrent expiry)
                continue
            out.append((norm_path(full), "file:" + full, mtime_ms))
    return out


def is_readable_parquet(path: str) -> bool:
    """A local file with a valid Parquet footer (a killed writer's partial file has none)."""
    if not path.startswith("/") or not os.path.isfile(path):
        return True  # object stores: only complete objects are visible
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < 12:
            return False
        fh.seek(size - 4)
        return fh.read(4) == b"PAR1"
