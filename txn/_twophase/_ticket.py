"""What a worker of a two-phase write needs: the :class:`WriteTicket` the driver hands out, and
the :class:`KeyProbe` that finds existing rows of a keyed table's keys in the snapshot the
write read. Both are small and picklable (sent to Spark executors, Ray or Dask workers, other
processes); neither holds an open handle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import DoneCompactions, RecordIndex, TableVersion, key_hash
from metatxn.timeline import InvalidOptionError, open_storage

from .._rows import index_keys
from .._write import refuse_existing_keys

#: Where a foreign writer (Spark's own Parquet writer) puts files before they join a write.
STAGING_FOLDER = "_staging"


@dataclass(frozen=True)
class KeyProbe:
    """Finds the live rows of given record keys in one snapshot of a keyed table, anywhere.

    ``find(rows)`` looks the keys of ``rows`` up in the record index as of the snapshot
    (``read_instant``) and returns the rows found: the key columns, ``file`` (table-relative
    path) and ``position``. Build one with :meth:`txn.Table.key_probe`; a pending write's
    ticket carries one for its workers.
    """

    uri: str
    storage_options: dict[str, Any] | None
    key_columns: tuple[str, ...]
    #: The key columns' schema, serialized (pyarrow schemas pickle, but their bytes are smaller).
    key_schema: bytes
    shards: int
    #: The snapshot: the instant it is named after, and its completion bound.
    read_instant: str | None
    read_at: str | None
    completed: Mapping[str, str] = field(repr=False)
    done: DoneCompactions = field(repr=False)
    live_files: tuple[str, ...] = field(repr=False)

    def find(self, rows: pa.Table | pa.RecordBatch) -> pa.Table:
        """The live rows holding the keys of ``rows``: key columns, ``file``, ``position``."""
        return self._find_in(self._index(), rows)

    def _index(self) -> RecordIndex:
        """The record index this probe reads (a writer that then logs entries with the same
        object logs them in the layout its lookups resolved)."""
        schema = pa.ipc.read_schema(pa.py_buffer(self.key_schema))
        return RecordIndex(open_storage(self.uri, self.storage_options), list(schema.types), self.shards)

    def node_count(self) -> int:
        """The finest shard-node count of the index at the snapshot (its root count when no
        node split): keys ``h`` with the same ``h % node_count()`` share a node, so work split
        by it (``WriteTicket.key_hashes``) splits by node. Lists the index."""
        if self.read_at is None:
            return self.shards
        files = self._index().files(self.completed, self.read_at, self.done)
        return max((node.count for node in files.leaves), default=self.shards)

    def _find_in(self, index: RecordIndex, rows: pa.Table | pa.RecordBatch) -> pa.Table:
        """:meth:`find` through ``index`` (from :meth:`_index`)."""
        schema = pa.ipc.read_schema(pa.py_buffer(self.key_schema))
        columns = list(self.key_columns)
        found_schema = pa.schema([*schema, pa.field("file", pa.string()), pa.field("position", pa.int64())])
        if self.read_at is None or rows.num_rows == 0:
            return found_schema.empty_table()
        missing = [c for c in columns if c not in rows.schema.names]
        if missing:
            raise InvalidOptionError(f"KeyProbe.find: rows lack record key column(s) {missing}")
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        entries = index.lookup(index_keys(table.select(columns).cast(schema), columns),
                               self.completed, self.read_at, self.done)
        alive = entries.filter(pc.and_(pc.invert(entries["deleted"]), pc.is_in(
            entries["file"], value_set=pa.array(self.live_files, pa.string()))))
        arrays = [alive[f"key_{i}"] for i in range(len(columns))]
        return pa.table([*arrays, alive["file"], alive["position"]], schema=found_schema)

    def refuse(self, found: pa.Table) -> None:
        """A keyed append's check on what :meth:`find` found: ``DuplicateKeyError`` naming some
        of the keys if any row was found (the same check ``Table.append`` makes)."""
        columns = list(self.key_columns)
        refuse_existing_keys(index_keys(found, columns), columns)


@dataclass(frozen=True)
class WriteTicket:
    """What a worker needs to write its part of a pending write (:func:`txn.write_files`).

    From :attr:`txn.PendingWrite.ticket`; pickle it to the workers. ``instant`` and
    ``segment`` name the write's instant and the segment its files go to.
    """

    uri: str
    storage_options: dict[str, Any] | None
    operation: str
    instant: str
    segment: str | None
    #: The table's schema, serialized.
    schema: bytes = field(repr=False)
    #: Which table version ``schema`` is: every file written records it (``files.schema_id``).
    schema_id: int = 0
    partition_by: tuple[str, ...] = ()
    sort_by: tuple[str, ...] = ()
    key_columns: tuple[str, ...] = ()
    #: Record-index shards (0: an unkeyed table).
    shards: int = 0
    target_file_bytes: int = 0
    #: The snapshot the write read (instant and completion bound).
    read_instant: str | None = None
    read_at: str | None = None
    #: Keyed appends and upserts: finds the rows of the workers' keys in that snapshot.
    probe: KeyProbe | None = field(default=None, repr=False)
    #: The driver's heartbeat was detached (:meth:`txn.PendingWrite.detach`): workers beat it.
    workers_beat: bool = False
    #: The location every table file's path is relative to (``<uri>/``, as storage spells it).
    root: str = ""
    #: What the commit records (from the driver; the ticket carries them so another process
    #: can commit, see ``PendingWrite.resume``): a partition-scoped overwrite's partitions,
    #: ``CommitProperties.extra``, and the producer's batch of an idempotent write.
    scope: tuple[str, ...] | None = field(default=None, repr=False)
    extra: dict[str, str] = field(default_factory=dict, repr=False)
    progress: Any = field(default=None, repr=False)
    #: ``schema_mode="merge"``: the table version(s) the write creates (worked out under the
    #: lock at begin; ``schema`` and ``schema_id`` are the new one's), recorded by its commit.
    versions: tuple[TableVersion, ...] = field(default=(), repr=False)
    #: ``schema_mode="merge"``: workers fill a nullable column their data lacks with nulls.
    merge: bool = False

    @property
    def table_schema(self) -> pa.Schema:
        return pa.ipc.read_schema(pa.py_buffer(self.schema))

    def key_hashes(self, rows: pa.Table | pa.RecordBatch) -> np.ndarray:
        """The record-index hash (``uint64``) of each row's key: rows whose hashes agree modulo
        a node count (``shards``, ``KeyProbe.node_count()``) belong to one shard node. Key
        columns must hold no nulls."""
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        schema = self.table_schema
        columns = list(self.key_columns)
        return key_hash([table[c].cast(schema.field(c).type) for c in columns])

    @property
    def staging(self) -> str:
        """Where a foreign writer puts the files it writes for this instant (a folder URL);
        :func:`txn.adopt_files` moves them into the write."""
        return f"{self.root}{staging_folder(self.instant)}"


def staging_folder(instant_time: str) -> str:
    return f"{STAGING_FOLDER}/{instant_time}"
