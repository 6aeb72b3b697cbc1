"""The table a Spark write goes to: the one at the location, or a new one made from the DataFrame.

Spark's save modes decide what an existing table means (``error`` fails, ``ignore`` does
nothing, the others write into it); where no table exists, the write creates it from the
DataFrame's schema and the layout options, like Delta, Hudi and Iceberg writers do. The create
is staged (design/protocol.md, "Staged create"): ``table.json`` is put with the write's commit,
so a write that fails leaves no table. Of two writers creating the same table at the same moment
exactly one creates it; the other's write rolls back with TableExistsError, and
``txn.spark.write`` then writes again into the table that exists now, by its mode.

Layout options given for an existing table must agree with it: a write never changes a table's
layout, and never silently ignores a layout it was asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from timeline import InvalidOptionError, TableExistsError, TableNotFoundError

from .._context import TableContext, check_layout, check_properties, column_list, create_context, open_context
from ._types import check_dataframe, table_schema

#: Spark's save modes (``errorifexists`` and ``default`` are spellings of ``error``) and upsert.
MODES = ("append", "overwrite", "upsert", "error", "ignore")
_SPELLINGS = {"errorifexists": "error", "default": "error"}


def save_mode(mode: object) -> str:
    """The mode's canonical name (case-insensitive, as Spark's ``DataFrameWriter.mode``)."""
    name = mode.lower() if isinstance(mode, str) else None
    name = _SPELLINGS.get(name or "", name)
    if name not in MODES:
        raise InvalidOptionError(
            f"mode must be one of {[*MODES, 'errorifexists']}, got {mode!r}")
    return name


@dataclass(frozen=True)
class Layout:
    """Layout options of a write: used to create the table, checked against an existing one.

    ``None`` means not given: a new table does without, an existing one keeps its own.
    """

    partition_by: list[str] | None = None
    record_key: str | list[str] | None = None
    sort_by: list[str] | None = None
    properties: dict[str, str] | None = None

    @property
    def key_columns(self) -> list[str] | None:
        if self.record_key is None:
            return None
        return [self.record_key] if isinstance(self.record_key, str) else list(self.record_key)

    def check_new(self, schema: pa.Schema, mode: str) -> list[str]:
        """Validate the options for a new table of ``schema``; return its key columns."""
        check_layout(schema, self.partition_by, self.record_key, self.sort_by)
        check_properties(self.properties)
        if mode == "upsert" and self.record_key is None:
            raise InvalidOptionError(
                "mode 'upsert' creates a keyed table where none exists, and needs record_key; "
                "none was given\nHelp: pass record_key='<column>' (format: .option('recordKey', ...))")
        return self.key_columns or []

    def check_matches(self, table: TableContext) -> None:
        """Raise InvalidOptionError naming the first option that differs from the table's."""
        # Values are checked as the table would hold them: cross-field rules (an archive trigger
        # above the retained count) see the table's other properties.
        properties = self.properties or {}
        if not isinstance(properties, dict):
            check_properties(properties)  # raises: not a dict of strings
        check_properties({**table.properties, **properties})
        given = (("partition_by", self.partition_by, table.partition_by, False),
                 ("record_key", self.record_key, table.record_key_columns, True),
                 ("sort_by", self.sort_by, table.sort_by, False))
        for option, value, actual, allow_str in given:
            if value is None:
                continue
            wanted = column_list(option, value, allow_str=allow_str)
            if wanted != list(actual):
                raise InvalidOptionError(
                    f"{option} {wanted!r} differs from the table's {actual!r} at {table.uri}; "
                    "nothing was written\nHelp: leave the layout options out to write with the "
                    "table's layout (a write never changes it)")
        for key, value in properties.items():
            actual_value = table.properties.get(key)
            if actual_value != value:
                shown = "not set" if actual_value is None else repr(actual_value)
                raise InvalidOptionError(
                    f"table property {key}={value!r} differs from the table's ({shown}) at "
                    f"{table.uri}; nothing was written\nHelp: leave properties out to write "
                    "with the table's own")


def _existing(uri: str, storage_options: dict[str, Any] | None) -> TableContext | None:
    """The table at ``uri``, or None where there is none."""
    try:
        return open_context(uri, storage_options)
    except TableNotFoundError:
        return None


def _for_existing(table: TableContext, mode: str, layout: Layout) -> TableContext | None:
    """What ``mode`` makes of an existing table: an error, nothing (None), or the table."""
    if mode == "error":
        raise TableExistsError(table.uri)
    if mode == "ignore":
        return None
    layout.check_matches(table)
    return table


def resolve(uri: str, dataframe_schema: Any, mode: str, layout: Layout,
            storage_options: dict[str, Any] | None, *,
            before_create: Callable[[pa.Schema, list[str]], None] | None = None,
            staged: bool = True) -> TableContext | None:
    """The table a write of a DataFrame with ``dataframe_schema`` goes to, created if missing.

    Returns None when the mode says to do nothing (``ignore`` on an existing table). Where no
    table exists, ``before_create(schema, key_columns)`` runs the caller's checks of the data,
    and the table returned is staged: it comes to exist with the write's commit (``staged``
    on the context; ``staged=False`` creates it at once, for a writer whose commit re-opens the
    table by its location). If another writer creates the table first, it is treated as
    existing, by ``mode``.

    Raises:
        TableExistsError: ``error`` mode and a table exists.
        InvalidOptionError: a layout option differs from the table's, a column cannot be stored,
            or an upsert has no record key.
        SchemaMismatchError: the DataFrame does not have the existing table's columns and types.
    """
    table = _existing(uri, storage_options)
    if table is None:
        schema = table_schema(dataframe_schema)
        columns = layout.check_new(schema, mode)
        if before_create is not None:
            before_create(schema, columns)
        try:
            return create_context(uri, schema, partition_by=layout.partition_by,
                                  record_key=layout.record_key, sort_by=layout.sort_by,
                                  properties=layout.properties, storage_options=storage_options,
                                  staged=staged)
        except TableExistsError:  # another writer created it first: it exists now
            table = open_context(uri, storage_options)
    table = _for_existing(table, mode, layout)
    if table is None:
        return None
    check_dataframe(dataframe_schema, table.schema)
    if mode == "upsert" and not table.record_key_columns:
        raise InvalidOptionError(f"upsert needs a table with a record_key; {uri} has none")
    return table


def layout_of_options(options: Mapping[str, str]) -> Layout:
    """The layout options of ``format("metatxn")`` (Spark lowercases option names)."""
    known = {"path", "recordkey", "sortby", "partitionby"}
    unknown = sorted(k for k in options if k not in known and not k.startswith("properties."))
    if unknown:
        raise InvalidOptionError(
            f"format('metatxn') writes take the options recordKey, partitionBy, sortBy and "
            f"properties.<key>; got unknown option(s) {unknown}")

    def columns(name: str) -> list[str] | None:
        value = options.get(name)
        if value is None:
            return None
        return [c.strip() for c in value.split(",")]

    key = columns("recordkey")
    return Layout(
        partition_by=columns("partitionby"),
        record_key=key[0] if key is not None and len(key) == 1 else key,
        sort_by=columns("sortby"),
        properties={k.removeprefix("properties."): v for k, v in options.items()
                    if k.startswith("properties.")} or None,
    )


def as_table(context: TableContext) -> Any:
    """The public ``txn.Table`` over ``context`` (a staged one included: its first commit
    creates it)."""
    from .. import Table

    return Table._over(context)
