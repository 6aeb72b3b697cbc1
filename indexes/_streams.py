"""Progress records of the producers that write a table exactly once: streams (``t.stream``,
``txn.spark.write_stream``) and idempotent writers (``app_id`` and ``version`` on any write), as
the ``streams`` partition stores them.

One record per name holds everything a producer needs to decide whether a batch was committed:
its last committed batch id (a stream's micro-batch, an app's version), so a replay is checked
against one record, whatever the table's history. Records of one name merge by taking the one
furthest along: highest ``generation`` (a dropped stream started again), then highest
``last_batch``, then the dropped one; that order is a total order on what one name can be, so the
merge is commutative, associative and idempotent, and log blocks fold in any grouping.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec
import pyarrow as pa

from metatxn.timeline import Vocabulary


class ProducerKind(Vocabulary):
    """What kind of producer a record tracks."""

    #: A stream (``t.stream``, ``txn.spark.write_stream``): its batch ids.
    STREAM = "stream"
    #: An idempotent writer (``app_id`` and ``version`` on any write): its versions.
    APP = "app"


class StreamStatus(Vocabulary):
    """A stored status: a stream is active until dropped. (Whether its query runs now, SHOW
    STREAMS's Running or Stopped, is the writing process's to know, not the table's.)"""

    ACTIVE = "Active"
    DROPPED = "Dropped"


_STATUS_RANK: Final = {StreamStatus.ACTIVE: 0, StreamStatus.DROPPED: 1}

#: The largest batch id (or version) a record holds: ``last_batch`` is stored as an int64.
MAX_BATCH: Final = 2**63 - 1


class StreamRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One producer's progress. Times are epoch milliseconds."""

    name: str
    kind: ProducerKind = ProducerKind.STREAM
    #: Bumped each time a dropped stream's name is started again.
    generation: int = 0
    #: The last committed batch id (a stream) or version (an app); -1 before the first.
    last_batch: int = -1
    #: Rows the producer committed in all (this generation).
    rows: int = 0
    #: A stream's open segment (``Streaming``), None when it has none.
    segment: str | None = None
    status: StreamStatus = StreamStatus.ACTIVE
    started_ms: int = 0
    updated_ms: int = 0
    #: The instant that wrote this record.
    instant: str = ""

    @property
    def order(self) -> tuple[int, int, int, str]:
        return (self.generation, self.last_batch, _STATUS_RANK[self.status], self.instant)


STREAMS_SCHEMA: Final = pa.schema([
    ("name", pa.string()),
    ("kind", pa.string()),
    ("generation", pa.int64()),
    ("last_batch", pa.int64()),
    ("rows", pa.int64()),
    ("segment", pa.string()),
    ("status", pa.string()),
    ("started_ms", pa.int64()),
    ("updated_ms", pa.int64()),
    ("instant", pa.string()),
])


def streams_to_arrow(records: Iterable[StreamRecord]) -> pa.Table:
    rows = [msgspec.structs.asdict(r) for r in sorted(records, key=lambda r: (r.kind, r.name))]
    return pa.Table.from_pylist(rows, schema=STREAMS_SCHEMA)


def streams_from_arrow(table: pa.Table) -> list[StreamRecord]:
    return msgspec.convert(table.to_pylist(), list[StreamRecord])


#: Records are keyed by kind and name: a stream and an app may share a name.
StreamKey = tuple[str, str]


def merge_streams(tables: Iterable[pa.Table],
                  into: dict[StreamKey, StreamRecord] | None = None) -> dict[StreamKey, StreamRecord]:
    """Merge stream records into ``into`` (a fresh dict if None) and return it: per kind and
    name, the record furthest along."""
    merged = {} if into is None else into
    for table in tables:
        for record in streams_from_arrow(table):
            key = (record.kind, record.name)
            held = merged.get(key)
            if held is None or record.order > held.order:
                merged[key] = record
    return merged


def merge_stream_tables(tables: list[pa.Table]) -> pa.Table:
    """Merge record tables into one (a base), sorted by name."""
    return streams_to_arrow(merge_streams(tables).values())
