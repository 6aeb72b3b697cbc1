"""Spark SQL's own statements, parsed with sqlglot (its ``spark`` dialect).

sqlglot reads the parts of a statement metatxn must understand: the columns and types of CREATE
TABLE, the target and SET list of UPDATE and DELETE, the target of INSERT, and every table a
query names. It checks the statement's structure; what metatxn hands on to Spark (SET values,
predicates, queries) is the statement's own text (:func:`._parse.source_text`), never printed
back from the tree: sqlglot reads ``'it''s'`` as two adjacent literals and prints
``CONCAT('it', 's')``, which Spark reads as ``its``. A statement sqlglot cannot read as a whole
(it falls back to an opaque ``Command``) is treated as not understood.
"""

from __future__ import annotations

import logging

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from ... import InvalidOptionError
from ._catalog import DEFAULT_DATABASE, TableName, name_problem
from ._parse import spark_message

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
        description = first.get("description") or spark_message(exc)
        line, column = first.get("line"), first.get("col")
        return f"{description} (line {line}, column {column})" if line else str(description)
    except TokenError as exc:
        return str(exc)
    if isinstance(tree, exp.Command):
        return "the statement is not Spark SQL"
    return "the statement could not be read"


def _parts(table: exp.Table) -> tuple[str, str] | None:
    if not isinstance(table.this, exp.Identifier) or table.args.get("catalog") is not None:
        return None
    database = table.args.get("db")
    return (database.name.lower() if isinstance(database, exp.Identifier) else DEFAULT_DATABASE,
            table.name.lower())


def name_of(table: exp.Table) -> TableName | None:
    """The ``db.table`` a table reference names (None: a table function, a three-part name that
    is Spark's catalog's, or a name no metatxn table can have, such as ``odd-name``)."""
    parts = _parts(table)
    if parts is None or name_problem(*parts) is not None:
        return None
    return TableName(*parts)


def new_name(table: exp.Table) -> TableName:
    """The ``db.table`` a statement creates; InvalidOptionError saying why it cannot be one."""
    parts = _parts(table)
    if parts is None:
        raise InvalidOptionError(f"{table.sql(dialect=DIALECT)!r} is not a table name; expected "
                                 "[db.]table")
    problem = name_problem(*parts)
    if problem is not None:
        raise InvalidOptionError(problem)
    return TableName(*parts)


def spark_text(node: exp.Expression) -> str:
    """A node printed in Spark's dialect: for names and types only (see the module's doc)."""
    return node.sql(dialect=DIALECT)
