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
commits nothing (``INSERT INTO``, and ``INSERT OVERWRITE`` of a partitioned table without a
static partition; ``INSERT OVERWRITE`` of no rows empties an unpartitioned table, as
``Table.overwrite`` does). The answer is CarbonData's ``Segment ID``: one row, or no row when no
segment was added.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from ... import InvalidOptionError, open_table
from .._types import spark_schema
from .._write import write
from ._assign import converted
from ._catalog import Catalog
from ._frames import strings_frame
from ._parse import Cursor, Token, refused, source_text
from ._select import fresh_frame
from ._tree import name_of, parse, problem

FORM = ("INSERT INTO|OVERWRITE [TABLE] [db.]table [PARTITION (column='value' | column, ...)] "
        "[(column, ...) | BY NAME] SELECT ... | VALUES (...), ...")

#: Words a query may start with (after INSERT's target): anything else there is not a query.
_QUERY_START = frozenset({"SELECT", "WITH", "VALUES", "FROM", "TABLE", "MAP", "REDUCE"})


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _is_symbol(token: Token | None, symbol: str) -> bool:
    return token is not None and token.kind == "symbol" and token.value == symbol


def _opens_query(token: Token | None) -> bool:
    return token is not None and (token.is_word(*_QUERY_START) or _is_symbol(token, "("))


def _partition_clause(cursor: Cursor) -> tuple[dict[str, str], list[str]]:
    """``PARTITION (col='value', other, ...)``: the static values (columns lower-cased) and the
    dynamic columns named."""
    cursor.expect_symbol("(")
    static: dict[str, str] = {}
    dynamic: list[str] = []
    while True:
        token = cursor.take()
        if not token.is_name:
            raise cursor.error(f"expected a partition column but found {token.value!r}")
        column = token.value.lower()
        if column in static or column in dynamic:
            raise cursor.error(f"partition column {column!r} is given twice")
        if cursor.accept_symbol("="):
            value = cursor.take()
            if value.kind not in ("string", "number"):
                raise cursor.error(f"expected the value of partition column {token.value!r} as a "
                                   f"quoted string or a number but found {value.value!r}")
            static[column] = value.value
        else:
            dynamic.append(column)
        if cursor.accept_symbol(")"):
            return static, dynamic
        cursor.expect_symbol(",")


def _head(cursor: Cursor) -> tuple[list[str] | None, bool, dict[str, str] | None]:
    """After the target: the column list (None: not given), BY NAME and the PARTITION clause's
    static values (None: no clause); the cursor is left at the query's first token."""
    partition: dict[str, str] | None = None
    if cursor.accept("PARTITION"):
        partition, _ = _partition_clause(cursor)
    if cursor.at_word("IF"):
        raise cursor.error("INSERT ... PARTITION (...) IF NOT EXISTS is not supported")
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
    return listed, by_name, partition


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
    listed, by_name, partition = _head(cursor)
    tree = parse(statement)
    if not isinstance(tree, exp.Insert) or tree.args.get("expression") is None:
        raise refused(statement, f"cannot read the statement: {problem(statement)}", FORM)
    target = tree.this.this if isinstance(tree.this, exp.Schema) else tree.this
    if not isinstance(target, exp.Table) or name_of(target) != name:
        raise refused(statement, "expected one table to insert into", FORM)
    # The query is cut from the text after the hand-read head: the head must be sqlglot's too.
    read = [c.name.lower() for c in tree.this.expressions] if isinstance(tree.this, exp.Schema) else None
    if read != ([c.lower() for c in listed] if listed is not None else None) \
            or bool(tree.args.get("by_name")) != by_name \
            or (target.args.get("partition") is not None) != (partition is not None):
        raise refused(statement, "cannot read the column list", FORM)
    table = open_table(catalog.location(name))
    columns = {c.lower(): c for c in table.schema.names}
    static = _static_columns(cursor, table.partition_by, columns, partition)
    frame = fresh_frame(spark, catalog, source_text(statement, tokens[cursor.at:]))
    from_query = {c: n for c, n in columns.items() if c not in static}
    given = _given(cursor, frame.columns, from_query, listed, by_name)
    types = {f.name: f.dataType for f in spark_schema(table.schema).fields}
    names = {c: t.simpleString() for c, t in types.items()}
    renamed = frame.toDF(*[f"__value_{i}" for i in range(len(frame.columns))])
    values = _static_values(cursor, spark, static, names)
    # Values in their own types: converted() checks each fits its column before casting it (a
    # static partition value was checked by _static_values already).
    selected = renamed.selectExpr(*[
        f"CAST({_literal(static[c])} AS {names[c]}) AS {_quoted(c)}" if c in static
        else f"{_quoted(f'__value_{given[c]}')} AS {_quoted(c)}" if c in given
        else f"CAST(NULL AS {names[c]}) AS {_quoted(c)}" for c in table.schema.names])
    # Computed before the commit begins: Spark's errors (a division by zero) and a value that
    # does not fit its column leave the table untouched, and an empty query is known to be empty.
    pinned = selected.localCheckpoint(eager=True)
    rows = converted(pinned, {c: types[c] for c in given})
    scope = overwrite_partitions(table.partition_by, values) if overwrite else None
    if (not overwrite or scope == "dynamic") and pinned.isEmpty():
        return strings_frame(spark, ("Segment ID",), [])
    commit = write(rows, table.uri, mode="overwrite" if overwrite else "append", partitions=scope)
    return strings_frame(spark, ("Segment ID",), [(commit.segment,)] if commit is not None else [])


def overwrite_partitions(partition_by: list[str], static: dict[str, Any]) -> str | dict[str, Any] | None:
    """What an INSERT OVERWRITE (or LOAD ... OVERWRITE) replaces: the whole table (unpartitioned),
    the partition every partition column's static value names, or the partitions written."""
    if not partition_by:
        return None
    if set(static) == set(partition_by):
        return static
    return "dynamic"


def _static_columns(cursor: Cursor, partition_by: list[str], columns: dict[str, str],
                    partition: dict[str, str] | None) -> dict[str, str]:
    """The PARTITION clause's static values by table column name."""
    if partition is None:
        return {}
    if not partition_by:
        raise cursor.error("PARTITION (...) is given, but the table is not partitioned")
    static: dict[str, str] = {}
    for column, value in partition.items():
        if column not in columns or columns[column] not in partition_by:
            raise cursor.error(f"PARTITION names {column!r}, which is not a partition column; the "
                               f"table's are {partition_by}")
        static[columns[column]] = value
    return static


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _static_values(cursor: Cursor, spark: Any, static: dict[str, str],
                   types: dict[str, str]) -> dict[str, Any]:
    """The static values as Spark converts them (as Arrow values: a timestamp is the instant the
    session's time zone makes of the text); a value that does not convert is refused."""
    if not static:
        return {}
    converted = ", ".join(f"try_cast({_literal(value)} AS {types[column]}) AS {_quoted(column)}"
                          for column, value in static.items())
    row: dict[str, Any] = spark.sql(f"SELECT {converted}").toArrow().to_pylist()[0]
    for column, value in static.items():
        if row[column] is None:
            raise cursor.error(f"partition value {value!r} of column {column!r} is not a {types[column]}")
    return row


def _given(cursor: Cursor, query_columns: list[str], columns: dict[str, str], listed: list[str] | None,
           by_name: bool) -> dict[str, int]:
    """Table column -> the position of the query column that fills it (``columns``: the table's
    columns the query gives, static partition columns left out)."""
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
