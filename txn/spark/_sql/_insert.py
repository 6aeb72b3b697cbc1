"""INSERT INTO (and INSERT OVERWRITE) a metatxn table: the query run by Spark, written as one
new segment by the executors (``txn.spark.write``).

``INSERT INTO t [(col, ...)] <query>`` with any query Spark runs (``SELECT``, ``VALUES``, ...;
metatxn tables it reads are read at their latest snapshot). As in Spark, the query's columns
are matched to the table's by position (to the listed columns, when a list is given; the others
are null) and converted to their types; ``INSERT OVERWRITE [TABLE] t`` replaces the table's
whole content. A ``PARTITION (...)`` clause is not supported: give partition columns as columns
of the query. The answer is CarbonData's ``Segment ID``.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from timeline import InvalidOptionError

from ..._context import open_context
from .._types import spark_schema
from .._write import write
from ._catalog import Catalog
from ._frames import strings_frame
from ._parse import Cursor, Token, refused
from ._select import fresh_frame
from ._tree import name_of, parse, problem, spark_text

FORM = "INSERT INTO|OVERWRITE [TABLE] [db.]table [(column, ...)] SELECT ... | VALUES (...), ..."


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def insert(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """INSERT into a metatxn table; None when the target is Spark's."""
    cursor = Cursor(statement, FORM, tokens)
    cursor.expect("INSERT")
    cursor.expect("INTO", "OVERWRITE")
    cursor.accept("TABLE")
    try:
        name = cursor.table_name()
    except InvalidOptionError:  # not a table name metatxn can have: Spark's to judge
        return None
    if not catalog.exists(name):
        return None
    tree = parse(statement)
    if not isinstance(tree, exp.Insert):
        raise refused(statement, f"cannot read the statement: {problem(statement)}", FORM)
    target = tree.this
    listed = [i.name for i in target.expressions] if isinstance(target, exp.Schema) else None
    table_node = target.this if isinstance(target, exp.Schema) else target
    if not isinstance(table_node, exp.Table) or name_of(table_node) != name:
        raise refused(statement, "expected one table to insert into", FORM)
    if table_node.args.get("partition") is not None or tree.args.get("partition"):
        raise refused(statement, "INSERT ... PARTITION (...) is not supported; give the partition "
                                 "columns as columns of the query", FORM)
    query = tree.args.get("expression")
    if query is None:
        raise refused(statement, "expected a query (SELECT ... or VALUES ...)", FORM)
    context = open_context(catalog.location(name))
    columns = {c.lower(): c for c in context.schema.names}
    targets = list(context.schema.names)
    if listed is not None:
        unknown = [c for c in listed if c.lower() not in columns]
        if unknown:
            raise refused(statement, f"unknown column(s) {unknown}; the table's columns are {targets}", FORM)
        targets = [columns[c.lower()] for c in listed]
        if len(set(targets)) != len(targets):
            raise refused(statement, "the column list names a column twice", FORM)
    frame = fresh_frame(spark, catalog, spark_text(query))
    if len(frame.columns) != len(targets):
        raise refused(statement, f"the query gives {len(frame.columns)} column(s) but {len(targets)} "
                                 f"are inserted: {targets}", FORM)
    types = {f.name: f.dataType.simpleString() for f in spark_schema(context.schema).fields}
    given = dict(zip(targets, frame.columns, strict=True))
    renamed = frame.toDF(*[f"__value_{i}" for i in range(len(frame.columns))])
    positions = {target: f"__value_{i}" for i, target in enumerate(targets)}
    selected = renamed.selectExpr(*[
        f"CAST({_quoted(positions[c])} AS {types[c]}) AS {_quoted(c)}" if c in given
        else f"CAST(NULL AS {types[c]}) AS {_quoted(c)}" for c in context.schema.names])
    commit = write(selected, context.uri, mode="overwrite" if tree.args.get("overwrite") else "append")
    return strings_frame(spark, ("Segment ID",), [(commit.segment,)] if commit is not None else [])
