"""Reading a file written under one schema version as another, by column id.

A data file is read by the names of the version it was written with (``files.schema_id``), and
each column of the wanted schema is found by its id: renamed columns read their old name, a
column whose id the file's version lacks (added later, or dropped and re-added) reads as nulls,
a widened column is cast exactly, and struct fields follow the same rules one level down. The
projection is pushed into Arrow's scan, so it costs nothing measurable (design/schema-evolution.md,
spike fact 3).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import field_id, nested_fields


def _by_id(fields: Sequence[pa.Field]) -> dict[int, pa.Field]:
    return {i: f for f in fields if (i := field_id(f)) is not None}


def _null(data_type: pa.DataType) -> pc.Expression:
    return pc.scalar(pa.scalar(None, data_type))


def _same(source: pa.Field, target: pa.Field) -> bool:
    """Whether ``source`` reads as ``target`` unchanged: the same type and, at every level
    below, the same ids (type equality ignores field metadata, so a struct field dropped and
    re-added under its name would otherwise pass for the old one)."""
    if source.type != target.type:
        return False
    inner, wanted = nested_fields(source.type), nested_fields(target.type)
    return all(field_id(a) == field_id(b) and _same(a, b) for a, b in zip(inner, wanted, strict=True))


def _project_field(source: pa.Field, ref: pc.Expression, target: pa.Field) -> pc.Expression:
    if _same(source, target):
        return ref
    if pa.types.is_struct(source.type) and pa.types.is_struct(target.type):
        children = _by_id(list(source.type))
        parts = []
        for child in target.type:
            found = children.get(field_id(child) or -1)
            parts.append(_null(child.type) if found is None else
                         _project_field(found, pc.Expression._call("struct_field", [ref],
                                        pc.StructFieldOptions([found.name])), child))
        built = pc.Expression._call("make_struct", parts,
                                    pc.MakeStructOptions(
                                        [c.name for c in target.type],
                                        field_nullability=[c.nullable for c in target.type],
                                        field_metadata=[c.metadata for c in target.type]))
        # make_struct never yields a null struct: keep the rows whose struct was null null.
        return pc.Expression._call("if_else", [ref.is_valid(), built, _null(target.type)])
    return ref.cast(target.type)


def version_projection(written: pa.Schema, target: pa.Schema) -> dict[str, pc.Expression]:
    """``target``'s columns as expressions over a file written with ``written`` (both with ids).

    Identity where the two agree; see the module docstring for the rest.
    """
    columns = _by_id(list(written))
    projection = {}
    for f in target:
        found = columns.get(field_id(f) or -1)
        projection[f.name] = (_null(f.type) if found is None
                              else _project_field(found, pc.field(found.name), f))
    return projection


def same_columns(written: pa.Schema, target: pa.Schema) -> bool:
    """Whether a file of ``written`` reads as ``target`` with no projection at all."""
    return len(written) == len(target) and all(
        a.name == b.name and field_id(a) == field_id(b) and _same(a, b)
        for a, b in zip(written, target, strict=True))


def read_columns(written: pa.Schema, target: pa.Schema, wanted: Sequence[str]) -> list[str]:
    """The columns of a ``written`` file needed to produce ``wanted`` columns of ``target``."""
    columns = _by_id(list(written))
    names = []
    for name in wanted:
        found = columns.get(field_id(target.field(name)) or -1)
        if found is not None:
            names.append(found.name)
    return names
