"""CarbonData's StreamSQL from PySpark: stream sources, CREATE STREAM, SHOW STREAMS, DROP STREAM.

:func:`run_stream_statement` runs these statements and returns None for any other, so that the
dispatcher (``txn.spark.sql``) goes on:

``CREATE TABLE [IF NOT EXISTS] src (col type, ...) STORED AS carbondata``
``TBLPROPERTIES('streaming'='source', 'format'=..., ...)``
    declares a stream source (not a metatxn table; see ``_stream_sources``). A CREATE TABLE
    whose TBLPROPERTIES do not say ``'streaming'='source'`` is not one of these statements.
``CREATE STREAM [IF NOT EXISTS] name ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime',``
``'interval'='1 seconds' [, 'checkpointLocation'=...]) AS SELECT ... FROM src [WHERE ...]``
    starts ``txn.spark.write_stream`` of the query into the sink (a metatxn table with
    ``streaming=true``), named ``name``, with the checkpoint at ``checkpointLocation`` or
    ``<sink>/.streaming/checkpoint/<name>``. The query is Spark SQL run by ``spark.sql`` over the
    source's streaming DataFrame (each mention of the source is replaced by a temporary view
    of it, dropped again once the query is analysed), so any projection or filter works. Only
    declared sources are streamed; other metatxn tables the query names are dimension tables,
    read as static tables at their snapshot when the stream starts (CarbonData's stream join
    with a dimension table).
    Returns ``Stream Name | JobId | Status`` (JobId: the StreamingQuery's id).
``SHOW STREAMS [ON TABLE t]``
    one row per stream: CarbonData's columns, then the sink's record of the stream::

        Stream Name    the stream's name
        JobId          the StreamingQuery id; null for a stream not started by CREATE STREAM here
        Status         RUNNING, FAILED (its query raised) or STOPPED; for a stream recorded by
                       the sink but not started here: RUNNING (written in this process through
                       the Python API) or STOPPED
        Source         db.table of the source; null when not started by CREATE STREAM here
        Sink           db.table
        Start Time     when the job started (else the stream's first batch), as
                       java.util.Date prints it, in UTC: "Tue Mar 05 10:11:12 UTC 2024"
        Time Elapse    "1 days, 2 hours, 3 min, 4 sec" since Start Time (remainders, not
                       CarbonData's total units); null for a stream not running
        Segment        the stream's open Streaming segment (null: none yet)
        Last Batch Id  the last batch committed to the sink (bigint; null: none yet)
        Rows           rows the stream committed (bigint)
        Updated        when its last batch committed (UTC, ISO 8601)

    Without ON TABLE: the jobs started here, and every other stream their sinks record. ON
    TABLE filters by sink (or, naming a source, by source).
``DROP STREAM [IF EXISTS] name``
    stops the job's query and drops the stream from its sink (``t.drop_stream``: its open
    segment becomes ``Streaming Finish``), then forgets the job.

Jobs live in this process only, as CarbonData's do in its driver (``_stream_jobs``). Every
error is a :class:`txn.TxnError` whose message quotes the statement; a refused statement
changes nothing. Not guaranteed: a CREATE STREAM interrupted between the query's start and its
return leaves a query running that the registry does not know of.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import time
from datetime import datetime, timezone
from typing import Any

from ... import InvalidOptionError, SchemaMismatchError, StreamNotFoundError, Table, TableNotFoundError
from .._stream import write_stream
from .._types import check_dataframe
from . import _stream_jobs as registry
from ._catalog import Catalog, TableName
from ._parse import quoting
from ._select import fresh_views
from ._stream_jobs import Job
from ._stream_sources import StreamSource, check, declare, load, stream_frame
from ._stream_syntax import (
    CREATE_STREAM_FORM,
    CreateStream,
    DropStream,
    ShowStreams,
    SourceDeclaration,
    first_line,
    parse,
    statement_error,
)

#: SHOW STREAMS's columns and their Spark SQL types (see the module docstring).
SHOW_STREAMS_COLUMNS = (
    ("Stream Name", "string"), ("JobId", "string"), ("Status", "string"), ("Source", "string"),
    ("Sink", "string"), ("Start Time", "string"), ("Time Elapse", "string"),
    ("Segment", "string"), ("Last Batch Id", "bigint"), ("Rows", "bigint"), ("Updated", "string"))
CREATE_STREAM_COLUMNS = (("Stream Name", "string"), ("JobId", "string"), ("Status", "string"))

#: STMPROPERTIES a stream takes (names lower-cased).
STREAM_PROPERTIES = ("trigger", "interval", "checkpointlocation")

#: How long CREATE STREAM waits for the query's first trigger, to report a source that cannot
#: be read as its error. CarbonData fails a job whose thread is not up in 10 s ("Streaming job
#: takes too long to start"); here a query still starting after this long is left running
#: (SHOW STREAMS says FAILED if it dies later), since a busy Spark may well be that slow.
START_TIMEOUT_S = 30.0

_INTERVAL_UNITS = r"(?:microsecond|millisecond|second|minute|hour|day|week)s?"
_INTERVAL = re.compile(rf"(?:interval\s+)?(?:\d+\s*{_INTERVAL_UNITS}\s*)+", re.IGNORECASE)


def run_stream_statement(spark: Any, catalog: Catalog, statement: str) -> Any | None:
    """Run ``statement`` if it is a stream statement (see the module docstring), returning its
    DataFrame; None, having done nothing, for any other statement.

    Raises:
        InvalidOptionError: the statement is malformed, or a property, source, sink or query
            is not what CarbonData accepts.
        TableNotFoundError: the sink (or the table of SHOW STREAMS ON TABLE) does not exist.
        TableExistsError: a source declaration names an existing table or source.
        SchemaMismatchError: the query's columns are not the sink's.
        StreamNotFoundError: DROP STREAM of a name no job here has (without IF EXISTS).
    """
    parsed = parse(statement)
    if parsed is None:
        return None
    if isinstance(parsed, SourceDeclaration):
        declare(spark, catalog, parsed, statement)
        return _frame(spark, (), [])
    if isinstance(parsed, CreateStream):
        return create_stream(spark, catalog, parsed, statement)
    if isinstance(parsed, ShowStreams):
        return show_streams(spark, catalog, parsed, statement)
    drop_stream(catalog, parsed, statement)
    return _frame(spark, (), [])


# -- CREATE STREAM ----------------------------------------------------------------------------


def create_stream(spark: Any, catalog: Catalog, parsed: CreateStream, statement: str) -> Any:
    """Start the stream; its ``Stream Name | JobId | Status`` row."""
    with registry.starting():
        existing = registry.find(parsed.name)
        if existing is not None:
            if parsed.if_not_exists:
                return _job_frame(spark, existing)
            raise statement_error(
                statement, f"Stream Name {parsed.name} already exists (job {existing.job_id}, "
                f"{existing.status}, on table {existing.sink}); DROP STREAM {parsed.name} first, "
                "or use CREATE STREAM IF NOT EXISTS", CREATE_STREAM_FORM)
        interval = _interval(parsed.properties, statement)
        sink_name = parsed.sink
        sink = _sink(catalog, sink_name, parsed.name, statement)
        source_name, source = _source(catalog, parsed, statement)
        frame = _query_frame(spark, catalog, parsed, source_name, source, statement)
        try:
            check_dataframe(frame.schema, sink.schema)
        except SchemaMismatchError as error:
            raise SchemaMismatchError(
                f"Schema of table {sink_name} does not match query output: {error}\n"
                f"Statement: {statement!r}") from None
        checkpoint = (parsed.properties.get("checkpointlocation")
                      or f"{catalog.location(sink_name)}/.streaming/checkpoint/{parsed.name}")
        with quoting(statement):
            query = write_stream(frame, catalog.location(sink_name), checkpoint_location=checkpoint,
                                 trigger={"processingTime": interval}, name=parsed.name)
        _await_start(query, parsed.name, source_name, statement)
        job = Job(parsed.name, query, source_name, sink_name, datetime.now(timezone.utc))
        registry.add(job)
    return _job_frame(spark, job)


def _interval(properties: dict[str, str], statement: str) -> str:
    """The ProcessingTime trigger's interval from STMPROPERTIES (CarbonData's checks)."""
    unknown = sorted(set(properties) - set(STREAM_PROPERTIES))
    if unknown:
        raise statement_error(
            statement, f"STMPROPERTIES {', '.join(map(repr, unknown))} not supported; a stream "
            "takes 'trigger', 'interval' and 'checkpointLocation'", CREATE_STREAM_FORM)
    trigger = properties.get("trigger", "").strip()
    if not trigger:
        raise statement_error(statement, "trigger must be specified", CREATE_STREAM_FORM)
    if trigger.lower() != "processingtime":
        raise statement_error(statement, f"invalid trigger: {trigger}; only 'ProcessingTime' is "
                              "supported", CREATE_STREAM_FORM)
    interval = properties.get("interval", "").strip()
    if not interval:
        raise statement_error(statement, "interval must be specified", CREATE_STREAM_FORM)
    if not _INTERVAL.fullmatch(interval):
        raise statement_error(statement, f"invalid interval: {interval!r}; expected a count and a "
                              "unit, such as '10 seconds' or '500 milliseconds'", CREATE_STREAM_FORM)
    return interval


def _sink(catalog: Catalog, name: TableName, stream: str, statement: str) -> Table:
    """The sink: a metatxn table with ``streaming`` true where no stream ``stream`` runs."""
    not_sink = (f"Table {name} is not streaming sink table ('streaming' tblproperty is not "
                "'sink' or 'true')")
    if load(catalog, name) is not None:
        raise statement_error(statement, f"{not_sink}: it is a stream source", CREATE_STREAM_FORM)
    with quoting(statement):
        table = catalog.open(name)
    if not table.streaming:
        raise statement_error(statement, not_sink, "a sink created with CREATE TABLE ... "
                              "STORED AS carbondata TBLPROPERTIES('streaming'='true')")
    running = [s.name for s in table.streams() if s.status == "Running" and s.name == stream]
    if running:
        raise statement_error(statement, f"Stream Name {stream} already exists: it is running on "
                              f"table {name} in this process", CREATE_STREAM_FORM)
    return table


def _source(catalog: Catalog, parsed: CreateStream, statement: str) -> tuple[TableName, StreamSource]:
    """The one stream source the query reads (CarbonData's checks and messages)."""
    sources: dict[TableName, StreamSource] = {}
    tables: set[TableName] = set()
    for reference in parsed.tables:
        try:
            name = catalog.name(reference.name)
        except InvalidOptionError:  # not a name the catalog maps: Spark's to resolve
            continue
        source = load(catalog, name)
        if source is not None:
            sources[name] = source
        elif catalog.exists(name):
            tables.add(name)
    # Only declared sources are streamed; metatxn tables beside one are dimension tables, read
    # as static tables (CarbonData joins a stream with a dimension table).
    if len(sources) > 1:
        raise statement_error(statement, "Stream query on more than one stream source table is not "
                              f"supported (it reads {', '.join(sorted(map(str, sources)))})",
                              CREATE_STREAM_FORM)
    if not sources and not tables:
        raise statement_error(statement, "Must specify stream source table in the stream query",
                              CREATE_STREAM_FORM)
    if not sources:
        table = min(tables, key=str)
        raise statement_error(statement, f"Table {table} is not streaming source table "
                              "('streaming' tblproperty is not 'source')", CREATE_STREAM_FORM)
    ((name, source),) = sources.items()
    check(source, statement)  # it may have been written by another version, or by hand
    return name, source


def _query_frame(spark: Any, catalog: Catalog, parsed: CreateStream, source_name: TableName,
                 source: StreamSource, statement: str) -> Any:
    """The stream's query run by Spark over the source's streaming DataFrame."""
    from pyspark.errors import PySparkException

    view = f"metatxn_stream_source_{secrets.token_hex(6)}"
    query = parsed.query
    for reference in sorted(parsed.tables, key=lambda r: r.start, reverse=True):
        try:
            if catalog.name(reference.name) != source_name:
                continue
        except InvalidOptionError:
            continue
        # An alias-less mention keeps the source's name as its alias: `src.col` still resolves.
        replacement = f"`{view}`" if reference.aliased else f"`{view}` AS `{source_name.table}`"
        query = query[:reference.start] + replacement + query[reference.end:]
    stream = stream_frame(spark, source)
    stream.createOrReplaceTempView(view)
    try:
        # The DataFrame is analysed here, the views resolved into its plan, so they can go.
        # Other metatxn tables the query names (dimension tables) get fresh static views: their
        # snapshot when the stream starts.
        with fresh_views(spark, catalog, query) as rewritten:
            frame = spark.sql(rewritten)
    except PySparkException as error:
        raise statement_error(statement, f"the stream's query is not valid Spark SQL: "
                              f"{first_line(error)}", CREATE_STREAM_FORM) from None
    finally:
        spark.catalog.dropTempView(view)
    return frame


def _await_start(query: Any, name: str, source: TableName, statement: str) -> None:
    """Return once the query's first trigger is done (Spark opens a socket source in it), or
    after :data:`START_TIMEOUT_S` with the query still going; raise if it died meanwhile."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while query.lastProgress is None and time.monotonic() < deadline:
        if not query.isActive:
            error = query.exception()
            why = first_line(error) if error is not None else "the query stopped"
            raise statement_error(statement, f"stream {name} failed to start reading source "
                                  f"{source}: {why}", "a source whose host and port (or path) "
                                  "can be read when the stream starts")
        time.sleep(0.1)


def _job_frame(spark: Any, job: Job) -> Any:
    return _frame(spark, CREATE_STREAM_COLUMNS, [(job.name, job.job_id, job.status)])


# -- SHOW STREAMS -----------------------------------------------------------------------------


def show_streams(spark: Any, catalog: Catalog, parsed: ShowStreams, statement: str) -> Any:
    """SHOW STREAMS's DataFrame (columns: :data:`SHOW_STREAMS_COLUMNS`)."""
    jobs = registry.jobs()
    if parsed.table is None:
        sinks = sorted({job.sink for job in jobs}, key=str)
    else:
        name = parsed.table
        if load(catalog, name) is not None:
            jobs, sinks = [job for job in jobs if job.source == name], []
        else:
            with quoting(statement):
                catalog.open(name)
            jobs, sinks = [job for job in jobs if job.sink == name], [name]
    recorded: dict[tuple[str, str], Any] = {}
    for sink in sinks:
        try:
            table = catalog.open(sink)
        except TableNotFoundError:  # dropped since its job started: nothing recorded to show
            continue
        for info in table.streams():
            if info.kind == "stream":
                recorded[(str(sink), info.name.lower())] = info
    now = datetime.now(timezone.utc)
    rows = []
    for job in jobs:
        info = recorded.pop((str(job.sink), job.name.lower()), None)
        status = job.status
        rows.append(_row(job.name, job.job_id, status, str(job.source), str(job.sink),
                         job.started, now if status == registry.RUNNING else None, info))
    for (sink_text, _), info in recorded.items():
        status = info.status.upper()
        rows.append(_row(info.name, None, status, None, sink_text, info.started,
                         now if status == registry.RUNNING else None, info))
    rows.sort(key=lambda row: (row[4], row[0]))
    return _frame(spark, SHOW_STREAMS_COLUMNS, rows)


def _row(name: str, job_id: str | None, status: str, source: str | None, sink: str,
         started: datetime | None, now: datetime | None, info: Any) -> tuple[Any, ...]:
    elapsed = _elapsed(now - started) if now is not None and started is not None else None
    updated = info.updated.isoformat() if info is not None and info.updated is not None else None
    return (name, job_id, status, source, sink, _java_date(started), elapsed,
            info.segment if info is not None else None,
            info.last_batch_id if info is not None else None,
            info.rows if info is not None else None, updated)


def _java_date(moment: datetime | None) -> str | None:
    """``java.util.Date.toString`` of ``moment`` in UTC (CarbonData's Start Time)."""
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).strftime("%a %b %d %H:%M:%S UTC %Y")


def _elapsed(span: Any) -> str:
    seconds = max(0, int(span.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{days} days, {hours} hours, {minutes} min, {seconds} sec"


# -- DROP STREAM ------------------------------------------------------------------------------


def drop_stream(catalog: Catalog, parsed: DropStream, statement: str) -> None:
    """Stop the job's query, drop the stream from its sink, forget the job."""
    job = registry.find(parsed.name)
    if job is None:
        if parsed.if_exists:
            return
        raise StreamNotFoundError(
            f"no stream named {parsed.name} was started by CREATE STREAM in this process, in: "
            f"{statement!r}\nExpected: the name of a stream SHOW STREAMS lists "
            "with a JobId (a stream a table records but no job here runs is dropped with "
            "txn.open_table(uri).drop_stream(name) or `metatxn drop-stream URI NAME`)")
    try:
        with quoting(statement):
            try:
                table: Table | None = catalog.open(job.sink)
            except TableNotFoundError:  # the sink is gone: only the query is left to stop
                table = None
            if table is not None:
                # It stops the query, then finishes its segment. Not found: the stream never
                # committed a batch, so the sink has nothing to drop.
                with contextlib.suppress(StreamNotFoundError):
                    table.drop_stream(job.name)
    finally:
        # Also when the drop failed: the job stays listed (STOPPED) for another DROP STREAM.
        if job.query.isActive:
            job.query.stop()
    registry.remove(job.name)


def _frame(spark: Any, columns: tuple[tuple[str, str], ...], rows: list[tuple[Any, ...]]) -> Any:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    types = {"string": StringType(), "bigint": LongType()}
    schema = StructType([StructField(name, types[kind], nullable=True) for name, kind in columns])
    return spark.createDataFrame(rows, schema)
