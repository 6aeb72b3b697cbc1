"""The record-key hash: the record index's shard function, part of the on-disk format.

A key must be found in the shard it was written to by any process, any version, forever. So the
hash is pinned here three ways: golden values (a change to ``key_hash`` breaks them), an
independent pure-Python implementation of the documented definition (every value must agree with
it bit for bit), and invariances that the Arrow layout of a column must not affect (type width,
slicing, chunking). Last, shards must be roughly uniform, or one shard becomes the bottleneck.
"""

from __future__ import annotations

import datetime
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metatxn.indexes import key_hash, shard_of

_MASK = (1 << 64) - 1
_PRIME = 0x100000001B3


# -- the documented definition, written independently in plain Python -----------------------------


def _ref_mix(x: int) -> int:
    x &= _MASK
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _ref_int(value: int) -> int:
    return _ref_mix(value & _MASK)


def _ref_bytes(value: bytes) -> int:
    folded = sum((b + 1) * pow(_PRIME, i, 1 << 64) for i, b in enumerate(value)) & _MASK
    return _ref_mix(folded ^ _ref_mix(len(value)))


def _ref_value(value: object) -> int:
    if isinstance(value, bool | int):
        return _ref_int(int(value))
    if isinstance(value, str):
        return _ref_bytes(value.encode())
    assert isinstance(value, bytes)
    return _ref_bytes(value)


def _ref_key(*values: object) -> int:
    result = _ref_value(values[0])
    for value in values[1:]:
        result = _ref_mix(result * 31 + _ref_value(value))
    return result


def _hashes(*columns: pa.Array | pa.ChunkedArray) -> list[int]:
    return [int(h) for h in key_hash(list(columns))]


def _hex(*columns: pa.Array | pa.ChunkedArray) -> list[str]:
    return [f"0x{h:016x}" for h in _hashes(*columns)]


# -- golden values: the on-disk shard function must not change silently ---------------------------


def test_integer_keys_hash_to_pinned_values() -> None:
    keys = pa.array([0, 1, 2, -1, 42, 2**31, -(2**63), 2**63 - 1], pa.int64())
    assert _hex(keys) == [
        "0x0000000000000000", "0x5692161d100b05e5", "0xdbd238973a2b148a", "0xb4d055fcf2cbbd7b",
        "0xa759ea27d4727622", "0xec105bf588587c9f", "0x25c26ea579cea98a", "0x5a682afe7965debd",
    ]


def test_string_keys_hash_to_pinned_values() -> None:
    keys = pa.array(["", "a", "b", "ab", "ba", "hello world", "héllo", "日本語", "🙂"], pa.string())
    assert _hex(keys) == [
        "0x0000000000000000", "0x0f76b2d4e071a343", "0x59176833882446c6", "0xcda8b5b2ad99ca53",
        "0xaf1352aeda72dce3", "0x9a94aef3fe35af32", "0x5c772a63e3c631ea", "0x4fc1ec7e56007845",
        "0x320e322e622ff089",
    ]
    assert _hex(pa.array(["x" * 1000])) == ["0x69a54aac1458ca96"]


def test_composite_keys_hash_to_pinned_values() -> None:
    assert _hex(pa.array([1, 1, 2, 0], pa.int64()), pa.array(["a", "b", "a", ""])) == [
        "0x8dc0a8a9117dc24a", "0x492144018957ad68", "0x3ca26cd99060d226", "0x0000000000000000",
    ]
    days = pa.array([datetime.date(2026, 1, 1), datetime.date(1970, 1, 1)], pa.date32())
    assert _hex(pa.array([1, 2], pa.int32()), pa.array(["x", "y"]), days) == [
        "0x461180f0cfca81f1", "0x59ccb26a57efb6ca",
    ]


def test_other_key_types_hash_to_pinned_values() -> None:
    assert _hex(pa.array([b"", b"\x00", b"\xff\x00", b"ab"], pa.binary())) == [
        "0x0000000000000000", "0x83ec686c1600460a", "0x9524014393c678a2", "0xcda8b5b2ad99ca53",
    ]
    decimals = pa.array([Decimal("0.00"), Decimal("1.50"), Decimal("-2.25")], pa.decimal128(10, 2))
    assert _hex(decimals) == ["0xfdd0ae704d61ef4f", "0xff79e608ed877773", "0x045f5f8e90a151a9"]
    days = pa.array([datetime.date(1970, 1, 1), datetime.date(2026, 1, 1)], pa.date32())
    assert _hex(days) == ["0x0000000000000000", "0x9eeb7f850d4dd7bf"]
    assert _hex(pa.array([datetime.datetime(2026, 1, 1)], pa.timestamp("us"))) == ["0x8525770edc6b8091"]
    assert _hex(pa.array([False, True])) == ["0x0000000000000000", "0x5692161d100b05e5"]


def test_shards_of_pinned_keys_are_pinned() -> None:
    """The shard is ``hash % shards``; these are where the keys above live on disk."""
    ints = pa.array([0, 1, 2, -1, 42], pa.int64())
    assert shard_of([ints], 64).tolist() == [h % 64 for h in _hashes(ints)]
    assert shard_of([ints], 64).tolist() == [0, 37, 10, 59, 34]
    assert shard_of([pa.array(["", "a", "héllo"])], 7).tolist() == [0, 3, 4]
    assert shard_of([ints], 1).tolist() == [0] * 5
    assert shard_of([ints], 64).dtype == np.int64


# -- the implementation follows the documented definition bit for bit ------------------------------


@settings(max_examples=60)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40))
def test_integer_hashes_follow_the_definition(values: list[int]) -> None:
    assert _hashes(pa.array(values, pa.int64())) == [_ref_int(v) for v in values]


@settings(max_examples=60)
@given(st.lists(st.text(max_size=12), max_size=40))
def test_string_hashes_follow_the_definition(values: list[str]) -> None:
    assert _hashes(pa.array(values, pa.string())) == [_ref_bytes(v.encode()) for v in values]


@settings(max_examples=60)
@given(st.lists(st.binary(max_size=12), max_size=40))
def test_binary_hashes_follow_the_definition(values: list[bytes]) -> None:
    assert _hashes(pa.array(values, pa.binary())) == [_ref_bytes(v) for v in values]


@settings(max_examples=60)
@given(st.lists(st.tuples(st.integers(-(2**40), 2**40), st.text(max_size=6), st.binary(max_size=4)),
                max_size=30))
def test_composite_hashes_follow_the_definition(keys: list[tuple[int, str, bytes]]) -> None:
    columns = [pa.array([k[0] for k in keys], pa.int64()), pa.array([k[1] for k in keys], pa.string()),
               pa.array([k[2] for k in keys], pa.binary())]
    assert _hashes(*columns) == [_ref_key(*k) for k in keys]


# -- the Arrow layout of a column does not matter --------------------------------------------------


@pytest.mark.parametrize("narrow", [pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(),
                                    pa.uint32()])
def test_equal_integers_of_any_width_hash_alike(narrow: pa.DataType) -> None:
    values = [0, 1, 7, 100, 127] + ([-1, -128] if pa.types.is_signed_integer(narrow) else [255])
    assert _hashes(pa.array(values, narrow)) == _hashes(pa.array(values, pa.int64()))


def test_string_types_and_binary_of_the_same_bytes_hash_alike() -> None:
    values = ["", "a", "héllo", "日本語", "x" * 300]
    expected = _hashes(pa.array(values, pa.string()))
    assert _hashes(pa.array(values, pa.large_string())) == expected
    assert _hashes(pa.array([v.encode() for v in values], pa.binary())) == expected
    assert _hashes(pa.array([v.encode() for v in values], pa.large_binary())) == expected
    fixed = [b"ab", b"\x00\xff", b"zz"]
    assert _hashes(pa.array(fixed, pa.binary(2))) == _hashes(pa.array(fixed, pa.binary()))


def test_temporal_and_boolean_keys_hash_as_their_integer_value() -> None:
    days = pa.array([0, 1, 20_454, -3], pa.int32())
    assert _hashes(days.cast(pa.date32())) == _hashes(days)
    micros = pa.array([0, 1_767_225_600_000_000, -5], pa.int64())
    assert _hashes(micros.cast(pa.timestamp("us"))) == _hashes(micros)
    assert _hashes(micros.cast(pa.timestamp("us", "UTC"))) == _hashes(micros)
    assert _hashes(micros.cast(pa.timestamp("ns"))) == _hashes(micros)
    assert _hashes(micros.cast(pa.duration("ms"))) == _hashes(micros)
    millis = pa.array([0, 86_400_000], pa.int64())
    assert _hashes(millis.cast(pa.date64())) == _hashes(millis)
    assert _hashes(pa.array([True, False, True])) == _hashes(pa.array([1, 0, 1], pa.int64()))


def test_decimals_hash_as_their_text() -> None:
    values = [Decimal("1.50"), Decimal("-0.01"), Decimal("123456789.99")]
    as_text = _hashes(pa.array([str(v) for v in values], pa.string()))
    assert _hashes(pa.array(values, pa.decimal128(12, 2))) == as_text
    assert _hashes(pa.array(values, pa.decimal256(40, 2))) == as_text


@pytest.mark.parametrize("column", [
    pa.array(range(-50, 50), pa.int64()),
    pa.array([f"k{i}" * (i % 4) for i in range(100)], pa.string()),
    pa.array([bytes([i % 7]) * (i % 5) for i in range(100)], pa.binary()),
    pa.array([Decimal(i) / 8 for i in range(100)], pa.decimal128(10, 3)),
], ids=["int", "string", "binary", "decimal"])
def test_slicing_and_chunking_do_not_change_hashes(column: pa.Array) -> None:
    whole = _hashes(column)
    for start, length in [(0, 100), (1, 10), (37, 63), (99, 1), (50, 0)]:
        assert _hashes(column.slice(start, length)) == whole[start:start + length]
    chunked = pa.chunked_array([column.slice(0, 13), column.slice(13, 0), column.slice(13, 80),
                                column.slice(93)])
    assert _hashes(chunked) == whole
    rng = random.Random(7)
    cuts = sorted(rng.sample(range(1, 100), 9))
    pieces = [column.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, 100], strict=True)]
    assert _hashes(pa.chunked_array(pieces)) == whole


def test_slices_of_composite_keys_hash_like_the_whole() -> None:
    ids = pa.array(range(60), pa.int64())
    names = pa.array([f"n{i % 9}" for i in range(60)])
    whole = _hashes(ids, names)
    assert _hashes(ids.slice(10, 20), names.slice(10, 20)) == whole[10:30]
    assert _hashes(pa.chunked_array([ids.slice(0, 30), ids.slice(30)]),
                   pa.chunked_array([names.slice(0, 7), names.slice(7)])) == whole


def test_empty_strings_and_empty_arrays() -> None:
    assert _hashes(pa.array([], pa.string())) == []
    assert _hashes(pa.array([], pa.int64())) == []
    assert _hashes(pa.array(["", "", ""])) == [0, 0, 0]
    mixed = _hashes(pa.array(["", "a", "", "bc", ""]))
    assert mixed == [0, _ref_bytes(b"a"), 0, _ref_bytes(b"bc"), 0]
    assert _hashes(pa.array(["a", "", "bc"]).slice(1, 1)) == [0]


def test_non_ascii_keys_hash_by_their_utf8_bytes() -> None:
    composed, decomposed = "é", "e\u0301"  # the same letter, different code points
    hashes = _hashes(pa.array([composed, decomposed, "e", "ü", "\u0000", "\U0010ffff"]))
    assert len(set(hashes)) == 6
    assert hashes[0] == _ref_bytes(composed.encode("utf-8"))
    assert hashes[1] == _ref_bytes(decomposed.encode("utf-8"))


def test_column_order_and_boundaries_of_composite_keys_matter() -> None:
    assert _hashes(pa.array([1]), pa.array([2])) != _hashes(pa.array([2]), pa.array([1]))
    assert _hashes(pa.array(["ab"]), pa.array(["c"])) != _hashes(pa.array(["a"]), pa.array(["bc"]))
    assert _hashes(pa.array([1]), pa.array(["x"])) != _hashes(pa.array([1]))


def test_uint64_keys_above_int64_hash_as_their_bits() -> None:
    values = [0, 5, 2**63, 2**64 - 1]
    assert _hashes(pa.array(values, pa.uint64())) == [_ref_int(v) for v in values]


# -- shards are roughly uniform --------------------------------------------------------------------


def _chi_square(shards: np.ndarray, count: int) -> tuple[float, np.ndarray]:
    observed = np.bincount(shards, minlength=count)
    expected = len(shards) / count
    return float(((observed - expected) ** 2 / expected).sum()), observed


@pytest.mark.parametrize("shards", [8, 64, 97])
@pytest.mark.parametrize("kind", ["sequential ints", "strided ints", "strings", "composite"])
def test_100k_keys_spread_evenly_over_the_shards(kind: str, shards: int) -> None:
    n = 100_000
    if kind == "sequential ints":
        columns = [pa.array(np.arange(n, dtype=np.int64))]
    elif kind == "strided ints":  # multiples of the shard count are a classic trap for weak hashes
        columns = [pa.array(np.arange(n, dtype=np.int64) * 1024)]
    elif kind == "strings":
        columns = [pa.array([f"user-{i:08d}" for i in range(n)])]
    else:
        columns = [pa.array(np.arange(n, dtype=np.int64) % 100), pa.array([f"{i // 100}" for i in range(n)])]
    statistic, observed = _chi_square(shard_of(columns, shards), shards)
    dof = shards - 1
    # Far beyond any honest random deviation (about 5 standard deviations of chi-square).
    assert statistic < dof + 5 * (2 * dof) ** 0.5, (kind, shards, statistic)
    expected = n / shards
    assert observed.min() > 0.85 * expected and observed.max() < 1.15 * expected
