"""The internal table context: what every operation needs to know about one open table.

Operations (writes, reads, table services, Spark) depend on this small object rather than on the
public :class:`txn.Table`, which is a thin facade over them. It holds the table's configuration and
its parts (timeline, metadata table, data-file store), the injected clock and id source, and the
cache of the latest resolved metadata, shared by every operation on the table.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from metatxn.indexes import (
    COLUMN_STATS,
    DELETES,
    FILES,
    SCHEMAS,
    SEGMENTS,
    STREAMS,
    MetadataSnapshot,
    MetadataTable,
    TableVersion,
    assign_ids,
    last_column_id,
)
from metatxn.timeline import Clock, Storage, Timeline, TimelineView

from .._files import DataStore, ExternalReader, external_options
from ._config import TableConfig
from ._options import metadata_options, shard_max_entries, timeline_options
from ._staged import StagedCreate

#: A source of unique ids (table ids, file ids). Injected so tests are deterministic.
IdFactory = Callable[[], str]

#: The metadata partitions a write reads at the latest instant (``schemas``: the version it
#: writes, which the latest resolution adopts).
LATEST_PARTITIONS: Final = (SCHEMAS, FILES, SEGMENTS, DELETES)


#: Every partition the latest state may hold, in the order they are resolved.
_CACHED_PARTITIONS: Final = (*LATEST_PARTITIONS, COLUMN_STATS, STREAMS)


@dataclass(frozen=True)
class _Resolution:
    """A resolution of the latest state: the completion it was made at, the snapshot
    (immutable: later ones extend it into a new snapshot), and every metadata file it was
    built from."""

    latest: str
    snapshot: MetadataSnapshot
    sources: frozenset[str]

    def intact(self, storage: Storage) -> bool:
        """Whether every file it was built from is still listed (one listing per folder)."""
        folders: dict[str, set[str]] = {}
        for path in self.sources:
            folders.setdefault(path.rpartition("/")[0], set()).add(path)
        return all(wanted <= set(storage.list(folder)) for folder, wanted in folders.items())


class _LatestResolutions:
    """Process-wide: ``(location, table id)`` -> the latest resolution of the table's metadata.
    A handle opened per request so starts from what another read (after checking its files are
    all still there). A table created again at the same location has a new id, so it never sees
    an old resolution; the least recently used tables go first."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, str], _Resolution] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, table: tuple[str, str]) -> _Resolution | None:
        with self._lock:
            found = self._entries.get(table)
            if found is not None:
                self._entries.move_to_end(table)
            return found

    def put(self, table: tuple[str, str], resolved: _Resolution) -> None:
        with self._lock:
            held = self._entries.get(table)
            if held is not None and held.latest > resolved.latest:
                return  # a newer resolution is already kept: never move back
            self._entries[table] = resolved
            self._entries.move_to_end(table)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


#: Tables whose latest resolution a process keeps.
_LATEST = _LatestResolutions(64)


def base_version(config: TableConfig) -> TableVersion:
    """Version 0: ``table.json``'s schema and layout, with the column ids ``assign_ids`` gives
    it (deterministic, so every process numbers a table created before ids alike)."""
    schema = assign_ids(config.schema)
    return TableVersion(version=0, schema_id=0, arrow_schema=schema.serialize().to_pybytes(),
                        properties=dict(config.properties), partition_by=list(config.partition_by),
                        record_key=config.record_key, sort_by=list(config.sort_by),
                        last_column_id=last_column_id(schema), instant="", changes=["create table"])


def latest_version(versions: Mapping[int, TableVersion] | None, base: TableVersion) -> TableVersion:
    """The newest of ``versions`` (a resolution's ``schemas``), or ``base`` when it has none."""
    if not versions:
        return base
    return versions[max(versions)]


def random_id() -> str:
    return secrets.token_hex(8)


def completion_map(view: TimelineView) -> dict[str, str]:
    """Every completed instant of ``view`` -> its completion time."""
    return {i.time: i.completed_at or "" for i in view.completed()}


class TableContext:
    """One open table, as the operations see it. Safe to share between threads."""

    def __init__(self, uri: str, storage: Storage, config: TableConfig, *, clock: Clock,
                 ids: IdFactory = random_id, storage_options: dict[str, Any] | None = None) -> None:
        self.uri = uri
        #: As given when opening: Spark executors open the table's storage with them.
        self.storage_options = storage_options
        self.storage = storage
        self.config = config
        self.clock = clock
        self.ids = ids
        #: Version 0, from ``table.json``; the current version is adopted from each resolution
        #: of the latest state (a schema or property change is a commit: ``schemas``).
        self.base_version = base_version(config)
        self._version: TableVersion | None = None
        self._schemas: dict[int, pa.Schema] = {0: self.base_version.schema}
        options = timeline_options(config.properties)
        self.timeline = Timeline(storage, clock=clock, options=options)
        self.metadata = MetadataTable(storage, self.base_version.schema, clock=clock,
                                      owner=self.timeline.owner,
                                      options=metadata_options(config.properties),
                                      timeline_options=options,
                                      record_key=config.record_key_columns,
                                      record_index_shards=config.record_index_shards,
                                      record_index_shard_max_entries=shard_max_entries(
                                          config.properties),
                                      table_id=config.table_id)
        self.store = DataStore(storage, ExternalReader(
            self.base_version.schema, config.partition_by, external_options(storage.uri, storage_options)))
        #: Where the latest resolution is kept: shared by every handle of this table in the
        #: process (its location and table id), so a handle opened per request starts warm.
        self._latest_key = (storage.uri, config.table_id)
        #: The latest resolution this handle adopted the versions of.
        self._adopted: MetadataSnapshot | None = None
        #: This handle's latest resolution when it met an unreadable deltacommit (not shared).
        self._private: _Resolution | None = None
        #: Set on a table created staged: its ``table.json`` goes with its first commit.
        self.staged: StagedCreate | None = None

    # -- the current version -------------------------------------------------------------------

    @property
    def version(self) -> TableVersion:
        """The table's current version (schema, layout, properties): the newest this handle has
        resolved, read from the latest state on first use."""
        if self._version is None:
            self.refresh()
        assert self._version is not None
        return self._version

    def refresh(self) -> TableVersion:
        """Resolve the latest state's ``schemas`` and adopt its newest version."""
        self.metadata_at(self.timeline.load(), None, (SCHEMAS,))
        if self._version is None:  # nothing completed yet: version 0
            self._version = self.base_version
        return self._version

    @property
    def schema(self) -> pa.Schema:
        """The current version's schema, with column ids (``PARQUET:field_id``)."""
        return self.schema_of(self.version.schema_id)

    @property
    def schema_id(self) -> int:
        """What files written now record as their schema (``files.schema_id``)."""
        return self.version.schema_id

    def schema_of(self, schema_id: int) -> pa.Schema:
        """The schema files of ``schema_id`` were written with (decoded once per id)."""
        found = self._schemas.get(schema_id)
        if found is None:
            raise KeyError(schema_id)
        return found

    def schemas_at(self, versions: Mapping[int, TableVersion] | None) -> dict[int, pa.Schema]:
        """Every schema of ``versions`` (a resolution's), by schema id, version 0's included;
        each decoded once per handle."""
        for version in (versions or {}).values():
            if version.schema_id == version.version and version.schema_id not in self._schemas:
                self._schemas[version.schema_id] = version.schema
        wanted = {0} | {v.schema_id for v in (versions or {}).values()}
        return {i: self._schemas[i] for i in sorted(wanted)}

    def adopt(self, versions: Mapping[int, TableVersion] | None) -> None:
        """Make the newest of ``versions`` (resolved at the latest instant) current, and learn
        every version's schema; an older resolution never moves the version back."""
        self.schemas_at(versions)
        newest = latest_version(versions, self.base_version)
        if self._version is None or newest.version > self._version.version:
            if newest.properties != (self._version or self.base_version).properties:
                self._apply_properties(newest.properties)
            self._version = newest

    def _apply_properties(self, properties: dict[str, str]) -> None:
        """The timeline's and metadata table's options as ``properties`` set them (they were
        built from ``table.json``'s when the handle opened)."""
        options = timeline_options(properties)
        self.timeline.apply_options(options)
        self.metadata.apply_options(metadata_options(properties), options,
                                    shard_max_entries(properties))

    @property
    def partition_by(self) -> list[str]:
        return list(self.version.partition_by)

    @property
    def record_key(self) -> str | list[str] | None:
        key = self.version.record_key
        return list(key) if isinstance(key, list) else key

    @property
    def record_key_columns(self) -> list[str]:
        key = self.version.record_key
        if key is None:
            return []
        return [key] if isinstance(key, str) else list(key)

    @property
    def sort_by(self) -> list[str]:
        return list(self.version.sort_by)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.version.properties)

    # -- metadata resolution -------------------------------------------------------------------

    def metadata_at(self, view: TimelineView, bound: str | None,
                    partitions: tuple[str, ...] = (FILES, SEGMENTS),
                    travel: dict[str, str] | None = None) -> MetadataSnapshot:
        """Resolve metadata partitions; the latest state is extended incrementally from a cache.

        ``travel`` (time travel only) maps every completed instant, archived ones included, to
        its completion time.
        """
        completed = completion_map(view)
        last = view.last_completed()
        latest = last.completed_at if last else None
        if latest is None or (bound is not None and bound != latest):
            return self.metadata.resolve({**(travel or {}), **completed}, bound,
                                         partitions=partitions)
        shared = _LATEST.get(self._latest_key)
        if self._private is not None and (shared is None or shared.latest < self._private.latest):
            shared = self._private  # unshareable (see below), or newer than what is shared
        if shared is not None and self._adopted is not shared.snapshot \
                and not shared.intact(self.storage):
            # Another handle resolved it from files since lost: resolve from storage, so that
            # the damage is found by this handle too (the process keeps what was read, never
            # the outcome of a check).
            shared = None
        cached = (shared.latest, shared.snapshot) if shared is not None else None
        if cached is not None and cached[0] == latest and all(cached[1].has(p) for p in
                                                              (*partitions, SCHEMAS)):
            if self._adopted is not cached[1]:  # resolved by another handle of the table
                self._adopted = cached[1]
                self.adopt(cached[1].versions)
            return cached[1]
        if shared is not None and cached is not None and all(cached[1].has(p) for p in partitions):
            # The one instant completed since the cached state is this handle's own last write:
            # extended with the blocks it wrote, no storage call (``extend_own``).
            newer = [i for i in view.completed() if (i.completed_at or "") > cached[0]]
            if len(newer) == 1 and newer[0].completed_at == latest and any(
                    i.completed_at == cached[0] for i in view.completed()):
                extended = self.metadata.extend_own(cached, newer[0].time)
                if extended is not None:
                    self._keep(_Resolution(latest, extended,
                                           shared.sources | frozenset(extended.files_read)))
                    self._adopted = extended  # its versions are the cached ones'
                    return extended
        # Extend the cache only if its bound is still a completion on this timeline: a table
        # dropped and recreated at the same location shares nothing with the cached state.
        since = None
        # Every resolution of the latest state carries the version (one small partition,
        # extended incrementally): the handle's schema follows the table's.
        wanted = set(partitions) | {SCHEMAS}
        if cached is not None and cached[0] <= latest and any(
                i.completed_at == cached[0] for i in view.completed()):
            since = cached
            wanted |= {p for p in _CACHED_PARTITIONS if cached[1].has(p)}
        order = tuple(p for p in _CACHED_PARTITIONS if p in wanted)
        resolved = self.metadata.resolve(completed, latest, partitions=order, since=since)
        sources = frozenset(resolved.files_read)
        if since is not None and shared is not None:
            sources |= shared.sources
        self._keep(_Resolution(latest, resolved, sources))
        if resolved.has(SCHEMAS):
            self._adopted = resolved
            self.adopt(resolved.versions)
        return resolved

    def _keep(self, made: _Resolution) -> None:
        """Keep the latest resolution for every handle of the table, unless it skipped checks:
        then this handle extends it, and no other handle takes it as checked."""
        if self.metadata.checked_everything:
            _LATEST.put(self._latest_key, made)
            self._private = None
        else:
            self._private = made

    def __repr__(self) -> str:
        return f"TableContext({self.uri!r})"
