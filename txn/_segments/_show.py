"""SHOW SEGMENTS and SHOW PARTITIONS."""

from __future__ import annotations

from metatxn.indexes import SEGMENTS, SegmentEntry, SegmentStatus, segment_sort_key
from metatxn.timeline import parse_time

from .._context import DATA_ACTIONS, TableContext, WritePlan, plan_segments
from .._read import snapshot
from .._results import Segment


def segments(context: TableContext, *, history: bool = False) -> list[Segment]:
    """Every segment not cleaned, newest first; loads still running are ``Insert In Progress``.

    ``history``: then the segments CLEAN FILES removed (their final status, ``cleaned`` set),
    newest first, as CarbonData's SHOW HISTORY SEGMENTS lists ``tablestatus`` then its history.
    """
    view = context.timeline.load()
    entries = dict(context.metadata_at(view, None, (SEGMENTS,)).segments or {})
    for instant in view.pending():
        if instant.action not in DATA_ACTIONS:
            continue
        plan = context.timeline.read_plan(instant, WritePlan)
        for segment in plan_segments(plan):
            if segment not in entries:
                entries[segment] = SegmentEntry(
                    id=segment, status=SegmentStatus.INSERT_IN_PROGRESS, instant=instant.time,
                    load_start_ms=parse_time(instant.time))
    ordered = sorted(entries.values(), key=lambda e: segment_sort_key(e.id), reverse=True)
    shown = [e for e in ordered if e.visible]
    if history:
        shown += [e for e in ordered if not e.visible]
    return [Segment.from_entry(e) for e in shown]


def partitions(context: TableContext) -> list[dict[str, object]]:
    """The partition values that hold live data, sorted."""
    seen: dict[tuple[object, ...], dict[str, object]] = {}
    for data_file in snapshot(context).files():
        if data_file.deleted_rows == data_file.rows:
            continue  # every row deleted: the partition holds nothing through this file
        key = tuple(str(data_file.partition[c]) for c in context.partition_by)
        seen.setdefault(key, data_file.partition)
    return [seen[k] for k in sorted(seen)]
