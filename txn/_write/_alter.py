"""Schema and table-property changes, one commit each (``Table.add_columns`` and the rest), the
builder that groups several into one, and the table's schema history."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType

import pyarrow as pa

from metatxn.indexes import SCHEMAS
from metatxn.timeline import InvalidOptionError

from .._commit import AlterTable, commit
from .._context import TableContext
from .._results import Commit, SchemaVersion
from .._schema import (
    AddColumn,
    AlterColumn,
    Change,
    DropColumn,
    RenameColumn,
    SetProperties,
    UnsetProperties,
)


def alter_table(context: TableContext, changes: Sequence[Change], *,
                extra: dict[str, str] | None = None) -> Commit:
    """Commit ``changes`` as one ``alter_table`` instant; the handle takes the new version."""
    write = AlterTable(alterations=tuple(changes))
    done = commit(context, write, extra)
    context.adopt({v.version: v for v in write.versions})
    return done


def add_columns(fields: Iterable[pa.Field] | pa.Schema, after: str | None = None) -> list[Change]:
    """The changes adding ``fields`` in order: at the end, or the first after ``after`` and each
    next one after the one before."""
    if isinstance(fields, (pa.Field, str, bytes)) or not isinstance(fields, Iterable):
        raise InvalidOptionError(
            f"add_columns takes a list of pyarrow.Field values (or a pyarrow.Schema), got {fields!r}")
    changes: list[Change] = []
    for f in fields:
        changes.append(AddColumn(f, after=after))
        if after is not None and isinstance(f, pa.Field):
            parent = f.name.rsplit(".", 1)[0] + "." if "." in f.name else ""
            after = parent + f.name.rsplit(".", 1)[-1]
    if not changes:
        raise InvalidOptionError("add_columns got no fields; expected at least one pyarrow.Field")
    return changes


def column_names(names: Sequence[str], what: str) -> list[str]:
    if isinstance(names, str) or not isinstance(names, Sequence) or not names:
        raise InvalidOptionError(f"{what} takes a non-empty list of column names, got {names!r}")
    return list(names)


class SchemaUpdate:
    """``with t.update_schema() as u:``: changes applied in order and committed as one instant
    when the block ends without an exception (nothing is committed otherwise). ``u.commit`` is
    the commit afterwards (None if no change was made)."""

    def __init__(self, context: TableContext, extra: dict[str, str] | None = None) -> None:
        self._context = context
        self._extra = extra
        self._changes: list[Change] = []
        self.commit: Commit | None = None

    def add_column(self, field: pa.Field | str, type: pa.DataType | None = None, *,
                   after: str | None = None) -> SchemaUpdate:
        """Add ``field`` (a ``pyarrow.Field``, or a name with ``type``), nullable."""
        if isinstance(field, str):
            if not isinstance(type, pa.DataType):
                raise InvalidOptionError(f"add_column({field!r}): give a pyarrow type, got {type!r}")
            field = pa.field(field, type)
        self._changes.append(AddColumn(field, after=after))
        return self

    def drop_column(self, name: str) -> SchemaUpdate:
        self._changes.append(DropColumn(name))
        return self

    def rename_column(self, name: str, new_name: str) -> SchemaUpdate:
        self._changes.append(RenameColumn(name, new_name))
        return self

    def alter_column(self, name: str, type: pa.DataType | None = None, *,
                     nullable: bool | None = None) -> SchemaUpdate:
        self._changes.append(AlterColumn(name, type=type, nullable=nullable))
        return self

    def set_properties(self, values: Mapping[str, str]) -> SchemaUpdate:
        self._changes.append(SetProperties(dict(values) if isinstance(values, Mapping) else values))
        return self

    def unset_properties(self, keys: Sequence[str], *, missing_ok: bool = False) -> SchemaUpdate:
        self._changes.append(UnsetProperties(keys, missing_ok=missing_ok))
        return self

    def __enter__(self) -> SchemaUpdate:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is None and self._changes:
            self.commit = alter_table(self._context, self._changes, extra=self._extra)


def schema_history(context: TableContext) -> list[SchemaVersion]:
    """Every version of the table, oldest first (version 0: its creation)."""
    resolved = context.metadata_at(context.timeline.load(), None, (SCHEMAS,))
    versions = dict(resolved.versions or {})
    versions.setdefault(0, context.base_version)
    return [SchemaVersion(version=v.version, instant=v.instant, schema=v.schema,
                          changes=tuple(v.changes), properties=dict(v.properties),
                          partition_by=tuple(v.partition_by),
                          record_key=tuple(v.record_key) if isinstance(v.record_key, list) else v.record_key,
                          sort_by=tuple(v.sort_by))
            for _, v in sorted(versions.items())]
