"""ADD SEGMENT (issue 13): existing Parquet, ORC, CSV and JSON folders join a table in place, as
external segments read beside native ones, through the public Python API (no Spark).

The external folders are written here with pyarrow (``external_data``). Every test that refuses
a request checks that nothing was written: the timeline, SHOW SEGMENTS, the rows and the files
of the table folder are what they were. Every test that changes rows of external segments
checks that the external files stay byte for byte what they were.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.external_data import (
    sort_rows,
    tree_bytes,
    url_of,
    write_bytes,
    write_file,
    write_hive,
)

# -- schemas and rows ------------------------------------------------------------------------------

#: The seed's tables (log_parquet_par, log_orc_par, log_carbon_par).
LOG_SCHEMA = pa.schema([
    ("id", pa.int64()), ("event_time", pa.int64()), ("ip", pa.string()),
    ("day", pa.int32()), ("hour", pa.int32()), ("type", pa.int32()),
])
LOG_PARTITIONS = ["day", "hour", "type"]

#: A partitioned table of these tests: an int and a string partition column.
SCHEMA = pa.schema([
    ("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
    ("day", pa.int32()), ("region", pa.string()),
])
PARTITIONS = ["day", "region"]
PARTITION_OPTION = "day:int,region:string"

#: An unpartitioned table (and the columns of every external file of the partitioned one).
FLAT = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64())])
#: A keyed table: non-nullable key.
KEYED = pa.schema([("id", pa.int64(), False), ("name", pa.string()), ("score", pa.float64())])

FORMATS = ["parquet", "orc", "csv", "json"]


def flat_rows(ids: Any, *, schema: pa.Schema = FLAT) -> pa.Table:
    """Rows with ``ids``: name ``n<id>`` (``None`` when id % 7 == 3, ``""`` when id % 7 == 5),
    score id / 2."""
    ids = list(ids)
    names = [None if i % 7 == 3 else "" if i % 7 == 5 else f"n{i}" for i in ids]
    return pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array(names, pa.string()),
                     "score": pa.array([i / 2 for i in ids], pa.float64())}, schema=schema)


def rows(ids: Any, day: int, region: str | None) -> pa.Table:
    """Rows of ``SCHEMA`` in one partition."""
    base = flat_rows(ids)
    count = base.num_rows
    return (base.append_column("day", pa.array([day] * count, pa.int32()))
            .append_column("region", pa.array([region] * count, pa.string())))


def log_rows(ids: Any, type_: int) -> pa.Table:
    ids = list(ids)
    count = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "event_time": pa.array([1_637_668_800 + i for i in ids], pa.int64()),
        "ip": pa.array([f"10.0.0.{i % 250}" for i in ids], pa.string()),
        "day": pa.array([20211123] * count, pa.int32()),
        "hour": pa.array([12] * count, pa.int32()),
        "type": pa.array([type_] * count, pa.int32()),
    }, schema=LOG_SCHEMA)


def concat(*tables: pa.Table, schema: pa.Schema = SCHEMA) -> pa.Table:
    return pa.concat_tables([t.cast(schema) for t in tables])


def same_rows(actual: pa.Table, expected: pa.Table) -> None:
    """The same rows (by id), columns and types."""
    assert actual.schema.equals(expected.schema), (actual.schema, expected.schema)
    assert sort_rows(actual).to_pylist() == sort_rows(expected).to_pylist()


# -- what "nothing was written" means ---------------------------------------------------------------

def table_state(t: txn.Table, *, rows: bool = True) -> dict[str, Any]:
    """Everything a refused request must leave as it was (``rows``: read them too)."""
    folder = t.uri.removeprefix("file://")
    listing = sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*") if p.is_file()) \
        if os.path.isdir(folder) else None
    return {
        "timeline": [(i.time, i.action, i.state) for i in t.timeline()],
        "segments": [(s.id, s.status, s.format, s.external, s.path, tuple(s.partitions), s.rows)
                     for s in t.segments()],
        "rows": sort_rows(t.to_arrow()).to_pylist() if t.segments() and rows else [],
        "files": listing,
    }


def refused(t: txn.Table, error: type[Exception], *args: Any, **kwargs: Any) -> str:
    """Call ``t.add_segment(*args, **kwargs)``, expect ``error`` and no change; the message."""
    before = table_state(t)
    with pytest.raises(error) as caught:
        t.add_segment(*args, **kwargs)
    assert isinstance(caught.value, txn.TxnError)
    assert table_state(t) == before, "a refused add_segment changed the table"
    return str(caught.value)


def names(message: str, token: str, tmp_path: Path) -> bool:
    """Whether ``message`` names ``token`` as a word outside the test's folder paths."""
    return re.search(rf"\b{re.escape(token)}\b", message.replace(str(tmp_path), "")) is not None


_memory = itertools.count()


@pytest.fixture
def memory_root() -> Any:
    """A fresh ``memory://`` folder for external data, removed afterwards."""
    root = f"/ext-add-segment-{os.getpid()}-{next(_memory)}"
    yield f"memory://{root}"
    fs = fsspec.filesystem("memory")
    if fs.exists(root):
        fs.rm(root, recursive=True)


def partitioned_table(tmp_path: Path, **kwargs: Any) -> txn.Table:
    return txn.create_table(str(tmp_path / "table"), SCHEMA, partition_by=PARTITIONS, **kwargs)


# == 1. the seed walkthrough =======================================================================

def test_seed_walkthrough_result_and_error_tables(tmp_path: Path) -> None:
    """docs/addsegment-guide.md, replayed: two Hive tables (parquet, orc) partitioned by
    day/hour/type with files in type=0 and type=1 join log_carbon_par as four segments; the four
    refused requests of the error table write nothing; a native load then becomes segment 4."""
    warehouse = tmp_path / "warehouse"
    parquet_rows = concat(log_rows(range(5), 0), log_rows(range(5, 12), 1), schema=LOG_SCHEMA)
    orc_rows = concat(log_rows(range(100, 103), 0), log_rows(range(103, 110), 1), schema=LOG_SCHEMA)
    parquet_files = write_hive(warehouse / "log_parquet_par", parquet_rows, LOG_PARTITIONS, "parquet")
    orc_files = write_hive(warehouse / "log_orc_par", orc_rows, LOG_PARTITIONS, "orc")
    t = txn.create_table(str(warehouse / "log_carbon_par"), LOG_SCHEMA, partition_by=LOG_PARTITIONS)

    # the result table: both succeed, one segment per partition folder
    added = t.add_segment(f"{warehouse}/log_parquet_par/", "parquet", partition="day:int,hour:int,type:int")
    assert (added.operation, added.segment, added.files_added, added.rows_added) == \
        ("add_segment", "0", 2, 12)
    assert sorted(added.paths_added) == parquet_files
    added = t.add_segment(f"{warehouse}/log_orc_par/", "orc", partition="day:int,hour:int,type:int")
    assert (added.segment, added.files_added, added.rows_added) == ("2", 2, 10)
    assert sorted(added.paths_added) == orc_files

    # the error table: each an InvalidOptionError that quotes what was wrong, nothing written
    leaf = f"{warehouse}/log_parquet_par/day=20211123/hour=12/type=0"
    for option in ("day=20211123 and hour=12 and type=0", "day=20211123,hour=12,type=0"):
        message = refused(t, txn.InvalidOptionError, leaf, "parquet", partition=option)
        assert "invalid partition option" in message
        assert option in message and "day:int,hour:int,type:int" in message
    message = refused(t, txn.InvalidOptionError, leaf, "parquet")
    assert "partition option is required" in message
    message = refused(t, txn.InvalidOptionError, leaf, "parquet", partition="day:int,hour:int,type:int")
    assert "does not comply" in message and leaf in message

    # SHOW SEGMENTS, newest first
    shown = t.segments()
    assert [s.id for s in shown] == ["3", "2", "1", "0"]
    assert [s.status for s in shown] == ["Success"] * 4
    assert [s.format for s in shown] == ["orc", "orc", "parquet", "parquet"]
    assert all(s.external for s in shown)
    assert [s.path for s in shown] == [url_of(warehouse / "log_orc_par")] * 2 + \
        [url_of(warehouse / "log_parquet_par")] * 2
    assert all(len(s.partitions) == 1 for s in shown)
    # CarbonData lists partition folders in listing order (its walkthrough shows type=1 first);
    # which of the two folders gets the lower id is not part of the contract
    by_partition = {(s.format, s.partitions[0]): s.rows for s in shown}
    assert by_partition == {
        ("orc", "day=20211123/hour=12/type=0"): 3, ("orc", "day=20211123/hour=12/type=1"): 7,
        ("parquet", "day=20211123/hour=12/type=0"): 5, ("parquet", "day=20211123/hour=12/type=1"): 7,
    }
    same_rows(t.to_arrow(), concat(parquet_rows, orc_rows, schema=LOG_SCHEMA))

    # a native load afterwards is segment 4: parquet, not external
    native = concat(log_rows(range(200, 204), 1), log_rows(range(204, 206), 0), schema=LOG_SCHEMA)
    loaded = t.append(native)
    assert loaded is not None and loaded.segment == "4"
    newest = t.segments()[0]
    assert (newest.id, newest.status, newest.format, newest.external) == ("4", "Success", "parquet", False)
    assert sorted(newest.partitions) == ["day=20211123/hour=12/type=0", "day=20211123/hour=12/type=1"]
    assert newest.rows == 6
    same_rows(t.to_arrow(), concat(parquet_rows, orc_rows, native, schema=LOG_SCHEMA))
    assert t.snapshot().count() == 28
    assert t.validate().ok


# == 2. formats ===================================================================================

JUNK = b"\x00not data at all\xff" * 8

FORMAT_CASES = [("parquet", True), ("orc", True), ("csv", True), ("csv", False), ("json", True)]
FORMAT_IDS = ["parquet", "orc", "csv-header", "csv-no-header", "json"]


def add_junk(root: Path) -> None:
    """What Spark and Hadoop leave beside data files: none of it is data."""
    write_bytes(root / "_SUCCESS", b"")
    for crc in root.rglob("part-0.*"):
        write_bytes(crc.parent / f".{crc.name}.crc", JUNK)  # Hadoop's checksum files
        write_bytes(crc.parent / f"{crc.name}.crc", JUNK)   # and any other *.crc
    write_bytes(root / "_temporary" / "0" / "part-9.parquet", JUNK)
    first = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))[0]
    write_bytes(first / "_temporary" / "attempt_1" / "part-7.parquet", JUNK)


@pytest.mark.parametrize(("file_format", "header"), FORMAT_CASES, ids=FORMAT_IDS)
def test_partitioned_folder_in_each_format_reads_back(tmp_path: Path, file_format: str,
                                                      header: bool) -> None:
    data = concat(rows(range(6), 20240101, "eu"), rows(range(6, 15), 20240101, "us"),
                  rows(range(15, 19), 20240102, "eu"))
    root = tmp_path / "ext"
    files = write_hive(root, data, PARTITIONS, file_format, files_per_folder=2, header=header)
    add_junk(root)
    t = partitioned_table(tmp_path)

    added = t.add_segment(str(root), file_format, partition=PARTITION_OPTION)

    assert (added.segment, added.files_added, added.rows_added) == ("0", 6, 19)
    assert sorted(added.paths_added) == files
    shown = sorted(t.segments(), key=lambda s: s.id)
    assert [(s.partitions, s.rows, s.format, s.external) for s in shown] == [
        (["day=20240101/region=eu"], 6, file_format, True),
        (["day=20240101/region=us"], 9, file_format, True),
        (["day=20240102/region=eu"], 4, file_format, True),
    ]
    read = t.to_arrow()
    assert read.schema.equals(SCHEMA)  # partition columns typed from the folder names
    same_rows(read, data)
    assert sorted(f.path for f in t.snapshot().files()) == files
    assert {f.format for f in t.snapshot().files()} == {file_format}
    assert t.validate().ok


@pytest.mark.parametrize("file_format", FORMATS)
@pytest.mark.parametrize("layout", ["flat", "nested"])
def test_unpartitioned_folder_is_one_segment(tmp_path: Path, file_format: str, layout: str) -> None:
    root = tmp_path / "ext"
    parts = [flat_rows(range(4)), flat_rows(range(4, 9)), flat_rows(range(9, 11))]
    places = (["part-0", "part-1", "part-2"] if layout == "flat"
              else ["a/part-0", "a/b/part-1", "c/d/e/part-2"])
    files = sorted(write_file(root / f"{place}.{file_format}", part, file_format)
                   for place, part in zip(places, parts, strict=True))
    write_bytes(root / "_SUCCESS", b"")
    write_bytes(root / f".part-0.{file_format}.crc", JUNK)
    write_bytes(root / "_temporary" / "0" / f"part-3.{file_format}", JUNK)
    t = txn.create_table(str(tmp_path / "table"), FLAT)

    added = t.add_segment(root, file_format)  # a PathLike works too

    assert (added.segment, added.files_added, added.rows_added) == ("0", 3, 11)
    assert sorted(added.paths_added) == files
    [segment] = t.segments()
    assert (segment.id, segment.status, segment.format, segment.external, segment.path,
            segment.partitions, segment.rows) == ("0", "Success", file_format, True, url_of(root), [], 11)
    same_rows(t.to_arrow(), concat(*parts, schema=FLAT))
    assert t.validate().ok


def test_hive_null_and_escaped_partition_values(tmp_path: Path) -> None:
    root = tmp_path / "ext"
    null = "__HIVE_DEFAULT_PARTITION__"
    write_file(root / "day=1" / f"region={null}" / "part-0.orc", flat_rows(range(3)), "orc")
    write_file(root / "day=1" / "region=us%2Feast" / "part-0.orc", flat_rows(range(3, 6)), "orc")
    write_file(root / f"day={null}" / "region=x" / "part-0.orc", flat_rows(range(6, 8)), "orc")
    t = partitioned_table(tmp_path)
    t.add_segment(root, "orc", partition=PARTITION_OPTION)
    expected = concat(rows(range(3), 1, None), rows(range(3, 6), 1, "us/east"),
                      rows(range(6, 8), 1, "x").set_column(3, "day", pa.nulls(2, pa.int32())))
    same_rows(t.to_arrow(), expected)
    for where, count in ((pc.field("region").is_null(), 3), (pc.field("region") == "us/east", 3),
                         (pc.field("day").is_null(), 2)):
        same_rows(t.to_arrow(filter=where), expected.filter(where))
        assert t.snapshot().count(where) == count
        assert len(t.snapshot().files(where)) == 1


@pytest.mark.parametrize("file_format", FORMATS)
def test_empty_file_beside_others(tmp_path: Path, file_format: str) -> None:
    t = txn.create_table(str(tmp_path / "table"), FLAT)
    write_file(tmp_path / "ext" / f"part-0.{file_format}", flat_rows([]), file_format)
    write_file(tmp_path / "ext" / f"part-1.{file_format}", flat_rows([1, 2]), file_format)
    added = t.add_segment(tmp_path / "ext", file_format)
    assert (added.files_added, added.rows_added) == (2, 2)
    same_rows(t.to_arrow(), flat_rows([1, 2]))
    assert t.snapshot().count(pc.field("id") > 0) == 2
    t.delete(pc.field("id") == 1)
    same_rows(t.to_arrow(), flat_rows([2]))
    assert t.validate().ok


@pytest.mark.parametrize("file_format", [
    "parquet", "orc", "json",
    "csv",
])
def test_extra_columns_in_files_are_allowed(tmp_path: Path, file_format: str) -> None:
    """CarbonData's schema check: every table column must be in the files; more is fine."""
    t = txn.create_table(str(tmp_path / "table"), FLAT)
    data = flat_rows(range(5)).append_column("extra", pa.array(["x"] * 5))
    write_file(tmp_path / "ext" / f"part-0.{file_format}", data, file_format)
    t.add_segment(tmp_path / "ext", file_format)
    same_rows(t.to_arrow(), flat_rows(range(5)))
    t.delete(pc.field("id") == 3)
    same_rows(t.to_arrow(), flat_rows([0, 1, 2, 4]))


# == 3. mixed native and external segments through every read path ==================================

def test_mixed_segments_every_read_path_and_pruning(tmp_path: Path) -> None:
    t = partitioned_table(tmp_path)
    native = concat(rows(range(10), 1, "eu"), rows(range(10, 14), 2, "eu"))
    t.append(native)
    before_add = t.timeline()[-1].time
    parquet = rows(range(100, 110), 2, "us")
    orc = rows(range(200, 210), 3, "us")
    csv = rows(range(300, 305), 4, "eu")
    json = rows(range(400, 403), 4, "ap")
    parquet_files = write_hive(tmp_path / "pq", parquet, PARTITIONS, "parquet")
    orc_files = write_hive(tmp_path / "orc", orc, PARTITIONS, "orc")
    csv_files = write_hive(tmp_path / "csv", csv, PARTITIONS, "csv")
    json_files = write_hive(tmp_path / "json", json, PARTITIONS, "json")
    for folder, file_format in (("pq", "parquet"), ("orc", "orc"), ("csv", "csv"), ("json", "json")):
        t.add_segment(tmp_path / folder, file_format, partition=PARTITION_OPTION)
    everything = concat(native, parquet, orc, csv, json)
    snap = t.snapshot()

    same_rows(t.to_arrow(), everything)
    same_rows(snap.to_arrow(), everything)
    projected = t.to_arrow(columns=["region", "id"])
    assert projected.column_names == ["region", "id"]
    assert sorted(projected.to_pylist(), key=lambda r: r["id"]) == \
        sorted(everything.select(["region", "id"]).to_pylist(), key=lambda r: r["id"])
    assert snap.count() == everything.num_rows == 42

    def check(where: Any, expected_files: list[str] | None = None) -> None:
        expected = everything.filter(where)
        same_rows(t.to_arrow(filter=where), expected)
        assert snap.count(where) == expected.num_rows, where
        kept = [f.path for f in snap.files(where) if "://" in f.path and not f.path.startswith(t.uri)]
        if expected_files is not None:
            assert sorted(kept) == sorted(expected_files), where

    # data columns: ranges from parquet and orc footers, csv and json from the scan at add time
    check(pc.field("score") >= 100, orc_files + csv_files + json_files)
    check((pc.field("score") >= 50) & (pc.field("score") < 60), parquet_files)
    check(pc.field("id") == 203, orc_files)
    check(pc.field("id") == 301, csv_files)
    check(pc.field("id") == 401, json_files)
    check(pc.field("id") > 10_000, [])
    check(pc.field("name") == "n104")  # within every file's string range: nothing to prune
    check(pc.field("name") >= "n3", csv_files + json_files)
    check(pc.field("name").is_null())
    # partition columns: the folder values
    check(pc.field("day") == 2, parquet_files)
    check(pc.field("region") == "ap", json_files)
    check((pc.field("day") == 4) & (pc.field("region") == "eu"), csv_files)
    check(pc.field("day") == 1, [])
    # a filter and a projection together
    where = (pc.field("region") == "us") & (pc.field("score") < 101)
    got = t.to_arrow(filter=where, columns=["id"])
    assert sorted(got["id"].to_pylist()) == sorted(everything.filter(where)["id"].to_pylist())
    # the file table agrees with files()
    where = pc.field("score") >= 100
    assert sorted(snap.file_table(where)["location"].to_pylist()) == sorted(f.path for f in snap.files(where))
    # the native files are pruned too
    assert all(f.segment != "0" for f in snap.files(pc.field("day") == 3))

    # time travel: before the first add there were only the native rows
    same_rows(t.to_arrow(as_of=before_add), native)
    assert t.snapshot(before_add).count() == native.num_rows
    assert t.snapshot(before_add).count(pc.field("region") == "us") == 0
    assert all(f.segment == "0" for f in t.snapshot(before_add).files())


# == 4. refused requests ==========================================================================

@pytest.fixture
def busy_table(tmp_path: Path) -> txn.Table:
    """A partitioned table holding a native segment and an external one already."""
    t = partitioned_table(tmp_path)
    t.append(rows(range(5), 1, "eu"))
    write_hive(tmp_path / "first", rows(range(50, 55), 2, "eu"), PARTITIONS, "parquet")
    t.add_segment(tmp_path / "first", "parquet", partition=PARTITION_OPTION)
    return t


def test_refused_nonexistent_path(busy_table: txn.Table, tmp_path: Path) -> None:
    message = refused(busy_table, txn.InvalidOptionError, tmp_path / "nowhere", "parquet",
                      partition=PARTITION_OPTION)
    assert "nowhere" in message and "does not exist" in message


def test_refused_path_that_is_a_file(busy_table: txn.Table, tmp_path: Path) -> None:
    [one] = write_hive(tmp_path / "single", rows(range(60, 62), 3, "eu"), PARTITIONS, "parquet")
    message = refused(busy_table, txn.InvalidOptionError, one, "parquet", partition=PARTITION_OPTION)
    assert one in message


@pytest.mark.parametrize("content", ["empty", "only-markers"])
def test_refused_folder_without_data(busy_table: txn.Table, tmp_path: Path, content: str) -> None:
    folder = tmp_path / "nothing"
    folder.mkdir()
    if content == "only-markers":
        write_bytes(folder / "_SUCCESS", b"")
        write_bytes(folder / "day=3" / "region=eu" / ".part-0.parquet.crc", JUNK)
        write_bytes(folder / "_temporary" / "0" / "part-0.parquet", JUNK)
    message = refused(busy_table, txn.InvalidOptionError, folder, "parquet", partition=PARTITION_OPTION)
    assert "nothing" in message and "no data files" in message


@pytest.mark.parametrize("file_format", ["carbondata", "avro", "text", "", None])
def test_refused_unknown_format(busy_table: txn.Table, tmp_path: Path, file_format: Any) -> None:
    write_hive(tmp_path / "other", rows(range(60, 62), 3, "eu"), PARTITIONS, "parquet")
    message = refused(busy_table, txn.InvalidOptionError, tmp_path / "other", file_format,
                      partition=PARTITION_OPTION)
    assert repr(file_format) in message
    assert "parquet" in message and "orc" in message  # the supported ones are listed


@pytest.mark.parametrize("file_format", [
    "parquet", "orc",
    "csv",
    "json",
])
def test_refused_missing_column(busy_table: txn.Table, tmp_path: Path, file_format: str) -> None:
    data = rows(range(60, 63), 3, "eu").drop_columns(["score"])
    write_hive(tmp_path / "lacking", data, PARTITIONS, file_format)
    message = refused(busy_table, txn.SchemaMismatchError, tmp_path / "lacking", file_format,
                      partition=PARTITION_OPTION)
    assert "'score'" in message


@pytest.mark.parametrize("file_format", ["parquet", "orc"])
@pytest.mark.parametrize(("column", "found", "wanted"), [
    ("score", pa.string(), "double"), ("id", pa.int32(), "int64"), ("name", pa.int64(), "string"),
])
def test_refused_wrong_column_type(busy_table: txn.Table, tmp_path: Path, file_format: str,
                                   column: str, found: pa.DataType, wanted: str) -> None:
    data = rows(range(60, 63), 3, "eu")
    if column == "name":
        data = data.set_column(1, "name", pa.array([1, 2, 3], pa.int64()))
    else:
        index = data.schema.get_field_index(column)
        data = data.set_column(index, column, pc.cast(data[column], found))
    write_hive(tmp_path / "typed", data, PARTITIONS, file_format)
    message = refused(busy_table, txn.SchemaMismatchError, tmp_path / "typed", file_format,
                      partition=PARTITION_OPTION)
    assert f"'{column}'" in message and str(found) in message and wanted in message


@pytest.mark.parametrize(("column", "values"), [
    ("score", ["1.5", "x", "2"]),
    ("id", [0.5, 1.5, 2.5]),
])
def test_refused_json_values_of_another_type(busy_table: txn.Table, tmp_path: Path, column: str,
                                             values: list[Any]) -> None:
    """JSON declares no types: the values are checked when the file is scanned at add time;
    the error names the column (pyarrow's own words for the types)."""
    data = flat_rows(range(60, 63)).to_pylist()
    for row, value in zip(data, values, strict=True):
        row[column] = value
    write_bytes(tmp_path / "jsonbad" / "day=3" / "region=eu" / "part-0.json",
                "".join(json.dumps(row) + "\n" for row in data).encode())
    message = refused(busy_table, txn.SchemaMismatchError, tmp_path / "jsonbad", "json",
                      partition=PARTITION_OPTION)
    assert "part-0.json" in message
    assert names(message, column, tmp_path), message


@pytest.mark.parametrize("file_format", ["parquet", "orc"])
@pytest.mark.parametrize("odd_one", [0, 2])
def test_refused_file_differing_from_siblings(busy_table: txn.Table, tmp_path: Path,
                                              file_format: str, odd_one: int) -> None:
    folder = tmp_path / "siblings" / "day=3" / "region=eu"
    for n in range(3):
        data = flat_rows(range(60 + 10 * n, 63 + 10 * n))
        if n == odd_one:
            data = data.append_column("extra", pa.array([1] * data.num_rows, pa.int64()))
        write_file(folder / f"part-{n}.{file_format}", data, file_format)
    message = refused(busy_table, txn.SchemaMismatchError, tmp_path / "siblings", file_format,
                      partition=PARTITION_OPTION)
    # the odd file and the column that differs are named (the message also names a sibling)
    assert f"part-{odd_one}.{file_format}" in message and "extra" in message


def test_refused_partition_option_on_unpartitioned_table(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "table"), FLAT)
    t.append(flat_rows(range(3)))
    write_file(tmp_path / "flat" / "part-0.parquet", flat_rows(range(10, 13)), "parquet")
    message = refused(t, txn.InvalidOptionError, tmp_path / "flat", "parquet", partition="day:int")
    assert "day:int" in message and "not partitioned" in message


@pytest.mark.parametrize("option", [
    "day:string,region:string",    # another type than the table's
    "day:bigint,region:string",
    "region:string,day:int",       # wrong order
    "dt:int,region:string",        # wrong name
    "day:int",                     # a column missing
    "day:int,region:string,hour:int",
    "day:int,region:strin",        # not a type
    "day,region",
    "",
])
def test_refused_partition_option_not_the_tables(busy_table: txn.Table, tmp_path: Path,
                                                 option: str) -> None:
    write_hive(tmp_path / "more", rows(range(60, 62), 3, "eu"), PARTITIONS, "parquet")
    message = refused(busy_table, txn.InvalidOptionError, tmp_path / "more", "parquet", partition=option)
    assert repr(option) in message and PARTITION_OPTION in message


@pytest.mark.parametrize(("folders", "fragment"), [
    ("day=abc/region=eu", "day=abc"),            # not an int
    ("day=99999999999/region=eu", "day=99999999999"),  # out of int range
    ("region=eu/day=3", "region=eu"),             # levels in the wrong order
    ("day=3", "day=3"),                          # a level missing
    ("day=3/region=eu/hour=1", "hour=1"),        # a level too many
    ("day=3/eu", "eu"),                          # not name=value
])
def test_refused_partition_folders_not_the_tables(busy_table: txn.Table, tmp_path: Path,
                                                  folders: str, fragment: str) -> None:
    write_file(tmp_path / "bad" / folders / "part-0.parquet", flat_rows(range(60, 62)), "parquet")
    message = refused(busy_table, txn.InvalidOptionError, tmp_path / "bad", "parquet",
                      partition=PARTITION_OPTION)
    assert fragment in message


@pytest.mark.parametrize("spelling", ["same", "trailing-slash", "file-url"])
def test_refused_same_path_twice(busy_table: txn.Table, tmp_path: Path, spelling: str) -> None:
    path = {"same": str(tmp_path / "first"), "trailing-slash": f"{tmp_path}/first/",
            "file-url": url_of(tmp_path / "first")}[spelling]
    message = refused(busy_table, txn.InvalidOptionError, path, "parquet", partition=PARTITION_OPTION)
    assert "first" in message


def test_refused_folder_overlapping_an_added_one(tmp_path: Path) -> None:
    """A parent (or child) of an added folder brings files the table holds already."""
    t = txn.create_table(str(tmp_path / "table"), FLAT)
    write_file(tmp_path / "outer" / "inner" / "part-0.parquet", flat_rows(range(3)), "parquet")
    t.add_segment(tmp_path / "outer" / "inner", "parquet")
    write_file(tmp_path / "outer" / "part-1.parquet", flat_rows(range(3, 6)), "parquet")
    message = refused(t, txn.InvalidOptionError, tmp_path / "outer", "parquet")
    assert "part-0.parquet" in message
    message = refused(t, txn.InvalidOptionError, tmp_path / "outer" / "inner", "parquet")
    assert "inner" in message


@pytest.mark.parametrize(("where", "which"), [
    ("local", "table-folder"),
    ("local", "table-folder-url"),
    ("local", "segment-folder"),
    ("memory", "table-folder"),
    ("memory", "segment-folder"),
])
def test_refused_folder_inside_the_table(tmp_path: Path, memory_root: str, where: str,
                                         which: str) -> None:
    """The table's own folders are not external data: adding them would read its native files
    a second time (duplicate rows) and hand files the table manages to a segment it never
    deletes."""
    location = str(tmp_path / "table") if where == "local" else f"{memory_root}/table"
    t = txn.create_table(location, FLAT)
    t.append(flat_rows(range(3)))
    [native] = t.snapshot().files()
    folder = {"table-folder": t.uri, "table-folder-url": url_of(t.uri),
              "segment-folder": os.path.dirname(native.path)}[which]
    message = refused(t, txn.InvalidOptionError, folder, "parquet")
    assert "inside the table" in message


@pytest.mark.parametrize("bad_value", ["abc", "1.5.7"])
def test_refused_csv_values_not_of_the_column_type(busy_table: txn.Table, tmp_path: Path,
                                                   bad_value: str) -> None:
    text = f"id,name,score\n60,a,1.5\n61,b,{bad_value}\n".encode()
    write_bytes(tmp_path / "csvbad" / "day=3" / "region=eu" / "part-0.csv", text)
    # the product's choice: a value that does not parse is the data not fitting the table's
    # schema, a SchemaMismatchError naming the file
    message = refused(busy_table, txn.SchemaMismatchError, tmp_path / "csvbad", "csv",
                      partition=PARTITION_OPTION)
    assert "part-0.csv" in message


def test_refused_file_not_of_the_format(busy_table: txn.Table, tmp_path: Path) -> None:
    """ORC files given as parquet: the file is named, nothing is written."""
    [orc] = write_hive(tmp_path / "orcs", rows(range(60, 62), 3, "eu"), PARTITIONS, "orc")
    message = refused(busy_table, txn.InvalidOptionError, tmp_path / "orcs", "parquet",
                      partition=PARTITION_OPTION)
    assert orc in message


# == 5. keyed tables ==============================================================================

@pytest.mark.parametrize("file_format", FORMATS)
def test_keyed_external_rows_are_indexed(tmp_path: Path, file_format: str) -> None:
    t = txn.create_table(str(tmp_path / "table"), KEYED, record_key="id")
    t.append(flat_rows(range(5), schema=KEYED))
    root = tmp_path / "ext"
    first = write_file(root / f"part-0.{file_format}", flat_rows(range(100, 103)), file_format)
    second = write_file(root / f"part-1.{file_format}", flat_rows(range(103, 105)), file_format)
    original = tree_bytes(root)

    added = t.add_segment(root, file_format)
    assert added.segment == "1"

    found = {r["id"]: (r["segment"], r["file"], r["position"])
             for r in t.lookup([0, 100, 102, 103, 104, 999]).to_pylist()}
    assert found[100] == ("1", first, 0)
    assert found[102] == ("1", first, 2)
    assert found[103] == ("1", second, 0)
    assert found[104] == ("1", second, 1)
    assert found[0][0] == "0" and 999 not in found

    # an existing external key cannot be appended again
    before = table_state(t)
    with pytest.raises(txn.DuplicateKeyError) as caught:
        t.append(flat_rows([101, 500], schema=KEYED))
    assert names(str(caught.value), "101", tmp_path), caught.value
    assert table_state(t) == before

    # upsert replaces an external row: the old one is deleted by a delta, the file untouched
    replacement = pa.table({"id": pa.array([101, 600], pa.int64()), "name": ["new", "six"],
                            "score": [-1.0, 3.0]}, schema=KEYED)
    t.upsert(replacement)
    live = t.to_arrow()
    assert live.filter(pc.field("id") == 101).to_pylist() == [{"id": 101, "name": "new", "score": -1.0}]
    assert t.snapshot().count() == 11
    assert t.lookup([101]).to_pylist()[0]["segment"] != "1"

    # delete by key
    t.delete(keys=[100, 104, 3])
    assert sorted(t.to_arrow()["id"].to_pylist()) == [0, 1, 2, 4, 101, 102, 103, 600]
    assert t.lookup([100, 104, 3]).num_rows == 0
    assert t.snapshot().count(pc.field("id") >= 100) == 4
    assert tree_bytes(root) == original
    assert t.validate().ok


@pytest.mark.parametrize("file_format", FORMATS)
def test_keyed_duplicate_within_the_folder_is_refused(tmp_path: Path, file_format: str) -> None:
    t = txn.create_table(str(tmp_path / "table"), KEYED, record_key="id")
    t.append(flat_rows(range(5), schema=KEYED))
    write_file(tmp_path / "ext" / f"part-0.{file_format}", flat_rows([100, 101, 107]), file_format)
    write_file(tmp_path / "ext" / f"part-1.{file_format}", flat_rows([102, 107]), file_format)
    message = refused(t, txn.DuplicateKeyError, tmp_path / "ext", file_format)
    assert names(message, "107", tmp_path), message


def test_keyed_duplicate_within_one_file_is_refused(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "table"), KEYED, record_key="id")
    write_file(tmp_path / "ext" / "part-0.parquet", flat_rows([100, 101, 100]), "parquet")
    message = refused(t, txn.DuplicateKeyError, tmp_path / "ext", "parquet")
    assert names(message, "100", tmp_path), message


@pytest.mark.parametrize("file_format", FORMATS)
def test_keyed_key_already_in_the_table_is_refused(tmp_path: Path, file_format: str) -> None:
    t = txn.create_table(str(tmp_path / "table"), KEYED, record_key="id")
    t.append(flat_rows(range(5), schema=KEYED))
    write_file(tmp_path / "ext" / f"part-0.{file_format}", flat_rows([100, 3, 101]), file_format)
    message = refused(t, txn.DuplicateKeyError, tmp_path / "ext", file_format)
    assert names(message, "3", tmp_path), message


def test_keyed_key_of_another_external_segment_is_refused(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "table"), KEYED, record_key="id")
    write_file(tmp_path / "a" / "part-0.orc", flat_rows([1, 2]), "orc")
    write_file(tmp_path / "b" / "part-0.parquet", flat_rows([3, 2]), "parquet")
    t.add_segment(tmp_path / "a", "orc")
    message = refused(t, txn.DuplicateKeyError, tmp_path / "b", "parquet")
    assert names(message, "2", tmp_path), message


def test_keyed_null_key_in_external_file_is_refused(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "table"), KEYED, record_key="id")
    data = pa.table({"id": pa.array([1, None], pa.int64()), "name": ["a", "b"], "score": [1.0, 2.0]})
    write_file(tmp_path / "ext" / "part-0.parquet", data, "parquet")
    message = refused(t, txn.SchemaMismatchError, tmp_path / "ext", "parquet")
    assert "'id'" in message


@pytest.mark.parametrize("file_format", [
    "parquet", "orc",
    "csv",
    "json",
])
def test_nulls_in_a_non_nullable_column_are_refused(tmp_path: Path, file_format: str) -> None:
    """As ``append`` refuses them (SchemaMismatchError): a table whose non-nullable column held
    nulls could not be read."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string(), False), ("score", pa.float64())])
    t = txn.create_table(str(tmp_path / "table"), schema)
    t.append(flat_rows([1, 2], schema=schema))
    data = pa.table({"id": [10, 11], "name": pa.array([None, "x"], pa.string()), "score": [1.0, 2.0]})
    write_file(tmp_path / "ext" / f"part-0.{file_format}", data, file_format)
    message = refused(t, txn.SchemaMismatchError, tmp_path / "ext", file_format)
    assert "'name'" in message


# == 6. deletes and updates on external segments =================================================

@pytest.mark.parametrize("file_format", FORMATS)
def test_delete_and_update_external_rows(tmp_path: Path, file_format: str) -> None:
    """Deletes and updates work on every external format (the product supports CSV and JSON
    the same way as Parquet and ORC: delete deltas by row position, the files untouched)."""
    t = partitioned_table(tmp_path)
    native = rows(range(6), 1, "eu")
    t.append(native)
    external = concat(rows(range(100, 110), 2, "eu"), rows(range(110, 116), 2, "us"))
    root = tmp_path / "ext"
    write_hive(root, external, PARTITIONS, file_format, files_per_folder=2)
    original = tree_bytes(root)
    t.add_segment(root, file_format, partition=PARTITION_OPTION)

    before_delete = t.timeline()[-1].time
    deleted = t.delete((pc.field("score") >= 52) & (pc.field("score") < 54.5))  # ids 104..108
    assert deleted is not None and deleted.rows_deleted == 5
    updated = t.update(pc.field("id") == 112, {"name": "changed"})
    assert updated is not None
    t.delete(pc.field("id").isin([2, 111]))

    survivors = [i for i in [*range(6), *range(100, 116)] if i not in (104, 105, 106, 107, 108, 2, 111)]
    expected = concat(native, external).filter(pc.field("id").isin(survivors))
    expected = expected.set_column(1, "name", pc.if_else(pc.equal(expected["id"], 112), "changed",
                                                         expected["name"]))
    for handle in (t, txn.open_table(t.uri)):  # a fresh handle reads the same
        snap = handle.snapshot()
        same_rows(handle.to_arrow(), expected)
        assert snap.count() == len(survivors)
        where = pc.field("day") == 2
        same_rows(handle.to_arrow(filter=where), expected.filter(where))
        assert snap.count(where) == expected.filter(where).num_rows
        assert snap.count(pc.field("id") == 105) == 0
        assert handle.to_arrow(filter=pc.field("id") == 112, columns=["name"]).to_pylist() == \
            [{"name": "changed"}]
        assert sorted(handle.to_arrow(columns=["id"])["id"].to_pylist()) == survivors
    external_files = [f for f in t.snapshot().files() if f.path.startswith(url_of(root) + "/")]
    assert len(external_files) == 4
    assert sum(f.deleted_rows for f in external_files) == 7  # 5 + the updated one + 111
    same_rows(t.to_arrow(as_of=before_delete), concat(native, external))  # time travel
    assert tree_bytes(root) == original
    assert t.validate().ok


# == 7. compaction ================================================================================

def mixed_flat_table(tmp_path: Path) -> tuple[txn.Table, pa.Table, dict[str, Path]]:
    """Unpartitioned: external segments 0 (parquet) and 1 (orc), native segments 2..5."""
    t = txn.create_table(str(tmp_path / "table"), FLAT)
    roots = {"parquet": tmp_path / "pq", "orc": tmp_path / "orc"}
    write_file(roots["parquet"] / "part-0.parquet", flat_rows(range(100, 110)), "parquet")
    write_file(roots["orc"] / "part-0.orc", flat_rows(range(200, 210)), "orc")
    t.add_segment(roots["parquet"], "parquet")
    t.add_segment(roots["orc"], "orc")
    for n in range(4):
        t.append(flat_rows(range(10 * n, 10 * n + 3)))
    everything = concat(flat_rows(range(100, 110)), flat_rows(range(200, 210)),
                        *(flat_rows(range(10 * n, 10 * n + 3)) for n in range(4)), schema=FLAT)
    return t, everything, roots


@pytest.mark.parametrize("kind", ["minor", "major"])
def test_minor_and_major_compaction_skip_external_segments(tmp_path: Path, kind: str) -> None:
    t, everything, roots = mixed_flat_table(tmp_path)
    original = {name: tree_bytes(root) for name, root in roots.items()}

    done = t.compact(kind)

    assert done is not None
    assert sorted(done.segments_merged) == ["2", "3", "4", "5"]
    status = {s.id: s for s in t.segments()}
    assert (status["0"].status, status["1"].status) == ("Success", "Success")
    assert status["0"].external and status["1"].external
    assert all(status[i].status == "Compacted" for i in "2345")
    assert t.compact(kind) is None  # nothing more: the external ones are never picked
    same_rows(t.to_arrow(), everything)
    assert {name: tree_bytes(root) for name, root in roots.items()} == original
    assert t.validate().ok


def test_custom_compaction_converts_external_segments(tmp_path: Path) -> None:
    t, everything, roots = mixed_flat_table(tmp_path)
    t.delete(pc.field("id").isin([101, 205, 20]))
    expected = everything.filter(pc.invert(pc.field("id").isin([101, 205, 20])))
    original = {name: tree_bytes(root) for name, root in roots.items()}

    done = t.compact("custom", segments=["0", "1"])

    assert done is not None and sorted(done.segments_merged) == ["0", "1"]
    status = {s.id: s for s in t.segments()}
    target = done.segment
    assert target is not None and target not in ("0", "1")
    assert [(status[i].status, status[i].merged_to) for i in ("0", "1")] == [("Compacted", target)] * 2
    new = status[target]
    assert (new.status, new.external, new.format) == ("Success", False, "parquet")
    assert new.rows == 18  # 20 external rows less the 2 deleted
    same_rows(t.to_arrow(), expected)
    files = t.snapshot().files()
    assert all(not f.path.startswith("file://" + str(tmp_path / "pq")) for f in files)
    assert all(not f.path.startswith("file://" + str(tmp_path / "orc")) for f in files)
    assert t.snapshot().count() == expected.num_rows
    t.clean(force=True)
    same_rows(t.to_arrow(), expected)
    assert {name: tree_bytes(root) for name, root in roots.items()} == original
    assert t.validate().ok


def test_custom_compaction_of_external_and_native_segments(tmp_path: Path) -> None:
    t, everything, roots = mixed_flat_table(tmp_path)
    original = {name: tree_bytes(root) for name, root in roots.items()}
    done = t.compact("custom", segments=["1", "3"])
    assert done is not None and sorted(done.segments_merged) == ["1", "3"]
    assert done.segment is not None
    new = next(s for s in t.segments() if s.id == done.segment)
    assert (new.external, new.rows) == (False, 13)
    same_rows(t.to_arrow(), everything)
    assert {name: tree_bytes(root) for name, root in roots.items()} == original
    assert t.validate().ok


# == 8. DELETE SEGMENT and CLEAN FILES ============================================================

def test_delete_segment_and_clean_keep_external_files(tmp_path: Path) -> None:
    t = partitioned_table(tmp_path)
    native = rows(range(4), 1, "eu")
    t.append(native)
    external = concat(rows(range(100, 105), 2, "eu"), rows(range(105, 108), 2, "us"))
    root = tmp_path / "ext"
    write_hive(root, external, PARTITIONS, "orc")
    add_junk(root)
    original = tree_bytes(root)
    t.add_segment(root, "orc", partition=PARTITION_OPTION)
    gone = next(s.id for s in t.segments() if s.partitions == ["day=2/region=eu"])

    removed = t.delete_segments([gone])

    assert removed.segments_removed == (gone,)
    status = {s.id: s.status for s in t.segments()}
    assert status[gone] == "Marked for Delete"
    kept = concat(native, rows(range(105, 108), 2, "us"))
    same_rows(t.to_arrow(), kept)
    assert t.snapshot().count() == kept.num_rows
    assert t.snapshot().count(pc.field("region") == "eu") == 4
    assert all(f.segment != gone for f in t.snapshot().files())

    t.clean(force=True)
    t.clean(force=True)

    assert tree_bytes(root) == original
    same_rows(t.to_arrow(), kept)
    assert {s.id: s.status for s in t.segments()}.get(gone) in ("Marked for Delete", None)
    assert t.validate().ok

    # and the rest of the folder still goes when its segment goes
    t.delete_segments([s.id for s in t.segments() if s.external and s.status == "Success"])
    t.clean(force=True)
    assert tree_bytes(root) == original
    same_rows(t.to_arrow(), native)
    assert t.validate().ok


# == 9. validate ==================================================================================

def test_validate_reports_changed_and_missing_external_files(tmp_path: Path) -> None:
    t = txn.create_table(str(tmp_path / "table"), FLAT)
    root = tmp_path / "ext"
    changed = write_file(root / "part-0.parquet", flat_rows(range(5)), "parquet")
    missing = write_file(root / "part-1.parquet", flat_rows(range(5, 10)), "parquet")
    untouched = write_file(root / "part-2.parquet", flat_rows(range(10, 15)), "parquet")
    t.add_segment(root, "parquet")
    assert t.validate().ok

    write_file(root / "part-0.parquet", flat_rows(range(50)), "parquet")  # another size
    os.remove(root / "part-1.parquet")

    report = t.validate()
    assert not report.ok
    assert {(p.kind, p.path) for p in report.problems} == \
        {("changed external file", changed), ("missing external file", missing)}, report.problems
    assert untouched not in str(report)


def test_validate_reports_external_file_rewritten_with_same_size(tmp_path: Path) -> None:
    """Same size, other content, a later modification time: still a changed file."""
    t = txn.create_table(str(tmp_path / "table"), FLAT)
    root = tmp_path / "ext"
    text = b"id,name,score\n1,a,1.5\n2,b,2.5\n"
    write_bytes(root / "part-0.csv", text)
    t.add_segment(root, "csv")
    write_bytes(root / "part-0.csv", text.replace(b"a,1.5", b"z,9.5"))
    stat = os.stat(root / "part-0.csv")
    os.utime(root / "part-0.csv", (stat.st_atime + 10, stat.st_mtime + 10))
    report = t.validate()
    assert [p.kind for p in report.problems] == ["changed external file"], report.problems


# == 10. external data on another filesystem ======================================================

def test_external_data_on_another_filesystem(tmp_path: Path, memory_root: str) -> None:
    t = partitioned_table(tmp_path)
    native = rows(range(4), 1, "eu")
    t.append(native)
    external = concat(rows(range(100, 106), 2, "eu"), rows(range(106, 110), 3, "us"))
    files = write_hive(f"{memory_root}/logs", external, PARTITIONS, "parquet", files_per_folder=2)
    original = tree_bytes(f"{memory_root}/logs")

    added = t.add_segment(f"{memory_root}/logs/", "parquet", partition=PARTITION_OPTION)

    assert sorted(added.paths_added) == files
    assert all(p.startswith("memory://") for p in added.paths_added)
    assert {s.path for s in t.segments() if s.external} == {f"{memory_root}/logs"}
    same_rows(t.to_arrow(), concat(native, external))
    assert sorted(f.path for f in t.snapshot().files(pc.field("day") == 3)) == \
        [f for f in files if "day=3" in f]
    t.delete(pc.field("id").isin([101, 107]))
    t.update(pc.field("id") == 102, {"score": 0.0})
    expected = concat(native, external).filter(pc.invert(pc.field("id").isin([101, 107])))
    expected = expected.set_column(2, "score", pc.if_else(pc.equal(expected["id"], 102), 0.0,
                                                          expected["score"]))
    for handle in (t, txn.open_table(t.uri)):
        same_rows(handle.to_arrow(), expected)
        assert handle.snapshot().count(pc.field("region") == "us") == 3
    assert tree_bytes(f"{memory_root}/logs") == original
    assert t.validate().ok

    # validate sees the other filesystem's files change and disappear
    changed, missing = files[0], files[-1]
    write_file(changed, flat_rows(range(50)), "parquet")
    fsspec.filesystem("memory").rm(missing.removeprefix("memory://"))
    problems = {(p.kind, p.path) for p in t.validate().problems}
    assert problems == {("changed external file", changed), ("missing external file", missing)}


# == concurrency: the same folder, or the same keys, from two writers at once =======================

@pytest.mark.parametrize("case", ["same-folder", "same-keys"])
def test_concurrent_adds_one_wins(tmp_path: Path, case: str) -> None:
    t = txn.create_table(str(tmp_path / "table"), KEYED, record_key="id")
    write_file(tmp_path / "a" / "part-0.parquet", flat_rows(range(50)), "parquet")
    write_file(tmp_path / "b" / "part-0.orc", flat_rows(range(40, 60)), "orc")
    jobs = ([("a", "parquet"), ("a", "parquet")] if case == "same-folder"
            else [("a", "parquet"), ("b", "orc")])
    outcomes: list[Any] = [None, None]
    start = threading.Barrier(2)

    def add(n: int) -> None:
        handle = txn.open_table(t.uri)
        start.wait()
        try:
            outcomes[n] = handle.add_segment(tmp_path / jobs[n][0], jobs[n][1])
        except txn.TxnError as exc:
            outcomes[n] = exc

    threads = [threading.Thread(target=add, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [o for o in outcomes if isinstance(o, txn.Commit)]
    lost = [o for o in outcomes if not isinstance(o, txn.Commit)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    expected_error = txn.InvalidOptionError if case == "same-folder" else txn.DuplicateKeyError
    assert isinstance(lost[0], expected_error), lost[0]
    assert len([s for s in t.segments() if s.status == "Success"]) == 1
    ids = t.to_arrow()["id"].to_pylist()
    assert len(ids) == len(set(ids)) == won[0].rows_added
    assert t.validate().ok


# -- regressions found in review --------------------------------------------------------------------

def test_refused_folder_that_holds_the_table(tmp_path: Path) -> None:
    """A folder holding the table would register the table's own files as external ones (rows
    read twice, and deleted by CLEAN FILES under the external segment)."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    t.append(flat_rows([1, 2]))
    write_file(tmp_path / "ext" / "p.parquet", flat_rows([10]), "parquet")
    message = refused(t, txn.InvalidOptionError, tmp_path, "parquet")
    assert "holds the table" in message


def test_refused_same_files_under_another_spelling(tmp_path: Path) -> None:
    """One file, one key: a symbolic link or a protocol alias names the same files."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    write_file(tmp_path / "ext" / "p.parquet", flat_rows([1]), "parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    (tmp_path / "link").symlink_to(tmp_path / "ext")
    refused(t, txn.InvalidOptionError, str(tmp_path / "link"), "parquet")
    refused(t, txn.InvalidOptionError, f"local://{tmp_path / 'ext'}", "parquet")
    assert t.to_arrow()["id"].to_pylist() == [1]


def test_csv_dialect_is_rfc_4180(tmp_path: Path) -> None:
    """Only an empty field is null ("NA" and "null" are text, as Spark reads them); a header
    matches whatever its case and despite a byte-order mark; quoted commas stay in their field;
    backslash-escaped quotes (Spark's default writer) are refused, not misread."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    write_bytes(tmp_path / "a" / "p.csv", b'\xef\xbb\xbfID,Name,Score\n1,NA,1.5\n2,null,\n3,"x,y",2\n')
    t.add_segment(str(tmp_path / "a"), "csv")
    got = sort_rows(t.to_arrow()).to_pylist()
    assert got == [{"id": 1, "name": "NA", "score": 1.5}, {"id": 2, "name": "null", "score": None},
                   {"id": 3, "name": "x,y", "score": 2.0}]
    write_bytes(tmp_path / "b" / "p.csv", b'4,"a\\"b",1\n')
    message = refused(t, txn.InvalidOptionError, str(tmp_path / "b"), "csv")
    assert "backslash" in message and "p.csv" in message
    write_bytes(tmp_path / "c" / "p.csv", b'5,"a,b",1\n')  # no header, a quoted comma
    t.add_segment(str(tmp_path / "c"), "csv")
    assert sort_rows(t.to_arrow())["name"].to_pylist()[-1] == "a,b"


def test_nanosecond_timestamps(tmp_path: Path) -> None:
    """INT64 nanosecond timestamps are refused (Spark cannot read them as the table's); Spark's
    own INT96 (nanoseconds to pyarrow) is read, truncated to the table's unit as Spark does."""
    import pyarrow.parquet as pq

    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC"))])
    t = txn.create_table(str(tmp_path / "t"), schema)
    data = pa.table({"id": [1], "ts": pa.array([1_700_000_000_123_456_789], pa.timestamp("ns", tz="UTC"))})
    (tmp_path / "ns").mkdir()
    pq.write_table(data, tmp_path / "ns" / "p.parquet", coerce_timestamps=None)
    message = refused(t, txn.SchemaMismatchError, str(tmp_path / "ns"), "parquet")
    assert "'ts'" in message and "nanosecond" in message
    (tmp_path / "int96").mkdir()
    pq.write_table(data, tmp_path / "int96" / "p.parquet", use_deprecated_int96_timestamps=True)
    t.add_segment(str(tmp_path / "int96"), "parquet")
    assert t.to_arrow()["ts"].to_pylist()[0].microsecond == 123456


def test_refused_null_partition_folder_of_a_non_nullable_column(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int64()), pa.field("day", pa.int32(), nullable=False)])
    t = txn.create_table(str(tmp_path / "t"), schema, partition_by=["day"])
    write_file(tmp_path / "ext" / "day=__HIVE_DEFAULT_PARTITION__" / "p.parquet",
               pa.table({"id": [1]}), "parquet")
    message = refused(t, txn.InvalidOptionError, str(tmp_path / "ext"), "parquet",
                      partition="day:int")
    assert "not nullable" in message and "'day'" in message


def test_storage_options_belong_to_the_folder_they_opened() -> None:
    """Two folders on one protocol keep their own options; the table's apply elsewhere."""
    from txn._files import ExternalReader

    reader = ExternalReader(FLAT, [], {"s3://": {"key": "table"}})
    reader.options["s3://a/data"] = {"key": "a"}
    reader.options["s3://b/data"] = {"key": "b"}
    assert reader.options_for("s3://a/data/p.parquet") == {"key": "a"}
    assert reader.options_for("s3://b/data/x/p.parquet") == {"key": "b"}
    assert reader.options_for("s3://a/database/p.parquet") == {"key": "table"}
    assert reader.options_for("memory:///x") == {}


def test_bad_storage_options_are_an_invalid_option(tmp_path: Path) -> None:
    """Whatever a filesystem library raises for options it refuses is the user's input."""
    pytest.importorskip("s3fs")
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    message = refused(t, txn.InvalidOptionError, "s3://no-such-bucket/ext", "parquet",
                      storage_options={"no_such_option": 1})
    assert "storage_options" in message


def test_a_changed_external_file_with_deletes_is_not_misread(tmp_path: Path) -> None:
    """Deleted positions past the end of a file that shrank outside the table: the read fails
    naming the file, rather than deleting other rows."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    path = tmp_path / "ext" / "p.parquet"
    write_file(path, flat_rows(range(5)), "parquet")
    t.add_segment(str(tmp_path / "ext"), "parquet")
    t.delete(pc.field("id") == 4)
    write_file(path, flat_rows(range(3)), "parquet")
    with pytest.raises(txn.CorruptMetadataError, match=r"p\.parquet"):
        t.to_arrow()
    assert any(p.kind == "changed external file" for p in t.validate().problems)


def test_no_columns_of_an_external_orc_file_keeps_its_rows(tmp_path: Path) -> None:
    """Arrow's ORC reader returns no rows for no columns: ``to_arrow(columns=[])`` counted
    none of an ORC segment's rows, and failed once one of them was deleted."""
    t = txn.create_table(str(tmp_path / "t"), FLAT)
    write_file(tmp_path / "orc" / "p.orc", flat_rows(range(10)), "orc")
    t.add_segment(str(tmp_path / "orc"), "orc")
    assert t.to_arrow(columns=[]).num_rows == 10
    t.delete(pc.field("id") == 4)
    assert t.to_arrow(columns=[]).num_rows == 9
