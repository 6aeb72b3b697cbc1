"""DELETE SEGMENT: mark segments ``Marked for Delete`` in one commit (CarbonData's
``SegmentStatusManager.updateDeletionStatus``, by id or by load start time).

Only metadata changes, as in CarbonData: the segments' entries become Marked for Delete and their
live data files, column statistics and delete deltas are tombstoned in the metadata table, so
readers (which read live files only) stop seeing the rows at once while time travel to an earlier
instant still does. No file is removed here; CLEAN FILES does that later, and never removes the
files of an external segment.

One delete is one ``replacecommit`` instant, in three steps, each able to refuse before anything
that matters is written:

1. read the latest state and select the segments (``_selection``'s pure rules);
2. ``begin``, under the lock on the recovered timeline (``admit``): refuse if a running write (a
   compaction, or another delete) reads one of them, check again that each is still deletable,
   and record them as the plan's ``sources`` so that compactions and deletes that begin later
   leave them alone;
3. the commit, under the lock: re-read the segments and check a last time (a commit that did not
   honour the plan's sources may have completed meanwhile), then mark and tombstone.

A write that read a deleted segment's files before this commit and commits after it (an upsert,
delete or update of its rows) conflicts: this commit's ``files_removed`` counts as touched by
``_commit``'s conflict check.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Final, NoReturn

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from metatxn.indexes import (
    DELETES_SCHEMA,
    FILES_SCHEMA,
    MetadataChanges,
    SegmentEntry,
    SegmentStatus,
    assign_ids,
    column_stats_schema,
    live,
)
from metatxn.indexes import tombstones as tombstone_rows
from metatxn.timeline import (
    Action,
    CommitConflictError,
    InvalidOptionError,
    Lease,
    SegmentNotFoundError,
    TimelineView,
    TxnError,
    parse_time,
)

from .._commit import Pending, Write, commit
from .._context import (
    DATA_ACTIONS,
    LATEST_PARTITIONS,
    CommitMetadata,
    TableContext,
    plan_segments,
)
from .._files import LiveDeltas
from .._results import Commit, Operation
from ._running import refuse_held, running_plans
from ._selection import select_delete_before, select_delete_by_id

__all__ = ["delete_segments"]

OPERATION: Final = Operation.DELETE_SEGMENTS
ACTION: Final = Action.REPLACECOMMIT
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
#: The statuses a delete marks (a running load's Insert In Progress is refused separately).
_DELETABLE: Final = frozenset(
    {SegmentStatus.SUCCESS, SegmentStatus.STREAMING_FINISH, SegmentStatus.INSERT_IN_PROGRESS})


def delete_segments(context: TableContext, ids: Any = None, *,
                    before: datetime | None = None) -> Commit:
    """Mark segments ``Marked for Delete`` in one commit; return it.

    ``ids``: a list of segment ids (``"0.1"`` or ``3``), all or nothing. ``before``: every
    Success or Streaming Finish segment whose load started before this moment (naive is UTC).
    Exactly one of the two.

    Raises:
        InvalidOptionError: neither or both arguments, arguments of the wrong type, a table
            without segments, or a segment whose status forbids deleting it.
        SegmentNotFoundError: an id that does not exist or was already deleted; or no segment
            loaded before ``before``.
        CommitConflictError: a running compaction (or delete) reads one of the segments, or a
            concurrent commit changed one of them; nothing was written.
    """
    before_ms = _arguments(ids, before)
    view = context.timeline.load()
    last = view.last_completed()
    read_at = last.completed_at if last else None
    entries, live_loads = _entries(context, view)
    if before is None:
        try:
            targets = select_delete_by_id(entries, ids, live_loads)
        except SegmentNotFoundError:
            if entries:
                raise
            # The ids are well formed (a malformed list is refused above), but there is nothing.
            _refuse_empty(context)
    else:
        committed = len(entries) - len(live_loads)
        if not committed:
            _refuse_empty(context)
        assert before_ms is not None
        targets = select_delete_before(entries.values(), before_ms)
        if not targets:
            raise SegmentNotFoundError(
                f"delete segment by date found nothing to delete: none of the {committed} "
                f"segment(s) checked is a Success or Streaming Finish segment loaded before "
                f"{_moment(before)}; nothing was deleted")
    refuse_held(context, view, targets, refused="delete segment", nothing="nothing was deleted")

    return commit(context, DeleteSegments(targets=targets, seen_at=read_at))


# -- arguments -------------------------------------------------------------------------------------


def _arguments(ids: Any, before: Any) -> int | None:
    """Check that exactly one of ``ids`` and ``before`` is given; return ``before`` in epoch ms
    (rounded up, so that a load at a whole millisecond compares exactly with a finer moment)."""
    if (ids is None) == (before is None):
        given = "both" if ids is not None else "neither"
        raise InvalidOptionError(
            f"delete segment needs exactly one of ids and before, got {given}; expected "
            "delete_segments(['0', '3']) (by id) or delete_segments(before=datetime(...)) (by date)")
    if ids is not None:
        # select_delete_by_id refuses a bare string and ids of the wrong type; this is the one
        # case it cannot word: something that is not a collection at all.
        if not isinstance(ids, Iterable):
            raise InvalidOptionError(
                f"segment ids for delete segment must be a list of ids, got the "
                f"{type(ids).__name__} {ids!r}; pass [{ids!r}] for one id")
        return None
    if not isinstance(before, datetime):
        raise InvalidOptionError(
            f"before for delete segment must be a datetime.datetime (naive means UTC), got the "
            f"{type(before).__name__} {before!r}")
    moment = before if before.tzinfo is not None else before.replace(tzinfo=timezone.utc)
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return -(-micros // 1000)  # ceiling, in integers


def _refuse_empty(context: TableContext) -> NoReturn:
    raise InvalidOptionError(
        f"delete segment: table {context.uri} has no segments yet, so there is nothing to "
        "delete; expected a table with at least one loaded segment")


def _moment(before: datetime) -> str:
    zone = "" if before.tzinfo is not None else " (UTC)"
    return f"{before.isoformat()}{zone}"


# -- what is there ---------------------------------------------------------------------------------


def _entries(context: TableContext, view: TimelineView) -> tuple[dict[str, SegmentEntry], set[str]]:
    """The latest segment entries, with the loads still running as ``Insert In Progress``
    entries (as SHOW SEGMENTS shows them); and the ids of those running loads.

    A pending load whose writer stopped beating is left out: recovery rolls it back (and so
    erases it) before this delete begins.
    """
    entries = dict(context.metadata_at(view, None, LATEST_PARTITIONS).segments or {})
    running: set[str] = set()
    for instant, plan in running_plans(context, view):
        for segment in plan_segments(plan):
            if segment not in entries:
                entries[segment] = SegmentEntry(
                    id=segment, status=SegmentStatus.INSERT_IN_PROGRESS, instant=instant.time,
                    load_start_ms=parse_time(instant.time))
                running.add(segment)
    return entries, running


def _recheck(context: TableContext, view: TimelineView, targets: list[str], read_at: str | None,
             *, when: str) -> None:
    """Check under the lock that every target is still deletable.

    A target that changed since ``read_at`` (a concurrent delete, overwrite or compaction
    committed) is a conflict naming that commit and what the segment is now.
    """
    entries, running = _entries(context, view)
    try:
        select_delete_by_id(entries, targets, running)
    except (InvalidOptionError, SegmentNotFoundError):
        changed = [f"segment {i} is now {_now(entries.get(i))}" for i in targets
                   if entries.get(i) is None or entries[i].status not in _DELETABLE]
        others = _changed_by(context, view, read_at, targets)
        raise CommitConflictError(
            f"delete segment of {targets} conflicts with {', '.join(others) or 'a commit'}, which "
            f"completed {when}, after this delete read the table at {read_at or 'its creation'}: "
            f"{'; '.join(changed) or 'a segment is now being written'}; nothing was deleted\n"
            "Help: look at t.segments() and retry with the segments that are still there") from None


def _now(entry: SegmentEntry | None) -> str:
    if entry is None:
        return "gone"
    if entry.merged_to:
        return f"{entry.status} into {entry.merged_to}"
    return entry.status


def _changed_by(context: TableContext, view: TimelineView, read_at: str | None,
                targets: Iterable[str]) -> list[str]:
    """The data commits after ``read_at`` that removed one of ``targets`` (else all of them)."""
    wanted = set(targets)
    after = [i for i in view.completed_after(read_at or "") if i.action in DATA_ACTIONS]
    named = []
    for instant in after:
        try:
            metadata = context.timeline.read_metadata(instant, CommitMetadata)
        except TxnError:
            continue  # only for the message: a commit we cannot read is named below anyway
        # A compaction records its sources as merged, a delete or overwrite as removed.
        if wanted & {*metadata.segments_removed, *metadata.segments_merged}:
            named.append(f"{metadata.operation} {instant.time}")
    return named or [f"{i.action} {i.time}" for i in after]


# -- the commit ------------------------------------------------------------------------------------


@dataclass
class DeleteSegments(Write):
    """DELETE SEGMENT (a table service): ``targets`` become ``Marked for Delete``.

    Segments: none allocated; the targets are its ``sources`` (recorded in its plan, so later
    compactions and deletes leave them alone). Lock: heartbeat. Admission, under the lock on
    the recovered timeline: no running write (a compaction, another delete) holds a target,
    and each is still deletable. Conflicts: a commit completed since ``seen_at`` (the
    completion time of the state the targets were selected from; the plan records no
    ``read_at``: the commit reads the latest state under the lock) that left a target
    undeletable (another delete, an overwrite, a compaction) fails it; appends, row writes and
    ADD SEGMENT pass. A row write that read a target's files and commits after it conflicts
    the other way (its ``files_removed``). Records: the targets marked, their live files,
    statistics and deltas tombstoned; no file is written or removed.
    """

    targets: list[str]
    seen_at: str | None
    operation = OPERATION

    @property
    def action(self) -> str:
        return ACTION

    def sources(self) -> list[str]:
        return list(self.targets)

    def admit(self, context: TableContext, view: TimelineView) -> None:
        # Under the lock, after dead writers were rolled back: the definitive checks.
        refuse_held(context, view, self.targets, refused="delete segment",
                    nothing="nothing was deleted")
        _recheck(context, view, self.targets, self.seen_at, when="before it began")

    def check(self, context: TableContext, view: TimelineView, pending: Pending, written: None) -> None:
        _recheck(context, view, self.targets, self.seen_at, when="while it ran")

    def record(self, context: TableContext, view: TimelineView, pending: Pending, written: None, *,
               lease: Lease, extra: dict[str, str] | None,
               retries: int) -> tuple[MetadataChanges, CommitMetadata]:
        targets, read_at = self.targets, self.seen_at
        current = context.metadata_at(view, None, LATEST_PARTITIONS)
        assert current.files is not None and current.segments is not None
        chosen = set(targets)
        # Every target is a committed segment here (a running load cannot pass the recheck).
        marked = [msgspec.structs.replace(current.segments[i], status=SegmentStatus.MARKED_FOR_DELETE)
                  for i in targets]
        files = live(current.files)
        files = files.filter(pc.is_in(files["segment"], value_set=pa.array(sorted(chosen), pa.string())))
        removed_files = files["path"].to_pylist()
        deltas = LiveDeltas.of(context.store, current.deletes)
        removed_deltas = [path for file in removed_files for path in deltas.paths(file)]
        rows = sum(files["rows"].to_pylist()) - sum(deltas.rows(file) for file in removed_files)
        # External segments are marked like the others; their files are only tombstoned here,
        # and CLEAN FILES never removes them.
        changes = MetadataChanges(
            files=tombstone_rows(FILES_SCHEMA, removed_files),
            column_stats=tombstone_rows(column_stats_schema(assign_ids(context.schema)), removed_files),
            segments=marked,
            deletes=tombstone_rows(DELETES_SCHEMA, removed_deltas),
        )
        metadata = CommitMetadata(
            operation=OPERATION, segments_removed=list(targets), files_removed=removed_files,
            deltas_removed=removed_deltas, rows_deleted=rows, read_at=read_at,
        )
        return changes, metadata
