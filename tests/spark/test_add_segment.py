"""ADD SEGMENT in Spark: Hive-partitioned Parquet, ORC, CSV and JSON folders written by Spark
itself, registered with ``t.add_segment`` beside a native segment, read in place.

Invariants: ``txn.spark.read`` (one Spark scan per format, unioned with the native scan) holds
exactly the source rows, columns and types in table order, whatever the filter (SQL string or
pyarrow expression) or projection, and the same rows as ``Table.to_arrow``; deleted rows never
appear; a filter on a partition column leaves the other partitions' external files out of the
snapshot's file list and out of Spark's scan; custom compaction turns external segments into
a native one; the external files stay byte for byte what Spark wrote.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
import txn.spark
from txn.spark._types import spark_schema

from .helpers import frame

pytestmark = pytest.mark.spark

#: The seed's ``log_parquet_par`` table: data columns, then the partition columns.
SEED = pa.schema([
    ("id", pa.int64()), ("event_time", pa.int64()), ("ip", pa.string()),
    ("day", pa.int32()), ("hour", pa.int32()), ("type", pa.int32()),
])
PARTITIONS = ["day", "hour", "type"]
OPTION = "day:int,hour:int,type:int"
DAYS = (20211122, 20211123)

#: The folders Spark writes: name -> (format, writer options, first id, write tasks: files per
#: partition folder at most).
FOLDERS = {
    "parquet": ("parquet", {}, 0, 2),
    "orc": ("orc", {}, 1000, 1),
    "csv_header": ("csv", {"header": "true"}, 2000, 2),
    "csv_plain": ("csv", {}, 3000, 1),
    "json": ("json", {}, 4000, 1),
}
NATIVE_FIRST = 5000
ROWS = 96


def seed_rows(first: int, count: int = ROWS) -> pa.Table:
    """Rows of ``SEED``: 8 partitions (2 days x 2 hours x 2 types), every 13th ip null, and one
    row repeated (a multiset, not a set)."""
    ids = [*range(first, first + count), first + 5]
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "event_time": pa.array([1637625600000 + 1000 * (i % 500) for i in ids], pa.int64()),
        "ip": pa.array([None if i % 13 == 0 else f"10.0.{i % 7}.{i % 250}" for i in ids]),
        "day": pa.array([DAYS[i % 2] for i in ids], pa.int32()),
        "hour": pa.array([11 + (i // 2) % 2 for i in ids], pa.int32()),
        "type": pa.array([(i // 4) % 2 for i in ids], pa.int32()),
    }, schema=SEED)


def multiset(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(row.values()) for row in table.to_pylist())


def spark_multiset(df: Any, schema: pa.Schema = SEED) -> Counter[tuple[Any, ...]]:
    got = df.toArrow()
    return multiset(got.cast(pa.schema([schema.field(n).with_nullable(True) for n in got.column_names])))


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` (Spark's ``_SUCCESS`` and ``.crc`` files too), byte for byte."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def same_columns(df: Any, schema: pa.Schema = SEED) -> None:
    assert [(f.name, f.dataType) for f in df.schema.fields] == [
        (f.name, f.dataType) for f in spark_schema(schema).fields]


@pytest.fixture(scope="module")
def folders(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, pa.Table]]:
    """The Hive-partitioned folders, written once by Spark (``partitionBy("day","hour","type")``),
    with the rows each holds. No test writes into them."""
    root = tmp_path_factory.mktemp("external")
    written = {}
    for name, (file_format, options, first, tasks) in FOLDERS.items():
        rows = seed_rows(first)
        writer = frame(spark, rows, tasks).write.partitionBy(*PARTITIONS).options(**options)
        writer.format(file_format).save(str(root / name))
        written[name] = (root / name, rows)
    return written


@pytest.fixture(scope="module")
def snapshot_of_folders(folders: dict[str, tuple[Path, pa.Table]]) -> dict[str, bytes]:
    """What Spark wrote, before any table used it."""
    return external_bytes(folders)


def external_bytes(folders: dict[str, tuple[Path, pa.Table]]) -> dict[str, bytes]:
    """Every file of every folder, byte for byte."""
    return {f"{name}/{path}": data for name, (root, _) in folders.items()
            for path, data in tree_bytes(root).items()}


def mixed_table(uri: str, folders: dict[str, tuple[Path, pa.Table]]) -> tuple[txn.Table, pa.Table]:
    """A table of every folder as external segments plus one native segment; with its rows."""
    table = txn.create_table(uri, SEED, partition_by=PARTITIONS)
    native = seed_rows(NATIVE_FIRST, 40)
    table.append(native)
    for name, (root, _) in folders.items():
        table.add_segment(str(root), FOLDERS[name][0], partition=OPTION)
    rows = pa.concat_tables([native, *(rows for _, rows in folders.values())])
    return table, rows


@pytest.fixture(scope="module")
def mixed(folders: dict[str, tuple[Path, pa.Table]], snapshot_of_folders: dict[str, bytes],
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[txn.Table, pa.Table]]:
    """The read-only mixed table of this module (no test writes to it)."""
    table, rows = mixed_table(str(tmp_path_factory.mktemp("mixed") / "log_par"), folders)
    yield table, rows
    assert table.validate().ok
    assert external_bytes(folders) == snapshot_of_folders


def test_add_segment_makes_one_external_segment_per_partition_folder(
        mixed: tuple[txn.Table, pa.Table]) -> None:
    table, _ = mixed
    segments = table.segments()
    external = [s for s in segments if s.external]
    assert Counter(s.format for s in external) == {"parquet": 8, "orc": 8, "csv": 16, "json": 8}
    assert [s.external for s in segments].count(False) == 1
    assert all(s.status == "Success" for s in segments)
    assert sum(s.rows for s in segments) == 41 + 5 * (ROWS + 1)


def test_a_spark_read_holds_exactly_the_source_rows(spark: Any, mixed: tuple[txn.Table, pa.Table]) -> None:
    table, rows = mixed
    df = txn.spark.read(spark, table.uri)
    same_columns(df)
    got = spark_multiset(df)
    assert got == multiset(rows)
    assert multiset(table.to_arrow()) == got
    assert txn.spark.count(spark, table.uri) == rows.num_rows == df.count()
    assert txn.spark.count(spark, table.uri, "type = 1 AND ip IS NOT NULL") == rows.filter(
        (pc.field("type") == 1) & pc.field("ip").is_valid()).num_rows
    assert txn.spark.count(spark, table.uri, pc.field("hour") == 11) == rows.filter(
        pc.field("hour") == 11).num_rows


FILTERS = [
    ("day = 20211123 AND type = 0", (pc.field("day") == 20211123) & (pc.field("type") == 0)),
    ("hour = 12", pc.field("hour") == 12),
    ("ip IS NULL", pc.field("ip").is_null()),
    ("event_time >= 1637625650000 AND id < 3500",
     (pc.field("event_time") >= 1637625650000) & (pc.field("id") < 3500)),
    ("ip LIKE '10.0.3.%' OR day = 20211122",
     pc.starts_with(pc.field("ip"), "10.0.3.") | (pc.field("day") == 20211122)),
]


@pytest.mark.parametrize(("sql", "expression"), FILTERS, ids=[sql for sql, _ in FILTERS])
def test_a_filter_as_sql_or_expression_gives_the_source_rows(
        spark: Any, mixed: tuple[txn.Table, pa.Table], sql: str, expression: pc.Expression) -> None:
    table, rows = mixed
    expected = multiset(rows.filter(expression))
    assert expected
    by_sql = txn.spark.read(spark, table.uri, filter=sql)
    same_columns(by_sql)
    assert spark_multiset(by_sql) == expected
    assert spark_multiset(txn.spark.read(spark, table.uri, filter=expression)) == expected
    assert multiset(table.to_arrow(filter=expression)) == expected


def test_columns_select_in_the_order_asked(spark: Any, mixed: tuple[txn.Table, pa.Table]) -> None:
    table, rows = mixed
    df = txn.spark.read(spark, table.uri, filter="type = 1", columns=["ip", "day", "id"])
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("ip", "string"), ("day", "int"), ("id", "bigint")]
    expected = multiset(rows.filter(pc.field("type") == 1).select(["ip", "day", "id"]))
    assert spark_multiset(df) == expected
    assert multiset(table.to_arrow(filter=pc.field("type") == 1, columns=["ip", "day", "id"])) == expected


def test_a_partition_filter_prunes_the_other_partitions_external_files(
        spark: Any, mixed: tuple[txn.Table, pa.Table]) -> None:
    table, rows = mixed
    everything = table.snapshot().files()
    native = _native_id(table)
    assert {f.segment == native for f in everything} == {True, False}
    wanted = pc.field("day") == 20211123
    kept = table.snapshot().files(wanted)
    assert kept and all(f.partition["day"] == 20211123 for f in kept)
    assert {f.path for f in kept} == {f.path for f in everything if f.partition["day"] == 20211123}
    assert {f.format for f in kept if f.segment != native} == {"parquet", "orc", "csv", "json"}
    assert any(f.segment == native for f in kept)
    # The external segments kept are the day=20211123 partition folders: 4 of 8 per folder.
    segments = {s.id: s for s in table.segments() if s.external}
    kept_segments = {f.segment for f in kept if f.segment != native}
    assert kept_segments == {i for i, s in segments.items()
                             if s.partitions[0].startswith("day=20211123/")}
    assert len(kept_segments) == 4 * len(FOLDERS)
    # Spark's scans are given exactly those files: the others are never opened. (CSV and JSON
    # files are read by metatxn's reader on the executors, not by a Spark file scan.)
    df = txn.spark.read(spark, table.uri, filter="day = 20211123")
    opened = {_local(path) for path in df.inputFiles()}
    assert opened == {_local(f.path) for f in kept if f.format not in ("csv", "json")}
    assert all("day=20211122" not in path for path in opened)
    assert spark_multiset(df) == multiset(rows.filter(wanted))


def _native_id(table: txn.Table) -> str:
    (native,) = [s.id for s in table.segments() if not s.external]
    return native


def _local(path: str) -> str:
    """A file URI as a plain local path (Spark says ``file:/x``, metatxn ``file:///x``)."""
    for scheme in ("file://", "file:"):
        if path.startswith(scheme):
            return path[len(scheme):]
    return path


def test_the_metatxn_format_reads_external_segments(spark: Any, mixed: tuple[txn.Table, pa.Table]) -> None:
    table, rows = mixed
    txn.spark.register(spark)
    df = spark.read.format("metatxn").load(table.uri)
    same_columns(df)
    assert spark_multiset(df) == multiset(rows)


def test_deleted_external_rows_are_not_read_and_files_stay(
        spark: Any, folders: dict[str, tuple[Path, pa.Table]], snapshot_of_folders: dict[str, bytes],
        tmp_path: Path) -> None:
    table, rows = mixed_table(str(tmp_path / "log_par"), folders)
    # Rows of every external format (parquet, orc, both csv, json) and of the native segment.
    doomed = pc.field("id").isin([3, 5, 17, 1004, 1050, 2001, 2090, 3013, 3060, 4000, 4077, 5002])
    assert table.delete(doomed) is not None
    expected = multiset(rows.filter(~doomed))
    assert sum(expected.values()) == rows.num_rows - 13  # id 5 is there twice
    df = txn.spark.read(spark, table.uri)
    assert spark_multiset(df) == expected
    assert multiset(table.to_arrow()) == expected
    assert txn.spark.count(spark, table.uri) == sum(expected.values())
    assert txn.spark.count(spark, table.uri, "day = 20211122") == sum(
        n for row, n in expected.items() if row[3] == 20211122)
    assert external_bytes(folders) == snapshot_of_folders
    assert table.validate().ok


def test_custom_compaction_converts_external_segments_to_a_native_one(
        spark: Any, folders: dict[str, tuple[Path, pa.Table]], snapshot_of_folders: dict[str, bytes],
        tmp_path: Path) -> None:
    table, rows = mixed_table(str(tmp_path / "log_par"), folders)
    # Five rows of the partition compacted (id % 8 == 0: day=20211122/hour=11/type=0), two outside.
    doomed = pc.field("id").isin([8, 1000, 2008, 3000, 4016, 1, 1007])
    table.delete(doomed)
    chosen = [s for s in table.segments()
              if s.external and s.partitions == ["day=20211122/hour=11/type=0"]]
    chosen_ids = [s.id for s in chosen]
    assert Counter(s.format for s in chosen) == {"parquet": 1, "orc": 1, "csv": 2, "json": 1}
    commit = txn.spark.compact(spark, table.uri, "custom", segments=chosen_ids)
    assert commit is not None
    after = {s.id: s for s in table.segments()}
    merged = {after[i].merged_to for i in chosen_ids}
    assert all(after[i].status == "Compacted" for i in chosen_ids)
    (new_id,) = merged
    assert new_id is not None and not after[new_id].external and after[new_id].format == "parquet"
    assert after[new_id].status == "Success"
    assert after[new_id].rows == sum(s.rows for s in chosen) - 5  # less the deleted rows
    assert after[new_id].partitions == ["day=20211122/hour=11/type=0"]
    new_files = [f for f in table.snapshot().files() if f.segment == new_id]
    assert new_files and all(f.path.startswith(table.uri + "/day=20211122/hour=11/type=0/")
                             for f in new_files)
    assert not [f for f in table.snapshot().files() if f.segment in chosen_ids]
    expected = multiset(rows.filter(~doomed))
    assert spark_multiset(txn.spark.read(spark, table.uri)) == expected
    assert multiset(table.to_arrow()) == expected
    assert external_bytes(folders) == snapshot_of_folders
    assert table.validate().ok


def test_an_unpartitioned_table_over_a_flat_folder_invents_no_column(
        spark: Any, tmp_path: Path) -> None:
    schema = pa.schema([SEED.field("id"), SEED.field("event_time"), SEED.field("ip")])
    flat, nested = seed_rows(0).select(schema.names), seed_rows(500).select(schema.names)
    frame(spark, flat, 3).write.parquet(str(tmp_path / "flat"))
    # Subfolders that look like Hive partitions: the table has no partition column, so no ``x``.
    frame(spark, nested.slice(0, 50), 2).write.parquet(str(tmp_path / "nested" / "x=1"))
    frame(spark, nested.slice(50), 2).write.parquet(str(tmp_path / "nested" / "x=2"))
    before = {name: tree_bytes(tmp_path / name) for name in ("flat", "nested")}
    table = txn.create_table(str(tmp_path / "plain"), schema)
    table.add_segment(str(tmp_path / "flat"), "parquet")
    table.add_segment(str(tmp_path / "nested"), "parquet")
    assert [s.external for s in table.segments()] == [True, True]
    df = txn.spark.read(spark, table.uri)
    same_columns(df, schema)
    expected = multiset(pa.concat_tables([flat, nested]))
    assert spark_multiset(df, schema) == expected
    assert multiset(table.to_arrow()) == expected
    assert spark_multiset(txn.spark.read(spark, table.uri, filter="id >= 550"), schema) == multiset(
        nested.filter(pc.field("id") >= 550))
    assert {name: tree_bytes(tmp_path / name) for name in ("flat", "nested")} == before


def test_partition_values_spark_would_decode_otherwise(spark: Any, tmp_path: Path) -> None:
    """pyarrow escapes non-ASCII partition values (``city=Z%C3%BCrich``), which Spark decodes
    byte by byte; and a folder named like a glob pattern (``logs[1]``). Spark and pyarrow
    reads agree, and filters on the value find the rows."""
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int64()), ("city", pa.string())])
    data = pa.table({"id": [1, 2, 3], "city": ["Zürich", "Oslo", "Zürich"]})
    folder = tmp_path / "logs[1]"
    pq.write_to_dataset(data, str(folder), partition_cols=["city"])
    t = txn.create_table(str(tmp_path / "t"), schema, partition_by=["city"])
    t.add_segment(str(folder), "parquet", partition="city:string")
    uri = str(tmp_path / "t")
    got = sorted((r.id, r.city) for r in txn.spark.read(spark, uri).collect())
    assert got == [(1, "Zürich"), (2, "Oslo"), (3, "Zürich")]
    assert txn.spark.read(spark, uri, filter="city = 'Zürich'").count() == 2
    assert sorted(t.to_arrow()["city"].to_pylist()) == ["Oslo", "Zürich", "Zürich"]


def test_csv_is_read_by_one_reader_in_spark_and_pyarrow(spark: Any, tmp_path: Path) -> None:
    """"NA" is text, an empty field null, in both reads (Spark's CSV scan is not used: its
    dialect differs from pyarrow's, and statistics come from pyarrow's reading)."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "p.csv").write_bytes(b"id,name\n1,NA\n2,\n3,bob\n")
    t = txn.create_table(str(tmp_path / "t"), schema)
    t.add_segment(str(tmp_path / "csv"), "csv")
    uri = str(tmp_path / "t")
    got = sorted((r.id, r.name) for r in txn.spark.read(spark, uri).collect())
    assert got == [(1, "NA"), (2, None), (3, "bob")]
    assert txn.spark.read(spark, uri, filter="name = 'NA'").count() == 1


def test_a_spark_read_of_a_rewritten_external_file_fails(spark: Any, tmp_path: Path) -> None:
    """Issue 22: Spark's own scan would read the rewritten file as it now is (4 rows where 3
    were added); the driver compares it with its record first and raises, naming it."""
    import os

    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int64())])
    (tmp_path / "ext").mkdir()
    path = tmp_path / "ext" / "p.parquet"
    pq.write_table(pa.table({"id": [10, 11, 12]}), path)
    t = txn.create_table(str(tmp_path / "t"), schema)
    t.add_segment(str(tmp_path / "ext"), "parquet")
    assert sorted(r.id for r in txn.spark.read(spark, t.uri).collect()) == [10, 11, 12]
    added = os.stat(path).st_mtime_ns
    pq.write_table(pa.table({"id": [10, 11, 12, 13]}), path)
    if os.stat(path).st_mtime_ns == added:  # a kernel with coarse timestamps: a later rewrite
        os.utime(path, ns=(added + 1_000_000, added + 1_000_000))
    with pytest.raises(txn.CorruptMetadataError, match=r"p\.parquet.*recorded"):
        txn.spark.read(spark, t.uri).collect()
