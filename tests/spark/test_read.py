"""``txn.spark.read``: Spark's own Parquet scan of exactly a snapshot's files, deletes removed.

Invariants: whatever the filter (SQL string or pyarrow expression), projection or ``as_of``, a
Spark read holds the same rows as ``Table.to_arrow`` with the equivalent pyarrow arguments;
rows deleted by delete deltas (``delete``, ``upsert``) never appear; a selective filter scans
only the files the snapshot's column ranges cannot exclude; a read is pinned to its snapshot.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.spark
from txn.spark._types import spark_schema

from .helpers import ORDERS, frame, orders, relative, rows_by, spark_rows

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def keyed(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[txn.Table]:
    """A keyed table partitioned by region, with deletes, an upsert and rows of a null region.

    Shared by the read-only tests of this module: none of them writes to it.
    """
    uri = str(tmp_path_factory.mktemp("read") / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id", partition_by=["region"],
                             properties={"record_index.shards": "4"})
    table.append(orders(range(1200)))
    table.append(orders(range(1200, 2400)))
    table.delete(pc.field("qty") == 3)
    table.upsert(orders(range(0, 2400, 11), price_offset=0.5))
    no_region = orders(range(3000, 3050))
    txn.spark.write(frame(spark, no_region.set_column(
        1, "region", pa.nulls(50, pa.string())), 2), uri)
    yield table
    assert table.validate().ok


def _same_columns(df: Any, schema: pa.Schema) -> None:
    """The DataFrame has the table's columns and Spark types (nullability aside)."""
    assert [(f.name, f.dataType) for f in df.schema.fields] == [
        (f.name, f.dataType) for f in spark_schema(schema).fields]


def test_a_full_read_equals_the_pyarrow_read(spark: Any, keyed: txn.Table) -> None:
    df = txn.spark.read(spark, keyed.uri)
    _same_columns(df, ORDERS)
    expected = rows_by(keyed.to_arrow())
    deleted = {i for i in range(2400) if i % 50 == 3 and i % 17 != 0} - set(range(0, 2400, 11))
    assert [r["id"] for r in expected] == [*sorted(set(range(2400)) - deleted), *range(3000, 3050)]
    assert spark_rows(df, ORDERS) == expected
    assert df.count() == len(expected)


FILTERS = [
    ("price >= 500 AND region = 'eu'", (pc.field("price") >= 500) & (pc.field("region") == "eu")),
    ("id IN (1, 11, 1500, 3003, 99999)", pc.field("id").isin([1, 11, 1500, 3003, 99999])),
    ("day BETWEEN DATE '2026-01-05' AND DATE '2026-01-10'",
     (pc.field("day") >= dt.date(2026, 1, 5)) & (pc.field("day") <= dt.date(2026, 1, 10))),
    ("qty IS NULL OR region = 'us'", pc.field("qty").is_null() | (pc.field("region") == "us")),
    ("NOT (region = 'apac') AND id < 300", ~(pc.field("region") == "apac") & (pc.field("id") < 300)),
    ("region IS NULL", pc.field("region").is_null()),
    ("qty <> 7 AND price > 990", (pc.field("qty") != 7) & (pc.field("price") > 990)),
    # Not of a shape the file pruning understands: Spark filters every file's rows.
    ("id % 97 = 0", pc.equal(pc.divide(pc.field("id"), 97) * 97, pc.field("id"))),
]


@pytest.mark.parametrize(("sql", "expression"), FILTERS, ids=[sql for sql, _ in FILTERS])
def test_a_filter_as_sql_or_expression_gives_the_pyarrow_rows(
        spark: Any, keyed: txn.Table, sql: str, expression: pc.Expression) -> None:
    expected = rows_by(keyed.to_arrow(filter=expression))
    by_sql = txn.spark.read(spark, keyed.uri, filter=sql)
    _same_columns(by_sql, ORDERS)
    assert spark_rows(by_sql, ORDERS) == expected
    by_expression = txn.spark.read(spark, keyed.uri, filter=expression)
    _same_columns(by_expression, ORDERS)
    assert spark_rows(by_expression, ORDERS) == expected


def test_a_selective_filter_prunes_files(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    for start in range(0, 800, 100):  # eight files of disjoint id ranges
        table.append(orders(range(start, start + 100)))
    table.delete(keys=[5, 150])
    expression = pc.field("id") < 100
    everything, pruned = table.snapshot().files(), table.snapshot().files(expression)
    assert (len(everything), len(pruned)) == (8, 1)
    wanted = {relative(table, f.path) for f in pruned}
    assert pruned[0].delete_files, "the file read has deleted rows"

    for given in ("id < 100", expression):
        df = txn.spark.read(spark, uri, filter=given)
        assert {relative(table, p) for p in df.inputFiles()} == wanted
        assert spark_rows(df, ORDERS) == rows_by(orders([i for i in range(100) if i != 5]))
    unprunable = txn.spark.read(spark, uri, filter="id + 0 < 100")
    assert len(unprunable.inputFiles()) == 8
    assert spark_rows(unprunable, ORDERS) == rows_by(orders([i for i in range(100) if i != 5]))
    nothing = txn.spark.read(spark, uri, filter="id > 5000")
    assert nothing.inputFiles() == [] and nothing.count() == 0
    _same_columns(nothing, ORDERS)


def test_partition_filters_read_only_that_partition(spark: Any, keyed: txn.Table) -> None:
    df = txn.spark.read(spark, keyed.uri, filter="region = 'eu'")
    folders = {relative(keyed, p).split("/")[0] for p in df.inputFiles()}
    assert folders == {"region=eu"}
    assert spark_rows(df, ORDERS) == rows_by(keyed.to_arrow(filter=pc.field("region") == "eu"))


def test_deleted_rows_are_absent(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id", sort_by=["price"])
    table.append(orders(range(1000)))
    table.delete(pc.field("price") < 100)
    table.upsert(orders(range(500, 600), price_offset=0.25))
    txn.spark.write(frame(spark, orders(range(600, 700), price_offset=0.75)), uri, "upsert")
    table.update(pc.field("id") == 999, {"qty": 1})
    assert sum(f.deleted_rows for f in table.snapshot().files()) > 200

    expected = rows_by(table.to_arrow())
    assert [r["id"] for r in expected] == sorted(
        {i for i in range(1000) if (i * 37) % 1000 >= 100} | set(range(500, 700)))
    assert spark_rows(txn.spark.read(spark, uri), ORDERS) == expected
    assert txn.spark.read(spark, uri).count() == len(expected)
    assert txn.spark.read(spark, uri, filter="qty = 1 AND id = 999").collect()[0]["qty"] == 1
    assert table.validate().ok


def test_columns_select_and_order_the_columns(spark: Any, keyed: txn.Table) -> None:
    df = txn.spark.read(spark, keyed.uri, columns=["price", "id"])
    assert df.columns == ["price", "id"]
    assert spark_rows(df, ORDERS) == rows_by(keyed.to_arrow(columns=["price", "id"]))
    # The filter may use a column that is not selected.
    for given in ("qty = 7", pc.field("qty") == 7):
        df = txn.spark.read(spark, keyed.uri, filter=given, columns=["id"])
        assert df.columns == ["id"]
        assert spark_rows(df, ORDERS) == rows_by(
            keyed.to_arrow(filter=pc.field("qty") == 7, columns=["id"]))


def test_bad_read_arguments_are_refused(spark: Any, keyed: txn.Table) -> None:
    with pytest.raises(txn.InvalidOptionError, match=r"unknown.*nope"):
        txn.spark.read(spark, keyed.uri, columns=["id", "nope"])
    with pytest.raises(txn.InvalidOptionError, match="columns must be a list"):
        txn.spark.read(spark, keyed.uri, columns="id")
    with pytest.raises(txn.InvalidOptionError, match="filter must be"):
        txn.spark.read(spark, keyed.uri, filter=5)
    with pytest.raises(txn.InvalidOptionError, match="as_of"):
        txn.spark.read(spark, keyed.uri, as_of="yesterday")
    with pytest.raises(txn.TableNotFoundError):
        txn.spark.read(spark, keyed.uri + "-nowhere")


def test_as_of_reads_earlier_snapshots(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    table.append(orders(range(300)))
    table.delete(pc.field("id") < 50)
    table.upsert(orders(range(100, 400), price_offset=0.5))
    table.overwrite(orders(range(7)))
    instants = [i for i in table.timeline() if i.action != "rollback"]
    assert len(instants) == 4

    for instant in instants:
        expected = rows_by(table.to_arrow(as_of=instant.time))
        assert spark_rows(txn.spark.read(spark, uri, as_of=instant.time), ORDERS) == expected
    second = instants[1]
    moment = dt.datetime.strptime(second.completed_at or "", "%Y%m%d%H%M%S%f").replace(
        tzinfo=dt.timezone.utc)
    by_time = txn.spark.read(spark, uri, as_of=moment, filter="id < 60", columns=["id"])
    assert sorted(r["id"] for r in by_time.collect()) == list(range(50, 60))
    assert spark_rows(txn.spark.read(spark, uri), ORDERS) == rows_by(orders(range(7)))
    assert table.validate().ok


def test_empty_tables_read_as_empty_dataframes_with_the_table_schema(
        spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id", partition_by=["region"])
    empty = txn.spark.read(spark, uri)
    _same_columns(empty, ORDERS)
    assert empty.count() == 0 and empty.toArrow().num_rows == 0
    assert txn.spark.read(spark, uri, filter="id = 1", columns=["day"]).columns == ["day"]

    table.append(orders(range(20)))
    table.delete(pc.field("id") >= 0)
    assert table.to_arrow().num_rows == 0
    everything_deleted = txn.spark.read(spark, uri)
    _same_columns(everything_deleted, ORDERS)
    assert everything_deleted.count() == 0
    assert table.validate().ok


def test_a_read_is_pinned_to_its_snapshot(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    table.append(orders(range(100)))
    df = txn.spark.read(spark, uri)
    assert df.count() == 100
    table.append(orders(range(100, 150)))
    table.delete(keys=[1, 2, 3])
    assert df.count() == 100, "the DataFrame keeps the files and deletes of its snapshot"
    assert txn.spark.read(spark, uri).count() == 147


def test_a_view_serves_sql_over_a_pinned_snapshot(spark: Any, keyed: txn.Table) -> None:
    view = txn.spark.create_view(spark, "metatxn_orders", keyed.uri)
    try:
        got = spark.sql("SELECT id, price FROM metatxn_orders WHERE region = 'apac' AND qty > 40")
        assert spark_rows(got, ORDERS) == rows_by(keyed.to_arrow(
            filter=(pc.field("region") == "apac") & (pc.field("qty") > 40), columns=["id", "price"]))
        assert spark.sql("SELECT count(*) AS n FROM metatxn_orders").collect()[0]["n"] == view.count()
    finally:
        spark.catalog.dropTempView("metatxn_orders")


def test_reads_of_many_files(spark: Any, tmp_path: Path) -> None:
    """More files than Spark lists without a distributed listing job (32)."""
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    for start in range(0, 400, 10):
        table.append(orders(range(start, start + 10)))
    table.delete(keys=list(range(0, 400, 9)))
    assert len(table.snapshot().files()) == 40
    df = txn.spark.read(spark, uri)
    assert len(df.inputFiles()) == 40
    assert spark_rows(df, ORDERS) == rows_by(table.to_arrow())


# -- bugs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["runs[1]", "set{a,b}"])
def test_a_table_location_with_glob_characters_is_readable(
        spark: Any, tmp_path: Path, name: str) -> None:
    uri = str(tmp_path / name)
    table = txn.create_table(uri, ORDERS)
    table.append(orders(range(10)))
    assert spark_rows(txn.spark.read(spark, uri), ORDERS) == rows_by(table.to_arrow())


def test_an_expression_filter_on_a_zoned_timestamp_column(spark: Any, tmp_path: Path) -> None:
    zoned = pa.timestamp("ms", tz="Europe/Paris")
    schema = pa.schema([("id", pa.int64()), ("at", zoned)])
    uri = str(tmp_path / "events")
    table = txn.create_table(uri, schema)
    moments = [dt.datetime(2026, 3, day, 12, tzinfo=dt.timezone.utc) for day in range(1, 6)]
    table.append(pa.table({"id": pa.array(range(5), pa.int64()), "at": pa.array(moments, zoned)}))
    expression = pc.field("at") >= pa.scalar(moments[2], zoned)
    expected = rows_by(table.to_arrow(filter=expression))
    assert len(expected) == 3
    assert spark_rows(txn.spark.read(spark, uri, filter=expression), schema) == expected


def test_a_sql_string_literal_with_an_escape_prunes_nothing_it_matches(
        spark: Any, tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("note", pa.string())])
    uri = str(tmp_path / "notes")
    table = txn.create_table(uri, schema)
    table.append(pa.table({"id": [1], "note": ["line\nbreak"]}, schema=schema))
    table.append(pa.table({"id": [2], "note": ["plain"]}, schema=schema))
    sql = "note = 'line\\nbreak'"
    unpruned = spark.read.parquet(*[f.path for f in table.snapshot().files()]).where(sql)
    assert unpruned.count() == 1, "Spark decodes the escape"
    assert [r["id"] for r in txn.spark.read(spark, uri, filter=sql).collect()] == [1]


def test_timestamp_literals_prune_in_the_session_time_zone(spark: Any, tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
    uri = str(tmp_path / "events")
    table = txn.create_table(uri, schema)
    for day in range(1, 4):  # one file per day, 12:00 UTC
        table.append(pa.table({"id": [day], "at": pa.array(
            [dt.datetime(2026, 3, day, 12, tzinfo=dt.timezone.utc)], schema.field("at").type)}))
    sql = "at = TIMESTAMP '2026-03-02 07:00:00'"  # 12:00 UTC in New York (EST)
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        unpruned = spark.read.parquet(*[f.path for f in table.snapshot().files()]).where(sql)
        assert [r["id"] for r in unpruned.collect()] == [2]
        assert [r["id"] for r in txn.spark.read(spark, uri, filter=sql).collect()] == [2]
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)


@pytest.mark.parametrize(("data_type", "value"), [
    (pa.timestamp("ns", tz="UTC"), dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)),
    (pa.timestamp("ns"), dt.datetime(2026, 1, 1)),
    (pa.time64("us"), dt.time(1, 2, 3)),
], ids=["timestamp-ns-tz", "timestamp-ns", "time64"])
def test_unreadable_types_are_refused_naming_spark(
        spark: Any, tmp_path: Path, data_type: pa.DataType, value: Any) -> None:
    uri = str(tmp_path / "odd")
    table = txn.create_table(uri, pa.schema([("c", data_type)]))
    table.append(pa.table({"c": pa.array([value], data_type)}))
    try:
        rows = txn.spark.read(spark, uri).toArrow()
    except txn.InvalidOptionError as refused:
        assert "Spark" in str(refused)
    else:
        assert rows.cast(table.schema).to_pylist() == table.to_arrow().to_pylist()


# -- deletes inside the scan ---------------------------------------------------------------------


def _plan(df: Any) -> str:
    return str(df._jdf.queryExecution().executedPlan().toString())


def test_deletes_across_files_are_a_scan_predicate_under_filters_and_time_travel(
        spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    for start in range(0, 4000, 1000):  # four loads of two files each
        txn.spark.write(frame(spark, orders(range(start, start + 1000)), 2), uri)
    before = table.timeline()[-1].time
    table.delete(pc.field("qty") == 3)
    table.delete((pc.field("id") >= 1500) & (pc.field("id") < 1520))
    deleted_files = [f for f in table.snapshot().files() if f.deleted_rows]
    assert len(deleted_files) == 8, "every file lost rows"

    full = txn.spark.read(spark, uri)
    assert "Join" not in _plan(full) and "row_index" in _plan(full)
    assert spark_rows(full, ORDERS) == rows_by(table.to_arrow())
    assert full.count() == table.snapshot().count()
    filters = [("id < 1600 AND region = 'eu'", (pc.field("id") < 1600) & (pc.field("region") == "eu")),
               ("price > 500", pc.field("price") > 500)]
    for sql, expression in filters:
        expected = rows_by(table.to_arrow(filter=expression))
        assert spark_rows(txn.spark.read(spark, uri, filter=sql), ORDERS) == expected
        assert spark_rows(txn.spark.read(spark, uri, filter=expression), ORDERS) == expected
    projected = txn.spark.read(spark, uri, filter="id BETWEEN 1490 AND 1530", columns=["id"])
    assert sorted(r["id"] for r in projected.collect()) == sorted(
        table.to_arrow(filter=(pc.field("id") >= 1490) & (pc.field("id") <= 1530))["id"].to_pylist())
    # Before the deletes every row is there; the same files, read as of then, lose none.
    old = txn.spark.read(spark, uri, as_of=before)
    assert "row_index" not in _plan(old)
    assert spark_rows(old, ORDERS) == rows_by(orders(range(4000)))


def test_deleted_positions_are_dropped_among_files_of_one_size_and_by_the_positions_fallback(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Files told apart by size, by name where sizes repeat; past the bitmap limit, by position
    lists; files without deletes scanned apart when they hold enough rows."""
    from txn.spark import _deleted

    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    for _ in range(3):  # three files of the same rows: the same size
        table.append(orders(range(200)))
    table.append(orders(range(5000, 5400)))
    files = sorted(table.snapshot().files(), key=lambda f: f.path)
    same = [f for f in files if f.rows == 200]
    assert len({f.size for f in same}) == 1
    wanted = {same[0].path: [0, 63, 64, 65, 199], same[2].path: [1, 128]}
    with table.begin_write("delete") as pending:
        pending.commit(deletes=wanted)
    expected = rows_by(table.to_arrow())
    assert len(expected) == 1000 - 7
    frame_read = txn.spark.read(spark, uri)
    assert "file_size" in _plan(frame_read) and "Union" in _plan(frame_read)
    assert spark_rows(frame_read, ORDERS) == expected
    monkeypatch.setattr(_deleted, "MAX_WORDS", 0)
    by_positions = txn.spark.read(spark, uri)
    assert "file_size" not in _plan(by_positions)
    assert spark_rows(by_positions, ORDERS) == expected


def test_a_count_without_a_filter_reads_no_data_file(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    txn.spark.write(frame(spark, orders(range(3000)), 3), uri)
    first = table.timeline()[-1].time
    table.delete(pc.field("qty") == 3)
    expected, expected_before = table.snapshot().count(), 3000
    assert txn.spark.count(spark, uri, filter="id < 100") == table.snapshot().count(pc.field("id") < 100)

    for file in table.snapshot().files():  # data files made unreadable: only metadata can answer
        Path(file.path).write_bytes(b"not parquet")
    assert txn.spark.count(spark, uri) == expected < 3000
    assert txn.spark.count(spark, uri, as_of=first) == expected_before


@pytest.mark.parametrize("tz", [None, "UTC"])
def test_a_seconds_timestamp_table_reads_in_spark(spark: Any, tmp_path: Path, tz: str | None) -> None:
    """Its files hold milliseconds (Parquet has no seconds): Spark reads them as the instants
    written, through its own scan and, with deletes, around the deleted rows."""
    data_type = pa.timestamp("s", tz)
    schema = pa.schema([("id", pa.int64()), ("ts", data_type)])
    t = txn.create_table(str(tmp_path / "t"), schema)
    stamps = [dt.datetime(2026, 1, 1, 1, 2, 3) + dt.timedelta(days=i, seconds=i) for i in range(4)]
    t.append(pa.table({"id": pa.array(range(4), pa.int64()), "ts": pa.array(stamps, pa.timestamp("s"))
                       .cast(data_type)}))
    t.delete(pc.field("id") == 1)
    got = {row["id"]: row["ts"] for row in txn.spark.read(spark, t.uri).collect()}
    zone = dt.timezone.utc if tz else None
    assert {i: v.replace(tzinfo=zone) if zone else v for i, v in got.items()} == {
        i: stamps[i].replace(tzinfo=zone) if zone else stamps[i] for i in (0, 2, 3)}
    assert txn.spark.read(spark, t.uri, filter="ts >= '2026-01-03'").count() == 2
