"""Sorting a whole load by ``sort_by``: in memory within a budget, by spilled sorted runs beyond it.

The order is Arrow's ``sort_by`` ascending on every column: nulls last, and in floating-point
columns NaN after every number and before null. Ties keep no particular order across runs.

Beyond the budget, rows are sorted in pieces (runs) written as Arrow IPC files to a private
temporary folder, then merged k ways. The merge is vectorised, one round per step: the smallest of
the runs' last loaded rows is a bound no row still on disk can be below, so every loaded row at or
below it is final; those rows are sorted together and handed on, the others wait for the next
round. A merge reads at most ``MAX_FAN_IN`` runs at once; more are merged in passes.

The temporary folder lives only inside a ``with SpillFolder()`` block and is removed when it ends,
by success or by an exception (a killed process leaves it to the system's cleaning of temporary
files). Nothing is written to the table's storage: runs are local scratch.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

#: The table property bounding the Arrow memory a sorted load holds before it spills runs.
SORT_MEMORY_PROPERTY: Final = "sort.memory_bytes"
DEFAULT_SORT_MEMORY_BYTES: Final = 512 * 1024 * 1024
#: Runs one merge reads at once (each holds one batch in memory, and one open file).
MAX_FAN_IN: Final = 64
#: Bounds of one batch of a spilled run: the merge holds one per run it reads.
_RUN_BATCH_BYTES_MIN: Final = 256 * 1024
_RUN_BATCH_BYTES_MAX: Final = 8 * 1024 * 1024

Mask = npt.NDArray[np.bool_]


def sort_memory_bytes(properties: dict[str, str]) -> int:
    """The memory budget of a sorted load (``sort.memory_bytes``, bytes of Arrow data)."""
    return int(properties.get(SORT_MEMORY_PROPERTY, str(DEFAULT_SORT_MEMORY_BYTES)))


def run_batch_bytes(budget: int) -> int:
    """Bytes of one batch of a spilled run: a merge of ``MAX_FAN_IN`` runs stays within half the
    budget, and batches stay large enough that a round is not all overhead."""
    return min(_RUN_BATCH_BYTES_MAX, max(_RUN_BATCH_BYTES_MIN, budget // (2 * MAX_FAN_IN)))


class SortOrder:
    """Ascending order on ``columns``, as Arrow's ``sort_by`` defines it."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = list(columns)
        self._keys = [(name, "ascending") for name in self.columns]

    def sort(self, table: pa.Table) -> pa.Table:
        # One contiguous table first: taking rows out of many chunks is slower than combining
        # them once.
        return table.combine_chunks().sort_by(self._keys)

    def smallest(self, table: pa.Table) -> pa.Table:
        """The first row of ``table`` in this order, as a one-row table."""
        first = pc.sort_indices(table.select(self.columns), sort_keys=self._keys)[0].as_py()
        return table.slice(first, 1)

    def at_most(self, table: pa.Table, bound: pa.Table) -> Mask:
        """Which rows of ``table`` sort at or before the one row of ``bound``."""
        count = table.num_rows
        before = np.zeros(count, dtype=np.bool_)
        equal = np.ones(count, dtype=np.bool_)
        for name in self.columns:
            less, same = _compare(table.column(name), bound.column(name)[0])
            before |= equal & less
            equal &= same
        return before | equal


def _compare(column: pa.ChunkedArray, bound: pa.Scalar) -> tuple[Mask, Mask]:
    """Per value of ``column``: (sorts before ``bound``, ties with it), with nulls last and
    NaN after every number, as Arrow's sort places them."""
    if not bound.is_valid:
        return _mask(pc.is_valid(column)), _mask(pc.is_null(column))
    if pa.types.is_floating(column.type) and math.isnan(bound.as_py()):
        nan = _mask(pc.fill_null(pc.is_nan(column), False))
        return _mask(pc.is_valid(column)) & ~nan, nan
    return (_mask(pc.fill_null(pc.less(column, bound), False)),
            _mask(pc.fill_null(pc.equal(column, bound), False)))


def _mask(values: pa.ChunkedArray | pa.Array) -> Mask:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.bool_)


class SpillFolder:
    """A private temporary folder of sorted runs, removed when the ``with`` block ends.

    The folder is made on the first spill, so a load that fits its budget touches no disk.
    """

    def __init__(self) -> None:
        self._path: str | None = None
        self._count = 0

    def __enter__(self) -> SpillFolder:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if self._path is not None:
            shutil.rmtree(self._path, ignore_errors=True)
            self._path = None

    def write(self, chunks: Iterator[pa.Table], schema: pa.Schema, batch_bytes: int) -> str:
        """Write sorted ``chunks`` as one run in batches of about ``batch_bytes``; its path."""
        if self._path is None:
            self._path = tempfile.mkdtemp(prefix="metatxn-sort-")
        path = f"{self._path}/run-{self._count:06d}.arrow"
        self._count += 1
        # The stream format, not the file format: merged chunks may carry dictionary columns with
        # a new dictionary each, which only a stream can replace between batches.
        with ipc.new_stream(path, schema) as writer:
            for chunk in chunks:
                rows = max(1, batch_bytes * chunk.num_rows // max(1, chunk.nbytes))
                writer.write_table(chunk, max_chunksize=rows)
        return path


def read_run(path: str) -> Iterator[pa.Table]:
    """The batches of a spilled run, one at a time (memory-mapped: nothing is copied)."""
    with pa.memory_map(path) as source:
        for batch in ipc.open_stream(source):
            if batch.num_rows:
                yield pa.Table.from_batches([batch])


def in_memory_run(table: pa.Table, batch_bytes: int) -> Iterator[pa.Table]:
    """A sorted table as a run of batches of about ``batch_bytes``."""
    rows = max(1, batch_bytes * table.num_rows // max(1, table.nbytes))
    for start in range(0, table.num_rows, rows):
        yield table.slice(start, rows)


def merge(runs: Sequence[Iterator[pa.Table]], order: SortOrder) -> Iterator[pa.Table]:
    """Merge sorted runs into one sorted stream of tables (each sorted, each following the last).

    Every round hands on at least the whole loaded batch of the run whose last loaded row is the
    bound, so the merge ends after at most as many rounds as the runs have batches. A run whose
    first loaded row is above the bound takes no part in the round's compare.
    """
    current: list[pa.Table | None] = [next(run, None) for run in runs]
    while True:
        live = [i for i, table in enumerate(current) if table is not None]
        if not live:
            return
        tables = [t for t in current if t is not None]
        if len(live) == 1:  # the rest of the last run is final as it stands
            yield tables[0]
            current[live[0]] = next(runs[live[0]], None)
            continue
        firsts = pa.concat_tables([t.slice(0, 1) for t in tables])
        lasts = pa.concat_tables([t.slice(t.num_rows - 1, 1) for t in tables])
        bound = order.smallest(lasts)
        taking = [i for i, first in zip(live, order.at_most(firsts, bound).tolist(), strict=True)
                  if first]
        taken = [table for i in taking if (table := current[i]) is not None]
        window = pa.concat_tables(taken)
        final = order.at_most(window, bound)
        lengths = np.array([table.num_rows for table in taken], dtype=np.int64)
        # Each run's final rows are a prefix of its batch (the batch is sorted), so a count each
        # says where its batch continues.
        counts = np.add.reduceat(final.astype(np.int64), np.cumsum(lengths) - lengths)
        yield order.sort(window.filter(pa.array(final)))
        for i, table, count in zip(taking, taken, counts.tolist(), strict=True):
            current[i] = table.slice(count) if count < table.num_rows else next(runs[i], None)


def merge_in_passes(runs: list[Iterator[pa.Table]], order: SortOrder, spill: SpillFolder,
                    schema: pa.Schema, batch_bytes: int) -> Iterator[pa.Table]:
    """:func:`merge` of any number of runs, reading at most ``MAX_FAN_IN`` at once: groups of
    runs are first merged into longer runs in ``spill``."""
    while len(runs) > MAX_FAN_IN:
        group, runs = runs[:MAX_FAN_IN], runs[MAX_FAN_IN:]
        runs.append(read_run(spill.write(merge(group, order), schema, batch_bytes)))
    return merge(runs, order)
