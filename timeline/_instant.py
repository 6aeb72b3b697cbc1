"""Instants: the value type, its time format and its file names. Pure: no storage here.

An instant is identified by its requested time ``T`` (17 digits, ``yyyyMMddHHmmssSSS``, UTC) and
its action. Each state is its own immutable file in ``_timeline/``:

* ``T.<action>.requested``: the plan;
* ``T.<action>.inflight``: the writer has started;
* ``T_C.<action>``: completed at completion time ``C``, holding the commit metadata;
* ``T.<action>.rolledback``: a rollback decided this instant will never complete.

An instant's state is the furthest state file present. Putting the completion time in the name
means the completed view, in completion order, comes from one listing with no reads.
"""

from __future__ import annotations

import functools
import re
from datetime import datetime, timedelta, timezone
from typing import Final, Literal

import msgspec

from ._vocabulary import Vocabulary

State = Literal["requested", "inflight", "completed", "rolledback"]

REQUESTED: Final = "requested"
INFLIGHT: Final = "inflight"
COMPLETED: Final = "completed"
ROLLEDBACK: Final = "rolledback"


class Action(Vocabulary):
    """What an instant does; its value is the action's name in the instant's file names.

    Members equal the names read from storage (see :class:`Vocabulary`).
    """

    #: A data write that adds files (and delete deltas).
    COMMIT = "commit"
    #: A metadata-table log block, at its data instant's time.
    DELTACOMMIT = "deltacommit"
    #: A data write that replaces segments (overwrite, DELETE SEGMENT).
    REPLACECOMMIT = "replacecommit"
    #: A table service that rewrites data (segment compaction) or folds the metadata table.
    COMPACTION = "compaction"
    #: CLEAN FILES.
    CLEAN = "clean"
    #: Undoes a pending instant that will never complete.
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"


#: Actions a table's timeline accepts.
ACTIONS: Final = frozenset(Action)

TIME_DIGITS: Final = 17
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)
_STATE_ORDER: Final = {REQUESTED: 0, INFLIGHT: 1, COMPLETED: 2, ROLLEDBACK: 2}

_NAME = re.compile(
    r"^(?P<time>\d{17})(?:_(?P<completed>\d{17}))?\.(?P<action>[a-z]+)"
    r"(?:\.(?P<state>requested|inflight|rolledback))?",
    re.ASCII,  # \d would also match non-ASCII digits, which parse_time and ordering reject
)


class Instant(msgspec.Struct, frozen=True, kw_only=True, order=False):
    """One action on the timeline.

    ``time`` is the requested time and the instant's identity; ``completed_at`` is set only in the
    ``completed`` state and orders snapshots.
    """

    time: str
    action: Action
    state: State
    completed_at: str | None = None

    @property
    def is_completed(self) -> bool:
        return self.state == COMPLETED

    @property
    def is_pending(self) -> bool:
        return self.state in (REQUESTED, INFLIGHT)

    @property
    def file_name(self) -> str:
        """The name of the file that records this instant's current state."""
        return file_name(self.time, self.action, self.state, self.completed_at)

    def with_state(self, state: State, completed_at: str | None = None) -> Instant:
        return Instant(time=self.time, action=self.action, state=state, completed_at=completed_at)

    def __str__(self) -> str:
        done = f" @ {self.completed_at}" if self.completed_at else ""
        return f"{self.time} {self.action} {self.state}{done}"


def state_rank(state: str) -> int:
    """Position of a state in the lifecycle (completed and rolledback are both terminal)."""
    return _STATE_ORDER[state]


def file_name(time: str, action: str, state: str, completed_at: str | None = None) -> str:
    if state == COMPLETED:
        if completed_at is None:
            raise ValueError("a completed instant needs its completion time")
        return f"{time}_{completed_at}.{action}"
    return f"{time}.{action}.{state}"


@functools.lru_cache(maxsize=65536)
def parse_file_name(name: str) -> Instant | None:
    """Return the instant a timeline file name records, or None if the name is not an instant's."""
    match = _NAME.fullmatch(name)  # not match(...$): "$" also matches before a final newline
    if match is None:
        return None
    completed = match.group("completed")
    state = match.group("state")
    if (completed is None) == (state is None):
        return None  # "T_C.action.state" and bare "T.action" are not names we write
    if match.group("action") not in ACTIONS:
        return None
    try:  # 17 digits that are no date (month 13) would break ordering and expiry later
        parse_time(match.group("time"))
        if completed is not None:
            parse_time(completed)
    except ValueError:
        return None
    return Instant(
        time=match.group("time"),
        action=Action(match.group("action")),
        state=COMPLETED if completed else state,  # type: ignore[arg-type]
        completed_at=completed,
    )


def looks_like_instant(name: str) -> bool:
    """Whether a name in ``_timeline/`` claims to be an instant file.

    Only instant files start with a digit there, so a digit-led name that does not parse is a
    damaged instant file, reported as corrupt rather than skipped (skipping could hide a commit).
    """
    return name[:1].isdigit()


def format_time(epoch_ms: int) -> str:
    """Format epoch milliseconds as a 17-digit UTC instant time."""
    moment = _EPOCH + timedelta(milliseconds=epoch_ms)
    # Fields by hand: strftime's %Y does not pad years before 1000 to four digits, and such a
    # time would sort after every real one.
    return (f"{moment.year:04d}{moment.month:02d}{moment.day:02d}{moment.hour:02d}"
            f"{moment.minute:02d}{moment.second:02d}{epoch_ms % 1000:03d}")


@functools.lru_cache(maxsize=65536)
def parse_time(text: str) -> int:
    """Parse a 17-digit UTC instant time into epoch milliseconds.

    Raises:
        ValueError: ``text`` is not 17 digits forming a valid date and time.
    """
    if len(text) != TIME_DIGITS or not (text.isascii() and text.isdigit()):
        raise ValueError(f"instant time must be 17 digits yyyyMMddHHmmssSSS (UTC), got {text!r}")
    try:
        moment = datetime(int(text[0:4]), int(text[4:6]), int(text[6:8]), int(text[8:10]),
                          int(text[10:12]), int(text[12:14]), tzinfo=timezone.utc)
    except ValueError as exc:
        raise ValueError(f"instant time {text!r} is not a valid date and time: {exc}") from None
    return (moment - _EPOCH) // timedelta(milliseconds=1) + int(text[14:])


def time_of(moment: datetime | str) -> str:
    """Normalise a ``datetime`` (naive means UTC) or a 17-digit string to an instant time."""
    if isinstance(moment, datetime):
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)
        return format_time((moment - _EPOCH) // timedelta(milliseconds=1))
    parse_time(moment)
    return moment
