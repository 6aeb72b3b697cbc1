"""The internal table context: what every operation needs to know about one open table.

Operations (writes, reads, table services, Spark) depend on this small object rather than on the
public :class:`txn.Table`, which is a thin facade over them. It holds the table's configuration and
its parts (timeline, metadata table, data-file store), the injected clock and id source, and the
cache of the latest resolved metadata, shared by every operation on the table.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, Final

import pyarrow as pa

from indexes import COLUMN_STATS, DELETES, FILES, SEGMENTS, STREAMS, MetadataSnapshot, MetadataTable
from timeline import Clock, Storage, Timeline, TimelineView

from .._files import DataStore, ExternalReader, external_options
from ._config import TableConfig
from ._options import metadata_options, shard_max_entries, timeline_options
from ._staged import StagedCreate

#: A source of unique ids (table ids, file ids). Injected so tests are deterministic.
IdFactory = Callable[[], str]

#: The metadata partitions a write reads at the latest instant.
LATEST_PARTITIONS: Final = (FILES, SEGMENTS, DELETES)


#: Every partition the latest state may hold, in the order they are resolved.
_CACHED_PARTITIONS: Final = (*LATEST_PARTITIONS, COLUMN_STATS, STREAMS)


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
        self.schema: pa.Schema = config.schema
        options = timeline_options(config.properties)
        self.timeline = Timeline(storage, clock=clock, options=options)
        self.metadata = MetadataTable(storage, self.schema, clock=clock, owner=self.timeline.owner,
                                      options=metadata_options(config.properties),
                                      timeline_options=options,
                                      record_key=config.record_key_columns,
                                      record_index_shards=config.record_index_shards,
                                      record_index_shard_max_entries=shard_max_entries(
                                          config.properties))
        self.store = DataStore(storage, ExternalReader(
            self.schema, config.partition_by, external_options(storage.uri, storage_options)))
        self._latest: tuple[str, MetadataSnapshot] | None = None
        #: Set on a table created staged: its ``table.json`` goes with its first commit.
        self.staged: StagedCreate | None = None

    # -- the layout ----------------------------------------------------------------------------

    @property
    def partition_by(self) -> list[str]:
        return list(self.config.partition_by)

    @property
    def record_key(self) -> str | list[str] | None:
        key = self.config.record_key
        return list(key) if isinstance(key, list) else key

    @property
    def record_key_columns(self) -> list[str]:
        return self.config.record_key_columns

    @property
    def sort_by(self) -> list[str]:
        return list(self.config.sort_by)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.config.properties)

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
            wanted |= {p for p in _CACHED_PARTITIONS if cached[1].has(p)}
        order = tuple(p for p in _CACHED_PARTITIONS if p in wanted)
        resolved = self.metadata.resolve(completed, latest, partitions=order, since=since)
        self._latest = (latest, resolved)
        return resolved

    def __repr__(self) -> str:
        return f"TableContext({self.uri!r})"
