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
from airflow_iceberg_provider.spark_jobs.erasure import prune as ep
from airflow_iceberg_provider.spark_jobs.erasure import sql as es


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
    ids = _fs.top_level_field_ids(run.access.schema_json(run.t))
    return {c: ids[c] for c in run.columns if c in ids}


def _probe_local(path: str, probes: dict[str, Any], ids: dict[str, int]) -> dict[str, Any]:
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            return {}
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return ep.file_proofs(lambda o, n: mm[o : o + n], size, probes, ids)


def _probe_remote(run: Any, f: dict[str, Any], probes: dict[str, Any], ids: dict[str, int]) -> dict[str, Any]:
    """Object storage: ranged reads (footer, bloom blocks, dictionary pages) through the job's table
    access (Hadoop's FileSystem, S3A for ``s3://``; pyarrow's under Spark Connect); any failure
    proves nothing (the file stays a candidate)."""
    if not f.get("size"):
        return {}
    try:
        with run.access.open_ranged(f["location"]) as read:
            return ep.file_proofs(read, int(f["size"]), probes, ids)
    except OSError:
        return {}


def _file_check(run: Any, probes: dict[str, Any], ids: dict[str, int]) -> Any:
    """file -> {column: proof} from its bloom filters and dictionary pages (local or object storage)."""

    def check(f: dict[str, Any]) -> dict[str, Any]:
        path = f["path"]
        if path.startswith("/"):
            return _probe_local(path, probes, ids) if os.path.isfile(path) else {}
        return _probe_remote(run, f, probes, ids)

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
    snaps, files = run.access.manifest_index(run.t)
    return snaps, {manifest: {norm_path(p) for p in live} for manifest, live in files.items()}


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
    listed through the job's table access)."""
    root = run.access.location(run.t).rstrip("/") + "/data"
    local = _local_dir(root)
    if local is not None:  # a local warehouse: listed in Python (the py4j listing costs ~1 ms a file)
        return [
            (p, loc)
            for p, loc, mtime_ms in _walk_local(local)
            if p.endswith(".parquet") and p not in referenced and mtime_ms < older_than_ms
        ]
    return [
        (p, loc)
        for loc, mtime_ms in run.access.list_files(run.t, root)
        if (p := norm_path(loc)).endswith(".parquet") and p not in referenced and mtime_ms < older_than_ms
    ]


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
