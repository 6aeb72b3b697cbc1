"""Overwrite: the whole table, or the partitions it names and those its rows go to."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import msgspec
import numpy as np
import pyarrow as pa

from metatxn.indexes import SCHEMAS, SegmentEntry, SegmentStatus, TableVersion, live
from metatxn.timeline import CommitConflictError, TimelineView

from ..._context import (
    ACTION_OF,
    DATA_ACTIONS,
    LATEST_PARTITIONS,
    CommitMetadata,
    TableContext,
    delete_compaction_threshold,
)
from ..._files import (
    DeltaStatus,
    FileStatus,
    LiveDeltas,
    Positions,
    canonical_partition,
    partition_renames,
    renamed_partition,
    stage_deletes,
)
from ..._results import Operation
from .. import _conflicts
from .._protocol import Pending
from ._base import (
    NEW_SEGMENT,
    Allocation,
    DataWrite,
    LockPolicy,
    Recorded,
    Written,
    added,
    finish_phase,
    write_rows,
)


@dataclass(kw_only=True)
class Overwrite(DataWrite):
    """``overwrite``: new rows replace every live row (``partitions`` None), or those of the
    partitions it replaces (the Hive paths in ``partitions`` and those its rows go to).

    It reads nothing before it begins (``read_at`` None): what it replaces is read under the
    lock at commit. Segments: one new (no rows: an empty one, emptying the table). Lock:
    heartbeat (its rows are unbounded). Admission: a producer batch committed already.
    Conflicts: a whole-table overwrite with every data commit but a compaction that completed
    after it began (it would silently replace it); a partition-scoped one with those that
    added files to, deleted rows of or removed files of a partition it replaces. A compaction
    never fails it (it only moved rows the overwrite replaces). Records: its files and
    segment; the replaced files (and their deltas) tombstoned, the segments left without live
    rows ``Marked for Delete``, and the replaced rows of segments that keep rows elsewhere
    deleted by delete deltas written under the lock. An ``alter_table`` meanwhile is no
    conflict (its files keep their version); a merge overwrite that creates a version loses to
    any version completed since it began (``SchemaChangedError``).
    """

    operation: Operation = Operation.OVERWRITE
    #: The new rows (None: written elsewhere, by the driver's ``written_by``).
    rows: Iterable[pa.RecordBatch] | None = None
    partitions: frozenset[str] | None = None

    def allocation(self, *, elsewhere: bool = False) -> Allocation:
        return NEW_SEGMENT

    def lock_policy(self, *, elsewhere: bool = False) -> LockPolicy:
        return LockPolicy.HEARTBEAT

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        assert self.rows is not None
        written = Written()
        written.statuses, new = write_rows(context, pending, self.rows, schema=self.written_schema(context))
        return finish_phase(context, pending, written, [new] if new is not None else [], {},
                            LiveDeltas(context.store, {}))

    def check(self, context: TableContext, view: TimelineView, pending: Pending, written: Written) -> None:
        self.check_version(context, view, pending)
        if self.partitions is not None:
            canonical = _canonical(context, context.metadata_at(view, None, (SCHEMAS,)).versions)
            _conflicts.check_partitions(context, view, instant_time=pending.instant.time,
                                        partitions=self._scope(written.statuses, canonical),
                                        canonical=canonical)
            return
        concurrent = _concurrent_data_commits(context, view, pending.instant.time)
        if concurrent:
            raise CommitConflictError(
                f"overwrite {pending.instant.time} conflicts with commit(s) {concurrent}, "
                "which completed after it began and would be silently replaced\n"
                "Help: rerun the overwrite against the new state of the table"
            )

    def _scope(self, statuses: Sequence[FileStatus], canonical: Callable[[str], str]) -> set[str]:
        assert self.partitions is not None
        return set(self.partitions) | {canonical(s.partition) for s in statuses}

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        done = added(context, pending, written, self.written_schema(context).schema)
        current = context.metadata_at(view, None, LATEST_PARTITIONS)
        assert current.files is not None and current.segments is not None
        previous = live(current.files)
        deltas = LiveDeltas.of(context.store, current.deletes)
        if self.partitions is not None:
            canonical = _canonical(context, current.versions)
            removed_files, dropped, marked, rows, emptied = _partition_replacement(
                context, pending, self._scope(written.statuses, canonical), canonical, previous,
                deltas, current.segments)
            done.deltas_added = done.deltas_added + emptied
        else:
            removed_files = previous["path"].to_pylist()
            dropped = [path for file in removed_files for path in deltas.paths(file)]
            rows = sum(previous["rows"].to_pylist()) - sum(deltas.rows(file) for file in removed_files)
            marked = [msgspec.structs.replace(entry, status=SegmentStatus.MARKED_FOR_DELETE)
                      for entry in current.segments.values() if entry.is_live]
        done.removed_files = removed_files
        done.removed_deltas += dropped
        done.segments += marked
        done.rows_deleted = rows
        return done


def _canonical(context: TableContext, versions: Mapping[int, TableVersion] | None) -> Callable[[str], str]:
    """Partition paths as the writer names them now: folders written under an older version
    (``day=d1`` before ``day`` became ``date``) by the current names, so an overwrite of a
    partition finds, and conflicts with, files of every version."""
    renames = partition_renames(context.schemas_at(versions).values(), context.schema,
                                context.partition_by)
    return functools.lru_cache(maxsize=None)(
        lambda p: canonical_partition(renamed_partition(p, renames), context.schema))


def _concurrent_data_commits(context: TableContext, view: TimelineView, began: str) -> list[str]:
    """Data commits an overwrite would silently replace. A compaction only moved rows that the
    overwrite replaces anyway (it reads the live files under the lock), so it does not count:
    a table service never fails the user's overwrite. Nor does an ``alter_table``: it changed
    no row, and the overwrite's files keep the version they were written with (its commit
    metadata is read only when such a commit completed meanwhile)."""
    return [i.time for i in view.completed_after(began)
            if i.action in DATA_ACTIONS and i.action != ACTION_OF[Operation.COMPACT]
            and context.timeline.read_metadata(i, CommitMetadata).operation != Operation.ALTER_TABLE]


def _partition_replacement(context: TableContext, pending: Pending, scope: set[str],
                           canonical: Callable[[str], str], previous: pa.Table, deltas: LiveDeltas,
                           entries: Mapping[str, SegmentEntry]) -> tuple[
                               list[str], list[str], list[SegmentEntry], int, list[DeltaStatus]]:
    """A partition-scoped overwrite: the live rows of the partitions it replaces (``scope``)
    are replaced. A segment with live rows there and none elsewhere is marked for delete, its
    files removed; a segment that keeps rows elsewhere stays, and its rows in the replaced
    partitions are deleted by delete deltas written here, so a segment's recorded rows stay
    those of its live files. Segments with no live row in them are left as they are. Returns
    (files removed, their deltas and those replaced, segments marked, live rows replaced,
    delete deltas written)."""
    by_segment: dict[str, list[tuple[str, int, bool]]] = {}
    for path, segment, rows, partition in zip(
            previous["path"].to_pylist(), previous["segment"].to_pylist(), previous["rows"].to_pylist(),
            previous["partition"].to_pylist(), strict=True):
        inside = canonical(partition) in scope
        by_segment.setdefault(segment, []).append((path, rows - deltas.rows(path), inside))
    removed_files: list[str] = []
    emptied: dict[str, Positions] = {}
    marked: list[SegmentEntry] = []
    replaced_rows = 0
    for segment, files in by_segment.items():
        replaced_rows += sum(live_rows for _, live_rows, inside in files if inside)
        if not any(inside and live_rows for _, live_rows, inside in files):
            continue
        if all(inside or not live_rows for _, live_rows, inside in files):
            removed_files += [path for path, _, _ in files]
            entry = entries.get(segment)
            if entry is not None and entry.is_live:
                marked.append(msgspec.structs.replace(entry, status=SegmentStatus.MARKED_FOR_DELETE))
            continue
        for path, live_rows, inside in files:
            if inside and live_rows:
                total = live_rows + deltas.rows(path)
                emptied[path] = np.setdiff1d(np.arange(total, dtype=np.int64), deltas.positions(path))
    removed_deltas = [path for file in removed_files for path in deltas.paths(file)]
    written, replaced = stage_deletes(context.store, pending.instant.time, emptied, deltas,
                                      delete_compaction_threshold(context.properties))
    return removed_files, removed_deltas + replaced, marked, replaced_rows, written
