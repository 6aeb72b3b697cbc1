"""External segments in Spark: one Spark scan per format (and folder) over exactly the snapshot's
pruned files, unioned with the table's own Parquet scan.

CarbonData's design for mixed-format tables: each format is read by Spark's own file format
(``spark.read.parquet/orc/csv/json`` on an explicit file list), so column pruning, filter
pushdown and vectorised Parquet and ORC decoding stay. A partitioned table's files are read with
``basePath`` at the folder that was added, so Spark takes the partition columns from the folder
names with the table's types; an unpartitioned table's with ``recursiveFileLookup``, so Spark
infers no partition column from folder names that happen to look like one.

An external file with deleted rows is not given to Spark's scan: CSV and JSON scans have no row
index, and positions must mean what metatxn's own reader counted. Those files (few: a delete
touches the files of the rows it deletes) are read on the executors by metatxn's external reader,
which drops the deleted positions, through ``mapInArrow``; so are CSV files whose header names
the columns in another order or with others (Spark's CSV scan reads columns by position).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from .._files import CSV_EXACT_HEADER, CSV_OTHER_HEADER, ExternalReader, csv_header, file_schema

#: Bytes of a CSV file's start read to decide whether its first line is a header.
_HEAD_BYTES = 64 * 1024


def _folder_of(location: str, levels: int) -> str:
    """The folder an external file was added from: its parent, less ``levels`` partition folders."""
    folder = posixpath.dirname(location)
    for _ in range(levels):
        folder = posixpath.dirname(folder)
    return folder


def _spark_path(location: str) -> str:
    """Spark's spelling of a location (``file:///x`` is ``file:/x`` to Hadoop), glob-escaped:
    Spark reads file paths as glob patterns."""
    if location.startswith("file://"):
        location = "file:" + location.removeprefix("file://")
    return "".join("\\" + c if c in "[]{}*?\\" else c for c in location)


def _read_deleted(reader_state: tuple[bytes, list[str], dict[str, dict[str, Any]]], target: bytes,
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: each input row names an external file, its format and deleted positions;
    yield its live rows as the table's columns in Spark's types."""
    schema_bytes, partition_by, options = reader_state
    schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
    wanted = pa.ipc.read_schema(pa.py_buffer(target))
    reader = ExternalReader(schema, partition_by, options)
    for batch in batches:
        for location, file_format, positions in zip(batch["location"].to_pylist(),
                                                    batch["format"].to_pylist(),
                                                    batch["positions"].to_pylist(), strict=True):
            rows, _ = reader.scan(location, file_format, filter=None, columns=schema.names,
                                  deleted=np.asarray(positions, dtype=np.int64))
            yield from rows.cast(wanted).to_batches()


def external_frames(spark: Any, spark_schema: Any, reader: ExternalReader,
                    files: Sequence[tuple[str, str, np.ndarray]]) -> list[Any]:
    """DataFrames of the live rows of external files ``(location, format, deleted positions)``,
    columns in the table's order and Spark's types of ``spark_schema``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    names = reader.schema.names
    levels = len(reader.partition_by)
    groups: dict[tuple[str, str, str], list[str]] = {}
    deleted: list[tuple[str, str, list[int]]] = []
    for location, file_format, positions in files:
        if len(positions):
            deleted.append((location, file_format, [int(p) for p in positions]))
            continue
        header = _csv_header(reader, location) if file_format == "csv" else ""
        if header == CSV_OTHER_HEADER:  # columns by name: Spark's CSV scan reads by position
            deleted.append((location, file_format, []))
            continue
        base = _folder_of(location, levels) if levels else ""
        groups.setdefault((file_format, base, header), []).append(location)
    frames = []
    for (file_format, base, header), locations in sorted(groups.items()):
        scan = spark.read.schema(spark_schema).format(file_format)
        scan = scan.option("basePath", _spark_path(base)) if levels else \
            scan.option("recursiveFileLookup", "true")
        if file_format == "csv":
            scan = scan.option("header", str(header == CSV_EXACT_HEADER).lower())
        frames.append(scan.load([_spark_path(location) for location in locations]).select(*names))
    if deleted:
        target = to_arrow_schema(spark_schema, timezone="UTC")
        listing = spark.createDataFrame(
            deleted, "location string, format string, positions array<bigint>").repartition(
                min(len(deleted), spark.sparkContext.defaultParallelism))
        state = (reader.schema.serialize().to_pybytes(), list(reader.partition_by),
                 dict(reader.options))
        frames.append(listing.mapInArrow(
            lambda batches: _read_deleted(state, target.serialize().to_pybytes(), batches),
            spark_schema))
    return frames


def _csv_header(reader: ExternalReader, location: str) -> str:
    with reader.open(location) as handle:
        head = handle.read(_HEAD_BYTES)
    return csv_header(head, file_schema(reader.schema, reader.partition_by))
