"""Catalog verbs of ``on_rerun="replace"`` by data files (pyiceberg, metadata only, no JVM).

Kept beside :mod:`~airflow_iceberg_provider.hooks.catalog` (same layer: it talks to the
catalog only and returns plain values) so the WAP re-run work did not have to edit the
catalog hook; they can move into ``IcebergCatalogHook`` as methods unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_iceberg_provider.exceptions import IcebergRefusedError

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from airflow_iceberg_provider.hooks.catalog import IcebergCatalogHook


def files_added_by(tbl: Table, snapshot_ids: Sequence[int]) -> list[Any]:
    """The data files (pyiceberg ``DataFile``) each snapshot added itself, read from its own manifests."""
    from pyiceberg.manifest import DataFileContent, ManifestEntryStatus

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


def live_paths(tbl: Table, snapshot_id: int) -> set[str]:
    """Paths of the data files live in a snapshot (its manifests, DELETED entries skipped)."""
    from pyiceberg.manifest import DataFileContent

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
    hook: IcebergCatalogHook,
    tbl: Table,
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
    head = tbl.metadata.refs[branch].snapshot_id
    files = files_added_by(tbl, snapshot_ids)
    live = live_paths(tbl, head)
    gone = sorted(f.file_path for f in files if f.file_path not in live)
    if gone:
        raise IcebergRefusedError(
            f"on_rerun='replace' by data files: {len(gone)} of the {len(files)} files the earlier publish added "
            f"(snapshots {list(snapshot_ids)}) are no longer live on branch {branch!r} (rewritten by compaction or "
            f"deleted since), e.g. {gone[0]}; its rows cannot be removed exactly. Nothing was changed. Declare "
            "replace_where to replace by predicate."
        )
    if files:
        with hook.translate_errors(f"{branch} of {'.'.join(tbl.name()[-2:])}"), tbl.transaction() as tx:
            with tx.update_snapshot(snapshot_properties=dict(properties), branch=branch).overwrite() as overwrite:
                for data_file in files:
                    overwrite.delete_data_file(data_file)
    new_head = hook.load_table(".".join(tbl.name()[-2:])).metadata.refs[branch].snapshot_id
    return {"files": len(files), "rows": sum(f.record_count for f in files), "snapshot_id": new_head}
