"""Writing data files for one instant: partition split, target file size, sort, statistics.

Files go to ``segment_<id>/`` (unpartitioned tables) or Hive-style folders
``<column>=<value>/...`` (partitioned tables), named ``part-<segment>-<n>-<token>_<T>.parquet``.
Partition columns stay inside the files too, so every file is self-describing and readers need
no path parsing.

Before a data file is created, a marker ``_markers/<file name>`` holding its table-relative path
is stored; the name ends with ``_<T>.parquet`` (delete deltas, written the same way, end with
``_<T>.deletedelta``), so the markers of ``T`` are found by one listing
of ``_markers/`` (which holds only the markers of writes in flight). A rollback of ``T`` (after a
crash, possibly in another process) deletes exactly the files its markers name, without listing
data folders. Markers are removed once ``T`` is decided: a committed writer deletes its own by
name, a rollback those it lists; what a writer killed after its commit point leaves is swept by
the table maintenance that runs with a metadata compaction. The folder
is flat so that no per-instant folders are left behind on filesystems that have real folders.

A marker is read back only through :func:`read_marker`, which checks that it names a data file
or delete delta of its own name inside the table (power loss with fsync off can leave an empty
marker, and a hostile one could name ``../anything``): nothing is deleted on a marker's word
unless it passed.

Partition folders are named as Hive and Spark name them (``_hive``). A folder name
``<column>=<value>`` longer than 255 bytes, the file-name limit of common filesystems, is
refused with ``InvalidOptionError`` before any file of that partition is written.

Memory: without ``sort_by`` (or with rows that arrive sorted) input is buffered per partition
until a file's worth (``target_file_bytes`` of Arrow memory) is reached, then written; beyond
``buffer_bytes`` in total the largest buffer is flushed early. With ``sort_by`` the whole load is
sorted before it is cut into files: in memory up to ``sort_memory_bytes``, beyond it through
sorted runs spilled to a temporary folder and merged (``_sort``). Either way a
``RecordBatchReader`` larger than memory is written in bounded memory.
"""

from __future__ import annotations

import itertools
import logging
import posixpath
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import METADATA_FOLDER, stats_eligible
from metatxn.timeline import (
    TIMELINE_FOLDER,
    CorruptMetadataError,
    InvalidOptionError,
    ObjectNotFoundError,
    Storage,
    check_key,
)

from ._hive import parse_hive_value, partition_path
from ._sort import (
    DEFAULT_SORT_MEMORY_BYTES,
    SortOrder,
    SpillFolder,
    in_memory_run,
    merge_in_passes,
    read_run,
    run_batch_bytes,
)
from ._storage_io import DataStore
from ._table_layout import MARKERS_FOLDER, TRASH_FOLDER

log = logging.getLogger("metatxn")

#: What a marker names: data files and delete deltas, never metadata.
_MARKED_SUFFIXES = (".parquet", ".deletedelta")
_NOT_DATA_FOLDERS = frozenset({TIMELINE_FOLDER, METADATA_FOLDER, MARKERS_FOLDER, TRASH_FOLDER})
class ColumnStats(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """min/max (None when unknown), null count and value count of one column in one file."""

    min: Any
    max: Any
    nulls: int
    count: int


class FileStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What the writer of one data file reports back: where, how big, and its statistics."""

    path: str
    partition: str
    rows: int
    size: int
    stats: dict[str, ColumnStats] = msgspec.field(default_factory=dict)
    #: The file's partition values (a timestamp as its folder's text: exact to the nanosecond,
    #: which a stored datetime is not).
    partition_values: dict[str, Any] = msgspec.field(default_factory=dict)
    #: An external segment's file: its format and last modification (epoch ms) when added.
    format: str = "parquet"
    modified_ms: int | None = None
    #: An external segment's file: what its storage changes with every write (``file_version``).
    version: str | None = None
    #: The table version whose schema the file was written with.
    schema_id: int = 0


def marker_path(file_name: str) -> str:
    return f"{MARKERS_FOLDER}/{file_name}"


def marker_instant(key: str) -> str:
    """The instant that wrote the file a marker names (files end ``_<T>.<extension>``)."""
    return key.rsplit("_", 1)[-1].split(".", 1)[0]


def markers_of(storage: Storage, instant_time: str) -> list[str]:
    """The marker keys of the files (data and delete deltas) instant ``instant_time`` started."""
    return [key for key in storage.list(MARKERS_FOLDER) if marker_instant(key) == instant_time]


def read_marker(storage: Storage, key: str) -> str:
    """The table-relative path of the data file or delete delta that marker ``key`` names, checked.

    The content must be UTF-8, a normalised relative path (no empty, ``.`` or ``..`` segment)
    with at least one folder, outside ``_timeline/``, ``_metadata/`` and ``_markers/``, ending
    with the marker's own file name (``..._<T>.parquet`` or ``..._<T>.deletedelta``). Anything
    else raises :class:`CorruptMetadataError` naming the marker, so no caller deletes or trusts a
    path a damaged or hostile marker names. A missing marker raises ``ObjectNotFoundError``.
    """
    data = storage.read(key)
    name = key.rsplit("/", 1)[-1]
    expected = (f"the UTF-8 table-relative path '<folder>/{name}' of the data file or delete "
                "delta it is named after (normalised: no '..', '.' or empty segment)")
    try:
        path = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptMetadataError(key, expected, f"{len(data)} bytes that are not UTF-8") from None
    if not path:
        raise CorruptMetadataError(key, expected, "an empty file")
    try:
        check_key(path)
    except InvalidOptionError:
        raise CorruptMetadataError(key, expected, f"{path[:300]!r}") from None
    folder, _, file_name = path.rpartition("/")
    if (not folder or file_name != name or not name.endswith(_MARKED_SUFFIXES)
            or folder.split("/", 1)[0] in _NOT_DATA_FOLDERS):
        raise CorruptMetadataError(key, expected, f"{path[:300]!r}")
    return path


def marked_paths(storage: Storage, instant_time: str) -> tuple[list[tuple[str, str]], list[str]]:
    """What instant ``instant_time``'s markers name, checked: ``(marker, path)`` pairs of the
    markers ``read_marker`` accepts, and the damaged markers (logged; the files they may name
    cannot be located safely, so no caller deletes them). Markers gone since the listing are
    skipped: another cleanup finished them."""
    named: list[tuple[str, str]] = []
    damaged: list[str] = []
    for marker in markers_of(storage, instant_time):
        try:
            named.append((marker, read_marker(storage, marker)))
        except ObjectNotFoundError:
            continue
        except CorruptMetadataError as exc:
            log.warning("not deleting what marker %s of instant %s names: %s", marker, instant_time, exc)
            damaged.append(marker)
    return named, damaged


def column_stats(table: pa.Table) -> dict[str, ColumnStats]:
    """Exact statistics of every eligible column; min/max stay unknown where they would lie."""
    stats: dict[str, ColumnStats] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if not stats_eligible(column.type):
            continue
        nulls = column.null_count
        low = high = None
        if nulls < len(column):
            try:
                # NaN is unordered: a range that ignored it would prune files that hold matches.
                has_nan = pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py()
                if not has_nan:
                    extremes = pc.min_max(column)
                    low = _plain(extremes["min"], round_up=False)
                    high = _plain(extremes["max"], round_up=True)
            except pa.ArrowNotImplementedError:
                low = high = None  # no ordering kernel for the type (duration, float16): unknown
        stats[name] = ColumnStats(min=low, max=high, nulls=nulls, count=len(column))
    return stats


#: Rows of a file whose distinct values decide whether a column is dictionary-encoded.
_DICTIONARY_SAMPLE = 16_384


def repeating_columns(table: pa.Table) -> list[str]:
    """The columns worth dictionary-encoding: at most half the values of a sample are distinct.

    pyarrow starts every column as a dictionary and falls back to plain encoding once the
    dictionary page is full, keeping the full dictionary page and the pages already encoded: a
    column of random doubles came out 25 % larger than plain. Deciding per file from the data
    avoids that (Spark's writer decides from the first page, with the same effect).
    """
    chosen = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_nested(column.type) or pa.types.is_dictionary(column.type):
            chosen.append(name)
            continue
        sample = column.slice(0, _DICTIONARY_SAMPLE)  # counting all values costs as much as writing them
        try:
            distinct = pc.count_distinct(sample).as_py()
        except pa.ArrowNotImplementedError:
            chosen.append(name)
            continue
        if distinct * 2 <= len(sample) - sample.null_count:
            chosen.append(name)
    return chosen


def _plain(scalar: pa.Scalar, *, round_up: bool) -> Any:
    """A bound as a plain Python value (it is stored in JSON commit metadata too).

    Python times stop at microseconds, and pyarrow returns nanosecond values as pandas objects
    (or truncates them), so a nanosecond bound is widened to the enclosing microsecond: a
    truncated maximum would prune files that hold matches. None (unknown) if that overflows.
    """
    data_type = scalar.type
    if getattr(data_type, "unit", None) != "ns":
        return scalar.as_py()
    nanos = scalar.cast(pa.int64()).as_py()
    micros = -(-nanos // 1000) if round_up else nanos // 1000
    if pa.types.is_timestamp(data_type):
        coarse = pa.timestamp("us", data_type.tz)
    elif pa.types.is_time64(data_type):
        if micros >= 86_400_000_000:
            return None
        coarse = pa.time64("us")
    else:
        coarse = pa.duration("us")
    try:
        return pa.scalar(micros, pa.int64()).cast(coarse).as_py()
    except (pa.ArrowInvalid, OverflowError, ValueError):
        return None


@dataclass
class _Buffer:
    partition: str
    values: dict[str, Any]
    batches: list[pa.RecordBatch] = field(default_factory=list)
    nbytes: int = 0
    #: Sorted runs of this partition spilled to disk (a load sorted as a whole).
    runs: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class KeyLocations:
    """Where a write put each record key: row ``i`` of ``keys`` is at ``position[i]`` of
    ``file[i]`` (a dictionary array: each path is held once)."""

    keys: pa.Table
    file: pa.Array
    position: pa.Array


class DataFileWriter:
    """Writes one instant's data files into a :class:`DataStore`.

    With ``sort_by`` the whole load is sorted before it is cut into files, per partition, so the
    files of one load cover disjoint ``sort_by`` ranges (rows that tie may straddle two files) and
    a filter on a sort column opens files in proportion to what it selects. The load is sorted in
    memory while its buffered rows fit ``sort_memory_bytes``; beyond that the largest partition's
    rows are sorted and spilled as a run to a temporary folder, and each partition's runs are
    merged as its files are cut (``_sort``). The temporary folder is removed whether the write
    succeeds or fails.
    """

    def __init__(
        self,
        store: DataStore,
        schema: pa.Schema,
        *,
        instant_time: str,
        segment: str,
        partition_by: list[str],
        sort_by: list[str],
        new_token: Callable[[], str],
        target_file_bytes: int = 128 * 1024 * 1024,
        buffer_bytes: int = 512 * 1024 * 1024,
        row_group_rows: int = 128 * 1024,
        key_columns: Sequence[str] = (),
        presorted: bool = False,
        sort_memory_bytes: int = DEFAULT_SORT_MEMORY_BYTES,
        schema_id: int = 0,
        on_file: Callable[[str, pa.Table], None] | None = None,
    ) -> None:
        """``schema_id``: the table version ``schema`` is (recorded with each file, so readers
        know which names its columns have). ``presorted``: the rows arrive sorted by
        ``sort_by`` already (a compaction sorted all of them at once), so they are cut into
        files as they come, not sorted again.
        ``buffer_bytes`` bounds the memory of a load that is not sorted, ``sort_memory_bytes``
        that of one that is. ``on_file(path, keys)`` is called before each file is written,
        with its record-key columns (row ``i`` at position ``i``): the record index starts
        its log meanwhile."""
        self._store = store
        self._legacy_folders: dict[str, bool] = {}
        self._presorted = presorted
        self._schema = schema
        self._schema_id = schema_id
        self._instant_time = instant_time
        self._segment = segment
        self._partition_by = partition_by
        self._sort_by = sort_by
        self._new_token = new_token
        self._target = target_file_bytes
        self._budget = max(buffer_bytes, target_file_bytes)
        self._sort_budget = sort_memory_bytes
        self._row_group_rows = row_group_rows
        self._buffers: dict[str, _Buffer] = {}
        self._buffered = 0
        self._written: list[FileStatus] = []
        self._key_columns = list(key_columns)
        self._keys: list[tuple[str, pa.Table]] = []
        self._on_file = on_file

    @property
    def written(self) -> list[FileStatus]:
        return list(self._written)

    @property
    def keys(self) -> list[tuple[str, pa.Table]]:
        """Per file written: its path and its record-key columns, row ``i`` at position ``i``."""
        return list(self._keys)

    def key_locations(self) -> KeyLocations:
        """The record keys of every file written and where each one is, as columns built once."""
        if not self._keys:
            empty = self._schema.empty_table().select(self._key_columns)
            return KeyLocations(empty, pa.DictionaryArray.from_arrays(
                pa.array([], pa.int32()), pa.array([], pa.string())), pa.array([], pa.int64()))
        counts = np.array([keys.num_rows for _, keys in self._keys], dtype=np.int64)
        total = int(counts.sum())
        starts = np.cumsum(counts) - counts
        file = pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(len(counts), dtype=np.int32), counts)),
            pa.array([path for path, _ in self._keys], pa.string()))
        position = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
        return KeyLocations(pa.concat_tables([keys for _, keys in self._keys]), file,
                            pa.array(position))

    def write(self, batches: Iterable[pa.RecordBatch]) -> list[FileStatus]:
        """Write every batch; return the status of each file written, in write order."""
        if self._sort_by and not self._presorted:
            with SpillFolder() as spill:
                self._write_sorted(batches, SortOrder(self._sort_by), spill)
            return self.written
        for batch in batches:
            for partition, values, part in self._split(batch):
                buffer = self._add(partition, values, part)
                if buffer.nbytes >= self._target:
                    self._flush(buffer)
            while self._buffered > self._budget:
                self._flush(max(self._buffers.values(), key=lambda b: b.nbytes))
        for buffer in list(self._buffers.values()):
            self._flush(buffer)
        return self.written

    def _add(self, partition: str, values: dict[str, Any], part: pa.RecordBatch) -> _Buffer:
        buffer = self._buffers.get(partition)
        if buffer is None:
            buffer = self._buffers[partition] = _Buffer(partition, values)
        buffer.batches.append(part)
        buffer.nbytes += part.nbytes
        self._buffered += part.nbytes
        return buffer

    def _write_sorted(self, batches: Iterable[pa.RecordBatch], order: SortOrder,
                      spill: SpillFolder) -> None:
        batch_bytes = run_batch_bytes(self._sort_budget)
        for batch in batches:
            for partition, values, part in self._split(batch):
                self._add(partition, values, part)
            while self._buffered > self._sort_budget:
                largest = max(self._buffers.values(), key=lambda b: b.nbytes)
                sorted_rows = order.sort(self._take(largest))
                largest.runs.append(spill.write(iter([sorted_rows]), self._schema, batch_bytes))
        for buffer in list(self._buffers.values()):
            rest = self._take(buffer)
            self._buffers.pop(buffer.partition)
            if not buffer.runs:
                if rest.num_rows:
                    self._cut(buffer, iter([order.sort(rest)]))
                continue
            runs = [read_run(path) for path in buffer.runs]
            if rest.num_rows:
                runs.append(in_memory_run(order.sort(rest), batch_bytes))
            self._cut(buffer, merge_in_passes(runs, order, spill, self._schema, batch_bytes))

    def _take(self, buffer: _Buffer) -> pa.Table:
        """The rows buffered for ``buffer``'s partition, which is left empty."""
        table = pa.Table.from_batches(buffer.batches, schema=self._schema)
        self._buffered -= buffer.nbytes
        buffer.batches, buffer.nbytes = [], 0
        return table

    def _cut(self, buffer: _Buffer, chunks: Iterator[pa.Table]) -> None:
        """Write sorted ``chunks`` as files of ``target_file_bytes`` each (the last smaller), in
        order, so consecutive files continue each other's range."""
        pending: list[pa.Table] = []
        pending_bytes = 0
        for chunk in chunks:
            while chunk.num_rows:
                room = self._target - pending_bytes
                if chunk.nbytes < room:
                    pending.append(chunk)
                    pending_bytes += chunk.nbytes
                    break
                rows = max(1, -(-room * chunk.num_rows // max(1, chunk.nbytes)))
                pending.append(chunk.slice(0, rows))
                chunk = chunk.slice(rows)
                self._write_file(buffer, pa.concat_tables(pending))
                pending, pending_bytes = [], 0
        if pending:
            self._write_file(buffer, pa.concat_tables(pending))

    def _split(self, batch: pa.RecordBatch) -> Iterator[tuple[str, dict[str, Any], pa.RecordBatch]]:
        if not self._partition_by:
            yield f"segment_{self._segment}", {}, batch
            return
        keys = [(name, "ascending") for name in self._partition_by]
        ordered = batch.take(pc.sort_indices(batch, sort_keys=keys))  # nulls sort last
        count = ordered.num_rows
        boundary = pa.array(np.zeros(max(count - 1, 0), dtype=np.bool_))
        for name in self._partition_by:
            column = ordered.column(name)
            head, tail = column.slice(0, count - 1), column.slice(1)
            differs = pc.fill_null(pc.not_equal(head, tail), True)
            same_null = pc.and_(pc.is_null(head), pc.is_null(tail))
            boundary = pc.or_(boundary, pc.and_(differs, pc.invert(same_null)))
        starts = [0] + [i + 1 for i in pc.indices_nonzero(boundary).to_pylist()] + [count]
        for start, end in itertools.pairwise(starts):
            part = ordered.slice(start, end - start)
            values = {name: part.column(name)[0].as_py() for name in self._partition_by}
            path = partition_path(self._partition_by, values, self._holds_files)
            folders = path.split("/")
            values = {name: parse_hive_value(folder.split("=", 1)[1]) if isinstance(value, datetime)
                      else value for (name, value), folder in zip(values.items(), folders, strict=True)}
            yield path, values, part

    def _holds_files(self, partition: str) -> bool:
        """Whether the table holds files in ``partition`` (asked only of a folder spelled as
        before issue 29 whose new spelling is too long; remembered for the write)."""
        if partition not in self._legacy_folders:
            self._legacy_folders[partition] = bool(
                self._store.storage.list(partition, recursive=True))
        return self._legacy_folders[partition]

    def _flush(self, buffer: _Buffer) -> None:
        """Write ``buffer``'s rows as one file, in the order they came."""
        self._buffers.pop(buffer.partition, None)
        if buffer.batches:
            self._write_file(buffer, self._take(buffer))

    def _write_file(self, buffer: _Buffer, table: pa.Table) -> None:
        name = (f"part-{self._segment}-{len(self._written):05d}-{self._new_token()}"
                f"_{self._instant_time}.parquet")
        path = posixpath.join(buffer.partition, name)
        self._store.storage.put_if_absent(marker_path(name), path.encode())
        stats = column_stats(table)
        # Parquet min/max leave NaN out, and Arrow prunes row groups by them, losing NaN rows that
        # match (`x != 1`, `is_nan(x)`; apache/arrow#28074 fixed only NaN bounds). A column whose
        # range is unknown here therefore gets no Parquet statistics in this file.
        unordered = {n for n, s in stats.items() if s.min is None and s.nulls < s.count}
        statistics = [n for n in table.column_names if n not in unordered] if unordered else True
        if self._key_columns:
            self._keys.append((path, table.select(self._key_columns)))
            if self._on_file is not None:
                self._on_file(path, self._keys[-1][1])
        size = self._store.write_parquet(path, table, row_group_rows=self._row_group_rows,
                                         statistics=statistics, dictionary=repeating_columns(table))
        self._written.append(FileStatus(
            path=path, partition="" if not self._partition_by else buffer.partition,
            rows=table.num_rows, size=size, stats=stats,
            partition_values=buffer.values, schema_id=self._schema_id,
        ))
