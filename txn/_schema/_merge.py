"""``schema_mode="merge"``: the changes that let a table take data of another schema.

New columns (and new struct fields) are added nullable, in the data's order, at the end of their
level; a column whose data type is a widening of the table's (``._widen``) is widened. Anything
else is left for the ordinary input check to accept (a value the table's type holds exactly) or
refuse: merge never narrows, retypes or drops.
"""

from __future__ import annotations

import pyarrow as pa

from ._changes import AddColumn, AlterColumn, Change
from ._widen import is_widening


def merge_schema(current: pa.Schema, data: pa.Schema) -> list[Change]:
    """The changes that make ``current`` take ``data`` (empty when it already does)."""
    changes: list[Change] = []
    _merge_level(list(current), list(data), "", changes)
    return changes


def _merge_level(have: list[pa.Field], given: list[pa.Field], prefix: str,
                 changes: list[Change]) -> None:
    by_name = {f.name: f for f in have}
    for f in given:
        name = prefix + f.name
        existing = by_name.get(f.name)
        if existing is None:
            changes.append(AddColumn(f.with_name(name).with_nullable(True)))
        elif pa.types.is_struct(existing.type) and pa.types.is_struct(f.type):
            _merge_level(list(existing.type), list(f.type), name + ".", changes)
        elif is_widening(existing.type, f.type):
            changes.append(AlterColumn(name, type=f.type))
