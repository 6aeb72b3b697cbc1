"""Scanning one data file by row position: for files with delete deltas, and to find the rows a
delete or update matches.

Arrow's dataset scanner does not expose row numbers, so a file is scanned one row group at a
time: the row groups whose statistics can match the filter are decoded, each knows its first
row's position from the footer, and deleted positions are masked out before the filter is
applied. The filter is evaluated as a projection, so only the columns it and the caller need are
read.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from timeline import StorageError, TxnError

from ._deltas import Positions, reading_file
from ._storage_io import DataStore

_MATCH = "__metatxn_match__"
_FORMAT = ds.ParquetFileFormat()
DATA_FILE_EXPECTED = "a Parquet data file of the table's schema"


def check_data_files(store: DataStore, paths: Sequence[str], error: BaseException) -> None:
    """After a scan of ``paths`` failed with ``error``: raise a ``TxnError`` naming the data file
    at fault, if one is missing or cannot be opened (else return: the caller's filter is).

    Opens each footer, so it costs a read per file, on the error path only.
    """
    if isinstance(error, TxnError):
        raise error
    for path in paths:
        with reading_file(path, DATA_FILE_EXPECTED), \
                store.filesystem.open_input_file(store.full_path(path)) as handle:
            pq.ParquetFile(handle).metadata  # noqa: B018 - decoding the footer is the check
    if isinstance(error, OSError) and not isinstance(error, pa.ArrowException):
        raise StorageError(f"reading data files failed: {error}") from error


def scan_file(store: DataStore, path: str, schema: pa.Schema, *, filter: ds.Expression | None,
              columns: Sequence[str], deleted: Positions | None = None) -> tuple[pa.Table, Positions]:
    """The live rows of ``path`` matching ``filter``: ``columns`` of them and their positions.

    Raises:
        ObjectNotFoundError: the data file is gone.
        CorruptMetadataError: it cannot be decoded (with no ``filter``, any decoding error is
            the file's; with one, only errors opening it: the others may be the filter's).
    """
    with reading_file(path, DATA_FILE_EXPECTED):
        fragment = _FORMAT.make_fragment(store.full_path(path), filesystem=store.filesystem)
        metadata = fragment.metadata
        starts = np.concatenate([[0], np.cumsum([metadata.row_group(i).num_rows
                                                 for i in range(metadata.num_row_groups)])])
    if filter is None:
        with reading_file(path, DATA_FILE_EXPECTED):
            return _scan_groups(fragment, starts, schema, None, columns, deleted)
    return _scan_groups(fragment, starts, schema, filter, columns, deleted)


def _scan_groups(fragment: ds.ParquetFileFragment, starts: np.ndarray, schema: pa.Schema,
                 filter: ds.Expression | None, columns: Sequence[str],
                 deleted: Positions | None) -> tuple[pa.Table, Positions]:
    groups = fragment.split_by_row_group(filter, schema=schema) if filter is not None \
        else fragment.split_by_row_group(schema=schema)
    projection = {name: pc.field(name) for name in columns}
    if filter is not None:
        projection[_MATCH] = filter
    tables: list[pa.Table] = []
    positions: list[Positions] = []
    for group in groups:
        index = group.row_groups[0].id
        part = group.to_table(schema=schema, columns=projection, use_threads=False)
        first = int(starts[index])
        keep = np.ones(part.num_rows, dtype=bool)
        if deleted is not None and len(deleted):
            inside = deleted[(deleted >= first) & (deleted < first + part.num_rows)]
            keep[inside - first] = False
        if filter is not None:
            keep &= np.asarray(pc.fill_null(part[_MATCH], False).to_numpy(zero_copy_only=False), dtype=bool)
            part = part.drop_columns([_MATCH])
        if not keep.all():
            part = part.filter(pa.array(keep))
        tables.append(part)
        positions.append(np.flatnonzero(keep).astype(np.int64) + first)
    found = np.concatenate(positions) if positions else np.empty(0, np.int64)
    if not columns:  # concatenating tables without columns would lose their row counts
        return pa.table({"rows": pa.nulls(len(found))}).drop_columns(["rows"]), found
    result_schema = pa.schema([schema.field(name) for name in columns])
    return (pa.concat_tables(tables) if tables else result_schema.empty_table()), found
