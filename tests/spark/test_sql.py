"""``txn.spark.sql``: CarbonData's statements against metatxn tables named in a warehouse.

Invariants:

* each statement does what its CarbonData counterpart does and answers with CarbonData's
  columns (an empty DataFrame for commands CarbonData answers with nothing);
* a statement that names a metatxn feature wrongly raises a ``TxnError`` whose message quotes
  the statement (and, for syntax and options, the expected form), and leaves the table exactly
  as it was (timeline, segments, rows);
* UPDATE and DELETE evaluate any Spark predicate and commit once;
* a query over a metatxn table name reads its latest snapshot when the statement runs, without
  registering anything again; statements that are not metatxn's reach ``spark.sql`` unchanged.
"""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.orc as orc
import pyarrow.parquet as pq
import pytest

import txn
import txn.spark
from txn._results import load_time_taken, segment_size
from txn.spark._sql import Catalog, TableName
from txn.spark._sql._catalog import WAREHOUSE_KEY
from txn.spark._sql._frames import freed_size, timestamp_text

pytestmark = pytest.mark.spark

PEOPLE = "CREATE TABLE people (id bigint, name string, score double, born date) STORED AS metatxn"


def people(sql: Any, warehouse: Path, rows: int = 6) -> txn.Table:
    """``people`` with ``rows`` rows in one segment: id i, name n<i>, score i * 1.5, born
    2020-01-(i+1)."""
    sql(PEOPLE)
    table = txn.open_table(str(warehouse / "people"))
    if not rows:
        return table
    table.append(pa.table({
        "id": pa.array(range(rows), pa.int64()), "name": [f"n{i}" for i in range(rows)],
        "score": [i * 1.5 for i in range(rows)],
        "born": pa.array([date(2020, 1, 1 + i) for i in range(rows)], pa.date32())}))
    return table


def state(table: txn.Table) -> Any:
    """What a refused statement must leave as it was."""
    fresh = txn.open_table(table.uri)
    return ([(i.time, i.action, i.state) for i in fresh.timeline()],
            [(s.id, s.status) for s in fresh.segments()],
            sorted(fresh.to_arrow().to_pylist(), key=repr))


def refused(sql: Any, table: txn.Table, statement: str, error: type[Exception] = txn.InvalidOptionError,
            *words: str) -> str:
    """Run ``statement``, expect ``error`` quoting it (and ``words``), and no change to ``table``."""
    before = state(table)
    with pytest.raises(error) as caught:
        sql(statement)
    message = str(caught.value)
    assert isinstance(caught.value, txn.TxnError)
    assert repr(statement) in message, message
    for word in words:
        assert word in message, (word, message)
    assert state(table) == before
    return message


def ids_of(table: txn.Table) -> list[int]:
    return sorted(txn.open_table(table.uri).to_arrow(columns=["id"])["id"].to_pylist())


# -- names and the warehouse -----------------------------------------------------------------------

def test_names_map_to_folders_of_the_warehouse() -> None:
    catalog = Catalog("/w/")
    assert catalog.name("Orders") == TableName("default", "orders")
    assert catalog.name(" Sales . T ") == TableName("sales", "t")
    assert catalog.name("`My_DB`.`2nd`") == TableName("my_db", "2nd")
    assert str(catalog.name("db.t")) == "db.t"
    assert catalog.location(catalog.name("t")) == "/w/t"
    assert catalog.location(catalog.name("default.t")) == "/w/t"
    assert catalog.location(catalog.name("sales.t")) == "/w/sales.db/t"
    for bad in ("a.b.c", "", "1abc", "t;", "`unclosed", "`odd-name`"):
        with pytest.raises(txn.InvalidOptionError, match=r"not a (valid )?table name"):
            catalog.name(bad)


def test_sql_needs_a_warehouse_and_register_keeps_the_format(spark: Any, tmp_path: Path) -> None:
    spark.conf.unset(WAREHOUSE_KEY)
    with pytest.raises(txn.InvalidOptionError, match=r"txn.spark.register\(spark, warehouse=...\)"):
        txn.spark.sql(spark, "SELECT 1")
    txn.spark.register(spark)  # without a warehouse: the format only
    with pytest.raises(txn.InvalidOptionError):
        txn.spark.sql(spark, "SELECT 1")
    txn.spark.register(spark, warehouse=str(tmp_path / "wh"))
    assert txn.spark.sql(spark, "SELECT 1 AS one").collect()[0]["one"] == 1
    spark.range(3).write.format("metatxn").mode("append").save(str(tmp_path / "wh" / "made"))
    assert txn.spark.sql(spark, "SELECT count(*) FROM made").first()[0] == 3
    with pytest.raises(txn.InvalidOptionError, match="warehouse"):
        txn.spark.register(spark, warehouse="  ")


# -- CREATE TABLE ----------------------------------------------------------------------------------

def test_create_table_maps_types_layout_and_properties(sql: Any, warehouse: Path) -> None:
    answer = sql("CREATE TABLE Sales.Orders (ID bigint NOT NULL, name varchar(20), price decimal(10,2), "
                 "qty int, small smallint, tiny tinyint, ratio float, flag boolean, day date, "
                 "at timestamp, local timestamp_ntz, tags array<string>, attrs map<string,int>, "
                 "pair struct<a:int,b:string>, raw binary) STORED AS carbondata "
                 "PARTITIONED BY (region string, year int) "
                 "TBLPROPERTIES('SORT_COLUMNS'='day, qty', 'RECORD_KEY'='id', 'streaming'='sink', "
                 "'COMPACTION_LEVEL_THRESHOLD'='5,2', 'Owner'='ops');")
    assert answer.columns == [] and answer.collect() == []
    table = txn.open_table(str(warehouse / "sales.db" / "orders"))
    assert [(f.name, str(f.type), f.nullable) for f in table.schema] == [
        ("id", "int64", False), ("name", "string", True), ("price", "decimal128(10, 2)", True),
        ("qty", "int32", True), ("small", "int16", True), ("tiny", "int8", True),
        ("ratio", "float", True), ("flag", "bool", True), ("day", "date32[day]", True),
        ("at", "timestamp[us, tz=UTC]", True), ("local", "timestamp[us]", True),
        ("tags", "list<element: string>", True), ("attrs", "map<string, int32>", True),
        ("pair", "struct<a: int32, b: string>", True), ("raw", "binary", True),
        ("region", "string", True), ("year", "int32", True)]
    assert table.partition_by == ["region", "year"]
    assert table.sort_by == ["day", "qty"] and table.record_key == "id"
    assert table.properties["streaming"] == "true"
    assert table.properties["compaction.level_threshold"] == "5,2"
    assert table.properties["owner"] == "ops"

    # IF NOT EXISTS does nothing on an existing table; without it the table is refused
    created = table.created_at
    sql("create table if not exists sales.orders (x int) stored as metatxn")
    assert txn.open_table(table.uri).created_at == created
    message = refused(sql, table, "CREATE TABLE sales.orders (x int) USING metatxn", txn.TableExistsError)
    assert "already exists" in message

    # USING metatxn, PARTITIONED BY a listed column, a compound key
    sql("CREATE TABLE events (day date, id bigint, kind string, v double) USING metatxn "
        "PARTITIONED BY (day) TBLPROPERTIES('RECORD_KEY'='id,kind')")
    events = txn.open_table(str(warehouse / "events"))
    assert events.partition_by == ["day"] and events.record_key == ["id", "kind"]
    assert events.schema.names == ["day", "id", "kind", "v"]


def test_create_table_errors_quote_the_statement_and_create_nothing(sql: Any, warehouse: Path) -> None:
    for statement, words in [
        ("CREATE TABLE t (a int, b string) STORED AS metatxn TBLPROPERTIES('SORT_COLUMNS'='c')",
         ["sort_by names unknown column 'c'"]),
        ("CREATE TABLE t (a int, A string) STORED AS metatxn", ["declared twice"]),
        ("CREATE TABLE t (a interval year to month) STORED AS metatxn", ["interval"]),
        ("CREATE TABLE t (a int) STORED AS metatxn LOCATION '/elsewhere'", ["do not support", "LOCATION"]),
        ("CREATE TABLE t (a int) STORED AS metatxn TBLPROPERTIES('RECORD_KEY'=' ')", ["names no column"]),
        ("CREATE TABLE t (a int) STORED AS metatxn TBLPROPERTIES('streaming'='maybe')", ["streaming"]),
        ("CREATE TABLE t (a int STORED AS metatxn", ["cannot read the statement", "Expected: CREATE TABLE"]),
    ]:
        with pytest.raises(txn.InvalidOptionError) as caught:
            sql(statement)
        assert repr(statement) in str(caught.value)
        for word in words:
            assert word in str(caught.value), (word, str(caught.value))
        assert not (warehouse / "t").exists()


def test_create_table_as_select_writes_the_query_in_one_commit(sql: Any, warehouse: Path) -> None:
    source = people(sql, warehouse)
    sql("CREATE TABLE high STORED AS metatxn PARTITIONED BY (band) TBLPROPERTIES('SORT_COLUMNS'='id') "
        "AS SELECT id, upper(name) AS Name, CASE WHEN score > 4 THEN 'top' ELSE 'mid' END AS band "
        "FROM people WHERE id > 1")
    high = txn.open_table(str(warehouse / "high"))
    assert high.schema.names == ["id", "name", "band"] and high.partition_by == ["band"]
    assert sorted(high.to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 2, "name": "N2", "band": "mid"}, {"id": 3, "name": "N3", "band": "top"},
        {"id": 4, "name": "N4", "band": "top"}, {"id": 5, "name": "N5", "band": "top"}]
    assert [i.action for i in high.timeline()] == ["commit"]
    refused(sql, source, "CREATE TABLE people STORED AS metatxn AS SELECT 1 AS x", txn.TableExistsError)


# -- LOAD DATA -------------------------------------------------------------------------------------

def test_load_data_csv_with_carbondata_options(sql: Any, warehouse: Path, tmp_path: Path) -> None:
    people_table = people(sql, warehouse, rows=0)
    headerless = tmp_path / "in.csv"
    headerless.write_text('7|"Ann|Lee"|3.5|2021-02-03\n8|Bob|4|2021-02-04\n')
    answer = sql(f"LOAD DATA LOCAL INPATH '{headerless}' INTO TABLE default.people OPTIONS("
                 "'DELIMITER'='|', 'QUOTECHAR'='\"', 'FILEHEADER'='ID,name,score,born')")
    assert answer.columns == ["Segment ID"] and answer.collect()[0][0] == "0"
    with_header = tmp_path / "with_header.csv"
    with_header.write_text("born,score,name,id\n2021-03-01,1.25,'Cy, Jr',9\n")
    sql(f"LOAD DATA INPATH '{with_header}' INTO TABLE people OPTIONS('QUOTECHAR'=\"'\")")
    table_order = tmp_path / "table_order.txt"
    table_order.write_text("10;Di;0.5;03/04/2021\n# a comment line\n")
    sql(f"LOAD DATA INPATH '{table_order}' INTO TABLE people OPTIONS('HEADER'='false', "
        "'DELIMITER'=';', 'DATEFORMAT'='dd/MM/yyyy', 'COMMENTCHAR'='#')")
    rows = sorted(txn.open_table(people_table.uri).to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 7, "name": "Ann|Lee", "score": 3.5, "born": date(2021, 2, 3)},
        {"id": 8, "name": "Bob", "score": 4.0, "born": date(2021, 2, 4)},
        {"id": 9, "name": "Cy, Jr", "score": 1.25, "born": date(2021, 3, 1)},
        {"id": 10, "name": "Di", "score": 0.5, "born": date(2021, 4, 3)}]
    assert [s.id for s in txn.open_table(people_table.uri).segments()] == ["2", "1", "0"]


def test_load_data_parquet_orc_and_json_sources(sql: Any, warehouse: Path, tmp_path: Path) -> None:
    table = people(sql, warehouse, rows=0)
    source = pa.table({"NAME": ["p", "q"], "id": pa.array([1, 2], pa.int32()), "score": [1.0, 2.0],
                       "born": pa.array([date(2022, 1, 1), date(2022, 1, 2)], pa.date32())})
    pq.write_table(source, tmp_path / "a.parquet")
    orc.write_table(source.set_column(1, "id", pa.array([3, 4], pa.int64())), tmp_path / "b.orc")
    folder = tmp_path / "json_folder"
    folder.mkdir()
    (folder / "part-0").write_text("".join(json.dumps({"id": i, "name": f"j{i}", "score": i / 4,
                                                       "born": "2022-02-0" + str(i)}) + "\n" for i in (5, 6)))
    sql(f"LOAD DATA INPATH '{tmp_path / 'a.parquet'}' INTO TABLE people")
    sql(f"LOAD DATA INPATH '{tmp_path / 'b.orc'}' OVERWRITE INTO TABLE people")
    sql(f"LOAD DATA INPATH '{folder}' INTO TABLE people OPTIONS('FORMAT'='json')")
    rows = sorted(txn.open_table(table.uri).to_arrow().to_pylist(), key=lambda r: r["id"])
    assert rows == [
        {"id": 3, "name": "p", "score": 1.0, "born": date(2022, 1, 1)},
        {"id": 4, "name": "q", "score": 2.0, "born": date(2022, 1, 2)},
        {"id": 5, "name": "j5", "score": 1.25, "born": date(2022, 2, 5)},
        {"id": 6, "name": "j6", "score": 1.5, "born": date(2022, 2, 6)}]
    assert [(s.id, s.status) for s in txn.open_table(table.uri).segments()] == [
        ("2", "Success"), ("1", "Success"), ("0", "Marked for Delete")]


def test_load_data_bad_records_fail_force_or_ignore(sql: Any, warehouse: Path, tmp_path: Path) -> None:
    table = people(sql, warehouse, rows=0)
    source = tmp_path / "bad.csv"
    source.write_text("id,name,score,born\n1,a,1.5,2020-01-01\n2,b,lots,2020-01-02\n3,c,,2020-01-03\n")
    message = refused(sql, table, f"LOAD DATA INPATH '{source}' INTO TABLE people", txn.SchemaMismatchError,
                      "'lots'", "'score'", "BAD_RECORDS_ACTION")
    assert "nothing was written" in message
    sql(f"LOAD DATA INPATH '{source}' INTO TABLE people OPTIONS('BAD_RECORDS_ACTION'='IGNORE')")
    assert ids_of(table) == [1, 3]
    sql(f"LOAD DATA INPATH '{source}' INTO TABLE people OPTIONS('bad_records_action'='force')")
    scores = txn.open_table(table.uri).to_arrow().to_pylist()
    assert sorted((r["id"], r["score"]) for r in scores if r["id"] == 2) == [(2, None)]


def test_load_data_errors(sql: Any, warehouse: Path, tmp_path: Path) -> None:
    table = people(sql, warehouse, rows=1)
    source = tmp_path / "in.json"  # a CSV column the table lacks is ignored, as CarbonData does
    source.write_text('{"id": 1, "name": "a", "score": 1.5, "born": "2020-01-01", "extra": "x"}\n')
    fine = tmp_path / "fine.csv"
    fine.write_text("1,a,1.5,2020-01-01\n")
    cases = [
        (f"LOAD DATA INPATH '{fine}' INTO TABLE people OPTIONS('DELIM'='|')",
         ["unknown option(s) ['delim']"]),
        (f"LOAD DATA INPATH '{fine}' INTO TABLE people OPTIONS('HEADER'='true', 'FILEHEADER'='id')",
         ["'FILEHEADER' must not"]),
        (f"LOAD DATA INPATH '{fine}' INTO TABLE people OPTIONS('HEADER'='maybe')", ["'true' or 'false'"]),
        (f"LOAD DATA INPATH '{source}' INTO TABLE people", ["['extra'] the table does not have"]),
        (f"LOAD DATA INPATH '{fine}' INTO TABLE people OPTIONS('FILEHEADER'='id,name')",
         ["lacks table column(s) ['score', 'born']"]),
        (f"LOAD DATA INPATH '{fine}' INTO TABLE people OPTIONS('FORMAT'='xml')", ["'FORMAT' must be one of"]),
        (f"LOAD DATA INPATH '{tmp_path / 'missing.csv'}' INTO TABLE people OPTIONS('HEADER'='false')",
         ["cannot read the input path"]),
        (f"LOAD DATA INPATH '{fine}' INTO TABLE people PARTITION (name='a') OPTIONS('HEADER'='false')",
         ["not a partition column"]),
        (f"LOAD DATA INPATH {fine} INTO TABLE people", ["the input path as a quoted string"]),
        (f"LOAD DATA INPATH '{fine}' INTO TABLE people OPTIONS('HEADER'='false') extra", ["unexpected"]),
    ]
    for statement, words in cases:
        message = refused(sql, table, statement, txn.InvalidOptionError, *words)
        assert "Expected: LOAD DATA" in message
    refused(sql, table, f"LOAD DATA INPATH '{fine}' INTO TABLE nobody OPTIONS('HEADER'='false')",
            txn.TableNotFoundError, "default.nobody")


def test_load_data_into_a_static_partition(sql: Any, warehouse: Path, tmp_path: Path) -> None:
    sql("CREATE TABLE logs (id bigint, msg string) STORED AS metatxn PARTITIONED BY (day int)")
    source = tmp_path / "day.csv"
    source.write_text("1,a\n2,b\n")
    sql(f"LOAD DATA INPATH '{source}' INTO TABLE logs PARTITION (day='20240101') "
        "OPTIONS('FILEHEADER'='id,msg')")
    assert sorted(r["day"] for r in txn.open_table(str(warehouse / "logs")).to_arrow().to_pylist()) == \
        [20240101, 20240101]
    assert [r[0] for r in sql("SHOW PARTITIONS logs").collect()] == ["day=20240101"]


# -- SHOW SEGMENTS, COMPACT, DELETE SEGMENT, CLEAN FILES, ADD SEGMENT ------------------------------

def test_show_segments_answers_carbondata_columns(spark: Any, sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse)
    table.append(pa.table({"id": pa.array([100], pa.int64()), "name": ["x"], "score": [0.0],
                           "born": pa.array([date(2020, 5, 5)], pa.date32())}))
    shown = sql("SHOW SEGMENTS FOR TABLE people")
    assert shown.columns == ["ID", "Status", "Load Start Time", "Load Time Taken", "Partition",
                             "Data Size", "Index Size", "File Format"]
    rows = [r.asDict() for r in shown.collect()]
    segments = table.segments()
    assert [r["ID"] for r in rows] == ["1", "0"]
    for row, segment in zip(rows, segments, strict=True):
        assert row["Status"] == "Success" and row["Partition"] == "NA" and row["File Format"] == "parquet"
        assert row["Load Start Time"] == timestamp_text(segment.load_start, timezone.utc)
        assert row["Data Size"] == segment_size(segment.data_size)
        assert row["Load Time Taken"] == load_time_taken(segment.load_start, segment.load_end)
    assert [r["ID"] for r in sql("SHOW SEGMENTS ON default.PEOPLE LIMIT 1").collect()] == ["1"]
    assert sql("show segments for table `people` limit 0").collect() == []

    # AS <query>: CarbonData's view <table>_segments, for this statement only
    queried = sql("SHOW SEGMENTS FOR TABLE people AS SELECT id, dataSize, timeTakenMs >= 0 AS ended "
                  "FROM people_segments WHERE status = 'Success' ORDER BY dataSize DESC")
    assert [tuple(r) for r in queried.collect()] == sorted(
        [(s.id, s.data_size, True) for s in segments], key=lambda r: -r[1])
    assert not spark.catalog.tableExists("people_segments")
    spark.createDataFrame([(1,)], "x int").createOrReplaceTempView("people_segments")
    refused(sql, table, "SHOW SEGMENTS ON people AS SELECT * FROM people_segments", txn.InvalidOptionError,
            "people_segments already exists")
    spark.catalog.dropTempView("people_segments")


def test_carbondata_text_formats() -> None:
    assert [segment_size(s) for s in (None, -1, 0, 912, 1264, 4_718_592, 3 * 1024**3, 5 * 1024**4)] == \
        ["NA", "NA", "0.0B", "912.0B", "1.23KB", "4.50MB", "3.00GB", "5.00TB"]
    assert [freed_size(s) for s in (0, 1023, 12_500, 5 * 1024**3)] == \
        ["0 Byte", "1023 Byte", "12 KB", "5120 MB"]
    start = datetime(2021, 11, 29, 17, 59, 40, 819000, tzinfo=timezone.utc)
    assert timestamp_text(start, timezone.utc) == "2021-11-29 17:59:40.819"
    assert timestamp_text(start.replace(microsecond=50000), timezone(timedelta(hours=8))) == \
        "2021-11-30 01:59:40.05"
    assert timestamp_text(start.replace(microsecond=0), timezone.utc) == "2021-11-29 17:59:40.0"
    assert timestamp_text(None, timezone.utc) == "NA"
    durations = [timedelta(seconds=7.026), timedelta(minutes=1, seconds=3.2), timedelta(0),
                 timedelta(hours=2, seconds=5)]
    assert [load_time_taken(start, start + d) for d in durations] == ["7.026S", "1M3.2S", "0S", "2H5S"]
    assert load_time_taken(start, None) == "NA"


def test_compact_custom_and_delete_segments(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse, rows=2)
    for first in (10, 20, 30):
        sql(f"INSERT INTO people VALUES ({first}, 'v', 1.0, DATE '2021-01-01')")
    assert sql("ALTER TABLE people COMPACT 'CUSTOM' WHERE SEGMENT.ID IN (1, 2)").collect() == []
    assert [(s.id, s.status, s.merged_to) for s in txn.open_table(table.uri).segments()] == [
        ("3", "Success", None), ("2", "Compacted", "1.1"), ("1.1", "Success", None),
        ("1", "Compacted", "1.1"), ("0", "Success", None)]
    assert ids_of(table) == [0, 1, 10, 20, 30]

    assert sql("DELETE FROM TABLE people WHERE SEGMENT.ID IN (3, 1.1)").collect() == []
    assert ids_of(table) == [0, 1]
    shown = {r["ID"]: r["Status"] for r in sql("SHOW SEGMENTS FOR TABLE people").collect()}
    assert shown["3"] == shown["1.1"] == "Marked for Delete"
    refused(sql, table, "DELETE FROM TABLE people WHERE SEGMENT.ID IN (0, 42)",
            txn.SegmentNotFoundError, "42")

    # by load start time, in the session time zone: everything loaded before now
    later = (datetime.now(timezone.utc) + timedelta(minutes=1)).strftime("%Y-%m-%d %H:%M:%S")
    sql(f"DELETE FROM TABLE default.people WHERE SEGMENT.STARTTIME BEFORE '{later}'")
    assert ids_of(table) == []
    assert {s.status for s in txn.open_table(table.uri).segments()} <= {"Marked for Delete", "Compacted"}


def test_segment_statement_errors(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse)
    cases = [
        ("ALTER TABLE people COMPACT 'SIDEWAYS'", "unknown compaction type 'SIDEWAYS'",
         "Expected: ALTER TABLE [db.]table COMPACT 'MINOR'"),
        ("ALTER TABLE people COMPACT 'SEGMENT_INDEX'", "CarbonData's only", "'CLOSE_STREAMING'"),
        ("ALTER TABLE people COMPACT 'CUSTOM'", "segment ids should not be empty", "SEGMENT.ID IN"),
        ("ALTER TABLE people COMPACT 'MINOR' WHERE SEGMENT.ID IN (0)", "not supported when doing MINOR",
         "COMPACT"),
        ("ALTER TABLE people COMPACT MINOR", "as a quoted string", "COMPACT"),
        ("ALTER TABLE people RENAME TO folks", "RENAME TO is not supported", "RENAME COLUMN column TO"),
        ("SHOW SEGMENTS FOR people", "expected TABLE but found 'people'",
         "Expected: SHOW [HISTORY] SEGMENTS FOR TABLE"),
        ("SHOW SEGMENTS people", "expected FOR TABLE or ON", "SHOW [HISTORY] SEGMENTS ON"),
        ("SHOW SEGMENTS FOR TABLE people LIMIT -1", "the LIMIT", "[LIMIT n]"),
        ("SHOW SEGMENTS FOR TABLE a.b.c", "at most two parts", "[db.]table"),
        ("CLEAN FILES FOR TABLE people OPTIONS('force'='yes')", "'true' or 'false'", "CLEAN FILES FOR TABLE"),
        ("CLEAN FILES FOR TABLE people OPTIONS('speed'='fast')", "unknown option(s) ['speed']", "dryrun"),
        ("CLEAN FILES people", "expected FOR", "CLEAN FILES FOR TABLE"),
        ("DELETE FROM TABLE people WHERE SEGMENT.ID IN ()", "expected a segment id", "SEGMENT.ID IN"),
        ("DELETE FROM TABLE people WHERE SEGMENT.STARTTIME BEFORE 'yesterday'",
         "invalid load start time format: 'yesterday'", "SEGMENT.STARTTIME BEFORE"),
        ("DELETE FROM TABLE people WHERE SEGMENT.NAME IN (1)", "expected ID or STARTTIME", "SEGMENT.ID"),
        ("ALTER TABLE people ADD SEGMENT OPTIONS('format'='parquet')", "'path' is mandatory", "'path'="),
        ("ALTER TABLE people ADD SEGMENT OPTIONS('path'='/x', 'colour'='red')",
         "unknown option(s) ['colour']", "ADD SEGMENT"),
        ("ALTER TABLE people ADD SEGMENT OPTIONS('path'='/x', 'path'='/y')", "given twice", "ADD SEGMENT"),
        ("SHOW PARTITIONS people", "not partitioned", "SHOW PARTITIONS"),
        ("DROP TABLE IF EXISTS people", "DROP TABLE is not supported", "remove its folder"),
    ]
    for statement, *words in cases:
        refused(sql, table, statement, txn.InvalidOptionError, *words)
    refused(sql, table, "ALTER TABLE people COMPACT 'CUSTOM' WHERE SEGMENT.ID IN (7)",
            txn.SegmentNotFoundError, "7")
    refused(sql, table, "ALTER TABLE people ADD SEGMENT OPTIONS('path'='/no/such/folder')",
            txn.InvalidOptionError, "/no/such/folder")
    for statement in ("SHOW SEGMENTS FOR TABLE ghost", "ALTER TABLE ghost COMPACT 'MINOR'",
                      "CLEAN FILES FOR TABLE sales.ghost", "DELETE FROM TABLE ghost WHERE SEGMENT.ID IN (0)"):
        refused(sql, table, statement, txn.TableNotFoundError, "does not exist")


def test_clean_files_dry_run_force_and_statistics(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse)
    sql("INSERT INTO people VALUES (50, 'z', 0.0, DATE '2021-01-01')")
    sql("DELETE FROM TABLE people WHERE SEGMENT.ID IN (0)")
    dry = sql("CLEAN FILES FOR TABLE people OPTIONS('dryrun'='true', 'force'='true')")
    assert dry.columns == ["Size To Be Freed", "Trash Data Remaining"]
    to_free = dry.first()["Size To Be Freed"]
    assert to_free != "0 Byte" and dry.first()["Trash Data Remaining"] == "0 Byte"
    assert sql("CLEAN FILES FOR TABLE people OPTIONS('force'='true')").collect()[0].asDict() == \
        {"Size Freed": to_free}
    assert sql("CLEAN FILES FOR TABLE people OPTIONS('statistics'='false')").collect() == []
    assert ids_of(table) == [50]
    # CarbonData's TestCleanFileCommand: the Marked for Delete segment is gone from SHOW SEGMENTS
    # after a forced clean and listed, invisible, by SHOW HISTORY SEGMENTS (issue 22, item 12)
    assert [r["Status"] for r in sql("SHOW SEGMENTS FOR TABLE people").collect()] == ["Success"]
    assert [(r["ID"], r["Status"], r["Visibility"])
            for r in sql("SHOW HISTORY SEGMENTS FOR TABLE people").collect()] == [
        ("1", "Success", "true"), ("0", "Marked for Delete", "false")]
    assert [r["ID"] for r in sql("SHOW HISTORY SEGMENTS FOR TABLE people LIMIT 1").collect()] == ["1"]


def test_clean_files_counts_stale_files_in_the_trash_not_as_freed(sql: Any, warehouse: Path) -> None:
    """Issue 22, item 11: a file of no segment goes to the trash; Size Freed does not count it,
    Trash Data Remaining does, and a forced clean empties the trash."""
    table = people(sql, warehouse)
    sql("INSERT INTO people VALUES (50, 'z', 0.0, DATE '2021-01-01')")
    first = table.timeline()[0].time  # decided, and older than the newest commit: its leftover
    stale = warehouse / "people" / "segment_0" / f"part-0-09999-0123456789abcdef_{first}.parquet"
    stale.write_bytes(b"x" * 2048)
    dry = sql("CLEAN FILES FOR TABLE people OPTIONS('dryrun'='true')").first().asDict()
    assert dry == {"Size To Be Freed": "0 Byte", "Trash Data Remaining": "2 KB"}
    assert sql("CLEAN FILES FOR TABLE people").first().asDict() == {"Size Freed": "0 Byte"}
    assert not stale.exists()
    assert sql("CLEAN FILES FOR TABLE people OPTIONS('dryrun'='true')").first().asDict() == \
        {"Size To Be Freed": "0 Byte", "Trash Data Remaining": "2 KB"}
    assert sql("CLEAN FILES FOR TABLE people OPTIONS('force'='true')").first().asDict() == \
        {"Size Freed": "2 KB"}
    assert not (warehouse / "people" / "_trash").exists() or not any(
        p.is_file() for p in (warehouse / "people" / "_trash").rglob("*"))


def test_add_segment_of_a_parquet_folder(sql: Any, warehouse: Path, tmp_path: Path) -> None:
    table = people(sql, warehouse, rows=1)
    folder = tmp_path / "old_table"
    folder.mkdir()
    old_rows = pa.table({"id": pa.array([70, 71], pa.int64()), "name": ["o", "p"], "score": [7.0, 7.5],
                         "born": pa.array([date(2019, 1, 1)] * 2, pa.date32())})
    pq.write_table(old_rows, folder / "part-0.parquet")
    assert sql(f"ALTER TABLE people ADD SEGMENT OPTIONS('path'='{folder}/')").collect() == []
    newest = sql("SHOW SEGMENTS FOR TABLE people LIMIT 1").first()
    assert (newest["ID"], newest["Status"], newest["File Format"], newest["Index Size"]) == \
        ("1", "Success", "parquet", "NA")
    assert ids_of(table) == [0, 70, 71]
    # rows of an external segment are deleted by delete deltas; the folder stays as it was
    before = (folder / "part-0.parquet").read_bytes()
    assert sql("DELETE FROM people WHERE name = 'o'").first()[0] == 1
    assert ids_of(table) == [0, 71] and (folder / "part-0.parquet").read_bytes() == before
    refused(sql, table, f"ALTER TABLE people ADD SEGMENT OPTIONS('path'='{folder}', 'format'='parquet')",
            txn.InvalidOptionError, "added")


# -- UPDATE and DELETE -----------------------------------------------------------------------------

def test_update_in_both_forms_with_spark_expressions_one_commit_each(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse)
    sql("CREATE TABLE bonus (id bigint, extra double) STORED AS metatxn")
    sql("INSERT INTO bonus VALUES (1, 100.0), (4, 400.0)")
    commits = len(table.timeline())
    answer = sql("UPDATE people SET (name, born) = (upper(name) || '!', date_add(born, 10)) "
                 "WHERE id % 2 = 0 AND name RLIKE '^n[0-9]$'")
    assert answer.columns == ["Updated Row Count"] and answer.first()[0] == 3
    answer = sql("UPDATE people AS p SET score = p.score + "
                 "(SELECT max(extra) FROM bonus b WHERE b.id = p.id) WHERE p.id IN (SELECT id FROM bonus)")
    assert answer.first()[0] == 2
    assert len(txn.open_table(table.uri).timeline()) == commits + 2
    rows = {r["id"]: r for r in txn.open_table(table.uri).to_arrow().to_pylist()}
    assert rows[0]["name"] == "N0!" and rows[0]["born"] == date(2020, 1, 11)
    assert rows[2]["name"] == "N2!" and rows[4]["name"] == "N4!"
    assert rows[1]["name"] == "n1" and rows[1]["born"] == date(2020, 1, 2)
    assert rows[1]["score"] == 101.5 and rows[4]["score"] == 406.0 and rows[3]["score"] == 4.5
    assert len(rows) == 6

    # without WHERE every row; with a predicate no row matches: nothing committed
    assert sql("UPDATE people SET score = 0").first()[0] == 6
    commits = len(txn.open_table(table.uri).timeline())
    assert sql("UPDATE people SET score = 1 WHERE id > 1000").first()[0] == 0
    assert len(txn.open_table(table.uri).timeline()) == commits
    assert {r["score"] for r in txn.open_table(table.uri).to_arrow().to_pylist()} == {0.0}
    assert txn.open_table(table.uri).validate().ok


def test_delete_with_a_spark_predicate(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse)
    sql("INSERT INTO people VALUES (100, NULL, NULL, NULL)")
    answer = sql("DELETE FROM people WHERE born BETWEEN DATE '2020-01-02' AND DATE '2020-01-03' "
                 "OR name IS NULL")
    assert answer.columns == ["Deleted Row Count"] and answer.first()[0] == 3
    assert ids_of(table) == [0, 3, 4, 5]
    commits = len(txn.open_table(table.uri).timeline())
    assert sql("DELETE FROM people WHERE id = 42").first()[0] == 0
    assert len(txn.open_table(table.uri).timeline()) == commits
    assert sql("DELETE FROM people p WHERE p.id IN (SELECT id FROM people WHERE score > 6)").first()[0] == 1
    assert ids_of(table) == [0, 3, 4]
    assert sql("DELETE FROM people").first()[0] == 3
    assert ids_of(table) == []


def test_keyed_tables_update_and_delete_through_the_record_index(sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE accounts (id bigint, owner string, balance double) STORED AS metatxn "
        "TBLPROPERTIES('RECORD_KEY'='id')")
    sql("INSERT INTO accounts VALUES (1, 'a', 10.0), (2, 'b', 20.0), (3, 'c', 30.0)")
    table = txn.open_table(str(warehouse / "accounts"))
    assert sql("UPDATE accounts SET balance = balance * 2 WHERE owner <> 'b'").first()[0] == 2
    found = table.lookup([1, 2, 3])
    assert sorted(found["id"].to_pylist()) == [1, 2, 3]
    assert set(found.filter(pa.compute.field("id") == 1)["segment"].to_pylist()) == {"1"}
    assert sql("DELETE FROM accounts WHERE id = 2").first()[0] == 1
    assert sorted(table.lookup([1, 2, 3])["id"].to_pylist()) == [1, 3]
    sql("INSERT INTO accounts VALUES (2, 'b again', 5.0)")  # its key is free again
    with pytest.raises(txn.DuplicateKeyError):
        sql("INSERT INTO accounts VALUES (3, 'twice', 1.0)")
    rows = {r["id"]: (r["owner"], r["balance"]) for r in table.to_arrow().to_pylist()}
    assert rows == {1: ("a", 20.0), 2: ("b again", 5.0), 3: ("c", 60.0)}
    refused(sql, table, "UPDATE accounts SET id = id + 10", txn.InvalidOptionError,
            "record key column(s) ['id'] cannot be updated", "Expected: UPDATE")
    assert table.validate().ok


def test_update_and_delete_errors(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse)
    for statement, words in [
        ("UPDATE people SET nickname = 'x'", ["unknown column 'nickname'", "Expected: UPDATE"]),
        ("UPDATE people SET (name, score) = ('x')", ["2 column(s) but 1 value(s)"]),
        ("UPDATE people SET name = 'a', NAME = 'b'", ["set twice"]),
        ("UPDATE people SET (name, score) = (SELECT name, score FROM people)", ["more than one row"]),
        ("UPDATE people SET name = 'x' WHERE no_such_column > 1", ["Spark cannot evaluate it"]),
        ("UPDATE people SET name = WHERE id = 1", ["cannot read the statement"]),
        ("DELETE FROM people WHERE id >", ["cannot read the statement", "Expected: DELETE FROM"]),
        ("DELETE FROM people WHERE nope(id)", ["Spark cannot evaluate it"]),
    ]:
        refused(sql, table, statement, txn.InvalidOptionError, *words)


# -- queries and INSERT ----------------------------------------------------------------------------

def test_a_query_reads_the_latest_snapshot_when_it_runs(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse, rows=3)
    earlier = sql("SELECT * FROM people")
    assert sql("SELECT count(*) FROM people").first()[0] == 3
    table.append(pa.table({"id": pa.array([9], pa.int64()), "name": ["new"], "score": [0.0],
                           "born": pa.array([date(2020, 9, 9)], pa.date32())}))
    assert sql("SELECT count(*) FROM people").first()[0] == 4  # nothing registered again
    assert earlier.count() == 3  # a DataFrame keeps the snapshot of its statement
    sql("DELETE FROM people WHERE id = 0")
    assert sorted(r[0] for r in sql("SELECT id FROM default.people ORDER BY id").collect()) == [1, 2, 9]


def test_queries_join_ctes_views_and_other_statements(spark: Any, sql: Any, warehouse: Path) -> None:
    people(sql, warehouse, rows=4)
    sql("CREATE TABLE sales.visits (person bigint, n int) STORED AS metatxn")
    sql("INSERT INTO sales.visits VALUES (0, 5), (1, 7), (1, 1)")
    joined = sql("WITH v AS (SELECT person, sum(n) AS total FROM sales.visits GROUP BY person) "
                 "SELECT p.name, v.total FROM people p JOIN v ON v.person = p.id ORDER BY p.name")
    assert [tuple(r) for r in joined.collect()] == [("n0", 5), ("n1", 8)]
    # a CTE named like a metatxn table is the CTE
    assert sql("WITH people AS (SELECT 1 AS id) SELECT count(*) FROM people").first()[0] == 1
    # DESCRIBE shows a metatxn table's columns
    assert [tuple(r)[:2] for r in sql("DESCRIBE people").collect()] == [
        ("id", "bigint"), ("name", "string"), ("score", "double"), ("born", "date")]
    # qualified column names keep working
    assert sql("SELECT people.id FROM people WHERE people.id = 2").first()[0] == 2
    # a Spark temporary view over a metatxn table is pinned when it is created
    sql("CREATE OR REPLACE TEMPORARY VIEW first_people AS SELECT id FROM people")
    sql("INSERT INTO people VALUES (8, 'late', 1.0, DATE '2020-02-02')")
    assert spark.sql("SELECT count(*) FROM first_people").first()[0] == 4
    assert sql("SELECT count(*) FROM people").first()[0] == 5
    spark.catalog.dropTempView("first_people")
    # metatxn's temporary views do not outlive their statement (but for CREATE VIEW's)
    views = {t.name for t in spark.catalog.listTables() if t.name.startswith("metatxn_")}
    assert sql("SELECT count(*) FROM people p1 JOIN sales.visits v ON v.person = p1.id").first()[0] == 3
    assert {t.name for t in spark.catalog.listTables() if t.name.startswith("metatxn_")} == views
    # INSERT INTO a Spark table from a metatxn table
    spark.createDataFrame([], "id bigint").createOrReplaceTempView("sink_probe")
    assert sql("SELECT count(*) FROM people JOIN sink_probe USING (id)").first()[0] == 0
    spark.catalog.dropTempView("sink_probe")


def test_insert_values_select_column_lists_and_overwrite(sql: Any, warehouse: Path) -> None:
    table = people(sql, warehouse, rows=2)
    answer = sql("INSERT INTO people VALUES (10, 'ten', 10, '2020-10-10')")
    assert answer.columns == ["Segment ID"] and answer.first()[0] == "1"
    sql("INSERT INTO TABLE people (name, id) SELECT concat(name, '+'), id + 100 FROM people WHERE id < 2")
    rows = {r["id"]: r for r in txn.open_table(table.uri).to_arrow().to_pylist()}
    assert rows[10] == {"id": 10, "name": "ten", "score": 10.0, "born": date(2020, 10, 10)}
    assert rows[100] == {"id": 100, "name": "n0+", "score": None, "born": None}
    assert sorted(rows) == [0, 1, 10, 100, 101]
    sql("INSERT OVERWRITE TABLE people SELECT id, name, score, born FROM people WHERE id >= 100")
    assert ids_of(table) == [100, 101]
    for statement, words in [
        ("INSERT INTO people VALUES (1, 'x')", ["the query gives 2 column(s) but 4 are inserted"]),
        ("INSERT INTO people (id, nick) VALUES (1, 'x')", ["unknown column(s) ['nick']"]),
        ("INSERT INTO people PARTITION (name='x') SELECT 1, 2.0, DATE '2020-01-01'", ["PARTITION"]),
    ]:
        refused(sql, table, statement, txn.InvalidOptionError, *words)


def test_statements_that_are_not_metatxn_reach_spark_unchanged(spark: Any, sql: Any, warehouse: Path) -> None:
    from pyspark.errors import AnalysisException, ParseException, PySparkException

    people(sql, warehouse, rows=1)
    assert sql("SELECT 40 + 2 AS answer;").first()["answer"] == 42
    assert "default" in [r[0] for r in sql("SHOW DATABASES").collect()]
    sql("CREATE TEMPORARY VIEW numbers AS SELECT * FROM range(3)")
    assert sql("SELECT count(*) FROM numbers").first()[0] == 3
    with pytest.raises(AnalysisException):  # Spark's own error: not a metatxn table
        sql("SHOW PARTITIONS no_such_spark_table")
    with pytest.raises(PySparkException) as spark_error:
        sql("UPDATE numbers SET id = 1")
    assert not isinstance(spark_error.value, txn.TxnError)
    with pytest.raises(ParseException):
        sql("SELEKT 1")
    sql("DROP VIEW numbers")
    assert not spark.catalog.tableExists("numbers")
