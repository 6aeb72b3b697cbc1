"""The row-changing writes: append, upsert, delete, update and merge.

All five are one shape, :class:`RowChanges`: new rows (written as one new segment), rows
deleted by position from existing data files (delete deltas), index keys removed (rows deleted
and not rewritten), and index keys read. One instance may carry the rows and deletes of several
operations at once (a transaction of several writes commits them as one instant); the
subclasses only name the operation of the single-operation writes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa

from metatxn.timeline import TimelineView

from ..._context import TableContext
from ..._files import LiveDeltas, Positions
from ..._results import Operation
from .. import _conflicts
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
    removed_entries,
    small,
    write_rows,
)


@dataclass(kw_only=True)
class RowChanges(DataWrite):
    """New rows, rows deleted by position, keys removed and keys read, committed as one instant.

    Build it directly (every argument is keyword-only)::

        RowChanges(operation="upsert", rows=batches, read_at=state.read_at, current=state.deltas,
                   deleted={"part-0.parquet": np.array([3, 7])}, rows_bytes=table.nbytes)

    * ``operation``: recorded in the commit, and the conflict wording (an operation in
      ``INSERTS`` reports a duplicate key);
    * ``rows``: record batches of new rows, written as one new segment; None: none;
    * ``read_at``: completion time of the snapshot the positions and keys were read from (None:
      an empty table, or nothing read); ``current``: that snapshot's live delete deltas;
    * ``deleted``: data file (table-relative path) -> sorted positions of live rows to delete;
    * ``removed_keys``: index keys (``index_keys``) of rows deleted and not rewritten: their
      index entries are tombstoned;
    * ``read_keys``: index keys looked up, found or not (a delete by keys);
    * ``rows_bytes``: the new rows' size in memory when known before begin (picks the lock
      policy); None: unknown;
    * ``progress``: the producer batch it is (exactly once); ``admission``: an extra check at
      begin.

    Several operations in one instant: concatenate their rows, merge their ``deleted`` (union
    of positions per file, live rows only), concatenate ``removed_keys`` and ``read_keys``.

    Segments: one new segment when it has new rows (or they are written elsewhere), else none.
    Lock: held throughout when small (``SMALL_WRITE_BYTES`` of rows, ``SMALL_WRITE_DELETES``
    rows deleted); heartbeat otherwise. Admission: a producer batch committed already is
    refused. Conflicts, against every data commit completed after ``read_at``: one that
    deleted rows of, or removed, a data file it deletes from; one that wrote an index entry of
    a key it writes, removes or read. Unkeyed appends touch neither and never conflict.
    Against a compaction alone: ``CompactedMeanwhileError`` (planned again, not failed);
    against an overwrite, DELETE SEGMENT or another row write: ``CommitConflictError`` (for an
    insert, ``DuplicateKeyError``). Records: the new segment's files, statistics and entry,
    the delete deltas (replaced older ones tombstoned), index entries of new rows and
    tombstones of removed keys. A merge write (``schema`` with changes, ``schema_mode="merge"``)
    also creates a table version: worked out at admission, recorded in the same instant, and it
    loses to any version completed since it began (``SchemaChangedError``).
    """

    operation: Operation
    rows: Iterable[pa.RecordBatch] | None = None
    current: LiveDeltas
    deleted: dict[str, Positions] = field(default_factory=dict)
    removed_keys: pa.Table | None = None
    rows_bytes: int | None = None

    @property
    def rows_deleted(self) -> int:
        return sum(len(p) for p in self.deleted.values())

    def allocation(self, *, elsewhere: bool = False) -> Allocation:
        return NEW_SEGMENT if self.rows is not None or elsewhere else NO_SEGMENT

    def lock_policy(self, *, elsewhere: bool = False) -> LockPolicy:
        return LockPolicy.HEARTBEAT if elsewhere else small(self.rows_bytes, self.rows_deleted)

    def deleted_files(self) -> set[str]:
        return set(self.deleted)

    def write_files(self, context: TableContext, pending: Pending) -> Written:
        written = Written()
        entries: list[pa.Table] = []
        if self.rows is not None:
            written.statuses, new = write_rows(context, pending, self.rows,
                                               schema=self.written_schema(context))
            if new is not None:
                entries.append(new)
        index = context.metadata.record_index
        if index is not None and self.removed_keys is not None and self.removed_keys.num_rows:
            entries.append(removed_entries(index, self.removed_keys, pending.instant.time))
        return finish_phase(context, pending, written, entries, self.deleted, self.current)

    def changes(self, context: TableContext, view: TimelineView, pending: Pending,
                written: Written) -> Recorded:
        done = added(context, pending, written, self.written_schema(context).schema)
        done.rows_deleted = self.rows_deleted
        return done


@dataclass(kw_only=True)
class Append(RowChanges):
    """``append``: new rows as a new segment. A keyed append was checked for existing keys when
    planned; a concurrent commit of one of its keys is a ``DuplicateKeyError``."""

    operation: Operation = Operation.APPEND


@dataclass(kw_only=True)
class Upsert(RowChanges):
    """``upsert``: new rows, and the rows of existing keys deleted by position; conflicts with a
    concurrent commit of one of its keys or of a file it deletes from."""

    operation: Operation = Operation.UPSERT


@dataclass(kw_only=True)
class Delete(RowChanges):
    """``delete`` by keys or by a filter (or by file and position): rows deleted by position,
    their keys removed; a delete by keys also conflicts on the keys it asked for and did not
    find (``read_keys``)."""

    operation: Operation = Operation.DELETE


@dataclass(kw_only=True)
class Update(RowChanges):
    """``update``: matched rows deleted by position and written again, changed, as a new
    segment; conflicts on the files it deletes from and the keys it writes."""

    operation: Operation = Operation.UPDATE


@dataclass(kw_only=True)
class MergeInto(RowChanges):
    """``merge``: matched target rows updated (deleted by position and written again) or
    deleted, source rows inserted, in one new segment; conflicts as an upsert and a delete by
    keys do (the files it deletes from, the keys it writes, removes or looked up), and, when it
    ``scanned`` the table rather than looked its keys up, with any concurrent commit that added
    or replaced rows and is not a blind append (``_conflicts.check_read``)."""

    operation: Operation = Operation.MERGE
    #: It read the target by scanning (not by record keys): what it did not find matters.
    scanned: bool = False

    def check(self, context: TableContext, view: TimelineView, pending: Pending, written: Written) -> None:
        super().check(context, view, pending, written)
        if self.scanned:
            _conflicts.check_read(context, view, operation=self.operation,
                                  instant_time=pending.instant.time, read_at=self.read_at)

