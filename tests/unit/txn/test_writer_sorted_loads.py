"""Loads sorted as a whole: ``sort_by`` orders the whole load before it is cut into files.

The files of one load then cover disjoint ``sort_by`` ranges (rows that tie may straddle a
boundary), so a selective filter on a sort column opens files in proportion to what it selects.
Both paths are covered: in memory (the load fits ``sort.memory_bytes``) and spilled runs merged
as the files are cut (a tiny budget forces it), with nulls, NaN and ties, and with rows deleted
and upserted afterwards. The spill folder is private scratch: empty after success and failure.
"""

from __future__ import annotations

import math
import os
import random
import tempfile
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.faults import InjectedFault
from tests.unit.txn.helpers import (
    SCHEMA,
    Faulty,
    batch_reader,
    read_data_file,
    storage_of,
    table_on,
)

#: A budget far below one load: every batch of 50 rows spills its own run (80 runs: more than
#: one merge reads at once, so the merge runs in passes).
SPILL = {"sort.memory_bytes": "1000"}
IN_MEMORY: dict[str, str] = {}
ROWS = 4_000


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary folder the writer spills into (``tempfile``'s, pointed at the test's)."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _spilled_runs(scratch: Path) -> list[str]:
    return sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*") if p.is_file())


def _prices(count: int, seed: int) -> list[float | None]:
    """Prices in random order: each value three times (ties), some nulls and NaNs."""
    values: list[float | None] = [float(i // 3) for i in range(count)]
    for i in range(0, count, 97):
        values[i] = None
    for i in range(5, count, 131):
        values[i] = math.nan
    random.Random(seed).shuffle(values)
    return values


def _load(ids: range, prices: Sequence[float | None],
          regions: Sequence[str | None] | None = None) -> pa.Table:
    return pa.table({
        "id": pa.array(list(ids), pa.int64()),
        "region": pa.array(list(regions) if regions is not None else ["eu"] * len(ids), pa.string()),
        "day": pa.array([date(2026, 1, 1)] * len(ids), pa.date32()),
        "price": pa.array(list(prices), pa.float64()),
    }, schema=SCHEMA)


def _in_batches(data: pa.Table, rows: int = 50) -> pa.RecordBatchReader:
    return batch_reader(SCHEMA, iter(data.to_batches(max_chunksize=rows)))


def _order_key(value: float | None) -> tuple[int, float]:
    """Arrow's ascending order: numbers, then NaN, then null."""
    if value is None:
        return (2, 0.0)
    if math.isnan(value):
        return (1, 0.0)
    return (0, value)


def _files_in_write_order(uri: str, paths: tuple[str, ...]) -> list[pa.Table]:
    # part-<segment>-<n>-...: n is the order the writer cut the files in
    return [read_data_file(uri, p) for p in sorted(paths, key=lambda p: p.rsplit("/", 1)[-1])]


def _assert_sorted_across_files(files: list[pa.Table], column: str = "price") -> None:
    keys = [_order_key(v) for f in files for v in f[column].to_pylist()]
    assert keys == sorted(keys)


def _multiset(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted((tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row.values())
                   for row in table.to_pylist()), key=repr)


@pytest.mark.parametrize("budget", [IN_MEMORY, SPILL], ids=["in-memory", "spilled"])
def test_a_sorted_load_cuts_files_of_disjoint_ranges(table_uri: str, scratch: Path,
                                                     budget: dict[str, str]) -> None:
    """The load's rows, read back file after file in the order they were cut, are sorted as one
    sequence (nulls last, NaN before them, ties anywhere), and nothing is lost."""
    table = txn.create_table(table_uri, SCHEMA, sort_by=["price"],
                             properties={"write.target_file_bytes": "4000", **budget})
    data = _load(range(ROWS), _prices(ROWS, seed=1))
    commit = table.append(_in_batches(data))
    assert commit is not None and commit.files_added >= 20
    files = _files_in_write_order(table_uri, commit.paths_added)
    _assert_sorted_across_files(files)
    assert _multiset(pa.concat_tables(files)) == _multiset(data)
    assert _spilled_runs(scratch) == []


@pytest.mark.parametrize("budget", [IN_MEMORY, SPILL], ids=["in-memory", "spilled"])
@pytest.mark.parametrize("fraction", [0.01, 0.1, 0.5])
def test_a_selective_filter_opens_files_in_proportion(memory_uri: str, scratch: Path,
                                                      budget: dict[str, str], fraction: float) -> None:
    """A range filter selecting a fraction of the rows opens about that fraction of the files
    (one more for each end, where a file straddles the range's bound), never all of them."""
    table = txn.create_table(memory_uri, SCHEMA, sort_by=["price"],
                             properties={"write.target_file_bytes": "4000", **budget})
    table.append(_in_batches(_load(range(ROWS), _prices(ROWS, seed=2))))
    everything = table.snapshot().files()
    bound = ROWS / 3 * fraction  # prices are 0 .. ROWS/3, uniformly
    where = pc.field("price") < bound
    opened = table.snapshot().files(where)
    assert len(opened) <= math.ceil(fraction * len(everything)) + 2
    expected = [p for p in _prices(ROWS, seed=2) if p is not None and p < bound]
    assert sorted(table.to_arrow(filter=where)["price"].to_pylist()) == sorted(expected)


def test_the_spilled_runs_exist_while_the_files_are_cut_and_are_gone_after(
        local_uri: str, scratch: Path) -> None:
    """Beyond ``sort.memory_bytes`` the load is spilled as sorted runs to a temporary folder,
    which holds them while the merge cuts the files and is removed once the write ends."""
    txn.create_table(local_uri, SCHEMA, sort_by=["price"],
                     properties={"write.target_file_bytes": "4000", **SPILL})
    storage = Faulty(storage_of(local_uri))
    seen: list[list[str]] = []
    storage.interleave(1, lambda: seen.append(_spilled_runs(scratch)), ops={"put_if_absent"},
                       match=lambda path: path.startswith("_markers/"))
    table = table_on(local_uri, storage)
    table.append(_in_batches(_load(range(ROWS), _prices(ROWS, seed=3))))
    assert len(seen) == 1 and len(seen[0]) > 1, seen  # runs on disk when the first file is cut
    assert all(name.startswith("metatxn-sort-") for name in seen[0])
    assert _spilled_runs(scratch) == [] and os.listdir(scratch) == []


def test_a_load_that_fails_while_merging_leaves_no_runs_and_no_rows(local_uri: str,
                                                                    scratch: Path) -> None:
    """A write that fails after spilling (here: the third data file cannot be announced) is
    rolled back, and its spill folder is removed all the same."""
    txn.create_table(local_uri, SCHEMA, sort_by=["price"],
                     properties={"write.target_file_bytes": "4000", **SPILL})
    storage = Faulty(storage_of(local_uri))
    table = table_on(local_uri, storage)
    table.append(_load(range(10), [1.0] * 10))
    storage.arm(3, ops={"put_if_absent"}, match=lambda path: path.startswith("_markers/"))
    with pytest.raises(InjectedFault):
        table.append(_in_batches(_load(range(10, ROWS), _prices(ROWS - 10, seed=4))))
    assert os.listdir(scratch) == []
    assert sorted(txn.open_table(local_uri).to_arrow()["id"].to_pylist()) == list(range(10))


@pytest.mark.parametrize("budget", [IN_MEMORY, SPILL], ids=["in-memory", "spilled"])
def test_several_sort_columns_with_nulls_and_ties_sort_the_whole_load(
        table_uri: str, scratch: Path, budget: dict[str, str]) -> None:
    """``sort_by=[region, price]``: region (with nulls) first, price breaking its ties."""
    table = txn.create_table(table_uri, SCHEMA, sort_by=["region", "price"],
                             properties={"write.target_file_bytes": "4000", **budget})
    rng = random.Random(5)
    regions = [rng.choice(["eu", "us", "apac", None]) for _ in range(ROWS)]
    data = _load(range(ROWS), _prices(ROWS, seed=5), regions)
    commit = table.append(_in_batches(data))
    assert commit is not None
    files = _files_in_write_order(table_uri, commit.paths_added)
    keys = [((r is None, r or ""), _order_key(p)) for f in files
            for r, p in zip(f["region"].to_pylist(), f["price"].to_pylist(), strict=True)]
    assert keys == sorted(keys)
    assert _multiset(pa.concat_tables(files)) == _multiset(data)
    opened = table.snapshot().files(pc.field("region") == "apac")
    assert len(opened) <= math.ceil(len(files) * regions.count("apac") / ROWS) + 2


@pytest.mark.parametrize("budget", [IN_MEMORY, SPILL], ids=["in-memory", "spilled"])
def test_each_partition_of_a_sorted_load_is_sorted_as_a_whole(memory_uri: str, scratch: Path,
                                                              budget: dict[str, str]) -> None:
    table = txn.create_table(memory_uri, SCHEMA, partition_by=["region"], sort_by=["price"],
                             properties={"write.target_file_bytes": "4000", **budget})
    rng = random.Random(6)
    regions = [rng.choice(["eu", "us"]) for _ in range(ROWS)]
    data = _load(range(ROWS), _prices(ROWS, seed=6), regions)
    commit = table.append(_in_batches(data))
    assert commit is not None
    for region in ("eu", "us"):
        paths = tuple(p for p in commit.paths_added if p.startswith(f"region={region}/"))
        assert len(paths) > 3
        files = _files_in_write_order(memory_uri, paths)
        _assert_sorted_across_files(files)
        assert set(pa.concat_tables(files)["region"].to_pylist()) == {region}
    assert _multiset(table.to_arrow()) == _multiset(data)


@pytest.mark.parametrize("budget", [IN_MEMORY, SPILL], ids=["in-memory", "spilled"])
def test_every_key_of_a_multi_file_load_points_at_its_own_row(memory_uri: str, scratch: Path,
                                                              budget: dict[str, str]) -> None:
    """The index entries of a load, built for all its files at once, name for each key the
    file and position the sorted cut put its row at."""
    table = txn.create_table(memory_uri, SCHEMA, record_key="id", sort_by=["price"],
                             properties={"write.target_file_bytes": "4000", **budget})
    commit = table.append(_in_batches(_load(range(ROWS), _prices(ROWS, seed=8))))
    assert commit is not None and commit.files_added > 10
    found = table.lookup(list(range(ROWS)))
    assert found.num_rows == ROWS
    prefix = memory_uri.rstrip("/") + "/"
    files = {path: read_data_file(memory_uri, path)["id"].to_pylist() for path in commit.paths_added}
    for key, file, position in zip(found["id"].to_pylist(), found["file"].to_pylist(),
                                   found["position"].to_pylist(), strict=True):
        assert files[file.removeprefix(prefix)][position] == key


@pytest.mark.parametrize("budget", [IN_MEMORY, SPILL], ids=["in-memory", "spilled"])
def test_deletes_and_upserts_after_a_sorted_load_find_their_rows(table_uri: str, scratch: Path,
                                                                 budget: dict[str, str]) -> None:
    """A keyed, sorted load records each key at its sorted position: deletes by key and by
    filter, and upserts, change exactly their rows; a filter still opens few files."""
    table = txn.create_table(table_uri, SCHEMA, record_key="id", sort_by=["price"],
                             properties={"write.target_file_bytes": "4000", **budget})
    prices = _prices(ROWS, seed=7)
    table.append(_in_batches(_load(range(ROWS), prices)))
    expected = dict(enumerate(prices))
    found = table.lookup([0, 1, ROWS - 1])
    assert sorted(found["id"].to_pylist()) == [0, 1, ROWS - 1]

    table.delete(keys=list(range(0, ROWS, 7)))
    for i in range(0, ROWS, 7):
        del expected[i]
    table.delete(where=pc.field("price") < 10.0)
    expected = {i: p for i, p in expected.items() if not (p is not None and p < 10.0)}
    upserted = _load(range(ROWS - 200, ROWS + 100), [5.0] * 300)
    table.upsert(upserted)
    expected.update(dict.fromkeys(range(ROWS - 200, ROWS + 100), 5.0))

    result = table.to_arrow()
    got = dict(zip(result["id"].to_pylist(), result["price"].to_pylist(), strict=True))
    assert len(got) == result.num_rows
    assert {i: _order_key(p) for i, p in got.items()} == {i: _order_key(p) for i, p in expected.items()}
    where = (pc.field("price") >= 500.0) & (pc.field("price") < 520.0)
    files = table.snapshot().files()
    assert len(table.snapshot().files(where)) <= 4 < len(files)
    assert sorted(table.to_arrow(filter=where)["id"].to_pylist()) == sorted(
        i for i, p in expected.items() if p is not None and 500.0 <= p < 520.0)
    assert table.validate().ok


def test_a_compaction_keeps_writing_its_presorted_rows_as_they_come(memory_uri: str,
                                                                    scratch: Path) -> None:
    """``presorted`` (a compaction sorted all its rows at once) still works with a tiny budget:
    nothing is sorted or spilled again, and the output is sorted across its files."""
    table = txn.create_table(memory_uri, SCHEMA, sort_by=["price"],
                             properties={"write.target_file_bytes": "4000", **SPILL})
    for n in range(4):
        table.append(_load(range(n * 1000, n * 1000 + 1000),
                           _prices(1000, seed=10 + n)))
    commit = table.compact()
    assert commit is not None
    _assert_sorted_across_files(_files_in_write_order(memory_uri, commit.paths_added))
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("value", ["999", "1099511627777", "1e6", "-5"])
def test_the_sort_memory_budget_is_checked(memory_uri: str, value: str) -> None:
    with pytest.raises(txn.InvalidOptionError, match=r"sort\.memory_bytes"):
        txn.create_table(memory_uri, SCHEMA, sort_by=["price"],
                         properties={"sort.memory_bytes": value})
