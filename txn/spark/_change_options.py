"""The options of ``format("metatxn")`` that read changes: a stream, or a batch change feed.

Spark lowercases option names. Every value is checked where the format first sees it (its
``schema()``, on ``load()``), so a misspelt limit or a bad starting position fails the query's
definition, not its first micro-batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .. import InvalidOptionError

#: The option names of a change read, lowercased as Spark hands them over.
STARTING = "startinginstant"
ENDING = "endinginstant"
MAX_FILES = "maxfilespertrigger"
MAX_ROWS = "maxrowspertrigger"
CHANGE_FEED = "readchangefeed"

#: Every option a read of ``format("metatxn")`` takes (``asOf``: a batch read's snapshot).
READ_OPTIONS = ("path", "asof", STARTING, ENDING, MAX_FILES, MAX_ROWS, CHANGE_FEED)
_SPELLED = "asOf, startingInstant, endingInstant, maxFilesPerTrigger, maxRowsPerTrigger, readChangeFeed"

#: ``startingInstant`` of a stream that reads only what completes after it started.
LATEST = "latest"
#: ``startingInstant`` before the table's first instant.
EARLIEST = "earliest"


@dataclass(frozen=True)
class ChangeOptions:
    """What a change read asked for.

    ``starting``: None (a stream's default: the latest snapshot's rows, then its changes),
    ``"latest"``, ``"earliest"``, or a start of ``Table.changes`` (an instant time or ISO-8601
    string). ``ending``: a batch change feed's end (None: the latest). ``max_files`` /
    ``max_rows``: a stream's admission limits per micro-batch. ``change_feed``: change rows with
    the change columns (else the rows commits added, table columns only).
    """

    starting: str | None = None
    ending: str | None = None
    max_files: int | None = None
    max_rows: int | None = None
    change_feed: bool = False


def _positive(options: Mapping[str, str], name: str, spelled: str) -> int | None:
    value = options.get(name)
    if value is None:
        return None
    text = str(value).strip()
    if not text.isdigit() or int(text) < 1:
        raise InvalidOptionError(f"format('metatxn') option {spelled} must be a whole number of at "
                                 f"least 1, got {value!r}")
    return int(text)


def change_options(options: Mapping[str, str]) -> ChangeOptions:
    """The change read's options among ``options`` (any other read option is refused).

    Raises:
        InvalidOptionError: an unknown option name (the known ones listed), a limit that is not
            a whole number of at least 1, ``readChangeFeed`` other than ``true`` / ``false``,
            or an empty ``startingInstant`` / ``endingInstant``.
    """
    unknown = sorted(k for k in options if k.lower() not in READ_OPTIONS)
    if unknown:
        raise InvalidOptionError(f"format('metatxn') reads take the options {_SPELLED}; got unknown "
                                 f"option(s) {unknown}")
    feed = str(options.get(CHANGE_FEED, "false")).strip().lower()
    if feed not in ("true", "false"):
        raise InvalidOptionError(f"format('metatxn') option readChangeFeed must be 'true' or 'false', "
                                 f"got {options.get(CHANGE_FEED)!r}")
    bounds = {}
    for name, spelled in ((STARTING, "startingInstant"), (ENDING, "endingInstant")):
        value = options.get(name)
        if value is not None and not str(value).strip():
            raise InvalidOptionError(
                f"format('metatxn') option {spelled} must be an instant time, an ISO-8601 "
                f"timestamp, 'earliest'{' or latest' if name == STARTING else ''}; got {value!r}")
        bounds[name] = str(value).strip() if value is not None else None
    starting = bounds[STARTING]
    if starting is not None and starting.lower() in (LATEST, EARLIEST):
        starting = starting.lower()
    return ChangeOptions(starting=starting, ending=bounds[ENDING],
                         max_files=_positive(options, MAX_FILES, "maxFilesPerTrigger"),
                         max_rows=_positive(options, MAX_ROWS, "maxRowsPerTrigger"),
                         change_feed=feed == "true")
