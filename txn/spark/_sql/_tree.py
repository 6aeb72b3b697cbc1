"""Spark SQL's own statements, parsed with sqlglot (its ``spark`` dialect).

sqlglot reads the parts of a statement metatxn must understand: the columns and types of CREATE
TABLE, the target and SET list of UPDATE and DELETE, the target of INSERT, and every table a
query names. Expressions metatxn hands on to Spark (SET values, predicates, queries) are printed
back in Spark's dialect; a statement sqlglot cannot read as a whole (it falls back to an opaque
``Command``) is treated as not understood.
"""

from __future__ import annotations

import logging

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from ._catalog import DEFAULT_DATABASE, TableName

DIALECT = "spark"


class _NoCommandFallbackNotice(logging.Filter):
    """sqlglot logs a warning for every statement it reads as an opaque ``Command``; metatxn
    treats those as "not understood" and decides itself what to do with them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


logging.getLogger("sqlglot").addFilter(_NoCommandFallbackNotice())


def parse(text: str) -> exp.Expression | None:
    """The statement's tree, or None when sqlglot cannot read it (see :func:`problem`)."""
    try:
        tree = sqlglot.parse_one(text, read=DIALECT)
    except (ParseError, TokenError):
        return None
    if isinstance(tree, exp.Command) or not isinstance(tree, exp.Expression):
        return None
    return tree


def problem(text: str) -> str:
    """Why sqlglot cannot read ``text`` (its first error, without terminal colours)."""
    try:
        tree = sqlglot.parse_one(text, read=DIALECT)
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        description = first.get("description") or str(exc).splitlines()[0]
        line, column = first.get("line"), first.get("col")
        return f"{description} (line {line}, column {column})" if line else str(description)
    except TokenError as exc:
        return str(exc)
    if isinstance(tree, exp.Command):
        return "the statement is not Spark SQL"
    return "the statement could not be read"


def name_of(table: exp.Table) -> TableName | None:
    """The ``db.table`` a table reference names (None: a table function, or a three-part name
    that is Spark's catalog's, not the warehouse's)."""
    if not isinstance(table.this, exp.Identifier) or table.args.get("catalog") is not None:
        return None
    database = table.args.get("db")
    return TableName(database.name.lower() if isinstance(database, exp.Identifier) else DEFAULT_DATABASE,
                     table.name.lower())


def spark_text(node: exp.Expression) -> str:
    return node.sql(dialect=DIALECT)
