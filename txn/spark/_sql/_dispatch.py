"""``txn.spark.sql``: which statement is metatxn's, and who runs it.

Stream statements first (:mod:`._streams`), then by the statement's first words:

=============================================  ==============================================
``SHOW [HISTORY] SEGMENTS``                    :func:`._segments.show_segments`
``SHOW PARTITIONS t``                          metatxn's table: :func:`._segments.show_partitions`
``ALTER TABLE t COMPACT | ADD SEGMENT``        :func:`._segments.alter`; other ALTERs of a
                                               metatxn table: :mod:`._alter` (columns and
                                               properties; anything else refused)
``CLEAN FILES``                                :func:`._segments.clean`
``DELETE FROM TABLE t WHERE SEGMENT...``       :func:`._segments.delete_segments`
``DELETE FROM t``, ``UPDATE t``                metatxn's table: :mod:`._dml`
``MERGE INTO t``                               metatxn's table: :mod:`._merge` (a name no catalog
                                               has: TableNotFoundError)
``DESCRIBE HISTORY | DETAIL t``                :mod:`._describe` (Delta's columns)
``LOAD DATA``                                  metatxn's table (or any with OPTIONS): :mod:`._load`
``CREATE [...] TABLE ... STORED AS metatxn``   :mod:`._ddl` (EXTERNAL, TEMPORARY, OR REPLACE refused)
``INSERT INTO t``                              metatxn's table: :mod:`._insert`
``DROP TABLE t``                               metatxn's table: refused (not supported)
anything else                                  ``spark.sql``, metatxn tables it reads replaced
                                               by fresh views (:mod:`._select`; ``AS OF``
                                               clauses: :mod:`._travel`), and
                                               ``table_changes(...)`` calls by views of their
                                               change rows (:mod:`._changes`)
=============================================  ==============================================

"metatxn's table" means a table of that name exists in the warehouse; a statement about any
other table is Spark's, and reaches ``spark.sql`` as written (Spark's errors pass through).
Spark's errors while metatxn runs one of its own statements (analysis and runtime errors alike)
become InvalidOptionErrors quoting the statement (:func:`._parse.spark_errors`). A CREATE TABLE
or ALTER TABLE metatxn ran enters its table in Spark's own catalog again
(:mod:`._published`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ... import InvalidOptionError
from . import _ddl, _describe, _dml, _insert, _load, _merge, _segments
from ._catalog import Catalog, catalog_of
from ._parse import Cursor, Token, leading_words, quoting, spark_errors, tokenize, without_terminator
from ._published import publish_statement_table
from ._select import QUERY_WORDS, fresh_frame
from ._streams import run_stream_statement

Handler = Callable[[Any, Catalog, str, list[Token]], Any]

#: Statements by their first words (longest first), and who runs them; a handler returning
#: None hands the statement to Spark.
_ROUTES: list[tuple[tuple[str, ...], Handler]] = [
    (("SHOW", "HISTORY", "SEGMENTS"), _segments.show_segments),
    (("SHOW", "SEGMENTS"), _segments.show_segments),
    (("SHOW", "PARTITIONS"), _segments.show_partitions),
    (("ALTER", "TABLE"), _segments.alter),
    (("CLEAN", "FILES"), _segments.clean),
    (("DELETE", "FROM", "TABLE"), _segments.delete_segments),
    (("DELETE", "FROM"), _dml.delete),
    (("UPDATE",), _dml.update),
    (("MERGE", "INTO"), _merge.merge),
    (("DESCRIBE", "HISTORY"), _describe.describe_history),
    (("DESC", "HISTORY"), _describe.describe_history),
    (("DESCRIBE", "DETAIL"), _describe.describe_detail),
    (("DESC", "DETAIL"), _describe.describe_detail),
    (("LOAD", "DATA"), _load.load),
    (("CREATE",), _ddl.create),
    (("INSERT",), _insert.insert),
]


def _drop_table(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> None:
    cursor = Cursor(statement, "DROP TABLE of a Spark table (metatxn tables cannot be dropped by SQL)",
                    tokens)
    cursor.at = 2
    if cursor.accept("IF") and not cursor.accept("EXISTS"):
        return None  # not DROP TABLE IF EXISTS: Spark's to judge
    try:
        name = cursor.table_name()
    except InvalidOptionError:
        return None
    if catalog.exists(name):
        raise cursor.error(f"DROP TABLE is not supported for metatxn table {name}; remove its folder "
                           f"{catalog.location(name)!r} to drop it")
    return None


def sql(spark: Any, statement: str) -> Any:
    """Run one SQL statement: CarbonData's statements against metatxn tables, any other through
    ``spark.sql``; returns a DataFrame either way.

    Tables are named ``[db.]table`` in the warehouse :func:`txn.spark.register` was given (see
    design/sql.md for every statement, its answer and what is refused).

    Raises:
        InvalidOptionError: no warehouse was registered; a statement names a metatxn feature
            wrongly (the message quotes the statement and its expected form).
        TableNotFoundError: a CarbonData statement names a table the warehouse does not have.
        TxnError: what the operation itself raises (SegmentNotFoundError, SchemaMismatchError,
            CommitConflictError, ...), its message naming the statement.
    """
    if not isinstance(statement, str):
        raise InvalidOptionError(
            f"txn.spark.sql takes one SQL statement as a string, got {type(statement).__name__}")
    catalog = catalog_of(spark)
    text = without_terminator(statement)
    with quoting(text):
        with spark_errors(text):
            frame = run_stream_statement(spark, catalog, text)
        if frame is not None:
            return frame
        tokens = tokenize(text)
        words = tuple(leading_words(tokens))
        for prefix, handler in _ROUTES:
            if words[:len(prefix)] == prefix:
                with spark_errors(text):
                    frame = handler(spark, catalog, text, tokens)
                if frame is not None:
                    if prefix[0] in ("CREATE", "ALTER"):
                        publish_statement_table(spark, catalog, text, tokens)
                    return frame
                break
        if words[:2] == ("DROP", "TABLE"):
            _drop_table(spark, catalog, text, tokens)
        if words and words[0] in QUERY_WORDS:
            return fresh_frame(spark, catalog, text)
    return spark.sql(text)
