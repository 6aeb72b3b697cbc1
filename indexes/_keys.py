"""Record keys: a stable hash that places each key in a record-index shard.

The shard of a key is part of the on-disk format (a key must be found in the shard it was
written to, by any process, forever), so the hash is defined here bit by bit and computed
with numpy, never with Python's ``hash`` (salted per process) or a library whose output may
change between versions:

* integers, dates, timestamps, durations and booleans: the value as a 64-bit integer;
* strings, binary and decimals: the bytes (decimals as their text) folded by a polynomial
  ``sum((b + 1) * P**i) mod 2**64`` and combined with the length;
* each column's value goes through the splitmix64 finalizer; a composite key folds its columns
  left to right with ``h = mix(h * 31 + column_hash)``.

The shard is ``hash % shards``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Hashes = npt.NDArray[np.uint64]

_MIX1: Final = np.uint64(0xBF58476D1CE4E5B9)
_MIX2: Final = np.uint64(0x94D049BB133111EB)
_PRIME: Final = np.uint64(0x100000001B3)
_FOLD: Final = np.uint64(31)


def _mix(values: Hashes) -> Hashes:
    """splitmix64's finalizer: every input bit affects every output bit."""
    x = values ^ (values >> np.uint64(30))
    x = x * _MIX1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX2
    return x ^ (x >> np.uint64(31))  # type: ignore[no-any-return]


def _as_int64(column: pa.Array) -> pa.Array | None:
    data_type = column.type
    if pa.types.is_unsigned_integer(data_type):
        # Values at or above 2**63 keep their bits; every smaller one hashes as before.
        return pc.cast(column, pa.uint64()).view(pa.int64())
    if pa.types.is_integer(data_type) or pa.types.is_boolean(data_type):
        return pc.cast(column, pa.int64())
    if pa.types.is_date32(data_type):
        return pc.cast(pc.cast(column, pa.int32()), pa.int64())
    if pa.types.is_date64(data_type) or pa.types.is_timestamp(data_type) or pa.types.is_duration(data_type):
        return pc.cast(column, pa.int64())
    return None


def _as_binary(column: pa.Array) -> pa.Array:
    data_type = column.type
    if pa.types.is_decimal(data_type):
        column = pc.cast(column, pa.string())
    elif pa.types.is_fixed_size_binary(data_type):
        column = pa.array(column.to_pylist(), pa.binary())
    return pc.cast(column, pa.large_binary())


def _bytes_hash(column: pa.Array) -> Hashes:
    values = _as_binary(column)
    count = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset:values.offset + count + 1]
    lengths = np.diff(offsets).astype(np.uint64)
    data_buffer = values.buffers()[2]
    start, end = int(offsets[0]), int(offsets[-1])
    if end == start:
        return _mix(lengths)
    data = np.frombuffer(data_buffer, dtype=np.uint8)[start:end].astype(np.uint64) + np.uint64(1)
    # Position of every byte inside its value, then the polynomial term of that byte.
    starts = offsets[:-1] - start
    nonempty = lengths > 0
    position = np.arange(end - start, dtype=np.int64) - np.repeat(starts, lengths.astype(np.int64))
    powers = np.cumprod(np.concatenate([[np.uint64(1)],
                                        np.full(int(lengths.max()) - 1, _PRIME, dtype=np.uint64)]))
    terms = data * powers[position]
    sums = np.zeros(count, dtype=np.uint64)
    sums[nonempty] = np.add.reduceat(terms, starts[nonempty])
    return _mix(sums ^ _mix(lengths))


def _column_hash(column: pa.Array | pa.ChunkedArray) -> Hashes:
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    as_int = _as_int64(column)
    if as_int is not None:
        return _mix(np.asarray(as_int.to_numpy(zero_copy_only=False), dtype=np.int64).view(np.uint64))
    return _bytes_hash(column)


def key_hash(columns: Sequence[pa.Array | pa.ChunkedArray]) -> Hashes:
    """The 64-bit hash of each key (one array per key column, no nulls)."""
    with np.errstate(over="ignore"):
        result: Hashes | None = None
        for column in columns:
            hashed = _column_hash(column)
            result = hashed if result is None else _mix(result * _FOLD + hashed)
    assert result is not None, "a key has at least one column"
    return result


def shard_of(columns: Sequence[pa.Array | pa.ChunkedArray], shards: int) -> npt.NDArray[np.int64]:
    """The record-index shard of each key."""
    return (key_hash(columns) % np.uint64(shards)).astype(np.int64)
