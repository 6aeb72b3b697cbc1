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
table column must be there (or given by ``PARTITION``), and a source column the table lacks is
refused. Values are converted to the column types by Spark (``DATEFORMAT`` and
``TIMESTAMPFORMAT`` give Spark datetime patterns for text). ``BAD_RECORDS_ACTION`` says what a
value that does not convert does: ``FAIL`` (the default, as CarbonData's: nothing is written,
the error names the column and the value; one extra pass over the source finds it), ``FORCE``
(it becomes null) or ``IGNORE`` (its row is skipped).

Each LOAD is one commit: a new segment (``OVERWRITE``: the table's whole content is replaced,
every partition, not only those the file holds), written through ``txn.spark.write``; the
answer is CarbonData's ``Segment ID``. The source is read to completion (pinned with
``localCheckpoint``) before the commit begins, so a source Spark cannot read changes nothing; a
source of no rows (an empty file, a header alone) commits nothing and answers no row.
"""

from __future__ import annotations

import posixpath
from typing import Any

from timeline import SchemaMismatchError

from ..._context import open_context
from .._types import spark_schema
from .._write import write
from ._catalog import Catalog
from ._frames import strings_frame
from ._parse import Cursor, Token, boolean_option, spark_message

FORM = ("LOAD DATA [LOCAL] INPATH 'path' [OVERWRITE] INTO TABLE [db.]table "
        "[PARTITION (column='value', ...)] [OPTIONS('DELIMITER'=',', 'QUOTECHAR'='\"', "
        "'HEADER'='true|false', 'FILEHEADER'='a,b,c', 'FORMAT'='csv|parquet|orc|json', ...)]")

_CSV_ONLY = ("delimiter", "quotechar", "escapechar", "commentchar", "header", "fileheader")
_ANY_FORMAT = ("format", "dateformat", "timestampformat", "bad_records_action")
#: Options of text sources only (CSV's and JSON's records may span lines).
_TEXT_ONLY = ("multiline",)
_FORMATS = ("csv", "parquet", "orc", "json")
_EXTENSIONS = {".parquet": "parquet", ".orc": "orc", ".json": "json", ".jsonl": "json"}
_ACTIONS = ("FAIL", "FORCE", "IGNORE")
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
    context = open_context(table.uri)
    source_format = _source_format(cursor, path, options)
    allowed = list(_ANY_FORMAT) + (list(_CSV_ONLY) if source_format == "csv" else []) + \
        (list(_TEXT_ONLY) if source_format in ("csv", "json") else [])
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise cursor.error(f"unknown option(s) {unknown} for a {source_format} source; "
                           f"LOAD DATA takes {allowed}")
    action = options.get("bad_records_action", "FAIL").strip().upper()
    if action not in _ACTIONS:
        raise cursor.error(f"'BAD_RECORDS_ACTION' must be one of {list(_ACTIONS)}, got {action!r}")
    types = {f.name: f.dataType for f in spark_schema(context.schema).fields}
    columns = {c.lower(): c for c in context.schema.names}
    for column in static:
        if column not in columns or columns[column] not in context.partition_by:
            raise cursor.error(f"PARTITION names {column!r}, which is not a partition column of {name} "
                               f"({context.partition_by or 'none'})")
    from_file = [c for c in context.schema.names if c.lower() not in static]
    source = _read(spark, cursor, path, source_format, options, from_file, types)
    selected = _converted(cursor, source, columns, static, types, options)
    frame = _checked(cursor, selected, action, path)
    if not overwrite and frame.isEmpty():
        return strings_frame(spark, ("Segment ID",), [])
    commit = write(frame, table.uri, mode="overwrite" if overwrite else "append")
    return strings_frame(spark, ("Segment ID",), [(commit.segment,)] if commit is not None else [])


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
               types: dict[str, Any], options: dict[str, str]) -> tuple[Any, list[tuple[str, str]]]:
    """The source as the table's columns, and the (source, converted) columns to check."""
    from pyspark.sql import functions as F

    by_name: dict[str, str] = {}
    for column in source.columns:
        if column.lower() in by_name:
            raise cursor.error(f"the source names column {column!r} twice (names are case-insensitive)")
        by_name[column.lower()] = column
    unknown = sorted(c for c in by_name if c not in columns or c in static)
    missing = [columns[c] for c in columns if c not in by_name and c not in static]
    if unknown or missing:
        parts = ([f"has column(s) {unknown} the table does not load from files"] if unknown else []) + \
                ([f"lacks table column(s) {missing}"] if missing else [])
        raise cursor.error(f"the source {' and '.join(parts)}; the table's columns are "
                           f"{list(columns.values())}")
    source_types = {f.name: f.dataType for f in source.schema.fields}
    selected = []
    checks: list[tuple[str, str]] = []
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
            checks.append((origin, name))
    for lower, value in static.items():
        check = source.sparkSession.sql(
            f"SELECT try_cast({_literal(value)} AS {types[columns[lower]].simpleString()}) IS NULL AS bad")
        if check.first()["bad"]:
            raise cursor.error(f"partition value {value!r} is not a {types[columns[lower]].simpleString()}")
    return source.select(*[F.col(_quoted(o)).alias(f"__source_{i}") for i, (o, _) in enumerate(checks)],
                         *selected), checks


def _checked(cursor: Cursor, converted: tuple[Any, list[tuple[str, str]]], action: str, path: str) -> Any:
    """Apply BAD_RECORDS_ACTION to values that did not convert; the table's columns, pinned."""
    frame, checks = converted
    # Read once, before the commit begins: a source Spark cannot read fails the statement with
    # the table untouched, the check for bad values reads the pinned rows, and those rows are
    # the ones written.
    frame = frame.localCheckpoint(eager=True)
    names = [c for c in frame.columns if not c.startswith("__source_")]
    if not checks or action == "FORCE":
        return frame.select(*[_quoted(n) for n in names])
    bad = " OR ".join(f"({_quoted(f'__source_{i}')} IS NOT NULL AND {_quoted(column)} IS NULL)"
                      for i, (_, column) in enumerate(checks))
    if action == "IGNORE":
        return frame.where(f"NOT ({bad})").select(*[_quoted(n) for n in names])
    found = frame.where(bad).limit(1).collect()
    if found:
        row = found[0]
        for i, (origin, column) in enumerate(checks):
            if row[f"__source_{i}"] is not None and row[column] is None:
                raise SchemaMismatchError(
                    f"LOAD DATA of {path!r}: value {row[f'__source_{i}']!r} of source column "
                    f"{origin!r} is not a {frame.schema[column].dataType.simpleString()} (table column "
                    f"{column!r}); nothing was written\nHelp: fix the value, give 'DATEFORMAT' / "
                    "'TIMESTAMPFORMAT', or load with 'BAD_RECORDS_ACTION'='FORCE' (null) or 'IGNORE' "
                    "(skip the row)")
    return frame.select(*[_quoted(n) for n in names])
