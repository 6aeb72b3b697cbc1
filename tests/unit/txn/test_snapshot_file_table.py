"""The file table (``Snapshot.file_table``) and the vectorised pruning planners use on it.

The file table is the snapshot's live data files as one Arrow table, built from the metadata
table alone; ``files()`` is derived from it and ``count()`` without a filter sums it. Pruning
keeps, for any filter, every file that holds a matching row (checked against the rows
themselves on random data and filters), and drops a file whose ranges rule the filter out.
"""

from __future__ import annotations

import random
from datetime import date

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import txn
from tests.unit.txn.helpers import (
    SCHEMA,
    CountingStorage,
    data_files_on_storage,
    relative,
    rows,
    storage_of,
    table_on,
)
from txn._files._writer import column_stats
from txn._read._prune import prune

FILE_TABLE_SCHEMA = pa.schema([
    ("path", pa.string()), ("location", pa.string()), ("segment", pa.string()),
    ("partition", pa.string()), ("format", pa.string()), ("rows", pa.int64()),
    ("size", pa.int64()), ("instant", pa.string()), ("deleted_rows", pa.int64()),
    ("delete_files", pa.list_(pa.string())), ("schema_id", pa.int64()),
])


def _loads(table: txn.Table) -> list[txn.Commit]:
    commits = []
    for i, region in enumerate(["eu", "us", "apac"]):
        commit = table.append(rows(range(i * 10, i * 10 + 10), region=region))
        assert commit is not None
        commits.append(commit)
    return commits


# -- what it holds ---------------------------------------------------------------------------------


def test_the_file_table_has_a_row_per_live_file_with_the_documented_columns(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"])
    loads = _loads(table)
    snap = table.snapshot()
    files = snap.file_table(stats=False)
    assert files.schema.equals(FILE_TABLE_SCHEMA)
    assert sorted(files["path"].to_pylist()) == sorted(p for c in loads for p in c.paths_added)
    by_path = {relative(table, f): f for f in snap.files()}
    for row in files.to_pylist():
        data_file = by_path[row["path"]]
        assert row["location"] == data_file.path == table.uri.rstrip("/") + "/" + row["path"]
        assert (row["segment"], row["rows"], row["size"], row["format"]) == (
            data_file.segment, data_file.rows, data_file.size, data_file.format)
        assert row["partition"] == f"region={data_file.partition['region']}"
        assert row["deleted_rows"] == 0 and row["delete_files"] == []
    assert set(files["instant"].to_pylist()) == {c.instant for c in loads}


def test_stats_hold_each_files_ranges_typed_like_its_columns(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3, 8), day=date(2026, 2, 1)))
    files = table.snapshot().file_table()
    assert files.column_names == [*FILE_TABLE_SCHEMA.names, "stats"]
    stats = files["stats"].to_pylist()[0]
    assert stats["id"] == {"min": 3, "max": 7, "nulls": 0, "count": 5}
    assert stats["day"]["min"] == stats["day"]["max"] == date(2026, 2, 1)
    assert files.schema.field("stats").type.field("price").type.field("min").type == pa.float64()


def test_delete_deltas_show_as_deleted_rows_and_delete_files(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(10)))
    table.append(rows(range(10, 20)))
    table.delete(pc.field("id") < 3)
    table.delete(pc.field("id") == 5)
    snap = table.snapshot()
    files = snap.file_table(stats=False).sort_by("deleted_rows").to_pylist()
    assert [f["deleted_rows"] for f in files] == [0, 4]
    dirty = files[1]
    assert 1 <= len(dirty["delete_files"]) <= 2
    assert all(d.startswith(table.uri.rstrip("/") + "/") for d in dirty["delete_files"])
    assert [f.delete_files for f in snap.files() if f.deleted_rows] == [tuple(dirty["delete_files"])]
    assert snap.count() == 16 == snap.to_arrow().num_rows


def test_an_unfiltered_count_after_deletes_is_answered_from_the_metadata_table(
        table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(10)))
    table.delete(pc.field("id") >= 7)
    storage = storage_of(table_uri)
    for path in data_files_on_storage(table_uri):
        storage.delete(path)
    assert table.snapshot().count() == 7


def test_a_file_table_without_stats_reads_no_column_statistics(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    _loads(table)
    counting = CountingStorage(storage_of(table_uri))
    reader = table_on(table_uri, counting)
    snap = reader.snapshot()
    counting.calls.clear()
    assert snap.file_table(stats=False).num_rows == 3
    assert snap.count() == 30
    assert not [c for c in counting.calls if "column_stats" in c[1]]
    assert snap.file_table().num_rows == 3
    assert [c for c in counting.calls if "column_stats" in c[1]]


def test_a_filtered_file_table_keeps_the_files_that_can_match(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    loads = _loads(table)
    snap = table.snapshot()
    kept = snap.file_table(pc.field("id").isin([12, 15]), stats=False)
    assert kept["path"].to_pylist() == list(loads[1].paths_added)
    assert "stats" not in kept.column_names
    assert snap.file_table(pc.field("id") > 100).num_rows == 0
    assert snap.file_table(~(pc.field("id") < 20)).num_rows == 1
    with pytest.raises(txn.InvalidOptionError):
        snap.file_table(pc.field("nope") > 1)


def test_a_filter_only_partly_understood_is_finished_by_arrow(table_uri: str) -> None:
    """A cast in the filter: the vectorised pass cannot read it, Arrow's per-file guarantees
    still prune, and the answers are the rows' own."""
    table = txn.create_table(table_uri, SCHEMA)
    loads = _loads(table)
    snap = table.snapshot()
    cast = pc.field("id").cast(pa.float64()) > 25.0
    assert [relative(table, f) for f in snap.files(cast)] == list(loads[2].paths_added)
    partly = cast & (pc.field("region") == "apac")
    assert snap.count(partly) == 4
    two_columns = pc.field("id") < pc.field("price")
    assert snap.count(two_columns) == table.to_arrow().filter(two_columns).num_rows


# -- soundness on random data and filters ----------------------------------------------------------


RANDOM_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64()),
                           ("d", pa.date32())])


def _random_file(chance: random.Random) -> pa.Table:
    size = chance.randint(1, 6)
    low = chance.randint(-20, 20)

    def maybe(value: object) -> object:
        return None if chance.random() < 0.15 else value

    return pa.table({
        "a": [maybe(low + chance.randint(0, 8)) for _ in range(size)],
        "b": [maybe(chance.choice("abcdefg")) for _ in range(size)],
        "c": [maybe(chance.choice([float(low), low + 0.5, float("nan")])) for _ in range(size)],
        "d": [maybe(date(2026, 1, 1 + chance.randint(0, 9))) for _ in range(size)],
    }, schema=RANDOM_SCHEMA)


def _random_filter(chance: random.Random, depth: int = 0) -> ds.Expression:
    if depth < 2 and chance.random() < 0.4:
        left, right = _random_filter(chance, depth + 1), _random_filter(chance, depth + 1)
        combined: ds.Expression = chance.choice([left & right, left | right, ~left])
        return combined
    column = chance.choice(["a", "b", "c", "d"])
    field = pc.field(column)
    value: object = {"a": chance.randint(-25, 30), "b": chance.choice("abcdefgh"),
                     "c": chance.choice([-5.0, 0.5, 3.0, 12.5]),
                     "d": date(2026, 1, 1 + chance.randint(0, 11))}[column]
    kind = chance.randrange(10)
    if kind == 0:
        return field.is_null()
    if kind == 1:
        return field.is_valid()
    if kind == 2:
        values = [value, {"a": 7, "b": "c", "c": 0.5, "d": date(2026, 1, 4)}[column]]
        return field.isin(pa.array(values, RANDOM_SCHEMA.field(column).type))
    if kind == 3:
        return pc.scalar(value) < field  # literal first
    operator = chance.choice(["<", "<=", ">", ">=", "==", "!="])
    return {"<": field < value, "<=": field <= value, ">": field > value,
            ">=": field >= value, "==": field == value, "!=": field != value}[operator]


def _stats_column(files: list[pa.Table]) -> pa.StructArray:
    struct = pa.struct([
        (f.name, pa.struct([("min", f.type), ("max", f.type), ("nulls", pa.int64()),
                            ("count", pa.int64())]))
        for f in RANDOM_SCHEMA])
    values = [{name: {"min": s.min, "max": s.max, "nulls": s.nulls, "count": s.count}
               for name, s in column_stats(f).items()} for f in files]
    return pa.array(values, struct)


def test_pruning_never_drops_a_file_with_a_matching_row() -> None:
    """500 random filters over 40 random files with nulls and NaNs: every file holding a row the
    filter selects is kept, and simple comparisons are understood exactly."""
    chance = random.Random(20261125)
    files = [_random_file(chance) for _ in range(40)]
    files.append(pa.table({"a": [None, None], "b": [None, None], "c": [None, None],
                           "d": [None, None]}, schema=RANDOM_SCHEMA))
    stats = _stats_column(files)
    dropped = 0
    for _ in range(500):
        expression = _random_filter(chance)
        pruned = prune(expression, stats, len(files))
        keep = pruned.keep.to_pylist()
        for index, data in enumerate(files):
            if data.filter(expression).num_rows:
                assert keep[index], (str(expression), data.to_pylist())
        dropped += keep.count(False)
        assert pruned.exact, str(expression)
    assert dropped > 2_000, "the ranges prune"


def test_a_file_without_statistics_is_always_kept() -> None:
    stats = pa.array([None], pa.struct([("a", pa.struct([("min", pa.int64()),
                                                           ("max", pa.int64()),
                                                           ("nulls", pa.int64()),
                                                           ("count", pa.int64())]))]))
    for expression in (pc.field("a") > 5, pc.field("a").is_null(), ~(pc.field("a") > 5),
                       pc.field("a").isin([1, 2])):
        assert prune(expression, stats, 1).keep.to_pylist() == [True]


def test_comparisons_with_null_and_constant_filters_decide_every_file() -> None:
    stats = _stats_column([pa.table({"a": [1, 2], "b": ["x", "y"], "c": [1.0, 2.0],
                                     "d": [date(2026, 1, 1)] * 2}, schema=RANDOM_SCHEMA)])
    assert prune(pc.field("a") == pa.scalar(None, pa.int64()), stats, 1).keep.to_pylist() == [False]
    assert prune(pc.scalar(True), stats, 1).keep.to_pylist() == [True]
    assert prune(pc.scalar(False) | (pc.field("a") > 1), stats, 1).keep.to_pylist() == [True]
    assert prune(pc.scalar(False) | (pc.field("a") > 2), stats, 1).keep.to_pylist() == [False]
