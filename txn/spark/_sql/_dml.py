"""UPDATE and DELETE of metatxn tables: Spark evaluates the statement, metatxn commits it once.

``UPDATE t SET (a, b) = (x, y) WHERE p`` (CarbonData's form) and ``UPDATE t SET a = x, b = y
WHERE p`` (Spark's) and ``DELETE FROM t WHERE p`` are read by sqlglot; the SET values and the
predicate go to Spark as the statement's own text (cut at its top-level ``SET``, ``WHERE``,
commas and ``=``; any expression Spark knows, subqueries over other tables included). Planned
on the latest state of the table:

1. the live rows of that snapshot, each with its data file and position
   (:func:`._positions.located_rows`), become a temporary view named like the table (or its
   alias); files whose column ranges rule the predicate out are not read;
2. Spark runs ``SELECT <the new row>, file, position FROM view WHERE p``; for an UPDATE the
   result is pinned (``localCheckpoint``), so the rows written are the rows counted, even for a
   non-deterministic SET value;
3. one commit: the matched positions become delete deltas (on a keyed table a DELETE also
   retires their keys from the record index), and an UPDATE's new rows a new segment written by
   the executors (the write job of ``txn.spark.write``), CarbonData's UPDATE since 2.1. An
   UPDATE that sets a column that is not nullable to NULL on any row, or a value its column
   cannot hold unchanged (``_assign``), is refused first.

CarbonData's bracketed SET list takes its values in brackets (``SET (c2) = 194`` is refused, as
CarbonData refuses it). Its update from a source, ``SET (a, b) = (SELECT x, y FROM s WHERE
t.k = s.k)``, joins the query to the target's rows (``JOIN LATERAL``): rows it does not match
keep their values; a query that does not refer to the target's row is one value for all (a
left join: NULL when it has no row). A row the query matches twice is refused.

The commit is the public two-phase write (``Table.begin_write("update" | "delete",
read_instant=snapshot)``, the rows by ``(DataFile.path, position)`` as ``deletes=``), so it is
checked as ``Table.update`` and ``Table.delete`` are: a concurrent commit that changed the same
files fails this one with ``CommitConflictError``; a table service that overtook it (a
compaction that completed meanwhile, a clean that removed a file of the snapshot read:
``PendingWrite.retryable``) makes it plan again on a new snapshot, up to :data:`REPLANS` times.
Record key columns cannot be updated (delete and insert the row instead).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from sqlglot import exp

from ... import (
    InvalidOptionError,
    SchemaMismatchError,
    Snapshot,
    SnapshotExpiredError,
    Table,
    TxnError,
    open_table,
)
from .._filters import case_sensitive, to_expression
from .._types import spark_schema
from .._write import REPLANS, run_job
from ._assign import converted
from ._catalog import Catalog, TableName
from ._frames import count_frame
from ._parse import Cursor, Token, depths, enclosed, refused, source_text, spark_message, split_top_level
from ._positions import FILE, POSITION, located_rows
from ._select import fresh_views
from ._tree import name_of, parse, problem, spark_text

UPDATE_FORM = ("UPDATE [db.]table [[AS] alias] SET (column, ...) = (expression, ...) [WHERE predicate]  "
               "or  UPDATE [db.]table [[AS] alias] SET column = expression, ... [WHERE predicate]")
DELETE_FORM = "DELETE FROM [db.]table [[AS] alias] [WHERE predicate]"
#: How often a DELETE reads the latest snapshot again when a clean expired it while it planned
#: (an UPDATE reads once: its plan is Spark jobs whose result is pinned).
_ATTEMPTS = 3

log = logging.getLogger("metatxn")


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


def _top_level_word(tokens: list[Token], word: str, after: int = 0) -> int | None:
    """Where ``word`` first is outside brackets, from ``after`` on (None: nowhere)."""
    for index, (token, depth) in enumerate(zip(tokens, depths(tokens), strict=True)):
        if index >= after and depth == 0 and token.is_word(word):
            return index
    return None


def _where_clause(statement: str, tokens: list[Token], after: int, form: str) -> tuple[int, str | None]:
    """Where the WHERE keyword is (``len(tokens)`` when there is none) and the predicate's own
    text (a subquery's WHERE is inside brackets, a SET value's too)."""
    where = _top_level_word(tokens, "WHERE", after)
    if where is None:
        return len(tokens), None
    if where + 1 >= len(tokens):
        raise refused(statement, "WHERE needs a predicate", form)
    return where, source_text(statement, tokens[where + 1:])


def _described(tree: exp.Expression, name: TableName, statement: str, tokens: list[Token],
               form: str) -> _Target:
    table = tree.this
    if not isinstance(table, exp.Table) or name_of(table) != name:
        raise refused(statement, "expected one table to change", form)
    for clause in ("from", "from_", "using", "joins", "returning", "order", "limit"):
        if tree.args.get(clause):
            raise refused(statement, f"{clause.rstrip('_').upper()} is not supported", form)
    _, predicate = _where_clause(statement, tokens, 0, form)
    if (predicate is None) != (tree.args.get("where") is None):
        raise refused(statement, "cannot read the WHERE clause", form)
    return _Target(name, table.alias or name.table, predicate)


def _set_list(statement: str, tokens: list[Token]) -> list[list[Token]]:
    """UPDATE's assignments, each its tokens (between SET and WHERE, cut at top-level commas)."""
    start = _top_level_word(tokens, "SET")
    if start is None:
        raise refused(statement, "expected SET", UPDATE_FORM)
    end, _ = _where_clause(statement, tokens, start, UPDATE_FORM)
    return split_top_level(tokens[start + 1:end], ",")


@dataclass(frozen=True)
class _Source:
    """CarbonData's update from a source: ``SET (c, ...) = (SELECT ...)``, the query's columns
    in order giving the listed columns' values."""

    columns: list[str]
    query: str


def _bracketed(statement: str, piece: list[Token], equals: int) -> list[Token]:
    """The values of CarbonData's ``SET (column, ...) = (value, ...)``: in one pair of brackets,
    as its grammar requires (it refuses ``SET (c2) = 194``: "missing bracket")."""
    value_tokens = piece[equals + 1:]
    inner = enclosed(value_tokens)
    if inner is None:
        columns = source_text(statement, piece[:equals])
        values = source_text(statement, value_tokens)
        raise refused(statement, f"SET {columns} = {values}: the values of a bracketed column list "
                                 f"must be in brackets too: SET {columns} = ({values})", UPDATE_FORM)
    return inner


def _assignments(tree: exp.Update, statement: str, columns: dict[str, str],
                 pieces: list[list[Token]]) -> tuple[dict[str, str], _Source | None]:
    """Table column (its own spelling) -> the SET value, the statement's own text; and the
    update from a source, if the statement has one (its columns are not in the first part).

    sqlglot's tree says which columns are set and checks the form; the values are cut from the
    statement's text at the same places (top-level commas and ``=``), so Spark reads them as
    written."""
    assigned: dict[str, str] = {}
    source: _Source | None = None
    unreadable = refused(statement, "cannot read the SET list", UPDATE_FORM)

    def column_of(column: exp.Expression) -> str:
        if isinstance(column, exp.Paren):
            column = column.this
        if not isinstance(column, exp.Column):
            raise refused(statement, f"{spark_text(column)!r} is not a column to set", UPDATE_FORM)
        name = columns.get(column.name.lower())
        if name is None:
            raise refused(statement, f"unknown column {column.name!r}; the table's columns are "
                                     f"{list(columns.values())}", UPDATE_FORM)
        if name in assigned or (source is not None and name in source.columns):
            raise refused(statement, f"column {name!r} is set twice", UPDATE_FORM)
        return name

    if len(pieces) != len(tree.expressions):
        raise unreadable
    for assignment, piece in zip(tree.expressions, pieces, strict=True):
        if not isinstance(assignment, exp.EQ):
            raise refused(statement, f"{spark_text(assignment)!r} is not an assignment", UPDATE_FORM)
        equals = next((i for i, (token, depth) in enumerate(zip(piece, depths(piece), strict=True))
                       if depth == 0 and token.kind == "symbol" and token.value == "="), None)
        if equals is None or equals + 1 >= len(piece):
            raise unreadable
        left, right = assignment.this, assignment.expression
        if not isinstance(left, (exp.Tuple, exp.Paren)):
            if isinstance(right, exp.Tuple):
                raise refused(statement, f"one column but {len(right.expressions)} values", UPDATE_FORM)
            assigned[column_of(left)] = source_text(statement, piece[equals + 1:])
            continue
        targets = left.expressions if isinstance(left, exp.Tuple) else [left]
        inner = _bracketed(statement, piece, equals)
        if isinstance(right, exp.Subquery):
            listed = right.this.expressions if isinstance(right.this, exp.Select) else []
            if listed and not any(isinstance(e, exp.Star) or isinstance(e.unnest(), exp.Star)
                                  for e in listed) and len(listed) != len(targets):
                raise refused(statement, f"{len(targets)} column(s) but the query gives {len(listed)}",
                              UPDATE_FORM)
            if source is not None:
                raise refused(statement, "one SET (column, ...) = (SELECT ...) per statement",
                              UPDATE_FORM)
            names = [column_of(column) for column in targets]
            source = _Source(names, source_text(statement, inner))
            continue
        values = right.expressions if isinstance(right, exp.Tuple) else [right]
        if len(values) != len(targets):
            raise refused(statement, f"{len(targets)} column(s) but {len(values)} value(s)", UPDATE_FORM)
        texts = [source_text(statement, t) for t in split_top_level(inner, ",") if t]
        if len(texts) != len(values):
            raise unreadable
        for column, text in zip(targets, texts, strict=True):
            assigned[column_of(column)] = text
    if not assigned and source is None:
        raise refused(statement, "SET names no column", UPDATE_FORM)
    return assigned, source


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _matching(spark: Any, catalog: Catalog, snapshot: Snapshot, target: _Target,
              projection: list[str], statement: str, form: str, joined: str = "") -> Any:
    """Spark's rows of ``snapshot`` that match the target's predicate, as ``projection``
    (``joined``: a join after the target's rows)."""
    from pyspark.errors import AnalysisException

    pruning = to_expression(target.predicate, snapshot.schema, case_sensitive=case_sensitive(spark)) \
        if target.predicate else None
    view = f"metatxn_target_{target.name.table}_{secrets.token_hex(4)}"
    located_rows(spark, snapshot, pruning).createOrReplaceTempView(view)
    query = f"SELECT {', '.join(projection)} FROM {_quoted(view)} AS {_quoted(target.alias)}{joined}"
    if target.predicate:
        query += f" WHERE {target.predicate}"
    try:
        with fresh_views(spark, catalog, query) as rewritten:
            return spark.sql(rewritten)
    except AnalysisException as exc:
        raise refused(statement, f"Spark cannot evaluate it: {spark_message(exc)}",
                      form) from None
    finally:
        spark.catalog.dropTempView(view)


def _refuse_nulls(rows: Any, not_null: list[str]) -> None:
    """SchemaMismatchError if the new rows hold NULL in a column that is not nullable (the
    check ``Table.update`` makes of its values; here they are Spark's, row by row)."""
    if not not_null:
        return
    found = rows.where(" OR ".join(f"{_quoted(c)} IS NULL" for c in not_null)).limit(1).collect()
    if found:
        columns = [c for c in not_null if found[0][c] is None]
        raise SchemaMismatchError(f"column(s) {columns} are not nullable, but the UPDATE sets "
                                  "them to NULL on a matching row; nothing was written")


@dataclass(frozen=True)
class _Planned:
    """A statement planned on one snapshot: the rows it matched, by ``file`` (``DataFile.path``)
    and ``position``, and an UPDATE's new rows (a DataFrame; None for a DELETE)."""

    deletes: pa.Table
    rows: Any = None


def _planned(found: pa.Table, rows: Any = None) -> _Planned:
    return _Planned(found.select([FILE, POSITION]).rename_columns(["file", "position"]), rows)


def _latest(table: Table, plan: Callable[[Snapshot], _Planned],
            attempts: int) -> tuple[Snapshot, _Planned]:
    """``plan`` on the latest snapshot; on a new one if a clean expired it meanwhile."""
    for attempt in range(attempts):
        try:
            snapshot = table.snapshot()
            return snapshot, plan(snapshot)
        except SnapshotExpiredError:
            if attempt == attempts - 1:
                raise
            log.info("the table moved on while a write read it; reading it again")
    raise AssertionError("unreachable")  # pragma: no cover


def _commit(table: Table, operation: str, plan: Callable[[Snapshot], _Planned], *,
            attempts: int = _ATTEMPTS) -> int:
    """Plan the statement on the latest snapshot and commit it once, through the two-phase
    write begun from that snapshot; return the rows it matched (0: nothing was committed).

    A table service never fails it: when a compaction completed while it ran, or a clean
    removed a file of (or expired) the snapshot it read, it is planned again on a new snapshot,
    up to :data:`REPLANS` times, as ``Table.update`` and ``Table.delete`` are. Any other
    conflict is the caller's (``CommitConflictError``)."""
    for retry in range(REPLANS + 1):
        pending = None
        try:
            snapshot, planned = _latest(table, plan, attempts)
            if not planned.deletes.num_rows:
                return 0
            with table.begin_write(operation, read_instant=snapshot) as pending:
                reports = run_job(table, planned.rows, pending) if planned.rows is not None else []
                pending.commit(reports, deletes=planned.deletes, retries=retry)
            return int(planned.deletes.num_rows)
        except TxnError as exc:
            overtaken = (pending.retryable(exc) if pending is not None
                         else isinstance(exc, SnapshotExpiredError))
            if retry == REPLANS or not overtaken:
                raise
            log.info("%s planned again: %s (retry %d of %d)", operation, exc, retry + 1, REPLANS)
    raise AssertionError("unreachable")  # pragma: no cover


#: The alias of an update's source query, and its columns' names (``v0``, ``v1``, ...).
_SOURCE = "__metatxn_source"


def _source_join(spark: Any, catalog: Catalog, source: _Source) -> str:
    """The join of CarbonData's update from a source, after the target's rows.

    A query that refers to the target's row (it cannot be analysed alone) joins it: a row it
    matches takes the query's values, a row it does not match is left as it was (CarbonData's
    update by join). A query that does not refer to it is one value for every row, as
    CarbonData evaluates it: no row gives NULL (a left join). Either way a row the query
    matches more than once is refused after planning (:func:`_refuse_repeats`)."""
    from pyspark.errors import AnalysisException

    try:
        with fresh_views(spark, catalog, source.query) as rewritten:
            spark.sql(rewritten)
        kind = "LEFT JOIN"
    except AnalysisException:
        kind = "JOIN"
    names = ", ".join(f"`v{i}`" for i in range(len(source.columns)))
    return f" {kind} LATERAL ({source.query}) AS {_quoted(_SOURCE)}({names})"


def _refuse_repeats(rows: Any, table: TableName) -> None:
    """InvalidOptionError if a row of the table appears twice among the joined rows."""
    repeated = rows.groupBy(FILE, POSITION).count().where("count > 1").limit(1).collect()
    if repeated:
        raise InvalidOptionError(
            f"the SET query returns more than one row for a row of {table} (CarbonData: update "
            "cannot be supported for 1 to N mapping, as more than one value present for the "
            "update key); nothing was written\nHelp: make the query match each row once, or "
            "narrow the UPDATE's WHERE")


def update(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """UPDATE of a metatxn table; None when the table is Spark's."""
    name = _target(catalog, statement, tokens, 1, UPDATE_FORM)
    if name is None:
        return None
    tree = _parsed(statement, exp.Update, UPDATE_FORM)
    assert isinstance(tree, exp.Update)
    target = _described(tree, name, statement, tokens, UPDATE_FORM)
    table = open_table(catalog.location(name))
    schema = table.schema
    columns = {c.lower(): c for c in schema.names}
    assigned, source = _assignments(tree, statement, columns, _set_list(statement, tokens))
    joined = ""
    if source is not None:
        joined = _source_join(spark, catalog, source)
        assigned |= {c: f"{_quoted(_SOURCE)}.`v{i}`" for i, c in enumerate(source.columns)}
    not_null = [c for c in assigned if not schema.field(c).nullable]
    keys = [c for c in assigned if c in table.record_key_columns]
    if keys:
        raise refused(statement, f"record key column(s) {keys} cannot be updated; delete the rows and "
                                 "insert them under their new key", UPDATE_FORM)
    types = {f.name: f.dataType for f in spark_schema(schema).fields}
    alias = _quoted(target.alias)
    # Values in their own types: converted() checks each fits its column before casting it.
    projection = [f"({assigned[c]}) AS {_quoted(c)}" if c in assigned
                  else f"{alias}.{_quoted(c)}" for c in schema.names]
    projection += [f"{alias}.{_quoted(FILE)}", f"{alias}.{_quoted(POSITION)}"]

    def plan(snapshot: Snapshot) -> _Planned:
        matched = _matching(spark, catalog, snapshot, target, projection, statement, UPDATE_FORM, joined)
        pinned = matched.localCheckpoint(eager=True)
        if source is not None:
            _refuse_repeats(pinned, name)
        rows = converted(pinned, {c: types[c] for c in assigned})
        _refuse_nulls(rows, not_null)
        return _planned(pinned.select(FILE, POSITION).toArrow(), rows.drop(FILE, POSITION))

    updated = _commit(table, "update", plan, attempts=1)
    return count_frame(spark, "Updated Row Count", updated)


def delete(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """DELETE FROM a metatxn table; None when the table is Spark's.

    On a keyed table the commit reads the deleted rows' keys back from their files and retires
    them from the record index (``PendingWrite.commit`` of a ``"delete"``)."""
    name = _target(catalog, statement, tokens, 2, DELETE_FORM)
    if name is None:
        return None
    tree = _parsed(statement, exp.Delete, DELETE_FORM)
    target = _described(tree, name, statement, tokens, DELETE_FORM)
    table = open_table(catalog.location(name))
    alias = _quoted(target.alias)
    projection = [f"{alias}.{_quoted(c)}" for c in (FILE, POSITION)]

    def plan(snapshot: Snapshot) -> _Planned:
        return _planned(_matching(spark, catalog, snapshot, target, projection, statement,
                                  DELETE_FORM).toArrow())

    deleted = _commit(table, "delete", plan)
    return count_frame(spark, "Deleted Row Count", deleted)
