"""The invariants: every ``@invariant`` of the machine but the change feed's (``changes``).
Hypothesis runs them in name order after every step; ``latest_snapshot_equals_the_model`` also
counts the steps (``self.steps``), which other checks rotate by.

Invariants (checked after every step, on the undisturbed inner store):

* the latest snapshot, read by a freshly opened table and by a long-lived one (whose cached
  metadata is extended incrementally), holds exactly the model's rows, and its row count agrees
  without reading data files; read actions also check the writer's own reads (pruned by column
  statistics) and reads that fail part way (``ReadWithFault``: no poisoned cache after);
* keyed: one lookup of every live key and of every key ever written or deleted that is not live
  (failed writes' keys among them) finds each live key exactly once, at a (file, position) that
  holds that key's row in the model (read back from the Parquet file), in the segment the model
  has it in (after a compaction: the new one), and no other key; a freshly opened table's
  ``lookup([k])`` agrees for one live and one dead key per step;
  ``Lookup`` actions draw keys (existing and missing) and look them up through the writer;
* the snapshots of past acknowledged commits (``as_of`` their instant, their completion time or
  a ``datetime``) hold the rows they held when they were current, or are reported expired when
  they are older than the retention (the previous commit and a rotating one each step;
  ``ReadPast`` actions draw others; after a clean, every one): ``metadata.retain_commits``, and
  since a clean, the last ``clean.retain_commits`` commits at that clean (``force``: the latest),
  whether it succeeded or not (it may have published its floor before it failed);
* ``validate()`` finds no disagreement between the metadata table and storage (data files,
  delete deltas and, keyed, the record index), after compactions, DELETE SEGMENT and cleans too.
  (Files in the trash of a clean still pending are moved, not missing; a clean waits for a
  pending rollback of a clean: ``test_a_resumed_clean_rollback_...``.)
* no row of a failed write is visible, and the timeline never reports a failed write's instant
  as completed; its completed data instants are exactly the acknowledged commits, in order;
* the only pending data instants are failed writes that were not rolled back yet, and any of
  them whose heartbeat had expired when a later write began was rolled back by that write;
* SHOW SEGMENTS lists exactly the model's segments, newest id first, each with its status
  (``Success``; ``Compacted`` with ``merged_to``; ``Marked for Delete`` after an overwrite or
  DELETE SEGMENT), rows (as written; a compaction's: the live rows it merged), instant, format
  and whether it is external (with its folder and partition folder), and the segment(s) of each
  pending write as ``Insert In Progress`` (a rolled-back write's are gone);
* every file the machine wrote into an external folder still holds exactly the bytes it was
  written with, and no file appeared in those folders (DELETE SEGMENT, CLEAN FILES, ``force``
  included, compaction and deletes never touch them);
* on the metadata timeline every instant completes after its own time, and every base file of
  the metadata table (record-index shards included) belongs to a compaction that completed or
  is still pending: recovery removes what an aborted compaction wrote;
* after a write that began and saw no fault, the table lock is free and nothing is left pending
  on the metadata timeline;
* SHOW STREAMS (``t.streams()``), read by the long-lived table and by a freshly opened one,
  lists the model's streams that are not dropped (``Running`` while the writer holds their
  ``Stream`` open, else ``Stopped``; last batch id, rows, segment), then its apps (last version,
  rows; started no later than updated); a ``Stream`` opened now reports the model's
  ``last_batch_id``, and one opened at an earlier step (as another process's, which DROP STREAM
  cannot close) is refused with StreamDroppedError, writing nothing, once its generation was
  dropped. The rows of every acknowledged batch (by their serial tag) are in the latest
  snapshot exactly as the model has them: once, whole, less what later deletes, updates and
  DELETE SEGMENT took out (a failure names the batches seen otherwise); no row of a replayed or
  failed batch shows, and each stream's acknowledged batch ids rise within a generation.
"""

from __future__ import annotations

import re

import fsspec
import pytest
from hypothesis import event
from hypothesis.stateful import invariant

import txn
from metatxn.indexes import METADATA_FOLDER, SegmentStatus, segment_sort_key
from tests.property.table_machine.config import (
    BASE_NAME,
    DATA_ACTIONS,
    STREAM_NAMES,
)
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.model import Row, _row_key, memory_path


class Invariants(MachineCore):
    """What must hold after every step."""

    @invariant()
    def latest_snapshot_equals_the_model(self) -> None:
        self.steps += 1
        # A table opened now (no cache) and the long-lived reader (its cache extended at every
        # step); the writer and the faulty reader are checked by the read actions.
        for table in (self._open(self.inner), self.reader):
            snapshot = table.snapshot()
            self.shape.check_ids(snapshot.schema, f"{table}: the latest snapshot")
            self.shape.check_ids(table.schema, f"{table}: the table's schema")
            rows = self.shape.rows_of(snapshot.to_arrow(), f"{table}: the latest snapshot")
            assert rows == self.expected, (f"{table}: {len(rows)} rows, model {len(self.expected)}"
                                           f"{self._batch_report(rows)}")
            assert snapshot.count() == len(self.expected)
            # The snapshot names the last completed instant of any action (a later rollback
            # instant, say), so only its data content is pinned to the last commit.
            last = self.acked[-1] if self.acked else None
            assert last is None or (snapshot.completed_at or "") >= last.completed_at
        visible = {v // 1000 for _, _, v in self.expected}
        assert not visible & self.failed_serials, f"rows of failed writes {visible & self.failed_serials}"

    def _batch_report(self, rows: tuple[Row, ...]) -> str:
        """For a failure message: the acknowledged stream batches whose rows (by their serial
        tag) the table does not show as the model has them (half visible, twice, or not at all)."""
        wrong = []
        for name, batch_id, serial, _ in self.batches:
            seen = [r for r in rows if r[2] // 1000 == serial]
            want = [r for r in self.expected if r[2] // 1000 == serial]
            if sorted(seen, key=_row_key) != want:
                wrong.append(f"{name} batch {batch_id}: {len(seen)} row(s) visible, model {len(want)}")
        return "; stream batches: " + ", ".join(wrong) if wrong else ""

    @invariant()
    def streams_equal_the_model(self) -> None:
        """SHOW STREAMS (``t.streams()``), through the long-lived reader and a table opened now,
        lists the model's streams that are not dropped, by name (``Running`` while the writer
        holds the ``Stream`` open, else ``Stopped``; the last batch id, the rows of this
        generation, the segment of the last batch), then the apps (their last version, the rows
        their writes added); a ``Stream`` opened now has the model's ``last_batch_id`` (None
        before the first batch and once dropped)."""
        want = [(name, "stream", "Running" if name in self.open_streams
                 and not self.open_streams[name].closed else "Stopped", m.segment, m.last, m.rows)
                for name, m in sorted(self.stream_model.items()) if not m.dropped]
        want += [(name, "app", "Stopped", None, version, rows)
                 for name, (version, rows) in sorted(self.app_model.items())]
        for table in (self.reader, self._open(self.inner)):
            shown = table.streams()
            got = [(i.name, i.kind, i.status, i.segment, i.last_batch_id, i.rows) for i in shown]
            assert got == want, f"SHOW STREAMS {got}; the model says {want}"
            assert all(i.started is not None and i.updated is not None and i.started <= i.updated
                       for i in shown), shown
        if not self.streaming:
            return
        for name in STREAM_NAMES:
            probe = self.reader.stream(name)
            try:
                model = self._active_stream(name)
                assert probe.last_batch_id == (model.last if model is not None else None), (
                    f"stream {name}: last_batch_id {probe.last_batch_id}, the model has {model}")
            finally:
                probe.close()
            self._check_producer_elsewhere(name)

    def _check_producer_elsewhere(self, name: str) -> None:
        """A ``Stream`` opened at an earlier step on the reader, as another process's (DROP
        STREAM closes the ``Stream`` objects of its own process only): once the model has
        dropped the generation it was opened in, a batch through it raises StreamDroppedError
        and writes nothing (issue 22: it brought the dropped stream back, and a fresh producer's
        batches were then skipped as replays); until then it reports the model's last batch id.
        A refused one is replaced by one opened now, so later drops are tried too."""
        from txn._streams import _stream

        model = self.stream_model.get(name)
        held = self.elsewhere.pop(name, None)
        if held is not None:
            producer, generation = held
            if model is None or not (model.generation > generation
                                     or (model.generation == generation and model.dropped)):
                assert producer.last_batch_id == (None if model is None or model.dropped
                                                  else model.last), (name, generation, model)
                self.elsewhere[name] = held
                return
            before = len(self.reader.timeline())
            with pytest.raises(txn.StreamDroppedError, match=name):
                producer.write(0 if model.last is None else model.last + 1, self.shape.table([]))
            assert len(self.reader.timeline()) == before, "a dropped stream's producer wrote"
            event("a dropped stream's producer elsewhere: refused")
        producer = self.reader.stream(name)
        with _stream._RUNNING_LOCK:  # another process's: not Running here, not closed by a drop
            _stream._RUNNING[(producer._context.uri, name)].discard(producer)
        generation = 0 if model is None else model.generation + (1 if model.dropped else 0)
        self.elsewhere[name] = (producer, generation)

    @invariant()
    def record_index_equals_the_model(self) -> None:
        """Keyed: every live key is found once, where its row is; no other key is found."""
        if not self.keyed:
            return
        everything = self._keys_to_look_up()
        self._check_lookup(self.reader, everything)
        # One key at a time, from a table opened now: a live key and a dead one, rotating.
        live = sorted(self._live())
        dead = everything[len(live):]
        fresh = self._open(self.inner)
        for keys in (live, dead):
            if keys:
                self._check_lookup(fresh, [keys[self.steps % len(keys)]])

    @invariant()
    def past_snapshots_equal_the_model(self) -> None:
        if not self.acked:
            return
        n = len(self.acked)
        # The commit before the latest (the latest is the invariant above) and a rotating one;
        # ReadPast actions draw others.
        sample = {n - 2, self.steps % n} if n > 2 else set(range(n))
        for index in sorted(i for i in sample if i >= 0):
            commit = self.acked[index]
            self._check_the_past(self.reader, commit, commit.instant)

    @invariant()
    def live_writers_keep_their_files(self) -> None:
        """No file a live writer announced (by a marker) disappears while it is alive: only its
        own rollback, or a rollback once its heartbeat expired, may remove it."""
        alive = self._alive_writers()
        lost = sorted(path for path, writer in self.announced.items()
                      if writer in alive and not self.inner.exists(path))
        assert not lost, f"files of live writers removed: {lost}"
        self.announced = {path: path.rpartition("_")[2].partition(".")[0]
                          for path in self._announced(alive)}

    @invariant()
    def metadata_table_agrees_with_storage(self) -> None:
        # A fault may leave a dead writer's instant (or its rollback) pending until a later write
        # recovers it; validate reports that, rightly, and the other invariants check that
        # nothing of it is visible. Every other problem is a bug.
        report = self.reader.validate()
        problems = [p for p in report.problems if p.kind not in ("expired instant", "pending rollback")]
        assert not problems, "\n".join(str(p) for p in problems)

    @invariant()
    def no_base_of_a_failed_compaction(self) -> None:
        """Every metadata base on storage (record-index shards included) belongs to a metadata
        compaction that completed or is still pending (its writer died or failed in it, and no
        write has recovered since): recovery removes the bases of the compactions it aborts."""
        history = {i.time: i for i in self.metadata_timeline.history() if i.action == "compaction"}
        stray = []
        for key in self.inner.list(METADATA_FOLDER, recursive=True):
            match = BASE_NAME.match(key.rpartition("/")[2])
            if match is None:
                continue
            compaction = history.get(match.group(1))
            if compaction is None or not (compaction.is_completed or compaction.is_pending):
                stray.append(f"{key} ({compaction.state if compaction else 'unknown compaction'})")
        assert not stray, f"bases of failed metadata compactions left behind: {stray}"

    @invariant()
    def timeline_agrees_with_the_model(self) -> None:
        history = self.observer_timeline.history()
        completed = sorted((i for i in history if i.is_completed and i.action in DATA_ACTIONS),
                           key=lambda i: i.completed_at or "")
        assert [(i.time, i.completed_at) for i in completed] == [
            (c.instant, c.completed_at) for c in self.acked]
        assert not {i.time for i in completed} & self.failed_instants
        pending = {i.time for i in history if i.is_pending and i.action in DATA_ACTIONS}
        assert pending <= self.failed_instants, f"unexplained pending instants {pending}"

    @invariant()
    def metadata_timeline_is_ordered(self) -> None:
        """On the metadata timeline, as on any, an instant completes after it was requested."""
        early = [str(i) for i in self.metadata_timeline.load().completed()
                 if (i.completed_at or "") <= i.time]
        assert not early, f"instants completed at or before their own time: {early}"

    @invariant()
    def external_files_are_untouched(self) -> None:
        """Every file written into an external folder holds the bytes it was written with, and no
        file appeared there: the table never writes, moves or deletes one (DELETE SEGMENT, CLEAN
        FILES, compaction and deletes included)."""
        if not self.external_files:
            return
        filesystem = fsspec.filesystem("memory")
        found = set(filesystem.find(memory_path(self.external_root)))
        changed = sorted(path for path, data in self.external_files.items()
                         if path not in found or filesystem.cat_file(path) != data)
        assert not changed, f"external files changed or removed: {changed}"
        extra = sorted(found - self.external_files.keys())
        assert not extra, f"files appeared in external folders: {extra}"

    @invariant()
    def segments_equal_the_model(self) -> None:
        """SHOW SEGMENTS lists the model's segments (status, rows, merged_to, instant), newest
        id first, and the segment of each pending write as Insert In Progress."""
        model = self.segment_model
        pending = self._pending_data_instants()
        # A Compacted or Marked for Delete segment whose files CLEAN FILES removed leaves SHOW
        # SEGMENTS for its history (CarbonData's visibility=false): listed after the visible ones.
        every = self.reader.segments(history=True)
        shown = [segment for segment in every if segment.visible]
        hidden = every[len(shown):]
        assert all(not segment.visible for segment in hidden), f"history order: {every}"
        assert [s.id for s in self.reader.segments()] == [s.id for s in shown]
        for segment in hidden:
            assert segment.status in ("Compacted", "Marked for Delete") and segment.cleaned_instant, (
                f"segment {segment.id} left SHOW SEGMENTS as {segment.status}")
            assert not any(f.segment == segment.id for f in self._files(self.reader)), segment
        ids = [segment.id for segment in shown]
        assert len(ids) == len(set(ids)), f"segment ids twice: {ids}"
        assert ids == sorted(ids, key=segment_sort_key, reverse=True), f"SHOW SEGMENTS order: {ids}"
        for segment in shown:
            assert re.fullmatch(r"\d+(\.\d+)?", segment.id), segment
            expected = model.get(segment.id)
            if expected is None:
                assert segment.status == "Insert In Progress" and segment.instant in pending, segment
                continue
            got = (segment.status, segment.rows, segment.merged_to, segment.instant)
            assert got == (expected.status, expected.rows, expected.merged_to, expected.instant), (
                f"segment {segment.id}: (status, rows, merged_to, instant) {got}, the model says "
                f"{(expected.status, expected.rows, expected.merged_to, expected.instant)}")
            got_source = (segment.format, segment.external, segment.path if segment.external else None,
                          segment.partitions if segment.external else None)
            want_source = ("parquet", expected.external, expected.path,
                           [expected.partition] if expected.external else None)
            assert got_source == want_source, (
                f"segment {segment.id}: (format, external, path, partitions) {got_source}, the "
                f"model says {want_source}")
        for segment in hidden:
            expected = model.get(segment.id)
            assert expected is not None and (segment.status, segment.rows, segment.merged_to) == (
                expected.status, expected.rows, expected.merged_to), (segment, expected)
        missing = model.keys() - set(ids) - {segment.id for segment in hidden}
        assert not missing, f"segments missing from SHOW SEGMENTS: {sorted(missing)}"
        # A streaming segment's totals are added up batch by batch, under the lock: they must be
        # those of its files (the roll-over is decided by its data size).
        open_or_finished = (SegmentStatus.STREAMING, SegmentStatus.STREAMING_FINISH)
        streaming = {s.id: s for s in shown if s.status in open_or_finished}
        if streaming:
            files: dict[str, list[int]] = {i: [0, 0] for i in streaming}
            for data_file in self._files(self.reader):
                if data_file.segment in files:
                    files[data_file.segment][0] += data_file.rows
                    files[data_file.segment][1] += data_file.size
            for segment_id, segment in streaming.items():
                assert [segment.rows, segment.data_size] == files[segment_id], (
                    f"streaming segment {segment_id}: rows and data size {segment.rows}, "
                    f"{segment.data_size}; its files hold {files[segment_id]}")
