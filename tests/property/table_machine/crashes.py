"""Crashes and recovery: a write run with a fault armed, and what it must leave behind.

One writer (a :class:`txn.Table`) reaches storage through a :class:`FaultyStorage`, so any write
can be scripted to fail its Nth storage call, before the call reaches the store or after it
landed, for every N from the first call of the commit protocol to past its last one. Two ways
to fail:

* ``exception``: the fault fires once and the store works again at once, like a transient
  error: the writer's own error handling (rollback of its instant) runs and the same ``Table``
  object carries on;
* ``death``: from the fault on every call of that ``Table`` is refused, so no cleanup runs (a
  process that died). A fresh ``Table`` on the healthy store, with the clock moved past the
  heartbeat timeout and the lock lease, takes over and must roll the dead instant back at its
  next write.

Around every write the machine checks the outcome a caller sees: a write that saw no fault
returns its commit, with the rows it added and deleted; a write that returned a commit is
durable; a write that failed surfaces the injected fault (possibly as CommitStateUnknownError);
a fault on the commit point leaves the instant completed exactly when the completed file
landed; a surviving writer rolls its own instant back once the write is under way (from its
first heartbeat on) unless the outcome is unknown; an instant left pending (a fault inside
``begin``, a dead writer, an unknown outcome) is rolled back by the first write that begins
after its heartbeat expired.

Data files and delete deltas are written by pyarrow, not through the storage seam, so they are
not fault points themselves; the marker put just before each one and the next call after it
cover the states a fault there could leave (torn Parquet files are not modelled). Record-index
log blocks go through the seam like every metadata block. ADD SEGMENT reads the external files
through fsspec, not the seam, so its fault points are the table's own calls: the lock, the
timeline, the metadata table and (keyed) the record-index blocks of its keys.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from hypothesis import event, note

import txn
from metatxn.timeline import (
    ROLLEDBACK,
    CommitStateUnknownError,
    Instant,
    LockTimeoutError,
    TableLock,
    parse_file_name,
    parse_time,
)
from tests.faults import Call, FaultyStorage, InjectedFault, injected
from tests.property.table_machine.actions import EXPIRE_MS, Counted, FaultPlan
from tests.property.table_machine.config import (
    DATA_ACTIONS,
    HEARTBEAT_TIMEOUT_MS,
    INITIAL_CALL_BOUND,
    LOCK_LEASE_MS,
)
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.injection import Fault, counts, where
from tests.property.table_machine.model import Expected


class Crashes(MachineCore):
    """Run a write with a fault armed, and judge its outcome, its commit point and the recovery
    of what it left pending."""

    def _revive_if_dead(self) -> None:
        """The dead writer is gone; a new process opens the table once its heartbeat and lock
        lease have run out."""
        if not self.dead:
            return
        latest = self.observer_timeline.load().max_time()
        now = max(self.clock(), parse_time(latest) if latest else 0)
        self.clock.now_ms = now + HEARTBEAT_TIMEOUT_MS + LOCK_LEASE_MS + 1
        self.store, self.writer = self._new_writer()
        self.dead = False
        event("a new writer took over from a dead one")

    def _settle(self) -> None:
        """Before a write that running writers' segments decide (a compaction, DELETE SEGMENT):
        a lock wait moves the clock, so a writer within two lock leases of expiring could expire
        during the call; wait until it has (everything else stays alive throughout)."""
        later = self.clock() + 2 * LOCK_LEASE_MS
        timeline = self.observer_timeline
        if any(not timeline.is_expired(i) and timeline.is_expired(i, now_ms=later)
               for i in timeline.load().pending()):
            self.clock.now_ms = later
            event("waited for a writer about to expire")

    def _wait(self, ms: int) -> None:
        if ms < EXPIRE_MS:
            self.clock.advance(ms)
            return
        # Instant times may run ahead of the clock (they are bumped past the latest one).
        latest = self.observer_timeline.load().max_time()
        self.clock.now_ms = max(self.clock(), parse_time(latest) if latest else 0) + ms

    def _run(self, fault: Fault | None, call: Callable[[txn.Table], object]) -> tuple[
            object, InjectedFault | None, list[Call], int]:
        """Call the writer with ``fault`` armed: the outcome (or error), the fault that fired, the
        calls made and the clock when it started."""
        started_ms = self.clock()
        outcome, fired, calls = self._armed(self.store, fault, lambda: call(self.writer))
        if fault is not None and fault.mode == "death" and fired is not None:
            self.dead = True
            self._close_streams()
        return outcome, fired, calls, started_ms

    @staticmethod
    def _armed(store: FaultyStorage, fault: Fault | None, call: Callable[[], object]) -> tuple[
            object, InjectedFault | None, list[Call]]:
        """Call ``call`` with ``fault`` armed on ``store``: the outcome (or the error: every
        outcome is judged by the caller), the fault that fired and the calls made."""
        store.reset()
        if fault is not None:
            fault.arm(store)
        outcome: object
        try:
            outcome = call()
        except Exception as exc:
            outcome = exc
        finally:
            store.disarm()
        return outcome, store.fault, list(store.calls)

    def _resolve(self, plan: FaultPlan | None, operation: str) -> Fault | None:
        if plan is None:
            return None
        bound = self.call_bounds.get(operation, INITIAL_CALL_BOUND)[plan.counted]
        nth = 1 + plan.position * (bound + 2) // 1000
        fault = Fault(nth, plan.when, plan.mode, plan.counted)
        note(f"{fault}")
        return fault

    def _clean_run(self, operation: str, calls: list[Call], started_ms: int) -> None:
        """After a write that saw no fault: learn its call counts; the lock is free and the
        metadata timeline recovered."""
        if self.clock() == started_ms:  # no lock wait (each poll would add calls)
            kinds: tuple[Counted, ...] = ("all", "writes", "instants")
            made = {counted: sum(1 for c in calls if counts(counted, c)) for counted in kinds}
            seen = self.call_bounds.get(operation)
            self.call_bounds[operation] = made if seen is None else {
                counted: max(seen[counted], made[counted]) for counted in kinds}
        self._lock_is_free()
        self._metadata_timeline_recovered(started_ms)

    def _check_commit_point(self, fired: InjectedFault | None, instant: Instant,
                            found: Instant) -> None:
        """A fault on the commit point of ``instant`` leaves it completed exactly when it landed."""
        if fired is None or not fired.call.path.startswith("_timeline/"):
            return
        written = parse_file_name(fired.call.path.rpartition("/")[2])
        if written is not None and written.is_completed and written.time == instant.time:
            assert found.is_completed == fired.landed, (fired, found)
            event(f"fault on the commit point, landed={fired.landed}")

    def _failed(self, instant: Instant, found: Instant | None, fault: Fault | None,
                fired: InjectedFault | None, calls: list[Call], outcome: object) -> None:
        """``instant`` did not commit: a surviving writer rolled it back (when it must have)."""
        self.failed_instants.add(instant.time)
        assert found is not None, f"instant {instant.time} vanished from the timeline"
        if (fault is not None and fault.mode == "exception" and fired is not None
                and self._rollback_expected(calls, instant, fired, outcome)):
            assert found.state == ROLLEDBACK, (
                f"the writer did not roll back its failed instant: {found}")
        event(f"failed {instant.action} left its instant {found.state}")

    def _check_owed(self, owed: set[str], calls: list[Call], requested: Instant,
                    fired: InjectedFault | None) -> None:
        """The write began (its requested file landed after recovery, under the same lock), so
        every instant expired by then was rolled back, unless the fault hit that recovery: then
        the write goes on and leaves the instant to a later writer (the check is made again at
        every write, so one is owed until it is rolled back)."""
        view = self.observer_timeline.load()
        begun_at = next(c.index for c in calls if c.op == "put_if_absent" and c.landed
                        and c.path.rpartition("/")[2] == requested.file_name)
        recovery_failed = fired is not None and fired.call.index < begun_at
        for time in owed:
            now = view.get(time)
            assert now is None or not now.is_pending or recovery_failed, (
                f"{now} had expired but is still pending after the next write began")
        if owed:
            event("a later write rolled back expired instants" if not recovery_failed else
                  "a fault in recovery left expired instants to a later write")

    def _check_outcome(self, operation: str, outcome: object, fired: InjectedFault | None,
                       fault: Fault | None, calls: list[Call], started_ms: int) -> None:
        """What the caller of a write saw: its commit when no fault fired (and the run was
        clean), else the injected fault (possibly wrapped) or a commit that landed anyway."""
        if fired is None:
            assert isinstance(outcome, txn.Commit), f"{operation} failed without a fault: {outcome!r}"
            self._clean_run(operation, calls, started_ms)
            return
        assert fault is not None
        event(f"{operation}: fault {fired.when} {fired.call.op} in {where(fired.call.path)}"
              f" ({fault.mode})")
        if isinstance(outcome, Exception):
            assert injected(outcome) is not None, f"the fault surfaced as {outcome!r}"

    def _changed_nothing(self, expected: Expected, outcome: object, fired: InjectedFault | None,
                         instant: str | None) -> None:
        """A write refused up front, or one that matched nothing: no instant, no change (the
        invariants check the table is still the model's latest state)."""
        operation = expected.operation
        what = f"{operation} refused with {expected.refused.__name__}" if expected.refused else (
            expected.label if expected.replay else f"{operation} that matches nothing")
        assert instant is None, f"{what} created instant {instant}"
        if fired is None:
            if expected.refused is not None:
                assert isinstance(outcome, expected.refused), f"{what} returned {outcome!r}"
            else:
                assert outcome is None, f"{what} returned {outcome!r}"
            # (Nothing here about the lock: such a write never takes it, so a lease an earlier
            # failed write left behind may still be running.)
            event(f"{what}")
        elif (expected.refused is not None and isinstance(outcome, expected.refused)
              and fired.call.is_write):
            # A write checked against the latest state under the lock (ALTER) first rolls back
            # what dead writers left (best effort: a failed step is logged and left to the next
            # lock holder); a fault there leaves the refusal as it would be without it.
            event(f"{what}: fault in the recovery before the check")
        else:
            # The fault can only have hit a read (of the table's state) before the write began.
            assert isinstance(outcome, Exception) and injected(outcome) is not None, (
                f"{what} saw a fault but returned {outcome!r}")
            event(f"{what}: fault on a read")

    @staticmethod
    def _instants_of(calls: list[Call], actions: Sequence[str] = DATA_ACTIONS) -> list[Instant]:
        """The instants (data instants, unless ``actions`` says) the write created: their
        first state files that landed (the requested file, or the inflight file of an instant
        requested started: a small write of a format-2 table), in order."""
        made = []
        seen = set()
        for call in calls:
            if call.op == "put_if_absent" and call.landed and call.path.startswith("_timeline/"):
                parsed = parse_file_name(call.path.rpartition("/")[2])
                if parsed is not None and parsed.action in actions and parsed.time not in seen \
                        and parsed.state in ("requested", "inflight"):
                    made.append(parsed)
                    seen.add(parsed.time)
        return made

    @staticmethod
    def _rollback_expected(calls: list[Call], instant: Instant, fault: InjectedFault,
                           outcome: object) -> bool:
        """Whether a writer that survives its fault must have rolled its instant back itself.

        From the first heartbeat on (step 2 of the protocol is done: the write is under way),
        every failure before the commit point is rolled back by the writer. It need not be when
        the outcome is unknown (CommitStateUnknownError), nor when the fault hit ``begin`` before
        that: the instant is then left pending and must be rolled back by the first write that
        begins after it expired (checked in ``_write``).
        """
        if isinstance(outcome, CommitStateUnknownError):
            return False
        beat = next((c for c in calls if c.op == "put" and c.path.startswith("_timeline/heartbeats/")
                     and c.path.endswith(instant.time)), None)
        return beat is not None and fault.call.index >= beat.index

    def _lock_is_free(self) -> None:
        lock = TableLock(self.inner, owner="observer", clock=self.clock, lease_ms=LOCK_LEASE_MS)
        try:
            lease = lock.acquire(timeout_ms=0)
        except LockTimeoutError as exc:
            raise AssertionError(f"a write that saw no fault left the table lock held: {exc}") from None
        lease.release()

    def _metadata_timeline_recovered(self, started_ms: int) -> None:
        """After a write that saw no fault, nothing is pending on the metadata timeline but the
        deltacommits of data instants still pending and compactions whose maintainer counted
        as alive when the write began (a dead maintainer's compaction was retired by the
        write's recovery)."""
        data_pending = {i.time for i in self.observer_timeline.load().pending()}
        stuck = [str(i) for i in self.metadata_timeline.load().pending()
                 if not (i.action == "deltacommit" and i.time in data_pending)
                 and not (i.action == "compaction"
                          and not self.metadata_timeline.is_expired(i, now_ms=started_ms))]
        assert not stuck, f"metadata instants left pending after a clean write: {stuck}"
