"""Tables: create, open, describe, and read their timeline."""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.dataset as ds

from indexes import (
    COLUMN_STATS,
    DELETES,
    FILES,
    INSERT_IN_PROGRESS,
    SEGMENTS,
    MetadataSnapshot,
    MetadataTable,
    SegmentEntry,
    segment_sort_key,
)
from timeline import (
    Clock,
    CorruptMetadataError,
    Instant,
    InvalidOptionError,
    Lease,
    LocalStorage,
    ObjectExistsError,
    Storage,
    TableExistsError,
    TableNotFoundError,
    Timeline,
    TimelineView,
    format_time,
    open_storage,
    parse_time,
    system_clock,
    time_of,
)

from . import _mutations, _validate
from ._config import (
    TABLE_CONFIG_PATH,
    TableConfig,
    decode_config,
    describe_schema,
    encode_config,
)
from ._options import (
    check_layout,
    check_properties,
    check_schema,
    metadata_options,
    record_index_shards,
    stored_property_warnings,
    timeline_options,
)
from ._protocol import DATA_ACTIONS, Protocol
from ._records import Commit, Segment, ValidationReport, WritePlan
from ._snapshot import Snapshot
from ._storage_io import DataStore

log = logging.getLogger("metatxn")

#: A source of unique ids (table ids, file ids). Injected so tests are deterministic.
IdFactory = Callable[[], str]

#: What a write accepts: a pyarrow Table, a RecordBatchReader (streamed) or a pandas DataFrame.
WriteInput: TypeAlias = "pa.Table | pa.RecordBatchReader | Any"


def random_id() -> str:
    return secrets.token_hex(8)


class Table:
    """A metatxn table. Obtain one with :func:`create_table` or :func:`open_table`.

    A ``Table`` is safe to share between threads; every write is one atomic commit on the
    timeline, and any number of processes may write to the same table at once.
    """

    #: The metadata partitions a write reads at the latest instant.
    _LATEST_PARTITIONS = (FILES, SEGMENTS, DELETES)

    def __init__(self, uri: str, storage: Storage, config: TableConfig, *,
                 clock: Clock = system_clock, ids: IdFactory = random_id,
                 storage_options: dict[str, Any] | None = None) -> None:
        self._uri = uri
        #: As given when opening: Spark executors open the table's storage with them.
        self._storage_options = storage_options
        self._storage = storage
        self._config = config
        self._clock = clock
        self._ids = ids
        self._schema = config.schema
        options = timeline_options(config.properties)
        self._timeline = Timeline(storage, clock=clock, options=options)
        self._metadata = MetadataTable(storage, self._schema, clock=clock, owner=self._timeline.owner,
                                       options=metadata_options(config.properties),
                                       timeline_options=options,
                                       record_key=config.record_key_columns,
                                       record_index_shards=config.record_index_shards)
        self._store = DataStore(storage)
        self._latest: tuple[str, MetadataSnapshot] | None = None
        self._protocol = Protocol(storage, self._timeline, self._metadata,
                                  next_segment=self._next_segment, after_commit=self._maintain)

    # -- what the table is ---------------------------------------------------------------------

    @property
    def uri(self) -> str:
        return self._uri

    @property
    def schema(self) -> pa.Schema:
        return self._schema

    @property
    def partition_by(self) -> list[str]:
        return list(self._config.partition_by)

    @property
    def record_key(self) -> str | list[str] | None:
        """The record key as given at creation: a column name, a list of names, or None."""
        key = self._config.record_key
        return list(key) if isinstance(key, list) else key

    @property
    def record_key_columns(self) -> list[str]:
        return self._config.record_key_columns

    @property
    def sort_by(self) -> list[str]:
        return list(self._config.sort_by)

    @property
    def record_index_shards(self) -> int | None:
        """Hash shards of the record-level index, fixed at creation (None without a key)."""
        return self._config.record_index_shards

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._config.properties)

    @property
    def table_id(self) -> str:
        return self._config.table_id

    @property
    def created_at(self) -> str:
        """The instant time (17-digit UTC) at which the table was created."""
        return self._config.created_at

    def timeline(self) -> list[Instant]:
        """Every instant of the table, archived and active, by requested time."""
        return self._timeline.history()

    # -- writes --------------------------------------------------------------------------------

    def append(self, data: WriteInput, *, extra: dict[str, str] | None = None) -> Commit | None:
        """Load ``data`` as a new segment in one commit.

        Returns None, and commits nothing, when ``data`` holds no rows (as ``upsert`` and
        ``delete`` of nothing do).

        Raises:
            SchemaMismatchError: the data's columns or types differ from the table's, or a
                non-nullable column holds nulls; nothing is written. (A ``RecordBatchReader`` is
                checked as it is read: a bad batch after the first rolls the write back, leaving
                a ``rollback`` instant and the rows as they were.)
            DuplicateKeyError: (keyed tables) a key of ``data`` is already in the table, or
                appears twice in ``data``; nothing is written.
        """
        return _mutations.append(self, data, extra=extra)

    def overwrite(self, data: WriteInput, *, extra: dict[str, str] | None = None) -> Commit:
        """Replace the whole content with ``data`` in one commit.

        The segments live at the commit become ``Marked for Delete``; their files stay for time
        travel until cleaned.

        Raises:
            CommitConflictError: another write committed after this one began.
        """
        return _mutations.overwrite(self, data, extra=extra)

    def upsert(self, data: WriteInput, *, extra: dict[str, str] | None = None) -> Commit | None:
        """Keyed tables: replace the rows whose key exists, insert the others, in one commit.

        Replaced rows are deleted by delete deltas (their files are not rewritten); every row of
        ``data`` is written as a new segment. When a key appears more than once in ``data``, its
        last row wins. Returns None (and commits nothing) when ``data`` is empty.

        Raises:
            CommitConflictError: a commit that completed after this upsert read the table changed
                some of the same keys or files; nothing was written, retry.
        """
        return _mutations.upsert(self, data, extra=extra)

    def delete(self, where: ds.Expression | None = None, *, keys: Any = None,
               extra: dict[str, str] | None = None) -> Commit | None:
        """Delete the rows matching ``where``, or (keyed tables) the rows with these ``keys``.

        Deleted rows are recorded as delete deltas (row positions per data file): the bytes
        written grow with the rows deleted, not with the files they live in. Returns None, and
        commits nothing, when no row matches.

        Raises:
            InvalidOptionError: neither or both of ``where`` and ``keys`` given, or ``keys`` on a
                table without a record key.
            CommitConflictError: a concurrent commit changed the same rows' files or keys.
        """
        return _mutations.delete(self, where, keys=keys, extra=extra)

    def update(self, where: ds.Expression | None, values: dict[str, Any], *,
               extra: dict[str, str] | None = None) -> Commit | None:
        """Set ``values`` (column -> new value) on the rows matching ``where`` (None: all rows).

        The old rows are deleted by delete deltas and the updated rows written as a new
        segment. Returns None, and commits nothing, when no row matches. Record key columns
        cannot be updated.
        """
        return _mutations.update(self, where, values, extra=extra)

    # -- reads ---------------------------------------------------------------------------------

    def snapshot(self, as_of: str | datetime | None = None) -> Snapshot:
        """The table as of the latest completed instant, or as of ``as_of``.

        ``as_of`` is an instant time from the timeline (the snapshot then includes that instant
        and everything that completed before it) or a ``datetime`` (everything completed at or
        before it; naive means UTC). Snapshots follow completion order, so resolving the same
        ``as_of`` again later gives the same rows.
        """
        view = self._timeline.load()
        if as_of is None:
            last = view.last_completed()
            bound = last.completed_at if last else None
            completed = view.completed()
        else:
            # Time travel may reach instants archived off the active timeline: read the archive
            # once, for the bound, the snapshot's name and the blocks to merge alike.
            history = self._timeline.history()
            completed = tuple(sorted((i for i in history if i.is_completed),
                                     key=lambda i: i.completed_at or ""))
            bound = self._completion_bound(as_of, {i.time: i for i in history}, view)
        # The snapshot is named after the last write it includes, not a rollback after it.
        writes = [i for i in completed if i.action in DATA_ACTIONS
                  and bound is not None and (i.completed_at or "") <= bound]
        travel = None if as_of is None else {i.time: i.completed_at or "" for i in completed}
        return self._snapshot_at(view, writes[-1].time if writes else None, bound, travel)

    def to_arrow(self, filter: ds.Expression | None = None, columns: list[str] | None = None,
                 as_of: str | datetime | None = None) -> pa.Table:
        return self.snapshot(as_of).to_arrow(filter=filter, columns=columns)

    def lookup(self, keys: Any) -> pa.Table:
        """Where the rows with these record keys live, from the record-level index.

        ``keys``: for a one-column key a list or pyarrow array of values; for any key a pyarrow
        Table with the key columns (or a list of tuples). Returns the keys found, with
        ``segment``, ``file`` (table-relative path) and ``position`` (row number in the file).
        """
        return _mutations.lookup(self, keys)

    def segments(self) -> list[Segment]:
        """SHOW SEGMENTS: every segment, newest first; loads still running are ``Insert In Progress``."""
        view = self._timeline.load()
        entries = dict(self._metadata_at(view, None, (SEGMENTS,)).segments or {})
        for instant in view.pending():
            if instant.action not in DATA_ACTIONS:
                continue
            plan = self._timeline.read_plan(instant, WritePlan)
            if plan.segment is not None and plan.segment not in entries:
                entries[plan.segment] = SegmentEntry(
                    id=plan.segment, status=INSERT_IN_PROGRESS, instant=instant.time,
                    load_start_ms=parse_time(instant.time))
        ordered = sorted(entries.values(), key=lambda e: segment_sort_key(e.id), reverse=True)
        return [Segment.from_entry(e) for e in ordered]

    def partitions(self) -> list[dict[str, object]]:
        """SHOW PARTITIONS: the partition values that hold live data, sorted."""
        seen: dict[tuple[object, ...], dict[str, object]] = {}
        for data_file in self.snapshot().files():
            if data_file.deleted_rows == data_file.rows:
                continue  # every row deleted: the partition holds nothing through this file
            key = tuple(str(data_file.partition[c]) for c in self.partition_by)
            seen.setdefault(key, data_file.partition)
        return [seen[k] for k in sorted(seen)]

    def validate(self) -> ValidationReport:
        """Compare the metadata table with what is on storage and report every disagreement."""
        return _validate.validate(self)

    # -- internals -----------------------------------------------------------------------------

    def _completion_bound(self, as_of: str | datetime, instants: dict[str, Instant],
                          view: TimelineView) -> str:
        if isinstance(as_of, datetime):
            return time_of(as_of)
        if not isinstance(as_of, str):
            raise InvalidOptionError(
                f"as_of must be an instant time string or a datetime, got {type(as_of).__name__}")
        try:
            parse_time(as_of)
        except ValueError as exc:
            raise InvalidOptionError(f"as_of {as_of!r}: {exc}") from None
        instant = view.get(as_of) or instants.get(as_of)
        if instant is None:
            return as_of
        if not instant.is_completed or instant.completed_at is None:
            raise InvalidOptionError(
                f"as_of names instant {as_of}, which is {instant.state}, not completed; "
                "a snapshot can only be taken at a completed instant")
        return instant.completed_at

    def _snapshot_at(self, view: TimelineView, instant: str | None, bound: str | None,
                     travel: dict[str, str] | None = None) -> Snapshot:
        metadata = self._metadata_at(view, bound, (FILES, DELETES), travel)

        def column_stats() -> pa.Table:
            resolved = self._metadata_at(view, bound, (COLUMN_STATS,), travel).column_stats
            assert resolved is not None
            return resolved

        return Snapshot(instant=instant, completed_at=bound, metadata=metadata, schema=self._schema,
                        store=self._store, load_column_stats=column_stats)

    def _metadata_at(self, view: TimelineView, bound: str | None,
                     partitions: tuple[str, ...] = (FILES, SEGMENTS),
                     travel: dict[str, str] | None = None) -> MetadataSnapshot:
        """Resolve metadata partitions; the latest state is extended incrementally from a cache.

        ``travel`` (time travel only) maps every completed instant, archived ones included, to
        its completion time.
        """
        completed = _completion_map(view)
        last = view.last_completed()
        latest = last.completed_at if last else None
        if latest is None or (bound is not None and bound != latest):
            return self._metadata.resolve({**(travel or {}), **completed}, bound,
                                          partitions=partitions)
        cached = self._latest
        if cached is not None and cached[0] == latest and all(cached[1].has(p) for p in partitions):
            return cached[1]
        # Extend the cache only if its bound is still a completion on this timeline: a table
        # dropped and recreated at the same location shares nothing with the cached state.
        since = None
        wanted = set(partitions)
        if cached is not None and cached[0] <= latest and any(
                i.completed_at == cached[0] for i in view.completed()):
            since = cached
            wanted |= {p for p in (*self._LATEST_PARTITIONS, COLUMN_STATS) if cached[1].has(p)}
        order = tuple(p for p in (*self._LATEST_PARTITIONS, COLUMN_STATS) if p in wanted)
        resolved = self._metadata.resolve(completed, latest, partitions=order, since=since)
        self._latest = (latest, resolved)
        return resolved

    def _next_segment(self, view: TimelineView) -> str:
        taken = [self._metadata_at(view, None, (SEGMENTS,)).max_load_id]
        for instant in view.pending():
            if instant.action in DATA_ACTIONS:
                plan = self._timeline.read_plan(instant, WritePlan)
                if plan.segment is not None:
                    taken.append(segment_sort_key(plan.segment)[0])
        return str(max(taken, default=-1) + 1)

    def _maintain(self, lease: Lease) -> None:
        """After each commit, under the lock: metadata compaction and cleaning (with the sweep
        of leftover markers), then archival.

        Each step first checks, from state already in hand, whether it has anything to do, so
        a commit that needs no maintenance pays no storage call for it.
        """
        view = self._timeline.view(lease)
        order = [(i.time, i.completed_at or "") for i in view.completed()]
        # Retention counts writes: a rollback must not push a commit out of time travel.
        writes = [(i.time, i.completed_at or "") for i in view.completed() if i.action in DATA_ACTIONS]
        if self._metadata.compact_if_due(order, lease=lease, data_max_time=view.max_time()) is not None:
            self._metadata.clean(writes, lease=lease)
            self._metadata.archive(lease=lease)
            # Markers a writer killed after its commit point left: one listing every
            # ``metadata.compact_after`` commits, never on the commit path itself.
            self._protocol.sweep_markers(lease)
        if len(order) > self._timeline.options.archive_trigger:
            # Keep on the active timeline every commit whose blocks a kept base does not fold,
            # and the retained commits (cleaning counts retention over the active timeline).
            fence = self._metadata.archive_fence()
            if writes:
                retained = writes[max(0, len(writes) - self._metadata.options.retain_commits)][1]
                fence = min(fence, retained)
            self._timeline.archive(lease=lease, fence_exclusive=fence)

    def __repr__(self) -> str:
        return f"txn.Table({self._uri!r})"


def _completion_map(view: TimelineView) -> dict[str, str]:
    return {i.time: i.completed_at or "" for i in view.completed()}


def create_table(
    uri: str | os.PathLike[str],
    schema: pa.Schema,
    *,
    partition_by: list[str] | None = None,
    record_key: str | list[str] | None = None,
    sort_by: list[str] | None = None,
    properties: dict[str, str] | None = None,
    storage_options: dict[str, Any] | None = None,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
) -> Table:
    """Create an empty table at ``uri`` and return it.

    Creation is atomic: ``table.json`` is written with put-if-absent, so of two racing creators
    exactly one succeeds.

    Raises:
        TableExistsError: a table is already there.
        InvalidOptionError: the schema, a layout column, a property or the location is not
            acceptable; the message says which and what is expected. Nothing is written.
    """
    text = _location(uri, "create_table")
    checked_schema = check_schema(schema)
    partitions, key, sorts = check_layout(checked_schema, partition_by, record_key, sort_by)
    props = check_properties(properties)
    storage = open_storage(text, storage_options)
    _check_new_location(storage, text)
    clock = clock or system_clock
    ids = ids or random_id
    config = TableConfig(
        table_id=ids(),
        created_at=format_time(clock()),
        arrow_schema=checked_schema.serialize().to_pybytes(),
        columns=describe_schema(checked_schema),
        partition_by=partitions,
        record_key=key,
        sort_by=sorts,
        properties=props,
        record_index_shards=record_index_shards(props, key),
    )
    # Built before table.json is written: whatever it refuses leaves nothing on storage.
    table = Table(text, storage, config, clock=clock, ids=ids, storage_options=storage_options)
    try:
        storage.put_if_absent(TABLE_CONFIG_PATH, encode_config(config))
    except ObjectExistsError:
        raise TableExistsError(text) from None
    return table


def _location(uri: object, function: str) -> str:
    """The table location as text; anything but a non-empty str or path is InvalidOptionError."""
    text = os.fspath(uri) if isinstance(uri, os.PathLike) else uri
    if not isinstance(text, str) or not text:
        raise InvalidOptionError(
            f"{function}: the table location must be a non-empty path or URL (a str or "
            f"os.PathLike), got {uri!r} ({type(uri).__name__})")
    return text


def _check_new_location(storage: Storage, text: str) -> None:
    """A local table goes in a folder: refuse a location that is a file or lies below one."""
    if not isinstance(storage, LocalStorage):
        return
    path = storage.root
    while not path.exists() and path != path.parent:
        path = path.parent
    if not path.is_dir():
        where = "is a file" if path == storage.root else f"lies below the file {str(path)!r}"
        raise InvalidOptionError(
            f"table location {text!r} {where}; expected a folder, or a path that does not exist yet")


def open_table(
    uri: str | os.PathLike[str],
    storage_options: dict[str, Any] | None = None,
    *,
    clock: Clock | None = None,
    ids: IdFactory | None = None,
) -> Table:
    """Open the table at ``uri``.

    Raises:
        TableNotFoundError: there is no table there.
        CorruptMetadataError: ``table.json`` cannot be read; the error names the file.
    """
    text = _location(uri, "open_table")
    storage = open_storage(text, storage_options)
    try:
        data = storage.read(TABLE_CONFIG_PATH)
    except FileNotFoundError:
        raise TableNotFoundError(text, f"{TABLE_CONFIG_PATH} does not exist") from None
    config_path = f"{text.rstrip('/')}/{TABLE_CONFIG_PATH}"
    try:
        config = decode_config(data)
    except CorruptMetadataError as exc:
        raise CorruptMetadataError(f"{text.rstrip('/')}/{exc.path}", exc.expected, exc.found) from None
    try:  # table.json damaged, or made before the bounds of design/properties.md
        for warning in stored_property_warnings(config.properties):
            log.warning("%s: %s (see design/properties.md)", config_path, warning)
    except InvalidOptionError as exc:
        raise CorruptMetadataError(config_path, "table properties metatxn can read (see "
                                   "design/properties.md)", str(exc)) from None
    return Table(text, storage, config, clock=clock or system_clock, ids=ids or random_id,
                 storage_options=storage_options)
