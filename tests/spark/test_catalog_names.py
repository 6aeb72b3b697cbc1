"""Issue 28: warehouse tables by name in Spark's own SQL, SQL time travel and history, and
s3a:// locations as the user wrote them.

One Spark session (the conftest's); each test batches its cases into few Spark jobs.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import txn
import txn.spark

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("region", pa.string())])


def _rows(ids: range, region: str = "eu") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "region": [region] * len(ids)})


def _append_elsewhere(location: str) -> None:
    """A commit by another process."""
    txn.open_table(location).append(_rows(range(100, 103)))


@pytest.mark.allow_metatxn_warnings  # the table Spark cannot type, not entered on purpose
def test_warehouse_tables_are_spark_catalog_tables_read_at_their_latest_snapshot(
        spark: Any, sql: Any, warehouse: Path, caplog: pytest.LogCaptureFixture) -> None:
    import txn.spark

    sql("CREATE TABLE orders (id BIGINT, region STRING) STORED AS metatxn")
    sql("CREATE DATABASE IF NOT EXISTS sales")
    sql("CREATE TABLE sales.customers (id BIGINT, region STRING) STORED AS metatxn")
    orders = txn.open_table(str(warehouse / "orders"))
    customers = txn.open_table(str(warehouse / "sales.db" / "customers"))
    orders.append(_rows(range(3)))
    customers.append(_rows(range(2)))

    # Plain spark.sql and spark.table, by name: a join, a view, the database as a Spark database.
    spark.sql("CREATE OR REPLACE TEMPORARY VIEW eu_orders AS SELECT * FROM orders WHERE region = 'eu'")
    query = "SELECT count(*), count(c.id) FROM eu_orders o LEFT JOIN sales.customers c ON o.id = c.id"
    assert tuple(spark.sql(query).first()) == (3, 2)
    listed = spark.sql("SHOW TABLES IN sales").collect()
    assert {r.tableName for r in listed if not r.isTemporary} == {"customers"}

    # The next query sees a commit made after the name was entered, also by another process.
    orders.append(_rows(range(3, 5)))
    process = multiprocessing.get_context("spawn").Process(
        target=_append_elsewhere, args=(str(warehouse / "orders"),))
    process.start()
    process.join(120)
    assert process.exitcode == 0
    assert tuple(spark.sql(query).first()) == (8, 2)

    # A schema change through txn.spark.sql enters the table again with its new columns.
    sql("ALTER TABLE orders ADD COLUMNS (qty INT)")
    assert spark.table("orders").columns == ["id", "region", "qty"]

    # Writes by name: Spark gives the source no location, so each is refused, nothing written;
    # txn.spark.sql writes by name.
    # (writeTo(...).append(), saveAsTable and insertInto reach the same refusal: design/spark.md.)
    with pytest.raises(Exception, match="by its name in Spark's catalog"):
        spark.sql("INSERT INTO sales.customers VALUES (9, 'eu')")
    assert customers.count() == 2
    sql("INSERT INTO sales.customers VALUES (9, 'eu')")
    assert customers.count() == 3

    # register() enters what is already there; another warehouse's names replace the old ones'.
    spark.catalog.dropTempView("eu_orders")
    other = warehouse.parent / "other"
    txn.create_table(str(other / "items"), SCHEMA).append(_rows(range(4)))
    # A table Spark cannot type is not entered (a warning); the others are.
    txn.create_table(str(other / "unsigned"), pa.schema([("n", pa.uint32())]))
    txn.spark.register(spark, warehouse=str(other))
    assert spark.table("items").count() == 4 and not spark.catalog.tableExists("unsigned")
    assert "unsigned is not entered in Spark's catalog" in caplog.text
    assert not spark.catalog.tableExists("orders") and not spark.catalog.tableExists("sales.customers")


def test_time_travel_and_history_in_sql(spark: Any, sql: Any, warehouse: Path) -> None:
    sql("CREATE TABLE events (id BIGINT, region STRING) STORED AS metatxn")
    table = txn.open_table(str(warehouse / "events"))
    first = table.append(_rows(range(3)))
    second = table.append(_rows(range(3, 5), "us"))
    sql("DELETE FROM events WHERE id = 0")
    assert first is not None and second is not None
    history = table.history()

    answer = sql(
        f"SELECT (SELECT count(*) FROM events VERSION AS OF {first.instant}), "
        f"(SELECT count(*) FROM events VERSION AS OF '{second.instant}'), "
        f"(SELECT count(*) FROM events), "
        f"(SELECT count(*) FROM events AS cur JOIN events VERSION AS OF {first.instant} AS old "
        f"ON cur.id = old.id), "
        f"(SELECT count(*) FROM events TIMESTAMP AS OF '2000-01-01'), "
        f"(SELECT max(id) FROM (SELECT * FROM events TIMESTAMP AS OF {_iso(history[-1].completed_at)!r}))"
    ).first()
    assert tuple(answer) == (3, 5, 4, 2, 0, 2)

    # Plain spark.sql refuses time travel on a Python data source's table.
    with pytest.raises(Exception, match="TIME_TRAVEL"):
        spark.sql(f"SELECT * FROM events VERSION AS OF {first.instant}").collect()

    with pytest.raises(txn.InvalidOptionError, match="names no completed instant"):
        sql("SELECT * FROM events VERSION AS OF 12345")
    with pytest.raises(txn.InvalidOptionError, match="not an instant time"):
        sql("SELECT * FROM events TIMESTAMP AS OF 'yesterday'")
    assert table.count() == 4

    rows = sql("DESCRIBE HISTORY events").collect()
    assert [r.version for r in rows] == [int(e.instant) for e in history]
    assert [r.operation for r in rows] == ["DELETE", "APPEND", "APPEND"]
    assert rows[1].operationMetrics["numOutputRows"] == "2"
    assert rows[0].operationMetrics["numDeletedRows"] == "1"
    assert rows[0].engineInfo == "metatxn" and rows[0].timestamp is not None
    newest = sql("DESC HISTORY default.events LIMIT 1").collect()
    assert [r.version for r in newest] == [int(history[0].instant)]

    detail = sql("DESCRIBE DETAIL events").first()
    assert (detail.format, detail.name, detail.location, detail.numRows, detail.version) == (
        "metatxn", "spark_catalog.default.events", str(warehouse / "events"), 4, int(history[0].instant))
    assert detail.numFiles == len(table.snapshot().files()) and detail.sizeInBytes > 0
    assert detail.partitionColumns == [] and detail.recordKey == []
    with pytest.raises(txn.TableNotFoundError):
        sql("DESCRIBE HISTORY no_such_table")


def test_a_relative_warehouse_names_one_folder_wherever_the_process_or_its_workers_run(
        spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    txn.spark.register(spark, warehouse="relative_wh")
    txn.spark.sql(spark, "CREATE TABLE moved (id BIGINT, region STRING) STORED AS metatxn")
    txn.open_table(str(tmp_path / "relative_wh" / "moved")).append(_rows(range(3)))
    # Spark's Python workers, and this process after a chdir, resolve a relative path elsewhere.
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert txn.spark.sql(spark, "SELECT count(*) FROM moved").first()[0] == 3


def _iso(instant: str) -> str:
    """A 17-digit instant time as a timestamp literal's text."""
    day, time = instant[:8], instant[8:]
    return f"{day[:4]}-{day[4:6]}-{day[6:]} {time[:2]}:{time[2:4]}:{time[4:6]}.{time[6:]}"


def test_s3a_locations_reach_spark_as_written(spark: Any, s3_uri: Any) -> None:
    import txn.spark

    uri, options = s3_uri
    s3a = uri.replace("s3://", "s3a://", 1)
    table = txn.create_table(s3a, SCHEMA, storage_options=options)
    table.append(_rows(range(3)))
    opened = txn.open_table(s3a, storage_options=options)
    assert opened.uri == s3a
    assert all(f.path.startswith(s3a + "/") for f in opened.snapshot().files())
    assert opened.to_arrow().num_rows == 3  # the table reads its own s3a:// paths
    # Open-source Spark has no S3 filesystem here: the scan fails on the s3a:// scheme it was
    # handed (an s3:// path would fail with 'No FileSystem for scheme "s3"').
    with pytest.raises(Exception, match="S3AFileSystem"):
        txn.spark.read(spark, s3a, storage_options=options).collect()


def test_the_warehouse_tables_entered_are_those_names_can_reach(tmp_path: Path) -> None:
    from txn.spark._located import LOCATION_KEY, located, location_of, source_options
    from txn.spark._sql._catalog import Catalog, TableName
    from txn.spark._sql._published import warehouse_tables

    for folder in ("orders", "sales.db/customers", "Mixed", "default.db/x", "a/b/c", "odd-name"):
        txn.create_table(str(tmp_path / folder), SCHEMA)
    assert warehouse_tables(Catalog(str(tmp_path))) == [
        TableName("default", "orders"), TableName("sales", "customers")]
    assert warehouse_tables(Catalog(str(tmp_path / "missing"))) == []

    from pyspark.sql.datasource import CaseInsensitiveDict
    from pyspark.sql.types import LongType, StructField, StructType

    schema = located(StructType([StructField("id", LongType())]), "s3a://b/t")
    assert schema.fields[0].metadata == {LOCATION_KEY: "s3a://b/t"} and location_of(schema) == "s3a://b/t"
    assert location_of(StructType([StructField("id", LongType())])) is None
    options = CaseInsensitiveDict({"path": "p", "Location": "p", "owner": "me", "provider": "metatxn"})
    assert dict(source_options(options)) == {"path": "p"}
