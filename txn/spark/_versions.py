"""Files of several schema versions in one Spark read: each version scanned by its own names,
projected to the target schema by column id (design/schema-evolution.md, decision 9).

Every data file records the table version it was written with (``DataFile.schema_id``), and
every version's schema carries each column's id as ``PARQUET:field_id`` field metadata. Spark's
Parquet scan reads columns by name, so a file of an older version is scanned with that version's
Spark schema (the names its file has) and then selected as the target: a column found by id is
renamed (``alias``) and widened (``cast``), struct children follow the same rule one level down
(``F.struct``), and a column whose id the version lacks (added later, or dropped and re-added
under the same name) is a typed null. Reading old files by name instead would return null for a
renamed column and the dropped column's old values for a re-added one.

Spark's own id matching (``spark.sql.parquet.fieldId.read.enabled``) is not used: it is a
session-wide setting read when a scan is planned, and files of tables from before column ids
have no ids. Files of the target version take the plain scan, so a table that never changed
shape pays nothing. The projection is a ``select`` over the scan: Spark pushes filters and
column pruning through its aliases into the Parquet scan as for any renamed column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pyarrow as pa

from .. import DataFile, Table
from ._types import from_arrow_schema_of, quoted

_FIELD_ID = b"PARQUET:field_id"

#: ``schema_id`` -> that version's schema, asked for only when a file of another version than the
#: target's is read (it resolves the table's ``schemas`` partition).
Versions = Callable[[], dict[int, pa.Schema]]

_File = TypeVar("_File", bound=DataFile)


def versions_of(table: Table) -> Versions:
    """The schemas of ``table``'s versions, resolved once on first use."""
    found: dict[int, pa.Schema] = {}

    def versions() -> dict[int, pa.Schema]:
        if not found:
            found.update({v.version: v.schema for v in table.schema_history()})
        return found
    return versions


def by_version(files: Iterable[_File]) -> dict[int, list[_File]]:
    """``files`` grouped by the version they were written with, in version order."""
    groups: dict[int, list[_File]] = {}
    for data_file in files:
        groups.setdefault(data_file.schema_id, []).append(data_file)
    return dict(sorted(groups.items()))


def written_schema(schema_id: int, target: pa.Schema, target_id: int, versions: Versions) -> pa.Schema:
    """The schema files of version ``schema_id`` were written with."""
    return target if schema_id == target_id else versions()[schema_id]


def _id(field: pa.Field) -> int | None:
    value = (field.metadata or {}).get(_FIELD_ID)
    return int(value) if value is not None else None


def _by_id(fields: Iterable[pa.Field]) -> dict[int, pa.Field]:
    return {i: f for f in fields if (i := _id(f)) is not None}


def _null(field: pa.Field) -> Any:
    from pyspark.sql import functions as F

    return F.lit(None).cast(from_arrow_schema_of(field))


def _column(ref: Any, source: pa.Field, target: pa.Field) -> Any:
    """``ref`` (a column of ``source``'s type) as ``target``'s type, struct children by id."""
    from pyspark.sql import functions as F

    if source.type.equals(target.type, check_metadata=True):
        return ref
    if pa.types.is_struct(source.type) and pa.types.is_struct(target.type):
        children = _by_id(source.type)
        built = F.struct(*[
            (_null(child) if (found := children.get(_id(child) or -1)) is None
             else _column(ref.getField(found.name), found, child)).alias(child.name)
            for child in target.type])
        # F.struct never yields a null struct: a row whose struct was null stays null.
        return F.when(ref.isNull(), _null(target)).otherwise(built)
    # An admitted widening (int32 -> int64, float -> double, decimal precision, date -> timestamp)
    # is an exact cast in Spark as in Arrow; list and map elements are cast as a whole.
    return ref.cast(from_arrow_schema_of(target))


def projected(frame: Any, written: pa.Schema, target: pa.Schema) -> Any:
    """``frame`` (a scan with ``written``'s columns) as ``target``'s columns, matched by id."""
    from pyspark.sql import functions as F

    columns = _by_id(written)
    return frame.select(*[
        (_null(f) if (found := columns.get(_id(f) or -1)) is None
         else _column(F.col(quoted(found.name)), found, f)).alias(f.name)
        for f in target])
