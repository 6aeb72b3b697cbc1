"""Working out what a write changes: which keys exist, which rows match, what the new rows are.

Each operation reads the latest snapshot once (its completion time becomes the write's
``read_at``) and returns one of ``_commit``'s write classes (``Append``, ``Overwrite``,
``Upsert``, ``Delete``, ``Update``), which the commit driver writes and commits. Existing rows
are found through the record index (keyed tables) or by scanning the files whose column ranges
can match a filter; either way only row positions are recorded, so no existing data file is
rewritten.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from metatxn.indexes import key_names
from metatxn.timeline import DuplicateKeyError, InvalidOptionError, SchemaMismatchError

from .._commit import (
    Append,
    Delete,
    Overwrite,
    Progress,
    Update,
    Upsert,
    WriteSchema,
    current_schema,
    layout_names,
)
from .._context import TableContext
from .._files import LiveDeltas, Positions, scan_file
from .._read import snapshot_at
from .._results import Commit
from .._rows import (
    batches,
    check_not_null,
    check_unique,
    describe,
    first_and_rest,
    index_keys,
    keys_argument,
    last_wins,
    user_keys,
)
from ._merge import arrow_input, is_pandas, merging, write_schema
from ._scope import check_in_partition, overwrite_scope
from ._state import State, commit_once, commit_planned, find_keys, latest
from ._values import check_values, new_values

log = logging.getLogger("metatxn")

def _by_file(entries: pa.Table) -> dict[str, Positions]:
    grouped: dict[str, list[int]] = {}
    for file, position in zip(entries["file"].to_pylist(), entries["position"].to_pylist(), strict=True):
        grouped.setdefault(file, []).append(position)
    return {file: np.array(sorted(p), dtype=np.int64) for file, p in grouped.items()}


def refuse_existing_keys(existing: pa.Table, columns: list[str]) -> None:
    """The keyed append's check, for every path that appends (``Table.append``, the two-phase
    write's workers, ``txn.spark.write``): none of its keys may be live in the snapshot it read.

    ``existing``: the index keys (``key_0``...) of the live rows found for the append's keys.
    """
    if existing.num_rows:
        count = f"{existing.num_rows} " if existing.num_rows > 1 else ""
        raise DuplicateKeyError(
            f"append: {count}record key(s) {describe(existing, columns)} already exist in the table; "
            "nothing was written\nHelp: use upsert to replace existing keys")


def _require_key(context: TableContext, operation: str) -> list[str]:
    columns = context.record_key_columns
    if not columns:
        raise InvalidOptionError(
            f"{operation} needs a table with a record_key; {context.uri} has none\n"
            "Help: create the table with record_key=... (or use delete(where=...) / update)")
    return columns


def _materialize(context: TableContext, data: Any, schema: WriteSchema | None = None, *,
                 merge: bool = False) -> pa.Table:
    target = (schema or current_schema(context)).schema
    return pa.Table.from_batches(list(batches(data, target, fill_missing=merge)), schema=target)


def _planned(context: TableContext, data: Any, merge: bool) -> tuple[Any, WriteSchema]:
    """The input as the write conforms it, and the schema it conforms to (see ``_merge``)."""
    if not merge:
        return data, write_schema(context)
    declared = not is_pandas(data)
    data = arrow_input(data)
    return data, write_schema(context, data, declared=declared)


_T = TypeVar("_T")


def _keys(context: TableContext, rows: pa.Table) -> list[str]:
    """The record key columns as ``rows`` (conformed to some version) name them: a rename
    since, by this handle or another, is followed by column id either way."""
    names = layout_names(context, rows.schema, context.record_key_columns)
    return names if len(names) == len(context.record_key_columns) else context.record_key_columns


def _fresh(context: TableContext, data: Any, conform: Callable[[], _T]) -> _T:
    """``conform()`` (the input checked against the handle's schema), or, when the input does
    not fit that schema and the table's schema changed since this handle last read it (a
    rename or an added column made elsewhere, or by a commit of this handle whose outcome it
    never learned), ``conform()`` again against the latest. A stream is not read twice."""
    try:
        return conform()
    except SchemaMismatchError:
        known = context.version.version
        if isinstance(data, pa.RecordBatchReader) or context.refresh().version == known:
            raise
        return conform()


class _Conformed:
    """A keyed write's rows, conformed to the schema it plans with: conformed again to the
    latest version when a schema change that committed meanwhile made a merge plan again."""

    def __init__(self, context: TableContext, data: Any, merge: bool,
                 prepare: Callable[[pa.Table], pa.Table]) -> None:
        self._context, self._prepare, self._declared = context, prepare, not is_pandas(data)

        def conform() -> tuple[Any, WriteSchema, pa.Table]:
            source, schema = _planned(context, data, merge)
            if merge and isinstance(source, pa.RecordBatchReader):
                source = source.read_all()  # a reader is read once
            return source, schema, prepare(_materialize(context, source, schema, merge=merge))

        self._source, self.schema, self.rows = _fresh(context, data, conform)
        self._merge = merge

    def current(self) -> tuple[pa.Table, WriteSchema]:
        """The rows and their schema, for a plan on the latest state."""
        if self.schema.changes and self._context.version.version != self.schema.base:
            self.schema = write_schema(self._context, self._source, declared=self._declared)
            self.rows = self._prepare(_materialize(self._context, self._source, self.schema, merge=True))
        return self.rows, self.schema


# -- loads -----------------------------------------------------------------------------------------

def append(context: TableContext, data: Any, *, extra: dict[str, str] | None = None,
           progress: Progress | None = None, schema_mode: object = None) -> Commit | None:
    merge = merging(schema_mode, "append")
    columns = context.record_key_columns
    if not columns:  # reads nothing and conflicts with nothing
        def conform() -> tuple[Any, WriteSchema, Any]:
            source, schema = _planned(context, data, merge)
            # The first batch is read (and checked) before the instant begins: no rows, no
            # commit.
            return source, schema, first_and_rest(batches(source, schema.schema,
                                                          fill_missing=merge))

        source, schema, first = _fresh(context, data, conform)
        if first is None:
            log.info("append of no rows: nothing to commit")
            return None
        write = Append(rows=first, current=LiveDeltas(context.store, {}), progress=progress,
                       rows_bytes=source.nbytes if isinstance(source, pa.Table) else None,
                       schema=schema)
        return commit_once(context, write, extra)

    def prepare(rows: pa.Table) -> pa.Table:
        check_not_null(rows, _keys(context, rows))
        check_unique(rows, _keys(context, rows))
        return rows

    conformed = _Conformed(context, data, merge, prepare)
    if conformed.rows.num_rows == 0:
        log.info("append of no rows: nothing to commit")
        return None

    def plan(state: State) -> Append:
        rows, schema = conformed.current()
        keys = _keys(context, rows)
        refuse_existing_keys(find_keys(context, state, index_keys(rows, keys)), keys)
        return Append(rows=rows.to_batches(), read_at=state.read_at, current=state.deltas,
                      rows_bytes=rows.nbytes, schema=schema)

    return commit_planned(context, plan, extra, progress=progress)


def overwrite(context: TableContext, data: Any, *, extra: dict[str, str] | None = None,
              progress: Progress | None = None, partitions: object = None,
              schema_mode: object = None) -> Commit | None:
    merge = merging(schema_mode, "overwrite")
    scope, values = overwrite_scope(context, partitions)
    columns = context.record_key_columns

    def conform() -> tuple[WriteSchema, Any]:
        source, schema = _planned(context, data, merge)
        if columns or values:
            return schema, _materialize(context, source, schema, merge=merge)
        # The first batch is read (and checked) before the instant begins.
        return schema, first_and_rest(batches(source, schema.schema, fill_missing=merge))

    schema, conformed = _fresh(context, data, conform)
    rows: Any
    if columns:
        check_not_null(conformed, _keys(context, conformed))
        check_unique(conformed, _keys(context, conformed))
        rows = conformed.to_batches()
    elif values:  # a named partition: every row is checked to belong to it before anything begins
        check_in_partition(conformed, values, schema.schema)
        rows = conformed.to_batches()
    else:
        first = conformed
        if first is None and scope is not None:
            log.info("overwrite of the partitions of no rows: nothing to commit")
            return None
        rows = first or iter(())  # no rows: empties the table
    # An overwrite conflicts with every concurrent data commit (of a partition it replaces, when
    # partition-scoped); it reads its state under the lock.
    write = Overwrite(rows=rows, progress=progress, partitions=scope, schema=schema)
    return commit_once(context, write, extra)


# -- keyed writes ----------------------------------------------------------------------------------

def upsert(context: TableContext, data: Any, *, extra: dict[str, str] | None = None,
           progress: Progress | None = None, schema_mode: object = None) -> Commit | None:
    merge = merging(schema_mode, "upsert")
    _require_key(context, "upsert")

    def prepare(rows: pa.Table) -> pa.Table:
        check_not_null(rows, _keys(context, rows))
        return last_wins(rows, _keys(context, rows))  # the last row of a key in the batch wins

    conformed = _Conformed(context, data, merge, prepare)
    if conformed.rows.num_rows == 0:
        log.info("upsert of no rows: nothing to commit")
        return None
    def plan(state: State) -> Upsert:
        rows, schema = conformed.current()
        existing = find_keys(context, state, index_keys(rows, _keys(context, rows)))
        return Upsert(rows=rows.to_batches(), read_at=state.read_at, current=state.deltas,
                      deleted=_by_file(existing), rows_bytes=rows.nbytes, schema=schema)

    return commit_planned(context, plan, extra, progress=progress)


def lookup(context: TableContext, keys: Any) -> pa.Table:
    columns = _require_key(context, "lookup")
    wanted = keys_argument(keys, context.schema, columns)
    found = latest(context, lambda state: find_keys(context, state, wanted))
    # Named as the latest version names the key (the index holds values, not names): reading
    # the latest state may have taken a rename another handle committed.
    located = user_keys(found, columns).rename_columns(context.record_key_columns)
    for name in ("segment", "file", "position"):
        located = located.append_column(name, found[name])
    return located


# -- deletes and updates ---------------------------------------------------------------------------

def _check_where(where: object, schema: pa.Schema) -> ds.Expression | None:
    if where is None:
        return None
    if not isinstance(where, ds.Expression):
        raise InvalidOptionError(
            "where must be a pyarrow.compute.Expression (e.g. pc.field('x') > 3), "
            f"got {type(where).__name__}")
    try:  # bind it to the schema now: an empty table must not hide a bad expression
        schema.empty_table().filter(where)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidOptionError(f"where {where} does not apply to this table: {exc}") from None
    return where


def _matching_rows(context: TableContext, state: State, where: ds.Expression | None,
                   columns: list[str]) -> tuple[dict[str, Positions], pa.Table]:
    """Live rows matching ``where``: positions by file, and ``columns`` of those rows."""
    snapshot = snapshot_at(context, state.view, None, state.read_at)
    candidates = snapshot.files(where)
    prefix = context.store.location("")
    positions: dict[str, Positions] = {}
    parts: list[pa.Table] = []
    for data_file in candidates:
        path = data_file.path.removeprefix(prefix)
        try:
            rows, found = scan_file(context.store, path, context.schema, filter=where, columns=columns,
                                    deleted=state.deltas.positions(path), file_format=data_file.format,
                                    written=state.written(context, path))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidOptionError(f"where {where} does not apply to this table: {exc}") from None
        if len(found):
            positions[path] = found
            parts.append(rows)
    schema = pa.schema([context.schema.field(name) for name in columns])
    return positions, (pa.concat_tables(parts) if parts else schema.empty_table())


def _fresh_where(context: TableContext, where: object) -> ds.Expression | None:
    """``where`` checked against the handle's schema, or, when it does not apply to that one
    and another handle changed the schema since this one last read it, against the latest (a
    filter on a column renamed or added elsewhere)."""
    try:
        return _check_where(where, context.schema)
    except InvalidOptionError:
        known = context.version.version
        if context.refresh().version == known:
            raise
        return _check_where(where, context.schema)


def delete(context: TableContext, where: Any = None, *, keys: Any = None,
           extra: dict[str, str] | None = None, progress: Progress | None = None) -> Commit | None:
    expression = _fresh_where(context, where)
    if (expression is None) == (keys is None):
        raise InvalidOptionError(
            "delete needs exactly one of where= (a pyarrow.compute.Expression) or keys= "
            f"(record key values); got {'both' if keys is not None else 'neither'}\n"
            "Help: to delete every row, use delete(where=pc.scalar(True)) or overwrite")
    columns = context.record_key_columns
    if keys is not None:
        _require_key(context, "delete(keys=...)")
    wanted = keys_argument(keys, context.schema, columns) if keys is not None else None

    def plan(state: State) -> Delete | None:
        if wanted is not None:
            found = find_keys(context, state, wanted)
            deleted = _by_file(found)
            removed = found.select(key_names(len(columns))) if found.num_rows else None
        else:
            deleted, matched = _matching_rows(context, state, expression, columns)
            removed = index_keys(matched, columns) if columns and matched.num_rows else None
        if not deleted:
            log.info("delete matched no rows: nothing to commit")
            return None
        # Every key asked for, found or not: a key inserted by a commit that completes before
        # this one would otherwise outlive a delete acknowledged after it.
        return Delete(read_at=state.read_at, current=state.deltas, deleted=deleted,
                      removed_keys=removed, read_keys=wanted, rows_bytes=0)

    return commit_planned(context, plan, extra, progress=progress)


def update(context: TableContext, where: Any, values: Any, *,
           extra: dict[str, str] | None = None, progress: Progress | None = None) -> Commit | None:
    expression = _fresh_where(context, where)
    # Checked before reading anything; expressions read the table's own columns.
    checked = {context.schema_id: check_values(context.schema, context.record_key_columns, values,
                                               context.schema)}

    def plan(state: State) -> Update | None:
        # The schema of the state read (reading it adopted the latest): the rows are read and
        # written with it, whatever version a change completing meanwhile makes current.
        schema = current_schema(context)
        mine = checked.get(schema.schema_id)
        if mine is None:  # changed since the values were checked: checked against the new one
            mine = checked[schema.schema_id] = check_values(
                schema.schema, context.record_key_columns, values, schema.schema)
        deleted, matched = _matching_rows(context, state, expression, list(schema.schema.names))
        if not deleted:
            log.info("update matched no rows: nothing to commit")
            return None
        # Every value from the old rows, before any column is replaced (SQL's UPDATE).
        for name, array in new_values(schema.schema, mine, matched).items():
            matched = matched.set_column(matched.schema.get_field_index(name),
                                         schema.schema.field(name), array)
        return Update(rows=matched.to_batches(), read_at=state.read_at, current=state.deltas,
                      deleted=deleted, schema=schema)

    # Read once, like the other writes (re-read only after a compaction overtook it).
    return commit_planned(context, plan, extra, attempts=1, progress=progress)
