"""The state a write reads: the latest snapshot's metadata, and record keys found in it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from indexes import DELETES, FILES, MetadataSnapshot, SnapshotExpiredError, live
from timeline import TimelineView

from .._context import TableContext
from .._files import LiveDeltas

log = logging.getLogger("metatxn")

T = TypeVar("T")
#: How often a write reads the latest state again when cleaning overtook its read.
_ATTEMPTS = 3


@dataclass(frozen=True)
class State:
    """The latest snapshot's metadata, as a write reads it."""

    view: TimelineView
    read_at: str | None
    metadata: MetadataSnapshot
    live_files: pa.Table
    deltas: LiveDeltas


def read_state(context: TableContext) -> State:
    view = context.timeline.load()
    last = view.last_completed()
    metadata = context.metadata_at(view, None, (FILES, DELETES))
    assert metadata.files is not None
    return State(view, last.completed_at if last else None, metadata, live(metadata.files),
                 LiveDeltas.of(context.store, metadata.deletes))


def find_keys(context: TableContext, state: State, keys: pa.Table) -> pa.Table:
    """The live index entries of ``keys`` (index key columns) in ``state``.

    Raises:
        SnapshotExpiredError: cleaning removed ``state``'s index files meanwhile (many commits
            completed since it was read); callers that read the latest state read it again.
    """
    index = context.metadata.record_index
    assert index is not None
    if state.read_at is None or keys.num_rows == 0:
        return index.schema.empty_table()
    completed = {i.time: i.completed_at or "" for i in state.view.completed()}
    entries = context.metadata.lookup_keys(keys, completed, state.read_at)
    alive = pc.and_(pc.invert(entries["deleted"]),
                    pc.is_in(entries["file"], value_set=state.live_files["path"].combine_chunks()))
    return entries.filter(alive)


def latest(context: TableContext, work: Callable[[State], T]) -> T:
    """Run ``work`` on the latest state; again on a fresh one if cleaning overtook it."""
    for attempt in range(_ATTEMPTS):
        try:
            return work(read_state(context))
        except SnapshotExpiredError:
            if attempt == _ATTEMPTS - 1:
                raise
            log.info("the table moved on while a write read it; reading it again")
    raise AssertionError("unreachable")  # pragma: no cover
