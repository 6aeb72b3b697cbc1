"""Duplicate checks and last-wins on record keys, vectorised (``txn/_rows/_keys.py``, ``_codes.py``).

Invariant: for every key type a table accepts, and for composite keys, ``repeated``,
``check_unique`` and ``last_wins`` agree with a plain-Python reference built on tuples of the
keys' values: equal keys are found equal, different keys (however close: ``-1`` and ``2**64-1``
share their bits, ``'a'`` and ``b'a'`` their bytes) never.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import txn
from txn._rows import check_unique, index_keys, last_wins, repeated
from txn._rows._codes import key_codes


def _reference_repeated(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    seen: dict[tuple[Any, ...], int] = {}
    for row in rows:
        seen[row] = seen.get(row, 0) + 1
    return [row for row in seen if seen[row] > 1]  # first occurrence order


def _reference_last_wins(rows: list[tuple[Any, ...]]) -> list[int]:
    last = {row: i for i, row in enumerate(rows)}
    return sorted(last.values())


def _table(columns: dict[str, pa.Array]) -> pa.Table:
    return pa.table(columns)


def _tuples(table: pa.Table, names: list[str]) -> list[tuple[Any, ...]]:
    return list(zip(*(table[n].to_pylist() for n in names), strict=True))


def _check_against_reference(table: pa.Table, names: list[str]) -> None:
    rows = _tuples(table, names)
    keys = index_keys(table, names)
    twice = repeated(keys)
    assert _tuples(twice, list(keys.column_names)) == _reference_repeated(rows)
    numbered = table.append_column("__n__", pa.array(range(table.num_rows), pa.int64()))
    kept = last_wins(numbered, names)
    assert kept["__n__"].to_pylist() == _reference_last_wins(rows)
    if _reference_repeated(rows):
        with pytest.raises(txn.DuplicateKeyError):
            check_unique(table, names)
    else:
        check_unique(table, names)


TYPED_VALUES: list[tuple[pa.DataType, list[Any]]] = [
    (pa.int8(), [-128, 127, 0, -1, 127]),
    (pa.int64(), [-(2 ** 63), 2 ** 63 - 1, 0, -1, 2 ** 63 - 1]),
    (pa.uint64(), [2 ** 64 - 1, 0, 2 ** 63, 1, 2 ** 64 - 1]),
    (pa.uint8(), [255, 0, 1, 255, 2]),
    (pa.bool_(), [True, False, False, True, True]),
    (pa.string(), ["a", "", "ab", "b", "a"]),
    (pa.large_string(), ["x" * 40, "y", "x" * 40, "", "z"]),
    (pa.binary(), [b"a", b"", b"\x00", b"a", b"\x00\x00"]),
    (pa.binary(2), [b"ab", b"aa", b"ab", b"\x00\x00", b"zz"]),
    (pa.decimal128(10, 2), [Decimal("1.50"), Decimal("1.05"), Decimal("-1.50"), Decimal("1.50"),
                            Decimal("0.00")]),
    (pa.date32(), [dt.date(2026, 1, 1), dt.date(1970, 1, 1), dt.date(2026, 1, 2),
                   dt.date(2026, 1, 1), dt.date(1, 1, 1)]),
    (pa.timestamp("us", "UTC"), [dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                                 dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
                                 dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
                                 dt.datetime(2026, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC),
                                 dt.datetime(9999, 1, 1, tzinfo=dt.UTC)]),
]


@pytest.mark.parametrize(("data_type", "values"), TYPED_VALUES, ids=[str(t) for t, _ in TYPED_VALUES])
def test_each_key_type_finds_exactly_its_repeats(data_type: pa.DataType, values: list[Any]) -> None:
    table = _table({"k": pa.array(values, data_type)})
    _check_against_reference(table, ["k"])
    unique = _table({"k": pa.array(list(dict.fromkeys(values)), data_type)})
    assert repeated(index_keys(unique, ["k"])).num_rows == 0


@pytest.mark.parametrize(("first", "second"), [(a, b) for a in TYPED_VALUES for b in TYPED_VALUES
                                                if a is not b][::7],
                         ids=lambda pair: str(pair[0]))
def test_composite_keys_of_mixed_types_find_exactly_their_repeats(
        first: tuple[pa.DataType, list[Any]], second: tuple[pa.DataType, list[Any]]) -> None:
    # every pairing of the two columns' values, then some pairs again
    rows = [(a, b) for a in first[1] for b in second[1]]
    rows += rows[::3]
    table = _table({"a": pa.array([r[0] for r in rows], first[0]),
                    "b": pa.array([r[1] for r in rows], second[0])})
    _check_against_reference(table, ["a", "b"])


def test_wide_integer_columns_are_combined_without_collisions() -> None:
    """Spans too wide to multiply (full int64 ranges in three columns) are renumbered first:
    keys that differ in one column only stay apart."""
    edge = [-(2 ** 63), 2 ** 63 - 1, 0, -1, 1]
    rows = [(a, b, c) for a in edge for b in edge for c in edge[:3]]
    rows += rows[::5]
    table = _table({name: pa.array([r[i] for r in rows], pa.int64())
                    for i, name in enumerate(["a", "b", "c"])})
    _check_against_reference(table, ["a", "b", "c"])
    assert len(set(key_codes(index_keys(table, ["a", "b", "c"])).tolist())) == 5 * 5 * 3


def test_chunked_columns_are_read_as_one() -> None:
    chunked = pa.chunked_array([pa.array([1, 2, 3]), pa.array([3, 4]), pa.array([1])], pa.int64())
    table = pa.table({"k": chunked, "s": pa.chunked_array([["a", "b"], ["a", "c", "a", "b"]])})
    _check_against_reference(table, ["k"])
    _check_against_reference(table, ["k", "s"])
    _check_against_reference(table, ["s", "k"])


def test_the_message_of_a_repeat_names_the_first_repeated_keys() -> None:
    table = _table({"k": pa.array([5, 3, 5, 9, 3, 3], pa.int64())})
    with pytest.raises(txn.DuplicateKeyError, match=r"\[5, 3\] appear more than once"):
        check_unique(table, ["k"])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.sampled_from(["", "a", "b"]),
                          st.integers(-(2 ** 63), 2 ** 63 - 1) | st.sampled_from([0, 7])),
                max_size=40))
def test_any_composite_key_agrees_with_the_reference(rows: list[tuple[int, str, int]]) -> None:
    table = _table({"a": pa.array([r[0] for r in rows], pa.int16()),
                    "b": pa.array([r[1] for r in rows], pa.string()),
                    "c": pa.array([r[2] for r in rows], pa.int64())})
    _check_against_reference(table, ["a", "b", "c"])
    _check_against_reference(table, ["c"])
    _check_against_reference(table, ["b", "a"])


@pytest.mark.parametrize("keys", [
    list(range(1000)),                          # in order: one pass
    list(range(999, -1, -1)),                   # dense, out of order: a count per value
    [k * 1_000_003 for k in range(500)][::-1],  # sparse: a sort
], ids=["sorted", "dense", "sparse"])
def test_every_way_of_finding_repeats_finds_them(keys: list[int]) -> None:
    table = pa.table({"k": pa.array(keys, pa.int64())})
    assert repeated(index_keys(table, ["k"])).num_rows == 0
    twice = pa.table({"k": pa.array([*keys, keys[len(keys) // 2]], pa.int64())})
    assert repeated(index_keys(twice, ["k"]))["key_0"].to_pylist() == [keys[len(keys) // 2]]
    with pytest.raises(txn.DuplicateKeyError):
        check_unique(twice, ["k"])
