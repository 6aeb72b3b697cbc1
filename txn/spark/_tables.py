"""The table a Spark write goes to: the one at the location, or a new one made from the DataFrame.

Spark's save modes decide what an existing table means (``error`` fails, ``ignore`` does
nothing, the others write into it); where no table exists, the write creates it from the
DataFrame's schema and the layout options, like Delta, Hudi and Iceberg writers do. The create
is staged (``txn.create_table(..., staged=True)``, design/protocol.md, "Staged create"):
``table.json`` is put with the write's commit, so a write that fails leaves no table. Of two
writers creating the same table at the same moment exactly one creates it; the other's write
rolls back with TableExistsError, and ``txn.spark.write`` then writes again into the table that
exists now, by its mode.

Layout options given for an existing table must agree with it: a write never changes a table's
layout, and never silently ignores a layout it was asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import txn

from ._types import check_dataframe, check_mergeable, table_schema

#: Spark's save modes (``errorifexists`` and ``default`` are spellings of ``error``) and upsert.
MODES = ("append", "overwrite", "upsert", "error", "ignore")
_SPELLINGS = {"errorifexists": "error", "default": "error"}


def save_mode(mode: object) -> str:
    """The mode's canonical name (case-insensitive, as Spark's ``DataFrameWriter.mode``)."""
    name = mode.lower() if isinstance(mode, str) else None
    name = _SPELLINGS.get(name or "", name)
    if name not in MODES:
        raise txn.InvalidOptionError(
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

    def create(self, uri: str, schema: Any, mode: str,
               storage_options: dict[str, Any] | None) -> txn.Table:
        """A staged table of ``schema`` with these options at ``uri`` (nothing written yet)."""
        table = txn.create_table(uri, schema, partition_by=self.partition_by,
                                 record_key=self.record_key, sort_by=self.sort_by,
                                 properties=self.properties, storage_options=storage_options,
                                 staged=True)
        if mode == "upsert" and self.record_key is None:
            raise txn.InvalidOptionError(
                "mode 'upsert' creates a keyed table where none exists, and needs record_key; "
                "none was given\nHelp: pass record_key='<column>' (format: .option('recordKey', ...))")
        return table

    def check_matches(self, table: txn.Table) -> None:
        """Raise InvalidOptionError naming the first option that differs from the table's."""
        table.check_layout(partition_by=self.partition_by, record_key=self.record_key,
                           sort_by=self.sort_by, properties=self.properties)


def _existing(uri: str, storage_options: dict[str, Any] | None) -> txn.Table | None:
    """The table at ``uri``, or None where there is none."""
    try:
        return txn.open_table(uri, storage_options)
    except txn.TableNotFoundError:
        return None


def _for_existing(table: txn.Table, mode: str, layout: Layout) -> txn.Table | None:
    """What ``mode`` makes of an existing table: an error, nothing (None), or the table."""
    if mode == "error":
        raise txn.TableExistsError(table.uri)
    if mode == "ignore":
        return None
    layout.check_matches(table)
    return table


def resolve(uri: str, dataframe_schema: Any, mode: str, layout: Layout,
            storage_options: dict[str, Any] | None, *, staged: bool = True,
            schema_mode: str | None = None) -> txn.Table | None:
    """The table a write of a DataFrame with ``dataframe_schema`` goes to, created if missing.

    Returns None when the mode says to do nothing (``ignore`` on an existing table). Where no
    table exists, the table returned is staged (``txn.create_table(..., staged=True)``): it
    comes to exist with the write's first commit, or ``Table.publish()``, so the caller's checks
    of the data may still refuse the write and leave no table. ``staged=False`` publishes it
    at once, for a writer whose commit re-opens the table by its location. If another writer
    creates the table first, it is treated as existing, by ``mode``.

    Raises:
        TableExistsError: ``error`` mode and a table exists.
        InvalidOptionError: a layout option differs from the table's, a column cannot be stored,
            or an upsert has no record key.
        SchemaMismatchError: the DataFrame does not have the existing table's columns and types
            (with ``schema_mode="merge"``: has types a merge cannot take, or lacks a
            non-nullable column).
    """
    table = _existing(uri, storage_options)
    if table is None:
        try:
            created = layout.create(uri, table_schema(dataframe_schema), mode, storage_options)
            if not staged:
                created.publish()
            return created
        except txn.TableExistsError:  # another writer created it first: it exists now
            table = txn.open_table(uri, storage_options)
    found = _for_existing(table, mode, layout)
    if found is None:
        return None
    if schema_mode == "merge":
        check_mergeable(dataframe_schema, found.schema)
    else:
        check_dataframe(dataframe_schema, found.schema)
    if mode == "upsert" and not found.record_key_columns:
        raise txn.InvalidOptionError(f"upsert needs a table with a record_key; {uri} has none")
    return found


def layout_of_options(options: Mapping[str, str]) -> Layout:
    """The layout options of ``format("metatxn")`` (Spark lowercases option names)."""
    known = {"path", "recordkey", "sortby", "partitionby", "mergeschema", "schema_mode"}
    unknown = sorted(k for k in options if k not in known and not k.startswith("properties."))
    if unknown:
        raise txn.InvalidOptionError(
            f"format('metatxn') writes take the options recordKey, partitionBy, sortBy, "
            f"properties.<key>, mergeSchema and schema_mode; got unknown option(s) {unknown}")

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


def schema_mode_of_options(options: Mapping[str, str]) -> str | None:
    """``"merge"`` when a ``format("metatxn")`` write asks for it (``mergeSchema=true``, as
    Delta's writer, or ``schema_mode=merge``, as ``txn.spark.write``), else None."""
    merge = options.get("mergeschema", "false").strip().lower()
    mode = options.get("schema_mode")
    if merge not in ("true", "false") or (mode is not None and mode.strip().lower() != "merge"):
        raise txn.InvalidOptionError(
            f"format('metatxn') takes mergeSchema 'true' or 'false' and schema_mode 'merge'; got "
            f"mergeSchema={options.get('mergeschema')!r}, schema_mode={mode!r}")
    return "merge" if merge == "true" or mode is not None else None
