"""The widening table: the type changes a column may take without rewriting a file.

Data files are never rewritten by a schema change, so readers cast an old file's values to the
column's new type. A change is admitted only where that cast is exact for every value the old
type can hold (pyiceberg admits the same kind of promotions). Everything else, narrowing, int to
float (int64 2**53 + 1 has no float64), a decimal's scale, a timestamp's unit, is refused.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

_SIGNED: Final = (pa.int8(), pa.int16(), pa.int32(), pa.int64())
_UNSIGNED: Final = (pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64())

#: What a user reads in a refusal: the whole table, in a line.
WIDENINGS: Final = ("int8 -> int16 -> int32 -> int64, uint8 -> uint16 -> uint32 -> uint64, "
                    "uintN -> a signed int twice as wide or wider, float16 -> float32 -> float64, "
                    "decimal128(p, s) -> decimal128(p' > p, s), date32 -> timestamp[s|ms|us] "
                    "(with or without a time zone)")


def _rank(chain: tuple[pa.DataType, ...], data_type: pa.DataType) -> int:
    return chain.index(data_type) if data_type in chain else -1


def is_widening(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value of ``source`` casts exactly to ``target`` (``source != target``)."""
    if source == target:
        return False
    for chain in (_SIGNED, _UNSIGNED):
        if _rank(chain, source) >= 0 and _rank(chain, target) > _rank(chain, source):
            return True
    if _rank(_UNSIGNED, source) >= 0 and _rank(_SIGNED, target) > _rank(_UNSIGNED, source):
        return True
    if pa.types.is_floating(source) and pa.types.is_floating(target):
        return bool(source.bit_width < target.bit_width)
    if pa.types.is_decimal128(source) and pa.types.is_decimal128(target):
        return bool(target.scale == source.scale and target.precision > source.precision)
    if pa.types.is_date32(source) and pa.types.is_timestamp(target):
        # A date at midnight in nanoseconds overflows int64 outside 1677-2262: not exact.
        return target.unit in ("s", "ms", "us")
    return False


def widening_refusal(source: pa.DataType, target: pa.DataType) -> str:
    """Why ``source -> target`` is refused, for a message that also names the column."""
    narrower_int = _rank(_SIGNED, target) >= 0 and _rank(_SIGNED, source) > _rank(_SIGNED, target)
    if narrower_int or (pa.types.is_floating(source) and pa.types.is_floating(target)):
        why = "narrows the type"
    elif pa.types.is_decimal(source) and pa.types.is_decimal(target):
        why = ("changes the scale" if source.scale != target.scale else "narrows the precision")
    elif pa.types.is_integer(source) and pa.types.is_floating(target):
        why = "is not exact (a float cannot hold every integer)"
    elif pa.types.is_date32(source) and pa.types.is_timestamp(target):
        why = "is not exact (nanoseconds cannot hold every date)"
    else:
        why = "is not a widening"
    return f"{source} -> {target} {why}; allowed widenings: {WIDENINGS}"
