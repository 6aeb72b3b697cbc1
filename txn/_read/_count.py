"""``Table.count()``: the latest snapshot's live rows, counted once per completed instant.

A count is asked again and again of a table that has not changed (a job checking its load, a
service polling, a fresh handle per request, as stateless jobs open them). Resolving the
``files`` and ``deletes`` partitions for it (a base and up to ten log blocks each, milliseconds)
would give the same number each time, so the latest snapshot's count is kept per process, per
table, with the last completed instant it was counted at. A call lists the timeline, as every
read of the latest state does, and answers from the cache while that instant is still the last
completed one: any completion since (another process's commit, a rollback, a table service)
changes it, and the count is resolved again. The table's id is part of the key, so a table
recreated at the same location shares nothing with the old one. Filters and time travel
build their snapshot (a snapshot counts itself once: ``Snapshot.count``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from datetime import datetime

import pyarrow.dataset as ds

from metatxn.timeline import Instant

from .._context import TableContext
from ._resolve import latest, snapshot

#: Tables whose latest count a process keeps, least recently used out (a few hundred bytes each).
_TABLES_KEPT = 1024


class _Counts:
    """Process-wide: ``(location, table id)`` -> ``(instant, completed_at, live rows)`` of the last
    completed instant a count was resolved at (one entry per table: only the latest is asked)."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, str], tuple[str, str | None, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, table: tuple[str, str], last: Instant) -> int | None:
        with self._lock:
            entry = self._entries.get(table)
            if entry is None or entry[:2] != (last.time, last.completed_at):
                return None
            self._entries.move_to_end(table)
            return entry[2]

    def put(self, table: tuple[str, str], last: Instant, rows: int) -> None:
        with self._lock:
            self._entries[table] = (last.time, last.completed_at, rows)
            self._entries.move_to_end(table)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


_COUNTS = _Counts(_TABLES_KEPT)


def count_rows(context: TableContext, filter: ds.Expression | None = None,
               as_of: str | datetime | None = None) -> int:
    """The live rows of the snapshot ``as_of`` (None: the latest) matching ``filter`` (see
    :meth:`txn.Table.count`)."""
    if filter is not None or as_of is not None:
        return snapshot(context, as_of).count(filter)
    view = context.timeline.load()
    last = view.last_completed()
    if last is None:  # nothing completed: an empty snapshot, nothing worth keeping
        return latest(context, view).count()
    table = (context.storage.uri, context.config.table_id)
    rows = _COUNTS.get(table, last)
    if rows is None:
        rows = latest(context, view).count()
        _COUNTS.put(table, last, rows)
    return rows
