"""Sizing simulation of the record index's layout: shards, runs per tier, lookups, maintenance.

Tables of 10 M, 1 B and 50 B keys are too large to build on one machine, so this models them
with the layout rules the code uses, imported from the index package (``TierPolicy``: tiers,
merges, splits; ``Node``: the split rule), so the two cannot drift. What is measured rather
than modelled: the bytes per entry of a run file and of a log file, by encoding a sample with
the real encoders.

The model follows one shard node (all nodes of a table behave alike: keys are hashed) through
``--compactions`` metadata compactions that each fold ``metadata.compact_after`` commits of
``commit`` keys, spread over the table's nodes (Poisson arrivals per node):

* ``upsert``: every key written already exists (the table's size is steady); merges of upper
  runs keep every entry (no duplicates among random keys), a merge reaching the bottom run
  shrinks back to the node's live entries. Simulated until the node logged twice its size (a
  full cycle of its tiers, and of a split if churn triggers one), or ``--compactions``;
* ``append``: every key is new (the table grows): the node grows, and splits as the code
  splits it; the model then follows one of its two children. Simulated while the table doubles
  (or ``--compactions``).

Per scenario it reports the node count, entries per node, runs per node and their sizes per
tier, what a lookup of one key reads in its node, the maintenance bytes per commit (every byte
compaction writes, splits included) and the write amplification: bytes written by compaction
per byte of entries logged.

``--measure N`` also builds a real index of ``N`` int64 keys (64 shards, local disk, a temporary
folder), then 100 commits of 100 new keys with a metadata compaction every 10, and reports what
the code does: compaction time, bytes written by compaction per byte logged, lookups.

Run from the repository root::

    python -m bench.sim_record_index           # quick: fewer compactions per scenario
    python -m bench.sim_record_index --full    # the sizing table of design/record-index.md
    python -m bench.sim_record_index --measure 10000000
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from metatxn import timeline
from metatxn.indexes import RecordIndex
from metatxn.indexes._index_layout import DEFAULT_SHARD_MAX_ENTRIES, Node, TierPolicy
from metatxn.indexes._index_runs import encode_run

#: The table's creation shard count (``record_index.shards``'s default).
ROOTS = 64
#: Commits per metadata compaction (``metadata.compact_after``'s default).
COMPACT_AFTER = 10
#: The bloom filter's false-positive rate (10 bits per entry, 7 probes).
FILTER_FPR = 0.008
SCENARIOS = [(10_000_000, 1_000), (10_000_000, 10_000_000), (1_000_000_000, 1_000),
             (1_000_000_000, 10_000_000), (50_000_000_000, 1_000), (50_000_000_000, 10_000_000)]


@dataclass
class Outcome:
    keys: int
    commit: int
    workload: str
    nodes: int
    entries_per_node: float
    runs_mean: float
    runs_max: int
    tier_sizes: dict[int, float]
    logged: float = 0.0
    written: float = 0.0
    #: Entries written by compaction across the whole table (every node behaves like this one).
    table_written: float = 0.0
    splits: int = 0
    compactions: int = 0
    touched: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def write_amplification(self) -> float:
        return self.written / self.logged if self.logged else 0.0


def measured_bytes_per_entry(sample: int = 200_000) -> tuple[float, float]:
    """Bytes per entry of a run file and of a log file (int64 keys, 1,000 data files)."""
    rng = np.random.default_rng(7)
    keys = np.sort(rng.choice(sample * 50, sample, replace=False)).astype(np.int64)
    with tempfile.TemporaryDirectory() as root:
        index = RecordIndex(timeline.open_storage(f"file://{root}"), [pa.int64()], 1)
        files = pa.array([f"region=eu/part-{i % 1000:05d}-0123456789abcdef.parquet" for i in range(sample)])
        entries = index.entries(pa.table({"key_0": pa.array(keys)}), segment="12",
                                file=files, position=pa.array(np.arange(sample)),
                                instant="20260101000000000")
        run = encode_run(entries, index.hashes(entries), "key_0", 1024)
        index.write("20260101000000000", entries)
        log = index.storage.read(index.logs_of("20260101000000000")[0])
    return len(run) / sample, len(log) / sample


def node_count(keys: int, policy: TierPolicy) -> int:
    """The nodes a table of ``keys`` keys has: splits double a node that outgrew the limit."""
    count = ROOTS
    while keys / count > policy.shard_max_entries:
        count *= 2
    return count


def simulate(keys: int, commit: int, workload: str, compactions: int, policy: TierPolicy,
             rng: np.random.Generator) -> Outcome:
    count = node_count(keys, policy)
    live = keys / count
    chain: list[float] = [live]  # the node's runs, bottom first: entries each
    arrivals_per_compaction = commit * COMPACT_AFTER
    runs_seen: list[int] = []
    tiers: dict[int, list[float]] = {}
    outcome = Outcome(keys, commit, workload, count, live, 0.0, 0, {})
    for _ in range(compactions):
        rate = arrivals_per_compaction / count
        arrived = float(rng.poisson(rate)) if rate < 1e9 else rate
        outcome.compactions += 1
        if workload == "upsert" and outcome.logged >= 2 * live:
            break  # a full cycle: every entry of the node was written twice over
        if arrived == 0:
            continue
        outcome.touched += 1
        outcome.logged += arrived
        if workload == "append":
            live += arrived
        sizes = [*chain, arrived]
        if policy.splits(int(sum(sizes))):
            outcome.written += live  # merged whole
            outcome.table_written += live * count
            if policy.splits_whole(int(live)):
                left, _ = Node(count, 0).children()  # follow one child: half the keys
                count, live = left.count, live / 2
                outcome.splits += 1
            chain = [live]
        else:
            merged = policy.merge_count([int(s) for s in sizes])
            if merged:
                size = live if merged == len(sizes) else sum(sizes[-merged:])
                chain = [*sizes[:-merged], size]
            else:
                chain = sizes
            outcome.written += chain[-1]
            outcome.table_written += chain[-1] * count
        runs_seen.append(len(chain))
        for size in chain:
            tiers.setdefault(policy.tier(int(size)), []).append(size)
    outcome.nodes = count
    outcome.entries_per_node = live
    outcome.runs_mean = float(np.mean(runs_seen)) if runs_seen else 1.0
    outcome.runs_max = max(runs_seen, default=1)
    outcome.tier_sizes = {tier: float(np.mean(sizes)) for tier, sizes in sorted(tiers.items())}
    # A lookup of one key in its node: footers are cached (runs never change), the run holding
    # the key is read (one batch), every other run only on a filter false positive, and the
    # node's batch of each log completed above its chain (at most ``compact_after`` of them).
    logs_with_entries = COMPACT_AFTER / 2 * (1 - math.exp(-commit / count))
    outcome.extra["reads_per_key"] = 1 + FILTER_FPR * max(outcome.runs_mean - 1, 0) + logs_with_entries
    return outcome


def _size(value: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def _bytes(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} B"


def report(outcomes: Sequence[Outcome], run_bytes: float, log_bytes: float) -> str:
    lines = [
        f"run file: {run_bytes:.1f} bytes/entry (filter included), log file: {log_bytes:.1f} bytes/entry; "
        f"roots {ROOTS}, compact_after {COMPACT_AFTER}, fanout {POLICY.fanout}, "
        f"tier 0 <= {POLICY.tier_entries} entries, shard_max_entries {POLICY.shard_max_entries:,}",
        "",
        "| keys | commit | workload | shards | entries/shard | runs/shard mean (max) | mean run size by tier "
        "| reads/key lookup | maintenance bytes/commit | write amplification | compactions (splits) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        per_commit = o.table_written * run_bytes / max(o.compactions * COMPACT_AFTER, 1)
        tiers = ", ".join(f"t{t}: {_size(s)}" for t, s in o.tier_sizes.items())
        lines.append(
            f"| {_size(o.keys)} | {_size(o.commit)} | {o.workload} | {o.nodes:,} "
            f"| {_size(o.entries_per_node)} "
            f"| {o.runs_mean:.1f} ({o.runs_max}) | {tiers} | {o.extra['reads_per_key']:.1f} "
            f"| {_bytes(per_commit)} | {o.write_amplification * run_bytes / log_bytes:.2f} "
            f"| {o.compactions:,} ({o.splits}) |")
    return "\n".join(lines)


POLICY = TierPolicy(shard_max_entries=DEFAULT_SHARD_MAX_ENTRIES)


def measure(keys: int, *, commits: int = 100, commit_keys: int = 100, repeats: int = 9) -> str:
    """Build a real index of ``keys`` keys and measure small commits' compactions and lookups."""
    rng = np.random.default_rng(3)
    clock = iter(f"{i:017d}" for i in range(1, 10**9))
    with tempfile.TemporaryDirectory() as root:
        storage = timeline.open_storage(f"file://{root}")
        index = RecordIndex(storage, [pa.int64()], ROOTS)
        completed: dict[str, str] = {}
        done: set[str] = set()
        files: list[str] = []

        def commit(values: npt.NDArray[np.int64]) -> int:
            instant = next(clock)
            files.append(f"part-{instant}.parquet")
            index.write(instant, index.entries(
                pa.table({"key_0": pa.array(values)}), segment="0",
                file=pa.array([files[-1]] * len(values)), position=pa.array(np.arange(len(values))),
                instant=instant))
            completed[instant] = next(clock)
            return sum(storage.size(p) for p in index.logs_of(instant))

        def compact() -> tuple[float, int]:
            compaction = next(clock)
            started = time.perf_counter()
            written = index.compact(compaction, max(completed.values()), completed, done, pa.array(files))
            elapsed = time.perf_counter() - started
            done.add(compaction)
            return elapsed, sum(storage.size(p) for p in written)

        commit(rng.permutation(keys).astype(np.int64))
        first, _ = compact()
        seconds, logged, written = [], 0, 0
        for i in range(commits):
            logged += commit(np.arange(keys + i * commit_keys, keys + (i + 1) * commit_keys, dtype=np.int64))
            if i % COMPACT_AFTER == COMPACT_AFTER - 1:
                elapsed, size = compact()
                seconds.append(elapsed)
                written += size
        bound = max(completed.values())
        total = keys + commits * commit_keys
        present: list[float] = []
        absent: list[float] = []
        for r in range(repeats):
            for found, wanted in ((present, rng.choice(total, 1000, replace=False)),
                                  (absent, np.arange(2 * total + r * 1000, 2 * total + (r + 1) * 1000))):
                started = time.perf_counter()
                index.lookup(pa.table({"key_0": pa.array(wanted.astype(np.int64))}), completed, bound, done)
                found.append(time.perf_counter() - started)
    return (f"measured, {keys:,} keys in {ROOTS} shards, local disk: first compaction {first:.2f} s; "
            f"{commits} commits of {commit_keys} new keys, a compaction every {COMPACT_AFTER}: compaction "
            f"median {float(np.median(seconds)):.3f} s, max {max(seconds):.3f} s; bytes written by "
            f"compaction / bytes logged {written / logged:.2f}; lookup of 1,000 keys (warm, median of "
            f"{repeats}): present {float(np.median(present)) * 1000:.1f} ms, absent "
            f"{float(np.median(absent)) * 1000:.1f} ms")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true",
                        help="a full cycle of every scenario (up to 10,000,000 compactions each; minutes)")
    parser.add_argument("--compactions", type=int, default=None, help="compactions simulated per scenario")
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument("--measure", type=int, default=None, metavar="KEYS",
                        help="also build a real index of KEYS keys and measure it")
    args = parser.parse_args(argv)
    compactions = args.compactions or (10_000_000 if args.full else 100_000)
    scenarios = SCENARIOS
    run_bytes, log_bytes = measured_bytes_per_entry(200_000 if args.full else 50_000)
    rng = np.random.default_rng(args.seed)
    outcomes = []
    for keys, commit in scenarios:
        outcomes.append(simulate(keys, commit, "upsert", compactions, POLICY, rng))
        # Appends: the window in which the table doubles (or as much of it as simulated).
        doubling = math.ceil(keys / (commit * COMPACT_AFTER))
        outcomes.append(simulate(keys, commit, "append", min(compactions, doubling), POLICY, rng))
    print(report(outcomes, run_bytes, log_bytes))
    if not args.full:
        print(f"\n(quick: at most {compactions:,} compactions per scenario; --full for full cycles)")
    if args.measure:
        print("\n" + measure(args.measure))
    return 0


if __name__ == "__main__":
    sys.exit(main())
