"""Spark reads and writes of a table whose files have several schema versions (issue 24).

Invariants:

* ``txn.spark.read``, ``txn.spark.sql`` SELECT, ``format("metatxn")`` reads and
  ``txn.spark.compact`` read every file by column id: a renamed column reads its old files' values,
  a dropped-then-re-added name reads null in old files, a widened column its old values cast, an
  added column null; deletes of old files still apply, filters on renamed columns still select
  old rows; a read as of an older instant has that instant's schema;
* ``txn.spark.write``'s native Parquet files carry the table's column ids;
* ``txn.spark.write(..., schema_mode="merge")`` (and ``format("metatxn")`` with ``mergeSchema``)
  evolves the table in the same commit as its rows; without it a different DataFrame is refused
  as before, the table unchanged.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import txn
import txn.spark

pytestmark = pytest.mark.spark

needs_merge = pytest.mark.skipif(
    "schema_mode" not in inspect.signature(txn.Table.begin_write).parameters,
    reason="Table.begin_write(schema_mode=...) is not merged yet")

ROW = "id bigint, name string, amt int, extra string"


def rows(frame: Any) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in frame.collect())


def _evolved(spark: Any, uri: str) -> tuple[txn.Table, str]:
    """A table written by Spark in two versions, then renamed, widened, dropped and re-added:

    v0 ``id, name, amt int``: rows 1, 2, 9 (native Spark files; 9 deleted); v1 adds ``extra``:
    rows 3, 4 with extra set; then ``name`` -> ``full_name``, ``amt`` -> bigint, ``extra``
    dropped and added again (a new id). Returns the table and the instant before the rename."""
    txn.spark.write(spark.createDataFrame([(1, "a", 10), (2, "b", 20), (9, "i", 90)],
                                          "id bigint, name string, amt int").coalesce(1), uri)
    table = txn.open_table(uri)
    table.delete(pc.field("id") == 9)  # a delete delta on a file of the oldest version
    table.add_columns([pa.field("extra", pa.string())])
    txn.spark.write(spark.createDataFrame([(3, "c", 30, "x"), (4, "d", 40, "y")], ROW), uri)
    before_rename = table.snapshot().instant
    assert before_rename is not None
    table.rename_column("name", "full_name")
    table.alter_column("amt", type=pa.int64())
    table.drop_columns(["extra"])
    table.add_columns([pa.field("extra", pa.string())])
    return txn.open_table(uri), before_rename


def test_spark_files_carry_the_table_column_ids(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    txn.spark.write(spark.createDataFrame([(1, "a", 10)], "id bigint, name string, amt int"), uri)
    table = txn.open_table(uri)
    (data_file,) = table.snapshot().files()
    written = pq.read_schema(data_file.path.removeprefix("file://"))
    assert [f.metadata[b"PARQUET:field_id"] for f in written] == \
        [f.metadata[b"PARQUET:field_id"] for f in table.schema]
    assert data_file.schema_id == table.snapshot().schema_id


def test_reads_old_and_new_files_by_column_id(spark: Any, sql: Any, warehouse: Path) -> None:
    uri = str(warehouse / "t")
    table, before_rename = _evolved(spark, uri)
    assert {f.schema_id for f in table.snapshot().files()} == {0, 1}
    expected = [(1, "a", 10, None), (2, "b", 20, None), (3, "c", 30, None), (4, "d", 40, None)]

    frame = txn.spark.read(spark, uri)
    assert frame.columns == ["id", "full_name", "amt", "extra"]
    assert dict(frame.dtypes)["amt"] == "bigint"
    assert rows(frame) == expected
    assert rows(txn.spark.read(spark, uri, "full_name = 'a' OR amt = 40")) == [expected[0], expected[3]]
    assert rows(txn.spark.read(spark, uri, pc.field("full_name") == "b", columns=["id"])) == [(2,)]
    assert rows(txn.spark.read(spark, uri, "extra IS NOT NULL")) == []

    assert rows(sql("SELECT * FROM t")) == expected
    assert rows(sql("SELECT id, amt * 2 FROM t WHERE full_name IN ('a', 'c')")) == [(1, 20), (3, 60)]

    # As of the instant before the rename: that instant's schema, its extra values.
    old = txn.spark.read(spark, uri, as_of=before_rename)
    assert old.columns == ["id", "name", "amt", "extra"]
    assert dict(old.dtypes)["amt"] == "int"
    assert rows(old) == [(1, "a", 10, None), (2, "b", 20, None), (3, "c", 30, "x"), (4, "d", 40, "y")]
    assert rows(txn.spark.read(spark, uri, "name = 'd'", as_of=before_rename)) == [(4, "d", 40, "y")]

    # format("metatxn") reads through the snapshot's reader, which projects by id too.
    assert rows(spark.read.format("metatxn").load(uri)) == expected
    assert spark.read.format("metatxn").option("asOf", before_rename).load(uri).columns == \
        ["id", "name", "amt", "extra"]

    # Rows of the latest version go with the rest.
    txn.spark.write(spark.createDataFrame([(5, "e", 2**40, "z")], "id bigint, full_name string, "
                                          "amt bigint, extra string"), uri)
    after = [*expected, (5, "e", 2**40, "z")]
    assert rows(txn.spark.read(spark, uri)) == after
    assert txn.spark.count(spark, uri, "full_name < 'd'") == 3

    # Compaction through Spark rewrites every version's rows to the current schema.
    segments = [s.id for s in table.segments() if s.status == "Success"]
    txn.spark.compact(spark, uri, "custom", segments=segments)
    compacted = txn.open_table(uri).snapshot()
    assert {f.schema_id for f in compacted.files()} == {compacted.schema_id}
    assert rows(txn.spark.read(spark, uri)) == after
    assert sorted(compacted.to_arrow().to_pylist(), key=lambda r: r["id"])[0] == \
        {"id": 1, "full_name": "a", "amt": 10, "extra": None}


def test_external_segment_reads_later_columns_as_null(spark: Any, tmp_path: Path) -> None:
    folder = tmp_path / "outside"
    folder.mkdir()
    pq.write_table(pa.table({"id": [7, 8], "name": ["g", "h"]}), folder / "part.parquet")
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, pa.schema([("id", pa.int64()), ("name", pa.string())]))
    table.add_segment(str(folder))
    table.add_columns([pa.field("score", pa.float64())])
    table.rename_column("name", "label")
    frame = txn.spark.read(spark, uri)
    assert frame.columns == ["id", "label", "score"]
    assert rows(frame) == [(7, "g", None), (8, "h", None)]
    assert rows(txn.spark.read(spark, uri, "label = 'h'")) == [(8, "h", None)]


def test_partitioned_external_segment_reads_its_folders_by_version(spark: Any, tmp_path: Path) -> None:
    folder = tmp_path / "outside"
    (folder / "day=3").mkdir(parents=True)
    pq.write_table(pa.table({"id": [7, 8], "name": ["g", "h"]}), folder / "day=3" / "part.parquet")
    uri = str(tmp_path / "t")
    table = txn.create_table(uri, pa.schema([("id", pa.int64()), ("name", pa.string()), ("day", pa.int32())]),
                             partition_by=["day"])
    table.add_segment(str(folder), partition="day:int")
    table.rename_column("name", "label")
    table.add_columns([pa.field("score", pa.float64())])
    frame = txn.spark.read(spark, uri)
    assert frame.columns == ["id", "label", "day", "score"]
    assert rows(frame) == [(7, "g", 3, None), (8, "h", 3, None)]
    assert rows(txn.spark.read(spark, uri, "day = 3 AND label = 'g'", columns=["id"])) == [(7,)]


def test_struct_children_are_read_by_id(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    txn.spark.write(spark.createDataFrame([(1, ("p", 75)), (2, None)], "id bigint, addr struct<city: "
                                          "string, zip: int>"), uri)
    table = txn.open_table(uri)
    table.add_columns([pa.field("addr.country", pa.string())])
    table.rename_column("addr.city", "town")
    table.alter_column("addr.zip", type=pa.int64())
    frame = txn.spark.read(spark, uri)
    assert frame.schema["addr"].dataType.simpleString() == "struct<town:string,zip:bigint,country:string>"
    assert sorted((r["id"], r["addr"] and r["addr"].asDict()) for r in frame.collect()) == [
        (1, {"town": "p", "zip": 75, "country": None}), (2, None)]
    assert rows(txn.spark.read(spark, uri, "addr.town = 'p'", columns=["id"])) == [(1,)]


def test_without_merge_a_different_dataframe_is_refused_as_before(spark: Any, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    txn.spark.write(spark.createDataFrame([(1, "a")], "id bigint, name string"), uri)
    before = txn.open_table(uri).timeline()
    with pytest.raises(txn.SchemaMismatchError, match=r"has column\(s\) \['extra'\] the table does not"):
        txn.spark.write(spark.createDataFrame([(2, "b", "x")], "id bigint, name string, extra string"), uri)
    with pytest.raises(txn.InvalidOptionError, match="schema_mode must be None or 'merge', got 'evolve'"):
        txn.spark.write(spark.createDataFrame([(2, "b")], "id bigint, name string"), uri,
                        schema_mode="evolve")
    with pytest.raises(txn.SchemaMismatchError, match=r"name: int .*neither widens"):
        txn.spark.write(spark.createDataFrame([(2, 5)], "id bigint, name int"), uri, schema_mode="merge")
    assert txn.open_table(uri).timeline() == before


@needs_merge
def test_merge_write_evolves_the_table_in_its_commit(spark: Any, sql: Any, warehouse: Path) -> None:
    uri = str(warehouse / "t")
    txn.spark.write(spark.createDataFrame([(1, "a", 10)], "id bigint, name string, amt int"), uri)
    table = txn.open_table(uri)
    # A new column and a widened one, in one commit with the rows.
    commit = txn.spark.write(spark.createDataFrame([(2, "b", 2**40, "x")],
                                                   "id bigint, name string, amt bigint, extra string"),
                             uri, schema_mode="merge")
    assert commit is not None
    table = txn.open_table(uri)
    assert [(f.name, str(f.type)) for f in table.schema] == [
        ("id", "int64"), ("name", "string"), ("amt", "int64"), ("extra", "string")]
    assert len(table.timeline()) == 2
    table.rename_column("name", "full_name")
    # A DataFrame lacking a nullable column writes it as nulls.
    txn.spark.write(spark.createDataFrame([(3, "c")], "id bigint, full_name string"), uri,
                    schema_mode="merge")
    expected = [(1, "a", 10, None), (2, "b", 2**40, "x"), (3, "c", None, None)]
    assert rows(txn.spark.read(spark, uri)) == expected
    assert rows(sql("SELECT id FROM t WHERE full_name = 'a'")) == [(1,)]

    spark.createDataFrame([(4, "d", 1, "w", 0.5)], "id bigint, full_name string, amt int, extra string, "
                          "score double").write.format("metatxn").mode("append") \
        .option("mergeSchema", "true").save(uri)
    assert txn.open_table(uri).schema.names[-1] == "score"
    assert rows(txn.spark.read(spark, uri, "id = 4")) == [(4, "d", 1, "w", 0.5)]
