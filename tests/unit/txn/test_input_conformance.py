"""Pandas and Arrow input agree (issue 24): the same values get the same answer.

A column whose type is not the table's is converted when the table's type holds every value
exactly, and refused (``SchemaMismatchError`` naming the column, both types and the first value
that does not fit) when it does not; a change of kind (string to int, naive to zoned time) is
refused whatever the values. Every input kind goes through the one rule (``txn/_rows/_conform.py``).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import txn

from .helpers import batch_reader

ACCEPT = None

#: (the table's type of column ``c``, the data's values as an Arrow array, what the table stores
#: or ACCEPT for the same values, or the fragments a refusal names besides the column)
CASES: list[tuple[str, pa.DataType, pa.Array, Any]] = [
    ("int64 into int32", pa.int32(), pa.array([1, -2, None], pa.int64()), ACCEPT),
    ("int64 overflowing int32", pa.int32(), pa.array([1, 2**40], pa.int64()),
     ["int32", "int64", "1099511627776"]),
    ("int32 into int64", pa.int64(), pa.array([1, 2], pa.int32()), ACCEPT),
    ("uint64 beyond int64", pa.int64(), pa.array([1, 2**63], pa.uint64()),
     ["int64", "uint64", "9223372036854775808"]),
    ("int64 into float64, exact", pa.float64(), pa.array([1, 2**53, 2**60], pa.int64()), ACCEPT),
    ("int64 2**53+1 into float64", pa.float64(), pa.array([1, 2**53 + 1], pa.int64()),
     ["double", "int64", "9007199254740993"]),
    ("whole floats into int64", pa.int64(), pa.array([1.0, -3.0], pa.float64()), ACCEPT),
    ("1.5 into int64", pa.int64(), pa.array([1.0, 1.5], pa.float64()), ["int64", "double", "1.5"]),
    ("float64 into float32, exact", pa.float32(), pa.array([0.5, 1e6, float("inf")]), ACCEPT),
    ("float64 0.1 into float32", pa.float32(), pa.array([0.5, 0.1]), ["float", "double", "0.1"]),
    ("float64 1e300 into float32", pa.float32(), pa.array([1e300]), ["float", "double", "1e+300"]),
    ("float64 into decimal", pa.decimal128(10, 2), pa.array([1.5]), ["decimal128(10, 2)", "double"]),
    ("int64 into decimal", pa.decimal128(10, 2), pa.array([1]), ["decimal128(10, 2)", "int64"]),
    ("decimal rescaled exactly", pa.decimal128(10, 2),
     pa.array([Decimal("1.5"), Decimal("-2.25")], pa.decimal128(5, 3)), ACCEPT),
    ("decimal losing a digit", pa.decimal128(10, 2),
     pa.array([Decimal("1.234")], pa.decimal128(5, 3)), ["decimal128(10, 2)", "1.234"]),
    ("ns into us, whole", pa.timestamp("us"),
     pa.array([1_000, None], pa.timestamp("ns")), ACCEPT),
    ("ns into us, sub-us", pa.timestamp("us"),
     pa.array([1_000, 1_000_001_001], pa.timestamp("ns")), ["timestamp[us]", "timestamp[ns]"]),
    ("naive into zoned", pa.timestamp("us", "UTC"),
     pa.array([0], pa.timestamp("us")), ["timestamp[us, tz=UTC]", "timestamp[us]"]),
    ("zoned into naive", pa.timestamp("us"),
     pa.array([0], pa.timestamp("us", "UTC")), ["timestamp[us]", "timestamp[us, tz=UTC]"]),
    ("one zone into another", pa.timestamp("us", "UTC"),
     pa.array([0], pa.timestamp("us", "Europe/Paris")), ACCEPT),
    ("midnights into date32", pa.date32(),
     pa.array([dt.datetime(2026, 1, 2)], pa.timestamp("us")), ACCEPT),
    ("noon into date32", pa.date32(),
     pa.array([dt.datetime(2026, 1, 2, 12)], pa.timestamp("us")), ["date32", "timestamp[us]"]),
    ("date32 into timestamp", pa.timestamp("ms"), pa.array([dt.date(2026, 1, 2)]), ACCEPT),
    ("large_string into string", pa.string(), pa.array(["a", None], pa.large_string()), ACCEPT),
    ("string into large_string", pa.large_string(), pa.array(["a", "b"], pa.string()), ACCEPT),
    ("dictionary into string", pa.string(),
     pa.array(["a", "b", "a"]).dictionary_encode(), ACCEPT),
    ("digits into int64", pa.int64(), pa.array(["1", "2"]), ["int64", "string"]),
    ("ints into string", pa.string(), pa.array([1, 2]), ["string", "int64"]),
    ("bool into int64", pa.int64(), pa.array([True]), ["int64", "bool"]),
    ("int64 into bool", pa.bool_(), pa.array([1]), ["bool", "int64"]),
    ("bytes into string", pa.string(), pa.array([b"x"]), ["string", "binary"]),
    ("all nulls into int64", pa.int64(), pa.array([None, None]), ACCEPT),
    ("list<int64> into list<int32>", pa.list_(pa.int32()), pa.array([[1, 2], None]), ACCEPT),
    ("list<int64> overflowing list<int32>", pa.list_(pa.int32()), pa.array([[1, 2**40]]),
     ["list<item: int32>"]),
    ("struct of int64 into struct of int32", pa.struct([("a", pa.int32())]),
     pa.array([{"a": 1}]), ACCEPT),
    ("struct with a field the table's lacks", pa.struct([("a", pa.int32())]),
     pa.array([{"a": 1, "b": 2}]), ["struct<a: int32>"]),
]

IDS = [case[0] for case in CASES]


def _table(uri: str, column_type: pa.DataType) -> txn.Table:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("c", column_type)])
    t = txn.create_table(uri, schema)
    t.append(pa.table({"id": [0], "c": pa.array([None], column_type)}, schema=schema))
    return t


def _arrow(values: pa.Array) -> pa.Table:
    return pa.table({"id": pa.array(range(1, len(values) + 1), pa.int64()), "c": values})


def _pandas(values: pa.Array) -> pd.DataFrame:
    """The same values as pandas holds them by default (int64, float64, datetime64, str,
    category, Decimal and dict objects)."""
    return pd.DataFrame({"id": range(1, len(values) + 1), "c": values.to_pandas()})


def _seen(t: txn.Table) -> tuple[str | None, list[dict[str, Any]]]:
    snapshot = t.snapshot()
    return snapshot.instant, snapshot.to_arrow().sort_by("id").to_pylist()


def _outcome(t: txn.Table, data: object) -> tuple[str, Any]:
    before = _seen(t)
    try:
        t.append(data)
    except txn.SchemaMismatchError as exc:
        assert _seen(t) == before, "a refused write leaves the table exactly as it was"
        return "refused", str(exc)
    rows = t.to_arrow().sort_by("id")
    return "accepted", rows.filter(pa.compute.greater(rows["id"], 0)).column("c").to_pylist()


@pytest.mark.parametrize(("name", "column_type", "values", "expected"), CASES, ids=IDS)
def test_arrow_and_pandas_input_get_the_same_answer(
    memory_uri: str, name: str, column_type: pa.DataType, values: pa.Array, expected: Any
) -> None:
    arrow = _outcome(_table(memory_uri + "/arrow", column_type), _arrow(values))
    frame = _outcome(_table(memory_uri + "/pandas", column_type), _pandas(values))
    assert arrow[0] == frame[0], f"{name}: Arrow input {arrow}, pandas input {frame}"
    if expected is ACCEPT:
        assert arrow[0] == "accepted", arrow
        assert arrow[1] == frame[1]
        assert arrow[1] == values.cast(column_type, safe=False).to_pylist()
        return
    for message in (arrow[1], frame[1]):
        assert "column 'c'" in message
        for fragment in expected:
            assert fragment in message, (fragment, message)


def test_the_issue_s_example_amt_int64_into_int32(memory_uri: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amt", pa.int32())])
    t = txn.create_table(memory_uri, schema)
    t.append(pa.table({"id": [1], "name": ["a"], "amt": pa.array([5], pa.int64())}))
    t.append(pd.DataFrame({"id": [2], "name": ["b"], "amt": [6]}))
    stored = t.to_arrow().sort_by("id")
    assert stored.schema == schema and stored.column("amt").to_pylist() == [5, 6]
    before = _seen(t)
    for data in (pa.table({"id": [3], "name": ["c"], "amt": pa.array([2**31], pa.int64())}),
                 pd.DataFrame({"id": [3], "name": ["c"], "amt": [2**31]})):
        with pytest.raises(txn.SchemaMismatchError,
                           match=r"'amt': the table has type int32, the data has int64, and the "
                                 r"value 2147483648 does not fit"):
            t.append(data)
        assert _seen(t) == before


def test_what_is_no_value_conversion_is_refused_as_today(memory_uri: str) -> None:
    t = _table(memory_uri, pa.int32())
    before = _seen(t)
    refusals = [
        (pa.table({"id": [1]}), "lacks table column"),
        (pa.table({"id": [1], "c": [1], "extra": [1]}), r"\['extra'\] that the table does not have"),
        (pd.DataFrame({"id": [1], "c": [1], "extra": [1]}), r"unexpected \['extra'\]"),
        (pa.table({"id": pa.array([None, 2], pa.int64()), "c": [1, 2]}), "'id' is not nullable"),
        (pd.DataFrame({"id": [None, 2.0], "c": [1, 2]}), "'id' is not nullable"),
        (pd.DataFrame({"id": [1], "c": [[1]]}), "the table has type int32, the data has list"),
        (pd.DataFrame({"id": [1, 2], "c": [1, "a"]}), "'c'.*dtype object"),
    ]
    for data, message in refusals:
        with pytest.raises(txn.SchemaMismatchError, match=message):
            t.append(data)
        assert _seen(t) == before


def test_every_streamed_input_kind_meets_the_same_rule(memory_uri: str) -> None:
    """A reader, the batches of txn.write_files and a stream's batches convert a value that fits
    and refuse one that does not, as a pa.Table does."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("c", pa.int32())])
    given = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("c", pa.int64())])

    def data(value: int) -> pa.Table:
        return pa.table({"id": [value], "c": pa.array([value], pa.int64())}, schema=given)

    t = txn.create_table(memory_uri, schema, properties={"streaming": "true"})
    t.append(batch_reader(given, iter(data(1).to_batches())))
    with t.begin_write() as pending:
        pending.commit([txn.write_files(pending.ticket, data(2).to_batches(), task_id=0)])
    t.stream("job").write(0, data(3))
    assert t.to_arrow().sort_by("id").column("c").to_pylist() == [1, 2, 3]
    before = _seen(t)
    fragment = r"'c': the table has type int32, the data has int64, and the value 4294967296"
    with pytest.raises(txn.SchemaMismatchError, match=fragment):
        t.append(batch_reader(given, iter(data(2**32).to_batches())))
    with pytest.raises(txn.SchemaMismatchError, match=fragment), t.begin_write() as pending:
        txn.write_files(pending.ticket, data(2**32).to_batches(), task_id=0)
    with pytest.raises(txn.SchemaMismatchError, match=fragment):
        t.stream("job").write(1, data(2**32))
    assert _seen(t)[1] == before[1]
