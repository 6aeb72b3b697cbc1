"""Turning what users pass to a write into record batches of exactly the table's schema.

Accepted inputs: ``pa.Table``, ``pa.RecordBatchReader`` (streamed, never fully materialised) and
``pandas.DataFrame``. Column order may differ from the table's; names and types must match
exactly, and a non-nullable column must hold no nulls. Anything else raises
:class:`SchemaMismatchError` naming the column and both types, before or while streaming: a
failure while streaming rolls the write back, so nothing becomes visible either way.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from timeline import InvalidOptionError, SchemaMismatchError


def _check_schema(found: pa.Schema, expected: pa.Schema) -> None:
    names = found.names
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise SchemaMismatchError(f"the data has columns {duplicates} more than once")
    missing = [f for f in expected if f.name not in names]
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
        given = found.field(field.name).type
        if not given.equals(field.type):
            raise SchemaMismatchError(
                f"column {field.name!r}: the table has type {field.type}, the data has {given}"
            )


def _conform(batch: pa.RecordBatch, expected: pa.Schema) -> pa.RecordBatch:
    ordered = batch.select(expected.names) if batch.schema.names != expected.names else batch
    for index, field in enumerate(expected):
        if not field.nullable and ordered.column(index).null_count:
            raise SchemaMismatchError(
                f"column {field.name!r} is not nullable, but the data has "
                f"{ordered.column(index).null_count} null value(s) in it"
            )
    return pa.RecordBatch.from_arrays(ordered.columns, schema=expected)


def _from_pandas(frame: Any, expected: pa.Schema) -> pa.Table:
    columns = [str(c) for c in frame.columns]
    _check_names_only(columns, expected)
    try:
        return pa.Table.from_pandas(frame, schema=expected, preserve_index=False)
    except (ValueError, TypeError) as exc:  # Arrow errors, and a plain ValueError for nulls
        raise SchemaMismatchError(_explain_pandas(frame, expected, exc)) from None


def _explain_pandas(frame: Any, expected: pa.Schema, error: Exception) -> str:
    """Name the first column that does not convert, with both types."""
    for field in expected:
        column = frame[field.name]
        try:
            values = pa.array(column, type=field.type, from_pandas=True)
        except (ValueError, TypeError) as exc:
            return (f"column {field.name!r}: the table has type {field.type}, the DataFrame has "
                    f"dtype {column.dtype}, which does not convert: {exc}")
        if not field.nullable and values.null_count:
            return (f"column {field.name!r} is not nullable, but the data has "
                    f"{values.null_count} null value(s) in it")
    return f"the DataFrame does not convert to the table schema: {error}"


def _check_names_only(names: list[str], expected: pa.Schema) -> None:
    missing = [n for n in expected.names if n not in names]
    extra = [n for n in names if n not in expected.names]
    if missing or extra:
        raise SchemaMismatchError(
            f"the DataFrame's columns do not match the table: missing {missing}, unexpected {extra}"
        )


def batches(data: object, expected: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Yield the non-empty batches of the input with schema ``expected`` (the table's).

    The schema is checked eagerly, before the first batch is produced, so a mismatch raises
    before the caller starts writing. In-memory input (``pa.Table``, ``DataFrame``) is conformed
    whole here too, so a null in a non-nullable column also raises before anything is written;
    a ``RecordBatchReader`` is conformed batch by batch as it is read.
    """
    if isinstance(data, pa.Table):
        _check_schema(data.schema, expected)
        return iter([_conform(b, expected) for b in data.to_batches() if b.num_rows])
    if isinstance(data, pa.RecordBatchReader):
        _check_schema(data.schema, expected)
        return (_conform(batch, expected) for batch in data if batch.num_rows)
    if type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame":
        table = _from_pandas(data, expected)
        return iter([_conform(b, expected) for b in table.to_batches() if b.num_rows])
    raise InvalidOptionError(
        f"cannot write a {type(data).__name__}; expected a pyarrow.Table, a "
        "pyarrow.RecordBatchReader or a pandas.DataFrame"
    )


def first_and_rest(source: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """``source`` unchanged, or None when it yields no batch (reads its first batch to know)."""
    first = next(source, None)
    return None if first is None else itertools.chain([first], source)
