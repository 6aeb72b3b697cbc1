"""ADD SEGMENT: existing files that join the table in place, one segment per group."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from metatxn.indexes import SegmentEntry, SegmentStatus
from metatxn.timeline import TimelineView, parse_time

from ..._context import TableContext
from ..._files import FileStatus, KeyLocations, LiveDeltas
from ..._results import Operation
from ..._rows import index_keys
from .._protocol import Pending
from ._base import (
    Allocation,
    DataWrite,
    LockPolicy,
    Recorded,
    Written,
    file_rows,
    finish_phase,
    stats_rows,
)


@dataclass(frozen=True)
class ExternalLoad:
    """ADD SEGMENT: existing files that join the table in place, one segment per group."""

    #: The folder added, as a URL, and the files' format.
    url: str
    format: str
    #: The files of each new segment (one group per partition folder, or one in all).
    groups: list[list[FileStatus]]
    #: Keyed tables: every key of the files, where it is (``file`` the file's URL), and the
    #: group (new segment) of each key's file.
    located: KeyLocations | None = None
    key_groups: Sequence[int] | None = None

    @property
    def statuses(self) -> list[FileStatus]:
        return [status for group in self.groups for status in group]


@dataclass(kw_only=True)
class AddSegment(DataWrite):
    """``add_segment``: ``load``'s files join the table where they are, as one external
    ``Success`` segment per group.

    Segments: one new per group. Lock: held throughout: its write phase writes index entries
    only, and its admission check (``admission``: no file of the load joined the table
    meanwhile) must hold until its commit. Conflicts (an insert): a data commit completed after
    ``read_at`` that wrote one of its keys is a ``DuplicateKeyError``; it deletes no row, so
    nothing else conflicts. Records: the files and their statistics, the segment entries
    (format, folder), index entries of the files' keys; no data file is written.
    """

    operation: Operation = Operation.ADD_SEGMENT
    load: ExternalLoad
    current: LiveDeltas

    def allocation(self, *, elsewhere: bool = False) -> Allocation:
        return Allocation(new=len(self.load.groups))

    def lock_policy(self, *, elsewhere: bool = False) -> LockPolicy:
        return LockPolicy.HELD

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        index = context.metadata.record_index
        entries = []
        located = self.load.located
        if index is not None and located is not None:
            segments = pa.array(list(pending.segments or (pending.segment,)), pa.string())
            entries.append(index.entries(
                index_keys(located.keys, context.record_key_columns),
                segment=segments.take(pa.array(self.load.key_groups, pa.int64())),
                file=located.file, position=located.position, instant=pending.instant.time))
        return finish_phase(context, pending, Written(), entries, {}, self.current)

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        load = self.load
        segments = list(pending.segments or (pending.segment,))
        files = [file_rows(group, segment or "", pending.instant.time)
                 for group, segment in zip(load.groups, segments, strict=True)]
        entries = [SegmentEntry(
            id=segment or "", status=SegmentStatus.SUCCESS, format=load.format, external=True, path=load.url,
            partitions=tuple(sorted({s.partition for s in group if s.partition})),
            rows=sum(s.rows for s in group), data_size=sum(s.size for s in group),
            load_start_ms=parse_time(pending.instant.time), load_end_ms=context.clock(),
            instant=pending.instant.time) for group, segment in zip(load.groups, segments, strict=True)]
        statuses = load.statuses
        return Recorded(statuses=statuses, files=pa.concat_tables(files),
                        stats=stats_rows(statuses, context.schema), segments=entries,
                        deltas_added=written.deltas, rows_deleted=0,
                        removed_deltas=list(written.replaced))
