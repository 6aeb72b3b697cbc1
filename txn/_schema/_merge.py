"""``schema_mode="merge"``: the changes that let a table take data of another schema.

New columns (and new struct fields) are added nullable, in the data's order, at the end of their
level; a column whose data type is a widening of the table's (``._widen``) is widened, but for
record-key and partition columns, whose type never changes. Anything else is left for the
ordinary input check to accept (a value the table's type holds exactly) or refuse: merge never
narrows, retypes or drops. A new column of Arrow's ``null`` type (every value None, so no type
is known) is refused: the table could never give it one.
"""

from __future__ import annotations

from collections.abc import Collection

import pyarrow as pa

from metatxn.timeline import SchemaEvolutionError

from ._changes import AddColumn, AlterColumn, Change
from ._widen import is_widening


def merge_schema(current: pa.Schema, data: pa.Schema, *, fixed: Collection[str] = ()) -> list[Change]:
    """The changes that make ``current`` take ``data`` (empty when it already does).
    ``fixed``: top-level columns whose type a merge leaves alone (record key, partitions).

    Raises:
        SchemaEvolutionError: a new column of type ``null``.
    """
    changes: list[Change] = []
    _merge_level(list(current), list(data), "", changes, set(fixed))
    return changes


def _merge_level(have: list[pa.Field], given: list[pa.Field], prefix: str,
                 changes: list[Change], fixed: set[str]) -> None:
    by_name = {f.name: f for f in have}
    for f in given:
        name = prefix + f.name
        existing = by_name.get(f.name)
        if existing is None:
            if pa.types.is_null(f.type):
                raise SchemaEvolutionError(
                    f"column {name!r} is new and holds only nulls, so it has no type (Arrow's "
                    "null); give it the type it should have (cast the data, or add_columns first)")
            changes.append(AddColumn(f.with_name(name).with_nullable(True)))
        elif pa.types.is_struct(existing.type) and pa.types.is_struct(f.type):
            _merge_level(list(existing.type), list(f.type), name + ".", changes, set())
        elif is_widening(existing.type, f.type) and name not in fixed:
            changes.append(AlterColumn(name, type=f.type))
