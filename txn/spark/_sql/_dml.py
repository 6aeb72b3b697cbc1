"""UPDATE and DELETE of metatxn tables: Spark evaluates the statement, metatxn commits it once.

``UPDATE t SET (a, b) = (x, y) WHERE p`` (CarbonData's form) and ``UPDATE t SET a = x, b = y
WHERE p`` (Spark's) and ``DELETE FROM t WHERE p`` are read by sqlglot; the SET values and the
predicate go to Spark as Spark SQL (any expression Spark knows, subqueries over other tables
included). Planned on the latest state of the table:

1. the live rows of that snapshot, each with its data file and position
   (:func:`._positions.located_rows`), become a temporary view named like the table (or its
   alias); files whose column ranges rule the predicate out are not read;
2. Spark runs ``SELECT <the new row>, file, position FROM view WHERE p``; for an UPDATE the
   result is pinned (``localCheckpoint``), so the rows written are the rows counted, even for a
   non-deterministic SET value;
3. one commit: the matched positions become delete deltas (on a keyed table a DELETE also
   retires their keys from the record index), and an UPDATE's new rows a new segment written by
   the executors (the write job of ``txn.spark.write``), CarbonData's UPDATE since 2.1.

That is the commit ``Table.update`` and ``Table.delete`` make (their conflict checks included:
a concurrent commit that changed the same files fails this one with ``CommitConflictError``; a
compaction that completed meanwhile makes it plan again). There is no public API that deletes
rows by (file, position), which is why this module builds that commit itself from the same
internal parts. Record key columns cannot be updated (delete and insert the row instead).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from sqlglot import exp

from timeline import InvalidOptionError

from ..._commit import Change, Pending, Written
from ..._context import TableContext, open_context
from ..._files import Positions
from ..._rows import index_keys
from ..._write import State, commit_planned
from .._filters import to_expression
from .._types import spark_schema
from .._write import run_job
from ._catalog import Catalog, TableName
from ._frames import count_frame
from ._parse import Cursor, Token, refused
from ._positions import FILE, POSITION, located_rows
from ._select import fresh_views
from ._tree import name_of, parse, problem, spark_text

UPDATE_FORM = ("UPDATE [db.]table [[AS] alias] SET (column, ...) = (expression, ...) [WHERE predicate]  "
               "or  UPDATE [db.]table [[AS] alias] SET column = expression, ... [WHERE predicate]")
DELETE_FORM = "DELETE FROM [db.]table [[AS] alias] [WHERE predicate]"


@dataclass(frozen=True)
class _Target:
    """The table a DML statement changes, as the statement names it."""

    name: TableName
    alias: str
    predicate: str | None


def _target(catalog: Catalog, statement: str, tokens: list[Token], words: int, form: str) -> TableName | None:
    """The table after the statement's first ``words`` words, if it is a metatxn table."""
    cursor = Cursor(statement, form, tokens)
    cursor.at = words
    try:
        name = cursor.table_name()
    except InvalidOptionError:
        return None  # not a statement about a table metatxn can name: Spark's to judge
    return name if catalog.exists(name) else None


def _parsed(statement: str, kind: type[exp.Expression], form: str) -> exp.Expression:
    tree = parse(statement)
    if not isinstance(tree, kind):
        raise refused(statement, f"cannot read the statement: {problem(statement)}", form)
    return tree


def _described(tree: exp.Expression, name: TableName, statement: str, form: str) -> _Target:
    table = tree.this
    if not isinstance(table, exp.Table) or name_of(table) != name:
        raise refused(statement, "expected one table to change", form)
    for clause in ("from", "from_", "using", "joins", "returning", "order", "limit"):
        if tree.args.get(clause):
            raise refused(statement, f"{clause.rstrip('_').upper()} is not supported", form)
    where = tree.args.get("where")
    return _Target(name, table.alias or name.table, spark_text(where.this) if where is not None else None)


def _assignments(tree: exp.Update, statement: str, columns: dict[str, str]) -> dict[str, str]:
    """Table column (its own spelling) -> the SET value as Spark SQL."""
    assigned: dict[str, str] = {}

    def assign(column: exp.Expression, value: exp.Expression) -> None:
        if isinstance(column, exp.Paren):
            column = column.this
        if not isinstance(column, exp.Column):
            raise refused(statement, f"{spark_text(column)!r} is not a column to set", UPDATE_FORM)
        name = columns.get(column.name.lower())
        if name is None:
            raise refused(statement, f"unknown column {column.name!r}; the table's columns are "
                                     f"{list(columns.values())}", UPDATE_FORM)
        if name in assigned:
            raise refused(statement, f"column {name!r} is set twice", UPDATE_FORM)
        assigned[name] = spark_text(value)

    for assignment in tree.expressions:
        if not isinstance(assignment, exp.EQ):
            raise refused(statement, f"{spark_text(assignment)!r} is not an assignment", UPDATE_FORM)
        left, right = assignment.this, assignment.expression
        if isinstance(left, exp.Tuple):
            if isinstance(right, exp.Subquery):
                raise refused(statement, "SET (a, b) = (SELECT ...) is not supported; set each "
                                         "column to a scalar subquery instead", UPDATE_FORM)
            values = right.expressions if isinstance(right, exp.Tuple) else [right]
            if len(values) != len(left.expressions):
                raise refused(statement, f"{len(left.expressions)} column(s) but {len(values)} "
                                         "value(s)", UPDATE_FORM)
            for column, value in zip(left.expressions, values, strict=True):
                assign(column, value)
        else:
            assign(left, right)
    if not assigned:
        raise refused(statement, "SET names no column", UPDATE_FORM)
    return assigned


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _matching(spark: Any, catalog: Catalog, context: TableContext, state: State, target: _Target,
              projection: list[str], statement: str, form: str) -> Any:
    """Spark's rows of ``state`` that match the target's predicate, as ``projection``."""
    from pyspark.errors import AnalysisException

    pruning = to_expression(target.predicate, context.schema) if target.predicate else None
    view = f"metatxn_target_{target.name.table}_{secrets.token_hex(4)}"
    located_rows(spark, context, state, pruning).createOrReplaceTempView(view)
    query = f"SELECT {', '.join(projection)} FROM {_quoted(view)} AS {_quoted(target.alias)}"
    if target.predicate:
        query += f" WHERE {target.predicate}"
    try:
        with fresh_views(spark, catalog, query) as rewritten:
            return spark.sql(rewritten)
    except AnalysisException as exc:
        raise refused(statement, f"Spark cannot evaluate it: {str(exc).strip().splitlines()[0]}",
                      form) from None
    finally:
        spark.catalog.dropTempView(view)


def _by_file(found: pa.Table) -> dict[str, Positions]:
    grouped: dict[str, list[int]] = {}
    for file, position in zip(found[FILE].to_pylist(), found[POSITION].to_pylist(), strict=True):
        grouped.setdefault(file, []).append(position)
    return {file: np.array(sorted(p), dtype=np.int64) for file, p in grouped.items()}


def update(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """UPDATE of a metatxn table; None when the table is Spark's."""
    name = _target(catalog, statement, tokens, 1, UPDATE_FORM)
    if name is None:
        return None
    tree = _parsed(statement, exp.Update, UPDATE_FORM)
    assert isinstance(tree, exp.Update)
    target = _described(tree, name, statement, UPDATE_FORM)
    context = open_context(catalog.location(name))
    columns = {c.lower(): c for c in context.schema.names}
    assigned = _assignments(tree, statement, columns)
    keys = [c for c in assigned if c in context.record_key_columns]
    if keys:
        raise refused(statement, f"record key column(s) {keys} cannot be updated; delete the rows and "
                                 "insert them under their new key", UPDATE_FORM)
    types = {f.name: f.dataType.simpleString() for f in spark_schema(context.schema).fields}
    alias = _quoted(target.alias)
    projection = [f"CAST(({assigned[c]}) AS {types[c]}) AS {_quoted(c)}" if c in assigned
                  else f"{alias}.{_quoted(c)}" for c in context.schema.names]
    projection += [f"{alias}.{_quoted(FILE)}", f"{alias}.{_quoted(POSITION)}"]
    new_rows: list[Any] = []
    updated: list[int] = [0]

    def plan(state: State) -> Change | None:
        matched = _matching(spark, catalog, context, state, target, projection, statement, UPDATE_FORM)
        pinned = matched.localCheckpoint(eager=True)
        found = pinned.select(FILE, POSITION).toArrow()
        updated[0] = found.num_rows
        if not found.num_rows:
            return None
        new_rows[:] = [pinned.drop(FILE, POSITION)]
        return Change("update", None, state.read_at, state.deltas, deleted=_by_file(found))

    def write(change: Change) -> Any:
        def phase(pending: Pending) -> Written:
            return run_job(context, new_rows[0], pending, change.deleted, change.current)
        return phase

    commit_planned(context, plan, None, attempts=1, write=write)
    return count_frame(spark, "Updated Row Count", updated[0])


def delete(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """DELETE FROM a metatxn table; None when the table is Spark's."""
    name = _target(catalog, statement, tokens, 2, DELETE_FORM)
    if name is None:
        return None
    tree = _parsed(statement, exp.Delete, DELETE_FORM)
    target = _described(tree, name, statement, DELETE_FORM)
    context = open_context(catalog.location(name))
    keys = context.record_key_columns
    alias = _quoted(target.alias)
    projection = [f"{alias}.{_quoted(c)}" for c in (FILE, POSITION, *keys)]
    deleted: list[int] = [0]

    def plan(state: State) -> Change | None:
        found = _matching(spark, catalog, context, state, target, projection, statement,
                          DELETE_FORM).toArrow()
        deleted[0] = found.num_rows
        if not found.num_rows:
            return None
        removed = None
        if keys:
            typed = pa.table([found[k].cast(context.schema.field(k).type) for k in keys], names=keys)
            removed = index_keys(typed, keys)
        return Change("delete", None, state.read_at, state.deltas, deleted=_by_file(found),
                      removed_keys=removed, rows_bytes=0)

    commit_planned(context, plan, None)
    return count_frame(spark, "Deleted Row Count", deleted[0])
