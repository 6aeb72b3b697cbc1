"""The record-level index: its merge rule, and what a lookup reads.

``merge_entries`` keeps, per key, the entry of the largest instant (tombstones included): a max,
so commutative, associative and idempotent, which lets compaction fold blocks in any grouping.
A lookup must stay cheap however large the table: it lists and reads only the shard folders the
keys hash to, and in a shard's base decodes only the row groups whose key range can hold them.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import given
from hypothesis import strategies as st

import txn
from metatxn import timeline
from metatxn.indexes import (
    RecordIndex,
    index_schema,
    key_names,
    matching,
    merge_entries,
    shard_folder,
    shard_of,
)
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, CountingStorage, Faulty, rows, storage_of, table_on

INSTANTS = [f"2026010100000{i:04d}" for i in range(8)]
SINGLE = index_schema([pa.int64()])
COMPOSITE = index_schema([pa.int64(), pa.string()])
_roots = itertools.count()


def _times(count: int, start: int = 0) -> list[str]:
    return [f"2026010100{start + i:07d}" for i in range(count)]


# -- merge_entries ---------------------------------------------------------------------------------


def _entry(schema: pa.Schema, key: tuple[Any, ...], instant: int, deleted: bool) -> dict[str, Any]:
    """The one entry instant ``instant`` writes for ``key``: its fields follow from both, so the
    same (key, instant) drawn twice is the same row, as on storage."""
    names = key_names(len(schema) - 5)
    row: dict[str, Any] = dict(zip(names, key, strict=True))
    if deleted:
        row.update(segment=None, file=None, position=None)
    else:
        row.update(segment=str(instant), file=f"f{instant}-{key[0] % 3}.parquet",
                   position=key[0] * 10 + instant)
    row.update(instant=INSTANTS[instant], deleted=deleted)
    return row


@st.composite
def entry_blocks(draw: st.DrawFn) -> tuple[pa.Schema, list[pa.Table]]:
    """A schema and 1..5 blocks of entries; a (key, instant) may repeat across blocks."""
    schema = draw(st.sampled_from([SINGLE, COMPOSITE]))
    composite = schema is COMPOSITE
    key = st.tuples(st.integers(-3, 12), st.sampled_from(["", "a", "é", "zz"])) if composite \
        else st.tuples(st.integers(-3, 12))
    writes = draw(st.dictionaries(st.tuples(key, st.integers(0, len(INSTANTS) - 1)), st.booleans(),
                                  max_size=30))
    count = draw(st.integers(1, 5))
    blocks: list[list[dict[str, Any]]] = [[] for _ in range(count)]
    for (k, instant), deleted in writes.items():
        for owner in draw(st.sets(st.integers(0, count - 1), min_size=1, max_size=2)):
            blocks[owner].append(_entry(schema, k, instant, deleted))
    for block in blocks:
        draw(st.randoms(use_true_random=False)).shuffle(block)
    return schema, [pa.Table.from_pylist(b, schema=schema) for b in blocks]


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return table.to_pylist()


def _model(schema: pa.Schema, tables: list[pa.Table]) -> list[dict[str, Any]]:
    names = key_names(len(schema) - 5)
    newest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for table in tables:
        for row in table.to_pylist():
            key = tuple(row[n] for n in names)
            if key not in newest or row["instant"] > newest[key]["instant"]:
                newest[key] = row
    return [newest[k] for k in sorted(newest)]


@given(entry_blocks())
def test_merge_keeps_the_newest_entry_of_each_key_sorted_by_key(
    case: tuple[pa.Schema, list[pa.Table]]
) -> None:
    schema, tables = case
    merged = merge_entries(tables, schema)
    assert merged.schema.equals(schema)
    assert _rows(merged) == _model(schema, tables)


@given(entry_blocks(), st.randoms(use_true_random=False))
def test_merge_is_commutative(case: tuple[pa.Schema, list[pa.Table]], rnd: random.Random) -> None:
    schema, tables = case
    shuffled = list(tables)
    rnd.shuffle(shuffled)
    assert _rows(merge_entries(shuffled, schema)) == _rows(merge_entries(tables, schema))


@given(entry_blocks(), st.data())
def test_merge_is_associative(case: tuple[pa.Schema, list[pa.Table]], data: st.DataObject) -> None:
    schema, tables = case
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(tables) - 1)), max_size=3)))
    groups = [tables[a:b] for a, b in zip([0, *cuts], [*cuts, len(tables)], strict=True)]
    folded = [merge_entries(g, schema) for g in groups if g]
    order = list(data.draw(st.permutations(folded)))
    assert _rows(merge_entries(order, schema)) == _rows(merge_entries(tables, schema))


@given(entry_blocks(), st.data())
def test_merge_is_idempotent(case: tuple[pa.Schema, list[pa.Table]], data: st.DataObject) -> None:
    schema, tables = case
    once = merge_entries(tables, schema)
    assert _rows(merge_entries([once], schema)) == _rows(once)
    assert _rows(merge_entries([once, once], schema)) == _rows(once)
    assert _rows(merge_entries(tables + tables, schema)) == _rows(once)
    again = data.draw(st.lists(st.sampled_from(tables), max_size=3))
    assert _rows(merge_entries([*again, once], schema)) == _rows(once)


def test_a_tombstone_wins_over_older_entries_and_loses_to_newer_ones() -> None:
    older = pa.Table.from_pylist([_entry(SINGLE, (1,), 0, False), _entry(SINGLE, (2,), 0, False)],
                                 schema=SINGLE)
    tombstone = pa.Table.from_pylist([_entry(SINGLE, (1,), 3, True), _entry(SINGLE, (2,), 3, True)],
                                     schema=SINGLE)
    newer = pa.Table.from_pylist([_entry(SINGLE, (2,), 5, False)], schema=SINGLE)
    merged = merge_entries([newer, tombstone, older], SINGLE)
    assert merged["key_0"].to_pylist() == [1, 2]
    assert merged["deleted"].to_pylist() == [True, False]
    assert merged["instant"].to_pylist() == [INSTANTS[3], INSTANTS[5]]
    assert merged["file"].to_pylist() == [None, "f5-2.parquet"]


def test_merging_nothing_or_empty_blocks_gives_an_empty_table() -> None:
    assert merge_entries([], SINGLE).equals(SINGLE.empty_table())
    assert merge_entries([SINGLE.empty_table(), SINGLE.empty_table()], SINGLE).num_rows == 0


def test_merge_accepts_blocks_with_other_column_order_and_chunking() -> None:
    rows_ = [_entry(COMPOSITE, (k, s), k % 4, k % 5 == 0) for k in range(20) for s in ("a", "b")]
    table = pa.Table.from_pylist(rows_, schema=COMPOSITE)
    chunked = pa.concat_tables([table.slice(0, 7), table.slice(7, 0), table.slice(7)])
    reordered = chunked.select(list(reversed(COMPOSITE.names)))
    assert _rows(merge_entries([reordered], COMPOSITE)) == _model(COMPOSITE, [table])


def test_matching_selects_the_rows_of_wanted_keys() -> None:
    table = pa.Table.from_pylist([_entry(COMPOSITE, (k, s), 1, False) for k in range(5)
                                  for s in ("a", "b")], schema=COMPOSITE)
    wanted = pa.table({"key_0": pa.array([1, 3, 9], pa.int64()), "key_1": ["b", "a", "a"]})
    found = matching(table, wanted, ["key_0", "key_1"])
    assert sorted(zip(found["key_0"].to_pylist(), found["key_1"].to_pylist(), strict=True)) == [
        (1, "b"), (3, "a")]
    single = pa.Table.from_pylist([_entry(SINGLE, (k,), 1, False) for k in range(5)], schema=SINGLE)
    assert matching(single, pa.table({"key_0": pa.array([4, 0, 7], pa.int64())}),
                    ["key_0"])["key_0"].to_pylist() == [0, 4]
    assert matching(single, pa.table({"key_0": pa.array([], pa.int64())}), ["key_0"]).num_rows == 0


# -- RecordIndex on its own ------------------------------------------------------------------------


@pytest.fixture
def memory_root(memory_uri: str) -> str:
    return memory_uri.removeprefix("memory://")


def _index(root: str, *, shards: int = 8, row_group_rows: int = 64,
           key_types: list[pa.DataType] | None = None) -> tuple[RecordIndex, CountingStorage]:
    storage = CountingStorage(timeline.MemoryStorage(f"{root}/i{next(_roots)}"))
    return RecordIndex(storage, key_types or [pa.int64()], shards,  # type: ignore[arg-type]
                       row_group_rows=row_group_rows), storage


def _write(index: RecordIndex, instant: str, keys: list[int], *, file: str = "a.parquet",
           deleted: bool = False) -> None:
    table = pa.table({"key_0": pa.array(keys, pa.int64())})
    count = len(keys)
    index.write(instant, index.entries(
        table, segment=pa.nulls(count, pa.string()) if deleted else "0",
        file=pa.nulls(count, pa.string()) if deleted else pa.array([file] * count, pa.string()),
        position=pa.nulls(count, pa.int64()) if deleted else pa.array(keys, pa.int64()),
        instant=instant, deleted=deleted))


def _lookup(index: RecordIndex, keys: list[int], completed: dict[str, str], bound: str,
            done: set[str]) -> dict[int, tuple[str | None, bool]]:
    found = index.lookup(pa.table({"key_0": pa.array(keys, pa.int64())}), completed, bound, done)
    return {k: (f, d) for k, f, d in zip(found["key_0"].to_pylist(), found["file"].to_pylist(),
                                          found["deleted"].to_pylist(), strict=True)}


def test_split_puts_each_entry_in_its_shard_sorted_by_key(memory_root: str) -> None:
    index, _ = _index(memory_root, shards=5)
    keys = list(range(200, 0, -3))
    entries = index.entries(pa.table({"key_0": pa.array(keys, pa.int64())}), segment="0",
                            file=pa.array(["f"] * len(keys)), position=pa.array(keys, pa.int64()),
                            instant=INSTANTS[0])
    parts = index.split(entries)
    assert sum(p.num_rows for p in parts.values()) == len(keys)
    for shard, part in parts.items():
        assert set(shard_of([part["key_0"]], 5).tolist()) == {shard}
        assert part["key_0"].to_pylist() == sorted(part["key_0"].to_pylist())


def test_lookup_merges_logs_and_bases_like_the_model(memory_root: str) -> None:
    """Blocks of instants, a compaction folding some of them, and blocks after it: the lookup
    answers as the newest completed entry of each key, ignoring uncompleted blocks."""
    index, _ = _index(memory_root)
    t1, t2, t3, t4, t5, c1, c2, c3, c5, m = _times(10)
    _write(index, t1, list(range(1000)), file="a.parquet")
    _write(index, t2, list(range(100)), file="b.parquet")
    _write(index, t3, list(range(100, 150)), deleted=True)
    _write(index, t4, list(range(150, 160)), file="never-completed.parquet")  # still pending
    completed = {t1: c1, t2: c2, t3: c3}
    written = index.compact(m, c2, completed, set(), pa.array(["a.parquet", "b.parquet"]))
    assert written and all(p.endswith(f"{m}_{c2}.base.arrow") for p in written)
    _write(index, t5, list(range(120, 130)), file="c.parquet")
    completed[t5] = c5
    keys = [0, 99, 100, 125, 149, 155, 999, 5000]
    expected = {0: ("b.parquet", False), 99: ("b.parquet", False), 100: (None, True),
                125: ("c.parquet", False), 149: (None, True), 155: ("a.parquet", False),
                999: ("a.parquet", False)}
    assert _lookup(index, keys, completed, c5, {m}) == expected
    assert _lookup(index, keys, completed, c5, set()) == expected, "without the base: logs only"
    assert _lookup(index, [125, 100], completed, c3, {m}) == {125: (None, True), 100: (None, True)}
    assert _lookup(index, [0], completed, c1, {m}) == {0: ("a.parquet", False)}, (
        "a base past the bound is not used")


def test_compaction_drops_tombstones_and_entries_of_files_no_longer_live(memory_root: str) -> None:
    index, storage = _index(memory_root, shards=2)
    t1, t2, t3, c1, c2, c3, m = _times(7)
    _write(index, t1, list(range(50)), file="old.parquet")
    _write(index, t2, list(range(10)), file="new.parquet")
    _write(index, t3, list(range(40, 50)), deleted=True)
    completed = {t1: c1, t2: c2, t3: c3}
    bases = index.compact(m, c3, completed, set(), pa.array(["new.parquet"]))
    kept = pa.concat_tables([ipc.open_file(pa.BufferReader(storage.inner.read(b))).read_all()
                             .cast(index.schema) for b in bases])
    assert sorted(kept["key_0"].to_pylist()) == list(range(10))
    assert set(kept["file"].to_pylist()) == {"new.parquet"} and not any(kept["deleted"].to_pylist())
    expected = dict.fromkeys(range(10), ("new.parquet", False))
    assert _lookup(index, list(range(50)), completed, c3, {m}) == expected


def test_remove_deletes_every_block_of_a_rolled_back_instant(memory_root: str) -> None:
    index, storage = _index(memory_root, shards=4)
    t1, t2 = _times(2)
    _write(index, t1, list(range(40)))
    _write(index, t2, list(range(40, 80)))
    removed = index.remove(t2)
    assert removed == [f"_metadata/record_index/{t2}.log.arrow"], "one log file per instant"
    left = storage.inner.list("_metadata/record_index", recursive=True)
    assert left == [f"_metadata/record_index/{t1}.log.arrow"]
    assert index.instant_entries(t1, range(4)).num_rows == 40
    with pytest.raises(FileNotFoundError):
        index.instant_entries(t2, range(4))


#: A base's batches, each as the (low, high) range of its first key column.
Ranges = list[tuple[Any, Any]]


@pytest.fixture
def row_group_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[Ranges, list[int]]]]:
    """Every batch read from a record-index base, grouped per base read: the base's batch
    ranges (computed here from all its batches) and the batches the lookup read."""
    reads: list[tuple[Ranges, list[int]]] = []
    seen: dict[int, tuple[ipc.RecordBatchFileReader, list[int]]] = {}  # keeps readers alive
    original = ipc.RecordBatchFileReader.get_batch

    def spy(self: ipc.RecordBatchFileReader, i: int) -> pa.RecordBatch:
        if b"metatxn.batch_key_ranges" in (self.schema.metadata or {}):  # a base, not a log
            if id(self) not in seen:
                batches = [original(self, b) for b in range(self.num_record_batches)]
                groups: list[int] = []
                seen[id(self)] = (self, groups)
                reads.append(([(b["key_0"][0].as_py(), b["key_0"][-1].as_py()) for b in batches], groups))
            seen[id(self)][1].append(i)
        return original(self, i)

    monkeypatch.setattr(ipc.RecordBatchFileReader, "get_batch", spy)
    yield reads


def _groups_holding(ranges: Ranges, keys: list[Any], shards: int | None = None) -> list[int]:
    """The batches of a base whose first-key range holds one of ``keys`` (of the base's shard,
    found from its smallest key, when ``shards`` is given)."""
    if shards is not None:
        shard = shard_of([pa.array([ranges[0][0]])], shards)[0]
        keys = [k for k in keys if shard_of([pa.array([k])], shards)[0] == shard]
    return [index for index, (low, high) in enumerate(ranges) if any(low <= k <= high for k in keys)]


def test_lookup_reads_only_the_wanted_shards_and_row_groups(
    memory_root: str, row_group_reads: list[tuple[Ranges, list[int]]]
) -> None:
    index, storage = _index(memory_root, shards=8, row_group_rows=64)
    t1, t2, c1, c2, m = _times(5)
    _write(index, t1, list(range(0, 8000, 2)))
    index.compact(m, c1, {t1: c1}, set(), pa.array(["a.parquet"]))
    _write(index, t2, [1, 3, 5])
    completed = {t1: c1, t2: c2}
    wanted = [10, 4000, 7998, 5]
    shards = set(shard_of([pa.array(wanted, pa.int64())], 8).tolist())
    assert len(shards) < 8, "pick keys that leave some shards out"
    storage.calls.clear()
    found = _lookup(index, wanted, completed, c2, {m})
    assert sorted(found) == [5, 10, 4000, 7998]

    touched = [(op, path) for op, path in storage.calls if path.startswith("_metadata/record_index")]
    # the log files (one per instant, at the index root) and the wanted shards' folders only
    assert {path for op, path in touched if op == "list"} == {
        "_metadata/record_index", *(shard_folder(s) for s in shards)}
    assert all(path.startswith(tuple(shard_folder(s) for s in shards)) or path.endswith(".log.arrow")
               for op, path in touched if op != "list")
    assert len(row_group_reads) == len({s for s in shards
                                        if s in shard_of([pa.array(wanted[:3], pa.int64())], 8)})
    for ranges, groups in row_group_reads:
        assert len(ranges) > 4
        # The probe asks each run only for the keys its filter admits (issue 27): the batches
        # read are those holding a present key, plus at most those of filter false positives.
        holding = _groups_holding(ranges, wanted, 8)
        assert set(groups) <= set(holding), "only the batches whose range can hold a key"
        assert set(_groups_holding(ranges, [k for k in wanted if k % 2 == 0], 8)) <= set(groups)
        assert len(groups) <= len(wanted)


def test_lookup_in_a_base_with_composite_and_string_keys_prunes_row_groups(
    memory_root: str, row_group_reads: list[tuple[Ranges, list[int]]]
) -> None:
    index, _ = _index(memory_root, shards=1, row_group_rows=32, key_types=[pa.string(), pa.int64()])
    t1, c1, m = _times(3)
    names = [f"name-{i:05d}" for i in range(1000)]
    keys = pa.table({"key_0": pa.array(names), "key_1": pa.array(range(1000), pa.int64())})
    index.write(t1, index.entries(keys, segment="0", file=pa.array(["f"] * 1000),
                                  position=pa.array(range(1000), pa.int64()), instant=t1))
    index.compact(m, c1, {t1: c1}, set(), pa.array(["f"]))
    wanted = pa.table({"key_0": ["name-00500", "name-00500", "zzz"], "key_1": pa.array([500, 7, 1])})
    found = index.lookup(wanted, {t1: c1}, c1, {m})
    assert list(zip(found["key_0"].to_pylist(), found["key_1"].to_pylist(), strict=True)) == [
        ("name-00500", 500)]
    [(ranges, groups)] = row_group_reads
    assert len(ranges) > 30 and groups == _groups_holding(ranges, ["name-00500"])


def test_a_first_key_column_spanning_many_row_groups_is_searched_in_all_of_them(memory_root: str) -> None:
    index, _ = _index(memory_root, shards=1, row_group_rows=32, key_types=[pa.string(), pa.int64()])
    t1, c1, m = _times(3)
    regions = ["eu"] * 500 + ["us"] * 500
    keys = pa.table({"key_0": pa.array(regions), "key_1": pa.array(list(range(500)) * 2, pa.int64())})
    index.write(t1, index.entries(keys, segment="0", file=pa.array(["f"] * 1000),
                                  position=pa.array(range(1000), pa.int64()), instant=t1))
    index.compact(m, c1, {t1: c1}, set(), pa.array(["f"]))
    wanted = pa.table({"key_0": ["eu", "eu", "us", "us"], "key_1": pa.array([0, 499, 0, 250], pa.int64())})
    found = index.lookup(wanted, {t1: c1}, c1, {m})
    assert sorted(zip(found["key_0"].to_pylist(), found["key_1"].to_pylist(), strict=True)) == [
        ("eu", 0), ("eu", 499), ("us", 0), ("us", 250)]


def test_composite_keys_found_in_row_groups_of_different_files_are_returned(memory_root: str) -> None:
    index, _ = _index(memory_root, shards=1, row_group_rows=32, key_types=[pa.string(), pa.int64()])
    t1, t2, c1, c2, m = _times(5)
    for instant, prefix in ((t1, "a"), (t2, "b")):
        keys = pa.table({"key_0": pa.array([f"{prefix}{i:04d}" for i in range(200)]),
                         "key_1": pa.array(range(200), pa.int64())})
        index.write(instant, index.entries(keys, segment=prefix, file=pa.array([f"{prefix}.parquet"] * 200),
                                           position=pa.array(range(200), pa.int64()), instant=instant))
    completed = {t1: c1, t2: c2}
    index.compact(m, c2, completed, set(), pa.array(["a.parquet", "b.parquet"]))
    wanted = pa.table({"key_0": ["a0005", "b0150"], "key_1": pa.array([5, 150], pa.int64())})
    found = index.lookup(wanted, completed, c2, {m})
    assert sorted(zip(found["key_0"].to_pylist(), found["file"].to_pylist(), strict=True)) == [
        ("a0005", "a.parquet"), ("b0150", "b.parquet")]


# -- the record index of a table, through txn ------------------------------------------------------

PROPERTIES = {"metadata.compact_after": "2", "record_index.shards": "8"}


def test_a_table_lookup_lists_only_the_shards_of_its_keys_and_prunes_base_row_groups(
    memory_uri: str, row_group_reads: list[tuple[Ranges, list[int]]]
) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="id", properties=PROPERTIES)
    table.append(rows(range(40_000)))
    table.append(rows(range(40_000, 40_010)))  # the second commit triggers a metadata compaction
    bases = [k for k in storage_of(memory_uri).list("_metadata/record_index", recursive=True)
             if k.endswith(".base.arrow")]
    assert len(bases) == 8, "every shard was folded into a base"

    counting = CountingStorage(storage_of(memory_uri))
    reader = table_on(memory_uri, counting)  # type: ignore[arg-type]
    wanted = [17, 33_333, 40_005]
    shards = set(shard_of([pa.array(wanted, pa.int64())], 8).tolist())
    found = reader.lookup(wanted)
    assert sorted(found["id"].to_pylist()) == wanted
    index_calls = [(op, p) for op, p in counting.calls if p.startswith("_metadata/record_index")]
    assert {p for op, p in index_calls if op == "list"} == {
        "_metadata/record_index", *(shard_folder(s) for s in shards)}
    assert all(p.startswith(tuple(shard_folder(s) for s in shards)) or p.endswith(".log.arrow")
               for op, p in index_calls if op != "list")
    assert row_group_reads, "the keys in the base were read from it"
    for ranges, groups in row_group_reads:
        assert len(ranges) >= 2
        assert groups == _groups_holding(ranges, wanted, 8)
        assert len(groups) < len(ranges)


def test_the_index_stays_small_and_exact_through_compactions_and_cleaning(memory_uri: str) -> None:
    table = txn.create_table(memory_uri, SCHEMA, record_key="id", properties={
        **PROPERTIES, "metadata.retain_commits": "2", "record_index.shards": "4"})
    expected: set[int] = set()
    for i in range(16):
        batch = list(range(i * 10, i * 10 + 10))
        if i % 3 == 2:
            upserted = batch[:5] + [b - 10 for b in batch[:5]]
            table.upsert(rows(upserted))
            expected |= set(upserted)
        else:
            table.append(rows(batch))
            expected |= set(batch)
        if i % 4 == 3:
            gone = sorted(expected)[::7]
            table.delete(keys=gone)
            expected -= set(gone)
    storage = storage_of(memory_uri)
    for shard in range(4):
        assert len(storage.list(shard_folder(shard))) <= 6, "cleaning keeps each shard small"
    probe = list(range(-5, 170))
    assert sorted(table.lookup(probe)["id"].to_pylist()) == sorted(expected)
    assert sorted(table.to_arrow()["id"].to_pylist()) == sorted(expected)
    assert table.validate().ok


def test_a_crashed_compaction_leaves_no_record_index_base_behind(memory_uri: str, clock: FakeClock) -> None:
    properties = {"metadata.compact_after": "2", "metadata.retain_commits": "2", "record_index.shards": "4"}
    txn.create_table(memory_uri, SCHEMA, record_key="id", properties=properties, clock=clock).append(
        rows(range(100)))
    faulty = Faulty(storage_of(memory_uri))
    faulty.arm(2, ops={"put_if_absent"}, crash=True,
               match=lambda p: p.startswith("_metadata/record_index/") and p.endswith(".base.arrow"))
    table_on(memory_uri, faulty, clock=clock).append(rows(range(100, 200)))  # dies compacting
    assert faulty.dead

    clock.advance(10 * 60_000)
    survivor = txn.open_table(memory_uri, clock=clock)
    for i in range(6):
        survivor.append(rows(range(200 + 10 * i, 210 + 10 * i)))
    assert survivor.validate().ok and survivor.snapshot().count() == 260

    metadata_timeline = timeline.Timeline(timeline.PrefixedStorage(storage_of(memory_uri), "_metadata"))
    aborted = [i.time for i in metadata_timeline.history()
               if i.action == "compaction" and not i.is_completed]
    assert aborted, "the crashed compaction was retired"
    leftovers = [k for k in storage_of(memory_uri).list("_metadata", recursive=True)
                 if k.endswith(".base.arrow") and any(k.rsplit("/", 1)[-1].startswith(t) for t in aborted)]
    assert leftovers == []
