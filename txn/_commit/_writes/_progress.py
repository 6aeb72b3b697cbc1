"""Exactly once: a producer's batch (a stream's, or an idempotent write's app version) and its
record in the ``streams`` partition, checked at begin and moved at commit."""

from __future__ import annotations

from dataclasses import dataclass

from metatxn.indexes import MAX_BATCH, STREAMS, ProducerKind, StreamRecord, StreamStatus
from metatxn.timeline import StreamDroppedError, TimelineView

from ..._context import TableContext
from .._protocol import Pending


@dataclass(frozen=True)
class Progress:
    """A producer's batch that commits exactly once: stream ``name``'s batch ``batch`` (kind
    ``stream``), or app ``name``'s version ``batch`` (kind ``app``, an idempotent write)."""

    kind: ProducerKind
    name: str
    batch: int
    generation: int = 0
    #: A stream's open segment after this batch (None: an app, or a stream without one).
    segment: str | None = None


class AlreadyCommitted(Exception):
    """The producer committed this batch (or a later one) already: the write does nothing."""


def producer_record(context: TableContext, view: TimelineView, kind: str,
                    name: str) -> StreamRecord | None:
    """The producer's record in the snapshot of ``view`` (None: it never committed)."""
    streams = context.metadata_at(view, None, (STREAMS,)).streams or {}
    return streams.get((kind, name))


def generation_of(record: StreamRecord | None) -> int:
    """The generation a producer's next batch belongs to: a dropped stream's name starts again
    one generation later, from no batch."""
    if record is None:
        return 0
    return record.generation + 1 if record.status == StreamStatus.DROPPED else record.generation


def in_range(batch: object) -> bool:
    """Whether ``batch`` is a batch id (or version) a record can hold: an int from 0 to
    :data:`MAX_BATCH` (not a bool)."""
    return not isinstance(batch, bool) and isinstance(batch, int) and 0 <= batch <= MAX_BATCH


def check_generation(record: StreamRecord | None, progress: Progress) -> None:
    """Refuse a stream's batch whose generation the stream has left: it was dropped after the
    producer opened it (``StreamDroppedError``). Without this check the batch would start the
    next generation itself, bringing the dropped stream back with the old producer's batch ids,
    and a fresh producer's first batches would then be skipped as replays."""
    if progress.kind != ProducerKind.STREAM or record is None:
        return
    if record.generation > progress.generation or (
            record.generation == progress.generation and record.status == StreamStatus.DROPPED):
        raise StreamDroppedError(progress.name, progress.generation, generation_of(record))


def committed(record: StreamRecord | None, progress: Progress) -> bool:
    """Whether ``record`` (the producer's, from the latest snapshot) covers ``progress``'s batch."""
    return (record is not None and record.generation == progress.generation
            and record.last_batch >= progress.batch)


def admit_progress(context: TableContext, progress: Progress | None, view: TimelineView) -> None:
    """The check at begin, under the lock: nothing begins for a batch already committed."""
    if progress is None:
        return
    record = producer_record(context, view, progress.kind, progress.name)
    check_generation(record, progress)
    if committed(record, progress):
        raise AlreadyCommitted(f"{progress.kind} {progress.name!r} committed batch {progress.batch}")


def progressed(context: TableContext, view: TimelineView, progress: Progress, pending: Pending,
               rows: int, *, segment: str | None = None, dropping: bool = False) -> list[StreamRecord]:
    """Under the lock: the producer's record moved to this batch (its open segment now
    ``segment``), or ``AlreadyCommitted`` if a commit since the write began recorded it (two
    retries of one batch never both commit), or ``StreamDroppedError`` if a DROP STREAM
    committed since the producer opened the stream. ``dropping``: DROP STREAM's own record."""
    held = producer_record(context, view, progress.kind, progress.name)
    gone = held is None or held.status == StreamStatus.DROPPED or held.generation != progress.generation
    if dropping and gone:
        raise AlreadyCommitted(f"stream {progress.name!r} was dropped meanwhile")
    if not dropping:
        check_generation(held, progress)
    if not dropping and committed(held, progress):
        raise AlreadyCommitted(f"{progress.kind} {progress.name!r} committed batch {progress.batch}")
    same = held is not None and held.generation == progress.generation
    now = context.clock()
    return [StreamRecord(
        name=progress.name, kind=progress.kind, generation=progress.generation,
        last_batch=progress.batch, rows=(held.rows if same and held else 0) + rows,
        segment=None if dropping else segment,
        status=StreamStatus.DROPPED if dropping else StreamStatus.ACTIVE,
        started_ms=held.started_ms if same and held else now, updated_ms=now,
        instant=pending.instant.time)]
