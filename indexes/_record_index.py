"""The record-level index: record key -> (segment, data file, row position), hash-sharded.

Layout (see design/record-index.md): ``_metadata/record_index/`` holds the log files of data
instants, ``<T>.log.arrow`` (entries of every shard, one shard per batch), and one folder per
root shard, ``<shard:04d>/``, holding that shard's *runs*; a shard split by compaction keeps its
descendants' runs in sub-folders ``<shard:04d>/<s:04d>.<count>/``. A run holds the shard's
merged entries of the logs completed in ``(low, high]``: bottom runs (``low == ""``) are named
``<M>_<H>.base.arrow`` like the bases of older tables (which therefore read as bottom runs),
upper runs ``<M>_<low>_<high>.<entries>.run.arrow``. Layout rules: ``_index_layout``; the run
format: ``_index_runs``.

Entries. One row per key per instant that wrote it: the key columns (``key_0``, ``key_1``, ...),
``segment``, ``file``, ``position``, ``instant`` and ``deleted`` (a tombstone: the key was
deleted). Log files are written during the write phase, before the commit point, and like every
metadata block they count only once their instant completed on the data timeline.

Merge rule: for each key the entry of the largest instant time wins. This is a max, so merging is
commutative and associative. It is also the order in which the writes happened: two writes that
touch the same key never both commit unless one began after the other completed (optimistic
concurrency, checked under the table lock), so the later one has the larger instant time.

An entry that points into a data file no longer live (replaced by an overwrite) is stale; readers
drop it. A merge that includes a shard's bottom run drops it and tombstones for good: nothing
older can resurface. Any other merge keeps both, since they hide older entries below.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Container, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from metatxn.timeline import CorruptMetadataError, ObjectNotFoundError, Storage

from ._blocks import decoding, missing_block, read_block
from ._compactions import DoneCompactions
from ._index_entries import ENTRY_FIELDS as ENTRY_FIELDS
from ._index_entries import (
    Positions,
    integer_order,
    key_order,
    live_entries,
    order_codes,
    sorted_unique,
    spans,
)
from ._index_entries import index_schema as index_schema
from ._index_entries import key_names as key_names
from ._index_entries import matching as matching
from ._index_entries import merge_entries as merge_entries
from ._index_layout import (
    DEFAULT_SHARD_MAX_ENTRIES,
    IndexFiles,
    Node,
    RunFile,
    TierPolicy,
    leaves,
    locate,
    node_folder,
    parse_run,
    run_name,
)
from ._index_logs import LOG_BATCH_ROWS, SHARD_COUNTS, SHARDS, IndexLog, LogLayout, log_layout
from ._index_logs import parse_index_log as parse_index_log
from ._index_runs import (
    CODEC,
    REPEATED,
    FooterCache,
    RunFooter,
    as_logical,
    dictionary_encoded,
    encode_run,
    open_entries,
    run_batches,
    stored,
    stored_batches,
)
from ._keys import Hashes, key_hash
from ._layout import METADATA_FOLDER, RECORD_INDEX, shard_folder
from ._probe import LOG_HASHED_ROWS, FilterBank, LogKeys, held, probe_runs

INDEX_FOLDER: Final = f"{METADATA_FOLDER}/{RECORD_INDEX}"
_LOG_EXPECTED: Final = "a record-index log: an Arrow IPC file of index entries, one shard per batch"
_RUN_EXPECTED: Final = ("a record-index run: an Arrow IPC file of index entries sorted by key, "
                        "with its batches' key ranges")
_LOG_LAYOUTS_KEPT: Final = 4096


class RecordIndex:
    """The record-level index of one keyed table.

    ``shards`` is the table's creation shard count (the roots): what writes report and conflict
    checks compare stays in that layout whatever the splits. Compaction splits a shard whose
    entries pass ``shard_max_entries`` (table property ``record_index.shard_max_entries``);
    ``policy`` (tests, simulations) overrides the whole tier and split policy.
    """

    def __init__(self, storage: Storage, key_types: Sequence[pa.DataType], shards: int, *,
                 row_group_rows: int = 1024, shard_max_entries: int = DEFAULT_SHARD_MAX_ENTRIES,
                 policy: TierPolicy | None = None, shared_as: str | None = None) -> None:
        self.storage = storage
        self.shards = shards
        self.schema = index_schema(key_types)
        self.keys = key_names(len(key_types))
        self.policy = policy or TierPolicy(shard_max_entries=shard_max_entries)
        self._row_group_rows = row_group_rows
        provider = getattr(storage, "arrow_filesystem", None)
        self._filesystem = provider() if provider is not None else None
        #: Read the shards of a lookup on threads only where a read waits for the network: on
        #: local disk (memory-mapped) and in memory, threads cost more than they overlap
        #: (1,000 keys in 1M: 78 ms on 8 threads, 52 ms on one; 100 keys: 44 ms, 24 ms).
        self._parallel_reads = not (
            (self._filesystem is not None and isinstance(self._filesystem[0], pa.fs.LocalFileSystem))
            or storage.uri.startswith("memory://"))
        #: What was read of immutable index files (footers, open readers, filters, logs' key
        #: hashes and layouts): shared by every handle of the same table in this process
        #: (``shared_as``: its location and table id) so that a fresh handle starts warm.
        caches = _caches(shared_as, self._open)
        self._footers = caches.footers
        self._readers = caches.readers
        self._bank = caches.bank
        self._log_keys = caches.log_keys
        self._log_layouts = caches.log_layouts
        #: root shard -> (the completed compactions it was listed under, its files).
        self._listings: dict[int, tuple[Hashable, list[str]]] = {}
        #: Root shard -> the finest layout of its nodes seen (writers log in it; see write).
        self._layout: dict[int, list[Node]] = {}
        self._integer_key = len(self.keys) == 1 and pa.types.is_integer(self.schema.field(self.keys[0]).type)
        first_type = self.schema.field(self.keys[0]).type
        #: Whether runs' ranges of the first key column are compared as int64 in the probe.
        self._ranged = pa.types.is_integer(first_type) and first_type != pa.uint64()

    # -- building entries ----------------------------------------------------------------------

    def entries(self, keys: pa.Table, *, segment: str | pa.Array, file: pa.Array,
                position: pa.Array, instant: str, deleted: bool = False, encoded: bool = False) -> pa.Table:
        """Index entries for ``keys`` (columns ``key_0``...); scalars are repeated. ``encoded``:
        the repeated strings as dictionaries, a dictionary ``file`` kept as it is (what
        :meth:`write` stores: a million-row load then never builds a string per row)."""
        count = keys.num_rows
        columns: dict[str, Any] = {name: keys[name] for name in self.keys}
        # Repeated scalars without a Python list per row (1M entries: 0.09 s -> 0.02 s).
        columns["segment"] = (_repeated(segment, count, encoded) if isinstance(segment, str) else segment)
        columns["file"] = file
        columns["position"] = position
        columns["instant"] = _repeated(instant, count, encoded)
        columns["deleted"] = pa.repeat(pa.scalar(deleted, pa.bool_()), count)
        table = pa.table(columns)
        return self.encoded(table) if encoded else table.cast(self.schema)

    def encoded(self, entries: pa.Table) -> pa.Table:
        """``entries`` with the index's columns and types, the repeated strings as dictionaries
        (one chunk each; a column already dictionary-encoded is not decoded first)."""
        entries = entries.select(self.schema.names)
        for index, field in enumerate(self.schema):
            found = entries.schema.field(index).type
            if found != field.type and not (pa.types.is_dictionary(found) and field.name in REPEATED
                                            and found.value_type == field.type):
                entries = entries.set_column(index, field, entries.column(index).cast(field.type))
        return dictionary_encoded(entries)

    def hashes(self, keys: pa.Table) -> Hashes:
        """The key hash of each row (``keys.key_hash`` of the key columns)."""
        return key_hash([keys[name] for name in self.keys])

    def shard_ids(self, keys: pa.Table) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The shard of each key in the table's creation layout (what log files and conflict
        checks use)."""
        return (self.hashes(keys) % np.uint64(self.shards)).astype(np.int64)

    def _grouped(self, table: pa.Table, groups: Positions) -> tuple[pa.Table, Positions,
                                                                    list[tuple[int, int, int]]]:
        """``table`` sorted by (group, key) with one sort and one take; the permutation; and each
        group's ``(group, start, length)`` in it (slices of it are zero-copy)."""
        if self._integer_key:
            order = integer_order(table[self.keys[0]].to_numpy(), groups)
        else:
            sortable = table.select(self.keys).append_column("__group__", pa.array(groups))
            order = pc.sort_indices(sortable, sort_keys=[("__group__", "ascending")] + [
                (name, "ascending") for name in self.keys]).to_numpy()
        return table.take(pa.array(order)), order, spans(groups[order])

    def split(self, entries: pa.Table) -> dict[int, pa.Table]:
        """Entries by shard (creation layout), each sorted by key."""
        if entries.num_rows == 0:
            return {}
        ordered, _, spans = self._grouped(entries, self.shard_ids(entries))
        return {shard: ordered.slice(start, length) for shard, start, length in spans}

    # -- writing and undoing -------------------------------------------------------------------

    def write(self, instant_time: str, entries: pa.Table, *, part: int | None = None) -> dict[int, int]:
        """Write ``entries`` as one log file of ``instant_time``; return entries per shard
        (creation layout).

        Each batch holds the entries of one shard node, in the finest layout this object has
        seen (its lookups resolve the nodes of their keys' shards; a keyed write looks its keys
        up first), else of the root shard: a compaction folds a batch into every node it
        overlaps, so a coarser layout is always read correctly, at the price of advancing the
        nodes of the batch that got no entry. A writer that produces its entries in pieces
        (Spark tasks) writes one file per piece, each with its own ``part`` number.
        """
        name = f"{instant_time}.log.arrow" if part is None else f"{instant_time}.{part}.log.arrow"
        with _DRAFTS_LOCK:
            draft = _DRAFTS.pop(id(entries), None)
        if draft is not None and draft[0] is entries and draft[1] is self:
            data, sizes = draft[2].result()
        else:
            data, sizes = self.encode_log(entries)
        if data is not None:
            self.storage.put_if_absent(f"{INDEX_FOLDER}/{name}", data)
            if entries.num_rows <= LOG_HASHED_ROWS:  # its next lookup needs no read
                self._log_keys.put(f"{INDEX_FOLDER}/{name}", self.hashes(entries))
        return sizes

    def encode_log(self, entries: pa.Table) -> tuple[bytes | None, dict[int, int]]:
        """The log file :meth:`write` stores for ``entries`` (None: no entries) and its entries
        per root shard. Pure computation (numpy and Arrow release the GIL): a writer may run it
        on a thread while it writes data files."""
        if entries.num_rows == 0:
            return None, {}
        # Repeated strings stay (or become) dictionaries before the sort: the permutation then
        # moves dictionary indices, not strings, and a million-row load is never decoded.
        entries = self.encoded(entries)
        nodes, groups = self._log_nodes(entries)
        order = key_order([entries[name] for name in self.keys], groups)
        table = entries if order is None else _taken(entries, pa.array(order))
        cuts = spans(groups if order is None else groups[order])
        batches: list[pa.RecordBatch] = []
        layout: list[tuple[int, int]] = []
        sizes: dict[int, int] = {}
        stored_table = stored(table, payload=True)
        for position, offset, rows in cuts:
            node = nodes[position]
            sizes[node.shard % self.shards] = sizes.get(node.shard % self.shards, 0) + rows
            for start in range(0, rows, LOG_BATCH_ROWS):
                length = min(LOG_BATCH_ROWS, rows - start)
                batches.extend(stored_table.slice(offset + start, length).to_batches())
                layout.append((node.shard, node.count))
        schema = stored_table.schema.with_metadata({
            SHARDS: msgspec.json.encode([shard for shard, _ in layout]),
            SHARD_COUNTS: msgspec.json.encode([count for _, count in layout])})
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, schema, options=ipc.IpcWriteOptions(compression=CODEC)) as writer:
            for batch in batches:
                writer.write_batch(batch.replace_schema_metadata(schema.metadata))
        return sink.getvalue().to_pybytes(), dict(sorted(sizes.items()))

    def prepare(self, entries: pa.Table) -> pa.Table:
        """Start encoding the log file of ``entries`` on a thread, and return them: a
        :meth:`write` of this very table stores what the thread encoded. A writer calls it just
        before it writes the data file the entries point into, so the two overlap (sorting and
        compressing the log releases the GIL, as writing Parquet does)."""
        future = _log_pool().submit(self.encode_log, entries)
        with _DRAFTS_LOCK:
            _DRAFTS[id(entries)] = (entries, self, future)
            while len(_DRAFTS) > _DRAFTS_KEPT:  # a write that failed before its log: forgotten
                _DRAFTS.pop(next(iter(_DRAFTS)))
        return entries

    @staticmethod
    def unprepare(entries: pa.Table) -> None:
        """Forget what :meth:`prepare` started for ``entries`` (they will not be written as
        they are)."""
        with _DRAFTS_LOCK:
            _DRAFTS.pop(id(entries), None)

    def _log_nodes(self, entries: pa.Table) -> tuple[list[Node], Positions]:
        """The nodes a log of ``entries`` has batches for (the finest layout seen of each root
        shard, see :meth:`write`) and each entry's position among them. A table of one root
        shard whose splits this object has not seen needs no key hash at all."""
        if self.shards == 1 and len(self._layout.get(0, ())) <= 1:
            return [Node(1, 0)], np.zeros(entries.num_rows, dtype=np.int64)
        hashes = self.hashes(entries)
        roots = (hashes % np.uint64(self.shards)).astype(np.int64)
        present = np.flatnonzero(np.bincount(roots, minlength=self.shards)).tolist()
        nodes = [node for root in present for node in self._layout.get(root, [Node(self.shards, root)])]
        if len(nodes) == len(present):  # one node per root: its position is the root's rank
            rank = np.zeros(self.shards, dtype=np.int64)
            rank[present] = np.arange(len(present))
            return nodes, rank[roots]
        return nodes, locate(hashes, nodes)

    def logs_of(self, instant_time: str) -> list[str]:
        """The log files of ``instant_time`` (one, or one per part)."""
        return [log.path for log in self._logs(self.storage.list(INDEX_FOLDER))
                if log.instant_time == instant_time]

    def remove(self, instant_time: str) -> list[str]:
        """Delete every log file of ``instant_time`` (it is being rolled back)."""
        removed = []
        for log in self._logs(self.storage.list(INDEX_FOLDER)):
            if log.instant_time == instant_time:
                self.storage.delete(log.path)
                self._log_keys.forget(log.path)
                removed.append(log.path)
        return removed

    def instant_entries(self, instant_time: str, shards: Iterable[int]) -> pa.Table:
        """The entries ``instant_time`` wrote into ``shards`` (creation layout; for conflict
        checks).

        Raises:
            FileNotFoundError: its log files are gone (cleaning folded them into runs); the
                caller must find the instant's entries another way.
        """
        wanted = set(shards)
        logs = [log for log in self._logs(self.storage.list(INDEX_FOLDER))
                if log.instant_time == instant_time]
        if wanted and not logs:
            raise FileNotFoundError(f"{INDEX_FOLDER}/{instant_time}.log.arrow")
        parts = []
        for log in logs:
            with decoding(log.path, _LOG_EXPECTED):
                reader = open_entries(self._open(log.path))
                layout = self._layout_of(log.path, reader.schema)
                groups = [i for i, (shard, _) in enumerate(layout.batches) if shard % self.shards in wanted]
                parts.append(run_batches(reader, groups).select(self.schema.names))
        return pa.concat_tables(parts).cast(self.schema) if parts else self.schema.empty_table()

    def log_listing(self) -> list[str]:
        """The log files in the index folder now (one listing a conflict check shares)."""
        return [log.path for log in self._logs(self.storage.list(INDEX_FOLDER))]

    def written_among(self, instant_time: str, keys: pa.Table,
                      listing: Sequence[str] | None = None) -> pa.Table:
        """Which of ``keys`` (columns ``key_0``...) instant ``instant_time`` wrote entries for
        (conflict checks, under the table lock; ``listing``: a :meth:`log_listing` to use). Each
        of its log files is opened only when its key hashes (kept per process, see
        ``indexes._probe``) may hold one of them, and then matched for those keys only (binary
        search in its sorted batches for an integer key): a small write beside a concurrent write
        whose hashes this process knows reads nothing of it.

        Raises:
            FileNotFoundError: its log files are gone (cleaning folded them into runs); the
                caller must find the instant's entries another way.
        """
        logs = [path for path in (self.log_listing() if listing is None else listing)
                if (log := parse_index_log(path)) is not None and log.instant_time == instant_time]
        if not logs:
            raise FileNotFoundError(f"{INDEX_FOLDER}/{instant_time}.log.arrow")
        keys = keys.select(self.keys)
        if keys.num_rows == 0:
            return keys
        hashes = self.hashes(keys)
        parts = []
        for path in logs:
            log_hashes = self._log_keys.get(path)  # a large log is not hashed: searched below
            asked = keys if log_hashes is None else keys.filter(pa.array(held(log_hashes, hashes)))
            if asked.num_rows:
                parts.append(self._written_in(path, asked))
        return pa.concat_tables(parts) if parts else keys.slice(0, 0)

    def _written_in(self, path: str, asked: pa.Table) -> pa.Table:
        """The rows of ``asked`` (key columns) that log file ``path`` holds an entry for."""
        key_schema = pa.schema([self.schema.field(k) for k in self.keys])
        with decoding(path, _LOG_EXPECTED):
            reader = open_entries(self._open(path))
            groups = list(range(reader.num_record_batches))
            if not self._integer_key:
                entries = run_batches(reader, groups).select(self.keys)
                return matching(asked, entries.cast(key_schema), self.keys)
            # Batches are sorted by key (one node each): search each for the asked keys, as
            # stored and one by one (cast back together, narrowed batches came out as one
            # unsorted batch, and a key of a later node was never found).
            batches = [stored_batches(reader, [group]).select(self.keys) for group in groups]
        wanted = sorted_unique(asked.column(0).to_numpy())
        found = [_sorted_hits(batch, wanted).column(0) for batch in batches if batch.num_rows]
        if not found:
            return asked.slice(0, 0)
        present = pa.chunked_array([c for f in found for c in f.chunks], found[0].type)
        return matching(asked, pa.table({self.keys[0]: present}).cast(key_schema), self.keys)

    # -- listing -------------------------------------------------------------------------------

    def files(self, completed: Mapping[str, str], bound: str,
              done: Container[str] | Callable[[], Container[str]],
              shards: Iterable[int] | None = None,
              recorded: Callable[[str], set[int]] | None = None) -> IndexFiles:
        """What resolves the index at completion time ``bound``: for each root shard of
        ``shards`` (all when None) the nodes its keys resolve to and their chains of runs, and
        the log files. ``done`` holds the completed metadata compactions: a run counts only once
        its compaction completed.

        ``recorded(T)`` gives the shards completed instant ``T`` recorded entries for (its
        deltacommit): if one of them is read here, above its chain's top, ``T`` must have a
        log file.

        Raises:
            ObjectNotFoundError: a log file an instant recorded is missing.
        """
        if shards is None:
            roots = list(range(self.shards))
            listing = self.storage.list(INDEX_FOLDER, recursive=True)
            done = done() if callable(done) else done  # read after listing
        else:
            roots = sorted(set(shards))
            listing, done = self._listing(roots, done)
        result = self._resolve(listing, completed, bound, done, roots)
        if recorded is not None:
            self._check_recorded(result, completed, bound, None if shards is None else roots, recorded)
        return result

    def _listing(self, roots: Sequence[int], done: Container[str] | Callable[[], Container[str]]
                 ) -> tuple[list[str], Container[str]]:
        """The log folder and the files of root shards ``roots``, and the completed compactions
        to resolve them with, read *after* the listing (as ``MetadataTable`` resolves its
        partitions): a compaction that completed, and whose clean deleted the runs it replaced,
        before we listed is then in the set, so its own runs count. Read before, its runs would
        not, the replaced ones would be gone, and a chain would end short without an error.

        A root's files are listed once per set of completed compactions (``done`` given as a
        callable): every run of a completed compaction was written before it completed, so a
        listing taken after the set was read holds every run that counts until another
        compaction completes. A run that cleaning deleted since fails its read with
        FileNotFoundError, and :meth:`lookup` forgets the listings and lists again. A keyed
        append's duplicate check touches most shards: this saves a listing per shard per
        commit. ``done`` given as a set is used as it is (the caller read it after listing).
        """
        if not callable(done):
            listing = self.storage.list(INDEX_FOLDER)
            for root in roots:
                listing += self.storage.list(shard_folder(root), recursive=True)
            return listing, done
        after: Container[str] = frozenset()
        for _ in range(3):
            before = done()
            marker = _marker(before)
            listing = self.storage.list(INDEX_FOLDER)
            listed: dict[int, tuple[Hashable, list[str]]] = {}
            for root in roots:
                cached = self._listings.get(root)
                if cached is None or cached[0] != marker:
                    cached = listed[root] = (marker, self.storage.list(shard_folder(root), recursive=True))
                listing += cached[1]
            after = done()
            if after == before:
                self._listings.update(listed)
                return listing, after
        # A compaction completed during every try: the last listing with the set read after it.
        self._listings.clear()
        return listing, after

    def _resolve(self, listing: Iterable[str], completed: Mapping[str, str], bound: str,
                 done: Container[str], roots: Iterable[int]) -> IndexFiles:
        """Resolve ``listing`` at ``bound``.

        Raises:
            ObjectNotFoundError: a usable run that no chain reaches: the run below it is lost.
        """
        keys = list(listing)
        usable = self._usable([run for key in keys if (run := parse_run(key, INDEX_FOLDER, self.shards))],
                              done)
        found = [(log, completed[log.instant_time]) for key in keys if (log := self._log(key)) is not None
                 and "" < completed.get(log.instant_time, "") <= bound]
        found.sort(key=lambda item: item[1])
        resolved = leaves(usable, roots, self.shards, bound)
        for node, runs in resolved.items():
            top = runs[-1].high if runs else ""
            stranded = [r for r in usable.get(node, ()) if r.high <= bound and top < r.low]
            if stranded:
                raise ObjectNotFoundError(self._lost_below(node, min(stranded, key=lambda r: r.low)))
        return IndexFiles(self.shards, resolved, found, usable)

    def _usable(self, runs: Iterable[RunFile], done: Container[str]) -> dict[Node, list[RunFile]]:
        """The runs that count, by node: those of completed compactions, and the runs those
        were written on (``metatxn.run_below``, transitively). A completed compaction only
        writes on runs that counted, so the second kind were whole even when their own
        compaction's completed file was lost. (Archived compactions are in ``done``: see
        ``indexes._compactions``.)"""
        usable: dict[Node, list[RunFile]] = {}
        unconfirmed: dict[str, RunFile] = {}
        for run in runs:
            if run.compaction_time in done:
                usable.setdefault(run.node, []).append(run)
            else:
                unconfirmed[run.path] = run
        waiting = {run.node for run in unconfirmed.values()}
        vouching = [run for node in waiting for run in usable.get(node, ()) if not run.bottom]
        while vouching and unconfirmed:
            run = vouching.pop()
            below = self._footer(run).below
            if below is None:
                continue
            adopted = unconfirmed.pop(f"{node_folder(INDEX_FOLDER, run.node, self.shards)}/{below}", None)
            if adopted is not None:
                usable.setdefault(adopted.node, []).append(adopted)
                if not adopted.bottom:
                    vouching.append(adopted)
        return usable

    def _lost_below(self, node: Node, stranded: RunFile) -> str:
        """The run missing under ``stranded`` (a run no chain from a bottom run reaches)."""
        folder = node_folder(INDEX_FOLDER, node, self.shards)
        try:
            footer: RunFooter | None = self._footer(stranded)
        except (CorruptMetadataError, FileNotFoundError):
            footer = None
        if footer is not None and footer.below is not None:
            return f"{folder}/{footer.below}"
        return f"{folder}/ (the run ending at {stranded.low}, below {stranded.path.rsplit('/', 1)[1]})"

    def _remember(self, files: IndexFiles) -> None:
        """Keep the finest layout seen of each root (layouts only get finer), for writes."""
        for root, nodes in files.by_root().items():
            if len(nodes) > len(self._layout.get(root, ())):
                self._layout[root] = nodes

    def _check_recorded(self, found: IndexFiles, completed: Mapping[str, str], bound: str,
                        shards: Sequence[int] | None,
                        recorded: Callable[[str], set[int]]) -> None:
        logged = {log.instant_time for log, _ in found.logs}
        roots = range(self.shards) if shards is None else shards
        # Per shard, the highest top among its nodes. Cleaning deletes a log once every node its
        # batches overlap has folded it, and an instant that recorded a shard has a batch that
        # overlaps one of the shard's nodes: if no node of the shard folded the log, it is lost.
        # (If some did, the others may have had no entry in it: that cannot be told here.)
        floors = {shard: found.ceiling(shard) for shard in roots}
        low = min(floors.values(), default="")
        unlogged = [(instant_time, done_at) for instant_time, done_at in completed.items()
                    if instant_time not in logged and low < done_at <= bound]
        prefetch = getattr(recorded, "prefetch", None)  # reads many deltacommits at once
        if prefetch is not None:
            prefetch(instant_time for instant_time, _ in unlogged)
        for instant_time, done_at in unlogged:
            for shard in recorded(instant_time):
                if shard in floors and floors[shard] < done_at:
                    if any(done_at <= found.top(node) for node in found.leaves):
                        # Another shard's runs folded the log: this shard's runs are lost.
                        raise ObjectNotFoundError(f"{shard_folder(shard)}/ (its base)")
                    raise ObjectNotFoundError(f"{INDEX_FOLDER}/{instant_time}.log.arrow")

    # -- lookups -------------------------------------------------------------------------------

    def lookup(self, keys: pa.Table, completed: Mapping[str, str], bound: str,
               done: Container[str] | Callable[[], Container[str]], *, instants: bool = False,
               recorded: Callable[[str], set[int]] | None = None) -> pa.Table:
        """The merged entries of ``keys`` (columns ``key_0``...), tombstones included.

        Only the shards the keys hash to are listed and read: per node, the runs of its chain
        whose filter admits one of its keys (in parallel: storage latency dominates), and its
        batches of the log files above its chain. Entries read from a bottom run carry no
        ``instant`` (they are older than any other entry of their key) unless ``instants`` asks
        for it. The caller must check the snapshot is still retained
        (``MetadataTable.lookup_keys`` does).

        Raises:
            CorruptMetadataError: an index file cannot be decoded, or one that a completed
                instant recorded (``recorded``, see :meth:`files`) is missing.
        """
        if keys.num_rows == 0:
            return self.schema.empty_table()
        wanted = keys.select(self.keys)
        hashes = self.hashes(wanted)
        roots = set((hashes % np.uint64(self.shards)).astype(np.int64).tolist())
        for attempt in range(3):
            try:
                return self._lookup(wanted, hashes, roots, completed, bound, done, instants, recorded)
            except FileNotFoundError as exc:  # cleaned between listing and reading: list again
                self._listings.clear()
                if attempt == 2:
                    raise missing_block(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _lookup(self, wanted: pa.Table, hashes: Hashes, roots: set[int],
                completed: Mapping[str, str], bound: str, done: Container[str] | Callable[[], Container[str]],
                instants: bool, recorded: Callable[[str], set[int]] | None) -> pa.Table:
        files = self.files(completed, bound, done, roots, recorded)
        self._remember(files)
        nodes = sorted(files.leaves)
        ordered, order, spans = self._grouped(wanted, locate(hashes, nodes))
        ordered_hashes = hashes[order]
        asked = [_Asked(nodes[i], ordered.slice(start, length), ordered_hashes[start:start + length],
                        files.top(nodes[i]), start) for i, start, length in spans if i >= 0]
        tables = self._from_runs(files, asked, ordered, ordered_hashes, instants)
        from_runs = len(tables)
        logged = self._from_logs(files, asked, ordered, ordered_hashes)
        if logged:
            # Matched while still dictionary-encoded: only the matches' strings are decoded.
            tables.append(pa.concat_tables(logged).cast(self.schema))
        if not tables:
            return self.schema.empty_table()
        if from_runs == 1 and not logged:
            return tables[0]  # a run holds one entry per key: nothing to merge
        return merge_entries(tables, self.schema)

    def _from_runs(self, files: IndexFiles, asked: Sequence[_Asked], ordered: pa.Table,
                   hashes: Hashes, instants: bool) -> list[pa.Table]:
        """The entries of the asked keys in the runs of their chains: one probe of every
        ``(key, run)`` pair against the runs' filters and key ranges (``indexes._probe``), then
        each run the probe admitted opened for the keys it admitted there only."""
        runs: list[RunFile] = []
        chains: list[tuple[npt.NDArray[np.int64], range]] = []
        for a in asked:
            chain = files.leaves[a.node]
            if chain:
                chains.append((a.rows(), range(len(runs), len(runs) + len(chain))))
                runs.extend(chain)
        if not runs:
            return []
        footers = self._footers_of(runs)
        buffer, slots = self._bank.slots([(run.path, footer.bloom)
                                          for run, footer in zip(runs, footers, strict=True)])
        if len(files.by_root()) == self.shards:  # every run in use is here: drop the others'
            in_use = {run.path for usable in files.usable.values() for run in usable}
            self._bank.keep_only(in_use)
            self._readers.keep_only(in_use)
        first_keys = None
        if self._ranged:
            first_keys = ordered.column(0).to_numpy().astype(np.int64, copy=False)
        pairs = probe_runs(buffer, hashes, first_keys, chains, slots,
                           [footer.key_range() for footer in footers])
        if len(pairs.runs) == 0:
            return []
        by_run = np.argsort(pairs.runs, kind="stable")
        keys_by_run = pairs.keys[by_run]
        node_of = {run.path: a for a in asked for run in files.leaves[a.node]}
        jobs = []
        for index, start, length in spans(pairs.runs[by_run]):
            run = runs[index]
            rows = np.sort(keys_by_run[start:start + length])
            jobs.append((run, footers[index],
                         _Asked(run.node, ordered.take(pa.array(rows)), hashes[rows],
                                node_of[run.path].top, -1)))

        def read(job: tuple[RunFile, RunFooter, _Asked]) -> pa.Table | None:
            return self._run_hits(*job, instants=instants)

        if len(jobs) <= 1 or not self._parallel_reads:
            found = [read(job) for job in jobs]
        else:
            found = list(_pool().map(read, jobs))
        return [t for t in found if t is not None and t.num_rows]

    def _footers_of(self, runs: Sequence[RunFile]) -> list[RunFooter]:
        """The footers of ``runs``, reading those not cached (concurrently where reads wait for
        the network)."""
        missing = [run for run in runs if self._footers.get(run.path) is None]
        if len(missing) > 1 and self._parallel_reads:
            list(_pool().map(self._footer, missing))
        return [self._footer(run) for run in runs]

    def _from_logs(self, files: IndexFiles, asked: Sequence[_Asked], ordered: pa.Table,
                   hashes: Hashes) -> list[pa.Table]:
        """The entries of the asked keys in the log files completed above their chains: each
        log's key hashes (read once per process) say which keys it may hold; only logs holding
        one are opened, and matched for those keys only."""
        if not asked:
            return []
        lowest = min(a.top for a in asked)
        found = []
        for log, done_at in files.logs:
            if done_at <= lowest:
                continue
            log_hashes = self._log_hashes(log.path)
            if log_hashes is None:  # too large to keep: match every asked key in it
                hit_asked = list(asked)
            else:
                hit = held(log_hashes, hashes)
                if not hit.any():
                    continue
                hit_asked = []
                for a in asked:
                    rows = a.rows()
                    mine = rows[hit[rows]]
                    if len(mine):
                        hit_asked.append(a if len(mine) == len(rows) else _Asked(
                            a.node, ordered.take(pa.array(mine)), hashes[mine], a.top, -1))
            by_root: dict[int, list[_Asked]] = {}
            for a in hit_asked:
                by_root.setdefault(a.node.shard % self.shards, []).append(a)
            table = self._match_log(log.path, done_at, by_root)
            if table.num_rows:
                found.append(table)
        return found

    def _log_hashes(self, path: str) -> npt.NDArray[np.uint64] | None:
        """The sorted key hashes of log file ``path`` (read once per process), None for a log
        too large to keep."""
        known = self._log_keys.get(path)
        if known is not None or self._log_keys.too_large(path):
            return known
        with decoding(path, _LOG_EXPECTED):
            reader = open_entries(self._open(path))
            self._layout_of(path, reader.schema)
            keys = run_batches(reader, list(range(reader.num_record_batches))).select(self.keys)
        if keys.num_rows > LOG_HASHED_ROWS:
            # A bulk load's log: hashing it costs more than it saves (its batches are sorted by
            # key and searched directly); a log its writer seeded is kept whatever its size.
            self._log_keys.refuse(path)
            return None
        hashes = self.hashes(keys)
        self._log_keys.put(path, hashes)
        return self._log_keys.get(path)

    def _run_hits(self, run: RunFile, footer: RunFooter, asked: _Asked, *, instants: bool) -> pa.Table | None:
        """The entries of ``asked``'s keys in ``run`` (keys its filter admitted); None when no
        batch's key range holds one."""
        with decoding(run.path, _RUN_EXPECTED):
            groups = footer.batches_for(asked.first_keys())
            if not groups:
                return None
            with self._readers.open(run.path) as reader:
                # An integer key is searched as stored; only the rows taken are cast.
                table = (stored_batches if self._integer_key else run_batches)(reader, groups)
            # A bottom run holds no tombstones, and every entry in it is older than any other
            # entry of its key, so ``instant`` need not be decoded for a lookup: its entries
            # count as the oldest. Upper runs may hold tombstones and are ordered by instant.
            decode_instant = instants or not run.bottom
            columns = [*self.keys, "segment", "file", "position"] + (["instant"] if decode_instant else [])
            if not run.bottom:
                columns.append("deleted")
            # Match while the repeated strings are still dictionary-encoded (one dictionary per
            # run): decoding every file path of the batches read would cost more than the lookup.
            if self._integer_key:  # a run is sorted by key: binary search, then take the hits
                found = as_logical(_sorted_hits(table.select(columns),
                                                sorted_unique(asked.keys.column(0).to_numpy())))
            else:
                found = matching(table.select(columns), asked.keys, self.keys)
            if not decode_instant:
                found = found.append_column("instant", pa.array([""] * found.num_rows, pa.string()))
            if run.bottom:
                found = found.append_column("deleted", pa.array([False] * found.num_rows, pa.bool_()))
            return found.select(self.schema.names).cast(self.schema)

    def _match_log(self, path: str, done_at: str, by_root: Mapping[int, Sequence[_Asked]]) -> pa.Table:
        """The entries of a log file whose key is asked (``by_root``: per root shard, what is
        asked of its nodes), from the batches of the asked nodes whose chain ends below
        ``done_at`` (the log's completion time); dictionaries still encoded. Batches are sorted
        by key, so an integer key is found by binary search."""
        with decoding(path, _LOG_EXPECTED):
            reader = open_entries(self._open(path))
            layout = self._layout_of(path, reader.schema)
            parts = []
            # Consecutive batches of one node are one sorted run of keys (a node's entries are
            # cut into batches of LOG_BATCH_ROWS): searched together, with one cast of the hits.
            runs: list[tuple[tuple[int, int], list[int]]] = []
            for i, node in enumerate(layout.batches):
                if runs and runs[-1][0] == node:
                    runs[-1][1].append(i)
                else:
                    runs.append((node, [i]))
            for (shard, count), indices in runs:
                below = [a for a in by_root.get(shard % self.shards, ())
                         if a.top < done_at and a.node.overlaps(shard, count)]
                if not below:
                    continue
                if not self._integer_key:
                    wanted = below[0].keys if len(below) == 1 else pa.concat_tables([a.keys for a in below])
                    parts.append(matching(run_batches(reader, indices), wanted, self.keys))
                    continue
                parts.append(as_logical(_sorted_hits(stored_batches(reader, indices), _sorted_union(below))))
            if not parts:
                return self.schema.empty_table()
            return pa.concat_tables(parts).select(self.schema.names)

    def _open(self, path: str) -> Any:
        """A random-access source for an index file: memory-mapped on local disk."""
        if self._filesystem is not None:
            filesystem, root = self._filesystem
            full = f"{root.rstrip('/')}/{path}"
            if isinstance(filesystem, pa.fs.LocalFileSystem):
                return pa.memory_map(full)
            return filesystem.open_input_file(full)
        return pa.BufferReader(self.storage.read(path))

    def _layout_of(self, path: str, schema: pa.Schema) -> LogLayout:
        layout = self._log_layouts.get(path)
        if layout is None:
            layout = self._log_layouts[path] = log_layout(path, schema, self.shards)
            while len(self._log_layouts) > _LOG_LAYOUTS_KEPT:
                # Lookups and a background compaction may share this index: the oldest out,
                # losing nothing but a cached footer if another thread got there first.
                with contextlib.suppress(RuntimeError, KeyError, StopIteration):
                    self._log_layouts.pop(next(iter(self._log_layouts)))
        return layout

    def _log_layout(self, path: str) -> LogLayout:
        """The batch shards of a log file (reads its footer once)."""
        layout = self._log_layouts.get(path)
        if layout is None:
            data = self.storage.read(path)
            with decoding(path, _LOG_EXPECTED):
                layout = self._layout_of(path, ipc.open_file(pa.BufferReader(data)).schema)
        return layout

    # -- whole shards --------------------------------------------------------------------------

    def _log_parts(self, files: IndexFiles, nodes: set[Node]) -> dict[Node, list[pa.Table]]:
        """Each node's entries of the log files completed above its chain (each log read once;
        a batch for a coarser node than today's is cut by the key hash). Every node a batch
        overlaps is in the result, if need be with no entries: folding the batch advances it."""
        parts: dict[Node, list[pa.Table]] = {}
        if not nodes:
            return parts
        lowest = min(files.top(node) for node in nodes)
        for log, done_at in files.logs:
            if done_at <= lowest:
                continue
            data = self.storage.read(log.path)
            with decoding(log.path, _LOG_EXPECTED):
                reader = open_entries(pa.BufferReader(data))
                layout = self._layout_of(log.path, reader.schema)
                for i, (shard, count) in enumerate(layout.batches):
                    below = files.nodes_of(shard, count)
                    targets = [n for n in below if n in nodes and files.top(n) < done_at]
                    if not targets:
                        continue
                    for node in targets:
                        parts.setdefault(node, [])
                    # The index's types, strings still dictionaries: folding does not decode them.
                    batch = run_batches(reader, [i]).select(self.schema.names)
                    if len(below) == 1:  # the batch is the node's, or a part of it
                        parts[targets[0]].append(batch)
                        continue
                    ordered, _, spans = self._grouped(batch, locate(self.hashes(batch), below))
                    for position, start, length in spans:
                        if position >= 0 and below[position] in targets:
                            parts[below[position]].append(ordered.slice(start, length))
        return parts

    def _merged(self, files: IndexFiles, nodes: set[Node]) -> dict[Node, pa.Table]:
        """The full merged state of ``nodes`` (runs and log entries), tombstones included."""
        logged = self._log_parts(files, nodes)
        merged = {}
        for node in sorted(nodes):
            tables = [read_block(self.storage, run.path, self.schema) for run in files.leaves[node]]
            tables += logged.get(node, [])
            if tables:
                merged[node] = merge_entries(tables, self.schema)
        return merged

    def read_all(self, completed: Mapping[str, str], bound: str, done: Container[str],
                 recorded: Callable[[str], set[int]] | None = None) -> pa.Table:
        """Every merged entry at ``bound`` (for validation), tombstones included."""
        files = self.files(completed, bound, done, recorded=recorded)
        merged = self._merged(files, set(files.leaves))
        return pa.concat_tables(merged.values()) if merged else self.schema.empty_table()

    def damaged_files(self, completed: Mapping[str, str], done: Container[str],
                      recorded: Callable[[str], set[int]]) -> list[CorruptMetadataError]:
        """Every index file that cannot be decoded, and a log file a completed instant recorded
        that is missing (for validation: nothing raises on damage)."""
        damaged: list[CorruptMetadataError] = []
        for key in self.storage.list(INDEX_FOLDER, recursive=True):
            try:
                if parse_run(key, INDEX_FOLDER, self.shards) is not None:
                    read_block(self.storage, key, self.schema)
                    with decoding(key, _RUN_EXPECTED):
                        RunFooter.of(open_entries(pa.BufferReader(self.storage.read(key))),
                                     self._row_group_rows)
                elif self._log(key) is not None:
                    self._log_layouts.pop(key, None)
                    self._read_log(key)
            except CorruptMetadataError as exc:
                damaged.append(exc)
            except FileNotFoundError:
                continue  # cleaned since the listing
        try:
            self.files(completed, "9" * 17, done, recorded=recorded)
        except ObjectNotFoundError as exc:
            damaged.append(missing_block(exc))
        return damaged

    def _read_log(self, path: str) -> pa.Table:
        with decoding(path, _LOG_EXPECTED):
            reader = open_entries(self._open(path))
            self._layout_of(path, reader.schema)
            return run_batches(reader, list(range(reader.num_record_batches))).select(
                self.schema.names).cast(self.schema)

    # -- maintenance ---------------------------------------------------------------------------

    def compact(self, compaction_time: str, horizon: str, completed: Mapping[str, str],
                done: Container[str], live_files: pa.Array) -> list[str]:
        """Fold, for every shard node with log entries completed in (its chain's top,
        ``horizon``], those entries into a new run of the node, merged with the runs below it
        as the tier policy says, or split the node when it outgrew ``shard_max_entries``;
        return the runs written.

        Only writes new files (put-if-absent): readers of completed compactions keep what they
        use, and a compaction that dies leaves only files of its own (``remove_bases``). Nodes
        with no such entries are not touched.
        """
        files = self._resolve(self.storage.list(INDEX_FOLDER, recursive=True), completed, horizon,
                              done, range(self.shards))
        self._remember(files)
        new = self._log_parts(files, set(files.leaves))
        written: list[str] = []
        for node in sorted(new):
            entries = self._merged_logs(new[node])
            written += self._fold(node, files.leaves[node], entries, compaction_time, horizon, live_files)
        return written

    def _merged_logs(self, parts: list[pa.Table]) -> pa.Table:
        """A node's entries of the log batches being folded, merged. Entries whose keys are
        already strictly in order (the batches of one log are sorted by key, and a load writes
        each key once) are used as they are, their strings still dictionaries: the first
        compaction of a million-row load then neither sorts nor decodes them."""
        whole = pa.concat_tables([self.encoded(part) for part in parts]) if parts else None
        if whole is not None:
            codes = order_codes([whole[name] for name in self.keys]) if whole.num_rows > 1 else None
            if whole.num_rows <= 1 or (codes is not None and bool(np.all(codes[1:] > codes[:-1]))):
                return self.encoded(whole)
        return merge_entries(parts, self.schema)

    def _fold(self, node: Node, chain: list[RunFile], entries: pa.Table, compaction_time: str,
              horizon: str, live_files: pa.Array) -> list[str]:
        sizes = [self._entries_of(run) for run in chain] + [entries.num_rows]
        if self.policy.splits(sum(sizes)):
            runs = [read_block(self.storage, r.path, self.schema) for r in chain]
            whole = live_entries(merge_entries([*runs, entries], self.schema), live_files)
            levels = self.policy.split_levels(whole.num_rows)
            if levels:
                hashes = self.hashes(whole)
                ids = (hashes % np.uint64(node.count << levels)).astype(np.int64)
                return [self._put_run(child, whole.filter(pa.array(ids == child.shard)),
                                      hashes[ids == child.shard], compaction_time, "", horizon)
                        for child in node.descendants(levels)]
            return [self._put_run(node, whole, self.hashes(whole), compaction_time, "", horizon)]
        count = self.policy.merge_count(sizes)
        merging = chain[len(chain) - count + 1:] if count else []
        kept = chain[:len(chain) - len(merging)]
        low = kept[-1].high if kept else ""
        merged = merge_entries([*(read_block(self.storage, r.path, self.schema) for r in merging),
                                entries], self.schema) if merging else entries
        if low == "":
            merged = live_entries(merged, live_files)  # nothing below it: tombstones hide nothing
        return [self._put_run(node, merged, self.hashes(merged), compaction_time, low, horizon,
                              below=kept[-1] if kept else None)]

    def _put_run(self, node: Node, entries: pa.Table, hashes: Hashes, compaction_time: str,
                 low: str, high: str, below: RunFile | None = None) -> str:
        path = (f"{node_folder(INDEX_FOLDER, node, self.shards)}/"
                f"{run_name(compaction_time, low, high, entries.num_rows)}")
        self.storage.put_if_absent(path, encode_run(
            entries, hashes, self.keys[0], self._row_group_rows,
            below=below.path.rsplit("/", 1)[1] if below is not None else None))
        return path

    def _entries_of(self, run: RunFile) -> int:
        """Entries in a run: from its name, or its footer (bottom runs; read once)."""
        return run.entries if run.entries is not None else self._footer(run).entries

    def _footer(self, run: RunFile) -> RunFooter:
        """The footer of ``run`` (read once per process: runs never change)."""
        footer = self._footers.get(run.path)
        if footer is None:
            with decoding(run.path, _RUN_EXPECTED):
                footer = RunFooter.of(open_entries(self._open(run.path)), self._row_group_rows)
            self._footers.put(run.path, footer)
        return footer

    def doomed(self, oldest_needed: str, completed: Mapping[str, str],
               done: Container[str]) -> tuple[list[str], str | None]:
        """Runs and log files no retained snapshot needs.

        Each root's keys resolve at ``oldest_needed`` to nodes with chains (their *floors*).
        A node those replaced by a split goes whole; in a floor node, every run at or below its
        chain's top that is not in the chain goes (a merge of the chain superseded it); runs
        above the floors, and nodes split after ``oldest_needed``, stay. A log file goes once
        every node its batches' shards resolve to has a floor at or after the log's completion.
        Returns them and the largest floor (None if no node has a run).
        """
        listing = self.storage.list(INDEX_FOLDER, recursive=True)
        files = self._resolve(listing, completed, oldest_needed, done, range(self.shards))
        chosen = {run.path for runs in files.leaves.values() for run in runs}
        doomed: list[str] = []
        for run in (run for runs in files.usable.values() for run in runs):
            if run.path in chosen:
                continue
            if run.node in files.leaves:
                if run.high <= files.top(run.node):
                    doomed.append(run.path)
            elif _replaced(run.node, files.leaves, self.shards):
                doomed.append(run.path)
        for log in self._logs(listing):
            done_at = completed.get(log.instant_time)
            if done_at is None:
                continue
            layout = self._log_layout(log.path)
            if all(files.top(node) >= done_at for shard, count in set(layout.batches)
                   for node in files.nodes_of(shard, count)):
                doomed.append(log.path)
                self._log_layouts.pop(log.path, None)
        tops = [files.top(node) for node, runs in files.leaves.items() if runs]
        return doomed, max(tops, default=None)

    def forget(self, paths: Iterable[str]) -> None:
        """Drop what this process keeps of files just deleted (open readers, log hashes)."""
        paths = list(paths)
        self._readers.forget(paths)
        for path in paths:
            self._log_keys.forget(path)

    def remove_bases(self, compaction_time: str) -> list[str]:
        """Delete the runs of a compaction that died part way (it never completes)."""
        doomed = [key for key in self.storage.list(INDEX_FOLDER, recursive=True)
                  if (run := parse_run(key, INDEX_FOLDER, self.shards)) is not None
                  and run.compaction_time == compaction_time]
        for path in doomed:
            self.storage.delete(path)
        self._readers.forget(doomed)
        return doomed

    @staticmethod
    def _log(key: str) -> IndexLog | None:
        """The log file at ``key`` (log files sit directly in the index folder)."""
        folder, _, _ = key.rpartition("/")
        return parse_index_log(key) if folder == INDEX_FOLDER else None

    @classmethod
    def _logs(cls, listing: Iterable[str]) -> list[IndexLog]:
        return [log for key in listing if (log := cls._log(key)) is not None]


@dataclass(frozen=True)
class _Asked:
    """The keys a lookup wants from one node, sorted by key, and what it needs to find them."""

    node: Node
    keys: pa.Table
    hashes: Hashes
    #: The node's chain's top: log entries completed above it are read from the logs.
    top: str
    #: Where ``keys`` start in the lookup's ordered keys (-1: a subset, not a slice).
    start: int

    def rows(self) -> npt.NDArray[np.int64]:
        """The rows of ``keys`` in the lookup's ordered keys (for a slice)."""
        return np.arange(self.start, self.start + self.keys.num_rows, dtype=np.int64)

    def first_keys(self) -> list[Any]:
        return self.keys.column(0).to_pylist()  # type: ignore[no-any-return]


@dataclass
class _Caches:
    """What a record index keeps of files that never change, by path."""

    footers: FooterCache
    readers: _Readers
    bank: FilterBank
    log_keys: LogKeys
    log_layouts: dict[str, LogLayout]


_SHARED: OrderedDict[str, _Caches] = OrderedDict()
_SHARED_LOCK = threading.Lock()
#: Tables whose caches a process keeps (the least recently opened go first).
_SHARED_KEPT: Final = 8


def _caches(shared_as: str | None, opener: Callable[[str], Any]) -> _Caches:
    """The caches of the table ``shared_as`` names (new ones for None). A table dropped and
    created again at the same location has a new table id, so it never sees the old caches."""
    def fresh() -> _Caches:
        return _Caches(FooterCache(), _Readers(opener), FilterBank(), LogKeys(), {})

    if shared_as is None:
        return fresh()
    with _SHARED_LOCK:
        found = _SHARED.get(shared_as)
        if found is None:
            found = _SHARED[shared_as] = fresh()
            while len(_SHARED) > _SHARED_KEPT:
                _SHARED.popitem(last=False)
        _SHARED.move_to_end(shared_as)
        return found


def _sorted_hits(table: pa.Table, search: npt.NDArray[Any]) -> pa.Table:
    """The rows of ``table`` (sorted by its first column, an integer key unique per row) whose
    key is in ``search`` (sorted and unique: a key asked twice would take its row twice, so
    callers pass ``sorted_unique`` of what they were asked, once, not once per batch): one binary
    search over the concatenated keys, one take."""
    keys = table.column(0).to_numpy()
    if keys.dtype != search.dtype and len(search):  # stored narrower: no other value can be there
        limits = np.iinfo(keys.dtype)
        search = search[(search >= limits.min) & (search <= limits.max)].astype(keys.dtype)
    at = np.searchsorted(keys, search)
    inside = at < len(keys)
    rows = at[inside][keys[at[inside]] == search[inside]]
    return table.take(pa.array(rows, pa.int64()))


class _Readers:
    """Open readers of run files, least recently used out beyond ``kept``: opening a run parses
    its footer (7 ms for a run of 5 million entries), and runs never change. A reader serves one
    thread at a time."""

    def __init__(self, opener: Callable[[str], Any], kept: int = 64) -> None:
        self._opener = opener
        self._kept = kept
        self._readers: OrderedDict[str, tuple[ipc.RecordBatchFileReader, threading.Lock]] = OrderedDict()
        self._mutex = threading.Lock()

    @contextlib.contextmanager
    def open(self, path: str) -> Iterator[ipc.RecordBatchFileReader]:
        with self._mutex:
            found = self._readers.get(path)
            if found is not None:
                self._readers.move_to_end(path)
        if found is None:
            found = (open_entries(self._opener(path)), threading.Lock())
            with self._mutex:
                found = self._readers.setdefault(path, found)
                while len(self._readers) > self._kept:
                    self._readers.popitem(last=False)
        reader, lock = found
        with lock:
            yield reader

    def forget(self, paths: Iterable[str]) -> None:
        with self._mutex:
            for path in paths:
                self._readers.pop(path, None)

    def keep_only(self, paths: set[str]) -> None:
        """Close the readers of runs not in ``paths`` (merged away, or deleted by cleaning: a
        memory map holds a deleted file's disk space and a descriptor)."""
        with self._mutex:
            for path in [p for p in self._readers if p not in paths]:
                del self._readers[path]


def _marker(done: Container[str]) -> Hashable:
    """What a root's cached listing is valid for: the compactions that counted when it was taken."""
    if isinstance(done, DoneCompactions | frozenset):
        return done
    assert isinstance(done, Iterable), "a set of compaction times"
    return frozenset(done)


def _sorted_union(asked: Sequence[_Asked]) -> npt.NDArray[Any]:
    """The asked integer keys of several nodes as one sorted array without repeats (for binary
    search)."""
    return sorted_unique(np.concatenate([a.keys.column(0).to_numpy() for a in asked]))


def _replaced(node: Node, floors: Mapping[Node, Sequence[RunFile]], roots: int) -> bool:
    """Whether ``node`` is an ancestor of a floor node (a split replaced it before the floor)."""
    return any(_ancestor(node, floor, roots) for floor in floors if floor.count > node.count)


def _ancestor(node: Node, descendant: Node, roots: int) -> bool:
    parent = descendant.parent(roots)
    while parent is not None and parent.count >= node.count:
        if parent == node:
            return True
        parent = parent.parent(roots)
    return False


def _taken(table: pa.Table, order: pa.Array) -> pa.Table:
    """``table``'s rows in ``order``; a column holding one value throughout (a load's segment,
    file, instant and tombstone flag) is kept as it is instead of being permuted."""
    columns = []
    for column in table.columns:
        if column.null_count == 0 and _constant(column):
            columns.append(column)
        else:
            columns.append(column.take(order))
    return pa.Table.from_arrays(columns, schema=table.schema)


def _constant(column: pa.ChunkedArray) -> bool:
    if pa.types.is_dictionary(column.type):
        return all(len(chunk.dictionary) == 1 for chunk in column.chunks)
    if pa.types.is_boolean(column.type):
        true = pc.sum(column).as_py() or 0
        return true in (0, len(column))
    return False


def _repeated(value: str | None, count: int, encoded: bool) -> pa.Array:
    """``value`` ``count`` times: a dictionary of one string when ``encoded``."""
    if not encoded or value is None:
        return pa.repeat(pa.scalar(value, pa.string()), count)
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(count, dtype=np.int32)), pa.array([value]))


#: Logs being encoded ahead of their write (``RecordIndex.prepare``), by ``id`` of their entries.
_DRAFTS: dict[int, tuple[pa.Table, RecordIndex, Future[tuple[bytes | None, dict[int, int]]]]] = {}
_DRAFTS_LOCK = threading.Lock()
_DRAFTS_KEPT: Final = 4
_LOG_POOL: dict[int, ThreadPoolExecutor] = {}


def _log_pool() -> ThreadPoolExecutor:
    """Threads that encode log files while their writer writes data files, per process: a
    child forked after a keyed write inherits the pool without its threads, and a task
    submitted to it would never run."""
    with _POOL_LOCK:
        pid = os.getpid()
        if pid not in _LOG_POOL:
            _LOG_POOL.clear()
            _LOG_POOL[pid] = ThreadPoolExecutor(max_workers=2, thread_name_prefix="metatxn-log")
        return _LOG_POOL[pid]


_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """Threads shared by all lookups: shards are read concurrently to overlap storage latency."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=8, thread_name_prefix="metatxn-index"))
        return _POOL[0]
