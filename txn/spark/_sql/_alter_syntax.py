"""The grammar of the ALTER TABLE statements that change a table's shape or properties.

Pure (no Spark, no table): a statement becomes an :class:`Alter`, the table's name and one
change, with column types kept as Spark DDL text (:mod:`._alter` reads them with Spark's own
parser when the statement runs). The forms are Spark's and Hive's, which CarbonData's are a
part of:

* ``ADD COLUMN[S] (c type [COMMENT 'x'] [AFTER other], ...)`` (brackets optional, as Spark);
* ``DROP COLUMN[S] [IF EXISTS] (c, ...)`` (brackets optional);
* ``CHANGE [COLUMN] c new_name type [COMMENT 'x']`` (Hive's and CarbonData's);
* ``ALTER|CHANGE [COLUMN] c TYPE type`` and ``ALTER|CHANGE [COLUMN] c DROP NOT NULL`` (Spark's
  and Delta's; Spark reads ``CHANGE c TYPE t`` so too: a column renamed to ``type`` is
  backticked);
* ``RENAME COLUMN a TO b``;
* ``SET TBLPROPERTIES ('k'='v', ...)`` and ``UNSET TBLPROPERTIES [IF EXISTS] ('k', ...)``;
* ``RENAME TO`` is refused: a metatxn table is its folder in the warehouse.

Column names may be dotted paths (``addr.country``: a field of the struct ``addr``). A name
that is new (an added column, a rename's target) is lower-cased, as CREATE TABLE lower-cases
its columns; a name of an existing column is kept as written and resolved against the table
when the statement runs (case-insensitively, as every statement matches column names).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from ._catalog import TableName
from ._parse import Cursor, Token, source_text, tokenize

ADD_COLUMNS = ("ALTER TABLE [db.]table ADD COLUMNS (column type [COMMENT 'text'] [AFTER column], "
               "...)")
DROP_COLUMNS = "ALTER TABLE [db.]table DROP COLUMNS [IF EXISTS] (column, ...)"
CHANGE = "ALTER TABLE [db.]table CHANGE [COLUMN] column new_name type [COMMENT 'text']"
ALTER_COLUMN = "ALTER TABLE [db.]table ALTER [COLUMN] column TYPE type | DROP NOT NULL"
RENAME_COLUMN = "ALTER TABLE [db.]table RENAME COLUMN column TO new_name"
SET_PROPERTIES = "ALTER TABLE [db.]table SET TBLPROPERTIES ('key'='value', ...)"
UNSET_PROPERTIES = "ALTER TABLE [db.]table UNSET TBLPROPERTIES [IF EXISTS] ('key', ...)"
FORMS = (ADD_COLUMNS, DROP_COLUMNS, CHANGE, ALTER_COLUMN, RENAME_COLUMN, SET_PROPERTIES,
         UNSET_PROPERTIES)

#: CarbonData's table properties of features metatxn has, under metatxn's names (as CREATE TABLE).
CARBON_PROPERTIES = {
    "compaction_level_threshold": "compaction.level_threshold",
    "major_compaction_size": "compaction.major.size_mb",
    "compaction_preserve_segments": "compaction.preserve_segments",
    "auto_load_merge": "compaction.auto",
}
#: TBLPROPERTIES of CREATE TABLE that are not properties, but the table's layout.
_FIXED_AT_CREATION = ("sort_columns", "record_key")

T = TypeVar("T")


@dataclass(frozen=True)
class NewColumn:
    name: str  #: lower-cased; a dotted path adds a field to a struct
    type: str  #: Spark DDL text, as written (``decimal(15, 2)``, ``struct<a: int>``)
    comment: str | None = None
    after: str | None = None  #: the existing column it follows (None: at the end)


@dataclass(frozen=True)
class AddColumns:
    columns: tuple[NewColumn, ...]


@dataclass(frozen=True)
class DropColumns:
    names: tuple[str, ...]
    if_exists: bool = False


@dataclass(frozen=True)
class ChangeColumn:
    name: str
    new_name: str  #: lower-cased; equal to ``name`` (ignoring case) for a type change only
    type: str  #: Spark DDL text
    comment: str | None = None  #: read, not kept (a column's comment is not stored by a change)


@dataclass(frozen=True)
class AlterColumn:
    name: str
    type: str | None = None  #: Spark DDL text (None: the type stays)
    nullable: bool | None = None  #: True: DROP NOT NULL (None: stays)


@dataclass(frozen=True)
class RenameColumn:
    name: str
    new_name: str  #: lower-cased


@dataclass(frozen=True)
class SetProperties:
    values: Mapping[str, str]  #: keys lower-cased, CarbonData's names as metatxn's


@dataclass(frozen=True)
class UnsetProperties:
    keys: tuple[str, ...]  #: lower-cased, CarbonData's names as metatxn's
    if_exists: bool = False


Change = (AddColumns | DropColumns | ChangeColumn | AlterColumn | RenameColumn | SetProperties
          | UnsetProperties)

FORM_OF: dict[type, str] = {AddColumns: ADD_COLUMNS, DropColumns: DROP_COLUMNS, ChangeColumn: CHANGE,
                            AlterColumn: ALTER_COLUMN,
                            RenameColumn: RENAME_COLUMN, SetProperties: SET_PROPERTIES,
                            UnsetProperties: UNSET_PROPERTIES}


@dataclass(frozen=True)
class Alter:
    name: TableName
    change: Change


def parse(statement: str, tokens: list[Token] | None = None) -> Alter:
    """Read an ALTER TABLE statement of a metatxn table's shape or properties.

    Raises:
        InvalidOptionError: the statement is none of these forms, or is malformed (the message
            quotes it and the form expected).
    """
    cursor = Cursor(statement, "  or  ".join(FORMS), tokens if tokens is not None else tokenize(statement))
    cursor.expect("ALTER")
    cursor.expect("TABLE")
    name = cursor.table_name()
    if cursor.accept("ADD"):
        cursor.form = ADD_COLUMNS
        change: Change = _add_columns(cursor)
    elif cursor.accept("DROP"):
        cursor.form = DROP_COLUMNS
        change = _drop_columns(cursor)
    elif cursor.accept("CHANGE"):
        cursor.form = CHANGE
        change = _change(cursor)
    elif cursor.accept("ALTER"):
        cursor.form = ALTER_COLUMN
        cursor.accept("COLUMN")
        change = _alter_column(cursor, _column(cursor))
    elif cursor.at_word("RENAME") and (following := cursor.peek(1)) is not None and following.is_word("TO"):
        raise cursor.error(f"RENAME TO is not supported for metatxn table {name}: a table is its "
                           "folder in the warehouse, and its name is that folder's")
    elif cursor.accept("RENAME"):
        cursor.form = RENAME_COLUMN
        change = _rename_column(cursor)
    elif cursor.accept("SET"):
        cursor.form = SET_PROPERTIES
        change = SetProperties(_properties(cursor))
    elif cursor.accept("UNSET"):
        cursor.form = UNSET_PROPERTIES
        change = _unset_properties(cursor)
    else:
        raise cursor.error(f"metatxn table {name} does not support this ALTER TABLE (found "
                           f"{cursor.found()} after the table name)")
    cursor.end()
    return Alter(name, change)


# -- names and types -------------------------------------------------------------------------------

def _name_part(cursor: Cursor, what: str) -> None:
    """Refuse the next token unless it is one name without a dot (a dot separates a struct
    from its fields in these statements)."""
    token = cursor.peek()
    if token is None or not token.is_name:
        raise cursor.error(f"expected {what} but found {cursor.found()}")
    if "." in token.value:
        raise cursor.error(f"column name {token.value!r} holds a dot, which separates a struct "
                           "from its fields in these statements")


def _column(cursor: Cursor, what: str = "a column name") -> str:
    """``c``, ``addr.country`` or backticked parts: a dotted path (a dot separates fields)."""
    parts = []
    while True:
        _name_part(cursor, what)
        parts.append(cursor.take().value)
        if not cursor.accept_symbol("."):
            return ".".join(parts)


def _new_name(cursor: Cursor) -> str:
    """The new name of a renamed column: one name, the field's own (its struct stays)."""
    _name_part(cursor, "the new column name")
    following = cursor.peek(1)
    if following is not None and following.kind == "symbol" and following.value == ".":
        raise cursor.error("the new name is the field's own name, without its struct (a rename "
                           "keeps a field in its struct)")
    return cursor.take().value.lower()


#: Words that end a column's type: what may follow it in a column definition.
_AFTER_TYPE = ("COMMENT", "AFTER", "FIRST", "NOT", "NULL", "DEFAULT")
#: The brackets inside a type, and what closes each.
_CLOSES = {"(": ")", "<": ">"}


def _type(cursor: Cursor, column: str) -> str:
    """A column type as Spark DDL text: every token up to a ``,`` or ``)`` outside the type's
    own brackets (``decimal(15, 2)``, ``map<string, int>``), or a word that follows a type.
    Several words are one type (``interval day to second``): Spark's parser judges them when
    the statement runs."""
    start = cursor.at
    opened: list[str] = []
    while (token := cursor.peek()) is not None:
        if token.kind == "symbol" and token.value in _CLOSES:
            opened.append(_CLOSES[token.value])
        elif token.kind == "symbol" and token.value in _CLOSES.values():
            if not opened or opened[-1] != token.value:
                break  # the list's own bracket, or one that does not match: the type ends
            opened.pop()
        elif not opened and ((token.kind == "symbol" and token.value == ",") or token.kind == "string"
                             or token.is_word(*_AFTER_TYPE)):
            break
        cursor.at += 1
    found = cursor.tokens[start:cursor.at]
    if not found or found[0].kind != "word":
        raise cursor.error(f"expected the type of column {column!r} but found "
                           f"{_text(cursor, found) if found else cursor.found()}")
    if opened:
        raise cursor.error(f"the type of column {column!r} has an unclosed bracket: "
                           f"{_text(cursor, found)!r}")
    return _text(cursor, found)


def _text(cursor: Cursor, tokens: list[Token]) -> str:
    return source_text(cursor.statement, tokens)


def _comment(cursor: Cursor) -> str | None:
    return cursor.string("the column comment") if cursor.accept("COMMENT") else None


def _bracketed(cursor: Cursor, read: Callable[[], T]) -> list[T]:
    """``(item, ...)`` or, as Spark also reads it, ``item, ...`` up to the end."""
    if cursor.accept_symbol("("):
        found = [read()]
        while not cursor.accept_symbol(")"):
            cursor.expect_symbol(",")
            found.append(read())
        return found
    found = [read()]
    while cursor.accept_symbol(","):
        found.append(read())
    return found


def _no_repeats(cursor: Cursor, names: list[str], what: str) -> None:
    lowered = [n.lower() for n in names]
    repeated = sorted({n for n in lowered if lowered.count(n) > 1})
    if repeated:
        raise cursor.error(f"{what} {repeated} named twice")


# -- the statements --------------------------------------------------------------------------------

def _add_columns(cursor: Cursor) -> AddColumns:
    cursor.expect("COLUMNS", "COLUMN")

    def column() -> NewColumn:
        name = _column(cursor).lower()
        data_type = _type(cursor, name)
        comment = None
        after = None
        while not cursor.at_end():
            if cursor.accept("COMMENT"):
                if comment is not None:
                    raise cursor.error(f"column {name!r} has two comments")
                comment = cursor.string("the column comment")
            elif cursor.accept("AFTER"):
                if after is not None:
                    raise cursor.error(f"column {name!r} has two positions")
                after = _column(cursor, "the column to add after")
            elif cursor.at_word("FIRST"):
                raise cursor.error(f"column {name!r}: FIRST is not supported; an added column goes "
                                   "at the end, or AFTER a column")
            elif cursor.at_word("NOT"):
                raise cursor.error(f"column {name!r}: an added column cannot be NOT NULL, as the "
                                   "rows already written hold no value for it (it reads as null)")
            elif cursor.at_word("DEFAULT"):
                raise cursor.error(f"column {name!r}: default values are not supported; the rows "
                                   "already written read the new column as null")
            elif cursor.accept("NULL"):
                continue
            else:
                break
        return NewColumn(name, data_type, comment, after)

    columns = _bracketed(cursor, column)
    if cursor.at_word("TBLPROPERTIES"):
        raise cursor.error("default values (CarbonData's TBLPROPERTIES('DEFAULT.VALUE.c'=...)) are "
                           "not supported; the rows already written read the new columns as null")
    _no_repeats(cursor, [c.name for c in columns], "column(s)")
    return AddColumns(tuple(columns))


def _drop_columns(cursor: Cursor) -> DropColumns:
    cursor.expect("COLUMNS", "COLUMN")
    if_exists = _if_exists(cursor)
    names = _bracketed(cursor, lambda: _column(cursor))
    _no_repeats(cursor, names, "column(s)")
    return DropColumns(tuple(names), if_exists)


def _if_exists(cursor: Cursor) -> bool:
    if not cursor.accept("IF"):
        return False
    cursor.expect("EXISTS")
    return True


def _change(cursor: Cursor) -> ChangeColumn | AlterColumn:
    cursor.accept("COLUMN")
    name = _column(cursor)
    if cursor.at_word("TYPE", "DROP", "SET"):
        cursor.form = ALTER_COLUMN
        return _alter_column(cursor, name)
    new_name = _new_name(cursor)
    data_type = _type(cursor, name)
    comment = _comment(cursor)
    if cursor.at_word("FIRST", "AFTER"):
        raise cursor.error(f"column {name!r}: CHANGE cannot move a column (FIRST, AFTER)")
    return ChangeColumn(name, new_name, data_type, comment)


def _alter_column(cursor: Cursor, name: str) -> AlterColumn:
    action = cursor.expect("TYPE", "DROP", "SET", "COMMENT", "FIRST", "AFTER")
    if action == "TYPE":
        return AlterColumn(name, type=_type(cursor, name))
    if action == "DROP" and cursor.accept("NOT"):
        cursor.expect("NULL")
        return AlterColumn(name, nullable=True)
    if action == "SET" and cursor.at_word("NOT"):
        raise cursor.error(f"column {name!r}: SET NOT NULL is not supported; rows already written "
                           "may hold nulls (a column can only relax to nullable)")
    if action in ("DROP", "SET") and cursor.at_word("DEFAULT"):
        raise cursor.error(f"column {name!r}: default values are not supported")
    if action == "COMMENT":
        raise cursor.error(f"column {name!r}: a comment cannot be changed (it is kept from ADD "
                           "COLUMNS only)")
    if action in ("FIRST", "AFTER"):
        raise cursor.error(f"column {name!r}: columns cannot be moved (FIRST, AFTER)")
    raise cursor.error(f"expected NOT NULL after {action} but found {cursor.found()}")


def _rename_column(cursor: Cursor) -> RenameColumn:
    cursor.expect("COLUMN")
    name = _column(cursor)
    cursor.expect("TO")
    return RenameColumn(name, _new_name(cursor))


def _property_key(cursor: Cursor) -> str:
    """A key: a quoted string or dotted words (Spark's ``a.b``); lower-cased, CarbonData's
    names as metatxn's."""
    token = cursor.peek()
    if token is not None and token.kind == "string":
        key = cursor.take().value.strip().lower()
    elif token is not None and token.is_name:
        key = _column(cursor, "a property key").lower()
    else:
        raise cursor.error(f"expected a property key ('key') but found {cursor.found()}")
    if not key:
        raise cursor.error("a property key is empty")
    if key in _FIXED_AT_CREATION:
        raise cursor.error(f"{key.upper()} is fixed when the table is created (its layout, not a "
                           "property); it cannot be set or unset")
    return CARBON_PROPERTIES.get(key, key)


def _property_value(cursor: Cursor, key: str) -> str:
    """A string, a number (``-1``) or ``true``/``false``; ``streaming``'s ``'sink'`` is ``true``,
    as CREATE TABLE reads it."""
    token = cursor.peek()
    if token is not None and token.kind == "string":
        value = cursor.take().value
    elif token is not None and token.is_word("TRUE", "FALSE"):
        value = cursor.take().value.lower()
    else:
        sign = "-" if cursor.accept_symbol("-") else ""
        token = cursor.peek()
        if token is None or token.kind != "number":
            raise cursor.error(f"expected the value of property {key!r} ('value', a number, true or "
                               f"false) but found {cursor.found()}")
        value = sign + cursor.take().value
    if key == "streaming":
        value = {"sink": "true"}.get(value.strip().lower(), value.strip().lower())
    return value


def _properties(cursor: Cursor) -> dict[str, str]:
    cursor.expect("TBLPROPERTIES")
    cursor.expect_symbol("(")
    found: dict[str, str] = {}
    while True:
        key = _property_key(cursor)
        cursor.expect_symbol("=")
        value = _property_value(cursor, key)
        if key in found:
            raise cursor.error(f"property {key!r} is given twice")
        found[key] = value
        if cursor.accept_symbol(")"):
            return found
        cursor.expect_symbol(",")


def _unset_properties(cursor: Cursor) -> UnsetProperties:
    cursor.expect("TBLPROPERTIES")
    if_exists = _if_exists(cursor)
    cursor.expect_symbol("(")
    keys = [_property_key(cursor)]
    while not cursor.accept_symbol(")"):
        cursor.expect_symbol(",")
        keys.append(_property_key(cursor))
    _no_repeats(cursor, keys, "property key(s)")
    return UnsetProperties(tuple(keys), if_exists)
