"""Index entries as Arrow tables: their schema, the merge rule, matching keys, grouping.

An entry is one row per key per instant that wrote it: the key columns (``key_0``, ``key_1``,
...), ``segment``, ``file``, ``position``, ``instant`` and ``deleted`` (a tombstone). Per key,
the entry with the largest instant time wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Positions = npt.NDArray[np.int64]

ENTRY_FIELDS: Final = (
    pa.field("segment", pa.string()),
    pa.field("file", pa.string()),
    pa.field("position", pa.int64()),
    pa.field("instant", pa.string()),
    pa.field("deleted", pa.bool_()),
)


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


def integer_order(keys: npt.NDArray[Any], groups: Positions) -> Positions:
    """The permutation that sorts by (group, key): one argsort of ``group << bits | key - min``
    when that fits in 63 bits (always for keys spanning less than 2**40 with up to 2**23 groups),
    else a lexsort."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    keys = keys.astype(np.int64, copy=False) if keys.dtype.kind == "i" else keys
    if keys.dtype == np.int64:
        low, high = int(keys.min()), int(keys.max())
        bits = (high - low).bit_length()
        group_bits = int(groups.max()).bit_length() if len(groups) else 0
        if bits + group_bits <= 62 and int(groups.min()) >= 0:
            return np.argsort((groups << bits) | (keys - low))
    return np.lexsort((keys, groups))


def key_order(columns: Sequence[pa.Array | pa.ChunkedArray], groups: Positions) -> Positions | None:
    """The permutation that sorts rows by (group, key columns), or None when they are in that
    order already (a load sorted by key: nothing to move).

    Integer keys are packed into one order-preserving int64 code per row when their spans fit
    in 62 bits (lineitem's ``(l_orderkey, l_linenumber)``: 26 bits): checked for order in one
    pass, placed by a counting pass when the codes are dense (a million keys of a range of at
    most four million: about 6 times faster than an argsort), else argsorted; the groups are
    then ordered by a stable sort of small integers. Other keys go through Arrow's sort."""
    count = len(groups)
    if count < 2:
        return None
    grouped = bool(groups.max() != groups.min())
    codes = order_codes(columns)
    if codes is None:
        sortable = pa.table([*columns, pa.array(groups)],
                            names=[f"k{i}" for i in range(len(columns))] + ["group"])
        order = pc.sort_indices(sortable, sort_keys=[("group", "ascending")] + [
            (f"k{i}", "ascending") for i in range(len(columns))]).to_numpy()
        return None if bool(np.all(order[1:] > order[:-1])) else order
    if not grouped and bool(np.all(codes[1:] >= codes[:-1])):
        return None
    order = _dense_order(codes)
    if order is None:
        order = np.argsort(codes)
    if grouped:
        # A stable sort of small integers is a radix sort: 16-bit groups sort in linear time.
        ordered_groups = groups[order]
        if int(groups.max()) < 2**15 and int(groups.min()) >= 0:
            ordered_groups = ordered_groups.astype(np.int16)
        order = order[np.argsort(ordered_groups, kind="stable")]
    return order


def order_codes(columns: Sequence[pa.Array | pa.ChunkedArray]) -> Positions | None:
    """The key columns packed into one order-preserving int64 per row, from 0, or None (a key
    that is not an integer, or spans too wide to pack in 62 bits)."""
    values = []
    for column in columns:
        if not pa.types.is_integer(column.type) or column.null_count:
            return None
        array = (column.to_numpy() if isinstance(column, pa.ChunkedArray)
                 else column.to_numpy(zero_copy_only=False))
        low, high = int(array.min()), int(array.max())
        if low < -(2**62) or high >= 2**62:
            return None
        values.append((array, low, (high - low).bit_length()))
    if sum(bits for _, _, bits in values) > 62:
        return None
    codes = np.zeros(len(values[0][0]), dtype=np.int64)
    for array, low, bits in values:
        codes <<= bits
        codes |= array.astype(np.int64, copy=False) - low
    return codes


def _dense_order(codes: Positions) -> Positions | None:
    """The sorting permutation of distinct ``codes`` spanning at most four times their count,
    by placing each row at its code; None when they are sparser or repeat."""
    low, high = int(codes.min()), int(codes.max())
    if high - low >= 4 * len(codes):
        return None
    slots = np.full(high - low + 1, -1, dtype=np.int64)
    slots[codes - low] = np.arange(len(codes), dtype=np.int64)
    order = slots[slots >= 0]
    return order if len(order) == len(codes) else None


def sorted_unique(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``values`` sorted, each once: what ``np.unique`` returns, by one sort and one compare
    (NumPy 2.4's ``np.unique`` of 500,000 int64 took 0.36 s where the sort took 0.025 s)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=np.bool_)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def spans(groups: npt.NDArray[np.int64]) -> list[tuple[int, int, int]]:
    """``(group, start, length)`` of each run of equal values in sorted ``groups``."""
    if len(groups) == 0:
        return []
    cuts = np.flatnonzero(np.diff(groups)) + 1
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(groups)]])
    return [(int(groups[s]), int(s), int(e - s)) for s, e in zip(starts, ends, strict=True)]


def live_entries(entries: pa.Table, live_files: pa.Array) -> pa.Table:
    """``entries`` without tombstones and entries of removed files (for a bottom run)."""
    keep = pc.and_(pc.invert(entries["deleted"]), pc.is_in(entries["file"], value_set=live_files))
    return entries.filter(pc.fill_null(keep, False))
