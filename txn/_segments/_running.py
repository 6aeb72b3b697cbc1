"""The segments running writes hold: the sources a pending compaction merges or a pending DELETE
SEGMENT marks (their plans' ``sources``). Another compaction leaves them alone and a DELETE
SEGMENT refuses them. Writers whose heartbeat expired hold nothing: recovery rolls them back at
the next ``begin``, so their segments are free again.
"""

from __future__ import annotations

from collections.abc import Collection

from metatxn.indexes import segment_sort_key
from metatxn.timeline import CommitConflictError, Instant, TimelineView

from .._context import (
    DATA_ACTIONS,
    TableContext,
    WritePlan,
)
from .._results import Operation

#: The operation of DELETE SEGMENT's commits.


def running_plans(context: TableContext, view: TimelineView) -> list[tuple[Instant, WritePlan]]:
    """The plans of the pending data instants whose writers are alive."""
    pending = [i for i in view.pending() if i.action in DATA_ACTIONS]
    if not pending:
        return []
    dead = {i.time for i in context.timeline.expired(view)}
    return [(i, context.timeline.read_plan(i, WritePlan)) for i in pending if i.time not in dead]


def held_segments(context: TableContext, view: TimelineView) -> dict[str, tuple[Instant, WritePlan]]:
    """Segment id -> the live running write whose plan holds it."""
    return {segment: (instant, plan) for instant, plan in running_plans(context, view)
            for segment in plan.sources}


def refuse_held(context: TableContext, view: TimelineView, targets: Collection[str], *,
                refused: str, nothing: str) -> None:
    """Raise ``CommitConflictError`` naming the running write when it holds one of ``targets``.

    ``refused`` names what is refused ("delete segment"), ``nothing`` says what was left
    unwritten ("nothing was deleted").
    """
    held = held_segments(context, view)
    taken = sorted((segment for segment in targets if segment in held), key=segment_sort_key)
    if not taken:
        return
    instant, plan = held[taken[0]]
    if plan.operation == Operation.COMPACT:
        doing = f"compaction {instant.time} is merging"
    elif plan.operation == Operation.DELETE_SEGMENTS:
        doing = f"delete segment {instant.time} is already deleting"
    else:
        doing = f"{plan.operation} {instant.time} is replacing"
    raise CommitConflictError(
        f"{doing} segment(s) {taken}; {refused} is not allowed until it completes, {nothing}\n"
        "Help: retry once that instant has completed or was rolled back")
