"""A change feed's window: its bounds from what the caller gave, and whether it is still readable.

``start`` is exclusive and ``end`` inclusive, both completion times: an instant time names its
completion (an instant not on the timeline is itself the bound, as ``as_of`` takes it), a moment
(``datetime`` or ISO-8601 string) is itself, ``"earliest"`` is before every instant, and a
missing ``end`` is the newest completion on the timeline when the feed is made.

A window is readable while CLEAN FILES removed nothing its instants wrote or read: while
``start`` is at or after the floor CLEAN FILES published (``retention.json``'s ``files_from``).
A window reaching below it is refused whole, naming the oldest instant a window may start at.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Final

from metatxn.indexes import SnapshotExpiredError, retention_floor_of
from metatxn.timeline import Instant, InvalidOptionError, Storage, TimelineView

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
    end_bound = latest
    if end is not None:
        given = _bound(context, view, end, "end")
        if given < start_bound:
            raise InvalidOptionError(
                f"changes end {end!r} (completion bound {given}) is before start {start!r} "
                f"(bound {start_bound}); expected an end at or after the start")
        # Never past what this listing saw: a commit completing later (its completion time may
        # be allocated already, its file not yet put) must fall in the next window, which
        # starts at this window's end.
        end_bound = min(given, latest)
    end_bound = max(end_bound, start_bound)
    return start_bound, end_bound, end_bound == latest


def _bound(context: TableContext, view: TimelineView, value: object, name: str) -> str:
    if isinstance(value, str) and value in (EARLIEST, BEFORE_ALL):
        return BEFORE_ALL  # BEFORE_ALL: the end of a window of an empty table
    if not isinstance(value, (str, datetime)):
        raise InvalidOptionError(
            f"changes {name} must be 'earliest', {AS_OF_FORMS}; got {type(value).__name__} "
            f"{value!r}")
    if isinstance(value, str) and value in _completions(view):
        return value  # a completion time (a window's end): times on a table are unique
    archived: dict[str, Instant] = {}
    if isinstance(value, str) and view.get(value) is None and len(value) == len(BEFORE_ALL) \
            and value.isdigit():
        # An instant archived off the active timeline: the archive knows its completion.
        archived = {i.time: i for i in context.timeline.history()}
    try:
        return completion_bound(value, archived, view)
    except InvalidOptionError as exc:
        raise InvalidOptionError(f"changes {name}: {exc}") from None


def _completions(view: TimelineView) -> set[str]:
    return {i.completed_at for i in view.completed() if i.completed_at}


#: What keeps more change history, for the refusal's ``Help:`` line.
RETENTION_HELP = ("Help: set the table property changes.retain_commits (or raise clean.retain_commits "
                  "/ clean.retain_hours) to keep the change history of more commits")


def expired(storage: Storage, start: str, given: object,
            oldest: Callable[[str], Instant | None] | None = None) -> SnapshotExpiredError | None:
    """The error refusing the window that starts at ``start`` (exclusive), or None while it is
    readable: while ``start`` is at or after CLEAN FILES' floor (``files_from``). Metadata
    cleaning's floor does not limit the feed: it reads the metadata table only at its latest
    state. ``oldest``: finds the oldest data instant completed at or after a floor (for the
    message; a worker without the timeline passes None)."""
    floor = retention_floor_of(storage)
    if floor is None or floor.files_from is None or start >= floor.files_from:
        return None
    first = oldest(floor.files_from) if oldest is not None else None
    readable = (f"the oldest instant a window may start at is {first.time} (completed at "
                f"{first.completed_at}): changes after it are readable"
                if first is not None else
                f"windows starting at or after {floor.files_from} are readable")
    shown = EARLIEST if isinstance(given, str) and given == EARLIEST else repr(given)
    return SnapshotExpiredError(
        f"the changes since {shown} (completion bound {start}) are no longer retained: "
        + ("CLEAN FILES removed data files or delete deltas of instants in the window"
           if floor.files_exact else
           f"the table's retention record (written before CLEAN FILES' floor was kept apart) "
           f"expires what completed before {floor.files_from}")
        + f"; {readable}\n{RETENTION_HELP}")


def check_readable(context: TableContext, start: str, given: object) -> None:
    """Raise unless the window starting at ``start`` (exclusive) is still readable.

    Raises:
        SnapshotExpiredError: cleaning removed files the window needs; the message names the
            oldest instant a window may start at and the properties that keep more.
    """
    def oldest(floor: str) -> Instant | None:
        # Newest first, down to the floor: the archive is read only as far back as it.
        found = None
        for record in context.timeline.completed_newest_first():
            if (record.completed_at or "") < floor:
                break
            if record.action in DATA_ACTIONS:
                found = Instant(time=record.time, action=record.action, state="completed",
                                completed_at=record.completed_at)
        return found

    error = expired(context.storage, start, given, oldest)
    if error is not None:
        raise error
