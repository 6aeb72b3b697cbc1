"""Table names for ``txn.spark.sql``: ``db.table`` mapped to a folder under a warehouse.

The warehouse is remembered in the Spark session's runtime configuration (key
:data:`WAREHOUSE_KEY`), so it lives exactly as long as the session and every caller holding the
session finds it; :func:`txn.spark.register` with ``warehouse=`` sets it.

The layout is Spark's own: tables of the ``default`` database at ``<warehouse>/<table>``, others
at ``<warehouse>/<db>.db/<table>``. Database and table names are what Spark's catalog takes as
unquoted identifiers (letters, digits and underscores; backticks allowed around them), so a name
is always one folder inside the warehouse, and a temporary view named after it is a valid name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ... import InvalidOptionError, Table, TableNotFoundError, open_table
from .._paths import absolute_location

#: The Spark runtime configuration key holding the warehouse of ``txn.spark.sql``.
WAREHOUSE_KEY = "spark.metatxn.sql.warehouse"
#: A location that starts with a URI scheme (two characters at least: ``C:`` is a drive).

DEFAULT_DATABASE = "default"

# One identifier: plain or backticked; what is between backticks is checked by TableName.
_PART = r"(?:`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_]*)"
_NAME = re.compile(rf"\s*({_PART})(?:\s*\.\s*({_PART}))?\s*")

#: What a database or table name may be: Spark's unquoted identifiers. Anything else either
#: leaves the warehouse (``..``, ``/``) or cannot name the temporary views queries read through.
IDENTIFIER = re.compile(r"[A-Za-z0-9_]+")
NAME_FORM = "letters, digits and underscores ([A-Za-z0-9_]+), as Spark's catalog takes unquoted"


def is_identifier(part: str) -> bool:
    return IDENTIFIER.fullmatch(part) is not None


def name_problem(database: str, table: str) -> str | None:
    """Why ``database.table`` cannot name a metatxn table (None: it can)."""
    for kind, part in (("database", database), ("table", table)):
        if not is_identifier(part):
            return f"{part!r} is not a valid {kind} name; expected {NAME_FORM}"
    return None


@dataclass(frozen=True)
class TableName:
    """A table's name, lower-cased: names are case-insensitive, as in Spark and CarbonData.

    Raises InvalidOptionError for a part that is not an identifier (``[A-Za-z0-9_]+``).
    """

    database: str
    table: str

    def __post_init__(self) -> None:
        problem = name_problem(self.database, self.table)
        if problem is not None:
            raise InvalidOptionError(problem)

    def __str__(self) -> str:
        return f"{self.database}.{self.table}"


def _unquote(part: str) -> str:
    return part[1:-1].replace("``", "`") if part.startswith("`") else part


@dataclass(frozen=True)
class Catalog:
    """Where each named table lives under ``warehouse``."""

    warehouse: str

    def name(self, text: str) -> TableName:
        """Parse ``t``, ``db.t`` or ``` `db`.`t` ``` (the database defaults to ``default``)."""
        match = _NAME.fullmatch(text)
        if match is None:
            raise InvalidOptionError(
                f"{text!r} is not a table name; expected table, db.table or `db`.`table` "
                f"({NAME_FORM})")
        first, second = match.group(1), match.group(2)
        if second is None:
            return TableName(DEFAULT_DATABASE, _unquote(first).lower())
        return TableName(_unquote(first).lower(), _unquote(second).lower())

    def location(self, name: TableName) -> str:
        root = self.warehouse.rstrip("/")
        if name.database == DEFAULT_DATABASE:
            return f"{root}/{name.table}"
        return f"{root}/{name.database}.db/{name.table}"

    def open(self, name: TableName) -> Table:
        location = self.location(name)
        try:
            return open_table(location)
        except TableNotFoundError:
            raise TableNotFoundError(location, f"table {name} does not exist (the warehouse "
                                               f"{self.warehouse!r} has no table there)") from None

    def exists(self, name: TableName) -> bool:
        try:
            self.open(name)
        except TableNotFoundError:
            return False
        return True


def set_warehouse(spark: Any, warehouse: str) -> Catalog:
    """Make ``warehouse`` the one ``txn.spark.sql`` maps table names into, for ``spark``."""
    if not isinstance(warehouse, str) or not warehouse.strip():
        raise InvalidOptionError(f"warehouse must be a non-empty location (a path or URI), got {warehouse!r}")
    # Spark's Python workers run in folders of their own: a relative path would name another
    # folder there than in this process.
    warehouse = absolute_location(warehouse)
    spark.conf.set(WAREHOUSE_KEY, warehouse)
    return Catalog(warehouse)


def catalog_of(spark: Any) -> Catalog:
    """The catalog :func:`txn.spark.register` set up for ``spark``."""
    warehouse = spark.conf.get(WAREHOUSE_KEY, None)
    if not warehouse:
        raise InvalidOptionError("txn.spark.sql has no warehouse to find tables in: call "
                                 "txn.spark.register(spark, warehouse=...) first")
    return Catalog(str(warehouse))
