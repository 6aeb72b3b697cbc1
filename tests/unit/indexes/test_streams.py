"""The ``streams`` partition: producers' progress records and their merge."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from metatxn.indexes import ProducerKind, StreamRecord, StreamStatus
from metatxn.indexes._streams import merge_stream_tables, merge_streams, streams_from_arrow, streams_to_arrow

records = st.builds(
    StreamRecord,
    name=st.sampled_from(["job1", "job2", "nightly"]),
    kind=st.sampled_from([ProducerKind.STREAM, ProducerKind.APP]),
    generation=st.integers(0, 2),
    last_batch=st.integers(-1, 5),
    rows=st.integers(0, 100),
    segment=st.sampled_from([None, "0", "3"]),
    status=st.sampled_from([StreamStatus.ACTIVE, StreamStatus.DROPPED]),
    started_ms=st.integers(0, 10),
    updated_ms=st.integers(0, 10),
    instant=st.sampled_from(["20260101000000001", "20260101000000002", "20260101000000003"]),
)


@given(st.lists(records, max_size=12), st.randoms(use_true_random=False), st.integers(1, 4))
def test_merge_is_a_function_of_the_set_of_records(found: list[StreamRecord], order: random.Random,
                                                   groups: int) -> None:
    """Any order and any grouping into blocks (and bases of merged blocks) give the same records:
    log blocks fold in any grouping."""
    # One instant writes one record per producer: records equal in order are the same record.
    canonical: dict[tuple[object, ...], StreamRecord] = {}
    found = [canonical.setdefault((r.kind, r.name, r.order), r) for r in found]
    once = merge_streams([streams_to_arrow(found)]) if found else {}
    shuffled = list(found)
    order.shuffle(shuffled)
    blocks = [streams_to_arrow(shuffled[i::groups]) for i in range(groups) if shuffled[i::groups]]
    folded = merge_stream_tables(blocks[: len(blocks) // 2]) if len(blocks) > 1 else None
    rest = blocks[len(blocks) // 2:] if folded is not None else blocks
    again = merge_streams(([folded] if folded is not None else []) + rest)
    assert again == once


def test_the_record_furthest_along_wins() -> None:
    batch = StreamRecord(name="job1", last_batch=4, instant="20260101000000002")
    later = StreamRecord(name="job1", last_batch=7, instant="20260101000000001")
    dropped = StreamRecord(name="job1", last_batch=7, status=StreamStatus.DROPPED,
                           instant="20260101000000001")
    restarted = StreamRecord(name="job1", generation=1, last_batch=0, instant="20260101000000003")
    app = StreamRecord(name="job1", kind=ProducerKind.APP, last_batch=42)
    merged = merge_streams([streams_to_arrow([batch, later]), streams_to_arrow([dropped, app])])
    assert merged[(ProducerKind.STREAM, "job1")] == dropped, "a drop wins over the batch it follows"
    assert merged[(ProducerKind.APP, "job1")] == app, "an app and a stream may share a name"
    assert merge_streams([streams_to_arrow([dropped, restarted])])[(ProducerKind.STREAM, "job1")] == restarted


def test_records_round_trip_through_arrow() -> None:
    record = StreamRecord(name="s", last_batch=3, rows=30, segment="2", started_ms=1, updated_ms=2,
                          instant="20260101000000001")
    assert streams_from_arrow(streams_to_arrow([record])) == [record]
