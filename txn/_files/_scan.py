"""Scanning one data file by row position: for files with delete deltas, and to find the rows a
delete or update matches.

Arrow's dataset scanner does not expose row numbers, so a file is scanned one row group at a
time: the row groups whose statistics can match the filter are decoded, each knows its first
row's position from the footer, and deleted positions are masked out before the filter is
applied. The filter is evaluated as a projection, so only the columns it and the caller need are
read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from metatxn.timeline import CorruptMetadataError, StorageError, TxnError

from .._schema import same_columns, version_projection
from ._deltas import Positions, reading_file
from ._foreign import expected, is_external
from ._storage_io import DataStore
from ._stored import same_stored

_MATCH = "__metatxn_match__"
_FORMAT = ds.ParquetFileFormat()
DATA_FILE_EXPECTED = "a Parquet data file of the table's schema"


def check_schema(path: str, found: pa.Schema, schema: pa.Schema) -> None:
    """Raise :class:`CorruptMetadataError` unless data file ``path``, whose Parquet schema is
    ``found``, holds every column of the table's ``schema`` with its type, or the type Parquet
    stores it as (:mod:`._stored`; Arrow would read a missing column as nulls: another table's
    file must not pass for this one's)."""
    for field in schema:
        index = found.get_field_index(field.name)
        kind = found.field(index).type if index >= 0 else None
        if kind is None or not same_stored(kind, field.type):
            raise CorruptMetadataError(
                path, DATA_FILE_EXPECTED,
                f"column {field.name!r} " + (f"of type {kind}" if kind is not None else "missing")
                + f" (the table's is {field.type}); the file's columns: {found.names[:20]}")


def read_data_file(store: DataStore, path: str, schema: pa.Schema, *,
                   filter: ds.Expression | None = None,
                   columns: Sequence[str] | None = None, file_format: str = "parquet",
                   written: pa.Schema | None = None) -> pa.Table:
    """Read data file ``path`` whole (every page of ``columns``, all by default), then keep the
    rows matching ``filter`` (already checked against ``schema``: any error is the file's).
    ``written``: the schema the file was written with, when not ``schema`` (see :func:`scan_file`).

    Raises:
        ObjectNotFoundError: the data file is gone.
        CorruptMetadataError: it is not a Parquet file of ``schema`` or a page does not decode.
        StorageError: the system refused the read (the file may be fine); ``.path`` names it.
    """
    wanted = list(schema.names if columns is None else columns)
    if is_external(path):
        return scan_file(store, path, schema, filter=filter, file_format=file_format,
                         columns=wanted, written=written)[0]
    with reading_file(path, DATA_FILE_EXPECTED):
        fragment = _fragment(store, path)
        if written is not None and not same_columns(written, schema):
            check_schema(path, fragment.physical_schema, written)
            table = fragment.to_table(schema=written, columns=version_projection(written, schema),
                                      use_threads=False).cast(schema)
            if filter is not None:
                table = table.filter(filter)
            return table.select(wanted)
        check_schema(path, fragment.physical_schema, schema)
        return fragment.to_table(schema=schema, columns=wanted, filter=filter, use_threads=False)


def read_whole_file(store: DataStore, path: str, schema: pa.Schema,
                    columns: Sequence[str]) -> pa.Table:
    """Every row of the table's own data file ``path``, written with ``schema``: ``columns`` of
    it, as ``schema`` has them. One ``ParquetFile.read`` (about half the cost of a dataset
    fragment's scan per small file, which the change feed reads many of); the file's schema is
    checked as every read checks it.

    Raises as :func:`read_data_file` does.
    """
    wanted = pa.schema([schema.field(name) for name in columns])
    with reading_file(path, DATA_FILE_EXPECTED):
        with store.filesystem.open_input_file(store.full_path(path)) as handle:
            parquet = pq.ParquetFile(handle)
            check_schema(path, parquet.schema_arrow, schema)
            table = parquet.read(columns=list(columns), use_threads=False)
        if not table.schema.equals(wanted, check_metadata=True):
            # A stored type (stored_type) or nullability read back otherwise: the table's.
            table = table.cast(wanted) if len(wanted) else table
        return table


def _fragment(store: DataStore, path: str) -> ds.ParquetFileFragment:
    return _FORMAT.make_fragment(store.full_path(path), filesystem=store.filesystem)


def read_files(store: DataStore, paths: Sequence[str], schema: pa.Schema, *,
               written: pa.Schema | None = None, filter: ds.Expression | None = None,
               columns: Sequence[str] | None = None, checked: bool = False) -> pa.Table:
    """The rows of the table's own files ``paths`` (no delete deltas applied) matching
    ``filter`` (over ``schema``'s names), ``columns`` of them, decoded together on every core,
    as ``schema``; ``written``: the version they were all written with, when not ``schema``
    (columns found by id, the projection pushed into the scan, the filter applied after it).
    ``checked``: each file's own schema is checked too (``check_schema``: Arrow would read
    another table's file with a missing column as nulls). Arrow's errors are the caller's to
    name a file with (:func:`raise_for_files`)."""
    version = schema if written is None else written
    dataset = store.dataset(paths, version)
    if written is None or same_columns(written, schema):
        rows = dataset.to_table(filter=filter, columns=None if columns is None else list(columns),
                                use_threads=True)
    else:
        rows = dataset.to_table(columns=version_projection(written, schema),
                                use_threads=True).cast(schema)
        if filter is not None:
            rows = rows.filter(filter)
        if columns is not None:
            rows = rows.select(list(columns))
    if checked:
        relative = {store.full_path(p): p for p in paths}
        for fragment in dataset.get_fragments():
            path = relative[fragment.path]
            with reading_file(path, DATA_FILE_EXPECTED):
                check_schema(path, fragment.physical_schema, version)
    return rows


def check_data_file(store: DataStore, path: str, schema: pa.Schema,
                    file_format: str = "parquet", written: pa.Schema | None = None) -> int:
    """Decode every page of data file ``path`` (one column at a time); return its row count.
    ``written``: the schema the file was written with (checked against it), when not ``schema``.

    Raises as :func:`read_data_file` does.
    """
    schema = schema if written is None else written
    if is_external(path):
        return int(read_data_file(store, path, schema, file_format=file_format).num_rows)
    with reading_file(path, DATA_FILE_EXPECTED):
        fragment = _fragment(store, path)
        check_schema(path, fragment.physical_schema, schema)
        rows: int = fragment.metadata.num_rows
        for name in schema.names:
            read = fragment.to_table(schema=schema, columns=[name], use_threads=False).num_rows
            if read != rows:
                raise CorruptMetadataError(path, DATA_FILE_EXPECTED, f"{read} values of column "
                                           f"{name!r} where the footer says {rows} rows")
    return rows


def raise_for_files(store: DataStore, paths: Sequence[str], schema: pa.Schema,
                    error: BaseException, *, filter: ds.Expression | None = None,
                    columns: Sequence[str] | None = None,
                    formats: Sequence[str] | None = None,
                    written: Sequence[pa.Schema | None] | None = None) -> NoReturn:
    """After a scan of ``paths`` with a filter already checked against ``schema`` failed with
    ``error``: raise a ``TxnError`` naming the data file at fault. ``written``: per path, the
    schema it was written with when not ``schema`` (see :func:`scan_file`).

    The filter is never blamed (it was bound to the schema up front), so each file is read again
    on its own (on the error path only); the first that fails raises its own error. If every
    file reads now, the failure was the storage's: :class:`StorageError`.
    """
    if isinstance(error, TxnError):
        raise error
    for path, file_format, version in zip(paths, formats or ["parquet"] * len(paths),
                                          written or [None] * len(paths), strict=True):
        read_data_file(store, path, schema, filter=filter, columns=columns, file_format=file_format,
                       written=version)
    raise StorageError(f"reading data files failed, then each read on its own: "
                       f"{type(error).__name__}: {error}") from error


def check_external(store: DataStore, paths: Sequence[str], formats: Sequence[str]) -> None:
    """Refuse external files among ``paths`` (of ``formats``) that are not what ADD SEGMENT
    recorded, before a plan relies on their row positions or hands them to another reader
    (Spark's): ``CorruptMetadataError`` naming the file. One open and footer read per external
    file; the table's own files are not opened."""
    for path, file_format in zip(paths, formats, strict=True):
        if is_external(path):
            with reading_file(path, expected(file_format)):
                store.external_reader().check(path, file_format)


#: The rows a batch of :func:`scan_file` holds: Arrow's own scanner default.
_FILE_BATCH = 131_072


def scan_file(store: DataStore, path: str, schema: pa.Schema, *, filter: ds.Expression | None,
              columns: Sequence[str], deleted: Positions | None = None,
              file_format: str = "parquet",
              written: pa.Schema | None = None) -> tuple[pa.Table, Positions]:
    """The live rows of ``path`` matching ``filter``: ``columns`` of them and their positions
    (:func:`scan_file_batches`, concatenated).

    Raises as :func:`scan_file_batches` does.
    """
    batches: list[pa.RecordBatch] = []
    positions: list[Positions] = []
    for batch, found in scan_file_batches(store, path, schema, filter=filter, columns=columns,
                                          deleted=deleted, file_format=file_format,
                                          written=written, batch_size=_FILE_BATCH):
        batches.append(batch)
        positions.append(found)
    found = np.concatenate(positions) if positions else np.empty(0, np.int64)
    result_schema = pa.schema([schema.field(name) for name in columns])
    # Batches (not tables) keep the row count of a result without columns.
    return pa.Table.from_batches(batches, schema=result_schema), found


def scan_file_batches(store: DataStore, path: str, schema: pa.Schema, *,
                      filter: ds.Expression | None, columns: Sequence[str],
                      deleted: Positions | None = None, file_format: str = "parquet",
                      written: pa.Schema | None = None, batch_size: int = _FILE_BATCH,
                      only: Positions | None = None
                      ) -> Iterator[tuple[pa.RecordBatch, Positions]]:
    """The live rows of ``path`` matching ``filter``, in batches of at most ``batch_size`` rows
    before deletes and the filter drop some: each batch with ``columns`` of them and the rows'
    positions in the file. Only one batch of the file is decoded at a time (external segments'
    ORC, CSV and JSON files are read whole: those formats have no row groups to stop at).

    ``written``: the schema (version) the file was written with, when it is not ``schema``:
    its columns are then found by id (``txn._schema.version_projection``) and ``filter``, over
    ``schema``'s names, is applied after the projection (no row group is skipped by it).

    ``filter`` must already be checked against ``schema`` (callers bind it to the schema first),
    so every error while scanning is the file's.

    ``only``: the positions (sorted) of the rows wanted, before ``deleted`` and ``filter`` drop
    some (the change feed's deleted rows); row groups holding none of them are not decoded.

    Raises (when the batch that meets the problem is due):
        ObjectNotFoundError: the data file is gone.
        CorruptMetadataError: it is not a Parquet file of ``schema``, or does not decode.
        StorageError: the system refused the read; ``.path`` names the file.

    ``file_format`` says how to read an external segment's file (a URL key); the table's own
    files are Parquet.
    """
    result_schema = pa.schema([schema.field(name) for name in columns])
    if is_external(path):
        with reading_file(path, expected(file_format)):
            table, found = store.external_reader().scan(
                path, file_format, filter=filter, columns=columns, deleted=deleted, schema=schema,
                written=written)
        if only is not None:
            wanted = np.isin(found, only)
            table, found = table.filter(pa.array(wanted)), found[wanted]
        offset = 0
        for batch in table.to_batches(max_chunksize=batch_size):
            yield _as(batch, result_schema), found[offset:offset + batch.num_rows]
            offset += batch.num_rows
        return
    with reading_file(path, DATA_FILE_EXPECTED):
        fragment = _fragment(store, path)
        metadata = fragment.metadata
        check_schema(path, fragment.physical_schema, schema if written is None else written)
        starts = np.concatenate([[0], np.cumsum([metadata.row_group(i).num_rows
                                                 for i in range(metadata.num_row_groups)])])
        if written is not None and same_columns(written, schema):
            written = None
        parts = _scan_groups(fragment, starts, schema, filter, columns, deleted, written,
                             batch_size, only)
        while True:  # each batch decoded under reading_file: its errors name the file
            try:
                batch, found = next(parts)
            except StopIteration:
                return
            yield _as(batch, result_schema), found


def _as(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema`` (metadata included), which its columns already have."""
    if batch.schema.equals(schema, check_metadata=True):
        return batch
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema) if len(schema) else batch


def _scan_groups(fragment: ds.ParquetFileFragment, starts: np.ndarray, schema: pa.Schema,
                 filter: ds.Expression | None, columns: Sequence[str],
                 deleted: Positions | None, written: pa.Schema | None,
                 batch_size: int, only: Positions | None = None
                 ) -> Iterator[tuple[pa.RecordBatch, Positions]]:
    if written is None:
        groups = fragment.split_by_row_group(filter, schema=schema) if filter is not None \
            else fragment.split_by_row_group(schema=schema)
        projection = {name: pc.field(name) for name in columns}
        if filter is not None:
            projection[_MATCH] = filter
    else:  # an older version's file: every column projected by id, the filter applied after
        groups = fragment.split_by_row_group(schema=written)
        projection = version_projection(written, schema)
    for group in groups:
        first = int(starts[group.row_groups[0].id])
        if only is not None:
            low, high = np.searchsorted(only, [first, int(starts[group.row_groups[0].id + 1])])
            if low == high:
                continue  # none of the wanted rows is in this row group: not decoded
        for part in group.to_batches(schema=schema if written is None else written,
                                     columns=projection, batch_size=batch_size,
                                     use_threads=False):
            if written is not None:
                part = part.cast(schema)
                if filter is not None:
                    part = part.append_column(_MATCH, ds.dataset(part).to_table(
                        columns={_MATCH: filter}, use_threads=False)[_MATCH].combine_chunks())
                part = part.select([*columns, *([_MATCH] if filter is not None else [])])
            keep = np.ones(part.num_rows, dtype=bool)
            if deleted is not None and len(deleted):
                # deleted is sorted: the positions inside this batch are one slice of it
                low, high = np.searchsorted(deleted, [first, first + part.num_rows])
                keep[deleted[low:high] - first] = False
            if only is not None:
                low, high = np.searchsorted(only, [first, first + part.num_rows])
                wanted = np.zeros(part.num_rows, dtype=bool)
                wanted[only[low:high] - first] = True
                keep &= wanted
            if filter is not None:
                keep &= np.asarray(pc.fill_null(part[_MATCH], False).to_numpy(zero_copy_only=False),
                                   dtype=bool)
                part = part.drop_columns([_MATCH])
            if not keep.all():
                part = part.filter(pa.array(keep))
            yield part, np.flatnonzero(keep).astype(np.int64) + first
            first += len(keep)
