"""The ``schemas`` partition (table versions) and ``column_stats`` keyed by column id."""

from __future__ import annotations

import msgspec
import pyarrow as pa
import pytest

from metatxn import indexes, timeline
from metatxn.indexes import (
    COLUMN_STATS,
    FILES,
    SCHEMAS,
    MetadataChanges,
    MetadataTable,
    TableVersion,
    assign_ids,
    column_stats_schema,
)
from metatxn.indexes._blocks import read_block, write_block
from metatxn.indexes._layout import log_path, partition_folder
from tests.conftest import FakeClock
from tests.unit.txn.helpers import storage_of
from txn._read._file_table import with_stats

#: Version 0: ids 1 (id), 2 (name), 3 (amt).
V0 = assign_ids(pa.schema([("id", pa.int32()), ("name", pa.string()), ("amt", pa.int32())]))
#: Version 1: id widened to int64, name renamed full_name, amt dropped, extra added (id 4).
V1 = pa.schema([
    V0.field("id").with_type(pa.int64()),
    V0.field("name").with_name("full_name"),
    pa.field("extra", pa.float64(), metadata={indexes.FIELD_ID: b"4"}),
])
T = [f"2026010100000{n:04d}" for n in range(10)]


def _version(number: int, schema: pa.Schema, instant: str) -> TableVersion:
    return TableVersion(version=number, schema_id=number, arrow_schema=schema.serialize().to_pybytes(),
                        last_column_id=indexes.last_column_id(schema), instant=instant,
                        changes=[f"version {number}"])


def _stats(schema: pa.Schema, path: str, values: dict[str, tuple[object, object, int, int]]) -> pa.Table:
    """A column_stats block of one file, keyed by the ids of ``schema``, from stats by name."""
    stats_schema = column_stats_schema(schema)
    ids = {f.name: str(indexes.field_id(f)) for f in schema}
    return pa.Table.from_pylist([{"path": path, "deleted": False, "columns": {
        ids[name]: {"min": lo, "max": hi, "nulls": nulls, "count": count}
        for name, (lo, hi, nulls, count) in values.items()}}], schema=stats_schema)


def _files(path: str, rows: int) -> pa.Table:
    return pa.Table.from_pylist([{"path": path, "segment": "0", "partition": "", "format": "parquet",
                                  "rows": rows, "size": 1, "instant": path, "deleted": False}],
                                schema=indexes.FILES_SCHEMA)


class _Table:
    """A metadata table written directly: data instant ``T[n]`` completes at ``T[n]``."""

    def __init__(self, uri: str, clock: FakeClock) -> None:
        self.storage = storage_of(uri)
        self.clock = clock
        self.metadata = MetadataTable(self.storage, pa.schema([("id", pa.int32()), ("name", pa.string()),
                                                               ("amt", pa.int32())]), clock=clock)
        self.completed: dict[str, str] = {}

    def commit(self, instant: str, changes: MetadataChanges) -> None:
        with timeline.Timeline(self.storage, clock=self.clock).lock() as lease:
            self.metadata.write_delta(instant, changes, lease=lease)
        self.completed[instant] = instant

    def resolve(self, bound: str | None = None, partitions: tuple[str, ...] = (SCHEMAS,),
                since: tuple[str, indexes.MetadataSnapshot] | None = None) -> indexes.MetadataSnapshot:
        return self.metadata.resolve(self.completed, bound, partitions=partitions, since=since)

    def compact(self) -> str:
        order = sorted(self.completed.items(), key=lambda item: item[1])
        with timeline.Timeline(self.storage, clock=self.clock).lock() as lease:
            return self.metadata.compact(order, lease=lease)


@pytest.fixture
def table(memory_uri: str, clock: FakeClock) -> _Table:
    clock.now_ms = 1_800_000_000_000  # after every instant time of T
    return _Table(memory_uri, clock)


def _history(table: _Table) -> None:
    """T0: file a (version 0); T1: versions 0 and 1; T2: file b (version 1); T3: file c written
    by a writer of version 0 that committed after the change."""
    table.commit(T[0], MetadataChanges(files=_files("a", 10), column_stats=_stats(
        V0, "a", {"id": (1, 5, 0, 10), "name": ("x", "y", 1, 10), "amt": (3, 4, 0, 10)})))
    table.commit(T[1], MetadataChanges(versions=[_version(0, V0, ""), _version(1, V1, T[1])]))
    table.commit(T[2], MetadataChanges(files=_files("b", 4), column_stats=_stats(
        V1, "b", {"id": (2**40, 2**41, 0, 4), "full_name": ("a", "b", 0, 4), "extra": (0.5, 1.5, 2, 4)})))
    table.commit(T[3], MetadataChanges(files=_files("c", 3), column_stats=_stats(
        V0, "c", {"id": (7, 8, 0, 3), "name": ("p", "q", 0, 3), "amt": (1, 1, 0, 3)})))


def _by_path(snapshot: indexes.MetadataSnapshot) -> dict[str, object]:
    assert snapshot.column_stats is not None
    return {row["path"]: row["columns"] for row in snapshot.column_stats.to_pylist()}


# -- versions -------------------------------------------------------------------------------------


def test_versions_resolve_at_each_bound(table: _Table) -> None:
    _history(table)
    assert table.resolve(T[0]).versions == {}, "a table never changed has no version records"
    at_change = table.resolve(T[1]).versions
    assert at_change is not None and sorted(at_change) == [0, 1]
    assert at_change[1].schema.equals(V1, check_metadata=True)
    assert at_change[1].changes == ["version 1"] and at_change[0].instant == ""
    assert table.resolve().versions == at_change
    # Extending a cached resolution reads only what completed since.
    earlier = table.resolve(T[0])
    extended = table.resolve(None, since=(T[0], earlier))
    assert extended.versions == at_change
    assert table.resolve(T[0], partitions=(FILES,)).versions is None, "not asked, not resolved"


def test_a_rolled_back_instant_leaves_no_version(table: _Table) -> None:
    _history(table)
    table.commit(T[4], MetadataChanges(versions=[_version(2, V1, T[4])]))
    del table.completed[T[4]]  # it never completed on the data timeline: not read
    assert sorted(table.resolve().versions or {}) == [0, 1]
    with timeline.Timeline(table.storage, clock=table.clock).lock() as lease:
        removed = table.metadata.remove_instant(T[4], lease=lease)
    assert log_path(partition_folder(SCHEMAS), T[4]) in removed
    assert table.storage.list(partition_folder(SCHEMAS)) == [log_path(partition_folder(SCHEMAS), T[1])]


def test_compaction_keeps_every_version(table: _Table) -> None:
    _history(table)
    before = {bound: table.resolve(bound, (SCHEMAS, COLUMN_STATS)) for bound in T[:4]}
    compaction = table.compact()
    bases = [p for p in table.storage.list(partition_folder(SCHEMAS)) if ".base." in p]
    assert bases == [f"{partition_folder(SCHEMAS)}/{compaction}_{T[3]}.base.arrow"]
    latest = table.resolve(None, (SCHEMAS, COLUMN_STATS))
    assert all(".base." in path for path in latest.files_read), "the base alone answers"
    assert latest.versions == before[T[3]].versions
    assert _by_path(latest) == _by_path(before[T[3]])
    table.commit(T[5], MetadataChanges(versions=[_version(2, V1, T[5])]))
    assert sorted(table.resolve().versions or {}) == [0, 1, 2]


def _corrupt(table: _Table, block: pa.Table) -> None:
    write_block(table.storage, log_path(partition_folder(SCHEMAS), T[6]), block)
    table.completed[T[6]] = T[6]


def test_undecodable_records_are_corrupt_metadata(table: _Table) -> None:
    _history(table)
    _corrupt(table, pa.table({"version": pa.array([2], pa.int64()), "record": pa.array([b"{not json"])}))
    with pytest.raises(timeline.CorruptMetadataError, match="schemas"):
        table.resolve()
    damaged = table.metadata.damaged_files(table.completed)
    assert [e.path for e in damaged] == [log_path(partition_folder(SCHEMAS), T[6])]


def test_a_record_under_another_version_is_corrupt(table: _Table) -> None:
    _history(table)
    record = msgspec.json.encode(_version(5, V1, T[6]))
    _corrupt(table, pa.table({"version": pa.array([2], pa.int64()), "record": pa.array([record])}))
    with pytest.raises(timeline.CorruptMetadataError, match="version 5"):
        table.resolve()


def test_two_different_records_of_one_version_are_corrupt(table: _Table) -> None:
    _history(table)
    table.commit(T[6], MetadataChanges(versions=[_version(1, V0, T[6])]))
    with pytest.raises(timeline.CorruptMetadataError, match="two different records"):
        table.resolve()
    assert table.resolve(T[5]).versions is not None, "older snapshots still resolve"


def test_garbage_bytes_are_corrupt(table: _Table) -> None:
    table.storage.put(log_path(partition_folder(SCHEMAS), T[0]), b"garbage")
    table.completed[T[0]] = T[0]
    with pytest.raises(timeline.CorruptMetadataError):
        table.resolve()


# -- statistics by id -----------------------------------------------------------------------------


def test_statistics_are_projected_to_the_latest_version_by_id(table: _Table) -> None:
    _history(table)
    latest = table.resolve(None, (COLUMN_STATS,))
    assert latest.column_stats is not None
    assert latest.column_stats.schema.field("columns").type == \
        column_stats_schema(V1).field("columns").type
    stats = _by_path(latest)
    # a: id widened exactly, renamed name kept by id, amt dropped, extra all-null (count = rows).
    assert stats["a"] == {"1": {"min": 1, "max": 5, "nulls": 0, "count": 10},
                          "2": {"min": "x", "max": "y", "nulls": 1, "count": 10},
                          "4": {"min": None, "max": None, "nulls": 10, "count": 10}}
    assert stats["b"]["4"] == {"min": 0.5, "max": 1.5, "nulls": 2, "count": 4}
    assert stats["c"]["1"] == {"min": 7, "max": 8, "nulls": 0, "count": 3}, \
        "a block of the older version written after the change"
    # As of before the change: version 0's statistics, amt included.
    old = _by_path(table.resolve(T[0], (COLUMN_STATS,)))
    assert old["a"]["3"] == {"min": 3, "max": 4, "nulls": 0, "count": 10}


def test_blocks_keep_the_schema_their_writer_gave(table: _Table) -> None:
    _history(table)
    raw = read_block(table.storage, log_path(partition_folder(COLUMN_STATS), T[3]),
                     column_stats_schema(V0))
    assert raw.schema.field("columns").type.names == ["1", "2", "3"]


def test_extending_across_a_schema_change_reads_the_statistics_again(table: _Table) -> None:
    _history(table)
    earlier = table.resolve(T[0], (COLUMN_STATS,))
    assert earlier.column_stats is not None
    assert earlier.column_stats.schema.field("columns").type.names == ["1", "2", "3"]
    extended = table.resolve(None, (COLUMN_STATS,), since=(T[0], earlier))
    assert _by_path(extended) == _by_path(table.resolve(None, (COLUMN_STATS,)))
    assert log_path(partition_folder(COLUMN_STATS), T[0]) in extended.files_read
    # Without a change in between, only the new blocks are read.
    again = table.resolve(None, (COLUMN_STATS,), since=(T[3], extended))
    assert not [p for p in again.files_read if COLUMN_STATS in p]


def test_blocks_keyed_by_name_are_read_through_version_0(table: _Table) -> None:
    """Blocks written before column ids name their children by column name, with no marker."""
    old_layout = pa.schema([("path", pa.string()), ("deleted", pa.bool_()), ("columns", pa.struct([
        (name, pa.struct([("min", t), ("max", t), ("nulls", pa.int64()), ("count", pa.int64())]))
        for name, t in [("id", pa.int32()), ("name", pa.string()), ("amt", pa.int32())]]))])
    block = pa.Table.from_pylist([
        {"path": "old", "deleted": False, "columns": {
            "id": {"min": 1, "max": 2, "nulls": 0, "count": 6},
            "name": {"min": "m", "max": "n", "nulls": 0, "count": 6}, "amt": None}},
        {"path": "gone", "deleted": True, "columns": None}], schema=old_layout)
    write_block(table.storage, log_path(partition_folder(COLUMN_STATS), T[0]), block)
    table.completed[T[0]] = T[0]
    assert _by_path(table.resolve(None, (COLUMN_STATS,))) == {
        "gone": None, "old": {"1": {"min": 1, "max": 2, "nulls": 0, "count": 6},
                              "2": {"min": "m", "max": "n", "nulls": 0, "count": 6}, "3": None}}
    table.commit(T[1], MetadataChanges(versions=[_version(0, V0, ""), _version(1, V1, T[1])]))
    assert _by_path(table.resolve(None, (COLUMN_STATS,)))["old"] == {
        "1": {"min": 1, "max": 2, "nulls": 0, "count": 6},
        "2": {"min": "m", "max": "n", "nulls": 0, "count": 6},
        "4": {"min": None, "max": None, "nulls": 6, "count": 6}}


def test_compaction_writes_statistics_in_the_version_of_its_horizon(table: _Table) -> None:
    _history(table)
    compaction = table.compact()
    base = f"{partition_folder(COLUMN_STATS)}/{compaction}_{T[3]}.base.arrow"
    written = read_block(table.storage, base, column_stats_schema(V1))
    assert written.schema.field("columns").type.names == ["1", "2", "4"]
    assert written.schema.metadata == {b"metatxn.stats_key": b"id"}
    assert _by_path(table.resolve(None, (COLUMN_STATS,)))["a"]["4"]["nulls"] == 10


@pytest.mark.parametrize("old,new,low,high", [
    (pa.int8(), pa.int64(), -5, 100),
    (pa.float32(), pa.float64(), 0.5, 2.5),
    (pa.decimal128(5, 2), pa.decimal128(12, 2), None, None),
    (pa.date32(), pa.timestamp("us"), None, None),
])
def test_widened_statistics_cast_exactly(table: _Table, old: pa.DataType, new: pa.DataType,
                                         low: object, high: object) -> None:
    before = assign_ids(pa.schema([("id", pa.int32()), ("v", old)]))
    after = pa.schema([before.field("id"), before.field("v").with_type(new)])
    values = pa.array([low, high] if low is not None else [None, None], old)
    if pa.types.is_decimal(old):
        values = pa.array(["1.25", "-3.50"], pa.string()).cast(old)
    if pa.types.is_date(old):
        values = pa.array([0, 20_000], pa.int32()).cast(old)
    table.commit(T[0], MetadataChanges(column_stats=_stats(
        before, "a", {"id": (1, 2, 0, 2), "v": (values[0].as_py(), values[1].as_py(), 0, 2)})))
    table.commit(T[1], MetadataChanges(versions=[_version(1, after, T[1])]))
    got = _by_path(table.resolve(None, (COLUMN_STATS,)))["a"]["2"]
    assert got["min"] == values.cast(new)[0].as_py() and got["max"] == values.cast(new)[1].as_py()


def test_file_table_stats_are_named_by_the_snapshot_schema(table: _Table) -> None:
    _history(table)
    stats = table.resolve(None, (COLUMN_STATS,)).column_stats
    files = pa.table({"path": ["a", "b", "c"]})
    named = with_stats(files, stats, V1)
    assert named.schema.field("stats").type.names == ["id", "full_name", "extra"]
    assert named["stats"][0].as_py()["extra"] == {"min": None, "max": None, "nulls": 10, "count": 10}
    old = with_stats(files, table.resolve(T[0], (COLUMN_STATS,)).column_stats, V0)
    assert old["stats"].to_pylist()[1:] == [None, None]
    assert old["stats"][0].as_py()["amt"] == {"min": 3, "max": 4, "nulls": 0, "count": 10}
