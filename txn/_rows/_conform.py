"""The one rule for a column of input whose type is not the table's: which values it takes.

Every input kind (``pa.Table``, ``RecordBatchReader``, the batches of ``txn.write_files`` and of
streams, ``pandas.DataFrame`` after pandas' own Arrow conversion) comes through here, so the same
values get the same answer whatever carried them. The rule: a value conversion between types of
one kind (integers and floats, decimals, strings, binaries, naive or zoned timestamps, dates,
times, durations, and lists, maps and structs of those) is made when the table's type holds
every value exactly, and refused naming the first value it does not; a change of kind (string to
int, bool to int, naive to zoned time) is no value conversion and is refused whatever the values.
design/properties.md has the table of cases.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metatxn.timeline import SchemaMismatchError

_T = pa.types


def _kind(data_type: pa.DataType) -> str | None:
    """The kind of a leaf type, within which conversions are value conversions."""
    if _T.is_integer(data_type) or _T.is_floating(data_type):
        return "number"
    if _T.is_decimal(data_type):
        return "decimal"
    if _T.is_string(data_type) or _T.is_large_string(data_type) or _T.is_string_view(data_type):
        return "string"
    if _T.is_binary(data_type) or _T.is_large_binary(data_type) or _T.is_binary_view(data_type):
        return "binary"
    if _T.is_boolean(data_type):
        return "bool"
    if _T.is_timestamp(data_type):  # a zone changes what the value means: naive and zoned differ
        return "zoned time" if data_type.tz is not None else "time of day"
    if _T.is_date(data_type):
        return "time of day"  # a date is its midnight: into a naive timestamp, and back when whole
    if _T.is_time(data_type):
        return "time"
    if _T.is_duration(data_type):
        return "duration"
    return None


def _is_list(data_type: pa.DataType) -> bool:
    return bool(_T.is_list(data_type) or _T.is_large_list(data_type))


def convertible(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether ``found`` values may become ``wanted`` ones when each fits (a value conversion)."""
    if found.equals(wanted) or _T.is_null(found):
        return True
    if _T.is_dictionary(found):
        return convertible(found.value_type, wanted)
    if _T.is_dictionary(wanted):
        return convertible(found, wanted.value_type)
    if _is_list(found) and _is_list(wanted):
        return convertible(found.value_type, wanted.value_type)
    if _T.is_map(found) and _T.is_map(wanted):
        return convertible(found.key_type, wanted.key_type) and convertible(found.item_type,
                                                                           wanted.item_type)
    if _T.is_struct(found) and _T.is_struct(wanted):
        # Arrow casts structs by name and drops fields the target lacks: the names must agree.
        names = {found.field(i).name for i in range(found.num_fields)}
        if names != {wanted.field(i).name for i in range(wanted.num_fields)}:
            return False
        return all(convertible(found.field(wanted.field(i).name).type, wanted.field(i).type)
                   for i in range(wanted.num_fields))
    kind = _kind(found)
    return kind is not None and kind == _kind(wanted)


def _checked_by_round_trip(found: pa.DataType, wanted: pa.DataType) -> bool:
    """Conversions Arrow's safe cast makes without checking exactness (a float narrowed, a
    timestamp to a date) or refuses when exact (an integer beyond 2**53 into float64)."""
    if _T.is_floating(wanted):
        return bool(_T.is_integer(found)
                    or (_T.is_floating(found) and found.bit_width > wanted.bit_width))
    return bool(_T.is_timestamp(found) and _T.is_date(wanted))


def _mismatch(name: str, wanted: pa.DataType, found: pa.DataType) -> SchemaMismatchError:
    return SchemaMismatchError(f"column {name!r}: the table has type {wanted}, the data has {found}")


def check_type(name: str, found: pa.DataType, wanted: pa.DataType) -> None:
    """Raise :class:`SchemaMismatchError` unless ``found`` converts to ``wanted`` value by value
    (checked once per input, before any value is read)."""
    if not convertible(found, wanted):
        raise _mismatch(name, wanted, found)


def conform_column(values: Any, field: pa.Field) -> Any:
    """``values`` (an Array or ChunkedArray) as ``field``'s type, or :class:`SchemaMismatchError`
    naming the column, both types and the first value the field's type does not hold exactly."""
    wanted, found = field.type, values.type
    if found.equals(wanted):
        return values
    check_type(field.name, found, wanted)
    if _T.is_dictionary(found) and not _T.is_dictionary(wanted):
        values = values.cast(found.value_type)  # decoded: the rule applies to its values
        if values.type.equals(wanted):
            return values
    if _checked_by_round_trip(values.type, wanted):
        converted = values.cast(wanted, safe=False)
        _refuse_lost(values, converted.cast(values.type, safe=False), field, found)
        return converted
    try:
        return values.cast(wanted, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise _not_held(values, field, found, exc) from None


def conforms(values: Any, field: pa.Field) -> bool:
    """Whether :func:`conform_column` takes ``values`` as ``field``'s type (no value lost)."""
    try:
        conform_column(values, field)
    except SchemaMismatchError:
        return False
    return True


def _refuse_lost(values: Any, back: Any, field: pa.Field, found: pa.DataType) -> None:
    index = _first_difference(values, back)
    if index is not None:
        raise _value_error(field, found, values[index].as_py())


def _not_held(values: Any, field: pa.Field, found: pa.DataType, error: Exception) -> SchemaMismatchError:
    """The refusal of a safe cast that failed, naming the first value lost (error path only)."""
    try:
        back = values.cast(field.type, safe=False).cast(values.type, safe=False)
        index = _first_difference(values, back)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        index = None
    if index is None:  # nothing to point at: Arrow's own words name it
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return SchemaMismatchError(f"column {field.name!r}: the table has type {field.type}, the "
                                   f"data has {found}, whose values it does not hold: {first}")
    return _value_error(field, found, values[index].as_py())


def _value_error(field: pa.Field, found: pa.DataType, value: object) -> SchemaMismatchError:
    return SchemaMismatchError(
        f"column {field.name!r}: the table has type {field.type}, the data has {found}, and the "
        f"value {value!r} does not fit it exactly\nHelp: cast the data to {field.type} yourself "
        "if rounding or truncating it is what you mean")


def _first_difference(values: Any, back: Any) -> int | None:
    """The first row whose value did not survive the round trip (None when all did)."""
    if _T.is_nested(values.type):
        for index in range(len(values)):
            if values[index] != back[index]:
                return index
        return None
    same = pc.equal(values, back)
    if _T.is_floating(values.type):  # NaN is not equal to itself, but it survived
        same = pc.or_kleene(same, pc.and_(pc.is_nan(values), pc.is_nan(back)))
    lost = pc.invert(pc.fill_null(same, True))
    index = pc.index(lost, True).as_py()
    return None if index < 0 else index
