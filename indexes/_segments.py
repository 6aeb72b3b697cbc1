"""Segment entries: CarbonData's table status, as the ``segments`` partition stores it.

A segment's status only moves forward through a lattice, so merging two entries for one segment is
a join: the higher status wins and the other fields combine with max, union or "the one set".
That makes the merge commutative, associative and idempotent, so log blocks can be folded in any
grouping by compaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, TypeVar

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.timeline import Vocabulary

from ._records import ADDED_LATER

T = TypeVar("T", int, str)


class SegmentStatus(Vocabulary):
    """A segment's status, spelled as CarbonData's table status spells it (and as stored)."""

    INSERT_IN_PROGRESS = "Insert In Progress"
    SUCCESS = "Success"
    STREAMING = "Streaming"
    STREAMING_FINISH = "Streaming Finish"
    COMPACTED = "Compacted"
    MARKED_FOR_DELETE = "Marked for Delete"



#: Position of each status in the lattice. A loaded segment goes Success -> Compacted or Marked
#: for Delete; a streaming one Streaming -> Streaming Finish -> Compacted.
STATUS_RANK: Final = {
    SegmentStatus.INSERT_IN_PROGRESS: 0,
    SegmentStatus.STREAMING: 1,
    # No segment moves between Success and Streaming Finish; giving them distinct ranks keeps
    # the order total, so the merge never depends on argument order.
    SegmentStatus.SUCCESS: 2,
    SegmentStatus.STREAMING_FINISH: 3,
    SegmentStatus.COMPACTED: 4,
    SegmentStatus.MARKED_FOR_DELETE: 5,
}
LIVE_STATUSES: Final = frozenset(
    {SegmentStatus.SUCCESS, SegmentStatus.STREAMING, SegmentStatus.STREAMING_FINISH})


class SegmentEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One segment's status record. Times are epoch milliseconds."""

    id: str
    status: SegmentStatus
    format: str = "parquet"
    external: bool = False
    path: str | None = None
    partitions: tuple[str, ...] = ()
    rows: int = 0
    data_size: int = 0
    index_size: int = 0
    load_start_ms: int = 0
    load_end_ms: int = 0
    merged_to: str | None = None
    #: The instant that created the segment.
    instant: str = ""
    #: The CLEAN FILES instant that removed the last of its files (``Compacted`` and ``Marked for
    #: Delete`` segments only): from then on SHOW SEGMENTS leaves it out and its history lists
    #: it (CarbonData's ``visibility=false``, moved to ``tablestatus.history``). None: visible.
    cleaned: str | None = None

    @property
    def is_live(self) -> bool:
        return self.status in LIVE_STATUSES

    @property
    def visible(self) -> bool:
        """Whether SHOW SEGMENTS lists it (not yet cleaned)."""
        return self.cleaned is None


def merge_segment(a: SegmentEntry, b: SegmentEntry) -> SegmentEntry:
    """Join two records of one segment (commutative, associative, idempotent)."""
    high, low = (a, b) if STATUS_RANK[a.status] >= STATUS_RANK[b.status] else (b, a)
    return SegmentEntry(
        id=a.id,
        status=high.status,
        format=high.format,
        external=high.external or low.external,
        path=high.path or low.path,
        partitions=tuple(sorted(set(a.partitions) | set(b.partitions))),
        rows=max(a.rows, b.rows),
        data_size=max(a.data_size, b.data_size),
        index_size=max(a.index_size, b.index_size),
        load_start_ms=_smallest_set(a.load_start_ms, b.load_start_ms),
        load_end_ms=max(a.load_end_ms, b.load_end_ms),
        merged_to=high.merged_to or low.merged_to,
        instant=_smallest_set(a.instant, b.instant),
        # Only one clean hides a segment (it is no candidate after); the first one set wins so
        # that the join stays idempotent and order-free even if two records disagreed.
        cleaned=_smallest_set(a.cleaned or "", b.cleaned or "") or None,
    )


def _smallest_set(x: T, y: T) -> T:
    """The smaller of two values where an empty value (0, "") means "not set"."""
    return min(x, y) if x and y else x or y


SEGMENTS_SCHEMA: Final = pa.schema([
    ("id", pa.string()),
    ("status", pa.string()),
    ("format", pa.string()),
    ("external", pa.bool_()),
    ("path", pa.string()),
    ("partitions", pa.list_(pa.string())),
    ("rows", pa.int64()),
    ("data_size", pa.int64()),
    ("index_size", pa.int64()),
    ("load_start_ms", pa.int64()),
    ("load_end_ms", pa.int64()),
    ("merged_to", pa.string()),
    ("instant", pa.string()),
    #: Added with segment history: older blocks and bases read it as null (visible).
    pa.field("cleaned", pa.string(), metadata={ADDED_LATER: b"1"}),
])


def segments_to_arrow(entries: Iterable[SegmentEntry]) -> pa.Table:
    rows = [msgspec.structs.asdict(e) for e in sorted(entries, key=lambda e: segment_sort_key(e.id))]
    for row in rows:
        row["partitions"] = list(row["partitions"])
    return pa.Table.from_pylist(rows, schema=SEGMENTS_SCHEMA)


def segments_from_arrow(table: pa.Table) -> list[SegmentEntry]:
    rows = table.to_pylist()
    for row in rows:
        row["partitions"] = row["partitions"] or ()
    return msgspec.convert(rows, list[SegmentEntry])


def merge_segment_tables(tables: list[pa.Table]) -> pa.Table:
    """Merge segment record tables into one table, sorted by id.

    Only ids that appear more than once go through :func:`merge_segment`; the rest (in a base,
    nearly all of them) pass through as Arrow rows, so compaction costs little per segment.
    """
    parts = [t for t in tables if t.num_rows]
    if not parts:
        return SEGMENTS_SCHEMA.empty_table()
    combined = pa.concat_tables(parts)
    counts = combined.group_by("id").aggregate([("id", "count")])
    repeated = counts.filter(pc.greater(counts["id_count"], 1))["id"]
    single = combined.filter(pc.invert(pc.is_in(combined["id"], value_set=repeated)))
    merged = merge_segments([combined.filter(pc.is_in(combined["id"], value_set=repeated))])
    result = pa.concat_tables([single, segments_to_arrow(merged.values())])
    return result.sort_by([("id", "ascending")])


def max_load_id(segment_ids: Iterable[str]) -> int:
    """The largest load number among segment ids ("12" and "12.1" both count as 12); -1 if none."""
    return max((int(i.split(".", 1)[0]) for i in segment_ids), default=-1)


def merge_segments(tables: Iterable[pa.Table],
                   into: dict[str, SegmentEntry] | None = None) -> dict[str, SegmentEntry]:
    """Merge segment records into ``into`` (a fresh dict if None) and return it."""
    merged = {} if into is None else into
    for table in tables:
        for entry in segments_from_arrow(table):
            held = merged.get(entry.id)
            merged[entry.id] = entry if held is None else merge_segment(held, entry)
    return merged


def segment_sort_key(segment_id: str) -> tuple[int, ...]:
    """Order ids numerically: 2 < 10, and 0 < 0.1 < 0.2 < 1 (compaction levels)."""
    return tuple(int(part) for part in segment_id.split("."))
