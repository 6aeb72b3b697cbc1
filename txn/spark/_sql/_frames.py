"""What ``txn.spark.sql`` returns: DataFrames with CarbonData's columns, and its text formats.

Every statement returns a DataFrame. Those CarbonData answers with a table (SHOW SEGMENTS, SHOW
PARTITIONS, CLEAN FILES, UPDATE, DELETE, LOAD DATA, INSERT) get that table, with CarbonData's
column names; those it answers with nothing (CREATE TABLE, ALTER TABLE, COMPACT, ADD SEGMENT,
DELETE SEGMENT) get an empty DataFrame without columns, what ``spark.sql`` returns for DDL.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_KB = 1024


def strings_frame(spark: Any, columns: Sequence[str], rows: Sequence[Sequence[str | None]]) -> Any:
    """A DataFrame of string columns (CarbonData's SHOW commands answer in strings)."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField(name, StringType(), True) for name in columns])
    return spark.createDataFrame([tuple(row) for row in rows], schema)


def count_frame(spark: Any, column: str, count: int) -> Any:
    """One row, one ``bigint`` column: how many rows a statement changed."""
    from pyspark.sql.types import LongType, StructField, StructType

    return spark.createDataFrame([(count,)], StructType([StructField(column, LongType(), False)]))


def no_result(spark: Any) -> Any:
    """The empty answer of a command (no rows, no columns), as ``spark.sql`` gives for DDL."""
    from pyspark.sql.types import StructType

    return spark.createDataFrame([], StructType([]))


def freed_size(size: int) -> str:
    """CarbonData's CLEAN FILES size (``ByteUtil.convertByteToReadable``): whole units of
    Byte, KB or MB, rounded down."""
    if size < _KB:
        return f"{size} Byte"
    if size < _KB * _KB:
        return f"{size // _KB} KB"
    return f"{size // (_KB * _KB)} MB"


def timestamp_text(moment: datetime | None, zone: tzinfo) -> str:
    """``java.sql.Timestamp.toString`` of a moment in ``zone``: ``2021-11-29 17:59:40.819``,
    ``...:40.0`` on a whole second; ``NA`` when unknown."""
    if moment is None:
        return "NA"
    local = moment.astimezone(zone)
    fraction = f"{local.microsecond // 1000:03d}".rstrip("0") or "0"
    return f"{local:%Y-%m-%d %H:%M:%S}.{fraction}"


_OFFSET = re.compile(r"^(?:UTC|GMT)?([+-])(\d{1,2}):?(\d{2})?$")


def session_zone(spark: Any) -> tzinfo:
    """The Spark session's time zone (``spark.sql.session.timeZone``): a region or an offset."""
    name = str(spark.conf.get("spark.sql.session.timeZone", "UTC"))
    match = _OFFSET.match(name)
    if match:
        sign = -1 if match.group(1) == "-" else 1
        return timezone(sign * timedelta(hours=int(match.group(2)), minutes=int(match.group(3) or 0)))
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return timezone.utc
