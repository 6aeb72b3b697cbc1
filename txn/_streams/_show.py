"""SHOW STREAMS: every producer the table records, from the ``streams`` partition."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

from metatxn.indexes import STREAMS, ProducerKind, StreamRecord, StreamStatus

from .._context import TableContext
from ._stream import running


@dataclass(frozen=True)
class StreamInfo:
    """One row of SHOW STREAMS: a stream, or an idempotent producer (``kind`` ``app``)."""

    name: str
    kind: str
    #: ``Running`` while a stream of this name is open in this process, else ``Stopped``.
    status: str
    #: Its open ``Streaming`` segment (None: none yet, or an app).
    segment: str | None
    #: The last committed batch id (an app's version).
    last_batch_id: int | None
    rows: int
    started: datetime | None
    updated: datetime | None


def _moment(ms: int) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc) if ms else None


def info(context: TableContext, record: StreamRecord) -> StreamInfo:
    active = record.kind == ProducerKind.STREAM and running(context.uri, record.name)
    return StreamInfo(
        name=record.name, kind=record.kind, status="Running" if active else "Stopped",
        segment=record.segment, last_batch_id=record.last_batch if record.last_batch >= 0 else None,
        rows=record.rows, started=_moment(record.started_ms), updated=_moment(record.updated_ms))


def streams(context: TableContext) -> list[StreamInfo]:
    """Every stream not dropped, then every app, by name."""
    view = context.timeline.load()
    records = (context.metadata_at(view, None, (STREAMS,)).streams or {}).values()
    kept = [r for r in records if r.status != StreamStatus.DROPPED]
    return [info(context, r) for r in sorted(kept, key=lambda r: (r.kind != ProducerKind.STREAM, r.name))]
