"""``Table.count()``: the latest snapshot's live rows, kept per process until an instant completes.

Whatever it keeps, a count is the count of the snapshot a read would resolve at that moment: a
commit through another handle, a delete, a table recreated at the same location are all seen;
filters and time travel are counted on their own snapshot.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import txn
from tests.unit.txn.helpers import SCHEMA, CountingStorage, rows, storage_of, table_on
from txn._read._count import _COUNTS


def _reads(storage: CountingStorage) -> list[tuple[str, str]]:
    """The calls other than the timeline's listing (what resolving a snapshot would add)."""
    return [(op, path) for op, path in storage.calls
            if not (op == "list" and path.startswith("_timeline"))]


def test_count_is_the_snapshot_count_after_every_kind_of_write(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, record_key="id")
    assert table.count() == 0
    table.append(rows(range(10)))
    assert table.count() == 10
    table.upsert(rows(range(5, 15)))
    assert table.count() == 15
    table.delete(where=pc.field("id") < 3)
    assert table.count() == 12
    table.delete(keys=[14])
    assert table.count() == 11 == table.snapshot().count() == table.to_arrow().num_rows
    table.overwrite(rows(range(4)))
    assert table.count() == 4 == txn.open_table(table_uri).count()


def test_a_filter_and_time_travel_count_their_own_snapshot(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    first = table.append(rows(range(3)))
    table.append(rows(range(3, 8)))
    assert table.count() == 8  # the latest, now kept
    assert table.count(as_of=first.instant) == 3
    assert table.count(pc.field("id") >= 5) == 3
    assert table.count(pc.field("id") >= 1, as_of=first.instant) == 2
    assert table.count() == 8


def test_a_commit_through_another_handle_is_counted(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    reader = txn.open_table(table_uri)
    assert reader.count() == 3
    txn.open_table(table_uri).append(rows(range(3, 10)))
    assert reader.count() == 10
    assert txn.open_table(table_uri).count() == 10
    table.delete(where=pc.field("id") >= 8)
    assert reader.count() == 8 == table.count()


def test_a_count_asked_again_resolves_nothing_through_any_handle(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    for start in range(0, 40, 10):
        table.append(rows(range(start, start + 10)))
    assert table.count() == 40
    counting = CountingStorage(storage_of(table_uri))
    fresh = table_on(table_uri, counting)
    counting.calls.clear()
    assert fresh.count() == 40 and fresh.count() == 40
    assert counting.calls, "a count must list the timeline: another process may have committed"
    assert _reads(counting) == []
    table.append(rows(range(40, 45)))
    counting.calls.clear()
    assert fresh.count() == 45
    assert any(path.startswith("_metadata") for _, path in _reads(counting)), \
        "a new completed instant must be resolved"


def test_a_handle_counts_its_own_commits_without_a_shared_count(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(6)))
    assert table.count() == 6
    _COUNTS.clear()  # as in a process that never counted this table
    assert table.count() == 6
    table.append(rows(range(6, 9)))
    assert table.count() == 9


def test_a_table_recreated_at_the_same_location_is_counted_afresh(tmp_path: Path) -> None:
    uri = str(tmp_path / "table")
    old = txn.create_table(uri, SCHEMA)
    old.append(rows(range(7)))
    assert txn.open_table(uri).count() == 7
    shutil.rmtree(uri)
    new = txn.create_table(uri, SCHEMA)
    assert new.count() == 0
    new.append(rows(range(2)))
    assert txn.open_table(uri).count() == 2 == new.count()


def test_an_empty_and_a_staged_table_count_zero(table_uri: str) -> None:
    assert txn.create_table(table_uri, SCHEMA).count() == 0
    staged = txn.create_table(table_uri + "_staged", SCHEMA, staged=True)
    assert staged.count() == 0
    staged.append(rows(range(4)))
    assert staged.count() == 4 == txn.open_table(table_uri + "_staged").count()


def test_interleaved_writers_and_counters_agree_with_the_snapshot(table_uri: str) -> None:
    txn.create_table(table_uri, SCHEMA, record_key="id")
    writers = [txn.open_table(table_uri) for _ in range(2)]
    counters = [txn.open_table(table_uri) for _ in range(2)]
    expected = 0
    for step in range(8):
        writer = writers[step % 2]
        if step % 3 == 2:
            writer.delete(where=pc.field("id") == (step - 2) * 10)
            expected -= 1
        else:
            writer.append(rows(range(step * 10, step * 10 + 5)))
            expected += 5
        for counter in counters:
            assert counter.count() == expected == counter.snapshot().count()
        assert txn.open_table(table_uri).count() == expected


def test_a_bad_filter_is_refused_before_counting(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    with pytest.raises(txn.InvalidOptionError):
        table.count(pc.field("missing") > 1)
    with pytest.raises(txn.InvalidOptionError):
        table.count(as_of="not a time")
    assert table.count() == 3
    assert pa.table(table).num_rows == 3
