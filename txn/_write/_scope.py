"""What an overwrite replaces: the whole table, the partitions its rows go to, or one named partition.

``partitions=None`` (the default) replaces the whole table, as Hudi's ``insert_overwrite_table``.
``"dynamic"`` replaces the partitions the new rows are written to and keeps every other one, as
Spark's ``spark.sql.sources.partitionOverwriteMode=dynamic``, Hudi's ``insert_overwrite`` and
CarbonData's INSERT OVERWRITE of a partitioned table. A mapping of every partition column to a
value (``{"day": date(2026, 1, 1)}``) replaces that partition, also when the new rows are none
(they empty it); each new row must belong to it. Either way the partitions replaced are only
known as Hive paths, as the writer names their folders (``_hive``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metatxn.timeline import InvalidOptionError, SchemaMismatchError

from .._context import TableContext
from .._files import partition_path, typed_value

DYNAMIC = "dynamic"


def overwrite_scope(context: TableContext, partitions: object) -> tuple[frozenset[str] | None,
                                                                         dict[str, Any]]:
    """The partitions an overwrite names beyond those its rows go to (None: the whole table), and
    the values every new row must hold (a named partition; empty otherwise).

    Raises:
        InvalidOptionError: ``partitions`` is neither ``"dynamic"`` nor a mapping of every
            partition column to a value of its type; or the table is unpartitioned or keyed.
    """
    store = context.store.storage
    return layout_scope(context.uri, context.schema, context.partition_by, context.record_key_columns,
                        partitions, lambda path: bool(store.list(path, recursive=True)))


def layout_scope(uri: str, schema: pa.Schema, partition_by: list[str], key_columns: list[str],
                 partitions: object, existing: Callable[[str], bool] | None = None
                 ) -> tuple[frozenset[str] | None, dict[str, Any]]:
    """:func:`overwrite_scope` for a table of this layout, which need not exist yet: a write
    that would create it checks ``partitions`` before it does, so a refused one leaves no table.
    ``existing``: whether a partition path holds files (``partition_path``: a folder named as
    before issue 29 is kept where the new name is too long)."""
    if partitions is None:
        return None, {}
    expected = ("partitions=None (the whole table), 'dynamic' (the partitions the new rows go to) "
                f"or a mapping of every partition column {partition_by} to a value")
    if not isinstance(partitions, (str, Mapping)) or (isinstance(partitions, str) and partitions != DYNAMIC):
        raise InvalidOptionError(f"overwrite: partitions={partitions!r}; expected {expected}")
    if not partition_by:
        raise InvalidOptionError(
            f"overwrite: partitions={partitions!r}, but {uri} is not partitioned\n"
            "Help: overwrite the whole table (partitions=None)")
    if key_columns:
        # A key of the new rows may live in a partition the overwrite keeps: the record index
        # would then hold it twice. Replacing whole partitions of a keyed table is left out.
        raise InvalidOptionError(
            f"overwrite: partitions={partitions!r} is not supported on a table with a record_key "
            f"({key_columns})\nHelp: delete the partition's rows and upsert the new "
            "ones, or overwrite the whole table")
    if isinstance(partitions, str):
        return frozenset(), {}
    named = dict(partitions)
    if sorted(map(str, named)) != sorted(partition_by):
        raise InvalidOptionError(f"overwrite: partitions names {sorted(map(str, named))}; expected "
                                 f"{expected}")
    values = {column: _typed(schema, column, named[column]) for column in partition_by}
    folder = partition_path(partition_by, values, existing)
    return frozenset({folder}), values


def _typed(schema: pa.Schema, column: str, value: object) -> Any:
    data_type = schema.field(column).type
    if value is None:
        return None
    try:
        return pa.scalar(value, data_type).as_py()
    except (ValueError, pa.ArrowTypeError, TypeError):  # ValueError: ArrowInvalid, a lone surrogate
        pass
    try:
        if isinstance(value, str):
            return typed_value(value, data_type)
    except ValueError:
        pass
    raise InvalidOptionError(f"overwrite: partition column {column!r} takes a {data_type}, got {value!r}")


def check_in_partition(rows: pa.Table, values: dict[str, Any], schema: pa.Schema) -> None:
    """Raise ``SchemaMismatchError`` unless every row of ``rows`` holds ``values``."""
    for column, value in values.items():
        data = rows.column(column)
        if value is None:
            outside = data.length() - data.null_count
        else:
            same = pc.fill_null(pc.equal(data, pa.scalar(value, schema.field(column).type)), False)
            outside = data.length() - pc.sum(same).as_py() if data.length() else 0
        if outside:
            raise SchemaMismatchError(
                f"overwrite of partition {values}: {outside} row(s) hold another {column!r} than "
                f"{value!r}; nothing was written\nHelp: give only rows of that partition, or use "
                "partitions='dynamic'")
