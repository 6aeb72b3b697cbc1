"""The live rows of one snapshot with where each one is: its data file and its position in it.

UPDATE and DELETE record the rows they replace as positions per data file (delete deltas), and
positions must mean what metatxn's own reader counts. So this scan reads every file with that
reader (``scan_file``) on the executors, one task per group of files, whatever the file's format:
the table's Parquet files and external segments' Parquet, ORC, CSV and JSON files alike (Spark's
``_metadata.row_index`` exists for Parquet only). Each row carries two more columns, :data:`FILE`
(table-relative path, or an external file's URL) and :data:`POSITION`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from timeline import open_storage

from ..._context import TableContext
from ..._files import DataStore, ExternalReader, check_external, scan_file
from ..._read import snapshot_at
from ..._write import State
from .._types import spark_schema

FILE = "__metatxn_file"
POSITION = "__metatxn_position"


@dataclass(frozen=True)
class _Scan:
    """What each task needs to read its files (pickled to executors)."""

    uri: str
    storage_options: dict[str, Any] | None
    schema: bytes
    partition_by: list[str]
    external_options: dict[str, dict[str, Any]]
    target: bytes


def _scan_task(job: _Scan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    schema = pa.ipc.read_schema(pa.py_buffer(job.schema))
    target = pa.ipc.read_schema(pa.py_buffer(job.target))
    store = DataStore(open_storage(job.uri, job.storage_options),
                      ExternalReader(schema, job.partition_by, job.external_options))
    for batch in batches:
        for path, file_format, deleted in zip(batch["path"].to_pylist(), batch["format"].to_pylist(),
                                              batch["deleted"].to_pylist(), strict=True):
            rows, positions = scan_file(store, path, schema, filter=None, columns=schema.names,
                                        deleted=np.asarray(deleted or [], dtype=np.int64),
                                        file_format=file_format)
            located = rows.cast(target).append_column(FILE, pa.array([path] * rows.num_rows, pa.string()))
            located = located.append_column(POSITION, pa.array(positions, pa.int64()))
            yield from located.to_batches()


def located_rows(spark: Any, context: TableContext, state: State, pruning: ds.Expression | None) -> Any:
    """A DataFrame of the live rows of ``state``'s snapshot (files ``pruning`` can rule out are
    left out), the table's columns then :data:`FILE` and :data:`POSITION`."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    columns = spark_schema(context.schema)
    located = StructType([*columns.fields, StructField(FILE, StringType(), False),
                          StructField(POSITION, LongType(), False)])
    snapshot = snapshot_at(context, state.view, None, state.read_at)
    prefix = context.store.location("")
    listing = []
    for data_file in snapshot.files(pruning):
        path = data_file.path.removeprefix(prefix)
        listing.append((path, data_file.format, state.deltas.positions(path).tolist()))
    if not listing:
        return spark.createDataFrame([], located)
    # Positions are what the job is for: the executors' readers do not know what ADD SEGMENT
    # recorded, so the external files are checked here.
    check_external(context.store, [path for path, _, _ in listing],
                   [file_format for _, file_format, _ in listing])
    job = _Scan(uri=context.uri, storage_options=context.storage_options,
                schema=context.schema.serialize().to_pybytes(), partition_by=list(context.partition_by),
                external_options=dict(context.store.external_reader().options),
                target=to_arrow_schema(columns, timezone="UTC").serialize().to_pybytes())
    files = spark.createDataFrame(listing, "path string, format string, deleted array<bigint>")
    files = files.repartition(min(len(listing), spark.sparkContext.defaultParallelism))
    return files.mapInArrow(functools.partial(_scan_task, job), located)
