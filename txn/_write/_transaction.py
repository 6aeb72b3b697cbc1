"""Transactions: several writes of one table committed as one instant, all or nothing.

``with t.transaction() as tx: tx.delete(keys=[1, 2]); tx.append(data)`` stages the operations in
memory and commits them on leaving the block as ONE instant of operation ``transaction`` (the
commit metadata's ``operations`` lists what ran): the new rows as one segment, the rows deleted
from existing files as delete deltas, and one conflict check over every key and file the
transaction read or wrote.

Guarantees:

* Snapshot isolation with read-your-writes. The transaction reads the latest snapshot at its first
  operation; every operation sees that snapshot plus the transaction's own earlier operations (an
  upsert after an append of the same key replaces the staged row, a delete after an append
  deletes it, an append of a key deleted earlier is allowed, an append of a key staged earlier is
  a ``DuplicateKeyError``).
* All or nothing. An exception leaving the block, a failed commit, or a crash at any step of the
  commit protocol leaves the table as it was (nothing is written before the commit begins; an
  instant that fails is rolled back, now or by the next writer once its heartbeat expired).
* Conflicts as one write: a commit that completed after the snapshot the transaction read and
  wrote any key or data file the transaction read or wrote fails the commit with
  ``CommitConflictError`` (also for keys a single append would report as ``DuplicateKeyError``:
  the retry reports that). A compaction that completed meanwhile is not a conflict: the staged
  operations are replayed, from their recorded inputs, against the compacted table and the commit
  retried (the user's code never runs twice), as single writes are planned again.
* An operation that raises (a duplicate key, a bad argument) changes nothing staged: the
  transaction may go on, or the exception leave the block and nothing is committed.
* Idempotent (``commit_properties`` with ``app_id``/``version``): a version its producer committed
  already, found when the transaction is created, makes every operation a no-op and the commit
  return None; one committed by another process meanwhile is found under the lock at the commit.

Not guaranteed, by design:

* Staged rows are held in memory (Arrow): the rows given to ``append``/``upsert``/``overwrite``
  (kept to replay them), the rows staged (shared with those inputs until a later delete, update or
  upsert of staged rows copies what is left), the rows ``update`` rewrites, and 8 bytes per row
  deleted from existing files. Memory grows linearly with the rows a transaction writes; a large
  load belongs in a single write or the two-phase form, which stream to storage.
* No reads through the transaction, and no schema changes in it.
* A transaction kept open for long may outlive its snapshot: once cleaning expired it (many
  commits later), an operation that reads it raises ``SnapshotExpiredError``; run it again.
* ``overwrite`` must be the transaction's first operation: whole-table (``partitions=None``) the
  operations after it see only the transaction's own rows; partition-scoped, it must be the only
  operation (which partitions it replaces is known only from the rows it writes).

Stability: the public surface is ``txn.Transaction`` as returned by ``Table.transaction``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import key_names, matching
from metatxn.timeline import DuplicateKeyError, InvalidOptionError

from .._commit import DataWrite, Overwrite, RowChanges
from .._context import TableContext
from .._files import LiveDeltas, Positions, scan_file
from .._read import snapshot_at
from .._results import Commit, Operation
from .._rows import (
    check_not_null,
    check_unique,
    describe,
    index_keys,
    keys_argument,
    last_wins,
)
from ._merge import merging
from ._mutations import _by_file, _check_where, _materialize, _require_key
from ._options import WriteOptions
from ._scope import check_in_partition, overwrite_scope
from ._state import State, commit_planned, find_keys, read_state
from ._values import check_values, new_values

log = logging.getLogger("metatxn")

_ROW = "__staged_row__"


@dataclass(frozen=True)
class _Operation:
    """One staged operation and its inputs, as recorded to replay it on a newer snapshot."""

    name: str
    args: tuple[Any, ...]


@dataclass(frozen=True)
class _Staged:
    """The transaction's effect so far on the snapshot it read (immutable: an operation builds a
    new one, so one that raises leaves the staged effect as it was)."""

    #: The snapshot read (None: the transaction began with an overwrite and reads nothing).
    state: State | None
    #: New rows, in the table's schema.
    rows: pa.Table
    #: Rows of the snapshot's data files deleted: file -> sorted positions.
    deleted: Mapping[str, Positions] = field(default_factory=dict)
    #: Index keys of the snapshot's rows deleted (those still staged are rewritten, not removed).
    removed: tuple[pa.Table, ...] = ()
    #: Index keys looked up (found or not): a concurrent commit of any of them conflicts.
    read_keys: tuple[pa.Table, ...] = ()
    #: A whole-table or partition-scoped overwrite began the transaction.
    replace: bool = False
    partitions: frozenset[str] | None = None
    operations: tuple[str, ...] = ()


def _new_staged(context: TableContext, state: State | None) -> _Staged:
    return _Staged(state, context.schema.empty_table())


def _key_mask(rows: pa.Table, keys: pa.Table) -> pa.Array:
    """Which of ``rows`` have a key among ``keys`` (both as index key columns)."""
    mask = np.zeros(rows.num_rows, dtype=bool)
    if rows.num_rows and keys.num_rows:
        names = [name for name in rows.column_names if name != _ROW]
        numbered = rows.select(names).append_column(
            _ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        mask[matching(numbered, keys, names)[_ROW].to_numpy()] = True
    return pa.array(mask)


def _where_mask(rows: pa.Table, where: Any) -> pa.Array:
    """Which of ``rows`` match ``where`` (a null match is no match, as a filter drops it)."""
    mask = np.zeros(rows.num_rows, dtype=bool)
    if rows.num_rows:
        numbered = rows.append_column(_ROW, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        mask[numbered.filter(where)[_ROW].to_numpy()] = True
    return pa.array(mask)


class _Apply:
    """The operations, each ``(context, staged, *inputs) -> staged``: the one place that knows what
    an operation does inside a transaction, run when it is called and again on a replay."""

    def __init__(self, context: TableContext) -> None:
        self.context = context
        self.columns = context.record_key_columns

    # -- what the transaction sees --------------------------------------------------------------

    def _live(self, staged: _Staged, entries: pa.Table) -> pa.Table:
        """Index entries of the snapshot whose rows the transaction has not deleted."""
        if not staged.deleted or entries.num_rows == 0:
            return entries
        keep = np.ones(entries.num_rows, dtype=bool)
        files = entries["file"].to_pylist()
        positions = entries["position"].to_numpy()
        for i, file in enumerate(files):
            gone = staged.deleted.get(file)
            if gone is not None and np.isin(positions[i], gone):
                keep[i] = False
        return entries.filter(pa.array(keep))

    def _existing(self, staged: _Staged, keys: pa.Table) -> pa.Table:
        if staged.state is None:  # after an overwrite: the snapshot's rows are replaced
            return pa.table({})
        return self._live(staged, find_keys(self.context, staged.state, keys))

    def _without_staged(self, staged: _Staged, mask: pa.Array) -> pa.Table:
        return staged.rows.filter(pc.invert(mask))

    def _delete(self, staged: _Staged, positions: Mapping[str, Positions],
                removed: pa.Table | None) -> dict[str, Any]:
        deleted = dict(staged.deleted)
        for file, found in positions.items():
            before = deleted.get(file)
            deleted[file] = found if before is None else np.union1d(before, found)
        more = (removed,) if removed is not None and removed.num_rows else ()
        return {"deleted": deleted, "removed": staged.removed + more}

    def _matching(self, staged: _Staged, where: Any,
                  columns: list[str]) -> tuple[dict[str, Positions], pa.Table]:
        """The snapshot's live rows (less those the transaction deleted) matching ``where``."""
        schema = pa.schema([self.context.schema.field(name) for name in columns])
        state = staged.state
        if state is None:
            return {}, schema.empty_table()
        snapshot = snapshot_at(self.context, state.view, None, state.read_at)
        prefix = self.context.store.location("")
        positions: dict[str, Positions] = {}
        parts: list[pa.Table] = []
        for data_file in snapshot.files(where):
            path = data_file.path.removeprefix(prefix)
            gone = state.deltas.positions(path)
            if path in staged.deleted:
                gone = np.union1d(gone, staged.deleted[path])
            try:
                rows, found = scan_file(self.context.store, path, self.context.schema, filter=where,
                                        columns=columns, deleted=gone, file_format=data_file.format,
                                        written=state.written(self.context, path))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                raise InvalidOptionError(f"where {where} does not apply to this table: {exc}") from None
            if len(found):
                positions[path] = found
                parts.append(rows)
        return positions, (pa.concat_tables(parts) if parts else schema.empty_table())

    def _keys_of(self, rows: pa.Table) -> pa.Table | None:
        return index_keys(rows, self.columns) if self.columns and rows.num_rows else None

    def _staged_with(self, staged: _Staged, keys: pa.Table) -> pa.Array:
        return _key_mask(index_keys(staged.rows, self.columns), keys)

    # -- the operations -------------------------------------------------------------------------

    def append(self, staged: _Staged, rows: pa.Table) -> _Staged:
        read: tuple[pa.Table, ...] = ()
        if self.columns:
            check_not_null(rows, self.columns)
            check_unique(rows, self.columns)
            keys = index_keys(rows, self.columns)
            existing = self._existing(staged, keys)
            if existing.num_rows:
                raise DuplicateKeyError(
                    f"transaction append: record key(s) {describe(existing, self.columns)} already "
                    "exist in the table; nothing was staged\nHelp: use tx.upsert to replace them")
            again = staged.rows.filter(self._staged_with(staged, keys))
            if again.num_rows:
                raise DuplicateKeyError(
                    f"transaction append: record key(s) "
                    f"{describe(index_keys(again, self.columns), self.columns)} were staged by an "
                    "earlier operation of this transaction; nothing was staged\n"
                    "Help: use tx.upsert to replace them")
            read = (keys,)
        return replace(staged, rows=pa.concat_tables([staged.rows, rows]),
                       read_keys=staged.read_keys + read)

    def upsert(self, staged: _Staged, rows: pa.Table) -> _Staged:
        _require_key(self.context, "upsert")
        check_not_null(rows, self.columns)
        rows = last_wins(rows, self.columns)
        keys = index_keys(rows, self.columns)
        existing = self._existing(staged, keys)
        kept = self._without_staged(staged, self._staged_with(staged, keys))
        return replace(staged, rows=pa.concat_tables([kept, rows]),
                       read_keys=(*staged.read_keys, keys),
                       **self._delete(staged, _by_file(existing) if existing.num_rows else {},
                                      existing.select(key_names(len(self.columns)))
                                      if existing.num_rows else None))

    def delete(self, staged: _Staged, where: Any, keys: Any) -> _Staged:
        if keys is not None:
            found = self._existing(staged, keys)
            kept = self._without_staged(staged, self._staged_with(staged, keys))
            removed = found.select(key_names(len(self.columns))) if found.num_rows else None
            return replace(staged, rows=kept, read_keys=(*staged.read_keys, keys),
                           **self._delete(staged, _by_file(found) if found.num_rows else {}, removed))
        kept = self._without_staged(staged, _where_mask(staged.rows, where))
        positions, matched = self._matching(staged, where, self.columns)
        return replace(staged, rows=kept, **self._delete(staged, positions, self._keys_of(matched)))

    def update(self, staged: _Staged, where: Any, values: Mapping[str, Any]) -> _Staged:
        mask = _where_mask(staged.rows, where) if where is not None else pa.array(
            np.ones(staged.rows.num_rows, dtype=bool))
        before = staged.rows.filter(mask)
        positions, matched = self._matching(staged, where, list(self.context.schema.names))
        changed = pa.concat_tables([before, matched])
        for name, array in new_values(self.context.schema, values, changed).items():
            changed = changed.set_column(changed.schema.get_field_index(name),
                                         self.context.schema.field(name), array)
        rows = pa.concat_tables([self._without_staged(staged, mask), changed])
        # The rewritten rows keep their keys (their index entries are replaced, not removed),
        # unless a later operation deletes them: ``reduce`` keeps what is still staged.
        return replace(staged, rows=rows, **self._delete(staged, positions, self._keys_of(matched)))

    def delete_rows(self, staged: _Staged, positions: Mapping[str, Positions]) -> _Staged:
        state = staged.state
        if state is None:
            raise InvalidOptionError(
                "tx.delete_rows after tx.overwrite: the overwrite replaced every data file of the "
                "snapshot, so there are no rows to delete by position; nothing was staged")
        live = dict(zip(state.live_files["path"].to_pylist(), zip(
            state.live_files["rows"].to_pylist(), state.live_files["format"].to_pylist(),
            strict=True), strict=True))
        found: dict[str, Positions] = {}
        keys: list[pa.Table] = []
        for path, wanted in positions.items():
            if path not in live:
                raise InvalidOptionError(
                    f"tx.delete_rows: {path!r} is not a live data file of the snapshot this "
                    "transaction read; expected a DataFile.path of t.snapshot().files() "
                    "(nothing was staged)")
            rows, file_format = live[path]
            if len(wanted) and (wanted[0] < 0 or wanted[-1] >= rows):
                raise InvalidOptionError(
                    f"tx.delete_rows: positions of {path!r} must be from 0 to {rows - 1} (its "
                    f"rows); got {int(wanted[0])} .. {int(wanted[-1])}; nothing was staged")
            gone = state.deltas.positions(path)
            if path in staged.deleted:
                gone = np.union1d(gone, staged.deleted[path])
            alive = np.setdiff1d(wanted, gone)  # a row deleted already: deleting it is a no-op
            if not len(alive):
                continue
            found[path] = alive
            if self.columns:
                read, at = scan_file(self.context.store, path, self.context.schema, filter=None,
                                     columns=self.columns, deleted=gone, file_format=file_format,
                                     written=state.written(self.context, path))
                keys.append(index_keys(read.filter(pa.array(np.isin(at, alive))), self.columns))
        removed = pa.concat_tables(keys) if keys else None
        return replace(staged, **self._delete(staged, found, removed))

    def overwrite(self, staged: _Staged, rows: pa.Table, partitions: Any) -> _Staged:
        scope, values = overwrite_scope(self.context, partitions)
        if self.columns:
            check_not_null(rows, self.columns)
            check_unique(rows, self.columns)
        if values:
            check_in_partition(rows, values, self.context.schema)
        return _Staged(None, rows, replace=True, partitions=scope)


class Transaction:
    """Several writes committed as one instant, all or nothing; obtain one with
    ``Table.transaction()`` and use it as a context manager::

        with t.transaction() as tx:
            tx.delete(keys=[1, 2])
            tx.append(data)
        tx.result  # the txn.Commit, or None when the operations changed nothing

    Each operation reads the snapshot the transaction read at its first operation plus the
    transaction's own earlier operations; the block commits on a clean exit and writes nothing
    when an exception leaves it. Staged rows are kept in memory until the commit, growing
    linearly with the rows it writes (design/consistency.md); large loads belong in a single
    ``append`` or the two-phase commit.
    """

    def __init__(self, context: TableContext, options: WriteOptions | None, *,
                 after_load: Callable[[Commit], None] | None = None) -> None:
        self._context = context
        #: What runs after a commit that added a segment (auto compaction), as after an append.
        self._after_load = after_load
        #: None: the commit options name a producer's batch committed already (nothing to do).
        self._options = options
        self._apply = _Apply(context)
        self._staged: _Staged | None = None
        self._operations: list[_Operation] = []
        self._closed: str | None = None
        self._result: Commit | None = None

    # -- the block ------------------------------------------------------------------------------

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if exc_type is not None:
            self._close("an exception left its block; nothing was committed")
        elif self._closed is None:
            self.commit()

    @property
    def result(self) -> Commit | None:
        """The commit, once committed; None before, or when the transaction changed nothing (or
        its ``app_id`` committed its ``version`` already)."""
        return self._result

    @property
    def read_at(self) -> str | None:
        """Completion time of the snapshot the transaction read (None: nothing read yet, an empty
        table, or it began with an overwrite)."""
        state = self._staged.state if self._staged is not None else None
        return state.read_at if state is not None else None

    def commit(self) -> Commit | None:
        """Commit the staged operations as one instant (what leaving the block does).

        Returns the commit, or None when there was nothing to commit. Afterwards (also after it
        raised) every operation, and another ``commit``, raises ``InvalidOptionError``.

        Raises:
            CommitConflictError: a commit that completed after the transaction's snapshot wrote a
                key or data file it read or wrote; nothing was written, run it again.
        """
        self._check_open()
        self._close("commit() was called")
        if self._options is None or self._staged is None:
            return None
        staged, operations = self._staged, list(self._operations)
        replays = 0

        def plan(state: State) -> DataWrite | None:
            nonlocal replays
            replays += 1
            if replays == 1:
                return reduce(self._context, staged)
            # A table service overtook the snapshot: the same operations on the new one.
            log.info("transaction replayed on the table as it is now (%d operations)", len(operations))
            return reduce(self._context, replay(self._apply, self._context, state, operations))

        self._result = commit_planned(self._context, plan, self._options.extra,
                                      progress=self._options.progress)
        if self._result is not None and self._result.segment is not None and self._after_load:
            self._after_load(self._result)
        return self._result

    # -- the operations -------------------------------------------------------------------------

    def append(self, data: Any, *, schema_mode: str | None = None) -> None:
        """Stage ``data`` as new rows. Keyed tables: a key in the snapshot (not deleted by this
        transaction) or staged earlier raises ``DuplicateKeyError``, and nothing is staged.
        ``schema_mode="merge"`` is refused here (``InvalidOptionError``): a transaction commits
        no schema change; change it first with ``Table.update_schema()``."""
        _no_merge("append", schema_mode)
        self._run("append", _materialize(self._context, data))

    def upsert(self, data: Any, *, schema_mode: str | None = None) -> None:
        """Keyed tables: stage ``data``, replacing the rows of its keys, staged or in the
        snapshot (the last row of a key in ``data`` wins). ``schema_mode``: as ``append``."""
        _no_merge("upsert", schema_mode)
        _require_key(self._context, "upsert")
        self._run("upsert", _materialize(self._context, data))

    def delete(self, where: Any = None, *, keys: Any = None) -> None:
        """Delete the rows matching ``where`` (a ``pc.Expression``), or (keyed tables) the rows
        with these ``keys``, staged or in the snapshot.

        Raises:
            InvalidOptionError: neither or both given, or ``keys`` on a table without a key.
        """
        expression = _check_where(where, self._context.schema)
        if (expression is None) == (keys is None):
            raise InvalidOptionError(
                "tx.delete needs exactly one of where= (a pyarrow.compute.Expression) or keys= "
                f"(record key values); got {'both' if keys is not None else 'neither'}")
        wanted = None
        if keys is not None:
            columns = _require_key(self._context, "delete(keys=...)")
            wanted = keys_argument(keys, self._context.schema, columns)
        self._run("delete", expression, wanted)

    def update(self, where: Any, values: Mapping[str, Any]) -> None:
        """Set ``values`` (column -> new value) on the rows matching ``where`` (None: all rows),
        staged or in the snapshot. Record key columns cannot be updated."""
        expression = _check_where(where, self._context.schema)
        schema = self._context.schema
        self._run("update", expression,
                  check_values(schema, self._context.record_key_columns, values, schema))

    def delete_rows(self, positions: Mapping[str, Any]) -> None:
        """Delete rows by position: data file (``txn.DataFile.path`` of the snapshot this
        transaction read) -> row positions in it (0-based, any order; a row deleted already is
        skipped).

        Raises:
            InvalidOptionError: a file that is not live in the snapshot, or a position outside it.
        """
        if not isinstance(positions, Mapping):
            raise InvalidOptionError(
                "tx.delete_rows takes a mapping of data file path (txn.DataFile.path) -> row "
                f"positions, got {type(positions).__name__}")
        prefix = self._context.store.location("")
        checked: dict[str, Positions] = {}
        for path, wanted in positions.items():
            try:
                array = np.unique(np.asarray(list(wanted), dtype=np.int64))
            except (TypeError, ValueError, OverflowError):
                raise InvalidOptionError(
                    f"tx.delete_rows: the positions of {path!r} must be integers, got {wanted!r}"
                ) from None
            if not isinstance(path, str):
                raise InvalidOptionError(f"tx.delete_rows: a data file path is a str, got {path!r}")
            relative = path.removeprefix(prefix)
            checked[relative] = np.union1d(checked.get(relative, array), array)
        self._run("delete_rows", checked)

    def overwrite(self, data: Any, partitions: Any = None, *, schema_mode: str | None = None) -> None:
        """Replace the table's content with ``data`` (``partitions`` as ``Table.overwrite``;
        ``schema_mode``: as ``append``).

        Raises:
            InvalidOptionError: not the transaction's first operation.
        """
        _no_merge("overwrite", schema_mode)
        if self._operations:
            raise InvalidOptionError(
                "tx.overwrite must be the first operation of a transaction (it replaces what the "
                f"transaction read); this one already ran {self._names()}\n"
                "Help: overwrite first, then stage the other operations")
        self._run("overwrite", _materialize(self._context, data), partitions)

    # -- staging --------------------------------------------------------------------------------

    def _run(self, name: str, *args: Any) -> None:
        self._check_open()
        if self._staged is not None and self._staged.partitions is not None:
            raise InvalidOptionError(
                "a partition-scoped tx.overwrite must be the transaction's only operation (the "
                "partitions it replaces are those of the rows it writes); nothing was staged")
        if self._options is None:
            # Its producer committed this version already: a retry's operations would read the
            # table as that commit left it (and find its own keys), so they are not applied.
            return
        staged = self._staged
        if staged is None:
            staged = _new_staged(self._context, None if name == "overwrite" else read_state(self._context))
        staged = apply_operation(self._apply, staged, _Operation(name, args))
        self._staged = replace(staged, operations=(*staged.operations, name))
        self._operations.append(_Operation(name, args))

    def _names(self) -> list[str]:
        return [operation.name for operation in self._operations]

    def _check_open(self) -> None:
        if self._closed is not None:
            raise InvalidOptionError(
                f"this transaction is closed: {self._closed}\n"
                "Help: start a new one with t.transaction()")

    def _close(self, why: str) -> None:
        self._closed = why


def apply_operation(apply: _Apply, staged: _Staged, operation: _Operation) -> _Staged:
    method: Callable[..., _Staged] = getattr(apply, operation.name)
    return method(staged, *operation.args)


def replay(apply: _Apply, context: TableContext, state: State,
           operations: list[_Operation]) -> _Staged:
    """The staged effect of ``operations`` on ``state`` (a replan after a table service)."""
    staged = _new_staged(context, None if operations[0].name == "overwrite" else state)
    for operation in operations:
        staged = apply_operation(apply, staged, operation)
    return replace(staged, operations=tuple(operation.name for operation in operations))


def reduce(context: TableContext, staged: _Staged) -> DataWrite | None:
    """The one write a transaction commits (None: it changes nothing): an ``Overwrite`` when it
    began with one (later operations see only its own rows, so it deletes nothing by position),
    else a ``RowChanges``, both recording ``operation="transaction"`` and the operations it ran.

    This is the only place that knows how a transaction maps onto the commit path: new rows as one
    segment, the snapshot's rows deleted by position, the keys of deleted rows not rewritten
    tombstoned, every key read kept for the conflict check, and an overwrite's replacement.
    """
    rows = staged.rows
    if not staged.replace and rows.num_rows == 0 and not staged.deleted:
        log.info("transaction changed nothing: nothing to commit")
        return None
    columns = context.record_key_columns
    removed = None
    if staged.removed:
        removed = pa.concat_tables(staged.removed)
        if rows.num_rows:  # a key deleted and staged again is rewritten, not removed
            removed = removed.filter(pc.invert(_key_mask(removed, index_keys(rows, columns))))
        removed = removed.group_by(removed.column_names).aggregate([]) if removed.num_rows else None
    read = pa.concat_tables(staged.read_keys) if staged.read_keys else None
    state = staged.state
    # The writer takes non-empty batches only (staging concatenates and filters tables).
    batches = [batch for batch in rows.to_batches() if batch.num_rows]
    new_rows: Any = batches if batches else (iter(()) if staged.replace else None)
    if staged.replace:
        assert not staged.deleted, "an overwrite first: later operations delete staged rows only"
        return Overwrite(operation=Operation.TRANSACTION, rows=new_rows, partitions=staged.partitions,
                         operations=staged.operations)
    return RowChanges(
        operation=Operation.TRANSACTION, rows=new_rows, read_at=state.read_at if state is not None else None,
        current=state.deltas if state is not None else LiveDeltas(context.store, {}),
        deleted=dict(staged.deleted), removed_keys=removed, read_keys=read, rows_bytes=rows.nbytes,
        operations=staged.operations)


def _no_merge(operation: str, schema_mode: object) -> None:
    """A transaction's operations take ``schema_mode=None`` only: an ``alter_table`` is a commit
    of its own, so a transaction never changes the schema (nothing is staged)."""
    if merging(schema_mode, f"tx.{operation}"):
        raise InvalidOptionError(
            f"tx.{operation}: schema_mode='merge' is not offered inside a transaction, which "
            "commits no schema change; nothing was staged\n"
            "Help: change the schema first (t.update_schema() or t.add_columns), then run the "
            "transaction")
