"""Spark writes create their table where none exists, as Delta, Hudi and Iceberg writers do.

Invariants, for ``txn.spark.write`` and the ``metatxn`` format alike:

* on a new location every mode creates the table from the DataFrame's schema (every column
  nullable, Spark types mapped back exactly) and the layout options, then commits once;
* on an existing table ``append``/``overwrite``/``upsert`` write, ``error`` raises
  TableExistsError and ``ignore`` returns None without running a task; refused writes leave the
  timeline and the data files exactly as they were;
* of two writers creating the same table at the same moment, exactly one creates it; the other
  writes into it (``append``), fails (``error``) or does nothing (``ignore``);
* layout options given for an existing table must equal the table's: a difference names the
  option, the table's value and the given one, and nothing is written;
* a column Spark can hold but metatxn cannot store (or not as the same type) is refused before
  anything is written: the location stays empty.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
import txn.spark
from txn.spark import _tables

from .helpers import ORDERS, exploding, frame, orders, rows_by, spark_rows, states, storage_state

pytestmark = pytest.mark.spark

#: ``ORDERS`` as a table created by a Spark write makes it: every column nullable.
CREATED = pa.schema([field.with_nullable(True) for field in ORDERS])


# -- every mode, on a new location and on an existing table -----------------------------------------


@pytest.mark.parametrize("mode", ["append", "overwrite", "upsert", "error", "errorifexists", "Ignore"])
def test_every_mode_creates_a_missing_table_and_commits_once(spark: Any, tmp_path: Path, mode: str) -> None:
    uri = str(tmp_path / "orders")
    rows = orders(range(300))
    commit = txn.spark.write(frame(spark, rows, 2), uri, mode, partition_by=["region"], record_key="id",
                             sort_by=["price"], properties={"deletes.compaction.threshold": "2"})
    assert commit is not None
    expected_operation = {"overwrite": "overwrite", "upsert": "upsert"}.get(mode, "append")
    assert (commit.operation, commit.rows_added) == (expected_operation, 300)
    table = txn.open_table(uri)
    assert table.schema == CREATED
    assert (table.partition_by, table.record_key, table.sort_by) == (["region"], "id", ["price"])
    assert table.properties == {"deletes.compaction.threshold": "2"}
    assert [state for _, state in states(table)] == ["completed"]
    assert rows_by(table.to_arrow()) == rows_by(rows)
    assert table.lookup([7])["position"].to_pylist() != []
    assert table.validate().ok


def test_every_mode_on_an_existing_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, record_key="id")
    table.append(orders(range(10)))

    assert txn.spark.write(frame(spark, orders(range(10, 20))), uri, "append") is not None
    replaced = orders(range(5, 15), price_offset=0.5)
    upserted = txn.spark.write(frame(spark, replaced), uri, "upsert")
    assert upserted is not None and upserted.rows_deleted == 10
    expected = pa.concat_tables([orders(range(5)), replaced, orders(range(15, 20))])
    assert rows_by(table.to_arrow()) == rows_by(expected)

    before = storage_state(uri)
    for mode in ("error", "errorifexists", "ErrorIfExists", "default"):
        with pytest.raises(txn.TableExistsError, match="already exists"):
            txn.spark.write(exploding(spark, orders(range(100, 110))), uri, mode)
    # ignore does nothing, without running a task (the DataFrame explodes if one runs).
    assert txn.spark.write(exploding(spark, orders(range(100, 110))), uri, "ignore") is None
    assert storage_state(uri) == before

    overwritten = txn.spark.write(frame(spark, orders(range(100, 110))), uri, "overwrite")
    assert overwritten is not None and overwritten.operation == "overwrite"
    assert rows_by(table.to_arrow()) == rows_by(orders(range(100, 110)))
    assert table.validate().ok


def test_modes_are_checked_before_anything_happens(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    df = exploding(spark, orders(range(10)))
    for mode in ("merge", "", None, "append "):
        with pytest.raises(txn.InvalidOptionError, match="mode must be one of"):
            txn.spark.write(df, uri, mode)  # type: ignore[arg-type]
    with pytest.raises(txn.InvalidOptionError, match="needs record_key"):
        txn.spark.write(df, uri, "upsert")
    assert not (tmp_path / "orders").exists()


@pytest.mark.parametrize(("mode", "layout", "partitions", "error", "message"), [
    ("overwrite", {}, "dynamic", txn.InvalidOptionError, "is not partitioned"),
    ("append", {"partition_by": ["region"]}, "dynamic", txn.InvalidOptionError,
     "is for mode='overwrite', not 'append'"),
    ("error", {"partition_by": ["region"]}, {"region": "eu"}, txn.InvalidOptionError,
     "is for mode='overwrite'"),
    ("overwrite", {"partition_by": ["region"], "record_key": "id"}, "dynamic", txn.InvalidOptionError,
     "not supported on a table with a record_key"),
    ("overwrite", {"partition_by": ["region"]}, "static", txn.InvalidOptionError, "expected partitions=None"),
    ("overwrite", {"partition_by": ["region"]}, {"day": "2026-01-01"}, txn.InvalidOptionError,
     r"partitions names \['day'\]"),
    ("overwrite", {"partition_by": ["day"]}, {"day": "tomorrow"}, txn.InvalidOptionError,
     "partition column 'day' takes a date32"),
    ("overwrite", {"partition_by": ["region"]}, {"region": "eu"}, txn.SchemaMismatchError,
     "holds rows of other partitions"),
])
def test_a_write_to_a_new_location_refused_for_its_partitions_leaves_no_table(
        spark: Any, tmp_path: Path, mode: str, layout: dict[str, Any], partitions: Any,
        error: type[Exception], message: str) -> None:
    uri = str(tmp_path / "orders")
    with pytest.raises(error, match=message):
        txn.spark.write(frame(spark, orders(range(10))), uri, mode, partitions=partitions, **layout)
    assert not (tmp_path / "orders").exists()


def test_an_upsert_creates_a_keyed_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    first = txn.spark.write(frame(spark, orders(range(20))), uri, "upsert", record_key=["id", "region"])
    assert first is not None and first.rows_deleted == 0
    again = txn.spark.write(frame(spark, orders(range(10, 30), price_offset=1.0)), uri, "upsert")
    assert again is not None and again.rows_deleted == 10
    table = txn.open_table(uri)
    assert table.record_key == ["id", "region"]
    assert rows_by(table.to_arrow()) == rows_by(
        pa.concat_tables([orders(range(10)), orders(range(10, 30), price_offset=1.0)]))


def test_an_empty_dataframe_creates_an_empty_table(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    assert txn.spark.write(frame(spark, ORDERS.empty_table()), uri, "upsert", record_key="id") is None
    table = txn.open_table(uri)
    assert (table.schema, table.record_key, table.timeline()) == (CREATED, "id", [])


# -- two writers create the same table ---------------------------------------------------------------


@pytest.fixture
def racing_creators(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both writers reach ``create_table`` before either has created the table."""
    barrier = threading.Barrier(2, timeout=60)
    create_table = _tables.Layout.create

    def after_both_arrive(*args: Any, **kwargs: Any) -> txn.Table:
        barrier.wait()
        return create_table(*args, **kwargs)

    monkeypatch.setattr(_tables.Layout, "create", after_both_arrive)


def _race(writes: list[Any]) -> list[Any]:
    """Run the writes in threads at once; each result is its return value or its exception."""
    results: list[Any] = [None] * len(writes)

    def run(index: int) -> None:
        try:
            results[index] = writes[index]()
        except Exception as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(writes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


@pytest.mark.usefixtures("racing_creators")
@pytest.mark.parametrize("mode", ["append", "error", "ignore"])
def test_of_two_writers_creating_one_table_exactly_one_creates_it(
        spark: Any, tmp_path: Path, mode: str) -> None:
    uri = str(tmp_path / "orders")
    first, second = orders(range(100)), orders(range(100, 250))
    results = _race([
        lambda: txn.spark.write(frame(spark, first, 2), uri, mode, partition_by=["region"], record_key="id"),
        lambda: txn.spark.write(frame(spark, second, 2), uri, mode, partition_by=["region"], record_key="id"),
    ])
    table = txn.open_table(uri)
    commits = [r for r in results if isinstance(r, txn.Commit)]
    if mode == "append":
        assert len(commits) == 2, results
        assert rows_by(table.to_arrow()) == rows_by(pa.concat_tables([first, second]))
    else:
        assert len(commits) == 1, results
        loser = next(r for r in results if not isinstance(r, txn.Commit))
        if mode == "error":
            assert isinstance(loser, txn.TableExistsError)
        else:
            assert loser is None
        assert table.to_arrow().num_rows in (first.num_rows, second.num_rows)
    assert [state for _, state in states(table)] == ["completed"] * len(commits)
    assert (table.partition_by, table.record_key) == (["region"], "id")
    assert table.validate().ok


@pytest.mark.usefixtures("racing_creators")
def test_a_racing_creator_with_another_layout_writes_nothing(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    results = _race([
        lambda: txn.spark.write(frame(spark, orders(range(10))), uri, partition_by=["region"]),
        lambda: txn.spark.write(frame(spark, orders(range(10, 20))), uri, partition_by=["day"]),
    ])
    errors = [r for r in results if isinstance(r, txn.InvalidOptionError)]
    assert len(errors) == 1 and "differs from the table's" in str(errors[0]), results
    table = txn.open_table(uri)
    assert [state for _, state in states(table)] == ["completed"]
    assert table.to_arrow().num_rows == 10


def test_a_writer_that_loses_the_creation_checks_its_rows_against_the_winner_s_table(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The write checked its DataFrame for an unkeyed table; the table another writer created at
    # the same moment is keyed, and the DataFrame repeats a key.
    uri = str(tmp_path / "orders")
    create_table = _tables.Layout.create

    def another_writer_first(*args: Any, **kwargs: Any) -> txn.Table:
        txn.create_table(uri, CREATED, record_key="id").append(orders(range(5)))
        return create_table(*args, **kwargs)

    monkeypatch.setattr(_tables.Layout, "create", another_writer_first)
    with pytest.raises(txn.DuplicateKeyError, match=r"\[42\] appear more than once"):
        txn.spark.write(frame(spark, orders([40, 41, 42, 42])), uri)
    table = txn.open_table(uri)
    # Issue 27: the keys are checked on the files Spark wrote, so the refused write's instant
    # was begun and is rolled back; the other writer's commit is the only one.
    assert [(a, s) for a, s in states(table) if s == "completed" and a != "rollback"] == [
        ("commit", "completed")]
    assert rows_by(table.to_arrow()) == rows_by(orders(range(5)))


# -- layout options on an existing table -------------------------------------------------------------


@pytest.mark.parametrize(("option", "value", "message"), [
    ("partition_by", ["day"], r"partition_by \['day'\] differs from the table's \['region'\]"),
    ("partition_by", [], r"partition_by \[\] differs from the table's \['region'\]"),
    ("record_key", "qty", r"record_key \['qty'\] differs from the table's \['id'\]"),
    ("record_key", ["id", "day"], r"record_key \['id', 'day'\] differs from the table's \['id'\]"),
    ("sort_by", ["day"], r"sort_by \['day'\] differs from the table's \['price'\]"),
    ("properties", {"deletes.compaction.threshold": "3"},
     r"table property deletes.compaction.threshold='3' differs from the table's \('2'\)"),
    ("properties", {"write.target_file_bytes": "1000"},
     r"table property write.target_file_bytes='1000' differs from the table's \(not set\)"),
    ("properties", {"write.target_file_bytes": "many"},
     r"write.target_file_bytes='many': expected a whole number from 1,000"),
    ("partition_by", "region", "must be a list of column names"),
])
def test_layout_options_that_differ_from_the_table_write_nothing(
        spark: Any, tmp_path: Path, option: str, value: Any, message: str) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, partition_by=["region"], record_key="id", sort_by=["price"],
                             properties={"deletes.compaction.threshold": "2"})
    table.append(orders(range(10)))
    before = storage_state(uri)
    with pytest.raises(txn.InvalidOptionError, match=message):
        txn.spark.write(exploding(spark, orders(range(10, 20))), uri, "append", **{option: value})
    assert storage_state(uri) == before


def test_layout_options_equal_to_the_table_s_are_accepted(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    archive = {"timeline.archive.trigger": "100", "timeline.archive.retain": "50"}
    table = txn.create_table(uri, ORDERS, partition_by=["region"], record_key="id", sort_by=["price"],
                             properties={"deletes.compaction.threshold": "2", **archive})
    commit = txn.spark.write(frame(spark, orders(range(10))), uri, "append", partition_by=["region"],
                             record_key=["id"], sort_by=["price"],
                             properties={"deletes.compaction.threshold": "2"})
    assert commit is not None and table.to_arrow().num_rows == 10
    # A property valid only beside the table's others (retain < trigger) is checked beside them.
    retained = txn.spark.write(frame(spark, orders(range(10, 20))), uri, "append",
                               properties={"timeline.archive.retain": "50"})
    assert retained is not None and table.to_arrow().num_rows == 20


# -- what a created table can hold ------------------------------------------------------------------


@pytest.mark.parametrize(("column", "message"), [
    ("interval '1' year AS v", r"column 'v' is interval year, which metatxn cannot store"),
    ("make_interval(1, 2) AS v", r"column 'v' is interval, which metatxn cannot store"),
    ("NULL AS v", r"column 'v' is void: a column of nulls has no type to store"),
    ("array(NULL) AS v", r"column 'v' is array<void>: a column of nulls"),
    ("interval '1' day AS v", r"column 'v' is interval day, which would be stored as duration\[us\] and "
                              r"read back as interval day to second"),
    ("id AS id", r"schema has column 'id' more than once"),
])
def test_a_column_that_cannot_be_stored_is_refused_before_anything_is_written(
        spark: Any, tmp_path: Path, column: str, message: str) -> None:
    uri = str(tmp_path / "orders")
    df = spark.range(3).selectExpr("id", column)
    with pytest.raises(txn.InvalidOptionError, match=message):
        txn.spark.write(df, uri)
    txn.spark.register(spark)
    # Spark refuses calendar intervals for every data source before metatxn sees them.
    with pytest.raises(Exception, match=f"{message}|Cannot use \"INTERVAL\" type in the table schema"):
        df.write.format("metatxn").mode("append").save(uri)
    assert not (tmp_path / "orders").exists()


def test_a_created_table_holds_what_spark_holds(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "types")
    select = [
        "id", "CAST(id AS INT) AS i", "CAST(id * 1.25 AS DECIMAL(20, 4)) AS dec",
        "concat('s', id) AS s", "CAST(concat('b', id) AS BINARY) AS b", "id % 2 = 0 AS bo",
        "date_add(DATE '2026-01-01', CAST(id AS INT)) AS d",
        "TIMESTAMP '2026-01-01 10:00:00' + make_dt_interval(0, CAST(id AS INT)) AS ts",
        "TIMESTAMP_NTZ '2026-01-01 10:00:00' AS ntz", "make_dt_interval(CAST(id AS INT), 1, 2, 3.5) AS dur",
        "array(id, id + 1) AS nums", "map('k', id) AS m",
        "named_struct('a', id, 'b', concat('x', id)) AS pair",
        "parse_json(concat('{\"n\": ', id, '}')) AS v",
    ]
    first = spark.range(5).selectExpr(*select)
    assert txn.spark.write(first, uri) is not None
    # Built the same way again, with arrays and maps that hold no nulls: still the table's types.
    assert txn.spark.write(spark.range(5, 8).selectExpr(*select), uri) is not None
    table = txn.open_table(uri)
    assert all(field.nullable for field in table.schema)
    assert str(table.schema.field("ts").type) == "timestamp[us, tz=UTC]"
    assert str(table.schema.field("ntz").type) == "timestamp[us]"
    back = txn.spark.read(spark, uri)
    assert [(f.name, f.dataType.simpleString()) for f in back.schema.fields] == [
        (f.name, f.dataType.simpleString()) for f in first.schema.fields]
    expected = spark.range(8).selectExpr(*select)
    # Variants do not compare as values in Spark: they are checked through variant_get.
    assert back.drop("v").orderBy("id").collect() == expected.drop("v").orderBy("id").collect()
    assert sorted(r["n"] for r in back.selectExpr("variant_get(v, '$.n', 'int') AS n").collect()) == list(
        range(8))


# -- the metatxn format ------------------------------------------------------------------------------


def test_the_format_creates_tables_with_its_options(spark: Any, tmp_path: Path) -> None:
    txn.spark.register(spark)
    uri = str(tmp_path / "orders")
    (frame(spark, orders(range(200)), 2).write.format("metatxn").mode("append")
     .option("partitionBy", "region").option("recordKey", "id, day").option("sortBy", "price")
     .option("properties.deletes.compaction.threshold", "2").save(uri))
    table = txn.open_table(uri)
    assert (table.partition_by, table.record_key, table.sort_by) == (["region"], ["id", "day"], ["price"])
    assert table.properties == {"deletes.compaction.threshold": "2"}
    assert table.schema == CREATED
    frame(spark, orders(range(200, 300)), 2).write.format("metatxn").mode("append").save(uri)
    (frame(spark, orders(range(300, 320))).write.format("metatxn").mode("append")
     .option("recordKey", "id,day").option("partitionBy", "region").save(uri))
    assert rows_by(table.to_arrow()) == rows_by(orders(range(320)))
    assert spark_rows(spark.read.format("metatxn").load(uri), ORDERS) == rows_by(orders(range(320)))

    before = storage_state(uri)
    df = frame(spark, orders(range(400, 410)))
    with pytest.raises(Exception, match=r"record_key \['id'\] differs from the table's \['id', 'day'\]"):
        df.write.format("metatxn").mode("append").option("recordKey", "id").save(uri)
    with pytest.raises(Exception, match=r"unknown option\(s\) \['overwriteschema'\]"):
        df.write.format("metatxn").mode("append").option("overwriteSchema", "true").save(uri)
    # Spark itself refuses DataFrameWriter.partitionBy for Python data sources.
    with pytest.raises(Exception, match="partitioning"):
        df.write.format("metatxn").mode("append").partitionBy("region").save(uri)
    with pytest.raises(Exception, match=r"record key \['id', 'day'\] repeats within the DataFrame"):
        frame(spark, orders([500, 501, 500]), 2).write.format("metatxn").mode("overwrite").save(uri)
    assert storage_state(uri)[1] == before[1]
    assert table.to_arrow().num_rows == 320

    frame(spark, orders(range(600, 610))).write.format("metatxn").mode("overwrite").save(uri)
    assert rows_by(table.to_arrow()) == rows_by(orders(range(600, 610)))
    assert table.validate().ok


@pytest.mark.parametrize("mode", [None, "error", "errorifexists", "ignore"])
def test_the_format_refuses_the_save_modes_spark_does_not_give_it(
        spark: Any, tmp_path: Path, mode: str | None) -> None:
    txn.spark.register(spark)
    uri = str(tmp_path / "orders")
    writer = frame(spark, orders(range(10))).write.format("metatxn")
    if mode is not None:
        writer = writer.mode(mode)
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        writer.save(uri)
    assert not (tmp_path / "orders").exists()


def test_the_format_s_overwrite_creates_a_table(spark: Any, tmp_path: Path) -> None:
    txn.spark.register(spark)
    uri = str(tmp_path / "orders")
    frame(spark, orders(range(10))).write.format("metatxn").mode("overwrite").save(uri)
    table = txn.open_table(uri)
    assert states(table) == [("replacecommit", "completed")]
    assert rows_by(table.to_arrow()) == rows_by(orders(range(10)))


def test_layout_options_of_the_format_are_parsed_as_documented() -> None:
    layout = _tables.layout_of_options({"path": "/x", "recordkey": "a", "sortby": "b, c",
                                        "partitionby": "d", "properties.streaming": "true"})
    assert layout == _tables.Layout(["d"], "a", ["b", "c"], {"streaming": "true"})
    assert _tables.layout_of_options({"path": "/x", "recordkey": "a,b"}).record_key == ["a", "b"]
    assert _tables.layout_of_options({"path": "/x"}) == _tables.Layout()
    with pytest.raises(txn.InvalidOptionError, match=r"unknown option\(s\) \['partitioning'\]"):
        _tables.layout_of_options({"path": "/x", "partitioning": "d"})
