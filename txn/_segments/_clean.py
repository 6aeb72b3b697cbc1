"""CLEAN FILES (``t.clean``): remove what no retained snapshot needs, as CarbonData does.

A clean is an instant with action ``clean`` (not a data action: it changes no snapshot's rows):

1. plan, without the lock (``_clean_plan``): the removed files past retention, leftovers,
   orphans and expired trash, with their sizes, and the segments that leave SHOW SEGMENTS;
2. ``begin``, under the lock: refuse if another clean is running (its instant pending, its
   heartbeat live); write the plan as the instant's ``requested`` file;
3. publish the new time-travel floor (``retention.json``, under the lock) *before* anything
   moves, so time travel past it raises ``SnapshotExpiredError`` instead of missing a file;
4. move each orphan (CarbonData's stale segment data) to ``_trash/<T>/<path>`` (one that is
   gone already is skipped) and delete for good the expired trash;
5. commit, under the lock: clean the metadata table's old bases and blocks and sweep the markers
   of decided instants (as the maintenance after a commit does), delete the temporary files of
   writers killed inside a put (local disk), then a metadata delta purging the planned paths
   from ``files``, ``column_stats`` and ``deletes`` and marking the planned segments cleaned
   (they leave SHOW SEGMENTS for its history), then the completed instant;
6. after the commit point, delete for good the files of expired ``Compacted`` and ``Marked for
   Delete`` segments, replaced deltas and leftovers (CarbonData deletes these directly, after
   writing its table status and releasing the lock). Best effort: what a failure or a crash
   leaves is a leftover (purged record, file on storage) that the next clean deletes.

An error before the commit point rolls the clean back, and a clean that dies is rolled back by
the next writer once its heartbeat expires: the rollback moves every file of the plan that is in
``_trash/<T>/`` back where it was (``Protocol._undo_clean``); nothing else was touched yet, so
the table is as it was. The trash keeps orphans ``clean.trash_hours``; ``force`` empties it.

The crash argument is in design/segments.md ("CLEAN FILES").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from metatxn.indexes import (
    DELETES,
    DELETES_SCHEMA,
    FILES,
    FILES_SCHEMA,
    SEGMENTS,
    MetadataChanges,
    RetentionSource,
    SegmentEntry,
    SegmentStatus,
    assign_ids,
    column_stats_schema,
    purges,
)
from metatxn.timeline import (
    Action,
    CommitConflictError,
    Lease,
    ObjectNotFoundError,
    RollbackPlan,
    Storage,
    StorageError,
    TimelineView,
    TxnError,
    leftover_temporaries,
    move,
)

from .._commit import Pending, Protocol, Write, protocol_of, run
from .._context import (
    DATA_ACTIONS,
    TRASHED_REASONS,
    CleanEntry,
    CleanPlan,
    TableContext,
    progress,
)
from .._files import PUT_FOLDERS, trash_folder
from .._results import CleanReason
from ._clean_plan import plan_clean
from ._clean_retention import HOUR_MS

log = logging.getLogger("metatxn")



@dataclass(frozen=True)
class CleanResult:
    """What a clean removed (or, in a dry run, would remove)."""

    #: Table-relative paths removed from their place, sorted: deleted for good (files of expired
    #: segments, replaced delete deltas, leftovers, expired trash, old files of the metadata
    #: table, temporaries) or moved to the trash (``trashed``).
    files: list[str]
    #: Their total size in bytes (``freed_bytes + trashed_bytes``).
    bytes: int
    #: The clean instant's time; None for a dry run or when there was nothing to do.
    instant: str | None = None
    #: The trash folder files were moved to (``_trash/<instant>``), if any were.
    trash: str | None = None
    dry_run: bool = False
    #: Per reason (compacted, marked_for_delete, replaced_delta, removed, leftover, orphan,
    #: expired_trash, metadata, temporary): how many files.
    reasons: dict[str, int] = field(default_factory=dict)
    #: Bytes deleted for good: the space this clean freed (CarbonData's ``Size Freed``).
    freed_bytes: int = 0
    #: The paths (table-relative, before the move) moved to ``trash``: orphans, files no record
    #: names (CarbonData's stale segments). They take space until the trash expires.
    trashed: list[str] = field(default_factory=list)
    trashed_bytes: int = 0
    #: The segments that left SHOW SEGMENTS for its history (``t.segments(history=True)``).
    segments: list[str] = field(default_factory=list)


class CleanMetadata(msgspec.Struct, frozen=True, kw_only=True, tag="clean", tag_field="kind"):
    """The payload of a completed clean instant."""

    #: Table-relative paths moved to ``_trash/<T>/``.
    moved: list[str] = msgspec.field(default_factory=list)
    #: Paths in ``_trash/`` deleted for good (older than clean.trash_hours).
    deleted: list[str] = msgspec.field(default_factory=list)
    #: Old bases and blocks of the metadata table deleted.
    metadata_deleted: list[str] = msgspec.field(default_factory=list)
    #: Temporary files of writers killed inside a put, deleted (see ``_leftover_temporaries``).
    temporaries_deleted: list[str] = msgspec.field(default_factory=list)
    bytes: int = 0
    #: The time-travel floor published (None: unchanged).
    floor: str | None = None
    #: Table-relative paths purged here and deleted for good just after the commit point (files
    #: of expired segments, replaced deltas, leftovers). Cleans before this field moved them.
    removed: list[str] = msgspec.field(default_factory=list)
    #: The segments this clean marked cleaned (they left SHOW SEGMENTS for its history).
    segments_cleaned: list[str] = msgspec.field(default_factory=list)


@dataclass
class _Done:
    """What the write phase of a clean did."""

    moved: list[CleanEntry] = field(default_factory=list)
    deleted: list[CleanEntry] = field(default_factory=list)


@dataclass
class _Swept:
    """What a clean deleted besides its plan, under the lock, with sizes."""

    metadata: dict[str, int] = field(default_factory=dict)
    temporaries: dict[str, int] = field(default_factory=dict)

    def bytes(self) -> int:
        return sum(self.metadata.values()) + sum(self.temporaries.values())


def clean(context: TableContext, *, dry_run: bool = False, force: bool = False) -> CleanResult:
    """CLEAN FILES; see :meth:`txn.Table.clean`."""
    storage = context.storage
    protocol = protocol_of(context)
    if not dry_run and context.timeline.expired(context.timeline.load()):
        # Roll dead writers back first (as any writer's begin would), so that what a rollback
        # cannot delete (a file whose marker is damaged) is an orphan of this clean already.
        with context.timeline.lock() as lease:
            protocol.recover(lease)
    plan = plan_clean(context, force=force).plan
    direct = [e for e in plan.files if _after_commit(e)]
    if dry_run:
        view = context.timeline.load()
        old = context.metadata.cleanable(_writes(view))
        return _result(plan.files, _Swept(_sized(storage, old), _leftover_temporaries(context, delete=False)),
                       segments=plan.segments, dry_run=True)
    if not plan.files and not plan.segments:
        with context.timeline.lock() as lease:
            return _result([], _clean_metadata(context, protocol, lease))
    write = CleanFiles(plan=plan, direct=direct, protocol=protocol)
    completed, _ = run(context, write)
    outcome, swept, hidden = write.done, write.swept, write.hidden
    freed = _delete_after_commit(storage, direct, completed.time)
    return _result([*outcome.moved, *outcome.deleted, *freed], swept, instant=completed.time,
                   trash=trash_folder(completed.time) if outcome.moved else None,
                   segments=[entry.id for entry in hidden])


@dataclass
class CleanFiles(Write):
    """CLEAN FILES (a table service, action ``clean``: not a data action) carrying out ``plan``.

    Segments: none. Lock: heartbeat. Its ``requested`` file holds the ``CleanPlan``.
    Admission: no other clean runs, and no rollback of a clean is pending. Write phase:
    publish the plan's time-travel floor, move orphans to ``_trash/<T>/`` and delete expired
    trash. Conflicts: none; it removes only what no retained snapshot needs, and a data write
    never conflicts with it (a write that needs a file it removed is planned again,
    ``_write.commit_planned``). Records, under the lock: the metadata table's old files cleaned
    and decided markers swept, the ``direct`` paths purged from ``files``, ``column_stats`` and
    ``deletes``, the planned segments still shown marked cleaned, and a ``CleanMetadata``. What
    it did is kept on the instance (``done``, ``swept``, ``hidden``) for the caller's result.
    """

    plan: CleanPlan
    #: The plan's files deleted for good after the commit point (their records purged here).
    direct: list[CleanEntry]
    protocol: Protocol
    done: _Done = field(default_factory=_Done)
    swept: _Swept = field(default_factory=_Swept)
    hidden: list[SegmentEntry] = field(default_factory=list)
    #: A table service with a plan of its own (``requested``), not a write's ``WritePlan``.
    operation = None

    @property
    def action(self) -> str:
        return Action.CLEAN

    def requested(self) -> CleanPlan:
        return self.plan

    def admit(self, context: TableContext, view: TimelineView) -> None:
        _refuse_running_clean(context, view)

    def write(self, context: TableContext, pending: Pending) -> _Done:
        if self.plan.floor is not None:
            with context.timeline.lock() as lease:
                context.metadata.raise_retention(self.plan.floor, source=RetentionSource.CLEAN, lease=lease)
        _move(context.storage, self.plan, trash_folder(pending.instant.time), self.done)
        return self.done

    def record(self, context: TableContext, view: TimelineView, pending: Pending, written: _Done, *,
               lease: Lease, extra: dict[str, str] | None,
               retries: int) -> tuple[MetadataChanges, CleanMetadata]:
        now_swept = _clean_metadata(context, self.protocol, lease)
        self.swept.metadata.update(now_swept.metadata)
        self.swept.temporaries.update(now_swept.temporaries)
        # Purged now, deleted after the commit point: a crash in between leaves files no
        # snapshot needs (leftovers), never a record of a file that is gone.
        direct = self.direct
        files = [e.path for e in direct if e.record == FILES]
        deltas = [e.path for e in direct if e.record == DELETES]
        self.hidden[:] = _still_shown(context, view, self.plan.segments)
        cleaned = [msgspec.structs.replace(entry, cleaned=pending.instant.time) for entry in self.hidden]
        changes = MetadataChanges(
            files=purges(FILES_SCHEMA, files),
            column_stats=purges(column_stats_schema(assign_ids(context.schema)), files),
            deletes=purges(DELETES_SCHEMA, deltas),
            segments=cleaned)
        swept = self.swept
        record = CleanMetadata(
            moved=[e.path for e in written.moved], deleted=[e.path for e in written.deleted],
            metadata_deleted=sorted(swept.metadata),
            temporaries_deleted=sorted(swept.temporaries),
            bytes=sum(e.size for e in (*written.moved, *written.deleted, *direct)) + swept.bytes(),
            floor=self.plan.floor, removed=[e.path for e in direct],
            segments_cleaned=[entry.id for entry in self.hidden])
        return changes, record


def _still_shown(context: TableContext, view: TimelineView, ids: Sequence[str]) -> list[SegmentEntry]:
    """The planned segments, under the lock, that are still ``Compacted`` or ``Marked for
    Delete`` and shown. Those statuses are final and one clean runs at a time, so this only
    guards against a plan gone stale; the entries are copied whole (with ``cleaned`` set) so
    that the join of the two records keeps every field."""
    if not ids:
        return []
    current = context.metadata_at(view, None, (SEGMENTS,)).segments or {}
    found = [current.get(segment_id) for segment_id in ids]
    return [entry for entry in found if entry is not None and entry.visible
            and entry.status in (SegmentStatus.COMPACTED, SegmentStatus.MARKED_FOR_DELETE)]


def _after_commit(entry: CleanEntry) -> bool:
    """Whether the clean deletes this file for good after its commit point (not a move to the
    trash, not expired trash deleted before it)."""
    return entry.reason != CleanReason.EXPIRED_TRASH and entry.reason not in TRASHED_REASONS


def _delete_after_commit(storage: Storage, entries: Sequence[CleanEntry],
                         instant: str) -> list[CleanEntry]:
    """Delete the files whose records the clean purged; return those deleted. Past the commit
    point a failure cannot undo the clean: it is logged, and the next clean deletes what is
    left (a leftover)."""
    deleted = []
    for entry in progress("deleting files", entries, len(entries)):
        try:
            if not storage.exists(entry.path):
                continue  # gone already: nothing freed here
            storage.delete(entry.path)
        except Exception:
            log.warning("clean %s could not delete %s after its commit point; the next clean "
                        "deletes it", instant, entry.path, exc_info=True)
            continue
        deleted.append(entry)
    return deleted


def _refuse_running_clean(context: TableContext, view: TimelineView) -> None:
    """Admission of a clean, under the lock after recovery: a pending clean is a live one, and so
    is a pending rollback of a clean (it may still move files back from the trash: a clean
    beside it could remove a file that the rollback then restores without a record)."""
    running = [i for i in view.pending() if i.action == Action.CLEAN]
    if running:
        raise CommitConflictError(
            f"clean refused: clean instant {running[0].time} is still running (its writer's "
            "heartbeat is live); nothing was changed\nHelp: wait for it to finish; if its "
            "writer died, the next write or clean after heartbeat.timeout_ms rolls it back")
    for instant in view.pending():
        if instant.action != Action.ROLLBACK:
            continue
        try:
            target = context.timeline.read_plan(instant, RollbackPlan)
        except TxnError:
            continue  # validate() reports a damaged plan; its target is unknown, not a clean
        if target.target_action == Action.CLEAN:
            raise CommitConflictError(
                f"clean refused: rollback {instant.time} of clean {target.target_time} is still "
                "pending (it moves that clean's files back from the trash); nothing was changed\n"
                "Help: retry after heartbeat.timeout_ms, when the next writer finishes the rollback")


def _move(storage: Storage, plan: CleanPlan, folder: str, done: _Done) -> None:
    """Move each orphan to the trash and delete expired trash, noting each in ``done``. A file
    that is gone already is skipped. The rest of the plan is deleted after the commit point."""
    chosen = [e for e in plan.files if not _after_commit(e)]
    for entry in progress("moving files to the trash", chosen, len(chosen)):
        if entry.reason == CleanReason.EXPIRED_TRASH:
            storage.delete(entry.path)
            done.deleted.append(entry)
            continue
        try:
            move(storage, entry.path, f"{folder}/{entry.path}")
        except ObjectNotFoundError:
            continue  # gone since the plan: nothing to move
        done.moved.append(entry)


def _clean_metadata(context: TableContext, protocol: Protocol, lease: Lease) -> _Swept:
    """Old bases and blocks of the metadata table, markers of decided instants and leftover
    temporaries, under the lock: returns the files deleted with their sizes."""
    writes = _writes(context.timeline.view(lease))
    sizes = _sized(context.storage, context.metadata.cleanable(writes))
    deleted = context.metadata.clean(writes, lease=lease)
    protocol.sweep_markers(lease)
    return _Swept(metadata={path: sizes.get(path, 0) for path in deleted},
                  temporaries=_leftover_temporaries(context, delete=True))


def _leftover_temporaries(context: TableContext, *, delete: bool) -> dict[str, int]:
    """The temporary files of writers killed inside a put, with their sizes; deleted if
    ``delete`` (best effort: one that cannot be deleted is logged and left for the next clean).

    Local disk stages each put in ``.<name>.<pid>.<thread>.<n>.tmp`` beside its file, in the
    folders only metatxn writes (``_timeline/``, ``_metadata/``, ``_markers/``). A put's
    temporary lives for the put's ``write`` and ``link`` alone, but nothing bounds how long a
    put may stall (a slow disk, fsync, a paused process) while its writer's heartbeat and lock
    renewals go on from other threads, so age alone proves a temporary dead only with a wide
    margin: untouched for an hour and for ``heartbeat.timeout_ms``. Markers' temporaries go
    sooner, with their decided instant (``Protocol.sweep_markers``).
    """
    storage = context.storage
    margin = max(HOUR_MS, context.timeline.options.heartbeat_timeout_ms)
    older_than = time.time_ns() // 1_000_000 - margin
    found = {}
    for folder in PUT_FOLDERS:
        for temporary in leftover_temporaries(storage, folder, recursive=True):
            if temporary.modified_ms >= older_than:
                continue
            try:
                size = storage.size(temporary.path)
                if delete:
                    storage.delete(temporary.path)
            except ObjectNotFoundError:
                continue
            except StorageError:
                log.warning("could not delete the leftover temporary %s; the next clean retries",
                            temporary.path, exc_info=True)
                continue
            found[temporary.path] = size
    if found and delete:
        log.info("deleted %d temporary file(s) of writers killed inside a put", len(found))
    return found


def _writes(view: TimelineView) -> list[tuple[str, str]]:
    """The completed data commits, in completion order (what metadata retention counts)."""
    return [(i.time, i.completed_at or "") for i in view.completed() if i.action in DATA_ACTIONS]


def _sized(storage: Storage, paths: Sequence[str]) -> dict[str, int]:
    sizes = {}
    for path in paths:
        try:
            sizes[path] = storage.size(path)
        except ObjectNotFoundError:
            continue
    return sizes


def _result(entries: Sequence[CleanEntry], swept: _Swept, *,
            instant: str | None = None, trash: str | None = None,
            segments: Sequence[str] = (), dry_run: bool = False) -> CleanResult:
    reasons: dict[str, int] = {}
    for entry in entries:
        reasons[entry.reason] = reasons.get(entry.reason, 0) + 1
    if swept.metadata:
        reasons["metadata"] = len(swept.metadata)
    if swept.temporaries:
        reasons["temporary"] = len(swept.temporaries)
    trashed = [e for e in entries if e.reason in TRASHED_REASONS]
    total = sum(e.size for e in entries) + swept.bytes()
    trashed_bytes = sum(e.size for e in trashed)
    return CleanResult(
        files=sorted([*(e.path for e in entries), *swept.metadata, *swept.temporaries]),
        bytes=total, instant=instant, trash=trash, dry_run=dry_run, reasons=reasons,
        freed_bytes=total - trashed_bytes, trashed=sorted(e.path for e in trashed),
        trashed_bytes=trashed_bytes, segments=list(segments))


__all__ = ["CleanMetadata", "CleanResult", "clean"]
