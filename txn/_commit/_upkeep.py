"""What the commit protocol asks of a table: the next segment id, and table maintenance.

Table maintenance (metadata compaction, the metadata table's cleaning, archival, the sweep of
leftover markers) never runs inside a commit. A commit ends at its commit point and releases the
table lock; maintenance then runs as instants of its own, taking the lock only for steps whose
cost does not grow with the table (begin and complete a compaction, publish a retention floor,
archive a bounded batch of instants, sweep markers). The fold itself, which reads and writes in
proportion to the table's metadata, runs without the lock while writers go on committing. Who
runs it is the table property ``maintenance.mode`` (design/protocol.md, "Table maintenance").
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from metatxn.indexes import SEGMENTS, segment_sort_key
from metatxn.timeline import COMPLETED, Instant, Lease, TimelineView, TxnError, format_time, read_archive

from .._context import (
    DATA_ACTIONS,
    TableContext,
    WritePlan,
    clean_options,
    maintenance_mode,
    plan_segments,
)
from .._results import MaintenanceReport
from ._protocol import Protocol

log = logging.getLogger("metatxn")


def protocol_of(context: TableContext) -> Protocol:
    """The commit protocol over ``context``'s table (cheap: it holds references only)."""
    protocol = Protocol(context.storage, context.timeline, context.metadata,
                        next_segment=lambda view: next_segment(context, view),
                        after_commit=lambda view: after_commit(context, protocol, view),
                        stage=context.staged, one_file=context.config.format_version >= 2)
    return protocol


def next_segment(context: TableContext, view: TimelineView) -> str:
    """One above every load number taken: committed segments and those of pending writes."""
    taken = [context.metadata_at(view, None, (SEGMENTS,)).max_load_id]
    for instant in view.pending():
        if instant.action in DATA_ACTIONS:
            plan = context.timeline.read_plan(instant, WritePlan)
            taken += [segment_sort_key(s)[0] for s in plan_segments(plan)]
    return str(max(taken, default=-1) + 1)


def after_commit(context: TableContext, protocol: Protocol, view: TimelineView) -> None:
    """Run after a commit released the lock, with the timeline as the commit left it.

    Decides from state in hand (no storage call while this handle knows the latest metadata
    compaction) whether maintenance is due, and if so runs it here (``inline``), hands it to a
    background thread (``async``), or leaves it to ``Table.maintain()`` (``manual``).
    """
    mode = maintenance_mode(context.properties)
    if mode == "manual" or not maintenance_due(context, view):
        return
    if mode == "async":
        _BACKGROUND.submit(context.uri, lambda: maintain(context, protocol))
        return
    maintain(context, protocol)


def maintenance_due(context: TableContext, view: TimelineView) -> bool:
    completed = view.completed()
    return (len(completed) > context.timeline.options.archive_trigger
            or context.metadata.compaction_due(_in_order(completed)))


def maintain(context: TableContext, protocol: Protocol) -> MaintenanceReport:
    """Run the table services that are due: a metadata compaction, then the metadata table's
    cleaning, archival of both timelines and the sweep of leftover markers.

    Safe beside writers and beside other maintainers (in this process or others): compactions
    run one at a time (a second one finds the first pending with a fresh heartbeat and skips),
    and every other step is idempotent. A maintainer that dies leaves at most a pending
    compaction, retired by the next lock holder once its heartbeat expired.
    """
    timeline, metadata = context.timeline, context.metadata
    view = timeline.load()
    compaction: str | None = None
    skipped: str | None = None
    cleaned = archived = swept = 0
    if metadata.compaction_due(_in_order(view.completed())):
        compaction, skipped = _compact(context, protocol)
    clean = None
    if compaction is not None:
        view = timeline.load()
        clean = metadata.plan_clean(_writes(view))
    if clean is not None or len(view.completed()) > timeline.options.archive_trigger:
        # One lock hold for every short step: each hold costs storage calls every waiting
        # writer pays for too.
        with timeline.lock() as lease:
            if clean is not None:
                metadata.publish_clean(clean, lease=lease)
                archived += len(metadata.archive(lease=lease))
                # Markers a writer killed after its commit point left: one listing per
                # compaction, never on the commit path itself.
                swept = len(protocol.sweep_markers(lease))
            archived += len(_archive_data_timeline(context, lease))
        if clean is not None:
            cleaned = len(metadata.finish_clean(clean))
    return MaintenanceReport(compaction=compaction, metadata_files_cleaned=cleaned,
                             instants_archived=archived, markers_swept=swept, skipped=skipped)


def _archive_data_timeline(context: TableContext, lease: Lease) -> list[Instant]:
    """Archive the data timeline as far as the metadata table allows: every commit whose
    blocks a kept base does not fold stays active, and so do the retained commits (cleaning
    counts retention over the active timeline)."""
    timeline, metadata = context.timeline, context.metadata
    view = timeline.view(lease)
    if len(view.completed()) <= timeline.options.archive_trigger:
        return []
    fence = metadata.archive_fence()
    writes = _writes(view)
    if writes:
        retained = writes[max(0, len(writes) - metadata.options.retain_commits)][1]
        fence = min(fence, retained)
    return timeline.archive(lease=lease, fence_exclusive=fence,
                            damaged_before=lambda: _clean_retained_from(context, view))


def _clean_retained_from(context: TableContext, view: TimelineView) -> str:
    """The oldest completion time CLEAN FILES' retention keeps time travel to: that of the
    ``clean.retain_commits``-th last data commit, or ``clean.retain_hours`` ago, the older
    (design/segments.md, "Retention"); "" while it cannot tell. A damaged instant file completed
    before it is archived as damaged: no retained snapshot is older. Asked only when archival
    meets such a file, so the archive is read only then (archived commits count too)."""
    options = clean_options(context.properties)
    writes = [done for _, done in _writes(view)]
    if len(writes) < options.retain_commits:
        try:
            archived = read_archive(context.storage)
        except TxnError:
            return ""  # what a damaged archive holds is unknown: keep the instant
        writes = sorted([r.completed_at or "" for r in archived.values()
                         if r.state == COMPLETED and r.action in DATA_ACTIONS
                         and view.get(r.time) is None] + writes)
    if len(writes) < options.retain_commits:
        return ""
    by_hours = format_time(max(0, context.timeline.clock() - options.retain_hours * _HOUR_MS))
    return min(writes[-options.retain_commits], by_hours)


_HOUR_MS = 3_600_000


def _compact(context: TableContext, protocol: Protocol) -> tuple[str | None, str | None]:
    """Begin a metadata compaction under the lock, fold without it, complete under it.

    Returns the compaction's time if it completed, else why not.
    """
    timeline, metadata = context.timeline, context.metadata
    with timeline.lock() as lease:
        view = protocol.recover(lease)
        order = _in_order(view.completed())
        if not metadata.compaction_due(order):
            return None, None  # another maintainer compacted since we looked
        instant = metadata.begin_compaction(order, lease=lease, data_max_time=view.max_time())
    if instant is None:
        return None, "another metadata compaction is running"
    heartbeat = metadata.compaction_heartbeat(instant).start()
    try:
        metadata.build_compaction(instant, order)
    except BaseException:
        heartbeat.stop(delete=False)
        _abandon(context, instant)
        raise
    try:
        with timeline.lock() as lease:
            done = metadata.complete_compaction(instant, lease=lease)
    except BaseException:
        heartbeat.stop(delete=False)
        _abandon(context, instant)  # unless it completed after all
        raise
    heartbeat.stop(delete=False)
    if not done:
        return None, f"compaction {instant.time} was retired as dead while it ran"
    return instant.time, None


def _abandon(context: TableContext, instant: Instant) -> None:
    """Retire a compaction that failed now, rather than when its heartbeat expires."""
    try:
        with context.timeline.lock() as lease:
            context.metadata.abandon_compaction(instant, lease=lease)
    except Exception:
        log.warning("could not retire failed metadata compaction %s; the next writer will once "
                    "its heartbeat expires", instant.time, exc_info=True)


def _in_order(completed: tuple[Instant, ...]) -> list[tuple[str, str]]:
    return [(i.time, i.completed_at or "") for i in completed]


def _writes(view: TimelineView) -> list[tuple[str, str]]:
    """Completed data writes in completion order: retention counts writes, so a rollback must
    not push a commit out of time travel."""
    return [(i.time, i.completed_at or "") for i in view.completed() if i.action in DATA_ACTIONS]


class _Background:
    """Maintenance on a background thread (``maintenance.mode=async``), one per process.

    At most one run per table location is queued or running in this process: a request while
    one is queued is dropped (the queued run will see its commit), and one that arrives while a
    run is under way queues one more. The threads are joined when the interpreter exits, so a
    started run finishes; a process killed mid-run leaves a pending compaction that expires.
    """

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._queued: set[str] = set()
        self._lock = threading.Lock()

    def submit(self, location: str, run: Callable[[], object]) -> None:
        with self._lock:
            if location in self._queued:
                return
            self._queued.add(location)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=1,
                                                thread_name_prefix="metatxn-maintenance")
            pool = self._pool

        def task() -> None:
            with self._lock:
                self._queued.discard(location)
            try:
                run()
            except Exception:
                log.warning("background table maintenance of %s failed; the next commit "
                            "retries it", location, exc_info=True)

        with contextlib.suppress(RuntimeError):  # the interpreter is shutting down
            pool.submit(task)

    def wait(self) -> None:
        """Wait until every run submitted so far finished (tests, benchmarks, shutdown)."""
        with self._lock:
            pool = self._pool
        if pool is not None:
            pool.submit(lambda: None).result()  # one worker, first in first out


_BACKGROUND = _Background()


def wait_for_background_maintenance() -> None:
    """Block until background maintenance submitted so far has finished."""
    _BACKGROUND.wait()
