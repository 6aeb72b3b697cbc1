"""Record-index run files: their encoding, and the footer a lookup checks before opening one.

A run is an **uncompressed Arrow IPC** file of index entries sorted by key, in batches of
``batch_rows`` entries (1,024 by default), the repeated strings dictionary-encoded once per file.
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

_BITS_PER_ENTRY: Final = 10
_PROBES: Final = 7
#: Decorrelates the filter's bits from the shard: keys of one shard share ``hash % count``.
_SALT: Final = np.uint64(0x9E3779B97F4A7C15)
_LOW32: Final = np.uint64(0xFFFFFFFF)


def probe_positions(hashes: Hashes, bits: int | npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """Bit positions of each key (one row per key) in a filter of ``bits`` bits (one count for
    all keys, or one per key): double hashing of a remixed key hash."""
    with np.errstate(over="ignore"):
        mixed = _mix(hashes ^ _SALT)
        first = mixed & _LOW32
        step = (mixed >> np.uint64(32)) | np.uint64(1)
        rounds = np.arange(_PROBES, dtype=np.uint64)
        sizes = bits[:, None] if isinstance(bits, np.ndarray) else np.uint64(bits)
        return (first[:, None] + rounds[None, :] * step[:, None]) % sizes


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
    schema = entries.schema.with_metadata(metadata)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, schema) as writer:
        batches = entries.replace_schema_metadata(schema.metadata).to_batches(max_chunksize=batch_rows)
        for i, batch in enumerate(batches):
            writer.write_batch(batch, custom_metadata={FILTER: bloom_filter(hashes)} if i == 0 else None)
    return bytes(sink.getvalue())


def run_batches(reader: ipc.RecordBatchFileReader, groups: list[int]) -> pa.Table:
    """Batches ``groups`` of a run (or of a log file), with the index's column types and the
    repeated strings still dictionary-encoded: every reader of entry batches goes through here,
    so the stored encoding may differ from what lookups match on."""
    return pa.Table.from_batches([reader.get_batch(group) for group in groups], reader.schema)


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
