"""File-level verbs of a table through its FileIO: manifests, the metadata directory, data-file removal.

``TableFilesMixin`` is part of :class:`~airflow_iceberg_provider.hooks.catalog.IcebergCatalogHook`
(public verbs ``health``, ``data_files``, ``metadata_files``, ``delete_files`` and, for WAP
re-runs with ``on_rerun="replace"``, ``files_added_by``, ``live_paths``,
``remove_files_on_branch``), kept in its own module so the hook module holds the connection,
error translation, load/refs/snapshots and compare-and-swap ref moves. The reads go through
manifests (in parallel threads) and the metadata directory, never a data file, and return
plain values; the rules that judge them live in ``rules.maintenance`` / ``rules.health`` /
``rules.wap_rerun``. The one write, ``remove_files_on_branch``, is a single ``overwrite`` commit on
a branch (compare-and-swap on its head) that refuses when a file is no longer live there.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider.exceptions import IcebergRefusedError
from airflow_iceberg_provider.models import DataFileFacts, TableHealth
from airflow_iceberg_provider.rules.maintenance import DEFAULT_TARGET_FILE_SIZE, MIN_FILE_SIZE_FRACTION

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_iceberg_provider.params import TableIdent


def _table_name(tbl: Table) -> str:
    return ".".join(tbl.name()[-2:])


class TableFilesMixin:
    """Table file verbs of the catalog hook (needs ``_table`` and ``translate_errors`` from it)."""

    _table: Any
    load_table: Any
    translate_errors: Any
    refuse_uncommittable: Any

    def health(self, table: str | TableIdent | Table, *, target_file_size: int | None = None) -> TableHealth:
        """File, snapshot and manifest counts of a table's current ``main`` state.

        Reads the manifest list and manifests of the current snapshot only (in
        parallel threads); it never scans data files.
        """
        from pyiceberg.manifest import DataFileContent

        tbl = self._table(table)
        meta = tbl.metadata
        target = target_file_size or int(meta.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
        small_limit = int(target * MIN_FILE_SIZE_FRACTION)
        snap = tbl.current_snapshot()
        counts = {"data": 0, "data_bytes": 0, "records": 0, "pos": 0, "eq": 0, "del_bytes": 0, "small": 0}
        manifests = snap.manifests(tbl.io) if snap is not None else []
        for _spec_id, f in self._live_files(tbl, manifests):
            if f.content == DataFileContent.DATA:
                counts["data"] += 1
                counts["data_bytes"] += f.file_size_in_bytes
                counts["records"] += f.record_count
                counts["small"] += f.file_size_in_bytes < small_limit
            else:
                counts["pos" if f.content == DataFileContent.POSITION_DELETES else "eq"] += 1
                counts["del_bytes"] += f.file_size_in_bytes
        snaps = meta.snapshots
        return TableHealth(
            table=_table_name(tbl),
            snapshot_id=snap.snapshot_id if snap else None,
            format_version=meta.format_version,
            data_files=counts["data"],
            data_bytes=counts["data_bytes"],
            records=counts["records"],
            delete_files=counts["pos"] + counts["eq"],
            position_delete_files=counts["pos"],
            equality_delete_files=counts["eq"],
            delete_bytes=counts["del_bytes"],
            manifests=len(manifests),
            snapshots=len(snaps),
            refs=len(meta.refs),
            oldest_snapshot_ms=min((s.timestamp_ms for s in snaps), default=None),
            target_file_size_bytes=target,
            small_files=counts["small"],
            metadata_bytes=self._file_size(tbl, tbl.metadata_location),
            metadata_log_length=len(meta.metadata_log),
            statistics_fresh=None if snap is None else any(s.snapshot_id == snap.snapshot_id for s in meta.statistics),
        )

    @staticmethod
    def _live_files(tbl: Table, manifests: list[Any]) -> Iterator[tuple[int, Any]]:
        """``(partition spec id, data file)`` of the live entries of ``manifests``, read in parallel threads."""

        def entries(manifest: Any) -> tuple[int, list[Any]]:
            return manifest.partition_spec_id, manifest.fetch_manifest_entry(tbl.io, discard_deleted=True)

        with ThreadPoolExecutor(max_workers=8) as pool:
            for spec_id, batch in pool.map(entries, manifests):
                for entry in batch:
                    yield spec_id, entry.data_file

    def data_files(
        self, table: str | TableIdent | Table, *, all_snapshots: bool = False, deletes_only: bool = False
    ) -> list[DataFileFacts]:
        """Live data and delete files as plain values (partition as text, content as a name).

        By default those of ``main``'s current snapshot; ``all_snapshots`` reads every
        manifest of every snapshot still in the metadata (each once); ``deletes_only``
        skips data manifests. Reads manifests only, never a data file.
        """
        tbl = self._table(table)
        if all_snapshots:
            unique = {m.manifest_path: m for s in tbl.metadata.snapshots for m in s.manifests(tbl.io)}
            manifests = list(unique.values())
        else:
            snap = tbl.current_snapshot()
            manifests = snap.manifests(tbl.io) if snap is not None else []
        if deletes_only:
            manifests = [m for m in manifests if m.content.value != 0]
        return [
            DataFileFacts(
                spec_id=spec_id,
                partition=str(f.partition),
                content=f.content.name.lower(),
                file_size_in_bytes=f.file_size_in_bytes,
                record_count=f.record_count,
            )
            for spec_id, f in self._live_files(tbl, manifests)
        ]

    @staticmethod
    def _file_size(tbl: Table, location: str | None) -> int | None:
        if not location:
            return None
        try:
            return len(tbl.io.new_input(location))
        except (OSError, ValueError):
            return None

    def metadata_files(self, table: str | TableIdent | Table) -> list[tuple[str, int]]:
        """``(location, modified epoch ms)`` of every file in the table's metadata directory.

        Listed through the table's own FileIO file system (local, S3, GCS, ...), so the
        locations compare with the metadata log's.
        """
        from pyarrow.fs import FileSelector, FileType
        from pyiceberg.io.pyarrow import PyArrowFileIO

        tbl = self._table(table)
        directory = tbl.metadata_location.rsplit("/", 1)[0]
        scheme, netloc, path = PyArrowFileIO.parse_location(directory)
        fs = tbl.io.fs_by_scheme(scheme, netloc)
        with self.translate_errors(_table_name(tbl)):
            infos = fs.get_file_info(FileSelector(path, allow_not_found=True))
        prefix = "file:" if scheme == "file" else f"{scheme}://"
        return [
            (f"{prefix}{i.path}", int(i.mtime.timestamp() * 1000))
            for i in infos
            if i.type == FileType.File and i.mtime is not None
        ]

    def delete_files(self, table: str | TableIdent | Table, locations: list[str]) -> int:
        """Delete files through the table's FileIO; returns how many were deleted."""
        tbl = self._table(table)
        deleted = 0
        for loc in locations:
            with self.translate_errors(_table_name(tbl)):
                tbl.io.delete(loc)
            deleted += 1
        return deleted

    # -------------------------------------------- on_rerun="replace" by data files (WAP re-runs)
    def files_added_by(self, table: str | TableIdent | Table, snapshot_ids: Sequence[int]) -> list[Any]:
        """The data files (pyiceberg ``DataFile``) each snapshot added itself, read from its own manifests."""
        from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

        tbl = self._table(table)
        out: list[Any] = []
        for sid in snapshot_ids:
            snap = tbl.metadata.snapshot_by_id(sid)
            if snap is None:
                raise IcebergRefusedError(
                    f"Snapshot {sid} is no longer in the table's history (expired); cannot list its files."
                )
            for manifest in snap.manifests(tbl.io):
                if manifest.added_snapshot_id != sid:
                    continue
                for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
                    if (
                        entry.status == ManifestEntryStatus.ADDED
                        and entry.snapshot_id == sid
                        and entry.data_file.content == DataFileContent.DATA
                    ):
                        out.append(entry.data_file)
        return out

    def live_paths(self, table: str | TableIdent | Table, snapshot_id: int) -> set[str]:
        """Paths of the data files live in a snapshot (its manifests, DELETED entries skipped)."""
        from pyiceberg.manifest import DataFileContent

        tbl = self._table(table)
        snap = tbl.metadata.snapshot_by_id(snapshot_id)
        if snap is None:
            return set()
        return {
            e.data_file.file_path
            for m in snap.manifests(tbl.io)
            for e in m.fetch_manifest_entry(tbl.io, discard_deleted=True)
            if e.data_file.content == DataFileContent.DATA
        }

    def remove_files_on_branch(
        self,
        table: str | TableIdent | Table,
        branch: str,
        snapshot_ids: Sequence[int],
        properties: Mapping[str, str],
    ) -> dict[str, Any]:
        """Remove, in one ``overwrite`` commit on ``branch``, every data file ``snapshot_ids`` added.

        Refuses (nothing committed) when a file is no longer live on the branch head: it was
        rewritten or deleted since (compaction, a DELETE), so its rows cannot be removed exactly.
        The commit asserts the branch head (compare-and-swap) and carries ``properties`` in
        its summary.

        :return: ``{"files", "rows", "snapshot_id"}`` of the removal.
        """
        from airflow_iceberg_provider.core.ref_guard import RefVerb
        from airflow_iceberg_provider.rules.refs import guard_ref_change

        tbl = self._table(table)
        # a commit on the branch moves it: the ref guard first (never a tag, never a hold)
        guard_ref_change(
            RefVerb.MOVE, tbl.metadata.refs, branch, table=_table_name(tbl), param="branch", result_type="branch"
        )
        head = tbl.metadata.refs[branch].snapshot_id
        files = self.files_added_by(tbl, snapshot_ids)
        live = self.live_paths(tbl, head)
        gone = sorted(f.file_path for f in files if f.file_path not in live)
        if gone:
            raise IcebergRefusedError(
                f"on_rerun='replace' by data files: {len(gone)} of the {len(files)} files the earlier publish added "
                f"(snapshots {list(snapshot_ids)}) are no longer live on branch {branch!r} (rewritten by compaction "
                f"or deleted since), e.g. {gone[0]}; its rows cannot be removed exactly. Nothing was changed. "
                "Declare replace_where to replace by predicate."
            )
        if files:
            self.refuse_uncommittable(
                tbl, change=f"removal of the earlier publish's files from {branch!r}", what="files"
            )
            with self.translate_errors(f"{branch} of {_table_name(tbl)}"), tbl.transaction() as tx:
                with tx.update_snapshot(snapshot_properties=dict(properties), branch=branch).overwrite() as overwrite:
                    for data_file in files:
                        overwrite.delete_data_file(data_file)
        new_head = self.load_table(_table_name(tbl)).metadata.refs[branch].snapshot_id
        return {"files": len(files), "rows": sum(f.record_count for f in files), "snapshot_id": new_head}
