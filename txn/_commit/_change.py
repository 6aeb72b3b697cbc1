"""The write operations: what each one writes, what it changes in the metadata table, and when it
conflicts with a concurrent commit.

Every write is a :class:`Change`: new rows (a new segment), rows deleted by position from existing
data files (delete deltas), or both. How a change is found differs per operation (see
``_mutations``); how it is written and committed is the same for all of them, here:

1. before ``begin``: read the latest snapshot and work out the change (which keys exist, which
   rows match), remembering the snapshot's completion time ``read_at``;
2. write phase: the data files of the new rows, the delete deltas, the record-index log blocks;
3. under the lock: check for overlap with commits completed after ``read_at``, then the
   metadata-table changes and the commit metadata.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa

from indexes import (
    ACTIVE,
    COMPACTED,
    DELETES_SCHEMA,
    DROPPED,
    FILES_SCHEMA,
    MARKED_FOR_DELETE,
    MAX_BATCH,
    SEGMENTS,
    STREAM,
    STREAMING,
    STREAMING_FINISH,
    STREAMS,
    SUCCESS,
    MetadataChanges,
    RecordIndex,
    SegmentEntry,
    StreamRecord,
    column_stats_schema,
    live,
    segment_sort_key,
    tombstones,
)
from timeline import CommitConflictError, Lease, StreamDroppedError, TimelineView, TxnError, parse_time

from .._context import (
    ACTION_OF,
    COMPACT,
    DATA_ACTIONS,
    LATEST_PARTITIONS,
    CommitMetadata,
    TableContext,
    delete_compaction_threshold,
    target_file_bytes,
)
from .._files import (
    DataFileWriter,
    DeltaStatus,
    FileStatus,
    KeyLocations,
    LiveDeltas,
    Positions,
    canonical_partition,
    delete_rows,
    sort_memory_bytes,
    stage_deletes,
)
from .._results import Commit
from .._rows import index_keys
from . import _conflicts
from ._protocol import Admission, Builder, Pending
from ._upkeep import protocol_of


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


@dataclass(frozen=True)
class Progress:
    """A producer's batch that commits exactly once: stream ``name``'s batch ``batch`` (kind
    ``stream``), or app ``name``'s version ``batch`` (kind ``app``, an idempotent write)."""

    kind: str
    name: str
    batch: int
    generation: int = 0
    #: A stream's open segment after this batch (None: an app, or a stream without one).
    segment: str | None = None


@dataclass(frozen=True)
class StreamStep:
    """What a stream's batch (or its DROP STREAM) does to its streaming segments."""

    #: The open segment the batch's rows go to (None: the commit allocates a new one).
    segment: str | None
    #: A segment this commit finishes (``Streaming Finish``): the one the stream rolled over
    #: from, or its open one when it is dropped.
    finish: str | None = None
    drop: bool = False
    #: A merge of the segment's files (a table service): its record does not change.
    files_only: bool = False


class AlreadyCommitted(Exception):
    """The producer committed this batch (or a later one) already: the write does nothing."""


def producer_record(context: TableContext, view: TimelineView, kind: str,
                    name: str) -> StreamRecord | None:
    """The producer's record in the snapshot of ``view`` (None: it never committed)."""
    streams = context.metadata_at(view, None, (STREAMS,)).streams or {}
    return streams.get((kind, name))


def generation_of(record: StreamRecord | None) -> int:
    """The generation a producer's next batch belongs to: a dropped stream's name starts again
    one generation later, from no batch."""
    if record is None:
        return 0
    return record.generation + 1 if record.status == DROPPED else record.generation


def in_range(batch: object) -> bool:
    """Whether ``batch`` is a batch id (or version) a record can hold: an int from 0 to
    :data:`MAX_BATCH` (not a bool)."""
    return not isinstance(batch, bool) and isinstance(batch, int) and 0 <= batch <= MAX_BATCH


def check_generation(record: StreamRecord | None, progress: Progress) -> None:
    """Refuse a stream's batch whose generation the stream has left: it was dropped after the
    producer opened it (``StreamDroppedError``). Without this check the batch would start the
    next generation itself, bringing the dropped stream back with the old producer's batch ids,
    and a fresh producer's first batches would then be skipped as replays."""
    if progress.kind != STREAM or record is None:
        return
    if record.generation > progress.generation or (
            record.generation == progress.generation and record.status == DROPPED):
        raise StreamDroppedError(progress.name, progress.generation, generation_of(record))


def committed(record: StreamRecord | None, progress: Progress) -> bool:
    """Whether ``record`` (the producer's, from the latest snapshot) covers ``progress``'s batch."""
    return (record is not None and record.generation == progress.generation
            and record.last_batch >= progress.batch)


@dataclass
class Change:
    """What one write does, worked out before it begins."""

    operation: str
    #: New rows, written as a new segment (None: the write only deletes).
    rows: Iterable[pa.RecordBatch] | None
    #: Completion time of the snapshot the change was computed from (None: an empty table).
    read_at: str | None
    #: The live delete deltas of that snapshot.
    current: LiveDeltas
    #: Rows to delete: data file -> positions (live rows only).
    deleted: dict[str, Positions] = field(default_factory=dict)
    #: Index keys whose rows are deleted and not rewritten (their index entries are tombstoned).
    removed_keys: pa.Table | None = None
    #: Index keys the write looked up, found or not, and wrote nothing for when not found (a
    #: delete by keys): a commit completed after ``read_at`` that wrote any of them conflicts,
    #: as one that wrote a key the write writes does.
    read_keys: pa.Table | None = None
    #: Replace the whole table (overwrite).
    replace: bool = False
    #: A partition-scoped overwrite (with ``replace``): the partitions (Hive paths) it replaces
    #: besides those its new rows are written to; None: it replaces the whole table.
    partitions: frozenset[str] | None = None
    #: A compaction: the segments it replaces (None for every other write).
    merge: Merge | None = None
    #: Bytes of the new rows in memory, when known before the write begins (None: a stream).
    rows_bytes: int | None = None
    #: ADD SEGMENT: files that join the table where they are (``rows`` is None).
    external: ExternalLoad | None = None
    #: The producer's batch this write is (exactly once), if any.
    progress: Progress | None = None
    #: A stream's batch or drop: its streaming segments.
    stream: StreamStep | None = None

    @property
    def segment(self) -> str | None:
        """The segment this change names itself (a compaction's ``x.1``, a stream's open
        segment); None: allocated."""
        if self.merge is not None:
            return self.merge.target
        return self.stream.segment if self.stream is not None else None

    @property
    def rows_deleted(self) -> int:
        return sum(len(p) for p in self.deleted.values())


@dataclass
class Written:
    """What the write phase of an instant produced (locally, or by Spark executors)."""

    statuses: list[FileStatus] = field(default_factory=list)
    deltas: list[DeltaStatus] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    index_sizes: dict[int, int] = field(default_factory=dict)
    #: Index keys of every entry written (new rows and tombstones), for conflict checks. None
    #: with ``index_sizes`` set: the keys are only in the instant's index log files (written by
    #: executors), read back only if a concurrent commit needs checking.
    keys: pa.Table | None = None


def _new_entries(index: RecordIndex, located: KeyLocations, columns: Sequence[str], segment: str,
                 instant_time: str) -> pa.Table:
    """The index entries of every row a write added, built as whole columns (one call for all
    files: the per-file Python cost stays out of million-row loads)."""
    count = located.keys.num_rows
    return index.entries(index_keys(located.keys, columns),
                         segment=pa.repeat(pa.scalar(segment, pa.string()), count),
                         file=located.file, position=located.position, instant=instant_time)


def _write(context: TableContext, pending: Pending, change: Change) -> Written:
    written = Written()
    index = context.metadata.record_index
    entries: list[pa.Table] = []
    if change.rows is not None:
        assert pending.segment is not None
        writer = DataFileWriter(
            context.store, context.schema, instant_time=pending.instant.time, segment=pending.segment,
            partition_by=context.partition_by, sort_by=context.sort_by, new_token=context.ids,
            target_file_bytes=target_file_bytes(context.config.properties),
            key_columns=context.record_key_columns, presorted=change.merge is not None,
            sort_memory_bytes=sort_memory_bytes(context.config.properties),
        )
        written.statuses = writer.write(change.rows)
        located = writer.key_locations()
        if index is not None and located.keys.num_rows:
            entries.append(_new_entries(index, located, context.record_key_columns,
                                        pending.segment, pending.instant.time))
    if change.external is not None and index is not None and change.external.located is not None:
        located = change.external.located
        segments = pa.array(list(pending.segments or (pending.segment,)), pa.string())
        entries.append(index.entries(
            index_keys(located.keys, context.record_key_columns),
            segment=segments.take(pa.array(change.external.key_groups, pa.int64())),
            file=located.file, position=located.position, instant=pending.instant.time))
    written.deltas, written.replaced = stage_deletes(
        context.store, pending.instant.time, change.deleted, change.current,
        delete_compaction_threshold(context.config.properties))
    if index is not None:
        if change.removed_keys is not None and change.removed_keys.num_rows:
            count = change.removed_keys.num_rows
            entries.append(index.entries(
                change.removed_keys, segment=pa.nulls(count, pa.string()),
                file=pa.nulls(count, pa.string()), position=pa.nulls(count, pa.int64()),
                instant=pending.instant.time, deleted=True))
        if entries:
            all_entries = pa.concat_tables(entries)
            written.index_sizes = index.write(pending.instant.time, all_entries)
            written.keys = all_entries.select(index.keys)
    return written


def _file_rows(statuses: Sequence[FileStatus], segment: str, instant_time: str) -> pa.Table:
    return pa.Table.from_pylist([
        {"path": s.path, "segment": segment, "partition": s.partition, "format": s.format,
         "rows": s.rows, "size": s.size, "instant": instant_time, "deleted": False,
         "modified_ms": s.modified_ms, "version": s.version}
        for s in statuses
    ], schema=FILES_SCHEMA)


def _stats_rows(statuses: Sequence[FileStatus], schema: pa.Schema) -> pa.Table:
    stats_schema = column_stats_schema(schema)
    names = [f.name for f in stats_schema.field("columns").type]
    if not names:
        return stats_schema.empty_table()
    return pa.Table.from_pylist([
        {"path": s.path, "deleted": False,
         "columns": {name: ({"min": s.stats[name].min, "max": s.stats[name].max,
                             "nulls": s.stats[name].nulls, "count": s.stats[name].count}
                            if name in s.stats else None) for name in names}}
        for s in statuses
    ], schema=stats_schema)


def _new_segment(context: TableContext, pending: Pending, statuses: Sequence[FileStatus],
                 stats: pa.Table) -> SegmentEntry:
    assert pending.segment is not None
    return SegmentEntry(
        id=pending.segment, status=SUCCESS, format="parquet",
        partitions=tuple(sorted({s.partition for s in statuses if s.partition})),
        rows=sum(s.rows for s in statuses), data_size=sum(s.size for s in statuses),
        index_size=stats.nbytes, load_start_ms=parse_time(pending.instant.time),
        load_end_ms=context.clock(), instant=pending.instant.time,
    )


def _external_changes(context: TableContext, pending: Pending,
                      load: ExternalLoad) -> tuple[pa.Table, list[SegmentEntry]]:
    """The ``files`` rows and segment entries of an ADD SEGMENT: one segment per group."""
    segments = list(pending.segments or (pending.segment,))
    files = [_file_rows(group, segment or "", pending.instant.time)
             for group, segment in zip(load.groups, segments, strict=True)]
    entries = [SegmentEntry(
        id=segment or "", status=SUCCESS, format=load.format, external=True, path=load.url,
        partitions=tuple(sorted({s.partition for s in group if s.partition})),
        rows=sum(s.rows for s in group), data_size=sum(s.size for s in group),
        load_start_ms=parse_time(pending.instant.time), load_end_ms=context.clock(),
        instant=pending.instant.time) for group, segment in zip(load.groups, segments, strict=True)]
    return pa.concat_tables(files), entries


def _streaming_segments(context: TableContext, view: TimelineView, pending: Pending,
                        step: StreamStep, statuses: Sequence[FileStatus]) -> list[SegmentEntry]:
    """Under the lock: the stream's open segment with this batch's rows added to its totals (the
    totals read here, so concurrent batches of other streams never lose each other's), and the
    segment the commit finishes."""
    if step.files_only:
        return []
    current = context.metadata_at(view, None, (SEGMENTS,)).segments or {}
    now = context.clock()
    entries = []
    if pending.segment is not None and not step.drop:
        held = current.get(pending.segment)
        entries.append(SegmentEntry(
            id=pending.segment, status=STREAMING, format="parquet",
            partitions=tuple(sorted({s.partition for s in statuses if s.partition}
                                    | set(held.partitions if held else ()))),
            rows=(held.rows if held else 0) + sum(s.rows for s in statuses),
            data_size=(held.data_size if held else 0) + sum(s.size for s in statuses),
            load_start_ms=held.load_start_ms if held else parse_time(pending.instant.time),
            load_end_ms=now, instant=held.instant if held else pending.instant.time))
    finished = current.get(step.finish) if step.finish is not None else None
    if finished is not None and finished.status == STREAMING:
        entries.append(msgspec.structs.replace(finished, status=STREAMING_FINISH, load_end_ms=now))
    return entries


def _concurrent_data_commits(view: TimelineView, began: str) -> list[str]:
    """Data commits an overwrite would silently replace. A compaction only moved rows that the
    overwrite replaces anyway (it reads the live files under the lock), so it does not count:
    a table service never fails the user's overwrite."""
    return [i.time for i in view.completed_after(began)
            if i.action in DATA_ACTIONS and i.action != ACTION_OF[COMPACT]]


def to_commit(instant_time: str, completed_at: str, metadata: CommitMetadata) -> Commit:
    return Commit(
        instant=instant_time, completed_at=completed_at, operation=metadata.operation,
        segment=metadata.segment, files_added=len(metadata.files_added),
        rows_added=metadata.rows_added, rows_deleted=metadata.rows_deleted,
        paths_added=tuple(f.path for f in metadata.files_added), extra=dict(metadata.extra),
        retries=metadata.retries, segments_removed=tuple(metadata.segments_removed),
        segments_merged=tuple(metadata.segments_merged),
    )


def _replacement(context: TableContext, view: TimelineView, pending: Pending, change: Change,
                 statuses: Sequence[FileStatus]) -> tuple[list[str], list[str], list[SegmentEntry], int,
                                                          list[DeltaStatus]]:
    """What an overwrite removes: (files, their deltas, segments marked for delete, live rows,
    delete deltas written here: a partition-scoped overwrite's rows in segments it keeps)."""
    current = context.metadata_at(view, None, LATEST_PARTITIONS)
    assert current.files is not None and current.segments is not None
    previous = live(current.files)
    deltas = LiveDeltas.of(context.store, current.deletes)
    if change.partitions is not None:
        return _partition_replacement(context, view, pending, change, statuses, previous, deltas,
                                      current.segments)
    concurrent = _concurrent_data_commits(view, pending.instant.time)
    if concurrent:
        raise CommitConflictError(
            f"overwrite {pending.instant.time} conflicts with commit(s) {concurrent}, "
            "which completed after it began and would be silently replaced\n"
            "Help: rerun the overwrite against the new state of the table"
        )
    removed_files = previous["path"].to_pylist()
    removed_deltas = [path for file in removed_files for path in deltas.paths(file)]
    rows = sum(previous["rows"].to_pylist()) - sum(deltas.rows(file) for file in removed_files)
    segments = [msgspec.structs.replace(entry, status=MARKED_FOR_DELETE)
                for entry in current.segments.values() if entry.is_live]
    return removed_files, removed_deltas, segments, rows, []


def _partition_replacement(context: TableContext, view: TimelineView, pending: Pending, change: Change,
                           statuses: Sequence[FileStatus], previous: pa.Table, deltas: LiveDeltas,
                           entries: Mapping[str, SegmentEntry]) -> tuple[
                               list[str], list[str], list[SegmentEntry], int, list[DeltaStatus]]:
    """A partition-scoped overwrite: the live rows of the partitions it replaces (those named and
    those its rows went to) are replaced. A segment with live rows there and none elsewhere is
    marked for delete, its files removed; a segment that keeps rows elsewhere stays, and its rows
    in the replaced partitions are deleted by delete deltas written here, so a segment's recorded
    rows stay those of its live files. Segments with no live row in them are left as they are."""
    assert change.partitions is not None
    canonical = functools.lru_cache(maxsize=None)(lambda p: canonical_partition(p, context.schema))
    scope = set(change.partitions) | {canonical(s.partition) for s in statuses}
    _conflicts.check_partitions(context, view, instant_time=pending.instant.time, partitions=scope,
                                canonical=canonical)
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
                marked.append(msgspec.structs.replace(entry, status=MARKED_FOR_DELETE))
            continue
        for path, live_rows, inside in files:
            if inside and live_rows:
                total = live_rows + deltas.rows(path)
                emptied[path] = np.setdiff1d(np.arange(total, dtype=np.int64), deltas.positions(path))
    removed_deltas = [path for file in removed_files for path in deltas.paths(file)]
    written, replaced = stage_deletes(context.store, pending.instant.time, emptied, deltas,
                                      delete_compaction_threshold(context.config.properties))
    return removed_files, removed_deltas + replaced, marked, replaced_rows, written


def _merged(merge: Merge, pending: Pending,
            statuses: Sequence[FileStatus]) -> tuple[list[str], list[str], list[SegmentEntry], int]:
    """What a compaction removes: (the sources' files, their deltas, the sources marked
    ``Compacted``, their live rows)."""
    written = sum(s.rows for s in statuses)
    if written != merge.rows:  # never commit a compaction that lost or revived rows
        raise TxnError(
            f"compaction {pending.instant.time} into {merge.target} wrote {written} rows, but its "
            f"sources hold {merge.rows} live rows; nothing was committed")
    compacted = [msgspec.structs.replace(entry, status=COMPACTED, merged_to=merge.target)
                 for entry in merge.sources.values()]
    return list(merge.files), list(merge.deltas), compacted, merge.rows


def _written_keys(context: TableContext, view: TimelineView, change: Change, pending: Pending,
                  written: Written) -> pa.Table | None:
    index = context.metadata.record_index
    if written.keys is not None or index is None or not written.index_sizes:
        return written.keys
    if not view.completed_after(change.read_at or ""):
        return None  # nothing committed meanwhile: no key can overlap
    return index.instant_entries(pending.instant.time, sorted(written.index_sizes)).select(index.keys)


def _checked_keys(context: TableContext, view: TimelineView, change: Change, pending: Pending,
                  written: Written) -> pa.Table | None:
    """The keys a concurrent commit must not have written: those this write writes, and those
    it read (``Change.read_keys``), each once."""
    keys = _written_keys(context, view, change, pending, written)
    read = change.read_keys
    if read is None or read.num_rows == 0 or not view.completed_after(change.read_at or ""):
        return keys
    if keys is None or keys.num_rows == 0:
        both = read
    else:
        both = pa.concat_tables([keys, read.select(keys.column_names).cast(keys.schema)])
    return both.group_by(both.column_names).aggregate([])


def _progressed(context: TableContext, view: TimelineView, change: Change, pending: Pending,
                rows: int) -> list[StreamRecord]:
    """Under the lock: the producer's record moved to this batch, or ``AlreadyCommitted`` if a
    commit since the write began recorded it (two retries of one batch never both commit), or
    ``StreamDroppedError`` if a DROP STREAM committed since the producer opened the stream."""
    progress = change.progress
    if progress is None:
        return []
    held = producer_record(context, view, progress.kind, progress.name)
    dropping = change.stream is not None and change.stream.drop
    if dropping and (held is None or held.status == DROPPED or held.generation != progress.generation):
        raise AlreadyCommitted(f"stream {progress.name!r} was dropped meanwhile")
    if not dropping:
        check_generation(held, progress)
    if not dropping and committed(held, progress):
        raise AlreadyCommitted(f"{progress.kind} {progress.name!r} committed batch {progress.batch}")
    same = held is not None and held.generation == progress.generation
    now = context.clock()
    step = change.stream
    return [StreamRecord(
        name=progress.name, kind=progress.kind, generation=progress.generation,
        last_batch=progress.batch, rows=(held.rows if same and held else 0) + rows,
        segment=None if step is None or step.drop else pending.segment,
        status=DROPPED if step is not None and step.drop else ACTIVE,
        started_ms=held.started_ms if same and held else now, updated_ms=now,
        instant=pending.instant.time)]


def admit_progress(context: TableContext, change: Change) -> Admission | None:
    """The check at begin, under the lock: nothing begins for a batch already committed."""
    progress = change.progress
    if progress is None or (change.stream is not None and change.stream.drop):
        return None

    def admit(view: TimelineView) -> None:
        record = producer_record(context, view, progress.kind, progress.name)
        check_generation(record, progress)
        if committed(record, progress):
            raise AlreadyCommitted(f"{progress.kind} {progress.name!r} committed batch {progress.batch}")

    return admit


def commit_change(context: TableContext, change: Change, extra: dict[str, str] | None, *,
                  write: Callable[[Pending], Written] | None = None, retries: int = 0,
                  admit: Admission | None = None) -> Commit:
    """Write and commit ``change`` as one instant (rolled back on any failure).

    ``write`` replaces the local write phase (Spark's executors write the files). ``retries``:
    how often the caller planned this write again after a compaction overtook it (recorded).
    ``admit``: the check ``begin`` runs under the lock (see ``Protocol.begin``).
    """
    new_segment = change.rows is not None or write is not None or change.external is not None
    completed, metadata = protocol_of(context).run(
        change.operation, ACTION_OF[change.operation], new_segment=new_segment,
        segment_count=len(change.external.groups) if change.external is not None else 1,
        # ADD SEGMENT writes index entries only, and its admission check (no file added twice)
        # must hold until its commit.
        hold_lock=write is None and (_is_small(change) or change.external is not None),
        segment=change.segment, sources=list(change.merge.sources) if change.merge else (),
        read_at=change.read_at, admit=_both(admit, admit_progress(context, change)),
        write=write or (lambda pending: _write(context, pending, change)),
        build=builder(context, change, extra, retries=retries), extra=extra,
    )
    return to_commit(completed.time, completed.completed_at or "", metadata)


def _both(first: Admission | None, second: Admission | None) -> Admission | None:
    if first is None or second is None:
        return first or second

    def admit(view: TimelineView) -> None:
        first(view)
        second(view)

    return admit


#: A write whose new rows take at most this many bytes in memory, and that deletes at most
#: SMALL_WRITE_DELETES rows, runs under one hold of the lock (``Protocol.run``): its write phase
#: costs milliseconds, less than a second lock hold and a heartbeat would.
SMALL_WRITE_BYTES = 8 * 1024 * 1024
SMALL_WRITE_DELETES = 1_000_000


def _is_small(change: Change) -> bool:
    return (change.merge is None and not change.replace and change.rows_bytes is not None
            and change.rows_bytes <= SMALL_WRITE_BYTES and change.rows_deleted <= SMALL_WRITE_DELETES)


def commit_begun(context: TableContext, change: Change, extra: dict[str, str] | None, pending: Pending,
                 written: Written) -> Commit:
    """Commit an instant begun earlier whose files were written elsewhere (rolled back on
    failure)."""
    completed, metadata = protocol_of(context).finish(pending, lambda _: written,
                                                 builder(context, change, extra))
    return to_commit(completed.time, completed.completed_at or "", metadata)


def builder(context: TableContext, change: Change, extra: dict[str, str] | None, *,
            retries: int = 0) -> Callable[[Pending, Written], Builder]:
    """How ``change`` becomes metadata-table changes and commit metadata, under the lock."""

    def build(pending: Pending, written: Written) -> Builder:
        def under_lock(lease: Lease, view: TimelineView) -> tuple[MetadataChanges, CommitMetadata]:
            if change.merge is not None:
                _conflicts.check_merge(context, view, instant_time=pending.instant.time,
                                       read_at=change.read_at, merge=change.merge)
            elif not change.replace:
                _conflicts.check(context, view, operation=change.operation,
                                 instant_time=pending.instant.time, read_at=change.read_at,
                                 keys=_checked_keys(context, view, change, pending, written),
                                 files=set(change.deleted))
            if change.external is not None:
                statuses = change.external.statuses
                files, segments = _external_changes(context, pending, change.external)
                stats = _stats_rows(statuses, context.schema)
            else:
                statuses = written.statuses
                files = _file_rows(statuses, pending.segment or "", pending.instant.time)
                stats = _stats_rows(statuses, context.schema)
                if change.stream is not None:
                    segments = _streaming_segments(context, view, pending, change.stream, statuses)
                else:
                    segments = ([_new_segment(context, pending, statuses, stats)]
                                if pending.segment is not None else [])
            deletes = delete_rows(written.deltas, pending.instant.time)
            removed_files: list[str] = []
            removed_deltas = list(written.replaced)
            rows_deleted = change.rows_deleted
            merged: list[str] = []
            deltas_added = written.deltas
            if change.replace:
                removed_files, dropped, marked, rows_deleted, emptied = _replacement(
                    context, view, pending, change, statuses)
                if emptied:
                    deltas_added = deltas_added + emptied
                    deletes = delete_rows(deltas_added, pending.instant.time)
            elif change.merge is not None:
                removed_files, dropped, marked, rows_deleted = _merged(change.merge, pending, statuses)
                merged = sorted(change.merge.sources, key=segment_sort_key)
            if change.replace or change.merge is not None:
                removed_deltas += dropped
                segments += marked
                files = pa.concat_tables([files, tombstones(FILES_SCHEMA, removed_files)])
                stats = pa.concat_tables([stats, tombstones(stats.schema, removed_files)])
            if removed_deltas:
                deletes = pa.concat_tables([deletes, tombstones(DELETES_SCHEMA, removed_deltas)])
            metadata = CommitMetadata(
                operation=change.operation, segment=pending.segment, files_added=statuses,
                files_removed=removed_files,
                segments_removed=[s.id for s in segments if s.status == MARKED_FOR_DELETE],
                rows_added=sum(s.rows for s in statuses), rows_deleted=rows_deleted,
                extra=dict(extra or {}), deltas_added=deltas_added, deltas_removed=removed_deltas,
                index_shards=sorted(written.index_sizes), read_at=change.read_at,
                segments_merged=merged, retries=retries,
            )
            changes = MetadataChanges(
                files=files, column_stats=stats, segments=segments, deletes=deletes,
                record_index=written.index_sizes,
                streams=_progressed(context, view, change, pending, metadata.rows_added))
            return changes, metadata

        return under_lock

    return build

