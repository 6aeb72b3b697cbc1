"""``txn.spark.compact``: the same compaction as ``Table.compact``, rewritten by Spark's executors.

Built on the public two-phase compaction (``Table.begin_compaction`` -> ``txn.PendingCompaction``):
the driver plans and begins each round exactly as a local compaction does (which segments, the
new id, the admission) and commits it under the same conflict rule; only the rewrite moves:
Spark scans the source files natively, drops the rows their delete deltas delete (a predicate on
file name and row index, as ``txn.spark.read`` does), range-partitions the rows by ``sort_by``
into one task per output file group, and each task writes its files and record-index log parts
for the instant (the write job of ``txn.spark.write``). A segment larger than one machine's
memory is therefore compacted in pieces no larger than a file.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from .. import Commit, CompactionKind, PendingCompaction, Table, open_table
from ._external import external_frames
from ._read import native_frames
from ._types import spark_schema
from ._versions import versions_of
from ._workers import ensure_workers_run_metatxn
from ._write import run_job


def compact(spark: Any, uri: str, kind: str = "minor", *,
            segments: Sequence[str | int] | None = None,
            storage_options: dict[str, Any] | None = None) -> Commit | None:
    """Compact the table at ``uri`` with the rewrite on Spark's executors; the same selection,
    naming, conflicts and commit as :meth:`txn.Table.compact` (returns its commit, or None when
    there is nothing to compact)."""
    ensure_workers_run_metatxn(spark)
    table = open_table(uri, storage_options=storage_options)
    last: Commit | None = None
    while True:  # the rounds Table.compact runs: MINOR and the hand-off go on while one begins
        pending = table.begin_compaction(kind, segments=segments)
        if pending is None:
            return last
        with pending:
            last = pending.commit(run_job(table, _rows(spark, table, pending), pending))
        if pending.kind not in (CompactionKind.MINOR, CompactionKind.CLOSE_STREAMING):
            return last


def _rows(spark: Any, table: Table, pending: PendingCompaction) -> Any:
    """The sources' live rows as one DataFrame, partitioned (and sorted) for the write job."""
    files = pending.files()
    reader = pending.file_reader()
    # Rewritten to the current schema: files of older versions are read by column id.
    target, target_id = reader.schema, pending.ticket.schema_id
    versions = versions_of(table)
    frames = native_frames(spark, target, target_id, versions, reader, [f for f in files if not f.external])
    # CUSTOM compaction of external segments: their rows become a native segment.
    frames += external_frames(spark, spark_schema(target), reader, [f for f in files if f.external],
                              target_id, versions)
    frame = functools.reduce(lambda a, b: a.unionByName(b), frames)
    # Parquet is several times smaller than the Arrow memory a file's target counts.
    tasks = max(1, math.ceil(3 * pending.size / pending.ticket.target_file_bytes))
    if table.sort_by:
        frame = frame.repartitionByRange(tasks, *table.sort_by).sortWithinPartitions(*table.sort_by)
    else:
        frame = frame.repartition(tasks)
    return frame
