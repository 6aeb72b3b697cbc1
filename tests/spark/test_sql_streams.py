"""CarbonData's StreamSQL through ``txn.spark.sql``: the streaming walk-through statement by
statement (a socket source on 127.0.0.1 fed ``1,value1`` lines, CREATE STREAM, SELECT, SHOW
STREAMS, DROP STREAM, COMPACT 'CLOSE_STREAMING'), a file source with a projection and a filter,
and the statements CarbonData refuses, each refused with a TxnError quoting the statement."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import txn
import txn.spark
from txn.spark._sql import Catalog, TableName, catalog_of
from txn.spark._sql._stream_jobs import jobs
from txn.spark._sql._stream_sources import SOURCE_FILE, load
from txn.spark._sql._stream_syntax import CreateStream, DropStream, ShowStreams, parse
from txn.spark._sql._streams import SHOW_STREAMS_COLUMNS, run_stream_statement

from .helpers import LineServer, wait_for

SOURCE_SQL = ("CREATE TABLE source (id int, name string) STORED AS carbondata TBLPROPERTIES("
              "'streaming'='source', 'format'='socket', 'host'='127.0.0.1', 'port'='{port}', "
              "'record_format'='csv', 'delimiter'=',')")
STREAM_SQL = ("CREATE STREAM job1 ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', "
              "'interval'='1 seconds') AS SELECT * FROM source")


@pytest.fixture
def line_server() -> Iterator[LineServer]:
    server = LineServer()
    yield server
    server.close()


@pytest.fixture
def warehouse(spark: Any, tmp_path: Path) -> Iterator[Catalog]:
    txn.spark.register(spark, warehouse=str(tmp_path / "warehouse"))
    yield catalog_of(spark)
    for job in jobs():  # a failed test must not leave a query running for the next one
        sql(spark, f"DROP STREAM IF EXISTS {job.name}")


def sql(spark: Any, statement: str) -> Any:
    return txn.spark.sql(spark, statement)


def sink_rows(catalog: Catalog, table: str = "sink") -> int:
    return int(catalog.open(catalog.name(table)).to_arrow().num_rows)


@pytest.mark.spark
def test_the_streaming_walkthrough_statement_by_statement(
        spark: Any, warehouse: Catalog, line_server: LineServer) -> None:
    """Every statement of CarbonData's StreamSQL session, through txn.spark.sql: each fed line
    arrives once, SHOW STREAMS shows the job running with the sink's progress, DROP STREAM stops
    the query and closes its segment, CLOSE_STREAMING leaves only columnar segments."""
    sql(spark, "CREATE TABLE sink (id int, name string) STORED AS carbondata "
               "TBLPROPERTIES('streaming'='true')")
    sql(spark, SOURCE_SQL.format(port=line_server.port))
    created = sql(spark, STREAM_SQL).collect()
    assert [(r["Stream Name"], r["Status"]) for r in created] == [("job1", "RUNNING")]
    job_id = created[0]["JobId"]

    line_server.feed([f"{i},value{i}" for i in range(1, 11)])
    wait_for(lambda: sink_rows(warehouse) == 10, "the 10 lines to reach the sink")
    line_server.feed([f"{i},value{i}" for i in range(11, 21)])
    wait_for(lambda: sink_rows(warehouse) == 20, "the next 10 lines to reach the sink")
    selected = sql(spark, "SELECT id, name FROM sink").collect()
    assert sorted((r.id, r.name) for r in selected) == [(i, f"value{i}") for i in range(1, 21)]

    shown = sql(spark, "SHOW STREAMS").collect()
    assert tuple(sql(spark, "SHOW STREAMS ON TABLE sink").columns) == tuple(
        name for name, _ in SHOW_STREAMS_COLUMNS)
    assert [(r["Stream Name"], r["JobId"], r["Status"], r["Source"], r["Sink"], r["Rows"])
            for r in shown] == [("job1", job_id, "RUNNING", "default.source", "default.sink", 20)]
    assert shown[0]["Segment"] is not None and shown[0]["Last Batch Id"] is not None
    assert shown[0]["Time Elapse"].endswith(" sec") and shown[0]["Start Time"].endswith(
        str(time.gmtime().tm_year))

    # CarbonData: a second CREATE of a running name fails; IF NOT EXISTS returns the job.
    with pytest.raises(txn.InvalidOptionError, match="Stream Name job1 already exists") as error:
        sql(spark, STREAM_SQL)
    assert STREAM_SQL in str(error.value)
    again = sql(spark, STREAM_SQL.replace("STREAM job1", "STREAM IF NOT EXISTS job1")).collect()
    assert [(r["JobId"], r["Status"]) for r in again] == [(job_id, "RUNNING")]

    query = next(j.query for j in jobs() if j.name == "job1")
    sql(spark, "DROP STREAM job1")
    assert not query.isActive
    assert sql(spark, "SHOW STREAMS").collect() == []
    sink = warehouse.open(TableName("default", "sink"))
    assert sink.streams() == []
    # The stream's segment was finished by DROP STREAM (and may have been handed off at once).
    assert {s.status for s in sink.segments()} <= {"Streaming Finish", "Compacted", "Success"}

    sql(spark, "ALTER TABLE sink COMPACT 'CLOSE_STREAMING'")
    assert {s.status for s in sink.segments()} <= {"Compacted", "Success"}
    rows = sql(spark, "SELECT * FROM sink").collect()
    assert sorted((r.id, r.name) for r in rows) == [(i, f"value{i}") for i in range(1, 21)]
    assert sink.validate().ok


@pytest.mark.spark
def test_a_file_source_stream_runs_the_query_s_projection_and_filter(
        spark: Any, warehouse: Catalog, tmp_path: Path) -> None:
    """A json file source in another database; the query renames, computes and filters (Spark
    runs it), and names the source with its database and an alias."""
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    (incoming / "part-0.json").write_text(
        "\n".join(json.dumps({"id": i, "city": f"c{i % 3}", "amount": i * 1.5}) for i in range(10)))
    sql(spark, "CREATE TABLE totals (id int, city string, doubled double) STORED AS carbondata "
               "TBLPROPERTIES('streaming'='true')")
    sql(spark, "CREATE TABLE IF NOT EXISTS feed.orders (id int, city string, amount double) "
               f"STORED AS carbondata TBLPROPERTIES('streaming'='source', 'format'='json', "
               f"'path'='{incoming}')")
    sql(spark, "CREATE STREAM files ON TABLE default.totals STMPROPERTIES('trigger'="
               "'ProcessingTime', 'interval'='1 seconds') AS SELECT o.id, upper(o.city) AS city, "
               "o.amount * 2 AS doubled FROM feed.orders o WHERE o.id % 2 = 0")
    wait_for(lambda: sink_rows(warehouse, "totals") == 5, "the even ids to reach totals")
    sql(spark, "DROP STREAM files")
    got = warehouse.open(TableName("default", "totals")).to_arrow().sort_by("id").to_pylist()
    assert got == [{"id": i, "city": f"C{i % 3}", "doubled": i * 3.0} for i in range(0, 10, 2)]


@pytest.mark.spark
def test_a_source_declaration_is_persisted_for_other_sessions(spark: Any, warehouse: Catalog) -> None:
    """The declaration is a JSON document in the source's folder: another catalog over the same
    warehouse reads it back; IF NOT EXISTS leaves it, a second CREATE is refused."""
    statement = SOURCE_SQL.format(port=9099).replace("(id int, name string)",
                                                     "(id int, price decimal(8,2), tags array<string>)")
    sql(spark, statement)
    name = TableName("default", "source")
    source = load(Catalog(warehouse.warehouse), name)
    assert source is not None
    assert [(c.name, c.type) for c in source.columns] == [
        ("id", "int"), ("price", "decimal(8,2)"), ("tags", "array<string>")]
    assert (source.format, source.options["host"], source.options["port"]) == ("socket", "127.0.0.1", "9099")
    assert (Path(warehouse.location(name)) / SOURCE_FILE).is_file()
    written = (Path(warehouse.location(name)) / SOURCE_FILE).read_bytes()

    sql(spark, statement.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
    with pytest.raises(txn.TableExistsError, match=r"table default\.source already exists"):
        sql(spark, statement)
    assert (Path(warehouse.location(name)) / SOURCE_FILE).read_bytes() == written
    # nor may a metatxn table take the source's name (its folder would hold both)
    with pytest.raises(txn.TableExistsError, match=r"default\.source is already declared as a stream source"):
        sql(spark, "CREATE TABLE source (id int) STORED AS carbondata")
    sql(spark, "CREATE TABLE IF NOT EXISTS source (id int) STORED AS carbondata")
    assert sorted(os.listdir(warehouse.location(name))) == [SOURCE_FILE]


@pytest.mark.spark
def test_a_create_table_that_is_no_stream_source_is_not_a_stream_statement(
        spark: Any, warehouse: Catalog) -> None:
    statement = "CREATE TABLE plain (id int) STORED AS carbondata TBLPROPERTIES('streaming'='true')"
    assert run_stream_statement(spark, warehouse, statement) is None
    assert run_stream_statement(spark, warehouse, "SELECT 1") is None
    assert not Path(warehouse.location(TableName("default", "plain"))).exists()


@pytest.mark.spark
@pytest.mark.parametrize(("properties", "message"), [
    ("'streaming'='source', 'host'='127.0.0.1', 'port'='9099'",
     "tblproperty 'format' should be provided for stream source default.src"),
    ("'streaming'='source', 'format'='socket', 'port'='9099'",
     "tblproperty 'host' should be provided for stream source default.src"),
    ("'streaming'='source', 'format'='socket', 'host'='127.0.0.1'",
     "tblproperty 'port' should be provided for stream source default.src"),
    ("'streaming'='source', 'format'='csv'",
     "tblproperty 'path' should be provided for stream source default.src"),
    ("'streaming'='source', 'format'='socket', 'host'='h', 'port'='http'",
     "port 'http' is not a port number"),
    ("'streaming'='source', 'format'='socket', 'host'='h', 'port'='1', 'record_format'='xml'",
     "record_format 'xml' is not supported"),
    ("'streaming'='source', 'format'='kafka', 'subscribe'='t'", "needs Spark's Kafka connector"),
    ("'streaming'='source', 'format'='avro', 'path'='/x'", "format 'avro' is not supported"),
])
def test_a_source_missing_what_its_format_needs_is_refused(
        spark: Any, warehouse: Catalog, properties: str, message: str) -> None:
    statement = f"CREATE TABLE src (id int) STORED AS carbondata TBLPROPERTIES({properties})"
    with pytest.raises(txn.InvalidOptionError, match=message) as error:
        sql(spark, statement)
    assert repr(statement) in str(error.value)
    assert not Path(warehouse.location(TableName("default", "src"))).exists()


@pytest.mark.spark
def test_a_source_with_bad_columns_or_clauses_is_refused(spark: Any, warehouse: Catalog) -> None:
    properties = "TBLPROPERTIES('streaming'='source', 'format'='socket', 'host'='h', 'port'='1')"
    for columns, message in [("(id int, ID string)", "declares column 'ID' twice"),
                             ("(id integr)", "are not Spark SQL columns"),
                             ("()", "declares no columns")]:
        with pytest.raises(txn.InvalidOptionError, match=message):
            sql(spark, f"CREATE TABLE src {columns} STORED AS carbondata {properties}")
    with pytest.raises(txn.InvalidOptionError, match="STORED AS carbondata and TBLPROPERTIES only"):
        sql(spark, f"CREATE TABLE src (id int) PARTITIONED BY (id) {properties}")
    with pytest.raises(txn.InvalidOptionError, match="is STORED AS parquet"):
        sql(spark, f"CREATE TABLE src (id int) STORED AS parquet {properties}")
    assert not Path(warehouse.location(TableName("default", "src"))).exists()


@pytest.fixture
def declared(spark: Any, warehouse: Catalog) -> Catalog:
    """A streaming sink, a plain table and a socket source (on a port nobody listens on)."""
    sql(spark, "CREATE TABLE sink (id int, name string) STORED AS carbondata "
               "TBLPROPERTIES('streaming'='true')")
    sql(spark, "CREATE TABLE plain (id int, name string) STORED AS carbondata")
    sql(spark, SOURCE_SQL.format(port=9))
    return warehouse


@pytest.mark.spark
@pytest.mark.parametrize(("statement", "message"), [
    ("CREATE STREAM j ON TABLE plain STMPROPERTIES('trigger'='ProcessingTime', 'interval'="
     "'1 seconds') AS SELECT * FROM source",
     r"Table default.plain is not streaming sink table \('streaming' tblproperty is not 'sink' or 'true'\)"),
    ("CREATE STREAM j ON TABLE source STMPROPERTIES('trigger'='ProcessingTime', 'interval'="
     "'1 seconds') AS SELECT * FROM source", "Table default.source is not streaming sink table"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='Continuous', 'interval'='1 seconds') "
     "AS SELECT * FROM source", "invalid trigger: Continuous"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('interval'='1 seconds') AS SELECT * FROM source",
     "trigger must be specified"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime') AS SELECT * FROM source",
     "interval must be specified"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', 'interval'='soon') "
     "AS SELECT * FROM source", "invalid interval: 'soon'"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', 'interval'='1 seconds',"
     " 'parallelism'='2') AS SELECT * FROM source", "STMPROPERTIES 'parallelism' not supported"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', 'interval'='1 seconds')"
     " AS SELECT 1 AS id, 'a' AS name", "Must specify stream source table in the stream query"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', 'interval'='1 seconds')"
     " AS SELECT * FROM plain", r"Table default.plain is not streaming source table"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', 'interval'='1 seconds')"
     " AS SELECT id FROM source", "Schema of table default.sink does not match query output"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime', 'interval'='1 seconds')"
     " AS SELECT nonsense FROM source", "the stream's query is not valid Spark SQL"),
    ("CREATE STREAM j ON TABLE sink STMPROPERTIES('trigger'='ProcessingTime' 'interval'='1 seconds')"
     " AS SELECT * FROM source", "expected ','"),
])
def test_create_stream_refuses_what_carbondata_refuses(
        spark: Any, declared: Catalog, statement: str, message: str) -> None:
    with pytest.raises(txn.TxnError, match=message) as error:
        sql(spark, statement)
    assert repr(statement) in str(error.value)
    assert jobs() == []
    assert declared.open(TableName("default", "sink")).streams() == []


@pytest.mark.spark
def test_a_stream_whose_source_cannot_be_read_fails_to_start(spark: Any, declared: Catalog) -> None:
    """Port 9 has no listener: the query dies opening the socket, CREATE STREAM says so."""
    statement = STREAM_SQL
    with pytest.raises(txn.InvalidOptionError, match=r"stream job1 failed to start reading source "
                                                     r"default\.source"):
        sql(spark, statement)
    assert jobs() == []
    assert sql(spark, "SHOW STREAMS").collect() == []


@pytest.mark.spark
def test_drop_stream_of_an_unknown_name(spark: Any, warehouse: Catalog) -> None:
    with pytest.raises(txn.StreamNotFoundError, match="no stream named nothing") as error:
        sql(spark, "DROP STREAM nothing")
    assert "'DROP STREAM nothing'" in str(error.value)
    assert sql(spark, "DROP STREAM IF EXISTS nothing").collect() == []


@pytest.mark.spark
def test_show_streams_on_a_table_that_does_not_exist(spark: Any, warehouse: Catalog) -> None:
    with pytest.raises(txn.TableNotFoundError, match=r"table default\.nowhere does not exist") as error:
        sql(spark, "SHOW STREAMS ON TABLE nowhere")
    assert "'SHOW STREAMS ON TABLE nowhere'" in str(error.value)


def test_stream_statements_parse_and_others_are_left_alone() -> None:
    created = parse("create stream IF NOT EXISTS `Job 2` on table db.Sink stmproperties("
                    "'Trigger'='ProcessingTime', 'interval'='5 seconds') as "
                    "SELECT s.id, extract(year FROM s.day) FROM db.src s, other JOIN x ON true;")
    assert isinstance(created, CreateStream)
    assert (created.name, created.if_not_exists, str(created.sink)) == ("Job 2", True, "db.sink")
    assert created.properties == {"trigger": "ProcessingTime", "interval": "5 seconds"}
    assert [(t.name, t.aliased) for t in created.tables] == [("db.src", True), ("other", False),
                                                             ("x", False)]
    assert all(created.query[t.start:t.end] == t.name for t in created.tables)
    assert parse("SHOW STREAMS ON TABLE t") == ShowStreams(TableName("default", "t"))
    assert parse("drop stream if exists j1") == DropStream("j1", True)
    for other in ("SELECT * FROM streams", "SHOW SEGMENTS FOR TABLE t", "DROP TABLE stream",
                  "CREATE TABLE t (id int) TBLPROPERTIES('streaming'='true')",
                  "CREATE TABLE t (id int) TBLPROPERTIES('comment'='streaming', 'x'='source')"):
        assert parse(other) is None


@pytest.mark.parametrize("statement", [
    "DROP STREAM", "DROP STREAM a b", "SHOW STREAMS ON sink", "CREATE STREAM j ON TABLE sink",
    "CREATE STREAM j ON TABLE sink AS", "CREATE STREAM j ON sink AS SELECT 1",
    "CREATE STREAM j ON TABLE sink STMPROPERTIES('a'='1', 'A'='2') AS SELECT 1",
])
def test_malformed_stream_statements_quote_the_statement_and_the_form(statement: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match=r"Expected: (CREATE|DROP|SHOW) STREAM") as error:
        parse(statement)
    assert repr(statement) in str(error.value)
