"""The timeline: loading it and moving instants through their lifecycle.

This is the only module that writes instant files. Every state is a new immutable file created
with put-if-absent; nothing is renamed or rewritten. Requested and completion times are both
allocated under the table lock from the largest time on the timeline, so all times on a table
are unique and strictly increasing, and completion order is total.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time as _time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import msgspec

from ._archive import (
    ArchivedInstant,
    archive_files,
    merge_archives,
    newest_completion,
    read_all,
    read_archive,
    write_archive,
)
from ._clock import Clock, next_time, system_clock
from ._errors import (
    CommitStateUnknownError,
    CorruptMetadataError,
    IllegalTransitionError,
    InvalidOptionError,
    ObjectExistsError,
)
from ._heartbeat import Heartbeat, HeartbeatRecord, heartbeat_path, last_beat_ms
from ._instant import (
    ACTIONS,
    COMPLETED,
    INFLIGHT,
    REQUESTED,
    ROLLEDBACK,
    Action,
    Instant,
    file_name,
    looks_like_instant,
    parse_file_name,
    parse_time,
)
from ._layout import ARCHIVE_FOLDER, HEARTBEAT_FOLDER, LOCK_FOLDER, TIMELINE_FOLDER
from ._lock import DEFAULT_LEASE_MS, Lease, LockRecord, TableLock
from ._storage import Storage
from ._view import TimelineView

T = TypeVar("T")


log = logging.getLogger("metatxn")


class TimelineOptions(msgspec.Struct, frozen=True, kw_only=True):
    """Tuning knobs of a timeline. Times are milliseconds."""

    lock_lease_ms: int = DEFAULT_LEASE_MS
    lock_timeout_ms: int = 120_000
    lock_poll_ms: int = 20
    heartbeat_interval_ms: int = 15_000
    heartbeat_timeout_ms: int = 60_000
    #: Archive once the active timeline holds more than this many completed instants ...
    archive_trigger: int = 30
    #: ... keeping this many of the newest completed instants active.
    archive_retain: int = 20
    #: Merge the newest archive files once this many are of one level (``_archive``).
    archive_max_files: int = 10

    def __post_init__(self) -> None:
        positive = ("lock_lease_ms", "lock_timeout_ms", "lock_poll_ms", "heartbeat_interval_ms",
                    "heartbeat_timeout_ms", "archive_retain", "archive_max_files")
        for name in positive:
            if getattr(self, name) <= 0:
                raise InvalidOptionError(f"timeline option {name} must be > 0, got {getattr(self, name)}")
        if self.archive_trigger <= self.archive_retain:
            raise InvalidOptionError(
                f"timeline option archive_trigger ({self.archive_trigger}) must be greater than "
                f"archive_retain ({self.archive_retain})"
            )
        if self.heartbeat_timeout_ms <= self.heartbeat_interval_ms:
            raise InvalidOptionError(
                f"heartbeat_timeout_ms ({self.heartbeat_timeout_ms}) must exceed "
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms})"
            )


class InstantFile(msgspec.Struct, frozen=True, kw_only=True, tag="instant", tag_field="kind"):
    """The envelope every instant state file holds; ``payload`` is the caller's JSON."""

    format_version: int = 1
    time: str
    action: Action
    state: str
    completed_at: str | None = None
    owner: str = ""
    payload: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))


class RollbackPlan(msgspec.Struct, frozen=True, kw_only=True, tag="rollback_plan", tag_field="kind"):
    """The plan of a ``rollback`` instant: which instant it undoes."""

    target_time: str
    target_action: Action


_encoder = msgspec.json.Encoder()
_file_decoder = msgspec.json.Decoder(InstantFile)
_heartbeat_decoder = msgspec.json.Decoder(HeartbeatRecord)
_lock_decoder = msgspec.json.Decoder(LockRecord)


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


class Timeline:
    """The timeline of one table, on one storage.

    Args:
        clock: epoch-millisecond clock for instant times, leases and heartbeats.
        owner: this writer's name in lock records and heartbeats.
        sleep: how to wait while the lock is busy (seconds); tests pass a fake.
    """

    def __init__(
        self,
        storage: Storage,
        *,
        clock: Clock = system_clock,
        owner: str | None = None,
        options: TimelineOptions | None = None,
        sleep: Callable[[float], None] = _time.sleep,
    ) -> None:
        self.storage = storage
        self.clock = clock
        self.owner = owner or default_owner()
        self.options = options or TimelineOptions()
        self._last_issued: str | None = None
        self._held_reported: set[str] = set()  # damaged files archival held, logged once each
        self._session: tuple[Lease, TimelineView] | None = None
        self._lock = TableLock(
            storage, owner=self.owner, clock=clock, lease_ms=self.options.lock_lease_ms,
            timeout_ms=self.options.lock_timeout_ms, poll_ms=self.options.lock_poll_ms, sleep=sleep,
        )

    def apply_options(self, options: TimelineOptions) -> None:
        """Take ``options`` from now on (a table property changed): the lock's lease, timeout
        and polling, heartbeats and archival. A lease held now keeps the length it was taken
        with until it renews."""
        self.options = options
        self._lock.lease_ms = options.lock_lease_ms
        self._lock.timeout_ms = options.lock_timeout_ms
        self._lock.poll_ms = options.lock_poll_ms
        self._lock.max_poll_ms = max(options.lock_poll_ms, self._lock.max_poll_ms)
        self._lock.renew_every_ms = max(1, options.lock_lease_ms // 3)

    # -- reading -------------------------------------------------------------------------------

    def load(self) -> TimelineView:
        """List the active timeline. Costs one listing, however long the table's history.

        Raises:
            CorruptMetadataError: a file in ``_timeline/`` is named like an instant but is not one,
                or the state files of one instant contradict each other.
        """
        files: list[tuple[str, Instant]] = []
        for key in self.storage.list(TIMELINE_FOLDER):
            name = key.rsplit("/", 1)[1]
            instant = parse_file_name(name)
            if instant is None:
                if looks_like_instant(name):
                    raise CorruptMetadataError(
                        key, "an instant file name T.action.requested|inflight|rolledback or "
                        f"T_C.action with 17-digit times and an action in {sorted(ACTIONS)}",
                    )
                continue
            files.append((key, instant))
        return TimelineView.from_state_files(files)

    def view(self, lease: Lease | None = None) -> TimelineView:
        """The active timeline; under ``lease``, listed once per lease and kept current after.

        While the table lock is held, only its holder can request, complete or roll back
        instants, so a view listed after taking the lock and updated with the holder's own
        transitions stays exact for every decision the holder makes. (Other writers may still
        move their own instants from requested to inflight; no decision depends on that.)
        """
        if lease is None:
            return self.load()
        session = self._session
        if session is not None and session[0] is lease and not lease.released:
            return session[1]
        view = self.load()
        self._session = (lease, view)
        return view

    def _remember(self, lease: Lease | None, instant: Instant) -> None:
        session = self._session
        if lease is not None and session is not None and session[0] is lease:
            self._session = (lease, session[1].with_instant(instant))

    def history(self) -> list[Instant]:
        """Every instant, archived and active, by requested time."""
        # List the active timeline before reading the archive: archival writes the archive
        # before deleting active files, so an instant archived between our two reads is in the
        # archive we read second. The other order could miss it in both.
        active = self.load()
        merged = {a.time: Instant(time=a.time, action=a.action, state=a.state,  # type: ignore[arg-type]
                                  completed_at=a.completed_at)
                  for a in read_all(self.storage).values()}
        for instant in active:
            merged[instant.time] = instant
        return sorted(merged.values(), key=lambda i: i.time)

    def completed_newest_first(self) -> Iterator[ArchivedInstant]:
        """Every completed instant, archived and active, newest completion first, each with its
        commit metadata (``metadata``; a terminal file that does not decode comes with its bytes
        in ``damaged`` and null metadata, as archival keeps such a file).

        Lazy, so that the newest ``n`` cost about ``n`` reads, not the archive: an active
        instant's file is read when it is reached, and an archive file only once everything that
        completed after its newest completion (its name's ``last``) has been yielded.
        """
        # Listed before the archive, as history() does: an instant archived in between is in
        # the archive listed second (and a copy in both places is the active one).
        active = self.load()
        seen = {i.time for i in active}
        pool: list[tuple[str, str, Instant | ArchivedInstant]] = sorted(
            (i.completed_at or "", i.time, i) for i in active.completed())
        read: set[str] = set()
        paths = sorted(archive_files(self.storage), key=newest_completion, reverse=True)
        while True:
            while paths and (not pool or newest_completion(paths[0]) >= pool[-1][0]):
                path = paths.pop(0)
                read.add(path)
                records = read_archive(self.storage, path)
                if not records:
                    # Merged away since the listing; the merged file was written before this
                    # one was deleted, so a fresh listing has it (its known instants are seen).
                    paths = sorted((p for p in archive_files(self.storage) if p not in read),
                                   key=newest_completion, reverse=True)
                    continue
                fresh = [r for r in records if r.state == COMPLETED and r.time not in seen]
                seen.update(r.time for r in fresh)
                pool.extend((r.completed_at or "", r.time, r) for r in fresh)
                pool.sort(key=lambda entry: entry[:2])
            if not pool:
                return
            item = pool.pop()[2]
            record = self._terminal_record(item) if isinstance(item, Instant) else item
            if record is not None:
                yield record

    def _terminal_record(self, instant: Instant) -> ArchivedInstant | None:
        """An active terminal instant as archival would record it (None: forgotten since)."""
        path = _path(instant.time, instant.action, instant.state, instant.completed_at)
        try:
            data = self.storage.read(path)
        except FileNotFoundError:
            # Archived since the listing: the archive is written before the active files go.
            return read_all(self.storage).get(instant.time)
        record = ArchivedInstant(time=instant.time, action=instant.action, state=instant.state,
                                 completed_at=instant.completed_at)
        try:
            return msgspec.structs.replace(record, metadata=_decode_file(path, data).payload)
        except CorruptMetadataError:
            return msgspec.structs.replace(record, damaged=data)

    def read_plan(self, instant: Instant, type: type[T] = Any) -> T:  # type: ignore[assignment]
        """Decode the plan stored with the instant's requested state, or with its inflight state
        when it was requested started (``request(started=True)``: no requested file).

        Raises:
            FileNotFoundError: neither file holds a plan (archived, or lost).
        """
        try:
            return self._read_payload(_path(instant.time, instant.action, REQUESTED), type)
        except FileNotFoundError as exc:
            missing = exc
        inflight = _path(instant.time, instant.action, INFLIGHT)
        try:
            envelope = _decode_file(inflight, self.storage.read(inflight))
        except FileNotFoundError:
            raise missing from None
        if bytes(envelope.payload) == b"null":  # started the usual way: its plan was requested
            raise missing
        return _decode_payload(envelope.payload, type, inflight)

    def read_metadata(self, instant: Instant, type: type[T] = Any) -> T:  # type: ignore[assignment]
        """Decode the commit metadata of a completed instant, active or archived."""
        if instant.completed_at is None:
            raise IllegalTransitionError(instant.time, instant.state, COMPLETED,
                                         "only completed instants have commit metadata")
        path = _path(instant.time, instant.action, COMPLETED, instant.completed_at)
        try:
            return self._read_payload(path, type)
        except FileNotFoundError:
            archived = read_all(self.storage).get(instant.time)
            if archived is None:
                raise
            if archived.damaged is not None:
                raise _archived_damaged(path, archived.damaged) from None
            return _decode_payload(archived.metadata, type, path)

    def _read_payload(self, path: str, type: type[T]) -> T:
        data = self.storage.read(path)
        envelope = _decode_file(path, data)
        return _decode_payload(envelope.payload, type, path)

    # -- locking and heartbeats ----------------------------------------------------------------

    def lock(self, *, timeout_ms: int | None = None) -> Lease:
        """Take the table lock; use the lease as a context manager to release it."""
        return self._lock.acquire(timeout_ms=timeout_ms)

    def heartbeat(self, instant: Instant) -> Heartbeat:
        return Heartbeat(self.storage, instant.time, owner=self.owner, clock=self.clock,
                         interval_ms=self.options.heartbeat_interval_ms)

    def is_expired(self, instant: Instant, *, now_ms: int | None = None) -> bool:
        """Whether a pending instant's writer stopped beating longer ago than the timeout."""
        now = self.clock() if now_ms is None else now_ms
        last = last_beat_ms(self.storage, instant.time)
        if last is None:
            last = parse_time(instant.time)
        return now - last > self.options.heartbeat_timeout_ms

    def expired(self, view: TimelineView | None = None) -> list[Instant]:
        """Pending instants whose writers are presumed dead."""
        view = view or self.load()
        now = self.clock()
        return [i for i in view.pending() if self.is_expired(i, now_ms=now)]

    # -- transitions ---------------------------------------------------------------------------

    def _allocate_time(self, view: TimelineView) -> str:
        latest = max(filter(None, (view.max_time(), self._last_issued)), default=None)
        issued = next_time(self.clock(), latest)
        self._last_issued = issued
        return issued

    def request(self, action: Action | str, plan: object = None, *, lease: Lease | None = None,
                time: str | None = None, started: bool = False) -> Instant:
        """Create a new instant in the ``requested`` state, holding ``plan``.

        The requested time is allocated under the table lock (``lease``, or a short one taken
        here), so it is greater than every time already on the timeline. ``time`` instead
        mirrors an instant of another timeline (the metadata table's deltacommit takes its data
        instant's time); it must not be on this timeline yet.

        ``started``: create it ``inflight`` at once, one file holding ``plan`` and no requested
        file (a small write of a format-2 table, which holds the lock until its commit, so no
        one can watch it between the two states; :meth:`read_plan` finds the plan there).
        Readers of format 1 would take such an instant's plan for lost: only tables of format 2
        have them (design/storage.md, "Format versions").
        """
        if action not in ACTIONS:
            raise InvalidOptionError(f"unknown action {action!r}; expected one of {sorted(ACTIONS)}")
        if lease is None:
            with self.lock() as own:
                return self.request(action, plan, lease=own, time=time)
        lease.ensure_held(verify=False)
        view = self.view(lease)
        if time is None:
            time = self._allocate_time(view)
        else:
            parse_time(time)
            if view.get(time) is not None:
                raise IllegalTransitionError(time, view.get(time).state, REQUESTED,  # type: ignore[union-attr]
                                             "an instant with this time already exists")
        instant = Instant(time=time, action=Action(action), state=INFLIGHT if started else REQUESTED)
        self._put_state(instant, plan)
        self._remember(lease, instant)
        return instant

    def record_completed(self, action: Action | str, time: str, metadata: object = None, *,
                         lease: Lease) -> Instant:
        """Write an instant straight into the completed state, at a mirrored time ``time``.

        For bookkeeping instants of a single-writer timeline whose outcome nobody decides on
        (the metadata table's deltacommits: readers trust the data timeline instead). One file
        is written, so a crash leaves either no instant or a completed one, never a pending one.
        """
        if action not in ACTIONS:
            raise InvalidOptionError(f"unknown action {action!r}; expected one of {sorted(ACTIONS)}")
        lease.ensure_held(verify=False)
        view = self.view(lease)
        parse_time(time)
        if view.get(time) is not None:
            raise IllegalTransitionError(time, view.get(time).state, COMPLETED,  # type: ignore[union-attr]
                                         "an instant with this time already exists")
        completed = Instant(time=time, action=Action(action), state=COMPLETED,
                            completed_at=self._allocate_time(view.with_instant(
                                Instant(time=time, action=Action(action), state=REQUESTED))))
        self._put_state(completed, metadata)
        self._remember(lease, completed)
        return completed

    def start(self, instant: Instant, payload: object = None, *,
              lease: Lease | None = None) -> Instant:
        """Move a requested instant to ``inflight`` (no lock needed; ``lease`` saves a listing)."""
        current = self._current(instant, self.view(lease) if lease is not None else None)
        if current.state != REQUESTED:
            raise IllegalTransitionError(instant.time, current.state, INFLIGHT,
                                         "only a requested instant can start")
        inflight = current.with_state(INFLIGHT)
        try:
            self._put_state(inflight, payload)
        except ObjectExistsError:
            raise IllegalTransitionError(instant.time, INFLIGHT, INFLIGHT,
                                         "it was already started") from None
        self._remember(lease, inflight)
        return inflight

    def complete(self, instant: Instant, metadata: object = None, *, lease: Lease,
                 held: bool = False) -> Instant:
        """Complete an inflight instant: the commit point.

        Must run under the table lock, which it checks first. The completion time is allocated
        here, under that lock, so completion order is total.

        ``held``: the instant's writer held the lock from its request to here and never beat
        a heartbeat (a small write, design/protocol.md), so there is no heartbeat file to
        delete.

        Raises:
            IllegalTransitionError: the instant is not inflight (never started, already
                completed, or rolled back).
            LockLostError: the lease ended before the commit point; nothing was committed.
            CommitStateUnknownError: storage failed while writing the completed file; the
                instant may or may not have completed (reload the timeline to find out).
        """
        lease.ensure_held()
        view = self.view(lease)
        current = self._current(instant, view)
        if current.state != INFLIGHT:
            reason = {
                COMPLETED: "it is already completed",
                ROLLEDBACK: "it was rolled back",
                REQUESTED: "it was never started (requested -> inflight first)",
            }[current.state]
            raise IllegalTransitionError(instant.time, current.state, COMPLETED, reason)
        completed = current.with_state(COMPLETED, completed_at=self._allocate_time(view))
        data = self._encode_state(completed, metadata)  # a bad payload fails here, nothing sent
        try:
            self._put_encoded(completed, data)
        except ObjectExistsError:  # pragma: no cover - completion times are unique under the lock
            raise IllegalTransitionError(instant.time, COMPLETED, COMPLETED,
                                         "a completed file with this name exists") from None
        except Exception as exc:
            raise CommitStateUnknownError(
                f"writing the completed file of instant {instant.time} failed ({exc}); it may "
                "or may not have landed\nHelp: reload the timeline before retrying"
            ) from exc
        self._remember(lease, completed)
        if not held:
            # Past the commit point: a failure to tidy up must not look like a failed commit.
            with contextlib.suppress(Exception):
                self.storage.delete(heartbeat_path(instant.time))
        return completed

    def abort(self, instant: Instant, payload: object = None, *, lease: Lease) -> Instant:
        """Decide that a pending instant will never complete (its ``rolledback`` marker).

        Runs under the table lock, as :meth:`complete` does, so the two decisions exclude each
        other: a rolled-back instant can never be completed afterwards, even by a writer that
        was only paused.
        """
        lease.ensure_held()
        current = self._current(instant, self.view(lease))
        if current.state not in (REQUESTED, INFLIGHT):
            raise IllegalTransitionError(instant.time, current.state, ROLLEDBACK,
                                         "only a pending instant can be rolled back")
        aborted = current.with_state(ROLLEDBACK)
        # Only abort writes this marker, under the lock: if it is there, an earlier attempt of
        # this holder wrote it and then saw its write fail. The instant is rolled back all the same.
        with contextlib.suppress(ObjectExistsError):
            self._put_state(aborted, payload)
        self._remember(lease, aborted)
        return aborted

    def rollback(
        self,
        target: Instant,
        *,
        lease: Lease,
        undo: Callable[[Instant], object] | None = None,
    ) -> Instant:
        """Roll back a pending instant and record it as a completed ``rollback`` instant.

        ``undo(target)`` removes what the target wrote and returns the rollback's metadata; it
        runs after the target is marked rolled back, so it never races with the target's commit.
        If this process dies part way, the pending rollback instant is finished later by
        :meth:`resume_rollback`.
        """
        lease.ensure_held()
        current = self._current(target, self.view(lease))
        if not current.is_pending:
            raise IllegalTransitionError(target.time, current.state, ROLLEDBACK,
                                         "only a pending instant can be rolled back")
        instant = self.request(Action.ROLLBACK, RollbackPlan(target_time=target.time,
                                                        target_action=target.action), lease=lease)
        return self._finish_rollback(instant, target, lease=lease, undo=undo)

    def resume_rollback(self, rollback: Instant, *, lease: Lease,
                        undo: Callable[[Instant], object] | None = None) -> Instant:
        """Finish a rollback instant that a dead writer left pending (roll forward, never back).

        If the target completed before it was marked rolled back, the rollback lost that race:
        ``undo`` is not called and the rollback instant is returned ``rolledback`` instead.
        """
        plan = self.read_plan(rollback, RollbackPlan)
        target = self.view(lease).get(plan.target_time) or Instant(
            time=plan.target_time, action=plan.target_action, state=ROLLEDBACK)
        return self._finish_rollback(rollback, target, lease=lease, undo=undo)

    def _finish_rollback(self, instant: Instant, target: Instant, *, lease: Lease,
                         undo: Callable[[Instant], object] | None) -> Instant:
        current = self.view(lease).get(target.time)
        if current is not None and current.is_completed:
            # Only the target's rolledback marker decides, so a rollback whose writer died
            # before that marker can lose to the target's commit. Never undo committed work:
            # retire this rollback instead.
            return self.abort(instant, lease=lease)
        if current is not None and current.is_pending:
            target = self.abort(current, lease=lease)
        if self._current(instant, self.view(lease)).state == REQUESTED:
            instant = self.start(instant, lease=lease)
        metadata = undo(target) if undo is not None else None
        self.storage.delete(heartbeat_path(target.time))
        return self.complete(instant, metadata, lease=lease)

    def forget(self, instant: Instant, *, lease: Lease) -> None:
        """Delete a terminal instant's files by name, as if it had never been requested.

        For the instants of a staged table that never came to exist (design/protocol.md, "Staged
        create"): a rolled-back instant and the rollback that undid it are nobody's history.
        Only a terminal instant may go: forgetting a pending one would hide a live writer.
        """
        lease.ensure_held()
        current = self._current(instant, self.view(lease))
        if current.is_pending:
            raise IllegalTransitionError(instant.time, current.state, "absent",
                                         "only a decided instant can be forgotten")
        self._remove_active(current)
        if self._session is not None and self._session[0] is lease:
            self._session = None  # listed again on next use: views only ever gain instants

    # -- archival ------------------------------------------------------------------------------

    def archive(self, *, lease: Lease, fence_exclusive: str | None = None,
                damaged_before: Callable[[], str] | None = None) -> list[Instant]:
        """Fold the oldest terminal instants into the archive; return those moved.

        Runs when more than ``archive_trigger`` completed instants are active and keeps the
        newest ``archive_retain``. Instants that completed after the oldest pending instant
        began are never archived, because that writer's conflict check must still see them;
        nor are instants at or after ``fence_exclusive`` (for the metadata table's needs).

        An instant whose terminal file cannot be decoded is held active (:meth:`held_back`
        reports it) until the file is repaired, or until it completed before
        ``damaged_before()`` (the caller's retention, asked only when such a file is found):
        then it is archived as damaged, its bytes kept in the archive record.
        """
        lease.ensure_held(verify=False)
        view = self.view(lease)
        completed = view.completed()
        if len(completed) <= self.options.archive_trigger:
            return []
        pending = view.pending()
        horizon = min([p.time for p in pending] + ([fence_exclusive] if fence_exclusive else []),
                      default=None)
        chosen: list[Instant] = []
        for instant in completed[: len(completed) - self.options.archive_retain]:
            if horizon is not None and (instant.completed_at or "") >= horizon:
                break
            chosen.append(instant)
        if not chosen:
            return []
        cutoff = chosen[-1].completed_at or ""
        chosen += [i for i in view.rolled_back() if i.time < cutoff]
        records = []
        retained_from: str | None = None  # damaged_before(), asked once
        for instant in list(chosen):
            try:
                records.append(self._archived(instant))
                continue
            except CorruptMetadataError as exc:
                damage = exc
            # Holding the damaged instant active keeps the file where it can be repaired, while
            # a retained snapshot may still need what it says; the instants around it are
            # archived as usual, so the timeline stays bounded either way.
            if damaged_before is not None and retained_from is None:
                retained_from = damaged_before()
            if retained_from is not None and (instant.completed_at or instant.time) < retained_from:
                records.append(self._archived_as_damaged(instant))
                log.warning("archived instant %s as damaged, past retention: %s (its bytes are "
                            "kept in the archive; reading its metadata raises)", instant.time, damage)
                continue
            chosen.remove(instant)
            if damage.path not in self._held_reported:
                self._held_reported.add(damage.path)
                log.warning("archival keeps instant %s active: %s (validate() reports it; rewrite "
                            "the file, or it is archived as damaged once past retention)",
                            instant.time, damage)
        if not records:
            return []
        write_archive(self.storage, records)
        self._session = None  # the files below leave the active timeline
        for instant in chosen:
            self._remove_active(instant)
        merge_archives(self.storage, max_files=self.options.archive_max_files)
        return chosen

    def damaged_files(self) -> list[CorruptMetadataError]:
        """Decode every file of the timeline folder: instant files, archives, heartbeats and
        lock records; return what cannot be decoded (for validation; nothing raises)."""
        damaged: list[CorruptMetadataError] = []
        listing = self.storage.list(TIMELINE_FOLDER)
        names = {key.rsplit("/", 1)[1] for key in listing}
        terminal = {parsed.time for name in names if (parsed := parse_file_name(name)) is not None
                    and parsed.state in (COMPLETED, ROLLEDBACK)}
        for key in listing:
            name = key.rsplit("/", 1)[1]
            instant = parse_file_name(name)
            if instant is None:
                if looks_like_instant(name):
                    damaged.append(CorruptMetadataError(key, "an instant file name"))
                continue
            requested = file_name(instant.time, instant.action, REQUESTED)
            try:
                envelope = _decode_file(key, self.storage.read(key))
            except CorruptMetadataError as exc:
                damaged.append(exc)
                continue
            except FileNotFoundError:
                continue  # archived or rolled back since the listing
            if instant.state == INFLIGHT and instant.time not in terminal and \
                    requested not in names and bytes(envelope.payload) == b"null":
                # Only archival deletes a requested file, and only of a terminal instant; an
                # instant requested started holds its plan in its inflight file instead.
                damaged.append(CorruptMetadataError(
                    f"{TIMELINE_FOLDER}/{requested}", f"the plan of pending instant {instant.time}",
                    "no such file"))
        for path in archive_files(self.storage):
            try:
                records = read_archive(self.storage, path)
            except CorruptMetadataError as exc:
                damaged.append(exc)
                continue
            # What is lost stays reported: the instant's commit metadata, for good.
            damaged += [_archived_damaged(_path(r.time, r.action, r.state, r.completed_at),
                                          r.damaged, path)
                        for r in records if r.damaged is not None]
        for folder, decode, expected in (
            (HEARTBEAT_FOLDER, _heartbeat_decoder.decode, "a JSON heartbeat (kind 'heartbeat')"),
            (LOCK_FOLDER, _lock_decoder.decode, "a JSON lock record (kind 'lock')"),
        ):
            for path in self.storage.list(folder):
                try:
                    decode(self.storage.read(path))
                except FileNotFoundError:
                    continue
                except msgspec.DecodeError as exc:
                    damaged.append(CorruptMetadataError(path, expected, str(exc)))
        return damaged

    def held_back(self) -> list[CorruptMetadataError]:
        """The terminal instants of the active timeline whose file cannot be decoded: archival
        keeps them active until the file is repaired or they are past retention (for
        validation; nothing raises on damage)."""
        held = []
        for instant in self.load().instants:
            if instant.is_pending:
                continue
            try:
                self._archived(instant)
            except CorruptMetadataError as exc:
                held.append(exc)
            except FileNotFoundError:
                continue  # archived since the listing
        return held

    def _archived_as_damaged(self, instant: Instant) -> ArchivedInstant:
        path = _path(instant.time, instant.action, instant.state, instant.completed_at)
        return ArchivedInstant(time=instant.time, action=instant.action, state=instant.state,
                               completed_at=instant.completed_at, damaged=self.storage.read(path))

    def _archived(self, instant: Instant) -> ArchivedInstant:
        path = _path(instant.time, instant.action, instant.state, instant.completed_at)
        envelope = _decode_file(path, self.storage.read(path))
        return ArchivedInstant(time=instant.time, action=instant.action, state=instant.state,
                               completed_at=instant.completed_at, metadata=envelope.payload)

    def _remove_active(self, instant: Instant) -> None:
        # The terminal file goes last: if we crash part way, the instant still reads as terminal
        # (never as pending, which would invite a rollback of committed work).
        self.storage.delete(_path(instant.time, instant.action, REQUESTED))
        self.storage.delete(_path(instant.time, instant.action, INFLIGHT))
        self.storage.delete(_path(instant.time, instant.action, instant.state, instant.completed_at))

    # -- helpers -------------------------------------------------------------------------------

    def _current(self, instant: Instant, view: TimelineView | None = None) -> Instant:
        current = (view or self.load()).get(instant.time)
        if current is None:
            raise IllegalTransitionError(instant.time, "absent", instant.state,
                                         "no such instant on the active timeline")
        if current.action != instant.action:
            raise IllegalTransitionError(instant.time, current.state, instant.state,
                                         f"its action is {current.action!r}, not {instant.action!r}")
        return current

    def _put_state(self, instant: Instant, payload: object) -> None:
        self._put_encoded(instant, self._encode_state(instant, payload))

    def _encode_state(self, instant: Instant, payload: object) -> bytes:
        envelope = InstantFile(
            time=instant.time, action=instant.action, state=instant.state,
            completed_at=instant.completed_at, owner=self.owner,
            payload=msgspec.Raw(_encoder.encode(payload)),
        )
        return _encoder.encode(envelope)

    def _put_encoded(self, instant: Instant, data: bytes) -> None:
        path = _path(instant.time, instant.action, instant.state, instant.completed_at)
        self.storage.put_if_absent(path, data)



def _path(time: str, action: str, state: str, completed_at: str | None = None) -> str:
    return f"{TIMELINE_FOLDER}/{file_name(time, action, state, completed_at)}"


def _decode_file(path: str, data: bytes) -> InstantFile:
    try:
        envelope = _file_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise CorruptMetadataError(path, "a JSON instant file (kind 'instant')", str(exc)) from None
    named = parse_file_name(path.rsplit("/", 1)[1])
    if named is not None and (
        envelope.time, envelope.action, envelope.state, envelope.completed_at
    ) != (named.time, named.action, named.state, named.completed_at):
        raise CorruptMetadataError(
            path, f"content for instant {named}", f"{envelope.time} {envelope.action} "
            f"{envelope.state}" + (f" @ {envelope.completed_at}" if envelope.completed_at else ""),
        )
    return envelope


def _archived_damaged(path: str, data: bytes, archive: str | None = None) -> CorruptMetadataError:
    """The error of an instant archived as damaged: its file's own decoding error, and where
    its bytes are kept."""
    try:
        _decode_file(path, data)
        found = "undecodable when it was archived"
    except CorruptMetadataError as exc:
        found = exc.found
    where = archive or f"{ARCHIVE_FOLDER}/"
    return CorruptMetadataError(path, "a JSON instant file (kind 'instant')",
                                f"{found}; archived as damaged past retention, its bytes kept in {where}")


def _decode_payload(raw: msgspec.Raw | bytes, type: type[T], path: str) -> T:
    try:
        return msgspec.json.decode(raw, type=type)
    except msgspec.DecodeError as exc:
        raise CorruptMetadataError(path, f"a payload of type {getattr(type, '__name__', type)}",
                                   str(exc)) from None
