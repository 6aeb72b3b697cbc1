"""The record-level index: record key -> (segment, data file, row position), hash-sharded.

Layout: ``_metadata/record_index/<shard>/`` holds, per shard, log blocks ``<T>.log.arrow`` (the
entries data instant ``T`` wrote that hash to the shard) and bases ``<M>_<H>.base.arrow``
(everything completed at or before ``H``, folded by metadata compaction ``M``: uncompressed
Arrow IPC sorted by key in batches of 1,024 entries, so a lookup reads only the batches whose key
range can hold a wanted key, and decodes nothing). The number of shards is fixed when the table is created.

Entries. One row per key per instant that wrote it: the key columns (``key_0``, ``key_1``, ...),
``segment``, ``file``, ``position``, ``instant`` and ``deleted`` (a tombstone: the key was
deleted). Log blocks are written during the write phase, before the commit point, and like every
metadata block they count only once their instant completed on the data timeline.

Merge rule: for each key the entry of the largest instant time wins. This is a max, so merging is
commutative and associative. It is also the order in which the writes happened: two writes that
touch the same key never both commit unless one began after the other completed (optimistic
concurrency, checked under the table lock), so the later one has the larger instant time.

An entry that points into a data file no longer live (replaced by an overwrite) is stale; readers
drop it, and compaction drops it and tombstones for good: a base holds the complete state at its
horizon, so nothing older can resurface.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from timeline import Storage

from ._blocks import read_block, write_block
from ._keys import shard_of
from ._layout import (
    METADATA_FOLDER,
    RECORD_INDEX,
    BaseFile,
    LogBlock,
    base_path,
    log_path,
    parse_listing,
    shard_folder,
)

INDEX_FOLDER: Final = f"{METADATA_FOLDER}/{RECORD_INDEX}"
ENTRY_FIELDS: Final = (
    pa.field("segment", pa.string()),
    pa.field("file", pa.string()),
    pa.field("position", pa.int64()),
    pa.field("instant", pa.string()),
    pa.field("deleted", pa.bool_()),
)
#: Columns whose values repeat across many entries: stored and read as dictionaries.
_REPEATED: Final = ["segment", "file", "instant"]
#: Schema metadata of a base: the first key column's range per batch (an Arrow IPC stream).
_RANGES: Final = b"metatxn.batch_key_ranges"


def key_names(count: int) -> list[str]:
    return [f"key_{i}" for i in range(count)]


def index_schema(key_types: Sequence[pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, t) for name, t in zip(key_names(len(key_types)), key_types,
                                                             strict=True)] + list(ENTRY_FIELDS))


def _run_starts(table: pa.Table, keys: Sequence[str]) -> pa.Array:
    """A mask of the rows that start a run of equal keys in ``table`` (sorted by ``keys``)."""
    count = table.num_rows
    changed = pa.array([False] * max(count - 1, 0), pa.bool_())
    for name in keys:
        column = table[name]
        differs = pc.not_equal(column.slice(1), column.slice(0, count - 1))
        changed = pc.or_(changed, pc.fill_null(differs, True))
    return pa.concat_arrays([pa.array([True]), pa.chunked_array(changed).combine_chunks()])


def merge_entries(tables: Iterable[pa.Table], schema: pa.Schema) -> pa.Table:
    """Merge index entries: per key, the entry with the largest instant time. Sorted by key."""
    parts = [t.select(schema.names).cast(schema) for t in tables if t.num_rows]
    if not parts:
        return schema.empty_table()
    keys = [name for name in schema.names if name.startswith("key_")]
    combined = pa.concat_tables(parts)
    ordered = combined.sort_by([(k, "ascending") for k in keys] + [("instant", "descending")])
    if ordered.num_rows <= 1:
        return ordered
    return ordered.filter(_run_starts(ordered, keys))


def matching(table: pa.Table, wanted: pa.Table, keys: Sequence[str]) -> pa.Table:
    """The rows of ``table`` whose key is among ``wanted``'s."""
    if table.num_rows == 0 or wanted.num_rows == 0:
        return table.slice(0, 0)
    if len(keys) == 1:
        return table.filter(pc.is_in(table[keys[0]], value_set=wanted[keys[0]].combine_chunks()))
    # Join the key columns only (with row numbers), then take the rows: the other columns may be
    # dictionaries that differ between chunks, which a join cannot carry.
    numbered = table.select(list(keys)).append_column(
        "__row__", pa.array(np.arange(table.num_rows, dtype=np.int64)))
    hits = numbered.join(wanted.select(list(keys)), keys=list(keys), join_type="left semi")["__row__"]
    return table.take(pc.take(hits, pc.sort_indices(hits)))


@dataclass(frozen=True)
class ShardFiles:
    """What resolves one shard at a completion time: a base and the blocks after it."""

    shard: int
    base: BaseFile | None
    logs: tuple[LogBlock, ...]


class RecordIndex:
    """The record-level index of one keyed table."""

    def __init__(self, storage: Storage, key_types: Sequence[pa.DataType], shards: int, *,
                 row_group_rows: int = 1024) -> None:
        self.storage = storage
        self.shards = shards
        self.schema = index_schema(key_types)
        self.keys = key_names(len(key_types))
        self._row_group_rows = row_group_rows
        provider = getattr(storage, "arrow_filesystem", None)
        self._filesystem = provider() if provider is not None else None
        self._footers: dict[str, _Footer] = {}

    # -- building entries ----------------------------------------------------------------------

    def entries(self, keys: pa.Table, *, segment: str | pa.Array, file: pa.Array,
                position: pa.Array, instant: str, deleted: bool = False) -> pa.Table:
        """Index entries for ``keys`` (columns ``key_0``...); scalars are repeated."""
        count = keys.num_rows
        columns: dict[str, Any] = {name: keys[name] for name in self.keys}
        columns["segment"] = pa.array([segment] * count, pa.string()) if isinstance(segment, str) else segment
        columns["file"] = file
        columns["position"] = position
        columns["instant"] = pa.array([instant] * count, pa.string())
        columns["deleted"] = pa.array([deleted] * count, pa.bool_())
        return pa.table(columns).cast(self.schema)

    def shard_ids(self, keys: pa.Table) -> np.ndarray[Any, np.dtype[np.int64]]:
        return shard_of([keys[name] for name in self.keys], self.shards)

    def split(self, entries: pa.Table) -> dict[int, pa.Table]:
        """Entries by shard, each sorted by key."""
        if entries.num_rows == 0:
            return {}
        shard = self.shard_ids(entries)
        order = np.argsort(shard, kind="stable")
        ordered = entries.take(pa.array(order))
        sorted_shards = shard[order]
        cuts = np.flatnonzero(np.diff(sorted_shards)) + 1
        starts = np.concatenate([[0], cuts])
        ends = np.concatenate([cuts, [len(order)]])
        by_shard = {}
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            part = ordered.slice(start, end - start)
            by_shard[int(sorted_shards[start])] = part.sort_by([(k, "ascending") for k in self.keys])
        return by_shard

    # -- writing and undoing -------------------------------------------------------------------

    def write(self, instant_time: str, entries: pa.Table) -> dict[int, int]:
        """Write the log blocks of ``instant_time``; return bytes written per shard."""
        return {shard: write_block(self.storage, log_path(shard_folder(shard), instant_time),
                                   _dictionary_encoded(part))
                for shard, part in self.split(entries).items()}

    def write_shard(self, instant_time: str, shard: int, entries: pa.Table) -> int:
        """Write one shard's log block of ``instant_time`` (entries already of that shard)."""
        part = entries.select(self.schema.names).cast(self.schema)
        return write_block(self.storage, log_path(shard_folder(shard), instant_time),
                           _dictionary_encoded(part.sort_by([(k, "ascending") for k in self.keys])))

    def remove(self, instant_time: str) -> list[str]:
        """Delete every block of ``instant_time`` (it is being rolled back)."""
        name = f"{instant_time}.log.arrow"
        removed = []
        for key in self.storage.list(INDEX_FOLDER, recursive=True):
            if key.rsplit("/", 1)[-1] == name:
                self.storage.delete(key)
                removed.append(key)
        return removed

    def instant_entries(self, instant_time: str, shards: Iterable[int]) -> pa.Table:
        """The entries ``instant_time`` wrote into ``shards`` (for conflict checks).

        Raises:
            FileNotFoundError: a block is gone (cleaning folded it into a base); the caller must
                find the instant's entries another way.
        """
        parts = [read_block(self.storage, log_path(shard_folder(shard), instant_time), self.schema)
                 for shard in shards]
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    # -- reading -------------------------------------------------------------------------------

    def plan(self, shard: int, completed: Mapping[str, str], bound: str, done: set[str],
             listing: list[str] | None = None) -> ShardFiles:
        """The base and blocks that resolve ``shard`` at completion time ``bound``.

        ``done`` holds the completed metadata compactions: a base counts only once its
        compaction completed.
        """
        if listing is None:
            listing = self.storage.list(shard_folder(shard))
        bases, logs = parse_listing(listing)
        usable = [b for b in bases if b.compaction_time in done and b.horizon <= bound]
        base = max(usable, key=lambda b: (b.horizon, b.compaction_time), default=None)
        floor = base.horizon if base is not None else ""
        chosen = sorted((b for b in logs if floor < completed.get(b.instant_time, "") <= bound),
                        key=lambda b: completed[b.instant_time])
        return ShardFiles(shard, base, tuple(chosen))

    def lookup(self, keys: pa.Table, completed: Mapping[str, str], bound: str,
               done: set[str], *, instants: bool = False) -> pa.Table:
        """The merged entries of ``keys`` (columns ``key_0``...), tombstones included.

        Only the shards the keys hash to are read, in parallel (storage latency dominates).
        Entries read from a base carry no ``instant`` (they are older than any block) unless
        ``instants`` asks for it. The caller must check the snapshot is still retained
        (``MetadataTable.lookup_keys`` does).
        """
        if keys.num_rows == 0:
            return self.schema.empty_table()
        wanted_by_shard = self.split(keys.select(self.keys))
        if len(wanted_by_shard) == 1:
            parts = [self._lookup_shard(shard, wanted, completed, bound, done, instants)
                     for shard, wanted in wanted_by_shard.items()]
        else:
            parts = list(_pool().map(lambda item: self._lookup_shard(item[0], item[1], completed,
                                                                     bound, done, instants),
                                     wanted_by_shard.items()))
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    def _lookup_shard(self, shard: int, wanted: pa.Table, completed: Mapping[str, str], bound: str,
                      done: set[str], instants: bool) -> pa.Table:
        for attempt in range(3):
            files = self.plan(shard, completed, bound, done)
            try:
                tables = []
                if files.base is not None:
                    tables.append(self._read_base(files.base.path, wanted, instants))
                if files.logs:
                    # Match first, decode the dictionaries of what matched only.
                    blocks = pa.concat_tables([read_block(self.storage, block.path, self.schema,
                                                          decode=False) for block in files.logs])
                    tables.append(matching(blocks, wanted, self.keys).cast(self.schema))
                if len(tables) == 1 and files.base is not None:
                    return tables[0]  # a base holds one entry per key: nothing to merge
                return merge_entries(tables, self.schema)
            except FileNotFoundError:  # cleaned between listing and reading: list again
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _read_base(self, path: str, wanted: pa.Table, instants: bool) -> pa.Table:
        if self._filesystem is not None:
            filesystem, root = self._filesystem
            with filesystem.open_input_file(f"{root.rstrip('/')}/{path}") as handle:
                return self._read_batches(path, handle, wanted, instants)
        return self._read_batches(path, pa.BufferReader(self.storage.read(path)), wanted, instants)

    def _read_batches(self, path: str, source: Any, wanted: pa.Table, instants: bool) -> pa.Table:
        """Read only the batches whose range of the first key column can hold a wanted key.

        Bases never change, so their batch key ranges are kept (``_footers``).
        """
        reader = ipc.open_file(source)
        footer = self._footers.get(path)
        if footer is None:
            footer = self._footers[path] = _Footer.of(reader.schema)
            while len(self._footers) > _FOOTERS_KEPT:
                self._footers.pop(next(iter(self._footers)))
        groups = footer.groups_for(wanted[self.keys[0]].to_pylist())
        if not groups:
            return self.schema.empty_table()
        table = pa.Table.from_batches([reader.get_batch(group) for group in groups])
        # A base holds no tombstones, and every entry in it is older than any block after it,
        # so ``instant`` need not be decoded for a lookup: its entries count as the oldest.
        columns = [*self.keys, "segment", "file", "position"] + (["instant"] if instants else [])
        # Match while the repeated strings are still dictionary-encoded (one dictionary per
        # base): decoding every file path of the batches read would cost more than the lookup.
        found = matching(table.select(columns), wanted, self.keys)
        if not instants:
            found = found.append_column("instant", pa.array([""] * found.num_rows, pa.string()))
        found = found.append_column("deleted", pa.array([False] * found.num_rows, pa.bool_()))
        return found.cast(self.schema)

    def read_all(self, completed: Mapping[str, str], bound: str, done: set[str]) -> pa.Table:
        """Every merged entry at ``bound`` (for validation), tombstones included."""
        listing = self.storage.list(INDEX_FOLDER, recursive=True)
        parts = []
        for shard, names in _by_shard(listing).items():
            files = self.plan(shard, completed, bound, done, names)
            tables = [read_block(self.storage, files.base.path, self.schema)] if files.base else []
            tables += [read_block(self.storage, b.path, self.schema) for b in files.logs]
            parts.append(merge_entries(tables, self.schema))
        return pa.concat_tables(parts) if parts else self.schema.empty_table()

    # -- maintenance ---------------------------------------------------------------------------

    def compact(self, compaction_time: str, horizon: str, completed: Mapping[str, str],
                done: set[str], live_files: pa.Array) -> list[str]:
        """Fold, in every shard with blocks completed at or before ``horizon``, base and blocks
        into a new base ``<compaction_time>_<horizon>``; return the bases written.

        Shards with no such block keep their base: it is still exact at ``horizon``.
        """
        written = []
        for shard, names in _by_shard(self.storage.list(INDEX_FOLDER, recursive=True)).items():
            files = self.plan(shard, completed, horizon, done, names)
            if not files.logs:
                continue
            tables = [read_block(self.storage, files.base.path, self.schema)] if files.base else []
            tables += [read_block(self.storage, b.path, self.schema) for b in files.logs]
            merged = merge_entries(tables, self.schema)
            keep = pc.and_(pc.invert(merged["deleted"]), pc.is_in(merged["file"], value_set=live_files))
            path = base_path(shard_folder(shard), compaction_time, horizon, "arrow")
            self.storage.put_if_absent(path, self._encode_base(merged.filter(keep)))
            written.append(path)
        return written

    def _encode_base(self, entries: pa.Table) -> bytes:
        """A base: an Arrow IPC file of batches of ``row_group_rows`` entries sorted by key.

        Uncompressed, so a lookup reads the batches it needs without decoding anything; the
        repeated strings are dictionary-encoded (one dictionary for the file); the schema's
        metadata holds each batch's range of the first key column.
        """
        entries = _dictionary_encoded(entries)
        first = entries[self.keys[0]]
        starts = list(range(0, entries.num_rows, self._row_group_rows))
        ranges = pa.table({
            "low": first.take(pa.array(starts, pa.int64())),
            "high": first.take(pa.array([min(s + self._row_group_rows, entries.num_rows) - 1
                                          for s in starts], pa.int64())),
        })
        buffer = pa.BufferOutputStream()
        with ipc.new_stream(buffer, ranges.schema) as writer:
            writer.write_table(ranges)
        schema = entries.schema.with_metadata({_RANGES: buffer.getvalue().to_pybytes()})
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, schema) as writer:
            writer.write_table(entries.replace_schema_metadata(schema.metadata),
                               max_chunksize=self._row_group_rows)
        return bytes(sink.getvalue())

    def doomed(self, oldest_needed: str, completed: Mapping[str, str],
               done: set[str]) -> tuple[list[str], str | None]:
        """Bases and blocks no retained snapshot needs: in each shard, what is older than the
        newest usable base with horizon at or before ``oldest_needed`` (the shard's floor).

        Returns them and the largest floor horizon (None if no shard has a floor).
        """
        doomed: list[str] = []
        highest: str | None = None
        for names in _by_shard(self.storage.list(INDEX_FOLDER, recursive=True)).values():
            bases, logs = parse_listing(names)
            valid = sorted((b for b in bases if b.compaction_time in done),
                           key=lambda b: (b.horizon, b.compaction_time))
            serving = [b for b in valid if b.horizon <= oldest_needed]
            if not serving:
                continue
            floor = serving[-1]
            highest = max(filter(None, (highest, floor.horizon)))
            doomed += [b.path for b in valid
                       if (b.horizon, b.compaction_time) < (floor.horizon, floor.compaction_time)]
            doomed += [b.path for b in logs
                       if completed.get(b.instant_time) is not None
                       and completed[b.instant_time] <= floor.horizon]
        return doomed, highest

    def oldest_base_compaction(self, done: set[str]) -> str | None:
        """The oldest completed compaction among the bases on storage (they must stay usable)."""
        bases, _ = parse_listing(self.storage.list(INDEX_FOLDER, recursive=True))
        return min((b.compaction_time for b in bases if b.compaction_time in done), default=None)

    def remove_bases(self, compaction_time: str) -> list[str]:
        """Delete the bases of a compaction that died part way (it never completes)."""
        bases, _ = parse_listing(self.storage.list(INDEX_FOLDER, recursive=True))
        doomed = [b.path for b in bases if b.compaction_time == compaction_time]
        for path in doomed:
            self.storage.delete(path)
        return doomed


_FOOTERS_KEPT: Final = 4096
_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """Threads shared by all lookups: shards are read concurrently to overlap storage latency."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=8, thread_name_prefix="metatxn-index"))
        return _POOL[0]


@dataclass(frozen=True)
class _Footer:
    """The first key column's range in each batch of a base."""

    lows: list[Any]
    highs: list[Any]

    @classmethod
    def of(cls, schema: pa.Schema) -> _Footer:
        ranges = ipc.open_stream(pa.BufferReader((schema.metadata or {})[_RANGES])).read_all()
        return cls(ranges["low"].to_pylist(), ranges["high"].to_pylist())

    def groups_for(self, keys: list[Any]) -> list[int]:
        """Batches whose range holds one of ``keys`` (batches are sorted by key)."""
        groups: set[int] = set()
        for key in keys:
            # A composite key's first column may repeat across several row groups: take every
            # group whose range holds the value, not only the first.
            groups.update(range(bisect.bisect_left(self.highs, key), bisect.bisect_right(self.lows, key)))
        return sorted(groups)


def _dictionary_encoded(entries: pa.Table) -> pa.Table:
    """``entries`` with the repeated strings as one dictionary each (a file path is stored once
    per block, not once per key)."""
    entries = entries.combine_chunks()
    for name in _REPEATED:
        index = entries.schema.get_field_index(name)
        entries = entries.set_column(index, name, entries[name].dictionary_encode())
    return entries


def _by_shard(listing: list[str]) -> dict[int, list[str]]:
    shards: dict[int, list[str]] = {}
    for key in listing:
        folder = key.rsplit("/", 2)
        if len(folder) == 3 and folder[1].isdigit():
            shards.setdefault(int(folder[1]), []).append(key)
    return shards
