"""The commit protocol (HUDI-2285, synchronous metadata table).

One write is one instant ``T`` on the data timeline:

1. ``begin``, under the table lock: roll back writers whose heartbeat expired, allocate the
   segment id, create ``T.<action>.requested`` holding the plan.
2. ``T.<action>.inflight``; start the heartbeat. (A small write holds the lock from step 1 to
   step 4 and beats no heartbeat; in a table of format 2 it is requested started: one file,
   ``T.<action>.inflight`` holding the plan.)
3. Write the data files (each announced by a marker first).
4. ``commit``, under the table lock: re-read the timeline and check for conflicts with instants
   that completed after ``T`` began; write the metadata table's log blocks for ``T`` and complete
   its deltacommit ``T``; complete ``T`` on the data timeline. That last put-if-absent is the
   single commit point, and the lock is released right after it. Table maintenance (metadata
   compaction and cleaning, archival) then runs as instants of its own, outside the commit
   (``_upkeep``): it never fails the commit, and other writers never wait for it.
5. On any error before the commit point, roll ``T`` back: mark it rolled back, delete what its
   markers name and its metadata blocks, and record a completed ``rollback`` instant. A writer
   that dies instead leaves ``T`` pending; once its heartbeat expires the next writer does step 5
   for it.

Errors raised at or after the commit point are special: if completing ``T`` failed with an unknown
outcome, ``CommitStateUnknownError`` propagates and nothing is deleted; if the commit landed and
a later step failed, the failure is logged and the commit is returned.

Markers: a write that committed deletes its own markers by name (the paths of the files and
deltas it wrote give their names), so the commit path never lists ``_markers/``. A writer killed
after its commit point leaves its markers; they are swept (one listing) by the table maintenance
that runs after a metadata compaction, with those of rolled-back instants
(:meth:`Protocol.sweep_markers`). A rollback lists the markers to find what ``T`` wrote.

Recovery cannot be turned against the table: a marker's content is checked (``read_marker``)
before the file it names is deleted, and a damaged marker is reported and dropped, its file left
for ``validate()``; a rollback that fails on one instant is logged and the next writer retries
it, so no single instant blocks every later writer.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from metatxn.indexes import METADATA_FOLDER, MetadataChanges, MetadataTable
from metatxn.timeline import (
    ROLLEDBACK,
    TIMELINE_FOLDER,
    Action,
    CommitStateUnknownError,
    Heartbeat,
    Instant,
    Lease,
    LockLostError,
    ObjectExistsError,
    ObjectNotFoundError,
    Storage,
    Timeline,
    TimelineView,
    leftover_temporaries,
    move,
    next_time,
)

from .._context import (
    CleanPlan,
    CommitMetadata,
    StagedCreate,
    WritePlan,
)
from .._files import (
    MARKERS_FOLDER,
    TRASH_FOLDER,
    marked_paths,
    marker_instant,
    marker_path,
    prefixes,
    trash_folder,
)
from .._results import CleanReason, Operation

log = logging.getLogger("metatxn")

#: Folders a clean never moves files out of, so its undo never moves files into them.
_NEVER_RESTORED = prefixes((TIMELINE_FOLDER, METADATA_FOLDER, MARKERS_FOLDER, TRASH_FOLDER))


@dataclass
class Pending:
    """A write between ``begin`` and its commit or rollback."""

    instant: Instant
    segment: str | None
    heartbeat: Heartbeat
    #: The timeline as the commit left it (set at the commit point): what table maintenance
    #: decides from, after the lock is released.
    committed_view: TimelineView | None = None
    #: Every segment the write creates, when it asked for more than one (``segment`` first).
    segments: tuple[str, ...] = ()


def _pending(instant: Instant, segments: list[str], heartbeat: Heartbeat) -> Pending:
    return Pending(instant, segments[0] if segments else None, heartbeat,
                   segments=tuple(segments) if len(segments) > 1 else ())


#: Runs under the lock when an instant begins, on the recovered timeline: raises to refuse it.
Admission = Callable[[TimelineView], None]

#: Builds a commit under the lock: given the lease and a fresh timeline view, check conflicts
#: and return the metadata-table changes and the commit metadata.
Builder = Callable[[Lease, TimelineView], tuple[MetadataChanges, CommitMetadata]]


class Protocol:
    """Runs writes of one table through the commit protocol."""

    def __init__(
        self,
        storage: Storage,
        timeline: Timeline,
        metadata: MetadataTable,
        *,
        next_segment: Callable[[TimelineView], str],
        after_commit: Callable[[TimelineView], None],
        stage: StagedCreate | None = None,
        one_file: bool = False,
    ) -> None:
        self._storage = storage
        #: A small write is requested started, one timeline file before its commit (format 2).
        self._one_file = one_file
        #: A table created staged: ``table.json`` is put with its first commit (see ``_complete``).
        self._stage = stage
        self._timeline = timeline
        self._metadata = metadata
        self._next_segment = next_segment
        self._after_commit = after_commit

    # -- the steps -----------------------------------------------------------------------------

    def begin(self, operation: str | None, action: str, *, new_segment: bool = False,
              segment: str | None = None, sources: Sequence[str] = (), read_at: str | None = None,
              extra: dict[str, str] | None = None, admit: Admission | None = None,
              plan: Any = None, segment_count: int = 1) -> Pending:
        """Step 1 and 2: request and start an instant, under the lock.

        ``new_segment`` allocates the next load id (``segment_count`` consecutive ones, for a
        write that creates several segments); ``segment`` names the segment instead (a
        compaction's ``x.1``). ``sources`` are the segments the write reads and replaces (a
        compaction's inputs), recorded in the plan so that others can see them while it runs.
        ``read_at``: the completion time of the snapshot the write read (recorded: CLEAN FILES
        keeps what it needs). ``admit`` runs under the lock on the recovered timeline before
        anything is written and may refuse the write by raising. ``plan`` replaces the
        ``WritePlan`` (a table service with a plan of its own, whose ``operation`` is None).
        """
        with self._timeline.lock() as lease:
            instant, segments = self._request(lease, operation, action, new_segment=new_segment,
                                              segment=segment, sources=sources, read_at=read_at,
                                              extra=extra, admit=admit, plan=plan,
                                              segment_count=segment_count)
        try:
            heartbeat = self._timeline.heartbeat(instant).start()
        except BaseException:
            self._roll_back_quietly(instant)
            raise
        return _pending(instant, segments, heartbeat)

    def _request(self, lease: Lease, operation: str | None, action: str, *, new_segment: bool = False,
                 segment: str | None = None, sources: Sequence[str] = (), read_at: str | None = None,
                 extra: dict[str, str] | None = None, admit: Admission | None = None,
                 plan: Any = None, segment_count: int = 1,
                 held: bool = False) -> tuple[Instant, list[str]]:
        """Step 1 under ``lease``: recover, admit, allocate the segment(s), request and start.
        ``held``: the write holds the lock until its commit; in a table of format 2 it is
        requested started, one file (``Timeline.request(started=True)``)."""
        view = self.recover(lease)
        if self._staging():
            # Refused before anything is written when a table appeared meanwhile; what dead
            # creators of no table left (rolled back by recover) goes by name.
            assert self._stage is not None
            self._stage.check()
            view = self._forget_abandoned(lease)
        if admit is not None:
            admit(view)
        segments = [segment] if segment is not None else []
        if segment is None and new_segment:
            first = int(self._next_segment(view))
            segments = [str(first + i) for i in range(segment_count)]
        if plan is None:
            assert operation is not None, "a write without a plan of its own names its operation"
            plan = WritePlan(operation=Operation(operation), segment=segments[0] if segments else None,
                             segments=segments if len(segments) > 1 else [],
                             sources=list(sources), read_at=read_at, extra=dict(extra or {}))
        # T comes back as the metadata table's deltacommit time, so it must also be above
        # every time on the metadata timeline (whose compactions take times of their own).
        after = max(filter(None, (view.max_time(), self._metadata.timeline.view(lease).max_time())),
                    default=None)
        started = held and self._one_file
        instant = self._timeline.request(action, plan, lease=lease, started=started,
                                         time=next_time(self._timeline.clock(), after))
        if started:
            return instant, segments
        try:
            instant = self._timeline.start(instant, lease=lease)
        except BaseException:
            self._roll_back_quietly(instant, lease)
            raise
        return instant, segments

    def commit(self, pending: Pending, build: Builder) -> tuple[Instant, CommitMetadata]:
        """Run step 4. Returns the completed instant and what it recorded."""
        completed: Instant | None = None
        metadata: CommitMetadata | None = None
        try:
            with self._timeline.lock() as lease:
                completed, metadata = self._complete(lease, pending, build)
        except Exception:
            if completed is None:
                raise
            # The commit landed; only releasing the lock failed. The lease simply expires.
            log.warning("releasing the table lock after instant %s failed", completed.time,
                        exc_info=True)
        assert completed is not None and metadata is not None
        return completed, metadata

    def run(self, operation: str | None, action: str, *, write: Callable[[Pending], Any],
            build: Callable[[Pending, Any], Builder], hold_lock: bool = False,
            **begin: Any) -> tuple[Instant, CommitMetadata]:
        """begin (with ``begin``'s keyword arguments), write, commit; roll back on any failure
        before the commit point.

        ``hold_lock``: a small write (its data in memory, its write phase bounded by its own
        size) runs every step under one hold of the lock, without a heartbeat: half the lock
        traffic of a commit, which is what small commits and many concurrent writers pay for.
        Nobody can see its instant pending but lock-free readers, who ignore it; if the writer
        dies, the instant expires by its requested time (no heartbeat file) like any other.
        """
        if hold_lock:
            return self._run_holding_lock(operation, action, write, build, begin)
        pending = self.begin(operation, action, **begin)
        return self.finish(pending, write, build)

    def _run_holding_lock(self, operation: str | None, action: str, write: Callable[[Pending], Any],
                          build: Callable[[Pending, Any], Builder],
                          begin: dict[str, Any]) -> tuple[Instant, CommitMetadata]:
        completed: Instant | None = None
        metadata: CommitMetadata | None = None
        written: Any = None
        pending: Pending | None = None
        try:
            with self._timeline.lock() as lease:
                # No heartbeat: the lock is held throughout, so nobody judges its expiry while
                # it runs.
                instant, segments = self._request(lease, operation, action, held=True, **begin)
                pending = _pending(instant, segments, self._timeline.heartbeat(instant))
                try:
                    written = write(pending)
                    completed, metadata = self._complete(lease, pending, build(pending, written),
                                                         held=True)
                except CommitStateUnknownError:
                    raise  # never delete anything: the instant may have completed
                except BaseException:
                    self._roll_back_quietly(instant, lease)
                    raise
        except Exception:
            if completed is None:
                raise
            # The commit landed; only releasing the lock failed. The lease simply expires.
            log.warning("releasing the table lock after instant %s failed", completed.time,
                        exc_info=True)
        assert completed is not None and metadata is not None and pending is not None
        self._landed(pending, written, beating=False)
        return completed, metadata

    def finish(self, pending: Pending, write: Callable[[Pending], Any],
               build: Callable[[Pending, Any], Builder]) -> tuple[Instant, CommitMetadata]:
        """Write and commit a begun instant (``run`` after ``begin``); roll back on failure.

        Used directly when the write phase ran elsewhere (a Spark data source's tasks): then
        ``write`` only gathers what they reported.
        """
        try:
            written = write(pending)
            completed, metadata = self.commit(pending, build(pending, written))
        except CommitStateUnknownError:
            # Never delete anything: the instant may have completed. Stop beating but keep the
            # heartbeat file, so the instant expires normally if it did not complete.
            pending.heartbeat.stop(delete=False)
            raise
        except BaseException:
            pending.heartbeat.stop(delete=False)
            self._roll_back_quietly(pending.instant)
            raise
        self._landed(pending, written, beating=True)
        return completed, metadata

    def _complete(self, lease: Lease, pending: Pending, build: Builder, *,
                  held: bool = False) -> tuple[Instant, CommitMetadata]:
        """Step 4 under ``lease``: check and build, write the metadata table's blocks, then the
        commit point; remember the timeline the commit left for table maintenance. ``held``:
        the writer held the lease from its request and has no heartbeat (``Timeline.complete``)."""
        changes, metadata = build(lease, self._timeline.view(lease))
        if self._staging():
            assert self._stage is not None
            # The staged table comes to exist here, under the lock, with its first instant's
            # commit: before any metadata block, so a creator that loses to another leaves
            # nothing in the metadata table, and rolls back. A crash between this put and the
            # completed file leaves an empty table whose pending instant the next writer rolls
            # back (design/protocol.md, "Staged create").
            self._stage.publish()
        self._metadata.write_delta(pending.instant.time, changes, lease=lease)
        completed = self._timeline.complete(pending.instant, metadata, lease=lease, held=held)
        pending.committed_view = self._timeline.view(lease)
        return completed, metadata

    def _landed(self, pending: Pending, written: Any, *, beating: bool) -> None:
        """After the commit landed and the lock was released: tidy up (best effort: the next
        commit redoes it), then start table maintenance if it is due. ``beating``: the write
        ran a heartbeat (a write that held the lock throughout has none to stop)."""
        try:
            if beating:
                pending.heartbeat.stop()
            self._remove_markers(written)
        except Exception:
            log.warning("cleaning up after committed instant %s failed", pending.instant.time,
                        exc_info=True)
        if pending.committed_view is not None:
            self._after_commit_quietly(pending.committed_view)

    # -- rollback and recovery -----------------------------------------------------------------

    def recover(self, lease: Lease) -> TimelineView:
        """Roll back every pending instant whose writer's heartbeat expired; return the view.

        A rollback that fails (storage refusing a delete, a damaged plan) is logged and left:
        the instant stays pending, the next writer tries again, and this write goes on. Only a
        lost lock stops recovery, since nothing may be decided without it.
        """
        view = self._timeline.view(lease)
        if not view.pending():
            # No writer in flight, so none died in flight; a maintainer may have (its
            # compaction is on the metadata timeline, which ``begin`` lists anyway).
            self._metadata.recover(lease=lease)
            return view
        failed = False
        for instant in self._timeline.expired(view):
            undo = self._undo(lease)
            try:
                if instant.action == Action.ROLLBACK:
                    self._timeline.resume_rollback(instant, lease=lease, undo=undo)
                else:
                    log.info("rolling back instant %s of a writer whose heartbeat expired",
                             instant.time)
                    self._timeline.rollback(instant, lease=lease, undo=undo)
            except LockLostError:
                raise
            except Exception:
                step = "finish rollback" if instant.action == Action.ROLLBACK else "roll back instant"
                log.warning("could not %s %s of a dead writer; it stays pending for validate() "
                            "to report and a later writer to retry", step, instant.time,
                            exc_info=True)
                # The failed step may have landed (a lost response), which the lease's view does
                # not know. The other instants are still decided correctly from it (the failed
                # step touched only this instant and its rollback, and rollback times come from
                # the timeline's own counter), but see the return below.
                failed = True
        # A writer that died holding the lock left a data instant pending; it may also have left
        # a metadata instant pending.
        self._metadata.recover(lease=lease)
        # After a failure, the caller picks its instant time and segment from a fresh listing,
        # so they are above whatever the failed step wrote.
        return self._timeline.load() if failed else self._timeline.view(lease)

    def roll_back(self, instant: Instant, lease: Lease | None = None) -> Instant:
        if lease is None:
            with self._timeline.lock() as own:
                return self.roll_back(instant, own)
        current = self._timeline.view(lease).get(instant.time)
        if current is None or not current.is_pending:
            return current or instant
        rollback = self._timeline.rollback(current, lease=lease, undo=self._undo(lease))
        if self._staging():
            # A staged create that did not happen: its instant was never part of any table,
            # not even of one another creator made here meanwhile. Its files are gone (undone
            # above, and it wrote no metadata block: it never reached its put of table.json).
            self._timeline.forget(self._timeline.view(lease).get(current.time) or current, lease=lease)
            self._timeline.forget(rollback, lease=lease)
            self._forget_abandoned(lease)
        return rollback

    def _staging(self) -> bool:
        return self._stage is not None and not self._stage.published

    def _forget_abandoned(self, lease: Lease) -> TimelineView:
        """Where no table exists (a staged create not yet committed), delete by name the
        instants rolled back there and the rollbacks that undid them: with no table, they are
        nobody's history, and a later create at the location starts from a clean timeline.
        Pending instants (a live creator's, or a dead one's not yet expired) stay."""
        view = self._timeline.view(lease)
        assert self._stage is not None
        if not self._stage.abandoned():
            return view
        decided = [i for i in view.instants if not i.is_pending
                   and (i.state == ROLLEDBACK or i.action == Action.ROLLBACK)]
        # A crash part way leaves only decided instants, which the next creator forgets.
        for instant in decided:
            self._timeline.forget(instant, lease=lease)
        return self._timeline.view(lease)

    def _roll_back_quietly(self, instant: Instant, lease: Lease | None = None) -> None:
        # The caller is already failing: report the original error, not a secondary one. If
        # this rollback fails too, the instant stays pending and expires into a later rollback.
        try:
            self.roll_back(instant, lease)
        except Exception:
            log.warning("could not roll back instant %s now; a later writer will", instant.time,
                        exc_info=True)

    def _undo(self, lease: Lease) -> Callable[[Instant], dict[str, list[str]]]:
        def undo(target: Instant) -> dict[str, list[str]]:
            if target.action == Action.CLEAN:
                return self._undo_clean(target, lease)
            named, damaged = marked_paths(self._storage, target.time)
            deleted = []
            for marker, path in named:
                self._storage.delete(path)
                deleted.append(path)
                self._storage.delete(marker)
            # A damaged marker's file (if any) cannot be located safely: validate() reports it
            # as unreferenced once the marker is gone, and a clean can remove it.
            for marker in damaged:
                self._storage.delete(marker)
            self._delete_marker_temporaries({target.time}.__contains__)
            blocks = self._metadata.remove_instant(target.time, lease=lease)
            record = {"files_deleted": deleted, "metadata_blocks_deleted": blocks}
            if damaged:
                record["damaged_markers"] = damaged
            return record

        return undo

    def _undo_clean(self, target: Instant, lease: Lease) -> dict[str, list[str]]:
        """Undo a clean that did not complete: move every file of its plan that is in its trash
        folder back where it was, and delete its metadata blocks (a purge it may have written).

        Idempotent, so a rollback left pending is rolled forward by running it again. A file
        found at both places (a move through the storage protocol interrupted between its copy
        and its delete) keeps its original; the copy goes. Files the plan deletes for good
        (expired trash) stay deleted: they were in the trash for longer than the table keeps it.
        The retention floor the clean published stays: it only makes time travel stop earlier.
        """
        plan = self._timeline.read_plan(target, CleanPlan)
        folder = trash_folder(target.time)
        trashed = set(self._storage.list(folder, recursive=True))
        restored = []
        for entry in plan.files:
            moved = f"{folder}/{entry.path}"
            if entry.reason == CleanReason.EXPIRED_TRASH or moved not in trashed \
                    or entry.path.startswith(_NEVER_RESTORED):
                continue  # a plan never moves these: a damaged one must not aim a move there
            try:
                move(self._storage, moved, entry.path)
            except ObjectExistsError:
                self._storage.delete(moved)
            except ObjectNotFoundError:
                continue
            restored.append(entry.path)
        blocks = self._metadata.remove_instant(target.time, lease=lease)
        return {"files_restored": restored, "metadata_blocks_deleted": blocks}

    def _remove_markers(self, written: Any) -> None:
        """Delete the markers of the files a committed write wrote, by name (no listing).

        ``written`` is what the write phase returned: its ``statuses`` (data files) and
        ``deltas`` (delete deltas) carry the paths, and a marker is named after its file. A
        Spark write has already deleted the markers of files no task reported. Whatever is left
        (a writer killed here) is removed by :meth:`sweep_markers`.
        """
        for path in _written_paths(written):
            self._storage.delete(marker_path(posixpath.basename(path)))

    def sweep_markers(self, lease: Lease) -> list[str]:
        """Delete the markers of decided instants, and their half-written ones; return the
        markers. Runs under the lock, off the commit path (table maintenance), with one listing
        of ``_markers/`` (two on local disk: the temporaries are listed apart).

        Decided: completed, or rolled back with no rollback still pending (a pending rollback,
        possibly of that instant, still needs its markers to find the files to delete). A
        marker whose instant is not on the active timeline belongs to an archived, so decided,
        instant (markers are written only after their instant is requested, under the lock
        held here), unless a rollback is pending (its target may be archived already). Markers
        of pending instants are left to their writer or its rollback.
        """
        view = self._timeline.view(lease)
        rolling_back = any(i.action == Action.ROLLBACK and i.is_pending for i in view.instants)
        decided = {i.time for i in (view.completed() if rolling_back else view.instants)
                   if not i.is_pending}

        def is_decided(time: str) -> bool:
            archived = not rolling_back and time.isdigit() and view.get(time) is None
            return time in decided or archived

        removed = []
        for marker in self._storage.list(MARKERS_FOLDER):
            if is_decided(marker_instant(marker)):
                self._storage.delete(marker)
                removed.append(marker)
        if removed:
            log.info("removed %d marker(s) of decided instants", len(removed))
        self._delete_marker_temporaries(is_decided)
        return removed

    def _delete_marker_temporaries(self, decided: Callable[[str], bool]) -> None:
        """Delete the half-written markers (a writer killed inside the put) of decided instants.
        A live writer's temporary is gone once its put returns, and its instant is pending."""
        for temporary in leftover_temporaries(self._storage, MARKERS_FOLDER):
            if decided(marker_instant(temporary.key)):
                self._storage.delete(temporary.path)

    def _after_commit_quietly(self, view: TimelineView) -> None:
        """Table maintenance, after the commit released the lock: the commit has landed, so a
        failure here is logged, never raised to its writer."""
        try:
            self._after_commit(view)
        except Exception:
            log.warning("table maintenance after a commit failed; the next commit retries it",
                        exc_info=True)


def _written_paths(written: Any) -> Iterator[str]:
    """The paths of the data files and delete deltas in a write phase's result."""
    for group in (getattr(written, "statuses", None), getattr(written, "deltas", None)):
        for item in group or ():
            yield item.path


__all__ = [
    "Admission",
    "Builder",
    "Pending",
    "Protocol",
]
