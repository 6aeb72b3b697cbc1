"""Queries over metatxn tables by name: each table read at its latest snapshot, statement by
statement.

Spark resolves a name through its own catalog, which knows nothing of the warehouse's tables.
So just before a statement runs, each metatxn table it reads (found by sqlglot, CTE names and
write targets left out) gets a fresh temporary view over ``txn.spark.read`` of its latest
snapshot, under a name of its own, and the statement's text is rewritten to read the view
instead, only where the table is named: the rest of the statement reaches Spark exactly as it
was written. A view pinned when it was created (``txn.spark.create_view``) would go on showing
that snapshot; these views live for one statement and are dropped once Spark has analysed it
(the returned DataFrame keeps the plan, that is, the snapshot's file list).

A table read ``VERSION AS OF`` / ``TIMESTAMP AS OF`` gets a view of that snapshot instead, the
clause replaced along with the name (:mod:`._travel`); one statement may read several snapshots
of a table.

A table of the statement keeps its name as an alias (``FROM orders`` reads
``FROM `metatxn_..._orders` AS `orders```), so ``orders.o_custkey`` still resolves; a name
with a database (``FROM sales.orders``) can be used as ``orders.col``, not ``sales.orders.col``.
``CREATE VIEW`` and ``CACHE TABLE name AS <query>`` over metatxn tables keep their fresh views:
the view (or cached table) they create is pinned to those snapshots, as a view made by
``txn.spark.create_view`` is, and would break if its views were dropped. ``CACHE TABLE t`` of a
metatxn table itself is refused: the next statement reads ``t`` afresh, never from that cache.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlglot import exp

from ... import InvalidOptionError
from .._read import read
from ._catalog import Catalog, TableName
from ._changes import change_views
from ._travel import CLAUSE, as_of, travel_of
from ._tree import name_of, parse

#: First words of statements that may read tables by name: parsed to find metatxn tables.
QUERY_WORDS = frozenset({"SELECT", "WITH", "FROM", "VALUES", "TABLE", "(", "INSERT", "CREATE", "CACHE",
                         "DESCRIBE", "DESC"})


def _targets(tree: exp.Expression) -> set[int]:
    """Tables a statement writes or creates, not reads (by node identity)."""
    targets: set[int] = set()
    for node in tree.find_all(exp.Create, exp.Insert, exp.Drop, exp.Cache):
        if isinstance(node, exp.Cache) and node.args.get("expression") is None:
            continue  # CACHE TABLE t reads t
        target = node.this
        if isinstance(target, exp.Schema):
            target = target.this
        if isinstance(target, exp.Table):
            targets.add(id(target))
    return targets


def references(tree: exp.Expression, catalog: Catalog) -> list[tuple[exp.Table, TableName]]:
    """The metatxn tables the statement reads, in the order they appear."""
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    targets = _targets(tree)
    found = []
    known: dict[TableName, bool] = {}
    for table in tree.find_all(exp.Table):
        name = name_of(table)
        if name is None or id(table) in targets:
            continue
        if table.args.get("db") is None and name.table in ctes:
            continue
        if name not in known:
            known[name] = catalog.exists(name)
        if known[name]:
            found.append((table, name))
    return found


def _span(table: exp.Table) -> tuple[int, int] | None:
    """Where the table's name is in the statement's text (None: sqlglot did not say)."""
    parts = [p for p in (table.args.get("db"), table.this) if isinstance(p, exp.Identifier)]
    starts = [p.meta.get("start") for p in parts]
    ends = [p.meta.get("end") for p in parts]
    if any(s is None for s in starts) or any(e is None for e in ends):
        return None
    return min(s for s in starts if s is not None), max(e for e in ends if e is not None) + 1


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _rewritten(text: str, found: list[tuple[exp.Table, TableName]],
               views: dict[tuple[TableName, Any], str]) -> str:
    spans = []
    for table, name in found:
        span = _span(table)
        travel = travel_of(table, text)
        if span is not None and travel is not None:
            # The AS OF clause goes with the name: the view is of that snapshot.
            clause = CLAUSE.match(text, span[1])
            if clause is None:
                raise InvalidOptionError(f"cannot locate the AS OF clause of table {name}, in: {text!r}")
            span = span[0], clause.end()
        if span is None:
            # Printing the statement from its tree instead could change what its literals mean
            # (sqlglot prints 'it''s' as CONCAT('it', 's')): the text is Spark's as written, or
            # nothing.
            raise InvalidOptionError(f"cannot locate table {name} in the statement, in: {text!r}\n"
                                     "Help: name the table as [db.]table")
        # Only a FROM or JOIN item takes an alias (not DESCRIBE's table); Spark puts TABLESAMPLE
        # before the alias, so a sampled table keeps no alias of its name.
        aliased = isinstance(table.parent, (exp.From, exp.Join)) and not table.alias \
            and not table.args.get("sample")
        alias = f" AS {_quoted(name.table)}" if aliased else ""
        spans.append((span, _quoted(views[(name, travel)]) + alias))
    for (start, end), replacement in sorted(spans, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text


def _keeps_views(tree: exp.Expression) -> bool:
    """Whether the statement makes something that reads its views after it ran: a view, or a
    cached table of a query."""
    if isinstance(tree, exp.Create):
        return str(tree.args.get("kind", "")).upper() == "VIEW"
    return isinstance(tree, exp.Cache) and tree.args.get("expression") is not None


@contextmanager
def fresh_views(spark: Any, catalog: Catalog, text: str) -> Iterator[str]:
    """``text`` reading fresh views of the metatxn tables it names, and of the change feeds its
    ``table_changes(...)`` calls read (:mod:`._changes`); dropped on exit, unless the statement
    creates a view or a cached table over them."""
    tree = parse(text) if "table_changes" in text.lower() else None
    keep = tree is not None and _keeps_views(tree)
    with change_views(spark, catalog, text, keep=keep) as changed, _table_views(spark, catalog, changed) \
            as rewritten:
        yield rewritten


@contextmanager
def _table_views(spark: Any, catalog: Catalog, text: str) -> Iterator[str]:
    tree = parse(text)
    found = references(tree, catalog) if tree is not None else []
    if tree is None or not found:
        yield text
        return
    if isinstance(tree, exp.Cache) and tree.args.get("expression") is None:
        raise InvalidOptionError(
            f"CACHE TABLE of metatxn table {found[0][1]} is not supported: each statement reads it "
            f"at its latest snapshot, never from a cache, in: {text!r}\nExpected: CACHE TABLE name "
            f"AS SELECT ... FROM {found[0][1].table} (a cached snapshot under a name of its own)")
    views: dict[tuple[TableName, Any], str] = {}
    try:
        for table, name in found:
            travel = travel_of(table, text)
            if (name, travel) not in views:
                view = f"metatxn_{name.database}_{name.table}_{secrets.token_hex(4)}"
                when = None if travel is None else as_of(spark, catalog.open(name), travel)
                read(spark, catalog.location(name), as_of=when).createOrReplaceTempView(view)
                views[(name, travel)] = view
        yield _rewritten(text, found, views)
    finally:
        for view in views.values() if not _keeps_views(tree) else ():
            spark.catalog.dropTempView(view)


def fresh_frame(spark: Any, catalog: Catalog, text: str) -> Any:
    """``spark.sql(text)`` with every metatxn table it reads at its latest snapshot."""
    with fresh_views(spark, catalog, text) as rewritten:
        return spark.sql(rewritten)
