"""Appends and overwrites: what a load writes, what its Commit reports, and how bad input fails.

Every write is one commit that either lands whole or leaves the table exactly as it was.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import date
from decimal import Decimal
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from metatxn import indexes, timeline
from tests.conftest import FakeClock, make_ids
from tests.unit.txn.helpers import (
    SCHEMA,
    batch_reader,
    data_files_on_storage,
    read_data_file,
    relative,
    rows,
    sorted_rows,
    states,
    storage_of,
)

# -- accepted inputs -------------------------------------------------------------------------------


def test_appending_a_pyarrow_table_makes_its_rows_readable(table_uri: str) -> None:
    """Rows written are the rows read, with the table's schema."""
    table = txn.create_table(table_uri, SCHEMA)
    data = rows(range(10))
    table.append(data)
    result = table.to_arrow()
    assert result.schema.equals(SCHEMA)
    assert sorted_rows(result) == sorted_rows(data)


def test_columns_may_come_in_any_order(table_uri: str) -> None:
    """Only names and types must match; the stored order is the table's."""
    table = txn.create_table(table_uri, SCHEMA)
    data = rows(range(3))
    table.append(data.select(["price", "day", "id", "region"]))
    assert table.to_arrow().column_names == SCHEMA.names
    assert sorted_rows(table.to_arrow()) == sorted_rows(data)


def test_appending_a_pandas_dataframe_makes_its_rows_readable(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    frame = pd.DataFrame({
        "id": [3, 1, 2],
        "region": ["eu", None, "us"],
        "day": [date(2026, 1, 1), date(2026, 1, 2), None],
        "price": [1.5, None, 2.5],
    })
    commit = table.append(frame)
    assert commit.rows_added == 3
    assert sorted_rows(table.to_arrow()) == [
        {"id": 1, "region": None, "day": date(2026, 1, 2), "price": None},
        {"id": 2, "region": "us", "day": None, "price": 2.5},
        {"id": 3, "region": "eu", "day": date(2026, 1, 1), "price": 1.5},
    ]


def test_appending_a_record_batch_reader_writes_every_batch(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    parts = [rows(range(i * 10, i * 10 + 10)).to_batches()[0] for i in range(5)]
    commit = table.append(batch_reader(SCHEMA, iter(parts)))
    assert commit.rows_added == 50
    assert sorted(table.to_arrow()["id"].to_pylist()) == list(range(50))


def test_a_streamed_reader_is_written_in_files_while_it_is_still_being_read(memory_uri: str) -> None:
    """Bounded buffering: with a small target file size, data files land on storage before the
    reader is exhausted, and no file holds more than about one target's worth of batches."""
    target = 64 * 1024
    table = txn.create_table(memory_uri, SCHEMA, properties={"write.target_file_bytes": str(target)})
    batch_rows = 1000
    batch_bytes = rows(range(batch_rows)).nbytes
    count = 40
    files_seen_while_streaming: list[int] = []

    def generate() -> Iterator[pa.RecordBatch]:
        for i in range(count):
            if i == count // 2:
                files_seen_while_streaming.append(len(data_files_on_storage(memory_uri)))
            yield rows(range(i * batch_rows, (i + 1) * batch_rows)).to_batches()[0]

    commit = table.append(batch_reader(SCHEMA, generate()))

    assert files_seen_while_streaming[0] >= 2, "nothing was written before the input ended"
    assert commit.rows_added == count * batch_rows
    assert commit.files_added >= 5
    per_file_limit = math.ceil(target / batch_bytes) * batch_rows
    files = table.snapshot().files()
    assert len(files) == commit.files_added
    assert all(0 < f.rows <= per_file_limit for f in files)
    assert sum(f.rows for f in files) == count * batch_rows
    assert table.snapshot().count() == count * batch_rows


def test_each_load_gets_the_next_segment_id(table_uri: str) -> None:
    """Segment ids are 0, 1, 2, ... in load order, and every file of a load carries its id."""
    table = txn.create_table(table_uri, SCHEMA)
    commits = [table.append(rows(range(i * 5, i * 5 + 5))) for i in range(3)]
    commits.append(table.overwrite(rows(range(100, 103))))
    assert [c.segment for c in commits] == ["0", "1", "2", "3"]
    assert {f.segment for f in table.snapshot().files()} == {"3"}
    assert {f.segment for f in table.snapshot(as_of=commits[2].instant).files()} == {"0", "1", "2"}


# -- the commit record -----------------------------------------------------------------------------


def test_the_commit_describes_what_the_append_did(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"], clock=clock)
    data = pa.concat_tables([rows(range(4), region="eu"), rows(range(4, 6), region="us")])
    commit = table.append(data)

    assert isinstance(commit, txn.Commit)
    assert commit.operation == "append"
    assert commit.segment == "0"
    assert isinstance(commit.files_added, int) and commit.files_added == 2
    assert (commit.rows_added, commit.rows_deleted) == (6, 0)
    [instant] = table.timeline()
    assert (instant.time, instant.action, instant.state) == (commit.instant, "commit", "completed")
    assert commit.completed_at == instant.completed_at
    assert timeline.parse_time(commit.instant) == clock.now_ms
    assert len(commit.paths_added) == 2
    assert sorted(commit.paths_added) == data_files_on_storage(table_uri)
    assert sorted(commit.paths_added) == sorted(relative(table, f) for f in table.snapshot().files())


def test_extra_commit_metadata_is_returned(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    assert table.append(rows(range(2)), extra={"batch": "7"}).extra == {"batch": "7"}


# -- layout: sorting and partitions -------------------------------------------------------------


def test_every_file_is_sorted_by_the_sort_columns(table_uri: str) -> None:
    """SORT_COLUMNS: each file, read back with pyarrow, is in (region, id) order."""
    schema = SCHEMA
    table = txn.create_table(table_uri, schema, sort_by=["region", "id"],
                             properties={"write.target_file_bytes": "2000"})
    ids = [(i * 7919) % 500 for i in range(500)]
    regions = [("eu", "us", "apac", None)[i % 4] for i in range(500)]
    data = pa.table({"id": ids, "region": regions, "day": [date(2026, 1, 1)] * 500,
                     "price": [1.0] * 500}, schema=schema)
    commit = table.append(batch_reader(schema, iter(data.to_batches(max_chunksize=50))))
    assert commit.files_added > 1
    for path in commit.paths_added:
        written = read_data_file(table_uri, path)
        keys = list(zip(written["region"].to_pylist(), written["id"].to_pylist(), strict=True))
        # nulls sort last, as Arrow sorts them
        assert keys == sorted(keys, key=lambda k: (k[0] is None, k[0] or "", k[1]))
    assert sorted(table.to_arrow()["id"].to_pylist()) == sorted(ids)


def test_partitioned_tables_write_hive_style_folders(table_uri: str) -> None:
    """One folder per partition value, ``column=value/``, with the value escaped so that spaces
    and slashes survive, and a null value as ``__HIVE_DEFAULT_PARTITION__``."""
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"])
    values = ["eu west", "a/b", None, "100%", "k=v", "ü"]
    data = pa.concat_tables([rows(range(i * 2, i * 2 + 2), region=v) for i, v in enumerate(values)])
    commit = table.append(data)

    folders = {path.rsplit("/", 1)[0] for path in data_files_on_storage(table_uri)}
    assert folders == {"region=eu west", "region=a%2Fb", "region=__HIVE_DEFAULT_PARTITION__",
                       "region=100%25", "region=k%3Dv", "region=ü"}
    assert commit.files_added == len(values)
    by_value = {f.partition["region"]: f for f in table.snapshot().files()}
    assert set(by_value) == set(values)
    for value, data_file in by_value.items():
        written = read_data_file(table_uri, relative(table, data_file))
        assert set(written["region"].to_pylist()) == {value}, "partition columns stay in the files"
        assert data_file.rows == written.num_rows == 2
    assert sorted(table.segments()[0].partitions) == sorted(
        f"region={p}" for p in ["eu west", "a%2Fb", "__HIVE_DEFAULT_PARTITION__", "100%25",
                                "k%3Dv", "ü"])


def test_int_and_date_partition_values_round_trip_with_their_types(table_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("day", pa.date32()), ("hour", pa.int16()),
                        ("flag", pa.bool_())])
    table = txn.create_table(table_uri, schema, partition_by=["day", "hour", "flag"])
    data = pa.table({
        "id": [1, 2, 3, 4],
        "day": [date(2026, 1, 1), date(2026, 1, 1), date(2026, 12, 31), None],
        "hour": pa.array([0, 23, -1, None], pa.int16()),
        "flag": [True, False, True, None],
    }, schema=schema)
    table.append(data)

    assert sorted(p.rsplit("/", 1)[0] for p in data_files_on_storage(table_uri)) == [
        "day=2026-01-01/hour=0/flag=true",
        "day=2026-01-01/hour=23/flag=false",
        "day=2026-12-31/hour=-1/flag=true",
        "day=__HIVE_DEFAULT_PARTITION__/hour=__HIVE_DEFAULT_PARTITION__/"
        "flag=__HIVE_DEFAULT_PARTITION__",
    ]
    partitions = sorted((f.partition for f in table.snapshot().files()),
                        key=lambda p: (p["day"] is None, str(p["day"]), str(p["hour"])))
    assert partitions == [
        {"day": date(2026, 1, 1), "hour": 0, "flag": True},
        {"day": date(2026, 1, 1), "hour": 23, "flag": False},
        {"day": date(2026, 12, 31), "hour": -1, "flag": True},
        {"day": None, "hour": None, "flag": None},
    ]
    assert all(type(p["hour"]) is int for p in partitions[:3])
    assert sorted(map(repr, table.partitions())) == sorted(map(repr, partitions))


def test_unpartitioned_files_go_to_a_folder_per_segment(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(2)))
    table.append(rows(range(2, 4)))
    assert [p.split("/")[0] for p in data_files_on_storage(table_uri)] == ["segment_0", "segment_1"]
    assert all(f.partition == {} for f in table.snapshot().files())


def test_file_names_use_the_injected_id_source(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, ids=make_ids("tok"))
    commit = table.append(rows(range(2)))
    [path] = commit.paths_added
    assert path == f"segment_0/part-0-00000-tok000001_{commit.instant}.parquet"


# -- column statistics ------------------------------------------------------------------------------


def _column_stats(table: txn.Table) -> dict[str, dict[str, Any]]:
    """The column_stats partition of the latest snapshot, by file path (via the indexes API)."""
    storage = storage_of(table.uri)
    completed = {i.time: i.completed_at or "" for i in table.timeline() if i.state == "completed"}
    resolved = indexes.MetadataTable(storage, table.schema).resolve(
        completed, None, partitions=(indexes.COLUMN_STATS,))
    assert resolved.column_stats is not None
    # The partition keys each column by its id: back to names, as the assertions read them.
    names = {str(i): name for name, i in indexes.ids_by_name(indexes.assign_ids(table.schema)).items()}
    return {row["path"]: {names[key]: value for key, value in row["columns"].items()}
            for row in indexes.live(resolved.column_stats).to_pylist()}


def test_column_statistics_are_exact_per_file(table_uri: str) -> None:
    """min, max, null count and value count of every column, as the file itself holds them;
    min/max stay unknown where NaN would make a range lie."""
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.decimal128(9, 2)),
                        ("day", pa.date32()), ("score", pa.float64()), ("tags", pa.list_(pa.int8()))])
    table = txn.create_table(table_uri, schema)
    first = table.append(pa.table({
        "id": [5, -3, 9], "name": ["b", None, "a"],
        "amount": [Decimal("1.50"), Decimal("-2.25"), None],
        "day": [date(2026, 3, 1), date(2025, 1, 1), date(2026, 1, 1)],
        "score": [1.0, float("nan"), 2.0], "tags": [[1], None, []],
    }, schema=schema))
    second = table.append(pa.table({
        "id": [7], "name": [None], "amount": [None], "day": [None], "score": [None], "tags": [[2]],
    }, schema=schema))

    stats = _column_stats(table)
    assert set(stats) == set(first.paths_added) | set(second.paths_added)
    a = stats[first.paths_added[0]]
    assert a["id"] == {"min": -3, "max": 9, "nulls": 0, "count": 3}
    assert a["name"] == {"min": "a", "max": "b", "nulls": 1, "count": 3}
    assert a["amount"] == {"min": Decimal("-2.25"), "max": Decimal("1.50"), "nulls": 1, "count": 3}
    assert a["day"] == {"min": date(2025, 1, 1), "max": date(2026, 3, 1), "nulls": 0, "count": 3}
    assert a["score"] == {"min": None, "max": None, "nulls": 0, "count": 3}
    assert "tags" not in a, "nested columns take no statistics"
    b = stats[second.paths_added[0]]
    assert b["name"] == {"min": None, "max": None, "nulls": 1, "count": 1}
    assert b["id"] == {"min": 7, "max": 7, "nulls": 0, "count": 1}


@pytest.mark.parametrize(
    ("data_type", "values", "probe"),
    [
        (pa.timestamp("ns"), [1_767_225_600_000_000_001, 1_767_225_600_000_000_999],
         1_767_225_600_000_000_999),
        (pa.timestamp("ns", tz="UTC"), [-1_500, 2_001], -1_500),
        (pa.time64("ns"), [1, 86_399_999_999_999], 86_399_999_999_999),
        (pa.duration("s"), [1, 5], 5),
        (pa.float16(), [1.0, 2.0], None),
    ],
    ids=["timestamp-ns", "timestamp-ns-utc-negative", "time64-ns", "duration", "float16"],
)
def test_columns_of_every_primitive_type_can_be_written_and_never_pruned_wrongly(
    table_uri: str, data_type: pa.DataType, values: list[Any], probe: Any
) -> None:
    """Nanosecond values do not fit Python's datetime, and some types have no min/max kernel:
    a load must still commit, and a filter on the exact extreme value must find its row."""
    schema = pa.schema([("k", pa.int64()), ("v", data_type)])
    table = txn.create_table(table_uri, schema)
    if pa.types.is_floating(data_type):
        import numpy as np

        array = pa.array(np.array(values, dtype=np.float16), data_type)
    else:
        array = pa.array(values, pa.int64()).cast(data_type)
    commit = table.append(pa.table({"k": [1, 2], "v": array}, schema=schema))
    assert commit.rows_added == 2 and table.validate().ok
    if probe is not None:
        wanted = pc.field("v") == pa.scalar(probe, pa.int64()).cast(data_type)
        assert len(table.snapshot().files(wanted)) == 1
        assert table.snapshot().count(wanted) == 1
        assert table.to_arrow(wanted)["v"].cast(pa.int64()).to_pylist() == [probe]


# -- overwrite --------------------------------------------------------------------------------------


def test_overwrite_replaces_the_content_and_marks_old_segments_for_delete(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(5)))
    before = table.append(rows(range(5, 8)))
    replaced = table.overwrite(rows(range(100, 102)))

    assert replaced.operation == "overwrite"
    assert (replaced.rows_added, replaced.rows_deleted, replaced.files_added) == (2, 8, 1)
    assert replaced.segment == "2"
    assert sorted(table.to_arrow()["id"].to_pylist()) == [100, 101]
    assert [(s.id, s.status) for s in table.segments()] == [
        ("2", "Success"), ("1", "Marked for Delete"), ("0", "Marked for Delete")]
    assert table.timeline()[-1].action == "replacecommit"
    # the replaced files stay for time travel until cleaned
    assert len(data_files_on_storage(table_uri)) == 3
    assert sorted(table.to_arrow(as_of=before.instant)["id"].to_pylist()) == list(range(8))
    assert table.validate().ok


def test_overwriting_an_empty_table_deletes_nothing(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    commit = table.overwrite(rows(range(3)))
    assert (commit.rows_added, commit.rows_deleted) == (3, 0)
    assert [(s.id, s.status) for s in table.segments()] == [("0", "Success")]


def test_a_second_overwrite_only_deletes_the_rows_that_were_live(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(10)))
    assert table.overwrite(rows(range(3))).rows_deleted == 10
    assert table.overwrite(rows(range(1))).rows_deleted == 3
    assert [s.status for s in table.segments()] == ["Success"] + ["Marked for Delete"] * 2


# -- empty input ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["table", "reader", "reader of empty batches", "pandas"])
def test_an_append_of_no_rows_commits_nothing(table_uri: str, kind: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    before = (table.timeline(), [(s.id, s.status, s.rows) for s in table.segments()])
    empty: Any = {
        "table": SCHEMA.empty_table(),
        "reader": batch_reader(SCHEMA, iter([])),
        "reader of empty batches": batch_reader(SCHEMA, iter(SCHEMA.empty_table().to_batches() * 2)),
        "pandas": SCHEMA.empty_table().to_pandas(),
    }[kind]
    assert table.append(empty) is None
    assert (table.timeline(), [(s.id, s.status, s.rows) for s in table.segments()]) == before
    assert table.snapshot().count() == 3
    assert len(data_files_on_storage(table_uri)) == 1
    # the next load still gets the next segment id
    assert table.append(rows(range(3, 5))).segment == "1"  # type: ignore[union-attr]


def test_overwriting_with_nothing_empties_the_table(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    commit = table.overwrite(SCHEMA.empty_table())
    assert (commit.rows_added, commit.rows_deleted) == (0, 3)
    assert table.to_arrow().num_rows == 0 and table.snapshot().files() == []


# -- bad input: a clear error, and the table exactly as it was -------------------------------------


def _state(table: txn.Table) -> tuple[Any, ...]:
    """What a reader can see: rows, live files, segments, and the data files on storage."""
    snap = table.snapshot()
    return (sorted_rows(snap.to_arrow()), sorted(f.path for f in snap.files()),
            data_files_on_storage(table.uri),
            [(s.id, s.status, s.rows) for s in table.segments()])


def _other(name: str, data_type: pa.DataType, nullable: bool = True) -> pa.Schema:
    return pa.schema([pa.field(name, data_type, nullable) if f.name == name else f for f in SCHEMA])


@pytest.mark.parametrize(
    ("make", "fragments"),
    [
        # int32 data into the int64 column converts exactly now (issue 24): a value that does
        # not fit is what is refused
        (lambda: rows(range(3)).set_column(0, "id", pa.array([0.0, 1.5, 2.0])),
         ["'id'", "int64", "double", "1.5"]),
        (lambda: rows(range(3)).set_column(1, "region", pa.array([1, 2, 3])),
         ["'region'", "string", "int64"]),
        (lambda: rows(range(3)).drop_columns(["price"]), ["'price'", "double"]),
        (lambda: rows(range(3)).append_column("extra", pa.array([1, 2, 3])), ["'extra'"]),
        (lambda: rows(range(3)).rename_columns(["id", "Region", "day", "price"]),
         ["'region'", "string"]),
        # a naive timestamp converts to a date when it is a whole day (issue 24); a zoned one
        # never does: which day depends on the zone
        (lambda: pa.RecordBatchReader.from_batches(_other("day", pa.timestamp("ms", "UTC")),
                                                   iter([])),
         ["'day'", "date32", "timestamp"]),
        (lambda: pd.DataFrame({"id": ["x"], "region": ["eu"], "day": [None], "price": [1.0]}),
         ["'id'", "int64"]),
        (lambda: pd.DataFrame({"id": [1], "region": [2], "day": [None], "price": [1.0]}),
         ["'region'", "string", "int64"]),
        (lambda: pd.DataFrame({"id": [1], "day": [None], "price": [1.0]}), ["region"]),
        (lambda: pd.DataFrame({"id": [1], "region": ["eu"], "day": [None], "price": [1.0],
                               "more": [1]}), ["more"]),
    ],
    ids=["inexact-float-for-int", "int-for-string", "missing", "extra", "renamed", "reader-type",
         "pandas-string-for-int", "pandas-int-for-string", "pandas-missing", "pandas-extra"],
)
@pytest.mark.parametrize("operation", ["append", "overwrite"])
def test_a_schema_mismatch_names_the_column_and_types_and_writes_nothing(
    table_uri: str, make: Any, fragments: list[str], operation: str
) -> None:
    """The schema is checked before anything is written: not even an instant is requested."""
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(4)))
    before, timeline_before = _state(table), table.timeline()
    with pytest.raises(txn.SchemaMismatchError) as info:
        getattr(table, operation)(make())
    for fragment in fragments:
        assert fragment in str(info.value)
    assert _state(table) == before
    assert table.timeline() == timeline_before


@pytest.mark.parametrize("operation", ["append", "overwrite"])
def test_nulls_in_a_non_nullable_column_found_while_streaming_leave_nothing(
    table_uri: str, operation: str
) -> None:
    """The bad batch comes after files were already written: the write is rolled back, its
    files deleted, and the timeline records the rolled-back instant and its rollback."""
    table = txn.create_table(table_uri, SCHEMA, properties={"write.target_file_bytes": "1000"})
    table.append(rows(range(4)))
    before = _state(table)
    loose = _other("id", pa.int64(), nullable=True)
    flushed: list[int] = []

    def generate() -> Iterator[pa.RecordBatch]:
        for i in range(3):
            yield rows(range(100 + i * 50, 150 + i * 50), schema=loose).to_batches()[0]
        flushed.append(len(data_files_on_storage(table_uri)))
        yield pa.record_batch({"id": pa.array([1, None], pa.int64()), "region": ["a", "b"],
                               "day": pa.array([None, None], pa.date32()), "price": [1.0, 2.0]},
                              schema=loose)

    with pytest.raises(txn.SchemaMismatchError, match=r"'id' is not nullable.*1 null value"):
        getattr(table, operation)(batch_reader(loose, generate()))
    assert flushed[0] > len(before[2]), "the bad batch must come after files were written"
    assert _state(table) == before
    assert states(table)[-2:] == [("commit" if operation == "append" else "replacecommit",
                                   "rolledback"), ("rollback", "completed")]
    assert table.validate().ok


def test_nulls_in_a_non_nullable_pandas_column_raise_schema_mismatch(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    frame = pd.DataFrame({"id": [1.0, None], "region": ["a", "b"], "day": [None, None],
                          "price": [1.0, 2.0]})
    with pytest.raises(txn.SchemaMismatchError, match="'id' is not nullable"):
        table.append(frame)
    assert table.timeline() == [] and data_files_on_storage(table_uri) == []


@pytest.mark.parametrize(
    "data",
    [[{"id": 1}], {"id": [1]}, None, "id,region\n1,eu", rows(range(2)).to_batches()[0]],
    ids=["list", "dict", "none", "csv-text", "record-batch"],
)
def test_input_that_is_not_a_table_raises_invalid_option(table_uri: str, data: object) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(2)))
    before, timeline_before = _state(table), table.timeline()
    with pytest.raises(txn.InvalidOptionError, match=r"pyarrow\.Table.*RecordBatchReader.*pandas"):
        table.append(data)
    assert _state(table) == before and table.timeline() == timeline_before
