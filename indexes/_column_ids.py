"""Stable column ids (Iceberg's field ids), carried in Arrow field metadata as ``PARQUET:field_id``.

pyarrow writes that metadata into Parquet's ``field_id`` and reads it back, so one key serves the
table's schema, its data files and other engines. Ids are positive, unique in a table for all time
(never reused: a column dropped and added again gets a new one), and ``assign_ids`` is a pure
function of the schema, so version 0 of a table created before ids existed gets the same ids in
every process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import pyarrow as pa

FIELD_ID: Final = b"PARQUET:field_id"


def field_id(field: pa.Field) -> int | None:
    """``field``'s column id, None if it carries none."""
    if field.metadata and FIELD_ID in field.metadata:
        return int(field.metadata[FIELD_ID])
    return None


def nested_fields(data_type: pa.DataType) -> list[pa.Field]:
    """The fields nested in a struct, list or map type (none for any other): the ones that
    get ids of their own."""
    if pa.types.is_struct(data_type):
        return [data_type.field(i) for i in range(data_type.num_fields)]
    if pa.types.is_map(data_type):
        return [data_type.key_field, data_type.item_field]
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type) \
            or pa.types.is_fixed_size_list(data_type):
        return [data_type.value_field]
    return []


def _with_children(data_type: pa.DataType, children: list[pa.Field]) -> pa.DataType:
    if pa.types.is_struct(data_type):
        return pa.struct(children)
    if pa.types.is_map(data_type):
        return pa.map_(children[0], children[1], keys_sorted=data_type.keys_sorted)
    if pa.types.is_large_list(data_type):
        return pa.large_list(children[0])
    if pa.types.is_fixed_size_list(data_type):
        return pa.list_(children[0], data_type.list_size)
    if pa.types.is_list(data_type):
        return pa.list_(children[0])
    return data_type


def _walk(fields: list[pa.Field]) -> Iterator[pa.Field]:
    """Every field, breadth-first: ``fields`` in order, then their children level by level."""
    level = list(fields)
    while level:
        yield from level
        level = [child for field in level for child in nested_fields(field.type)]


def last_column_id(schema: pa.Schema) -> int:
    """The largest column id anywhere in ``schema`` (0 if none)."""
    return max((i for f in _walk(list(schema)) if (i := field_id(f)) is not None), default=0)


def ids_by_name(schema: pa.Schema) -> dict[str, int]:
    """Top-level column name -> id, for the columns that carry one."""
    return {f.name: i for f in schema if (i := field_id(f)) is not None}


def assign_ids(schema: pa.Schema, *, start: int | None = None) -> pa.Schema:
    """``schema`` with an id on every field, nested struct children, list elements and map
    keys/values included; fields that carry one keep it.

    New ids are numbered from ``start`` (default: the largest id present plus one) in Iceberg's
    order: top-level fields first in schema order, then children level by level.
    """
    fields = list(schema)
    next_id = start if start is not None else last_column_id(schema) + 1
    assigned: dict[tuple[int, ...], int] = {}
    # Number breadth-first by position path, then rebuild depth-first with the numbers.
    level: list[tuple[tuple[int, ...], pa.Field]] = [((i,), f) for i, f in enumerate(fields)]
    while level:
        for path, field in level:
            if field_id(field) is None:
                assigned[path] = next_id
                next_id += 1
        level = [((*path, j), child) for path, field in level
                 for j, child in enumerate(nested_fields(field.type))]
    if not assigned:
        return schema

    def rebuild(field: pa.Field, path: tuple[int, ...]) -> pa.Field:
        children = nested_fields(field.type)
        if children:
            field = field.with_type(_with_children(
                field.type, [rebuild(c, (*path, j)) for j, c in enumerate(children)]))
        if path in assigned:
            field = field.with_metadata({**(field.metadata or {}),
                                         FIELD_ID: str(assigned[path]).encode()})
        return field

    return pa.schema([rebuild(f, (i,)) for i, f in enumerate(fields)], metadata=schema.metadata)
