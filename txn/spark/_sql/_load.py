"""LOAD DATA INPATH: a file or folder read by Spark, written as one new segment by the executors.

``LOAD DATA [LOCAL] INPATH 'path' [OVERWRITE] INTO TABLE t [PARTITION (col='v', ...)]
[OPTIONS(...)]``, read by the hand grammar. The source's format is the option ``'FORMAT'``
(``csv``, ``parquet``, ``orc``, ``json``; metatxn's own option) or else the path's extension
(``.parquet``, ``.orc``, ``.json``/``.jsonl``; anything else, a folder included, is CSV, what
CarbonData loads). CSV options are CarbonData's:

* ``DELIMITER`` (default ``,``), ``QUOTECHAR`` (``"``), ``ESCAPECHAR`` (``\\``),
  ``COMMENTCHAR`` (none), ``MULTILINE`` (``false``);
* ``HEADER``: whether the file's first line names its columns; ``true`` unless ``FILEHEADER``
  is given. ``FILEHEADER='a,b,c'`` names the columns of a file without one (with
  ``HEADER='true'`` it is refused, as CarbonData refuses it); ``HEADER='false'`` alone means the
  file has the table's columns in the table's order.

Every format: the source's columns are matched to the table's by name (case-insensitive); each
table column must be there (or given by ``PARTITION``). A CSV column the table lacks (named by
the file's header line or by ``FILEHEADER``) is ignored, as CarbonData ignores it; in the other
formats it is refused. A column ``PARTITION`` gives a static value is taken from ``PARTITION``
even when the file holds it too (CarbonData: the static value wins).

Values are converted to the column types by Spark (``DATEFORMAT`` and ``TIMESTAMPFORMAT`` give
Spark datetime patterns for text). A value that does not convert makes its row a bad record;
CarbonData's bad-records options say what happens to it:

* ``BAD_RECORDS_ACTION``: ``FAIL`` (the default, as CarbonData's: nothing is written, the error
  names the first bad record, its column and value; one extra pass over the source finds it),
  ``FORCE`` (the value becomes null), ``IGNORE`` (the row is skipped) or ``REDIRECT`` (the row is
  skipped and written, with the values the source held, to a CSV file under
  ``BAD_RECORD_PATH``);
* ``BAD_RECORD_PATH``: the folder (a path or URL, written through the storage layer) of the
  bad records, as ``<database>/<table>/<load time>_<token>/bad_records.csv``; required by
  ``REDIRECT``;
* ``BAD_RECORDS_LOGGER_ENABLE`` (``false``): with ``true`` each bad record is also described
  (row, column, value, expected type) in ``bad_records.log`` next to it under
  ``BAD_RECORD_PATH`` (without a path, the count is logged);
* ``IS_EMPTY_DATA_BAD_RECORD``: only ``false`` (the default): an empty value loads as null.

Each LOAD is one commit: a new segment, written through ``txn.spark.write``. ``OVERWRITE`` of an
unpartitioned table replaces its whole content; of a partitioned table, as INSERT OVERWRITE,
only the partitions the file's rows go to (with every partition column given by ``PARTITION``:
that partition). The answer is CarbonData's ``Segment ID``. The source is read to completion
(pinned with ``localCheckpoint``) before the commit begins, so a source Spark cannot read changes
nothing; a source of no rows (an empty file, a header alone) commits nothing and answers no row
(except an OVERWRITE of a whole table or a named partition, which it empties).
"""

from __future__ import annotations

import csv
import io
import logging
import posixpath
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ... import SchemaMismatchError, open_storage
from .._types import spark_schema
from .._write import write
from ._catalog import Catalog
from ._frames import strings_frame
from ._insert import overwrite_partitions
from ._parse import Cursor, Token, boolean_option, spark_message

log = logging.getLogger("metatxn")

FORM = ("LOAD DATA [LOCAL] INPATH 'path' [OVERWRITE] INTO TABLE [db.]table "
        "[PARTITION (column='value', ...)] [OPTIONS('DELIMITER'=',', 'QUOTECHAR'='\"', "
        "'HEADER'='true|false', 'FILEHEADER'='a,b,c', 'FORMAT'='csv|parquet|orc|json', ...)]")

_CSV_ONLY = ("delimiter", "quotechar", "escapechar", "commentchar", "header", "fileheader")
_ANY_FORMAT = ("format", "dateformat", "timestampformat", "bad_records_action", "bad_record_path",
               "bad_records_logger_enable", "is_empty_data_bad_record")
#: Options of text sources only (CSV's and JSON's records may span lines).
_TEXT_ONLY = ("multiline",)
_FORMATS = ("csv", "parquet", "orc", "json")
_EXTENSIONS = {".parquet": "parquet", ".orc": "orc", ".json": "json", ".jsonl": "json"}
_ACTIONS = ("FAIL", "FORCE", "IGNORE", "REDIRECT")
#: CSV options: CarbonData's name, Spark's name, CarbonData's default (None: not set).
_CSV_DEFAULTS: tuple[tuple[str, str, str | None], ...] = (
    ("delimiter", "sep", ","), ("quotechar", "quote", '"'), ("escapechar", "escape", "\\"),
    ("commentchar", "comment", None))


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def load(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """LOAD DATA into a metatxn table; None when it is Spark's (Hive's) LOAD of its own table."""
    cursor = Cursor(statement, FORM, tokens)
    cursor.expect("LOAD")
    cursor.expect("DATA")
    cursor.accept("LOCAL")
    cursor.expect("INPATH")
    path = cursor.string("the input path")
    overwrite = cursor.accept("OVERWRITE")
    cursor.expect("INTO")
    cursor.expect("TABLE")
    name = cursor.table_name()
    static = cursor.partition_spec() if cursor.accept("PARTITION") else {}
    options = cursor.options() if cursor.accept("OPTIONS") else {}
    cursor.end()
    if not options and not catalog.exists(name):
        return None
    table = catalog.open(name)
    source_format = _source_format(cursor, path, options)
    allowed = list(_ANY_FORMAT) + (list(_CSV_ONLY) if source_format == "csv" else []) + \
        (list(_TEXT_ONLY) if source_format in ("csv", "json") else [])
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise cursor.error(f"unknown option(s) {unknown} for a {source_format} source; "
                           f"LOAD DATA takes {allowed}")
    bad = _bad_records(cursor, options)
    types = {f.name: f.dataType for f in spark_schema(table.schema).fields}
    columns = {c.lower(): c for c in table.schema.names}
    for column in static:
        if column not in columns or columns[column] not in table.partition_by:
            raise cursor.error(f"PARTITION names {column!r}, which is not a partition column of {name} "
                               f"({table.partition_by or 'none'})")
    from_file = [c for c in table.schema.names if c.lower() not in static]
    source = _read(spark, cursor, path, source_format, options, from_file, types)
    selected = _converted(cursor, source, columns, static, types, options, source_format)
    frame = _checked(cursor, selected, bad, path, name)
    values = _static_values(spark, {columns[c]: v for c, v in static.items()}, types)
    scope = overwrite_partitions(table.partition_by, values) if overwrite else None
    if (not overwrite or scope == "dynamic") and frame.isEmpty():
        return strings_frame(spark, ("Segment ID",), [])
    commit = write(frame, table.uri, mode="overwrite" if overwrite else "append", partitions=scope)
    return strings_frame(spark, ("Segment ID",), [(commit.segment,)] if commit is not None else [])


@dataclass(frozen=True)
class BadRecords:
    """What LOAD does with a row whose value does not convert (CarbonData's options)."""

    action: str
    path: str | None
    logged: bool


def _bad_records(cursor: Cursor, options: dict[str, str]) -> BadRecords:
    action = options.get("bad_records_action", "FAIL").strip().upper()
    if action not in _ACTIONS:
        raise cursor.error(f"'BAD_RECORDS_ACTION' must be one of {list(_ACTIONS)}, got {action!r}")
    path = options.get("bad_record_path")
    if path is not None and not path.strip():
        raise cursor.error("'BAD_RECORD_PATH' cannot be empty; give the folder bad records go to")
    if action == "REDIRECT" and path is None:
        raise cursor.error("'BAD_RECORDS_ACTION'='REDIRECT' writes the bad records to 'BAD_RECORD_PATH'; "
                           "give it (a folder path or URL), or use 'IGNORE' to skip them unwritten")
    if boolean_option(cursor, options, "is_empty_data_bad_record", False):
        raise cursor.error("'IS_EMPTY_DATA_BAD_RECORD'='true' is not supported: an empty value loads "
                           "as null; load with 'false' (the default), then DELETE the rows whose "
                           "column is null")
    return BadRecords(action, path.strip() if path else None,
                      boolean_option(cursor, options, "bad_records_logger_enable", False))


def _static_values(spark: Any, static: dict[str, str], types: dict[str, Any]) -> dict[str, Any]:
    """PARTITION's values as Spark converts them, as Arrow values (checked in ``_converted``)."""
    if not static:
        return {}
    converted = ", ".join(f"try_cast({_literal(value)} AS {types[column].simpleString()}) AS "
                          f"{_quoted(column)}" for column, value in static.items())
    row: dict[str, Any] = spark.sql(f"SELECT {converted}").toArrow().to_pylist()[0]
    return row


def _source_format(cursor: Cursor, path: str, options: dict[str, str]) -> str:
    given = options.get("format")
    if given is not None:
        if given.strip().lower() not in _FORMATS:
            raise cursor.error(f"'FORMAT' must be one of {list(_FORMATS)}, got {given!r}")
        return given.strip().lower()
    extension = posixpath.splitext(path.rstrip("/"))[1].lower()
    return _EXTENSIONS.get(extension, "csv")


def _read(spark: Any, cursor: Cursor, path: str, source_format: str, options: dict[str, str],
          from_file: list[str], types: dict[str, Any]) -> Any:
    from pyspark.errors import AnalysisException
    from pyspark.sql.types import StringType, StructField, StructType

    reader = spark.read.format(source_format)
    if boolean_option(cursor, options, "multiline", False):
        reader = reader.option("multiLine", "true")
    if source_format == "csv":
        file_header = options.get("fileheader")
        header = boolean_option(cursor, options, "header", file_header is None)
        if header and file_header is not None:
            raise cursor.error("'HEADER'='true' says the file names its columns: 'FILEHEADER' must not "
                               "be given with it")
        for option, spark_option, default in _CSV_DEFAULTS:
            value = options.get(option, default)
            if value is not None:
                if value == "":
                    raise cursor.error(f"option {option!r} cannot be empty")
                reader = reader.option(spark_option, value)
        reader = reader.option("header", "true" if header else "false").option("inferSchema", "false")
        if not header:
            names = [c.strip() for c in file_header.split(",")] if file_header is not None else from_file
            if any(not n for n in names):
                raise cursor.error(f"'FILEHEADER' names an empty column: {file_header!r}")
            reader = reader.schema(StructType([StructField(n, StringType(), True) for n in names]))
    try:
        return reader.load(path)
    except AnalysisException as exc:
        raise cursor.error(f"Spark cannot read the input path {path!r} as {source_format}: "
                           f"{spark_message(exc)}") from None


def _conversion(source: str, source_type: Any, target: Any, options: dict[str, str]) -> str | None:
    """The Spark SQL that converts a source column to the table's type (None: same type)."""
    from pyspark.sql.types import DateType, StringType, TimestampNTZType, TimestampType

    if source_type == target:
        return None
    column = _quoted(source)
    if isinstance(source_type, StringType):
        if isinstance(target, DateType) and options.get("dateformat"):
            column = f"try_to_timestamp({column}, {_literal(options['dateformat'])})"
        elif isinstance(target, (TimestampType, TimestampNTZType)) and options.get("timestampformat"):
            column = f"try_to_timestamp({column}, {_literal(options['timestampformat'])})"
    return f"try_cast({column} AS {target.simpleString()})"


def _converted(cursor: Cursor, source: Any, columns: dict[str, str], static: dict[str, str],
               types: dict[str, Any], options: dict[str, str], source_format: str) -> Converted:
    """The source as the table's columns, with every source column as read (``__source_<i>``)
    for the bad-records checks."""
    from pyspark.sql import functions as F

    by_name: dict[str, str] = {}
    for column in source.columns:
        if column.lower() in by_name:
            raise cursor.error(f"the source names column {column!r} twice (names are case-insensitive)")
        by_name[column.lower()] = column
    # CarbonData ignores CSV columns the table lacks, and takes PARTITION's value over the file's.
    unknown = [] if source_format == "csv" else sorted(c for c in by_name if c not in columns)
    missing = [columns[c] for c in columns if c not in by_name and c not in static]
    if unknown or missing:
        parts = ([f"has column(s) {unknown} the table does not have"] if unknown else []) + \
                ([f"lacks table column(s) {missing}"] if missing else [])
        raise cursor.error(f"the source {' and '.join(parts)}; the table's columns are "
                           f"{list(columns.values())}")
    source_types = {f.name: f.dataType for f in source.schema.fields}
    position = {column: i for i, column in enumerate(source.columns)}
    selected = []
    checks: list[tuple[str, str, int]] = []
    for lower, name in columns.items():
        if lower in static:
            value = static[lower]
            typed = f"try_cast({_literal(value)} AS {types[name].simpleString()})"
            selected.append(F.expr(typed).alias(name))
            continue
        origin = by_name[lower]
        conversion = _conversion(origin, source_types[origin], types[name], options)
        selected.append(F.expr(conversion).alias(name) if conversion else F.col(_quoted(origin)).alias(name))
        if conversion:
            checks.append((origin, name, position[origin]))
    for lower, value in static.items():
        check = source.sparkSession.sql(
            f"SELECT try_cast({_literal(value)} AS {types[columns[lower]].simpleString()}) IS NULL AS bad")
        if check.first()["bad"]:
            raise cursor.error(f"partition value {value!r} is not a {types[columns[lower]].simpleString()}")
    frame = source.select(*[F.col(_quoted(c)).alias(f"__source_{i}") for i, c in enumerate(source.columns)],
                          *selected)
    return Converted(frame, checks, list(source.columns))


@dataclass(frozen=True)
class Converted:
    frame: Any
    #: (source column, table column, the source column's position) of every converted value.
    checks: list[tuple[str, str, int]]
    #: The source's columns, in its order (``__source_<i>`` holds column i as read).
    source_columns: list[str]


def _checked(cursor: Cursor, converted: Converted, bad: BadRecords, path: str, table: Any) -> Any:
    """Apply the bad-records options to values that did not convert; the table's columns, pinned."""
    checks = converted.checks
    # Read once, before the commit begins: a source Spark cannot read fails the statement with
    # the table untouched, the check for bad values reads the pinned rows, and those rows are
    # the ones written.
    frame = converted.frame.localCheckpoint(eager=True)
    names = [_quoted(c) for c in frame.columns if not c.startswith("__source_")]
    if not checks:
        return frame.select(*names)
    is_bad = " OR ".join(f"({_quoted(f'__source_{i}')} IS NOT NULL AND {_quoted(column)} IS NULL)"
                         for _, column, i in checks)
    if bad.action == "FAIL":
        found = frame.where(is_bad).limit(1).collect()
        if found:
            origin, column, value = _reasons(found[0], checks)[0]
            record = ",".join("" if found[0][f"__source_{i}"] is None else str(found[0][f"__source_{i}"])
                              for i in range(len(converted.source_columns)))
            raise SchemaMismatchError(
                f"LOAD DATA of {path!r}: bad record {record!r}: value {value!r} of source column "
                f"{origin!r} is not a {frame.schema[column].dataType.simpleString()} (table column "
                f"{column!r}); nothing was written\nHelp: fix the value, give 'DATEFORMAT' / "
                "'TIMESTAMPFORMAT', or load with 'BAD_RECORDS_ACTION'='FORCE' (null), 'IGNORE' "
                "(skip the row) or 'REDIRECT' (skip it and write it under 'BAD_RECORD_PATH')")
        return frame.select(*names)
    if bad.action == "REDIRECT" or bad.logged:
        _write_bad_records(frame.where(is_bad), converted, bad, table)
    if bad.action == "FORCE":
        return frame.select(*names)
    return frame.where(f"NOT ({is_bad})").select(*names)


def _reasons(row: Any, checks: list[tuple[str, str, int]]) -> list[tuple[str, str, Any]]:
    """(source column, table column, value) of each value of ``row`` that did not convert."""
    return [(origin, column, row[f"__source_{i}"]) for origin, column, i in checks
            if row[f"__source_{i}"] is not None and row[column] is None]


def _write_bad_records(rows: Any, converted: Converted, bad: BadRecords, table: Any) -> None:
    """REDIRECT: the bad rows as the source held them, as CSV under BAD_RECORD_PATH; with the
    logger enabled, why each is bad next to them (or the count in the log, without a path)."""
    found = rows.collect()
    if not found:
        return
    if bad.path is None:
        log.info("LOAD DATA into %s: %d bad record(s) (%s)", table, len(found), bad.action)
        return
    folder = posixpath.join(table.database, table.table,
                            f"{datetime.now(timezone.utc).strftime('%Y%m%d%H%M%S%f')}_{secrets.token_hex(4)}")
    storage = open_storage(bad.path)
    width = len(converted.source_columns)
    if bad.action == "REDIRECT":
        text = io.StringIO()
        out = csv.writer(text, lineterminator="\n")
        out.writerow(converted.source_columns)
        for row in found:
            out.writerow(["" if row[f"__source_{i}"] is None else row[f"__source_{i}"] for i in range(width)])
        storage.put(posixpath.join(folder, "bad_records.csv"), text.getvalue().encode())
    if bad.logged:
        lines = [f"record {n}: value {value!r} of column {origin!r} is not a "
                 f"{rows.schema[column].dataType.simpleString()} ({bad.action})"
                 for n, row in enumerate(found, 1)
                 for origin, column, value in _reasons(row, converted.checks)]
        storage.put(posixpath.join(folder, "bad_records.log"), ("\n".join(lines) + "\n").encode())
