"""SHOW SEGMENTS: one row per load, newest first, with CarbonData's statuses and load times."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pytest

import txn
from metatxn import timeline
from tests.conftest import FakeClock
from tests.unit.txn.helpers import SCHEMA, rows, storage_of
from txn._commit import protocol_of


def _at(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc)


def test_each_load_is_a_segment_with_its_size_rows_and_instant(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"], clock=clock)
    clock.advance(1_000)
    first = table.append(pa.concat_tables([rows(range(3), region="eu"), rows(range(3, 5), region="us")]))
    clock.advance(1_000)
    second = table.append(rows(range(5, 6), region="eu"))

    segments = table.segments()
    assert all(isinstance(s, txn.Segment) for s in segments)
    assert [s.id for s in segments] == ["1", "0"], "newest first"
    newest, oldest = segments
    storage = storage_of(table_uri)
    for segment, commit in ((newest, second), (oldest, first)):
        assert segment.status == "Success"
        assert segment.format == "parquet" and segment.external is False and segment.path is None
        assert segment.merged_to is None
        assert segment.instant == commit.instant
        assert segment.rows == commit.rows_added
        assert segment.data_size == sum(storage.size(p) for p in commit.paths_added) > 0
        assert segment.index_size > 0, "column statistics are the segment's index"
        assert segment.load_start == _at(timeline.parse_time(commit.instant))
        assert segment.load_end is not None and segment.load_end >= segment.load_start
        assert segment.load_start.tzinfo is not None
    assert oldest.partitions == ["region=eu", "region=us"]
    assert newest.partitions == ["region=eu"]
    assert oldest.load_end is not None and oldest.load_end < newest.load_start


def test_an_unpartitioned_segment_lists_no_partitions(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    table.append(rows(range(3)))
    assert table.segments()[0].partitions == []


def test_a_new_table_has_no_segments(table_uri: str) -> None:
    assert txn.create_table(table_uri, SCHEMA).segments() == []


def test_ids_order_numerically_not_as_text(table_uri: str) -> None:
    table = txn.create_table(table_uri, SCHEMA)
    for i in range(12):
        table.append(rows(range(i, i + 1)))
    assert [s.id for s in table.segments()] == [str(i) for i in range(11, -1, -1)]


def test_an_overwrite_marks_every_live_segment_for_delete(table_uri: str, clock: FakeClock) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    table.append(rows(range(4)))
    clock.advance(1_000)
    table.append(rows(range(4, 6)))
    before = {s.id: s for s in table.segments()}
    clock.advance(1_000)
    replaced = table.overwrite(rows(range(10, 11)))
    after = table.segments()
    assert [(s.id, s.status) for s in after] == [
        ("2", "Success"), ("1", "Marked for Delete"), ("0", "Marked for Delete")]
    for segment in after[1:]:
        kept = before[segment.id]
        assert (segment.rows, segment.data_size, segment.instant, segment.load_start) == (
            kept.rows, kept.data_size, kept.instant, kept.load_start), "the load's facts stay"
    assert after[0].instant == replaced.instant


def test_a_load_still_running_shows_as_insert_in_progress(table_uri: str, clock: FakeClock) -> None:
    """A pending write's segment appears, with its id and start, until it commits or rolls back."""
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    table.append(rows(range(2)))
    clock.advance(1_000)
    pending = protocol_of(table._context).begin("append", "commit", new_segment=True)
    try:
        assert pending.segment == "1"
        shown = table.segments()
        assert [(s.id, s.status) for s in shown] == [("1", "Insert In Progress"), ("0", "Success")]
        running = shown[0]
        assert running.instant == pending.instant.time
        assert running.load_start == _at(timeline.parse_time(pending.instant.time))
        assert running.rows == 0 and running.load_end is None
        seen_elsewhere = txn.open_table(table_uri).segments()[0]
        assert (seen_elsewhere.id, seen_elsewhere.status) == ("1", "Insert In Progress"), (
            "other processes see it too")
        assert table.snapshot().count() == 2, "but no reader sees its data"
    finally:
        pending.heartbeat.stop(delete=False)
        protocol_of(table._context).roll_back(pending.instant)
    assert [(s.id, s.status) for s in table.segments()] == [("0", "Success")]


def test_a_load_whose_writer_died_disappears_once_it_is_rolled_back(
    table_uri: str, clock: FakeClock
) -> None:
    table = txn.create_table(table_uri, SCHEMA, clock=clock)
    table.append(rows(range(2)))
    pending = protocol_of(table._context).begin("append", "commit", new_segment=True)
    pending.heartbeat.stop(delete=False)  # the writer dies: no more beats
    assert table.segments()[0].status == "Insert In Progress"
    clock.advance(10 * 60_000)  # past the heartbeat timeout
    later = txn.open_table(table_uri, clock=clock).append(rows(range(2, 3)))
    statuses = [(s.id, s.status) for s in table.segments()]
    assert ("Insert In Progress" not in {status for _, status in statuses})
    assert statuses[0] == (later.segment, "Success")
    assert [i.state for i in table.timeline() if i.time == pending.instant.time] == ["rolledback"]


@pytest.mark.parametrize("operation", ["append", "overwrite"])
def test_segment_rows_and_sizes_add_up_to_the_snapshot(table_uri: str, operation: str) -> None:
    table = txn.create_table(table_uri, SCHEMA, partition_by=["region"],
                             properties={"write.target_file_bytes": "1000"})
    table.append(pa.concat_tables([rows(range(50), region="eu"), rows(range(50, 80), region="us")]))
    getattr(table, operation)(rows(range(80, 120), region="apac"))
    snap = table.snapshot()
    live = [s for s in table.segments() if s.status == "Success"]
    assert sum(s.rows for s in live) == snap.count()
    by_segment: dict[str, int] = {}
    for data_file in snap.files():
        by_segment[data_file.segment] = by_segment.get(data_file.segment, 0) + data_file.size
    assert {s.id: s.data_size for s in live} == by_segment
