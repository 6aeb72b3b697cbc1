"""Compaction: segments rewritten as one (``x.1``), and a streaming segment's small files merged."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec
import pyarrow as pa

from metatxn.indexes import SegmentEntry, SegmentStatus, segment_sort_key
from metatxn.timeline import TimelineView, TxnError

from ..._context import TableContext
from ..._files import LiveDeltas
from ..._results import Operation
from .. import _conflicts
from .._protocol import Pending
from ._base import Allocation, DataWrite, LockPolicy, Recorded, Written, added, finish_phase, write_rows


@dataclass(frozen=True)
class Merge:
    """What a compaction replaces, as read from the snapshot it compacts."""

    kind: str
    #: The segment the sources merge into (``x.1``, ``x.2``, ...).
    target: str
    #: The source segments as read (all ``Success``).
    sources: dict[str, SegmentEntry]
    #: Their live data files, and the live delete deltas of those files.
    files: list[str]
    deltas: list[str]
    #: Their live rows: what the compaction rewrites.
    rows: int
    #: The bytes of those data files.
    size: int = 0
    #: The format of each data file (external segments' files are not all Parquet).
    formats: Mapping[str, str] = field(default_factory=dict)


@dataclass(kw_only=True)
class Compaction(DataWrite):
    """``compact`` (a table service): the live rows of ``merge``'s sources rewritten, sorted, as
    segment ``merge.target``; the sources become ``Compacted``.

    Segments: the target, named. Lock: heartbeat. Admission: ``admission`` (no running write
    holds a source). Conflicts (``_conflicts.check_merge``): a data commit completed after
    ``read_at`` that deleted rows of or removed a source file (delete, update, upsert, DELETE
    SEGMENT, overwrite) or replaced a source segment (another compaction) wins; the compaction
    fails and writes nothing. Appends and ADD SEGMENT make new segments and never conflict. The
    other way round, a row write that only overlapped a compaction is planned again, never
    failed. Records: the target's files, statistics, entry and index entries; the sources'
    files and deltas tombstoned, the sources ``Compacted`` with ``merged_to``; a row count that
    is not the sources' live rows is refused.
    """

    operation: Operation = Operation.COMPACT
    merge: Merge
    #: The sources' live rows, sorted (None: written elsewhere, by the driver's ``written_by``).
    rows: Iterable[pa.RecordBatch] | None = None
    #: The live delete deltas of the snapshot read (a rewrite elsewhere drops their rows).
    current: LiveDeltas

    def allocation(self, *, elsewhere: bool = False) -> Allocation:
        return Allocation(named=self.merge.target)

    def lock_policy(self, *, elsewhere: bool = False) -> LockPolicy:
        return LockPolicy.HEARTBEAT

    def sources(self) -> list[str]:
        return list(self.merge.sources)

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        written = Written()
        entries = []
        if self.rows is not None:
            written.statuses, new = write_rows(context, pending, self.rows, presorted=True)
            entries = [new] if new is not None else []
        return finish_phase(context, pending, written, entries, {}, self.current)

    def check(self, context: TableContext, view: TimelineView, pending: Pending, written: Written) -> None:
        _conflicts.check_merge(context, view, instant_time=pending.instant.time, read_at=self.read_at,
                               merge=self.merge)

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        done = added(context, pending, written)
        merge = self.merge
        rewritten = sum(s.rows for s in written.statuses)
        if rewritten != merge.rows:  # never commit a compaction that lost or revived rows
            raise TxnError(
                f"compaction {pending.instant.time} into {merge.target} wrote {rewritten} rows, but "
                f"its sources hold {merge.rows} live rows; nothing was committed")
        done.segments = self.segments(done.segments) + [
            msgspec.structs.replace(entry, status=SegmentStatus.COMPACTED, merged_to=merge.target)
            for entry in merge.sources.values()]
        done.removed_files = list(merge.files)
        done.removed_deltas += list(merge.deltas)
        done.rows_deleted = merge.rows
        done.merged = sorted(merge.sources, key=segment_sort_key)
        return done

    def segments(self, new: list[SegmentEntry]) -> list[SegmentEntry]:
        """The target's entry (a new ``Success`` segment)."""
        return new


@dataclass(kw_only=True)
class StreamFilesMerge(Compaction):
    """A compaction of a streaming segment's small files (``merge.sources`` empty,
    ``merge.target`` the streaming segment itself): FANOUT files become one file of the same
    segment, whose entry does not change. Conflicts as a compaction: a commit that deleted rows
    of or removed one of the files wins."""

    def segments(self, new: list[SegmentEntry]) -> list[SegmentEntry]:
        return []
