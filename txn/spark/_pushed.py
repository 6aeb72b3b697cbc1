"""The filters Spark pushes to the ``metatxn`` data source (``DataSourceReader.pushFilters``) as one
pyarrow expression, meaning exactly what Spark means by them, or not at all.

Spark hands over the conjuncts of a query's ``WHERE`` that compare one top-level column with a
literal (``pyspark.sql.datasource``'s ``EqualTo``, ``In``, ``IsNull``, ``StringStartsWith``...,
a leaf possibly under one ``Not``). A row is kept when every conjunct is true; a conjunct that
is null drops the row just as a false one does, so a leaf translates to any expression that is
true exactly where Spark's is, and ``Not(leaf)`` to one that is true exactly where Spark's leaf
is false. Where Spark and Arrow differ that is spelled out:

* NaN: Spark orders NaN above every number and makes ``NaN = NaN`` true; Arrow's comparisons of
  NaN are false. ``x > v`` and ``x >= v`` on a floating column add ``or is_nan(x)`` (which file
  and row-group pruning cannot read, so they prune nothing there); a NaN literal is not
  translated.
* ``IN`` with a null among its values is never false in Spark: not translated. Arrow's
  ``is_in`` of a null is false where Spark's is null, so ``NOT IN`` also asks ``is_valid``.
* ``<=>`` (``EqualNullSafe``) is false, not null, for a null column value.

A literal is converted to the column's own Arrow type without loss, or the filter is not
translated (a decimal with more scale than the column's, a timestamp finer than its unit, an
integer out of range). Nested column paths, columns the read schema types otherwise than the
table (a user-given ``.schema(...)``) and filters of other kinds are not translated either.
Untranslated filters go back to Spark, which evaluates them on the rows; translated ones are
applied exactly on the rows by the reader (:mod:`._source`), so Spark need not.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

_COMPARISONS = {EqualTo: "__eq__", GreaterThan: "__gt__", GreaterThanOrEqual: "__ge__",
                LessThan: "__lt__", LessThanOrEqual: "__le__"}
_STRINGS = {StringStartsWith: pc.starts_with, StringEndsWith: pc.ends_with,
            StringContains: pc.match_substring}


class _Untranslated(Exception):
    """A filter this module does not translate exactly."""


def translate(filters: Sequence[Filter], schema: pa.Schema,
              same_type: Mapping[str, bool]) -> tuple[ds.Expression | None, list[Filter]]:
    """The conjunction of the ``filters`` translated over the table's ``schema``, and those not
    translated (the very objects, for ``pushFilters`` to return). ``same_type``: per column,
    whether the read schema types it as the table does (only those are translated)."""
    translated: list[ds.Expression] = []
    rest: list[Filter] = []
    for pushed in filters:
        try:
            translated.append(_filter(pushed, schema, same_type))
        except _Untranslated:
            rest.append(pushed)
    expression = None
    for part in translated:
        expression = part if expression is None else expression & part
    return expression, rest


def _filter(pushed: Filter, schema: pa.Schema, same_type: Mapping[str, bool]) -> ds.Expression:
    if isinstance(pushed, Not):
        return _negated(pushed.child, schema, same_type)
    column, kind = _column(pushed, schema, same_type)
    if isinstance(pushed, IsNull):
        return column.is_null()
    if isinstance(pushed, IsNotNull):
        return column.is_valid()
    if isinstance(pushed, EqualNullSafe):
        if pushed.value is None:
            return column.is_null()
        return _compare(column, kind, "__eq__", pushed.value) & column.is_valid()
    if isinstance(pushed, In):
        values = list(pushed.value)
        if not values or any(v is None or _is_nan(v) for v in values):
            raise _Untranslated
        return column.isin(pa.array([_literal(v, kind).as_py() for v in values], kind))
    # Every comparison and string filter has a ``value``; mypy cannot see it through the maps.
    value = getattr(pushed, "value", None)
    for cls, method in _COMPARISONS.items():
        if isinstance(pushed, cls):
            return _compare(column, kind, method, value)
    for cls, function in _STRINGS.items():
        if isinstance(pushed, cls):
            if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)) \
                    or not isinstance(value, str):
                raise _Untranslated
            return function(column, value)
    raise _Untranslated


def _negated(child: Filter, schema: pa.Schema, same_type: Mapping[str, bool]) -> ds.Expression:
    """True exactly where Spark's ``child`` is false."""
    if isinstance(child, In):
        column, _ = _column(child, schema, same_type)
        return ~_filter(child, schema, same_type) & column.is_valid()
    if isinstance(child, (IsNull, IsNotNull, EqualNullSafe, *_COMPARISONS, *_STRINGS)):
        # Arrow's leaf is null exactly where Spark's is (a null column value); its negation
        # is then null too, and drops the row as Spark's does.
        return ~_filter(child, schema, same_type)
    raise _Untranslated


def _column(pushed: Any, schema: pa.Schema,
            same_type: Mapping[str, bool]) -> tuple[ds.Expression, pa.DataType]:
    path = pushed.attribute
    if len(path) != 1 or not same_type.get(path[0], False):
        raise _Untranslated
    index = schema.get_field_index(path[0])
    if index < 0:
        raise _Untranslated
    kind = schema.field(index).type
    if pa.types.is_nested(kind) or pa.types.is_dictionary(kind):
        raise _Untranslated
    return pc.field(path[0]), kind


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _literal(value: object, kind: pa.DataType) -> pa.Scalar:
    """``value`` as a scalar of ``kind``, exactly, or :class:`_Untranslated`."""
    if value is None or _is_nan(value) or isinstance(value, (list, tuple, dict)):
        raise _Untranslated
    if isinstance(value, bool) != pa.types.is_boolean(kind):
        raise _Untranslated
    try:
        if pa.types.is_timestamp(kind):
            # Spark's microseconds: a coarser column takes the value only where it is exact.
            scalar = pa.scalar(value, pa.timestamp("us", kind.tz))
            return scalar.cast(kind, safe=True)
        if pa.types.is_floating(kind) and isinstance(value, float):
            scalar = pa.scalar(value, kind)
            if scalar.as_py() != value:
                raise _Untranslated
            return scalar
        scalar = pa.scalar(value, kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError,
            ValueError, OverflowError):
        raise _Untranslated from None
    if scalar.as_py() != value and not pa.types.is_timestamp(kind):
        raise _Untranslated
    return scalar


def _compare(column: ds.Expression, kind: pa.DataType, method: str, value: object) -> ds.Expression:
    literal = _literal(value, kind)
    result: ds.Expression = getattr(column, method)(literal)
    if method in ("__gt__", "__ge__") and pa.types.is_floating(kind):
        result = result | pc.is_nan(column)  # NaN is above every number in Spark
    return result


def columns_typed_alike(table: Iterable[Any], read: Iterable[Any]) -> dict[str, bool]:
    """Per column of the read schema (a Spark ``StructType``), whether the table's Spark schema
    gives it the same type."""
    types = {field.name: field.dataType for field in table}
    return {field.name: types.get(field.name) == field.dataType for field in read}
