"""Streams and their producers: batches, DROP STREAM and the hand-off of finished segments.

Streams, on a streaming table (``streaming=true``, two runs in three; the others must refuse
every stream action: ``t.stream`` InvalidOptionError, DROP STREAM StreamNotFoundError, hand-off
InvalidOptionError), with ``streaming.segment.max_size`` 2, 4 or 8 KB (a few batches fill a
segment) or the default (never full), and ``streaming.auto_handoff`` on or off:

* ``StreamWrite``: ``s.write(batch_id, rows)`` on stream ``s1`` or ``s2`` through a ``Stream``
  the writer holds open (closed now and then: ``stop``), the batch id drawn from the model's
  last one: the next, one past a gap, or a replay (the last or up to 2 before it: None, nothing
  written, no instant). Rows are drawn like an append's (keyed: new keys, or on purpose one
  already in the table or twice in the batch: DuplicateKeyError, nothing written), a few at a
  time, and sometimes none (the batch id is still recorded, by a commit of no rows). An
  acknowledged batch is one commit (``stream``, its extra naming the stream and the batch id)
  whose rows join the stream's open segment (``Streaming``: its rows the sum of its batches',
  its instant that of its first) or, when the stream has none or its open one is no longer
  ``Streaming`` (an overwrite marked it for delete), a new one. When the open segment's data
  size (read from SHOW SEGMENTS: Parquet's sizes are not the model's to predict) has reached the
  limit, the same commit finishes it (``Streaming Finish``) and the rows go to a new segment
  (none for an empty batch); with auto hand-off, one
  compaction per ``Streaming Finish`` segment that no running write holds follows, oldest
  first (the finished one ``Compacted`` with ``merged_to`` a new ``x.1`` ``Success`` segment of
  its live rows), after the batch's commit point: a fault may cut the hand-off short while the
  batch is acknowledged (the batch then returns its commit, not the fault);
* ``DropStream``: ``t.drop_stream(name)``: StreamNotFoundError unless the stream has a record
  and is not dropped (nothing changes); otherwise one commit (``drop_stream``) finishes its open
  segment (if still ``Streaming``), then (auto) the same hand-off when it had one; the writer's
  ``Stream`` of that name is closed, the name leaves SHOW STREAMS, and a later batch starts it
  afresh (batch ids from 0, rows from 0, a new segment);
* ``compact("close_streaming")`` (hand-off on demand): every ``Streaming Finish`` segment no
  running write holds, one commit each, oldest first; none: None and no instant;
* DELETE SEGMENT may also name a ``Streaming Finish`` segment (marked for delete, its rows
  leave the table), and custom compaction and DELETE SEGMENT a ``Streaming`` one, refused
  (InvalidOptionError). Overwrites, deletes, upserts and updates reach rows in streaming
  segments as in any other.
"""

from __future__ import annotations

import dataclasses
import re

from hypothesis import event, note

import txn
from metatxn.indexes import SegmentStatus, segment_sort_key
from metatxn.timeline import Instant
from tests.faults import Call, InjectedFault
from tests.property.table_machine.actions import DropStream, StreamWrite
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.injection import Fault
from tests.property.table_machine.internals import CommitMetadata
from tests.property.table_machine.model import BatchPlan, Expected, SegmentModel, StreamModel, _sort


class Streams(MachineCore):
    """Stream batches and DROP STREAM as the model predicts them, the producers' records and the
    auto hand-off after a commit."""

    def _stream_of(self, table: txn.Table, name: str) -> txn.Stream:
        """The writer's open ``Stream`` of ``name``; a new one if it has none (or it was closed:
        by DROP STREAM, a ``stop``, or a writer that died)."""
        held = self.open_streams.get(name)
        if held is None or held.closed or held._context is not table._context:
            held = table.stream(name)
            self.open_streams[name] = held
        return held

    def _close_streams(self) -> None:
        """The writer died: its streams stop with it."""
        for stream in self.open_streams.values():
            stream.close()
        self.open_streams.clear()

    def _active_stream(self, name: str) -> StreamModel | None:
        """The model's record of stream ``name``, unless it has none or was dropped."""
        model = self.stream_model.get(name)
        return None if model is None or model.dropped else model

    def _busy(self) -> frozenset[str]:
        """Segments running writes (alive) hold: a hand-off skips them."""
        return frozenset(s for p in self._pending_plans(alive_only=True).values() for s in p.sources)

    def _expect_batch(self, action: StreamWrite, serial: int) -> Expected:
        """A stream's batch: refused on a table without ``streaming=true``; a replay (an id at or
        below the stream's last) returns None; otherwise its rows go to the stream's open
        segment, or to a new one when it has none, its open one is no longer ``Streaming`` (an
        overwrite marked it for delete) or is full (then this commit finishes it)."""
        name = action.name
        model = self._active_stream(name)
        last = model.last if model is not None else None
        if last is None:
            batch_id = action.by if action.batch == "gap" else 0
        elif action.batch == "next":
            batch_id = last + 1
        elif action.batch == "gap":
            batch_id = last + 1 + action.by
        else:
            batch_id = max(0, last - action.by + 1)
        rows, refused = self._new_rows(action.rows, action.clash if action.rows else None,
                                       serial * 1000)
        self.seen_keys.update(r[0] for r in rows)
        data = self.shape.table(rows)
        note(f"stream {name!r} batch {batch_id} of {len(rows)} row(s) (last committed: {last})")

        def call(table: txn.Table) -> object:
            return self._stream_of(table, name).write(batch_id, data)

        if not self.streaming:
            return Expected("stream", call, self.expected, added=0, deleted=0, segment=False,
                            refused=txn.InvalidOptionError,
                            label="stream on a table without streaming=true")
        if last is not None and batch_id <= last:
            return Expected("stream", call, self.expected, added=0, deleted=0, segment=False,
                            noop=True, replay=True,
                            label=f"replayed stream batch ({last - batch_id} back)")
        open_segment = model.segment if model is not None else None
        entry = self.segment_model.get(open_segment) if open_segment is not None else None
        full = False
        if entry is not None and entry.status == SegmentStatus.STREAMING:
            # Data sizes are Parquet's, not the model's to predict: read them from the table.
            size = next(s.data_size for s in self.reader.segments() if s.id == open_segment)
            full = size >= (self.stream_max or 1024 ** 3)
        form = ("first after a DROP STREAM" if model is None and name in self.stream_model else
                "first" if model is None else "after a gap" if action.batch == "gap" else "next")
        stale = entry is not None and entry.status != SegmentStatus.STREAMING
        label = (f"stream batch ({form}{', empty' if not rows else ''}"
                 f"{', rolling over' if full else ''}"
                 f"{', its open segment no longer Streaming' if stale else ''})")
        return Expected("stream", call, _sort([*self.expected, *rows]), added=len(rows), deleted=0,
                        segment=False, refused=refused, label=label, written=_sort(rows),
                        stream=BatchPlan(name, batch_id, open_segment, full=full,
                                         hands_off=full and self.auto_handoff, busy=self._busy()))

    def _expect_drop(self, action: DropStream) -> Expected:
        """DROP STREAM: StreamNotFoundError unless the stream has a record and is not dropped;
        else one commit finishes its open segment (if still ``Streaming``), and a hand-off
        follows when it had one (whatever its status) and auto hand-off is on."""
        name = action.name
        model = self._active_stream(name)

        def call(table: txn.Table) -> object:
            return table.drop_stream(name)

        if model is None:
            what = "a dropped" if name in self.stream_model else "an unknown"
            return Expected("drop_stream", call, self.expected, added=0, deleted=0, segment=False,
                            refused=txn.StreamNotFoundError, label=f"DROP STREAM of {what} stream")
        plan = BatchPlan(name, None, model.segment, hands_off=self.auto_handoff and model.segment is not None,
                         busy=self._busy())
        return Expected("drop_stream", call, self.expected, added=0, deleted=0, segment=False,
                        label=f"DROP STREAM{' of a stream with an open segment' if model.segment else ''}",
                        stream=plan)

    def _stream_segments(self, expected: Expected, plan: BatchPlan, instant: str,
                         metadata: CommitMetadata, after: dict[str, SegmentModel]) -> None:
        """``after`` once the batch (or drop) ``plan`` committed as ``instant``."""
        before = self.segment_model
        entry = before.get(plan.open) if plan.open is not None else None
        streaming = entry is not None and entry.status == SegmentStatus.STREAMING
        if plan.open is not None and streaming and (plan.batch_id is None or plan.full):
            after[plan.open] = dataclasses.replace(after[plan.open], status=SegmentStatus.STREAMING_FINISH)
        # The segment the batch's rows go to (None: a new one, or none at all for no rows).
        target = plan.open if streaming and plan.batch_id is not None and not plan.full else None
        if plan.batch_id is None or not expected.written:
            assert metadata.segment == target, (
                f"{expected.operation} named segment {metadata.segment!r}; the model says {target!r}")
            return
        if target is None:
            new = metadata.segment
            assert new is not None and re.fullmatch(r"\d+", new) and new not in before, (
                f"stream batch opened segment {new!r}; the table has {sorted(before)}")
            after[new] = SegmentModel(id=new, instant=instant, status=SegmentStatus.STREAMING,
                                      rows=len(expected.written), live=expected.written)
            event("stream batch opened a segment")
            return
        assert metadata.segment == target, (
            f"stream batch went to segment {metadata.segment!r}, not the open {target!r}")
        held = after[target]
        after[target] = dataclasses.replace(held, rows=held.rows + len(expected.written),
                                            live=_sort([*held.live, *expected.written]))

    def _progressed(self, expected: Expected, metadata: CommitMetadata, serial: int) -> None:
        """The producers' records once ``expected`` committed: its app's version, or its
        stream's batch (or drop)."""
        if expected.app is not None:
            name, version = expected.app
            _, rows = self.app_model.get(name, (-1, 0))
            self.app_model[name] = (version, rows + expected.added)
        plan = expected.stream
        if plan is None:
            return
        model = self.stream_model.get(plan.name)
        want = {"stream": plan.name} if plan.batch_id is None else {
            "stream": plan.name, "batch_id": str(plan.batch_id)}
        assert metadata.extra == want, f"{expected.operation} recorded extra {metadata.extra}"
        if plan.batch_id is None:
            assert model is not None and not model.dropped
            model.dropped, model.segment = True, None
            return
        if model is None or model.dropped:
            model = self.stream_model[plan.name] = StreamModel(
                generation=0 if model is None else model.generation + 1)
        assert model.last is None or plan.batch_id > model.last, (plan, model)
        model.last, model.segment = plan.batch_id, metadata.segment
        model.rows += len(expected.written)
        self.batches.append((plan.name, plan.batch_id, serial, expected.written))

    def _hand_offs(self, plan: BatchPlan, acknowledged: bool, handoffs: list[Instant],
                   fault: Fault | None, fired: InjectedFault | None, calls: list[Call],
                   serial: int) -> None:
        """The compactions a batch or DROP STREAM ran after its commit (auto hand-off): none
        unless it committed and the model expects a hand-off; then a prefix of the rounds the
        model predicts (all of them without a fault), each judged like a compaction's. A failed
        hand-off never fails the batch (``_write`` checked what the caller saw)."""
        if not (acknowledged and plan.hands_off):
            assert not handoffs, f"unexpected compactions after the write: {handoffs}"
            return
        rounds = [[s.id] for s in sorted(self.segment_model.values(),
                                         key=lambda s: segment_sort_key(s.id))
                  if s.status == SegmentStatus.STREAMING_FINISH and s.id not in plan.busy]
        note(f"hand-off: expected rounds {rounds}")
        done = self._rounds("hand-off", "close_streaming", handoffs, rounds, fault, fired, calls,
                            None, serial)
        if fired is None:
            assert len(done) == len(rounds), f"hand-off did {len(done)} of rounds {rounds}"
        event("auto hand-off " + ("complete" if len(done) == len(rounds) else "cut short by a fault"))
