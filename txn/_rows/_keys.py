"""Record keys of keyed tables: extracting, checking and de-duplicating them.

Inside the record index the key columns are named ``key_0``, ``key_1``, ... (so they can never
collide with the index's own columns); users see the table's column names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from metatxn.indexes import key_names
from metatxn.timeline import DuplicateKeyError, InvalidOptionError, SchemaMismatchError

from ._codes import Codes, key_codes

#: How many offending keys an error message lists.
SHOWN = 5


def index_keys(data: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The key columns of ``data`` renamed for the record index."""
    return pa.table([data[name] for name in columns], names=key_names(len(columns)))


def user_keys(keys: pa.Table, columns: Sequence[str]) -> pa.Table:
    """Index key columns renamed back to the table's column names."""
    return pa.table([keys[name] for name in key_names(len(columns))], names=list(columns))


def describe(keys: pa.Table, columns: Sequence[str], limit: int = SHOWN) -> str:
    """A few keys for a message: ``[1, 2, 3]`` or ``[(1, 'a'), ...]`` for composite keys."""
    shown = keys.slice(0, limit)
    values = [shown[name].to_pylist() for name in key_names(len(columns))]
    rendered = [v[0] for v in zip(*values, strict=True)] if len(columns) == 1 else list(
        zip(*values, strict=True))
    more = f" and {keys.num_rows - limit} more" if keys.num_rows > limit else ""
    return f"{rendered}{more}"


def check_not_null(data: pa.Table, columns: Sequence[str]) -> None:
    for name in columns:
        nulls = data[name].null_count
        if nulls:
            raise SchemaMismatchError(
                f"record key column {name!r} holds {nulls} null(s); every row of a keyed table "
                "needs a key")


def _has_repeats(codes: Codes) -> bool:
    """Whether any code occurs twice: one pass for codes in increasing order (a load sorted by
    key), a count per value for codes spanning at most four times their number (dense keys:
    about 6 times faster than sorting a million), else a plain sort (cheaper than the row order
    ``_runs`` needs)."""
    if len(codes) < 2 or bool(np.all(codes[1:] > codes[:-1])):
        return False
    low, high = int(codes.min()), int(codes.max())
    if high - low < 4 * len(codes):
        return bool(np.bincount(codes - low).max() > 1)
    ordered = np.sort(codes)
    return bool(np.any(ordered[1:] == ordered[:-1]))


def _runs(codes: Codes) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """Rows in code order (stable: the rows of one key stay in input order), and a mask over
    that order of the rows that continue the previous row's key."""
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    return order, ordered[1:] == ordered[:-1]


def repeated(keys: pa.Table) -> pa.Table:
    """The keys that occur more than once in ``keys``, each once, in order of first occurrence."""
    if keys.num_rows <= 1:
        return keys.slice(0, 0)
    codes = key_codes(keys)
    if not _has_repeats(codes):
        return keys.slice(0, 0)
    order, same = _runs(codes)
    # The first row of each run longer than one: it continues nothing, its successor continues it.
    starts = same & ~np.concatenate([[False], same[:-1]])
    return keys.take(pa.array(np.sort(order[:-1][starts])))


def check_unique(data: pa.Table, columns: Sequence[str]) -> None:
    """Raise DuplicateKeyError if a key occurs twice in ``data``."""
    twice = repeated(index_keys(data, columns))
    if twice.num_rows:
        raise DuplicateKeyError(
            f"record key {list(columns)} repeats within the data: {describe(twice, columns)} "
            "appear more than once\nHelp: de-duplicate the data, or use upsert, where the last "
            "row of a key wins")


def last_wins(data: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``data`` with one row per key: the last row of each key, in the input's order."""
    if data.num_rows <= 1:
        return data
    codes = key_codes(index_keys(data, columns))
    if not _has_repeats(codes):
        return data
    order, same = _runs(codes)
    last = np.concatenate([~same, [True]])  # a row whose successor is another key ends its run
    return data.take(pa.array(np.sort(order[last])))  # keep the input's order


def keys_argument(keys: Any, schema: pa.Schema, columns: Sequence[str]) -> pa.Table:
    """Normalize user-given keys (for ``delete(keys=)`` and ``lookup``) to index key columns.

    Accepted: for a one-column key, a list or pyarrow array of values; for any key, a pyarrow
    Table (or RecordBatch) with the key columns, or a list of tuples in key-column order.
    """
    types = [schema.field(name).type for name in columns]
    names = key_names(len(columns))
    try:
        table = _keys_table(keys, columns, types)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, OverflowError) as exc:
        described = ", ".join(f"{c}: {t}" for c, t in zip(columns, types, strict=True))
        raise InvalidOptionError(f"keys do not match the record key ({described}): {exc}") from None
    nulls = [c for c, name in zip(columns, names, strict=True) if table[name].null_count]
    if nulls:
        raise InvalidOptionError(f"keys hold nulls in record key column(s) {nulls}; a key is never null")
    return table


def _exact(values: Any, data_type: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """``values`` as ``data_type``, refusing lossy conversions (1.5 is not the key 1)."""
    array = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(values)
    return array.cast(data_type, safe=True)


def _keys_table(keys: Any, columns: Sequence[str], types: list[pa.DataType]) -> pa.Table:
    names = key_names(len(columns))
    if isinstance(keys, pa.RecordBatch):
        keys = pa.Table.from_batches([keys])
    if isinstance(keys, pa.Table):
        missing = [c for c in columns if c not in keys.column_names]
        if missing:
            raise InvalidOptionError(
                f"keys lack record key column(s) {missing}; expected columns {list(columns)}")
        return pa.table([_exact(keys[c], t) for c, t in zip(columns, types, strict=True)], names=names)
    if isinstance(keys, (pa.Array, pa.ChunkedArray)) and len(columns) == 1:
        return pa.table([_exact(keys, types[0])], names=names)
    values: list[Any]
    if isinstance(keys, (pa.Array, pa.ChunkedArray)):
        values = keys.to_pylist()
    elif isinstance(keys, (str, bytes)) or not hasattr(keys, "__iter__"):
        raise InvalidOptionError(
            f"keys must be a list of key values, a pyarrow array or a table of the key columns "
            f"{list(columns)}, got {type(keys).__name__}")
    else:
        values = list(keys)
    if len(columns) == 1:
        if any(isinstance(v, tuple) for v in values):
            values = [v[0] if isinstance(v, tuple) and len(v) == 1 else v for v in values]
        return pa.table([_exact(values, types[0])], names=names)
    if not all(isinstance(v, tuple) and len(v) == len(columns) for v in values):
        raise InvalidOptionError(
            f"the record key has columns {list(columns)}: give each key as a tuple of "
            f"{len(columns)} values, or a pyarrow Table with those columns")
    return pa.table([_exact([v[i] for v in values], t) for i, t in enumerate(types)], names=names)
