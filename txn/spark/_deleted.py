"""Deleted rows as a predicate of Spark's Parquet scan, not a join.

Spark's native scan gives every row ``_metadata.row_index`` (its position in the file, right
with row-group pruning and vectorized decoding on) and the file's constant metadata
(``_metadata.file_size``, ``_metadata.file_name``). A row is deleted when its position is among
its file's deleted positions, so the scan keeps

    NOT (CASE WHEN _metadata.file_size = <size of f> THEN <bit row_index of f's bitmap> ...
         ELSE false END)

Each file with deletes is a bitmap of its rows, 64 to a ``bigint`` word, handed to Spark as one
string literal that ``cast(split(...) as array<bigint>)`` turns into an array when the plan is
optimised (constant folding: once per query, not per row). A row then costs a few integer
operations: its file's branch (a ``long`` comparison on a constant column), one array read and
one bit test. Measured (bench/README.md) against the hash-set ``IN`` of positions this replaces:
Spark evaluates ``IN`` of more than ten literals as a lookup of a boxed ``long`` in a
``java.util.HashSet``, several times the cost of the bit test. Files are told apart by size, a
number, rather than by name, a string compared per row; files of the scan that share a size
also compare their names.

A bitmap costs one word per 64 rows of each file with deletes, whatever the number of deleted
rows; beyond :data:`MAX_WORDS` words in one scan (2 ** 21 words: 134 M rows of files with
deletes, about 40 MB of SQL text) the predicate falls back to the positions themselves (the
hash-set ``IN`` above, which grows with the deleted rows instead).

The predicate goes to Spark as one SQL string: built through the Column API it would cost one
Py4J call per literal.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ROW_INDEX = "_metadata.row_index"
FILE_NAME = "_metadata.file_name"
FILE_SIZE = "_metadata.file_size"
#: The most bitmap words one scan's predicate holds (see the module docstring).
MAX_WORDS = 1 << 21


@dataclass(frozen=True)
class Deleted:
    """A data file of the scan with its deleted positions (sorted; empty: nothing deleted)."""

    location: str
    rows: int
    size: int
    positions: np.ndarray

    @property
    def name(self) -> str:
        """The base name Spark reports as ``_metadata.file_name``: unique within a table (it
        carries segment, task, token and instant)."""
        return posixpath.basename(self.location)


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _bitmap(rows: int, positions: np.ndarray) -> str:
    """The file's deleted positions as an ``array<bigint>`` of 64-row words, bit ``p % 64`` of
    word ``p // 64`` set for position ``p``."""
    positions = np.asarray(positions, dtype=np.int64)
    words = np.zeros(max(1, (rows + 63) // 64), dtype=np.uint64)
    np.bitwise_or.at(words, positions >> 6, np.left_shift(np.uint64(1), (positions & 63).astype(np.uint64)))
    text = ",".join(map(str, words.view(np.int64).tolist()))
    return f"cast(split('{text}', ',') as array<bigint>)"


def _bit(array: str) -> str:
    return (f"getbit(get({array}, cast(shiftright({ROW_INDEX}, 6) as int)), "
            f"cast({ROW_INDEX} & 63 as int)) = 1")


def kept_rows(files: Sequence[Deleted]) -> str | None:
    """The SQL predicate that keeps the rows not deleted, for a scan of exactly ``files`` (every
    file of the scan, with or without deletes: their sizes tell the files apart); None when
    nothing is deleted."""
    deleted = [f for f in files if len(f.positions)]
    if not deleted:
        return None
    if sum((f.rows + 63) // 64 for f in deleted) > MAX_WORDS:
        return _positions_in(deleted)
    if len(files) == 1:
        return f"NOT ({_bit(_bitmap(deleted[0].rows, deleted[0].positions))})"
    sizes: dict[int, int] = {}
    for f in files:
        sizes[f.size] = sizes.get(f.size, 0) + 1
    branches = []
    for f in deleted:
        same_file = f"{FILE_SIZE} = {f.size}"
        if sizes[f.size] > 1:
            same_file += f" AND {FILE_NAME} = {_quoted(f.name)}"
        branches.append(f"WHEN {same_file} THEN {_bit(_bitmap(f.rows, f.positions))}")
    return f"NOT (CASE {' '.join(branches)} ELSE false END)"


def _positions_sql(positions: np.ndarray) -> str:
    return ", ".join(map(str, positions.tolist()))


def _positions_in(deleted: Sequence[Deleted]) -> str:
    """The predicate by positions: ``NOT (row_index IN (<every deleted position>) AND CASE
    file_name WHEN '<f>' THEN row_index IN (<f's>) ... END)``; ``AND`` stops at its first false
    operand, so only rows whose position is deleted in some file compare their file name."""
    every = np.unique(np.concatenate([f.positions for f in deleted]))
    if len(deleted) == 1:
        in_file = f"{FILE_NAME} = {_quoted(deleted[0].name)}"
    else:
        branches = " ".join(f"WHEN {_quoted(f.name)} THEN {ROW_INDEX} IN ({_positions_sql(f.positions)})"
                            for f in sorted(deleted, key=lambda f: f.name))
        in_file = f"CASE {FILE_NAME} {branches} ELSE false END"
    return f"NOT ({ROW_INDEX} IN ({_positions_sql(every)}) AND {in_file})"
