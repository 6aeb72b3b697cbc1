"""A data file's row count and column statistics, taken from its ORC footer.

ADD SEGMENT brings existing ORC files into a table in place, and the table records per-file
column statistics so readers can prune files by filter. pyarrow exposes no ORC column statistics,
and computing them costs a scan of every file, so this module decodes the file's tail itself:
the postscript (its last bytes) and the footer before it, both protobuf messages
(https://orc.apache.org/specification/ORCv1/), the footer compressed in chunks. Nothing before
the footer is decoded, neither stripes nor the stripe-statistics section: the one read of the
file's last 64 KiB may cover some of their bytes, which are ignored.

The statistics must mean what :func:`txn._files._writer.column_stats` means, because readers
prune files by them: ``nulls`` and ``count`` exact, ``min``/``max`` bounds of every value pyarrow
reads from the file (exact wherever ORC records them exactly), or unknown (None) where the footer
cannot prove one:

* files from a writer older than HIVE-8732 (writer version < 1) recorded wrong maxima and
  non-UTF-8 string order: every range is unknown;
* doubles: ORC's min/max skip NaN, but the recorded sum turns NaN once any value was NaN, so a
  missing or NaN sum (or a NaN bound) leaves the range unknown, as the writer does for NaN;
* strings: a minimum or maximum longer than 1 KiB is replaced by a lower or upper bound
  (ORC-203), which is still a bound and is used; CHAR values are padded, so their range is
  unknown; binary ranges are never kept (ORC records none);
* decimals from the Java writer before ORC-517 (writer version < 7) have wrong bounds: unknown;
* timestamps: only the UTC bounds (ORC-135) are used. ``TIMESTAMP WITH LOCAL TIME ZONE`` (an
  instant, for a zoned Arrow type) is exact to the nanosecond, rounded outwards to the Arrow unit
  (the Java writer's minimum in the second before 1970 is one second late: lowered). A plain
  ``TIMESTAMP`` (a wall-clock time, for a naive Arrow type) has bounds that went through the
  writer's time zone, which only the stripe footers name: its range is widened by
  :data:`_LOCAL_TIMESTAMP_SLACK_NS`. A zoned Arrow type for a plain TIMESTAMP, or the reverse,
  depends on how the caller reinterprets values: unknown;
* a column whose ORC kind does not match its Arrow type, or whose counts contradict the row
  count, gets no entry at all; one whose Arrow type is narrower than the recorded bounds (int32
  for ORC bigint bounds beyond it, float32 for ORC double) keeps its counts, range unknown.

Compression: NONE, ZLIB, SNAPPY, ZSTD (frames that record their content size) and LZ4 are
decoded with pyarrow's codecs; LZO, BROTLI and encrypted columns raise
:class:`OrcFooterUnreadable`, as does anything malformed.
"""

from __future__ import annotations

import decimal
import math
import struct
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa

from metatxn.indexes import stats_eligible

from ._writer import ColumnStats


class OrcFooterUnreadable(Exception):
    """The footer cannot be decoded here (e.g. LZO compression, or a malformed tail); the caller
    falls back to computing statistics with one scan of the file."""


class SeekableFile(Protocol):
    """What the tail is read through: a binary file object that can seek."""

    def seek(self, offset: int, whence: int = 0, /) -> int: ...

    def read(self, size: int = -1, /) -> bytes: ...


#: Bytes of the first (usually only) read: the postscript, the footer and often more.
_TAIL_READ = 64 * 1024
#: Where a writer recorded no compression block size, the ORC default.
_DEFAULT_BLOCK = 256 * 1024
_MAGIC = b"ORC"

# Type.Kind
_BOOLEAN, _BYTE, _SHORT, _INT, _LONG, _FLOAT, _DOUBLE, _STRING, _BINARY, _TIMESTAMP = range(10)
_STRUCT, _DECIMAL, _DATE, _VARCHAR, _CHAR, _TIMESTAMP_INSTANT = 12, 14, 15, 16, 17, 18
_INTEGERS = frozenset({_BYTE, _SHORT, _INT, _LONG})
_STRINGS = frozenset({_STRING, _VARCHAR, _CHAR})

_COMPRESSIONS = {0: "NONE", 1: "ZLIB", 2: "SNAPPY", 3: "LZO", 4: "LZ4", 5: "ZSTD", 6: "BROTLI"}
#: Footer.writer of the Java writer (also what a footer without the field means).
_JAVA_WRITER = 0
#: PostScript.writer_version from which file statistics are trustworthy (HIVE-8732), and from
#: which the Java writer's decimal bounds are (ORC-517).
_HIVE_8732, _ORC_517 = 1, 7

#: A plain TIMESTAMP's footer bound is the writer's wall-clock value converted through its zone
#: (twice over, in the C++ writer set to a zone other than UTC), and a reader converts the stored
#: value through the writer's zone and its own, perhaps with other zone rules. Each conversion
#: shifts a value by one zone offset, under 18 hours (Java's limit; real zones stay under 16), and
#: bound and value are at most four conversions apart.
_LOCAL_TIMESTAMP_SLACK_NS = 4 * 18 * 3600 * 10**9
_MS_NS = 10**6
_UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


def orc_footer_stats(handle: SeekableFile, size: int,
                     schema: pa.Schema) -> tuple[int, dict[str, ColumnStats]]:
    """Row count and statistics of every eligible top-level column of ``schema`` found by name
    in the ORC file ``handle`` (a seekable binary file object, e.g. what
    ``pyarrow.fs.FileSystem.open_input_file`` or ``fsspec``'s ``open`` return) of ``size`` bytes.

    Reads only the file's tail: one read of at most 64 KiB, a second only for a larger footer.
    Raises :class:`OrcFooterUnreadable` naming the problem where the tail cannot be decoded.
    """
    if size < len(_MAGIC) + 2:
        raise OrcFooterUnreadable(f"a {size}-byte file is too short to be an ORC file")
    tail_start = max(0, size - _TAIL_READ)
    tail = _read(handle, tail_start, size - tail_start)
    ps_length = tail[-1]
    if ps_length == 0 or ps_length + 1 > len(tail):
        raise OrcFooterUnreadable(f"postscript length {ps_length} does not fit a {size}-byte file")
    postscript = _message(tail[-1 - ps_length:-1], "postscript")
    magic = _last_bytes(postscript, 8000, "postscript magic")
    if magic != _MAGIC:
        raise OrcFooterUnreadable(f"postscript magic is {magic!r}, not {_MAGIC!r}: not an ORC file")
    footer_length = _required(postscript, 1, "postscript footer length")
    compression = _last_int(postscript, 2, "postscript compression") or 0
    block = _last_int(postscript, 3, "postscript compression block size") or _DEFAULT_BLOCK
    writer_version = _last_int(postscript, 6, "postscript writer version") or 0

    footer_end = size - 1 - ps_length
    footer_start = footer_end - footer_length
    if footer_start < len(_MAGIC):
        raise OrcFooterUnreadable(f"footer length {footer_length} does not fit a {size}-byte file")
    if footer_start < tail_start:
        tail = _read(handle, footer_start, tail_start - footer_start) + tail
        tail_start = footer_start
    raw = tail[footer_start - tail_start:footer_end - tail_start]
    footer = _message(_decompress(raw, compression, block), "footer")

    if 10 in footer:
        raise OrcFooterUnreadable("the file has encrypted columns, whose statistics the footer hides")
    rows = _required(footer, 6, "footer number of rows")
    types = [_message(_bytes(raw_type, "footer type"), "footer type") for raw_type in footer.get(4, [])]
    if not types or _last_int(types[0], 1, "root type kind") != _STRUCT:
        raise OrcFooterUnreadable("the root type is not a struct")
    columns = _top_level_columns(types)
    statistics = footer.get(7, [])
    writer = _last_int(footer, 9, "footer writer") or _JAVA_WRITER

    stats: dict[str, ColumnStats] = {}
    for field in schema:
        column = columns.get(field.name)
        if column is None or column >= len(statistics) or not stats_eligible(field.type):
            continue
        kind = _required(types[column], 1, "type kind")
        entry = _column_stats(kind, field.type, _message(_bytes(statistics[column], "column statistics"),
                                                         "column statistics"),
                              rows, writer, writer_version)
        if entry is not None:
            stats[field.name] = entry
    return rows, stats


def _top_level_columns(types: list[_Fields]) -> dict[str, int]:
    """Column id of each top-level field, by name. The root's ``subtypes`` already are the column
    ids of the pre-order walk, so nested types before a field are accounted for. A name that
    occurs twice is left out: which one a reader takes is not certain."""
    root = types[0]
    subtypes = _packed_ints(root, 2, "root subtypes")
    names = [_text(_bytes(name, "field name"), "field name") for name in root.get(3, [])]
    if len(names) != len(subtypes):
        raise OrcFooterUnreadable(f"the root struct has {len(subtypes)} subtypes but {len(names)} "
                                  "field names")
    if any(not 0 < column < len(types) for column in subtypes):
        raise OrcFooterUnreadable(f"the root struct names a column outside the {len(types)} types")
    columns: dict[str, int] = {}
    repeated = {name for name in names if names.count(name) > 1}
    for name, column in zip(names, subtypes, strict=True):
        if name not in repeated:
            columns[name] = column
    return columns


def _column_stats(kind: int, data_type: pa.DataType, statistics: _Fields, rows: int, writer: int,
                  writer_version: int) -> ColumnStats | None:
    if not _same_kind(kind, data_type):
        return None
    values = _last_int(statistics, 1, "number of values")
    if values is None or values > rows:
        return None
    nulls = rows - values
    has_null = _last_int(statistics, 10, "has null")
    if has_null is not None and bool(has_null) != (nulls > 0):
        return None  # the counts contradict each other: no count can be trusted
    low: Any = None
    high: Any = None
    if values and writer_version >= _HIVE_8732:
        try:
            low, high = _range(kind, data_type, statistics, values, writer, writer_version)
        except (ArithmeticError, ValueError, OverflowError, pa.ArrowException):
            low = high = None  # a bound the Arrow type cannot hold: unknown
        if low is None or high is None or low > high:
            low = high = None
    return ColumnStats(min=low, max=high, nulls=nulls, count=rows)


def _same_kind(kind: int, data_type: pa.DataType) -> bool:
    check = _ARROW_KIND.get(kind)
    return check is not None and bool(check(data_type))


def _is_text(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_string(data_type) or pa.types.is_large_string(data_type))


def _is_bytes(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type)
                or pa.types.is_fixed_size_binary(data_type))


#: Which Arrow types hold the values of each ORC kind (widths and time zones are checked later).
_ARROW_KIND: dict[int, Callable[[pa.DataType], bool]] = {
    **dict.fromkeys(_INTEGERS, pa.types.is_integer), **dict.fromkeys(_STRINGS, _is_text),
    _BOOLEAN: pa.types.is_boolean, _FLOAT: pa.types.is_floating, _DOUBLE: pa.types.is_floating,
    _BINARY: _is_bytes, _DATE: pa.types.is_date, _DECIMAL: pa.types.is_decimal,
    _TIMESTAMP: pa.types.is_timestamp, _TIMESTAMP_INSTANT: pa.types.is_timestamp,
}


def _range(kind: int, data_type: pa.DataType, statistics: _Fields, values: int, writer: int,
           writer_version: int) -> tuple[Any, Any]:
    if kind in _INTEGERS:
        return _integer_range(statistics, data_type)
    if kind == _BOOLEAN:
        buckets = _sub(statistics, 5, "bucket statistics")
        trues = _packed_ints(buckets, 1, "bucket counts") if buckets is not None else []
        if not trues or trues[0] > values:
            return None, None
        return trues[0] == values, trues[0] > 0  # min is True only if every value is
    if kind in (_FLOAT, _DOUBLE):
        return _float_range(kind, statistics, data_type)
    if kind in (_STRING, _VARCHAR):
        return _string_range(statistics)
    if kind == _DATE:
        dates = _sub(statistics, 7, "date statistics")
        if dates is None:
            return None, None
        return _date(_last_sint(dates, 1, "date minimum")), _date(_last_sint(dates, 2, "date maximum"))
    if kind in (_TIMESTAMP, _TIMESTAMP_INSTANT):
        return _timestamp_range(kind, statistics, data_type, writer)
    if kind == _DECIMAL and not (writer == _JAVA_WRITER and writer_version < _ORC_517):
        return _decimal_range(statistics, data_type)
    return None, None  # binary, char, old Java decimals


def _integer_range(statistics: _Fields, data_type: pa.DataType) -> tuple[Any, Any]:
    ints = _sub(statistics, 2, "integer statistics")
    if ints is None:
        return None, None
    low, high = _last_sint(ints, 1, "integer minimum"), _last_sint(ints, 2, "integer maximum")
    if low is None or high is None:
        return None, None
    bits = data_type.bit_width
    floor, ceiling = ((-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if pa.types.is_signed_integer(data_type)
                      else (0, (1 << bits) - 1))
    if low < floor or high > ceiling:
        return None, None
    return low, high


def _float_range(kind: int, statistics: _Fields, data_type: pa.DataType) -> tuple[Any, Any]:
    doubles = _sub(statistics, 3, "double statistics")
    if doubles is None:
        return None, None
    low, high, total = (_last_double(doubles, number, "double statistics") for number in (1, 2, 3))
    if low is None or high is None or total is None or any(map(math.isnan, (low, high, total))):
        return None, None
    if pa.types.is_float64(data_type):
        return low, high
    if pa.types.is_float32(data_type) and kind == _FLOAT and _is_float32(low) and _is_float32(high):
        return low, high
    return None, None  # rounding a double into a narrower type could cut a value off


def _is_float32(value: float) -> bool:
    packed: float = struct.unpack("<f", struct.pack("<f", value))[0]
    return packed == value


def _string_range(statistics: _Fields) -> tuple[Any, Any]:
    strings = _sub(statistics, 4, "string statistics")
    if strings is None:
        return None, None
    # lower_bound/upper_bound replace a minimum/maximum over 1 KiB; by spec they bound all values
    low = _last_bytes(strings, 1, "string minimum")
    low = low if low is not None else _last_bytes(strings, 4, "string lower bound")
    high = _last_bytes(strings, 2, "string maximum")
    high = high if high is not None else _last_bytes(strings, 5, "string upper bound")
    if low is None or high is None:
        return None, None
    # ORC and Arrow order strings by UTF-8 bytes, which is Python's code point order
    return low.decode("utf-8"), high.decode("utf-8")


def _date(days: int | None) -> Any:
    if days is None:
        return None
    return pa.scalar(days, pa.int32()).cast(pa.date32()).as_py()


def _timestamp_range(kind: int, statistics: _Fields, data_type: pa.DataType, writer: int) -> tuple[Any, Any]:
    # An instant (TIMESTAMP_INSTANT) matches a zoned Arrow type, a wall-clock TIMESTAMP a naive
    # one; the other pairs depend on how the caller reinterprets values
    if (kind == _TIMESTAMP_INSTANT) != (data_type.tz is not None):
        return None, None
    times = _sub(statistics, 9, "timestamp statistics")
    if times is None:
        return None, None
    # minimum/maximum (fields 1, 2) are in the writer's zone, which the tail does not name
    low_ms, high_ms = _last_sint(times, 3, "timestamp minimum"), _last_sint(times, 4, "timestamp maximum")
    if low_ms is None or high_ms is None:
        return None, None
    # The digits below the millisecond are stored plus one, only where they differ from 0 (minimum)
    # and 999999 (maximum). The C++ writer truncates towards zero (so they can be negative), Java
    # floors; either way value = milliseconds * 10**6 + digits. A file with neither field may come
    # from a writer that did not record them: its bounds are only known to the millisecond, in
    # whichever direction the writer rounded.
    low_nanos = _last_signed(times, 5, "timestamp minimum nanos")
    high_nanos = _last_signed(times, 6, "timestamp maximum nanos")
    low_digits: int | None = -(_MS_NS - 1)
    high_digits: int | None = _MS_NS - 1
    if low_nanos is not None or high_nanos is not None:
        low_digits, high_digits = _digits(low_nanos, 0), _digits(high_nanos, _MS_NS - 1)
    if low_digits is None or high_digits is None:
        return None, None
    if writer == _JAVA_WRITER and 0 <= low_ms < 1000:
        # the Java writer records an instant in the second before 1970 one second late
        low_ms -= 1000
    low = low_ms * _MS_NS + low_digits
    high = high_ms * _MS_NS + high_digits
    if kind == _TIMESTAMP:
        low, high = low - _LOCAL_TIMESTAMP_SLACK_NS, high + _LOCAL_TIMESTAMP_SLACK_NS
    return _timestamp(low, data_type, round_up=False), _timestamp(high, data_type, round_up=True)


def _digits(stored: int | None, default: int) -> int | None:
    if stored is None:
        return default
    return stored - 1 if -_MS_NS < stored - 1 < _MS_NS else None


def _timestamp(nanos: int, data_type: pa.DataType, *, round_up: bool) -> Any:
    """A bound in ``data_type``'s unit, rounded outwards. Python times stop at microseconds, so a
    nanosecond bound becomes the enclosing microsecond (as the writer's statistics do)."""
    unit = "us" if data_type.unit == "ns" else data_type.unit
    step = _UNIT_NS[unit]
    ticks = -(-nanos // step) if round_up else nanos // step
    return pa.scalar(ticks, pa.int64()).cast(pa.timestamp(unit, data_type.tz)).as_py()


def _decimal_range(statistics: _Fields, data_type: pa.DataType) -> tuple[Any, Any]:
    decimals = _sub(statistics, 6, "decimal statistics")
    if decimals is None:
        return None, None
    texts = [_last_bytes(decimals, number, "decimal statistics") for number in (1, 2)]
    if texts[0] is None or texts[1] is None:
        return None, None
    context = decimal.Context(prec=200, traps=[decimal.InvalidOperation])
    quantum = decimal.Decimal(1).scaleb(-data_type.scale)
    limit = decimal.Decimal(10) ** (data_type.precision - data_type.scale)
    bounds = []
    for text, rounding in ((texts[0], decimal.ROUND_FLOOR), (texts[1], decimal.ROUND_CEILING)):
        value = context.create_decimal(text.decode("ascii"))
        if not value.is_finite():
            return None, None
        value = value.quantize(quantum, rounding=rounding, context=context)
        if abs(value) >= limit:
            return None, None
        bounds.append(value)
    return bounds[0], bounds[1]


# --- reading and decompressing the tail ---------------------------------------------------------

def _read(handle: SeekableFile, start: int, length: int) -> bytes:
    handle.seek(start)
    parts: list[bytes] = []
    remaining = length
    while remaining > 0:
        part = handle.read(remaining)
        if not part:
            raise OrcFooterUnreadable(f"the file ends before byte {start + length}: read "
                                      f"{length - remaining} of {length} bytes at offset {start}")
        parts.append(bytes(part))
        remaining -= len(part)
    return b"".join(parts)


def _decompress(data: bytes, compression: int, block: int) -> bytes:
    """The footer's bytes: a sequence of chunks, each with a 3-byte little-endian header
    ``length << 1 | is_original``."""
    if compression == 0:
        return data
    name = _COMPRESSIONS.get(compression, str(compression))
    if compression not in (1, 2, 4, 5):
        raise OrcFooterUnreadable(f"the footer is compressed with {name}, which cannot be decoded here")
    chunks: list[bytes] = []
    position = 0
    while position < len(data):
        if position + 3 > len(data):
            raise OrcFooterUnreadable(f"the footer ends inside a {name} chunk header")
        header = int.from_bytes(data[position:position + 3], "little")
        position += 3
        chunk = data[position:position + (header >> 1)]
        if len(chunk) != header >> 1:
            raise OrcFooterUnreadable(f"a {name} footer chunk of {header >> 1} bytes is cut off")
        position += len(chunk)
        chunks.append(chunk if header & 1 else _inflate(compression, name, chunk, block))
    return b"".join(chunks)


def _inflate(compression: int, name: str, chunk: bytes, block: int) -> bytes:
    try:
        if compression == 1:
            inflater = zlib.decompressobj(-15)  # ORC's ZLIB is raw deflate, without zlib header
            data = inflater.decompress(chunk, block + 1)
            if len(data) > block:
                raise OrcFooterUnreadable(f"a ZLIB footer chunk inflates beyond the {block}-byte block size")
            return data
        # pyarrow's codecs need the exact decompressed size
        if compression == 2:
            size, _ = _varint(chunk, 0, "SNAPPY chunk length")
            codec = "snappy"
        elif compression == 5:
            size = _zstd_content_size(chunk)
            codec = "zstd"
        else:
            size = _lz4_block_size(chunk)
            codec = "lz4_raw"
        if size > block:
            raise OrcFooterUnreadable(f"a {name} footer chunk claims {size} bytes, beyond the {block}-byte "
                                      "block size")
        data = pa.Codec(codec).decompress(chunk, decompressed_size=size, asbytes=True)
    except (zlib.error, pa.ArrowException, OSError, ValueError) as error:
        raise OrcFooterUnreadable(f"a {name} footer chunk does not decompress: {error}") from None
    if len(data) != size:
        raise OrcFooterUnreadable(f"a {name} footer chunk decompressed to {len(data)} bytes, not {size}")
    return bytes(data)


def _zstd_content_size(chunk: bytes) -> int:
    """Frame_Content_Size from a Zstandard frame header (RFC 8878, 3.1.1.1)."""
    if len(chunk) < 6 or chunk[:4] != b"\x28\xb5\x2f\xfd":
        raise OrcFooterUnreadable("a ZSTD footer chunk does not start with a Zstandard frame")
    descriptor = chunk[4]
    single_segment = descriptor >> 5 & 1
    size_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    if size_bytes == 0:
        raise OrcFooterUnreadable("a ZSTD footer chunk does not record its decompressed size")
    start = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    field = chunk[start:start + size_bytes]
    if len(field) != size_bytes:
        raise OrcFooterUnreadable("a ZSTD footer chunk's frame header is cut off")
    return int.from_bytes(field, "little") + (256 if size_bytes == 2 else 0)


def _lz4_block_size(chunk: bytes) -> int:
    """The decompressed size of an LZ4 block, which the block format does not record: the sum of
    its sequences' literal and match lengths."""
    size = position = 0
    while True:
        if position >= len(chunk):
            raise OrcFooterUnreadable("an LZ4 footer chunk ends inside a sequence")
        token = chunk[position]
        position += 1
        literals, position = _lz4_length(chunk, position, token >> 4)
        position += literals
        size += literals
        if position >= len(chunk):
            if position > len(chunk):
                raise OrcFooterUnreadable("an LZ4 footer chunk's literals run past its end")
            return size  # the last sequence has literals only
        position += 2  # match offset
        match, position = _lz4_length(chunk, position, token & 15)
        size += match + 4


def _lz4_length(chunk: bytes, position: int, length: int) -> tuple[int, int]:
    if length == 15:
        while True:
            if position >= len(chunk):
                raise OrcFooterUnreadable("an LZ4 footer chunk ends inside a length")
            extra = chunk[position]
            position += 1
            length += extra
            if extra != 255:
                break
    return length, position


# --- a minimal protobuf decoder ------------------------------------------------------------------

#: A decoded message: field number to its values in order (an int for varints, bytes otherwise).
_Fields = dict[int, list[int | bytes]]


def _varint(data: bytes, position: int, what: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise OrcFooterUnreadable(f"{what}: protobuf ends inside a varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
        if shift >= 70:
            raise OrcFooterUnreadable(f"{what}: protobuf varint longer than 10 bytes")


def _message(data: bytes, what: str) -> _Fields:
    fields: _Fields = {}
    position = 0
    while position < len(data):
        key, position = _varint(data, position, what)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, position = _varint(data, position, what)
        elif wire in (1, 2, 5):
            if wire == 2:
                length, position = _varint(data, position, what)
            else:
                length = 8 if wire == 1 else 4
            value = data[position:position + length]
            if len(value) != length:
                raise OrcFooterUnreadable(f"{what}: protobuf field {number} is cut off")
            position += length
        else:
            raise OrcFooterUnreadable(f"{what}: unexpected protobuf wire type {wire} (field {number})")
        if number == 0:
            raise OrcFooterUnreadable(f"{what}: protobuf field number 0")
        fields.setdefault(number, []).append(value)
    return fields


def _last(fields: _Fields, number: int) -> int | bytes | None:
    values = fields.get(number)
    return values[-1] if values else None  # a repeated scalar field: the last one wins


def _last_int(fields: _Fields, number: int, what: str) -> int | None:
    value = _last(fields, number)
    if isinstance(value, bytes):
        raise OrcFooterUnreadable(f"{what}: expected a varint, found {len(value)} bytes")
    return value


def _last_sint(fields: _Fields, number: int, what: str) -> int | None:
    value = _last_int(fields, number, what)
    return None if value is None else (value >> 1) ^ -(value & 1)  # zigzag


def _last_signed(fields: _Fields, number: int, what: str) -> int | None:
    value = _last_int(fields, number, what)
    return None if value is None else value - (1 << 64) if value >= 1 << 63 else value


def _last_double(fields: _Fields, number: int, what: str) -> float | None:
    value = _last(fields, number)
    if value is None:
        return None
    if not isinstance(value, bytes) or len(value) != 8:
        raise OrcFooterUnreadable(f"{what}: expected a 64-bit double")
    double: float = struct.unpack("<d", value)[0]
    return double


def _last_bytes(fields: _Fields, number: int, what: str) -> bytes | None:
    value = _last(fields, number)
    return None if value is None else _bytes(value, what)


def _bytes(value: int | bytes, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise OrcFooterUnreadable(f"{what}: expected bytes, found a varint")
    return value


def _text(value: bytes, what: str) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise OrcFooterUnreadable(f"{what}: not UTF-8: {value[:40]!r}") from None


def _sub(fields: _Fields, number: int, what: str) -> _Fields | None:
    """An embedded message; repeated occurrences merge, as protobuf parsers merge them."""
    values = fields.get(number)
    if not values:
        return None
    return _message(b"".join(_bytes(value, what) for value in values), what)


def _packed_ints(fields: _Fields, number: int, what: str) -> list[int]:
    """A repeated varint field, packed or not."""
    result: list[int] = []
    for value in fields.get(number, []):
        if isinstance(value, int):
            result.append(value)
            continue
        position = 0
        while position < len(value):
            item, position = _varint(value, position, what)
            result.append(item)
    return result


def _required(fields: _Fields, number: int, what: str) -> int:
    value = _last_int(fields, number, what)
    if value is None:
        raise OrcFooterUnreadable(f"{what} is missing")
    return value
