"""Deleted rows as a predicate of Spark's Parquet scan, not a join.

Spark's native scan gives every row ``_metadata.file_name`` and ``_metadata.row_index`` (its
position in the file, right with row-group pruning and vectorized decoding on). A row is deleted
when its position is among its file's deleted positions, so the scan keeps

    NOT (_metadata.row_index IN (<every deleted position of any file>)
         AND CASE _metadata.file_name WHEN '<f>' THEN _metadata.row_index IN (<f's>) ... END)

Spark turns an ``IN`` of more than ten literals into a hash-set lookup (``InSet``), and ``AND``
stops at its first false operand, so a row costs one lookup of its position; only the few rows
whose position is deleted in some file compare their file name. Files without deletes are in the
same scan and pay the same one lookup: a second scan would split the plan (and Spark's split of
files into tasks) for little gain.

The predicate goes to Spark as one SQL string: built through the Column API it would cost one
Py4J call per literal (seconds for 10,000 positions).
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

import numpy as np

ROW_INDEX = "_metadata.row_index"
FILE_NAME = "_metadata.file_name"


def _positions_sql(positions: np.ndarray) -> str:
    return ", ".join(map(str, positions.tolist()))


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def kept_rows(deleted: Sequence[tuple[str, np.ndarray]]) -> str | None:
    """The SQL predicate that keeps the rows not deleted, for a scan of data files whose deleted
    positions are given as ``(location, sorted positions)``; None when nothing is deleted.

    Data file names are unique within a table (they carry segment, task, token and instant), so
    the base name identifies a file.
    """
    by_name = {posixpath.basename(location): positions for location, positions in deleted if len(positions)}
    if not by_name:
        return None
    every = np.unique(np.concatenate(list(by_name.values())))
    if len(by_name) == 1:
        ((name, _),) = by_name.items()
        in_file = f"{FILE_NAME} = {_quoted(name)}"
    else:
        branches = " ".join(f"WHEN {_quoted(name)} THEN {ROW_INDEX} IN ({_positions_sql(positions)})"
                            for name, positions in sorted(by_name.items()))
        in_file = f"CASE {FILE_NAME} {branches} ELSE false END"
    return f"NOT ({ROW_INDEX} IN ({_positions_sql(every)}) AND {in_file})"
