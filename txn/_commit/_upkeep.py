"""What the commit protocol asks of a table: the next segment id, and upkeep after each commit."""

from __future__ import annotations

from indexes import SEGMENTS, segment_sort_key
from timeline import Lease, TimelineView

from .._context import DATA_ACTIONS, TableContext, WritePlan
from ._protocol import Protocol


def protocol_of(context: TableContext) -> Protocol:
    """The commit protocol over ``context``'s table (cheap: it holds references only)."""
    protocol = Protocol(context.storage, context.timeline, context.metadata,
                        next_segment=lambda view: next_segment(context, view),
                        after_commit=lambda lease: maintain(context, protocol, lease))
    return protocol


def next_segment(context: TableContext, view: TimelineView) -> str:
    """One above every load number taken: committed segments and those of pending writes."""
    taken = [context.metadata_at(view, None, (SEGMENTS,)).max_load_id]
    for instant in view.pending():
        if instant.action in DATA_ACTIONS:
            plan = context.timeline.read_plan(instant, WritePlan)
            if plan.segment is not None:
                taken.append(segment_sort_key(plan.segment)[0])
    return str(max(taken, default=-1) + 1)


def maintain(context: TableContext, protocol: Protocol, lease: Lease) -> None:
    """After each commit, under the lock: metadata compaction and cleaning (with the sweep of
    leftover markers), then archival.

    Each step first checks, from state already in hand, whether it has anything to do, so a
    commit that needs no maintenance pays no storage call for it.
    """
    timeline, metadata = context.timeline, context.metadata
    view = timeline.view(lease)
    order = [(i.time, i.completed_at or "") for i in view.completed()]
    # Retention counts writes: a rollback must not push a commit out of time travel.
    writes = [(i.time, i.completed_at or "") for i in view.completed() if i.action in DATA_ACTIONS]
    if metadata.compact_if_due(order, lease=lease, data_max_time=view.max_time()) is not None:
        metadata.clean(writes, lease=lease)
        metadata.archive(lease=lease)
        # Markers a writer killed after its commit point left: one listing every
        # ``metadata.compact_after`` commits, never on the commit path itself.
        protocol.sweep_markers(lease)
    if len(order) > timeline.options.archive_trigger:
        # Keep on the active timeline every commit whose blocks a kept base does not fold, and
        # the retained commits (cleaning counts retention over the active timeline).
        fence = metadata.archive_fence()
        if writes:
            retained = writes[max(0, len(writes) - metadata.options.retain_commits)][1]
            fence = min(fence, retained)
        timeline.archive(lease=lease, fence_exclusive=fence)
