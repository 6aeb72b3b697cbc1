"""Model-based test of the timeline: several writers, a clock that jumps both ways, crashes.

Writers are separate :class:`timeline.Timeline` objects with their own owners, sharing one
storage and one :class:`FakeClock`. Each writer reaches storage through its own
:class:`FaultyStorage`, so a fault can be scripted for one writer's next operation: fail its Nth
storage call, before the call reaches the store or after it landed. A faulted writer has
crashed: its process is gone (the wrapper refuses every later call, so no ``finally`` or lock
release runs), its lease is abandoned, its pending instant is left as is, and a fresh writer
with a new owner takes its slot.

The model is rebuilt from the writers' call logs, never from the code under test: every
``put_if_absent`` of an instant file that landed (including one that landed and then raised)
moves that instant to the state the file names. After every step the real timeline, read
through ``history()`` on the undisturbed inner store, must equal that model.

Invariants (checked after every step):

* states only move forward: requested -> inflight -> completed | rolledback, never back, and a
  terminal state never changes (so a rolled-back instant is never completed);
* instant times strictly increase in request order, and every completion time exceeds every
  time allocated before it (hence completion times are unique, totally ordered and later than
  their own requested times);
* history() (active + archived) lists every instant whose requested file landed, once, and its
  completed instants are exactly those whose completed file landed; a crashed writer's instant
  is reported completed only if its completion write landed;
* undo never runs against an instant that completed, and a completed rollback instant's target
  is rolled back;
* the active ``_timeline/`` folder holds nothing but state files of active instants, and each
  archival brings the active completed instants down to what the archival rules allow.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from metatxn.timeline import (
    COMPLETED,
    INFLIGHT,
    REQUESTED,
    ROLLEDBACK,
    CommitStateUnknownError,
    IllegalTransitionError,
    Instant,
    Lease,
    LocalStorage,
    LockLostError,
    MemoryStorage,
    Storage,
    Timeline,
    TimelineOptions,
    TimelineView,
    parse_file_name,
    parse_time,
)
from metatxn.timeline._archive import archive_merge_due
from metatxn.timeline._instant import state_rank
from tests.conftest import FakeClock
from tests.faults import FaultyStorage, injected

R = TypeVar("R")

OPTIONS = TimelineOptions(
    lock_lease_ms=1_000, lock_timeout_ms=120_000, lock_poll_ms=100,
    heartbeat_interval_ms=500, heartbeat_timeout_ms=2_000,
    archive_trigger=4, archive_retain=2, archive_max_files=2,
)
WRITERS = 3
#: How far the clock may fall behind the latest reading it ever gave.
MAX_BACKWARDS_MS = 5_000
DATA_ACTIONS = ("commit", "deltacommit", "replacecommit", "compaction", "clean")

writer_slots = st.integers(0, WRITERS - 1)
#: No fault three times in four; otherwise fail the Nth storage call of the operation.
faults = st.one_of(
    st.none(), st.none(), st.none(),
    st.tuples(st.integers(1, 16), st.sampled_from(["before", "after"])),
)


class Crashed(Exception):
    """The acting writer's process died at an injected fault."""


@dataclass
class Writer:
    tl: Timeline
    store: FaultyStorage
    current: Instant | None = None
    absorbed: int = 0  # how much of store.calls the model has applied


@dataclass
class Known:
    """What the model knows of one instant: the furthest state whose file landed."""

    action: str
    state: str
    completed_at: str | None = None
    rollback_target: str | None = None


@dataclass
class Model:
    known: dict[str, Known] = field(default_factory=dict)
    request_order: list[str] = field(default_factory=list)
    ever_completed: set[str] = field(default_factory=set)
    max_time: str = ""

    def pending(self) -> set[str]:
        return {t for t, k in self.known.items() if k.state in (REQUESTED, INFLIGHT)}

    def land(self, instant: Instant, rollback_target: str | None) -> None:
        """Apply one instant file that reached storage."""
        held = self.known.get(instant.time)
        if held is None:
            assert instant.state == REQUESTED, f"{instant} landed before its requested file"
            assert instant.time > self.max_time, (
                f"instant time {instant.time} is not above every earlier time ({self.max_time})"
            )
            self.known[instant.time] = Known(
                action=instant.action, state=REQUESTED,
                rollback_target=rollback_target if instant.action == "rollback" else None,
            )
            self.request_order.append(instant.time)
            self.max_time = instant.time
            return
        assert held.action == instant.action, f"{instant} changed action from {held.action}"
        assert held.state not in (COMPLETED, ROLLEDBACK), (
            f"{instant.time} moved from terminal {held.state} to {instant.state}"
        )
        assert state_rank(instant.state) > state_rank(held.state), (
            f"{instant.time} moved backwards from {held.state} to {instant.state}"
        )
        if instant.state == COMPLETED:
            assert instant.completed_at is not None
            assert instant.completed_at > self.max_time, (
                f"completion time {instant.completed_at} of {instant.time} is not above every "
                f"earlier time ({self.max_time})"
            )
            self.max_time = instant.completed_at
            self.ever_completed.add(instant.time)
            if held.rollback_target is not None:
                target = self.known[held.rollback_target]
                assert target.state == ROLLEDBACK, (
                    f"rollback {instant.time} completed but its target {held.rollback_target} "
                    f"is {target.state}"
                )
        held.state = instant.state
        held.completed_at = instant.completed_at


class TimelineMachine(RuleBasedStateMachine):
    """Drive writers against one store; subclasses choose the backend."""

    @staticmethod
    def make_storage() -> tuple[Storage, Callable[[], None]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def __init__(self) -> None:
        super().__init__()
        self.inner, self._cleanup = self.make_storage()
        self.clock = FakeClock()
        self.latest_reading = self.clock()
        self.generations = itertools.count()
        self.writers = [self._new_writer(i) for i in range(WRITERS)]
        self.observer = Timeline(self.inner, clock=self.clock, owner="observer", options=OPTIONS,
                                 sleep=self.clock.sleep)
        self.model = Model()
        self.completed_baseline = 0  # active completed instants after the last clean archival
        self.completed_since_archive = 0

    def teardown(self) -> None:
        self._cleanup()

    # -- writers, crashes and the call log -----------------------------------------------------

    def _new_writer(self, slot: int) -> Writer:
        store = FaultyStorage(self.inner)
        owner = f"writer-{slot}.{next(self.generations)}"
        return Writer(Timeline(store, clock=self.clock, owner=owner, options=OPTIONS,
                               sleep=self.clock.sleep), store)

    def _absorb(self, writer: Writer, rollback_target: str | None = None) -> None:
        """Apply every instant file this writer's calls landed since the last absorb."""
        for call in writer.store.calls[writer.absorbed:]:
            if call.op != "put_if_absent" or not call.landed:
                continue
            folder, _, name = call.path.rpartition("/")
            instant = parse_file_name(name) if folder == "_timeline" else None
            if instant is not None:
                before = self.model.known.get(instant.time)
                was_completed = before is not None and before.state == COMPLETED
                self.model.land(instant, rollback_target)
                if instant.state == COMPLETED and not was_completed:
                    self.completed_since_archive += 1
        writer.absorbed = len(writer.store.calls)

    def _act(self, slot: int, fault: tuple[int, str] | None, operation: Callable[[Writer], R],
             *, rollback_target: str | None = None) -> R:
        """Run one operation of one writer, with its fault armed; a fault crashes the writer.

        Raises:
            Crashed: the fault fired (whatever the operation raised or returned).
        """
        writer = self.writers[slot]
        if fault is not None:
            nth, when = fault
            writer.store.arm(nth, when=when, crash=True)  # type: ignore[arg-type]
        try:
            result = operation(writer)
        except Exception as exc:
            if writer.store.fired:
                event(f"crash in {operation_name(operation)}")
                assert injected(exc) is not None, f"a crash surfaced as {exc!r}"
                if isinstance(exc, CommitStateUnknownError):
                    # The commit point itself failed: the instant is completed on storage
                    # exactly when the fault says the completed file landed.
                    fault = writer.store.fault
                    assert fault is not None and fault.call.op == "put_if_absent"
                    written = parse_file_name(fault.call.path.rpartition("/")[2])
                    assert written is not None and written.is_completed
                    found = self.observer.load().get(written.time)
                    assert found is not None and found.is_completed == fault.landed, (
                        found, fault)
                raise Crashed from exc
            raise
        finally:
            writer.store.disarm()
            self.latest_reading = max(self.latest_reading, self.clock())  # lock waits sleep
            self._absorb(writer, rollback_target)
            if writer.store.fired:
                self.writers[slot] = self._new_writer(slot)
        return result

    @staticmethod
    def _under_lock(writer: Writer, body: Callable[[Lease], R]) -> R:
        """Run ``body`` holding the lock; release it unless the process died meanwhile."""
        lease = writer.tl.lock()
        try:
            result = body(lease)
        except Exception:
            if not writer.store.dead:
                lease.release()
            raise
        lease.release()
        return result

    def _state(self, instant: Instant) -> str:
        return self.model.known[instant.time].state

    # -- rules: one writer's own instant -------------------------------------------------------

    @precondition(lambda self: any(w.current is None for w in self.writers))
    @rule(data=st.data(), action=st.sampled_from(DATA_ACTIONS), own_lease=st.booleans(),
          fault=faults)
    def request(self, data: st.DataObject, action: str, own_lease: bool,
                fault: tuple[int, str] | None) -> None:
        slot = data.draw(st.sampled_from([i for i, w in enumerate(self.writers)
                                          if w.current is None]), label="writer")

        def operation(writer: Writer) -> Instant:
            plan = {"by": writer.tl.owner}
            if own_lease:
                return writer.tl.request(action, plan)
            return self._under_lock(writer, lambda lease: writer.tl.request(action, plan,
                                                                             lease=lease))

        try:
            instant = self._act(slot, fault, operation)
        except Crashed:
            return
        assert instant.state == REQUESTED and self._state(instant) == REQUESTED
        assert self.observer.read_plan(instant) == {"by": self.writers[slot].tl.owner}
        self.writers[slot].current = instant

    @precondition(lambda self: any(w.current is None for w in self.writers))
    @rule(data=st.data(), count=st.integers(1, 4), fault=faults)
    def commit_in_one_go(self, data: st.DataObject, count: int,
                         fault: tuple[int, str] | None) -> None:
        """One writer commits ``count`` instants back to back; a fault anywhere in the run
        crashes it there."""
        slot = data.draw(st.sampled_from([i for i, w in enumerate(self.writers)
                                          if w.current is None]), label="writer")

        def operation(writer: Writer) -> list[Instant]:
            done = []
            for n in range(count):
                started = writer.tl.start(writer.tl.request("commit", {"n": n}))
                writer.current = started
                writer.tl.heartbeat(started).beat()
                done.append(self._under_lock(writer, lambda lease, started=started, n=n:
                                             writer.tl.complete(started, {"n": n}, lease=lease)))
                writer.current = None
            return done

        try:
            done = self._act(slot, fault, operation)
        except Crashed:
            return
        event("commit_in_one_go succeeded")
        assert all(d.time in self.model.ever_completed for d in done)
        assert [d.completed_at for d in done] == sorted(d.completed_at for d in done)  # type: ignore[type-var]

    @precondition(lambda self: any(w.current is not None and w.current.state == REQUESTED
                                   for w in self.writers))
    @rule(data=st.data(), beat=st.booleans(), fault=faults)
    def start(self, data: st.DataObject, beat: bool, fault: tuple[int, str] | None) -> None:
        slot = data.draw(st.sampled_from([
            i for i, w in enumerate(self.writers)
            if w.current is not None and w.current.state == REQUESTED]), label="writer")
        current = self.writers[slot].current
        assert current is not None

        def operation(writer: Writer) -> Instant:
            started = writer.tl.start(current)
            if beat:
                writer.tl.heartbeat(started).beat()
            return started

        try:
            started = self._act(slot, fault, operation)
        except Crashed:
            return
        except IllegalTransitionError as exc:
            # Someone rolled it back while this writer was paused.
            event("paused writer found its instant rolled back")
            assert self._state(current) == ROLLEDBACK, exc
            self.writers[slot].current = None
            return
        assert started.state == INFLIGHT and self._state(started) == INFLIGHT
        self.writers[slot].current = started

    @precondition(lambda self: any(w.current is not None for w in self.writers))
    @rule(data=st.data(), fault=faults)
    def beat(self, data: st.DataObject, fault: tuple[int, str] | None) -> None:
        slot = data.draw(st.sampled_from([i for i, w in enumerate(self.writers)
                                          if w.current is not None]), label="writer")
        current = self.writers[slot].current
        assert current is not None
        try:
            self._act(slot, fault, lambda writer: writer.tl.heartbeat(current).beat())
        except Crashed:
            return

    @precondition(lambda self: any(w.current is not None and w.current.state == INFLIGHT
                                   for w in self.writers))
    @rule(data=st.data(), stale_lease=st.booleans(), fault=faults)
    def complete(self, data: st.DataObject, stale_lease: bool,
                 fault: tuple[int, str] | None) -> None:
        slot = data.draw(st.sampled_from([
            i for i, w in enumerate(self.writers)
            if w.current is not None and w.current.state == INFLIGHT]), label="writer")
        current = self.writers[slot].current
        assert current is not None

        if stale_lease:
            writer = self.writers[slot]
            lease = writer.tl.lock()
            lease.release()
            before = len(writer.store.calls)
            try:
                writer.tl.complete(current, {"by": writer.tl.owner}, lease=lease)
            except LockLostError:
                pass
            else:  # pragma: no cover - the assertion below reports it
                raise AssertionError("complete() accepted a released lease")
            assert not [c for c in writer.store.calls[before:] if c.is_write], (
                "complete() with a released lease wrote to storage"
            )
            self.latest_reading = max(self.latest_reading, self.clock())
            self._absorb(writer)
            return

        def operation(writer: Writer) -> Instant:
            return self._under_lock(writer, lambda lease: writer.tl.complete(
                current, {"by": writer.tl.owner}, lease=lease))

        try:
            done = self._act(slot, fault, operation)
        except Crashed:
            return
        except IllegalTransitionError as exc:
            event("paused writer found its instant rolled back")
            assert self._state(current) == ROLLEDBACK, exc
            self.writers[slot].current = None
            return
        event("complete succeeded")
        assert done.state == COMPLETED and done.time in self.model.ever_completed
        assert self.model.known[done.time].completed_at == done.completed_at
        assert self.observer.read_metadata(done) == {"by": self.writers[slot].tl.owner}
        self.writers[slot].current = None

    @precondition(lambda self: any(w.current is not None for w in self.writers))
    @rule(data=st.data())
    def writer_dies_silently(self, data: st.DataObject) -> None:
        """A writer's process vanishes between storage calls, leaving its instant pending."""
        slot = data.draw(st.sampled_from([i for i, w in enumerate(self.writers)
                                          if w.current is not None]), label="writer")
        self.writers[slot] = self._new_writer(slot)

    # -- rules: recovery, archival, time -------------------------------------------------------

    @precondition(lambda self: bool(self.model.pending()))
    @rule(data=st.data(), slot=writer_slots, abort_only=st.booleans(), fault=faults)
    def roll_back_an_expired_instant(self, data: st.DataObject, slot: int, abort_only: bool,
                                     fault: tuple[int, str] | None) -> None:
        """Past the heartbeat timeout every pending instant is expired; roll one back (or
        resume a rollback someone left pending)."""
        newest = max(self.latest_reading, parse_time(self.model.max_time))
        self._set_clock(newest + 2 * OPTIONS.heartbeat_timeout_ms)
        expired = self.observer.expired()
        assert {i.time for i in expired} == self.model.pending()
        target = data.draw(st.sampled_from(expired), label="target")

        def undo(instant: Instant) -> dict[str, Any]:
            assert instant.time not in self.model.ever_completed, (
                f"undo ran against {instant.time}, which completed"
            )
            assert instant.state == ROLLEDBACK
            return {"undid": instant.time}

        if target.action == "rollback":
            def operation(writer: Writer) -> Instant:
                return self._under_lock(writer, lambda lease: writer.tl.resume_rollback(
                    target, lease=lease, undo=undo))
            aimed_at = None
        elif abort_only:
            def operation(writer: Writer) -> Instant:
                return self._under_lock(writer, lambda lease: writer.tl.abort(
                    target, {"aborted_by": writer.tl.owner}, lease=lease))
            aimed_at = None
        else:
            def operation(writer: Writer) -> Instant:
                return self._under_lock(writer, lambda lease: writer.tl.rollback(
                    target, lease=lease, undo=undo))
            aimed_at = target.time

        try:
            result = self._act(slot, fault, operation, rollback_target=aimed_at)
        except Crashed:
            return
        if target.action == "rollback":
            aimed = self.model.known[target.time].rollback_target
            assert aimed is not None
            event(f"resumed rollback ended {result.state}")
            if result.state == COMPLETED:
                assert self.model.known[aimed].state == ROLLEDBACK
            else:  # the rollback lost to its target's commit and was retired
                assert result.state == ROLLEDBACK and aimed in self.model.ever_completed
        elif abort_only:
            assert result.state == ROLLEDBACK and self._state(target) == ROLLEDBACK
        else:
            assert result.action == "rollback" and result.state == COMPLETED
            assert self._state(target) == ROLLEDBACK
            assert self.observer.read_metadata(result) == {"undid": target.time}

    @rule(slot=writer_slots, fault=faults)
    def archive(self, slot: int, fault: tuple[int, str] | None) -> None:
        def operation(writer: Writer) -> tuple[list[Instant], list[Instant], list[Instant]]:
            def body(lease: Lease) -> tuple[list[Instant], list[Instant], list[Instant]]:
                view = self.observer.load()
                moved = writer.tl.archive(lease=lease)
                return list(view.completed()), list(view.pending()), moved
            return self._under_lock(writer, body)

        try:
            completed, pending, moved = self._act(slot, fault, operation)
        except Crashed:
            return
        after = self.observer.load()
        horizon = min((p.time for p in pending), default=None)
        pinned = sum(1 for c in completed if horizon is not None and (c.completed_at or "") >= horizon)
        n = len(completed)
        expected = n if n <= OPTIONS.archive_trigger else max(OPTIONS.archive_retain, pinned)
        assert len(after.completed()) == expected, (n, pinned, len(after.completed()))
        if moved:
            event("archived instants")
            archive_files = len(self.inner.list("_timeline/archive"))
            if archive_files == 1:
                event("archive files merged (or first archive)")
            # Merging follows a write, so only a run that archived something bounds the files:
            # no merge is left due (the newest archive_max_files files are not all of one level).
            assert not archive_merge_due(self.inner, OPTIONS.archive_max_files)
            done = [m for m in moved if m.state == COMPLETED]
            cutoff = done[-1].completed_at
            assert cutoff is not None
            assert horizon is None or all(m.completed_at < horizon for m in done)  # type: ignore[operator]
            assert all(m.time < cutoff for m in moved if m.state == ROLLEDBACK)
            assert all(r.time >= cutoff for r in after.rolled_back())
            assert all(after.get(m.time) is None for m in moved)
        self.completed_baseline = len(after.completed())
        self.completed_since_archive = 0

    @rule(delta=st.one_of(st.integers(1, 3_000), st.integers(-3_000, -1)))
    def clock_step(self, delta: int) -> None:
        self._set_clock(max(self.clock() + delta, self.latest_reading - MAX_BACKWARDS_MS))

    def _set_clock(self, now_ms: int) -> None:
        self.clock.now_ms = now_ms
        self.latest_reading = max(self.latest_reading, now_ms)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def the_timeline_agrees_with_the_model(self) -> None:
        """Read the store once per step (history and the active view) and check every
        invariant of the module docstring against it."""
        history = self.observer.history()
        view = self.observer.load()
        self._history_equals_the_model(history)
        self._times_strictly_increase_and_completion_order_is_total(history, view)
        self._the_active_timeline_stays_bounded(view)

    def _history_equals_the_model(self, history: list[Instant]) -> None:
        """Active + archived = every instant whose requested file landed, each once, in the
        furthest state that landed; completed exactly when its completed file landed."""
        by_time = {i.time: i for i in history}
        assert len(by_time) == len(history), "history() lists an instant twice"
        assert set(by_time) == set(self.model.known), (
            f"lost {sorted(set(self.model.known) - set(by_time))}, "
            f"unexplained {sorted(set(by_time) - set(self.model.known))}"
        )
        for time, known in self.model.known.items():
            seen = by_time[time]
            assert (seen.action, seen.state, seen.completed_at) == (
                known.action, known.state, known.completed_at), (seen, known)
        assert {i.time for i in history if i.is_completed} == self.model.ever_completed

    def _times_strictly_increase_and_completion_order_is_total(
        self, history: list[Instant], view: TimelineView
    ) -> None:
        order = self.model.request_order
        assert order == sorted(order) and len(set(order)) == len(order)
        completions = [i.completed_at for i in history if i.completed_at is not None]
        every_time = [i.time for i in history] + completions
        assert len(set(every_time)) == len(every_time), "two instants share a time"
        assert all(i.completed_at > i.time for i in history if i.completed_at is not None)
        listed = [i.completed_at for i in view.completed()]
        assert listed == sorted(listed) and len(set(listed)) == len(listed)  # type: ignore[type-var]

    def _the_active_timeline_stays_bounded(self, view: TimelineView) -> None:
        """Only state files of active instants live in _timeline/ (at most three each), and
        completed instants there grow only by completions since the last archival."""
        assert len(self.inner.list("_timeline")) <= 3 * len(view)
        assert len(view.completed()) <= self.completed_baseline + self.completed_since_archive


def operation_name(operation: Callable[..., object]) -> str:
    return operation.__qualname__.split(".<locals>")[0].rsplit(".", 1)[-1]


_memory_roots = itertools.count()


def _memory_storage() -> tuple[Storage, Callable[[], None]]:
    import fsspec

    root = f"/metatxn-timeline-machine-{os.getpid()}-{next(_memory_roots)}"

    def cleanup() -> None:
        fs = fsspec.filesystem("memory")
        if fs.exists(root):
            fs.rm(root, recursive=True)

    return MemoryStorage(root), cleanup


def _local_storage() -> tuple[Storage, Callable[[], None]]:
    root = tempfile.mkdtemp(prefix="metatxn-timeline-machine-")
    return LocalStorage(root), lambda: shutil.rmtree(root, ignore_errors=True)


def machine_on(name: str, factory: Callable[[], tuple[Storage, Callable[[], None]]]
               ) -> type[TimelineMachine]:
    """The same machine, bound to one backend (the differential half of the contract)."""
    machine = type(f"TimelineMachineOn{name}", (TimelineMachine,),
                   {"make_storage": staticmethod(factory)})
    return machine


MemoryMachine = machine_on("Memory", _memory_storage)
LocalDiskMachine = machine_on("LocalDisk", _local_storage)

TestTimelineOnMemory = MemoryMachine.TestCase
TestTimelineOnLocalDisk = LocalDiskMachine.TestCase
