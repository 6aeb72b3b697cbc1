"""One write, judged: the path every kind of commit takes through the machine.

``_expect`` hands a write action to the capability that predicts it (an ``Expected``: the call,
the rows after it, the rows it adds and deletes, its segments, or the error it must raise), after
resolving its idempotency (below). ``_write`` runs it with its fault armed and judges it: refused
or matching nothing (no instant, no change), acknowledged (its commit's rows, operation and
segments; the model moves to its snapshot: ``_segments_after``, ``_record``) or failed (nothing of
it visible, its instant rolled back when it must be: ``crashes``).

* idempotent writes: about a third of the appends, overwrites, upserts, deletes, updates and
  transactions pass ``app_id`` (``nightly`` or ``hourly``) and a ``version`` drawn from the
  model's last one for that app: the next, one past a gap (both commit, and move the app's
  record), the same again or an older one (a replay: it must return None, write nothing and
  create no instant, whatever it would otherwise do: a duplicate key is not even reported).

A new kind of commit plugs in here: see the package docstring (``__init__.py``).
"""

from __future__ import annotations

import dataclasses
import re

from hypothesis import event, note

import txn
from metatxn.indexes import SegmentStatus
from metatxn.timeline import CommitStateUnknownError
from tests.property.table_machine.actions import (
    Alter,
    DropStream,
    MergeInto,
    MergeWrite,
    Mutation,
    StreamWrite,
    Transaction,
)
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.internals import CommitMetadata
from tests.property.table_machine.model import HOLDS_ROWS, Acked, Expected, SegmentModel, _sort, memory_path


class Commits(MachineCore):
    """The path of every write action: its prediction (``_expect``), its run and its judgement
    (``_write``), and the model once it committed (``_segments_after``, ``_record``)."""

    def _expect(self, action: Mutation, serial: int) -> Expected:
        """The write ``action`` stands for, and what it must do to the model."""
        # Each capability predicts its own writes (``_expect_*``); a new kind of commit adds its
        # branch here (the package docstring has the steps).
        if isinstance(action, StreamWrite):
            return self._expect_batch(action, serial)
        if isinstance(action, DropStream):
            return self._expect_drop(action)
        if isinstance(action, Alter):
            return self._expect_alter(action, serial)
        if isinstance(action, MergeWrite):
            return self._expect_merge(action, serial)
        predict = (self._expect_transaction if isinstance(action, Transaction)
                   else self._expect_merge_into if isinstance(action, MergeInto)
                   else self._expect_mutation)
        app = getattr(action, "app", None)
        if app is None:
            return predict(action, serial, {})
        held = self.app_model.get(app.name)
        last = held[0] if held is not None else None
        if last is None:
            version = 0
        elif app.step == "next":
            version = last + 1
        elif app.step == "gap":
            version = last + app.by
        elif app.step == "replay":
            version = last
        else:
            version = max(0, last - app.by)
        note(f"app_id={app.name!r}, version={version} (last committed: {last})")
        expected = predict(action, serial, {"app_id": app.name, "version": version})
        if last is not None and version <= last:
            # Checked before anything else: not even a duplicate key is reported.
            return dataclasses.replace(expected, refused=None, noop=True, replay=True, app=None,
                                       label=f"{expected.operation} of an app version committed "
                                             f"before ({app.step})")
        return dataclasses.replace(expected, app=(app.name, version))

    def _write(self, action: Mutation) -> None:
        serial = next(self.serials)
        expected = self._expect(action, serial)
        operation = expected.operation
        fault = self._resolve(action.fault, operation)
        owed = {i.time for i in self.observer_timeline.expired()}
        outcome, fired, calls, started_ms = self._run(fault, expected.call)
        # The write's instant; after a stream's batch or drop, the hand-off's compactions.
        made = self._instants_of(calls)
        requested = made[:1]
        instant = requested[0].time if requested else None

        folder = expected.folder
        if expected.refused is not None or expected.noop:
            self._changed_nothing(expected, outcome, fired, instant)
            self.failed_serials.add(serial)
            if folder is not None and folder.state == "new":
                folder.state = "refused"
            return

        history = {i.time: i for i in self.observer_timeline.history()}
        found = history.get(instant) if instant is not None else None
        self._check_outcome(operation, outcome, fired, fault, calls, started_ms)
        if found is not None:
            self._check_commit_point(fired, requested[0], found)

        if found is not None and found.is_completed:
            assert found.completed_at is not None
            if isinstance(outcome, txn.Commit):
                assert (outcome.instant, outcome.completed_at) == (found.time, found.completed_at)
                assert outcome.operation == operation, outcome
                assert (outcome.rows_added, outcome.rows_deleted) == (expected.added, expected.deleted), (
                    f"{operation} reported {outcome.rows_added} rows added, {outcome.rows_deleted} "
                    f"deleted; the model says {expected.added} and {expected.deleted}")
                if expected.marks:
                    assert sorted(outcome.segments_removed) == sorted(expected.marks), outcome
                assert outcome.operations == expected.operations, (
                    f"{operation} reported operations {outcome.operations}; the model ran "
                    f"{expected.operations}")
            elif fault is not None and fault.mode == "exception":
                # A commit that landed is returned, or reported as CommitStateUnknownError (the
                # contract in txn/_protocol.py); any other error makes the caller believe it
                # failed and write it again.
                assert isinstance(outcome, CommitStateUnknownError), (
                    f"{operation} committed {instant} but raised {outcome!r}")
            metadata = self.observer_timeline.read_metadata(found, CommitMetadata)
            assert tuple(metadata.operations) == expected.operations, metadata
            if expected.versions is not None:
                # A merge write's new schema lands in its own instant, or there is none.
                assert (metadata.schema_version is not None) == expected.versions, (
                    f"{expected.label}: schema_version {metadata.schema_version}")
                if isinstance(outcome, txn.Commit):
                    assert outcome.schema_version == metadata.schema_version, outcome
            if expected.on_commit is not None:
                expected.on_commit()
            self._record(Acked(instant=found.time, completed_at=found.completed_at,
                               operation=operation, serial=serial, rows=expected.after,
                               operations=expected.operations),
                         self._segments_after(expected, found.time, metadata))
            self._progressed(expected, metadata, serial)
            event(f"committed: {expected.label or operation}")
            if expected.app is not None:
                event(f"committed: an idempotent {operation}")
            if fired is not None:
                event(f"{operation} durable despite the fault")
            if folder is not None:
                # A retried folder's rows carry the serial of the add that failed: now they count.
                self.failed_serials.discard(folder.serial)
                folder.state = "added"
        else:
            assert isinstance(outcome, Exception), f"{operation} returned {outcome!r}, not durable"
            self.failed_serials.add(serial)
            if folder is not None:
                folder.state = "failed"
            if requested:
                self._failed(requested[0], found, fault, fired, calls, outcome)
        if expected.stream is not None:
            self._hand_offs(expected.stream, found is not None and found.is_completed, made[1:],
                            fault, fired, calls, serial)
        if requested:
            self._check_owed(owed, calls, requested[0], fired)

    def _segments_after(self, expected: Expected, instant: str,
                        metadata: CommitMetadata) -> dict[str, SegmentModel]:
        """The model's segments once the write ``expected`` committed as ``instant``."""
        before = self.segment_model
        live = [s.id for s in before.values() if s.status in HOLDS_ROWS]
        if expected.replaces:
            assert sorted(metadata.segments_removed) == sorted(live), metadata
        if expected.marks:
            assert sorted(metadata.segments_removed) == sorted(expected.marks), metadata
        after: dict[str, SegmentModel] = {}
        for segment in before.values():
            if segment.status in HOLDS_ROWS:
                if expected.replaces or segment.id in expected.marks:
                    segment = dataclasses.replace(segment, status=SegmentStatus.MARKED_FOR_DELETE, live=())
                else:
                    kept = tuple(row for row in segment.live if not expected.removes(row))
                    if len(kept) != len(segment.live):
                        segment = dataclasses.replace(segment, live=kept)
            after[segment.id] = segment
        if expected.folder is not None:
            folder, first = expected.folder, metadata.segment
            assert first is not None and re.fullmatch(r"\d+", first), metadata
            # One segment per partition folder, consecutive ids in the order the table lists them.
            ids = [str(int(first) + n) for n in range(len(folder.groups))]
            assert not set(ids) & before.keys(), (
                f"add_segment made segments {ids}; the table has {sorted(before)}")
            added = {memory_path(f.path) for f in metadata.files_added}
            assert added == folder.files, f"add_segment recorded {sorted(added)}"
            for segment_id, (partition, held) in zip(ids, folder.groups, strict=True):
                after[segment_id] = SegmentModel(
                    id=segment_id, instant=instant, status=SegmentStatus.SUCCESS, rows=len(held), live=held,
                    external=True, path=folder.url, partition=partition)
        elif expected.stream is not None:
            self._stream_segments(expected, expected.stream, instant, metadata, after)
        elif expected.segment:
            new = metadata.segment
            assert new is not None and re.fullmatch(r"\d+", new) and new not in before, (
                f"{expected.operation} made segment {new!r}; the table has {sorted(before)}")
            after[new] = SegmentModel(id=new, instant=instant, status=SegmentStatus.SUCCESS,
                                      rows=expected.added,
                                      live=expected.written)
        else:
            assert metadata.segment is None, metadata
        return after

    def _record(self, commit: Acked, segments: dict[str, SegmentModel]) -> None:
        """Acknowledge ``commit``; the model's segments then hold exactly its rows."""
        held = _sort([row for s in segments.values() if s.status in HOLDS_ROWS for row in s.live])
        assert held == commit.rows, "the model's segments disagree with its rows"
        self.acked.append(dataclasses.replace(commit, shape=self.shape))
        self.segment_model = segments
