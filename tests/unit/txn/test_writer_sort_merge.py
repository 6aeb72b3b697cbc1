"""The k-way merge of sorted runs behind sorted loads (``txn/_files/_sort.py``).

Invariant: merging runs that are each sorted in Arrow's order gives exactly the rows of all runs,
in the order Arrow's own ``sort_by`` gives their concatenation (ties aside): nulls last, NaN after
every number, several sort columns, runs of many batches, more runs than one merge reads at once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from txn._files._sort import (
    MAX_FAN_IN,
    SortOrder,
    SpillFolder,
    in_memory_run,
    merge,
    merge_in_passes,
    read_run,
)

SCHEMA = pa.schema([("x", pa.float64()), ("s", pa.string()), ("row", pa.int64())])

values = st.one_of(st.none(), st.just(math.nan), st.integers(-3, 3).map(float))
strings = st.one_of(st.none(), st.sampled_from(["", "a", "ab", "b"]))


def _key(value: Any) -> tuple[int, Any]:
    if value is None:
        return (2, 0)
    if isinstance(value, float) and math.isnan(value):
        return (1, 0)
    return (0, value)


def _runs_of(rows: Sequence[Sequence[tuple[float | None, str | None]]]) -> list[pa.Table]:
    order = SortOrder(["x", "s"])
    tables, number = [], 0
    for run in rows:
        table = pa.table({"x": pa.array([r[0] for r in run], pa.float64()),
                          "s": pa.array([r[1] for r in run], pa.string()),
                          "row": pa.array(range(number, number + len(run)), pa.int64())},
                         schema=SCHEMA)
        number += len(run)
        tables.append(order.sort(table))
    return tables


def _check(merged: list[pa.Table], runs: list[pa.Table]) -> None:
    result = pa.concat_tables(merged, promote_options="none") if merged else SCHEMA.empty_table()
    keys = [(_key(x), _key(s)) for x, s in zip(result["x"].to_pylist(), result["s"].to_pylist(),
                                               strict=True)]
    assert keys == sorted(keys)
    everything = pa.concat_tables(runs)
    assert sorted(result["row"].to_pylist()) == sorted(everything["row"].to_pylist())
    # every row keeps its own values (rows are moved whole, never mixed)
    by_row = {r["row"]: (_key(r["x"]), r["s"]) for r in everything.to_pylist()}
    assert all(by_row[r["row"]] == (_key(r["x"]), r["s"]) for r in result.to_pylist())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(values, strings), max_size=30), min_size=1, max_size=6))
def test_a_merge_of_sorted_runs_is_sorted_and_keeps_every_row(rows: list[list[Any]]) -> None:
    runs = _runs_of(rows)
    order = SortOrder(["x", "s"])
    # batches of one to a few rows: every round of the merge cuts inside batches
    merged = list(merge([in_memory_run(t, 60) for t in runs if t.num_rows], order))
    _check(merged, runs)


def test_more_runs_than_one_merge_reads_are_merged_in_passes_through_the_spill_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    pattern = [None, math.nan, 2.0, -1.0, 0.0, 2.0]
    rows = [[(pattern[(i * 7 + j) % 6], "ab"[(i + j) % 2]) for j in range(40)]
            for i in range(2 * MAX_FAN_IN + 5)]
    runs = _runs_of(rows)
    order = SortOrder(["x", "s"])
    with SpillFolder() as spill:
        paths = [spill.write(iter([t]), SCHEMA, 100) for t in runs]
        merged = list(merge_in_passes([read_run(p) for p in paths], order, spill, SCHEMA, 100))
        written = sorted(p.name for p in tmp_path.rglob("*.arrow"))
    _check(merged, runs)
    # three passes' worth of runs: the first groups were merged into new runs on disk
    assert len(written) == len(runs) + 2
    assert list(tmp_path.iterdir()) == []


def test_a_run_of_many_batches_is_read_back_batch_by_batch(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run = _runs_of([[(float(i % 9), None) for i in range(500)]])[0]
    with SpillFolder() as spill:
        batches = list(read_run(spill.write(iter([run]), SCHEMA, 400)))
    assert len(batches) > 10
    assert pa.concat_tables(batches).equals(run)


def test_the_spill_folder_is_removed_when_its_block_fails(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    run = _runs_of([[(1.0, "a")] * 10])[0]
    with pytest.raises(RuntimeError, match="boom"), SpillFolder() as spill:
        spill.write(iter([run]), SCHEMA, 100)
        assert len(list(tmp_path.rglob("*.arrow"))) == 1
        raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
