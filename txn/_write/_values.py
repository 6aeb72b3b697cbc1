"""The new values of an update or a merge's clause: column -> a constant or a
``pyarrow.compute.Expression``, checked before anything is read and worked out per row.

An expression is evaluated on the old rows, all of them before any is changed (as SQL's
UPDATE: ``{"a": b, "b": a}`` swaps), over the columns of a *scope*: the table's own columns
for ``update``, the ``"target.<col>"`` and ``"source.<col>"`` columns of the joined rows for a
merge. Its result is cast to the column's type safely: a value the cast would change (a float
truncated, an integer out of range) is refused, naming the column and both types.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from metatxn.timeline import InvalidOptionError, SchemaMismatchError

_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


def check_values(table: pa.Schema, keys: list[str], values: object, scope: pa.Schema, *,
                 operation: str = "update") -> dict[str, Any]:
    """``values`` checked against the table and the scope its expressions read, before any row
    is read: names, key columns, and each expression's type against its column's.

    Raises:
        InvalidOptionError: not a non-empty dict, an unknown or record-key column, an
            expression over a column the scope lacks.
        SchemaMismatchError: a value that does not fit its column's type.
    """
    if not isinstance(values, Mapping) or not values:
        raise InvalidOptionError(
            f"{operation}: values must be a non-empty dict of column name -> new value "
            f"(a constant or a pyarrow.compute.Expression), got {values!r}")
    for name, value in values.items():
        index = table.get_field_index(name) if isinstance(name, str) else -1
        if index < 0:
            raise InvalidOptionError(
                f"{operation} sets unknown column {name!r}; the table's columns are {table.names}")
        if name in keys:
            raise InvalidOptionError(
                f"{operation} cannot change record key column {name!r}\n"
                "Help: delete the row and upsert it under its new key")
        if isinstance(value, ds.Expression):
            _cast(name, table.field(index), _evaluate(name, value, scope.empty_table(), operation,
                                                      checking=True), operation)
    new_values(table, values, scope.empty_table(), operation=operation)
    return dict(values)


def new_values(table: pa.Schema, values: Mapping[str, Any], scope: pa.Table, *,
               operation: str = "update") -> dict[str, pa.Array]:
    """Column -> its new values, one per row of ``scope`` (the old rows), typed as the table's
    column. ``values`` was checked by ``check_values``."""
    arrays = {}
    for name, value in values.items():
        field = table.field(name)
        if isinstance(value, ds.Expression):
            arrays[name] = _cast(name, field, _evaluate(name, value, scope, operation), operation)
        else:
            arrays[name] = _constant(name, field, value, scope.num_rows, operation)
    return arrays


def _evaluate(name: str, expression: ds.Expression, scope: pa.Table, operation: str, *,
              checking: bool = False) -> pa.Array:
    """``expression`` on ``scope``'s rows. ``checking`` (no rows): an error is the expression's
    (InvalidOptionError); on rows, a value's (SchemaMismatchError: an overflow, a parse)."""
    try:
        found = ds.dataset(scope).to_table(columns={name: expression}).column(0)
    except _ARROW_ERRORS as exc:
        first = str(exc).strip().splitlines()[0]
        if not checking:
            raise SchemaMismatchError(
                f"{operation}: the value of column {name!r}, {expression}, cannot be computed "
                f"for every row: {first}") from None
        raise InvalidOptionError(
            f"{operation}: the value of column {name!r}, {expression}, does not apply to the "
            f"columns {scope.column_names}: {first}") from None
    return found.combine_chunks() if found.num_chunks != 1 else found.chunk(0)


def _cast(name: str, field: pa.Field, array: pa.Array, operation: str) -> pa.Array:
    try:
        typed = array.cast(field.type, safe=True)
    except _ARROW_ERRORS as exc:
        first = str(exc).strip().splitlines()[0]
        raise SchemaMismatchError(
            f"{operation}: the value of column {name!r} has type {array.type}, which does not fit "
            f"the column's type {field.type} without loss: {first}\n"
            f"Help: cast the expression yourself (e.g. pc.field(...).cast(pa.{field.type}()))"
        ) from None
    if not field.nullable and typed.null_count:
        raise SchemaMismatchError(
            f"{operation}: column {name!r} is not nullable, and its new value is null for "
            f"{typed.null_count} row(s)")
    return typed


def _constant(name: str, field: pa.Field, value: object, count: int, operation: str) -> pa.Array:
    if value is None and not field.nullable:
        raise SchemaMismatchError(f"column {name!r} is not nullable; {operation} cannot set it to None")
    try:
        scalar = value if isinstance(value, pa.Scalar) else pa.scalar(value, field.type)
        typed = scalar.cast(field.type)
        array = pa.array([typed.as_py()] * count, field.type)
    except (*_ARROW_ERRORS, OverflowError, TypeError, ValueError) as exc:
        raise SchemaMismatchError(
            f"{operation} value {value!r} for column {name!r} does not fit its type {field.type}: {exc}"
        ) from None
    lost = _lost_in_conversion(value, typed)
    if lost is not None:
        raise SchemaMismatchError(
            f"{operation} value {value!r} for column {name!r} does not fit its type {field.type} "
            f"without loss: it would be stored as {lost}\n"
            f"Help: give a value of type {field.type}, or round it yourself")
    return array


def _lost_in_conversion(value: object, typed: pa.Scalar) -> str | None:
    """How ``value`` would be stored as ``typed`` if the conversion changed it, else None.

    pyarrow converts Python values to a column type unsafely (``pa.scalar(2.7, pa.int32())`` is
    2, a datetime becomes its date), so the stored value is converted back to the value's own
    type and compared. Floating-point columns round by nature: a float stored in a float32
    column only has to stay finite.
    """
    if value is None or not typed.is_valid:
        return None
    source = value if isinstance(value, pa.Scalar) else _inferred(value)
    if source is None or source.type.equals(typed.type):
        return None
    if pa.types.is_floating(source.type) and pa.types.is_floating(typed.type):
        before, after = source.as_py(), typed.as_py()
        kept = not math.isfinite(before) or math.isfinite(after)
        return None if kept else repr(after)
    try:
        back = typed.cast(source.type, safe=False)
    except _ARROW_ERRORS:
        return None if typed.as_py() == source.as_py() else repr(typed.as_py())
    return None if back.equals(source) else repr(typed.as_py())


def _inferred(value: object) -> pa.Scalar | None:
    try:
        return pa.scalar(value)
    except (*_ARROW_ERRORS, OverflowError, TypeError, ValueError):
        return None
