"""Rows of the listings a table gives: its live data files and SHOW SEGMENTS."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import msgspec

from metatxn.indexes import SegmentEntry, SegmentStatus
from metatxn.timeline import parse_time

from ._display import load_time_taken, segment_size


class DataFile(msgspec.Struct, frozen=True, gc=False):
    """A live data file of a snapshot.

    (``gc=False``: a listing can hold many thousands of these, and they never form reference
    cycles, so the garbage collector need not scan them.)
    """

    #: Where the file is: the table location joined with its table-relative path.
    path: str
    segment: str
    rows: int
    size: int
    format: str = "parquet"
    #: Rows of the file deleted by delete deltas (``rows - deleted_rows`` are live).
    deleted_rows: int = 0
    #: Partition column values, e.g. ``{"o_orderstatus": "F"}``; empty when unpartitioned.
    partition: dict[str, object] = msgspec.field(default_factory=dict)
    #: Locations of the file's live delete deltas (each a Parquet file of row positions).
    delete_files: tuple[str, ...] = ()
    #: Whether it is an external segment's file (ADD SEGMENT: read in place, ``path`` its URL).
    external: bool = False
    #: The table version whose schema the file was written with (``Table.schema_history()``):
    #: its columns have that version's names; ``FileReader.read`` maps them by column id.
    schema_id: int = 0


def _moment(epoch_ms: int) -> datetime | None:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc) if epoch_ms else None


@dataclass(frozen=True)
class Segment:
    """One row of SHOW SEGMENTS."""

    id: str
    status: SegmentStatus
    format: str
    external: bool
    path: str | None
    partitions: list[str]
    rows: int
    data_size: int
    index_size: int
    load_start: datetime | None
    load_end: datetime | None
    merged_to: str | None
    instant: str
    #: The CLEAN FILES instant that removed its files, and when that clean began: set only on the
    #: entries of SHOW SEGMENTS' history (``t.segments(history=True)``); None while visible.
    cleaned_instant: str | None = None
    cleaned: datetime | None = None

    @property
    def visible(self) -> bool:
        """Whether plain SHOW SEGMENTS lists it (CarbonData's ``Visibility``)."""
        return self.cleaned_instant is None

    @property
    def load_time_taken(self) -> str:
        """SHOW SEGMENTS' Load Time Taken as CarbonData prints it: ``7.026S``, ``1M3.2S``, ``NA``
        while the load runs."""
        return load_time_taken(self.load_start, self.load_end)

    @property
    def data_size_text(self) -> str:
        """SHOW SEGMENTS' Data Size as CarbonData prints it: ``912.0B``, ``1.23KB``, ..."""
        return segment_size(self.data_size)

    @property
    def index_size_text(self) -> str:
        """SHOW SEGMENTS' Index Size as CarbonData prints it (``NA`` for an external segment,
        which has no index files)."""
        return "NA" if self.external else segment_size(self.index_size)

    @classmethod
    def from_entry(cls, entry: SegmentEntry) -> Segment:
        return cls(
            id=entry.id, status=entry.status, format=entry.format, external=entry.external,
            path=entry.path, partitions=list(entry.partitions), rows=entry.rows,
            data_size=entry.data_size, index_size=entry.index_size,
            load_start=_moment(entry.load_start_ms), load_end=_moment(entry.load_end_ms),
            merged_to=entry.merged_to, instant=entry.instant, cleaned_instant=entry.cleaned,
            cleaned=_moment(parse_time(entry.cleaned)) if entry.cleaned else None,
        )
