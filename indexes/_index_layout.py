"""The record index's layout rules, pure: shard nodes, run names, chains of runs, tiers, splits,
and ``IndexFiles``, a listing resolved at one bound.

Nothing here touches storage; ``_record_index`` applies these rules to listings, and
``bench/sim_record_index`` imports the same functions to model tables too large to build, so the
two cannot drift.

A *node* is the set of keys whose hash ``h`` has ``h % count == shard``. A table starts with one
node per shard of its creation count ``n`` (the *roots*); a node splits into ``(shard, 2 count)``
and ``(shard + count, 2 count)``: since ``h % (2 count)`` is ``h % count`` or that plus ``count``,
the two children partition their parent exactly, for any ``n``.

A *run* of a node holds the node's merged entries of the log files whose instants completed in
``(low, high]`` (``low == ""`` for a *bottom* run, which holds everything up to ``high``). A
reader at bound ``X`` uses the deepest node of its key that has a usable bottom run with
``high <= X`` (a root needs none), and in it the *chain*: runs from ``""`` upwards, each starting
where the previous ended, all with ``high <= X``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from ._index_entries import Positions
from ._index_logs import IndexLog
from ._keys import Hashes

#: Entries a shard may hold before a compaction splits it (``record_index.shard_max_entries``).
DEFAULT_SHARD_MAX_ENTRIES: Final = 4_000_000
#: Runs of one tier that a compaction merges into one run of the next tier.
DEFAULT_FANOUT: Final = 4
#: Runs of at most this many entries are all of tier 0.
DEFAULT_TIER_ENTRIES: Final = 64

_RUN = re.compile(r"^(?P<compaction>\d{17})_(?P<low>\d{17})_(?P<high>\d{17})\.(?P<entries>\d+)\.run\.arrow$",
                  re.ASCII)
_BOTTOM = re.compile(r"^(?P<compaction>\d{17})_(?P<high>\d{17})\.base\.arrow$", re.ASCII)
_NODE = re.compile(r"^(?P<shard>\d+)\.(?P<count>\d+)$", re.ASCII)


@dataclass(frozen=True, order=True)
class Node:
    """The keys whose hash ``h`` has ``h % count == shard``."""

    count: int
    shard: int

    def children(self) -> tuple[Node, Node]:
        """The two nodes a split makes: the next bit of the hash above ``count``."""
        return Node(self.count * 2, self.shard), Node(self.count * 2, self.shard + self.count)

    def descendants(self, levels: int) -> list[Node]:
        """The ``2**levels`` nodes ``levels`` splits make of this one (``children`` for 1)."""
        return [Node(self.count << levels, self.shard + i * self.count) for i in range(1 << levels)]

    def parent(self, roots: int) -> Node | None:
        """The node this one was split from (None for a root)."""
        if self.count <= roots:
            return None
        half = self.count // 2
        return Node(half, self.shard % half)

    def overlaps(self, shard: int, count: int) -> bool:
        """Whether the node shares keys with ``(shard, count)`` (counts are ``roots * 2**k``)."""
        common = min(self.count, count)
        return self.shard % common == shard % common


@dataclass(frozen=True)
class RunFile:
    """One run on storage. Bottom runs keep the name of the bases they generalise
    (``<M>_<H>.base.arrow``), so every base of an older table is a bottom run; upper runs are
    ``<M>_<low>_<high>.<entries>.run.arrow``."""

    path: str
    node: Node
    #: The metadata compaction that wrote it: it counts only once that compaction completed.
    compaction_time: str
    #: Completion times ``(low, high]`` of the log entries folded in ("" for a bottom run).
    low: str
    high: str
    #: Entries written (None for a bottom run: its footer says).
    entries: int | None

    @property
    def bottom(self) -> bool:
        return self.low == ""


def run_name(compaction_time: str, low: str, high: str, entries: int) -> str:
    """The file name of a run covering completion times ``(low, high]``."""
    if low == "":
        return f"{compaction_time}_{high}.base.arrow"
    return f"{compaction_time}_{low}_{high}.{entries}.run.arrow"


def node_folder(index_folder: str, node: Node, roots: int) -> str:
    """A root's folder is ``<shard:04d>``; a split node's is ``<root>/<shard:04d>.<count>``, in its
    root's folder, so that one listing of a root's folder shows its whole current layout."""
    root = f"{index_folder}/{node.shard % roots:04d}"
    return root if node.count == roots else f"{root}/{node.shard:04d}.{node.count}"


def parse_run(key: str, index_folder: str, roots: int) -> RunFile | None:
    """The run at ``key`` (None for any other file, e.g. a log file)."""
    if not key.startswith(index_folder + "/"):
        return None
    parts = key[len(index_folder) + 1:].split("/")
    if len(parts) == 2 and parts[0].isdigit():
        node = Node(roots, int(parts[0]))
    elif len(parts) == 3 and parts[0].isdigit() and (found := _NODE.match(parts[1])) is not None:
        node = Node(int(found.group("count")), int(found.group("shard")))
        if node.count <= roots or node.shard >= node.count or node.shard % roots != int(parts[0]):
            return None
    else:
        return None
    if (bottom := _BOTTOM.match(parts[-1])) is not None:
        return RunFile(key, node, bottom.group("compaction"), "", bottom.group("high"), None)
    if (run := _RUN.match(parts[-1])) is not None:
        return RunFile(key, node, run.group("compaction"), run.group("low"), run.group("high"),
                       int(run.group("entries")))
    return None


def chain(runs: Iterable[RunFile], bound_inclusive: str) -> list[RunFile]:
    """The runs a reader at ``bound_inclusive`` uses, bottom first: from ``""``, each time the
    run with the largest ``high <= bound`` that starts where the previous ended.

    Every run a completed compaction wrote is either a new run above its node's chain or the
    merge of adjacent runs of that chain, so the runs form a laminar family (two are nested or
    disjoint) and taking the largest each time reaches the highest top.
    """
    by_low: dict[str, RunFile] = {}
    for run in runs:
        if run.high <= bound_inclusive:
            held = by_low.get(run.low)
            if held is None or (run.high, run.compaction_time) > (held.high, held.compaction_time):
                by_low[run.low] = run
    found: list[RunFile] = []
    top = ""
    while (step := by_low.get(top)) is not None:
        found.append(step)
        top = step.high
    return found


def leaves(runs: Mapping[Node, Sequence[RunFile]], roots: Iterable[int], count: int,
           bound_inclusive: str) -> dict[Node, list[RunFile]]:
    """The node each key of ``roots`` resolves to at ``bound_inclusive``, with its chain.

    ``runs`` holds usable runs only (of completed compactions). A key uses the deepest node on
    its path that has a bottom run at or before the bound (a root needs none): both children of
    a split are written by the same compaction, and cleaning deletes a node only once its
    descendants serve every retained bound, so the nodes found partition every root even when
    the nodes between a root and them are gone.
    """
    split: set[Node] = set()
    for node, node_runs in runs.items():
        if any(r.bottom and r.high <= bound_inclusive for r in node_runs):
            parent = node.parent(count)
            while parent is not None and parent not in split:
                split.add(parent)
                parent = parent.parent(count)
    found: dict[Node, list[RunFile]] = {}
    pending = [Node(count, root) for root in roots]
    while pending:
        node = pending.pop()
        if node in split:
            pending.extend(node.children())
        else:
            found[node] = chain(runs.get(node, ()), bound_inclusive)
    return found


@dataclass(frozen=True)
class TierPolicy:
    """When a compaction merges runs, and when it splits a shard.

    A run's tier is how many times ``fanout`` its entries exceed ``tier_entries``. After a
    compaction adds a run on top of a node's chain, trailing runs are merged while the newest
    run sits above a smaller (lower-tier) one, or the top ``fanout`` runs share a tier, so a
    chain holds at most ``fanout - 1`` runs per tier, and an entry is rewritten about once per
    tier it climbs: the write amplification is the number of tiers, logarithmic in the shard's
    size.
    """

    fanout: int = DEFAULT_FANOUT
    tier_entries: int = DEFAULT_TIER_ENTRIES
    shard_max_entries: int = DEFAULT_SHARD_MAX_ENTRIES

    def tier(self, entries: int) -> int:
        tier, limit = 0, self.tier_entries
        while entries > limit:
            tier += 1
            limit *= self.fanout
        return tier

    def merge_count(self, sizes: Sequence[int]) -> int:
        """How many trailing runs of a chain (entries per run, bottom first, the new run last)
        to merge into one; 0 for none."""
        chain_sizes = list(sizes)
        merged = 1  # original runs in the (possibly merged) last run
        while len(chain_sizes) >= 2:
            top = self.tier(chain_sizes[-1])
            if self.tier(chain_sizes[-2]) < top:
                take = 2
            elif len(chain_sizes) >= self.fanout and all(
                    self.tier(size) == top for size in chain_sizes[-self.fanout:]):
                take = self.fanout
            else:
                break
            merged += take - 1
            chain_sizes[-take:] = [sum(chain_sizes[-take:])]
        return merged if merged > 1 else 0

    def splits(self, entries_estimate: int) -> bool:
        """Whether a node of about this many entries (runs and new entries, duplicates and
        tombstones counted) must be merged whole and considered for a split."""
        return entries_estimate > self.shard_max_entries

    def splits_whole(self, live_entries: int) -> bool:
        """Whether a node just merged whole (see :meth:`splits`) splits in two: a whole merge
        that finds at most half ``shard_max_entries`` live entries (churn, tombstones) keeps the
        node, so it is not merged whole again before it gained half a shard of entries. A child
        still above the limit splits again the next time a compaction touches it."""
        return live_entries > self.shard_max_entries // 2

    def split_levels(self, live_entries: int) -> int:
        """How many times a node just merged whole splits, all in the one compaction: 0 when
        it stays whole (:meth:`splits_whole`), else the fewest halvings that leave each
        descendant within ``shard_max_entries``. A table that starts as one shard and takes a
        large load so reaches its layout in one whole merge instead of one per level (a node
        of 10 M entries with the 4 M limit: four of 2.5 M at once, where halving once per
        compaction merged 10 M and then each 5 M half whole again)."""
        if not self.splits_whole(live_entries):
            return 0
        levels = 1
        while live_entries > self.shard_max_entries << levels:
            levels += 1
        return levels


@dataclass
class IndexFiles:
    """A listing of the index resolved at one bound: the shard nodes keys resolve to, with the
    chain of runs each uses, and the log files."""

    #: The table's creation shard count (the roots).
    roots: int
    #: Node -> its chain (bottom first; empty: no run yet). The nodes of one root partition it.
    leaves: dict[Node, list[RunFile]]
    #: Log files of instants completed at or before the bound, in completion order, each with
    #: its completion time.
    logs: list[tuple[IndexLog, str]]
    #: Every run that counts, by node (chains are made of these).
    usable: dict[Node, list[RunFile]] = field(default_factory=dict)
    _by_root: dict[int, list[Node]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node in sorted(self.leaves):
            self._by_root.setdefault(node.shard % self.roots, []).append(node)

    def top(self, node: Node) -> str:
        """Completion time up to which ``node``'s chain holds everything ("" without runs)."""
        runs = self.leaves.get(node)
        return runs[-1].high if runs else ""

    def ceiling(self, shard: int) -> str:
        """The highest top among the nodes of root ``shard``."""
        return max((self.top(node) for node in self._by_root.get(shard, ())), default="")

    def by_root(self) -> dict[int, list[Node]]:
        """The nodes of each root shard listed."""
        return {root: list(nodes) for root, nodes in self._by_root.items()}

    def nodes_of(self, shard: int, count: int) -> list[Node]:
        """The nodes sharing keys with log batch ``(shard, count)``."""
        return [node for node in self._by_root.get(shard % self.roots, ())
                if node.overlaps(shard, count)]


def locate(hashes: Hashes, nodes: Sequence[Node]) -> Positions:
    """For each key hash, its position in ``nodes`` (-1 for a key of none of them), where
    ``nodes`` partition the root shards they belong to."""
    found = np.full(len(hashes), -1, dtype=np.int64)
    for count in sorted({node.count for node in nodes}):
        at_level = sorted((node.shard, i) for i, node in enumerate(nodes) if node.count == count)
        shards = np.array([s for s, _ in at_level], dtype=np.int64)
        positions = np.array([i for _, i in at_level], dtype=np.int64)
        ids = (hashes % np.uint64(count)).astype(np.int64)
        where = np.minimum(np.searchsorted(shards, ids), len(shards) - 1)
        hit = (shards[where] == ids) & (found < 0)
        found[hit] = positions[where[hit]]
    return found
