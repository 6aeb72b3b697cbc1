"""Table services by processes of their own: CLEAN FILES (the cleaner) and table maintenance
(the maintainer: metadata compaction, its cleaning, archival).

Table services, with the fault armed like any write's:

* ``clean()``, ``clean(force=True)`` and ``clean(dry_run=True)`` by another process (the
  cleaner), so that it finds the writer's instants pending and alive when the writer died;
  ``clean.retain_commits`` is 2 or 4, ``clean.retain_hours`` 0 and ``clean.trash_hours`` 0 or 1,
  so that cleans remove files within a run. A cleaner that dies is replaced at the next clean;
* table maintenance (``maintain()``: metadata compaction, its cleaning, archival) by another
  process (the maintainer), with the fault armed, or stopped after it began a metadata
  compaction and wrote its bases (a maintainer paused, or dead), so that later writes race the
  pending compaction until a ``finish`` step tries to complete it (refused if a writer retired
  it as dead meanwhile) or its heartbeat expires and a writer retires it. Writers maintain the
  table themselves after their commits (``maintenance.mode`` inline) or leave it to the
  maintainer (manual), as drawn at create. No maintenance step may change what any snapshot
  reads: the invariants (``invariants``) run after every step.

Around every CLEAN FILES: the files that the markers of live writers' instants (pending, heartbeat
not expired) name are still there after it, whatever fault hit it; a dry run makes no write call
and no instant; a clean that returned removed each file it names from its place (the orphans it
reports as ``trashed`` into ``_trash/<T>/``), its instant is completed, and it rolled back every
instant that had expired; one that failed is rolled back by the cleaner (from its first heartbeat
on) or left pending for the next writer; another clean still running (alive), or a pending
rollback of a clean, refuses it with CommitConflictError. Every file of a live writer must also
survive every other step (``live_writers_keep_their_files``).
"""

from __future__ import annotations

from hypothesis import event

import txn
from metatxn.indexes import METADATA_FOLDER
from metatxn.timeline import (
    ROLLEDBACK,
    CommitStateUnknownError,
    Instant,
    RollbackPlan,
)
from tests.faults import Call, InjectedFault, injected
from tests.property.table_machine.actions import Clean, Maintain
from tests.property.table_machine.config import DATA_ACTIONS
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.injection import Fault, where


class Services(MachineCore):
    """CLEAN FILES by the cleaner and table maintenance by the maintainer, with the fault armed
    on their own storage."""

    def _announced(self, writers: set[str]) -> set[str]:
        """The files on storage that the markers of instants ``writers`` name (a marker is put
        before its file is written: ``<folder>/<name>_<T>.<extension>``)."""
        named = set()
        for marker in self.inner.list("_markers"):
            instant = marker.rpartition("_")[2].partition(".")[0]
            if instant in writers:
                path = self.inner.read(marker).decode()
                if self.inner.exists(path):
                    named.add(path)
        return named

    def _alive_writers(self) -> set[str]:
        """The pending data instants whose heartbeat has not expired."""
        view = self.observer_timeline.load()
        expired = {i.time for i in self.observer_timeline.expired(view)}
        return {i.time for i in view.pending() if i.action in DATA_ACTIONS and i.time not in expired}

    def _clean(self, action: Clean) -> None:
        """CLEAN FILES by the cleaner, with the fault armed on its storage. Whatever happens,
        the files announced by live writers stay, retained snapshots read what they did and
        older ones are expired or still right; a dry run writes nothing."""
        mode = action.mode
        operation = f"clean {mode}"
        if self.cleaner_dead:
            self.cleaner_store, self.cleaner = self._new_writer()
            self.cleaner_dead = False
        view = self.observer_timeline.load()
        owed = {i.time for i in self.observer_timeline.expired(view)}
        announced = self._announced(self._alive_writers())
        if announced:
            event("clean while a live writer has files")
        # A clean is refused beside a clean still running or a pending rollback of a clean (it
        # may still move files back from the trash); recovery first finishes the expired ones,
        # unless the fault hits it.
        cleaning = {i.time for i in view.pending() if i.action == "clean" or (
            i.action == "rollback"
            and self.observer_timeline.read_plan(i, RollbackPlan).target_action == "clean")}
        running = bool(cleaning - owed)
        fault = self._resolve(action.fault, operation)
        outcome, fired, calls = self._armed(
            self.cleaner_store, fault,
            lambda: self.cleaner.clean(dry_run=mode == "dry_run", force=mode == "force"))
        if fault is not None and fault.mode == "death" and fired is not None:
            self.cleaner_dead = True
        if mode != "dry_run":
            # What this clean may have published (even if it failed after publishing): the
            # snapshots of the last clean.retain_commits commits (force: the latest) stay.
            # changes.retain_commits N makes it keep N + 1 (a feed of N starts after the
            # N+1-th last); force keeps only the latest whatever the properties.
            keep = 1 if mode == "force" else max(self.clean_retain, (self.changes_retain or 0) + 1)
            self.clean_floor = max(self.clean_floor, len(self.acked) - keep)
        requested = self._instants_of(calls, ("clean",))
        assert len(requested) <= 1, f"{operation} made instants {requested}"
        if fired is None:
            if isinstance(outcome, txn.CommitConflictError) and running:
                event(f"{operation} refused while another clean runs")
            else:
                assert isinstance(outcome, txn.CleanResult), (
                    f"{operation} failed without a fault: {outcome!r}")
        else:
            assert fault is not None
            event(f"{operation}: fault {fired.when} {fired.call.op} in {where(fired.call.path)}"
                  f" ({fault.mode})")
            if isinstance(outcome, Exception):
                assert injected(outcome) is not None or (
                    isinstance(outcome, txn.CommitConflictError) and cleaning), (
                    f"the fault surfaced as {outcome!r}")
        if mode == "dry_run":
            wrote = [f"{c.op} {c.path}" for c in calls if c.is_write]
            assert not wrote and not requested, f"a dry run wrote {wrote}"
            if isinstance(outcome, txn.CleanResult):
                assert outcome.dry_run and outcome.instant is None, outcome
                event(f"dry run would remove {'something' if outcome.files else 'nothing'}")
        else:
            self._judge_clean(operation, outcome, fault, fired, calls, requested, owed)
        gone = sorted(path for path in announced if not self.inner.exists(path))
        assert not gone, f"{operation} removed files that live writers announced: {gone}"
        # Every snapshot: retained ones read what they did, older ones that of the model or
        # raise SnapshotExpiredError.
        for commit in self.acked:
            self._check_the_past(self.reader, commit, commit.instant)

    def _judge_clean(self, operation: str, outcome: object, fault: Fault | None,
                     fired: InjectedFault | None, calls: list[Call], requested: list[Instant],
                     owed: set[str]) -> None:
        history = {i.time: i for i in self.observer_timeline.history()}
        found = history.get(requested[0].time) if requested else None
        if found is not None:
            self._check_commit_point(fired, requested[0], found)
        if isinstance(outcome, txn.CleanResult):
            assert not outcome.dry_run
            if outcome.instant is not None:
                assert found is not None and found.time == outcome.instant and found.is_completed, (
                    f"{operation} returned {outcome.instant}; its instant is {found}")
            # Orphans go to the trash; files of expired segments and replaced deltas are deleted
            # for good (as in CarbonData): gone from their place either way.
            gone = [path for path in outcome.files
                    if not path.startswith(("_trash/", f"{METADATA_FOLDER}/"))]
            for path in gone:
                assert not self.inner.exists(path), path
            for path in outcome.trashed:
                assert outcome.trash is not None, outcome
                assert self.inner.exists(f"{outcome.trash}/{path}"), f"{path} is not in the trash"
            assert outcome.bytes == outcome.freed_bytes + outcome.trashed_bytes, outcome
            event(f"{operation} removed {', '.join(sorted(outcome.reasons)) or 'nothing'}")
            if fired is None and not self.dead:
                self._lock_is_free()
            if fired is None:
                # It rolled back every writer whose heartbeat had expired before it planned.
                view = self.observer_timeline.load()
                stuck = [str(now) for t in owed if (now := view.get(t)) is not None and now.is_pending]
                assert not stuck, f"{operation} left expired instants pending: {stuck}"
        elif found is not None and found.is_completed:
            if fault is not None and fault.mode == "exception":
                assert isinstance(outcome, CommitStateUnknownError), (
                    f"{operation} completed {found.time} but raised {outcome!r}")
            event(f"{operation} durable despite the fault")
        elif found is not None:
            if (fault is not None and fault.mode == "exception" and fired is not None
                    and self._rollback_expected(calls, requested[0], fired, outcome)):
                assert found.state == ROLLEDBACK, (
                    f"the cleaner did not roll back its failed clean: {found}")
            event(f"failed clean left its instant {found.state}")

    def _maintain(self, action: Maintain) -> None:
        """Table maintenance by the maintainer. Whatever happens (a fault at any storage call,
        a death, a compaction left pending while writers go on, or retired under it), what every
        snapshot reads is unchanged: the invariants check it after this step."""
        if self.maintainer_dead:
            self.maintainer_store, self.maintainer = self._new_writer()
            self.maintainer_dead = False
        context = self.maintainer._context
        if action.step == "finish":
            if self.paused is None:
                return
            instant, _ = self.paused
            self.paused = None
            with context.timeline.lock() as lease:
                completed = context.metadata.complete_compaction(instant, lease=lease)
            found = self.metadata_timeline.load().get(instant.time)
            if completed:
                assert found is not None and found.is_completed, found
                event("a paused metadata compaction completed after writes raced it")
            else:
                assert found is None or found.state == ROLLEDBACK, found
                left = [k for k in self.inner.list(METADATA_FOLDER, recursive=True)
                        if k.rpartition("/")[2].startswith(f"{instant.time}_")]
                assert not left, f"a retired compaction's files outlived its own finish: {left}"
                event("a paused metadata compaction was retired while paused")
            return
        if action.step == "begin":
            if self.paused is not None:
                return
            with context.timeline.lock() as lease:
                view = context.timeline.view(lease)
                order = [(i.time, i.completed_at or "") for i in view.completed()]
                if not order:
                    return
                begun = context.metadata.begin_compaction(order, lease=lease,
                                                          data_max_time=view.max_time())
            if begun is None:
                event("a metadata compaction was running: none begun")
                return
            context.metadata.build_compaction(begun, order)
            self.paused = (begun, order)
            event("a metadata compaction began and stopped")
            return
        fault = self._resolve(action.fault, "maintain")
        outcome, fired, calls = self._armed(self.maintainer_store, fault, self.maintainer.maintain)
        if fault is not None and fault.mode == "death" and fired is not None:
            self.maintainer_dead = True
        data = self._instants_of(calls)
        assert not data, f"maintenance made data instants {data}"
        if fired is None:
            assert isinstance(outcome, txn.MaintenanceReport), (
                f"maintenance failed without a fault: {outcome!r}")
            event(f"maintenance: {'compacted' if outcome.compaction else outcome.skipped or 'nothing due'}")
        else:
            assert fault is not None
            event(f"maintain: fault {fired.when} {fired.call.op} in {where(fired.call.path)}"
                  f" ({fault.mode})")
            if isinstance(outcome, Exception):
                assert injected(outcome) is not None, f"the fault surfaced as {outcome!r}"
