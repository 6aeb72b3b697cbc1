"""The interface every kind of write answers, and the building blocks the kinds share.

A write is one instance of a :class:`Write` subclass, worked out before its instant begins. The
commit driver (``_driver``) asks it, in this order:

1. ``allocation()`` and ``sources()``: which segments ``begin`` allocates (none, one, several
   consecutive load ids, or one the write names) and which segments it reads and replaces;
2. ``lock_policy()``: whether the lock is held from begin to commit (a small write, ADD
   SEGMENT) or the write phase runs outside it with a heartbeat;
3. ``admit(context, view)``: under the lock at begin, on the recovered timeline: refuse it;
4. ``write(context, pending)``: the write phase (data files, delete deltas, index log blocks);
5. under the lock at commit, on a fresh view: ``check(...)`` (its conflict rule against the
   commits that completed since it read the table), then ``record(...)`` (the metadata-table
   changes and the commit metadata).

A new kind of write is a subclass answering these; nothing in the driver or the protocol
changes. The data writes (everything recording a ``CommitMetadata``) derive from
:class:`DataWrite`, which assembles the record from a :class:`Recorded` the kind fills in.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from metatxn.indexes import (
    DELETES_SCHEMA,
    FILES_SCHEMA,
    MetadataChanges,
    ProducerKind,
    RecordIndex,
    SegmentEntry,
    SegmentStatus,
    StreamRecord,
    TableVersion,
    assign_ids,
    column_stats_schema,
    field_id,
    tombstones,
)
from metatxn.timeline import Lease, TimelineView, parse_time

from ..._context import (
    ACTION_OF,
    CommitMetadata,
    TableContext,
    delete_compaction_threshold,
    target_file_bytes,
)
from ..._files import (
    DataFileWriter,
    DeltaStatus,
    FileStatus,
    KeyLocations,
    LiveDeltas,
    Positions,
    delete_rows,
    sort_memory_bytes,
    stage_deletes,
)
from ..._results import Commit, Operation
from ..._rows import index_keys
from .. import _conflicts
from .._protocol import Admission, Pending
from ._progress import Progress, admit_progress, progressed
from ._versions import WriteSchema, admit_versions, check_versions, current_schema, with_versions


class LockPolicy(enum.Enum):
    """How long a write holds the table lock."""

    #: From begin to commit, without a heartbeat: a write phase bounded by its own small size.
    HELD = "held"
    #: Only at begin and at commit; a heartbeat shows the write alive in between.
    HEARTBEAT = "heartbeat"


@dataclass(frozen=True)
class Allocation:
    """The segments ``begin`` gives a write: ``new`` consecutive load ids, or the segment it
    ``named`` (a compaction's ``x.1``, a stream's open segment); neither: none."""

    new: int = 0
    named: str | None = None


NO_SEGMENT = Allocation()
NEW_SEGMENT = Allocation(new=1)

#: A write whose new rows take at most this many bytes in memory, and that deletes at most
#: SMALL_WRITE_DELETES rows, runs under one hold of the lock (``Protocol.run``): its write phase
#: costs milliseconds, less than a second lock hold and a heartbeat would.
SMALL_WRITE_BYTES = 8 * 1024 * 1024
SMALL_WRITE_DELETES = 1_000_000


def small(rows_bytes: int | None, rows_deleted: int) -> LockPolicy:
    """The lock policy of a write of ``rows_bytes`` in memory (None: unknown, a stream of batches)
    deleting ``rows_deleted`` rows."""
    if rows_bytes is not None and rows_bytes <= SMALL_WRITE_BYTES and rows_deleted <= SMALL_WRITE_DELETES:
        return LockPolicy.HELD
    return LockPolicy.HEARTBEAT


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


class Write:
    """One kind of write, as the commit driver sees it (see the module docstring).

    Subclasses set ``operation`` (the commit's operation; its action is ``ACTION_OF``'s unless
    ``action`` says otherwise) and ``read_at`` (the completion time of the snapshot it read, as
    its plan records it; None: it read nothing, or reads what it needs under the lock).
    """

    operation: Operation | None
    read_at: str | None = None

    @property
    def action(self) -> str:
        assert self.operation is not None, "a table service with a plan of its own names its action"
        return ACTION_OF[self.operation]

    def allocation(self, *, elsewhere: bool = False) -> Allocation:
        """The segments begin allocates. ``elsewhere``: the write phase runs elsewhere (Spark's
        executors) and writes new rows there."""
        return NO_SEGMENT

    def lock_policy(self, *, elsewhere: bool = False) -> LockPolicy:
        return LockPolicy.HEARTBEAT

    def sources(self) -> list[str]:
        """The segments it reads and replaces, recorded in its plan while it runs."""
        return []

    def requested(self) -> Any:
        """The plan its ``requested`` file holds; None: the protocol's ``WritePlan``."""
        return None

    def admit(self, context: TableContext, view: TimelineView) -> None:
        """Under the lock at begin, on the recovered timeline: raise to refuse the write."""

    def write(self, context: TableContext, pending: Pending) -> Any:
        """The write phase; what it returns reaches ``check`` and ``record`` (and the protocol,
        which removes the markers of its ``statuses`` and ``deltas`` once committed)."""
        return None

    def check(self, context: TableContext, view: TimelineView, pending: Pending, written: Any) -> None:
        """Under the lock at commit: raise if a commit completed since ``read_at`` conflicts."""

    def record(self, context: TableContext, view: TimelineView, pending: Pending, written: Any, *,
               lease: Lease, extra: dict[str, str] | None,
               retries: int) -> tuple[MetadataChanges, Any]:
        """Under ``lease`` at commit, after ``check``: the metadata-table changes and the commit
        metadata. ``retries``: how often the write was planned again (recorded)."""
        raise NotImplementedError


def write_phase(context: TableContext, pending: Pending, write: DataWrite) -> Written:
    """The write phase of a data write (one place, so tests can run something inside it)."""
    return write.write_files(context, pending)


# -- the data writes -------------------------------------------------------------------------------


@dataclass
class Recorded:
    """What a data write's commit records, filled in by its kind under the lock; see
    :meth:`DataWrite.record`."""

    #: The files added, their ``files`` and ``column_stats`` rows, and segment entries.
    statuses: Sequence[FileStatus]
    files: pa.Table
    stats: pa.Table
    segments: list[SegmentEntry]
    #: Delete deltas added (those of the write phase and any written under the lock).
    deltas_added: list[DeltaStatus]
    rows_deleted: int
    #: Data files (and their deltas) the commit removes, and older deltas replaced.
    removed_files: list[str] = field(default_factory=list)
    removed_deltas: list[str] = field(default_factory=list)
    #: The segments merged into the commit's segment (a compaction).
    merged: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class DataWrite(Write):
    """A write recording a ``CommitMetadata``: the base of every data write.

    Its default answers are those of a write that adds rows and deletes rows by position:
    admission refuses a producer's batch committed already (``progress``) and runs
    ``admission`` (a check the caller adds); the conflict rule is ``_conflicts.check`` on the
    keys it writes or read and the files it deletes rows from.
    """

    operation: Operation
    read_at: str | None = None
    #: The producer's batch this write is (exactly once), if any.
    progress: Progress | None = None
    #: A further check at begin, under the lock (the caller's: ADD SEGMENT's "no file twice").
    admission: Admission | None = None
    #: Index keys it looked up and wrote nothing for (a delete by keys): a concurrent commit
    #: that wrote one conflicts, as one that wrote a key it writes does.
    read_keys: pa.Table | None = None
    #: A transaction: the operations it ran, in order (recorded in its commit).
    operations: tuple[str, ...] = ()
    #: The schema its rows were conformed to when planned (None: the handle's current one);
    #: with ``schema_mode="merge"``, the changes making the version it creates.
    schema: WriteSchema | None = None
    #: The table versions it creates (``alter_table``, a merge write), worked out under the
    #: lock at begin and recorded in its instant.
    versions: list[TableVersion] = field(default_factory=list)

    def admit(self, context: TableContext, view: TimelineView) -> None:
        if self.admission is not None:
            self.admission(view)
        admit_progress(context, self.progress, view)
        if self.schema is not None and self.schema.changes:
            self.versions = admit_versions(context, view, self.schema)

    def written_schema(self, context: TableContext) -> WriteSchema:
        """The schema its files are written with: the version it creates, or the one it planned
        with (the handle's current one when it captured none)."""
        if self.versions:
            return WriteSchema(self.versions[-1].schema, self.versions[-1].schema_id)
        if self.schema is not None:
            return self.schema
        return current_schema(context)

    def check_version(self, context: TableContext, view: TimelineView, pending: Pending) -> None:
        """A write creating a version loses to any version completed since it began."""
        check_versions(context, view, self.versions, pending.instant.time)

    def write(self, context: TableContext, pending: Pending) -> Written:
        return write_phase(context, pending, self)

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        return Written()

    def deleted_files(self) -> set[str]:
        """Data files it deletes rows from: a concurrent commit that deleted rows of or removed
        one conflicts."""
        return set()

    def check(self, context: TableContext, view: TimelineView, pending: Pending, written: Written) -> None:
        self.check_version(context, view, pending)
        _conflicts.check(context, view, operation=self.operation, instant_time=pending.instant.time,
                         read_at=self.read_at,
                         keys=checked_keys(context, view, self.read_at, self.read_keys, pending, written),
                         files=self.deleted_files())

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        """Its kind's rows, segments and removals (under the lock, after ``check``)."""
        raise NotImplementedError

    def streams(self, context: TableContext, view: TimelineView, pending: Pending,
                rows: int) -> list[StreamRecord]:
        """The producer's record moved to this batch (see ``_progress.progressed``)."""
        if self.progress is None:
            return []
        return progressed(context, view, self.progress, pending, rows)

    def record(self, context: TableContext, view: TimelineView, pending: Pending, written: Written, *,
               lease: Lease, extra: dict[str, str] | None,
               retries: int) -> tuple[MetadataChanges, CommitMetadata]:
        done = self.changes(context, view, pending, written)
        files, stats = done.files, done.stats
        if done.removed_files:
            files = pa.concat_tables([files, tombstones(FILES_SCHEMA, done.removed_files)])
            stats = pa.concat_tables([stats, tombstones(stats.schema, done.removed_files)])
        deletes = delete_rows(done.deltas_added, pending.instant.time)
        if done.removed_deltas:
            deletes = pa.concat_tables([deletes, tombstones(DELETES_SCHEMA, done.removed_deltas)])
        metadata = CommitMetadata(
            operation=self.operation, segment=pending.segment, files_added=list(done.statuses),
            files_removed=done.removed_files,
            segments_removed=[s.id for s in done.segments if s.status == SegmentStatus.MARKED_FOR_DELETE],
            rows_added=sum(s.rows for s in done.statuses), rows_deleted=done.rows_deleted,
            extra=dict(extra or {}), deltas_added=done.deltas_added, deltas_removed=done.removed_deltas,
            index_shards=sorted(written.index_sizes), read_at=self.read_at,
            segments_merged=done.merged, retries=retries, operations=list(self.operations),
            **producer_fields(self.progress),
        )
        changes = MetadataChanges(
            files=files, column_stats=stats, segments=done.segments, deletes=deletes,
            record_index=written.index_sizes,
            streams=self.streams(context, view, pending, metadata.rows_added))
        return with_versions(changes, metadata, self.versions, pending.instant.time)


# -- building blocks -------------------------------------------------------------------------------


def producer_fields(progress: Progress | None) -> dict[str, Any]:
    """``CommitMetadata``'s ``app_id``/``app_version`` of an idempotent write (a stream's batch
    ids are in ``extra`` already)."""
    if progress is None or progress.kind != ProducerKind.APP:
        return {}
    return {"app_id": progress.name, "app_version": progress.batch}


def write_rows(context: TableContext, pending: Pending, rows: Iterable[pa.RecordBatch], *,
               presorted: bool = False,
               schema: WriteSchema | None = None) -> tuple[list[FileStatus], pa.Table | None]:
    """Write ``rows`` as data files of the pending segment; return their statuses and the index
    entries of their keys (None: the table has no record index, or no row). ``schema``: the
    one the rows were conformed to (None: the handle's current one).

    The entries of the first data file are built before the file is written, and their log
    encoded on a thread meanwhile (``RecordIndex.prepare``): a load of one file (up to
    ``write.target_file_bytes``) pays for its index log while Parquet encodes."""
    assert pending.segment is not None
    schema = schema or current_schema(context)
    keys = layout_names(context, schema.schema, context.record_key_columns)
    index = context.metadata.record_index
    drafts: list[pa.Table] = []

    def draft(path: str, file_keys: pa.Table) -> None:
        assert index is not None and pending.segment is not None
        count = file_keys.num_rows
        entries = index.entries(
            index_keys(file_keys, keys), segment=pending.segment,
            file=pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, dtype=np.int32)), pa.array([path])),
            position=pa.array(np.arange(count, dtype=np.int64)), instant=pending.instant.time, encoded=True)
        drafts.append(index.prepare(entries) if not drafts and count else entries)

    writer = DataFileWriter(
        context.store, schema.schema, instant_time=pending.instant.time, segment=pending.segment,
        partition_by=layout_names(context, schema.schema, context.partition_by),
        sort_by=layout_names(context, schema.schema, context.sort_by), new_token=context.ids,
        target_file_bytes=target_file_bytes(context.properties),
        key_columns=keys, presorted=presorted,
        sort_memory_bytes=sort_memory_bytes(context.properties), schema_id=schema.schema_id,
        on_file=draft if index is not None else None,
    )
    statuses = writer.write(rows)
    if len(drafts) == 1 and drafts[0].num_rows:
        return statuses, drafts[0]  # the table prepared: its log is (being) encoded already
    if drafts and index is not None:
        index.unprepare(drafts[0])  # several files: one log of all of them, encoded below
    located = writer.key_locations()
    if index is None or not located.keys.num_rows:
        return statuses, None
    return statuses, new_entries(index, located, keys, pending.segment, pending.instant.time)


def layout_names(context: TableContext, schema: pa.Schema, columns: Sequence[str]) -> list[str]:
    """``columns`` (layout columns: partition, sort or record key, named as the handle's current
    version names them) as ``schema`` names them, found by column id: a write planned before a
    rename writes its rows, and their partition folders, under the names it conformed them to.
    A sort column ``schema`` lacks (dropped since) is left out."""
    if schema is context.schema:
        return list(columns)
    current = {name: field_id(context.schema.field(name)) for name in columns}
    names = {field_id(f): f.name for f in schema}
    return [names[i] for i in current.values() if i in names]


def new_entries(index: RecordIndex, located: KeyLocations, columns: Sequence[str], segment: str,
                instant_time: str) -> pa.Table:
    """The index entries of every row a write added, built as whole columns (one call for all
    files: the per-file Python cost stays out of million-row loads)."""
    return index.entries(index_keys(located.keys, columns), segment=segment, file=located.file,
                         position=located.position, instant=instant_time, encoded=True)


def removed_entries(index: RecordIndex, keys: pa.Table, instant_time: str) -> pa.Table:
    """Tombstone index entries of ``keys`` (index key columns): rows deleted, not rewritten."""
    count = keys.num_rows
    return index.entries(keys, segment=pa.nulls(count, pa.string()), file=pa.nulls(count, pa.string()),
                         position=pa.nulls(count, pa.int64()), instant=instant_time, deleted=True)


def finish_phase(context: TableContext, pending: Pending, written: Written, entries: list[pa.Table],
                 deleted: dict[str, Positions], current: LiveDeltas) -> Written:
    """The end of every data write phase: the delete deltas of ``deleted`` (positions by data
    file, ``current`` the live deltas read), then the index log blocks of ``entries``."""
    written.deltas, written.replaced = stage_deletes(
        context.store, pending.instant.time, deleted, current,
        delete_compaction_threshold(context.properties))
    index = context.metadata.record_index
    if index is not None and entries:
        # One table is passed as it is: a prepared one then stores the log encoded meanwhile.
        all_entries = entries[0] if len(entries) == 1 else pa.concat_tables(
            [index.encoded(part) for part in entries])
        written.index_sizes = index.write(pending.instant.time, all_entries)
        written.keys = all_entries.select(index.keys)
    return written


def file_rows(statuses: Sequence[FileStatus], segment: str, instant_time: str) -> pa.Table:
    """``files`` rows adding ``statuses`` to ``segment``."""
    return pa.Table.from_pylist([
        {"path": s.path, "segment": segment, "partition": s.partition, "format": s.format,
         "rows": s.rows, "size": s.size, "instant": instant_time, "deleted": False,
         "modified_ms": s.modified_ms, "version": s.version,
         "schema_id": s.schema_id}
        for s in statuses
    ], schema=FILES_SCHEMA)


def stats_rows(statuses: Sequence[FileStatus], schema: pa.Schema) -> pa.Table:
    """``column_stats`` rows of ``statuses`` (whose statistics are keyed by column name), keyed
    by the column ids of ``schema`` (the schema the files were written with; without ids, it is
    version 0's and gets ``assign_ids``'s)."""
    schema = assign_ids(schema)
    stats_schema = column_stats_schema(schema)
    ids = [f.name for f in stats_schema.field("columns").type]
    if not ids:
        return stats_schema.empty_table()
    names = {str(field_id(f)): f.name for f in schema}
    return pa.Table.from_pylist([
        {"path": s.path, "deleted": False,
         "columns": {key: ({"min": s.stats[name].min, "max": s.stats[name].max,
                            "nulls": s.stats[name].nulls, "count": s.stats[name].count}
                           if (name := names[key]) in s.stats else None) for key in ids}}
        for s in statuses
    ], schema=stats_schema)


def new_segment(context: TableContext, pending: Pending, statuses: Sequence[FileStatus],
                stats: pa.Table) -> SegmentEntry:
    """The ``Success`` entry of the pending segment holding ``statuses``."""
    assert pending.segment is not None
    return SegmentEntry(
        id=pending.segment, status=SegmentStatus.SUCCESS, format="parquet",
        partitions=tuple(sorted({s.partition for s in statuses if s.partition})),
        rows=sum(s.rows for s in statuses), data_size=sum(s.size for s in statuses),
        index_size=stats.nbytes, load_start_ms=parse_time(pending.instant.time),
        load_end_ms=context.clock(), instant=pending.instant.time,
    )


def added(context: TableContext, pending: Pending, written: Written,
          schema: pa.Schema | None = None) -> Recorded:
    """The record of a write that adds ``written``'s files (written with ``schema``; None: the
    handle's current one) as a new segment (if it has one) and its delete deltas; the kind adds
    removals and rows deleted."""
    statuses = written.statuses
    stats = stats_rows(statuses, context.schema if schema is None else schema)
    return Recorded(
        statuses=statuses, files=file_rows(statuses, pending.segment or "", pending.instant.time),
        stats=stats,
        segments=[new_segment(context, pending, statuses, stats)] if pending.segment is not None else [],
        deltas_added=written.deltas, rows_deleted=0, removed_deltas=list(written.replaced))


def written_keys(context: TableContext, view: TimelineView, read_at: str | None, pending: Pending,
                 written: Written) -> pa.Table | None:
    """The index keys the write phase wrote entries for (read back from the instant's log
    blocks when executors wrote them, and only if a commit completed since ``read_at``)."""
    index = context.metadata.record_index
    if written.keys is not None or index is None or not written.index_sizes:
        return written.keys
    if not view.completed_after(read_at or ""):
        return None  # nothing committed meanwhile: no key can overlap
    return index.instant_entries(pending.instant.time, sorted(written.index_sizes)).select(index.keys)


def checked_keys(context: TableContext, view: TimelineView, read_at: str | None,
                 read_keys: pa.Table | None, pending: Pending, written: Written) -> pa.Table | None:
    """The keys a concurrent commit must not have written: those this write writes, and those
    it read (``read_keys``), each once."""
    keys = written_keys(context, view, read_at, pending, written)
    if read_keys is None or read_keys.num_rows == 0 or not view.completed_after(read_at or ""):
        return keys
    if keys is None or keys.num_rows == 0:
        both = read_keys
    else:
        both = pa.concat_tables([keys, read_keys.select(keys.column_names).cast(keys.schema)])
    return both.group_by(both.column_names).aggregate([])


def to_commit(instant_time: str, completed_at: str, metadata: CommitMetadata) -> Commit:
    return Commit(
        instant=instant_time, completed_at=completed_at, operation=metadata.operation,
        segment=metadata.segment, files_added=len(metadata.files_added),
        rows_added=metadata.rows_added, rows_deleted=metadata.rows_deleted,
        paths_added=tuple(f.path for f in metadata.files_added), extra=dict(metadata.extra),
        retries=metadata.retries, segments_removed=tuple(metadata.segments_removed),
        segments_merged=tuple(metadata.segments_merged), operations=tuple(metadata.operations),
        schema_version=metadata.schema_version,
    )
