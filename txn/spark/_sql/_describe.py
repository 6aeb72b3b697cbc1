"""``DESCRIBE HISTORY t [LIMIT n]`` and ``DESCRIBE DETAIL t`` of metatxn tables, with Delta
Lake's columns where metatxn has the value (Spark itself parses neither: Delta adds them).

HISTORY: one row per completed instant, newest first (``Table.history``); ``version`` is the
instant, as ``VERSION AS OF`` takes it. DETAIL: one row describing the latest snapshot.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ... import HistoryEntry
from ._catalog import Catalog, TableName
from ._parse import Cursor, Token

HISTORY_FORM = "DESCRIBE HISTORY [db.]table [LIMIT n]"
DETAIL_FORM = "DESCRIBE DETAIL [db.]table"
ENGINE = "metatxn"


def _moment(instant: str | None) -> datetime | None:
    """A 17-digit UTC instant time as a moment (None stays None)."""
    if not instant:
        return None
    return datetime.strptime(instant, "%Y%m%d%H%M%S%f").replace(tzinfo=timezone.utc)


def _target(statement: str, tokens: list[Token], form: str) -> tuple[Cursor, TableName] | None:
    cursor = Cursor(statement, form, tokens)
    cursor.at = 2
    if cursor.at_end():
        return None  # DESCRIBE history: Spark's table of that name
    return cursor, cursor.table_name()


def _parameters(entry: HistoryEntry) -> dict[str, str]:
    found = {
        "action": entry.action, "segment": entry.segment,
        "operations": ",".join(entry.operations) or None,
        "segmentsRemoved": ",".join(entry.segments_removed) or None,
        "segmentsMerged": ",".join(entry.segments_merged) or None,
        "appId": entry.app_id, "appVersion": entry.version,
        "schemaVersion": entry.schema_version, "readAt": entry.read_at,
    }
    return {key: str(value) for key, value in found.items() if value is not None}


def _metrics(entry: HistoryEntry) -> dict[str, str]:
    found = {
        "numOutputRows": entry.rows_added, "numDeletedRows": entry.rows_deleted,
        "numAddedFiles": entry.files_added, "numRemovedFiles": entry.files_removed,
        "numAddedBytes": entry.bytes_added, "numRemovedBytes": entry.bytes_removed,
        "numDeletionVectorsAdded": entry.deltas_added, "executionTimeMs": entry.duration_ms,
        "numRetries": entry.retries,
    }
    return {key: str(value) for key, value in found.items() if value is not None}


def describe_history(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """One row per completed instant of the table, newest first."""
    from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType, TimestampType

    target = _target(statement, tokens, HISTORY_FORM)
    if target is None:
        return None
    cursor, name = target
    limit = cursor.integer("the LIMIT") if cursor.accept("LIMIT") else None
    cursor.end()
    entries = catalog.open(name).history(limit) if limit != 0 else []
    strings = MapType(StringType(), StringType())
    schema = StructType([
        StructField("version", LongType(), False), StructField("timestamp", TimestampType(), True),
        StructField("operation", StringType(), True), StructField("operationParameters", strings, True),
        StructField("operationMetrics", strings, True), StructField("userMetadata", StringType(), True),
        StructField("engineInfo", StringType(), True),
    ])
    rows = [(int(e.instant), _moment(e.completed_at), (e.operation or e.action).upper(), _parameters(e),
             _metrics(e), json.dumps(e.extra, sort_keys=True) if e.extra else None, ENGINE)
            for e in entries]
    return spark.createDataFrame(rows, schema)


def describe_detail(spark: Any, catalog: Catalog, statement: str, tokens: list[Token]) -> Any | None:
    """One row: the table and its latest snapshot."""
    from pyspark.sql.types import (
        ArrayType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    target = _target(statement, tokens, DETAIL_FORM)
    if target is None:
        return None
    cursor, name = target
    cursor.end()
    table = catalog.open(name)
    snapshot = table.snapshot()
    files = snapshot.files()
    names = ArrayType(StringType(), False)
    schema = StructType([
        StructField("format", StringType(), False), StructField("id", StringType(), True),
        StructField("name", StringType(), True), StructField("location", StringType(), True),
        StructField("createdAt", TimestampType(), True), StructField("lastModified", TimestampType(), True),
        StructField("version", LongType(), True),
        StructField("partitionColumns", names, True), StructField("recordKey", names, True),
        StructField("sortColumns", names, True), StructField("numFiles", LongType(), True),
        StructField("sizeInBytes", LongType(), True), StructField("numRows", LongType(), True),
        StructField("properties", MapType(StringType(), StringType()), True),
    ])
    row = (ENGINE, table.table_id, f"spark_catalog.{name}", table.uri, _moment(table.created_at),
           _moment(snapshot.completed_at), int(snapshot.instant) if snapshot.instant else None,
           list(table.partition_by), list(table.record_key_columns), list(table.sort_by), len(files),
           sum(f.size for f in files), snapshot.count(), dict(table.properties))
    return spark.createDataFrame([row], schema)
