"""What ``txn`` stores on the timeline (plans, commit metadata) and returns to users."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

import msgspec

from indexes import SegmentEntry
from timeline import parse_time

from .._files import DeltaStatus, FileStatus
from ._display import load_time_taken, segment_size

#: The actions of instants that change the table's data (a rollback or a clean does not).
DATA_ACTIONS = frozenset({"commit", "replacecommit", "compaction"})

#: The operation of a compaction's commits (a table service: see ``_conflicts``).
COMPACT = "compact"

#: Operations that only add new rows (never read, delete or rewrite existing ones): they conflict
#: only with a concurrent commit of the same keys, which is a duplicate key.
INSERTS = frozenset({"append", "add_segment", "stream"})

#: Operations and the timeline action each one commits as.
ACTION_OF = {
    "append": "commit",
    "add_segment": "commit",
    "stream": "commit",
    "drop_stream": "commit",
    "overwrite": "replacecommit",
    "upsert": "commit",
    "delete": "commit",
    "update": "commit",
    COMPACT: "compaction",
}


class WritePlan(msgspec.Struct, frozen=True, kw_only=True, tag="write_plan", tag_field="kind"):
    """The plan in a data instant's ``requested`` file."""

    operation: str
    #: The segment this write creates, allocated under the table lock when it began.
    segment: str | None = None
    #: Every segment it creates when it creates more than one (ADD SEGMENT of a partitioned
    #: folder: one per partition folder), ``segment`` first; empty otherwise.
    segments: list[str] = msgspec.field(default_factory=list)
    #: The segments it reads and replaces (a compaction's inputs): while it runs, DELETE
    #: SEGMENT refuses them and other compactions skip them.
    sources: list[str] = msgspec.field(default_factory=list)
    #: Completion time of the snapshot the write read (None: it read nothing). CLEAN FILES keeps
    #: what that snapshot needs while the write runs.
    read_at: str | None = None
    extra: dict[str, str] = msgspec.field(default_factory=dict)


def plan_segments(plan: WritePlan) -> list[str]:
    """The segments a write creates (or names, a compaction's target), as its plan records."""
    return list(plan.segments) or ([plan.segment] if plan.segment is not None else [])


class CommitMetadata(msgspec.Struct, frozen=True, kw_only=True, tag="commit", tag_field="kind"):
    """The payload of a completed data instant (format version 1)."""

    operation: str
    segment: str | None = None
    files_added: list[FileStatus] = msgspec.field(default_factory=list)
    files_removed: list[str] = msgspec.field(default_factory=list)
    segments_removed: list[str] = msgspec.field(default_factory=list)
    #: The segments a compaction merged into ``segment`` (now ``Compacted``).
    segments_merged: list[str] = msgspec.field(default_factory=list)
    rows_added: int = 0
    rows_deleted: int = 0
    #: Caller-supplied key/value metadata (streaming records its batch ids here).
    extra: dict[str, str] = msgspec.field(default_factory=dict)
    #: Delete deltas written, and older deltas they replaced (horizontal compaction).
    deltas_added: list[DeltaStatus] = msgspec.field(default_factory=list)
    deltas_removed: list[str] = msgspec.field(default_factory=list)
    #: Record-index shards this commit wrote entries to (its touched keys are found there).
    index_shards: list[int] = msgspec.field(default_factory=list)
    #: Completion time of the snapshot the write read (its conflicts are checked against
    #: everything that completed after it); None when it read nothing.
    read_at: str | None = None
    #: How often the write was planned again because a table service (a compaction) completed
    #: while it ran and replaced files it had read.
    retries: int = 0


#: The action of a CLEAN FILES instant, and where it moves what it removes.
CLEAN_ACTION = "clean"
TRASH_FOLDER = "_trash"
#: The reason of a plan entry deleted for good (trash older than ``clean.trash_hours``).
EXPIRED_TRASH = "expired_trash"
#: Why a file is in the plan (``CleanEntry.reason``).
COMPACTED_FILE = "compacted"
MARKED_FILE = "marked_for_delete"
REMOVED_FILE = "removed"
REPLACED_DELTA = "replaced_delta"
ORPHAN = "orphan"
#: A file whose record a completed clean purged, still on storage: that clean died between its
#: commit point and deleting it (or the file was put back by hand).
LEFTOVER = "leftover"
#: The reasons whose files go to the trash (CarbonData's stale segments: files of no segment);
#: every other planned file is deleted for good, expired trash before the commit point, the
#: files of expired segments and replaced deltas after it (their records purged first).
TRASHED_REASONS = frozenset({ORPHAN})


def trash_folder(instant_time: str) -> str:
    """Where clean ``instant_time`` moves files: ``_trash/<T>/<table-relative path>``."""
    return f"{TRASH_FOLDER}/{instant_time}"


class CleanEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One file of a clean's plan."""

    #: Table-relative path (for expired trash: the path in ``_trash/``).
    path: str
    size: int
    #: compacted, marked_for_delete, removed, replaced_delta, orphan or expired_trash.
    reason: str
    #: Completion time of the commit that removed it (removed files and deltas only).
    removed_at: str | None = None
    #: The metadata partition that lists it, whose record the clean purges: ``files`` (and its
    #: statistics), ``deletes``, or None (orphans, trash).
    record: str | None = None


class CleanPlan(msgspec.Struct, frozen=True, kw_only=True, tag="clean_plan", tag_field="kind"):
    """The plan in a clean instant's ``requested`` file: what it moves to ``_trash/<T>/`` (or
    deletes for good), so that a clean that dies is undone from it by the next writer. (Plans
    written before direct deletion moved every file to the trash; their undo is the same.)"""

    files: list[CleanEntry] = msgspec.field(default_factory=list)
    #: The time-travel floor the clean publishes before it moves anything (the newest removal it
    #: cleans); None when it cleans no removed file.
    floor: str | None = None
    #: The retention floor it decided by: removals completed at or before it may go.
    retained_from: str = ""
    force: bool = False
    #: The ``Compacted`` and ``Marked for Delete`` segments that leave SHOW SEGMENTS for its
    #: history with this clean: every file record of theirs is purged by it or before (external
    #: files: removed past retention, never deleted).
    segments: list[str] = msgspec.field(default_factory=list)


@dataclass(frozen=True)
class Commit:
    """The outcome of one write: one completed instant."""

    instant: str
    completed_at: str
    operation: str
    segment: str | None
    files_added: int
    rows_added: int
    rows_deleted: int
    #: Table-relative paths of the data files the commit added.
    paths_added: tuple[str, ...] = ()
    extra: dict[str, str] = field(default_factory=dict)
    #: Times the write was re-planned after a compaction replaced files it had read.
    retries: int = 0
    #: Segments the commit marked ``Marked for Delete`` (DELETE SEGMENT, overwrite), and the
    #: segments a compaction merged into ``segment`` (now ``Compacted``).
    segments_removed: tuple[str, ...] = ()
    segments_merged: tuple[str, ...] = ()


@dataclass(frozen=True)
class MaintenanceReport:
    """What one run of table maintenance (``Table.maintain()``) did."""

    #: The metadata compaction it completed (its instant time), or None.
    compaction: str | None = None
    #: Metadata files cleaning deleted (superseded bases and folded log blocks).
    metadata_files_cleaned: int = 0
    #: Instants moved to the archive, data and metadata timelines together.
    instants_archived: int = 0
    #: Markers of decided instants that were swept.
    markers_swept: int = 0
    #: Why nothing was compacted although it was due, if so (another compaction is running).
    skipped: str | None = None


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


def _moment(epoch_ms: int) -> datetime | None:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=timezone.utc) if epoch_ms else None


@dataclass(frozen=True)
class Segment:
    """One row of SHOW SEGMENTS."""

    id: str
    status: str
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


@dataclass(frozen=True)
class Problem:
    """One disagreement between the metadata table and storage."""

    kind: str
    path: str
    detail: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.path}: {self.detail}"


@dataclass(frozen=True)
class ValidationReport:
    """What :meth:`Table.validate` found; ``ok`` when there are no problems."""

    problems: list[Problem]
    files_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            return f"ok: {self.files_checked} files agree with the metadata table"
        return "\n".join(str(p) for p in self.problems)
