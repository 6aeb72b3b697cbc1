"""Which snapshot a read means: the latest, or one reached by time travel (``as_of``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa

from metatxn.indexes import COLUMN_STATS, DELETES, FILES, SCHEMAS, SnapshotExpiredError
from metatxn.timeline import Instant, InvalidOptionError, TimelineView, parse_time, time_of

from .._context import DATA_ACTIONS, TableContext, latest_version
from ._snapshot import Snapshot


def snapshot(context: TableContext, as_of: str | datetime | None = None) -> Snapshot:
    """The table as of the latest completed instant, or as of ``as_of`` (see
    :meth:`txn.Table.snapshot`)."""
    view = context.timeline.load()
    if as_of is None:
        return latest(context, view)
    # Time travel may reach instants archived off the active timeline: read the archive
    # once, for the bound, the snapshot's name and the blocks to merge alike.
    history = context.timeline.history()
    completed = tuple(sorted((i for i in history if i.is_completed),
                             key=lambda i: i.completed_at or ""))
    bound = completion_bound(as_of, {i.time: i for i in history}, view)
    check_retained(context, as_of, bound, completed)
    travel = {i.time: i.completed_at or "" for i in completed}
    return snapshot_at(context, view, _last_write(completed, bound), bound, travel)


def latest(context: TableContext, view: TimelineView) -> Snapshot:
    """The snapshot of the latest completed instant of ``view`` (a listing just made)."""
    last = view.last_completed()
    bound = last.completed_at if last else None
    return snapshot_at(context, view, _last_write(view.completed(), bound), bound)


def _last_write(completed: Sequence[Instant], bound: str | None) -> str | None:
    """The instant a snapshot at ``bound`` is named after: the last write it includes, not a
    rollback after it (``completed`` in completion order)."""
    writes = [i for i in completed if i.action in DATA_ACTIONS
              and bound is not None and (i.completed_at or "") <= bound]
    return writes[-1].time if writes else None


def check_retained(context: TableContext, as_of: str | datetime, bound: str,
                   completed: Sequence[Instant]) -> None:
    """Raise if cleaning expired the snapshot at ``bound`` (``completed``: every completed
    instant, archived ones included, in completion order).

    CLEAN FILES publishes its floor before it moves a file, metadata cleaning before it deletes
    a block: a snapshot completed before the floor may miss either, so it is refused whole.

    Raises:
        SnapshotExpiredError: naming the oldest instant time travel still reaches, and the
            table property that keeps more history.
    """
    floor = context.metadata.retention_floor()
    if floor is None or bound >= floor.resolvable_from:
        return
    oldest = next((i for i in completed if i.action in DATA_ACTIONS
                   and (i.completed_at or "") >= floor.resolvable_from), None)
    reachable = (f"the oldest reachable instant is {oldest.time} (completed at {oldest.completed_at})"
                 if oldest is not None else
                 f"snapshots completed at or after {floor.resolvable_from} are reachable")
    raise SnapshotExpiredError(
        f"the snapshot as of {as_of} (bound {bound}) is no longer retained: cleaning removed files "
        f"it needs; {reachable}\n{floor.help()}")


#: The length of an instant time; any other string is read as ISO-8601 (no ISO form is 17 digits).
_INSTANT_DIGITS = 17

#: What ``as_of`` accepts, for the messages that refuse anything else.
AS_OF_FORMS = ("an instant time (17 digits yyyyMMddHHmmssSSS, UTC), a datetime (naive: UTC), or an "
               "ISO-8601 date or timestamp string ('2026-01-01', '2026-01-01 10:00:00', "
               "'2026-01-01T10:00:00.123+02:00', '...Z'; UTC unless it carries an offset)")


def completion_bound(as_of: str | datetime, instants: dict[str, Instant], view: TimelineView) -> str:
    """The completion time up to which ``as_of`` reaches (inclusive).

    An instant time names that instant (its completion time; a time no instant has is itself
    the bound); a ``datetime`` or an ISO-8601 string is a moment, truncated to the millisecond:
    naive means UTC, an offset is converted, a date is its midnight UTC.

    Raises:
        InvalidOptionError: any other value or string (naming :data:`AS_OF_FORMS`), or an
            instant that has not completed.
    """
    if isinstance(as_of, datetime):
        return _bound_of(as_of)
    if not isinstance(as_of, str):
        raise InvalidOptionError(f"as_of must be {AS_OF_FORMS}; got {type(as_of).__name__} {as_of!r}")
    if len(as_of) != _INSTANT_DIGITS or not (as_of.isascii() and as_of.isdigit()):
        return _bound_of(_moment(as_of))
    try:
        parse_time(as_of)
    except ValueError as exc:
        raise InvalidOptionError(f"as_of {as_of!r}: {exc}") from None
    instant = view.get(as_of) or instants.get(as_of)
    if instant is None:
        return as_of
    if not instant.is_completed or instant.completed_at is None:
        raise InvalidOptionError(
            f"as_of names instant {as_of}, which is {instant.state}, not completed; "
            "a snapshot can only be taken at a completed instant")
    return instant.completed_at


def _bound_of(moment: datetime) -> str:
    """``moment`` as a completion bound. A moment past year 9999 in UTC (9999-12-31T23:00-02:00)
    has no instant time: it bounds after every instant, as one before year 1 bounds before."""
    try:
        return time_of(moment)
    except OverflowError:
        return "9" * _INSTANT_DIGITS if moment.year > 1 else "0" * _INSTANT_DIGITS


def _moment(text: str) -> datetime:
    """An ISO-8601 date or timestamp string as a moment. ``Z`` is spelled ``+00:00`` first:
    Python 3.10's ``fromisoformat`` (the oldest we support) refuses it."""
    iso = text[:-1] + "+00:00" if text[-1:] in ("Z", "z") else text
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        raise InvalidOptionError(f"as_of {text!r} is not {AS_OF_FORMS}") from None


def snapshot_at(context: TableContext, view: TimelineView, instant: str | None, bound: str | None,
                travel: dict[str, str] | None = None) -> Snapshot:
    """The snapshot named ``instant`` that includes every instant completed at or before
    ``bound``; column statistics are resolved only when a filter needs them."""
    metadata = context.metadata_at(view, bound, (SCHEMAS, FILES, DELETES), travel)
    # The version as of the bound: time travel reads the schema of its instant.
    version = latest_version(metadata.versions, context.base_version)

    def column_stats() -> pa.Table:
        resolved = context.metadata_at(view, bound, (COLUMN_STATS,), travel).column_stats
        assert resolved is not None
        return resolved

    def still_retained() -> None:
        if bound is not None:
            completed = sorted(view.completed(), key=lambda i: i.completed_at or "")
            check_retained(context, instant or bound, bound, completed)

    schemas = context.schemas_at(metadata.versions)
    return Snapshot(instant=instant, completed_at=bound, metadata=metadata,
                    schema=schemas[version.schema_id], versions=schemas, schema_id=version.schema_id,
                    store=context.store, load_column_stats=column_stats, check_retained=still_retained,
                    uri=context.uri, storage_options=context.storage_options,
                    partition_by=version.partition_by)
