"""``txn.spark.read``: Spark's own Parquet scan over exactly the files of a snapshot (and one
scan per format of its external segments, unioned: :mod:`._external`).

The driver resolves the snapshot (no listing of data folders) and prunes files with the column
ranges of the metadata table; Spark then scans exactly those files with its native Parquet
reader (column pruning, row-group and dictionary pushdown, vectorized decoding intact). Rows
deleted by delete deltas are removed inside the scan, by a predicate on ``_metadata.row_index``
and the file's size (a bitmap per file, :mod:`._deleted`), never by a join.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from .. import DataFile, FileReader, InvalidOptionError, open_table
from ._deleted import Deleted, kept_rows
from ._external import external_frames
from ._filters import case_sensitive, to_expression
from ._types import conform, spark_schema
from ._versions import Versions, by_version, projected, versions_of, written_schema
from ._workers import ensure_workers_run_metatxn

#: Spark lists explicitly given paths with a distributed job above this many (default 32);
#: the snapshot already knows its files, so listing them is pure overhead.
_LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_NONE = np.zeros(0, dtype=np.int64)


def _filter_batches(expression: ds.Expression, schema: bytes,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Keep the rows matching ``expression``, evaluated on the table's own types (Spark's Arrow
    types may differ: time zones, units), while the batches keep Spark's types."""
    table_schema = pa.ipc.read_schema(pa.py_buffer(schema))
    for batch in batches:
        typed = pa.Table.from_batches([conform(batch, table_schema)])
        mask = ds.dataset(typed).to_table(columns={"keep": expression})["keep"]
        yield from pa.Table.from_batches([batch]).filter(mask.fill_null(False)).to_batches()


def _glob_escaped(path: str) -> str:
    """Spark reads Parquet paths as glob patterns: a literal path escapes their characters."""
    return "".join("\\" + c if c in "[]{}*?\\" else c for c in path)


def read(spark: Any, uri: str, filter: str | ds.Expression | None = None,
         columns: Sequence[str] | None = None, as_of: str | datetime | None = None, *,
         storage_options: dict[str, Any] | None = None) -> Any:
    """A DataFrame of the table at ``uri`` (as of ``as_of``), deleted rows removed.

    ``filter`` is a SQL predicate string (Spark filters the rows; simple predicates also prune
    files by their column ranges) or a ``pyarrow.compute.Expression`` (prunes files, and the rows
    are filtered with pyarrow on the executors). ``columns`` selects columns.
    """
    ensure_workers_run_metatxn(spark)
    table = open_table(uri, storage_options=storage_options)
    if filter is not None and not isinstance(filter, (str, ds.Expression)):
        raise InvalidOptionError(f"filter must be a SQL predicate string or a "
                                 f"pyarrow.compute.Expression, got {type(filter).__name__}")
    snapshot = table.snapshot(as_of)
    # The snapshot's schema, not the latest: time travel reads the columns of its instant.
    target = snapshot.schema
    schema = spark_schema(target)
    if columns is not None:
        unknown = [c for c in columns if target.get_field_index(c) < 0]
        if unknown or isinstance(columns, str):
            raise InvalidOptionError(f"columns must be a list of table columns; unknown "
                                     f"{unknown or [columns]}, table columns: {target.names}")
    pruning = to_expression(filter, target, case_sensitive=case_sensitive(spark)) if isinstance(filter, str) \
        else filter
    files = snapshot.files(pruning)
    reader = snapshot.file_reader()
    versions = versions_of(table)
    frames = native_frames(spark, target, snapshot.schema_id, versions, reader,
                           [f for f in files if not f.external])
    frames += external_frames(spark, schema, reader, [f for f in files if f.external],
                              snapshot.schema_id, versions)
    frame = functools.reduce(lambda a, b: a.unionByName(b), frames) if frames \
        else spark.createDataFrame([], schema)
    if isinstance(filter, str):
        frame = frame.where(filter)
    elif filter is not None:
        frame = frame.mapInArrow(functools.partial(
            _filter_batches, filter, target.serialize().to_pybytes()), schema)
    return frame.select(*columns) if columns is not None else frame


def count(spark: Any, uri: str, filter: str | ds.Expression | None = None,
          as_of: str | datetime | None = None, *, storage_options: dict[str, Any] | None = None) -> int:
    """The number of live rows of the table at ``uri`` (as of ``as_of``) matching ``filter``.

    Without a filter the answer comes from the metadata table (rows per file less deleted
    positions) and no data file is read, nor any Spark job run; with one it is
    ``read(...).count()``, Spark's count over the pruned files.
    """
    if filter is not None:
        return int(read(spark, uri, filter, as_of=as_of, storage_options=storage_options).count())
    return open_table(uri, storage_options=storage_options).snapshot(as_of).count()


def native_frames(spark: Any, target: pa.Schema, target_id: int, versions: Versions,
                  reader: FileReader, files: Sequence[DataFile]) -> list[Any]:
    """The live rows of the table's own ``files`` as ``target``'s columns: one native scan per
    schema version among them (files of ``target_id`` unprojected), deleted rows removed."""
    frames = []
    for schema_id, group in by_version(files).items():
        written = written_schema(schema_id, target, target_id, versions)
        for part in _apart(group):
            frame = without_deleted(native_scan(spark, spark_schema(written), [f.path for f in part]), [
                Deleted(f.path, f.rows, f.size, reader.deleted_positions(f) if f.delete_files
                        else _NONE) for f in part])
            frames.append(frame if schema_id == target_id else projected(frame, written, target))
    return frames


def _apart(files: Sequence[DataFile]) -> list[Sequence[DataFile]]:
    """``files`` as one scan, or two when files without deletes hold at least a quarter of the
    rows: their scan then needs no predicate (nor row positions) at all."""
    clean = [f for f in files if not f.delete_files]
    if not clean or len(clean) == len(files) or 4 * sum(f.rows for f in clean) < sum(f.rows for f in files):
        return [files]
    return [clean, [f for f in files if f.delete_files]]


def without_deleted(frame: Any, files: Sequence[Deleted]) -> Any:
    """``frame`` (a native Parquet scan of exactly ``files``) without the rows at their deleted
    positions: a predicate of the scan itself (:mod:`._deleted`)."""
    predicate = kept_rows(files)
    return frame if predicate is None else frame.where(predicate)


def native_scan(spark: Any, schema: Any, locations: Sequence[str]) -> Any:
    """Spark's own Parquet scan of exactly these files (no listing job, paths taken literally)."""
    current = int(spark.conf.get(_LISTING_THRESHOLD, "32"))
    if len(locations) >= current:
        spark.conf.set(_LISTING_THRESHOLD, str(len(locations) + 1))
    return spark.read.schema(schema).parquet(*[_glob_escaped(path) for path in locations])


def create_view(spark: Any, name: str, uri: str, *, as_of: str | datetime | None = None,
                storage_options: dict[str, Any] | None = None) -> Any:
    """A temporary view ``name`` over the table, for SQL (``SELECT ... FROM name``).

    The view is pinned to the snapshot it was created at (its file list), which is snapshot
    isolation: create it again to see later commits. Returns the view's DataFrame.
    """
    frame = read(spark, uri, as_of=as_of, storage_options=storage_options)
    frame.createOrReplaceTempView(name)
    return frame
