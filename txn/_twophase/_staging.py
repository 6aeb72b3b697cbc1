"""Files a foreign writer wrote join a pending write: :func:`adopt_files`.

A foreign writer (Spark's own Parquet writer, another engine) writes Parquet files of the table's
columns into the instant's staging folder ``_staging/<T>/`` (``WriteTicket.staging``), with its
own commit protocol for its task attempts. :func:`adopt_files` reads each file's footer (row
count and statistics, :mod:`txn._files._footers`) and publishes it into the segment folder under
metatxn's own name, ``part-<segment>-<n>-<token>_<T>.parquet``: the marker first, then the move.
From there the file is what metatxn's writer would have written, as far as the protocol is
concerned: a rollback of ``T`` finds it through its marker, the commit lists it.

Staged files have no markers (the foreign writer names them), so they are found by their folder
instead: the pending write removes its staging folder when it commits or aborts, and
:func:`sweep_staging` (run when a pending write hands out its staging folder) removes the
staging folders of instants that are no longer pending (a driver killed mid-write leaves its
folder until its instant is rolled back and the next such writer runs). The listing comes before
the timeline is loaded, so a folder seen belongs to an instant that began before the load, and a
live writer's folder is never taken for a dead one's.
"""

from __future__ import annotations

import posixpath
import secrets
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from metatxn.timeline import InvalidOptionError, Timeline, open_storage, parse_time

from .._files import DataStore, FileStatus, footer_stats, marker_path
from ._ticket import STAGING_FOLDER, WriteTicket, staging_folder
from ._worker import WrittenFiles

#: Footers are two small reads each: threads hide the latency of object stores.
_FOOTER_THREADS = 16


def adopt_files(ticket: WriteTicket, paths: list[str] | None = None, *,
                index_apart: bool = False) -> WrittenFiles:
    """Make Parquet files a foreign writer wrote into ``ticket.staging`` part of the pending
    write: each is published into the write's segment (its statistics read from its footer);
    files of no rows are dropped. ``paths``: the files, relative to the staging folder (None:
    every ``.parquet`` file under it, not ``_``- or ``.``-prefixed ones). Returns the report for
    ``PendingWrite.commit``; the staging folder is removed. ``index_apart``: on a keyed table,
    the caller writes the adopted files' record-index entries itself (:func:`txn.write_index`,
    from the published paths and the rows' positions) and commits its reports with this one."""
    if ticket.segment is None:
        raise InvalidOptionError(f"a {ticket.operation} writes no data files; it commits deletes only")
    if ticket.key_columns and not index_apart:
        raise InvalidOptionError("adopt_files is for tables without a record key: a keyed table's "
                                 "files need record-index entries (write them with txn.write_files, "
                                 "or with txn.write_index and index_apart=True)")
    store = DataStore(open_storage(ticket.uri, ticket.storage_options))
    schema = ticket.table_schema
    staging = staging_folder(ticket.instant)
    try:
        staged = _staged_files(store, staging, paths)
        with ThreadPoolExecutor(max_workers=max(1, min(_FOOTER_THREADS, len(staged)))) as pool:
            footers = list(pool.map(lambda info: pq.read_metadata(info.path, filesystem=store.filesystem),
                                    staged))
        statuses: list[FileStatus] = []
        for info, footer in zip(staged, footers, strict=True):
            if footer.num_rows == 0:
                continue  # Spark writes an empty file for an empty DataFrame; metatxn writes none
            statuses.append(_publish(store, info, footer, schema, ticket.instant, ticket.segment,
                                     len(statuses), ticket.schema_id))
        return WrittenFiles(instant=ticket.instant, files=tuple(statuses))
    finally:
        _remove_folder(store, staging)


def _staged_files(store: DataStore, staging: str, paths: list[str] | None) -> list[pafs.FileInfo]:
    """The staged data files (not ``_SUCCESS``, not checksum files), in name order."""
    if paths is not None:
        infos = store.filesystem.get_file_info([store.full_path(posixpath.join(staging, p)) for p in paths])
        missing = [p for p, info in zip(paths, infos, strict=True) if info.type != pafs.FileType.File]
        if missing:
            raise InvalidOptionError(f"adopt_files: {missing} are not files in the staging folder "
                                     f"{staging}")
        return sorted(infos, key=lambda info: info.path)
    infos = store.filesystem.get_file_info(pafs.FileSelector(store.full_path(staging), recursive=True,
                                                             allow_not_found=True))
    return sorted((info for info in infos if info.type == pafs.FileType.File
                   and info.base_name.endswith(".parquet") and not info.base_name.startswith(("_", "."))),
                  key=lambda info: info.path)


def _publish(store: DataStore, staged: pafs.FileInfo, footer: pq.FileMetaData, schema: pa.Schema,
             instant_time: str, segment: str, number: int, schema_id: int) -> FileStatus:
    """Move one staged file to its place in the segment, its marker stored first."""
    folder = f"segment_{segment}"
    name = f"part-{segment}-{number:05d}-n{secrets.token_hex(4)}_{instant_time}.parquet"
    path = posixpath.join(folder, name)
    store.storage.put_if_absent(marker_path(name), path.encode())
    store.make_folder(folder)
    store.move_file(staged.path[len(store.root) + 1:], path)
    assert staged.size is not None
    return FileStatus(path=path, partition="", rows=footer.num_rows, size=staged.size,
                      stats=footer_stats(footer, schema), schema_id=schema_id)


def sweep_staging(store: DataStore, timeline: Timeline) -> None:
    """Remove the staging folders of instants that are not pending (see the module docstring
    for why the listing comes before the timeline)."""
    root = store.full_path(STAGING_FOLDER)
    folders = [info.base_name for info in store.filesystem.get_file_info(
        pafs.FileSelector(root, allow_not_found=True)) if info.type == pafs.FileType.Directory]
    if not folders:
        return
    pending = {instant.time for instant in timeline.load().pending()}
    for folder in folders:
        if _is_instant_time(folder) and folder not in pending:
            _remove_folder(store, staging_folder(folder))


def remove_staging(store: DataStore, instant_time: str) -> None:
    _remove_folder(store, staging_folder(instant_time))


def _is_instant_time(name: str) -> bool:
    try:
        parse_time(name)
    except ValueError:
        return False
    return True


def _remove_folder(store: DataStore, folder: str) -> None:
    store.remove_folder(folder)
