"""Schema and property changes, applied to a table's shape one at a time.

Every change is checked against the shape it applies to, so a group of changes (one commit) is
checked in order: ``add a, rename a -> b`` works, ``rename a -> b, drop a`` names the missing
column. Columns keep their ids through every change (a rename keeps it, a widening keeps it) and
an added column gets a new one above every id the table ever had, so a dropped column re-added
under its old name never reads the old values.

Names may be dotted paths into structs (``addr.city``); a top-level column whose name itself
holds a dot is matched first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pyarrow as pa

from metatxn.indexes import FIELD_ID, assign_ids, last_column_id
from metatxn.timeline import InvalidOptionError, SchemaEvolutionError

from ._widen import is_widening, widening_refusal


@dataclass(frozen=True)
class Shape:
    """What a table version is, as the changes see it: its schema (with ids) and layout."""

    schema: pa.Schema
    partition_by: tuple[str, ...] = ()
    #: The record key as the user gave it: one name, a list, or None.
    record_key: str | tuple[str, ...] | None = None
    sort_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    last_column_id: int = 0

    @property
    def key_columns(self) -> tuple[str, ...]:
        if self.record_key is None:
            return ()
        return (self.record_key,) if isinstance(self.record_key, str) else tuple(self.record_key)


# -- paths ------------------------------------------------------------------------------------

def _path(schema: pa.Schema, name: str) -> list[str]:
    """``name`` as a path of field names: a top-level column of that exact name, else its dotted
    parts (an unknown path is returned as is; the caller says what is missing)."""
    if not isinstance(name, str) or not name:
        raise InvalidOptionError(f"a column name must be a non-empty string, got {name!r}")
    if schema.get_field_index(name) >= 0 or "." not in name:
        return [name]
    return name.split(".")


def _find(fields: Sequence[pa.Field], path: Sequence[str]) -> pa.Field | None:
    for f in fields:
        if f.name == path[0]:
            if len(path) == 1:
                return f
            return _find(list(f.type), path[1:]) if pa.types.is_struct(f.type) else None
    return None


def _column(shape: Shape, name: str) -> tuple[list[str], pa.Field]:
    path = _path(shape.schema, name)
    found = _find(list(shape.schema), path)
    if found is None:
        raise SchemaEvolutionError(
            f"column {name!r} does not exist; the table's columns: {shape.schema.names}")
    return path, found


def _edit(fields: Sequence[pa.Field], parent: Sequence[str],
          edit: Callable[[list[pa.Field]], list[pa.Field]], whole: str) -> list[pa.Field]:
    """``fields`` with ``edit`` applied to the children of the struct at ``parent`` (the top
    level when empty)."""
    if not parent:
        return edit(list(fields))
    out = []
    found = False
    for f in fields:
        if f.name == parent[0]:
            found = True
            if not pa.types.is_struct(f.type):
                raise SchemaEvolutionError(
                    f"column {whole!r}: {f.name!r} is {f.type}, not a struct; only struct fields "
                    "can be changed inside a column (not a list's or a map's)")
            f = f.with_type(pa.struct(_edit(list(f.type), parent[1:], edit, whole)))
        out.append(f)
    if not found:
        raise SchemaEvolutionError(f"column {whole!r}: its parent {'.'.join(parent)!r} does not exist")
    return out


def _with_fields(shape: Shape, fields: list[pa.Field], **changes: object) -> Shape:
    schema = pa.schema(fields, metadata=shape.schema.metadata)
    return replace(shape, schema=schema, **changes)  # type: ignore[arg-type]


def _without_ids(f: pa.Field) -> pa.Field:
    """``f`` with no ``PARQUET:field_id`` anywhere: a user does not choose ids."""
    metadata = {k: v for k, v in (f.metadata or {}).items() if k != FIELD_ID} or None
    t = f.type
    if pa.types.is_struct(t):
        t = pa.struct([_without_ids(child) for child in t])
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        element = _without_ids(t.value_field)
        t = pa.list_(element) if pa.types.is_list(t) else pa.large_list(element)
    elif pa.types.is_map(t):
        t = pa.map_(_without_ids(t.key_field), _without_ids(t.item_field), t.keys_sorted)
    return pa.field(f.name, t, f.nullable, metadata)


def _layout_refusal(shape: Shape, path: list[str], name: str, what: str) -> None:
    top = path[0]
    if len(path) == 1 and top in shape.key_columns:
        raise SchemaEvolutionError(
            f"column {name!r} is a record-key column: it cannot be {what} (the record index "
            "holds its values); record-key columns may only be renamed")
    if len(path) == 1 and top in shape.partition_by:
        raise SchemaEvolutionError(
            f"column {name!r} is a partition column: it cannot be {what} (files are placed by "
            "its values); partition columns may only be renamed")


# -- the changes ------------------------------------------------------------------------------

@dataclass(frozen=True)
class AddColumn:
    """Add a nullable column (or struct field) at the end of its level, or after ``after``."""

    field: pa.Field
    after: str | None = None

    def apply(self, shape: Shape) -> Shape:
        if not isinstance(self.field, pa.Field):
            raise InvalidOptionError(
                f"add_columns takes pyarrow.Field values, got {type(self.field).__name__}")
        name = self.field.name
        path = _path(shape.schema, name)
        if _find(list(shape.schema), path) is not None:
            raise SchemaEvolutionError(f"column {name!r} already exists; choose another name")
        if not self.field.nullable:
            raise SchemaEvolutionError(
                f"column {name!r}: a NOT NULL column cannot be added (existing rows have no "
                "value and metatxn has no column defaults); add it nullable")
        new = _without_ids(self.field.with_name(path[-1]))
        numbered = assign_ids(pa.schema([new]), start=shape.last_column_id + 1)
        new = numbered.field(0)

        def insert(siblings: list[pa.Field]) -> list[pa.Field]:
            if self.after is None:
                return [*siblings, new]
            names = [f.name for f in siblings]
            anchor = self.after.rsplit(".", 1)[-1] if len(path) > 1 else self.after
            if anchor not in names:
                raise SchemaEvolutionError(
                    f"column {name!r}: after={self.after!r} is not a column at its level; "
                    f"expected one of {names}")
            at = names.index(anchor) + 1
            return [*siblings[:at], new, *siblings[at:]]

        fields = _edit(list(shape.schema), path[:-1], insert, name)
        return _with_fields(shape, fields,
                            last_column_id=max(shape.last_column_id, last_column_id(numbered)))

    def describe(self) -> str:
        where = f" after {self.after}" if self.after else ""
        return f"add column {self.field.name} {self.field.type}{where}"


@dataclass(frozen=True)
class DropColumn:
    name: str

    def apply(self, shape: Shape) -> Shape:
        path, _ = _column(shape, self.name)
        _layout_refusal(shape, path, self.name, "dropped")

        def drop(siblings: list[pa.Field]) -> list[pa.Field]:
            kept = [f for f in siblings if f.name != path[-1]]
            if not kept:
                level = "the table" if len(path) == 1 else f"struct {'.'.join(path[:-1])!r}"
                raise SchemaEvolutionError(
                    f"column {self.name!r} is the last column of {level}; it cannot be dropped")
            return kept

        fields = _edit(list(shape.schema), path[:-1], drop, self.name)
        sort_by = tuple(c for c in shape.sort_by if not (len(path) == 1 and c == path[0]))
        return _with_fields(shape, fields, sort_by=sort_by)

    def describe(self) -> str:
        return f"drop column {self.name}"


@dataclass(frozen=True)
class RenameColumn:
    name: str
    new_name: str

    def apply(self, shape: Shape) -> Shape:
        path, _ = _column(shape, self.name)
        if not isinstance(self.new_name, str) or not self.new_name:
            raise InvalidOptionError(f"a new column name must be a non-empty string, got {self.new_name!r}")
        new = self.new_name
        if len(path) > 1 and new.startswith(".".join(path[:-1]) + "."):
            new = new[len(".".join(path[:-1])) + 1:]
        if new == path[-1]:
            raise SchemaEvolutionError(f"column {self.name!r} already has the name {new!r}")

        def rename(siblings: list[pa.Field]) -> list[pa.Field]:
            if any(f.name == new for f in siblings):
                raise SchemaEvolutionError(
                    f"column {self.name!r} cannot be renamed to {new!r}: that name exists")
            return [f.with_name(new) if f.name == path[-1] else f for f in siblings]

        fields = _edit(list(shape.schema), path[:-1], rename, self.name)
        if len(path) > 1:
            return _with_fields(shape, fields)
        old = path[0]

        def renamed(columns: Sequence[str]) -> tuple[str, ...]:
            return tuple(new if c == old else c for c in columns)

        key = shape.record_key
        if isinstance(key, str):
            key = new if key == old else key
        elif key is not None:
            key = renamed(key)
        return _with_fields(shape, fields, partition_by=renamed(shape.partition_by),
                            sort_by=renamed(shape.sort_by), record_key=key)

    def describe(self) -> str:
        return f"rename column {self.name} to {self.new_name}"


@dataclass(frozen=True)
class AlterColumn:
    """Widen a column's type (see :mod:`._widen`) and/or make it nullable."""

    name: str
    type: pa.DataType | None = None
    nullable: bool | None = None

    def apply(self, shape: Shape) -> Shape:
        path, current = _column(shape, self.name)
        if self.type is None and self.nullable is None:
            raise InvalidOptionError(f"alter_column({self.name!r}): give type=, nullable= or both")
        if self.type is not None and not isinstance(self.type, pa.DataType):
            raise InvalidOptionError(
                f"alter_column({self.name!r}): type must be a pyarrow.DataType, got {self.type!r}")
        if self.nullable is not None and not isinstance(self.nullable, bool):
            raise InvalidOptionError(
                f"alter_column({self.name!r}): nullable must be a bool, got {self.nullable!r}")
        changed = current
        if self.type is not None and self.type != current.type:
            _layout_refusal(shape, path, self.name, "given another type")
            if not is_widening(current.type, self.type):
                raise SchemaEvolutionError(
                    f"column {self.name!r}: {widening_refusal(current.type, self.type)}")
            changed = changed.with_type(self.type)
        if self.nullable is False and current.nullable:
            raise SchemaEvolutionError(
                f"column {self.name!r}: NOT NULL cannot be added to a nullable column (files "
                "already written may hold nulls); only nullable=True (relaxing) is allowed")
        if self.nullable:
            changed = changed.with_nullable(True)
        if changed.equals(current, check_metadata=True):
            return shape

        fields = _edit(list(shape.schema), path[:-1],
                       lambda siblings: [changed if f.name == path[-1] else f for f in siblings],
                       self.name)
        return _with_fields(shape, fields)

    def describe(self) -> str:
        parts = [f"type {self.type}"] if self.type is not None else []
        if self.nullable:
            parts.append("nullable")
        return f"alter column {self.name} {', '.join(parts)}"


@dataclass(frozen=True)
class SetProperties:
    values: Mapping[str, str]

    def apply(self, shape: Shape) -> Shape:
        if not isinstance(self.values, Mapping) or not self.values:
            raise InvalidOptionError(
                f"set_properties takes a non-empty dict of strings, got {self.values!r}")
        return replace(shape, properties={**shape.properties, **self.values})

    def describe(self) -> str:
        return "set properties " + ", ".join(f"{k}={v}" for k, v in self.values.items())


@dataclass(frozen=True)
class UnsetProperties:
    keys: Sequence[str]
    #: SQL's ``UNSET TBLPROPERTIES IF EXISTS``: an unknown key is not an error.
    missing_ok: bool = False

    def apply(self, shape: Shape) -> Shape:
        if isinstance(self.keys, str) or not isinstance(self.keys, Sequence) or not self.keys:
            raise InvalidOptionError(
                f"unset_properties takes a non-empty list of property names, got {self.keys!r}")
        missing = [k for k in self.keys if k not in shape.properties]
        if missing and not self.missing_ok:
            raise InvalidOptionError(
                f"table properties {missing} are not set; the table's properties: "
                f"{sorted(shape.properties)}")
        return replace(shape, properties={k: v for k, v in shape.properties.items()
                                          if k not in self.keys})

    def describe(self) -> str:
        return "unset properties " + ", ".join(self.keys)


Change = AddColumn | DropColumn | RenameColumn | AlterColumn | SetProperties | UnsetProperties


def apply_changes(shape: Shape, changes: Sequence[Change]) -> Shape:
    """``shape`` after ``changes``, in order.

    Raises:
        SchemaEvolutionError: a change that cannot be done safely, naming the column and rule.
        InvalidOptionError: a malformed argument.
    """
    if not changes:
        raise InvalidOptionError("a schema change needs at least one change")
    for change in changes:
        shape = change.apply(shape)
    return shape


def schema_changed(before: Shape, after: Shape) -> bool:
    """Whether the columns changed (not only the properties)."""
    return not before.schema.equals(after.schema, check_metadata=True)
