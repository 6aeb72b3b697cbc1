"""CarbonData's segment statements: SHOW SEGMENTS, COMPACT, CLEAN FILES, ADD SEGMENT, DELETE
SEGMENT and SHOW PARTITIONS, read by the hand grammar (:mod:`._parse`) and run through the
table's Python API (compaction through ``txn.spark.compact``: the rewrite runs on executors).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ... import InvalidOptionError, Segment, Table
from .._compact import compact
from ._alter import alter_table
from ._catalog import Catalog
from ._frames import (
    freed_size,
    no_result,
    session_zone,
    strings_frame,
    timestamp_text,
)
from ._parse import Cursor, Token, boolean_option
from ._select import fresh_frame

SHOW_SEGMENTS = ("SHOW [HISTORY] SEGMENTS FOR TABLE [db.]table [LIMIT n] [AS <query of "
                 "table_segments>]  (or SHOW [HISTORY] SEGMENTS ON [db.]table ...)")
COMPACT = ("ALTER TABLE [db.]table COMPACT 'MINOR' | 'MAJOR' | 'CUSTOM' WHERE SEGMENT.ID IN (id, ...) "
           "| 'CLOSE_STREAMING'")
ADD_SEGMENT = ("ALTER TABLE [db.]table ADD SEGMENT OPTIONS('path'='<folder>', "
               "'format'='parquet|orc|csv|json' [, 'partition'='column:type, ...'])")
ALTER = f"{COMPACT}  or  {ADD_SEGMENT}"
CLEAN = ("CLEAN FILES FOR TABLE [db.]table [OPTIONS('force'='true', 'dryrun'='true', "
         "'statistics'='false', 'stale_inprogress'='true')]")
DELETE_SEGMENTS = ("DELETE FROM TABLE [db.]table WHERE SEGMENT.ID IN (id, ...)  or  "
                   "DELETE FROM TABLE [db.]table WHERE SEGMENT.STARTTIME BEFORE 'yyyy-MM-dd HH:mm:ss'")
SHOW_PARTITIONS = "SHOW PARTITIONS [db.]table [PARTITION (column='value', ...)]"

#: CarbonData's SHOW SEGMENTS columns (2.x), in its order.
SEGMENT_COLUMNS = ("ID", "Status", "Load Start Time", "Load Time Taken", "Partition", "Data Size",
                   "Index Size", "File Format")
#: What SHOW HISTORY SEGMENTS adds at the end: CarbonData's ``Visibility`` (false once CLEAN FILES
#: removed the segment's files) and when that clean ran (``NA`` while visible).
HISTORY_COLUMNS = ("Visibility", "Cleaned Time")

_KINDS = ("MINOR", "MAJOR", "CUSTOM", "CLOSE_STREAMING")
#: CarbonData compaction types metatxn has no counterpart for.
_CARBON_ONLY_KINDS = ("SEGMENT_INDEX", "STREAMING", "UPGRADE_SEGMENT")
_ADD_SEGMENT_OPTIONS = ("path", "format", "partition")
_CLEAN_OPTIONS = ("force", "dryrun", "statistics", "stale_inprogress")
_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d",
                 "%Y-%m-%dT%H:%M:%S.%f", "%Y-%m-%dT%H:%M:%S", "%Y/%m/%d %H:%M:%S", "%Y/%m/%d")
_HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
#: The view of ``SHOW SEGMENTS ... AS <query>`` (CarbonData's ``<table>_segments``).
_SEGMENTS_VIEW = ("id string, status string, loadStartTime timestamp, timeTakenMs bigint, "
                  "partitions array<string>, dataSize bigint, indexSize bigint, mergedToId string, "
                  "format string, path string, loadEndTime timestamp")


# -- SHOW SEGMENTS ---------------------------------------------------------------------------------

def _partition_cell(partitions: list[str]) -> str:
    if not partitions:
        return "NA"
    first = "{" + partitions[0].replace("/", ",") + "}"
    return first + (", ..." if len(partitions) > 1 else "")


def show_segments(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any:
    cursor = Cursor(statement, SHOW_SEGMENTS, tokens)
    cursor.expect("SHOW")
    history = cursor.accept("HISTORY")
    cursor.expect("SEGMENTS")
    if cursor.accept("FOR"):
        cursor.expect("TABLE")
    elif not cursor.accept("ON"):
        raise cursor.error("expected FOR TABLE or ON before the table name")
    name = cursor.table_name()
    limit = cursor.integer("the LIMIT") if cursor.accept("LIMIT") else None
    if cursor.at_word("WITH"):
        raise cursor.error("SHOW SEGMENTS ... WITH STAGE is not supported: metatxn has no stage files")
    query = None
    if cursor.accept("AS"):
        start = cursor.take().start
        query = statement[start:]
    else:
        cursor.end()
    table = catalog.open(name)
    found = table.segments(history=history)
    shown = found[:limit] if limit is not None else found
    if query is not None:
        return _segments_query(spark, catalog, cursor, name.table, shown, query)
    zone = session_zone(spark)
    rows = [(s.id, s.status, timestamp_text(s.load_start, zone), s.load_time_taken,
             _partition_cell(s.partitions), s.data_size_text, s.index_size_text, s.format,
             *((str(s.visible).lower(), timestamp_text(s.cleaned, zone)) if history else ()))
            for s in shown]
    return strings_frame(spark, (*SEGMENT_COLUMNS, *(HISTORY_COLUMNS if history else ())), rows)


def _segments_query(spark: Any, catalog: Catalog, cursor: Cursor, table: str, shown: list[Segment],
                    query: str) -> Any:
    """``SHOW SEGMENTS FOR TABLE t AS <query>``: the query runs over the view ``t_segments``
    (CarbonData's columns, typed as its documentation says), dropped afterwards."""
    view = f"{table}_segments"
    if spark.catalog.tableExists(view):
        raise cursor.error(f"{view} already exists, can not show segment by query")
    rows = [(s.id, s.status, s.load_start,
             round((s.load_end - s.load_start).total_seconds() * 1000) if s.load_start and s.load_end else -1,
             list(s.partitions), s.data_size, -1 if s.external else s.index_size, s.merged_to or "NA",
             s.format, s.path or "NA", s.load_end) for s in shown]
    spark.createDataFrame(rows, _SEGMENTS_VIEW).createOrReplaceTempView(view)
    try:
        return fresh_frame(spark, catalog, query)
    finally:
        spark.catalog.dropTempView(view)


# -- ALTER TABLE: COMPACT and ADD SEGMENT ----------------------------------------------------------

def alter(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """ALTER TABLE ... COMPACT / ADD SEGMENT; other ALTERs of a metatxn table are its shape's and
    properties' (:mod:`._alter`), of Spark's tables handed on (None)."""
    cursor = Cursor(statement, ALTER, tokens)
    cursor.expect("ALTER")
    cursor.expect("TABLE")
    name = cursor.table_name()
    if cursor.accept("COMPACT"):
        cursor.form = COMPACT
        return _compact(spark, catalog, cursor, name)
    if cursor.at_word("ADD") and (following := cursor.peek(1)) is not None and following.is_word("SEGMENT"):
        cursor.form = ADD_SEGMENT
        cursor.at += 2
        return _add_segment(spark, catalog, cursor, name)
    if catalog.exists(name):
        return alter_table(spark, catalog, statement, tokens)
    return None


def _compact(spark: Any, catalog: Catalog, cursor: Cursor, name: Any) -> Any:
    kind = cursor.string("the compaction type").strip().upper()
    if kind in _CARBON_ONLY_KINDS:
        raise cursor.error(f"compaction type {kind!r} is CarbonData's only; metatxn has "
                           f"{', '.join(repr(k) for k in _KINDS)}")
    if kind not in _KINDS:
        raise cursor.error(f"unknown compaction type {kind!r}")
    segments = None
    if cursor.accept("WHERE"):
        if kind != "CUSTOM":
            raise cursor.error(f"custom segments are not supported when doing {kind} compaction")
        _segment_field(cursor, "ID")
        cursor.expect("IN")
        segments = cursor.segment_ids()
    elif kind == "CUSTOM":
        raise cursor.error("segment ids should not be empty when doing CUSTOM compaction")
    cursor.end()
    table = catalog.open(name)
    compact(spark, table.uri, kind.lower(), segments=segments)
    return no_result(spark)


def _segment_field(cursor: Cursor, field: str) -> None:
    cursor.expect("SEGMENT")
    cursor.expect_symbol(".")
    cursor.expect(field)


def _add_segment(spark: Any, catalog: Catalog, cursor: Cursor, name: Any) -> Any:
    cursor.expect("OPTIONS")
    options = cursor.options()
    cursor.end()
    unknown = sorted(set(options) - set(_ADD_SEGMENT_OPTIONS))
    if unknown:
        raise cursor.error(f"unknown option(s) {unknown}; ADD SEGMENT takes {list(_ADD_SEGMENT_OPTIONS)}")
    path = options.get("path", "").strip()
    if not path:
        raise cursor.error("option 'path' is mandatory and cannot be empty")
    table = catalog.open(name)
    table.add_segment(path, options.get("format", "parquet").strip().lower(),
                      partition=options.get("partition"))
    return no_result(spark)


# -- CLEAN FILES -----------------------------------------------------------------------------------

def clean(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any:
    cursor = Cursor(statement, CLEAN, tokens)
    cursor.expect("CLEAN")
    cursor.expect("FILES")
    cursor.expect("FOR")
    cursor.expect("TABLE")
    name = cursor.table_name()
    options = cursor.options() if cursor.accept("OPTIONS") else {}
    cursor.end()
    unknown = sorted(set(options) - set(_CLEAN_OPTIONS))
    if unknown:
        raise cursor.error(f"unknown option(s) {unknown}; CLEAN FILES takes {list(_CLEAN_OPTIONS)}")
    force = boolean_option(cursor, options, "force", False)
    dry_run = boolean_option(cursor, options, "dryrun", False)
    statistics = boolean_option(cursor, options, "statistics", True)
    # metatxn never cleans a write still running, and always cleans the files of failed ones:
    # CarbonData's 'stale_inprogress' choice does not arise (the option is checked, not used).
    boolean_option(cursor, options, "stale_inprogress", False)
    table = catalog.open(name)
    # Size Freed counts what left storage; files moved to the trash (orphans: CarbonData's stale
    # segments) still take their space, so they count in the trash, not as freed.
    if dry_run:
        trash_before = table.trash()
        result = table.clean(dry_run=True, force=force)
        expiring = sum(size for path, size in trash_before.items() if path in set(result.files))
        remaining = sum(trash_before.values()) - expiring + result.trashed_bytes
        return strings_frame(spark, ("Size To Be Freed", "Trash Data Remaining"),
                             [(freed_size(result.freed_bytes), freed_size(remaining))])
    result = table.clean(force=force)
    if not statistics:
        return no_result(spark)
    return strings_frame(spark, ("Size Freed",), [(freed_size(result.freed_bytes),)])


# -- DELETE SEGMENT --------------------------------------------------------------------------------

def delete_segments(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any:
    cursor = Cursor(statement, DELETE_SEGMENTS, tokens)
    for word in ("DELETE", "FROM", "TABLE"):
        cursor.expect(word)
    name = cursor.table_name()
    cursor.expect("WHERE")
    cursor.expect("SEGMENT")
    cursor.expect_symbol(".")
    field = cursor.expect("ID", "STARTTIME")
    if field == "ID":
        cursor.expect("IN")
        ids = cursor.segment_ids()
        cursor.end()
        catalog.open(name).delete_segments(ids)
        return no_result(spark)
    cursor.expect("BEFORE")
    text = cursor.string("the load start time")
    cursor.end()
    before = _moment(cursor, text, spark)
    catalog.open(name).delete_segments(before=before)
    return no_result(spark)


def _moment(cursor: Cursor, text: str, spark: Any) -> datetime:
    """A load start time, in the Spark session's time zone (as CarbonData reads it)."""
    for pattern in _TIME_FORMATS:
        try:
            naive = datetime.strptime(text.strip(), pattern)
        except ValueError:
            continue
        return naive.replace(tzinfo=session_zone(spark))
    raise cursor.error(f"invalid load start time format: {text!r}")


# -- SHOW PARTITIONS -------------------------------------------------------------------------------

def _partition_value(cursor: Cursor, table: Table, column: str, text: str) -> object:
    """A PARTITION value as a value of the column's type (``__HIVE_DEFAULT_PARTITION__``: null)."""
    if text == _HIVE_NULL:
        return None
    try:
        return table.partition_value(column, text)
    except InvalidOptionError:
        data_type = table.schema.field(column).type
        raise cursor.error(f"partition value {text!r} of column {column!r} is not a {data_type}") from None


def show_partitions(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """SHOW PARTITIONS of a metatxn table (None: Spark's table)."""
    cursor = Cursor(statement, SHOW_PARTITIONS, tokens)
    cursor.expect("SHOW")
    cursor.expect("PARTITIONS")
    name = cursor.table_name()
    if not catalog.exists(name):
        return None
    wanted = cursor.partition_spec() if cursor.accept("PARTITION") else {}
    cursor.end()
    table = catalog.open(name)
    if not table.partition_by:
        raise cursor.error(f"SHOW PARTITIONS is not allowed on table {name}: it is not partitioned")
    unknown = sorted(set(wanted) - set(table.partition_by))
    if unknown:
        raise cursor.error(f"{unknown} are not partition columns of {name}; they are {table.partition_by}")
    # Values are compared as the folders name them: the given text read as the column's type
    # (flag='TRUE' is the folder flag=true), both rendered as the writer names its folders.
    folders = {column: table.partition_folder({column: _partition_value(cursor, table, column, text)})
               for column, text in wanted.items()}
    rows = []
    for values in table.partitions():
        full = {c: values.get(c) for c in table.partition_by}
        if all(table.partition_folder({c: full[c]}) == folder for c, folder in folders.items()):
            rows.append((table.partition_folder(full),))
    return strings_frame(spark, ("partition",), rows)
