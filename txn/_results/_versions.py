"""A table's schema history, as ``Table.schema_history()`` and ``metatxn describe --history`` give it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a table: created by a schema or property change (version 0: the table's
    creation). ``schema`` carries each column's id as ``PARQUET:field_id`` field metadata."""

    version: int
    #: The instant that created it ("" for version 0, which ``table.json`` holds).
    instant: str
    schema: pa.Schema
    #: What the change did, one line per change ("add column discount decimal128(15, 2)").
    changes: tuple[str, ...] = ()
    properties: dict[str, str] = field(default_factory=dict)
    partition_by: tuple[str, ...] = ()
    record_key: str | tuple[str, ...] | None = None
    sort_by: tuple[str, ...] = ()
