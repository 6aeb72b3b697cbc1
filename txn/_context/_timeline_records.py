"""What ``txn`` stores on the timeline: the plans and commit metadata of its instants."""

from __future__ import annotations

from typing import Final

import msgspec

from metatxn.timeline import Action

from .._files import DeltaStatus, FileStatus
from .._results import CleanReason, Operation

#: The actions of instants that change the table's data (a rollback or a clean does not).
DATA_ACTIONS: Final = frozenset({Action.COMMIT, Action.REPLACECOMMIT, Action.COMPACTION})

#: Operations that only add new rows (never read, delete or rewrite existing ones): they conflict
#: only with a concurrent commit of the same keys, which is a duplicate key.
INSERTS: Final = frozenset({Operation.APPEND, Operation.ADD_SEGMENT, Operation.STREAM})

#: Operations and the timeline action each one commits as (DELETE SEGMENT names its own).
ACTION_OF: Final[dict[str, Action]] = {
    Operation.APPEND: Action.COMMIT,
    Operation.ADD_SEGMENT: Action.COMMIT,
    Operation.STREAM: Action.COMMIT,
    Operation.DROP_STREAM: Action.COMMIT,
    Operation.OVERWRITE: Action.REPLACECOMMIT,
    Operation.UPSERT: Action.COMMIT,
    Operation.DELETE: Action.COMMIT,
    Operation.UPDATE: Action.COMMIT,
    Operation.MERGE: Action.COMMIT,
    #: Several writes in one instant (``Table.transaction``); a ``commit`` even when it begins
    #: with an overwrite: its ``files_removed`` and ``segments_removed`` say what it replaced.
    Operation.TRANSACTION: Action.COMMIT,
    Operation.COMPACT: Action.COMPACTION,
    #: A schema or property change: a commit with no file (``CommitMetadata.schema_version``).
    Operation.ALTER_TABLE: Action.COMMIT,
}



class WritePlan(msgspec.Struct, frozen=True, kw_only=True, tag="write_plan", tag_field="kind"):
    """The plan in a data instant's ``requested`` file."""

    operation: Operation
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

    operation: Operation
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
    #: A transaction (``operation`` is ``transaction``): the operations it ran, in order (e.g.
    #: ``["delete", "append"]``). Empty for a single write, and in commits written before it.
    operations: list[str] = msgspec.field(default_factory=list)
    #: The table version this commit created (a schema or property change, or a write with
    #: ``schema_mode="merge"`` that changed the schema); None when it created none.
    schema_version: int | None = None
    #: An idempotent write's producer and version (``app_id=``/``version=``), which the metadata
    #: table's producer records keep only for the newest version; None for other writes and in
    #: commits written before these fields (readers of those ignore them).
    app_id: str | None = None
    app_version: int | None = None


#: The reasons whose files go to the trash (CarbonData's stale segments: files of no segment);
#: every other planned file is deleted for good, expired trash before the commit point, the
#: files of expired segments and replaced deltas after it (their records purged first).
TRASHED_REASONS: Final = frozenset({CleanReason.ORPHAN})


class CleanEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One file of a clean's plan."""

    #: Table-relative path (for expired trash: the path in ``_trash/``).
    path: str
    size: int
    #: Any but the two ``CleanResult``-only reasons (metadata, temporary).
    reason: CleanReason
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
