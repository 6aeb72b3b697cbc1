"""The metadata table: a merge-on-read table, updated in the same commit as each data write.

Visibility rule (HUDI-2285). Every data instant ``T`` writes its log blocks ``<T>.log.parquet``
and completes a ``deltacommit`` at the same time ``T`` on the metadata timeline *before* ``T``
completes on the data timeline. Readers never consult the metadata timeline's deltacommits:
they apply a block only if ``T`` is completed on the *data* timeline, so blocks of failed,
pending or rolled-back writes are never read.

Bases. A metadata compaction at time ``M`` folds, for every partition, the blocks of all data
instants completed at or before a horizon ``H`` into ``<M>_<H>.base.arrow``. ``H`` is the last
completion time on the data timeline when the compaction begins, under the table lock;
completion times only grow, so an instant pending then completes after ``H`` and its block stays
a log. A base is used only once compaction ``M`` completed on the metadata timeline.

Snapshot at completion time ``X``: the newest usable base with ``H <= X``, plus the blocks of
instants completed in ``(H, X]``, merged. Merges are commutative (see ``_records`` and
``_segments``), so the grouping compaction chose never changes the answer.

Writers. Log blocks and deltacommits are written under the data table's lock, by the writer of
their data instant. A compaction is an instant of its own: it begins and completes under the
lock, and folds in between without it, beating a heartbeat; compactions run one at a time. A
pending compaction whose heartbeat expired was left by a maintainer that died, and the next lock
holder retires it (:meth:`MetadataTable.recover`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import msgspec
import pyarrow as pa

from metatxn.timeline import (
    Action,
    Clock,
    CorruptMetadataError,
    Heartbeat,
    Instant,
    InvalidOptionError,
    Lease,
    LockLostError,
    ObjectNotFoundError,
    PrefixedStorage,
    Storage,
    StorageError,
    Timeline,
    TimelineOptions,
    TxnError,
    Vocabulary,
    next_time,
    parse_time,
    system_clock,
)

from ._blocks import MISSING, decode_block, decoding, encode_block, missing_block, write_block
from ._column_ids import assign_ids, ids_by_name
from ._column_stats import project_stats
from ._compactions import DoneCompactions
from ._index_layout import DEFAULT_SHARD_MAX_ENTRIES
from ._layout import (
    COLUMN_STATS,
    DELETES,
    FILES,
    METADATA_FOLDER,
    SCHEMAS,
    SEGMENTS,
    STREAMS,
    BaseFile,
    LogBlock,
    base_path,
    log_path,
    parse_listing,
    partition_folder,
)
from ._record_index import RecordIndex
from ._records import (
    DELETES_SCHEMA,
    FILES_SCHEMA,
    column_stats_schema,
    extend_two_phase,
    live,
    merge_two_phase,
    without_purged,
)
from ._schemas import (
    SCHEMAS_SCHEMA,
    TableVersion,
    latest,
    merge_versions,
    versions_from_arrow,
    versions_to_arrow,
)
from ._segments import (
    SEGMENTS_SCHEMA,
    SegmentEntry,
    max_load_id,
    merge_segment_tables,
    merge_segments,
    segments_to_arrow,
)
from ._streams import (
    STREAMS_SCHEMA,
    StreamKey,
    StreamRecord,
    merge_stream_tables,
    merge_streams,
    streams_to_arrow,
)

log = logging.getLogger("metatxn")

RETENTION_PATH = f"{METADATA_FOLDER}/retention.json"
#: The file format of the partitions' bases (see ``_blocks``): Arrow IPC, LZ4-compressed.
BASE_FORMAT = "arrow"
_NOTHING = "0" * 17


class SnapshotExpiredError(TxnError):
    """The requested snapshot is older than the metadata table retains."""


class MetadataOptions(msgspec.Struct, frozen=True, kw_only=True):
    #: Compact once this many deltacommits completed since the last compaction.
    compact_after: int = 10
    #: Keep what is needed to resolve the snapshots of the last this many data commits.
    retain_commits: int = 10

    def __post_init__(self) -> None:
        for name in ("compact_after", "retain_commits"):
            if getattr(self, name) <= 0:
                raise InvalidOptionError(f"metadata option {name} must be > 0, got {getattr(self, name)}")


class RetentionSource(Vocabulary):
    """Which retention expired old snapshots (and which table property keeps more)."""

    #: Metadata cleaning, ``metadata.retain_commits``.
    METADATA = "metadata"
    #: CLEAN FILES, ``clean.retain_commits`` and ``clean.retain_hours``.
    CLEAN = "clean"


class _Retention(msgspec.Struct, frozen=True, kw_only=True, tag="retention", tag_field="kind"):
    #: Blocks of instants completed at or before this time were deleted, or (CLEAN FILES) data
    #: files that snapshots older than it need: older snapshots are gone.
    resolvable_from: str
    #: Who set it. Records written before the field existed were written by metadata cleaning.
    source: RetentionSource = RetentionSource.METADATA
    #: The highest floor CLEAN FILES published: data files that only snapshots completed before
    #: it read may be gone. None: no clean published one; absent in records written before the
    #: field (then ``resolvable_from`` is the safe answer). The change feed reads commit metadata
    #: and files, not old metadata blocks, so only this floor limits it (design/changes.md).
    files_from: str | None = None
    #: Whether ``files_from`` is recorded (records written before it was kept say nothing).
    files_known: bool = False


@dataclass(frozen=True)
class RetentionFloor:
    """``retention.json``: snapshots completed before ``resolvable_from`` are expired, and data
    files read only by snapshots completed before ``files_from`` may be gone."""

    resolvable_from: str
    source: RetentionSource = RetentionSource.METADATA
    #: CLEAN FILES' floor (None: no clean removed a file snapshots read).
    files_from: str | None = None
    #: False when the record predates ``files_from`` and ``resolvable_from`` stands in for it.
    files_exact: bool = True

    def help(self) -> str:
        """The ``Help:`` line of an expired snapshot's error: which property keeps more."""
        if self.source == RetentionSource.CLEAN:
            return ("Help: CLEAN FILES removed data files older snapshots need; raise the table "
                    "properties clean.retain_commits or clean.retain_hours to keep more history")
        return "Help: raise the table property metadata.retain_commits to keep more history"


_retention_decoder = msgspec.json.Decoder(_Retention)


def retention_floor_of(storage: Storage) -> RetentionFloor | None:
    """The table's ``retention.json`` (None: nothing cleaned), read from its storage alone (a
    worker that holds no metadata table).

    Raises:
        CorruptMetadataError: ``retention.json`` cannot be decoded.
    """
    try:
        data = storage.read(RETENTION_PATH)
    except FileNotFoundError:
        return None
    return _floor_of(data)


def _floor_of(data: bytes) -> RetentionFloor:
    with decoding(RETENTION_PATH, "a JSON retention record (kind 'retention') with a "
                                  "17-digit resolvable_from"):
        retention = _retention_decoder.decode(data)
        parse_time(retention.resolvable_from)
        if retention.files_from is not None:
            parse_time(retention.files_from)
    # A record from before files_from was kept: any clean's floor is at most resolvable_from.
    files_from = retention.files_from if retention.files_known else retention.resolvable_from
    return RetentionFloor(retention.resolvable_from, retention.source, files_from,
                          retention.files_known)


class _DeltaRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The commit metadata of a deltacommit: what its data instant wrote here."""

    #: partition -> bytes of the log block written.
    bytes: dict[str, int] = msgspec.field(default_factory=dict)
    #: record-index shard ("0003") -> entries written.
    record_index_entries: dict[str, int] = msgspec.field(default_factory=dict)


#: Unreadable deltacommits remembered per MetadataTable (a readable one goes in ``_RECORDED``).
_RECORDS_KEPT = 4096
#: Deltacommit records kept per process, across every table and handle, least recently used out:
#: a record is a few hundred bytes, so this is a few MB at most.
_RECORDED_KEPT = 16_384
#: Deltacommits read in parallel when a check finds several it has not seen (storage latency
#: dominates: a cold check costs about one round trip per this many instants).
_RECORD_READERS = 16
#: Resolutions of one snapshot before giving up on a metadata table that keeps changing under it.
_RESOLVE_ATTEMPTS = 3
#: Deltacommit reads of one check are made one after the other for at most this long.
_SERIAL_BUDGET_S = 0.002


@dataclass(frozen=True)
class _Recorded:
    """What one completed deltacommit recorded, as the checks need it."""

    #: The metadata partitions it wrote a log block of.
    partitions: frozenset[str]
    #: The record-index shards it wrote entries for.
    shards: frozenset[int]

    @classmethod
    def of(cls, record: _DeltaRecord) -> _Recorded:
        return cls(frozenset(record.bytes),
                   frozenset(int(shard) for shard, count in record.record_index_entries.items()
                             if count and shard.isdigit()))


class _RecordedCache:
    """Process-wide: ``(table location, instant time)`` -> ``(completed_at, record)``.

    A completed deltacommit never changes, so what it recorded is read once per process, by
    whichever handle of the table needs it first. An entry is used only for the deltacommit file
    it was read from (same completion time), so a table recreated at the same location, or an
    instant recorded again after a rollback, is never answered from an older file. Only records
    that decoded are kept here: an unreadable deltacommit is retried by each new handle.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, str], tuple[str, _Recorded]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, location: str, instant: Instant) -> _Recorded | None:
        key = (location, instant.time)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] != instant.completed_at:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, location: str, instant: Instant, recorded: _Recorded) -> None:
        key = (location, instant.time)
        with self._lock:
            self._entries[key] = (instant.completed_at or "", recorded)
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def forget(self, location: str, instant_time: str) -> None:
        with self._lock:
            self._entries.pop((location, instant_time), None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_RECORDED = _RecordedCache(_RECORDED_KEPT)
_READERS: list[ThreadPoolExecutor] = []
_READERS_LOCK = threading.Lock()


def _readers() -> ThreadPoolExecutor:
    """Threads for deltacommit reads (their own: a check may run while index reads hold the
    record index's threads)."""
    with _READERS_LOCK:
        if not _READERS:
            _READERS.append(ThreadPoolExecutor(max_workers=_RECORD_READERS,
                                               thread_name_prefix="metatxn-deltacommit"))
        return _READERS[0]


@dataclass(frozen=True)
class MetadataChanges:
    """What one data instant changes in the metadata table."""

    files: pa.Table | None = None
    column_stats: pa.Table | None = None
    segments: Sequence[SegmentEntry] = ()
    deletes: pa.Table | None = None
    #: Producers' progress records the instant moves forward (streams, idempotent writers).
    streams: Sequence[StreamRecord] = ()
    #: Record-index entries the instant wrote during its write phase: shard -> entries.
    record_index: Mapping[int, int] = field(default_factory=dict)
    #: Table versions the instant creates (a schema or property change).
    versions: Sequence[TableVersion] = ()


@dataclass(frozen=True)
class MetadataCleanPlan:
    """What one cleaning of the metadata table deletes, and the retention floor it sets."""

    doomed: tuple[str, ...]
    #: Snapshots completed before this are expired once it is published (None: nothing to do).
    floor: str | None


@dataclass(frozen=True)
class MetadataSnapshot:
    """The merged metadata partitions at one point of the data timeline.

    Only the partitions a caller asked for are resolved; the others are None.
    """

    #: ``files`` rows, including tombstones of removed files (``deleted`` true).
    files: pa.Table | None = None
    segments: Mapping[str, SegmentEntry] | None = None
    #: ``column_stats`` rows.
    column_stats: pa.Table | None = None
    #: ``deletes`` rows: delete-delta files, including tombstones of merged or dropped ones.
    deletes: pa.Table | None = None
    #: Producers' progress by (kind, name), when resolved.
    streams: Mapping[StreamKey, StreamRecord] | None = None
    #: Every table version completed at or before the bound, by version, when resolved (always
    #: with ``column_stats``, which is read in the latest version's schema). Empty for a table
    #: never changed: its only version is ``table.json``'s.
    versions: Mapping[int, TableVersion] | None = None
    #: The largest load number among the segments (-1 if none), when segments were resolved.
    max_load_id: int = -1
    #: Metadata files read to build this snapshot, for diagnostics and tests.
    files_read: tuple[str, ...] = field(default=())

    def has(self, partition: str) -> bool:
        return self.partition(partition) is not None

    def partition(self, name: str) -> object:
        return {FILES: self.files, SEGMENTS: self.segments, COLUMN_STATS: self.column_stats,
                DELETES: self.deletes, STREAMS: self.streams, SCHEMAS: self.versions}[name]


def _snapshot(resolved: Mapping[str, object], read: tuple[str, ...]) -> MetadataSnapshot:
    return MetadataSnapshot(
        files=resolved.get(FILES),
        segments=resolved.get(SEGMENTS),  # type: ignore[arg-type]
        column_stats=resolved.get(COLUMN_STATS),
        deletes=resolved.get(DELETES),
        streams=resolved.get(STREAMS),  # type: ignore[arg-type]
        versions=resolved.get(SCHEMAS),  # type: ignore[arg-type]
        max_load_id=resolved.get("max_load_id", -1),  # type: ignore[arg-type]
        files_read=read,
    )


class MetadataTable:
    """The metadata table of one data table."""

    #: The file format (extension) of the bases this version writes.
    base_format = BASE_FORMAT

    def __init__(
        self,
        storage: Storage,
        table_schema: pa.Schema,
        *,
        clock: Clock = system_clock,
        owner: str | None = None,
        options: MetadataOptions | None = None,
        timeline_options: TimelineOptions | None = None,
        record_key: Sequence[str] = (),
        record_index_shards: int | None = None,
        record_index_shard_max_entries: int | None = None,
        table_id: str | None = None,
    ) -> None:
        self.storage = storage
        self.options = options or MetadataOptions()
        self.timeline = Timeline(PrefixedStorage(storage, METADATA_FOLDER), clock=clock, owner=owner,
                                 options=timeline_options)
        #: The newest usable base horizon this object saw (a hint for when to compact).
        self._horizon_hint: str | None = None
        #: Completed deltacommits on the metadata timeline at its last listing, by time.
        self._deltacommits: dict[str, Instant] = {}
        #: Where the table is: with an instant time, the key of ``_RECORDED``.
        self._location = storage.uri
        #: Deltacommits found unreadable (time -> completed_at): nothing to check against.
        self._unreadable: dict[str, str | None] = {}
        #: ``recorded_shards(T)``: the record-index shards ``T`` recorded (see RecordIndex.files).
        self.recorded_shards = _ShardsRecorded(self)
        #: Version 0's schema: ``table.json``'s, with the ids ``assign_ids`` gives it (a table
        #: created before column ids has none in ``table.json``).
        self.base_schema = assign_ids(table_schema)
        #: Version 0's column name -> id: how ``column_stats`` blocks keyed by name are read.
        self._version0_ids = ids_by_name(self.base_schema)
        #: Statistics schemas by the schema id of the version they are built from.
        self._stats_schemas: dict[int, pa.Schema] = {}
        #: The record schema of each partition; ``column_stats``'s is version 0's (each
        #: resolution reads it in the schema of its latest version: :meth:`stats_schema`).
        self.schemas = {
            FILES: FILES_SCHEMA,
            COLUMN_STATS: column_stats_schema(self.base_schema),
            SEGMENTS: SEGMENTS_SCHEMA,
            DELETES: DELETES_SCHEMA,
            STREAMS: STREAMS_SCHEMA,
            SCHEMAS: SCHEMAS_SCHEMA,
        }
        #: The log blocks of the last data instant this object recorded (``write_delta``):
        #: ``(instant time, partition -> (path, bytes))``. Blocks are immutable, so they stay
        #: true; whether that instant completed, and right after the state they extend, is for
        #: :meth:`extend_own`'s caller to tell from the data timeline.
        self._own: tuple[str, dict[str, tuple[str, bytes]]] | None = None
        #: The record-level index of a keyed table (None without a record key).
        self.record_index = (
            RecordIndex(storage, [table_schema.field(name).type for name in record_key],
                        record_index_shards or 1,
                        shard_max_entries=record_index_shard_max_entries or DEFAULT_SHARD_MAX_ENTRIES,
                        shared_as=f"{storage.uri}#{table_id}" if table_id is not None else None)
            if record_key else None
        )

    def apply_options(self, options: MetadataOptions, timeline_options: TimelineOptions,
                      shard_max_entries: int | None) -> None:
        """Take a table's changed properties from now on: compaction and cleaning of the
        metadata table, its timeline's lock and archival, and the record index's split size."""
        self.options = options
        self.timeline.apply_options(timeline_options)
        if self.record_index is not None:
            self.record_index.policy = dataclasses.replace(
                self.record_index.policy,
                shard_max_entries=shard_max_entries or DEFAULT_SHARD_MAX_ENTRIES)

    # -- writing -------------------------------------------------------------------------------

    def write_delta(self, instant_time: str, changes: MetadataChanges, *, lease: Lease) -> int:
        """Write the log blocks of data instant ``instant_time`` and complete its deltacommit.

        Returns the bytes written. Must run under the table lock, before the data instant
        completes.
        """
        blocks: dict[str, pa.Table] = {}
        if changes.files is not None and changes.files.num_rows:
            blocks[FILES] = changes.files
        if changes.column_stats is not None and changes.column_stats.num_rows:
            blocks[COLUMN_STATS] = changes.column_stats
        if changes.segments:
            blocks[SEGMENTS] = segments_to_arrow(changes.segments)
        if changes.deletes is not None and changes.deletes.num_rows:
            blocks[DELETES] = changes.deletes
        if changes.streams:
            blocks[STREAMS] = streams_to_arrow(changes.streams)
        if changes.versions:
            blocks[SCHEMAS] = versions_to_arrow(changes.versions)
        written = 0
        sizes: dict[str, int] = {}
        own: dict[str, tuple[str, bytes]] = {}
        self._own = None
        for partition, table in blocks.items():
            schema = self.schemas[partition]
            table = table.select(schema.names)
            if partition == COLUMN_STATS:
                # Kept in the writer's schema (the version it began with: a schema change may
                # have completed since); readers project it by id.
                pass
            elif not table.schema.equals(schema):
                table = table.cast(schema)
            path = log_path(partition_folder(partition), instant_time)
            data = encode_block(path, table)
            self.storage.put_if_absent(path, data)
            sizes[partition] = len(data)
            own[partition] = (path, data)
            written += sizes[partition]
        # The deltacommit is bookkeeping (readers trust the data timeline), so it is recorded
        # straight as completed, after its blocks: one file, never a pending instant.
        entries = {f"{shard:04d}": count for shard, count in sorted(changes.record_index.items())}
        record = _DeltaRecord(bytes=sizes, record_index_entries=entries)
        delta = self.timeline.record_completed(Action.DELTACOMMIT, instant_time, record, lease=lease)
        # What this process wrote it need not read back: the check of recorded blocks and the
        # next resolution of the latest state (``extend_own``) take it from here.
        _RECORDED.put(self._location, delta, _Recorded.of(record))
        self._deltacommits[instant_time] = delta
        self._own = (instant_time, own)
        return written

    @property
    def checked_everything(self) -> bool:
        """Whether every deltacommit this object read decoded (a resolution with an unreadable
        one left blocks unchecked, so it must not stand for a checked one: see
        ``TableContext.metadata_at``)."""
        return not self._unreadable

    def remove_instant(self, instant_time: str, *, lease: Lease) -> list[str]:
        """Undo what data instant ``instant_time`` wrote here (it is being rolled back)."""
        removed = []
        for partition in self.schemas:
            path = log_path(partition_folder(partition), instant_time)
            if self.storage.exists(path):
                self.storage.delete(path)
                removed.append(path)
        if self.record_index is not None:
            removed += self.record_index.remove(instant_time)
        self._unreadable.pop(instant_time, None)
        _RECORDED.forget(self._location, instant_time)
        if self._own is not None and self._own[0] == instant_time:
            self._own = None
        current = self.timeline.view(lease).get(instant_time)
        if current is not None and current.is_pending:
            self.timeline.abort(current, lease=lease)
        return removed

    def recover(self, *, lease: Lease) -> None:
        """Retire metadata compactions whose maintainer died (its heartbeat expired).

        Every lock holder runs this first. A compaction runs outside the table lock, beating a
        heartbeat, so a pending one whose heartbeat is fresh is at work and stays. One found
        expired is aborted and its bases deleted; if its maintainer was only paused, it finds
        itself aborted when it tries to complete and deletes what it wrote after (see
        :meth:`complete_compaction`). A pending compaction older than a completed one did not
        die either (a compaction begins only once the older ones are decided): its completed
        file was lost. Its bases are kept (deleting them would lose what they folded) and
        :meth:`damaged_files` reports it.
        """
        view = self.timeline.view(lease)
        for instant in view.pending():
            if instant.action == Action.COMPACTION and _lost_completion(instant, view.completed()):
                continue
            if instant.action == Action.COMPACTION and not self.timeline.is_expired(instant):
                continue
            try:
                # Delete, then abort: a death between the two leaves a pending compaction that
                # the next lock holder retires again, never bases of an aborted one that no one
                # would delete. Its maintainer cannot complete it meanwhile: it is expired, and
                # complete_compaction refuses an expired compaction under the same lock. (A
                # lock holder paused past its lease between its deletes and its abort could
                # still race a maintainer that woke up: see design/metadata-table.md.)
                if instant.action == Action.COMPACTION:
                    self._remove_bases(instant)
                self.timeline.abort(instant, lease=lease)
            except LockLostError:
                raise
            except Exception:
                # One dead compaction must not block every writer: its bases, if left, are
                # never read (it is not completed), and validate reports them.
                log.warning("could not retire metadata instant %s of a dead maintainer",
                            instant.time, exc_info=True)

    def _remove_bases(self, instant: Instant) -> list[str]:
        """Delete every base compaction ``instant`` may have written."""
        try:
            horizon: str | None = self.timeline.read_plan(instant, dict).get("horizon", _NOTHING)
        except (FileNotFoundError, CorruptMetadataError):
            horizon = None  # retired and archived since: find its bases by name
        removed = []
        for partition in self.schemas:
            folder = partition_folder(partition)
            if horizon is not None:
                paths = [base_path(folder, instant.time, horizon, extension)
                         for extension in (BASE_FORMAT, "parquet")]
            else:
                paths = [b.path for b in parse_listing(self.storage.list(folder))[0]
                         if b.compaction_time == instant.time]
            for path in paths:
                self.storage.delete(path)
                removed.append(path)
        if self.record_index is not None:
            removed += self.record_index.remove_bases(instant.time)
        return removed

    # -- reading -------------------------------------------------------------------------------

    def resolve(self, completed: Mapping[str, str], upper_inclusive: str | None = None, *,
                partitions: Sequence[str] = (FILES, SEGMENTS),
                since: tuple[str, MetadataSnapshot] | None = None) -> MetadataSnapshot:
        """Merge ``partitions`` as of completion time ``upper_inclusive`` (None: the latest).

        ``completed`` maps each completed data instant's time to its completion time; it must
        hold every instant that completed after the oldest retained base. ``since`` is an earlier
        result ``(its upper bound, snapshot)`` to extend: because merges are associative, only the
        blocks completed after it need reading, unless a newer base replaced them.

        Readers take no lock, so cleaning may delete a base or block between our listing and our
        read; the resolution is then redone from a fresh listing. Every block that a completed
        data instant in the window recorded in its deltacommit must be there: a block still
        missing after listing again is damage, never fewer rows.

        A resolution that read every file it listed is still checked afterwards (validate after
        read), because a file cleaning deleted before we listed its folder is simply not listed,
        and the deltacommits that would reveal it may be archived or unreadable. Cleaning
        publishes its floor before it deletes anything, and deletes only what a base of a
        completed compaction supersedes; so the result is exact if, read after it, the floor
        is still at or below ``upper_inclusive`` and no compaction this resolution did not use
        has completed with a horizon at or below it (else a fresher listing picks that base:
        resolve again).

        Raises:
            SnapshotExpiredError: the snapshot is older than what the table retains (also when
                cleaning expired it while it was being resolved).
            CorruptMetadataError: a block or base cannot be decoded, or a block a completed
                instant recorded is missing.
            StorageError: metadata compactions kept completing under every attempt.
        """
        bound = upper_inclusive or "9" * 17
        newer: tuple[str, str | None] | None = None
        for attempt in range(_RESOLVE_ATTEMPTS):
            try:
                resolved, usable, lows = self._resolve(completed, upper_inclusive,
                                                       partitions=partitions, since=since)
            except FileNotFoundError as exc:
                if attempt == _RESOLVE_ATTEMPTS - 1:
                    # Cleaning deletes what snapshots older than its floor need: expired, not lost.
                    self._check_resolvable(bound)
                    raise missing_block(exc) from None
                continue
            self._check_resolvable(bound)
            newer = self._newer_base(usable, min(lows.values()), bound) if lows else None
            if newer is None:
                return resolved
        # The same completed compaction missed three times over: its base is lost. Its files
        # base if the files listing lacked it (only a listed one makes it usable), else the base
        # of a partition that resolved below it.
        assert newer is not None
        compaction, horizon = newer
        if horizon is not None:
            lacking = FILES if compaction not in usable or FILES not in lows else next(
                (p for p, low in lows.items() if low < horizon), FILES)
            raise missing_block(ObjectNotFoundError(base_path(
                partition_folder(lacking), compaction, horizon, BASE_FORMAT)))
        raise StorageError(
            f"resolving the metadata table as of {bound}: {_RESOLVE_ATTEMPTS} attempts in a row "
            "found a completed metadata compaction newer than the bases they read (compactions "
            "completing while it was read, or a base of a completed compaction missing: "
            "validate() reports that); nothing was returned")

    def _newer_base(self, usable: Mapping[str, str], lowest: str,
                    bound: str) -> tuple[str, str | None] | None:
        """A completed compaction (time, horizon) with its horizon in ``(lowest, bound]``, if
        any: a resolution that took merged state at ``lowest`` with compactions ``usable`` then
        missed a base it should have used, and cleaning to that base's floor may have deleted
        what it listed, or before it listed it. Costs one listing; a horizon is read only for a
        compaction it did not use that began after ``lowest`` (a horizon is always below its
        compaction's time). One whose horizon cannot be read counts, its horizon None."""
        for instant in self.timeline.load().completed():
            if instant.action != Action.COMPACTION:
                continue
            horizon = usable.get(instant.time)
            if horizon is None:
                if instant.time <= lowest:
                    continue
                try:
                    horizon = str(self.timeline.read_metadata(instant, dict)["horizon"])
                except (FileNotFoundError, CorruptMetadataError, KeyError, TypeError):
                    return instant.time, None  # unknown: let a fresh listing decide
            if lowest < horizon <= bound:
                return instant.time, horizon
        return None

    def _resolve(
        self,
        completed: Mapping[str, str],
        upper_inclusive: str | None = None,
        *,
        partitions: Sequence[str] = (FILES, SEGMENTS),
        since: tuple[str, MetadataSnapshot] | None = None,
    ) -> tuple[MetadataSnapshot, dict[str, str], dict[str, str]]:
        """One resolution; the completed compactions (time -> horizon) it chose bases from; and
        per partition whose folder holds bases, the horizon it took merged state at (the blocks
        above it are what it read)."""
        bound = upper_inclusive or "9" * 17
        files_listing = self.storage.list(partition_folder(FILES))  # once: bases and blocks
        usable = self._completed_compactions(files_listing)
        read: list[str] = []
        resolved: dict[str, object] = {}
        lows: dict[str, str] = {}
        # Statistics are read in the schema of the latest version at the bound: versions first.
        wanted = [SCHEMAS] if SCHEMAS in partitions or COLUMN_STATS in partitions else []
        wanted += [p for p in partitions if p != SCHEMAS]
        stats_schema = self.schemas[COLUMN_STATS]
        for partition in wanted:
            listing = files_listing if partition == FILES else \
                self.storage.list(partition_folder(partition))
            base, logs = self._plan(partition, completed, bound, usable, listing)
            earlier: object = None
            low = base.horizon if base is not None else ""  # the window of blocks to read
            if since is not None and since[1].has(partition) and (
                    base is None or base.horizon <= since[0]) and (
                    # Statistics merged in another schema are read again (a schema change
                    # since: rare).
                    partition != COLUMN_STATS
                    or self.stats_schema(since[1].versions).equals(stats_schema)):
                earlier = since[1].partition(partition)
                logs = [b for b in logs if completed[b.instant_time] > since[0]]
                low = since[0]
            elif base is not None:
                earlier = self._read(partition, base.path, stats_schema)
                read.append(base.path)
            if parse_listing(listing)[0]:  # a partition compaction writes no base of is no gauge
                lows[partition] = low
            self._check_recorded(partition, logs, completed, low, bound, usable)
            blocks = [self._read(partition, b.path, stats_schema) for b in logs]
            read += [b.path for b in logs]
            stats_schema = self._fold(partition, earlier, base.path if base is not None else None,
                                      [b.path for b in logs], blocks, since, resolved, stats_schema)
        return _snapshot(resolved, tuple(read)), usable, lows

    def _fold(self, partition: str, earlier: object, base: str | None, paths: list[str],
              blocks: list[pa.Table], since: tuple[str, MetadataSnapshot] | None,
              resolved: dict[str, object], stats_schema: pa.Schema) -> pa.Schema:
        """Merge ``blocks`` (read from ``paths``, in completion order) into ``earlier`` (merged
        state: read from ``base``, or ``since``'s snapshot's, or None) and put the result in
        ``resolved``; return the statistics schema resolutions read in from here on."""
        if partition == SCHEMAS:
            if isinstance(earlier, Mapping):
                versions = dict(earlier)
            else:
                versions = {}
                if earlier is not None and base is not None:
                    self._merge_versions([(base, earlier)], versions)
            self._merge_versions(zip(paths, blocks, strict=True), versions)
            resolved[partition] = versions
            return self.stats_schema(versions)
        if partition == SEGMENTS:
            if isinstance(earlier, Mapping):  # extending a snapshot: only new ids to scan
                held = dict(earlier)
                top = since[1].max_load_id if since is not None else max_load_id(held)
            else:
                held = merge_segments([earlier] if earlier is not None else [])
                top = max_load_id(held)
            resolved[partition] = merge_segments(blocks, into=held)
            for block in blocks:
                top = max(top, max_load_id(block["id"].to_pylist()))
            resolved["max_load_id"] = top
        elif partition == STREAMS:
            held_streams = dict(earlier) if isinstance(earlier, Mapping) else merge_streams(
                [earlier] if earlier is not None else [])
            resolved[partition] = merge_streams(blocks, into=held_streams)
        else:
            schema = stats_schema if partition == COLUMN_STATS else self.schemas[partition]
            resolved[partition] = (extend_two_phase(earlier, blocks, schema)
                                   if earlier is not None else merge_two_phase(blocks, schema))
        return stats_schema

    def extend_own(self, since: tuple[str, MetadataSnapshot], instant_time: str) -> MetadataSnapshot | None:
        """``since``'s snapshot extended with the blocks this object wrote for data instant
        ``instant_time`` (its last :meth:`write_delta`), with no storage call; None when it did
        not write that instant's blocks, or when they change the table's version.

        The caller vouches, from the data timeline, that ``instant_time`` completed and is the
        only instant that completed after ``since``'s bound: then the snapshot at its completion
        is exactly this (merges are associative; a compaction or a cleaning since changes where
        state is kept, never what it is).
        """
        own = self._own
        snapshot = since[1]
        if own is None or own[0] != instant_time or SCHEMAS in own[1] or not snapshot.has(SCHEMAS):
            return None
        stats_schema = self.stats_schema(snapshot.versions)
        resolved: dict[str, object] = {}
        folded: list[str] = []
        for partition in (SCHEMAS, *(p for p in self.schemas if p != SCHEMAS)):
            if not snapshot.has(partition):
                continue
            block = own[1].get(partition)
            paths = [block[0]] if block is not None else []
            blocks = [self._read(partition, path, stats_schema) for path in paths]
            self._fold(partition, snapshot.partition(partition), None, paths, blocks, since,
                       resolved, stats_schema)
            folded += paths
        # Named as read (from the bytes kept): another handle taking this state checks they are
        # still on storage.
        return _snapshot(resolved, tuple(folded))

    def stats_schema(self, versions: Mapping[int, TableVersion] | None) -> pa.Schema:
        """The ``column_stats`` schema of the latest of ``versions`` (version 0's if none): the
        schema a resolution reads every statistics block and base in."""
        current = latest(versions)
        key = current.schema_id if current is not None else 0
        found = self._stats_schemas.get(key)
        if found is None:
            schema = current.schema if current is not None else self.base_schema
            found = self._stats_schemas[key] = column_stats_schema(assign_ids(schema))
        return found

    def _read(self, partition: str, path: str, stats_schema: pa.Schema) -> pa.Table:
        """A block or base of ``partition``; statistics projected to ``stats_schema``. A block
        this object wrote last is decoded from the bytes it stored (a file is never rewritten)."""
        own = self._own[1].get(partition) if self._own is not None else None
        data = own[1] if own is not None and own[0] == path else self.storage.read(path)
        if partition == COLUMN_STATS:
            ids = self._version0_ids
            return decode_block(path, data, stats_schema,
                                project=lambda table: project_stats(table, stats_schema, ids))
        return decode_block(path, data, self.schemas[partition])

    @staticmethod
    def _merge_versions(tables: Iterable[tuple[str, pa.Table]],
                        into: dict[int, TableVersion]) -> dict[int, TableVersion]:
        """Decode ``(path, table)`` pairs of the ``schemas`` partition and merge them into
        ``into``."""
        for path, table in tables:
            merge_versions(versions_from_arrow(table, path), path, into=into)
        return into

    def _merge(self, partition: str, tables: list[pa.Table]) -> pa.Table:
        if partition == SCHEMAS:
            return versions_to_arrow(self._merge_versions(
                ((partition_folder(SCHEMAS), t) for t in tables), {}).values())
        if partition == SEGMENTS:
            return merge_segment_tables(tables)
        if partition == STREAMS:
            return merge_stream_tables(tables)
        return merge_two_phase(tables, self.schemas[partition])  # sorted by key, for bases

    def _plan(self, partition: str, completed: Mapping[str, str], bound: str,
              usable: Mapping[str, str],
              listing: list[str] | None = None) -> tuple[BaseFile | None, list[LogBlock]]:
        if listing is None:
            listing = self.storage.list(partition_folder(partition))
        bases, logs = parse_listing(listing)
        candidates = [b for b in bases if usable.get(b.compaction_time) == b.horizon
                      and b.horizon <= bound]
        base = max(candidates, key=lambda b: (b.horizon, b.compaction_time), default=None)
        horizon = base.horizon if base is not None else ""
        chosen = [block for block in logs
                  if horizon < completed.get(block.instant_time, "") <= bound]
        chosen.sort(key=lambda block: completed[block.instant_time])
        return base, chosen

    def _check_recorded(self, partition: str, logs: Sequence[LogBlock], completed: Mapping[str, str],
                        low_exclusive: str, bound: str, usable: Mapping[str, str]) -> None:
        """Every data instant completed in ``(low_exclusive, bound]`` whose deltacommit records a
        block of ``partition`` has that block among ``logs`` (the listing).

        Only instants of the window whose block is not in the listing are looked up; what their
        deltacommits recorded is read once per process (see ``_RecordedCache``), and the ones
        not read yet are read in parallel.

        Raises:
            ObjectNotFoundError: such a block is missing (the caller lists again, then reports
                it as damage).
        """
        listed = {block.instant_time for block in logs}
        unlisted = [(instant_time, done_at) for instant_time, done_at in completed.items()
                    if low_exclusive < done_at <= bound and instant_time not in listed]
        self.prefetch_recorded(instant_time for instant_time, _ in unlisted)
        for instant_time, done_at in unlisted:
            record = self.recorded(instant_time)
            if record is not None and partition in record.partitions:
                # A completed compaction that folded the block means its base is what is lost.
                folding = sorted((h, m) for m, h in usable.items() if done_at <= h <= bound)
                raise ObjectNotFoundError(
                    base_path(partition_folder(partition), folding[-1][1], folding[-1][0], BASE_FORMAT)
                    if folding else log_path(partition_folder(partition), instant_time))

    def recorded(self, instant_time: str) -> _Recorded | None:
        """What data instant ``instant_time`` recorded in its deltacommit, if that is on the
        active metadata timeline (as of this object's last listing) and readable (else None:
        nothing to check against; validate reports a damaged deltacommit). Read once per
        process: a completed deltacommit never changes."""
        instant = self._deltacommits.get(instant_time)
        if instant is None:
            return None
        found = _RECORDED.get(self._location, instant)
        if found is not None or self._unreadable.get(instant_time, "") == instant.completed_at:
            return found
        return self._note(instant, self._read_recorded(instant))

    def prefetch_recorded(self, instant_times: Iterable[str]) -> None:
        """Read the deltacommits of ``instant_times`` not read yet (by any handle of this
        process), so that :meth:`recorded` answers them from memory: one after the other while
        that is fast, the rest in parallel once reads prove slow (an object store)."""
        missing = []
        for instant_time in instant_times:
            instant = self._deltacommits.get(instant_time)
            if instant is not None and _RECORDED.get(self._location, instant) is None and \
                    self._unreadable.get(instant_time, "") != instant.completed_at:
                missing.append(instant)
        # Serially while reads are fast (local disk, memory: threads would cost more than they
        # save); once they have taken _SERIAL_BUDGET_S, the rest in parallel (object stores).
        started = time.perf_counter()
        done = 0
        while done < len(missing) and time.perf_counter() - started < _SERIAL_BUDGET_S:
            self._note(missing[done], self._read_recorded(missing[done]))
            done += 1
        rest = missing[done:]
        if rest:
            for instant, found in zip(rest, _readers().map(self._read_recorded, rest), strict=True):
                self._note(instant, found)

    def _read_recorded(self, instant: Instant) -> _Recorded | None:
        """Read one deltacommit (any thread); a readable one goes into the process cache."""
        try:
            record = self.timeline.read_metadata(instant, _DeltaRecord)
        except (FileNotFoundError, CorruptMetadataError):
            return None
        found = _Recorded.of(record)
        _RECORDED.put(self._location, instant, found)
        return found

    def _note(self, instant: Instant, found: _Recorded | None) -> _Recorded | None:
        if found is None:
            self._unreadable[instant.time] = instant.completed_at
            if len(self._unreadable) > _RECORDS_KEPT:  # the oldest out (threads may race here)
                with contextlib.suppress(RuntimeError, KeyError, StopIteration):
                    del self._unreadable[next(iter(self._unreadable))]
        return found

    def _completed_compactions(self, files_listing: list[str] | None = None) -> dict[str, str]:
        """Completed metadata compactions: compaction time -> horizon (from the base names)."""
        view = self.timeline.load()
        self._deltacommits = {i.time: i for i in view.completed() if i.action == Action.DELTACOMMIT}
        done = {i.time for i in view.completed() if i.action == Action.COMPACTION}
        horizons: dict[str, str] = {}
        if files_listing is None:
            files_listing = self.storage.list(partition_folder(FILES))
        bases, _ = parse_listing(files_listing)
        for base in bases:
            if base.compaction_time in done:
                horizons[base.compaction_time] = base.horizon
        self._horizon_hint = max(horizons.values(), default=_NOTHING)
        return horizons

    def lookup_keys(self, keys: pa.Table, completed: Mapping[str, str], bound: str, *,
                    instants: bool = False) -> pa.Table:
        """Record-index entries of ``keys`` at completion time ``bound`` (tombstones included).

        Raises:
            SnapshotExpiredError: cleaning removed what resolves ``bound`` (checked after the
                reads: cleaning publishes its floor before it deletes anything).
        """
        assert self.record_index is not None, "a table without a record key has no record index"
        for attempt in range(3):
            try:
                # The compactions are read after the index is listed (see RecordIndex._listing).
                entries = self.record_index.lookup(keys, completed, bound, self.done_compactions,
                                                   instants=instants, recorded=self.recorded_shards)
                break
            except CorruptMetadataError as exc:
                if exc.found != MISSING:
                    raise
                self._check_resolvable(bound)  # cleaned for an expired snapshot, not lost
                # A compaction completed and cleaning removed what it folded after we listed
                # the compactions: list them again (maintenance runs beside lookups).
                if attempt == 2:
                    raise
        self._check_resolvable(bound)
        return entries

    def done_compactions(self) -> DoneCompactions:
        """The completed metadata compactions: those on the active metadata timeline, and the
        archived ones (see ``indexes._compactions``)."""
        view = self.timeline.load()
        self._deltacommits = {i.time: i for i in view.completed() if i.action == Action.DELTACOMMIT}
        return DoneCompactions.of(view)

    def read_retention(self) -> str | None:
        """The oldest completion time snapshots can still resolve at (None: nothing cleaned).

        Raises:
            CorruptMetadataError: ``retention.json`` cannot be decoded.
        """
        floor = self.retention_floor()
        return floor.resolvable_from if floor is not None else None

    def retention_floor(self) -> RetentionFloor | None:
        """``retention.json``: the oldest completion time snapshots can still resolve at, and
        which cleaning set it (None: nothing cleaned).

        Raises:
            CorruptMetadataError: ``retention.json`` cannot be decoded.
        """
        try:
            data = self.storage.read(RETENTION_PATH)
        except FileNotFoundError:
            return None
        return _floor_of(data)

    def raise_retention(self, resolvable_from: str, *, source: RetentionSource, lease: Lease) -> str:
        """Expire the snapshots completed before ``resolvable_from``: publish it in
        ``retention.json`` unless the floor there is already as high. Returns the floor now in
        force. Runs under the table lock (read, compare, write), before anything that older
        snapshots need is deleted, so a reader that misses a file can tell "expired" apart.

        Raises:
            CorruptMetadataError: ``retention.json`` cannot be decoded (it is not overwritten:
                the floor it held is unknown).
        """
        lease.ensure_held(verify=False)
        parse_time(resolvable_from)
        current = self.retention_floor()
        files_from = current.files_from if current is not None else None
        if source == RetentionSource.CLEAN:
            files_from = max(files_from or resolvable_from, resolvable_from)
        if current is not None and current.resolvable_from >= resolvable_from:
            if files_from != current.files_from:  # a clean below metadata cleaning's floor
                self._put_retention(current.resolvable_from, current.source, files_from)
            return current.resolvable_from
        self._put_retention(resolvable_from, source, files_from)
        return resolvable_from

    def _put_retention(self, resolvable_from: str, source: RetentionSource,
                       files_from: str | None) -> None:
        self.storage.put(RETENTION_PATH, msgspec.json.encode(_Retention(
            resolvable_from=resolvable_from, source=source, files_from=files_from,
            files_known=True)))

    def _check_resolvable(self, bound: str) -> None:
        floor = self.retention_floor()
        if floor is None:
            return
        if bound < floor.resolvable_from:
            raise SnapshotExpiredError(
                f"the snapshot as of {bound} is no longer retained: the metadata table can resolve "
                f"snapshots completed at or after {floor.resolvable_from}\n{floor.help()}"
            )

    # -- validation ----------------------------------------------------------------------------

    def damaged_files(self, completed: Mapping[str, str]) -> list[CorruptMetadataError]:
        """Every file here that cannot be decoded, and every block a completed instant recorded
        that is missing (for validation: nothing raises on damage).

        ``completed`` is as for :meth:`resolve`.
        """
        damaged = [CorruptMetadataError(f"{METADATA_FOLDER}/{e.path}", e.expected, e.found)
                   for e in self.timeline.damaged_files()]
        view = self.timeline.load()
        damaged += [CorruptMetadataError(
            f"{METADATA_FOLDER}/_timeline/{instant.time}_<completion>.compaction",
            f"the completed file of compaction {instant.time} (a later compaction completed, so "
            "this one did too)", "no such file") for instant in view.pending()
            if instant.action == Action.COMPACTION and _lost_completion(instant, view.completed())]
        usable = self._completed_compactions()
        everything = "9" * 17
        versions: dict[int, TableVersion] = {}
        # The blocks of an instant not completed are no part of the history: it is rolled back,
        # never forward, so a later instant may create its version numbers (and column ids)
        # again. Each is checked on its own: its versions apart, its statistics in its own
        # schema (not cached: a schema id is only unique among completed versions).
        own: dict[str, pa.Schema] = {}
        stats_schema = self.schemas[COLUMN_STATS]
        for partition in sorted(self.schemas, key=lambda p: p != SCHEMAS):
            listing = self.storage.list(partition_folder(partition))
            bases, logs = parse_listing(listing)
            apart = {b.path: b.instant_time for b in logs if b.instant_time not in completed}
            for path in [b.path for b in bases] + [b.path for b in logs]:
                try:
                    instant = apart.get(path)
                    table = self._read(partition, path, own.get(instant or "", stats_schema))
                    if partition == SCHEMAS and instant is not None:
                        mine = latest(self._merge_versions([(path, table)], {}))
                        if mine is not None:
                            own[instant] = column_stats_schema(assign_ids(mine.schema))
                    elif partition == SCHEMAS:
                        self._merge_versions([(path, table)], versions)
                except CorruptMetadataError as exc:
                    damaged.append(exc)
                except FileNotFoundError:
                    continue  # cleaned since the listing
            if partition == SCHEMAS:
                # Every block is checked against the newest version, which every one of them
                # projects to (a statistics block of a later version cannot exist).
                stats_schema = self.stats_schema(versions)
            base, chosen = self._plan(partition, completed, everything, usable, listing)
            try:
                self._check_recorded(partition, chosen, completed,
                                     base.horizon if base is not None else "", everything, usable)
            except ObjectNotFoundError as exc:
                damaged.append(missing_block(exc))
        if self.record_index is not None:
            damaged += self.record_index.damaged_files(completed, self.done_compactions(),
                                                       self.recorded_shards)
        try:
            self.read_retention()
        except CorruptMetadataError as exc:
            damaged.append(exc)
        return damaged

    # -- maintenance ---------------------------------------------------------------------------

    def compaction_due(self, completed_in_order: Sequence[tuple[str, str]]) -> bool:
        """Whether ``metadata.compact_after`` commits completed since the last compaction.

        ``completed_in_order`` lists ``(time, completed_at)`` of completed data instants in
        completion order. The check costs no storage call while this object knows the latest
        horizon; a stale hint (another process compacted) only leads to a fresh check.
        """
        if not completed_in_order:
            return False
        if self._horizon_hint is None:
            self._completed_compactions()
        hint = self._horizon_hint or _NOTHING
        if sum(1 for _, done in completed_in_order if done > hint) < self.options.compact_after:
            return False
        horizon = max(self._completed_compactions().values(), default=_NOTHING)
        return sum(1 for _, done in completed_in_order if done > horizon) >= self.options.compact_after

    def compact_if_due(self, completed_in_order: Sequence[tuple[str, str]], *, lease: Lease,
                       data_max_time: str | None = None) -> str | None:
        """Compact now, under ``lease``, if :meth:`compaction_due`; return the compaction time.

        Table maintenance does not use this (it holds the lock only to begin and to complete a
        compaction, see :meth:`begin_compaction`); it is for callers that hold the lock anyway.
        """
        if not self.compaction_due(completed_in_order):
            return None
        return self.compact(completed_in_order, lease=lease, data_max_time=data_max_time)

    def compact(self, completed_in_order: Sequence[tuple[str, str]], *, lease: Lease,
                data_max_time: str | None = None) -> str:
        """Compact now, every step under ``lease``. ``data_max_time`` is the largest time on the
        data timeline.

        Raises:
            TxnError: another compaction is running (its heartbeat is fresh).
        """
        instant = self.begin_compaction(completed_in_order, lease=lease, data_max_time=data_max_time)
        if instant is None:
            raise TxnError("a metadata compaction is already running; it will fold these commits")
        heartbeat = self.compaction_heartbeat(instant).start()
        try:
            self.build_compaction(instant, completed_in_order)
        except BaseException:
            heartbeat.stop(delete=False)
            with contextlib.suppress(Exception):
                self.abandon_compaction(instant, lease=lease)
            raise
        heartbeat.stop(delete=False)
        if not self.complete_compaction(instant, lease=lease):
            raise TxnError(f"metadata compaction {instant.time} was retired as dead while it "
                           "ran; nothing of it is used")
        return instant.time

    def begin_compaction(self, completed_in_order: Sequence[tuple[str, str]], *, lease: Lease,
                         data_max_time: str | None = None) -> Instant | None:
        """Under the table lock: request and start a compaction folding everything completed
        up to the last of ``completed_in_order`` (the data timeline as seen under this lock).
        Returns it (its heartbeat not yet started), or None if another compaction is running.

        The compaction's time is above every time on both timelines: data instants (even
        pending ones) later record deltacommits at their own times on this timeline, so a
        compaction must never take one of those times. Its horizon is the last completion time
        on the data timeline: completion times only grow, so every instant that completes from
        here on completes above it and its blocks stay logs, which is what lets the fold run
        outside the lock.
        """
        self.recover(lease=lease)
        view = self.timeline.view(lease)
        if any(i.action == Action.COMPACTION and not _lost_completion(i, view.completed())
               for i in view.pending()):
            return None
        horizon = completed_in_order[-1][1]
        after = max(filter(None, (data_max_time, view.max_time())), default=None)
        instant = self.timeline.request(Action.COMPACTION, {"horizon": horizon}, lease=lease,
                                        time=next_time(self.timeline.clock(), after))
        try:
            return self.timeline.start(instant, lease=lease)
        except BaseException:
            # Retire it now rather than when it expires (if this fails too, it expires).
            with contextlib.suppress(Exception):
                self.timeline.abort(instant, lease=lease)
            raise

    def compaction_heartbeat(self, instant: Instant) -> Heartbeat:
        """The heartbeat a compaction beats while it folds outside the lock."""
        return self.timeline.heartbeat(instant)

    def build_compaction(self, instant: Instant, completed_in_order: Sequence[tuple[str, str]]) -> None:
        """Write the bases of begun compaction ``instant``; needs no lock.

        Everything it reads is immutable: blocks of instants completed at or before its
        horizon, and bases of completed compactions, which cleaning keeps while they are the
        newest (compactions run one at a time). Everything it writes is new (put-if-absent) and
        unused until the compaction completes.
        """
        horizon = self.timeline.read_plan(instant, dict)["horizon"]
        completed = dict(completed_in_order)
        usable = self._completed_compactions()
        live_files = pa.array([], pa.string())
        # The bases of statistics are written in the schema current at the horizon (every
        # snapshot that reads them is at or after it): versions first.
        stats_schema = self.schemas[COLUMN_STATS]
        for partition in sorted(self.schemas, key=lambda p: p != SCHEMAS):
            base, logs = self._plan(partition, completed, horizon, usable)
            paths = ([base.path] if base is not None else []) + [block.path for block in logs]
            tables = [self._read(partition, path, stats_schema) for path in paths]
            if partition == SCHEMAS:
                versions = self._merge_versions(zip(paths, tables, strict=True), {})
                stats_schema = self.stats_schema(versions)
                merged = versions_to_arrow(versions.values())
            elif partition == COLUMN_STATS:
                merged = merge_two_phase(tables, stats_schema)
            else:
                merged = self._merge(partition, tables)
            if partition == FILES:
                live_files = live(merged)["path"].combine_chunks()
            if partition == COLUMN_STATS:
                if not stats_schema.field("columns").type.num_fields:
                    continue  # a table with no column that takes statistics has nothing here
                # Statistics of removed files serve no later snapshot.
                merged = live(merged).replace_schema_metadata(stats_schema.metadata)
            elif partition in (FILES, DELETES):
                # A purge completed after the add and the tombstone it follows, so a base that
                # folds it folds those too: the key needs no record at all from here on.
                merged = without_purged(merged)
            write_block(self.storage, base_path(partition_folder(partition), instant.time, horizon,
                                                BASE_FORMAT), merged, compression="lz4")
        if self.record_index is not None:
            self.record_index.compact(instant.time, horizon, completed, self.done_compactions(),
                                      live_files)

    def complete_compaction(self, instant: Instant, *, lease: Lease) -> bool:
        """Under the table lock: complete a built compaction; False if it was retired meanwhile,
        or its heartbeat expired while it was paused (it could be retired any moment), in which
        case what it wrote is deleted. Completion and retirement both run under the lock, and
        each requires the other not to have happened, so exactly one of them wins."""
        current = self.timeline.view(lease).get(instant.time)
        if current is None or not current.is_pending or self.timeline.is_expired(current):
            # Retired, or retirable: a lock holder that found it expired may have deleted its
            # bases already (recovery deletes them before it aborts), so it must never complete.
            if current is not None and current.is_pending:
                self.timeline.abort(current, lease=lease)
            self._remove_bases(instant)
            return False
        horizon = self.timeline.read_plan(instant, dict)["horizon"]
        self.timeline.complete(current, {"horizon": horizon}, lease=lease)
        self._horizon_hint = horizon
        return True

    def abandon_compaction(self, instant: Instant, *, lease: Lease) -> None:
        """Under the table lock: give up a compaction that failed; delete what it wrote.

        A compaction whose completion failed with an unknown outcome may have completed after
        all: then it stays, bases and all.
        """
        current = self.timeline.load().get(instant.time)
        if current is not None and current.is_completed:
            return
        if current is not None and current.is_pending:
            self.timeline.abort(current, lease=lease)
        self._remove_bases(instant)

    def cleanable(self, completed_in_order: Sequence[tuple[str, str]]) -> list[str]:
        """What :meth:`clean` would delete now (reads only: a dry run)."""
        floors, index_doomed, _ = self._doomed(completed_in_order)
        return sorted([*(path for _, doomed in floors.values() for path in doomed), *index_doomed])

    def clean(self, completed_in_order: Sequence[tuple[str, str]], *, lease: Lease) -> list[str]:
        """Delete bases and blocks no retained snapshot needs; return what was deleted.

        Retained: whatever resolves the snapshots of the last ``retain_commits`` data commits.
        All three steps (:meth:`plan_clean`, :meth:`publish_clean`, :meth:`finish_clean`) under
        the caller's lease; table maintenance holds the lock for the publishing step only.
        """
        plan = self.plan_clean(completed_in_order)
        self.publish_clean(plan, lease=lease)
        return self.finish_clean(plan)

    def plan_clean(self, completed_in_order: Sequence[tuple[str, str]]) -> MetadataCleanPlan:
        """What cleaning deletes now, and the retention floor that deleting it sets (reads
        only; needs no lock). Everything doomed is superseded by a base of a completed
        compaction, so nothing a running writer or compaction reads (the newest bases and the
        blocks above them) is among it."""
        floors, index_doomed, index_floor = self._doomed(completed_in_order)
        doomed = [path for _, paths in floors.values() for path in paths] + index_doomed
        if not doomed:
            return MetadataCleanPlan((), None)
        horizons = [floor.horizon for floor, _ in floors.values()] + ([index_floor] if index_floor else [])
        return MetadataCleanPlan(tuple(doomed), max(horizons, default=None))

    def publish_clean(self, plan: MetadataCleanPlan, *, lease: Lease) -> None:
        """Under the table lock: publish the plan's retention floor, before anything is deleted,
        so a reader that misses a deleted file can tell "expired" from "raced with cleaning"
        (it then lists again). Never lowers it: CLEAN FILES may have raised it further."""
        if plan.floor is not None:
            self.raise_retention(plan.floor, source=RetentionSource.METADATA, lease=lease)

    def finish_clean(self, plan: MetadataCleanPlan) -> list[str]:
        """Delete what a published plan dooms (needs no lock; deleting twice is harmless)."""
        for path in plan.doomed:
            self.storage.delete(path)
        if self.record_index is not None:
            self.record_index.forget(plan.doomed)  # deleted runs: close what this process held
        return list(plan.doomed)

    def _doomed(self, completed_in_order: Sequence[tuple[str, str]]
                ) -> tuple[dict[str, tuple[BaseFile, list[str]]], list[str], str | None]:
        """Per partition the floor base and the files older than it; the record index's."""
        if not completed_in_order:
            return {}, [], None
        retain = self.options.retain_commits
        oldest_needed = completed_in_order[max(0, len(completed_in_order) - retain)][1]
        usable = self._completed_compactions()
        completed = dict(completed_in_order)
        floors: dict[str, tuple[BaseFile, list[str]]] = {}
        for partition in self.schemas:
            bases, logs = parse_listing(self.storage.list(partition_folder(partition)))
            valid = sorted((b for b in bases if usable.get(b.compaction_time) == b.horizon),
                           key=lambda b: (b.horizon, b.compaction_time))
            serving_oldest = [b for b in valid if b.horizon <= oldest_needed]
            if not serving_oldest:
                continue
            floor = serving_oldest[-1]
            doomed = [b.path for b in valid
                      if (b.horizon, b.compaction_time) < (floor.horizon, floor.compaction_time)]
            doomed += [b.path for b in logs
                       if completed.get(b.instant_time) is not None
                       and completed[b.instant_time] <= floor.horizon]
            floors[partition] = (floor, doomed)
        index_doomed, index_floor = (
            self.record_index.doomed(oldest_needed, completed, self.done_compactions())
            if self.record_index is not None else ([], None))
        return floors, index_doomed, index_floor

    def archive_fence(self) -> str:
        """Data instants completed at or after this time must stay on the active data timeline.

        Their blocks are not folded into the oldest retained base, and readers learn their
        completion from the active data timeline only.
        """
        return min(self._completed_compactions().values(), default=_NOTHING)

    def archive(self, *, lease: Lease) -> list[Instant]:
        """Archive old metadata instants, never those whose bases are still retained, nor the
        newest completed compaction.

        Record-index runs of archived compactions keep counting (``DoneCompactions``): the
        newest completed compaction stays active to vouch for every older one, and an aborted
        compaction's runs are deleted here before it can be archived. So a shard node that no
        commit touches, whose chain's top is an old compaction's run, holds nothing active: the
        active metadata timeline stays bounded however many commits the table takes.
        """
        view = self.timeline.view(lease)
        if len(view.completed()) <= self.timeline.options.archive_trigger:
            return []
        usable = self._completed_compactions()
        newest = max((i.time for i in view.completed() if i.action == Action.COMPACTION), default=None)
        fence = min(filter(None, (min(usable, default=None), newest)), default=None)
        for instant in view.rolled_back():
            if instant.action == Action.COMPACTION:
                # Recovery deletes before it aborts, but a failed or expired compaction aborts
                # first (and a crash may leave its runs): once archived, its runs would count.
                self._remove_bases(instant)
        return self.timeline.archive(lease=lease, fence_exclusive=fence)


class _ShardsRecorded:
    """``recorded(T)``, for the record index: the shards completed instant ``T`` recorded
    entries for (empty if unknown); ``prefetch`` reads many deltacommits at once."""

    def __init__(self, table: MetadataTable) -> None:
        self._table = table

    def __call__(self, instant_time: str) -> set[int]:
        record = self._table.recorded(instant_time)
        return set(record.shards) if record is not None else set()

    def prefetch(self, instant_times: Iterable[str]) -> None:
        self._table.prefetch_recorded(instant_times)


def _lost_completion(instant: Instant, completed: Sequence[Instant]) -> bool:
    """Whether pending compaction ``instant`` is older than a completed compaction: it cannot
    have died (every lock holder retires a dead one first), so its completed file was lost."""
    return any(done.action == Action.COMPACTION and done.time > instant.time for done in completed)
