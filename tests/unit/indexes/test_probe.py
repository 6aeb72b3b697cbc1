"""The record index's probe: one vectorised question over every run filter and log a handle knows.

It must never say "absent" for a key a run or log holds (a lookup would miss a live row, and a
keyed append would insert a duplicate); it may say "present" for an absent key, which only costs
a read. And it is what keeps a keyed append from opening runs and logs: absent keys open none.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import txn
from metatxn import timeline
from metatxn.indexes import RecordIndex
from metatxn.indexes._index_runs import bloom_filter, may_contain
from metatxn.indexes._keys import key_hash
from metatxn.indexes._probe import ADMITS_ALL, FilterBank, LogKeys, admitted, held, probe_runs
from tests.unit.txn.helpers import CountingStorage

_roots = itertools.count()


def _hashes(keys: list[int]) -> np.ndarray:
    return key_hash([pa.array(keys, pa.int64())])


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.lists(st.integers(-10**12, 10**12), max_size=300), min_size=1, max_size=6),
       asked=st.lists(st.integers(-10**12, 10**12), min_size=1, max_size=200))
def test_the_bank_answers_as_each_runs_own_filter(runs: list[list[int]], asked: list[int]) -> None:
    """Filters of different sizes in one buffer: every (key, run) answer is the run's own."""
    bank = FilterBank()
    for i, keys in enumerate(runs):
        bank.slots([(f"r{i}", bloom_filter(_hashes(keys)))])
    every = list(itertools.chain.from_iterable(runs))
    wanted = asked + every[:50]
    hashes = _hashes(wanted)
    for i, keys in enumerate(runs):
        buffer, (slot,) = bank.slots([(f"r{i}", None)])  # known: the filter given first stays
        got = admitted(buffer, hashes, np.full(len(hashes), slot.offset), np.full(len(hashes), slot.bits))
        expected = may_contain(bloom_filter(_hashes(keys)), hashes)
        assert got.tolist() == expected.tolist()
        assert got[[k in set(keys) for k in wanted]].all(), "no false negative"


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.lists(st.integers(0, 5000), max_size=200), min_size=1, max_size=5),
       asked=st.lists(st.integers(0, 6000), min_size=1, max_size=100), data=st.data())
def test_probe_keeps_every_pair_whose_run_holds_the_key(runs: list[list[int]], asked: list[int],
                                                         data: st.DataObject) -> None:
    """Ranges and filters together: a pair whose run holds its key is always admitted; a pair
    whose key is outside the run's range never is."""
    bank = FilterBank()
    buffer, slots = bank.slots([(f"r{i}", bloom_filter(_hashes(keys)) if keys else b"")
                                for i, keys in enumerate(runs)])
    ranges = [(min(keys), max(keys)) if keys else None for keys in runs]
    # Two "nodes": the asked keys split at a drawn point, each with a drawn subset of the runs.
    cut = data.draw(st.integers(0, len(asked)))
    some_runs = st.lists(st.sampled_from(range(len(runs))), unique=True)
    chains = [(np.arange(0, cut, dtype=np.int64), data.draw(some_runs)),
              (np.arange(cut, len(asked), dtype=np.int64), data.draw(some_runs))]
    pairs = probe_runs(buffer, _hashes(asked), np.array(asked, dtype=np.int64), chains, slots, ranges)
    admitted = set(zip(pairs.keys.tolist(), pairs.runs.tolist(), strict=True))
    for rows, chain in chains:
        for row in rows.tolist():
            for run in chain:
                if asked[row] in runs[run]:
                    assert (row, run) in admitted
                low_high = ranges[run]
                if low_high is None or not low_high[0] <= asked[row] <= low_high[1]:
                    assert (row, run) not in admitted
    assert all(run in chains[0][1] if row < cut else run in chains[1][1] for row, run in admitted)


def test_a_run_without_a_filter_admits_every_key_and_an_empty_one_none() -> None:
    buffer, (old, empty) = FilterBank().slots([("old", None), ("empty", b"")])
    assert old.bits == ADMITS_ALL and empty.bits == 0
    hashes = _hashes([1, 2, 3])
    assert admitted(buffer, hashes, np.zeros(3, np.int64), np.full(3, old.bits)).all()
    assert not admitted(buffer, hashes, np.zeros(3, np.int64), np.full(3, empty.bits)).any()


def test_the_bank_drops_filters_of_runs_no_longer_asked_about() -> None:
    bank = FilterBank()
    keys = list(range(0, 100_000, 7))
    for i in range(8):
        bank.slots([(f"r{i}", bloom_filter(_hashes([k + i for k in keys])))])
    old_buffer, (before,) = bank.slots([("r7", None)])
    bank.keep_only({"r7"})
    buffer, (after,) = bank.slots([("r7", None)])
    assert after.offset < before.offset, "rebuilt with the live filter first"
    hashes = _hashes([k + 7 for k in keys])
    for taken, slot in ((buffer, after), (old_buffer, before)):  # each buffer with its own slots
        count = len(hashes)
        assert admitted(taken, hashes, np.full(count, slot.offset), np.full(count, slot.bits)).all()


def test_log_keys_answer_exactly_and_stay_within_their_budget() -> None:
    logs = LogKeys(budget=1000)
    logs.put("a", _hashes(list(range(600))))
    kept = logs.get("a")
    assert kept is not None
    assert held(kept, _hashes([5, 599, 600, -1])).tolist() == [True, True, False, False]
    logs.put("b", _hashes(list(range(600, 1200))))  # over budget: the oldest goes
    assert logs.get("a") is None and logs.get("b") is not None
    logs.put("huge", _hashes(list(range(2000))))  # larger than the budget alone: never kept
    assert logs.get("huge") is None
    assert held(np.zeros(0, np.uint64), _hashes([1])).tolist() == [False]


def _entries(index: RecordIndex, keys: np.ndarray, instant: str) -> pa.Table:
    table = pa.table({"key_0": pa.array(keys, pa.int64())})
    return index.entries(table, segment="0", file=pa.array(["a.parquet"] * len(keys)),
                         position=pa.array(np.arange(len(keys), dtype=np.int64)), instant=instant)


def test_absent_keys_open_no_run_and_no_log(memory_uri: str) -> None:
    """What a keyed append of new keys costs: after the filters and logs are known, a lookup of
    keys above everything written reads no index file at all; a present key reads one run."""
    storage = CountingStorage(timeline.MemoryStorage(f"{memory_uri.removeprefix('memory://')}/p{next(_roots)}"))
    index = RecordIndex(storage, [pa.int64()], 1, row_group_rows=64)
    times = [f"2026010100{i:07d}" for i in range(20)]
    index.write(times[0], _entries(index, np.arange(0, 20_000, 2), times[0]))
    index.compact(times[1], times[2], {times[0]: times[2]}, set(), pa.array(["a.parquet"]))
    completed = {times[0]: times[2]}
    for i in range(3, 8):  # logs above the run
        index.write(times[i], _entries(index, np.arange(100_000 + 10 * i, 100_000 + 10 * i + 10), times[i]))
        completed[times[i]] = times[i]
    done = {times[1]}
    index.lookup(pa.table({"key_0": pa.array([1], pa.int64())}), completed, times[7], done)  # warm
    storage.calls.clear()
    absent = pa.table({"key_0": pa.array(np.arange(500_000, 500_100), pa.int64())})
    assert index.lookup(absent, completed, times[7], done).num_rows == 0
    assert [c for c in storage.calls if c[0] == "read"] == []
    odd = pa.table({"key_0": pa.array(np.arange(1, 2001, 20), pa.int64())})  # in range, absent
    assert index.lookup(odd, completed, times[7], done).num_rows == 0
    assert len([c for c in storage.calls if c[0] == "read"]) <= 3, "filter false positives only"
    storage.calls.clear()
    found = index.lookup(pa.table({"key_0": pa.array([4, 100_050], pa.int64())}), completed, times[7], done)
    assert sorted(found["key_0"].to_pylist()) == [4, 100_050]


def _keyed(uri: str) -> txn.Table:
    return txn.create_table(uri, pa.schema([("k", pa.int64()), ("v", pa.int64())]), record_key="k")


def test_a_fresh_handle_of_a_table_starts_with_what_another_handle_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run footers, open readers and filters are shared by the handles of one table in a
    process: a stateless job opening a handle per write does not read them again."""
    uri = f"file://{tmp_path}/t"
    table = _keyed(uri)
    table.append(pa.table({"k": np.arange(1000), "v": np.arange(1000)}))
    table.maintain()
    assert table.lookup(pa.table({"k": [5]})).num_rows == 1
    opened: list[str] = []
    original = RecordIndex._open

    def spy(self: RecordIndex, path: str) -> Any:
        opened.append(path)
        return original(self, path)

    monkeypatch.setattr(RecordIndex, "_open", spy)
    fresh = txn.open_table(uri)
    assert fresh.lookup(pa.table({"k": [5000, 6000]})).num_rows == 0
    assert opened == [], "the keys' absence is known from what the first handle read"
    assert fresh.lookup(pa.table({"k": [7]})).num_rows == 1


def test_a_table_created_again_at_the_same_location_never_sees_the_old_one(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/t"
    first = _keyed(uri)
    first.append(pa.table({"k": np.arange(100), "v": np.zeros(100, np.int64)}))
    first.maintain()
    assert first.lookup(pa.table({"k": [5]}))["k"].to_pylist() == [5]
    shutil.rmtree(tmp_path / "t")
    again = _keyed(uri)
    again.append(pa.table({"k": np.arange(50, 60), "v": np.ones(10, np.int64)}))
    again.maintain()
    assert txn.open_table(uri).lookup(pa.table({"k": [5, 55]}))["k"].to_pylist() == [55]
    with pytest.raises(txn.DuplicateKeyError):
        txn.open_table(uri).append(pa.table({"k": [55], "v": [2]}))
    txn.open_table(uri).append(pa.table({"k": [5], "v": [2]}))  # key 5 was the old table's only


def test_a_conflict_check_reads_a_concurrent_instants_log_only_for_keys_it_may_hold(memory_uri: str) -> None:
    storage = CountingStorage(timeline.MemoryStorage(f"{memory_uri.removeprefix('memory://')}/w{next(_roots)}"))
    index = RecordIndex(storage, [pa.int64()], 1, row_group_rows=64)
    bulk, small = "20260101000000001", "20260101000000002"
    index.write(bulk, _entries(index, np.arange(0, 100_000), bulk))  # seeds the log's hashes
    index.write(small, _entries(index, np.arange(200_000, 200_010), small))
    storage.calls.clear()
    ours = pa.table({"key_0": pa.array(np.arange(300_000, 300_100), pa.int64())})
    assert index.written_among(bulk, ours).num_rows == 0
    assert [c for c in storage.calls if c[0] == "read"] == [], "the bulk load's log is not read"
    clashing = pa.table({"key_0": pa.array([5, 300_000, 99_999], pa.int64())})
    assert sorted(index.written_among(bulk, clashing)["key_0"].to_pylist()) == [5, 99_999]
    assert index.written_among(small, clashing).num_rows == 0
    fresh = RecordIndex(storage, [pa.int64()], 1, row_group_rows=64)  # hashes not known: read once
    assert sorted(fresh.written_among(bulk, clashing)["key_0"].to_pylist()) == [5, 99_999]
    with pytest.raises(FileNotFoundError):
        index.written_among("20260101000000003", clashing)


def test_a_bulk_loads_log_is_searched_not_hashed_by_another_handle(memory_uri: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashing a million-entry log to skip it costs more than binary search in its sorted
    batches: a lookup that did not write it matches it directly, and finds what it holds."""
    monkeypatch.setattr("metatxn.indexes._record_index.LOG_HASHED_ROWS", 1000)
    storage = timeline.MemoryStorage(f"{memory_uri.removeprefix('memory://')}/b{next(_roots)}")
    bulk, done = "20260101000000001", "20260101000000002"
    RecordIndex(storage, [pa.int64()], 1).write(bulk, _entries(RecordIndex(storage, [pa.int64()], 1),
                                                                 np.arange(0, 5000, 2), bulk))
    reader = RecordIndex(storage, [pa.int64()], 1)
    found = reader.lookup(pa.table({"key_0": pa.array([4, 5, 4998], pa.int64())}), {bulk: done}, done, set())
    assert sorted(found["key_0"].to_pylist()) == [4, 4998]
    path = f"_metadata/record_index/{bulk}.log.arrow"
    assert reader._log_keys.get(path) is None and reader._log_keys.too_large(path)


def test_a_key_asked_twice_is_found_once(tmp_path: Path) -> None:
    """Found by the table machine: a lookup (or a delete by key) naming one key twice got its
    entry twice from the binary search, and a delete counted the row twice."""
    table = txn.create_table(f"file://{tmp_path}/t", pa.schema([("k", pa.int64()), ("v", pa.int64())]),
                             record_key="k",
                             properties={"metadata.compact_after": "1", "maintenance.mode": "manual"})
    table.append(pa.table({"k": np.arange(100), "v": np.arange(100)}))
    assert table.maintain().compaction is not None  # the keys now sit in a run
    table.append(pa.table({"k": [500, 501], "v": [0, 0]}))  # a log above the run
    assert sorted(table.lookup(pa.table({"k": [5, 5, 7]}))["k"].to_pylist()) == [5, 7]  # one run
    found = table.lookup(pa.table({"k": [5, 5, 500, 500, 7, 999]}))
    assert sorted(found["k"].to_pylist()) == [5, 7, 500]
    assert table.delete(keys=pa.table({"k": [6, 6, 8]})).rows_deleted == 2
