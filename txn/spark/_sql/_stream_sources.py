"""Stream sources: CarbonData's ``CREATE TABLE ... TBLPROPERTIES('streaming'='source', ...)``.

A source is not a metatxn table: it is a declaration (columns with their Spark SQL types, a
format and its options) that ``CREATE STREAM`` turns into a streaming DataFrame. It is kept as
``_source.json`` (a :class:`StreamSource`, msgspec JSON) in the folder the catalog gives the
name, so every session over the same warehouse sees it; it is written once with put-if-absent
(of two sessions declaring one name at once, exactly one wins) and never rewritten.

Formats: ``socket`` (``host``, ``port``) and ``text`` (``path``) give lines, read as records by
``record_format`` ``csv`` (split by ``delimiter``, default ``,``) or ``json``; ``csv``, ``json``,
``parquet`` and ``orc`` read the files appearing under ``path`` with the declared schema (other
properties are passed to Spark's reader as options). ``kafka`` is refused: Spark's Kafka
connector is not part of metatxn's dependencies.

Not guaranteed: nothing checks, when the declaration is made, that the host listens or the path
exists; that shows when a stream starts.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ... import (
    CorruptMetadataError,
    InvalidOptionError,
    ObjectExistsError,
    ObjectNotFoundError,
    TableExistsError,
    open_storage,
)
from ._catalog import Catalog, TableName
from ._stream_syntax import CREATE_SOURCE_FORM, SourceDeclaration, first_line, statement_error

SOURCE_FILE = "_source.json"
FORMAT_VERSION = 1

#: Formats whose source gives lines (a ``value`` column) parsed by ``record_format``.
LINE_FORMATS = ("socket", "text")
#: Formats read as files under ``path`` with the declared schema.
FILE_FORMATS = ("csv", "json", "parquet", "orc")
FORMATS = LINE_FORMATS + FILE_FORMATS
RECORD_FORMATS = ("csv", "json")

# Properties that shape how a line becomes a record, and the option Spark's parsers call them.
_RECORD_OPTIONS = {"delimiter": "sep", "quotechar": "quote", "dateformat": "dateFormat",
                   "timestampformat": "timestampFormat"}
_REQUIRED = {"socket": ("host", "port"), "text": ("path",)}
_LINE_KEYS = {"socket": {"host", "port"}, "text": {"path"}}


class SourceColumn(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    #: The Spark SQL type, as Spark writes it (``int``, ``decimal(8,2)``, ``array<string>``).
    type: str


class StreamSource(msgspec.Struct, frozen=True, kw_only=True, tag="stream_source", tag_field="kind"):
    """Format version 1 of ``_source.json``. New fields get defaults; fields are only appended."""

    format_version: int = FORMAT_VERSION
    #: ``db.table``.
    name: str
    columns: list[SourceColumn]
    format: str
    #: The other TBLPROPERTIES (names lower-cased), ``streaming`` and ``format`` left out.
    options: dict[str, str] = msgspec.field(default_factory=dict)

    @property
    def ddl(self) -> str:
        """The columns as Spark DDL (``id int, name string``)."""
        return ", ".join(f"`{c.name.replace('`', '``')}` {c.type}" for c in self.columns)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(StreamSource)


def declare(spark: Any, catalog: Catalog, declaration: SourceDeclaration, statement: str) -> bool:
    """Persist the source ``declaration``; False when IF NOT EXISTS found the name taken.

    Raises:
        InvalidOptionError: a property, the format or a column is not what a source takes.
        TableExistsError: a source or table of that name exists (without IF NOT EXISTS).
    """
    name = declaration.name
    if declaration.stored_as not in (None, "carbondata", "metatxn"):
        raise statement_error(
            statement, f"stream source {name} is STORED AS {declaration.stored_as}; a stream source "
            "is declared STORED AS carbondata (or metatxn)", CREATE_SOURCE_FORM)
    properties = dict(declaration.properties)
    properties.pop("streaming")
    kind = properties.pop("format", None)
    source = StreamSource(name=str(name), columns=_columns(spark, name, declaration.columns, statement),
                          format=(kind or "").strip().lower(), options=properties)
    check(source, statement)
    location = catalog.location(name)
    if catalog.exists(name) or load(catalog, name) is not None:
        if declaration.if_not_exists:
            return False
        raise _exists(location, name, statement)
    try:
        open_storage(location).put_if_absent(SOURCE_FILE, _encoder.encode(source))
    except ObjectExistsError:  # another session declared it first
        if declaration.if_not_exists:
            return False
        raise _exists(location, name, statement) from None
    return True


def _exists(location: str, name: TableName, statement: str) -> TableExistsError:
    error = TableExistsError(location)
    error.args = (f"table {name} already exists ({error.args[0]})\nStatement: {statement!r}",)
    return error


def load(catalog: Catalog, name: TableName) -> StreamSource | None:
    """The source declared under ``name``, or None when there is none."""
    location = catalog.location(name)
    try:
        data = open_storage(location).read(SOURCE_FILE)
    except ObjectNotFoundError:
        return None
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as error:
        raise CorruptMetadataError(f"{location}/{SOURCE_FILE}", "a stream source declaration "
                                   "(msgspec JSON of StreamSource)", str(error)) from None


def check(source: StreamSource, statement: str) -> None:
    """Raise InvalidOptionError (CarbonData's message, quoting ``statement``) unless ``source``
    names a supported format with the properties that format needs."""
    def fail(problem: str) -> InvalidOptionError:
        return statement_error(statement, problem, CREATE_SOURCE_FORM)

    options = source.options
    if not source.format:
        raise fail(f"tblproperty 'format' should be provided for stream source {source.name}")
    if source.format == "kafka":
        raise fail(f"stream source {source.name}: format 'kafka' needs Spark's Kafka connector "
                   f"(spark-sql-kafka), which metatxn does not include; expected one of "
                   f"{', '.join(FORMATS)}")
    if source.format not in FORMATS:
        raise fail(f"stream source {source.name}: format {source.format!r} is not supported; "
                   f"expected one of {', '.join(FORMATS)}")
    for required in _REQUIRED.get(source.format, ("path",)):
        if not options.get(required, "").strip():
            raise fail(f"tblproperty '{required}' should be provided for stream source {source.name}")
    if source.format in LINE_FORMATS:
        allowed = _LINE_KEYS[source.format] | {"record_format"} | set(_RECORD_OPTIONS)
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise fail(f"stream source {source.name} (format {source.format!r}) does not take "
                       f"tblproperty {', '.join(map(repr, unknown))}; expected {sorted(allowed)}")
        record_format = options.get("record_format", "csv").lower()
        if record_format not in RECORD_FORMATS:
            raise fail(f"stream source {source.name}: record_format {record_format!r} is not "
                       f"supported; expected one of {', '.join(RECORD_FORMATS)}")
    if source.format == "socket":
        port = options["port"].strip()
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise fail(f"stream source {source.name}: port {port!r} is not a port number; "
                       "expected an integer from 1 to 65535")
    if "delimiter" in options and not options["delimiter"]:
        raise fail(f"stream source {source.name}: delimiter is empty; expected one or more "
                   "characters, such as ','")


def _columns(spark: Any, name: TableName, text: str, statement: str) -> list[SourceColumn]:
    """The declared columns, read by Spark's own DDL parser (so every Spark type is known)."""
    from pyspark.errors import PySparkException
    from pyspark.sql.types import StructType

    try:
        schema = StructType.fromDDL(text)
    except PySparkException as error:
        raise statement_error(statement, f"the columns of stream source {name} are not Spark "
                              f"SQL columns: {first_line(error)}", CREATE_SOURCE_FORM) from None
    if not isinstance(schema, StructType):  # a bare type, such as "(int)"
        raise statement_error(statement, f"the columns of stream source {name} are not a column "
                              f"list: {text.strip()!r}", CREATE_SOURCE_FORM)
    if not schema.fields:
        raise statement_error(statement, f"stream source {name} declares no columns",
                              CREATE_SOURCE_FORM)
    seen: set[str] = set()
    for field in schema.fields:
        if field.name.lower() in seen:
            raise statement_error(statement, f"stream source {name} declares column "
                                  f"{field.name!r} twice", CREATE_SOURCE_FORM)
        seen.add(field.name.lower())
    return [SourceColumn(name=f.name, type=f.dataType.simpleString()) for f in schema.fields]


def stream_frame(spark: Any, source: StreamSource) -> Any:
    """The streaming DataFrame of ``source``: its declared columns, with their types."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    options = source.options
    schema = StructType.fromDDL(source.ddl)
    assert isinstance(schema, StructType)
    reader = spark.readStream
    if source.format in LINE_FORMATS:
        if source.format == "socket":
            lines = reader.format("socket").option("host", options["host"].strip()).option(
                "port", int(options["port"])).load()
        else:
            lines = reader.text(options["path"])
        parse_options = {_RECORD_OPTIONS[k]: v for k, v in options.items() if k in _RECORD_OPTIONS}
        if options.get("record_format", "csv").lower() == "json":
            record = F.from_json(F.col("value"), schema, parse_options)
        else:
            record = F.from_csv(F.col("value"), source.ddl, parse_options)
        return lines.select(record.alias("record")).select(
            *(F.col("record").getField(c.name).alias(c.name) for c in source.columns))
    reader_options = {_RECORD_OPTIONS.get(k, k): v for k, v in options.items()
                      if k not in ("path", "record_format")}
    return reader.schema(schema).options(**reader_options).format(source.format).load(options["path"])
