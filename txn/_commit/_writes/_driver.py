"""The commit driver: one write (any kind) through the commit protocol as one instant."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metatxn.indexes import MetadataChanges
from metatxn.timeline import Instant, Lease, TimelineView

from ..._context import TableContext
from ..._results import Commit
from .._protocol import Builder, Pending
from .._upkeep import protocol_of
from ._base import LockPolicy, Write, Written, to_commit

#: A write phase run elsewhere (Spark's executors): given the begun instant, what they wrote.
WrittenBy = Callable[[Pending], Written]


def run(context: TableContext, write: Write, extra: dict[str, str] | None = None, *,
        retries: int = 0, written_by: WrittenBy | None = None) -> tuple[Instant, Any]:
    """Begin, write and commit ``write`` as one instant, rolled back on any failure before the
    commit point; return the completed instant and its commit metadata.

    ``extra``: recorded in the plan and the commit. ``retries``: how often the caller planned
    this write again after a table service overtook it (recorded). ``written_by`` replaces the
    write's own write phase (it then always gets a heartbeat).
    """
    elsewhere = written_by is not None
    return protocol_of(context).run(
        write.operation, write.action,
        hold_lock=write.lock_policy(elsewhere=elsewhere) is LockPolicy.HELD,
        write=written_by or (lambda pending: write.write(context, pending)),
        build=_commit_step(context, write, extra, retries=retries),
        **_begin_arguments(context, write, extra, elsewhere=elsewhere),
    )


def begin(context: TableContext, write: Write, extra: dict[str, str] | None = None) -> Pending:
    """The first half of :func:`run` for a write whose files are written elsewhere: its instant
    requested and started (segments allocated, admission checked, heartbeat beating); then
    :func:`finish` it, or roll it back."""
    return protocol_of(context).begin(write.operation, write.action,
                                      **_begin_arguments(context, write, extra, elsewhere=True))


def _begin_arguments(context: TableContext, write: Write, extra: dict[str, str] | None, *,
                     elsewhere: bool) -> dict[str, Any]:
    """What ``Protocol.begin`` takes for ``write``: its segments, sources, plan and admission."""
    allocation = write.allocation(elsewhere=elsewhere)
    return {"new_segment": allocation.new > 0, "segment_count": max(1, allocation.new),
            "segment": allocation.named, "sources": write.sources(), "read_at": write.read_at,
            "extra": extra, "plan": write.requested(),
            "admit": lambda view: write.admit(context, view)}


def commit(context: TableContext, write: Write, extra: dict[str, str] | None = None, *,
           retries: int = 0, written_by: WrittenBy | None = None) -> Commit:
    """:func:`run` for a data write: returns its :class:`~txn.Commit`."""
    completed, metadata = run(context, write, extra, retries=retries, written_by=written_by)
    return to_commit(completed.time, completed.completed_at or "", metadata)


def finish(context: TableContext, write: Write, extra: dict[str, str] | None, pending: Pending,
           written: Written | WrittenBy, *, retries: int = 0) -> Commit:
    """Commit an instant begun earlier (``Protocol.begin``) whose files were written elsewhere
    (rolled back on failure): the second half of a two-phase write. ``written``: what was
    written, or the step that gathers it (run inside the protocol, so its failure rolls back)."""
    phase = written if callable(written) else (lambda _: written)
    completed, metadata = protocol_of(context).finish(pending, phase,
                                                      _commit_step(context, write, extra, retries=retries))
    return to_commit(completed.time, completed.completed_at or "", metadata)


def _commit_step(context: TableContext, write: Write, extra: dict[str, str] | None, *,
            retries: int = 0) -> Callable[[Pending, Any], Builder]:
    """The commit step of ``write``, under the lock: its conflict rule, then its record."""

    def build(pending: Pending, written: Any) -> Builder:
        def under_lock(lease: Lease, view: TimelineView) -> tuple[MetadataChanges, Any]:
            write.check(context, view, pending, written)
            return write.record(context, view, pending, written, lease=lease, extra=extra,
                                retries=retries)

        return under_lock

    return build


__all__ = ["WrittenBy", "begin", "commit", "finish", "run"]
