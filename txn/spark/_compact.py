"""``txn.spark.compact``: the same compaction as ``Table.compact``, rewritten by Spark's executors.

The driver plans (which segments, the new id) and commits exactly as a local compaction does;
only the rewrite moves: Spark scans the source files natively, drops the rows their delete deltas
delete (an anti-join on file name and row index, as ``txn.spark.read`` does), range-partitions
the rows by ``sort_by`` into one task per output file group, and each task writes its files and
record-index log parts for the instant (the write job of ``txn.spark.write``). A segment larger
than one machine's memory is therefore compacted in pieces no larger than a file.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

from .._commit import Compaction, Pending, Written
from .._context import TableContext, open_context, target_file_bytes
from .._files import is_external
from .._read import FileReader
from .._results import Commit, DataFile
from .._segments import compact as compact_table
from ._external import external_frames
from ._internal_job import run_job
from ._read import native_scan, without_deleted
from ._types import spark_schema
from ._workers import ensure_workers_run_metatxn


def compact(spark: Any, uri: str, kind: str = "minor", *,
            segments: Sequence[str | int] | None = None,
            storage_options: dict[str, Any] | None = None) -> Commit | None:
    """Compact the table at ``uri`` with the rewrite on Spark's executors; the same selection,
    naming, conflicts and commit as :meth:`txn.Table.compact` (returns its commit, or None when
    there is nothing to compact)."""
    ensure_workers_run_metatxn(spark)
    context = open_context(uri, storage_options)
    return compact_table(context, kind, segments=segments,
                         rewrite=lambda change: _rewrite(spark, context, change))


def _rewrite(spark: Any, context: TableContext, change: Compaction) -> Callable[[Pending], Written]:
    merge = change.merge
    store = context.store
    schema = spark_schema(context.schema)
    native = [f for f in merge.files if not is_external(f)]
    frames = [without_deleted(native_scan(spark, schema, [store.location(f) for f in native]),
                              [(store.location(f), change.current.positions(f))
                               for f in native if change.current.paths(f)])] if native else []
    external = [f for f in merge.files if is_external(f)]
    if external:  # CUSTOM compaction of external segments: their rows become a native segment
        # The compaction's own read state, not a snapshot's: its reader and files are made here.
        reader = FileReader(uri=context.uri, storage_options=context.storage_options,
                            schema=context.schema, partition_by=context.partition_by, store=store,
                            deltas=change.current)
        frames += external_frames(spark, schema, reader, [
            DataFile(f, "", 0, 0, merge.formats[f], delete_files=tuple(
                store.location(d) for d in change.current.paths(f)), external=True)
            for f in external])
    frame = functools.reduce(lambda a, b: a.unionByName(b), frames)
    # Parquet is several times smaller than the Arrow memory a file's target counts.
    tasks = max(1, math.ceil(3 * merge.size / target_file_bytes(context.properties)))
    if context.sort_by:
        frame = frame.repartitionByRange(tasks, *context.sort_by).sortWithinPartitions(*context.sort_by)
    else:
        frame = frame.repartition(tasks)
    return lambda pending: run_job(context, frame, pending, {}, change.current)

