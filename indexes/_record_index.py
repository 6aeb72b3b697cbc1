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
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from timeline import CorruptMetadataError, ObjectNotFoundError, Storage

from ._blocks import decoding, missing_block, read_block
from ._keys import shard_of
from ._layout import METADATA_FOLDER, RECORD_INDEX, BaseFile, base_path, parse_listing, shard_folder

INDEX_FOLDER: Final = f"{METADATA_FOLDER}/{RECORD_INDEX}"
_LOG_EXPECTED: Final = "a record-index log: an Arrow IPC file of index entries, one shard per batch"
_BASE_EXPECTED: Final = ("a record-index base: an Arrow IPC file of index entries sorted by key, "
                         "with its batches' key ranges")
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
#: Schema metadata of a log file: the shard of each batch (a JSON list).
_SHARDS: Final = b"metatxn.batch_shards"
#: Largest batch of a log file (a shard with more entries in one instant gets several).
_LOG_BATCH_ROWS: Final = 65536
_INDEX_LOG = re.compile(r"^(?P<time>\d{17})(?:\.(?P<part>\d+))?\.log\.arrow$", re.ASCII)


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
class IndexLog:
    """One log file of a data instant: entries of several shards, one shard per batch."""

    path: str
    instant_time: str


@dataclass(frozen=True)
class IndexFiles:
    """A listing of the index: usable bases per shard and the log files, as of one bound."""

    #: shard -> the newest usable base at or before the bound (absent: no base).
    bases: dict[int, BaseFile]
    #: log files of instants completed at or before the bound, in completion order, each with
    #: its completion time.
    logs: list[tuple[IndexLog, str]]

    def floor(self, shard: int) -> str:
        """Completion time up to which ``shard``'s base holds everything ("" without a base)."""
        base = self.bases.get(shard)
        return base.horizon if base is not None else ""


def parse_index_log(key: str) -> IndexLog | None:
    match = _INDEX_LOG.match(key.rsplit("/", 1)[-1])
    return IndexLog(key, match.group("time")) if match else None


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
        self._log_shards: dict[str, list[int]] = {}

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

    def write(self, instant_time: str, entries: pa.Table, *, part: int | None = None) -> dict[int, int]:
        """Write ``entries`` as one log file of ``instant_time``; return entries per shard.

        A writer that produces its entries in pieces (Spark tasks) writes one file per piece,
        each with its own ``part`` number.
        """
        by_shard = self.split(entries.select(self.schema.names).cast(self.schema))
        if not by_shard:
            return {}
        shards = sorted(by_shard)
        table = _dictionary_encoded(pa.concat_tables([by_shard[s] for s in shards]))
        batches: list[pa.RecordBatch] = []
        batch_shards: list[int] = []
        offset = 0
        for shard in shards:
            rows = by_shard[shard].num_rows
            for start in range(0, rows, _LOG_BATCH_ROWS):
                length = min(_LOG_BATCH_ROWS, rows - start)
                batches.extend(table.slice(offset + start, length).to_batches())
                batch_shards.append(shard)
            offset += rows
        schema = table.schema.with_metadata({_SHARDS: msgspec.json.encode(batch_shards)})
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch.replace_schema_metadata(schema.metadata))
        name = f"{instant_time}.log.arrow" if part is None else f"{instant_time}.{part}.log.arrow"
        self.storage.put_if_absent(f"{INDEX_FOLDER}/{name}", bytes(sink.getvalue()))
        return {shard: by_shard[shard].num_rows for shard in shards}

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
                removed.append(log.path)
        return removed

    def instant_entries(self, instant_time: str, shards: Iterable[int]) -> pa.Table:
        """The entries ``instant_time`` wrote into ``shards`` (for conflict checks).

        Raises:
            FileNotFoundError: its log files are gone (cleaning folded them into bases); the
                caller must find the instant's entries another way.
        """
        wanted = set(shards)
        logs = [log for log in self._logs(self.storage.list(INDEX_FOLDER))
                if log.instant_time == instant_time]
        if wanted and not logs:
            raise FileNotFoundError(f"{INDEX_FOLDER}/{instant_time}.log.arrow")
        parts = [self._read_log(log.path, dict.fromkeys(wanted, ""), "~") for log in logs]
        return pa.concat_tables(parts).cast(self.schema) if parts else self.schema.empty_table()

    # -- reading -------------------------------------------------------------------------------

    def files(self, completed: Mapping[str, str], bound: str, done: set[str],
              shards: Iterable[int] | None = None,
              recorded: Callable[[str], set[int]] | None = None) -> IndexFiles:
        """What resolves the index at completion time ``bound``: the bases of ``shards`` (all
        when None) and the log files. ``done`` holds the completed metadata compactions: a base
        counts only once its compaction completed.

        ``recorded(T)`` gives the shards completed instant ``T`` recorded entries for (its
        deltacommit): if one of them is read here, above its base's horizon, ``T`` must have a
        log file.

        Raises:
            ObjectNotFoundError: a log file an instant recorded is missing.
        """
        if shards is None:
            listing = self.storage.list(INDEX_FOLDER, recursive=True)
        else:
            listing = self.storage.list(INDEX_FOLDER)
            for wanted in sorted(set(shards)):
                listing += self.storage.list(shard_folder(wanted))
        bases: dict[int, BaseFile] = {}
        for key in listing:
            shard = _shard_of_path(key)
            if shard is None:
                continue
            found, _ = parse_listing([key])
            for base in found:
                if base.compaction_time in done and base.horizon <= bound and (
                        shard not in bases or (base.horizon, base.compaction_time)
                        > (bases[shard].horizon, bases[shard].compaction_time)):
                    bases[shard] = base
        logs = [(log, completed[log.instant_time]) for log in self._logs(listing)
                if "" < completed.get(log.instant_time, "") <= bound]
        logs.sort(key=lambda item: item[1])
        result = IndexFiles(bases, logs)
        if recorded is not None:
            self._check_recorded(result, completed, bound, shards, recorded)
        return result

    def _check_recorded(self, found: IndexFiles, completed: Mapping[str, str], bound: str,
                        shards: Iterable[int] | None,
                        recorded: Callable[[str], set[int]]) -> None:
        logged = {log.instant_time for log, _ in found.logs}
        wanted = None if shards is None else set(shards)
        floors = {} if wanted is None else {shard: found.floor(shard) for shard in wanted}
        low = min(floors.values(), default="") if wanted is not None else ""
        unlogged = [(instant_time, done_at) for instant_time, done_at in completed.items()
                    if instant_time not in logged and low < done_at <= bound]
        prefetch = getattr(recorded, "prefetch", None)  # reads many deltacommits at once
        if prefetch is not None:
            prefetch(instant_time for instant_time, _ in unlogged)
        for instant_time, done_at in unlogged:
            for shard in recorded(instant_time):
                if (wanted is None or shard in wanted) and found.floor(shard) < done_at:
                    if any(done_at <= base.horizon for base in found.bases.values()):
                        # Another shard's base folded the log: this shard's base is lost.
                        raise ObjectNotFoundError(f"{shard_folder(shard)}/ (its base)")
                    raise ObjectNotFoundError(f"{INDEX_FOLDER}/{instant_time}.log.arrow")

    def lookup(self, keys: pa.Table, completed: Mapping[str, str], bound: str,
               done: set[str], *, instants: bool = False,
               recorded: Callable[[str], set[int]] | None = None) -> pa.Table:
        """The merged entries of ``keys`` (columns ``key_0``...), tombstones included.

        Only the shards the keys hash to are read: their bases (in parallel: storage latency
        dominates), and their batches of the log files. Entries read from a base carry no
        ``instant`` (they are older than any log entry) unless ``instants`` asks for it. The
        caller must check the snapshot is still retained (``MetadataTable.lookup_keys`` does).

        Raises:
            CorruptMetadataError: an index file cannot be decoded, or one that a completed
                instant recorded (``recorded``, see :meth:`files`) is missing.
        """
        if keys.num_rows == 0:
            return self.schema.empty_table()
        wanted = keys.select(self.keys)
        by_shard = self.split(wanted)
        for attempt in range(3):
            try:
                return self._lookup(wanted, by_shard, completed, bound, done, instants, recorded)
            except FileNotFoundError as exc:  # cleaned between listing and reading: list again
                if attempt == 2:
                    raise missing_block(exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _lookup(self, wanted: pa.Table, by_shard: dict[int, pa.Table], completed: Mapping[str, str],
                bound: str, done: set[str], instants: bool,
                recorded: Callable[[str], set[int]] | None) -> pa.Table:
        files = self.files(completed, bound, done, by_shard, recorded)
        with_base = [s for s in by_shard if s in files.bases]

        def read_base(shard: int) -> pa.Table:
            return self._read_base(files.bases[shard].path, by_shard[shard], instants)

        if len(with_base) <= 1:
            tables = [read_base(shard) for shard in with_base]
        else:
            tables = list(_pool().map(read_base, with_base))
        floors = {shard: files.floor(shard) for shard in by_shard}
        sorted_wanted = {shard: self._sorted_keys(keys) for shard, keys in by_shard.items()}
        logged = [self._match_log(log.path, floors, done_at, by_shard, sorted_wanted)
                  for log, done_at in files.logs if done_at > min(floors.values())]
        if logged:
            # Matched while still dictionary-encoded: only the matches' strings are decoded.
            tables.append(pa.concat_tables(logged).cast(self.schema))
        if len(tables) == 1 and not logged:
            return tables[0]  # bases hold one entry per key: nothing to merge
        return merge_entries(tables, self.schema)

    def _sorted_keys(self, keys: pa.Table) -> np.ndarray[Any, Any] | None:
        """A one-column integer key as a sorted numpy array (for binary search), else None."""
        if len(self.keys) != 1 or not pa.types.is_integer(self.schema.field(self.keys[0]).type):
            return None
        return np.unique(keys[self.keys[0]].to_numpy())

    def _match_log(self, path: str, floors: Mapping[int, str], done_at: str,
                   by_shard: Mapping[int, pa.Table],
                   sorted_wanted: Mapping[int, np.ndarray[Any, Any] | None]) -> pa.Table:
        """The entries of a log file whose key is wanted, from the batches of the wanted shards
        whose floor is below ``done_at`` (the log's completion time); dictionaries still
        encoded. Batches are sorted by key, so an integer key is found by binary search."""
        with decoding(path, _LOG_EXPECTED):
            return self._match_log_batches(path, floors, done_at, by_shard, sorted_wanted)

    def _match_log_batches(self, path: str, floors: Mapping[int, str], done_at: str,
                           by_shard: Mapping[int, pa.Table],
                           sorted_wanted: Mapping[int, np.ndarray[Any, Any] | None]) -> pa.Table:
        reader = ipc.open_file(self._open(path))
        shards = self._shards_of(path, reader.schema)
        parts = []
        for i, shard in enumerate(shards):
            if shard not in by_shard or floors[shard] >= done_at:
                continue
            batch = reader.get_batch(i)
            search = sorted_wanted[shard]
            if search is None:
                parts.append(matching(pa.Table.from_batches([batch]), by_shard[shard], self.keys))
                continue
            keys = batch.column(0).to_numpy()
            at = np.searchsorted(keys, search)
            inside = at < len(keys)
            rows = at[inside][keys[at[inside]] == search[inside]]
            parts.append(pa.Table.from_batches([batch.take(pa.array(rows))]))
        if not parts:
            return pa.Table.from_batches([], reader.schema).select(self.schema.names)
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

    def _read_log(self, path: str, floors: Mapping[int, str], done_at: str) -> pa.Table:
        """The batches of a log file for the shards in ``floors`` whose floor is below
        ``done_at`` (the log's completion time), dictionaries still encoded."""
        with decoding(path, _LOG_EXPECTED):
            reader = ipc.open_file(self._open(path))
            shards = self._shards_of(path, reader.schema)
            batches = [reader.get_batch(i) for i, shard in enumerate(shards)
                       if shard in floors and floors[shard] < done_at]
            if not batches:
                return pa.Table.from_batches([], reader.schema).select(self.schema.names)
            return pa.Table.from_batches(batches).select(self.schema.names)

    def _shards_of(self, path: str, schema: pa.Schema) -> list[int]:
        shards = self._log_shards.get(path)
        if shards is None:
            try:
                shards = msgspec.json.decode((schema.metadata or {})[_SHARDS], type=list[int])
            except (KeyError, msgspec.DecodeError) as exc:
                raise CorruptMetadataError(path, "a record-index log with its batch shards",
                                           str(exc)) from None
            if any(not 0 <= shard < self.shards for shard in shards):
                raise CorruptMetadataError(path, f"a record-index log of shards 0..{self.shards - 1}",
                                           f"shards {sorted(set(shards))}")
            self._log_shards[path] = shards
            while len(self._log_shards) > _FOOTERS_KEPT:
                self._log_shards.pop(next(iter(self._log_shards)))
        return shards

    def _log_shard_set(self, path: str) -> set[int]:
        """The shards a log file holds entries of (reads its footer once)."""
        if path not in self._log_shards:
            data = self.storage.read(path)
            with decoding(path, _LOG_EXPECTED):
                self._shards_of(path, ipc.open_file(pa.BufferReader(data)).schema)
        return set(self._log_shards[path])

    def _read_base(self, path: str, wanted: pa.Table, instants: bool) -> pa.Table:
        with decoding(path, _BASE_EXPECTED):
            return self._read_batches(path, self._open(path), wanted, instants)

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
        # A base holds no tombstones, and every entry in it is older than any log entry after
        # it, so ``instant`` need not be decoded for a lookup: its entries count as the oldest.
        columns = [*self.keys, "segment", "file", "position"] + (["instant"] if instants else [])
        # Match while the repeated strings are still dictionary-encoded (one dictionary per
        # base): decoding every file path of the batches read would cost more than the lookup.
        found = matching(table.select(columns), wanted, self.keys)
        if not instants:
            found = found.append_column("instant", pa.array([""] * found.num_rows, pa.string()))
        found = found.append_column("deleted", pa.array([False] * found.num_rows, pa.bool_()))
        return found.cast(self.schema)

    def _merged(self, files: IndexFiles, shards: Iterable[int]) -> dict[int, pa.Table]:
        """The full merged state of ``shards`` (bases and log batches), tombstones included."""
        wanted = set(shards)
        floors = {shard: files.floor(shard) for shard in wanted}
        parts: dict[int, list[pa.Table]] = {shard: [] for shard in wanted}
        for shard in wanted:
            if shard in files.bases:
                parts[shard].append(read_block(self.storage, files.bases[shard].path, self.schema))
        for log, done_at in files.logs:
            data = self.storage.read(log.path)
            with decoding(log.path, _LOG_EXPECTED):
                reader = ipc.open_file(pa.BufferReader(data))
                for i, shard in enumerate(self._shards_of(log.path, reader.schema)):
                    if shard in wanted and floors[shard] < done_at:
                        parts[shard].append(pa.Table.from_batches([reader.get_batch(i)])
                                            .select(self.schema.names).cast(self.schema))
        return {shard: merge_entries(tables, self.schema) for shard, tables in parts.items() if tables}

    def _shards_in(self, files: IndexFiles) -> set[int]:
        shards = set(files.bases)
        for log, _ in files.logs:
            shards |= self._log_shard_set(log.path)
        return shards

    def read_all(self, completed: Mapping[str, str], bound: str, done: set[str],
                 recorded: Callable[[str], set[int]] | None = None) -> pa.Table:
        """Every merged entry at ``bound`` (for validation), tombstones included."""
        files = self.files(completed, bound, done, recorded=recorded)
        merged = self._merged(files, self._shards_in(files))
        return pa.concat_tables(merged.values()) if merged else self.schema.empty_table()

    def damaged_files(self, completed: Mapping[str, str], done: set[str],
                      recorded: Callable[[str], set[int]]) -> list[CorruptMetadataError]:
        """Every index file that cannot be decoded, and a log file a completed instant recorded
        that is missing (for validation: nothing raises on damage)."""
        damaged: list[CorruptMetadataError] = []
        for key in self.storage.list(INDEX_FOLDER, recursive=True):
            try:
                if _shard_of_path(key) is not None:
                    if parse_listing([key])[0]:
                        read_block(self.storage, key, self.schema)
                        with decoding(key, _BASE_EXPECTED):
                            _Footer.of(ipc.open_file(pa.BufferReader(self.storage.read(key))).schema)
                elif parse_index_log(key) is not None:
                    self._log_shards.pop(key, None)
                    self._read_log(key, dict.fromkeys(range(self.shards), ""), "~")
            except CorruptMetadataError as exc:
                damaged.append(exc)
            except FileNotFoundError:
                continue  # cleaned since the listing
        try:
            self.files(completed, "9" * 17, done, recorded=recorded)
        except ObjectNotFoundError as exc:
            damaged.append(missing_block(exc))
        return damaged

    # -- maintenance ---------------------------------------------------------------------------

    def compact(self, compaction_time: str, horizon: str, completed: Mapping[str, str],
                done: set[str], live_files: pa.Array) -> list[str]:
        """Fold, in every shard with log entries completed at or before ``horizon``, base and
        entries into a new base ``<compaction_time>_<horizon>``; return the bases written.

        Shards with no such entries keep their base: it is still exact at ``horizon``.
        """
        files = self.files(completed, horizon, done)
        changed = set()
        for log, done_at in files.logs:
            changed |= {s for s in self._log_shard_set(log.path) if files.floor(s) < done_at}
        written = []
        for shard, merged in sorted(self._merged(files, changed).items()):
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
        """Bases and log files no retained snapshot needs.

        Each shard's floor is its newest usable base with horizon at or before
        ``oldest_needed``; older bases of the shard go, and so does a log file once every
        shard it holds entries of has a floor at or after the log's completion. Returns them
        and the largest floor horizon (None if no shard has a floor).
        """
        listing = self.storage.list(INDEX_FOLDER, recursive=True)
        by_shard: dict[int, list[BaseFile]] = {}
        for key in listing:
            shard = _shard_of_path(key)
            if shard is not None:
                by_shard.setdefault(shard, []).extend(
                    b for b in parse_listing([key])[0] if b.compaction_time in done)
        doomed: list[str] = []
        floors: dict[int, str] = {}
        for shard, bases in by_shard.items():
            ordered = sorted(bases, key=lambda b: (b.horizon, b.compaction_time))
            serving = [b for b in ordered if b.horizon <= oldest_needed]
            if not serving:
                continue
            floor = serving[-1]
            floors[shard] = floor.horizon
            doomed += [b.path for b in ordered
                       if (b.horizon, b.compaction_time) < (floor.horizon, floor.compaction_time)]
        for log in self._logs(listing):
            done_at = completed.get(log.instant_time)
            if done_at is not None and all(floors.get(s, "") >= done_at
                                           for s in self._log_shard_set(log.path)):
                doomed.append(log.path)
                self._log_shards.pop(log.path, None)
        return doomed, max(floors.values(), default=None)

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

    @staticmethod
    def _logs(listing: Iterable[str]) -> list[IndexLog]:
        return [log for key in listing if _shard_of_path(key) is None
                and (log := parse_index_log(key)) is not None]


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


def _shard_of_path(key: str) -> int | None:
    """The shard of a file in a shard folder (``.../record_index/<shard>/<name>``), else None."""
    parts = key.rsplit("/", 3)
    if len(parts) == 4 and parts[1] == RECORD_INDEX and parts[2].isdigit():
        return int(parts[2])
    return None
