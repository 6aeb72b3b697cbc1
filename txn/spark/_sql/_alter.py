"""ALTER TABLE of a metatxn table's shape and properties, run through the table's API.

Each statement is one commit (or none, when it changes nothing), and answers with an empty
DataFrame, as CREATE TABLE does: ADD COLUMNS -> ``add_columns`` (or the ``update_schema``
builder when a column goes ``AFTER`` another), DROP COLUMNS -> ``drop_columns``, RENAME COLUMN
-> ``rename_column``, CHANGE -> ``alter_column`` (the type), ``rename_column`` (the name), or
both in one commit through ``update_schema``, ALTER COLUMN -> ``alter_column`` (``type=`` or
``nullable=True``), SET/UNSET TBLPROPERTIES -> ``set_properties`` /
``unset_properties``. What the table refuses (narrowing a type, dropping a record-key column)
is the table's error, quoting the statement. Types are Spark's DDL names, read by Spark's parser
and stored as ``txn.spark.write`` stores a DataFrame's columns (``_types.table_schema``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ... import Table
from .._types import from_arrow_schema_of, quoted, table_schema
from ._alter_syntax import (
    FORM_OF,
    AddColumns,
    AlterColumn,
    ChangeColumn,
    DropColumns,
    RenameColumn,
    SetProperties,
    UnsetProperties,
    parse,
)
from ._catalog import Catalog
from ._frames import no_result
from ._parse import Token, refused, spark_message

#: A column comment, kept in the field's metadata (Spark's own key for it).
COMMENT = b"comment"


def alter_table(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any:
    """Run an ALTER TABLE of a metatxn table that is not COMPACT or ADD SEGMENT."""
    parsed = parse(statement, tokens)
    table = catalog.open(parsed.name)
    change = parsed.change
    form = FORM_OF[type(change)]
    if isinstance(change, AddColumns):
        _add_columns(statement, form, table, change)
    elif isinstance(change, DropColumns):
        names = [_resolve(table.schema, n) for n in change.names]
        if change.if_exists:
            names = [n for n in names if _field(table.schema, n) is not None]
        if names:
            table.drop_columns(names)
    elif isinstance(change, RenameColumn):
        table.rename_column(_resolve(table.schema, change.name), change.new_name)
    elif isinstance(change, ChangeColumn):
        _change(statement, form, table, change)
    elif isinstance(change, AlterColumn):
        _alter_column(statement, form, table, change)
    elif isinstance(change, SetProperties):
        table.set_properties(dict(change.values))
    else:
        _unset(statement, form, table, change)
    return no_result(spark)


def arrow_fields(statement: str, form: str, columns: Sequence[tuple[str, str]]) -> list[pa.Field]:
    """Arrow fields (nullable) of ``(name, Spark DDL type)`` pairs, through Spark's DDL parser.

    Raises:
        InvalidOptionError: Spark cannot read a type, or metatxn cannot store it (named).
    """
    from pyspark.sql.types import DataType

    ddl = ", ".join(f"{quoted(name)} {_spark_type(data_type)}" for name, data_type in columns)
    try:
        struct = DataType.fromDDL(ddl)
    except Exception as exc:  # Spark's parser raises its own errors
        raise refused(statement, f"Spark cannot read the column types ({spark_message(exc)})",
                      form) from None
    return list(table_schema(struct))


def _spark_type(text: str) -> str:
    """``VARCHAR(n)`` and ``CHAR(n)`` are strings, as in CREATE TABLE."""
    head = text.split("(", 1)[0].strip().upper()
    return "STRING" if head in ("VARCHAR", "CHAR", "NCHAR", "NVARCHAR") else text


def _add_columns(statement: str, form: str, table: Table, change: AddColumns) -> None:
    fields = arrow_fields(statement, form, [(c.name, c.type) for c in change.columns])
    placed = []
    for column, field in zip(change.columns, fields, strict=True):
        parent, _, leaf = column.name.rpartition(".")
        name = f"{_resolve(table.schema, parent)}.{leaf}" if parent else leaf
        field = field.with_name(name)
        if column.comment is not None:
            field = field.with_metadata({COMMENT: column.comment.encode()})
        after = _resolve(table.schema, column.after) if column.after is not None else None
        placed.append((field, after))
    if all(after is None for _, after in placed):
        table.add_columns([field for field, _ in placed])
        return
    with table.update_schema() as update:
        for field, after in placed:
            update.add_column(field, after=after)


def _change(statement: str, form: str, table: Table, change: ChangeColumn) -> None:
    name = _resolve(table.schema, change.name)
    [field] = arrow_fields(statement, form, [(change.new_name, change.type)])
    current = _field(table.schema, name)
    retyped = current is None or not _same_type(current, field.type)
    # Names are case-insensitive: CHANGE amt amt bigint of a column Amt is a widening only.
    renamed = change.new_name != name.rpartition(".")[2].lower()
    if renamed and retyped:
        parent = name.rpartition(".")[0]
        new_path = f"{parent}.{change.new_name}" if parent else change.new_name
        with table.update_schema() as update:
            update.rename_column(name, change.new_name).alter_column(new_path, type=field.type)
    elif renamed:
        table.rename_column(name, change.new_name)
    elif retyped:
        table.alter_column(name, type=field.type)
    # Neither: the statement restates the column (a comment alone is not kept), nothing to commit.


def _alter_column(statement: str, form: str, table: Table, change: AlterColumn) -> None:
    name = _resolve(table.schema, change.name)
    if change.type is not None:
        [field] = arrow_fields(statement, form, [(name, change.type)])
        current = _field(table.schema, name)
        if current is None or not _same_type(current, field.type):
            table.alter_column(name, type=field.type)
        return
    current = _field(table.schema, name)
    if current is None or not current.nullable:
        table.alter_column(name, nullable=True)


def _same_type(current: pa.Field, wanted: pa.DataType) -> bool:
    """Whether the column already has the type the statement names, as Spark sees it (a large
    string column is a ``string``, as Spark reads it: no change to make)."""
    if current.type == wanted:
        return True
    try:
        spark_type = from_arrow_schema_of(current)
        return bool(table_schema(_struct_of(current.name, spark_type)).field(0).type == wanted)
    except Exception:  # a type Spark cannot hold: never the one a statement names
        return False


def _struct_of(name: str, data_type: Any) -> Any:
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(name, data_type, True)])


def _unset(statement: str, form: str, table: Table, change: UnsetProperties) -> None:
    properties = table.properties
    missing = [key for key in change.keys if key not in properties]
    if missing and not change.if_exists:
        raise refused(statement, f"table property {missing[0]!r} is not set (UNSET TBLPROPERTIES IF "
                                 "EXISTS skips keys that are not set)", form)
    keys = [key for key in change.keys if key in properties]
    if keys:
        table.unset_properties(keys)


# -- column names ----------------------------------------------------------------------------------

def _children(data_type: pa.DataType) -> list[pa.Field]:
    return list(data_type) if pa.types.is_struct(data_type) else []


def _field(schema: pa.Schema, path: str) -> pa.Field | None:
    """The field a dotted path names exactly (None: no such field)."""
    fields = list(schema)
    found = None
    for part in path.split("."):
        found = next((f for f in fields if f.name == part), None)
        if found is None:
            return None
        fields = _children(found.type)
    return found


def _resolve(schema: pa.Schema, path: str) -> str:
    """The column a dotted path names, matched case-insensitively part by part when no field
    has the exact name (a name matching none, or several, stays as written: the table's
    error names it)."""
    fields = list(schema)
    resolved: list[str] = []
    parts = path.split(".")
    for at, part in enumerate(parts):
        found = [f for f in fields if f.name == part] or [f for f in fields if f.name.lower() == part.lower()]
        if len(found) != 1:
            return ".".join(resolved + parts[at:])
        resolved.append(found[0].name)
        fields = _children(found[0].type)
    return ".".join(resolved)
