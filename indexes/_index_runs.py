"""Record-index run files: their encoding, and the footer a lookup checks before opening one.

A run is an Arrow IPC file of index entries sorted by key, in batches of ``batch_rows`` entries
(1,024 by default), the repeated strings dictionary-encoded once per file, its buffers
LZ4-compressed and its integer key columns stored in the narrowest integer type that holds them
(the stored encoding, :func:`stored`; log files use it too). Every reader of entry batches goes
through :func:`run_batches`, which returns the index's own column types: runs and logs written
before the stored encoding (uncompressed, logical types) read the same way.
What a lookup needs to decide what to read without reading the entries is read once per process
(runs never change). In the schema metadata:

* ``metatxn.batch_key_ranges``: each batch's range of the first key column (an Arrow IPC stream
  of ``low``/``high``), so a lookup reads only the batches whose range can hold a wanted key;
* ``metatxn.run_entries``: the number of entries (what the tiering policy weighs);
* ``metatxn.run_below``: in an upper run, the file name of the run it was written on (the one
  ending where it starts), so that a lost run can be named by what sits on it.

In the custom metadata of the first batch, ``metatxn.run_filter``: a bloom filter of the run's
keys (10 bits per entry, 7 probes: about 1 % false positives), so a lookup does not open a run
none of its keys can be in. It is not in the schema because every opening of the file decodes
the schema, and the filter (1.25 bytes per entry) is far larger than the ranges.

Bases written before runs existed have only the first; they are read as runs whose filter
admits every key.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from ._keys import Hashes, _mix

#: Schema metadata of a run: the first key column's range per batch (an Arrow IPC stream).
RANGES: Final = b"metatxn.batch_key_ranges"
#: Schema metadata of a run: its bloom filter (little-endian bits).
FILTER: Final = b"metatxn.run_filter"
#: Schema metadata of a run: its number of entries (decimal text).
ENTRIES: Final = b"metatxn.run_entries"
#: Schema metadata of an upper run: the file name of the run below it.
BELOW: Final = b"metatxn.run_below"
#: Columns whose values repeat across many entries: stored and read as dictionaries.
REPEATED: Final = ["segment", "file", "instant"]
#: Field metadata of a column stored narrower than the index's type: that type's name.
LOGICAL_TYPE: Final = b"metatxn.type"
#: The buffer codec of runs and logs. LZ4 and not ZSTD: a lookup decompresses each 1,024-entry
#: batch it reads, and Arrow's ZSTD starts a new decompression context per buffer (about 16 us,
#: some 120 us per batch against LZ4's 10 us); see design/record-index.md for the measurements.
CODEC: Final = "lz4"
_INTEGERS: Final = {str(t): t for t in (pa.int8(), pa.int16(), pa.int32(), pa.int64(),
                                        pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())}
_SIGNED: Final = (pa.int8(), pa.int16(), pa.int32())
_UNSIGNED: Final = (pa.uint8(), pa.uint16(), pa.uint32())
_INDICES: Final = pa.int32()
_READ_OPTIONS: Final = ipc.IpcReadOptions(use_threads=False)

_BITS_PER_ENTRY: Final = 10
_PROBES: Final = 7
#: Decorrelates the filter's bits from the shard: keys of one shard share ``hash % count``.
_SALT: Final = np.uint64(0x9E3779B97F4A7C15)
_LOW32: Final = np.uint64(0xFFFFFFFF)


def probe_positions(hashes: Hashes, bits: int | npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Bit positions of each key (one row per key) in a filter of ``bits`` bits (one count for
    all keys, or one per key, as the probe of many runs at once asks): double hashing of a
    remixed key hash, ``(first + i * step) % bits`` for probe ``i``. Computed as
    ``first % bits`` stepped by ``step % bits`` with one conditional subtraction per probe (the
    same values: no term reaches 2**64): two divisions per key instead of seven."""
    with np.errstate(over="ignore"):
        mixed = _mix(hashes ^ _SALT)
        size = bits if isinstance(bits, np.ndarray) else np.uint64(bits)
        step = ((mixed >> np.uint64(32)) | np.uint64(1)) % size
        found = np.empty((len(hashes), _PROBES), dtype=np.uint64)
        current = (mixed & _LOW32) % size
        found[:, 0] = current
        for probe in range(1, _PROBES):
            current = current + step
            current -= size * (current >= size)
            found[:, probe] = current
        return found


_probes = probe_positions


def bloom_filter(hashes: Hashes) -> bytes:
    """A bloom filter of the keys with these hashes (``keys.key_hash``)."""
    bits = max(64, -(-len(hashes) * _BITS_PER_ENTRY // 64) * 64)
    marked = np.zeros(bits, dtype=np.bool_)
    if len(hashes):
        marked[_probes(hashes, bits).ravel().astype(np.int64)] = True
    return np.packbits(marked, bitorder="little").tobytes()


def may_contain(bloom: bytes, hashes: Hashes) -> npt.NDArray[np.bool_]:
    """Per key, whether the filter admits it (False: certainly not in the run)."""
    table = np.frombuffer(bloom, dtype=np.uint8)
    positions = _probes(hashes, len(table) * 8).astype(np.int64)
    hits = (table[positions >> 3] >> (positions & 7).astype(np.uint8)) & 1
    return hits.all(axis=1)  # type: ignore[no-any-return]


def dictionary_encoded(entries: pa.Table) -> pa.Table:
    """``entries`` with the repeated strings as one dictionary each (a file path is stored once
    per file, not once per key)."""
    entries = entries.combine_chunks()
    for name in REPEATED:
        index = entries.schema.get_field_index(name)
        if not pa.types.is_dictionary(entries.schema.field(index).type):
            entries = entries.set_column(index, name, entries[name].dictionary_encode())
    return entries


def _narrowest(column: pa.Array, candidates: tuple[pa.DataType, ...]) -> pa.DataType | None:
    """The first of ``candidates`` narrower than ``column``'s type that holds all its values."""
    low, high = (value.as_py() for value in pc.min_max(column).values())
    if low is None:
        return None
    width = column.type.bit_width
    for candidate in candidates:
        if candidate.bit_width >= width:
            return None
        # From the width, not ``np.iinfo(candidate.to_pandas_dtype())``: pyarrow before 26
        # imports pandas for that, which the core install does not bring.
        bits = candidate.bit_width
        least, most = ((-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
                       if pa.types.is_signed_integer(candidate) else (0, (1 << bits) - 1))
        if least <= low and high <= most:
            return candidate
    return None


def _narrowed(table: pa.Table, name: str, candidates: tuple[pa.DataType, ...]) -> pa.Table:
    index = table.schema.get_field_index(name)
    field = table.schema.field(index)
    target = _narrowest(table.column(index), candidates)
    if target is None:
        return table
    return table.set_column(index, field.with_type(target).with_metadata({LOGICAL_TYPE: str(field.type)}),
                            table.column(index).cast(target))


def stored(entries: pa.Table, *, payload: bool = False) -> pa.Table:
    """``entries`` (dictionary-encoded, one chunk) in the stored encoding: each integer key
    column in the narrowest integer type of its signedness that holds it (its own type named in
    the field's ``metatxn.type`` metadata), and with ``payload`` (log files) ``position`` in the
    narrowest unsigned type and dictionary indices in int8 or int16 when the dictionary is small.

    Only the keys are narrowed in runs: LZ4 already squeezes the zero bytes of positions and
    indices there (0.06 bytes per entry left), and each narrowed column costs every lookup a
    cast; keys matter (lineitem's ``(int64, int32)`` key: 9.3 -> 7.2 bytes per entry)."""
    for field in entries.schema:
        if field.name.startswith("key_") and pa.types.is_integer(field.type):
            entries = _narrowed(entries, field.name, _SIGNED if pa.types.is_signed_integer(field.type)
                                else _UNSIGNED)
    if not payload:
        return entries
    if pa.types.is_integer(entries.schema.field("position").type):
        entries = _narrowed(entries, "position", _UNSIGNED)
    for name in REPEATED:
        index = entries.schema.get_field_index(name)
        column = entries.column(index)
        if column.num_chunks != 1 or not pa.types.is_dictionary(column.type):
            continue
        array = column.chunk(0)
        size = len(array.dictionary)
        width = pa.int8() if size <= 127 else pa.int16() if size <= 32767 else None
        if width is not None and width != array.type.index_type:
            entries = entries.set_column(index, name, pa.DictionaryArray.from_arrays(
                array.indices.cast(width), array.dictionary))
    return entries


def logical_schema(schema: pa.Schema) -> pa.Schema | None:
    """The index's column types of a run or log stored with ``schema`` (None: they are its own:
    a file written before the stored encoding, or nothing was narrowed)."""
    changes = _logical_types(schema)
    if not changes:
        return None
    fields = [pa.field(f.name, changes.get(i, f.type), f.nullable) for i, f in enumerate(schema)]
    return pa.schema(fields)


def _logical_types(schema: pa.Schema) -> dict[int, pa.DataType]:
    """The index's type of each column of ``schema`` stored in another, by position."""
    changes: dict[int, pa.DataType] = {}
    for i, field in enumerate(schema):
        field_type = field.type
        if pa.types.is_dictionary(field_type):
            if field_type.index_type != _INDICES:
                changes[i] = pa.dictionary(_INDICES, field_type.value_type)
        elif pa.types.is_integer(field_type):
            metadata = field.metadata
            if metadata and LOGICAL_TYPE in metadata:
                changes[i] = _INTEGERS[metadata[LOGICAL_TYPE].decode()]
    return changes


def encode_run(entries: pa.Table, hashes: Hashes, first_key: str, batch_rows: int,
               below: str | None = None) -> bytes:
    """A run file of ``entries`` (sorted by key; ``hashes`` their key hashes), written on the run
    named ``below`` (None for a bottom run)."""
    entries = dictionary_encoded(entries)
    first = entries[first_key]
    starts = np.arange(0, entries.num_rows, batch_rows, dtype=np.int64)
    ranges = pa.table({
        "low": first.take(pa.array(starts)),
        "high": first.take(pa.array(np.minimum(starts + batch_rows, entries.num_rows) - 1)),
    })
    buffer = pa.BufferOutputStream()
    with ipc.new_stream(buffer, ranges.schema) as writer:
        writer.write_table(ranges)
    metadata = {RANGES: buffer.getvalue().to_pybytes(), ENTRIES: str(entries.num_rows).encode()}
    if below is not None:
        metadata[BELOW] = below.encode()
    entries = stored(entries)
    schema = entries.schema.with_metadata(metadata)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema, options=ipc.IpcWriteOptions(compression=CODEC)) as writer:
        batches = entries.replace_schema_metadata(schema.metadata).to_batches(max_chunksize=batch_rows)
        for i, batch in enumerate(batches):
            writer.write_batch(batch, custom_metadata={FILTER: bloom_filter(hashes)} if i == 0 else None)
    return bytes(sink.getvalue())


def open_entries(source: Any) -> ipc.RecordBatchFileReader:
    """A reader of a run or log file: its compressed buffers are decompressed on the calling
    thread. Arrow's default hands each batch's buffers to its thread pool, which costs more than
    the decompression itself (1,000-key lookup in a 1M-entry run on a busy 2-CPU machine:
    get_batch 78 us per batch on the pool, 30 us without it)."""
    return ipc.open_file(source, options=_READ_OPTIONS)


def run_batches(reader: ipc.RecordBatchFileReader, groups: list[int]) -> pa.Table:
    """Batches ``groups`` of a run (or of a log file), with the index's column types and the
    repeated strings still dictionary-encoded (int32 indices): every reader of entry batches goes
    through here (or through :func:`stored_batches`, then :func:`as_logical` on what it keeps),
    so the stored encoding may differ from what lookups match on."""
    return as_logical(stored_batches(reader, groups))


def stored_batches(reader: ipc.RecordBatchFileReader, groups: list[int]) -> pa.Table:
    """Batches ``groups`` as stored (narrowed columns not cast back): a lookup searches the
    stored keys and casts only the few rows it takes (a cast per batch read cost a 1,000-key
    lookup more than its search)."""
    return pa.Table.from_batches([reader.get_batch(group) for group in groups], reader.schema)


def as_logical(table: pa.Table) -> pa.Table:
    """``table`` (rows of a run or log as stored) in the index's column types."""
    schema = table.schema
    # Only the narrowed columns are cast (a whole-table cast costs a call per column).
    for i, logical in _logical_types(schema).items():
        table = table.set_column(i, pa.field(schema.field(i).name, logical), table.column(i).cast(logical))
    return table


@dataclass(frozen=True)
class RunFooter:
    """What a lookup checks before reading a run: batch key ranges, filter, entry count."""

    lows: list[Any]
    highs: list[Any]
    #: None for a base written before filters: it may hold any key.
    bloom: bytes | None
    #: Entries (estimated from the batch count for an older base).
    entries: int
    #: The file name of the run below (None for a bottom run or an older file).
    below: str | None = None

    @classmethod
    def of(cls, reader: ipc.RecordBatchFileReader, batch_rows: int) -> RunFooter:
        """The footer of the run ``reader`` reads (reads its first batch's metadata)."""
        metadata = reader.schema.metadata or {}
        ranges = ipc.open_stream(pa.BufferReader(metadata[RANGES])).read_all()
        lows, highs = ranges["low"].to_pylist(), ranges["high"].to_pylist()
        entries = int(metadata[ENTRIES]) if ENTRIES in metadata else len(lows) * batch_rows
        below = metadata[BELOW].decode() if BELOW in metadata else None
        bloom = None
        if ENTRIES in metadata and reader.num_record_batches:
            _, custom = reader.get_batch_with_custom_metadata(0)
            bloom = (custom or {}).get(FILTER)
            if bloom is None:
                raise ValueError("a run without its filter")
        elif ENTRIES in metadata:
            bloom = b""  # no entries: admits nothing
        return cls(lows, highs, bloom, entries, below)

    def key_range(self) -> tuple[int, int] | None:
        """The run's range of the first key column when it is an integer (None otherwise, or
        for a run without entries)."""
        if not self.lows or not isinstance(self.lows[0], int) or not isinstance(self.highs[-1], int):
            return None
        return min(self.lows), max(self.highs)

    @property
    def weight(self) -> int:
        """Bytes kept in memory for it (what the footer cache budgets)."""
        return 64 * len(self.lows) + len(self.bloom or b"") + 200

    def admits(self, hashes: Hashes) -> bool:
        """Whether any of the keys may be in the run."""
        if self.bloom is None:
            return True
        return bool(self.bloom) and bool(may_contain(self.bloom, hashes).any())

    def batches_for(self, keys: list[Any]) -> list[int]:
        """Batches whose range holds one of ``keys`` (batches are sorted by key)."""
        groups: set[int] = set()
        for key in keys:
            # A composite key's first column may repeat across several batches: take every
            # batch whose range holds the value, not only the first.
            groups.update(range(bisect.bisect_left(self.highs, key), bisect.bisect_right(self.lows, key)))
        return sorted(groups)


class FooterCache:
    """Footers of runs by path, least recently used out beyond a byte budget (runs never change,
    so an entry is never stale; a run deleted by cleaning is simply no longer asked for)."""

    def __init__(self, budget_bytes: int = 256 << 20) -> None:
        self._budget = budget_bytes
        self._used = 0
        self._footers: OrderedDict[str, RunFooter] = OrderedDict()
        self._mutex = threading.Lock()

    def get(self, path: str) -> RunFooter | None:
        with self._mutex:
            footer = self._footers.get(path)
            if footer is not None:
                self._footers.move_to_end(path)
            return footer

    def put(self, path: str, footer: RunFooter) -> None:
        with self._mutex:
            if path in self._footers:
                return
            self._footers[path] = footer
            self._used += footer.weight
            while self._used > self._budget and len(self._footers) > 1:
                _, evicted = self._footers.popitem(last=False)
                self._used -= evicted.weight
