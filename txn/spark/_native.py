"""Unkeyed writes through Spark's own Parquet writer, committed by metatxn's protocol.

Spark writes the DataFrame with ``df.write.parquet`` into the instant's staging folder
``_staging/<T>/``: its JVM writer, its commit protocol for task attempts (a failed, retried or
speculative attempt's files never leave Spark's ``_temporary`` folder, which Spark's job commit or
abort removes). The driver then reads the written files' footers (row counts and statistics,
:mod:`txn._files._footers`) and publishes each file into the segment folder under metatxn's own name,
``part-<segment>-<n>-<token>_<T>.parquet``: the marker first, then the move. From there the file is
what the pyarrow path would have written, as far as the protocol is concerned: a rollback of
``T`` finds it through its marker, the commit lists it, readers find it in the metadata table.

Staged files have no markers (Spark names them), so they are found by their folder instead: the
writer removes its staging folder when it finishes, succeeded or not, and every native write first
removes the staging folders of instants that are no longer pending (a driver killed mid-write
leaves its folder until its instant is rolled back and the next writer runs). The listing comes
before the timeline is loaded, so a folder seen belongs to an instant that began before the load,
and a live writer's folder is never taken for a dead one's.

Only tables whose every column Spark writes back as the table's own Arrow type take this path
(:func:`writes_natively`); partitioned and keyed tables keep the ``mapInArrow`` path, which
writes Hive folders with the partition columns inside the files and the record index's log
files from the rows it sees.
"""

from __future__ import annotations

import contextlib
import posixpath
import secrets
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from timeline import parse_time

from .._context import TableContext
from .._files import DataStore, FileStatus, footer_stats, marker_path
from ._types import quoted

STAGING_FOLDER = "_staging"
#: Spark writes timestamps as INT96 by default, which has no statistics and reads back as
#: nanoseconds; as a write option it applies to this write only, not to the session.
_TIMESTAMP_OPTION = ("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
#: Footers are two small reads each: threads hide the latency of object stores.
_FOOTER_THREADS = 16


def _round_trips(data_type: pa.DataType) -> bool:
    """Whether a Parquet file Spark writes reads back with exactly this Arrow type."""
    return (pa.types.is_boolean(data_type) or pa.types.is_signed_integer(data_type)
            or data_type in (pa.float32(), pa.float64(), pa.string(), pa.binary(), pa.date32(),
                             pa.timestamp("us"), pa.timestamp("us", "UTC"))
            or pa.types.is_decimal128(data_type))


def writes_natively(schema: pa.Schema, partition_by: Sequence[str], key_columns: Sequence[str]) -> bool:
    """Whether a write to a table of this layout goes through Spark's own Parquet writer."""
    return not partition_by and not key_columns and all(_round_trips(f.type) for f in schema)


def staging_folder(instant_time: str) -> str:
    return f"{STAGING_FOLDER}/{instant_time}"


def write_files(table: TableContext, df: Any, instant_time: str, segment: str) -> list[FileStatus]:
    """Write ``df`` (checked against the table) as data files of ``instant_time`` in ``segment``:
    Spark writes, the driver publishes them under markers; return their statuses."""
    from pyspark.sql import functions as F

    store = table.store
    remove_dead_staging(table)
    staging = staging_folder(instant_time)
    if table.sort_by:
        # As the pyarrow writer sorts a load: as a whole (files of disjoint ranges, so a filter on
        # a sort column opens files in proportion to what it selects), ascending, nulls last.
        # As many files as the DataFrame has partitions, as without sort_by.
        order = [F.col(quoted(c)).asc_nulls_last() for c in table.sort_by]
        df = df.repartitionByRange(df.rdd.getNumPartitions(), *order).sortWithinPartitions(*order)
    try:
        (df.select(*[F.col(quoted(name)) for name in table.schema.names]).write.mode("overwrite")
           .option("compression", "snappy").option(*_TIMESTAMP_OPTION)
           .parquet(store.location(staging)))
        staged = _staged_files(store, staging)
        with ThreadPoolExecutor(max_workers=max(1, min(_FOOTER_THREADS, len(staged)))) as pool:
            footers = list(pool.map(lambda info: pq.read_metadata(info.path, filesystem=store.filesystem),
                                    staged))
        statuses: list[FileStatus] = []
        for info, footer in zip(staged, footers, strict=True):
            if footer.num_rows == 0:
                continue  # Spark writes an empty file for an empty DataFrame; metatxn writes none
            statuses.append(_publish(store, info, footer, table.schema, instant_time, segment,
                                     len(statuses)))
        return statuses
    finally:
        _remove_folder(store, staging)


def _staged_files(store: DataStore, staging: str) -> list[pafs.FileInfo]:
    """Spark's data files in the staging folder (not ``_SUCCESS``, not checksum files)."""
    infos = store.filesystem.get_file_info(pafs.FileSelector(store.full_path(staging), recursive=True))
    return sorted((info for info in infos if info.type == pafs.FileType.File
                   and info.base_name.endswith(".parquet") and not info.base_name.startswith(("_", "."))),
                  key=lambda info: info.path)


def _publish(store: DataStore, staged: pafs.FileInfo, footer: pq.FileMetaData, schema: pa.Schema,
             instant_time: str, segment: str, number: int) -> FileStatus:
    """Move one staged file to its place in the segment, its marker stored first."""
    folder = f"segment_{segment}"
    name = f"part-{segment}-{number:05d}-n{secrets.token_hex(4)}_{instant_time}.parquet"
    path = posixpath.join(folder, name)
    store.storage.put_if_absent(marker_path(name), path.encode())
    store.filesystem.create_dir(store.full_path(folder), recursive=True)
    store.filesystem.move(staged.path, store.full_path(path))
    assert staged.size is not None
    return FileStatus(path=path, partition="", rows=footer.num_rows, size=staged.size,
                      stats=footer_stats(footer, schema))


def remove_dead_staging(table: TableContext) -> None:
    """Remove the staging folders of instants that are not pending (see the module docstring
    for why the listing comes before the timeline)."""
    store = table.store
    root = store.full_path(STAGING_FOLDER)
    folders = [info.base_name for info in store.filesystem.get_file_info(
        pafs.FileSelector(root, allow_not_found=True)) if info.type == pafs.FileType.Directory]
    if not folders:
        return
    pending = {instant.time for instant in table.timeline.load().pending()}
    for folder in folders:
        if _is_instant_time(folder) and folder not in pending:
            _remove_folder(store, staging_folder(folder))


def _is_instant_time(name: str) -> bool:
    try:
        parse_time(name)
    except ValueError:
        return False
    return True


def _remove_folder(store: DataStore, folder: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        store.filesystem.delete_dir(store.full_path(folder))
