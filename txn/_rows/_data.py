"""Turning what users pass to a write into record batches of exactly the table's schema.

Accepted inputs: ``pa.Table``, ``pa.RecordBatchReader`` (streamed, never fully materialised) and
``pandas.DataFrame`` (converted to Arrow as pandas' own types, then handled as Arrow input).
Column order may differ from the table's; names must match exactly, a column's values are taken
by the one rule of ``_conform.py`` (converted when the table's type holds them exactly), and a
non-nullable column must hold no nulls. Anything else raises :class:`SchemaMismatchError` naming
the column and both types, before or while streaming: a failure while streaming rolls the write
back, so nothing becomes visible either way.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from metatxn.timeline import InvalidOptionError, SchemaMismatchError

from ._conform import check_type, conform_column


def _check_schema(found: pa.Schema, expected: pa.Schema, fill: bool = False) -> None:
    names = found.names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaMismatchError(f"the data has columns {duplicates} more than once")
    missing = [f for f in expected if f.name not in names and not (fill and f.nullable)]
    if missing:
        described = ", ".join(f"{f.name!r} ({f.type})" for f in missing)
        raise SchemaMismatchError(f"the data lacks table column(s) {described}")
    extra = [n for n in names if expected.get_field_index(n) < 0]
    if extra:
        raise SchemaMismatchError(
            f"the data has column(s) {extra} that the table does not have; table columns: "
            f"{expected.names}"
        )
    for field in expected:
        if field.name in names:
            check_type(field.name, found.field(field.name).type, field.type)


def _conform(batch: pa.RecordBatch, expected: pa.Schema) -> pa.RecordBatch:
    names = batch.schema.names
    columns = [conform_column(batch.column(field.name), field) if field.name in names
               else pa.nulls(batch.num_rows, field.type) for field in expected]
    for field, column in zip(expected, columns, strict=True):
        if not field.nullable and column.null_count:
            raise SchemaMismatchError(
                f"column {field.name!r} is not nullable, but the data has "
                f"{column.null_count} null value(s) in it"
            )
    return pa.RecordBatch.from_arrays(columns, schema=expected)


def _from_pandas(frame: Any, expected: pa.Schema, fill: bool = False) -> pa.Table:
    """The DataFrame as Arrow of its own dtypes (int64 stays int64), for the rule Arrow input
    meets: converting against the table's schema instead would let pandas decide what fits
    (it parses strings into ints and takes naive times into zoned columns)."""
    columns = [str(c) for c in frame.columns]
    _check_names_only(columns, expected, fill)
    arrays = []
    for name, (_, column) in zip(columns, frame.items(), strict=True):
        try:
            arrays.append(pa.array(column, from_pandas=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise SchemaMismatchError(
                f"column {name!r}: the table has type {expected.field(name).type}, the DataFrame "
                f"has dtype {column.dtype}, whose values have no one Arrow type: {first}") from None
    return pa.Table.from_arrays(arrays, names=columns)


def _check_names_only(names: list[str], expected: pa.Schema, fill: bool = False) -> None:
    missing = [f.name for f in expected if f.name not in names and not (fill and f.nullable)]
    extra = [n for n in names if n not in expected.names]
    if missing or extra:
        raise SchemaMismatchError(
            f"the DataFrame's columns do not match the table: missing {missing}, unexpected {extra}"
        )


def batches(data: object, expected: pa.Schema, *, fill_missing: bool = False) -> Iterator[pa.RecordBatch]:
    """Yield the non-empty batches of the input with schema ``expected`` (the table's).
    ``fill_missing`` (``schema_mode="merge"``): a nullable column the data lacks is null in
    every row rather than refused, as Delta Lake's schema merge fills it.

    The schema is checked eagerly, before the first batch is produced, so a mismatch raises
    before the caller starts writing. In-memory input (``pa.Table``, ``DataFrame``) is conformed
    whole here too, so a null in a non-nullable column also raises before anything is written;
    a ``RecordBatchReader`` is conformed batch by batch as it is read.
    """
    if isinstance(data, pa.Table):
        _check_schema(data.schema, expected, fill_missing)
        return iter([_conform(b, expected) for b in data.to_batches() if b.num_rows])
    if isinstance(data, pa.RecordBatchReader):
        _check_schema(data.schema, expected, fill_missing)
        return (_conform(batch, expected) for batch in data if batch.num_rows)
    if type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame":
        table = _from_pandas(data, expected, fill_missing)
        _check_schema(table.schema, expected, fill_missing)
        return iter([_conform(b, expected) for b in table.to_batches() if b.num_rows])
    raise InvalidOptionError(
        f"cannot write a {type(data).__name__}; expected a pyarrow.Table, a "
        "pyarrow.RecordBatchReader or a pandas.DataFrame"
    )


def first_and_rest(source: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """``source`` unchanged, or None when it yields no batch (reads its first batch to know)."""
    first = next(source, None)
    return None if first is None else itertools.chain([first], source)
