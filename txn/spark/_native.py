"""Unkeyed writes through Spark's own Parquet writer, committed by metatxn's protocol.

Spark writes the DataFrame with ``df.write.parquet`` into the pending write's staging folder
``_staging/<T>/`` (``PendingWrite.staging()``): its JVM writer, its commit protocol for task
attempts (a failed, retried or speculative attempt's files never leave Spark's ``_temporary``
folder, which Spark's job commit or abort removes). Each column is given its id as
``parquet.field.id`` metadata, so Spark writes the ids into the files
as pyarrow does (``spark.sql.parquet.fieldId.write.enabled``, on by default); the files record
the ticket's schema version. The driver then hands the staged files to the
pending write with :func:`txn.adopt_files`, which reads their footers for row counts and
statistics and publishes each into the segment folder under metatxn's own name, its marker first
(see ``txn/_twophase/_staging.py``, which also says how staging folders of dead writers go).

Only tables whose every column Spark writes back as the table's own Arrow type take this path
(:func:`writes_natively`); partitioned tables keep the ``mapInArrow`` path, which writes Hive
folders with the partition columns inside the files. ``txn.spark.write`` to an unpartitioned
keyed table writes here too, then writes the record index from the files written
(:mod:`._keyed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

import txn

from ._types import quoted, with_field_ids

#: Spark writes timestamps as INT96 by default, which has no statistics and reads back as
#: nanoseconds; as a write option it applies to this write only, not to the session.
_TIMESTAMP_OPTION = ("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")


def _round_trips(data_type: pa.DataType) -> bool:
    """Whether a Parquet file Spark writes reads back with exactly this Arrow type."""
    return (pa.types.is_boolean(data_type) or pa.types.is_signed_integer(data_type)
            or data_type in (pa.float32(), pa.float64(), pa.string(), pa.binary(), pa.date32(),
                             pa.timestamp("us"), pa.timestamp("us", "UTC"))
            or pa.types.is_decimal128(data_type))


def writes_natively(schema: pa.Schema, partition_by: Sequence[str], key_columns: Sequence[str]) -> bool:
    """Whether a write to a table of this layout goes through Spark's own Parquet writer."""
    return not partition_by and not key_columns and all(_round_trips(f.type) for f in schema)


def keyed_natively(schema: pa.Schema, partition_by: Sequence[str], key_columns: Sequence[str]) -> bool:
    """Whether a ``txn.spark.write`` to a keyed table of this layout goes through Spark's own
    Parquet writer, its record-index entries written after it (:mod:`._keyed`)."""
    return bool(key_columns) and writes_natively(schema, partition_by, ())


def write_files(df: Any, ticket: txn.WriteTicket, staging: str, *,
                index_apart: bool = False) -> txn.WrittenFiles:
    """Write ``df`` (checked against the table) into ``staging`` (the pending write's staging
    folder) with Spark's writer, then adopt the files into the write; return the report.
    ``index_apart``: a keyed table's index entries are written afterwards (:mod:`._keyed`)."""
    from pyspark.sql import functions as F

    schema = ticket.table_schema
    if ticket.sort_by:
        # As the pyarrow writer sorts a load: as a whole (files of disjoint ranges, so a filter on
        # a sort column opens files in proportion to what it selects), ascending, nulls last.
        # As many files as the DataFrame has partitions, as without sort_by.
        order = [F.col(quoted(c)).asc_nulls_last() for c in ticket.sort_by]
        df = df.repartitionByRange(df.rdd.getNumPartitions(), *order).sortWithinPartitions(*order)
    # Each column aliased with its id as metadata: the files carry Parquet field ids, as
    # pyarrow's. (``df.to(<schema with ids>)`` would not: Spark keeps a column whose type already
    # matches as it is, metadata dropped; the native path writes no structs.)
    (df.select(*[F.col(quoted(f.name)).alias(f.name, metadata=f.metadata)
                 for f in with_field_ids(schema).fields])
       .write.mode("overwrite")
       .option("compression", "snappy").option(*_TIMESTAMP_OPTION).parquet(staging))
    return txn.adopt_files(ticket, index_apart=index_apart)
