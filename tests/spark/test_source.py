"""The ``metatxn`` format: ``df.write.format("metatxn")`` and ``spark.read.format("metatxn")``.

Its hooks run in PySpark's own Python workers (``writer()`` begins the instant, tasks write,
``commit()`` commits, ``abort()`` rolls back). Invariants: append and overwrite give the model's
rows in one commit each; reads equal ``Table.to_arrow`` (deleted rows removed, ``asOf`` time
travel); refused writes (existing or repeated keys, save modes other than append/overwrite) leave
no visible change;
a failing task rolls the instant back and leaves no files; ``validate()`` stays clean.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.spark

from .helpers import (
    ALL_TYPES,
    ORDERS,
    all_types_rows,
    data_files,
    file_bytes,
    frame,
    markers,
    orders,
    rows_by,
    spark_rows,
    states,
)

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module", autouse=True)
def _registered(spark: Any) -> None:
    txn.spark.register(spark)


def test_append_overwrite_and_read_through_the_format(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS, partition_by=["region"], sort_by=["price"])
    first, second = orders(range(600)), orders(range(600, 900))
    frame(spark, first, 2).write.format("metatxn").mode("append").save(uri)
    frame(spark, second, 2).write.format("metatxn").mode("append").save(uri)
    assert states(table) == [("commit", "completed")] * 2
    assert rows_by(table.to_arrow()) == rows_by(pa.concat_tables([first, second]))
    assert {path.split("/")[0] for path in data_files(uri)} == {"region=eu", "region=us", "region=apac"}

    table.delete(pc.field("qty") == 7)
    df = spark.read.format("metatxn").load(uri)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("id", "bigint"), ("region", "string"), ("day", "date"), ("price", "double"), ("qty", "int")]
    assert spark_rows(df, ORDERS) == rows_by(table.to_arrow())
    assert spark_rows(df.where("region = 'us' AND price > 500"), ORDERS) == rows_by(
        table.to_arrow(filter=(pc.field("region") == "us") & (pc.field("price") > 500)))

    replacement = orders(range(2000, 2100))
    frame(spark, replacement, 2).write.format("metatxn").mode("overwrite").save(uri)
    assert states(table)[-1] == ("replacecommit", "completed")
    assert rows_by(table.to_arrow()) == rows_by(replacement)
    assert spark_rows(spark.read.format("metatxn").load(uri), ORDERS) == rows_by(replacement)

    first_commit = table.timeline()[0].time
    as_of = spark.read.format("metatxn").option("asOf", first_commit).load(uri)
    assert spark_rows(as_of, ORDERS) == rows_by(first)
    assert table.validate().ok


def test_types_round_trip_through_the_format(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "types")
    table = txn.create_table(uri, ALL_TYPES)
    data = all_types_rows()
    frame(spark, data, 2).write.format("metatxn").mode("append").save(uri)
    assert rows_by(table.to_arrow(), "i8") == rows_by(data, "i8")
    back = spark.read.format("metatxn").load(uri).toArrow()
    assert rows_by(back.cast(ALL_TYPES), "i8") == rows_by(data, "i8")
    assert table.validate().ok


def test_empty_tables_and_empty_writes(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    assert spark.read.format("metatxn").load(uri).count() == 0
    frame(spark, ORDERS.empty_table()).write.format("metatxn").mode("append").save(uri)
    assert table.to_arrow().num_rows == 0 and data_files(uri) == []
    assert table.validate().ok


def test_refused_writes_change_nothing(spark: Any, tmp_path: Path) -> None:
    keyed_uri, plain_uri = str(tmp_path / "keyed"), str(tmp_path / "plain")
    keyed = txn.create_table(keyed_uri, ORDERS, record_key="id")
    plain = txn.create_table(plain_uri, ORDERS)
    keyed.append(orders(range(10)))
    df = frame(spark, orders(range(10, 20)))
    with pytest.raises(Exception, match=r"record key\(s\) \[([5-9], ){4}[5-9]\] already exist"):
        frame(spark, orders(range(5, 11))).write.format("metatxn").mode("append").save(keyed_uri)
    with pytest.raises(Exception, match=r"repeats within the DataFrame: \[12\]"):
        frame(spark, orders([11, 12, 12, 13]), 2).write.format("metatxn").mode("append").save(keyed_uri)
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("metatxn").save(plain_uri)  # the default mode, ErrorIfExists
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        df.write.format("metatxn").mode("ignore").save(plain_uri)
    assert states(keyed) == [("commit", "completed"), ("commit", "rolledback"), ("rollback", "completed"),
                             ("commit", "rolledback"), ("rollback", "completed")]
    assert states(plain) == []
    assert keyed.to_arrow().num_rows == 10 and data_files(plain_uri) == []


def test_a_failing_task_aborts_and_rolls_the_instant_back(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType

    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    table.append(orders(range(100)))
    files = file_bytes(uri)
    marker_folder = os.path.join(uri, "_markers")

    def poisoned(value):  # type: ignore[no-untyped-def]
        if value == 1999:  # wait until the other task announced its file, then fail
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not (
                    os.path.isdir(marker_folder) and os.listdir(marker_folder)):
                time.sleep(0.02)
            raise RuntimeError("poisoned row")
        return value

    df = frame(spark, orders(range(1000, 2000)), 2).withColumn(
        "id", F.udf(poisoned, LongType(), useArrow=False)("id"))
    with pytest.raises(Exception, match="poisoned row"):
        df.write.format("metatxn").mode("append").save(uri)

    failed, rollback = table.timeline()[-2:]
    assert (failed.action, failed.state) == ("commit", "rolledback")
    assert (rollback.action, rollback.state) == ("rollback", "completed")
    assert file_bytes(uri) == files and markers(uri) == []
    assert rows_by(table.to_arrow()) == rows_by(orders(range(100)))
    assert table.validate().ok

    frame(spark, orders(range(1000, 1100)), 2).write.format("metatxn").mode("append").save(uri)
    assert rows_by(table.to_arrow()) == rows_by(orders([*range(100), *range(1000, 1100)]))
    assert table.validate().ok


def test_a_user_schema_selects_columns(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "orders")
    table = txn.create_table(uri, ORDERS)
    table.append(orders(range(10)))
    df = spark.read.format("metatxn").schema("id bigint, price double").load(uri)
    assert rows_by(df.toArrow()) == rows_by(table.to_arrow(columns=["id", "price"]))
