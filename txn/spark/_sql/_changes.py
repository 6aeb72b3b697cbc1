"""``table_changes('db.t', start[, end])``: a metatxn table's change feed in any query.

Delta's table-valued function over ``txn.spark.read_changes``: Spark has no such function, so
each call in a statement's text is replaced, before Spark sees it, by a temporary view of the
window's change rows (its name quoted), exactly where the call was; the rest of the statement
reaches Spark as written. The window is ``Table.changes(start, end)``: ``start`` exclusive,
``end`` inclusive (the latest completed instant when omitted), each an instant time (a number
or a string), an ISO-8601 timestamp string, or ``'earliest'`` for ``start``.

The arguments are literals (a table name as a string, then one or two bounds): the window is
planned when the statement runs, once, like a query's fresh views (:mod:`._select`).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .._changes import read_changes
from ._catalog import Catalog, TableName
from ._parse import Token, depths, refused, split_top_level, tokenize

FORM = ("table_changes('[db.]table', start[, end]) with start and end instant times (17 digits), "
        "ISO-8601 timestamp strings or 'earliest' (start only)")


@dataclass(frozen=True)
class ChangeCall:
    """One ``table_changes(...)`` of a statement: where it is, and its window."""

    start_at: int
    end_at: int
    table: TableName
    start: str
    end: str | None


def _argument(statement: str, piece: list[Token], what: str) -> str:
    if len(piece) != 1 or piece[0].kind not in ("string", "number"):
        shown = statement[piece[0].start:piece[-1].end] if piece else "nothing"
        raise refused(statement, f"table_changes takes literals; its {what} is {shown!r}", FORM)
    return piece[0].value


def calls(statement: str, catalog: Catalog, tokens: list[Token] | None = None) -> list[ChangeCall]:
    """Every ``table_changes(...)`` call of ``statement``, in order.

    Raises:
        InvalidOptionError: a call whose arguments are not a table name and one or two bounds,
            as literals (the statement and the expected form quoted).
    """
    tokens = tokenize(statement) if tokens is None else tokens
    levels = depths(tokens)
    found = []
    for at, token in enumerate(tokens[:-1]):
        following = tokens[at + 1]
        if not token.is_word("TABLE_CHANGES") or following.kind != "symbol" or following.value != "(":
            continue
        close = next((i for i in range(at + 2, len(tokens)) if levels[i] == levels[at + 1]
                      and tokens[i].kind == "symbol" and tokens[i].value == ")"), None)
        if close is None:
            raise refused(statement, "table_changes( is not closed", FORM)
        pieces = split_top_level(tokens[at + 2:close], ",")
        if not 2 <= len(pieces) <= 3:
            raise refused(statement, f"table_changes takes 2 or 3 arguments, got {len(pieces)}", FORM)
        name = _argument(statement, pieces[0], "table name")
        try:
            table = catalog.name(name)
        except Exception as exc:
            raise refused(statement, str(exc), FORM) from None
        start = _argument(statement, pieces[1], "start")
        end = _argument(statement, pieces[2], "end") if len(pieces) == 3 else None
        found.append(ChangeCall(token.start, tokens[close].end, table, start, end))
    return found


@contextmanager
def change_views(spark: Any, catalog: Catalog, text: str, *, keep: bool = False) -> Iterator[str]:
    """``text`` with each ``table_changes(...)`` replaced by a temporary view of its rows
    (dropped on exit unless ``keep``: the statement creates a view or cached table over them).

    Raises:
        TableNotFoundError: a call names a table the warehouse does not have.
        InvalidOptionError, SnapshotExpiredError: what ``Table.changes`` raises for the window.
    """
    found = calls(text, catalog) if "table_changes" in text.lower() else []
    views: list[str] = []
    try:
        for call in reversed(found):
            catalog.open(call.table)  # TableNotFoundError naming the table and the warehouse
            location = catalog.location(call.table)
            view = f"metatxn_changes_{call.table.database}_{call.table.table}_{secrets.token_hex(4)}"
            read_changes(spark, location, call.start, call.end).createOrReplaceTempView(view)
            views.append(view)
            text = text[:call.start_at] + f"`{view}`" + text[call.end_at:]
        yield text
    finally:
        for view in views if not keep else ():
            spark.catalog.dropTempView(view)
