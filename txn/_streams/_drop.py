"""DROP STREAM: the stream leaves SHOW STREAMS and its open segment becomes ``Streaming
Finish`` (ready for hand-off), in one commit."""

from __future__ import annotations

from metatxn.indexes import ProducerKind, StreamStatus
from metatxn.timeline import StreamNotFoundError

from .._commit import DropStream, Progress, producer_record
from .._context import TableContext
from .._results import Commit
from .._write import State, commit_planned
from ._stream import _check_name, close_running, hand_off, record_of


def drop_stream(context: TableContext, name: str) -> Commit:
    """Drop stream ``name``; see :meth:`txn.Table.drop_stream`."""
    name = _check_name(name)
    record = record_of(context, name)
    if record is None or record.status == StreamStatus.DROPPED:
        app = None if record is not None else producer_record(
            context, context.timeline.load(), ProducerKind.APP, name)
        raise StreamNotFoundError(
            f"no stream {name!r} on the table at {context.uri!r}"
            + (" (it was dropped)" if record is not None else "")
            + (f"; {name!r} is the app_id of idempotent writes, which SHOW STREAMS lists too but "
               "DROP STREAM does not drop" if app is not None else "")
            + "; expected the name of a stream SHOW STREAMS (t.streams()) lists with kind 'stream'")
    progress = Progress(ProducerKind.STREAM, name, record.last_batch, record.generation)

    def plan(state: State) -> DropStream:
        return DropStream(read_at=state.read_at, progress=progress, finish=record.segment)

    close_running(context.uri, name)  # its writers here stop: a write now would start afresh
    commit = commit_planned(context, plan, {"stream": name}, progress=progress)
    if commit is None:  # dropped by another writer meanwhile
        raise StreamNotFoundError(f"stream {name!r} was dropped meanwhile")
    if record.segment is not None:
        hand_off(context, commit)
    return commit
