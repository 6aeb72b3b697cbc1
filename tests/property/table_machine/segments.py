"""Segments: compaction (MINOR, MAJOR, custom and the streaming hand-off) and DELETE SEGMENT,
round by round as the model predicts them.

Table services, with the fault armed like any write's:

* ``compact("minor")`` (by the ``compaction.level_threshold`` chosen at create: ``2,2`` or
  ``3,0``), ``compact("major")`` and ``compact("custom", segments=...)`` of live segments drawn
  from the model (external ones among them: CUSTOM converts them into a native segment), sometimes
  with a ``Compacted`` or ``Marked for Delete`` id (InvalidOptionError) or one the table never had
  (SegmentNotFoundError) among them, which must change nothing. The model says which segments
  each round merges (MINOR: CarbonData's rule, round after round; MAJOR: every live segment;
  MINOR and MAJOR never an external segment, nor one held by a running write) and the new
  segment's id (``x.y``);
  nothing to merge returns None and creates no instant. Every round is a commit of its own:
  a fault may leave earlier rounds committed;
* ``delete_segments(ids)`` of live segments drawn from the model, sometimes with a bad id (the
  whole request refused, SegmentNotFoundError or InvalidOptionError), or of a segment a running
  compaction holds (CommitConflictError);
"""

from __future__ import annotations

from hypothesis import event, note

import txn
from metatxn.indexes import SegmentStatus, segment_sort_key
from metatxn.timeline import (
    CommitStateUnknownError,
    Instant,
    parse_file_name,
)
from tests.faults import Call, InjectedFault
from tests.property.table_machine.actions import BadId, Compact, DeleteSegments
from tests.property.table_machine.core import MachineCore
from tests.property.table_machine.injection import Fault
from tests.property.table_machine.internals import CommitMetadata
from tests.property.table_machine.model import (
    HOLDS_ROWS,
    Acked,
    Expected,
    SegmentModel,
    _level,
    _merged,
    _merged_name,
    _sort,
)


class Segments(MachineCore):
    """Compaction and DELETE SEGMENT: which segments each round merges, or which a delete
    marks, and what the table must refuse."""

    def _live_segments(self, segments: dict[str, SegmentModel] | None = None) -> list[str]:
        """The Success segments (of the model, or of ``segments``), in ascending id order."""
        segments = self.segment_model if segments is None else segments
        return sorted((s.id for s in segments.values() if s.status == SegmentStatus.SUCCESS),
                      key=segment_sort_key)

    def _drawn_ids(self, picks: list[int], bad: BadId | None, *,
                   finished: bool = False) -> list[str]:
        """Live segments ``picks`` per mille into the model's (``finished``: ``Streaming Finish``
        ones too), then the ``bad`` id, if any."""
        live = self._live_segments()
        if finished:
            live = sorted([*live, *(s.id for s in self.segment_model.values()
                                    if s.status == SegmentStatus.STREAMING_FINISH)], key=segment_sort_key)
        ids = list(dict.fromkeys(live[p * len(live) // 1000] for p in picks)) if live else []
        if bad is not None:
            status = {"compacted": SegmentStatus.COMPACTED, "marked": SegmentStatus.MARKED_FOR_DELETE,
                      "streaming": SegmentStatus.STREAMING}.get(bad)
            have = sorted((s.id for s in self.segment_model.values() if s.status == status),
                          key=segment_sort_key)
            # A status the model has none of yet: an id the table never had instead.
            ids.append(have[picks[0] * len(have) // 1000] if have else f"{900 + picks[0] % 10}")
        note(f"segment ids {ids}")
        return ids

    def _expect_segment_delete(self, action: DeleteSegments) -> Expected:
        ids = self._drawn_ids(action.picks, action.bad, finished=True)
        model = self.segment_model
        alive = self._pending_plans(alive_only=True)
        # Loads still running show as Insert In Progress entries: the table is not empty.
        running = {p.segment for p in alive.values() if p.segment is not None} - model.keys()
        busy = {s for p in alive.values() for s in p.sources}
        refused: type[Exception] | None = None
        if not ids:
            refused = txn.InvalidOptionError
        elif any(i not in model or model[i].status == SegmentStatus.MARKED_FOR_DELETE for i in ids):
            refused = txn.SegmentNotFoundError if model or running else txn.InvalidOptionError
        elif any(model[i].status not in (SegmentStatus.SUCCESS, SegmentStatus.STREAMING_FINISH) for i in ids):
            refused = txn.InvalidOptionError  # Compacted, or Streaming (still being written)
        elif busy & set(ids):
            refused = txn.CommitConflictError  # a running compaction reads one of them
        targets = frozenset(ids)
        gone = [row for i in ids if i in model for row in model[i].live]
        after = _sort([row for s in model.values() if s.status in HOLDS_ROWS and s.id not in targets
                       for row in s.live])
        label = ("DELETE SEGMENT" if refused is None else
                 f"DELETE SEGMENT of {action.bad or 'no'} id(s)")
        if refused is None and any(model[i].status == SegmentStatus.STREAMING_FINISH for i in ids):
            label += " of a Streaming Finish segment"
        return Expected("delete_segments", lambda t: t.delete_segments(ids), after, added=0,
                        deleted=len(gone), segment=False, refused=refused, label=label,
                        marks=targets)

    def _minor_choice(self, segments: dict[str, SegmentModel], busy: set[str]) -> list[str]:
        """CarbonData's MINOR selection on the model: the first ``L1`` loads or the first ``L2``
        ``x.1`` segments (ascending ids; skipping external segments, ``x.2`` and above, MAJOR
        results and segments a pending compaction reads), whichever list fills first."""
        level1, level2 = self.level_threshold
        wanted = {0: level1 if level1 >= 2 else 0, 1: level2 if level2 >= 2 else 0}
        lists: dict[int, list[str]] = {0: [], 1: []}
        for segment_id in self._live_segments(segments):
            segment = segments[segment_id]
            level = _level(segment_id)
            if (segment_id in busy or segment.external or level >= 2 or segment.major
                    or not wanted[level]):
                continue
            lists[level].append(segment_id)
            if len(lists[level]) == wanted[level]:
                return lists[level]
        return []

    def _rounds(self, operation: str, kind: str, requested: list[Instant], rounds: list[list[str]],
                fault: Fault | None, fired: InjectedFault | None, calls: list[Call],
                outcome: object, serial: int) -> list[tuple[Instant, CommitMetadata]]:
        """The compaction instants ``requested`` (in order) against the ``rounds`` the model
        predicts: each completed one merged the next round's sources into the segment the model
        names (acknowledged); only the last may have failed. ``outcome``: what the compaction
        returned or raised (None: an auto hand-off, whose errors are only logged)."""
        history = {i.time: i for i in self.observer_timeline.history()}
        done: list[tuple[Instant, CommitMetadata]] = []
        for n, instant in enumerate(requested):
            found = history.get(instant.time)
            assert instant.action == "compaction", instant
            if found is not None:
                self._check_commit_point(fired, instant, found)
            if found is None or not found.is_completed:
                assert n == len(requested) - 1, f"round {n + 1} of {operation} failed, yet more began"
                self._failed(instant, found, fault, fired, calls,
                             outcome if outcome is not None else self._round_error(fired, instant))
                continue
            assert found.completed_at is not None
            metadata = self.observer_timeline.read_metadata(found, CommitMetadata)
            sources = sorted(metadata.segments_merged, key=segment_sort_key)
            assert n < len(rounds) and sources == rounds[n], (
                f"{operation} round {n + 1} merged {sources}; the model says "
                f"{rounds[n] if n < len(rounds) else 'nothing'}")
            before = self.segment_model
            status = SegmentStatus.STREAMING_FINISH if kind == "close_streaming" else SegmentStatus.SUCCESS
            assert metadata.extra.get("compaction") == kind, metadata.extra
            assert all(before[i].status == status for i in sources), (
                f"{operation} merged {[str(before.get(i)) for i in sources]}")
            target = _merged_name(sources, before)
            assert metadata.segment == target, (
                f"{operation} of {sources} made segment {metadata.segment}, not {target}")
            merged = _merged(before, sources, found.time, major=kind == "major")
            moved = merged[target].rows
            assert metadata.operation == "compact" and (metadata.rows_added, metadata.rows_deleted) == (
                moved, moved), f"{operation}: {metadata}; the model moves {moved} rows"
            # The same rows: a compaction's snapshot reads what the one before it read.
            self._record(Acked(instant=found.time, completed_at=found.completed_at,
                               operation="compact", serial=serial, rows=self.expected), merged)
            done.append((found, metadata))
            event(f"committed: {operation}" + (" merging an emptied segment" if any(
                not before[i].live for i in sources) else ""))
            if any(before[i].external for i in sources):
                event(f"committed: {operation} converting external segment(s)")
        return done

    @staticmethod
    def _round_error(fired: InjectedFault | None, instant: Instant) -> Exception:
        """What a failed hand-off round raised (it is only logged): CommitStateUnknownError when
        the fault hit the put of its completed file, else the fault."""
        if fired is not None and fired.call.path.startswith("_timeline/"):
            written = parse_file_name(fired.call.path.rpartition("/")[2])
            if written is not None and written.is_completed and written.time == instant.time:
                return CommitStateUnknownError(f"completing {instant.time} failed")
        return RuntimeError("hand-off failed")

    def _compact(self, action: Compact) -> None:
        """A compaction: one round (custom, major) or as many as find something (minor), each a
        ``compaction`` instant of its own that keeps the rows and moves them to a new segment."""
        serial = next(self.serials)
        kind = action.kind
        operation = f"compact {kind}"
        # Segments that running writes (compactions, DELETE SEGMENT) hold are skipped (minor,
        # major) or refused (custom); a writer whose heartbeat expired holds nothing.
        plans = self._pending_plans(alive_only=True)
        busy = {s for p in plans.values() for s in p.sources}
        segments: list[str] | None = None
        refused: type[Exception] | None = None
        #: The sources of each round, in order.
        rounds: list[list[str]]
        model = self.segment_model
        if kind == "custom":
            segments = self._drawn_ids(action.picks, action.bad)
            if not segments:
                refused = txn.InvalidOptionError
            elif any(i not in model for i in segments):
                refused = txn.SegmentNotFoundError
            elif any(model[i].status != SegmentStatus.SUCCESS for i in segments):
                refused = txn.InvalidOptionError
            elif busy & set(segments):
                refused = txn.CommitConflictError
            rounds = [sorted(segments, key=segment_sort_key)]
        elif kind == "close_streaming":
            # Hand-off: every Streaming Finish segment no running write holds, one round each.
            if not self.streaming:
                refused = txn.InvalidOptionError
            rounds = [[s.id] for s in sorted(model.values(), key=lambda s: segment_sort_key(s.id))
                      if s.status == SegmentStatus.STREAMING_FINISH and s.id not in busy]
        elif kind == "major":
            # Every live segment the table wrote itself (never an external one).
            free = [i for i in self._live_segments() if i not in busy and not model[i].external]
            rounds = [free] if len(free) >= 2 else []
        else:
            rounds, simulated = [], model
            while chosen := self._minor_choice(simulated, busy):
                rounds.append(chosen)
                simulated = _merged(simulated, chosen, "", major=False)
        note(f"{operation}: expected rounds {rounds}")
        fault = self._resolve(action.fault, operation)
        owed = {i.time for i in self.observer_timeline.expired()}
        outcome, fired, calls, started_ms = self._run(
            fault, lambda t: t.compact(kind, segments=segments))
        requested = self._instants_of(calls)
        if refused is not None or rounds == []:
            self._changed_nothing(Expected("compact", lambda t: None, self.expected, added=0,
                                           deleted=0, segment=False, refused=refused,
                                           noop=refused is None),
                                  outcome, fired, requested[0].time if requested else None)
            return
        self._check_outcome(operation, outcome, fired, fault, calls, started_ms)
        done = self._rounds(operation, kind, requested, rounds, fault, fired, calls, outcome, serial)
        if fired is None:
            assert len(done) == len(rounds), f"{operation} did {len(done)} of rounds {rounds}"
        if len(done) > 1:
            event(f"{operation}: {len(done)} rounds")
        if isinstance(outcome, txn.Commit):
            assert done, f"{operation} returned {outcome} but committed nothing"
            last, metadata = done[-1]
            assert (outcome.instant, outcome.completed_at) == (last.time, last.completed_at), outcome
            assert (outcome.operation, outcome.segment, outcome.rows_added, outcome.rows_deleted,
                    sorted(outcome.segments_merged)) == (
                "compact", metadata.segment, metadata.rows_added, metadata.rows_deleted,
                sorted(metadata.segments_merged)), outcome
            assert len(done) == len(requested), f"{operation} returned, yet a round failed"
        else:
            assert isinstance(outcome, Exception), f"{operation} returned {outcome!r}"
            if done and len(done) == len(requested) and fault is not None and fault.mode == "exception":
                # Its last round committed, yet it raised: the outcome of that round is unknown
                # to it, or (MINOR) a later round failed before it began.
                commit_point = next(c.index for c in calls if c.op == "put_if_absent"
                                    and c.path.startswith("_timeline/")
                                    and (f := parse_file_name(c.path.rpartition("/")[2])) is not None
                                    and f.time == done[-1][0].time and f.is_completed)
                assert isinstance(outcome, CommitStateUnknownError) or (
                    kind in ("minor", "close_streaming") and fired is not None
                    and fired.call.index > commit_point), (
                    f"{operation} committed {done[-1][0].time} but raised {outcome!r}")
        if requested:
            self._check_owed(owed, calls, requested[0], fired)
