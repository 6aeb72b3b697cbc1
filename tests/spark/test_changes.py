"""The change feed in Spark, as a batch: ``txn.spark.read_changes``, the format's batch read of
changes (``option("startingInstant", ...)``) and SQL's ``table_changes``.

Each is compared with ``Table.changes(...).to_arrow()`` of the same window, the core's own answer
(design/changes.md): Spark must read exactly its rows, on the executors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.spark

from .helpers import ORDERS, orders

pytestmark = pytest.mark.spark

#: Change rows compare by key, change type and commit (a row's images differ in change type).
KEY = ("id", "_commit_instant", "_change_type")


def ordered(table: pa.Table, schema: pa.Schema | None = None) -> list[dict[str, Any]]:
    """Rows (as ``schema``'s types: Spark hands timestamps back as microseconds) in key order."""
    if schema is not None:
        table = table.select(schema.names).cast(schema)
    keys = [k for k in KEY if k in table.column_names]
    return sorted(table.to_pylist(), key=lambda r: tuple((r[k] is None, r[k]) for k in keys))


def spark_changes(frame: Any, scanner: txn.ChangeScanner) -> list[dict[str, Any]]:
    return ordered(frame.toArrow(), scanner.schema)


@pytest.fixture
def keyed(tmp_path: Path) -> tuple[txn.Table, list[str]]:
    """A keyed table through an append, an upsert (updates and new keys) and a delete; its data
    instants in order."""
    table = txn.create_table(str(tmp_path / "keyed"), ORDERS, record_key="id")
    instants = [table.append(orders(range(10))).instant,
                table.upsert(orders(range(5, 15), price_offset=0.5)).instant]
    deleted = table.delete(pc.field("id") < 3)
    assert deleted is not None
    instants.append(deleted.instant)
    return table, instants


def test_read_changes_reads_each_window_as_the_change_feed_does(spark: Any, keyed: Any) -> None:
    table, (appended, upserted, deleted) = keyed
    for start, end in (("earliest", None), (appended, None), (appended, upserted), (upserted, deleted),
                       ("earliest", appended)):
        scanner = table.changes(start, end)
        expected = ordered(scanner.to_arrow())
        assert spark_changes(txn.spark.read_changes(spark, table.uri, start, end), scanner) == expected
    # The upsert gave pre- and post-images of the keys it replaced, inserts of the new ones.
    kinds = pc.value_counts(table.changes(appended, upserted).to_arrow()["_change_type"]).to_pylist()
    assert {k["values"]: k["counts"] for k in kinds} == {
        "update_preimage": 5, "update_postimage": 5, "insert": 5}


def test_read_changes_of_an_unkeyed_table_gives_deleted_and_appended_rows(spark: Any,
                                                                          tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "plain"), ORDERS)
    first = table.append(orders(range(20))).instant
    table.append(orders(range(20, 30)))
    table.delete(pc.field("region") == "eu")
    scanner = table.changes(first)
    got = spark_changes(txn.spark.read_changes(spark, table.uri, first), scanner)
    assert got == ordered(scanner.to_arrow())
    assert sorted(r["id"] for r in got if r["_change_type"] == "delete") == \
        [i for i in range(30) if i % 3 == 0]


def test_read_changes_projects_columns_and_reads_an_empty_window(spark: Any, keyed: Any) -> None:
    table, (appended, _, deleted) = keyed
    frame = txn.spark.read_changes(spark, table.uri, appended, columns=["id", "price"])
    assert frame.columns == ["id", "price", *txn.CHANGE_COLUMNS]
    scanner = table.changes(appended, columns=["id", "price"])
    assert spark_changes(frame, scanner) == ordered(scanner.to_arrow())
    empty = txn.spark.read_changes(spark, table.uri, deleted)
    assert empty.count() == 0 and empty.columns == [*ORDERS.names, *txn.CHANGE_COLUMNS]


def test_read_changes_refuses_bad_arguments(spark: Any, keyed: Any) -> None:
    table, (appended, upserted, _) = keyed
    with pytest.raises(txn.InvalidOptionError, match="columns must be a list"):
        txn.spark.read_changes(spark, table.uri, appended, columns="id")
    with pytest.raises(txn.InvalidOptionError):
        txn.spark.read_changes(spark, table.uri, upserted, appended)  # end before start
    with pytest.raises(txn.InvalidOptionError):
        txn.spark.read_changes(spark, table.uri, appended, columns=["id", "nope"])


def test_a_window_past_what_clean_kept_is_refused_whole(spark: Any, tmp_path: Path) -> None:
    table = txn.create_table(str(tmp_path / "cleaned"), ORDERS,
                             properties={"clean.retain_commits": "1", "clean.retain_hours": "0"})
    table.append(orders(range(10)))
    table.overwrite(orders(range(50, 55)))
    table.append(orders(range(60, 62)))
    table.clean()
    with pytest.raises(txn.SnapshotExpiredError, match="oldest instant a window may start at"):
        txn.spark.read_changes(spark, table.uri, "earliest")
    txn.spark.register(spark)
    with pytest.raises(Exception, match="SnapshotExpiredError") as caught:
        spark.readStream.format("metatxn").option("startingInstant", "earliest").load(table.uri)
    assert "oldest instant a window may start at" in str(caught.value)


def test_the_format_reads_a_window_of_changes_as_a_batch(spark: Any, keyed: Any) -> None:
    table, (appended, upserted, _) = keyed
    txn.spark.register(spark)
    reader = spark.read.format("metatxn").option("startingInstant", appended)
    feed = reader.option("endingInstant", upserted).option("readChangeFeed", "true").load(table.uri)
    scanner = table.changes(appended, upserted)
    assert spark_changes(feed, scanner) == ordered(scanner.to_arrow())
    # Without readChangeFeed: what the commits added (inserts and post-images), table columns only.
    added = spark.read.format("metatxn").option("startingInstant", appended).load(table.uri)
    assert added.columns == ORDERS.names
    expected = scanner.to_arrow().filter(pc.field("_change_type").isin(["insert", "update_postimage"]))
    later = table.changes(upserted).to_arrow()
    assert later.filter(pc.field("_change_type").isin(["insert", "update_postimage"])).num_rows == 0
    assert ordered(added.toArrow(), ORDERS) == ordered(expected.select(ORDERS.names))


@pytest.mark.parametrize(("options", "message"), [
    ({"startingInstant": "earliest", "maxFilesPerTriger": "1"},
     r"unknown option\(s\) \[.maxfilespertriger.\]"),
    ({"startingInstant": "earliest", "readChangeFeed": "yes"}, "readChangeFeed must be 'true' or 'false'"),
    ({"readChangeFeed": "true"}, "needs option startingInstant"),
    ({"startingInstant": "earliest", "maxRowsPerTrigger": "5"}, "a batch read takes neither"),
    ({"startingInstant": "earliest", "asOf": "earliest"}, "cannot be combined"),
    ({"startingInstant": "not a time"}, "InvalidOptionError"),
])
def test_the_format_refuses_bad_change_options(spark: Any, keyed: Any, options: dict[str, str],
                                               message: str) -> None:
    table, _ = keyed
    txn.spark.register(spark)
    with pytest.raises(Exception, match=message) as caught:
        spark.read.format("metatxn").options(**options).load(table.uri).collect()
    assert "InvalidOptionError" in str(caught.value)


# -- SQL -------------------------------------------------------------------------------------------

@pytest.fixture
def warehouse_table(warehouse: Path, sql: Any) -> tuple[txn.Table, list[str]]:
    table = txn.create_table(str(warehouse / "sales.db" / "orders"), ORDERS, record_key="id")
    instants = [table.append(orders(range(10))).instant,
                table.upsert(orders(range(8, 12), price_offset=0.5)).instant]
    return table, instants


def test_table_changes_reads_the_change_feed_in_sql(spark: Any, sql: Any, warehouse_table: Any) -> None:
    table, (appended, upserted) = warehouse_table
    scanner = table.changes(appended)
    got = sql(f"SELECT * FROM table_changes('sales.orders', {appended})")
    assert spark_changes(got, scanner) == ordered(scanner.to_arrow())
    window = sql(f"SELECT * FROM table_changes('sales.orders', 'earliest', '{appended}')")
    assert spark_changes(window, table.changes("earliest", appended)) == \
        ordered(table.changes("earliest", appended).to_arrow())
    # Composes with the rest of the query, and with the table itself, read fresh.
    counts = sql(f"""SELECT c._change_type, count(*) AS n
                     FROM TABLE_CHANGES('sales.orders', {appended}, {upserted}) AS c
                     JOIN sales.orders o ON o.id = c.id
                     WHERE c.id >= 8 GROUP BY c._change_type ORDER BY 1""").collect()
    assert [(r["_change_type"], r["n"]) for r in counts] == [
        ("insert", 2), ("update_postimage", 2), ("update_preimage", 2)]
    assert not [v for v in spark.catalog.listTables() if v.name.startswith("metatxn_changes_")]


@pytest.mark.parametrize(("statement", "error", "message"), [
    ("SELECT * FROM table_changes('sales.orders')", txn.InvalidOptionError, "takes 2 or 3 arguments"),
    ("SELECT * FROM table_changes('sales.orders', id)", txn.InvalidOptionError, "takes literals"),
    ("SELECT * FROM table_changes('sales.orders', 'earliest', 1, 2)", txn.InvalidOptionError,
     "takes 2 or 3 arguments"),
    ("SELECT * FROM table_changes('no.such', 'earliest')", txn.TableNotFoundError, "no.such"),
    ("SELECT * FROM table_changes('a.b.c', 'earliest')", txn.InvalidOptionError, "is not a table name"),
])
def test_table_changes_refuses_what_it_cannot_read(sql: Any, warehouse_table: Any, statement: str,
                                                   error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        sql(statement)
