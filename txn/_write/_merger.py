"""``Table.merge``: a merge builder in deltalake's style, committed as one ``merge`` instant
(design/merge.md).

The source is joined to the target on equal ``on`` columns (SQL equality: a null matches
nothing). Each joined pair, each source row no target row matched and each target row no
source row matched goes through its own list of clauses, in the order they were added; the
first whose predicate holds (a null predicate does not) acts on the row, the others are skipped.
Predicates and values are ``pyarrow.compute.Expression`` over ``"<alias>.<column>"`` fields
(``pc.field("source.amt")``), evaluated on the old rows. Updated and deleted target rows are
deleted by position (delete deltas); updated and inserted rows are written as one new segment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from metatxn.timeline import DuplicateKeyError, InvalidOptionError, MergeCardinalityError, SchemaMismatchError

from .._commit import MergeInto, current_schema
from .._context import TableContext
from .._files import Positions, scan_file, scan_file_batches
from .._read import snapshot_at
from .._results import CommitProperties, MergeResult
from .._rows import check_not_null, check_unique, describe, index_keys, repeated
from ._merge import arrow_input
from ._mutations import _by_file
from ._options import write_options
from ._state import State, commit_planned, find_keys
from ._values import check_values, new_values

log = logging.getLogger("metatxn")

_MATCHED, _NOT_MATCHED, _BY_SOURCE = "matched", "not matched", "not matched by source"
#: ``when_not_matched_insert_all`` and ``when_matched_update_all``'s values, worked out from
#: the schema each time the clauses are checked.
_ALL, _ALL_BUT_KEY = object(), object()


@dataclass(frozen=True)
class _Clause:
    #: ``_MATCHED``, ``_NOT_MATCHED`` or ``_BY_SOURCE``.
    when: str
    #: "update", "delete" or "insert".
    action: str
    predicate: ds.Expression | None
    #: Column -> constant or expression (update and insert); None for a delete.
    values: dict[str, Any] | None


@dataclass
class _Planned:
    write: MergeInto | None
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


def _source_table(data: Any) -> pa.Table:
    """The source as one Arrow table (it is joined whole): whatever ``Table.append`` takes."""
    data = arrow_input(data)
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all()
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return data
    try:
        return pa.table(data)
    except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise InvalidOptionError(
            "merge: the source must be a pyarrow Table, RecordBatch or RecordBatchReader, a "
            f"pandas DataFrame or an Arrow stream, got {type(data).__name__}: {exc}") from None


class TableMerger:
    """A merge into a table, built clause by clause and run by :meth:`execute`.

    Example::

        (t.merge(source, on="id")
          .when_matched_update({"amt": pc.field("target.amt") + pc.field("source.amt")})
          .when_not_matched_insert_all()
          .execute())

    Made by ``Table.merge``; each ``when_*`` method adds a clause and returns the merger.
    """

    def __init__(self, context: TableContext, source: Any, on: str | Sequence[str], *,
                 source_alias: str = "source", target_alias: str = "target",
                 commit_properties: CommitProperties | None = None) -> None:
        for alias in (source_alias, target_alias):
            if not isinstance(alias, str) or not alias or "." in alias:
                raise InvalidOptionError(f"merge: an alias must be a non-empty name without '.', "
                                         f"got {alias!r}")
        if source_alias == target_alias:
            raise InvalidOptionError(f"merge: source_alias and target_alias are both {source_alias!r}")
        self._context, self._properties = context, commit_properties
        self._source_alias, self._target_alias = source_alias, target_alias
        names = [on] if isinstance(on, str) else list(on) if isinstance(on, Sequence) else None
        if not names or not all(isinstance(n, str) for n in names) or len(set(names)) < len(names):
            raise InvalidOptionError(
                f"merge: on must be a column name or a list of distinct column names, equal on "
                f"both sides, got {on!r}")
        self._on, self._given = names, _source_table(source)
        #: The clauses as given: checked again when the table's schema changed before execute.
        self._specs: list[tuple[str, str, object, Any]] = []
        self._clauses: list[_Clause] = []
        context.refresh()  # the latest schema: the clauses are checked against it
        self._bind()

    def _bind(self) -> None:
        """Check ``on`` and every clause against the handle's current schema, the one the merge
        reads and writes with (again when a schema change completed since they were added)."""
        context, names, source = self._context, self._on, self._given
        self._write_schema = current_schema(context)
        schema = self._write_schema.schema
        for name in names:
            if schema.get_field_index(name) < 0:
                raise InvalidOptionError(f"merge: on column {name!r} is not a column of the table; "
                                         f"its columns are {schema.names}")
            index = source.schema.get_field_index(name)
            if index < 0:
                raise InvalidOptionError(f"merge: on column {name!r} is not a column of the source; "
                                         f"its columns are {source.column_names}")
            try:
                source = source.set_column(index, name, source[name].cast(schema.field(name).type))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                raise SchemaMismatchError(
                    f"merge: on column {name!r} is {source.schema.field(name).type} in the source "
                    f"and {schema.field(name).type} in the table: {exc}") from None
        self._source, self._schema = source, schema
        self._clauses = [self._clause(*spec) for spec in self._specs]

    # -- clauses -----------------------------------------------------------------------------

    def when_matched_update(self, updates: Mapping[str, Any],
                            predicate: ds.Expression | None = None) -> TableMerger:
        """Set ``updates`` (column -> constant or expression over ``target.*`` and ``source.*``)
        on matched target rows (those where ``predicate`` holds, if given)."""
        return self._add(_MATCHED, "update", predicate, updates)

    def when_matched_update_all(self, predicate: ds.Expression | None = None) -> TableMerger:
        """Set every table column the source has (but the record key) to the source's value."""
        return self._add(_MATCHED, "update", predicate, _ALL_BUT_KEY)

    def when_matched_delete(self, predicate: ds.Expression | None = None) -> TableMerger:
        """Delete matched target rows (those where ``predicate`` holds, if given)."""
        return self._add(_MATCHED, "delete", predicate, None)

    def when_not_matched_insert(self, values: Mapping[str, Any],
                                predicate: ds.Expression | None = None) -> TableMerger:
        """Insert a row per unmatched source row: ``values`` (column -> constant or expression
        over ``source.*``); columns not given are null."""
        return self._add(_NOT_MATCHED, "insert", predicate, values)

    def when_not_matched_insert_all(self, predicate: ds.Expression | None = None) -> TableMerger:
        """Insert unmatched source rows as they are (table columns the source lacks: null)."""
        return self._add(_NOT_MATCHED, "insert", predicate, _ALL)

    def when_not_matched_by_source_update(self, updates: Mapping[str, Any],
                                          predicate: ds.Expression | None = None) -> TableMerger:
        """Set ``updates`` (over ``target.*``) on target rows no source row matched."""
        return self._add(_BY_SOURCE, "update", predicate, updates)

    def when_not_matched_by_source_delete(self, predicate: ds.Expression | None = None) -> TableMerger:
        """Delete target rows no source row matched (those where ``predicate`` holds)."""
        return self._add(_BY_SOURCE, "delete", predicate, None)

    def _all(self, *, keys: bool) -> dict[str, Any]:
        fixed = () if keys else self._context.record_key_columns
        values = {name: pc.field(f"{self._source_alias}.{name}") for name in self._schema.names
                  if name in self._source.column_names and name not in fixed}
        if not values:
            raise InvalidOptionError(
                f"merge: the source has none of the table's columns {self._schema.names} "
                f"to set{'' if keys else ' (but the record key)'}; its columns are "
                f"{self._source.column_names}")
        return values

    def _scope(self, when: str) -> pa.Schema:
        """The columns a clause's predicate and values read."""
        target = [pa.field(f"{self._target_alias}.{f.name}", f.type) for f in self._schema]
        source = [pa.field(f"{self._source_alias}.{f.name}", f.type) for f in self._source.schema]
        return pa.schema({_MATCHED: target + source, _NOT_MATCHED: source, _BY_SOURCE: target}[when])

    def _add(self, when: str, action: str, predicate: object, values: Any) -> TableMerger:
        self._clauses.append(self._clause(when, action, predicate, values))
        self._specs.append((when, action, predicate, values))
        return self

    def _clause(self, when: str, action: str, predicate: object, values: Any) -> _Clause:
        """A clause checked against the bound schema (``_ALL``: the source's columns by name)."""
        if values is _ALL or values is _ALL_BUT_KEY:
            values = self._all(keys=values is _ALL)
        scope = self._scope(when)
        if predicate is not None:
            if not isinstance(predicate, ds.Expression):
                raise InvalidOptionError(
                    f"merge: a predicate must be a pyarrow.compute.Expression, got "
                    f"{type(predicate).__name__}")
            found = _predicate(predicate, scope.empty_table(), when)
            if not pa.types.is_boolean(found.type) and not pa.types.is_null(found.type):
                raise InvalidOptionError(f"merge: the predicate {predicate} of a WHEN {when.upper()} "
                                         f"clause is {found.type}, not a boolean")
        if action == "insert":
            keys: list[str] = []
        else:
            keys = self._context.record_key_columns
        if values is not None:
            values = check_values(self._schema, keys, values, scope, operation=f"merge (when {when})")
        return _Clause(when, action, predicate, values)

    # -- execute -----------------------------------------------------------------------------

    def execute(self) -> MergeResult:
        """Run the merge: one ``merge`` commit, or none when no clause applied to any row.

        Raises:
            MergeCardinalityError: two source rows match one target row and a WHEN MATCHED clause
                could change it; nothing is committed.
            DuplicateKeyError: inserted rows of a keyed table repeat a key, take a live one or
                one of a row the merge updates.
            CommitConflictError: a concurrent commit changed what it read (a merge that scanned
                the table: any that added rows and is not a blind append).
            InvalidOptionError, SchemaMismatchError: a clause no longer fits the table's schema,
                changed since the clause was added (checked again before anything begins).
        """
        if not self._clauses:
            raise InvalidOptionError("merge: add at least one when_... clause before execute()")
        options = write_options(self._context, self._properties)
        if options is None:
            return MergeResult(None, self._source.num_rows, 0, 0, 0)
        planned: list[_Planned] = []

        def plan(state: State) -> MergeInto | None:
            planned.append(self._plan(state))
            return planned[-1].write

        commit = commit_planned(self._context, plan, options.extra, attempts=1,
                                progress=options.progress)
        last = planned[-1] if commit is not None else _Planned(None)
        return MergeResult(commit, self._source.num_rows, last.inserted, last.updated, last.deleted)

    def _plan(self, state: State) -> _Planned:
        context = self._context
        if context.schema_id != self._write_schema.schema_id:
            # The schema changed before the state was read (reading it adopted the new one):
            # planned on the new schema; a clause that no longer applies is refused here.
            log.info("merge: the table's schema changed since the merge was built: checked again")
            self._bind()
        schema, on = self._schema, self._on
        keys = context.record_key_columns
        by_index = bool(keys) and set(on) == set(keys) and not self._has(_BY_SOURCE)
        read_keys = None
        if by_index:
            read_keys = index_keys(_non_null(self._source, on), keys)
            target, files, positions = _read_keys(context, state, read_keys, schema)
        else:
            target, files, positions = _scan(context, state, schema,
                                             None if self._has(_BY_SOURCE) else self._ranges())
        t_ids, s_ids = _join(target, self._source, on)
        self._refuse_duplicates(target, t_ids)
        # Every source row some target row matched, before the repeats are dropped below.
        unmatched_s = np.setdiff1d(np.arange(self._source.num_rows), s_ids)
        # What remains of a row matched twice is an unconditional delete: it acts once.
        t_ids, first = np.unique(t_ids, return_index=True)
        s_ids = s_ids[first]
        t_alias, s_alias = self._target_alias, self._source_alias
        matched_scope = _prefixed(target.take(t_ids), t_alias, self._source.take(s_ids), s_alias)
        unmatched_t = np.setdiff1d(np.arange(target.num_rows), t_ids)
        new: list[pa.Table] = []
        exact = set(on) == set(keys)  # every insert so far is of an unmatched source key
        deleted_rows: list[np.ndarray] = []  # target row numbers deleted, not rewritten
        updated_rows: list[np.ndarray] = []
        inserted = 0
        for when, rows, scope in (
                (_MATCHED, t_ids, matched_scope),
                (_BY_SOURCE, unmatched_t, _prefixed(target.take(unmatched_t), t_alias)),
                (_NOT_MATCHED, unmatched_s, _prefixed(self._source.take(unmatched_s), s_alias))):
            for clause, hit in self._choose(when, scope):
                if not hit.any():
                    continue
                chosen = scope.filter(pa.array(hit))
                if clause.action == "delete":
                    deleted_rows.append(rows[hit])
                elif clause.action == "update":
                    updated_rows.append(rows[hit])
                    changed = target.take(rows[hit])
                    assert clause.values is not None
                    for name, array in new_values(schema, clause.values, chosen,
                                                  operation="merge").items():
                        changed = changed.set_column(schema.get_field_index(name), schema.field(name),
                                                     array)
                    new.append(changed)
                else:
                    assert clause.values is not None
                    new.append(_inserted(schema, clause.values, chosen))
                    inserted += int(hit.sum())
                    exact = exact and self._inserts_key(clause, keys)
        gone = np.concatenate(deleted_rows) if deleted_rows else np.empty(0, np.int64)
        updated = np.concatenate(updated_rows) if updated_rows else np.empty(0, np.int64)
        if not gone.size and not new:
            log.info("merge: no clause applied to any row: nothing to commit")
            return _Planned(None)
        written = pa.concat_tables(new) if new else None
        removed = None
        if keys:
            gone_keys = index_keys(target.take(gone), keys)
            if written is not None:
                check_not_null(written, keys)
                _check_written(written, inserted, keys)
            if written is not None and inserted and not exact:
                # An inserted key is new unless it is an unmatched source key of a merge on the
                # record key; one this merge deletes is free again (not one it updates: that
                # row stays, and _check_written refused the pair).
                fresh = index_keys(written.slice(written.num_rows - inserted), keys)
                taken = find_keys(context, state, _without(fresh, gone_keys))
                if taken.num_rows:
                    raise DuplicateKeyError(
                        f"merge: inserted row(s) take record key(s) {describe(taken, keys)} live in "
                        "the table; nothing was written\nHelp: insert the source's own key, or "
                        "merge on the record key")
                if not by_index:
                    read_keys = fresh
            if gone.size:
                # Deleted and not written again: a key deleted and inserted keeps an entry.
                written_keys = index_keys(written, keys) if written is not None else None
                removed = gone_keys if written_keys is None else _without(gone_keys, written_keys)
        both = np.concatenate([gone, updated])
        deleted = _by_file(pa.table({"file": pa.array(files, pa.string()).take(both),
                                     "position": pa.array(positions).take(both)}))
        write = MergeInto(rows=written.to_batches() if written is not None else None,
                          read_at=state.read_at, current=state.deltas, deleted=deleted,
                          removed_keys=removed, read_keys=read_keys,
                          rows_bytes=written.nbytes if written is not None else 0,
                          schema=self._write_schema, scanned=not by_index)
        return _Planned(write, inserted=inserted, updated=len(updated), deleted=len(gone))

    def _inserts_key(self, clause: _Clause, keys: Sequence[str]) -> bool:
        """Whether ``clause`` sets each record-key column to the source's own value of it."""
        assert clause.values is not None
        return all(isinstance(clause.values.get(k), ds.Expression)
                   and clause.values[k].equals(pc.field(f"{self._source_alias}.{k}")) for k in keys)

    def _has(self, when: str) -> bool:
        return any(c.when == when for c in self._clauses)

    def _choose(self, when: str, scope: pa.Table) -> list[tuple[_Clause, np.ndarray]]:
        """Each clause of ``when`` and the rows of ``scope`` it acts on: the first clause whose
        predicate holds (null: does not) takes a row."""
        remaining = np.ones(scope.num_rows, dtype=bool)
        chosen = []
        for clause in (c for c in self._clauses if c.when == when):
            hit = remaining.copy()
            if clause.predicate is not None:
                found = _predicate(clause.predicate, scope, when)
                if pa.types.is_null(found.type):  # a null literal: never true (SQL)
                    hit[:] = False
                else:
                    hit &= np.asarray(pc.fill_null(found, False).to_numpy(zero_copy_only=False), dtype=bool)
            remaining &= ~hit
            chosen.append((clause, hit))
        return chosen

    def _refuse_duplicates(self, target: pa.Table, t_ids: np.ndarray) -> None:
        """Delta's rule: a target row two source rows match is refused when a WHEN MATCHED
        clause could change it, except by one unconditional delete (the outcome is the same
        whichever source row acts)."""
        matched = [c for c in self._clauses if c.when == _MATCHED]
        if not matched or (len(matched) == 1 and matched[0].action == "delete"
                           and matched[0].predicate is None):
            return
        found, counts = np.unique(t_ids, return_counts=True)
        twice = found[counts > 1]
        if twice.size:
            shown = target.select(self._on).take(twice[:3]).to_pylist()
            raise MergeCardinalityError(
                f"merge: {twice.size} target row(s) are matched by more than one source row (on "
                f"{self._on}: {shown}{' and more' if twice.size > 3 else ''}); nothing was "
                "committed\nHelp: de-duplicate the source on the on columns first")

    def _ranges(self) -> ds.Expression | None:
        """The source's range of each orderable ``on`` column: files outside it are not read."""
        where = None
        for name in self._on:
            column = self._source[name]
            kind = column.type
            if not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_date(kind)
                    or pa.types.is_timestamp(kind) or pa.types.is_decimal(kind)):
                continue
            bounds = pc.min_max(column)
            low, high = bounds["min"], bounds["max"]
            if not low.is_valid:
                return pc.scalar(False)  # only null keys: nothing matches
            term = (pc.field(name) >= low) & (pc.field(name) <= high)
            where = term if where is None else where & term
        return where


def _without(keys: pa.Table, others: pa.Table) -> pa.Table:
    """The rows of ``keys`` (index key columns) not in ``others``."""
    if not keys.num_rows or not others.num_rows:
        return keys
    return keys.join(others.cast(keys.schema), keys=keys.column_names, join_type="left anti")


def _check_written(written: pa.Table, inserted: int, keys: Sequence[str]) -> None:
    """Refuse a key repeated among the written rows, saying which: two inserted rows, or an
    inserted row and an updated one (whose key stays)."""
    fresh = written.slice(written.num_rows - inserted)
    check_unique(fresh, keys)
    twice = repeated(index_keys(written, keys))
    if twice.num_rows:
        raise DuplicateKeyError(
            f"merge: inserted row(s) take record key(s) {describe(twice, keys)} of row(s) this "
            "merge updates; nothing was written\nHelp: delete the matched row instead, or insert "
            "another key")


def _predicate(predicate: ds.Expression, scope: pa.Table, when: str) -> pa.Array:
    try:
        found = ds.dataset(scope).to_table(columns={"p": predicate}).column(0)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise InvalidOptionError(
            f"merge: the predicate {predicate} of a WHEN {when.upper()} clause does not apply to "
            f"the columns {scope.column_names}: {first}") from None
    return found.combine_chunks() if found.num_chunks != 1 else found.chunk(0)


def _inserted(schema: pa.Schema, values: Mapping[str, Any], scope: pa.Table) -> pa.Table:
    given = new_values(schema, values, scope, operation="merge")
    arrays = []
    for field in schema:
        if field.name in given:
            arrays.append(given[field.name])
        elif not field.nullable:
            raise SchemaMismatchError(f"merge: an inserted row has no value for column {field.name!r}, "
                                      "which is not nullable")
        else:
            arrays.append(pa.nulls(scope.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _prefixed(first: pa.Table, alias: str, second: pa.Table | None = None,
              second_alias: str = "") -> pa.Table:
    columns = {f"{alias}.{n}": first[n] for n in first.column_names}
    if second is not None:
        columns.update({f"{second_alias}.{n}": second[n] for n in second.column_names})
    return pa.table(columns) if columns else pa.table({})


def _non_null(table: pa.Table, on: Sequence[str]) -> pa.Table:
    mask = None
    for name in on:
        valid = pc.is_valid(table[name])
        mask = valid if mask is None else pc.and_(mask, valid)
    return table.filter(mask)


def _join(target: pa.Table, source: pa.Table, on: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The (target row, source row) pairs whose ``on`` values are equal, none null."""
    names = [f"k{i}" for i in range(len(on))]
    left = pa.table([*(target[n] for n in on), pa.array(np.arange(target.num_rows))],
                    names=[*names, "__t"])
    right = pa.table([*(source[n] for n in on), pa.array(np.arange(source.num_rows))],
                     names=[*names, "__s"])
    left, right = _non_null(left, names), _non_null(right, names)
    if not left.num_rows or not right.num_rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    try:
        pairs = left.join(right, keys=names, join_type="inner")
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        types = [str(target.schema.field(n).type) for n in on]
        raise InvalidOptionError(f"merge: cannot match rows on {list(on)} (types {types}): "
                                 f"{exc}") from None
    pairs = pairs.sort_by([("__t", "ascending"), ("__s", "ascending")])
    return (pairs["__t"].to_numpy().astype(np.int64), pairs["__s"].to_numpy().astype(np.int64))


def _formats(context: TableContext, state: State, where: ds.Expression | None) -> dict[str, str]:
    snapshot = snapshot_at(context, state.view, None, state.read_at)
    prefix = context.store.location("")
    return {f.path.removeprefix(prefix): f.format for f in snapshot.files(where)}


def _scan(context: TableContext, state: State, schema: pa.Schema,
          where: ds.Expression | None) -> tuple[pa.Table, list[str], np.ndarray]:
    """Every live row of the files ``where`` may match (None: of every file), with its file
    and position; the rows themselves are not filtered (the join decides)."""
    parts: list[pa.Table] = []
    files: list[str] = []
    found_all: list[Positions] = []
    if state.read_at is not None:
        for path, file_format in _formats(context, state, where).items():
            rows, found = scan_file(context.store, path, schema, filter=None, columns=schema.names,
                                    deleted=state.deltas.positions(path), file_format=file_format,
                                    written=state.written(context, path))
            if len(found):
                parts.append(rows)
                files.extend([path] * len(found))
                found_all.append(found)
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    return table, files, (np.concatenate(found_all) if found_all else np.empty(0, np.int64))


def _read_keys(context: TableContext, state: State, keys: pa.Table,
               schema: pa.Schema) -> tuple[pa.Table, list[str], np.ndarray]:
    """The live rows of ``keys`` found through the record index, with file and position."""
    entries = find_keys(context, state, keys)
    if not entries.num_rows:
        return schema.empty_table(), [], np.empty(0, np.int64)
    formats = _formats(context, state, None)
    parts: list[pa.Table] = []
    files: list[str] = []
    found_all: list[Positions] = []
    for path, wanted in _by_file(entries).items():
        wanted = np.unique(wanted)  # a key the source repeats is found once per lookup
        for batch, found in scan_file_batches(
                context.store, path, schema, filter=None, columns=schema.names,
                deleted=state.deltas.positions(path), file_format=formats.get(path, "parquet"),
                written=state.written(context, path), only=wanted):
            if len(found):
                parts.append(pa.Table.from_batches([batch], schema=schema))
                files.extend([path] * len(found))
                found_all.append(found)
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    return table, files, (np.concatenate(found_all) if found_all else np.empty(0, np.int64))
