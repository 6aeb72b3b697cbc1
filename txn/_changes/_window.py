"""A change feed's window: its bounds from what the caller gave, and whether it is still readable.

``start`` is exclusive and ``end`` inclusive, both completion times: an instant time names its
completion (an instant not on the timeline is itself the bound, as ``as_of`` takes it), a moment
(``datetime`` or ISO-8601 string) is itself, ``"earliest"`` is before every instant, and a
missing ``end`` is the newest completion on the timeline when the feed is made.

A window is readable while no cleaning removed what its instants wrote or read: while ``start``
is at or after the retention floor (``retention.json``), the same floor that ends time travel.
A window reaching below it is refused whole, naming the oldest instant a window may start at.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from indexes import SnapshotExpiredError
from timeline import Instant, InvalidOptionError, TimelineView

from .._context import DATA_ACTIONS, TableContext
from .._read import AS_OF_FORMS, completion_bound

#: ``start`` naming the beginning of the table: before every instant.
EARLIEST: Final = "earliest"
#: The completion bound before every instant.
BEFORE_ALL: Final = "0" * 17


def bounds(context: TableContext, view: TimelineView, start: object, end: object
           ) -> tuple[str, str, bool]:
    """``(start, end, at_latest)``: the window's completion bounds; ``at_latest``: ``end`` is
    the newest completion of ``view`` (the metadata table's latest state applies).

    Raises:
        InvalidOptionError: a bound that is none of the accepted forms, an instant that has not
            completed, or ``end`` before ``start``.
    """
    last = view.last_completed()
    latest = (last.completed_at or BEFORE_ALL) if last is not None else BEFORE_ALL
    start_bound = _bound(context, view, start, "start")
    if end is None:
        end_bound = max(latest, start_bound)
    else:
        end_bound = _bound(context, view, end, "end")
        if end_bound < start_bound:
            raise InvalidOptionError(
                f"changes end {end!r} (completion bound {end_bound}) is before start {start!r} "
                f"(bound {start_bound}); expected an end at or after the start")
    return start_bound, end_bound, end_bound == latest


def _bound(context: TableContext, view: TimelineView, value: object, name: str) -> str:
    if value == EARLIEST:
        return BEFORE_ALL
    if not isinstance(value, (str, datetime)):
        raise InvalidOptionError(
            f"changes {name} must be 'earliest', {AS_OF_FORMS}; got {type(value).__name__} "
            f"{value!r}")
    archived: dict[str, Instant] = {}
    if isinstance(value, str) and view.get(value) is None and len(value) == len(BEFORE_ALL) \
            and value.isdigit():
        # An instant archived off the active timeline: the archive knows its completion.
        archived = {i.time: i for i in context.timeline.history()}
    return completion_bound(value, archived, view)


def check_readable(context: TableContext, start: str, given: object) -> None:
    """Raise unless the window starting at ``start`` (exclusive) is still readable.

    Raises:
        SnapshotExpiredError: cleaning removed files or metadata the window needs; the message
            names the oldest instant a window may start at and the property that keeps more.
    """
    floor = context.metadata.retention_floor()
    if floor is None or start >= floor.resolvable_from:
        return
    history = sorted((i for i in context.timeline.history() if i.is_completed
                      and i.action in DATA_ACTIONS), key=lambda i: i.completed_at or "")
    oldest = next((i for i in history if (i.completed_at or "") >= floor.resolvable_from), None)
    readable = (f"the oldest instant a window may start at is {oldest.time} (completed at "
                f"{oldest.completed_at}): changes after it are readable"
                if oldest is not None else
                f"windows starting at or after {floor.resolvable_from} are readable")
    shown = "earliest" if given == EARLIEST else repr(given)
    raise SnapshotExpiredError(
        f"the changes since {shown} (completion bound {start}) are no longer retained: cleaning "
        f"removed files or metadata of instants in the window; {readable}\n{floor.help()}, or "
        "set changes.retain_commits to keep change history of more commits")
