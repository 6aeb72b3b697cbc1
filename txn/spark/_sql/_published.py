"""The warehouse's tables in Spark's own catalog: ``spark.table("db.t")`` and plain ``spark.sql``.

:func:`txn.spark.register` with a warehouse enters every table of it in Spark's session catalog
(``spark.catalog.createTable("db.t", source="metatxn", schema=..., path=...)``, the schema
tagged with the location; databases created as Spark databases), and
``txn.spark.sql``'s CREATE TABLE and ALTER TABLE enter the table they made or changed. Spark then
resolves the name itself and instantiates the ``metatxn`` source at every query, which plans the
latest snapshot (:mod:`.._located` says how the source finds the location; design/spark.md says
what Spark 4 permits).

The catalog keeps the schema it was given at entry: a schema changed by another process shows in
Spark's catalog once the table is entered again (``register`` again, or any ALTER through
``txn.spark.sql``). A name Spark's catalog already holds for a table metatxn did not enter (the
names entered are kept in the session's configuration) is left alone: its owner decides. A table
Spark cannot type (its schema has a column Spark has no type for) is not entered, with a
warning; ``txn.spark.sql`` still reads it by name.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from ... import InvalidOptionError, TxnError, open_storage
from .._located import located
from .._types import spark_schema
from ._catalog import DEFAULT_DATABASE, Catalog, TableName, is_identifier
from ._parse import Cursor, Token

log = logging.getLogger("metatxn")

#: The Spark runtime configuration key listing the names metatxn entered in Spark's catalog.
PUBLISHED_KEY = "spark.metatxn.sql.published"

_TABLE_FILE = "_timeline/table.json"


def _qualified(name: TableName) -> str:
    return f"spark_catalog.`{name.database}`.`{name.table}`"


def warehouse_tables(catalog: Catalog) -> list[TableName]:
    """Every table of the warehouse: ``<t>/`` and ``<db>.db/<t>/`` folders holding a table."""
    found = []
    for key in open_storage(catalog.warehouse).list("", recursive=True):
        if not key.endswith("/" + _TABLE_FILE):
            continue
        parts = key[:-len(_TABLE_FILE) - 1].split("/")
        # Names are lower-cased: a folder with capitals is no name's location.
        if any(part != part.lower() for part in parts):
            continue
        if len(parts) == 1 and is_identifier(parts[0]):
            found.append(TableName(DEFAULT_DATABASE, parts[0]))
        elif len(parts) == 2 and parts[0].endswith(".db") and is_identifier(parts[0][:-3]) \
                and is_identifier(parts[1]) and parts[0][:-3] != DEFAULT_DATABASE:
            found.append(TableName(parts[0][:-3], parts[1]))
    return sorted(set(found), key=str)


def _published(spark: Any) -> set[str]:
    return set(json.loads(spark.conf.get(PUBLISHED_KEY, None) or "[]"))


def _remember(spark: Any, names: set[str]) -> None:
    spark.conf.set(PUBLISHED_KEY, json.dumps(sorted(names)))


def publish(spark: Any, catalog: Catalog, name: TableName) -> bool:
    """Enter ``name`` in Spark's catalog at its location (again: the schema as it is now).

    False when Spark's catalog holds the name for a table metatxn did not enter (left alone).
    """
    published = _published(spark)
    qualified = _qualified(name)
    if name.database != DEFAULT_DATABASE:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS spark_catalog.`{name.database}`")
    if spark.catalog.tableExists(qualified):
        if str(name) not in published:
            return False
        spark.sql(f"DROP TABLE {qualified}")
    from pyspark.errors import PySparkException

    location = catalog.location(name)
    try:
        # The schema given, tagged here: Spark stores it without calling the source (no Python
        # worker), as it would store the tagged schema() of CREATE TABLE ... USING metatxn.
        schema = located(spark_schema(catalog.open(name).schema), location)
        spark.catalog.createTable(qualified, source="metatxn", schema=schema, path=location)
    except (PySparkException, TxnError) as exc:
        # A table Spark cannot type (its schema() refused: unsigned integers, times of day, ...)
        # stays reachable through txn.spark.sql; the statement that made it stands.
        _remember(spark, published - {str(name)})
        log.warning("metatxn table %s is not entered in Spark's catalog: %s", name,
                       str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return False
    _remember(spark, published | {str(name)})
    return True


def publish_warehouse(spark: Any, catalog: Catalog) -> list[TableName]:
    """Enter every table of the warehouse; names entered for another warehouse (an earlier
    ``register``) that this one lacks are removed from Spark's catalog. Returns those entered."""
    tables = warehouse_tables(catalog)
    current = {str(name) for name in tables}
    stale = _published(spark) - current
    for text in sorted(stale):
        database, table = text.split(".", 1)
        spark.sql(f"DROP TABLE IF EXISTS {_qualified(TableName(database, table))}")
    _remember(spark, _published(spark) - stale)
    return [name for name in tables if publish(spark, catalog, name)]


def _statement_table(statement: str, tokens: list[Token]) -> TableName | None:
    """The table a CREATE TABLE or ALTER TABLE names (None: none read)."""
    cursor = Cursor(statement, "CREATE TABLE or ALTER TABLE", tokens)
    if cursor.accept("ALTER"):
        if not cursor.accept("TABLE"):
            return None
    else:
        while not cursor.at_end() and not cursor.at_word("TABLE"):
            cursor.take()
        if not cursor.accept("TABLE"):
            return None
        if cursor.accept("IF"):
            cursor.accept("NOT")
            cursor.accept("EXISTS")
    try:
        return cursor.table_name()
    except InvalidOptionError:
        return None


def publish_statement_table(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> None:
    """After a CREATE TABLE or ALTER TABLE ``txn.spark.sql`` ran: enter its table in Spark's
    catalog again (created, or its schema changed)."""
    name = _statement_table(statement, tokens)
    if name is not None and catalog.exists(name):
        publish(spark, catalog, name)
