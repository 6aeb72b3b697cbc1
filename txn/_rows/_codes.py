"""Equality codes of record keys: one int64 per row, equal exactly when the keys are equal.

Duplicate checks and last-wins then need one numpy sort and an adjacent compare, whatever the
key's columns: no group-by, no per-key Python. The codes mean nothing beyond one call (they are
never stored, and their order is not the keys' order).

How a column becomes codes:

* integers, booleans, dates and timestamps: the value itself as an int64 (unsigned values at or
  above 2**63 keep their bits);
* strings, binary and decimals: the index of the value in a dictionary of the column's distinct
  values (Arrow's hash kernel, exact on the bytes).

Columns are combined as digits of a mixed-radix number, each column's codes shifted to start at
0: ``code = code_a * span_b + code_b``. When the product of the spans would leave int64, the
combination so far is first renumbered densely (at most one code per row), so it fits for any
table that fits in memory.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

Codes = npt.NDArray[np.int64]

#: The largest span a combination may reach (products stay below 2**63).
_MAX_SPAN: Final = 2 ** 62


def _integer_values(column: pa.Array) -> npt.NDArray[Any] | None:
    """The column's values as a numpy integer array, or None for a type without one."""
    data_type = column.type
    if pa.types.is_integer(data_type):
        return np.asarray(column.to_numpy(zero_copy_only=False))
    if pa.types.is_boolean(data_type):
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)
    if pa.types.is_date32(data_type):
        return np.asarray(pc.cast(column, pa.int32()).to_numpy(zero_copy_only=False))
    if pa.types.is_date64(data_type) or pa.types.is_timestamp(data_type) or pa.types.is_duration(data_type):
        return np.asarray(pc.cast(column, pa.int64()).to_numpy(zero_copy_only=False))
    return None


def _column_codes(column: pa.Array, *, alone: bool) -> tuple[Codes, int]:
    """Codes of one column and their span (every code is in ``[0, span)``, or any int64 when
    ``alone``: a single column needs no shift)."""
    values = _integer_values(column)
    if values is None:
        encoded = pc.dictionary_encode(column)
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        return codes, max(1, len(encoded.dictionary))
    if alone:
        return values.view(np.int64) if values.dtype.itemsize == 8 else values.astype(np.int64), 0
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64), 1
    low, high = int(values.min()), int(values.max())
    span = high - low + 1
    if span > _MAX_SPAN:  # a sparse wide range: renumber it instead of shifting it
        return _dense(values)
    # Exact: every value is in [low, low + span) and span < 2**62, so no difference wraps.
    if values.dtype == np.uint64:
        return (values - np.uint64(low)).astype(np.int64), span
    return values.astype(np.int64) - np.int64(low), span


def _dense(values: npt.NDArray[Any]) -> tuple[Codes, int]:
    """Renumber ``values`` as ``0..distinct-1`` (a sort, so exact for any integer dtype)."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), max(1, len(distinct))


def key_codes(keys: pa.Table) -> Codes:
    """One int64 per row of ``keys`` (the key columns, no nulls): equal iff the keys are."""
    columns = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in keys.columns]
    if len(columns) == 1:
        return _column_codes(columns[0], alone=True)[0]
    combined: Codes | None = None
    span = 1
    for column in columns:
        codes, size = _column_codes(column, alone=False)
        if combined is None:
            combined, span = codes, size
            continue
        if span * size > _MAX_SPAN:
            combined, span = _dense(combined)
        if span * size > _MAX_SPAN:  # more than 2**31 rows: renumber the pairs themselves
            pairs = np.stack([combined, codes], axis=1)
            distinct, inverse = np.unique(pairs, axis=0, return_inverse=True)
            combined, span = inverse.astype(np.int64).reshape(-1), max(1, len(distinct))
            continue
        combined = combined * size + codes
        span *= size
    assert combined is not None, "a key has at least one column"
    return combined
