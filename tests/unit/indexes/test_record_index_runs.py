"""The record index as sorted runs per shard, merged by size tiers, with shards that split.

Whatever the sequence of writes (completed, left pending, rolled back), compactions (including
ones that die part way, with or without their files removed afterwards), splits and cleanings,
a lookup at any retained bound answers what a plain dictionary of the completed writes says.
And the layout rules that make it cheap: a lookup does not open a run its filter excludes,
bases of tables written before runs still read, and a split shard still reads the log files
that were written for its parent.
"""

from __future__ import annotations

import itertools
from collections.abc import Container, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metatxn import timeline
from metatxn.indexes import DoneCompactions, RecordIndex, key_hash, shard_of
from metatxn.indexes._index_layout import Node, RunFile, TierPolicy, chain, leaves, parse_run, run_name
from metatxn.indexes._index_runs import RANGES, bloom_filter, may_contain, run_batches
from metatxn.indexes._record_index import _Readers

FOLDER = "_metadata/record_index"
_roots = itertools.count()


class _Dying:
    """A storage whose ``put_if_absent`` fails once ``allowed`` of them succeeded (a process
    that dies part way through a compaction); everything else is forwarded."""

    def __init__(self, inner: timeline.Storage) -> None:
        self.inner = inner
        self.allowed: int | None = None

    @property
    def uri(self) -> str:
        return self.inner.uri

    def put_if_absent(self, path: str, data: bytes) -> None:
        if self.allowed is not None:
            if self.allowed == 0:
                raise _Died(path)
            self.allowed -= 1
        self.inner.put_if_absent(path, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _Died(Exception):
    pass


def _memory(name: str) -> timeline.MemoryStorage:
    return timeline.MemoryStorage(f"/metatxn-runs-{name}-{next(_roots)}")


@dataclass
class _Model:
    """What the completed writes say: per key, the writes in completion order."""

    #: key -> [(completion time, file or None for a tombstone)]
    history: dict[int, list[tuple[str, str | None]]] = field(default_factory=dict)
    #: file -> completion time of the overwrite that removed it
    dead_since: dict[str, str] = field(default_factory=dict)

    def at(self, bound: str) -> dict[int, str]:
        found = {}
        for key, writes in self.history.items():
            done = [(at, file) for at, file in writes if at <= bound]
            if done:
                file = done[-1][1]
                if file is not None and not (file in self.dead_since and self.dead_since[file] <= bound):
                    found[key] = file
        return found


def _key_table(index: RecordIndex, keys: list[int]) -> pa.Table:
    """Keys ``keys`` of ``index``'s kind: an int64, or a (string, int64) pair made from it."""
    if len(index.keys) == 1:
        return pa.table({"key_0": pa.array(keys, pa.int64())})
    return pa.table({"key_0": pa.array([f"k{k % 5}" for k in keys]), "key_1": pa.array(keys, pa.int64())})


def _live(index: RecordIndex, keys: list[int], completed: dict[str, str], bound: str,
          done: Container[str], dead: dict[str, str]) -> dict[int, str]:
    """What a reader at ``bound`` sees: entries that are no tombstone, in files live at bound."""
    found = index.lookup(_key_table(index, keys), completed, bound, done)
    ints = found[index.keys[-1]].to_pylist()
    assert len(set(ints)) == found.num_rows, "one entry per key"
    return {k: f for k, f, d in zip(ints, found["file"].to_pylist(), found["deleted"].to_pylist(),
                                    strict=True) if not d and not (f in dead and dead[f] <= bound)}


def _write(index: RecordIndex, instant: str, keys: list[int], file: str | None) -> None:
    count = len(keys)
    index.write(instant, index.entries(
        _key_table(index, keys),
        segment=pa.nulls(count, pa.string()) if file is None else "0",
        file=pa.array([file] * count, pa.string()),
        position=pa.nulls(count, pa.int64()) if file is None else pa.array(keys, pa.int64()),
        instant=instant, deleted=file is None))


_KEYS = st.lists(st.integers(0, 59), min_size=1, max_size=25, unique=True)
_STEP: st.SearchStrategy[tuple[str, list[int], str]] = st.one_of(
    st.tuples(st.just("write"), _KEYS, st.sampled_from(["complete", "complete", "complete", "pending",
                                                        "tombstone", "rollback"])),
    st.tuples(st.just("finish"), st.just([]), st.just("")),
    st.tuples(st.just("overwrite"), st.just([]), st.just("")),
    st.tuples(st.just("compact"), st.just([]), st.sampled_from(["ok", "ok", "dies", "dies-cleared"])),
    st.tuples(st.just("clean"), st.just([]), st.just("")),
    st.tuples(st.just("archive"), st.just([]), st.just("")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(_STEP, min_size=1, max_size=30), shards=st.sampled_from([1, 2, 3]),
       fanout=st.sampled_from([2, 3]), shard_max=st.sampled_from([16, 40, 10**6, 10**6]),
       composite=st.booleans(), data=st.data())
def test_any_history_of_writes_compactions_splits_and_cleaning_reads_like_the_model(
    steps: list[tuple[str, list[int], str]], shards: int, fanout: int, shard_max: int,
    composite: bool, data: st.DataObject,
) -> None:
    storage = _Dying(_memory("model"))
    key_types = [pa.string(), pa.int64()] if composite else [pa.int64()]
    index = RecordIndex(storage, key_types, shards, row_group_rows=4,
                        policy=TierPolicy(fanout=fanout, tier_entries=3, shard_max_entries=shard_max))
    clock = itertools.count(1)

    def now() -> str:
        return f"{next(clock):017d}"

    model = _Model()
    completed: dict[str, str] = {}
    done: set[str] = set()  # completed compactions on the active metadata timeline
    dead: set[str] = set()  # compactions that died, runs left, still on the active timeline
    pending: list[tuple[str, list[int], str | None]] = []
    files: list[str] = []
    retained_from = ""
    probe = list(range(-2, 62))

    def timeline_says() -> DoneCompactions:
        return DoneCompactions(frozenset(done), frozenset(dead))

    for kind, keys, how in steps:
        if kind == "write":
            instant = now()
            file = None if how == "tombstone" else f"f{instant}.parquet"
            _write(index, instant, keys, file)
            if how == "rollback":
                assert index.remove(instant)
            elif how == "pending":
                pending.append((instant, keys, file))
            else:
                pending.append((instant, keys, file))
                kind = "finish"
        if kind == "finish" and pending:
            # completes after any compaction that ran since it wrote: it is never folded early
            instant, keys, file = pending.pop(0)
            completed[instant] = now()
            for key in keys:
                model.history.setdefault(key, []).append((completed[instant], file))
            if file is not None:
                files.append(file)
        elif kind == "overwrite" and files:
            instant, at = now(), now()
            completed[instant] = at
            for file in files:
                model.dead_since.setdefault(file, at)
        elif kind == "compact" and completed:
            horizon = max(completed.values())
            compaction = now()
            live = pa.array([f for f in files if f not in model.dead_since], pa.string())
            if how == "ok":
                index.compact(compaction, horizon, completed, timeline_says(), live)
                done.add(compaction)
            else:
                storage.allowed = data.draw(st.integers(0, 3), label="puts before dying")
                try:
                    index.compact(compaction, horizon, completed, timeline_says(), live)
                    done.add(compaction)  # it wrote everything before its budget ran out
                except _Died:
                    if how == "dies-cleared":
                        index.remove_bases(compaction)
                    else:
                        dead.add(compaction)
                finally:
                    storage.allowed = None
        elif kind == "archive":
            # The metadata timeline archives every compaction but the newest completed one,
            # deleting the runs of dead ones first (MetadataTable.archive): archived ones still
            # count (DoneCompactions), so no run, however old, fences archival.
            for compaction in dead:
                index.remove_bases(compaction)
            dead.clear()
            done = {max(done)} if done else set()
        elif kind == "clean" and completed:
            oldest_needed = data.draw(st.sampled_from(sorted(completed.values())), label="oldest needed")
            if oldest_needed >= retained_from:
                doomed, _ = index.doomed(oldest_needed, {t: c for t, c in completed.items()
                                                         if c <= max(completed.values())}, timeline_says())
                for path in doomed:
                    storage.inner.delete(path)
                retained_from = oldest_needed
        if completed:
            bounds = [b for b in sorted(completed.values()) if b >= retained_from]
            bound = data.draw(st.sampled_from(bounds), label="bound")
            found = _live(index, probe, completed, bound, timeline_says(), model.dead_since)
            assert found == model.at(bound), (kind, how, bound)
    if completed:
        latest = max(completed.values())
        every = index.read_all(completed, latest, timeline_says())
        seen = {k: f for k, f, d in zip(every[index.keys[-1]].to_pylist(), every["file"].to_pylist(),
                                        every["deleted"].to_pylist(), strict=True)
                if not d and not (f in model.dead_since and model.dead_since[f] <= latest)}
        assert seen == model.at(latest)


def test_a_tombstone_in_an_upper_run_hides_the_entry_below_until_a_bottom_merge_drops_both() -> None:
    index = RecordIndex(_memory("upper"), [pa.int64()], 1, row_group_rows=4,
                        policy=TierPolicy(fanout=3, tier_entries=100))
    times = iter(_times(30))
    completed: dict[str, str] = {}
    done: set[str] = set()
    dead: dict[str, str] = {}

    def commit(keys: list[int], file: str | None) -> str:
        instant = next(times)
        _write(index, instant, keys, file)
        completed[instant] = next(times)
        return completed[instant]

    def compact(live: list[str]) -> list[str]:
        compaction = next(times)
        written = index.compact(compaction, max(completed.values()), completed, done, pa.array(live))
        done.add(compaction)
        return written

    commit(list(range(20)), "a.parquet")
    [bottom] = compact(["a.parquet"])
    commit([1, 2], None)
    commit([3], "b.parquet")
    dead["b.parquet"] = max(completed.values())  # an overwrite removed it: key 3 has no live row
    [upper] = compact(["a.parquet"])
    assert not parse_run(upper, FOLDER, 1).bottom  # type: ignore[union-attr]
    stored = ipc.open_file(pa.BufferReader(index.storage.read(upper))).read_all()
    assert sorted(stored["key_0"].to_pylist()) == [1, 2, 3], "an upper run keeps what hides entries below"
    expected = {k: "a.parquet" for k in range(20) if k not in (1, 2, 3)}
    latest = max(completed.values())
    assert _live(index, list(range(20)), completed, latest, done, dead) == expected
    for _ in range(3):  # fills the tier: the merge reaches the bottom run
        commit([50], "a.parquet")
        written = compact(["a.parquet"])
    assert [parse_run(p, FOLDER, 1).bottom for p in written] == [True]  # type: ignore[union-attr]
    stored = ipc.open_file(pa.BufferReader(index.storage.read(written[0]))).read_all()
    assert sorted(stored["key_0"].to_pylist()) == sorted([*expected, 50]), "dropped for good"
    assert bottom not in written


# -- runs: names, chains, tiers --------------------------------------------------------------------


def test_run_names_round_trip_and_older_bases_are_bottom_runs() -> None:
    m, low, high = "20260101000000001", "20260101000000002", "20260101000000003"
    upper = f"{FOLDER}/0003/0067.128/{run_name(m, low, high, 12)}"
    assert parse_run(upper, FOLDER, 64) == RunFile(upper, Node(128, 67), m, low, high, 12)
    bottom = f"{FOLDER}/0003/{m}_{high}.base.arrow"  # the name every older base has
    assert parse_run(bottom, FOLDER, 64) == RunFile(bottom, Node(64, 3), m, "", high, None)
    assert run_name(m, "", high, 5) == f"{m}_{high}.base.arrow"
    for other in (f"{FOLDER}/{m}.log.arrow", f"{FOLDER}/0003/0066.128/{run_name(m, low, high, 1)}",
                  f"{FOLDER}/0003/0003.64/{run_name(m, low, high, 1)}", f"{FOLDER}/0003/x.arrow"):
        assert parse_run(other, FOLDER, 64) is None, other


def _run(node: Node, compaction: int, low: int, high: int) -> RunFile:
    return RunFile(f"{compaction}-{low}-{high}", node, f"{compaction:017d}",
                   "" if low == 0 else f"{low:017d}", f"{high:017d}", 1)


def test_a_chain_takes_the_largest_usable_run_at_each_step() -> None:
    root = Node(1, 0)
    runs = [_run(root, 1, 0, 5), _run(root, 2, 5, 7), _run(root, 3, 7, 9), _run(root, 4, 5, 9),
            _run(root, 5, 0, 3)]
    assert [r.path for r in chain(runs, f"{8:017d}")] == ["1-0-5", "2-5-7"]
    assert [r.path for r in chain(runs, f"{9:017d}")] == ["1-0-5", "4-5-9"]
    assert [r.path for r in chain(runs, f"{4:017d}")] == ["5-0-3"]
    assert chain(runs, f"{2:017d}") == []


def test_keys_resolve_to_the_deepest_split_node_even_after_its_parents_were_cleaned() -> None:
    left, right = Node(2, 0).children()
    runs = {left: [_run(left, 3, 0, 4)], right: [_run(right, 3, 0, 4)],
            Node(2, 1): [_run(Node(2, 1), 1, 0, 2)]}
    assert set(leaves(runs, [0, 1], 2, f"{4:017d}")) == {left, right, Node(2, 1)}
    assert set(leaves(runs, [0, 1], 2, f"{3:017d}")) == {Node(2, 0), Node(2, 1)}, (
        "a split is used only from its horizon on")
    deeper = left.children()
    runs.update({d: [_run(d, 6, 0, 8)] for d in deeper})
    del runs[left]  # cleaned: its children serve every retained bound
    assert set(leaves(runs, [0], 2, f"{9:017d}")) == {*deeper, right}


def test_split_children_partition_their_parent_for_any_shard_count() -> None:
    hashes = key_hash([pa.array(np.arange(-5000, 5000, dtype=np.int64))])
    for count in (1, 3, 5, 64):
        for shard in range(count):
            mine = hashes[hashes % np.uint64(count) == np.uint64(shard)]
            below = set((mine % np.uint64(2 * count)).tolist())
            assert below <= {shard, shard + count}


def test_the_tier_policy_keeps_few_runs_and_rewrites_each_entry_about_once_per_tier() -> None:
    policy = TierPolicy(fanout=4, tier_entries=100, shard_max_entries=10**9)
    sizes: list[int] = []
    written = 0
    for _ in range(2000):
        sizes.append(100)
        count = policy.merge_count(sizes)
        if count:
            sizes[-count:] = [sum(sizes[-count:])]
        written += sizes[-1]
        tiers = [policy.tier(s) for s in sizes]
        assert tiers == sorted(tiers, reverse=True), "bigger runs sit below smaller ones"
        assert all(tiers.count(t) < 4 for t in set(tiers)), "fewer than fanout runs per tier"
    logged = 2000 * 100
    assert sum(sizes) == logged
    assert written / logged <= policy.tier(logged) + 1, "write amplification: about one rewrite per tier"
    big = policy.merge_count([100_000, 100, 100, 5_000_000])
    assert big == 4, "a run bigger than those below it absorbs them"


def test_bloom_filters_admit_every_key_they_hold_and_few_others() -> None:
    held = key_hash([pa.array(np.arange(0, 20_000, 2, dtype=np.int64))])
    others = key_hash([pa.array(np.arange(1, 20_001, 2, dtype=np.int64))])
    bloom = bloom_filter(held)
    assert may_contain(bloom, held).all()
    assert may_contain(bloom, others).mean() < 0.03
    assert not may_contain(bloom_filter(held[:0]), others[:100]).any()


# -- what a lookup opens ---------------------------------------------------------------------------


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every index file a RecordIndex opens for reading: to read a run's entries (its open
    reader may be kept from an earlier lookup: each read counts), or anything else."""
    paths: list[str] = []
    original, reading = RecordIndex._open, _Readers.open

    def spy(self: RecordIndex, path: str) -> Any:
        if parse_run(path, FOLDER, 1) is None:
            paths.append(path)
        return original(self, path)

    def spy_reading(self: _Readers, path: str) -> Any:
        paths.append(path)
        return reading(self, path)

    monkeypatch.setattr(RecordIndex, "_open", spy)
    monkeypatch.setattr(_Readers, "open", spy_reading)
    yield paths


def _times(count: int) -> list[str]:
    return [f"2026010100{i:07d}" for i in range(1, count + 1)]


def test_a_lookup_does_not_open_runs_whose_filter_excludes_its_keys(opened: list[str]) -> None:
    index = RecordIndex(_memory("filter"), [pa.int64()], 1, row_group_rows=16,
                        policy=TierPolicy(fanout=8, tier_entries=10_000))
    times = iter(_times(40))
    completed: dict[str, str] = {}
    done: set[str] = set()
    for first in (0, 1000, 2000, 3000):  # one bottom run, then three upper runs
        instant = next(times)
        _write(index, instant, list(range(first, first + 200)), "f.parquet")
        completed[instant] = next(times)
        compaction = next(times)
        index.compact(compaction, completed[instant], completed, done, pa.array(["f.parquet"]))
        done.add(compaction)
    bound = max(completed.values())
    runs = [k for k in index.storage.list(FOLDER, recursive=True) if parse_run(k, FOLDER, 1)]
    assert len(runs) == 4 and sum(parse_run(k, FOLDER, 1).bottom for k in runs) == 1  # type: ignore[union-attr]

    def lookup(keys: list[int]) -> list[int]:
        found = index.lookup(pa.table({"key_0": pa.array(keys, pa.int64())}), completed, bound, done)
        return sorted(found["key_0"].to_pylist())

    assert lookup([5, 2005]) == [5, 2005]  # reads the footers of every run once
    opened.clear()
    assert lookup([7, 2007]) == [7, 2007]
    third_low = completed[_times(40)[3]]  # the run of keys 2000..2199 starts where the second ended
    assert sorted(opened) == sorted(p for p in runs if (run := parse_run(p, FOLDER, 1)) is not None
                                    and run.low in ("", third_low)), "only the runs holding the keys"
    opened.clear()
    assert lookup([500, 1500, 2500]) == [] and opened == [], "no run can hold these keys"


# -- tables written before runs --------------------------------------------------------------------


def _old_base(index: RecordIndex, path: str, entries: pa.Table, batch_rows: int) -> None:
    """A base as written before runs: no filter and no entry count in its schema metadata."""
    entries = entries.sort_by("key_0").combine_chunks()
    for name in ("segment", "file", "instant"):
        at = entries.schema.get_field_index(name)
        entries = entries.set_column(at, name, entries[name].dictionary_encode())
    starts = list(range(0, entries.num_rows, batch_rows))
    ranges = pa.table({"low": entries["key_0"].take(pa.array(starts, pa.int64())),
                       "high": entries["key_0"].take(pa.array(
                           [min(s + batch_rows, entries.num_rows) - 1 for s in starts], pa.int64()))})
    buffer = pa.BufferOutputStream()
    with ipc.new_stream(buffer, ranges.schema) as writer:
        writer.write_table(ranges)
    schema = entries.schema.with_metadata({RANGES: buffer.getvalue().to_pybytes()})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        writer.write_table(entries.replace_schema_metadata(schema.metadata), max_chunksize=batch_rows)
    index.storage.put_if_absent(path, bytes(sink.getvalue()))


def _old_log(index: RecordIndex, instant: str, keys: list[int], file: str) -> None:
    """A log file as written before shards split: no shard count in its schema metadata."""
    entries = index.entries(pa.table({"key_0": pa.array(keys, pa.int64())}), segment="0",
                            file=pa.array([file] * len(keys)), position=pa.array(keys, pa.int64()),
                            instant=instant)
    parts = index.split(entries)
    table = pa.concat_tables([parts[s] for s in sorted(parts)])
    schema = table.schema.with_metadata({b"metatxn.batch_shards": str(sorted(parts)).encode()})
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        for shard in sorted(parts):
            writer.write_table(parts[shard].replace_schema_metadata(schema.metadata))
    index.storage.put_if_absent(f"{FOLDER}/{instant}.log.arrow", bytes(sink.getvalue()))


def test_a_table_written_before_runs_reads_and_compacts_on_top_of_its_bases() -> None:
    index = RecordIndex(_memory("old"), [pa.int64()], 2, row_group_rows=8,
                        policy=TierPolicy(fanout=2, tier_entries=4, shard_max_entries=1000))
    t1, c1, m1, t2, c2, m2, t3, c3 = _times(8)
    keys = list(range(100))
    _old_log(index, t1, keys, "a.parquet")
    entries = index.split(index.entries(
        pa.table({"key_0": pa.array(keys, pa.int64())}), segment="0", file=pa.array(["a.parquet"] * 100),
        position=pa.array(keys, pa.int64()), instant=t1))
    for shard, part in entries.items():
        _old_base(index, f"{FOLDER}/{shard:04d}/{m1}_{c1}.base.arrow", part, 8)
    _old_log(index, t2, list(range(90, 110)), "b.parquet")
    completed = {t1: c1, t2: c2}
    done = {m1}
    probe = pa.table({"key_0": pa.array(range(-1, 111), pa.int64())})

    def files_at(bound: str) -> dict[int, str]:
        found = index.lookup(probe, completed, bound, done)
        return {k: f for k, f, d in zip(found["key_0"].to_pylist(), found["file"].to_pylist(),
                                        found["deleted"].to_pylist(), strict=True) if not d}

    expected = {**dict.fromkeys(range(90), "a.parquet"), **dict.fromkeys(range(90, 110), "b.parquet")}
    assert files_at(c2) == expected
    written = index.compact(m2, c2, completed, done, pa.array(["a.parquet", "b.parquet"]))
    done.add(m2)
    assert written and all(parse_run(p, FOLDER, 2) is not None for p in written)
    _write(index, t3, [0, 1], None)
    completed[t3] = c3
    assert files_at(c3) == {k: f for k, f in expected.items() if k > 1}
    assert files_at(c1) == dict.fromkeys(range(100), "a.parquet"), "the old base still serves its bound"
    doomed, _ = index.doomed(c3, completed, done)
    assert f"{FOLDER}/{t1}.log.arrow" in doomed and f"{FOLDER}/{t2}.log.arrow" in doomed
    assert not any(p.endswith(f"{m1}_{c1}.base.arrow") for p in doomed), (
        "the old bases are the bottom runs of the chains above them")
    for path in doomed:
        index.storage.delete(path)
    assert files_at(c3) == {k: f for k, f in expected.items() if k > 1}


# -- splits ----------------------------------------------------------------------------------------


def test_a_split_shard_reads_the_log_files_written_for_its_parent() -> None:
    storage = _memory("split")
    index = RecordIndex(storage, [pa.int64()], 2, row_group_rows=8,
                        policy=TierPolicy(fanout=4, tier_entries=64, shard_max_entries=100))
    t1, t2, c1, m1, c2, m2 = _times(6)
    _write(index, t1, list(range(400)), "a.parquet")
    _write(index, t2, list(range(350, 450)), "b.parquet")  # pending while the split runs
    completed = {t1: c1}
    written = index.compact(m1, c1, completed, set(), pa.array(["a.parquet", "b.parquet"]))
    done = {m1}
    nodes = {parse_run(p, FOLDER, 2).node for p in written}  # type: ignore[union-attr]
    assert all(n.count > 2 for n in nodes) and len(nodes) >= 4, "both shards split"
    completed[t2] = c2  # a log in the old layout, completed after the split's horizon
    probe = pa.table({"key_0": pa.array(range(460), pa.int64())})
    found = index.lookup(probe, completed, c2, done)
    assert dict(zip(found["key_0"].to_pylist(), found["file"].to_pylist(), strict=True)) == {
        **dict.fromkeys(range(350), "a.parquet"), **dict.fromkeys(range(350, 450), "b.parquet")}
    written = index.compact(m2, c2, completed, done, pa.array(["a.parquet", "b.parquet"]))
    done.add(m2)
    for path in written:
        run = parse_run(path, FOLDER, 2)
        assert run is not None
        keys = ipc.open_file(pa.BufferReader(storage.read(path))).read_all()["key_0"]
        assert set(shard_of([keys], run.node.count).tolist()) <= {run.node.shard}, (
            "the parent's batch was cut by the key hash")
    doomed, _ = index.doomed(c2, completed, done)
    for path in doomed:
        storage.delete(path)
    found = index.lookup(probe, completed, c2, done)
    assert found.num_rows == 450 and not any(k.endswith(f"{t2}.log.arrow") for k in
                                             storage.list(FOLDER)), "the log went once folded everywhere"


def test_a_lost_run_is_named_by_the_run_written_on_it() -> None:
    storage = _memory("lost")
    index = RecordIndex(storage, [pa.int64()], 1, row_group_rows=8,
                        policy=TierPolicy(fanout=8, tier_entries=10_000))
    times = iter(_times(12))
    completed: dict[str, str] = {}
    done: set[str] = set()
    written = []
    for first in (0, 100):
        instant = next(times)
        _write(index, instant, list(range(first, first + 50)), "f.parquet")
        completed[instant] = next(times)
        compaction = next(times)
        written += index.compact(compaction, completed[instant], completed, done, pa.array(["f.parquet"]))
        done.add(compaction)
    bottom, _upper = written
    storage.delete(bottom)
    with pytest.raises(timeline.CorruptMetadataError, match=bottom.rsplit("/", 1)[1]):
        index.lookup(pa.table({"key_0": pa.array([1], pa.int64())}), completed, max(completed.values()), done)
    assert [e.path for e in index.damaged_files(completed, done, lambda _: set())] == [bottom]


def test_a_run_whose_compaction_lost_its_completed_file_is_used_when_a_completed_run_sits_on_it() -> None:
    index = RecordIndex(_memory("adopted"), [pa.int64()], 1, row_group_rows=8,
                        policy=TierPolicy(fanout=8, tier_entries=10_000))
    times = iter(_times(12))
    completed: dict[str, str] = {}
    compactions = []
    for first in (0, 100):
        instant = next(times)
        _write(index, instant, list(range(first, first + 50)), "f.parquet")
        completed[instant] = next(times)
        compactions.append(next(times))
        index.compact(compactions[-1], completed[instant], completed, set(compactions[:-1]),
                      pa.array(["f.parquet"]))
    for log in index.storage.list(FOLDER):
        index.storage.delete(log)  # cleaned: only the runs hold the entries now
    done = {compactions[1]}  # the first compaction's completed file is gone
    found = index.lookup(pa.table({"key_0": pa.array([1, 120], pa.int64())}), completed,
                         max(completed.values()), done)
    assert sorted(found["key_0"].to_pylist()) == [1, 120]


@pytest.mark.parametrize("key_types", [[pa.int64()], [pa.string(), pa.int32()]])
def test_split_sorts_once_and_slices_whatever_the_shard_count(
    monkeypatch: pytest.MonkeyPatch, key_types: list[pa.DataType]
) -> None:
    import pyarrow.compute as pc

    index = RecordIndex(_memory("vector"), key_types, 64)
    count = 5000
    keys = {"key_0": pa.array(np.arange(count, 0, -1, dtype=np.int64))}
    if len(key_types) == 2:
        keys = {"key_0": pa.array([f"k{i % 97}" for i in range(count)]),
                "key_1": pa.array(np.arange(count, dtype=np.int32))}
    entries = index.entries(pa.table(keys), segment="0", file=pa.array(["f"] * count),
                            position=pa.array(np.arange(count)), instant="20260101000000001")
    calls: list[str] = []

    def counted(name: str) -> Any:
        original = getattr(pc, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return original(*args, **kwargs)
        return call

    for name in ("take", "sort_indices"):
        monkeypatch.setattr(pc, name, counted(name))
    parts = index.split(entries)
    assert len(parts) == 64 and calls.count("take") == 1 and calls.count("sort_indices") <= 1, calls
    hashes = key_hash([entries[name] for name in index.keys])
    for shard, part in parts.items():
        assert set(shard_of([part[name] for name in index.keys], 64).tolist()) == {shard}
        rows = list(zip(*(part[name].to_pylist() for name in index.keys), strict=True))
        assert rows == sorted(rows)
    assert sum(p.num_rows for p in parts.values()) == count == len(hashes)


def test_a_writer_logs_in_the_layout_its_lookups_saw_and_compaction_touches_only_nodes_written() -> None:
    storage = _memory("layout")
    index = RecordIndex(storage, [pa.int64()], 1, row_group_rows=8,
                        policy=TierPolicy(fanout=4, tier_entries=16, shard_max_entries=500))
    t1, c1, m1, t2, c2, m2 = _times(6)
    _write(index, t1, list(range(800)), "a.parquet")
    index.compact(m1, c1, {t1: c1}, set(), pa.array(["a.parquet"]))  # splits the one root
    completed, done = {t1: c1}, {m1}
    index.lookup(pa.table({"key_0": pa.array([1], pa.int64())}), completed, c1, done)
    _write(index, t2, [1], "b.parquet")  # one key: one node's batch
    [log] = index.logs_of(t2)
    schema = ipc.open_file(pa.BufferReader(storage.read(log))).schema
    assert schema.metadata[b"metatxn.batch_shard_counts"] == b"[2]"
    assert schema.metadata[b"metatxn.batch_shards"] == str(shard_of([pa.array([1])], 2).tolist()).encode()
    completed[t2] = c2
    written = index.compact(m2, c2, completed, done, pa.array(["a.parquet", "b.parquet"]))
    assert len(written) == 1, "the other node got no entry: it is not touched"


def test_runs_below_a_chain_top_count_through_the_run_written_on_them() -> None:
    index = RecordIndex(_memory("archived"), [pa.int64()], 2, row_group_rows=8,
                        policy=TierPolicy(fanout=8, tier_entries=10_000))
    times = iter(_times(40))
    completed: dict[str, str] = {}
    compactions: list[str] = []
    for first in range(0, 500, 100):
        instant = next(times)
        _write(index, instant, list(range(first, first + 100)), "f.parquet")
        completed[instant] = next(times)
        compactions.append(next(times))
        index.compact(compactions[-1], completed[instant], completed, set(compactions[:-1]),
                      pa.array(["f.parquet"]))
    # Only the top's compaction is known completed (the older ones' completed files are lost):
    # every run below the top is vouched for by the run written on it.
    archived = {compactions[-1]}
    found = index.lookup(pa.table({"key_0": pa.array(range(0, 500, 7), pa.int64())}), completed,
                         max(completed.values()), archived)
    assert sorted(found["key_0"].to_pylist()) == list(range(0, 500, 7))


def test_a_node_far_above_the_limit_splits_to_its_final_depth_in_one_compaction() -> None:
    """One whole merge, not one per level: 1,000 entries with a limit of 100 make 16 nodes
    (1,000 / 16 <= 100 < 1,000 / 8) in one compaction, and every key is still found."""
    storage = _memory("deep")
    index = RecordIndex(storage, [pa.int64()], 1, row_group_rows=8,
                        policy=TierPolicy(fanout=4, tier_entries=64, shard_max_entries=100))
    t1, c1, m1, t2, c2 = _times(5)
    _write(index, t1, list(range(1000)), "a.parquet")
    written = index.compact(m1, c1, {t1: c1}, set(), pa.array(["a.parquet"]))
    nodes = {parse_run(p, FOLDER, 1).node for p in written}  # type: ignore[union-attr]
    assert nodes == set(Node(1, 0).descendants(4)) and len(nodes) == 16
    for path in written:
        keys = ipc.open_file(pa.BufferReader(storage.read(path))).read_all()["key_0"]
        node = parse_run(path, FOLDER, 1).node  # type: ignore[union-attr]
        assert set(shard_of([keys], node.count).tolist()) <= {node.shard}
    _write(index, t2, [5, 2000], "b.parquet")  # logged for the root: cut by the key hash
    probe = pa.table({"key_0": pa.array(range(2001), pa.int64())})
    found = index.lookup(probe, {t1: c1, t2: c2}, c2, {m1})
    assert dict(zip(found["key_0"].to_pylist(), found["file"].to_pylist(), strict=True)) == {
        **dict.fromkeys(range(1000), "a.parquet"), 5: "b.parquet", 2000: "b.parquet"}
    policy = TierPolicy(shard_max_entries=100)
    assert [policy.split_levels(n) for n in (40, 51, 200, 201, 400, 401)] == [0, 1, 1, 2, 2, 3]


# -- the stored encoding ---------------------------------------------------------------------------


def _keys_of(key_types: list[pa.DataType], keys: list[int]) -> pa.Table:
    if len(key_types) == 1:
        return pa.table({"key_0": pa.array(keys, key_types[0])})
    first = [f"k{k % 5}" for k in keys] if key_types[0] == pa.string() else [k // 8 for k in keys]
    second = keys if key_types[0] == pa.string() else [k % 8 for k in keys]
    return pa.table({"key_0": pa.array(first, key_types[0]), "key_1": pa.array(second, key_types[1])})


def _write_keys(index: RecordIndex, instant: str, keys: list[int], file: str,
                key_types: list[pa.DataType]) -> None:
    index.write(instant, index.entries(_keys_of(key_types, keys), segment="0",
                                       file=pa.array([file] * len(keys)),
                                       position=pa.array(keys, pa.int64()), instant=instant))


@pytest.mark.parametrize("key_types", [[pa.int64()], [pa.string(), pa.int64()], [pa.int64(), pa.int32()]],
                         ids=["int64", "string-int64", "int64-int32"])
def test_uncompressed_runs_and_logs_written_before_the_stored_encoding_still_read(
        key_types: list[pa.DataType], monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs and logs written before they were LZ4-compressed with narrowed keys (the encoding
    of the same code with no codec and nothing narrowed) read, compact and mix with new ones."""
    import metatxn.indexes._index_runs as runs_module
    import metatxn.indexes._record_index as index_module

    index = RecordIndex(_memory("encoding"), key_types, 2, row_group_rows=8,
                        policy=TierPolicy(fanout=2, tier_entries=4, shard_max_entries=1000))
    t1, c1, m1, t2, c2, m2, t3, c3 = _times(8)
    completed = {t1: c1, t2: c2}
    with monkeypatch.context() as old:
        for module in (runs_module, index_module):
            old.setattr(module, "CODEC", None)
            old.setattr(module, "stored", lambda entries, payload=False: entries)
        _write_keys(index, t1, list(range(100)), "a.parquet", key_types)
        index.compact(m1, c1, {t1: c1}, {m1}, pa.array(["a.parquet"]))
        _write_keys(index, t2, list(range(90, 110)), "b.parquet", key_types)
    for key in index.storage.list(FOLDER, recursive=True):
        schema = ipc.open_file(pa.BufferReader(index.storage.read(key))).schema
        assert runs_module.logical_schema(schema) is None and all(
            not pa.types.is_dictionary(f.type) or f.type.index_type == pa.int32() for f in schema)
        assert all(f.type in (*key_types, pa.int64(), pa.bool_()) or pa.types.is_dictionary(f.type)
                   for f in schema), "written in the index's own types"
    done = {m1}
    probe = _keys_of(key_types, list(range(-1, 111)))

    def files_at(bound: str) -> dict[tuple[Any, ...], str]:
        found = index.lookup(probe, completed, bound, done)
        keys = zip(*(found[name].to_pylist() for name in index.keys), strict=True)
        return {key: f for key, f, d in zip(keys, found["file"].to_pylist(), found["deleted"].to_pylist(),
                                            strict=True) if not d}

    def expected(files: dict[int, str]) -> dict[tuple[Any, ...], str]:
        keys = _keys_of(key_types, list(files))
        return dict(zip(zip(*(keys[name].to_pylist() for name in index.keys), strict=True), files.values(),
                        strict=True))

    both = {**dict.fromkeys(range(90), "a.parquet"), **dict.fromkeys(range(90, 110), "b.parquet")}
    assert files_at(c2) == expected(both)
    assert index.read_all(completed, c2, done).num_rows == 110
    assert index.instant_entries(t2, range(2)).num_rows == 20
    written = index.compact(m2, c2, completed, done, pa.array(["a.parquet", "b.parquet"]))
    done.add(m2)
    for key in written:  # the new runs are in the stored encoding, on top of the old ones
        reader = ipc.open_file(pa.BufferReader(index.storage.read(key)))
        stored_key = reader.schema.field("key_0").type
        assert stored_key == pa.string() if key_types[0] == pa.string() else stored_key == pa.int8()
        repeated = pa.dictionary(pa.int32(), pa.string())
        assert run_batches(reader, list(range(reader.num_record_batches))).schema == pa.schema(
            [pa.field(f.name, repeated if f.name in ("segment", "file", "instant") else f.type)
             for f in index.schema])
    _write_keys(index, t3, [0, 1], "c.parquet", key_types)
    completed[t3] = c3
    assert files_at(c3) == expected({**both, 0: "c.parquet", 1: "c.parquet"})
    assert files_at(c1) == expected(dict.fromkeys(range(100), "a.parquet")), "the old runs still serve"
    new_log = ipc.open_file(pa.BufferReader(index.storage.read(f"{FOLDER}/{t3}.log.arrow")))
    assert runs_module.logical_schema(new_log.schema) is not None, "the new log is stored narrowed"


def test_filter_probes_are_the_double_hashing_formula() -> None:
    """The stepped probe positions equal ``(first + i * step) % bits``: filters written before
    and after read alike."""
    from metatxn.indexes._index_runs import _LOW32, _PROBES, _SALT, _probes
    from metatxn.indexes._keys import _mix

    drawn = np.random.default_rng(3).integers(0, 2**63, 5_000, dtype=np.int64)
    hashes = drawn.astype(np.uint64) * np.uint64(3)
    with np.errstate(over="ignore"):
        mixed = _mix(hashes ^ _SALT)
        step = (mixed >> np.uint64(32)) | np.uint64(1)
        rounds = np.arange(_PROBES, dtype=np.uint64)
        for bits in (64, 1_000_064, 2**33 + 64):
            expected = ((mixed & _LOW32)[:, None] + rounds[None, :] * step[:, None]) % np.uint64(bits)
            assert (_probes(hashes, bits) == expected).all()


@given(st.lists(st.tuples(st.integers(-3, 40), st.integers(0, 2**40), st.integers(0, 3)), max_size=60),
       st.booleans())
def test_key_order_sorts_by_group_then_keys(rows: list[tuple[int, int, int]], wide: bool) -> None:
    from metatxn.indexes._index_entries import key_order

    first = [a for a, _, _ in rows]
    second = [b if wide else b % 7 for _, b, _ in rows]
    groups = np.array([g for _, _, g in rows], dtype=np.int64)
    order = key_order([pa.array(first, pa.int64()), pa.array(second, pa.int64())], groups)
    order = np.arange(len(rows)) if order is None else order
    assert sorted(order.tolist()) == list(range(len(rows)))
    ordered = [(int(groups[i]), first[i], second[i]) for i in order]
    assert ordered == sorted(ordered)
    strings = key_order([pa.array([str(a) for a in first])], groups)
    strings = np.arange(len(rows)) if strings is None else strings
    assert [(int(groups[i]), str(first[i])) for i in strings] == sorted((int(g), str(a)) for a, g in
                                                                        zip(first, groups, strict=True))
