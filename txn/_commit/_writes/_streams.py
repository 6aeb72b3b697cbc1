"""A stream's batch and DROP STREAM: writes that move a stream's record and its streaming
segments (design/streaming.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec
import pyarrow as pa

from metatxn.indexes import SEGMENTS, SegmentEntry, SegmentStatus, StreamRecord
from metatxn.timeline import TimelineView, parse_time

from ..._context import TableContext
from ..._files import FileStatus, LiveDeltas
from ..._results import Operation
from .._protocol import Pending
from ._base import (
    NEW_SEGMENT,
    NO_SEGMENT,
    Allocation,
    DataWrite,
    LockPolicy,
    Recorded,
    Written,
    added,
    finish_phase,
    small,
    write_rows,
)
from ._progress import Progress, progressed


@dataclass(frozen=True)
class StreamStep:
    """Where a stream's batch goes: its open segment (None: the commit allocates a new one),
    and the segment this commit finishes (``Streaming Finish``: the one it rolled over from)."""

    segment: str | None
    finish: str | None = None


@dataclass(kw_only=True)
class StreamBatch(DataWrite):
    """``stream``: batch ``progress.batch`` of a stream, committed exactly once into its open
    ``Streaming`` segment.

    Segments: the open one (named), or a new one when it has none or rolled over. Lock: held
    throughout when small (as a row write). Admission: the batch committed already
    (``AlreadyCommitted``: nothing written) or its stream dropped since the producer opened it
    (``StreamDroppedError``). Conflicts (an insert): a data commit completed after ``read_at``
    that wrote one of its keys is a ``DuplicateKeyError``. Records: its files, the open
    segment's totals read under the lock (so batches of other streams never lose each other's)
    and the finished segment, the stream's record at this batch.
    """

    operation: Operation = Operation.STREAM
    progress: Progress
    rows: Iterable[pa.RecordBatch] | None = None
    current: LiveDeltas
    step: StreamStep
    rows_bytes: int | None = None

    def allocation(self, *, elsewhere: bool = False) -> Allocation:
        if self.step.segment is not None:
            return Allocation(named=self.step.segment)
        return NEW_SEGMENT if self.rows is not None or elsewhere else NO_SEGMENT

    def lock_policy(self, *, elsewhere: bool = False) -> LockPolicy:
        return LockPolicy.HEARTBEAT if elsewhere else small(self.rows_bytes, 0)

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        written = Written()
        entries = []
        if self.rows is not None:
            written.statuses, new = write_rows(context, pending, self.rows)
            entries = [new] if new is not None else []
        return finish_phase(context, pending, written, entries, {}, self.current)

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        done = added(context, pending, written)
        done.segments = streaming_segments(context, view, pending, self.step.finish, written.statuses)
        return done

    def streams(self, context: TableContext, view: TimelineView, pending: Pending,
                rows: int) -> list[StreamRecord]:
        return progressed(context, view, self.progress, pending, rows, segment=pending.segment)


@dataclass(kw_only=True)
class DropStream(DataWrite):
    """``drop_stream``: the stream's record becomes ``Dropped`` and its open segment (``finish``)
    ``Streaming Finish``, in one commit that writes no file.

    Segments: none. Lock: heartbeat. Admission: none (a drop is not a batch). Conflicts: none
    on keys or files; a DROP STREAM (or batch of a new generation) that committed meanwhile
    makes it ``AlreadyCommitted`` under the lock. Records: the finished segment and the
    stream's ``Dropped`` record.
    """

    operation: Operation = Operation.DROP_STREAM
    progress: Progress
    finish: str | None = None

    def admit(self, context: TableContext, view: TimelineView) -> None:
        if self.admission is not None:
            self.admission(view)

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        return finish_phase(context, pending, Written(), [], {}, LiveDeltas(context.store, {}))

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        done = added(context, pending, written)
        done.segments = streaming_segments(context, view, pending, self.finish, written.statuses,
                                           drop=True)
        return done

    def streams(self, context: TableContext, view: TimelineView, pending: Pending,
                rows: int) -> list[StreamRecord]:
        return progressed(context, view, self.progress, pending, rows, dropping=True)


def streaming_segments(context: TableContext, view: TimelineView, pending: Pending, finish: str | None,
                       statuses: Sequence[FileStatus], *, drop: bool = False) -> list[SegmentEntry]:
    """Under the lock: the stream's open segment with this batch's rows added to its totals (the
    totals read here, so concurrent batches of other streams never lose each other's), and the
    segment the commit finishes."""
    current = context.metadata_at(view, None, (SEGMENTS,)).segments or {}
    now = context.clock()
    entries = []
    if pending.segment is not None and not drop:
        held = current.get(pending.segment)
        entries.append(SegmentEntry(
            id=pending.segment, status=SegmentStatus.STREAMING, format="parquet",
            partitions=tuple(sorted({s.partition for s in statuses if s.partition}
                                    | set(held.partitions if held else ()))),
            rows=(held.rows if held else 0) + sum(s.rows for s in statuses),
            data_size=(held.data_size if held else 0) + sum(s.size for s in statuses),
            load_start_ms=held.load_start_ms if held else parse_time(pending.instant.time),
            load_end_ms=now, instant=held.instant if held else pending.instant.time))
    finished = current.get(finish) if finish is not None else None
    if finished is not None and finished.status == SegmentStatus.STREAMING:
        entries.append(msgspec.structs.replace(finished, status=SegmentStatus.STREAMING_FINISH,
                                               load_end_ms=now))
    return entries
