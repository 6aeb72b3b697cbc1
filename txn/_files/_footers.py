"""A data file's row count and column statistics, taken from its Parquet footer.

Files written by Spark's own Parquet writer are not seen by metatxn's writer, so their statistics
come from what parquet-java recorded per row group. They must mean what
:func:`txn._files._writer.column_stats` means (exact min/max, or unknown where a range would
lie), because readers prune files by them:

* a column chunk without min/max (parquet-java drops them for values over 4 KiB) makes the
  file's range unknown;
* parquet-java orders doubles and floats by ``Double.compare``, so a NaN becomes the chunk's
  maximum (or both bounds when every value is NaN): a NaN bound makes the range unknown, as the
  writer's own statistics leave it for a column holding NaN;
* null counts add up over row groups; a chunk without one makes the count unknown, and the
  file then gets no statistics for that column at all (a missing entry never prunes).
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from metatxn.indexes import stats_eligible

from ._writer import ColumnStats


def footer_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> dict[str, ColumnStats]:
    """Statistics of every eligible top-level column of ``schema`` in the file ``metadata``
    describes (columns found by name; a column the footer lacks gets none)."""
    positions = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    rows = metadata.num_rows
    stats: dict[str, ColumnStats] = {}
    for field in schema:
        index = positions.get(field.name)
        if index is None or not stats_eligible(field.type):
            continue
        column = _column_stats(metadata, index, rows)
        if column is not None:
            stats[field.name] = column
    return stats


def _column_stats(metadata: pq.FileMetaData, index: int, rows: int) -> ColumnStats | None:
    nulls = 0
    low: Any = None
    high: Any = None
    ranged = True
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        statistics = row_group.column(index).statistics
        if statistics is None or not statistics.has_null_count:
            return None
        nulls += statistics.null_count
        if statistics.null_count == row_group.num_rows:
            continue  # all nulls: this chunk adds no bound
        if not ranged or not statistics.has_min_max or _is_nan(statistics.min) or _is_nan(statistics.max):
            ranged = False
            continue
        low = statistics.min if low is None or statistics.min < low else low
        high = statistics.max if high is None or statistics.max > high else high
    if not ranged:
        low = high = None
    return ColumnStats(min=low, max=high, nulls=nulls, count=rows)


def _is_nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)
