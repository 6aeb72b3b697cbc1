"""ORC column statistics from the file tail: they must bound every value pyarrow reads from the file.

Files written by pyarrow (the ORC C++ writer) are checked against statistics computed from the data
with ``pyarrow.compute``; the quirks of other writers (the Java writer's versions, truncated string
bounds, missing sub-millisecond digits) and malformed tails are checked on tails built by hand.
"""

from __future__ import annotations

import io
import math
import random
import struct
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.orc as orc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txn._files._orc_footer import OrcFooterUnreadable, orc_footer_stats
from txn._files._writer import ColumnStats

ROWS = 20_000
#: What a naive (wall-clock) ORC TIMESTAMP bound may be widened by: the writer's zone is unknown.
LOCAL_SLACK = timedelta(hours=72)

NESTED = pa.struct([("inner", pa.struct([("a", pa.int64()), ("tags", pa.list_(pa.string()))])),
                    ("i64", pa.int64())])


def _stats(data: bytes, schema: pa.Schema) -> tuple[int, dict[str, ColumnStats]]:
    return orc_footer_stats(io.BytesIO(data), len(data), schema)


def _write(table: pa.Table, **options: Any) -> bytes:
    sink = io.BytesIO()
    orc.write_table(table, sink, **options)
    return sink.getvalue()


def _truth(column: pa.ChunkedArray | pa.Array) -> ColumnStats:
    """Exact statistics from the data; unknown range where a NaN makes one lie, and for binary."""
    nulls = column.null_count
    low = high = None
    ranged = not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type))
    if pa.types.is_floating(column.type):
        ranged = not pc.any(pc.is_nan(column)).as_py()
    if nulls < len(column) and ranged:
        extremes = pc.min_max(column)
        low, high = extremes["min"].as_py(), extremes["max"].as_py()
    return ColumnStats(min=low, max=high, nulls=nulls, count=len(column))


def _sprinkle(values: list[Any], rng: random.Random, share: float = 0.1) -> list[Any]:
    return [None if rng.random() < share else value for value in values]


def _mixed_table(seed: int = 7) -> pa.Table:
    """Every type ORC statistics cover, nested columns first so later ids are shifted."""
    rng = random.Random(seed)
    n = ROWS

    def ints(bits: int) -> list[Any]:
        top = (1 << (bits - 1)) - 1
        return _sprinkle([rng.randint(-top - 1, top) for _ in range(n)], rng)

    epoch = datetime(1970, 1, 1)
    nested = [None if i % 7 == 0 else
              {"inner": {"a": 10_000 + i, "tags": [str(i)] * (i % 3)}, "i64": -10_000 - i} for i in range(n)]
    doubles = [rng.uniform(-1e6, 1e6) for _ in range(n)]
    return pa.table({
        "nested": pa.array(nested, NESTED),
        "numbers": pa.array([None if i % 5 == 0 else list(range(i % 4)) for i in range(n)],
                            pa.list_(pa.int32())),
        "i8": pa.array(ints(8), pa.int8()),
        "i16": pa.array(ints(16), pa.int16()),
        "i32": pa.array(ints(32), pa.int32()),
        "i64": pa.array(ints(64), pa.int64()),
        "f64": pa.array(_sprinkle(doubles, rng), pa.float64()),
        "f64_nan": pa.array(_sprinkle([math.nan if i == n // 2 else v for i, v in enumerate(doubles)], rng),
                            pa.float64()),
        "f32": pa.array(_sprinkle([rng.uniform(-100, 100) for _ in range(n)], rng), pa.float32()),
        "text": pa.array(_sprinkle([rng.choice(["", "a", "zz", "é", "日本", "\U0001f600", f"s{i}"])
                                    for i in range(n)], rng), pa.string()),
        "large_text": pa.array(_sprinkle([f"v{rng.randint(0, 10**6)}" for _ in range(n)], rng),
                               pa.large_string()),
        "flag": pa.array(_sprinkle([rng.random() < 0.5 for _ in range(n)], rng), pa.bool_()),
        "day": pa.array(_sprinkle([date(1970, 1, 1) + timedelta(days=rng.randint(-700_000, 2_000_000))
                                   for _ in range(n)], rng), pa.date32()),
        "naive_us": pa.array(_sprinkle([epoch + timedelta(microseconds=rng.randint(-10**16, 10**16))
                                        for _ in range(n)], rng), pa.timestamp("us")),
        # half the instants near 1970, where writers round sub-second digits differently
        "utc_ms": pa.array(_sprinkle([rng.randint(-3_000, 3_000) if i % 2 else rng.randint(-10**13, 10**13)
                                      for i in range(n)], rng), pa.timestamp("ms", tz="UTC")),
        "utc_ns": pa.array(_sprinkle([rng.randint(-2 * 10**9, 2 * 10**9) if i % 2
                                      else rng.randint(-10**18, 10**18) for i in range(n)], rng),
                           pa.timestamp("ns", tz="UTC")),
        "price": pa.array(_sprinkle([Decimal(rng.randint(-10**15 + 1, 10**15 - 1)).scaleb(-2)
                                     for _ in range(n)], rng), pa.decimal128(15, 2)),
        "blob": pa.array(_sprinkle([bytes([rng.randint(0, 255)]) * (i % 3) for i in range(n)], rng),
                         pa.binary()),
        "nothing": pa.array([None] * n, pa.int64()),
    })


def _check(table: pa.Table, stats: dict[str, ColumnStats]) -> None:
    """Every eligible column: exact where ORC is exact, bounds containing the data otherwise."""
    for name, column in zip(table.column_names, table.columns, strict=True):
        data_type = column.type
        if pa.types.is_nested(data_type):
            assert name not in stats
            continue
        truth = _truth(column)
        got = stats[name]
        assert (got.nulls, got.count) == (truth.nulls, truth.count), name
        if pa.types.is_timestamp(data_type) and data_type.tz is None and truth.min is not None:
            # a wall-clock TIMESTAMP: widened by at most LOCAL_SLACK on each side
            assert truth.min - LOCAL_SLACK <= got.min <= truth.min, name
            assert truth.max <= got.max <= truth.max + LOCAL_SLACK, name
        elif pa.types.is_timestamp(data_type) and data_type.unit == "ns" and truth.min is not None:
            nanos = pc.min_max(column.cast(pa.int64()))
            low, high = nanos["min"].as_py(), nanos["max"].as_py()
            epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
            assert got.min == epoch + timedelta(microseconds=low // 1000), name
            assert got.max == epoch + timedelta(microseconds=-(-high // 1000)), name
        elif pa.types.is_floating(data_type) and got.min is None and truth.min is not None:
            # ORC's sum reveals a NaN; one infinity plus the other is NaN too
            assert _sum_may_be_nan(column), name
        else:
            assert got == truth, name


def _sum_may_be_nan(column: pa.ChunkedArray | pa.Array) -> bool:
    finite = pc.filter(column, pc.is_finite(column))
    largest = pc.max(pc.abs(finite)).as_py() or 0.0
    return bool(len(finite) < len(column) - column.null_count or largest * len(column) >= 1.7e308)


@pytest.mark.parametrize("compression", ["uncompressed", "zlib", "snappy", "zstd", "lz4"])
def test_statistics_match_the_data_for_every_compression(compression: str) -> None:
    table = _mixed_table()
    data = _write(table, compression=compression, stripe_size=1024, batch_size=256)
    assert orc.ORCFile(io.BytesIO(data)).nstripes >= 3
    try:
        rows, stats = _stats(data, table.schema)
    except OrcFooterUnreadable:
        if compression == "lz4":
            return  # allowed: the caller scans the file instead
        raise
    assert rows == ROWS
    _check(table, stats)
    assert stats["nothing"] == ColumnStats(min=None, max=None, nulls=ROWS, count=ROWS)
    assert stats["f64_nan"].min is None and stats["f64_nan"].max is None
    assert stats["blob"].min is None and stats["blob"].nulls == table["blob"].null_count


def test_top_level_names_map_past_nested_columns() -> None:
    # "a" and "i64" are also names inside the struct; the top-level columns must not take its ids
    inner = pa.struct([("a", pa.int64()), ("deep", pa.struct([("i64", pa.int64())])),
                       ("m", pa.map_(pa.string(), pa.int8()))])
    table = pa.table({
        "s": pa.array([{"a": 100, "deep": {"i64": 200}, "m": [("k", 1)]}] * 4, inner),
        "a": pa.array([1, 2, 3, None], pa.int64()),
        "l": pa.array([[[5]], None, [], [[6, 7]]], pa.list_(pa.list_(pa.int64()))),
        "i64": pa.array([-1, -2, -3, -4], pa.int64()),
    })
    rows, stats = _stats(_write(table), table.schema)
    assert rows == 4
    assert set(stats) == {"a", "i64"}
    assert stats["a"] == ColumnStats(min=1, max=3, nulls=1, count=4)
    assert stats["i64"] == ColumnStats(min=-4, max=-1, nulls=0, count=4)


def test_columns_are_found_by_name_in_any_order() -> None:
    table = pa.table({"x": pa.array([1, 2], pa.int32()), "y": pa.array(["b", "a"])})
    schema = pa.schema([("y", pa.string()), ("missing", pa.int64()), ("x", pa.int32())])
    _, stats = _stats(_write(table), schema)
    assert list(stats) == ["y", "x"]
    assert stats["y"] == ColumnStats(min="a", max="b", nulls=0, count=2)


def test_a_kind_that_differs_from_the_arrow_type_gets_no_entry() -> None:
    table = pa.table({"text": ["1", "2"], "number": pa.array([1, 2], pa.int64()),
                      "day": pa.array([date(2020, 1, 1)] * 2), "flag": [True, False]})
    schema = pa.schema([("text", pa.int64()), ("number", pa.string()), ("day", pa.timestamp("us")),
                        ("flag", pa.int8())])
    assert _stats(_write(table), schema)[1] == {}


def test_a_narrower_arrow_type_keeps_counts_without_a_range() -> None:
    table = pa.table({
        "big": pa.array([1, 2**40, None], pa.int64()),
        "small": pa.array([1, 100, None], pa.int64()),
        "double": pa.array([0.1, 0.5, None], pa.float64()),
        "naive": pa.array([datetime(2020, 1, 1), None, None], pa.timestamp("ms")),
        "instant": pa.array([datetime(2020, 1, 1), None, None], pa.timestamp("ms", tz="UTC")),
        "cents": pa.array([Decimal("1.25"), Decimal("-2.50"), None], pa.decimal128(10, 2)),
    })
    schema = pa.schema([("big", pa.int32()), ("small", pa.int8()), ("double", pa.float32()),
                        ("naive", pa.timestamp("ms", tz="UTC")), ("instant", pa.timestamp("ms")),
                        ("cents", pa.decimal128(3, 1))])
    _, stats = _stats(_write(table), schema)
    assert stats["big"] == ColumnStats(min=None, max=None, nulls=1, count=3)
    assert stats["small"] == ColumnStats(min=1, max=100, nulls=1, count=3)
    assert stats["double"] == ColumnStats(min=None, max=None, nulls=1, count=3)
    assert stats["naive"] == ColumnStats(min=None, max=None, nulls=2, count=3)
    assert stats["instant"] == ColumnStats(min=None, max=None, nulls=2, count=3)
    # a coarser scale rounds outwards; -2.5 and 1.3 fit decimal(3, 1)
    assert stats["cents"] == ColumnStats(min=Decimal("-2.5"), max=Decimal("1.3"), nulls=1, count=3)


def test_booleans_empty_files_and_infinities() -> None:
    table = pa.table({
        "trues": [True, None, True], "falses": [False, False, None], "both": [False, True, None],
        "inf": [-math.inf, 1.0, -math.inf], "nan_only": [math.nan, None, math.nan],
        # -inf + inf sums to NaN, which cannot be told from a NaN value: unknown
        "infs": [-math.inf, 1.0, math.inf],
    })
    _, stats = _stats(_write(table), table.schema)
    assert stats["trues"] == ColumnStats(min=True, max=True, nulls=1, count=3)
    assert stats["falses"] == ColumnStats(min=False, max=False, nulls=1, count=3)
    assert stats["both"] == ColumnStats(min=False, max=True, nulls=1, count=3)
    assert stats["inf"] == ColumnStats(min=-math.inf, max=1.0, nulls=0, count=3)
    assert stats["infs"] == ColumnStats(min=None, max=None, nulls=0, count=3)
    assert stats["nan_only"] == ColumnStats(min=None, max=None, nulls=1, count=3)

    empty = table.slice(0, 0)
    rows, stats = _stats(_write(empty), empty.schema)
    assert rows == 0
    assert stats["both"] == ColumnStats(min=None, max=None, nulls=0, count=0)


class _CountingFile:
    """A file object that records where and how much is read."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.position = 0
        self.reads: list[tuple[int, int]] = []

    def seek(self, offset: int, whence: int = 0) -> int:
        self.position = self._handle.seek(offset, whence)
        return self.position

    def read(self, size: int = -1) -> bytes:
        data: bytes = self._handle.read(size)
        self.reads.append((self.position, len(data)))
        self.position += len(data)
        return data


def test_only_the_tail_is_read(tmp_path: Any) -> None:
    rng = random.Random(1)
    table = pa.table({"x": pa.array(range(300_000), pa.int64()),
                      "s": pa.array([f"{rng.random()}" for _ in range(300_000)])})
    path = tmp_path / "big.orc"
    orc.write_table(table, str(path), stripe_size=256 * 1024, compression="zstd")
    size = path.stat().st_size
    described = orc.ORCFile(str(path))
    assert described.nstripes > 5 and size > 1024 * 1024
    expected = ColumnStats(min=0, max=299_999, nulls=0, count=300_000)

    opened = [
        pafs.LocalFileSystem().open_input_file(str(path)),
        fsspec.filesystem("file").open(str(path), "rb"),
        open(path, "rb"),  # noqa: SIM115 (closed below)
    ]
    for handle in opened:
        counting = _CountingFile(handle)
        rows, stats = orc_footer_stats(counting, size, table.schema)
        handle.close()
        assert rows == 300_000
        assert stats["x"] == expected
        assert len(counting.reads) == 1
        start, length = counting.reads[0]
        assert start + length == size and length <= 64 * 1024

    # and what it read of the stripes does not matter: the same file with every stripe zeroed
    data = bytearray(path.read_bytes())
    data[:described.content_length] = bytes(described.content_length)
    assert _stats(bytes(data), table.schema) == (300_000, stats)


def test_a_footer_beyond_the_first_read_is_read_in_a_second() -> None:
    # the C++ writer keeps long string bounds whole, so 30 of them make a footer over 64 KiB
    long = "x" * 4_000
    table = pa.table({f"c{i}": [f"{i}a{long}", None, f"{i}b{long}"] for i in range(30)})
    data = _write(table)
    footer = orc.ORCFile(io.BytesIO(data)).file_footer_length
    assert footer > 64 * 1024
    counting = _CountingFile(io.BytesIO(data))
    rows, stats = orc_footer_stats(counting, len(data), table.schema)
    assert rows == 3 and len(stats) == 30
    assert stats["c7"] == ColumnStats(min=f"7a{long}", max=f"7b{long}", nulls=1, count=3)
    (first, first_length), (second, second_length) = counting.reads
    assert first + first_length == len(data) and second + second_length == first


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    ints=st.lists(st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)), min_size=1, max_size=300),
    floats=st.lists(st.one_of(st.none(), st.floats(allow_nan=True)), min_size=1, max_size=300),
    texts=st.lists(st.one_of(st.none(), st.text(max_size=12)), min_size=1, max_size=300),
    compression=st.sampled_from(["uncompressed", "zlib", "snappy", "zstd", "lz4"]),
    batch=st.integers(1, 64),
)
def test_random_columns_match_the_data(ints: list[int | None], floats: list[float | None],
                                       texts: list[str | None], compression: str, batch: int) -> None:
    n = min(len(ints), len(floats), len(texts))
    table = pa.table({"i": pa.array(ints[:n], pa.int64()), "f": pa.array(floats[:n], pa.float64()),
                      "t": pa.array(texts[:n], pa.string())})
    data = _write(table, compression=compression, stripe_size=1024, batch_size=batch)
    rows, stats = _stats(data, table.schema)
    assert rows == n
    _check(table, stats)


# --- tails built by hand: other writers' quirks and malformed files --------------------------------

def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _pb(*fields: tuple[int, int | bytes | float]) -> bytes:
    """A protobuf message: ints as varints, bytes length-delimited, floats as doubles."""
    out = bytearray()
    for number, value in fields:
        if isinstance(value, bytes):
            out += _varint(number << 3 | 2) + _varint(len(value)) + value
        elif isinstance(value, float):
            out += _varint(number << 3 | 1) + struct.pack("<d", value)
        else:
            out += _varint(number << 3) + _varint(value)
    return bytes(out)


def _orc_file(columns: list[tuple[str, int, bytes]], rows: int, *, writer: int | None = None,
              writer_version: int = 6, compression: int = 0, footer: bytes | None = None,
              magic: bytes = b"ORC", extra_footer: bytes = b"") -> bytes:
    """A tail-only ORC file: ``columns`` are (name, ORC kind, ColumnStatistics bytes)."""
    if footer is None:
        root = _pb((1, 12), (2, b"".join(_varint(i + 1) for i in range(len(columns)))),
                   *((3, name.encode()) for name, _, _ in columns))
        types = [root] + [_pb((1, kind)) for _, kind, _ in columns]
        statistics = [_pb((1, rows))] + [stats for _, _, stats in columns]
        footer = _pb((6, rows), *((4, t) for t in types), *((7, s) for s in statistics),
                     *(((9, writer),) if writer is not None else ())) + extra_footer
    postscript = _pb((1, len(footer)), (2, compression), (6, writer_version), (8000, magic))
    return b"ORC" + footer + postscript + bytes([len(postscript)])


def _values(count: int, has_null: bool, **sub: bytes) -> bytes:
    numbers = {"ints": 2, "doubles": 3, "strings": 4, "buckets": 5, "decimals": 6, "dates": 7, "times": 9}
    return _pb((1, count), (10, int(has_null)), *((numbers[name], body) for name, body in sub.items()))


def _entry(kind: int, stats: bytes, data_type: pa.DataType, **options: Any) -> ColumnStats | None:
    """The entry of column "c" of ORC ``kind`` with ColumnStatistics ``stats`` in a 10-row file."""
    data = _orc_file([("c", kind, stats)], 10, **options)
    return _stats(data, pa.schema([("c", data_type)]))[1].get("c")


def _one(kind: int, stats: bytes, data_type: pa.DataType, **options: Any) -> ColumnStats:
    entry = _entry(kind, stats, data_type, **options)
    assert entry is not None
    return entry


def test_old_writers_leave_ranges_unknown() -> None:
    ints = _values(8, True, ints=_pb((1, _zigzag(-3)), (2, _zigzag(40))))
    assert _one(4, ints, pa.int64()) == ColumnStats(min=-3, max=40, nulls=2, count=10)
    ints = _values(10, False, ints=_pb((1, _zigzag(-3)), (2, _zigzag(40))))
    # before HIVE-8732 file maxima were wrong, whichever writer claims the version
    assert _one(4, ints, pa.int64(), writer_version=0) == ColumnStats(min=None, max=None, nulls=0, count=10)
    decimals = _values(10, False, decimals=_pb((1, b"-1.5"), (2, b"20")))
    expected = ColumnStats(min=Decimal("-1.50"), max=Decimal("20.00"), nulls=0, count=10)
    assert _one(14, decimals, pa.decimal128(10, 2), writer_version=7) == expected
    # the Java writer's decimal bounds are wrong before ORC-517; other writers start at 6
    assert _one(14, decimals, pa.decimal128(10, 2), writer_version=6).min is None
    assert _one(14, decimals, pa.decimal128(10, 2), writer_version=6, writer=1) == expected


def test_counts_that_contradict_each_other_give_no_entry() -> None:
    ints = _pb((2, _pb((1, 0), (2, 0))))
    assert _entry(4, _pb((1, 10), (10, 1)) + ints, pa.int64()) is None  # no nulls, yet "has null"
    assert _entry(4, _pb((1, 7), (10, 0)) + ints, pa.int64()) is None  # nulls, yet "no null"
    assert _entry(4, _pb((1, 11)) + ints, pa.int64()) is None  # more values than rows
    assert _entry(4, _pb((10, 1)) + ints, pa.int64()) is None  # no value count at all
    assert _one(4, _pb((1, 7)) + ints, pa.int64()) == ColumnStats(min=0, max=0, nulls=3, count=10)


def test_double_sum_reveals_nan() -> None:
    def doubles(total: float | None) -> bytes:
        fields: list[tuple[int, float]] = [(1, -1.0), (2, 2.0)] + ([(3, total)] if total is not None else [])
        return _values(10, False, doubles=_pb(*fields))

    assert _one(6, doubles(1.0), pa.float64()) == ColumnStats(min=-1.0, max=2.0, nulls=0, count=10)
    assert _one(6, doubles(math.nan), pa.float64()).min is None
    assert _one(6, doubles(None), pa.float64()).min is None


def test_truncated_string_bounds_are_used_and_char_is_not() -> None:
    bounds = _values(10, False, strings=_pb((4, b"abc"), (5, "abé".encode())))
    assert _one(7, bounds, pa.string()) == ColumnStats(min="abc", max="abé", nulls=0, count=10)
    exact = _values(10, False, strings=_pb((1, b"a"), (2, b"b")))
    assert _one(17, exact, pa.string()) == ColumnStats(min=None, max=None, nulls=0, count=10)
    assert _one(16, exact, pa.large_string()) == ColumnStats(min="a", max="b", nulls=0, count=10)
    broken = _values(10, False, strings=_pb((1, b"\xff"), (2, b"b")))
    assert _one(7, broken, pa.string()) == ColumnStats(min=None, max=None, nulls=0, count=10)


def test_timestamp_bounds_follow_what_writers_record() -> None:
    base = 1_600_000_000_000  # ms
    utc = pa.timestamp("us", tz="UTC")
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)

    def times(**fields: int) -> bytes:
        numbers = {"min": 3, "max": 4, "min_nanos": 5, "max_nanos": 6}
        return _values(10, False, times=_pb(*((numbers[k], _zigzag(v) if k in ("min", "max") else v)
                                               for k, v in fields.items())))

    def at(ms: int, micros: int = 0) -> datetime:
        return epoch + timedelta(milliseconds=ms, microseconds=micros)

    # sub-millisecond digits stored plus one; a missing maximum digit field means 999999
    got = _one(18, times(min=base, max=base + 5, min_nanos=123_457), utc)
    assert (got.min, got.max) == (at(base, 123), at(base + 5, 1000))
    # no digit field at all: only the millisecond is known, rounded either way by the writer
    got = _one(18, times(min=base, max=base + 5), utc)
    assert (got.min, got.max) == (at(base, -1000), at(base + 5, 1000))
    # the Java writer records an instant in the second before 1970 one second late
    got = _one(18, times(min=500, max=900, max_nanos=1), utc, writer=0)
    assert got.min == at(-500)
    got = _one(18, times(min=500, max=900, max_nanos=1), utc, writer=1)
    assert got.min == at(500)
    # a wall-clock TIMESTAMP is widened: its footer bounds went through an unknown zone
    got = _one(9, times(min=base, max=base, max_nanos=1), pa.timestamp("s"))
    naive = datetime(1970, 1, 1) + timedelta(milliseconds=base)
    assert (got.min, got.max) == (naive - LOCAL_SLACK, naive + LOCAL_SLACK)
    # only the zone-dependent fields 1 and 2: unknown
    old = _values(10, False, times=_pb((1, _zigzag(base)), (2, _zigzag(base))))
    assert _one(18, old, utc) == ColumnStats(min=None, max=None, nulls=0, count=10)


def test_unsupported_or_malformed_tails_raise() -> None:
    ints = _values(10, False, ints=_pb((1, 0), (2, 0)))
    schema = pa.schema([("c", pa.int64())])
    good = _orc_file([("c", 4, ints)], 10)
    long_footer = _pb((1, 10_000), (2, 0), (6, 6), (8000, b"ORC"))
    zstd_frame = b"\x28\xb5\x2f\xfd\x00" + bytes(4)  # no Frame_Content_Size
    cases = {
        "magic": _orc_file([("c", 4, ints)], 10, magic=b"ORK"),
        "postscript length": good[:-1] + b"\xff",
        "footer length": b"ORC" + bytes(5) + long_footer + bytes([len(long_footer)]),
        "LZO": _orc_file([("c", 4, ints)], 10, compression=3),
        "cut off": _orc_file([], 10, footer=_pb((6, 10)) + b"\x22\x10abc"),
        "not a struct": _orc_file([], 10, footer=_pb((6, 10), (4, _pb((1, 4))))),
        "encrypted": _orc_file([("c", 4, ints)], 10, extra_footer=_pb((10, b""))),
        "does not record": _orc_file([], 10, compression=5,
                                     footer=(len(zstd_frame) << 1).to_bytes(3, "little") + zstd_frame),
        "too short": b"ORC",
    }
    for expected, data in cases.items():
        with pytest.raises(OrcFooterUnreadable, match=expected):
            _stats(data, schema)
    assert _stats(good, schema)[1]["c"] == ColumnStats(min=0, max=0, nulls=0, count=10)
