"""The live rows of one snapshot with where each one is: its data file and its position in it.

UPDATE and DELETE record the rows they replace as positions per data file (delete deltas), and
positions must mean what metatxn's own reader counts. So this scan reads every file with that
reader (``txn.FileReader``) on the executors, one task per group of files, whatever the file's format:
the table's Parquet files and external segments' Parquet, ORC, CSV and JSON files alike (Spark's
``_metadata.row_index`` exists for Parquet only). Each row carries two more columns, :data:`FILE`
(the file's ``txn.DataFile.path``: its location, or an external file's URL) and
:data:`POSITION`. The executors read through the snapshot's public ``txn.FileReader``.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from ... import DataFile, FileReader, Snapshot
from .._types import spark_schema

FILE = "__metatxn_file"
POSITION = "__metatxn_position"


def _scan_task(reader: FileReader, target: bytes,
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    wanted = pa.ipc.read_schema(pa.py_buffer(target))
    for batch in batches:
        for pickled in batch["file"].to_pylist():
            data_file = pickle.loads(pickled)
            rows = reader.read(data_file, positions=POSITION)
            located = rows.drop_columns([POSITION]).cast(wanted).append_column(
                FILE, pa.array([data_file.path] * rows.num_rows, pa.string()))
            located = located.append_column(POSITION, rows[POSITION])
            yield from located.to_batches()


def located_rows(spark: Any, snapshot: Snapshot, pruning: ds.Expression | None,
                 keep: Callable[[DataFile], bool] | None = None) -> Any:
    """A DataFrame of the live rows of ``snapshot`` (files ``pruning`` can rule out are left
    out, and files ``keep`` says no to), the table's columns then :data:`FILE` (the file's
    ``DataFile.path``) and :data:`POSITION`."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    columns = spark_schema(snapshot.schema)
    located = StructType([*columns.fields, StructField(FILE, StringType(), False),
                          StructField(POSITION, LongType(), False)])
    files = [f for f in snapshot.files(pruning) if keep is None or keep(f)]
    if not files:
        return spark.createDataFrame([], located)
    reader = snapshot.file_reader()
    # Positions are what the job is for: a changed external file fails the plan here, before
    # any task runs (the tasks' reads check it again).
    for data_file in files:
        reader.check(data_file)
    target = to_arrow_schema(columns, timezone="UTC").serialize().to_pybytes()
    listing = spark.createDataFrame([(pickle.dumps(f),) for f in files], "file binary")
    listing = listing.repartition(min(len(files), spark.sparkContext.defaultParallelism))
    return listing.mapInArrow(functools.partial(_scan_task, reader, target), located)
