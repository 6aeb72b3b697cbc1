"""Streams (CarbonData's streaming tables): ``t.stream(name)`` and ``s.write(batch_id, data)``.

A stream commits each batch exactly once into its open ``Streaming`` segment: one commit per
batch, the batch id and the stream's progress recorded in the ``streams`` partition in the same
commit (see design/streaming.md). A batch id at or below the last committed one is skipped.
A ``Stream`` belongs to the stream's generation when it was opened: once the stream is dropped,
by any process, its batches are refused (``StreamDroppedError``), and a ``Stream`` opened after
the drop starts the next generation from no batch.
Past ``streaming.segment.max_size`` the open segment becomes ``Streaming Finish`` in the commit
of the batch that opens the next one. Several streams may write one table at once, each into a
segment of its own.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from metatxn.indexes import MAX_BATCH, SEGMENTS, ProducerKind, SegmentStatus, StreamRecord, StreamStatus
from metatxn.timeline import DuplicateKeyError, InvalidOptionError, TxnError

from .._commit import (
    Progress,
    StreamBatch,
    StreamStep,
    check_generation,
    committed,
    generation_of,
    in_range,
    producer_record,
)
from .._context import TableContext, streaming_auto_handoff, streaming_enabled, streaming_max_bytes
from .._results import Commit, CompactionKind
from .._rows import batches, check_not_null, check_unique, describe, index_keys
from .._segments import STREAM_FILES_FANOUT, compact, merge_stream_files
from .._write import State, commit_planned, find_keys

log = logging.getLogger("metatxn")

#: Streams open in this process, by table location and name: SHOW STREAMS's ``Running``.
_RUNNING: dict[tuple[str, str], weakref.WeakSet[Stream]] = {}
_RUNNING_LOCK = threading.Lock()


def running(uri: str, name: str) -> bool:
    """Whether a stream of this name on this table is open (not closed) in this process."""
    with _RUNNING_LOCK:
        return any(s.active for s in _RUNNING.get((uri, name), ()))


def close_running(uri: str, name: str) -> None:
    """Close the streams of this name on this table open in this process, stopping the queries
    that feed them (DROP STREAM)."""
    with _RUNNING_LOCK:
        streams = list(_RUNNING.get((uri, name), ()))
    for stream in streams:
        stream.close()


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise InvalidOptionError(f"a stream name must be a non-empty string of at most 200 "
                                 f"characters; got {name!r}")
    return name


def record_of(context: TableContext, name: str) -> StreamRecord | None:
    """The stream's record in the latest snapshot (None: never started)."""
    return producer_record(context, context.timeline.load(), ProducerKind.STREAM, name)


def generation(context: TableContext, name: str) -> int:
    """The generation stream ``name``'s next batch belongs to (0: never started; one more after
    each DROP STREAM)."""
    return generation_of(record_of(context, _check_name(name)))


class Stream:
    """A stream writing one table; obtain it with :meth:`txn.Table.stream`.

    ``write(batch_id, data)`` commits a batch exactly once. The stream counts as ``Running`` in
    SHOW STREAMS until :meth:`close` (or the end of a ``with`` block).
    """

    def __init__(self, context: TableContext, name: str) -> None:
        self._context = context
        self.name = _check_name(name)
        if not streaming_enabled(context.properties):
            raise InvalidOptionError(
                f"stream {name!r}: the table at {context.uri!r} is not a streaming table; expected "
                "one created with properties={'streaming': 'true'}")
        self.closed = False
        #: The stream's generation this object writes: the current one, or the next if the
        #: stream was dropped. Fixed now, so a DROP STREAM committed later (by any process) fences
        #: this object off instead of letting its next batch start a generation of its own.
        self._generation = generation_of(record_of(context, self.name))
        #: Batches this object committed (it looks for files to merge every FANOUT of them).
        self._batches = 0
        #: Whether a write went through this object yet (see :meth:`write`).
        self._wrote = False
        #: Whether whatever feeds the stream still runs (a Spark query's ``isActive``), and how
        #: to stop it; set by ``txn.spark.write_stream``.
        self._alive: Callable[[], bool] = lambda: True
        self._stop: Callable[[], None] = lambda: None
        with _RUNNING_LOCK:
            _RUNNING.setdefault((context.uri, self.name), weakref.WeakSet()).add(self)

    @property
    def last_batch_id(self) -> int | None:
        """The last batch id this stream committed (None before its first)."""
        record = record_of(self._context, self.name)
        if record is None or record.status == StreamStatus.DROPPED or record.last_batch < 0 \
                or record.generation != self._generation:
            return None
        return record.last_batch

    def write(self, batch_id: int, data: Any) -> Commit | None:
        """Commit ``data`` as batch ``batch_id`` of this stream, once.

        Returns None, writing nothing, when the stream committed ``batch_id`` or a later batch
        already (a replay). A batch of no rows still commits (its id is recorded, so a replay of
        it is skipped too), writing no data file.

        Raises:
            InvalidOptionError: ``batch_id`` is not an int from 0 to 2**63 - 1 (batch ids are
                stored as 64-bit integers), or the stream was closed.
            StreamDroppedError: the stream was dropped (by any process) after this object was
                opened; nothing is written.
            SchemaMismatchError: the data does not fit the table's schema; nothing is written.
        """
        if self.closed:
            raise InvalidOptionError(f"stream {self.name!r} is closed; open it again with t.stream(name)")
        if not in_range(batch_id):
            raise InvalidOptionError(
                f"stream {self.name!r}: batch_id {batch_id!r} is not an int from 0 to {MAX_BATCH} "
                "(batch ids are stored as 64-bit integers); nothing was written")
        context = self._context
        if not self._wrote:
            self._wrote = True
            # A restarted producer's first batch is often a replay. Checked against the stream's
            # record alone, it costs the same after 10 batches or 100,000; a write reads the
            # table's live files too, which a fresh handle would read for nothing.
            if self._replayed(batch_id):
                return None
        columns = context.record_key_columns
        try:
            rows = pa.Table.from_batches(list(batches(data, context.schema)), schema=context.schema)
            if columns:
                check_not_null(rows, columns)
                check_unique(rows, columns)
        except TxnError:
            # A replay is skipped whatever its rows: the batch committed already. Checked only
            # when the rows are refused, so a good batch pays for no extra look at the table.
            if self._replayed(batch_id):
                return None
            raise
        steps: list[StreamStep] = []

        def plan(state: State) -> StreamBatch | None:
            # The replay check reads the state the write reads anyway (one look at the table);
            # it is made again under the lock at begin and at commit.
            record = producer_record(context, state.view, ProducerKind.STREAM, self.name)
            progress = Progress(ProducerKind.STREAM, self.name, batch_id, self._generation)
            check_generation(record, progress)
            if committed(record, progress):
                return None
            if columns and rows.num_rows:
                existing = find_keys(context, state, index_keys(rows, columns))
                if existing.num_rows:
                    raise DuplicateKeyError(
                        f"stream {self.name!r} batch {batch_id}: record key(s) "
                        f"{describe(existing, columns)} already exist in the table; nothing was "
                        "written\nHelp: a stream appends; deduplicate the batch against the table")
            steps.append(_step(context, state, record))
            return StreamBatch(rows=rows.to_batches() if rows.num_rows else None, read_at=state.read_at,
                               current=state.deltas, step=steps[-1], rows_bytes=rows.nbytes,
                               progress=progress)

        commit = commit_planned(context, plan, {"stream": self.name, "batch_id": str(batch_id)})
        if commit is not None and steps and steps[-1].finish is not None:
            hand_off(context, commit)
        if commit is not None and commit.segment is not None:
            # A size tier fills at most once per FANOUT new files: look that often, not at
            # every batch (looking reads the timeline).
            self._batches += 1
            if self._batches % STREAM_FILES_FANOUT == 0:
                _tidy(context, commit)
        return commit

    def _replayed(self, batch_id: int) -> bool:
        """Whether the stream committed ``batch_id`` (or a later batch) already
        (``StreamDroppedError`` if it was dropped since this object was opened)."""
        record = record_of(self._context, self.name)
        progress = Progress(ProducerKind.STREAM, self.name, batch_id, self._generation)
        check_generation(record, progress)
        if committed(record, progress):
            log.info("stream %s batch %d: skipped, already committed", self.name, batch_id)
            return True
        return False

    @property
    def active(self) -> bool:
        """Open, and fed: SHOW STREAMS's ``Running``."""
        return not self.closed and self._alive()

    def feed_by(self, alive: Callable[[], bool], stop: Callable[[], None]) -> None:
        """Tie the stream to what feeds it (a streaming query): running while ``alive()``,
        ``stop()`` on close (DROP STREAM stops the query first)."""
        self._alive, self._stop = alive, stop

    def close(self) -> None:
        """Stop counting as ``Running`` (stopping what feeds it); the stream's progress and
        open segment stay."""
        self.closed = True
        try:
            self._stop()
        except Exception:
            log.warning("stopping the feed of stream %s failed", self.name, exc_info=True)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"txn.Stream({self.name!r} on {self._context.uri!r})"


def hand_off(context: TableContext, finished_by: Commit) -> None:
    """``streaming.auto_handoff`` (default true): after a commit that finished a streaming
    segment, convert the finished segments into columnar ones (``close_streaming``). It runs
    after that commit's point: a failure is logged, never the commit's."""
    if not streaming_auto_handoff(context.properties):
        return
    try:
        compact(context, CompactionKind.CLOSE_STREAMING)
    except Exception:
        log.warning("hand-off after %s %s failed; the commit stands, and compact('close_streaming') "
                    "converts the finished segment later", finished_by.operation, finished_by.instant,
                    exc_info=True)


def _tidy(context: TableContext, batch: Commit) -> None:
    """After a batch: merge the open segment's small files when a size tier is full (a table
    service: after the batch's commit point, a failure is logged, never the batch's)."""
    assert batch.segment is not None
    try:
        merge_stream_files(context, batch.segment)
    except Exception:
        log.warning("merging the files of streaming segment %s after %s failed; the batch stands",
                    batch.segment, batch.instant, exc_info=True)


def _step(context: TableContext, state: State, record: StreamRecord | None) -> StreamStep:
    """Where the batch goes: the stream's open segment, or a new one when there is none or it
    grew past ``streaming.segment.max_size`` (then this commit finishes it)."""
    open_segment = record.segment if record is not None and record.status != StreamStatus.DROPPED else None
    if open_segment is None:
        return StreamStep(segment=None)
    segments = context.metadata_at(state.view, None, (SEGMENTS,)).segments or {}
    entry = segments.get(open_segment)
    if entry is None or entry.status != SegmentStatus.STREAMING:
        return StreamStep(segment=None)
    if entry.data_size >= streaming_max_bytes(context.properties):
        return StreamStep(segment=None, finish=open_segment)
    return StreamStep(segment=open_segment)

