"""``txn.spark.read_changes``: the rows a window of instants changed, read by Spark's executors.

The driver plans the window (``Table.changes(...).parts()``: which instants, which of their files
and delete deltas; no data is read there); each task unpickles the ``ChangeScanner`` and one
part, and reads that part's rows with ``ChangeScanner.read_part``, the same code that
``ChangeScanner.to_arrow`` runs. A part is one instant, or one file of an insert-only instant
(design/changes.md), so the work is spread as evenly as the window allows and costs what the
window changed, not the table.

Spark does not scan the files natively here: a change row needs what the instant deleted
(delete deltas and the rows they point at, pre-images of an upsert) beside what it wrote, which
is the change feed's logic, not a plain Parquet scan.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .. import InvalidOptionError, open_table
from ._types import conform, spark_schema
from ._workers import ensure_workers_run_metatxn

if TYPE_CHECKING:
    from .. import ChangeScanner


def arrow_target(schema: Any) -> pa.Schema:
    """The Arrow schema Spark's Arrow path expects for a Spark ``schema`` (timestamps as UTC
    microseconds)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def _read_parts(scanner: ChangeScanner, target: bytes,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: each input row is a pickled ``ChangePart``; yield its change rows in Spark's
    Arrow types."""
    wanted = pa.ipc.read_schema(pa.py_buffer(target))
    for batch in batches:
        for pickled in batch["part"].to_pylist():
            for rows in scanner.read_part(pickle.loads(pickled)):
                yield conform(rows, wanted)


def change_frame(spark: Any, scanner: ChangeScanner, parts: Sequence[Any] | None = None) -> Any:
    """A DataFrame of ``scanner``'s change rows (of ``parts``, all of them by default): one task
    per part, up to the session's parallelism."""
    schema = spark_schema(scanner.schema)
    parts = scanner.parts() if parts is None else parts
    if not parts:
        return spark.createDataFrame([], schema)
    listing = spark.createDataFrame([(pickle.dumps(part),) for part in parts], "part binary")
    listing = listing.repartition(min(len(parts), spark.sparkContext.defaultParallelism))
    target = arrow_target(schema).serialize().to_pybytes()
    return listing.mapInArrow(functools.partial(_read_parts, scanner, target), schema)


def read_changes(spark: Any, uri: str, start: str | datetime, end: str | datetime | None = None, *,
                 columns: Sequence[str] | None = None,
                 storage_options: dict[str, Any] | None = None) -> Any:
    """A DataFrame of the rows changed by the instants of the table at ``uri`` that completed in
    ``(start, end]`` (``Table.changes``): the table's columns (or ``columns``), then
    ``_change_type``, ``_commit_instant`` and ``_commit_time``.

    ``start`` and ``end`` take the forms of ``Table.changes``: an instant time (its completion
    is the bound), a ``datetime``, an ISO-8601 string, or ``"earliest"`` for ``start``; ``end``
    None is the latest completed instant now. The window is planned here, once: the DataFrame
    reads those instants' rows whenever it is evaluated, however the table moved since.

    Raises:
        InvalidOptionError: a bad form of ``start`` or ``end``, ``end`` before ``start``, or
            ``columns`` that are not the table's.
        SnapshotExpiredError: ``start`` is before what cleaning kept (naming the oldest
            instant still readable).
    """
    if columns is not None and (isinstance(columns, str) or
                                not all(isinstance(c, str) for c in columns)):
        raise InvalidOptionError(f"columns must be a list of table column names, got {columns!r}")
    ensure_workers_run_metatxn(spark)
    table = open_table(uri, storage_options=storage_options)
    scanner = table.changes(start, end, columns=list(columns) if columns is not None else None)
    return change_frame(spark, scanner)
