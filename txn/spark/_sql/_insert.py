"""INSERT INTO (and INSERT OVERWRITE) a metatxn table: the query run by Spark, written as one
new segment by the executors (``txn.spark.write``).

``INSERT INTO t [(col, ...) | BY NAME] <query>`` with any query Spark runs (``SELECT``,
``VALUES``, ...; metatxn tables it reads are read at their latest snapshot). As in Spark, the
query's columns are matched to the table's by position (to the listed columns, when a list is
given), or by name with ``BY NAME``; columns not given are null; values are converted to the
columns' types, and a value a column cannot hold unchanged (3.45 or 2**40 for an int column, a
string for a number) is refused (``_assign``). ``INSERT OVERWRITE [TABLE] t`` replaces the
table's whole content. A ``PARTITION (...)`` clause, ``REPLACE WHERE`` and ``WITH (options)``
are refused: give partition columns as columns of the query.

The query runs to completion (pinned with ``localCheckpoint``) before the commit begins, so a
value Spark cannot compute fails the statement with the table untouched, and a query of no rows
commits nothing (``INSERT INTO``; ``INSERT OVERWRITE`` of no rows empties the table, as
``Table.overwrite`` does). The answer is CarbonData's ``Segment ID``: one row, or no row when no
segment was added.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from timeline import InvalidOptionError

from ..._context import open_context
from .._types import spark_schema
from .._write import write
from ._assign import converted
from ._catalog import Catalog
from ._frames import strings_frame
from ._parse import Cursor, Token, refused, source_text
from ._select import fresh_frame
from ._tree import name_of, parse, problem

FORM = ("INSERT INTO|OVERWRITE [TABLE] [db.]table [(column, ...) | BY NAME] "
        "SELECT ... | VALUES (...), ...")

#: Words a query may start with (after INSERT's target): anything else there is not a query.
_QUERY_START = frozenset({"SELECT", "WITH", "VALUES", "FROM", "TABLE", "MAP", "REDUCE"})


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _is_symbol(token: Token | None, symbol: str) -> bool:
    return token is not None and token.kind == "symbol" and token.value == symbol


def _opens_query(token: Token | None) -> bool:
    return token is not None and (token.is_word(*_QUERY_START) or _is_symbol(token, "("))


def _head(cursor: Cursor) -> tuple[list[str] | None, bool]:
    """After the target: the column list (None: not given) and BY NAME; the cursor is left at the
    query's first token."""
    if cursor.at_word("PARTITION", "IF"):
        raise cursor.error("INSERT ... PARTITION (...) is not supported; give the partition columns "
                           "as columns of the query")
    if cursor.at_word("REPLACE"):
        raise cursor.error("INSERT ... REPLACE WHERE is not supported; DELETE the rows, then INSERT "
                           "in a second statement (or INSERT OVERWRITE the whole table)")
    following = cursor.peek(1)
    if cursor.at_word("WITH") and following is not None and following.kind == "symbol" \
            and following.value == "(":
        raise cursor.error("INSERT ... WITH (options) is not supported")
    listed: list[str] | None = None
    by_name = cursor.accept("BY")
    if by_name:
        cursor.expect("NAME")
    elif _is_symbol(cursor.peek(), "(") and not _opens_query(following):
        cursor.take()
        listed = []
        while True:
            token = cursor.take()
            if not token.is_name:
                raise cursor.error(f"expected a column name but found {token.value!r}")
            listed.append(token.value)
            if cursor.accept_symbol(")"):
                break
            cursor.expect_symbol(",")
    if not _opens_query(cursor.peek()):
        raise cursor.error(f"expected a query (SELECT ... or VALUES ...) but found {cursor.found()}")
    return listed, by_name


def insert(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """INSERT into a metatxn table; None when the target is Spark's."""
    cursor = Cursor(statement, FORM, tokens)
    cursor.expect("INSERT")
    overwrite = cursor.expect("INTO", "OVERWRITE") == "OVERWRITE"
    cursor.accept("TABLE")
    try:
        name = cursor.table_name()
    except InvalidOptionError:  # not a table name metatxn can have: Spark's to judge
        return None
    if not catalog.exists(name):
        return None
    listed, by_name = _head(cursor)
    tree = parse(statement)
    if not isinstance(tree, exp.Insert) or tree.args.get("expression") is None:
        raise refused(statement, f"cannot read the statement: {problem(statement)}", FORM)
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    if not isinstance(target, exp.Table) or name_of(target) != name:
        raise refused(statement, "expected one table to insert into", FORM)
    # The query is cut from the text after the hand-read head: the head must be sqlglot's too.
    read = [c.name.lower() for c in tree.this.expressions] if isinstance(tree.this, exp.Schema) else None
    if read != ([c.lower() for c in listed] if listed is not None else None) \
            or bool(tree.args.get("by_name")) != by_name:
        raise refused(statement, "cannot read the column list", FORM)
    context = open_context(catalog.location(name))
    columns = {c.lower(): c for c in context.schema.names}
    frame = fresh_frame(spark, catalog, source_text(statement, tokens[cursor.at:]))
    given = _given(cursor, frame.columns, columns, listed, by_name)
    types = {f.name: f.dataType for f in spark_schema(context.schema).fields}
    renamed = frame.toDF(*[f"__value_{i}" for i in range(len(frame.columns))])
    # Values in their own types: converted() checks each fits its column before casting it.
    selected = renamed.selectExpr(*[
        f"{_quoted(f'__value_{given[c]}')} AS {_quoted(c)}" if c in given
        else f"CAST(NULL AS {types[c].simpleString()}) AS {_quoted(c)}" for c in context.schema.names])
    # Computed before the commit begins: Spark's errors (a division by zero) and a value that
    # does not fit its column leave the table untouched, and an empty query is known to be empty.
    pinned = selected.localCheckpoint(eager=True)
    rows = converted(pinned, {c: types[c] for c in given})
    if not overwrite and pinned.isEmpty():
        return strings_frame(spark, ("Segment ID",), [])
    commit = write(rows, context.uri, mode="overwrite" if overwrite else "append")
    return strings_frame(spark, ("Segment ID",), [(commit.segment,)] if commit is not None else [])


def _given(cursor: Cursor, query_columns: list[str], columns: dict[str, str], listed: list[str] | None,
           by_name: bool) -> dict[str, int]:
    """Table column -> the position of the query column that fills it."""
    targets = list(columns.values())
    if by_name:
        named = [c.lower() for c in query_columns]
        repeated = sorted({c for c in named if named.count(c) > 1})
        if repeated:
            raise cursor.error(f"BY NAME: the query names column(s) {repeated} twice (names are "
                               "case-insensitive)")
        unknown = [c for c in query_columns if c.lower() not in columns]
        if unknown:
            raise cursor.error(f"BY NAME: the query's column(s) {unknown} are not the table's; its "
                               f"columns are {targets}")
        return {columns[c]: i for i, c in enumerate(named)}
    if listed is not None:
        unknown = [c for c in listed if c.lower() not in columns]
        if unknown:
            raise cursor.error(f"unknown column(s) {unknown}; the table's columns are {targets}")
        targets = [columns[c.lower()] for c in listed]
        if len(set(targets)) != len(targets):
            raise cursor.error("the column list names a column twice")
    if len(query_columns) != len(targets):
        raise cursor.error(f"the query gives {len(query_columns)} column(s) but {len(targets)} are "
                           f"inserted: {targets}")
    return {target: i for i, target in enumerate(targets)}
