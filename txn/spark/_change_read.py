"""``spark.read.format("metatxn").option("startingInstant", s)``: a batch read of changes.

Delta's ``readChangeFeed`` batch read, on the change feed of ``Table.changes``: the window
``(startingInstant, endingInstant]`` (end: the latest completed instant when the read is
planned), planned by the format's planning worker, one partition per ``ChangePart``, each read
in its task by the pickled ``ChangeScanner``. ``readChangeFeed=true`` gives the change rows with
the change columns; without it, the rows the window's commits added (inserts and update
post-images), the table's columns only: a Hudi incremental query's answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, InputPartition

import txn

from .. import InvalidOptionError, open_table
from ._change_options import LATEST, ChangeOptions
from ._changes import arrow_target
from ._stream_source import ADDED, NO_BOUND, ChangePartition, moment
from ._types import conform


def change_schema(table: txn.Table, options: ChangeOptions) -> pa.Schema:
    """The Arrow schema of a change read of ``table``: the latest schema's columns, and the
    change columns with ``readChangeFeed``. The window's bounds are checked on the way (their
    forms, their order, and that cleaning kept them), so a bad one fails the read's definition."""
    if options.starting not in (None, LATEST):
        table.changes(options.starting, options.ending)
    snapshot = table.snapshot()
    if not options.change_feed:
        return snapshot.schema
    # An empty window at the latest bound: the change feed's own schema, nothing planned.
    return table.changes(moment(snapshot.completed_at or NO_BOUND)).schema


def added_rows() -> pc.Expression:
    """The change rows of what commits added (a read without ``readChangeFeed``)."""
    return pc.field("_change_type").isin(list(ADDED))


class ChangeReader(DataSourceReader):
    """The batch read of one window of changes."""

    def __init__(self, uri: str, options: ChangeOptions, schema: Any) -> None:
        if options.starting is None:
            raise InvalidOptionError(
                "a batch read of changes from format('metatxn') needs option startingInstant (an "
                "instant time, an ISO-8601 timestamp or 'earliest'); without it a read is of a "
                "snapshot (option asOf)")
        if options.starting == LATEST:
            raise InvalidOptionError("a batch read of changes starting at 'latest' reads nothing; "
                                     "give startingInstant an instant time, a timestamp or 'earliest'")
        if options.max_files is not None or options.max_rows is not None:
            raise InvalidOptionError("maxFilesPerTrigger and maxRowsPerTrigger limit a stream's "
                                     "micro-batches (spark.readStream); a batch read takes neither")
        self._target = arrow_target(schema)
        self._uri = uri
        self._options = options
        self._start: str = options.starting

    def partitions(self) -> list[InputPartition]:
        # Planned here and not kept: PySpark pickles this reader into every task with ``read``.
        filter = None if self._options.change_feed else added_rows()
        scanner = open_table(self._uri).changes(self._start, self._options.ending, filter=filter)
        # Spark wants at least one partition of a batch read: an empty window reads one of nothing.
        return [ChangePartition(scanner, part) for part in scanner.parts()] or [ChangePartition(None, None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ChangePartition)
        if partition.scanner is None:
            return
        for batch in partition.scanner.read_part(partition.part):
            yield conform(batch, self._target)
