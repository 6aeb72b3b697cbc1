"""External segments in Spark: one Spark scan per format (and folder) over exactly the snapshot's
pruned files, unioned with the table's own Parquet scan.

CarbonData's design for mixed-format tables: each columnar format is read by Spark's own file
format (``spark.read.parquet/orc`` on an explicit file list), so column pruning, filter
pushdown and vectorised decoding stay. A partitioned table's files are read with
``basePath`` at the folder that was added, so Spark takes the partition columns from the folder
names with the table's types; an unpartitioned table's with ``recursiveFileLookup``, so Spark
infers no partition column from folder names that happen to look like one.

An external file with deleted rows is not given to Spark's scan: JSON scans have no row index,
and positions must mean what metatxn's own reader counted. Those files (few: a delete touches
the files of the rows it deletes) are read on the executors by the snapshot's public
``txn.FileReader``, which drops the deleted positions, through ``mapInArrow``; so are CSV and
JSON files (Spark's text dialects are not pyarrow's: one reader makes the values, the
statistics and the keys agree) and files below a partition folder whose name holds an escape
(Spark decodes ``%C3%BC`` byte by byte).
"""

from __future__ import annotations

import functools
import pickle
import posixpath
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from .. import DataFile, FileReader
from ._types import quoted
from ._types import spark_schema as to_spark
from ._versions import Versions, projected, written_schema

#: Formats whose files Spark scans itself. CSV and JSON are read by metatxn's reader: Spark's
#: text dialects (CSV escapes, null and header rules; JSON timestamp and number parsing) could
#: read other values than those the statistics and the record index were made from, and a text
#: scan has nothing vectorised to lose.
_SPARK_SCANS = frozenset({"parquet", "orc"})


def _folder_of(location: str, levels: int) -> str:
    """The folder an external file was added from: its parent, less ``levels`` partition folders."""
    folder = posixpath.dirname(location)
    for _ in range(levels):
        folder = posixpath.dirname(folder)
    return folder


def _spark_location(location: str) -> str:
    """Spark's spelling of a location: ``file:///x`` is ``file:/x`` to Hadoop."""
    return "file:" + location.removeprefix("file://") if location.startswith("file://") else location


def _spark_path(location: str) -> str:
    """A file's location for Spark's scan, glob-escaped: Spark reads file paths as patterns."""
    return "".join("\\" + c if c in "[]{}*?\\" else c for c in _spark_location(location))


def _read_by_metatxn(reader: FileReader, target: bytes,
                     batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: each input row is a pickled ``DataFile``; yield its live rows as the
    table's columns in Spark's types."""
    wanted = pa.ipc.read_schema(pa.py_buffer(target))
    for batch in batches:
        for pickled in batch["file"].to_pylist():
            yield from reader.read(pickle.loads(pickled)).cast(wanted).to_batches()


def external_frames(spark: Any, spark_schema: Any, reader: FileReader, files: Sequence[DataFile],
                    target_id: int, versions: Versions) -> list[Any]:
    """DataFrames of the live rows of external ``files`` (of ``reader``'s snapshot, whose schema
    is version ``target_id``), columns in the table's order and Spark's types of
    ``spark_schema``. Spark scans one group per format, folder and schema version, by that
    version's names, projected to the table's by column id (:mod:`._versions`); the reader
    projects the files it reads itself."""
    from pyspark.sql.pandas.types import to_arrow_schema

    target_schema = reader.schema
    levels = len(reader.partition_by)
    # Spark's scans neither know nor check what ADD SEGMENT recorded: the driver does, once per
    # file, when it plans the job (a file changed after that is Spark's to read as it is).
    for data_file in files:
        reader.check(data_file)
    groups: dict[tuple[str, str, int], list[str]] = {}
    by_reader: list[tuple[bytes]] = []
    for data_file in files:
        location, file_format = data_file.path, data_file.format
        if data_file.delete_files or file_format not in _SPARK_SCANS or (
                levels and _escaped(location, levels)):
            by_reader.append((pickle.dumps(data_file),))
            continue
        base = _folder_of(location, levels) if levels else ""
        groups.setdefault((file_format, base, data_file.schema_id), []).append(location)
    frames = []
    for (file_format, base, schema_id), locations in sorted(groups.items()):
        written = written_schema(schema_id, target_schema, target_id, versions)
        scan = spark.read.schema(spark_schema if written is target_schema else to_spark(written))
        scan = scan.format(file_format)
        # basePath is a path, not a pattern: unlike the files, it is not glob-escaped.
        scan = scan.option("basePath", _spark_location(base)) if levels else \
            scan.option("recursiveFileLookup", "true")
        frame = scan.load([_spark_path(location) for location in locations]).select(
            *[quoted(name) for name in written.names])
        frames.append(frame if written is target_schema else projected(frame, written, target_schema))
    if by_reader:
        target = to_arrow_schema(spark_schema, timezone="UTC").serialize().to_pybytes()
        listing = spark.createDataFrame(by_reader, "file binary").repartition(
            min(len(by_reader), spark.sparkContext.defaultParallelism))
        frames.append(listing.mapInArrow(functools.partial(_read_by_metatxn, reader, target),
                                         spark_schema))
    return frames


def _escaped(location: str, levels: int) -> bool:
    """Whether a partition folder name of ``location`` holds an escape (``%C3%BC``): Spark decodes
    escapes byte by byte, so it would read another value than metatxn recorded."""
    folders = posixpath.dirname(location).split("/")[-levels:]
    return any("%" in folder for folder in folders)


