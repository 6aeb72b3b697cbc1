"""``schema_mode``: what a write conforms its rows to, and with ``"merge"`` the version it
creates in its own instant (design/schema-evolution.md, section 4).

Without a mode a write conforms its rows to the handle's current schema and refuses any other
column with today's message. With ``"merge"`` the data's schema is merged into the latest
version first (``txn._schema.merge_schema``: new nullable columns at the end, new struct
fields, exact widenings), and the rows are conformed to the merged schema.

Arrow and pandas input differ only in what a type says. An Arrow column's type is the user's
declaration: an int64 column widens an int32 table column. A pandas dtype is not (int64 is
pandas' default for any integer): its column widens the table's type only when some value does
not fit that type exactly; otherwise its values are converted as any write converts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from metatxn.timeline import InvalidOptionError, SchemaMismatchError

from .._commit import WriteSchema, current_schema, evolved_schema
from .._context import TableContext
from .._rows import conforms
from .._schema import AlterColumn, Change, merge_schema

#: The accepted values of ``schema_mode``.
SCHEMA_MODES = (None, "merge")


def merging(schema_mode: object, operation: str) -> bool:
    """Whether ``schema_mode`` asks for a merge; ``InvalidOptionError`` for any other value."""
    if schema_mode is None:
        return False
    if schema_mode == "merge":
        return True
    raise InvalidOptionError(f"{operation}: schema_mode must be one of {list(SCHEMA_MODES)}, got "
                             f"{schema_mode!r}; nothing was written")


def is_pandas(data: object) -> bool:
    return type(data).__module__.startswith("pandas") and type(data).__name__ == "DataFrame"


def arrow_input(data: Any) -> Any:
    """``data`` as Arrow: a DataFrame becomes a table of its own dtypes (as every write takes
    it), an Arrow table or reader is returned as is."""
    if not is_pandas(data):
        return data
    columns = [str(c) for c in data.columns]
    arrays = []
    for name, (_, column) in zip(columns, data.items(), strict=True):
        try:
            arrays.append(pa.array(column, from_pandas=True))
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            first = str(exc).strip().splitlines()[0]
            raise SchemaMismatchError(f"column {name!r}: the DataFrame has dtype {column.dtype}, "
                                      f"whose values have no one Arrow type: {first}") from None
    return pa.Table.from_arrays(arrays, names=columns)


def write_schema(context: TableContext, data: Any = None, *, declared: bool = True) -> WriteSchema:
    """The schema a write conforms its rows to: the handle's current one (``data`` None), or
    the latest version merged with ``data``'s schema (an Arrow table or reader, or a schema).
    ``declared``: the data's types are the user's (Arrow); False for a DataFrame's dtypes,
    which widen a column only when a value needs it.

    Raises:
        SchemaEvolutionError: a merge would change a record-key or partition column.
    """
    if data is None:
        return current_schema(context)
    version = context.refresh()
    current = context.schema_of(version.schema_id)
    found = data if isinstance(data, pa.Schema) else data.schema
    key = version.record_key
    fixed = [*version.partition_by, *([key] if isinstance(key, str) else key or [])]
    changes = merge_schema(current, found, fixed=fixed)
    if not declared and isinstance(data, pa.Table):
        changes = [c for c in changes if not _fits(c, current, data)]
    return evolved_schema(version, changes)


def _fits(change: Change, current: pa.Schema, data: pa.Table) -> bool:
    """Whether a widening ``change`` asked by a DataFrame's dtype is needless: every value of
    the column fits the table's type exactly (``AddColumn`` never is)."""
    if not isinstance(change, AlterColumn) or change.type is None:
        return False
    path = _split(current, change.name)
    field: pa.Field = current.field(path[0])
    values: Any = data.column(path[0]).combine_chunks()
    for name in path[1:]:
        field = field.type.field(name)
        values = values.field(name)
    return conforms(values, field)


def _split(schema: pa.Schema, name: str) -> Sequence[str]:
    return [name] if schema.get_field_index(name) >= 0 else name.split(".")
